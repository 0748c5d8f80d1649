#!/usr/bin/env python3
"""Interrupt ping-pong between two programs (two processes of one node, or
two nodes).

    python3 interrupt_pingpong.py --pong [--rn PING_NODE]       # first
    python3 interrupt_pingpong.py --ping [--rn PONG_NODE] [-n 10000]

Each side creates an interrupt with a fixed number (ping 0x30, pong 0x31)
and connects to the other's.  The ping side triggers the pong's interrupt
and waits for its own, --count times, and prints the round trip halved
(median and 99th percentile).  ``--callback`` makes the pong side answer
from an interrupt callback instead of a blocking wait.  Without --ping or
--pong, both sides run here (the pong in a child process).
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import sisci

PING_NO, PONG_NO = 0x30, 0x31


def pong(sd, node, count, timeout, use_callback):
    if use_callback:
        done = threading.Event()
        answer = []
        left = [count]

        def on_trigger(intr, status):
            if status != sisci.SCI_ERR_OK:
                done.set()
                return sisci.CANCEL
            answer[0].trigger()
            left[0] -= 1
            if left[0] == 0:
                done.set()
                return sisci.CANCEL
        mine = sd.create_interrupt(PONG_NO, fixed=True, callback=on_trigger)
        print("pong: ready (callback)", flush=True)
        answer.append(sd.connect_interrupt(node, PING_NO, timeout))
        if not done.wait(timeout):
            sys.exit("pong: timed out")
    else:
        mine = sd.create_interrupt(PONG_NO, fixed=True)
        print("pong: ready", flush=True)
        other = sd.connect_interrupt(node, PING_NO, timeout)
        for _ in range(count):
            mine.wait(timeout)
            other.trigger()
    print(f"pong: answered {count} pings", flush=True)
    return 0


def ping(sd, node, count, timeout):
    mine = sd.create_interrupt(PING_NO, fixed=True)
    other = sd.connect_interrupt(node, PONG_NO, timeout)
    lat = []
    clock = time.perf_counter
    for _ in range(count):
        t0 = clock()
        other.trigger()
        mine.wait(timeout)
        lat.append((clock() - t0) / 2 * 1e6)
    lat.sort()
    print(f"ping: {count} round trips to node {node}: one way median {statistics.median(lat):.2f} us, "
          f"p99 {lat[int(len(lat) * 0.99) - 1]:.2f} us, min {lat[0]:.2f} us", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ping", action="store_true")
    ap.add_argument("--pong", action="store_true")
    ap.add_argument("--rn", type=int, help="the other side's node id (default: this node)")
    ap.add_argument("-n", "--count", type=int, default=2000)
    ap.add_argument("--callback", action="store_true", help="pong answers from a callback")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds any wait may take")
    a = ap.parse_args()
    if not a.ping and not a.pong:
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--pong", "-n", str(a.count),
                                  "--timeout", str(a.timeout)] + (["--callback"] if a.callback else []),
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        child.stdout.readline()  # "pong: ready"
        with sisci.Descriptor() as sd:
            rc = ping(sd, sisci.local_node_id(), a.count, a.timeout)
        print(child.stdout.read(), end="")
        return rc or child.wait()
    with sisci.Descriptor() as sd:
        node = a.rn if a.rn is not None else sisci.local_node_id()
        if a.pong:
            return pong(sd, node, a.count, a.timeout, a.callback)
        return ping(sd, node, a.count, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
