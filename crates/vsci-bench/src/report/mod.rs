//! The Markdown report (docs/benchmarks.md when run with `--report docs`).
//! It reads only the typed results of the run ([`crate::schema::Results`]),
//! so it can be regenerated from a results.json, and a path that fills the
//! same fields gets the same tables. The seeds' published figures stand in
//! their own columns: they were measured on other hardware (PCIe NTB
//! adapters, kvmtool guests) and are there to read side by side, not to
//! divide by. One file per part of the report: local.rs, remote.rs (and
//! remote_rows.rs for the rows of the spinning ping-pong, stores, the idle
//! map, the mailbox, the message ring and the loaded run), reflective.rs,
//! lending.rs, devices.rs, guest.rs, dma.rs.

mod devices;
mod dma;
mod guest;
mod lending;
mod local;
mod reflective;
mod remote;
mod remote_rows;

use crate::fmt_opt;
use crate::schema::{Lat, Results};

// ---------------------------------------------------------------------------
// The seeds' published figures

/// Sizes of thesis tables 5.1–5.5 (bytes).
const T5_SIZES: [u64; 11] =
    [1 << 10, 2 << 10, 4 << 10, 8 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20];
/// Table 5.1: memcpy_bench, native memory bandwidth (MB/s).
const T51: [f64; 11] = [95279., 69285., 84804., 95368., 29743., 29901., 24930., 22318., 21826., 16825., 13227.];
/// Table 5.2: native (host process loopback, scibench2).
const T52_NATIVE: [f64; 11] = [52541., 58351., 78625., 94248., 29288., 29707., 24772., 22229., 22239., 16486., 13171.];
/// Table 5.2: guest to local host.
const T52_VIRT: [f64; 11] = [53010., 58841., 77971., 93222., 29171., 29286., 24694., 22355., 22170., 16045., 13085.];
/// Table 5.3: guest to co-located guest.
const T53_VIRT: [f64; 11] = [52525., 58270., 77710., 92789., 28953., 29474., 24501., 22281., 22091., 16150., 12920.];
/// Table 5.4: IXH610 (PCIe Gen2 x8) remote, native and guest to remote guest.
const T54_NATIVE: [f64; 11] = [2831., 2875., 2880., 2888., 2894., 2886., 2890., 2892., 2893., 2892., 2878.];
const T54_VIRT: [f64; 11] = [2835., 2868., 2872., 2884., 2891., 2883., 2889., 2891., 2890., 2889., 2877.];
/// Table 5.5: PXH830 (PCIe Gen3 x16) remote.
const T55_NATIVE: [f64; 11] = [4058., 5322., 5798., 6075., 6301., 5985., 6103., 6201., 6202., 6174., 5682.];
const T55_VIRT: [f64; 11] = [4014., 5283., 5781., 6065., 6288., 5973., 6069., 6184., 6180., 6130., 5655.];
/// Table 5.6: IXH610 remote ping-pong latency (µs, RTT/2), 4 B … 8 KiB.
const T56_NATIVE: [f64; 12] = [0.710, 0.712, 0.715, 0.719, 0.757, 0.780, 0.827, 0.914, 1.075, 1.429, 2.138, 3.572];
const T56_VIRT: [f64; 12] = [0.709, 0.711, 0.714, 0.719, 0.758, 0.781, 0.828, 0.916, 1.076, 1.433, 2.140, 3.574];
/// Table 5.7: interrupt latency (µs): (native host to host, guest to guest).
const T57_LOCAL: (f64, f64) = (2.343, 12.001);
const T57_REMOTE: (f64, f64) = (2.885, 12.492);

pub fn t52_native() -> [f64; 11] {
    T52_NATIVE
}
pub fn t55_native() -> [f64; 11] {
    T55_NATIVE
}
pub fn t56_native() -> [f64; 12] {
    T56_NATIVE
}

fn t5(table: &[f64; 11], size: u64) -> Option<f64> {
    T5_SIZES.iter().position(|&s| s == size).map(|i| table[i])
}

fn t56(table: &[f64; 12], size: u64) -> Option<f64> {
    (size >= 4 && size.is_power_of_two() && size <= 8192).then(|| table[(size.trailing_zeros() - 2) as usize])
}

// ---------------------------------------------------------------------------
// Formatting

fn us(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() && x < 1.0 => format!("{x:.3}"),
        Some(x) if x.is_finite() && x < 100.0 => format!("{x:.2}"),
        Some(x) if x.is_finite() => format!("{x:.0}"),
        _ => "-".into(),
    }
}

/// Three significant digits, for times that span 1e-4 … 1e3 ms.
fn sig(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() && x > 0.0 => {
            let digits = (2 - x.log10().floor() as i32).max(0) as usize;
            format!("{x:.digits$}")
        }
        _ => "-".into(),
    }
}

/// sendrecv's times are whole microseconds: at most 3 decimals of a ms.
fn ms_fmt(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() && x >= 100.0 => format!("{x:.0}"),
        Some(x) if x.is_finite() && x >= 10.0 => format!("{x:.1}"),
        Some(x) if x.is_finite() => format!("{x:.3}"),
        _ => "-".into(),
    }
}

fn mbps(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() && x < 100.0 => format!("{x:.1}"),
        Some(x) if x.is_finite() => format!("{x:.0}"),
        _ => "-".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a.is_finite() && b.is_finite() && b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn fr(r: Option<f64>) -> String {
    match r {
        Some(x) if x < 0.1 => format!("{x:.3}"),
        Some(x) => format!("{x:.2}"),
        None => "-".into(),
    }
}

/// Median of a latency, µs.
fn med(v: Option<&Lat>) -> Option<f64> {
    v.and_then(|v| v.median_us)
}

/// Median / p99 of a latency (the median alone when there is no p99).
fn lat2(v: Option<&Lat>) -> String {
    quantiles(v.and_then(|v| v.median_us), v.and_then(|v| v.p99_us))
}

/// "median / p99", the median alone without a p99, "-" without a median.
fn quantiles(m: Option<f64>, p: Option<f64>) -> String {
    match (m, p) {
        (Some(m), Some(p)) => format!("{} / {}", us(Some(m)), us(Some(p))),
        (Some(m), None) => us(Some(m)),
        _ => "-".into(),
    }
}

/// The ratios collected while writing, for the summary.
struct Doc {
    s: String,
    peer_ratios: Vec<(String, f64, bool)>,
}

impl Doc {
    fn line(&mut self, l: &str) {
        self.s.push_str(l);
        self.s.push('\n');
    }
    fn table(&mut self, head: &[&str], body: &[Vec<String>]) {
        self.line(&format!("| {} |", head.join(" | ")));
        self.line(&format!("|{}", "---|".repeat(head.len())));
        for r in body {
            self.line(&format!("| {} |", r.join(" | ")));
        }
        self.line("");
    }
    /// Keep a vsci/peer ratio for the summary; `latency`: lower is better.
    fn peer(&mut self, what: String, r: Option<f64>, latency: bool) -> Option<f64> {
        if let Some(x) = r {
            self.peer_ratios.push((what, x, latency));
        }
        r
    }
}

// ---------------------------------------------------------------------------

const INTRO: &str = "\
Every figure below comes from one run of `vsci bench` on the machine described in the next
section; the command that made this file is in it. Each vsci figure stands next to **peers**
measured in the same run on the same path (the same operation without SISCI) and, where one
exists, the **limit** of that path. Ratios are `vsci / peer` and `vsci / limit`: for bandwidth
higher is better, for latency lower is better. The seeds' published figures (the seed-000
thesis, tables 5.1–5.7, measured on Dolphin PCIe adapters in 2017; seed 001's kvmtool
transfer table) stand in columns of their own: they come from other hardware and are there
to read side by side. What each benchmark does is explained in
[bench/README.md](../bench/README.md). These are benchmarks, not tests: no test asserts a
timing. The raw output is in [bench/results.txt](bench/results.txt), every figure (with
histograms) in [bench/results.json](bench/results.json).
";

pub fn markdown(out: &Results, plots: &[String]) -> String {
    let mut d = Doc { s: String::new(), peer_ratios: Vec::new() };
    let paths = &out.paths;
    if let Some(l) = &paths.local {
        local::local(&mut d, l);
    }
    if let Some(r) = &paths.remote {
        remote::remote(&mut d, r);
    }
    if let Some(r) = &paths.reflective {
        reflective::reflective(&mut d, r);
    }
    if let Some(r) = &paths.lending {
        lending::lending(&mut d, r);
    }
    if let Some(r) = &paths.devices {
        devices::devices(&mut d, r);
    }
    if let Some(g) = &out.guest_vs_host {
        guest::guest_vs_host(&mut d, g);
    }
    let guest_sb = paths.guest.as_ref().map(|g| &g.sisci_bench);
    if let Some(g) = &paths.guest {
        guest::guest_local(&mut d, g);
    }
    for (name, g) in paths.guest_pairs() {
        guest::guest_pair(&mut d, name, g, guest_sb);
    }
    if let Some(v) = &out.dma {
        dma::dma(&mut d, v, paths);
    }
    let body = std::mem::take(&mut d.s);

    d.line("# Benchmarks");
    d.line("");
    d.line("<!-- Generated by `vsci bench --report DIR`; edit the generator (crates/vsci-bench/src/report/), not this file. -->");
    d.line("");
    d.line(INTRO);
    machine(&mut d, out);
    summary(&mut d);
    d.s.push_str(&body);
    if !plots.is_empty() {
        d.line("## Plots");
        d.line("");
        for p in plots {
            d.line(&format!("![{p}](bench/{p})"));
            d.line("");
        }
    }
    d.line(NOTES);
    d.s
}

fn machine(d: &mut Doc, out: &Results) {
    let m = &out.machine;
    d.line("## The machine and the run");
    d.line("");
    let mut rows = vec![
        vec!["CPU".into(), m.cpu.clone()],
        vec!["cores".into(), m.cores.to_string()],
        vec!["memory".into(), m.memory.clone()],
        vec!["kernel".into(), format!("Linux {}", m.kernel)],
        vec!["virtualization".into(), m.virtualization.clone()],
        vec!["date (UTC)".into(), out.date.clone()],
        vec!["mode".into(), out.mode.clone()],
        vec!["command".into(), format!("`{}`", out.command)],
        vec!["elapsed".into(), format!("{} s", fmt_opt(Some(out.elapsed_s), 0))],
    ];
    let ran = out.paths.names();
    rows.push(vec!["paths measured".into(), if ran.is_empty() { "none".into() } else { ran.join(", ") }]);
    for s in &out.skipped {
        rows.push(vec![format!("path {} skipped", s.path), s.reason.clone()]);
    }
    for (k, v) in &out.errors {
        rows.push(vec![format!("path {k} FAILED"), v.lines().next().unwrap_or("").into()]);
    }
    let found: Vec<String> = out.peers.found.keys().cloned().collect();
    rows.push(vec!["peer programs".into(), found.join(", ")]);
    for n in &out.peers.notes {
        let what = match &n.missing {
            Some(why) => format!("missing ({why}); Debian package {}", n.package),
            None => format!("installed by this run (apt-get install {})", n.package),
        };
        rows.push(vec![n.tool.clone(), what]);
    }
    d.table(&["", ""], &rows);
    d.line("Nothing is pinned; on 2 cores both ends of every ping-pong and every peer share the");
    d.line("machine with each other and with the nodes' own threads. Anything else running at the");
    d.line("same time shows at once in polling latencies and p99s. On a VM, how fast its two vCPUs");
    d.line("pass a cache line also changes from minute to minute (the raw 4-byte ping-pong has measured");
    d.line("0.06–0.25 µs RTT/2 on the build VM): a limit measured in another section than the vsci figure");
    d.line("it divides can put a ratio below 1.");
    d.line("");
}

fn summary(d: &mut Doc) {
    let mut v = d.peer_ratios.clone();
    v.sort_by(|a, b| b.1.ln().abs().total_cmp(&a.1.ln().abs()));
    d.line("## Summary: the vsci / peer ratios furthest from 1");
    d.line("");
    if v.is_empty() {
        d.line("No ratio: no peer ran.");
        d.line("");
        return;
    }
    d.line("Overall, then the three furthest on each path. Some peers differ in kind (a blocking");
    d.line("`eventfd` or TCP wake-up against a polled SISCI interrupt): the tables below say which.");
    d.line("");
    let mut pick: Vec<&(String, f64, bool)> = v.iter().take(3).collect();
    let mut paths: Vec<&str> = v.iter().filter_map(|x| x.0.split_whitespace().next()).collect();
    paths.dedup();
    let mut seen = std::collections::BTreeSet::new();
    paths.retain(|p| seen.insert(*p));
    for p in paths {
        for x in v.iter().filter(|x| x.0.split_whitespace().next() == Some(p)).take(3) {
            if !pick.iter().any(|y| y.0 == x.0) {
                pick.push(x);
            }
        }
    }
    let body: Vec<Vec<String>> = pick
        .iter()
        .map(|(w, r, lat)| {
            let better = if (*lat && *r < 1.0) || (!*lat && *r > 1.0) { "vsci better" } else { "vsci worse" };
            vec![w.clone(), fr(Some(*r)), if *lat { "latency".into() } else { "bandwidth".into() }, better.into()]
        })
        .collect();
    d.table(&["what", "vsci / peer", "kind", ""], &body);
}

/// A latency's histogram (10 µs buckets).
fn hist(v: Option<&Lat>) -> Option<Vec<u64>> {
    v?.hist_10us.clone()
}

fn hist_table(d: &mut Doc, title: &str, cols: &[(String, Vec<u64>)]) {
    if cols.is_empty() {
        return;
    }
    d.line(&format!("#### {title}"));
    d.line("");
    let n = cols.iter().map(|c| c.1.len()).max().unwrap_or(0);
    let mut head = vec!["bucket".to_string()];
    head.extend(cols.iter().map(|c| c.0.clone()));
    let mut body = Vec::new();
    for b in 0..n {
        if cols.iter().all(|c| c.1.get(b).copied().unwrap_or(0) == 0) {
            continue;
        }
        let label =
            if b + 1 == n { format!("≥ {} µs", b * 10) } else { format!("{}–{} µs", b * 10, b * 10 + 10) };
        let mut row = vec![label];
        for c in cols {
            let total: u64 = c.1.iter().sum();
            let k = c.1.get(b).copied().unwrap_or(0);
            row.push(if k == 0 { "".into() } else { format!("{k} ({:.2} %)", 100.0 * k as f64 / total.max(1) as f64) });
        }
        body.push(row);
    }
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    d.table(&head, &body);
}

const NOTES: &str = "\
## Reading the numbers

**Local path.** Segment memory is the memory: bandwidth should match `memcpy` from a few KiB up
and ping-pong should match the raw `memfd` ping-pong (vsci/limit ≈ 1). Small writes lose because
every iteration also calls `SCIFlush` (a library call and a store fence) on top of a copy of a few
bytes; the “memcpy + empty call” column is that call with nothing in it, the floor. The thesis saw
the same effect (table 5.2 against 5.1 at 1 KB). An *adaptive* interrupt
(the default: spin, then block) costs a little more than the raw polled flag and is far faster
than a blocking `eventfd` wake-up; `block` pays that wake-up plus a second system call. UCX's
`ucp_put_lat` runs UCX's own polling loop between two processes; compare it with the raw `memfd`
column (same machine, same cores) before reading a vsci/UCX ratio as vsci's own overhead.

**Remote path.** Where the remote gap comes from, measured in the pieces: one delivered RMA write
costs more than a sockperf message one way; the flusher wakes from short sleeps rather than
spinning (on 2 cores a spinning flusher starves the program's own busy-wait loop); each
direction of a ping-pong pays detection + snapshot + diff + delivered write. `SCIMemCpy` knows
which bytes it writes, so it sends them as one RMA write with no tracking and comes close to
iperf3. Stores through a mapping go the tracked way: every 4 KiB page of a bulk write takes a
write-protect fault, a snapshot copy and a diff before its RMA write, all on the same 2 cores as
the writer, the progress threads and the peer. See [design.md](design.md#remote-nodes).

**The thesis's columns** were measured on Intel hosts with Dolphin PCIe NTB adapters: remote
stores there are PCIe writes, which no software path over Ethernet or veth can match; the local
and co-located columns are memory bandwidth of a 2017 machine. **Seed 001's** figures are
kvmtool guests on one host moving data through 128 MB of shared memory with an interrupt and an
ack per chunk; its receiver copies, ours verifies every byte.

**Regenerating this file:**

```sh
make && sudo build/bin/vsci bench --paths local,remote,guest,guest-host,guest-guest,guest-remote --report docs
# or: sudo make bench-report
```

writes `docs/benchmarks.md`, `docs/bench/results.json`, `docs/bench/results.txt` and
`docs/bench/*.png` (`remote` needs root for the network namespaces; without it the path is
skipped and the report says so; the guest paths need `qemu-system-x86_64`). A full run takes several minutes on 2 cores; `--quick` is the
seconds-long smoke version the test suite runs.
";

#[cfg(test)]
mod tests;
