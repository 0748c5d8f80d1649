#!/usr/bin/env python3
"""Reflective memory across nodes: one writer, every member node sees it.

    python3 reflective.py --member [--group 0x7100]      # on each member node, first
    python3 reflective.py --writer [--group 0x7100] [--dma]

A member creates its node's segment of reflective-memory group --group
(``create_segment(..., broadcast=True)``) and an interrupt (number 0x40),
then waits.  The writer connects to the whole group
(``connect_group``: node DIS_BROADCAST_NODEID_GROUP_ALL), writes a block of
float64 "samples" through one numpy array over its map -- or with one DMA
transfer from Python memory (--dma) -- flushes (every member has the bytes
when SCIFlush returns), and triggers interrupt 0x40 of every node that has
one (``connect_interrupt(sisci.GROUP_ALL, 0x40)``).  Each member then checks
its own memory, without any copy, and exits 0 when it holds every sample.
Start the members first: a group interrupt reaches the nodes that have the
interrupt when the writer connects.
"""
import argparse
import sys

import numpy as np

import sisci

INTNO = 0x40


def samples(n: int) -> np.ndarray:
    t = np.arange(n, dtype=np.float64)
    return np.sin(t / 64.0) * 1000.0 + t


def member(sd, group, n, timeout):
    with sd.create_interrupt(INTNO, fixed=True) as done, \
            sd.create_segment(group, n * 8, broadcast=True) as seg:
        seg.make_available()
        print(f"member: node {sisci.local_node_id()} holds group {group:#x} ({n} samples)", flush=True)
        done.wait(timeout)
        with seg.map() as m:
            mine = m.array(np.float64)             # this node's own memory
            ok = np.array_equal(mine, samples(n))
            print(f"member: node {sisci.local_node_id()}: {'every sample arrived' if ok else 'WRONG DATA'} "
                  f"(sum {mine.sum():.1f})", flush=True)
            del mine
    return 0 if ok else 1


def writer(sd, group, n, timeout, dma):
    with sd.connect_group(group, timeout) as grp:
        print(f"writer: group {group:#x} connected ({grp.size} bytes per member)", flush=True)
        data = samples(n)
        if dma:
            with sd.create_dma_queue() as q:
                q.transfer_mem(data, grp, 0, timeout=timeout)   # one transfer writes every member
        else:
            with grp.map() as m:
                a = m.array(np.float64)
                a[:] = data                                     # plain stores reach every member
                del a
        sisci.flush()
        with sd.connect_interrupt(sisci.GROUP_ALL, INTNO, timeout) as everyone:
            everyone.trigger()
        print(f"writer: wrote {n} samples by {'DMA' if dma else 'stores'} and told every member", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    role = ap.add_mutually_exclusive_group(required=True)
    role.add_argument("--member", action="store_true")
    role.add_argument("--writer", action="store_true")
    ap.add_argument("--group", type=lambda s: int(s, 0), default=0x7100)
    ap.add_argument("--samples", type=int, default=64 * 1024)
    ap.add_argument("--dma", action="store_true", help="the writer writes by DMA")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    with sisci.Descriptor() as sd:
        if a.member:
            return member(sd, a.group, a.samples, a.timeout)
        return writer(sd, a.group, a.samples, a.timeout, a.dma)


if __name__ == "__main__":
    sys.exit(main())
