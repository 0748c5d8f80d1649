//! The reflective-memory path (issue 18): one writer, groups of 1-3
//! member nodes.

use super::{fr, ratio, sig, Doc};
use crate::schema::{Reflective, ReflectiveRow};
use crate::size_name;

/// Reflective memory (issue 18): unicast and groups of 1-3 members, the
/// group-of-k figures against the group of 1 of the same run.
pub(super) fn reflective(d: &mut Doc, r: &Reflective) {
    d.line("## Reflective memory: one writer, groups of 1, 2 and 3 member nodes");
    d.line("");
    d.line(&format!(
        "Four `vscid` nodes in network namespaces joined by one bridge (libfabric over TCP); a writer on \
         node 1, members on nodes 2, 3 and 4 (`bench/reflect_bench.c`). Each row is one configuration of \
         the same run: a plain segment of node 2 by unicast, then a broadcast group of 1, 2 and 3 members. \
         Blocks of {} are written {} times by stores (`memcpy` into the map + `SCIFlush`, then a flag) and \
         {} times by DMA (`SCIStartDmaTransfer` with `SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST`, then the \
         flag); every member checks every byte of every block before it acks, and a block counts when all \
         members acked it. *DMA call* is the transfer call alone (it returns once the block is in every \
         member's memory). *8 B + flush*: one word stored and `SCIFlush`-ed, which returns once the word is \
         at every member. *Visible at all*: a plain store of the clock with no call, one every {} µs, until \
         the last member saw it ({} samples; a sample some member missed because the next store overwrote it \
         first is left out). The members and the writer spin in plain loops, as reflective-memory programs \
         do: with three members that is four spinning programs on this machine's two cores, beside four \
         nodes' RMA progress threads.",
        size_name(r.block),
        r.blocks_pio,
        r.blocks_dma,
        r.pace_us,
        r.samples,
    ));
    d.line("");
    let base = r.rows.iter().find(|x| !x.unicast && x.members == 1);
    let f = sig;
    let vs = |row: &ReflectiveRow, get: fn(&ReflectiveRow) -> Option<f64>| -> String {
        fr(base.and_then(|b| ratio(get(row), get(b))))
    };
    let mut body = Vec::new();
    for row in &r.rows {
        let vis = &row.visibility_all;
        body.push(vec![
            row.config.clone(),
            format!("{} ({})", f(row.pio_mbps), f(row.pio_us)),
            format!("{} ({})", f(row.dma_mbps), f(row.dma_us)),
            f(row.dma_call_us),
            format!("{} / {}", f(row.flush.median_us), f(row.flush.p99_us)),
            format!("{} / {}", f(vis.median_us), f(vis.p99_us)),
            format!("{} of {}", vis.n, vis.sent),
            format!(
                "{} / {} / {}",
                vs(row, |x| x.dma_call_us),
                vs(row, |x| x.flush.median_us),
                vs(row, |x| x.visibility_all.median_us)
            ),
        ]);
    }
    d.table(
        &[
            "to",
            "stores MB/s (µs per block)",
            "DMA MB/s (µs per block)",
            "DMA call µs",
            "8 B + flush p50 / p99 µs",
            "visible at all p50 / p99 µs",
            "samples seen",
            "vs group of 1: DMA call / flush / visible",
        ],
        &body,
    );
    d.line(
        "A software fabric has no multicast: the writer's node sends one copy per member, posted to all of \
         them before any is waited for, so a small store reaches three members in about the time of one \
         while a block's bytes leave the writer's node once per member (here its CPU is the link). Where the \
         group of 3 is slower than that, it is the machine: two cores for four spinning programs.",
    );
    d.line("");
}
