//! The Python binding's cost (issue 37), a step of the `local` path:
//! `python3 -m sisci.bench` (python/sisci/bench.py, staged by `make` in
//! `<build>/python`) runs sisci_bench's 8-byte segment ping-pong and its
//! interrupt ping-pong between two Python processes, and times single calls;
//! the C figures are sisci_bench's, measured earlier in the same run, and the
//! difference per one-way trip is what the binding costs.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::{fmt_opt, run_forwarded, say, Ctx};

/// The interpreter: `$VSCI_PYTHON`, else Debian's `/usr/bin/python3` (where
/// scripts/install-deps.sh installs python3-cffi), else `python3`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("VSCI_PYTHON") {
        return PathBuf::from(p);
    }
    if Path::new("/usr/bin/python3").exists() {
        return PathBuf::from("/usr/bin/python3");
    }
    PathBuf::from("python3")
}

/// The rows compared: the Python result's key, sisci_bench's interrupt wait
/// strategy (None: the segment ping-pong), and the label.
pub const ROWS: &[(&str, Option<&str>, &str)] = &[
    ("segment_pingpong", None, "segment ping-pong, 8 B"),
    ("interrupt_pingpong", Some("adaptive"), "interrupt ping-pong, VSCI_WAIT=adaptive"),
    ("interrupt_pingpong_block", Some("block"), "interrupt ping-pong, VSCI_WAIT=block"),
    ("interrupt_pingpong_poll", Some("poll"), "interrupt ping-pong, VSCI_WAIT=poll"),
];

/// sisci_bench's C figure (one-way median, microseconds) for a row of
/// [`ROWS`]: the segment ping-pong's 8-byte row (4-byte payload, barrier,
/// 4-byte flag, as the Python side sends; a `--quick` run has no 8-byte row
/// and the nearest size stands in: the size is the second value), or the
/// interrupt row of that wait strategy.
fn c_figure(sb: &Value, wait: Option<&str>) -> (Option<f64>, Option<u64>) {
    let rows = |k: &str| sb[k]["rows"].as_array().cloned().unwrap_or_default();
    match wait {
        None => {
            let pp = rows("pingpong");
            let nearest = pp
                .iter()
                .filter(|r| r["vsci"]["median_us"].as_f64().is_some())
                .filter_map(|r| r["size"].as_u64().map(|s| (s, r)))
                .min_by_key(|(s, _)| (s.abs_diff(8), *s));
            (nearest.and_then(|(_, r)| r["vsci"]["median_us"].as_f64()), nearest.map(|(s, _)| s))
        }
        Some(w) => (
            rows("interrupt")
                .iter()
                .find(|r| r["wait"].as_str() == Some(w))
                .and_then(|r| r["vsci"]["median_us"].as_f64()),
            None,
        ),
    }
}

/// Run the Python side against the node at `socket`; `sb` is this run's
/// sisci_bench JSON.
pub fn run(ctx: &Ctx, socket: &Path, sb: &Value) -> Value {
    let pkg = ctx.bench_dir.parent().map(|b| b.join("python")).unwrap_or_else(|| PathBuf::from("build/python"));
    if !pkg.join("sisci").join("bench.py").exists() {
        let why = format!("{} has no sisci package (run `make`)", pkg.display());
        say(&format!("python binding: skipped: {why}"));
        return json!({"skipped": why});
    }
    let py = python();
    let probe = Command::new(&py)
        .args(["-c", "import cffi"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(probe, Ok(s) if s.success()) {
        let why = format!("{} cannot import cffi (scripts/install-deps.sh installs python3-cffi)", py.display());
        say(&format!("python binding: skipped: {why}"));
        return json!({"skipped": why});
    }
    let tmp = std::env::temp_dir().join(format!("vsci-bench-python-{}.json", std::process::id()));
    let mut cmd = Command::new(&py);
    cmd.args(["-m", "sisci.bench", "--json"]).arg(&tmp);
    if ctx.quick {
        cmd.arg("--quick");
    }
    // The Python side sets VSCI_WAIT per interrupt row, as sisci_bench does.
    cmd.env("PYTHONPATH", &pkg)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(vsci_proto::SOCKET_ENV, socket)
        .env_remove("VSCI_WAIT")
        .env_remove("SISCI_LIBRARY")
        .stdin(Stdio::null())
        .process_group(0);
    let limit = Duration::from_secs(if ctx.quick { 300 } else { 900 });
    let res = run_forwarded(cmd, "python -m sisci.bench", limit, true);
    let v = std::fs::read_to_string(&tmp).ok().and_then(|s| serde_json::from_str::<Value>(&s).ok());
    let _ = std::fs::remove_file(&tmp);
    let mut v = match (res, v) {
        (Ok(_), Some(v)) => v,
        (Ok((st, text)), None) => {
            return json!({"error": format!("python -m sisci.bench wrote no JSON ({st}): {}", crate::tail(&text, 10))})
        }
        (Err(e), _) => return json!({"error": format!("{e:#}")}),
    };
    let diff = |p: Option<f64>, c: Option<f64>| p.zip(c).map(|(p, c)| p - c);
    let mut c = serde_json::Map::new();
    let mut cost = serde_json::Map::new();
    say("python binding against C (one-way median, us; the difference is the binding's cost per trip):");
    for (key, wait, label) in ROWS {
        let (cm, size) = c_figure(sb, *wait);
        let pm = v[*key]["median_us"].as_f64();
        c.insert(format!("{key}_us"), json!(cm));
        cost.insert((*key).to_string(), json!(diff(pm, cm)));
        let note = match size {
            Some(s) if s != 8 => {
                c.insert("segment_pingpong_size".into(), json!(s));
                format!("  (C: sisci_bench's {s}-byte row; this run has no 8-byte row)")
            }
            _ => String::new(),
        };
        say(&format!(
            "  {label:<42} python {:>9}  C {:>9}  +{}{note}",
            fmt_opt(pm, 3),
            fmt_opt(cm, 3),
            fmt_opt(diff(pm, cm), 3)
        ));
    }
    c.insert(
        "from".into(),
        json!("sisci_bench of this run: ping-pong row 8 B (or the nearest size), interrupt rows by VSCI_WAIT"),
    );
    v["c"] = Value::Object(c);
    v["binding_cost_us"] = Value::Object(cost);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_figures_come_from_the_8_byte_and_wait_rows() {
        let sb = json!({
            "pingpong": {"rows": [{"size": 4, "vsci": {"median_us": 0.1}}, {"size": 8, "vsci": {"median_us": 0.2}}]},
            "interrupt": {"rows": [{"wait": "poll", "vsci": {"median_us": 0.3}}, {"wait": "adaptive", "vsci": {"median_us": 0.4}}]},
        });
        assert_eq!(c_figure(&sb, None), (Some(0.2), Some(8)));
        assert_eq!(c_figure(&sb, Some("adaptive")), (Some(0.4), None));
        assert_eq!(c_figure(&sb, Some("poll")), (Some(0.3), None));
        assert_eq!(c_figure(&sb, Some("block")), (None, None));
        assert_eq!(c_figure(&json!({}), None), (None, None));
        // --quick: sizes 4, 64, ...; the nearest to 8 stands in.
        let quick = json!({"pingpong": {"rows": [{"size": 64, "vsci": {"median_us": 0.3}}, {"size": 4, "vsci": {"median_us": 0.1}}]}});
        assert_eq!(c_figure(&quick, None), (Some(0.1), Some(4)));
    }

    #[test]
    fn the_report_puts_python_beside_c() {
        let py = json!({
            "segment_pingpong": {"median_us": 1.5, "p99_us": 3.0},
            "interrupt_pingpong": {"median_us": 2.5, "p99_us": 5.0},
            "c": {"segment_pingpong_us": 0.5, "interrupt_pingpong_us": 0.5},
            "calls": {"cffi_call_ns": 190.0, "binding_getter_ns": 350.0, "trigger_ns": 420.0},
            "python": "CPython 3.11.2", "cffi": "1.15.1",
        });
        let md = crate::report::markdown(&json!({"paths": {"local": {"python": py}}}), &[]);
        assert!(md.contains("### The Python binding"), "{md}");
        assert!(md.contains("| segment ping-pong, 8 B |") && md.contains("binding cost per trip"), "{md}");
        assert!(md.contains("| 1.50 / 3.00 | 0.500 | 1.00 | 3.00 |"), "{md}");
        let skipped = crate::report::markdown(&json!({"paths": {"local": {"python": {"skipped": "no cffi"}}}}), &[]);
        assert!(skipped.contains("Not measured: no cffi."), "{skipped}");
    }
}
