//! The remote path's rows of remote_bench sections e-j beside their peers
//! of the same run: the spinning ping-pong by map size, store + SCIFlush,
//! the idle map, the mailbox (issue 17), the message ring and the trapped
//! stores (issue 35), and the same rows idle against loaded (`--loaded`).

use super::{fr, lat2, med, quantiles, ratio, sig, us, Doc};
use crate::schema::{
    AmTest, FabricWrite, Loaded, Outcome, Remote, RemoteBench, RingRow, StoreFigures, TrappedStore, Ucx, UcxAm,
    UcxAmRow,
};
use crate::{fmt_opt, size_name};

/// The rows of remote_bench sections e-h (issue 17): the spinning
/// ping-pong by map size, store + SCIFlush, an idle 1 GiB map and the
/// mailbox, each beside its peer of the same run.
pub(super) fn spinning_stores_and_mailbox(d: &mut Doc, rb: &RemoteBench, ucx: &Ucx, fw: &FabricWrite) {
    let u4 = ucx.lat_median(4);
    let spin = rb.spin_pingpong.as_ref().map(|s| &s.rows[..]).unwrap_or_default();
    if !spin.is_empty() {
        d.line("### Spinning ping-pong with no yields, a 4-byte counter, by map size (issue 17)");
        d.line("");
        d.line("Each side creates a segment of the map size and maps the other's whole segment; the counter is");
        d.line("stored into the last 4 bytes of the peer's segment with a plain store and no SISCI call, and each");
        d.line("side spins on its own segment in a plain loop (no `pause`, no `sched_yield`) until the echo shows.");
        d.line("A value that is neither the previous counter nor the expected one counts as wrong. The last row is");
        d.line("the 4 B ping-pong of the table above (section a), whose busy-waits yield the core every few spins.");
        d.line("Peer: UCX `ucp_put_lat` 4 B over TCP (busy polling), same run. RTT/2, median / p99 µs; the goal in");
        d.line("issue 17 is one way ≤ 1.5× UCX.");
        d.line("");
        let mut body = Vec::new();
        for r in spin {
            let m = r.map_size;
            let v = med(r.vsci.as_ref());
            let ru = d.peer(
                format!("remote spinning ping-pong 4 B, {} maps, vs UCX tcp put_lat 4 B", size_name(m)),
                ratio(v, u4),
                true,
            );
            let bad = r.vsci.as_ref().map(|v| v.bad).unwrap_or(0);
            body.push(vec![
                format!("spinning, no yields, {} maps", size_name(m)),
                lat2(r.vsci.as_ref()),
                format!("{bad}"),
                us(u4),
                fr(ru),
            ]);
        }
        if let Some(r) = rb.pingpong.rows.iter().find(|r| r.size == 4) {
            let v = med(r.vsci.as_ref());
            let y = rb.yield_every;
            body.push(vec![
                format!("yielding every {y} spins, 4 B message in a 64 KiB inbox (section a)"),
                lat2(r.vsci.as_ref()),
                format!("{}", r.vsci.as_ref().map(|v| v.bad).unwrap_or(0)),
                us(u4),
                fr(ratio(v, u4)),
            ]);
        }
        d.table(&["variant", "vsci", "wrong values", "UCX tcp put_lat 4 B", "vsci/UCX"], &body);
    }

    let fl = rb.store_flush.as_ref().map(|s| &s.rows[..]).unwrap_or_default();
    if !fl.is_empty() {
        d.line("### Store + `SCIFlush`: 1 B and 4 KiB into the server's segment (issue 17)");
        d.line("");
        d.line("The client stores 1 B (a new value each time), or `memcpy`s 4 KiB of new data, into the server's");
        d.line("segment through its remote map and calls `SCIFlush(NULL, 0)`; time per store + flush, back to back.");
        d.line("After the timed loop the server checks that its memory holds the last store. Peer: one libfabric");
        d.line("RMA write of the same size that returns once the bytes are in the target's memory (delivery");
        d.line("complete), between the same two namespaces in the same run (`fabric_write_lat`: the target serves");
        d.line("a registered region with a blocking real-time progress thread, as vscid's engine does; the");
        d.line("initiator reads the bytes back afterwards). Median / p99 µs per call.");
        d.line("");
        if let Some(e) = &fw.error {
            d.line(&format!(
                "**fabric_write_lat failed or was not there:** {} — its column shows \"-\".",
                e.lines().next().unwrap_or("")
            ));
            d.line("");
        }
        let mut body = Vec::new();
        for r in fl {
            let size = r.size;
            let p = fw.rows.iter().find(|x| x.size == size);
            let v = med(r.vsci.as_ref());
            let rp = d.peer(
                format!("remote store {} + SCIFlush vs libfabric delivered write", size_name(size)),
                ratio(v, p.map(|p| p.median_us)),
                true,
            );
            body.push(vec![
                if size == 1 {
                    "store 1 B + `SCIFlush`".into()
                } else {
                    format!("`memcpy` {} + `SCIFlush`", size_name(size))
                },
                lat2(r.vsci.as_ref()),
                r.data_check.clone(),
                p.map(|p| quantiles(Some(p.median_us), Some(p.p99_us))).unwrap_or_else(|| "-".into()),
                p.map(|x| x.data_check.as_str()).unwrap_or("-").to_string(),
                fr(rp),
            ]);
        }
        d.table(
            &["what", "vsci", "vsci data check", "libfabric delivered write", "its data check", "vsci/peer"],
            &body,
        );
    }

    if let Some(idle) = &rb.idle_map {
        let secs = idle.seconds.unwrap_or(0.0);
        d.line(&format!("### An idle 1 GiB map: {secs:.0} s after one store + `SCIFlush` (issue 17)"));
        d.line("");
        d.line("The client maps the server's 1 GiB segment, stores one byte, calls `SCIFlush` and sleeps. Measured");
        d.line("during the sleep: the CPU the client process used (`getrusage(RUSAGE_SELF)`, user + system, as % of");
        d.line("one CPU) and the bytes received + sent on the non-loopback links of its network namespace");
        d.line("(`/proc/net/dev`). Beside it, the same sleep with no such map (the two 64 KiB control inboxes stay");
        d.line("mapped in both): what the nodes' heartbeats move. Goal in issue 17: ≤ 1 % of a CPU, link traffic at");
        d.line("heartbeat level.");
        d.line("");
        let f64_of = |x: Option<u64>| x.map(|v| v as f64);
        let mut body = Vec::new();
        for (k, what) in [(&idle.map, "1 GiB map, one byte stored"), (&idle.no_map, "no map (heartbeats)")] {
            let w = k.wall_s;
            let b = f64_of(k.link_bytes);
            body.push(vec![
                what.to_string(),
                fmt_opt(w, 2),
                fmt_opt(k.cpu_s.map(|x| x * 1e3), 2),
                fmt_opt(k.cpu_pct, 3),
                fmt_opt(f64_of(k.rx_bytes), 0),
                fmt_opt(f64_of(k.tx_bytes), 0),
                match (b, w) {
                    (Some(b), Some(w)) if w > 0.0 => format!("{:.0}", b / w),
                    _ => "-".into(),
                },
            ]);
        }
        d.table(
            &["", "sleep s", "client CPU ms", "CPU % of one core", "bytes received", "bytes sent", "link B/s"],
            &body,
        );
        d.line(&format!(
            "Link bytes with the map / without: {}. The stored byte {} at the server after the sleep.",
            fr(ratio(f64_of(idle.map.link_bytes), f64_of(idle.no_map.link_bytes))),
            if idle.data_check == "ok" { "was" } else { "was **not**" }
        ));
        d.line("");
    }

    if let Some(mb) = &rb.mailbox {
        d.line("### Mailbox messages per second: the store-loss pattern (issue 17)");
        d.line("");
        d.line("Each round the client stores a payload word into the server's segment (the same value two rounds");
        d.line("running, so every other round stores again the value the server has just cleared), `SCIFlush`,");
        d.line("a flag (always 1), `SCIFlush`, then spins in a plain loop on its own segment for the ack. The server");
        d.line("spins on the flag, checks the payload, clears flag and payload in its own memory and acks by a store");
        d.line("through its map of the client's segment. A payload that is not the one stored is a lost store.");
        d.line("Peer: UCX put/flag round trips per second, 1e6 / (2 × `ucp_put_lat` 4 B RTT/2), same run.");
        d.line("");
        let rps = mb.rounds_per_s;
        let peer = u4.filter(|&x| x > 0.0).map(|x| 1e6 / (2.0 * x));
        let rp = d.peer("remote mailbox rounds/s vs UCX put/flag round trips/s".into(), ratio(rps, peer), false);
        d.table(
            &[
                "rounds timed (all)",
                "vsci rounds/s",
                "µs per round",
                "per round median / p99 µs",
                "wrong payloads",
                "UCX put/flag round trips/s",
                "vsci/UCX",
            ],
            &[vec![
                format!("{} ({})", mb.rounds, mb.rounds_total),
                fmt_opt(rps, 0),
                us(mb.us_per_round),
                lat2(mb.round.as_ref()),
                format!("{}", mb.wrong_payloads),
                fmt_opt(peer, 0),
                fr(rp),
            ]],
        );
    }
}

/// "a / b" of two cells.
fn pair_cell(a: String, b: String) -> String {
    format!("{a} / {b}")
}

/// The rows of remote_bench sections i and j (issue 35): the message ring
/// against UCX tcp's active messages (latency, rate, link bytes per
/// message) and the per-store figures against one RMA write; with
/// `--loaded`, the same rows idle and loaded.
pub(super) fn ring_and_trapped_stores(d: &mut Doc, r: &Remote) {
    let rb = &r.remote_bench;
    let none_am = UcxAm::default();
    let am = r.peers.ucx_am.as_ref().unwrap_or(&none_am);
    let ring = rb.message_ring.as_ref().map(|m| &m.rows[..]).unwrap_or_default();
    if !ring.is_empty() {
        d.line("### A message-passing layer over remote maps: a ring of messages (issue 35)");
        d.line("");
        d.line("What a transport written for SISCI (UCX's SISCI transport, MPI's) does: each side has a ring of");
        d.line(&format!(
            "{} slots in its segment. Per message the sender `memcpy`s the payload (new data every message, a",
            rb.message_ring.as_ref().map(|m| m.slots).unwrap_or(16)
        ));
        d.line("pattern made from the sequence number) into the receiver's slot through its remote map, stores a");
        d.line("header {length, sequence} above it and then a flag word above that (the highest word of the message,");
        d.line("stored last); the receiver spins on the flag in its own segment, checks the header and every payload");
        d.line("byte, and stores its consumed counter (the ack) into the sender's segment through its own remote map;");
        d.line("the sender spins on that counter when the ring is full. Both sides spin in plain loops with no");
        d.line("SISCI call, or with `SCIFlush` after each flag (acks are never flushed). **Ping-pong**: one message");
        d.line("each way per round trip, one way = RTT/2. **Streaming**: as many messages as the ring holds in");
        d.line("flight, from the first send to the ack of the last, so every message counted arrived and was checked.");
        d.line("Peer, same run, same namespaces: UCX's tcp transport, active messages (`ucx_perftest` UCT `am_lat`,");
        d.line("a busy-polling ping-pong, and `am_bw`, a message stream with a window of 127; the API column says");
        d.line("when UCP's `ucp_am_*` stood in). Goals in issue 35: ≤ 1.5× `am_lat` at 8 B, ≥ 1× `am_bw`.");
        d.line("");
        for e in &am.errors {
            d.line(&format!("**ucx_perftest:** {}", e.lines().next().unwrap_or("")));
            d.line("");
        }
        let sizes: Vec<u64> = {
            let mut v: Vec<u64> = ring.iter().map(|x| x.size).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let find = |size: u64, flush: bool| ring.iter().find(|x| x.size == size && x.flush == flush);
        let mut lat_body = Vec::new();
        let mut rate_body = Vec::new();
        let mut link_body = Vec::new();
        for &size in &sizes {
            let (n, f) = (find(size, false), find(size, true));
            let al = am.row(AmTest::AmLat, size);
            let ab = am.row(AmTest::AmBw, size);
            let al_med = al.and_then(|x| x.median_us);
            let api = al.or(ab).map(|x| x.api.as_str()).unwrap_or("-").to_string();
            let med_of = |x: Option<&RingRow>| x.and_then(|x| med(x.pingpong.as_ref()));
            let rn = d.peer(
                format!("remote ring {} ping-pong, no call, vs UCX tcp am_lat", size_name(size)),
                ratio(med_of(n), al_med),
                true,
            );
            let rf = d.peer(
                format!("remote ring {} ping-pong, SCIFlush, vs UCX tcp am_lat", size_name(size)),
                ratio(med_of(f), al_med),
                true,
            );
            // Both variants, ping-pong and streaming together.
            let g = |k: fn(&RingRow) -> u64| [n, f].iter().map(|x| x.map(k).unwrap_or(0)).sum::<u64>();
            let bad =
                format!("{} / {}", g(|x| x.pp_late) + g(|x| x.stream_late), g(|x| x.pp_wrong) + g(|x| x.stream_wrong));
            lat_body.push(vec![
                size_name(size),
                n.map(|x| lat2(x.pingpong.as_ref())).unwrap_or_else(|| "-".into()),
                f.map(|x| lat2(x.pingpong.as_ref())).unwrap_or_else(|| "-".into()),
                us(al_med),
                pair_cell(fr(rn), fr(rf)),
                bad,
                api.clone(),
            ]);
            let rate = |x: Option<&RingRow>| x.and_then(|x| x.msgs_per_s);
            let mb = |x: Option<&RingRow>| x.and_then(|x| x.mbps);
            let ab_rate = ab.map(|x| x.msgs_per_s);
            let sn = d.peer(
                format!("remote ring {} streaming, no call, vs UCX tcp am_bw (messages/s)", size_name(size)),
                ratio(rate(n), ab_rate),
                false,
            );
            let sf = d.peer(
                format!("remote ring {} streaming, SCIFlush, vs UCX tcp am_bw (messages/s)", size_name(size)),
                ratio(rate(f), ab_rate),
                false,
            );
            let cell = |m: Option<f64>, b: Option<f64>| match m {
                Some(m) => format!("{} ({} MB/s)", fmt_opt(Some(m), 0), sig(b)),
                None => "-".into(),
            };
            rate_body.push(vec![
                size_name(size),
                cell(rate(n), mb(n)),
                cell(rate(f), mb(f)),
                cell(ab_rate, ab.map(|x| x.mbps)),
                pair_cell(fr(sn), fr(sf)),
            ]);
            let pp = |x: Option<&RingRow>| x.and_then(|x| x.pp_link_bytes_per_msg);
            let st = |x: Option<&RingRow>| x.and_then(|x| x.stream_link_bytes_per_msg);
            let am_link = |x: Option<&UcxAmRow>| x.and_then(|x| x.link_bytes_per_msg);
            let base = size as f64 + 64.0;
            let goal = 2.0 * base;
            let all = [pp(n), pp(f), st(n), st(f)];
            let worst = all.iter().flatten().copied().reduce(f64::max);
            let b0 = |v: Option<f64>| fmt_opt(v, 0);
            link_body.push(vec![
                size_name(size),
                format!("{base:.0}"),
                format!("{goal:.0}"),
                pair_cell(b0(all[0]), b0(all[1])),
                pair_cell(b0(all[2]), b0(all[3])),
                b0(am_link(al)),
                b0(am_link(ab)),
                fr(ratio(worst, Some(goal))),
                fr(ratio(all[0], am_link(al))),
            ]);
        }
        d.line("One way (ping-pong RTT/2), median / p99 µs:");
        d.line("");
        d.table(
            &[
                "size",
                "vsci, no call",
                "vsci, `SCIFlush` after the flag",
                "UCX tcp am_lat",
                "vsci/UCX (no call / `SCIFlush`)",
                "messages with the flag before the rest / wrong (all rows of the size)",
                "UCX API",
            ],
            &lat_body,
        );
        d.line("Streaming, messages per second (MB/s of payload that arrived and was checked):");
        d.line("");
        d.table(
            &[
                "size",
                "vsci, no call",
                "vsci, `SCIFlush` after the flag",
                "UCX tcp am_bw",
                "vsci/UCX (no call / `SCIFlush`)",
            ],
            &rate_body,
        );
        d.line(
            "Bytes that crossed the link per message, both directions (the veth's interface counters over the timed",
        );
        d.line("messages: vsci's from `/proc/net/dev` in node 1's namespace, heartbeats of the nodes included; UCX's");
        d.line("from `ip -s link` around each `ucx_perftest` run, its set-up included, run without warm-up so that");
        d.line("every message is counted). A ping-pong message is one of the two per round trip; a streamed message");
        d.line("is one the sender sent (acks are overhead). Goal in issue 35: ≤ 2 × (payload + 64 B) in every row.");
        d.line("");
        d.table(
            &[
                "size",
                "payload + 64 B",
                "goal 2 × (payload + 64 B)",
                "vsci ping-pong (no call / `SCIFlush`)",
                "vsci streaming (no call / `SCIFlush`)",
                "UCX tcp am_lat",
                "UCX tcp am_bw",
                "vsci worst / goal",
                "vsci ping-pong / UCX am_lat",
            ],
            &link_body,
        );
    }

    if let Some(ts) = rb.trapped_store.as_ref().filter(|t| t.store.is_some()) {
        d.line("### Per trapped store: CPU and time to the owner, against one RMA write (issue 35)");
        d.line("");
        d.line(&format!(
            "{} isolated 8-byte writes of a `CLOCK_MONOTONIC` time stamp, one every {} µs, each into a page of the",
            ts.count, ts.pace_us
        ));
        d.line("server's segment not written since its last shipment (128 pages used in turn): a plain store through");
        d.line("the remote map (it traps), and `SCIMemCpy` of the same 8 bytes (one RMA write that returns once the");
        d.line(
            "bytes are in the owner's memory). CPU of the writing thread (`CLOCK_THREAD_CPUTIME_ID` around the write,",
        );
        d.line(
            "so the trap's handler counts) and of the whole process (`getrusage`, every thread of the library, over",
        );
        d.line(
            "the run / writes); time spent in the write; delay from just before the write until the server, spinning",
        );
        d.line("on its own segment, sees the value. The floor: the same timing around a store into private memory.");
        d.line("Goals in issue 35: CPU ≤ 3 µs per trapped store, time to the owner ≤ 1.2× one RMA write. µs.");
        d.line("");
        let mut body = Vec::new();
        for (t, local, what) in [
            (&ts.store, false, "store 8 B into the remote map"),
            (&ts.scimemcpy, false, "`SCIMemCpy` 8 B (one RMA write)"),
            (&ts.local_store, true, "store 8 B into private memory (floor)"),
        ] {
            let Some(t) = t else { continue };
            let c = t.cpu.as_ref();
            body.push(vec![
                what.to_string(),
                pair_cell(us(med(c)), us(c.and_then(|c| c.mean_us))),
                us(t.process_cpu_us),
                lat2(t.wall.as_ref()),
                if local { "".into() } else { lat2(t.visibility.as_ref()) },
                if local { "".into() } else { format!("{}", t.lost.unwrap_or(0)) },
            ]);
        }
        d.table(
            &[
                "write",
                "thread CPU median / mean",
                "process CPU per write",
                "time in the write, median / p99",
                "until the owner sees it, median / p99",
                "never seen",
            ],
            &body,
        );
        let (cpu, vis) = trapped_medians(ts);
        let rc = ratio(cpu.0, cpu.1);
        let rv = d.peer(
            "remote trapped store 8 B, time to the owner, vs one RMA write (SCIMemCpy 8 B)".into(),
            ratio(vis.0, vis.1),
            true,
        );
        d.line(&format!("Trapped store / one RMA write: thread CPU {}, time to the owner {}.", fr(rc), fr(rv)));
        d.line("");
    }

    if let Some(Outcome::Ran(l)) = &r.loaded {
        loaded_table(d, r, l);
    }
}

/// The medians (trapped store, SCIMemCpy) of the thread CPU and of the
/// time until the owner saw the value.
type Pair = (Option<f64>, Option<f64>);
fn trapped_medians(ts: &TrappedStore) -> (Pair, Pair) {
    let (s, m) = (ts.store.as_ref(), ts.scimemcpy.as_ref());
    let cpu = |x: Option<&StoreFigures>| med(x.and_then(|x| x.cpu.as_ref()));
    let vis = |x: Option<&StoreFigures>| med(x.and_then(|x| x.visibility.as_ref()));
    ((cpu(s), cpu(m)), (vis(s), vis(m)))
}

/// Idle against loaded: each issue-35 row's vsci/peer ratio in the normal
/// run and with busy loops beside, and how much it grew.
fn loaded_table(d: &mut Doc, r: &Remote, l: &Loaded) {
    d.line("### The same rows with the CPU oversubscribed (issue 35)");
    d.line("");
    d.line(&format!(
        "Right after the rows above, in the same namespaces: {} busy loops (`sh -c 'while :; do :; done'` at normal",
        l.busy_loops
    ));
    let secs: Vec<String> = l.sections.chars().map(String::from).collect();
    let secs = match secs.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => secs.concat(),
    };
    let la = |k: &[f64]| -> String {
        let v: Vec<String> = k.iter().map(|x| format!("{x:.1}")).collect();
        if v.is_empty() {
            "?".into()
        } else {
            v.join(" / ")
        }
    };
    d.line(&format!(
        "priority, two per core, like `loaded`) run beside everything while remote_bench sections {secs} and their UCX"
    ));
    d.line(&format!(
        "peers run again. Load average (1 / 5 / 15 min) before {}, at the start {}, at the end {}. Growth = loaded",
        la(&l.loadavg_before),
        la(&l.loadavg_started),
        la(&l.loadavg_after)
    ));
    d.line("ratio / idle ratio for latencies, idle / loaded for rates (above 1: vsci lost more to the load than its");
    d.line("peer). Goal in issue 35: growth ≤ 1.5. Medians, µs or messages/s.");
    d.line("");
    // (what, vsci idle, peer idle, vsci loaded, peer loaded, latency?)
    type Item = (String, Option<f64>, Option<f64>, Option<f64>, Option<f64>, bool);
    let mut items: Vec<Item> = Vec::new();
    let (rb, lb) = (&r.remote_bench, &l.remote_bench);
    let u4 = |u: Option<&Ucx>| u.and_then(|u| u.lat_median(4));
    let (pi, pl) = (u4(r.peers.ucx_perftest.as_ref()), u4(l.peers.ucx_perftest.as_ref()));
    let spin = |b: &RemoteBench| b.spin_pingpong.as_ref().map(|s| s.rows.clone()).unwrap_or_default();
    let idle_spin = spin(rb);
    for x in spin(lb) {
        let m = x.map_size;
        let idle = idle_spin.iter().find(|y| y.map_size == m);
        items.push((
            format!("spinning ping-pong 4 B, {} maps / UCX tcp put_lat 4 B", size_name(m)),
            idle.and_then(|v| med(v.vsci.as_ref())),
            pi,
            med(x.vsci.as_ref()),
            pl,
            true,
        ));
    }
    let (ai, al) = (r.peers.ucx_am.as_ref(), l.peers.ucx_am.as_ref());
    let ring = |b: &RemoteBench| b.message_ring.as_ref().map(|s| s.rows.clone()).unwrap_or_default();
    let idle_ring = ring(rb);
    for x in ring(lb) {
        let (size, flush) = (x.size, x.flush);
        let idle = idle_ring.iter().find(|y| y.size == size && y.flush == flush);
        let v = if flush { "`SCIFlush`" } else { "no call" };
        fn amv(a: Option<&UcxAm>, t: AmTest, size: u64) -> Option<&UcxAmRow> {
            a.and_then(|a| a.row(t, size))
        }
        items.push((
            format!("ring {} ping-pong, {v} / UCX tcp am_lat", size_name(size)),
            idle.and_then(|y| med(y.pingpong.as_ref())),
            amv(ai, AmTest::AmLat, size).and_then(|y| y.median_us),
            med(x.pingpong.as_ref()),
            amv(al, AmTest::AmLat, size).and_then(|y| y.median_us),
            true,
        ));
        items.push((
            format!("ring {} streaming, {v} / UCX tcp am_bw (messages/s)", size_name(size)),
            idle.and_then(|y| y.msgs_per_s),
            amv(ai, AmTest::AmBw, size).map(|y| y.msgs_per_s),
            x.msgs_per_s,
            amv(al, AmTest::AmBw, size).map(|y| y.msgs_per_s),
            false,
        ));
    }
    let none = TrappedStore::default();
    let ti = rb.trapped_store.as_ref().unwrap_or(&none);
    if let Some(tl) = lb.trapped_store.as_ref().filter(|t| t.store.is_some()) {
        let ((ci, mi), (vi, wi)) = trapped_medians(ti);
        let ((cl, ml), (vl, wl)) = trapped_medians(tl);
        items.push(("trapped store 8 B until seen / SCIMemCpy 8 B until seen".into(), vi, wi, vl, wl, true));
        items.push(("trapped store 8 B thread CPU / SCIMemCpy 8 B thread CPU".into(), ci, mi, cl, ml, true));
    }
    let num = |v: Option<f64>, lat: bool| if lat { us(v) } else { fmt_opt(v, 0) };
    let mut body = Vec::new();
    for (what, vi, pi, vl, pl, lat) in items {
        let (ri, rl) = (ratio(vi, pi), ratio(vl, pl));
        let growth = if lat { ratio(rl, ri) } else { ratio(ri, rl) };
        body.push(vec![what, num(vi, lat), num(pi, lat), fr(ri), num(vl, lat), num(pl, lat), fr(rl), fr(growth)]);
    }
    d.table(
        &[
            "row (vsci / peer)",
            "vsci idle",
            "peer idle",
            "ratio idle",
            "vsci loaded",
            "peer loaded",
            "ratio loaded",
            "growth",
        ],
        &body,
    );
}
