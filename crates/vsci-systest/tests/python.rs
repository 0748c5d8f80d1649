//! The Python binding (python/, issue 37): its pytest suite, run by `make
//! test` through this test.  pytest starts its own vscid daemons (and, as
//! root, two nodes in network namespaces) against the build in
//! `$VSCI_BUILD`; see python/tests/conftest.py.
//!
//! The interpreter is `$VSCI_PYTHON`, else Debian's `/usr/bin/python3` (the
//! one `scripts/install-deps.sh` installs python3-cffi, python3-numpy and
//! python3-pytest for), else `python3` on PATH.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("VSCI_PYTHON") {
        return PathBuf::from(p);
    }
    let debian = Path::new("/usr/bin/python3");
    if debian.exists() {
        return debian.to_path_buf();
    }
    PathBuf::from("python3")
}

#[test]
fn pytest_python_binding() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root");
    let build =
        build_dir().canonicalize().unwrap_or_else(|_| panic!("{} missing: run `make` first", build_dir().display()));
    let py = python();
    // The binding's imports first, so a missing package says which.
    let probe =
        run("python imports", Command::new(&py).args(["-c", "import cffi, numpy, pytest"]), Duration::from_secs(60));
    assert!(
        probe.status.success(),
        "{} lacks cffi, numpy or pytest (scripts/install-deps.sh installs python3-cffi python3-numpy python3-pytest):\n{}",
        py.display(),
        probe.describe()
    );
    let out = run(
        "pytest python/tests",
        Command::new(&py)
            .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "python/tests"])
            .current_dir(&root)
            .env("VSCI_BUILD", &build)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("VSCI_SOCKET")
            .env_remove("SISCI_LIBRARY")
            .env_remove("VSCI_WAIT"),
        Duration::from_secs(900),
    );
    println!("{}", out.stdout);
    assert!(out.status.success(), "{}", out.describe());
}
