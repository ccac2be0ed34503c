"""Shared fixtures: a peer process on loopback, two engines of this process
joined by one connection, free ports, deadlines.

Run with Debian's interpreter and the build's package on the path:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import socket
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ferry  # noqa: E402  (a failing import must fail the suite, not skip it)
import peers  # noqa: E402

CALL_TIMEOUT = 60.0  # seconds a peer may take to answer one command
SPAWN = multiprocessing.get_context("spawn")


@contextlib.contextmanager
def engine_pair(**options):
    """Two engines of this process (ferry.Options fields as keywords) and one
    connection between them: yields (a, a's end, b, b's end); closes both."""
    a, b = ferry.Engine(**options), ferry.Engine(**options)
    try:
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("conn", a.accept(timeout=10)), name="pair-accept")
        t.start()
        cb = b.connect(a.address, timeout=10)
        t.join(10)
        assert "conn" in got, "the engine accepted no connection within 10 s"
        yield a, got["conn"], b, cb
    finally:
        b.close()
        a.close()


@pytest.fixture(params=["tcp", "local"])
def transport_pair(request):
    """engine_pair over each transport in turn (two engines of this process
    may use the local transport): yields (a, a's end, b, b's end)."""
    with engine_pair(transport=request.param, local_same_process=True) as p:
        assert p[1].transport_name == request.param
        yield p


class PeerError(Exception):
    """The peer process answered a command with an exception."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


class Peer:
    """A child process running peers.serve (or p2p_serve), driven over a pipe."""

    def __init__(self, target, *args) -> None:
        self.pipe, child = SPAWN.Pipe()
        self.proc = SPAWN.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()

    def expect(self, tag: str, timeout: float = CALL_TIMEOUT):
        if not self.pipe.poll(timeout):
            raise TimeoutError(f"peer sent no {tag!r} within {timeout} s (alive: {self.proc.is_alive()})")
        got = self.pipe.recv()
        if got[0] == "error":
            raise PeerError(got[1], got[2])
        assert got[0] == tag, got
        return got[1]

    def call(self, *cmd, timeout: float = CALL_TIMEOUT):
        """Sends a command and returns its result; raises PeerError for an exception there."""
        self.pipe.send(cmd)
        return self.expect("ok", timeout)

    def call_async(self, *cmd) -> None:
        """Sends a command without waiting; collect the answer with expect('ok')."""
        self.pipe.send(cmd)

    def stop(self) -> None:
        try:
            if self.proc.is_alive():
                self.pipe.send(("exit",))
                self.pipe.poll(5)
        except (BrokenPipeError, EOFError, OSError):
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.pipe.close()


class Link:
    """This process's engine connected to a peer process's engine."""

    def __init__(self, **options) -> None:
        self.peer = Peer(peers.serve, "127.0.0.1:0", options)
        address = self.peer.expect("address")
        self.engine = ferry.Engine(**options)
        self.conn = self.engine.connect(address, timeout=30)

    def close(self) -> None:
        self.peer.stop()
        self.engine.close()


@pytest.fixture(scope="module")
def link():
    """One peer process and connection shared by a test module."""
    lk = Link()
    yield lk
    lk.close()


@pytest.fixture
def fresh_link():
    """A peer process and connection of its own, for tests that break them."""
    lk = Link(peer_timeout=3)
    yield lk
    lk.close()


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


_port_lock = threading.Lock()


def free_base_port(span: int = 4) -> int:
    """A base port with `span` free ports from it, so concurrent runs do not collide."""
    with _port_lock:
        for _ in range(200):
            base = random.randrange(20000, 60000 - span)
            if all(_free(base + i) for i in range(span)):
                return base
    raise RuntimeError("no free port range found")


@pytest.fixture
def base_port(monkeypatch):
    """FERRY_P2P_BASE_PORT set to a free range for this test (and its children)."""
    port = free_base_port()
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", str(port))
    return port
