// Give the shared library the soname SISCI programs link against.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsisci.so");
}
