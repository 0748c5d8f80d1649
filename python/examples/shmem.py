#!/usr/bin/env python3
"""A segment shared with a C program: examples/shmem.c's protocol in Python.

Either side may be C or Python, on the same node or on two nodes:

    build/examples/shmem -server              &   python3 shmem.py --client
    python3 shmem.py --server                 &   build/examples/shmem -client

The server creates a segment (a 4 KiB header page, then --size data bytes)
and an interrupt; the client connects, writes a pattern into every data byte
through a numpy array over its map (plain stores, no copy), stores a barrier
and triggers the server's interrupt; the server checks every byte in its own
memory, writes the verdict into the header and triggers the client's
interrupt.  Both exit 0 when every byte arrived.
"""
import argparse
import struct
import sys
import time

import numpy as np

import sisci

DEFAULT_SEGID = 0x5100
HEADER_SIZE = 4096
MAGIC = 0x53484D45  # "SHME"
# struct shmem_header: magic, server_intno, client_intno, client_node (u32),
# size (u64), status, pad (u32), bad_offset (u64)
OFF_MAGIC, OFF_SERVER_INTNO, OFF_CLIENT_INTNO, OFF_CLIENT_NODE = 0, 4, 8, 12
OFF_SIZE, OFF_STATUS, OFF_BAD = 16, 24, 32


def pattern(n: int) -> np.ndarray:
    """The byte the client stores at data offset i, for every i < n (as shmem.c)."""
    i = np.arange(n, dtype=np.uint64)
    return ((i * np.uint64(251)) ^ (i >> np.uint64(11)) ^ np.uint64(0x5A)).astype(np.uint8)


def put32(mv, off, v):
    struct.pack_into("<I", mv, off, v)


def put64(mv, off, v):
    struct.pack_into("<Q", mv, off, v)


def get32(mv, off):
    return struct.unpack_from("<I", mv, off)[0]


def get64(mv, off):
    return struct.unpack_from("<Q", mv, off)[0]


def server(sd, segid, size, timeout):
    with sd.create_interrupt(0x20) as intr, sd.create_segment(segid, HEADER_SIZE + size) as seg:
        with seg.map() as m:
            h = m.memoryview(0, HEADER_SIZE)
            data = m.array(np.uint8, offset=HEADER_SIZE)
            put32(h, OFF_SERVER_INTNO, intr.number)
            put64(h, OFF_SIZE, size)
            put32(h, OFF_MAGIC, MAGIC)
            seg.make_available()
            print(f"server: node {sisci.local_node_id()}, segment {segid:#x} ({size} data bytes) "
                  f"available, interrupt {intr.number}", flush=True)
            intr.wait(timeout)
            t0 = time.monotonic()
            bad = np.flatnonzero(data != pattern(size))
            ms = (time.monotonic() - t0) * 1000
            if bad.size == 0:
                print(f"server: all {size} bytes are correct (checked in {ms:.3f} ms)", flush=True)
                put32(h, OFF_STATUS, 1)
            else:
                b = int(bad[0])
                print(f"server: byte {b} is {int(data[b]):#04x}, expected {int(pattern(b + 1)[b]):#04x}", flush=True)
                put64(h, OFF_BAD, b)
                put32(h, OFF_STATUS, 2)
            with sd.connect_interrupt(get32(h, OFF_CLIENT_NODE), get32(h, OFF_CLIENT_INTNO), timeout) as answer:
                answer.trigger()
                # Keep the segment until the client has read the verdict and left.
                while True:
                    ev = seg.wait_for_event(timeout)
                    print(f"server: segment event {ev.reason.name} from node {ev.node_id}", flush=True)
                    if ev.reason == sisci.CallbackReason.DISCONNECT:
                        break
            del h, data
        seg.set_unavailable()
    return 0 if bad.size == 0 else 1


def client(sd, node, segid, size, timeout):
    with sd.create_interrupt(0x21) as answer:
        print(f"client: connecting to segment {segid:#x} on node {node}", flush=True)
        with sd.connect_segment(node, segid, timeout) as seg:
            if seg.size != HEADER_SIZE + size:
                sys.exit(f"client: the server's segment has {seg.size - HEADER_SIZE} data bytes, not {size}")
            with seg.map(0, HEADER_SIZE) as hmap, seg.map(HEADER_SIZE, size) as dmap:
                h = hmap.memoryview()
                if get32(h, OFF_MAGIC) != MAGIC:
                    sys.exit(f"client: segment {segid:#x} does not look like a shmem server's segment")
                put32(h, OFF_CLIENT_NODE, sisci.local_node_id())
                put32(h, OFF_CLIENT_INTNO, answer.number)
                data = dmap.array(np.uint8)
                t0 = time.monotonic()
                data[:] = pattern(size)              # plain stores into the segment
                sisci.store_barrier()                # all visible before the trigger
                us = (time.monotonic() - t0) * 1e6
                print(f"client: wrote {size} bytes in {us / 1000:.3f} ms ({size / us:.1f} MB/s)", flush=True)
                with sd.connect_interrupt(node, get32(h, OFF_SERVER_INTNO), timeout) as server_intr:
                    t0 = time.monotonic()
                    server_intr.trigger()
                    answer.wait(timeout)
                    ms = (time.monotonic() - t0) * 1000
                status = get32(h, OFF_STATUS)
                if status == 1:
                    print(f"client: server verified every byte (answer after {ms:.3f} ms)", flush=True)
                else:
                    print(f"client: server found a bad byte at offset {get64(h, OFF_BAD)}", flush=True)
                del h, data
    return 0 if status == 1 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    role = ap.add_mutually_exclusive_group(required=True)
    role.add_argument("--server", action="store_true")
    role.add_argument("--client", action="store_true")
    ap.add_argument("--rn", type=int, help="the server's node id (default: this node)")
    ap.add_argument("--size", type=lambda s: int(s, 0), default=1 << 20, help="data bytes (default 1 MiB)")
    ap.add_argument("--segid", type=lambda s: int(s, 0), default=DEFAULT_SEGID)
    ap.add_argument("--timeout", type=float, default=None, help="seconds each wait may take (default: forever)")
    a = ap.parse_args()
    with sisci.Descriptor() as sd:
        if a.server:
            return server(sd, a.segid, a.size, a.timeout)
        return client(sd, a.rn if a.rn is not None else sisci.local_node_id(), a.segid, a.size, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
