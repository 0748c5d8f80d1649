//! For tests only: what the C compiler makes of the headers the Rust code
//! mirrors (SISCI's `include/sisci_*.h`, the guest driver's
//! `guest/driver/vsci_guest.h`, `<linux/userfaultfd.h>`). A crate's test
//! lists each Rust constant, size or field offset with the C expression it
//! copies; [`check`] compiles a program that prints those expressions and
//! fails, naming every one, if any differs. So a value that drifts from its
//! header fails the crate's tests instead of a program at run time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The workspace root (where `include/` and `guest/` are).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The value of each C expression in `exprs` (an integer constant,
/// `sizeof(T)`, `offsetof(T, f)`, ...), as `$CC` (default `cc`) computes
/// it in a program that includes `headers` (`<name>`, searched in
/// `include_dirs` first). Panics with the compiler's message if a header
/// or an expression does not compile (a name that went away).
pub fn c_values(include_dirs: &[PathBuf], headers: &[&str], exprs: &[&str]) -> Vec<u64> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vsci-cprobe-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut src = String::from("#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n");
    for h in headers {
        writeln!(src, "#include <{h}>").unwrap();
    }
    src.push_str("int main(void)\n{\n");
    for e in exprs {
        writeln!(src, "    printf(\"%llu\\n\", (unsigned long long)({e}));").unwrap();
    }
    src.push_str("    return 0;\n}\n");
    let (c, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&c, &src).expect("write probe.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.arg("-D_GNU_SOURCE").arg("-o").arg(&exe).arg(&c);
    for d in include_dirs {
        cmd.arg("-I").arg(d);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} (a C compiler is needed to check constants against headers): {e}"));
    assert!(out.status.success(), "{cc} failed on\n{src}\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().expect("run the probe");
    assert!(run.status.success(), "the probe failed");
    let _ = std::fs::remove_dir_all(&dir);
    let values: Vec<u64> =
        String::from_utf8_lossy(&run.stdout).lines().map(|l| l.trim().parse().expect("a number")).collect();
    assert_eq!(values.len(), exprs.len(), "the probe printed {} values for {} expressions", values.len(), exprs.len());
    values
}

/// Check that each `(C expression, Rust value)` pair agrees; panics
/// listing every pair that does not.
pub fn check(include_dirs: &[PathBuf], headers: &[&str], pairs: &[(&str, u64)]) {
    let exprs: Vec<&str> = pairs.iter().map(|(e, _)| *e).collect();
    let c = c_values(include_dirs, headers, &exprs);
    let wrong: Vec<String> = pairs
        .iter()
        .zip(&c)
        .filter(|((_, rust), c)| rust != *c)
        .map(|((e, rust), c)| format!("{e}: C {c:#x}, Rust {rust:#x}"))
        .collect();
    assert!(wrong.is_empty(), "Rust copies differ from {headers:?}:\n  {}", wrong.join("\n  "));
}

/// `(C expression, Rust value)` pairs for [`check`]: the size of the
/// `#[repr(C)]` Rust type `$rust` and the offset of each field against the
/// C type `$c` (`"struct uffdio_api"`, `"sci_query_map_t"`) and its fields.
#[macro_export]
macro_rules! layout {
    ($c:literal: $rust:ty { $($cf:literal => $rf:ident),* }) => {
        [(concat!("sizeof(", $c, ")"), ::std::mem::size_of::<$rust>() as u64)]
            .into_iter()
            .chain([$((concat!("offsetof(", $c, ", ", $cf, ")"), ::std::mem::offset_of!($rust, $rf) as u64)),*])
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_mismatches() {
        assert_eq!(
            c_values(&[], &["limits.h"], &["CHAR_BIT", "sizeof(uint32_t)", "offsetof(struct { char a; int b; }, b)"]),
            vec![8, 4, 4]
        );
        check(&[], &["limits.h"], &[("CHAR_BIT", 8)]);
        let e = std::panic::catch_unwind(|| check(&[], &["limits.h"], &[("CHAR_BIT", 9)])).unwrap_err();
        assert!(e.downcast_ref::<String>().is_some_and(|m| m.contains("CHAR_BIT: C 0x8, Rust 0x9")));
    }
}
