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

use crate::schema::{self, Outcome, PythonBench, PythonC, PythonRow, SisciBench};

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

/// sisci_bench's C figure (one-way median, microseconds) for a row of
/// [`PythonRow`]: the segment ping-pong's 8-byte row (4-byte payload, barrier,
/// 4-byte flag, as the Python side sends; a `--quick` run has no 8-byte row
/// and the nearest size stands in: the size is the second value), or the
/// interrupt row of that wait strategy.
fn c_figure(sb: &SisciBench, wait: Option<&str>) -> (Option<f64>, Option<u64>) {
    let med = |v: &Option<schema::Lat>| v.as_ref().and_then(|v| v.median_us);
    match wait {
        None => {
            let nearest = sb
                .pingpong
                .rows
                .iter()
                .filter_map(|r| med(&r.vsci).map(|m| (r.size, m)))
                .min_by_key(|(s, _)| (s.abs_diff(8), *s));
            (nearest.map(|(_, m)| m), nearest.map(|(s, _)| s))
        }
        Some(w) => (sb.interrupt.rows.iter().find(|r| r.wait == w).and_then(|r| med(&r.vsci)), None),
    }
}

/// Run the Python side against the node at `socket`; `sb` is this run's
/// sisci_bench JSON.
pub fn run(ctx: &Ctx, socket: &Path, sb: &SisciBench) -> Outcome<PythonBench> {
    let pkg = ctx.bench_dir.parent().map(|b| b.join("python")).unwrap_or_else(|| PathBuf::from("build/python"));
    if !pkg.join("sisci").join("bench.py").exists() {
        let why = format!("{} has no sisci package (run `make`)", pkg.display());
        say(&format!("python binding: skipped: {why}"));
        return Outcome::Skipped(why);
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
        return Outcome::Skipped(why);
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
    let mut v = match res {
        Ok((st, text)) if !tmp.exists() => {
            return Outcome::Failed(format!("python -m sisci.bench wrote no JSON ({st}): {}", crate::tail(&text, 10)))
        }
        Ok(_) => {
            // The runner adds `c` and `binding_cost_us`; the file has neither.
            let text = std::fs::read_to_string(&tmp).unwrap_or_default();
            let mut raw: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            if let Some(o) = raw.as_object_mut() {
                o.insert("c".into(), serde_json::to_value(PythonC::default()).unwrap_or_default());
                o.insert("binding_cost_us".into(), serde_json::Value::Object(Default::default()));
            }
            match schema::from_str::<PythonBench>(&raw.to_string()) {
                Ok(v) => {
                    let _ = std::fs::remove_file(&tmp);
                    v
                }
                Err(e) => {
                    return Outcome::Failed(format!(
                        "python -m sisci.bench's JSON ({}) does not fit the results schema: {e:#}",
                        tmp.display()
                    ))
                }
            }
        }
        Err(e) => return Outcome::Failed(format!("{e:#}")),
    };
    let diff = |p: Option<f64>, c: Option<f64>| p.zip(c).map(|(p, c)| p - c);
    let mut c = PythonC::default();
    let mut cost = std::collections::BTreeMap::new();
    say("python binding against C (one-way median, us; the difference is the binding's cost per trip):");
    for row in PythonRow::ALL {
        let label = row.label();
        let (cm, size) = c_figure(sb, row.wait());
        let pm = v.pingpong(row).and_then(|p| p.median_us);
        *c.us_mut(row) = cm;
        cost.insert(row.key().to_string(), diff(pm, cm));
        let note = match size {
            Some(s) if s != 8 => {
                c.segment_pingpong_size = Some(s);
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
    c.from = "sisci_bench of this run: ping-pong row 8 B (or the nearest size), interrupt rows by VSCI_WAIT".into();
    v.c = c;
    v.binding_cost_us = cost;
    Outcome::Ran(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Lat, SbInterruptRow, SbPingpongRow};

    fn lat(m: f64) -> Option<Lat> {
        Some(Lat { median_us: Some(m), ..Lat::default() })
    }

    fn pp(size: u64, m: f64) -> SbPingpongRow {
        SbPingpongRow { size, vsci: lat(m), ..SbPingpongRow::default() }
    }

    #[test]
    fn c_figures_come_from_the_8_byte_and_wait_rows() {
        let mut sb = SisciBench::default();
        sb.pingpong.rows = vec![pp(4, 0.1), pp(8, 0.2)];
        let irq = |wait: &str, m: f64| SbInterruptRow { wait: wait.into(), vsci: lat(m), ..SbInterruptRow::default() };
        sb.interrupt.rows = vec![irq("poll", 0.3), irq("adaptive", 0.4)];
        assert_eq!(c_figure(&sb, None), (Some(0.2), Some(8)));
        assert_eq!(c_figure(&sb, Some("adaptive")), (Some(0.4), None));
        assert_eq!(c_figure(&sb, Some("poll")), (Some(0.3), None));
        assert_eq!(c_figure(&sb, Some("block")), (None, None));
        assert_eq!(c_figure(&SisciBench::default(), None), (None, None));
        // --quick: sizes 4, 64, ...; the nearest to 8 stands in.
        let mut quick = SisciBench::default();
        quick.pingpong.rows = vec![pp(64, 0.3), pp(4, 0.1)];
        assert_eq!(c_figure(&quick, None), (Some(0.1), Some(4)));
    }

    #[test]
    fn the_report_puts_python_beside_c() {
        use crate::schema::{Local, Paths, PythonCalls, PythonPingpong, Results};
        let ping = |m: f64| PythonPingpong { median_us: Some(m), p99_us: Some(2.0 * m), ..PythonPingpong::default() };
        let py = PythonBench {
            segment_pingpong: Some(ping(1.5)),
            interrupt_pingpong: Some(ping(2.5)),
            c: PythonC { segment_pingpong_us: Some(0.5), interrupt_pingpong_us: Some(0.5), ..PythonC::default() },
            calls: PythonCalls {
                cffi_call_ns: 190.0,
                binding_getter_ns: 350.0,
                trigger_ns: 420.0,
                ..PythonCalls::default()
            },
            python: "CPython 3.11.2".into(),
            cffi: "1.15.1".into(),
            ..PythonBench::default()
        };
        let with = |p: Outcome<PythonBench>| Results {
            paths: Paths { local: Some(Local { python: Some(p), ..Local::default() }), ..Paths::default() },
            ..Results::default()
        };
        let md = crate::report::markdown(&with(Outcome::Ran(py)), &[]);
        assert!(md.contains("### The Python binding"), "{md}");
        assert!(md.contains("| segment ping-pong, 8 B |") && md.contains("binding cost per trip"), "{md}");
        assert!(md.contains("| 1.50 / 3.00 | 0.500 | 1.00 | 3.00 |"), "{md}");
        let skipped = crate::report::markdown(&with(Outcome::Skipped("no cffi".into())), &[]);
        assert!(skipped.contains("Not measured: no cffi."), "{skipped}");
    }
}
