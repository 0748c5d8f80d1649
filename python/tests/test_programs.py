"""Whole programs: a C program and a Python program sharing one segment, the
examples, Ctrl-C in blocking waits, a killed Python client, and
``pip install ./python``."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import NODE_ID, PYDIR, ROOT, BUILD, built, counts, finish, run_py, wait_counts

EXAMPLES = PYDIR / "examples"


def start(node, argv, **kw):
    return subprocess.Popen(argv, env=node.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def wait_line(p, needle, timeout=30):
    """Read p's stdout until a line containing needle."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return line
    p.kill()
    out, err = p.communicate()
    raise AssertionError(f"no line with {needle!r}; stdout:\n{''.join(seen)}{out}\nstderr:\n{err}")


@pytest.mark.parametrize("server", ["c", "python"])
def test_c_and_python_share_one_segment(fresh_node, server):
    """examples/shmem.c and python/examples/shmem.py speak one protocol
    through one segment (the client's plain stores, the server's check of
    every byte in its own memory, interrupts both ways)."""
    base = counts(fresh_node.status())
    c_prog = str(built("examples/shmem"))
    py_prog = [sys.executable, str(EXAMPLES / "shmem.py")]
    size = str(256 << 10)
    if server == "c":
        srv = start(fresh_node, [c_prog, "-server", "-size", size, "-timeout", "30000"])
        wait_line(srv, "available")
        cli = start(fresh_node, py_prog + ["--client", "--size", size, "--timeout", "30"])
    else:
        srv = start(fresh_node, py_prog + ["--server", "--size", size, "--timeout", "30"])
        wait_line(srv, "available")
        cli = start(fresh_node, [c_prog, "-client", "-size", size, "-timeout", "30000"])
    out_c = finish(cli, f"{server}-server's client")
    out_s = finish(srv, f"{server} server")
    assert "server verified every byte" in out_c, out_c
    assert f"all {256 << 10} bytes are correct" in out_s, out_s
    wait_counts(fresh_node, base, "after shmem")


def test_examples_on_one_node(fresh_node):
    base = counts(fresh_node.status())
    py = sys.executable
    out = run_py(fresh_node, str(EXAMPLES / "interrupt_pingpong.py"), "-n", "200").stdout
    assert "ping: 200 round trips" in out and "pong: answered 200 pings" in out, out
    out = run_py(fresh_node, str(EXAMPLES / "interrupt_pingpong.py"), "-n", "200", "--callback").stdout
    assert "pong: answered 200 pings" in out, out

    disp = start(fresh_node, [py, str(EXAMPLES / "dma_image.py"), "--display", "--height", "120", "--width", "160",
                              "--save", str(fresh_node.dir / "img.pgm"), "--timeout", "30"])
    wait_line(disp, "segment")
    finish(start(fresh_node, [py, str(EXAMPLES / "dma_image.py"), "--render", "--height", "120", "--width", "160"]),
           "dma_image --render")
    assert "image matches" in finish(disp, "dma_image --display")
    assert (fresh_node.dir / "img.pgm").read_bytes().startswith(b"P5\n160 120\n65535\n")

    for extra in ([], ["--dma"]):
        mem = start(fresh_node, [py, str(EXAMPLES / "reflective.py"), "--member", "--timeout", "30"])
        wait_line(mem, "holds group")
        finish(start(fresh_node, [py, str(EXAMPLES / "reflective.py"), "--writer", "--timeout", "30"] + extra),
               "reflective --writer")
        assert "every sample arrived" in finish(mem, "reflective --member")
    wait_counts(fresh_node, base, "after the examples")


WAITER = r"""
import sys, time, sisci
mode = sys.argv[1]
sd = sisci.Descriptor()
try:
    if mode == "interrupt":
        li = sd.create_interrupt(); print("waiting", flush=True); li.wait()
    elif mode == "data":
        li = sd.create_data_interrupt(); print("waiting", flush=True); li.wait()
    elif mode == "connect":
        print("waiting", flush=True); sd.connect_segment(sisci.local_node_id(), 0x7777)
    elif mode == "event":
        s = sd.create_segment(None, 4096); s.make_available(); print("waiting", flush=True); s.wait_for_event()
    elif mode == "dma":
        # a transfer's completion wait (no transfer lasts long enough here:
        # a future that nothing completes)
        t = sisci.DMATransfer(); t.set_running_or_notify_cancel()
        print("waiting", flush=True); t.wait()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sd.close()
    sys.exit(3)
print("returned?!", flush=True)
sys.exit(1)
"""


def _default_sigint():
    # What a terminal gives a program: Python turns SIGINT into
    # KeyboardInterrupt only if it starts with SIGINT at its default. A run
    # started in the background of a non-interactive shell (nohup ... &)
    # passes SIGINT down ignored, and the waiter would never see Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("mode", ["interrupt", "data", "connect", "event", "dma"])
def test_ctrl_c_interrupts_blocking_waits(fresh_node, mode):
    p = start(fresh_node, [sys.executable, "-c", WAITER, mode], preexec_fn=_default_sigint)
    wait_line(p, "waiting")
    time.sleep(0.3)   # well inside the wait
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"{mode}: Ctrl-C did not end the wait")
    took = time.monotonic() - t0
    assert p.returncode == 3 and "interrupted" in out, (p.returncode, out, err)
    assert took < 10, f"{mode}: Ctrl-C took {took:.2f} s"


VICTIM = r"""
import sys, numpy as np, sisci
node = sisci.local_node_id()
sd = sisci.Descriptor()
other = sd.connect_segment(node, int(sys.argv[1]), 10)
om = other.map(); om.memoryview()[0] = 1
seg = sd.create_segment(None, 1 << 20); seg.make_available()
a = seg.map().array(np.uint32); a[:] = 5
mine = sd.connect_segment(node, seg.id, 5); mm = mine.map()
li = sd.create_interrupt(); ri = sd.connect_interrupt(node, li.number, 5)
dli = sd.create_data_interrupt(callback=lambda *a: None)
dri = sd.connect_data_interrupt(node, dli.number, 5)
q = sd.create_dma_queue(); ch = sd.request_dma_channel(); ch.assign(q)
t = q.start(seg, mine, 0, 1 << 20, 0)
seq = mm.create_sequence()
print("holding", flush=True)
import time
time.sleep(600)
"""


def test_killed_python_client_leaves_nothing_in_vscid(sisci, node):
    """A Python client holding segments, maps, connections, interrupts, a
    data interrupt with a callback, a DMA queue and channel is SIGKILLed:
    vscid releases all of it and tells the owner of the segment it
    connected to."""
    with sisci.Descriptor() as sd:
        seg = sd.create_segment(None, 8192)
        seg.make_available()
        before = counts(node.status())
        victim = start(node, [sys.executable, "-c", VICTIM, str(seg.id)])
        wait_line(victim, "holding")
        assert seg.wait_for_event(10).reason == sisci.CallbackReason.CONNECT
        during = counts(node.status())
        assert during["clients"] > before["clients"] and during["segments"] == before["segments"] + 1
        assert during["connections"] >= before["connections"] + 2 and during["interrupts"] >= before["interrupts"] + 2
        victim.kill()
        victim.wait()
        ev = seg.wait_for_event(10)
        assert ev.reason in (sisci.CallbackReason.DISCONNECT, sisci.CallbackReason.LOST), ev
        wait_counts(node, before, "after SIGKILL of the Python client")
        st = node.status()
        assert not any("python" in str(c).lower() and c.get("pid") == victim.pid for c in st.get("clients") or []), st


def test_pip_install(tmp_path, fresh_node):
    """``pip install ./python`` into a virtual environment (Debian 12: a venv
    with --system-site-packages for cffi/numpy, --no-build-isolation so
    Debian's setuptools builds it offline), then a program run from outside
    the tree finds libsisci through VSCI_BUILD."""
    try:
        import ensurepip  # noqa: F401
    except ImportError:
        pytest.skip("python3-venv (ensurepip) is not installed")
    src = tmp_path / "src"
    shutil.copytree(PYDIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "tests",
                                                              ".pytest_cache"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   capture_output=True)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-index", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    env = fresh_node.env()
    env.pop("PYTHONPATH", None)
    env["VSCI_BUILD"] = str(BUILD)
    code = ("import sisci, pathlib; assert 'site-packages' in sisci.__file__, sisci.__file__;"
            "assert (pathlib.Path(sisci.__file__).parent / 'py.typed').exists();"
            "sd = sisci.Descriptor(); s = sd.create_segment(None, 4096); s.make_available();"
            "m = sd.connect_segment(sisci.local_node_id(), s.id, 5).map(); m.memoryview()[0] = 42;"
            "assert s.map().memoryview()[0] == 42; print('installed ok', sisci.library_path())")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0 and "installed ok" in r.stdout, r.stdout + r.stderr
    # SISCI_LIBRARY names the library explicitly; a wrong one is a clear error.
    env["SISCI_LIBRARY"] = str(tmp_path / "nope.so")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import sisci; sisci.local_node_id()"],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
    assert r.returncode != 0 and "SisciLibraryError" in r.stderr and "nope.so" in r.stderr, r.stderr
