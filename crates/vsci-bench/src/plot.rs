//! PNG plots of a run, drawn from its JSON with plotters' bitmap backend.
//!
//! Text goes through plotters' ab_glyph renderer with a TrueType font read
//! at run time (DejaVu Sans from Debian's fonts-dejavu-core), so the binary
//! links no fontconfig or freetype and ships no font of its own.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use plotters::prelude::*;

use crate::schema::{Lat, Local, Outcome, Remote, Results, Sockperf, Transfers, Ucx};

use crate::size_name;

const FONT: &str = "sans-serif";

/// Where Debian (fonts-dejavu-core) and others keep a plain sans font.
const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

fn register_font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let path = FONT_FILES.iter().find(|p| Path::new(p).exists()).ok_or_else(|| {
            format!(
                "no TrueType font found ({}); install fonts-dejavu-core (scripts/install-deps.sh does)",
                FONT_FILES[0]
            )
        })?;
        let bytes = std::fs::read(path).map_err(|e| format!("reading {path}: {e}"))?;
        // plotters keeps fonts for the life of the process; the run draws a
        // few plots and exits, so one leaked copy is what it needs.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FONT, FontStyle::Normal, bytes)
            .map_err(|_| format!("{path} is not a usable font"))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

struct Series {
    name: String,
    pts: Vec<(f64, f64)>,
    /// Published figures from other hardware: dashed.
    dashed: bool,
}

fn series(name: &str, pts: Vec<(f64, f64)>, dashed: bool) -> Option<Series> {
    let pts: Vec<(f64, f64)> =
        pts.into_iter().filter(|(x, y)| x.is_finite() && y.is_finite() && *x > 0.0 && *y > 0.0).collect();
    (!pts.is_empty()).then(|| Series { name: name.into(), pts, dashed })
}

const T5_SIZES: [f64; 11] =
    [1024., 2048., 4096., 8192., 32768., 65536., 262144., 1048576., 2097152., 4194304., 8388608.];

/// (size, figure) points of rows that have the figure.
fn pts<T>(rs: &[T], f: impl Fn(&T) -> (u64, Option<f64>)) -> Vec<(f64, f64)> {
    rs.iter()
        .filter_map(|r| match f(r) {
            (x, Some(y)) => Some((x as f64, y)),
            _ => None,
        })
        .collect()
}

fn med(v: &Option<Lat>) -> Option<f64> {
    v.as_ref().and_then(|v| v.median_us)
}

/// Draw every plot the run has data for; returns the files written.
pub fn write_all(dir: &Path, out: &Results) -> Result<Vec<PathBuf>> {
    register_font()?;
    let none_local = Local::default();
    let none_remote = Remote::default();
    let l = out.paths.local.as_ref().unwrap_or(&none_local);
    let r = out.paths.remote.as_ref().unwrap_or(&none_remote);
    let none_ucx = Ucx::default();
    let lucx = &l.peers.ucx_perftest;
    let rucx = r.peers.ucx_perftest.as_ref().unwrap_or(&none_ucx);
    let mut files = Vec::new();

    // Bandwidth.
    let lb = &l.sisci_bench.write_bandwidth.rows;
    let rb = &r.remote_bench.write_bandwidth.rows;
    let mut s = Vec::new();
    s.extend(series("local vsci (memcpy + SCIFlush)", pts(lb, |r| (r.size, r.vsci_mbps)), false));
    s.extend(series("local memcpy (limit)", pts(lb, |r| (r.size, r.peer_mbps)), false));
    s.extend(series("UCX shm put_bw", pts(&lucx.bw, |r| (r.size, Some(r.mbps))), false));
    s.extend(series("remote vsci (memcpy + SCIFlush)", pts(rb, |r| (r.size, r.flush_mbps)), false));
    s.extend(series("remote vsci (SCIMemCpy)", pts(rb, |r| (r.size, r.memcpy_mbps)), false));
    s.extend(series("UCX tcp put_bw", pts(&rucx.bw, |r| (r.size, Some(r.mbps))), false));
    s.extend(series("UCX tcp am_bw", pts(&rucx.am_bw, |r| (r.size, Some(r.mbps))), false));
    if let Some(ip) = r.peers.iperf3.as_ref().and_then(|i| i.mbps) {
        s.extend(series("iperf3 (1 TCP stream, any size)", vec![(1024.0, ip), (8388608.0, ip)], false));
    }
    s.extend(series(
        "thesis 5.2 native (2017, local)",
        T5_SIZES.iter().copied().zip(crate::report::t52_native()).collect(),
        true,
    ));
    s.extend(series(
        "thesis 5.5 PXH830 native (remote)",
        T5_SIZES.iter().copied().zip(crate::report::t55_native()).collect(),
        true,
    ));
    if !s.is_empty() {
        let f = dir.join("bandwidth.png");
        log_plot(&f, "Write bandwidth", "size", "MB/s", &s, true)?;
        files.push(f);
    }

    // Ping-pong latency.
    let lp = &l.sisci_bench.pingpong.rows;
    let rp = &r.remote_bench.pingpong.rows;
    let none_sp = Sockperf::default();
    let sp = r.peers.sockperf.as_ref().unwrap_or(&none_sp);
    let mut s = Vec::new();
    s.extend(series("local vsci", pts(lp, |r| (r.size, med(&r.vsci))), false));
    s.extend(series("local raw memfd polling (limit)", pts(lp, |r| (r.size, med(&r.peer))), false));
    s.extend(series("UCX shm put_lat", pts(&lucx.lat, |r| (r.size, Some(r.median_us))), false));
    s.extend(series("remote vsci", pts(rp, |r| (r.size, med(&r.vsci))), false));
    s.extend(series("sockperf TCP", pts(&sp.rows, |r| (r.size, r.median_us)), false));
    s.extend(series("UCX tcp put_lat", pts(&rucx.lat, |r| (r.size, Some(r.median_us))), false));
    s.extend(series(
        "thesis 5.6 IXH610 native (remote)",
        (0..12).map(|i| ((4u64 << i) as f64, crate::report::t56_native()[i])).collect(),
        true,
    ));
    if !s.is_empty() {
        let f = dir.join("latency.png");
        log_plot(&f, "Ping-pong latency (median, RTT/2)", "message size", "µs", &s, true)?;
        files.push(f);
    }

    // Interrupt histograms: share of round trips per 10 µs bucket.
    let mut s = Vec::new();
    let hist = |v: &Lat| -> Vec<(f64, f64)> {
        let h: Vec<f64> = v.hist_10us.iter().flatten().map(|x| *x as f64).collect();
        let total: f64 = h.iter().sum();
        h.iter()
            .enumerate()
            .map(|(i, c)| (i as f64 * 10.0 + 5.0, if total > 0.0 { 100.0 * c / total } else { 0.0 }))
            .collect()
    };
    for row in &l.sisci_bench.interrupt.rows {
        if let Some(v) = &row.vsci {
            s.extend(series(&format!("local vsci, {} wait", row.wait), hist(v), false));
        }
    }
    if let Some(p) = &l.sisci_bench.interrupt.peer {
        s.extend(series("local eventfd ping-pong", hist(p), false));
    }
    if let Some(v) = &r.remote_bench.interrupt.vsci {
        s.extend(series("remote vsci interrupt", hist(v), false));
    }
    if !s.is_empty() {
        let f = dir.join("interrupts.png");
        log_plot(
            &f,
            "Interrupt latency histogram (10 µs buckets, last = ≥300 µs)",
            "RTT/2, µs (bucket middle)",
            "% of round trips",
            &s,
            false,
        )?;
        files.push(f);
    }

    // Seed 001 transfers.
    let transfer_rows =
        |t: Option<&Outcome<Transfers>>| t.and_then(|t| t.ran()).map(|t| t.rows.clone()).unwrap_or_default();
    let mut s = Vec::new();
    s.extend(series("local vsci", pts(&transfer_rows(Some(&l.transfers)), |r| (r.size, Some(r.median_ms))), false));
    s.extend(series("remote vsci", pts(&transfer_rows(r.transfers.as_ref()), |r| (r.size, Some(r.median_ms))), false));
    if !s.is_empty() {
        s.extend(series(
            "seed 001 (kvmtool guests)",
            crate::peers::SEED001_NS.iter().map(|(b, ns)| (*b as f64, ns / 1e6)).collect(),
            true,
        ));
        let f = dir.join("transfers.png");
        log_plot(&f, "Seed 001 transfers with acks: time to the last ack", "transfer size", "ms", &s, true)?;
        files.push(f);
    }
    Ok(files)
}

/// A log-log plot (`size_axis`: label x as byte sizes; otherwise x is
/// linear).
fn log_plot(path: &Path, title: &str, xdesc: &str, ydesc: &str, s: &[Series], size_axis: bool) -> Result<()> {
    let all = s.iter().flat_map(|s| s.pts.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        bail!("nothing to plot for {}", path.display());
    }
    let (y0, y1) = (y0 / 1.5, y1 * 3.0);
    let root = BitMapBackend::new(path, (1100, 700)).into_drawing_area();
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, (FONT, 24)).margin(12).x_label_area_size(45).y_label_area_size(80);
        if size_axis {
            // Sizes are powers of two: plot log2(size) on a linear axis so
            // that every tick is a power of two with a readable name.
            let (l0, l1) = (x0.log2().floor() - 0.3, x1.log2().ceil() + 0.3);
            let mut chart = b.build_cartesian_2d(l0..l1, (y0..y1).log_scale())?;
            chart
                .configure_mesh()
                .x_desc(xdesc)
                .y_desc(ydesc)
                .label_style((FONT, 14))
                .x_labels(((l1 - l0) as usize + 1).min(32))
                .x_label_formatter(&|x| {
                    if (x - x.round()).abs() < 0.01 {
                        size_name(2f64.powf(x.round()) as u64)
                    } else {
                        String::new()
                    }
                })
                .y_label_formatter(&|y| short(*y))
                .draw()?;
            for (i, se) in s.iter().enumerate() {
                let c = Palette99::pick(i).to_rgba();
                let style = c.stroke_width(2);
                let p: Vec<(f64, f64)> = se.pts.iter().map(|&(x, y)| (x.log2(), y)).collect();
                if se.dashed {
                    chart
                        .draw_series(DashedLineSeries::new(p, 8, 5, style))?
                        .label(se.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
                } else {
                    chart
                        .draw_series(LineSeries::new(p.clone(), style))?
                        .label(se.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
                    chart.draw_series(p.iter().map(|&q| Circle::new(q, 3, c.filled())))?;
                }
            }
            chart
                .configure_series_labels()
                .label_font((FONT, 14))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()?;
        } else {
            let mut chart = b.build_cartesian_2d(0f64..x1 + 10.0, (y0.max(1e-3)..y1.max(1e-2)).log_scale())?;
            chart
                .configure_mesh()
                .x_desc(xdesc)
                .y_desc(ydesc)
                .label_style((FONT, 14))
                .y_label_formatter(&|y| short(*y))
                .draw()?;
            for (i, se) in s.iter().enumerate() {
                let c = Palette99::pick(i).to_rgba();
                // Empty buckets are left out (log scale), so lines join only
                // neighbouring buckets and a gap shows as a gap.
                let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
                for &p in &se.pts {
                    match runs.last_mut() {
                        Some(r) if r.last().is_some_and(|q| (p.0 - q.0 - 10.0).abs() < 0.5) => r.push(p),
                        _ => runs.push(vec![p]),
                    }
                }
                for (k, r) in runs.into_iter().enumerate() {
                    let ser = chart.draw_series(LineSeries::new(r, c.stroke_width(2)))?;
                    if k == 0 {
                        ser.label(se.name.clone())
                            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
                    }
                }
                chart.draw_series(se.pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
            }
            chart
                .configure_series_labels()
                .label_font((FONT, 14))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("{e}")).with_context(|| format!("drawing {}", path.display()))
}

fn short(y: f64) -> String {
    if y >= 1000.0 {
        format!("{:.0}", y)
    } else if y >= 1.0 {
        format!("{:.1}", y)
    } else {
        format!("{:.3}", y)
    }
}
