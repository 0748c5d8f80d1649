"""What the Python binding costs: ping-pong through a segment and through an
interrupt between two Python processes of one node, and single calls.

    python3 -m sisci.bench [--quick] [--json FILE]

``vsci bench --paths local`` runs it next to sisci_bench, whose C figures
for the same two ping-pongs (8-byte segment ping-pong, interrupt ping-pong
with each wait strategy) stand beside these; the difference is the binding's
cost per round trip.  The segment ping-pong stores a sequence number into
the peer's segment through a ``memoryview`` of a map, with a
``store_barrier()`` between payload and flag (one call per message, as
sisci_bench makes), and spins on its own segment's flag; the
interrupt ping-pong is ``RemoteInterrupt.trigger()`` then
``LocalInterrupt.wait()`` (two calls through cffi per round), with each
wait strategy (``VSCI_WAIT`` adaptive, block, poll) as sisci_bench runs it.  Latencies are
round trip / 2 in microseconds, as sisci_bench reports them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

import sisci

SEG_PING, SEG_PONG = 0x7B00, 0x7B01
INT_PING, INT_PONG = 0x7B0, 0x7B1


def _stats(half_rtts_s: List[float]) -> Dict[str, Any]:
    us = sorted(x * 1e6 for x in half_rtts_s)
    n = len(us)
    return {"n": n, "median_us": round(statistics.median(us), 4), "mean_us": round(statistics.fmean(us), 4),
            "min_us": round(us[0], 4), "p99_us": round(us[max(0, int(n * 0.99) - 1)], 4), "max_us": round(us[-1], 4)}


def _segments(sd: sisci.Descriptor, node: int, mine_id: int, theirs_id: int):
    seg = sd.create_segment(mine_id, 4096)
    seg.make_available()
    lm = seg.map()
    rs = sd.connect_segment(node, theirs_id, 60)
    rm = rs.map()
    return seg, lm, rs, rm


STOP = 0xFFFFFFFF


def segment_pingpong(sd: sisci.Descriptor, node: int, role: str, n: int, warm: int,
                     limit_s: float) -> Dict[str, Any]:
    """sisci_bench's 8-byte ping-pong in Python: each message is the
    sequence number (4 bytes), ``store_barrier()``, then the flag (the
    sequence number again, 4 bytes) stored into the peer's segment through a
    memoryview of the map; each side spins on its own segment's flag (giving
    the core away every 32768 turns, as sisci_bench does every 65536) and
    checks the payload.  The ping side stops after ``n`` timed rounds or
    ``limit_s`` seconds."""
    me, peer = (SEG_PING, SEG_PONG) if role == "ping" else (SEG_PONG, SEG_PING)
    seg, lm, rs, rm = _segments(sd, node, me, peer)
    mine = lm.memoryview().cast("I")
    theirs = rm.memoryview().cast("I")
    clock = time.perf_counter
    barrier = sisci.store_barrier
    yield_ = os.sched_yield
    lat: List[float] = []
    bad = 0
    if role == "ping":
        end = float("inf")
        for i in range(1, n + warm + 1):
            t0 = clock()
            theirs[0] = i
            barrier()
            theirs[1] = i
            spins = 0
            while mine[1] != i:
                spins += 1
                if not spins & 0x7FFF:
                    yield_()
            t1 = clock()
            bad += mine[0] != i
            if i == warm:
                end = t1 + limit_s
            elif i > warm:
                lat.append((t1 - t0) / 2)
                if t1 > end:
                    break
        theirs[1] = STOP
    else:
        i = 1
        while True:
            spins = 0
            v = mine[1]
            while v != i and v != STOP:
                spins += 1
                if not spins & 0x7FFF:
                    yield_()
                v = mine[1]
            if v == STOP:
                break
            bad += mine[0] != i
            theirs[0] = i
            barrier()
            theirs[1] = i
            i += 1
    del mine, theirs
    for o in (rm, rs, lm):
        o.close()
    seg.close()
    if not lat:
        return {}
    return dict(_stats(lat), bad=bad)


def interrupt_pingpong(sd: sisci.Descriptor, node: int, role: str, n: int, warm: int,
                       limit_s: float) -> Dict[str, Any]:
    """Round trips of trigger() and wait(); the pong side ends when no
    trigger has come for a second."""
    me, peer = (INT_PING, INT_PONG) if role == "ping" else (INT_PONG, INT_PING)
    li = sd.create_interrupt(me, fixed=True)
    ri = sd.connect_interrupt(node, peer, 60)
    clock = time.perf_counter
    lat: List[float] = []
    trigger, wait = ri.trigger, li.wait
    if role == "ping":
        end = float("inf")
        for i in range(n + warm):
            t0 = clock()
            trigger()
            wait(10)
            t1 = clock()
            if i == warm - 1:
                end = t1 + limit_s
            elif i >= warm:
                lat.append((t1 - t0) / 2)
                if t1 > end:
                    break
    else:
        try:
            while True:
                wait(1.0)
                trigger()
        except sisci.SisciTimeoutError:
            pass
    ri.close()
    li.close()
    return _stats(lat) if lat else {}


def call_costs(sd: sisci.Descriptor, n: int) -> Dict[str, Any]:
    """Nanoseconds per call: ``SCIGetLocalSegmentSize`` straight through
    cffi and through the binding (``LocalSegment.size``), a trigger through
    the binding, and a word load and store through a map's memoryview."""
    from ._lib import lib
    seg = sd.create_segment(None, 4096)
    seg.make_available()
    m = seg.map()
    li = sd.create_interrupt()
    ri = sd.connect_interrupt(sisci.local_node_id(), li.number, 10)
    h = seg._h
    mv = m.memoryview().cast("Q")
    clock = time.perf_counter

    def per(f, k: int) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = clock()
            f(k)
            best = min(best, (clock() - t0) / k)
        return round(best * 1e9, 1)

    def raw(k: int) -> None:
        g = lib.SCIGetLocalSegmentSize
        for _ in range(k):
            g(h)

    def prop(k: int) -> None:
        for _ in range(k):
            seg.size

    def trig(k: int) -> None:
        t = ri.trigger
        for _ in range(k):
            t()

    def load(k: int) -> None:
        for _ in range(k):
            mv[0]

    def store(k: int) -> None:
        for i in range(k):
            mv[0] = i

    def empty(k: int) -> None:
        for _ in range(k):
            pass

    out = {"loop_ns": per(empty, n), "cffi_call_ns": per(raw, n), "binding_getter_ns": per(prop, n),
           "trigger_ns": per(trig, max(1, n // 10)), "memoryview_load_ns": per(load, n),
           "memoryview_store_ns": per(store, n)}
    del mv
    ri.close()
    li.close()
    m.close()
    seg.close()
    return out


def _role_main(role: str, mode: str, node: int, n: int, limit_s: float) -> Dict[str, Any]:
    with sisci.Descriptor() as sd:
        f = segment_pingpong if mode == "segment" else interrupt_pingpong
        return f(sd, node, role, n, min(100, max(1, n // 10)), limit_s)


def main(argv: List[str] = None) -> int:  # type: ignore[assignment]
    ap = argparse.ArgumentParser(prog="python3 -m sisci.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--role", choices=["ping", "pong"], help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=["segment", "interrupt"], help=argparse.SUPPRESS)
    ap.add_argument("-n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=float, default=10.0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    node = sisci.local_node_id()
    if a.role:
        r = _role_main(a.role, a.mode, node, a.n, a.limit)
        if a.role == "ping":
            print(json.dumps(r), flush=True)
        return 0
    # Rounds of fresh process pairs: where the two processes land on the
    # cores changes from pair to pair; each round is capped in time.
    rounds = 3
    count = {"segment": 5000 if a.quick else 50000, "interrupt": 1000 if a.quick else 10000}
    limit = 3.0 if a.quick else 10.0
    results: Dict[str, Any] = {
        "benchmark": "python -m sisci.bench",
        "python": platform.python_implementation() + " " + platform.python_version(),
        "cffi": __import__("cffi").__version__,
        "library": sisci.library_path(),
        "vsci_wait": os.environ.get("VSCI_WAIT", "(node default)"),
        "rounds": rounds,
    }
    with sisci.Descriptor() as sd:
        results["calls"] = call_costs(sd, 20000 if a.quick else 200000)
    print(f"python binding: one call through cffi {results['calls']['cffi_call_ns']} ns, "
          f"through the binding {results['calls']['binding_getter_ns']} ns, trigger() "
          f"{results['calls']['trigger_ns']} ns (an empty loop turn: {results['calls']['loop_ns']} ns)", flush=True)
    # The interrupt ping-pong with each wait strategy sisci_bench measures.
    plan = [("segment", None, "segment_pingpong")] + [
        ("interrupt", w, "interrupt_pingpong" if w == "adaptive" else f"interrupt_pingpong_{w}")
        for w in ("adaptive", "block", "poll")]
    for mode, wait, key in plan:
        env = dict(os.environ)
        if wait:
            env["VSCI_WAIT"] = wait
        runs: List[Dict[str, Any]] = []
        for _ in range(rounds):
            cmd = [sys.executable, "-m", "sisci.bench", "--mode", mode, "-n", str(count[mode]),
                   "--limit", str(limit)]
            pong = subprocess.Popen(cmd + ["--role", "pong"], stdin=subprocess.DEVNULL, env=env)
            ping = subprocess.run(cmd + ["--role", "ping"], capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=600, env=env)
            try:
                pong.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pong.kill()
                pong.wait()
            if ping.returncode != 0:
                sys.stderr.write(ping.stderr)
                runs.append({"error": (ping.stderr.strip().splitlines() or ["failed"])[-1]})
                continue
            runs.append(json.loads(ping.stdout.strip().splitlines()[-1]))
        good = [r for r in runs if "median_us" in r]
        if not good:
            results[key] = {"error": runs[-1].get("error", "no result"), "runs": runs}
            continue
        best = sorted(good, key=lambda r: r["median_us"])[len(good) // 2]   # the median round
        results[key] = dict(best, runs=runs, wait=wait) if wait else dict(best, runs=runs)
        what = f"{mode} ping-pong" + (f" (VSCI_WAIT={wait})" if wait else "")
        print(f"python {what}: {len(good)} rounds, median round: {best['n']} round trips, "
              f"one way median {best['median_us']} us, p99 {best['p99_us']} us "
              f"(round medians {', '.join(str(r['median_us']) for r in good)})", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
    return 0 if all("error" not in results.get(k, {}) for _, _, k in plan) else 1


if __name__ == "__main__":
    sys.exit(main())
