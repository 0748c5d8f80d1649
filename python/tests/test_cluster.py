"""Two nodes, each in its own network namespace (root only): Python programs
on one node reach the other's segments, interrupts and DMA engine, and
reflective memory reaches both members."""
from __future__ import annotations

import sys

import pytest

from conftest import PYDIR, built, finish

EX = PYDIR / "examples"


def ready(p, needle, cluster, timeout=60):
    import select
    import time
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            line = p.stdout.readline()
            if not line:
                break
            seen += line
            if needle in line:
                return
    p.kill()
    out, err = p.communicate()
    raise AssertionError(f"no {needle!r} from the program:\n{seen}{out}\n{err}\n{cluster.logs()}")


@pytest.mark.parametrize("server", ["c", "python", "c-preloaded"])
def test_shmem_across_nodes(cluster, server):
    """The shmem protocol between node 1 (server) and node 2 (client): the
    client's stores into node 1's segment through its remote map.  The
    Python client traps them with the library's fault thread (libsisci
    opened by dlopen), or with SIGBUS when libsisci is preloaded."""
    size = str(128 << 10)
    if server.startswith("c"):
        srv = cluster.popen(1, [str(built("examples/shmem")), "-server", "-size", size, "-timeout", "60000"])
        ready(srv, "available", cluster)
        env = {"LD_PRELOAD": str(built("lib/libsisci.so"))} if server == "c-preloaded" else None
        cli = cluster.python(2, str(EX / "shmem.py"), "--client", "--rn", "1", "--size", size, "--timeout", "60",
                             extra_env=env)
    else:
        srv = cluster.python(1, str(EX / "shmem.py"), "--server", "--size", size, "--timeout", "60")
        ready(srv, "available", cluster)
        cli = cluster.popen(2, [str(built("examples/shmem")), "-client", "-rn", "1", "-size", size,
                                "-timeout", "60000"])
    out = finish(cli, "client on node 2", 120, cluster)
    assert "server verified every byte" in out, out
    assert f"all {128 << 10} bytes are correct" in finish(srv, "server on node 1", 60, cluster)


def test_interrupt_pingpong_across_nodes(cluster):
    pong = cluster.python(1, str(EX / "interrupt_pingpong.py"), "--pong", "--rn", "2", "-n", "100")
    ready(pong, "ready", cluster)
    out = finish(cluster.python(2, str(EX / "interrupt_pingpong.py"), "--ping", "--rn", "1", "-n", "100"),
                 "ping on node 2", 120, cluster)
    assert "ping: 100 round trips to node 1" in out, out
    assert "answered 100 pings" in finish(pong, "pong on node 1", 60, cluster)


@pytest.mark.parametrize("how", ["stores", "dma"])
def test_reflective_memory_across_nodes(cluster, how):
    """Members on both nodes; the writer on node 2 writes the group once
    (stores through one map, or one DMA transfer) and both members hold
    every sample."""
    group = "0x7200" if how == "stores" else "0x7201"
    members = [cluster.python(n, str(EX / "reflective.py"), "--member", "--group", group, "--samples", "16384")
               for n in (1, 2)]
    for m in members:
        ready(m, "holds group", cluster)
    extra = ["--dma"] if how == "dma" else []
    out = finish(cluster.python(2, str(EX / "reflective.py"), "--writer", "--group", group, "--samples", "16384",
                                *extra), "writer on node 2", 120, cluster)
    assert "told every member" in out, out
    for n, m in zip((1, 2), members):
        assert "every sample arrived" in finish(m, f"member on node {n}", 60, cluster)


def test_dma_image_across_nodes(cluster):
    disp = cluster.python(1, str(EX / "dma_image.py"), "--display", "--height", "200", "--width", "300")
    ready(disp, "segment", cluster)
    out = finish(cluster.python(2, str(EX / "dma_image.py"), "--render", "--rn", "1", "--height", "200",
                                "--width", "300"), "render on node 2", 120, cluster)
    assert "DMA transfers" in out, out
    assert "image matches" in finish(disp, "display on node 1", 60, cluster)


def test_probe_and_errors_across_nodes(cluster):
    code = r"""
import sisci
sd = sisci.Descriptor()
assert sisci.local_node_id() == 2
assert sd.probe_node(1) and not sd.probe_node(3)
try:
    sd.connect_segment(1, 0x7999, timeout=0.3)
except sisci.SisciError as e:
    assert e.code == sisci.SCI_ERR_NO_SUCH_SEGMENT, e
try:
    sd.connect_segment(3, 1, timeout=0.3)
except sisci.SisciError as e:
    assert e.code == sisci.SCI_ERR_NO_SUCH_NODEID, e
print("ok")
"""
    assert "ok" in finish(cluster.popen(2, [sys.executable, "-c", code]), "probe on node 2", 60, cluster)
