"""Fixtures of the binding's tests: a vscid for the whole session, helpers to
run Python and C programs against it, and two-node clusters in network
namespaces (root only; skipped otherwise).

Run with ``make test-python`` or ``python3 -m pytest python/tests`` after
``make`` (``VSCI_BUILD`` names another build directory).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

TESTS = Path(__file__).resolve().parent
PYDIR = TESTS.parent                       # python/
ROOT = PYDIR.parent                        # the checkout
BUILD = Path(os.environ.get("VSCI_BUILD") or ROOT / "build").resolve()
NODE_ID = 4

# The binding under test is the tree's, over the build's libsisci.
os.environ["VSCI_BUILD"] = str(BUILD)
os.environ.pop("SISCI_LIBRARY", None)
sys.path.insert(0, str(PYDIR))


def built(rel: str) -> Path:
    p = BUILD / rel
    if not p.exists():
        pytest.exit(f"{p} does not exist: run `make` first (or set VSCI_BUILD)", returncode=2)
    return p


def wait_socket(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vscid exited ({proc.returncode}) while starting:\n{log.read_text()}")
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(str(path))
            s.close()
            return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"vscid did not accept on {path} within {timeout} s:\n{log.read_text()}")
        time.sleep(0.02)


class Node:
    """One vscid on a socket of its own (killed on stop)."""

    def __init__(self, node_id: int, directory: Path, args: Optional[List[str]] = None) -> None:
        self.node_id = node_id
        self.dir = directory
        self.socket = directory / f"node{node_id}.sock"
        self.log = directory / f"node{node_id}.log"
        env = dict(os.environ)
        env.pop("VSCI_SOCKET", None)
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen([str(built("bin/vscid")), "--node-id", str(node_id),
                                          "--socket", str(self.socket)] + (args or []),
                                         stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env)
        wait_socket(self.socket, self.proc, self.log)

    def env(self, **extra: str) -> Dict[str, str]:
        e = dict(os.environ)
        e["VSCI_SOCKET"] = str(self.socket)
        e["PYTHONPATH"] = str(PYDIR)
        e.pop("VSCI_WAIT", None)
        e.update(extra)
        return e

    def status(self) -> dict:
        out = subprocess.run([str(built("bin/vsci")), "status", "--socket", str(self.socket), "--json"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def counts(status: dict) -> Dict[str, int]:
    """clients, segments, connections, interrupts of a `vsci status --json`."""
    totals = status.get("totals") or {}
    return {k: int(totals[k]) if k in totals else len(status.get(k) or [])
            for k in ("clients", "segments", "connections", "interrupts")}


def wait_counts(node: Node, want: Dict[str, int], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        st = node.status()
        c = counts(st)
        if all(c[k] == v for k, v in want.items()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: vscid still holds {c}, wanted {want}\n{json.dumps(st, indent=1)[:4000]}")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def tmpdir_session() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="vsci-py-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def node(tmpdir_session: Path) -> Iterator[Node]:
    """The session's vscid (node 4); this process's libsisci talks to it."""
    n = Node(NODE_ID, tmpdir_session)
    os.environ["VSCI_SOCKET"] = str(n.socket)
    yield n
    n.stop()


@pytest.fixture
def sisci(node: Node):
    """The binding, with the session's node up."""
    import sisci as s
    return s


@pytest.fixture
def sd(sisci):
    """A descriptor, closed after the test."""
    d = sisci.Descriptor()
    yield d
    import gc
    gc.collect()
    d.close()


@pytest.fixture
def fresh_node(tmp_path: Path) -> Iterator[Node]:
    """A vscid of the test's own (node 7), for programs run as subprocesses."""
    n = Node(7, tmp_path)
    yield n
    n.stop()


def run_py(node: Node, code_or_path: str, *args: str, timeout: float = 60, check: bool = True,
           env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run Python code (or a script path) as a client of ``node``."""
    cmd = [sys.executable]
    cmd += [code_or_path] if code_or_path.endswith(".py") else ["-c", code_or_path]
    p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                       env=env or node.env(), stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd[:2]} {args} exited {p.returncode}\n--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}")
    return p


# ---------------------------------------------------------------------------
# Clusters in network namespaces


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {p.stderr.strip()}")
    return p


class Cluster:
    """Nodes in network namespaces joined by veths to a bridge in a namespace
    of its own (nothing is added to the root namespace's network).  Made as
    crates/vsci-systest/tests/netns/mod.rs makes them; ``close()`` kills every
    process in the namespaces and deletes them, also after a failure."""

    def __init__(self, ids: List[int], directory: Path) -> None:
        tag = f"vsci-py{os.getpid()}"
        self.dir = directory
        self.bridge = f"{tag}-br"
        self.namespaces: List[str] = []
        self.nodes: Dict[int, dict] = {}
        self.procs: List[subprocess.Popen] = []
        subnet = os.getpid() % 250 + 1
        try:
            _ip("netns", "add", self.bridge)
            self.namespaces.append(self.bridge)
            _ip("-n", self.bridge, "link", "set", "lo", "up")
            _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge, "link", "set", "br0", "up")
            for i, nid in enumerate(ids):
                ns = f"{tag}-node{nid}"
                _ip("netns", "del", ns, check=False)
                _ip("netns", "add", ns)
                self.namespaces.append(ns)
                addr = f"10.214.{subnet}.{11 + i}"
                _ip("-n", self.bridge, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("-n", self.bridge, "link", "set", f"v{i}", "master", "br0")
                _ip("-n", self.bridge, "link", "set", f"v{i}", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                self.nodes[nid] = {"ns": ns, "addr": f"{addr}:7100",
                                   "socket": directory / f"node{nid}.sock", "log": directory / f"node{nid}.log"}
            (directory / "key").write_text(secrets.token_hex(24) + "\n")
            toml = 'key_file = "key"\n' + "".join(
                f'\n[[node]]\nid = {nid}\naddress = "{n["addr"]}"\n' for nid, n in self.nodes.items())
            (directory / "cluster.toml").write_text(toml)
            for nid, n in self.nodes.items():
                env = dict(os.environ)
                env.pop("VSCI_SOCKET", None)
                with open(n["log"], "wb") as f:
                    n["proc"] = subprocess.Popen(
                        ["ip", "netns", "exec", n["ns"], str(built("bin/vscid")), "--config",
                         str(directory / "cluster.toml"), "--node-id", str(nid), "--socket", str(n["socket"])],
                        stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env)
            for nid, n in self.nodes.items():
                wait_socket(n["socket"], n["proc"], n["log"])
            self.wait_up()
        except BaseException:
            self.close()
            raise

    def status(self, nid: int) -> dict:
        out = subprocess.run([str(built("bin/vsci")), "status", "--socket", str(self.nodes[nid]["socket"]), "--json"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def wait_up(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        for a in self.nodes:
            for b in self.nodes:
                if a == b:
                    continue
                while True:
                    peers = self.status(a).get("peers") or []
                    if any(p.get("node_id") == b and p.get("state") == "up" for p in peers):
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"node {a} does not see node {b} up:\n{self.logs()}")
                    time.sleep(0.1)

    def env(self, nid: int) -> Dict[str, str]:
        e = dict(os.environ)
        e["VSCI_SOCKET"] = str(self.nodes[nid]["socket"])
        e["PYTHONPATH"] = str(PYDIR)
        return e

    def popen(self, nid: int, argv: List[str], extra_env: Optional[Dict[str, str]] = None, **kw) -> subprocess.Popen:
        """Start ``argv`` on node ``nid`` (in its namespace)."""
        env = self.env(nid)
        env.update(extra_env or {})
        p = subprocess.Popen(["ip", "netns", "exec", self.nodes[nid]["ns"], *argv], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, **kw)
        self.procs.append(p)
        return p

    def python(self, nid: int, script: str, *args: str, extra_env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        return self.popen(nid, [sys.executable, script, *args], extra_env)

    def logs(self) -> str:
        return "\n".join(f"--- node {nid} ---\n{Path(n['log']).read_text(errors='replace')[-3000:]}"
                         for nid, n in self.nodes.items() if Path(n["log"]).exists())

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for ns in self.namespaces:
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for n in self.nodes.values():
            if "proc" in n:
                try:
                    n["proc"].wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self.namespaces):
            _ip("netns", "del", ns, check=False)
        self.namespaces = []


def finish(p: subprocess.Popen, what: str, timeout: float = 60, cluster: Optional[Cluster] = None) -> str:
    """Wait for ``p``; its stdout; fail with its output if it did not exit 0."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"{what} did not finish in {timeout} s\n--- stdout ---\n{out}\n--- stderr ---\n{err}"
                             + (f"\n{cluster.logs()}" if cluster else ""))
    if p.returncode != 0:
        raise AssertionError(f"{what} exited {p.returncode}\n--- stdout ---\n{out}\n--- stderr ---\n{err}"
                             + (f"\n{cluster.logs()}" if cluster else ""))
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """Nodes 1 and 2, each in its own network namespace (one cluster per
    test module)."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    probe = _ip("netns", "add", f"vsci-py{os.getpid()}-probe", check=False)
    if probe.returncode != 0:
        pytest.skip(f"`ip netns add` is not permitted here: {probe.stderr.strip()}")
    _ip("netns", "del", f"vsci-py{os.getpid()}-probe", check=False)
    c = Cluster([1, 2], tmp_path)
    try:
        yield c
    finally:
        c.close()
