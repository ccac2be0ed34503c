"""ferry.p2p, the seed's era: ports and metadata, connect/accept, and the
two-sided calls (send/recv, sendv/recvv, send_async/recv_async/poll_async)
between this process and an endpoint in a child process.

The child (endpoint_peer) runs a real ferry.p2p.Endpoint and executes the
calls the test sends over a pipe, so both ends speak only UCCL's API. The
other test_p2p_*.py files drive it too (RemoteEndpoint). Data is random
bytes at odd sizes, checked byte for byte at the receiving end; every wait
has a deadline.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
import time
import traceback
from typing import NamedTuple

import numpy as np
import pytest

import ferry
from conftest import Peer, free_base_port
from ferry import p2p
from peers import make_data

WAIT = 30.0  # seconds: the deadline of every wait that should succeed


# ---- the peer process: a ferry.p2p Endpoint driven over a pipe ----------------------------


class Buf(NamedTuple):
    """In a call sent to the peer: the address of its array `name`, plus `offset`."""

    name: str
    offset: int = 0


def endpoint_peer(pipe, gpu_idx: int, num_cpus, env: dict) -> None:
    """Child process: Endpoint(gpu_idx, num_cpus) (today's Endpoint(local_gpu_idx=)
    when num_cpus is None); sends ("metadata", blob), then answers each
    (method, args, kwargs) with ("ok", result) or ("error", name, message).
    Besides Endpoint's methods: "array" (name, dtype, count, seed or None)
    allocates random (or zero) bytes and answers (address, nbytes); "bytes"
    (name) answers the array's bytes; "last_error" its class name;
    "transport" (conn_id) the ferry transport; "wait_done" (transfer_id)
    polls poll_async until done and answers its last (success, is_done);
    "serialized_descs" (names) register_memory()s the arrays (as tensors) and
    answers get_serialized_descs of them."""
    os.environ.update(env)
    from ferry import p2p as peer_p2p

    ep = peer_p2p.Endpoint(gpu_idx, num_cpus) if num_cpus is not None else peer_p2p.Endpoint(local_gpu_idx=gpu_idx)
    pipe.send(("metadata", ep.get_metadata()))
    arrays = {}

    def resolve(value):
        if isinstance(value, Buf):
            return arrays[value.name].ctypes.data + value.offset
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return value

    while pipe.poll(60):
        cmd, args, kwargs = (tuple(pipe.recv()) + ((), {}))[:3]
        try:
            if cmd == "exit":
                ep.close()
                pipe.send(("ok", None))
                return
            if cmd == "array":
                name, dtype, count, seed = args
                arrays[name] = make_data(dtype, count, seed) if seed is not None else np.zeros(count, dtype=dtype)
                result = (arrays[name].ctypes.data, arrays[name].nbytes)
            elif cmd == "bytes":
                result = arrays[args[0]].tobytes()
            elif cmd == "last_error":
                result = type(ep.last_error).__name__ if ep.last_error is not None else None
            elif cmd == "serialized_descs":
                import torch

                result = ep.get_serialized_descs(ep.register_memory([torch.from_numpy(arrays[n]) for n in args[0]]))
            elif cmd == "transport":
                result = ep.connection(args[0]).transport_name
            elif cmd == "wait_done":
                result, deadline = (True, False), time.monotonic() + WAIT
                while result == (True, False) and time.monotonic() < deadline:
                    result = ep.poll_async(args[0])
            else:
                result = getattr(ep, cmd)(*[resolve(a) for a in args], **{k: resolve(v) for k, v in kwargs.items()})
            pipe.send(("ok", result))
        except Exception as e:  # reported to the test, which decides
            pipe.send(("error", type(e).__name__, f"{e}\n{traceback.format_exc()}"))


class RemoteEndpoint:
    """endpoint_peer in a child process: call() runs a method there and
    returns its result; start() and result() split a blocking call."""

    def __init__(self, gpu_idx: int = 1, num_cpus=2, env: dict | None = None) -> None:
        self._peer = Peer(endpoint_peer, gpu_idx, num_cpus, dict(env or {}))
        self.metadata = self._peer.expect("metadata")

    def call(self, method: str, *args, **kwargs):
        return self._peer.call(method, args, kwargs)

    def start(self, method: str, *args, **kwargs) -> None:
        self._peer.call_async(method, args, kwargs)

    def result(self):
        return self._peer.expect("ok")

    def array(self, name: str, dtype: str, count: int, seed=None):
        return self.call("array", name, dtype, count, seed)

    def data(self, name: str) -> bytes:
        return self.call("bytes", name)

    def close(self) -> None:
        self._peer.stop()


def reg(ep: p2p.Endpoint, arr: np.ndarray) -> int:
    ok, mr_id = ep.reg(arr.ctypes.data, arr.nbytes)
    assert ok and mr_id > 0, ep.last_error
    return mr_id


def wait_done(ep: p2p.Endpoint, transfer_id: int):
    """poll_async until done or WAIT passes; returns the last (success, is_done)."""
    deadline = time.monotonic() + WAIT
    result = ep.poll_async(transfer_id)
    while result == (True, False) and time.monotonic() < deadline:
        result = ep.poll_async(transfer_id)
    return result


def connected(remote: RemoteEndpoint, ep: p2p.Endpoint, by_metadata: bool = True):
    """ep connects to remote, which accepts; returns (ep's conn_id, remote's conn_id)."""
    remote.start("accept", timeout=WAIT)
    if by_metadata:
        ok, conn_id = ep.connect(remote.metadata, timeout=WAIT)
    else:
        ip, port, gpu = p2p.Endpoint.parse_metadata(remote.metadata)
        ok, conn_id = ep.connect(remote_ip_addr=ip, remote_gpu_idx=gpu, remote_port=port, timeout=WAIT)
    assert ok, ep.last_error
    accepted, ip, gpu, remote_conn = remote.result()
    assert accepted and gpu == ep.local_gpu_idx and ip
    return conn_id, remote_conn


class Pair(NamedTuple):
    ep: p2p.Endpoint
    conn_id: int
    remote: RemoteEndpoint
    remote_conn: int


@pytest.fixture(scope="module")
def link():
    """This process's endpoint (GPU 0) connected to a child's (GPU 1), shared by the module."""
    remote, ep = RemoteEndpoint(gpu_idx=1), p2p.Endpoint(0, 2)
    conn_id, remote_conn = connected(remote, ep)
    yield Pair(ep, conn_id, remote, remote_conn)
    remote.close()
    ep.close()


@pytest.fixture
def fresh_link():
    """A link of its own, for tests that break it."""
    remote, ep = RemoteEndpoint(gpu_idx=1), p2p.Endpoint(0, 2)
    conn_id, remote_conn = connected(remote, ep)
    yield Pair(ep, conn_id, remote, remote_conn)
    remote.close()
    ep.close()


# ---- ports and metadata ------------------------------------------------------------------


def uccl_parse(meta: bytes):
    """The parser UCCL's own tests use: IPv4 or IPv6, port network order, GPU native int."""
    size = {10: 4, 22: 16}[len(meta)]
    ip = socket.inet_ntop(socket.AF_INET if size == 4 else socket.AF_INET6, meta[:size])
    return ip, struct.unpack("!H", meta[size:size + 2])[0], struct.unpack("i", meta[size + 2:size + 6])[0]


def test_metadata_has_uccl_layout(monkeypatch):
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", "0")
    with p2p.Endpoint(local_gpu_idx=7, num_cpus=1) as ep:
        meta = ep.get_endpoint_metadata()
        assert isinstance(meta, bytes) and len(meta) == 10
        assert uccl_parse(meta) == (p2p.get_oob_ip(), ep.port, 7)
        assert p2p.Endpoint.parse_metadata(meta) == uccl_parse(meta) == ep.parse_metadata(meta)
        assert ep.get_metadata() == meta
    with pytest.raises(RuntimeError, match="10 .* or 22"):
        p2p.Endpoint.parse_metadata(meta[:9])


def test_endpoints_of_one_gpu_share_a_host(monkeypatch, caplog):
    # UCCL derives the port from the GPU index, so a second endpoint of GPU 0
    # failed with "Address already in use". With base 0 ferry listens on a
    # free port from the start.
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", "0")
    with caplog.at_level(logging.WARNING, logger="ferry.p2p"):
        with p2p.Endpoint(0, 1) as first, p2p.Endpoint(0, 1) as second:
            assert first.port != second.port and 0 not in (first.port, second.port)
            assert p2p.Endpoint.parse_metadata(second.get_metadata())[1] == second.port
            ok, conn_id = second.connect(first.get_metadata(), timeout=5)
            assert ok and first.accept(timeout=5)[:3] == (True, p2p.get_oob_ip(), 0)
    assert "cannot listen" not in caplog.text


def test_base_port_defaults_to_uccls_and_falls_back(monkeypatch, caplog):
    monkeypatch.delenv("FERRY_P2P_BASE_PORT", raising=False)
    assert p2p.base_port() == 19800 and p2p.derived_port(2) == 19802
    base = free_base_port()
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", str(base))
    assert p2p.base_port() == base and p2p.derived_port(3) == base + 3
    with caplog.at_level(logging.WARNING, logger="ferry.p2p"):
        with p2p.Endpoint(0, 1) as first, p2p.Endpoint(0, 1) as second:
            assert first.port == base and second.port != base and "cannot listen" in caplog.text
            assert p2p.Endpoint.parse_metadata(second.get_metadata())[1] == second.port
            # Without remote_port, connect dials the derived port: the first endpoint.
            assert second.connect("127.0.0.1", 0, timeout=5)[0]
            assert first.accept(timeout=5)[0]
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", "http")
    with pytest.raises(ValueError, match="FERRY_P2P_BASE_PORT"):
        p2p.base_port()


def test_connect_without_a_port_to_derive_fails_at_once(monkeypatch):
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", "0")
    with p2p.Endpoint(0, 1) as ep:
        start = time.monotonic()
        assert ep.connect("127.0.0.1", remote_gpu_idx=1) == (False, 0)
        assert time.monotonic() - start < 2
        assert isinstance(ep.last_error, ferry.InvalidArgument) and "FERRY_P2P_BASE_PORT" in str(ep.last_error)


def threads_named(prefix: str) -> int:
    """Threads of this process whose name starts with `prefix`."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().startswith(prefix)
        except OSError:  # a thread that ended meanwhile
            pass
    return n


def test_constructor_arguments():
    with p2p.Endpoint(local_gpu_idx=2, num_cpus=4) as ep:
        # num_cpus counts threads, as in UCCL; the streams stay ferry's choice.
        assert ep.local_gpu_idx == 2 and ep.engine.options.workers == 4
        assert ep.engine.options.streams == ferry.Options().streams
        assert ep.engine.options.listen.startswith("0.0.0.0:")
    before = threads_named("ferry-rx-any-"), threads_named("ferry-tx-any-")
    with p2p.Endpoint(local_gpu_idx=0, num_cpus=3):
        deadline = time.monotonic() + 5  # a worker names itself once it runs
        while ((threads_named("ferry-rx-any-") < before[0] + 3 or threads_named("ferry-tx-any-") < before[1] + 3)
               and time.monotonic() < deadline):
            time.sleep(0.001)
        assert threads_named("ferry-rx-any-") == before[0] + 3
        assert threads_named("ferry-tx-any-") == before[1] + 3
    with p2p.Endpoint(local_gpu_idx=0, num_cpus=1000) as ep:
        assert ep.engine.options.workers == p2p.MAX_WORKERS
    with pytest.raises(ValueError):
        p2p.Endpoint(local_gpu_idx=-1, num_cpus=1)
    with pytest.raises(TypeError):
        p2p.Endpoint(local_gpu_idx="0", num_cpus=1)


def test_connect_to_itself_is_refused():
    with p2p.Endpoint(1, 1) as ep:
        assert ep.connect(ep.get_metadata(), timeout=5) == (False, 0)
        assert isinstance(ep.last_error, ferry.Unavailable) and "itself" in str(ep.last_error)


def test_connect_to_nobody_fails_after_retrying():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with p2p.Endpoint(0, 1) as ep:
            start = time.monotonic()
            assert ep.connect("127.0.0.1", 3, remote_port=port, timeout=0.5) == (False, 0)
            assert isinstance(ep.last_error, ferry.Unavailable)
            assert 0.3 < time.monotonic() - start < 5


def test_accept_timeout_returns_failure():
    with p2p.Endpoint(0, 1) as ep:
        assert ep.accept(timeout=0.2) == (False, "", -1, 0)
        assert isinstance(ep.last_error, ferry.DeadlineExceeded)


def test_accept_drops_peers_that_are_not_endpoints():
    with p2p.Endpoint(0, 1) as ep, ferry.Engine() as plain:
        conn = plain.connect(f"127.0.0.1:{ep.port}", timeout=5)
        conn.notify(b"hello, I am not an endpoint", timeout=5)
        assert ep.accept(timeout=1.0)[0] is False  # dropped, then no one else came
        deadline = time.monotonic() + 10
        while conn.health().ok() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not conn.health().ok()


def test_exit_while_accepting_is_clean():
    # The accept thread is stopped at exit: finalization catching it inside a
    # ferry call would unwind C++ frames and abort the process (exit 134).
    program = "from ferry import p2p\nep = p2p.Endpoint(0, 1)\nassert ep.accept(timeout=0.2)[0] is False\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=WAIT)
    assert done.returncode == 0, done.stderr.decode()


# ---- two-sided transfers between two processes ----------------------------------------------


@pytest.mark.parametrize("by_metadata", [True, False], ids=["connect(metadata)", "connect(ip,gpu,port)"])
def test_both_connect_forms(by_metadata):
    remote, ep = RemoteEndpoint(gpu_idx=1), p2p.Endpoint(0, 1)
    try:
        conn_id, remote_conn = connected(remote, ep, by_metadata)
        remote.array("in", "uint8", 4097, None)
        remote.start("recv", remote_conn, remote.call("reg", Buf("in"), 4097)[1], Buf("in"), 4097, timeout=WAIT)
        data = make_data("uint8", 4097, 1)
        assert ep.send(conn_id, reg(ep, data), data.ctypes.data, data.nbytes, timeout=WAIT) is True
        assert remote.result() is True and remote.data("in") == data.tobytes()
    finally:
        remote.close()
        ep.close()


@pytest.mark.parametrize("dtype,count", [("float32", 1024), ("uint8", 1), ("int64", 70001), ("float16", 1_000_003)])
def test_send_recv_both_ways(link, dtype, count):
    ep, conn_id, remote, remote_conn = link
    remote.array("in", dtype, count, None)
    _, remote_mr = remote.call("reg", Buf("in"), np.dtype(dtype).itemsize * count)
    remote.start("recv", remote_conn, remote_mr, Buf("in"), np.dtype(dtype).itemsize * count, timeout=WAIT)
    data = make_data(dtype, count, 60)
    assert ep.send(conn_id=conn_id, mr_id=reg(ep, data), ptr=data.ctypes.data, size=data.nbytes) is True
    assert remote.result() is True and remote.data("in") == data.tobytes()
    # And back over the same connection (ferry connections are bidirectional).
    _, nbytes = remote.array("out", dtype, count, 61)
    _, out_mr = remote.call("reg", Buf("out"), nbytes)
    remote.start("send", remote_conn, out_mr, Buf("out"), nbytes, timeout=WAIT)
    got = np.zeros(count, dtype=dtype)
    assert ep.recv(conn_id=conn_id, mr_id=reg(ep, got), ptr=got.ctypes.data, size=got.nbytes, timeout=WAIT) is True
    assert remote.result() is True and got.tobytes() == make_data(dtype, count, 61).tobytes()


def test_recv_size_is_a_capacity(link):
    ep, conn_id, remote, remote_conn = link
    got = np.zeros(4096, dtype=np.uint8)
    got_mr = reg(ep, got)
    # UCCL's test_engine_metadata.py receives 4096 bytes with size=8192, twice
    # its registered buffer: the message lands and recv succeeds.
    _, n = remote.array("m1", "uint8", 4096, 70)
    remote.start("send", remote_conn, remote.call("reg", Buf("m1"), n)[1], Buf("m1"), n, timeout=WAIT)
    assert ep.recv(conn_id, got_mr, got.ctypes.data, size=8192, timeout=WAIT) is True
    assert remote.result() is True and got.tobytes() == make_data("uint8", 4096, 70).tobytes()
    # A shorter message than `size` lands too, and leaves the rest alone.
    got[:] = 0xAB
    _, n = remote.array("m2", "uint8", 61, 71)
    remote.start("send", remote_conn, remote.call("reg", Buf("m2"), n)[1], Buf("m2"), n, timeout=WAIT)
    assert ep.recv(conn_id, got_mr, got.ctypes.data + 3, 1000, timeout=WAIT) is True
    assert remote.result() is True
    assert got[3:64].tobytes() == make_data("uint8", 61, 71).tobytes() and (got[64:] == 0xAB).all()
    # recv_async too.
    _, n = remote.array("m3", "uint8", 999, 72)
    ok, tid = ep.recv_async(conn_id, got_mr, got.ctypes.data, 4096)
    assert ok
    remote.start("send", remote_conn, remote.call("reg", Buf("m3"), n)[1], Buf("m3"), n, timeout=WAIT)
    assert wait_done(ep, tid) == (True, True) and remote.result() is True
    assert got[:999].tobytes() == make_data("uint8", 999, 72).tobytes()


def test_a_longer_message_fails_both_sides(fresh_link):
    ep, conn_id, remote, remote_conn = fresh_link
    remote.array("small", "uint8", 10)
    remote.start("recv", remote_conn, remote.call("reg", Buf("small"), 10)[1], Buf("small"), 10, timeout=WAIT)
    data = make_data("uint8", 60, 73)
    assert ep.send(conn_id, reg(ep, data), data.ctypes.data, 60, timeout=WAIT) is False
    assert isinstance(ep.last_error, ferry.BufferTooSmall)
    assert remote.result() is False and remote.call("last_error") == "BufferTooSmall"
    assert remote.data("small") == bytes(10)  # nothing of it landed


def test_sendv_recvv(link):
    ep, conn_id, remote, remote_conn = link
    specs = [("float32", 513), ("uint8", 70001), ("int16", 3)]
    names = [f"v{i}" for i in range(len(specs))]
    sizes = [remote.array(n, d, c)[1] for n, (d, c) in zip(names, specs)]
    remote_mrs = [remote.call("reg", Buf(n), s)[1] for n, s in zip(names, sizes)]
    remote.start("recvv", remote_conn, remote_mrs, [Buf(n) for n in names], sizes, len(specs), timeout=WAIT)
    arrs = [make_data(d, c, 80 + i) for i, (d, c) in enumerate(specs)]
    assert ep.sendv(conn_id=conn_id, mr_id_v=[reg(ep, a) for a in arrs], data_ptr_v=[a.ctypes.data for a in arrs],
                    size_v=[a.nbytes for a in arrs], num_iovs=len(arrs), timeout=WAIT) is True
    assert remote.result() is True
    assert [remote.data(n) for n in names] == [a.tobytes() for a in arrs]
    # The other way, scattered over local pieces.
    names = [f"w{i}" for i in range(len(specs))]
    sizes = [remote.array(n, d, c, 90 + i)[1] for i, (n, (d, c)) in enumerate(zip(names, specs))]
    remote_mrs = [remote.call("reg", Buf(n), s)[1] for n, s in zip(names, sizes)]
    remote.start("sendv", remote_conn, remote_mrs, [Buf(n) for n in names], sizes, len(specs), timeout=WAIT)
    outs = [np.zeros(c, dtype=d) for d, c in specs]
    assert ep.recvv(conn_id, [reg(ep, o) for o in outs], [o.ctypes.data for o in outs], [o.nbytes for o in outs],
                    len(outs), timeout=WAIT) is True
    assert remote.result() is True
    assert [o.tobytes() for o in outs] == [make_data(d, c, 90 + i).tobytes() for i, (d, c) in enumerate(specs)]


def test_async_sends_and_poll(link):
    ep, conn_id, remote, remote_conn = link
    counts = [1, 1001, 2047, 3_000_001]
    tids = []
    for i, c in enumerate(counts):
        _, n = remote.array(f"a{i}", "uint8", c)
        ok, tid = remote.call("recv_async", remote_conn, remote.call("reg", Buf(f"a{i}"), n)[1], Buf(f"a{i}"), n)
        assert ok
        tids.append(tid)
    arrs = [make_data("uint8", c, 100 + i) for i, c in enumerate(counts)]
    mine = []
    for a in arrs:
        ok, tid = ep.send_async(conn_id, reg(ep, a), a.ctypes.data, a.nbytes)
        assert ok
        mine.append(tid)
    assert len(set(mine)) == len(mine)
    assert [wait_done(ep, t) for t in mine] == [(True, True)] * len(mine)
    assert ep.poll_async(mine[0]) == (False, False)  # reported done once, then forgotten
    assert [remote.call("wait_done", t) for t in tids] == [(True, True)] * len(tids)
    assert [remote.data(f"a{i}") for i in range(len(counts))] == [a.tobytes() for a in arrs]


def test_async_receive_waits_for_the_message(link):
    ep, conn_id, remote, remote_conn = link
    got = np.zeros(250_001, dtype=np.uint8)
    ok, tid = ep.recv_async(conn_id, reg(ep, got), got.ctypes.data, got.nbytes)
    assert ok and ep.poll_async(tid) == (True, False)  # nothing sent yet
    _, n = remote.array("late", "uint8", 250_001, 110)
    assert remote.call("send", remote_conn, remote.call("reg", Buf("late"), n)[1], Buf("late"), n, timeout=WAIT)
    assert wait_done(ep, tid) == (True, True)
    assert got.tobytes() == make_data("uint8", 250_001, 110).tobytes()


def test_bad_input_returns_failure(link, caplog):
    ep, conn_id, _, _ = link
    arr = make_data("uint8", 4096, 120)
    mr_id = reg(ep, arr)
    with caplog.at_level(logging.WARNING, logger="ferry.p2p"):
        assert ep.send(conn_id, 987654, arr.ctypes.data, arr.nbytes) is False
        assert isinstance(ep.last_error, ferry.NotFound) and "mr_id 987654" in str(ep.last_error)
        assert ep.send(conn_id, mr_id, arr.ctypes.data + 1, arr.nbytes) is False
        assert isinstance(ep.last_error, ferry.OutOfRange)
        assert ep.send_async(conn_id, mr_id, arr.ctypes.data - 8, 16) == (False, 0)
        assert isinstance(ep.last_error, ferry.OutOfRange)
        assert ep.recv(conn_id, mr_id, arr.ctypes.data + arr.nbytes + 1, 16) is False  # outside the region
        assert isinstance(ep.last_error, ferry.OutOfRange)
        assert ep.send(424242, mr_id, arr.ctypes.data, arr.nbytes) is False
        assert isinstance(ep.last_error, ferry.NotFound) and "conn_id 424242" in str(ep.last_error)
        assert ep.sendv(conn_id, [mr_id], [arr.ctypes.data], [16], 2) is False
        assert isinstance(ep.last_error, ferry.InvalidArgument)
        assert ep.poll_async(31337) == (False, False)
        assert ep.reg(arr.ctypes.data, 0) == (False, 0)
        assert isinstance(ep.last_error, ferry.InvalidArgument)
        assert ep.dereg(987654) is False
    assert "p2p send failed: NotFound" in caplog.text
    with pytest.raises(TypeError):
        ep.send(conn_id, mr_id, "not a pointer", 16)


def test_closed_connection(fresh_link):
    ep, conn_id, _, _ = fresh_link
    arr = make_data("uint8", 64, 130)
    mr_id = reg(ep, arr)
    assert ep.close_connection(conn_id) is True
    assert ep.send(conn_id, mr_id, arr.ctypes.data, 64) is False
    assert isinstance(ep.last_error, ferry.NotFound)
    assert ep.close_connection(conn_id) is False


def test_reg_dereg_and_regv():
    with p2p.Endpoint(0, 1) as ep:
        arr = np.zeros(100, dtype=np.uint8)
        ok1, a = ep.reg(arr.ctypes.data, 100)
        ok2, b = ep.reg(ptr=arr.ctypes.data, size=100)
        assert ok1 and ok2 and a == b  # registrations of one range are counted
        assert ep.dereg(a) is True and ep.dereg(a) is True and ep.dereg(a) is False
        others = [np.zeros(n, dtype=np.uint8) for n in (7, 4099)]
        ok, mr_ids = ep.regv(ptrs=[o.ctypes.data for o in others], sizes=[o.nbytes for o in others])
        assert ok and len(set(mr_ids)) == 2 and all(ep.dereg(m) for m in mr_ids)
        # All or none: the second fails (size 0), so the first is dropped again.
        assert ep.regv([others[0].ctypes.data, others[1].ctypes.data], [7, 0]) == (False, [])
        assert ep._regions == {}
        with pytest.raises(RuntimeError, match="must match"):
            ep.regv([others[0].ctypes.data], [1, 2])


def test_peer_gone(fresh_link):
    ep, conn_id, remote, _ = fresh_link
    arr = make_data("uint8", 64, 140)
    mr_id = reg(ep, arr)
    ok, tid = ep.recv_async(conn_id, mr_id, arr.ctypes.data, 64)
    assert ok
    remote.close()  # the peer process exits; its engine closes the connection
    assert wait_done(ep, tid) == (False, True)
    assert isinstance(ep.last_error, (ferry.PeerLost, ferry.Cancelled))
    assert ep.send(conn_id, mr_id, arr.ctypes.data, 64, timeout=WAIT) is False
    assert isinstance(ep.last_error, (ferry.PeerLost, ferry.Cancelled))
