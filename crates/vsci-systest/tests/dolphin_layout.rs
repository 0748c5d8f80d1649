//! Programs built for Dolphin's installation build and run against vsci with
//! their build files untouched.
//!
//! `make install-dis` puts libsisci in Dolphin's layout (`/opt/DIS/include`,
//! `/opt/DIS/include/dis`, `/opt/DIS/lib64`, a loader entry). Here it installs
//! into a temporary root (`DESTDIR`), and tests/dolphin/dolphin_style.c — a
//! program with its own `NO_FLAGS`-style helpers, Dolphin's `IN` annotations
//! in its DMA callback and `SCIMapLocalSegment` kept in a `void *` — is built
//! from that root with only Dolphin's flags and the strict warning set plus
//! `-Werror`: as C99, as C17 and as C++, then through `pkg-config sisci` and
//! through `find_package(SISCI)`, and every build runs against a node. The
//! normal `make install` gets the same pkg-config and CMake check. As root,
//! one more test installs into the real `/opt/DIS`, runs a program linked
//! with no rpath (the loader entry finds the library), and removes it again.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// The warning set of the strictest public SISCI programs, plus -Werror.
const STRICT: &[&str] =
    &["-Wall", "-Wextra", "-pedantic", "-Wcast-qual", "-Wconversion", "-Wshadow", "-Wredundant-decls", "-Werror"];
/// Valid for C only (g++ rejects it, and -Werror makes that fatal).
const C_ONLY: &str = "-Wstrict-prototypes";

const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn dolphin_src(file: &str) -> PathBuf {
    repo().join("tests/dolphin").join(file)
}

/// `make -C <repo> ARGS` for the staged build this test run uses, outside
/// any make that started the tests.
fn make(args: &[&str]) -> Output {
    run(
        &format!("make {}", args.join(" ")),
        Command::new("make")
            .arg("-C")
            .arg(repo())
            .arg(format!("BUILD={}", build_dir().display()))
            .args(args)
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .env_remove("MAKELEVEL")
            .stdin(Stdio::null()),
        BUILD_TIMEOUT,
    )
}

/// One way of compiling dolphin_style: the compiler and its language flags.
struct Variant {
    name: &'static str,
    compiler: &'static str,
    source: &'static str,
    flags: &'static [&'static str],
}

const VARIANTS: &[Variant] = &[
    Variant { name: "c99", compiler: "cc", source: "dolphin_style.c", flags: &["-std=c99", C_ONLY] },
    Variant { name: "c17", compiler: "cc", source: "dolphin_style.c", flags: &["-std=c17", C_ONLY] },
    Variant { name: "c++", compiler: "c++", source: "dolphin_style.cpp", flags: &["-std=c++17"] },
];

/// Compile `variant` with `extra` (include and library flags) into `out`;
/// the compiler must succeed and print nothing (no warning at all).
fn compile(variant: &Variant, extra: &[String], out: &Path) {
    let mut cc = Command::new(variant.compiler);
    cc.args(variant.flags).args(STRICT).arg("-o").arg(out).arg(dolphin_src(variant.source)).args(extra);
    let what = format!("{} {} ({})", variant.compiler, variant.source, variant.name);
    let o = run(&what, cc.stdin(Stdio::null()), BUILD_TIMEOUT);
    o.assert_success();
    assert!(o.stderr.trim().is_empty(), "{what} printed diagnostics:\n{}", o.describe());
}

/// Run a built dolphin_style against node `d`; it must report success.
fn run_against(d: &Daemon, exe: &Path, ld_library_path: Option<&Path>) {
    let mut cmd = d.client(exe);
    cmd.env_remove("LD_LIBRARY_PATH");
    if let Some(p) = ld_library_path {
        cmd.env("LD_LIBRARY_PATH", p);
    }
    let name = exe.file_name().unwrap().to_string_lossy().into_owned();
    let out = run(&name, &mut cmd, PROGRAM_TIMEOUT);
    out.assert_success().assert_contains("DOLPHIN STYLE OK");
}

/// The libsisci.so the loader picks for `exe`, as `ldd` shows it.
fn resolved_libsisci(exe: &Path, ld_library_path: Option<&Path>) -> String {
    let mut cmd = Command::new("ldd");
    cmd.arg(exe).env_remove("LD_LIBRARY_PATH").stdin(Stdio::null());
    if let Some(p) = ld_library_path {
        cmd.env("LD_LIBRARY_PATH", p);
    }
    let o = run("ldd", &mut cmd, Duration::from_secs(60));
    o.assert_success();
    o.stdout
        .lines()
        .find(|l| l.trim_start().starts_with("libsisci.so"))
        .unwrap_or_else(|| panic!("{} does not need libsisci.so:\n{}", exe.display(), o.stdout))
        .trim()
        .to_string()
}

/// `pkg-config --cflags --libs sisci` for a prefix installed under `root`
/// (`PKG_CONFIG_SYSROOT_DIR` puts the root before its -I and -L paths).
fn pkg_config_flags(root: &Path, pc_dir: &Path) -> Vec<String> {
    let o = run(
        "pkg-config --cflags --libs sisci",
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "sisci"])
            .env("PKG_CONFIG_PATH", pc_dir)
            .env("PKG_CONFIG_SYSROOT_DIR", root)
            .stdin(Stdio::null()),
        Duration::from_secs(60),
    );
    o.assert_success();
    o.stdout.split_whitespace().map(str::to_string).collect()
}

/// Configure and build tests/dolphin (find_package(SISCI)) in `build` with
/// `prefix` on CMAKE_PREFIX_PATH; returns the CMake configure output.
fn cmake_build(prefix: &Path, build: &Path, targets: &[&str]) -> String {
    let configure = run(
        "cmake (configure tests/dolphin)",
        Command::new("cmake")
            .arg("-S")
            .arg(repo().join("tests/dolphin"))
            .arg("-B")
            .arg(build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
            .env_remove("SISCI_DIR")
            .env_remove("CMAKE_PREFIX_PATH")
            .stdin(Stdio::null()),
        BUILD_TIMEOUT,
    );
    configure.assert_success();
    let mut b = Command::new("cmake");
    b.arg("--build").arg(build);
    for t in targets {
        b.args(["--target", t]);
    }
    let built = run("cmake --build", b.stdin(Stdio::null()), BUILD_TIMEOUT);
    built.assert_success();
    assert!(!built.stdout.contains("warning:") && !built.stderr.contains("warning:"), "{}", built.describe());
    configure.stdout
}

fn assert_file(p: &Path) {
    assert!(p.is_file(), "{} was not installed", p.display());
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// `make install-dis DESTDIR=<tmp>`: Dolphin's layout in the root, the
/// program built there every way (direct flags as C99, C17 and C++;
/// pkg-config; CMake, shared and static) and run against a node; then
/// `make uninstall-dis` leaves nothing behind.
#[test]
fn dis_layout_in_a_temporary_root() {
    let root = TempDir::new("dis-root");
    let work = TempDir::new("dis-work");
    let destdir = format!("DESTDIR={}", root.path.display());
    let o = make(&["install-dis", &destdir]);
    o.assert_success();
    assert!(
        !o.stdout.contains("install-dis: ldconfig"),
        "install-dis ran ldconfig with DESTDIR set:\n{}",
        o.describe()
    );

    let dis = root.path.join("opt/DIS");
    let (inc, inc_dis, lib64) = (dis.join("include"), dis.join("include/dis"), dis.join("lib64"));
    for h in ["sisci_api.h", "sisci_types.h", "sisci_error.h"] {
        assert_file(&inc.join(h));
    }
    assert_file(&inc_dis.join("dis_types.h"));
    for l in ["libsisci.so", "libsisci.a"] {
        assert_file(&lib64.join(l));
    }
    assert_file(&lib64.join("pkgconfig/sisci.pc"));
    for f in ["SISCIConfig.cmake", "SISCIConfigVersion.cmake"] {
        assert_file(&dis.join("share/cmake/SISCI").join(f));
    }
    assert!(!dis.join("bin").exists(), "install-dis installed programs; vscid and vsci stay where they are");
    let conf = root.path.join("etc/ld.so.conf.d/00-vsci-dis.conf");
    assert_eq!(read(&conf).trim(), "/opt/DIS/lib64", "the loader entry names the library directory");
    let pc = read(&lib64.join("pkgconfig/sisci.pc"));
    assert!(pc.contains("prefix=/opt/DIS\n") && pc.contains("libdir=${prefix}/lib64"), "sisci.pc:\n{pc}");

    let d = Daemon::start(41);
    let base = d.counts();

    // Dolphin's flags, pointed into the root, and nothing else.
    let dis_flags = vec![
        format!("-I{}", inc.display()),
        format!("-I{}", inc_dis.display()),
        format!("-L{}", lib64.display()),
        "-lsisci".to_string(),
    ];
    for v in VARIANTS {
        let exe = work.path.join(format!("direct-{}", v.name));
        compile(v, &dis_flags, &exe);
        let picked = resolved_libsisci(&exe, Some(&lib64));
        assert!(picked.contains(&lib64.join("libsisci.so").display().to_string()), "{} loads {picked}", v.name);
        run_against(&d, &exe, Some(&lib64));
    }

    // pkg-config sisci from the installed sisci.pc.
    let flags = pkg_config_flags(&root.path, &lib64.join("pkgconfig"));
    assert!(flags.contains(&format!("-I{}", inc_dis.display())), "pkg-config flags: {flags:?}");
    for v in VARIANTS {
        let exe = work.path.join(format!("pkg-config-{}", v.name));
        compile(v, &flags, &exe);
        run_against(&d, &exe, Some(&lib64));
    }

    // find_package(SISCI) from the installed SISCIConfig.cmake; CMake links
    // its build-tree programs with a runpath to the imported library.
    let cmake_dir = work.path.join("cmake");
    let out = cmake_build(&dis, &cmake_dir, &[]);
    assert!(
        out.contains(&format!("from {}", dis.join("share/cmake/SISCI").display())),
        "CMake found another SISCI:\n{out}"
    );
    for t in ["dolphin_style_c99", "dolphin_style_c17", "dolphin_style_cxx", "dolphin_style_static"] {
        run_against(&d, &cmake_dir.join(t), None);
    }
    d.wait_counts(base, "after the dolphin_style runs");

    // uninstall-dis removes all of it, directories included.
    make(&["uninstall-dis", &destdir]).assert_success();
    assert!(!dis.exists(), "uninstall-dis left {}", dis.display());
    assert!(!conf.exists(), "uninstall-dis left {}", conf.display());
    // A second uninstall finds nothing to do and succeeds.
    make(&["uninstall-dis", &destdir]).assert_success().assert_contains("nothing of vsci's");
}

/// install-dis never replaces files it did not install (Dolphin's own
/// libsisci) unless told to with FORCE=1.
#[test]
fn install_dis_refuses_to_overwrite_someone_elses_files() {
    let root = TempDir::new("dis-foreign");
    let destdir = format!("DESTDIR={}", root.path.display());
    let foreign = root.path.join("opt/DIS/lib64/libsisci.so");
    fs::create_dir_all(foreign.parent().unwrap()).unwrap();
    fs::write(&foreign, b"Dolphin's library").unwrap();

    let o = make(&["install-dis", &destdir]);
    assert!(!o.status.success(), "install-dis replaced a foreign libsisci.so:\n{}", o.describe());
    o.assert_contains("not from an earlier install-dis");
    assert_eq!(fs::read(&foreign).unwrap(), b"Dolphin's library", "the foreign file was changed");
    assert!(!root.path.join("opt/DIS/include").exists(), "a refused install-dis wrote files");

    make(&["install-dis", &destdir, "FORCE=1"]).assert_success();
    assert_ne!(fs::read(&foreign).unwrap(), b"Dolphin's library", "FORCE=1 did not install");
    // Now the files are install-dis's own: installing again needs no FORCE.
    make(&["install-dis", &destdir]).assert_success();
    make(&["uninstall-dis", &destdir]).assert_success();
    assert!(!root.path.join("opt/DIS").exists(), "uninstall-dis left files behind");
}

/// The normal `make install` (PREFIX layout) carries the same pkg-config and
/// CMake files, pointing at its own prefix.
#[test]
fn prefix_install_has_pkg_config_and_cmake_files() {
    let root = TempDir::new("prefix-root");
    let work = TempDir::new("prefix-work");
    // -o all: install what is built; never rebuild under running tests.
    make(&["-o", "all", "install", &format!("DESTDIR={}", root.path.display()), "PREFIX=/usr/local"]).assert_success();
    let prefix = root.path.join("usr/local");
    let lib = prefix.join("lib");
    assert_file(&prefix.join("include/dis/dis_types.h"));
    let pc = read(&lib.join("pkgconfig/sisci.pc"));
    assert!(pc.contains("prefix=/usr/local\n") && pc.contains("libdir=${prefix}/lib\n"), "sisci.pc:\n{pc}");

    let d = Daemon::start(42);
    let flags = pkg_config_flags(&root.path, &lib.join("pkgconfig"));
    let exe = work.path.join("pkg-config-c99");
    compile(&VARIANTS[0], &flags, &exe);
    run_against(&d, &exe, Some(&lib));

    let cmake_dir = work.path.join("cmake");
    let out = cmake_build(&prefix, &cmake_dir, &["dolphin_style_c17"]);
    assert!(out.contains(&format!("from {}", lib.join("cmake/SISCI").display())), "CMake found another SISCI:\n{out}");
    run_against(&d, &cmake_dir.join("dolphin_style_c17"), None);
}

/// The real install as root: `make install-dis` into /opt/DIS with the
/// loader entry and ldconfig, a program linked with `-L/opt/DIS/lib64
/// -lsisci` and no rpath finds the library through the loader cache, and
/// `make uninstall-dis` removes it all (also when the test fails midway).
#[test]
fn real_install_in_opt_dis() {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the real /opt/DIS install needs root");
        return;
    }
    let dis = Path::new("/opt/DIS");
    let ours = dis.join("share/vsci/installed-files");
    let conf = Path::new("/etc/ld.so.conf.d/00-vsci-dis.conf");
    if !ours.exists() && (dis.exists() || conf.exists()) {
        eprintln!("skipped: /opt/DIS or {} exists and is not vsci's (Dolphin's software?)", conf.display());
        return;
    }
    let _cleanup = RealInstall { dis_existed: dis.exists() };

    // Another vsci in the loader cache (`make install` into /usr/local, as
    // the quickstart does) must not win over the /opt/DIS entry, and the
    // install says it is there.
    let before = run("ldconfig -p", Command::new("ldconfig").arg("-p").stdin(Stdio::null()), Duration::from_secs(60));
    let other = before.stdout.lines().find(|l| l.trim_start().starts_with("libsisci.so ")).map(str::to_owned);
    let out = make(&["install-dis"]);
    out.assert_success().assert_contains("install-dis: ldconfig");
    if let Some(other) = other {
        let path = other.rsplit("=> ").next().unwrap_or_default().trim().to_owned();
        out.assert_contains(&format!("also lists, after /opt/DIS/lib64:\n  {path}"));
    }
    assert_eq!(read(conf).trim(), "/opt/DIS/lib64");

    let work = TempDir::new("dis-real");
    let exe = work.path.join("direct-c17");
    let flags: Vec<String> =
        ["-I/opt/DIS/include", "-I/opt/DIS/include/dis", "-L/opt/DIS/lib64", "-lsisci"].map(String::from).to_vec();
    compile(&VARIANTS[1], &flags, &exe);
    let picked = resolved_libsisci(&exe, None);
    assert!(picked.contains("=> /opt/DIS/lib64/libsisci.so"), "the loader picks {picked}");
    let d = Daemon::start(43);
    run_against(&d, &exe, None);

    make(&["uninstall-dis"]).assert_success();
    assert!(!ours.exists() && !dis.join("lib64/libsisci.so").exists(), "uninstall-dis left files in /opt/DIS");
    assert!(!conf.exists(), "uninstall-dis left {}", conf.display());
    let cache = run("ldconfig -p", Command::new("ldconfig").arg("-p").stdin(Stdio::null()), Duration::from_secs(60));
    assert!(!cache.stdout.contains("/opt/DIS/lib64/libsisci.so"), "the loader cache still lists /opt/DIS/lib64");
}

/// Removes the real install on drop, also after a failed assertion.
struct RealInstall {
    dis_existed: bool,
}

impl Drop for RealInstall {
    // Nothing here may panic: it also runs while a failed test unwinds.
    fn drop(&mut self) {
        let _ = Command::new("make")
            .arg("-C")
            .arg(repo())
            .arg(format!("BUILD={}", build_dir().display()))
            .arg("uninstall-dis")
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .env_remove("MAKELEVEL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
        let dis = Path::new("/opt/DIS");
        if !self.dis_existed && dis.exists() {
            // /opt/DIS was not there before this test: whatever is left is ours.
            let _ = fs::remove_dir_all(dis);
        }
        // The test ran only if no vsci-dis.conf was there, or it was ours.
        let conf = Path::new("/etc/ld.so.conf.d/00-vsci-dis.conf");
        if conf.exists() {
            let _ = fs::remove_file(conf);
            let _ = Command::new("ldconfig").status();
        }
    }
}
