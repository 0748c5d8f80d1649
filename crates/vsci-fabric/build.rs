//! Compiles the C shim (libfabric's data path is static inline, so it needs a
//! C compiler to become callable) and links libfabric.

use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<String> {
    let out = Command::new("pkg-config").args(args).arg("libfabric").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    let mut build = cc::Build::new();
    build.file("csrc/shim.c").warnings(true).flag_if_supported("-Wno-unused-parameter");
    if let Some(cflags) = pkg_config(&["--cflags-only-I"]) {
        for inc in cflags.split_whitespace().filter_map(|f| f.strip_prefix("-I")) {
            build.include(inc);
        }
    }
    build.compile("vsci_fabric_shim");

    // Without a .pc file, fall back to the plain library name, which is
    // where Debian's libfabric-dev puts it.
    match pkg_config(&["--libs-only-L"]) {
        Some(libs) => {
            for dir in libs.split_whitespace().filter_map(|f| f.strip_prefix("-L")) {
                println!("cargo:rustc-link-search=native={dir}");
            }
        }
        None => println!("cargo:warning=pkg-config libfabric not found; assuming -lfabric"),
    }
    // libfabric itself is opened at run time (csrc/shim.c, vf_load).
    println!("cargo:rustc-link-lib=dl");
}
