"""ferry.mooncake: Mooncake's TransferEngine Python API, between two processes.

This process is the initiator (a TransferEngine of its own); mooncake_peer.py,
started as a child, is the target: it registers buffers on command and hands
back their bytes, so every transfer is verified end to end with random data,
odd sizes and odd offsets, including the bytes around the target range.

Written from Mooncake's documented API: 0 / negative returns, batch ids,
transfer_check_status 1 / 0 / -1 / -2, get_notifies() objects with .name and
.msg. The hostile-peer tests speak the facade's wire format
(ferry/_mooncake_wire.py) from a plain ferry.Engine.

MC_TRANSFER_TIMEOUT is small here (TIMEOUT_S), so a failure shows quickly.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
import pytest

import ferry
from ferry import _mooncake_wire as wire
from ferry.mooncake import TransferEngine, TransferNotify, TransferOpcode

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_PROGRAM = os.path.join(HERE, "mooncake_peer.py")
TIMEOUT_S = 3.0  # MC_TRANSFER_TIMEOUT of the engines here, where a failure must come quickly
QUICK_TIMEOUT_S = 1.0  # ... and of those that wait for failures
MARGIN_S = 2.0  # what a failure may take past TIMEOUT_S (a loaded 2-core machine)
WAIT_S = 30.0  # the deadline of every wait that should succeed
KiB, MiB = 1 << 10, 1 << 20
BLOCK16 = 16 * KiB  # SGLang's KV block


# ---- the peer process ----------------------------------------------------------


class McPeer:
    """mooncake_peer.py as a child process; every read of its output has a deadline."""

    def __init__(self, *args: str, env: dict | None = None, timeout: float = WAIT_S) -> None:
        full = dict(os.environ)
        full["MC_TRANSFER_TIMEOUT"] = str(TIMEOUT_S)
        package = os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__)))
        full["PYTHONPATH"] = os.pathsep.join([package, full.get("PYTHONPATH", "")])
        full.update(env or {})
        self.proc = subprocess.Popen([sys.executable, PEER_PROGRAM, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=full)
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        self._pending = bytearray()
        try:
            hello = self._line(timeout)
        except BaseException:
            self.kill()
            raise
        if "error" in hello:
            self.kill()
            raise RuntimeError(f"mooncake_peer did not start: {hello['error']}")
        self.session: str = hello["session"]
        self.port: int = hello["port"]

    def _line(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        start = 0
        while True:
            at = self._pending.find(b"\n", start)
            if at >= 0:
                line = bytes(self._pending[:at])
                del self._pending[:at + 1]
                return json.loads(line)
            start = len(self._pending)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"mooncake_peer sent no answer within {timeout} s (exit code {self.proc.poll()})")
            if select.select([self._out], [], [], left)[0]:
                chunk = os.read(self._out, 1 << 20)
                if not chunk:
                    raise EOFError(f"mooncake_peer closed its output (exit code {self.proc.poll()})")
                self._pending += chunk

    def send(self, *cmd) -> None:
        """Sends a command without waiting for its answer (take it with reply())."""
        data = memoryview((json.dumps(cmd) + "\n").encode())
        deadline = time.monotonic() + WAIT_S
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"mooncake_peer took no command within {WAIT_S} s")
            if select.select([], [self._in], [], left)[1]:
                data = data[os.write(self._in, data):]

    def reply(self, timeout: float = WAIT_S):
        got = self._line(timeout)
        if "error" in got:
            raise AssertionError(f"mooncake_peer: {got['error']}")
        return got["ok"]

    def call(self, *cmd, timeout: float = WAIT_S):
        self.send(*cmd)
        return self.reply(timeout)

    # The commands of mooncake_peer.py.
    def alloc(self, n: int, seed: int | None = None, register: bool = True) -> int:
        return self.call("alloc", n, seed, register)

    def get(self, addr: int, n: int) -> bytes:
        return base64.b64decode(self.call("get", addr, n))

    def put(self, addr: int, data: bytes) -> None:
        self.call("put", addr, base64.b64encode(data).decode())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("exit", timeout=10)
                self.proc.wait(10)
            except (OSError, TimeoutError, EOFError, subprocess.TimeoutExpired):
                pass
        self.kill()


def random_bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, n, dtype=np.uint8)


def seeded(*parts) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def new_engine(*, timeout: float = TIMEOUT_S, tcp: bool = False,
               hostname: str = "127.0.0.1", metadata: str = "P2PHANDSHAKE") -> TransferEngine:
    """An initialized TransferEngine with MC_TRANSFER_TIMEOUT=`timeout` (and
    FERRY_TRANSPORT=tcp with `tcp`: two engines of this process that talk to
    each other need it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MC_TRANSFER_TIMEOUT", str(timeout))
        if tcp:
            mp.setenv("FERRY_TRANSPORT", "tcp")
        engine = TransferEngine()
        rc = engine.initialize(hostname, metadata, "tcp", "")
    assert rc == 0, f"initialize returned {rc}: {engine.last_error}"
    return engine


class Local:
    """A registered host buffer of random bytes in an initiator engine."""

    def __init__(self, engine: TransferEngine, n: int, rng: np.random.Generator | None = None,
                 register: bool = True) -> None:
        self.engine = engine
        self.array = random_bytes(rng, n) if rng is not None else np.zeros(n, dtype=np.uint8)
        self.addr = self.array.ctypes.data
        self.n = n
        self.registered = register and engine.register_memory(self.addr, n) == 0
        assert self.registered or not register, f"register_memory failed: {engine.last_error}"

    def close(self) -> None:
        if self.registered:
            assert self.engine.unregister_memory(self.addr) == 0, self.engine.last_error
            self.registered = False


# ---- fixtures --------------------------------------------------------------------


@pytest.fixture(scope="module")
def peer():
    """The target process shared by the tests that leave it working."""
    p = McPeer()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def engine():
    """The initiator shared by the tests that leave it working."""
    e = new_engine()
    yield e
    e.close()


@pytest.fixture(scope="module")
def pool(engine):
    """8 MiB of random bytes registered in `engine`: the source of writes."""
    lb = Local(engine, 8 * MiB, np.random.default_rng(1))
    yield lb
    lb.close()


@pytest.fixture(scope="module")
def quick():
    """An initiator with MC_TRANSFER_TIMEOUT=QUICK_TIMEOUT_S, and a 1 MiB source
    pool, for tests that wait for failures (a connection refused is retried
    until the timeout)."""
    e = new_engine(timeout=QUICK_TIMEOUT_S)
    lb = Local(e, 1 * MiB, np.random.default_rng(4))
    yield e, lb
    e.close()


class Target:
    """A buffer in the peer and what it must hold; check() compares all of it."""

    def __init__(self, peer: McPeer, n: int, seed: int | None = 0, register: bool = True) -> None:
        self.peer = peer
        self.n = n
        self.addr = peer.alloc(n, seed, register)
        self.want = bytearray(np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
                              if seed is not None else bytes(n))

    def expect(self, offset: int, data) -> None:
        self.want[offset:offset + len(data)] = bytes(data)

    def check(self, what: str) -> None:
        if self.peer.call("sha256", self.addr, self.n) == hashlib.sha256(self.want).hexdigest():
            return
        got = self.peer.get(self.addr, self.n)
        if got != bytes(self.want):
            diff = np.flatnonzero(np.frombuffer(got, np.uint8) != np.frombuffer(bytes(self.want), np.uint8))
            raise AssertionError(f"{what}: target bytes differ at {len(diff)} offsets, first {diff[:8].tolist()} "
                                 f"of [0, {self.n})")

    def free(self) -> None:
        self.peer.call("free", self.addr)


@pytest.fixture
def target(peer):
    made = []

    def make(n: int, seed: int | None = 0) -> Target:
        t = Target(peer, n, seed)
        made.append(t)
        return t

    yield make
    for t in made:
        t.free()


def poll_status(engine: TransferEngine, batch_id: int, deadline_s: float = WAIT_S) -> tuple:
    """transfer_check_status until it is not 0: (final status, polls that said 0)."""
    deadline = time.monotonic() + deadline_s
    waiting = 0
    while True:
        status = engine.transfer_check_status(batch_id)
        if status != 0:
            return status, waiting
        waiting += 1
        assert time.monotonic() < deadline, f"batch {batch_id} still in progress after {deadline_s} s"
        time.sleep(0.001)


def place(rng: np.random.Generator, sizes, space: int) -> list:
    """Offsets for `sizes` in [0, space): not overlapping, random gaps, random order."""
    order = rng.permutation(len(sizes))
    slack = space - sum(sizes)
    assert slack >= 0
    cuts = np.sort(rng.integers(0, slack + 1, len(sizes)))
    offsets = [0] * len(sizes)
    used = 0
    for k, i in enumerate(order):
        offsets[i] = int(cuts[k]) + used  # past the end of the one placed before
        used += sizes[i]
    return offsets


def collect_notifies(peer: McPeer, count: int, timeout: float = WAIT_S) -> list:
    """The peer's get_notifies() until `count` arrived (or the deadline)."""
    deadline = time.monotonic() + timeout
    got = []
    while True:
        got += peer.call("notifies")
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.002)


def session_of(peer: McPeer) -> str:
    """How Mooncake's documentation names a P2PHANDSHAKE peer: host:rpc_port."""
    return f"127.0.0.1:{peer.port}"


@pytest.fixture(scope="module", params=["auto", "tcp"])
def side(request, engine, pool):
    """The initiator and its source pool: the shared engine (the same-host
    transport to the peer process), or one forced to TCP."""
    if request.param == "auto":
        return engine, pool
    e = new_engine(tcp=True)
    lb = Local(e, 8 * MiB, np.random.default_rng(2))
    request.addfinalizer(e.close)
    return e, lb


# ---- initialize ------------------------------------------------------------------


def test_initialize_gives_an_rpc_port_and_refuses_a_second_time(peer, target):
    assert peer.session == session_of(peer), "the peer's session id is host:get_rpc_port()"
    e = TransferEngine()
    try:
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, e.last_error
        port = e.get_rpc_port()
        assert 0 < port < 65536
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the engine listens on its rpc port
        assert e.session_id == f"127.0.0.1:{port}"
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") < 0, "a second initialize must fail"
        assert e.get_rpc_port() == port
        # ... and the engine goes on working.
        rng = seeded("init")
        lb = Local(e, 1000, rng)
        t = target(1000, seed=5)
        assert e.transfer_sync_write(session_of(peer), lb.addr, t.addr + 1, 999) == 0, e.last_error
        t.expect(1, lb.array[:999])
        t.check("write after a refused second initialize")
    finally:
        e.close()


@pytest.mark.parametrize("protocol, metadata", [("bogus", "P2PHANDSHAKE"), ("efa", "P2PHANDSHAKE"),
                                                ("tcp", "consul://127.0.0.1:8500")])
def test_initialize_refuses_what_it_cannot_do(protocol, metadata):
    e = TransferEngine()
    try:
        assert e.initialize("127.0.0.1", metadata, protocol, "") < 0, f"protocol {protocol!r}, {metadata!r}"
        # Nothing was started: transfers fail with a negative return, not an exception ...
        assert e.transfer_sync_write("127.0.0.1:1", 4096, 4096, 1) < 0
        # ... and a correct initialize still works.
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0, e.last_error
        assert e.get_rpc_port() > 0
    finally:
        e.close()


def closed_port() -> int:
    with socket.socket() as s:  # bound, never listening
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_send_probe(quick, peer):
    e, _ = quick
    assert e.send_probe(session_of(peer)) == 0, e.last_error
    start = time.monotonic()
    assert e.send_probe(f"127.0.0.1:{closed_port()}") != 0
    assert time.monotonic() - start < QUICK_TIMEOUT_S + MARGIN_S


# ---- one buffer --------------------------------------------------------------------

SIZES = [1, 13, 4097, 65_537, 1 * MiB + 3, 3 * MiB + 5]


@pytest.mark.parametrize("size", SIZES)
def test_transfer_sync_write(side, peer, target, size):
    e, lb = side
    rng = seeded("write", size)
    t = target(size + 64, seed=size)
    src = int(rng.integers(0, lb.n - size)) | 1  # odd offsets on both sides
    dst = int(rng.integers(0, 32)) * 2 + 1
    assert e.transfer_sync_write(session_of(peer), lb.addr + src, t.addr + dst, size) == 0, e.last_error
    t.expect(dst, lb.array[src:src + size])
    t.check(f"transfer_sync_write of {size} bytes")


@pytest.mark.parametrize("size", SIZES)
def test_transfer_sync_read(side, peer, target, size):
    e, _ = side
    rng = seeded("read", size)
    t = target(size + 64, seed=size + 1)
    out = Local(e, size + 100, rng)
    before = out.array.copy()
    src = int(rng.integers(0, 32)) * 2 + 1
    dst = 7
    try:
        assert e.transfer_sync_read(session_of(peer), out.addr + dst, t.addr + src, size) == 0, e.last_error
        want = before.copy()
        want[dst:dst + size] = np.frombuffer(bytes(t.want[src:src + size]), np.uint8)
        assert np.array_equal(out.array, want), f"transfer_sync_read of {size} bytes: the local buffer differs"
        t.check("the source of a read")
    finally:
        out.close()


def test_transfer_sync_write_notify_arrives_after_the_data(side, peer, target):
    e, _ = side
    rng = seeded("notify-write")
    n = 32 * MiB + 1  # long enough that a notify sent before the write ended is seen while it runs
    src = Local(e, n, rng)
    t = target(n + 64, seed=3)
    name, msg = f"kv-{rng.integers(1 << 30)}", f"request {rng.integers(1 << 30)} done"
    try:
        # The target takes the last bytes of the range as soon as it sees the notification.
        peer.send("wait_notifies", WAIT_S, t.addr + 33 + n - 64, 64, None)
        rc = e.transfer_sync(session_of(peer), src.addr, t.addr + 33, n, TransferOpcode.WRITE,
                             TransferNotify(name, msg))
        assert rc == 0, e.last_error
        notes, snapshot = peer.reply()
        assert notes == [[name, msg]], "the target's get_notifies() yields the notification once"
        in_place = base64.b64decode(snapshot) == src.array[-64:].tobytes()
        assert in_place, "the data was not all in place when the notification was seen"
        t.expect(33, src.array)
        t.check("write with notify")
    finally:
        src.close()


def test_transfer_sync_read_notify_arrives_after_the_read(side, peer, target):
    e, _ = side
    rng = seeded("notify-read")
    n = 32 * MiB  # long enough that a notify sent with the read (not after it) is seen while it runs
    t = target(n, seed=4)
    out = Local(e, n)
    fresh = random_bytes(rng, 64).tobytes()
    name, msg = "read-done", f"{rng.integers(1 << 30)}"
    try:
        # The target overwrites the end of its buffer as soon as it sees the
        # notification: the read must have taken the old bytes by then.
        peer.send("wait_notifies", WAIT_S, t.addr + n - 64, 64, base64.b64encode(fresh).decode())
        rc = e.transfer_sync(session_of(peer), out.addr, t.addr, n, TransferOpcode.READ, TransferNotify(name, msg))
        assert rc == 0, e.last_error
        notes, _ = peer.reply()
        assert notes == [[name, msg]]
        early = out.array[-64:].tobytes() == fresh
        assert not early, "the read saw what the target wrote after the notification: it came before the read ended"
        assert out.array.tobytes() == bytes(t.want), "the read did not bring the target's bytes"
    finally:
        out.close()


def test_notifies_come_in_order_with_any_text(engine, pool, peer, target):
    t = target(4096, seed=6)
    out = Local(engine, 4096)
    sent = [TransferNotify("ñame ✓", ""), TransferNotify("", "only a message"),
            TransferNotify("third", "x" * 1000)]
    try:
        for i, note in enumerate(sent):
            opcode = TransferOpcode.READ if i == 1 else TransferOpcode.WRITE
            local = out.addr if i == 1 else pool.addr
            assert engine.transfer_sync(session_of(peer), local, t.addr + i, 100, opcode, note) == 0, engine.last_error
        got = collect_notifies(peer, len(sent))
        assert got == [[n.name, n.msg] for n in sent]
        assert engine.get_notifies() == []  # the initiator got none ...
        assert peer.call("notifies") == []  # ... and the target's were taken once
    finally:
        out.close()


def test_submit_write_and_check_status(engine, pool, peer, target):
    rng = seeded("submit")
    t = target(4 * MiB, seed=7)
    sizes = [1, 70_001, 2 * MiB + 1]
    dsts = place(rng, sizes, t.n)
    ids = []
    for size, dst in zip(sizes, dsts):
        src = int(rng.integers(0, pool.n - size))
        batch_id = engine.transfer_submit_write(session_of(peer), pool.addr + src, t.addr + dst, size)
        assert batch_id > 0, f"transfer_submit_write returned {batch_id}: {engine.last_error}"
        ids.append(batch_id)
        t.expect(dst, pool.array[src:src + size])
    assert len(set(ids)) == len(ids), f"batch ids {ids} are not distinct"
    for batch_id in ids:
        status, _ = poll_status(engine, batch_id)
        assert status == 1, f"batch {batch_id}: status {status}: {engine.last_error}"
    t.check("submitted writes")
    assert engine.transfer_check_status(987_654_321) == -1, "an unknown batch id is -1"


# ---- batches ---------------------------------------------------------------------

BATCHES = {
    "1": [3 * MiB + 1],
    "7": [1, 3, 4099, 65_537, 1 * MiB + 7, 2 * MiB + 1, 13],
    "256x16KiB": [16 * KiB] * 256,  # SGLang: KV blocks at scattered places of a pool
}


def batch_layout(rng, sizes, local_n, remote_n):
    if len(set(sizes)) == 1 and len(sizes) > 1:  # equal blocks at distinct random block slots
        block = sizes[0]
        local = (rng.choice(local_n // block, len(sizes), replace=False) * block).tolist()
        remote = (rng.choice(remote_n // block, len(sizes), replace=False) * block).tolist()
        return local, remote
    return place(rng, sizes, local_n), place(rng, sizes, remote_n)


@pytest.mark.parametrize("shape", BATCHES)
def test_batch_transfer_sync_write(side, peer, target, shape):
    e, lb = side
    sizes = BATCHES[shape]
    rng = seeded("batch-write", shape)
    t = target(8 * MiB, seed=8)
    local, remote = batch_layout(rng, sizes, lb.n, t.n)
    rc = e.batch_transfer_sync_write(session_of(peer), [lb.addr + o for o in local], [t.addr + o for o in remote],
                                     sizes)
    assert rc == 0, e.last_error
    for lo, ro, s in zip(local, remote, sizes):
        t.expect(ro, lb.array[lo:lo + s])
    t.check(f"batch write {shape}")


@pytest.mark.parametrize("shape", BATCHES)
def test_batch_transfer_sync_read(side, peer, target, shape):
    e, _ = side
    sizes = BATCHES[shape]
    rng = seeded("batch-read", shape)
    t = target(8 * MiB, seed=9)
    out = Local(e, 8 * MiB)
    local, remote = batch_layout(rng, sizes, out.n, t.n)
    try:
        rc = e.batch_transfer_sync_read(session_of(peer), [out.addr + o for o in local],
                                        [t.addr + o for o in remote], sizes)
        assert rc == 0, e.last_error
        want = bytearray(out.n)
        for lo, ro, s in zip(local, remote, sizes):
            want[lo:lo + s] = t.want[ro:ro + s]
        assert out.array.tobytes() == bytes(want), f"batch read {shape}: the local pool differs"
        t.check("the source of a batch read")
    finally:
        out.close()


@pytest.mark.parametrize("opcode", [TransferOpcode.WRITE, TransferOpcode.READ], ids=["WRITE", "READ"])
def test_batch_transfer_sync_with_notify(engine, pool, peer, target, opcode):
    sizes = BATCHES["7"]
    rng = seeded("batch-notify", int(opcode))
    t = target(8 * MiB, seed=10)
    out = Local(engine, 8 * MiB)
    local_pool = pool if opcode == TransferOpcode.WRITE else out
    local, remote = batch_layout(rng, sizes, local_pool.n, t.n)
    note = TransferNotify("batch", f"{opcode.name} {rng.integers(1 << 30)}")
    try:
        if opcode == TransferOpcode.WRITE:
            peer.send("wait_notifies", WAIT_S, t.addr, t.n, None)
        rc = engine.batch_transfer_sync(session_of(peer), [local_pool.addr + o for o in local],
                                        [t.addr + o for o in remote], sizes, opcode, note)
        assert rc == 0, engine.last_error
        if opcode == TransferOpcode.WRITE:
            notes, snapshot = peer.reply()
            for lo, ro, s in zip(local, remote, sizes):
                t.expect(ro, pool.array[lo:lo + s])
            assert base64.b64decode(snapshot) == bytes(t.want), "not all of the batch was in place at the notify"
        else:
            notes = collect_notifies(peer, 1)
            for lo, ro, s in zip(local, remote, sizes):
                assert out.array[lo:lo + s].tobytes() == bytes(t.want[ro:ro + s])
        assert notes == [[note.name, note.msg]]
        t.check(f"batch {opcode.name} with notify")
    finally:
        out.close()


def test_batch_transfer_async_and_get_batch_transfer_status(engine, pool, peer, target):
    rng = seeded("batch-async")
    session = session_of(peer)
    written = target(8 * MiB, seed=11)
    read = target(8 * MiB, seed=12)
    out = Local(engine, 8 * MiB)
    blocks = [16 * KiB] * 64
    # Four batches in flight at once, then one status call for all of them.
    slots_w = (rng.choice(written.n // (16 * KiB), 128, replace=False) * 16 * KiB).tolist()
    slots_r = (rng.choice(read.n // (16 * KiB), 128, replace=False) * 16 * KiB).tolist()
    slots_o = (rng.choice(out.n // (16 * KiB), 128, replace=False) * 16 * KiB).tolist()
    srcs = (rng.choice(pool.n // (16 * KiB), 128, replace=False) * 16 * KiB).tolist()
    try:
        ids = [
            engine.batch_transfer_async_write(session, [pool.addr + o for o in srcs[:64]],
                                              [written.addr + o for o in slots_w[:64]], blocks),
            engine.batch_transfer_async_read(session, [out.addr + o for o in slots_o[:64]],
                                             [read.addr + o for o in slots_r[:64]], blocks),
            engine.batch_transfer_async(session, [pool.addr + o for o in srcs[64:]],
                                        [written.addr + o for o in slots_w[64:]], blocks, TransferOpcode.WRITE),
            engine.batch_transfer_async(session, [out.addr + o for o in slots_o[64:]],
                                        [read.addr + o for o in slots_r[64:]], blocks, TransferOpcode.READ),
        ]
        assert all(i > 0 for i in ids) and len(set(ids)) == 4, f"batch ids {ids}: {engine.last_error}"
        assert engine.get_batch_transfer_status(ids) == 0, engine.last_error
        for s, w in zip(srcs, slots_w):
            written.expect(w, pool.array[s:s + 16 * KiB])
        written.check("async batch writes")
        for o, r in zip(slots_o, slots_r):
            assert out.array[o:o + 16 * KiB].tobytes() == bytes(read.want[r:r + 16 * KiB]), "async batch reads"
        # transfer_check_status follows a batch id of the batch calls too.
        batch_id = engine.batch_transfer_async_write(session, [pool.addr + 5], [written.addr + 9], [1000])
        assert batch_id > 0, engine.last_error
        assert poll_status(engine, batch_id)[0] == 1
        written.expect(9, pool.array[5:1005])
        written.check("an async batch followed with transfer_check_status")
        assert engine.get_batch_transfer_status([987_654_321]) < 0, "an unknown batch id fails"
    finally:
        out.close()


def test_buffer_registered_later_is_reachable(engine, pool, peer, target):
    session = session_of(peer)
    first = target(64 * KiB, seed=13)
    assert engine.transfer_sync_write(session, pool.addr, first.addr, 100) == 0, engine.last_error
    first.expect(0, pool.array[:100])
    # Registered by the target after the initiator learned its buffers.
    later = target(1 * MiB + 5, seed=14)
    assert engine.transfer_sync_write(session, pool.addr + 7, later.addr + 3, 1 * MiB) == 0, engine.last_error
    later.expect(3, pool.array[7:7 + MiB])
    # One batch across both, and a read of a third registered just now.
    sizes = [4099] * 4
    srcs = [10_000, 20_000, 30_000, 40_000]
    dsts = [(first, 1001), (later, 77), (first, 20_003), (later, 900_001)]
    rc = engine.batch_transfer_sync_write(session, [pool.addr + s for s in srcs], [t.addr + o for t, o in dsts], sizes)
    assert rc == 0, engine.last_error
    for s, (t, o), n in zip(srcs, dsts, sizes):
        t.expect(o, pool.array[s:s + n])
    first.check("the first buffer")
    later.check("the buffer registered later")
    third = target(5000, seed=15)
    out = Local(engine, 5000)
    try:
        assert engine.transfer_sync_read(session, out.addr, third.addr, 5000) == 0, engine.last_error
        assert out.array.tobytes() == bytes(third.want)
    finally:
        out.close()


def test_threads_share_one_engine(peer, target):
    """SGLang calls one engine from a pool of threads: 8 threads, their first
    contact with the target at the same moment, then batches of writes and
    reads each to its own part of the target."""
    e = new_engine()  # no table of the peer yet: the threads ask together
    rng = seeded("threads")
    lb = Local(e, 8 * MiB, rng)
    out = Local(e, 8 * MiB)
    t = target(8 * MiB, seed=16)
    part = MiB
    barrier = threading.Barrier(8)
    errors = []

    def work(k: int) -> None:
        try:
            r = seeded("thread", k)
            slots = (r.choice(part // BLOCK16, 32, replace=False) * BLOCK16 + k * part).tolist()
            barrier.wait(timeout=WAIT_S)
            for i in range(4):
                chunk = slots[8 * i:8 * i + 8]
                rc = e.batch_transfer_sync_write(session_of(peer), [lb.addr + o for o in chunk],
                                                 [t.addr + o for o in chunk], [BLOCK16] * 8)
                if rc != 0:
                    errors.append(f"thread {k} write {i}: {rc} {e.last_error}")
                rc = e.batch_transfer_sync_read(session_of(peer), [out.addr + o for o in chunk],
                                                [t.addr + o for o in chunk], [BLOCK16] * 8)
                if rc != 0:
                    errors.append(f"thread {k} read {i}: {rc} {e.last_error}")
        except Exception as x:  # reported below
            errors.append(f"thread {k}: {x!r}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(WAIT_S)
        assert not any(th.is_alive() for th in threads), "a thread is still transferring"
        assert not errors, errors
        written = np.zeros(t.n, dtype=bool)
        for k in range(8):
            r = seeded("thread", k)
            for o in (r.choice(part // BLOCK16, 32, replace=False) * BLOCK16 + k * part).tolist():
                written[o:o + BLOCK16] = True
        t.want[:] = np.where(written, lb.array, np.frombuffer(bytes(t.want), np.uint8)).tobytes()
        t.check("writes of 8 threads")
        assert np.array_equal(out.array[written], lb.array[written]), "reads of 8 threads"
        assert not out.array[~written].any(), "the reads wrote outside their blocks"
    finally:
        e.close()


# ---- bad requests ------------------------------------------------------------------

PAD = 4096


class Guarded(Target):
    """A peer buffer of which only [lo, hi) is registered: the bytes on either
    side are the peer's own memory, but not registered."""

    def __init__(self, peer: McPeer, n: int, seed: int) -> None:
        super().__init__(peer, PAD + n + PAD, seed, register=False)
        self.lo = self.addr + PAD
        self.hi = self.lo + n
        assert peer.call("register", self.lo, n) == 0


@pytest.fixture
def guarded(peer):
    g = Guarded(peer, 64 * KiB + 3, seed=20)
    yield g
    g.free()


def _failed_async(e: TransferEngine, batch_id: int) -> int:
    """Mooncake's batch_transfer_async_*: 0 when it cannot post, else a batch whose status fails."""
    return -1 if batch_id == 0 or e.get_batch_transfer_status([batch_id]) < 0 else 0


def _failed_submit(e: TransferEngine, batch_id: int) -> int:
    """Mooncake's transfer_submit_write: 0 when it cannot post, else a batch whose status fails."""
    return -1 if batch_id == 0 or poll_status(e, batch_id)[0] != 1 else 0


def _one_bad_entry(e, s, pool, g, stray, bad_local=False):
    locals_ = [pool.addr + 200 * i for i in range(7)]
    remotes = [g.lo + 1000 * i for i in range(7)]
    if bad_local:
        locals_[4] = stray.ctypes.data
    else:
        remotes[4] = g.hi - 50  # runs 50 bytes past the end; the other six are good
    return e.batch_transfer_sync_write(s, locals_, remotes, [100] * 7)


BAD_WRITES = {
    "before the segment": lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr, g.lo - 64, 64),
    "across its start": lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr, g.lo - 1, 2),
    "past its end": lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr, g.hi - 10, 11),
    "just after it": lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr, g.hi, 1),
    "far from any segment": lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr, 0x1000, 16),
    "a huge length": lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr, g.lo, 1 << 40),
    "an address that wraps": lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr, (1 << 64) - 8, 16),
    "an unregistered local buffer":
        lambda e, s, pool, g, stray: e.transfer_sync_write(s, stray.ctypes.data, g.lo, 100),
    "a local range past its registration":
        lambda e, s, pool, g, stray: e.transfer_sync_write(s, pool.addr + pool.n - 5, g.lo, 10),
    "one bad remote entry of seven": _one_bad_entry,
    "one unregistered local entry of seven":
        lambda e, s, pool, g, stray: _one_bad_entry(e, s, pool, g, stray, bad_local=True),
    "more buffers than addresses":
        lambda e, s, pool, g, stray: e.batch_transfer_sync_write(s, [pool.addr] * 3, [g.lo, g.lo + 10], [1] * 3),
    "fewer lengths than addresses":
        lambda e, s, pool, g, stray: e.batch_transfer_sync_write(s, [pool.addr] * 2, [g.lo, g.lo + 10], [1]),
    "transfer_sync with notify, past the end":
        lambda e, s, pool, g, stray: e.transfer_sync(s, pool.addr, g.hi - 1, 2, TransferOpcode.WRITE,
                                                     TransferNotify("must", "not arrive")),
    "batch_transfer_sync with notify, one bad entry":
        lambda e, s, pool, g, stray: e.batch_transfer_sync(s, [pool.addr] * 2, [g.lo, g.hi], [8, 8],
                                                           TransferOpcode.WRITE, TransferNotify("must", "not")),
    "a notification too long to carry":
        lambda e, s, pool, g, stray: e.transfer_sync(s, pool.addr, g.lo, 2, TransferOpcode.WRITE,
                                                     TransferNotify("long", "x" * 100_000)),
    "transfer_submit_write past the end":
        lambda e, s, pool, g, stray: _failed_submit(e, e.transfer_submit_write(s, pool.addr, g.hi - 1, 2)),
    "batch_transfer_async_write past the end":
        lambda e, s, pool, g, stray: _failed_async(e, e.batch_transfer_async_write(s, [pool.addr], [g.hi - 1], [2])),
    "batch_transfer_async_write, mismatched lists":
        lambda e, s, pool, g, stray: _failed_async(e, e.batch_transfer_async_write(s, [pool.addr], [g.lo] * 2, [2])),
}


@pytest.mark.parametrize("case", BAD_WRITES)
def test_bad_write_fails_writes_nothing_and_the_engine_goes_on(engine, pool, peer, guarded, case):
    session = session_of(peer)
    stray = random_bytes(seeded(case), 4096)  # never registered
    start = time.monotonic()
    rc = BAD_WRITES[case](engine, session, pool, guarded, stray)
    assert rc < 0, f"{case}: returned {rc}"
    assert time.monotonic() - start < TIMEOUT_S + MARGIN_S
    guarded.check(f"{case}: nothing may be written")
    if "notif" in case:
        assert collect_notifies(peer, 1, timeout=0.3) == [], f"{case}: the notification of a failed write arrived"
    # The engine goes on working.
    assert engine.transfer_sync_write(session, pool.addr + 3, guarded.lo + 5, 1000) == 0, engine.last_error
    guarded.expect(PAD + 5, pool.array[3:1003])
    guarded.check(f"a good write after {case}")


BAD_READS = {
    "past the end": lambda e, s, out, g, stray: e.transfer_sync_read(s, out.addr, g.hi - 10, 11),
    "before the segment": lambda e, s, out, g, stray: e.transfer_sync_read(s, out.addr, g.lo - 1, 2),
    "an unregistered local buffer": lambda e, s, out, g, stray: e.transfer_sync_read(s, stray.ctypes.data, g.lo, 100),
    "a local range past its registration":
        lambda e, s, out, g, stray: e.transfer_sync_read(s, out.addr + out.n - 5, g.lo, 10),
    "one bad entry of three":
        lambda e, s, out, g, stray: e.batch_transfer_sync_read(s, [out.addr, out.addr + 100, out.addr + 200],
                                                               [g.lo, g.hi - 1, g.lo + 50], [10, 10, 10]),
    "transfer_sync READ with notify, past the end":
        lambda e, s, out, g, stray: e.transfer_sync(s, out.addr, g.hi - 1, 2, TransferOpcode.READ,
                                                    TransferNotify("must", "not arrive")),
    "batch_transfer_async_read past the end":
        lambda e, s, out, g, stray: _failed_async(e, e.batch_transfer_async_read(s, [out.addr], [g.hi - 1], [2])),
}


@pytest.mark.parametrize("case", BAD_READS)
def test_bad_read_fails_reads_nothing_and_the_engine_goes_on(engine, peer, guarded, case):
    session = session_of(peer)
    rng = seeded(case)
    out = Local(engine, 4096, rng)
    before = out.array.copy()
    stray = random_bytes(rng, 4096)
    stray_before = stray.copy()
    try:
        rc = BAD_READS[case](engine, session, out, guarded, stray)
        assert rc < 0, f"{case}: returned {rc}"
        assert np.array_equal(out.array, before) and np.array_equal(stray, stray_before), \
            f"{case}: a failed read changed local memory"
        guarded.check(f"{case}: a read changes nothing at the target")
        if "notif" in case:
            assert collect_notifies(peer, 1, timeout=0.3) == [], f"{case}: the notification of a failed read arrived"
        assert engine.transfer_sync_read(session, out.addr + 1, guarded.lo + 2, 3000) == 0, engine.last_error
        assert out.array[1:3001].tobytes() == bytes(guarded.want[PAD + 2:PAD + 3002])
    finally:
        out.close()


def test_unknown_targets_fail_within_the_timeout(quick):
    e, lb = quick
    for name in [f"127.0.0.1:{closed_port()}", "no-port-here", ""]:
        for what, call in [("transfer_sync_write", lambda: e.transfer_sync_write(name, lb.addr, 1 << 20, 10)),
                           ("batch_transfer_async_write",
                            lambda: _failed_async(e, e.batch_transfer_async_write(name, [lb.addr], [1 << 20], [10])))]:
            start = time.monotonic()
            assert call() < 0, f"{what} to {name!r}"
            assert time.monotonic() - start < QUICK_TIMEOUT_S + MARGIN_S, f"{what} to {name!r}"


def test_a_dead_target_costs_each_call_seconds_not_the_whole_timeout():
    """Nothing listens at the target: with MC_TRANSFER_TIMEOUT at Mooncake's
    default 30 s, each call still fails within the few seconds that reaching
    a peer may take."""
    from ferry import mooncake
    e = new_engine(timeout=30.0)
    lb = Local(e, 4096, seeded("dead-target"))
    name = f"127.0.0.1:{closed_port()}"
    try:
        for _ in range(2):
            start = time.monotonic()
            assert e.transfer_sync_write(name, lb.addr, 1 << 20, 10) < 0
            took = time.monotonic() - start
            assert took < mooncake.CONNECT_TIMEOUT_S + MARGIN_S, f"a call to a dead target took {took:.1f} s"
    finally:
        e.close()


def test_buffer_the_target_unregistered_is_refused(engine, pool, peer, target):
    session = session_of(peer)
    t = target(64 * KiB, seed=21)
    other = target(4096, seed=22)
    assert engine.transfer_sync_write(session, pool.addr, t.addr, 1000) == 0, engine.last_error
    t.expect(0, pool.array[:1000])
    assert peer.call("unregister", t.addr) == 0
    assert engine.transfer_sync_write(session, pool.addr + 5000, t.addr + 10, 1000) < 0
    rc = engine.batch_transfer_sync_write(session, [pool.addr, pool.addr + 100], [other.addr, t.addr + 3], [50, 50])
    assert rc < 0, "a batch with one entry in an unregistered buffer"
    out = Local(engine, 1000)
    try:
        assert engine.transfer_sync_read(session, out.addr, t.addr, 1000) < 0
        assert not out.array.any(), "a refused read changed local memory"
    finally:
        out.close()
    t.check("a buffer the target unregistered")
    # (The batch's good entry into `other` may have landed: as in Mooncake, a
    # batch that fails at the target is not all or nothing.)
    other.want[:] = other.peer.get(other.addr, other.n)
    assert engine.transfer_sync_write(session, pool.addr, other.addr, 100) == 0, engine.last_error
    other.expect(0, pool.array[:100])
    other.check("a write after the refusals")


def test_buffer_registered_again_at_the_same_address_is_reachable(engine, pool, peer, target):
    """Allocators hand the same address out again: the target unregisters a
    buffer and registers one at the same place. Writes there must work again."""
    session = session_of(peer)
    t = target(64 * KiB, seed=23)
    assert engine.transfer_sync_write(session, pool.addr, t.addr, 1000) == 0, engine.last_error
    assert peer.call("unregister", t.addr) == 0
    assert engine.transfer_sync_write(session, pool.addr, t.addr, 1000) < 0
    assert peer.call("register", t.addr, t.n) == 0
    rc = engine.transfer_sync_write(session, pool.addr + 77, t.addr + 5, 2000)
    assert rc == 0, f"a write into the buffer registered again returned {rc}: {engine.last_error}"
    t.expect(0, pool.array[:1000])
    t.expect(5, pool.array[77:2077])
    t.check("the buffer registered again")


# ---- a dead or stopped target --------------------------------------------------------


def test_killed_target_fails_within_the_timeout_and_a_new_one_works(quick):
    engine, pool = quick
    p = McPeer()
    try:
        t = Target(p, 1 * MiB, seed=24)
        assert engine.transfer_sync_write(p.session, pool.addr, t.addr, MiB) == 0, engine.last_error
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait(10)
        for what, call in [
            ("transfer_sync_write", lambda: engine.transfer_sync_write(p.session, pool.addr, t.addr, MiB)),
            ("transfer_sync_read", lambda: engine.transfer_sync_read(p.session, pool.addr, t.addr, MiB)),
            ("batch_transfer_async_write",
             lambda: _failed_async(engine, engine.batch_transfer_async_write(p.session, [pool.addr], [t.addr], [MiB]))),
        ]:
            start = time.monotonic()
            rc = call()
            took = time.monotonic() - start
            assert rc < 0, f"{what} to a killed target returned {rc}"
            assert took < QUICK_TIMEOUT_S + MARGIN_S, f"{what} to a killed target took {took:.1f} s"
    finally:
        p.kill()
    q = McPeer()
    try:
        t = Target(q, 1 * MiB, seed=25)
        assert engine.transfer_sync_write(q.session, pool.addr + 1, t.addr + 2, MiB - 2) == 0, engine.last_error
        t.expect(2, pool.array[1:MiB - 1])
        t.check("a write to a new target after one was killed")
    finally:
        q.stop()


def test_stopped_target_times_out_within_mc_transfer_timeout():
    """A target that stops answering (SIGSTOP; over TCP, since the same-host
    transport writes into a stopped process): transfer_check_status says 0,
    then -2 by MC_TRANSFER_TIMEOUT; no call blocks past it."""
    timeout = 1.0
    e = new_engine(timeout=timeout, tcp=True)
    p = McPeer()
    try:
        lb = Local(e, 4 * MiB, seeded("stopped"))
        t = Target(p, 4 * MiB, seed=26)
        assert e.transfer_sync_write(p.session, lb.addr, t.addr, 100) == 0, e.last_error
        os.kill(p.proc.pid, signal.SIGSTOP)
        start = time.monotonic()
        batch_id = e.transfer_submit_write(p.session, lb.addr, t.addr, 4 * MiB)
        assert batch_id > 0, e.last_error
        statuses, slowest = [], 0.0
        while not statuses or statuses[-1] == 0:
            call = time.monotonic()
            statuses.append(e.transfer_check_status(batch_id))
            slowest = max(slowest, time.monotonic() - call)
            assert time.monotonic() - start < WAIT_S, "transfer_check_status still 0"
            time.sleep(0.005)
        took = time.monotonic() - start
        assert statuses[-1] == -2 and 0 in statuses, f"statuses {sorted(set(statuses))}, last {statuses[-1]}"
        assert took < timeout + MARGIN_S and slowest < 0.5, \
            f"-2 came after {took:.1f} s (MC_TRANSFER_TIMEOUT={timeout}); " \
            f"one transfer_check_status call took {slowest:.1f} s"
        start = time.monotonic()
        assert e.transfer_sync_write(p.session, lb.addr, t.addr, 4 * MiB) < 0
        took = time.monotonic() - start
        assert took < timeout + MARGIN_S, f"transfer_sync_write took {took:.1f} s (MC_TRANSFER_TIMEOUT={timeout})"
    finally:
        if p.proc.poll() is None:
            os.kill(p.proc.pid, signal.SIGCONT)
        p.kill()
        e.close()


# ---- managed buffers, first buffer, batch registration -------------------------------


def test_managed_buffers(engine, peer, target):
    rng = seeded("managed")
    session = session_of(peer)
    n = 1 * MiB + 7
    addr = engine.allocate_managed_buffer(n)
    second = engine.allocate_managed_buffer(4096)
    assert addr != 0 and second != 0, engine.last_error
    assert second + 4096 <= addr or addr + n <= second, "two managed buffers overlap"
    data = random_bytes(rng, n - 10).tobytes()
    assert engine.write_bytes_to_buffer(addr + 5, data, len(data)) == 0, engine.last_error
    assert engine.read_bytes_from_buffer(addr + 5, len(data)) == data
    assert engine.write_bytes_to_buffer(second, bytes(8), 8) == 0, engine.last_error
    assert engine.write_bytes_to_buffer(second, b"abcdef", 3) == 0, engine.last_error  # only `length` bytes
    assert engine.read_bytes_from_buffer(second, 5) == b"abc\0\0"
    # Out of a managed buffer, and into one.
    t = target(n, seed=30)
    assert engine.transfer_sync_write(session, addr + 5, t.addr + 3, len(data)) == 0, engine.last_error
    t.expect(3, data)
    t.check("a write out of a managed buffer")
    assert engine.transfer_sync_read(session, second + 1, t.addr + 100, 4000) == 0, engine.last_error
    assert engine.read_bytes_from_buffer(second + 1, 4000) == bytes(t.want[100:4100])
    assert engine.read_bytes_from_buffer(second, 1) == b"a"
    # Freed: no longer usable, and not freed twice.
    assert engine.free_managed_buffer(addr, n) == 0, engine.last_error
    assert engine.transfer_sync_write(session, addr, t.addr, 100) < 0, "a write out of a freed managed buffer"
    t.check("nothing came out of a freed managed buffer")
    assert engine.free_managed_buffer(addr, n) < 0
    assert engine.free_managed_buffer(second, 4096) == 0, engine.last_error


def test_get_first_buffer_address_of_this_engine():
    e = new_engine()
    try:
        port = e.get_rpc_port()
        assert e.session_id == f"127.0.0.1:{port}"
        assert e.get_first_buffer_address(e.session_id) == 0, "no buffer registered yet"
        a, b = Local(e, 4096), Local(e, 8192)
        assert e.get_first_buffer_address(f"127.0.0.1:{port}") == a.addr
        managed = e.allocate_managed_buffer(4096)
        assert managed and e.get_first_buffer_address(e.session_id) == a.addr
        a.close()
        assert e.get_first_buffer_address(e.session_id) == b.addr, "after the first one was unregistered"
    finally:
        e.close()


def test_get_first_buffer_address_of_a_peer(engine):
    p = McPeer()
    try:
        assert engine.get_first_buffer_address(p.session) == 0, "the peer registered nothing yet"
        one = p.alloc(64 * KiB, None, False)
        two = p.alloc(64 * KiB, None, False)
        # Registered first: the buffer at the higher address, so that the first
        # registered and the lowest address differ.
        first, then = max(one, two), min(one, two)
        assert p.call("register", first, 64 * KiB) == 0 and p.call("register", then, 64 * KiB) == 0
        assert p.call("first") == first, "the peer's own view"
        got = engine.get_first_buffer_address(p.session)
        assert got == first, f"got {got:#x}: the first registered is {first:#x}, the lowest {then:#x}"
    finally:
        p.stop()


def test_batch_register_and_unregister_memory(engine, peer, target):
    rng = seeded("batch-register")
    session = session_of(peer)
    bufs = [random_bytes(rng, n) for n in (4097, 65_537, 1 * MiB + 1)]
    addrs = [b.ctypes.data for b in bufs]
    assert engine.batch_register_memory(addrs, [b.size for b in bufs]) == 0, engine.last_error
    t = target(2 * MiB, seed=31)
    offsets = place(rng, [b.size for b in bufs], t.n)
    rc = engine.batch_transfer_sync_write(session, addrs, [t.addr + o for o in offsets], [b.size for b in bufs])
    assert rc == 0, engine.last_error
    for b, o in zip(bufs, offsets):
        t.expect(o, b)
    t.check("a batch out of batch-registered buffers")
    assert engine.register_memory(addrs[2] + 10, 100) < 0, "a range inside a registered buffer"
    assert engine.batch_unregister_memory(addrs) == 0, engine.last_error
    for a in addrs:
        assert engine.transfer_sync_write(session, a, t.addr, 10) < 0, "a write out of an unregistered buffer"
    t.check("nothing came out of unregistered buffers")
    assert engine.batch_unregister_memory(addrs) < 0, "they are not registered any more"
    assert engine.batch_register_memory(addrs, [10, 10]) < 0, "mismatched lists"


def test_registrations_past_what_one_table_carries_are_refused(peer, target, monkeypatch):
    """Peers learn an engine's buffers as one table of at most MAX_SEGMENTS:
    a registration past that is refused (negative), and what is registered
    still works."""
    from ferry import _mooncake_wire
    monkeypatch.setattr(_mooncake_wire, "MAX_SEGMENTS", 8)
    e = new_engine()
    try:
        rng = seeded("segment-limit")
        bufs = [random_bytes(rng, 4096 + i) for i in range(9)]
        for b in bufs[:8]:
            assert e.register_memory(b.ctypes.data, b.size) == 0, e.last_error
        assert e.register_memory(bufs[8].ctypes.data, bufs[8].size) < 0, "a ninth buffer past a limit of 8"
        assert "at most 8" in e.last_error, e.last_error
        t = target(64 * KiB, seed=41)
        assert e.transfer_sync_write(session_of(peer), bufs[7].ctypes.data, t.addr + 3, bufs[7].size) == 0, e.last_error
        t.expect(3, bufs[7])
        t.check("a write out of the last buffer that fit")
        assert e.unregister_memory(bufs[0].ctypes.data) == 0, e.last_error
        assert e.register_memory(bufs[8].ctypes.data, bufs[8].size) == 0, "room again after an unregister"
    finally:
        e.close()


# ---- hostile peers ------------------------------------------------------------------
#
# A plain ferry.Engine poses as a ferry.mooncake target. The facade asks a
# target for its segment table with a ferry notification
# (_mooncake_wire.encode_request) and reads the answer as a two-sided ferry
# message: TABLE_MAGIC, u32 format, u64 sequence, u32 count, then per segment
# u64 base, u64 length, u16 n and n bytes of a serialized RemoteDescriptor.

FAKE_BASE = 0x10_0000_0000  # where the hostile engine says its memory is
EXPORT = 64 * KiB
QUICK_S = 2.5  # a malformed answer must be refused long before MC_TRANSFER_TIMEOUT (10 s there)


def _entry(base: int, length: int, blob: bytes) -> bytes:
    return struct.pack(">QQH", base, length, len(blob)) + blob


def _table(sequence: int, entries, count: int | None = None, magic: bytes = wire.TABLE_MAGIC,
           fmt: int = wire.TABLE_FORMAT) -> bytes:
    head = struct.pack(">4sIQI", magic, fmt, sequence, len(entries) if count is None else count)
    return head + b"".join(entries)


class Hostile:
    """A plain ferry.Engine that answers every table request with
    answer(self, sequence) (bytes; None: no answer)."""

    def __init__(self, answer) -> None:
        self.engine = ferry.Engine(listen="127.0.0.1:0", transport="tcp")
        self.session = self.engine.address
        self.answer = answer
        self.requests = 0
        self.conns: dict = {}
        self.exported: list = []  # (array, serialized descriptor)
        self._keep: list = []  # message buffers ferry may still send from
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="hostile", daemon=True)
        self._thread.start()

    def export(self, n: int = EXPORT):
        arr = np.zeros(n, dtype=np.uint8)
        blob = self.engine.export_region(self.engine.reg(arr)).serialize()
        self.exported.append((arr, blob))
        return arr, blob

    def _accept_all(self) -> None:
        while True:
            try:
                c = self.engine.accept(timeout=0)
            except ferry.FerryError:
                return
            self.conns[c.id] = c

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._accept_all()
            try:
                note = self.engine.wait_notification(timeout=0.05)
            except ferry.FerryError:
                continue
            sequence = wire.decode_request(note.message)
            if sequence is None:
                continue
            self.requests += 1
            payload = self.answer(self, sequence)
            deadline = time.monotonic() + 2
            while note.connection_id not in self.conns and time.monotonic() < deadline:
                self._accept_all()
                time.sleep(0.001)
            conn = self.conns.get(note.connection_id)
            if payload is None or conn is None:
                continue
            buf = np.frombuffer(bytearray(payload), dtype=np.uint8)
            self.engine.reg(buf)
            self._keep.append(buf)
            try:
                conn.send_async(buf)  # never waited for: the facade may refuse it
            except ferry.FerryError:
                pass

    def untouched(self) -> bool:
        return not any(arr.any() for arr, _ in self.exported)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.engine.close()


def _valid(h: Hostile, sequence: int) -> bytes:
    blob = h.exported[0][1] if h.exported else h.export()[1]
    return _table(sequence, [_entry(FAKE_BASE, EXPORT, blob)])


def _past_max_table_bytes(h: Hostile, sequence: int) -> bytes:
    good = _valid(h, sequence)
    return good + bytes(wire.MAX_TABLE_BYTES + 1 - len(good))


HOSTILE_ANSWERS = {
    "garbage": lambda h, seq: seeded("garbage").integers(0, 256, 300, dtype=np.uint8).tobytes(),
    "a short header": lambda h, seq: wire.TABLE_MAGIC + b"\0\0",
    "a wrong magic": lambda h, seq: _table(seq, [_entry(FAKE_BASE, EXPORT, h.export()[1])], magic=b"XXXX"),
    "an unknown format": lambda h, seq: _table(seq, [_entry(FAKE_BASE, EXPORT, h.export()[1])], fmt=99),
    "a count of 2**32-1": lambda h, seq: _table(seq, [], count=0xFFFFFFFF),
    "a count past its entries":
        lambda h, seq: _table(seq, [_entry(FAKE_BASE, EXPORT, h.export()[1])], count=wire.MAX_SEGMENTS),
    "overlapping segments": lambda h, seq: _table(seq, [_entry(FAKE_BASE, EXPORT, h.export()[1]),
                                                        _entry(FAKE_BASE + 4096, EXPORT, h.export()[1])]),
    "a segment longer than its export":
        lambda h, seq: _table(seq, [_entry(FAKE_BASE, EXPORT + 4096, h.export()[1])]),
    "a descriptor that does not parse": lambda h, seq: _table(seq, [_entry(FAKE_BASE, EXPORT, b"\x07" * 40)]),
    "a segment that wraps": lambda h, seq: _table(seq, [_entry((1 << 64) - 4096, EXPORT, h.export()[1])]),
    "bytes after the last segment": lambda h, seq: _valid(h, seq) + b"\0",
    "a message past MAX_TABLE_BYTES": _past_max_table_bytes,
}


@pytest.fixture(scope="module")
def hostile_side():
    """An initiator (MC_TRANSFER_TIMEOUT=10) for the hostile peers, which live
    in this process: both on TCP."""
    e = new_engine(timeout=10, tcp=True)
    lb = Local(e, 1 * MiB, np.random.default_rng(3))
    yield e, lb
    e.close()


def _still_works(e: TransferEngine, lb: Local, peer: McPeer, target, what: str) -> None:
    t = target(8192, seed=50)
    assert e.transfer_sync_write(session_of(peer), lb.addr + 11, t.addr + 1, 5000) == 0, e.last_error
    t.expect(1, lb.array[11:5011])
    t.check(f"a write to a good peer after {what}")


def test_hostile_control_a_well_formed_table_is_used(hostile_side):
    """The table written here is the facade's format: with a good one, the
    write lands in the hostile engine's memory (so the cases below fail for
    the one defect each has)."""
    e, lb = hostile_side
    h = Hostile(_valid)
    try:
        assert e.transfer_sync_write(h.session, lb.addr + 1, FAKE_BASE + 100, 3000) == 0, e.last_error
        assert h.exported[0][0][100:3100].tobytes() == lb.array[1:3001].tobytes()
        assert e.get_first_buffer_address(h.session) == FAKE_BASE
    finally:
        h.close()


@pytest.mark.parametrize("case", HOSTILE_ANSWERS)
def test_hostile_table_is_refused_quickly(hostile_side, peer, target, case):
    e, lb = hostile_side
    h = Hostile(HOSTILE_ANSWERS[case])
    try:
        for attempt in range(2):  # and again: nothing of the bad table was kept
            start = time.monotonic()
            rc = e.transfer_sync_write(h.session, lb.addr, FAKE_BASE + 64, 100)
            took = time.monotonic() - start
            assert rc < 0, f"{case}: attempt {attempt}: returned {rc}"
            assert took < QUICK_S, f"{case}: attempt {attempt}: took {took:.1f} s"
        assert h.requests >= 2, "the facade did not ask the hostile engine for its table"
        assert h.untouched(), f"{case}: bytes landed in the hostile engine's memory"
    finally:
        h.close()
    _still_works(e, lb, peer, target, case)


@pytest.mark.parametrize("case", ["no answer", "an answer to another request"])
def test_hostile_that_does_not_answer_times_out(peer, target, case):
    timeout = QUICK_TIMEOUT_S
    e = new_engine(timeout=timeout, tcp=True)
    lb = Local(e, 1 * MiB, seeded(case))
    answer = (lambda h, seq: None) if case == "no answer" else (lambda h, seq: _valid(h, seq + 1000))
    h = Hostile(answer)
    try:
        for attempt in range(2):
            start = time.monotonic()
            rc = e.transfer_sync_write(h.session, lb.addr, FAKE_BASE, 100)
            took = time.monotonic() - start
            assert rc < 0, f"{case}: attempt {attempt}: returned {rc}"
            assert took < timeout + MARGIN_S, f"{case}: attempt {attempt}: took {took:.1f} s"
        assert h.requests >= 2 and h.untouched()
        _still_works(e, lb, peer, target, case)
    finally:
        h.close()
        e.close()


def test_flood_of_table_requests_does_not_stop_the_target(engine, pool):
    """A plain engine floods the target with table requests and never receives
    the answers; meanwhile initiators that behave are served."""
    p = McPeer()
    flooder = ferry.Engine(transport="tcp")
    stop = threading.Event()
    sent = [0]

    def flood(conns):
        i = 0
        while not stop.is_set():
            i += 1
            for c in conns:
                try:
                    c.notify_async(wire.encode_request(i))
                    sent[0] += 1
                except ferry.FerryError:
                    time.sleep(0.001)  # its budget is full: the flood goes on as fast as ferry takes it

    try:
        conns = [flooder.connect(p.session, timeout=5) for _ in range(4)]
        thread = threading.Thread(target=flood, args=(conns,), daemon=True)
        thread.start()
        deadline = time.monotonic() + WAIT_S
        while sent[0] < 5000:
            assert time.monotonic() < deadline, f"only {sent[0]} requests sent"
            time.sleep(0.01)
        fresh = new_engine()  # must ask for the table during the flood
        try:
            lb = Local(fresh, 1 * MiB, seeded("flood"))
            for k in range(5):
                t = Target(p, 64 * KiB, seed=60 + k)  # registered now: the shared engine asks again too
                for e, src in ((fresh, lb), (engine, pool)):
                    rc = e.transfer_sync_write(p.session, src.addr + k, t.addr + 2 * k, 30_000)
                    assert rc == 0, f"during the flood ({sent[0]} requests): {e.last_error}"
                    t.expect(2 * k, src.array[k:k + 30_000])
                t.check("writes during a flood of table requests")
        finally:
            fresh.close()
        assert p.call("notifies") == [], "table requests are no notifications"
    finally:
        stop.set()
        flooder.close()
        p.kill()


def test_table_requests_over_a_connection_the_target_opened_do_not_stall_it(engine, pool):
    """The target writes to another engine, which then holds a connection the
    target opened, and sends table requests back over it. The target must go
    on serving its initiators (each request of that kind must not hold up the
    others)."""
    p = McPeer()
    h = Hostile(_valid)
    try:
        src = p.alloc(4096, 70)
        assert p.call("write", h.session, src, FAKE_BASE, 4096) == 0
        assert h.exported[0][0][:4096].tobytes() == p.get(src, 4096), "the target's write reached the other engine"
        [conn] = h.conns.values()
        for i in range(20):
            conn.notify(wire.encode_request(i + 1), timeout=5)
        t = Target(p, 64 * KiB, seed=71)  # registered now: the initiator must ask for the table again
        start = time.monotonic()
        rc = engine.transfer_sync_write(p.session, pool.addr, t.addr + 1, 1000)
        took = time.monotonic() - start
        assert rc == 0, f"returned {rc} after {took:.1f} s: {engine.last_error}"
        t.expect(1, pool.array[:1000])
        t.check("a write after table requests on the target's own connection")
    finally:
        h.close()
        p.kill()


# ---- the directory -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["redis", "etcd"])
def test_directory_names_engines(kind, tmp_path):
    """Engines publish themselves under their local_hostname in Redis or etcd
    (started here on loopback, as test_directory.py does) and reach each other
    by that name. The etcd case names the server as a bare host:port, which
    means etcd, as in Mooncake."""
    from test_directory import _start

    server, url = _start(kind, str(tmp_path))
    p = e = None
    try:
        if kind == "redis":
            with socket.socket() as s:  # Mooncake's usual name: ip:port, and the engine listens there
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            name, theirs, ours = f"127.0.0.1:{port}", url, url
        else:
            port = None
            host_port = url[len("etcd://"):].split("/")[0]
            name, theirs, ours = "decode-0", f"etcd://{host_port}", host_port
        p = McPeer("--hostname", name, "--metadata", theirs)
        assert p.session == name
        if port is not None:
            assert p.port == port, "get_rpc_port() is the port of local_hostname"
        e = new_engine(hostname="prefill-0", metadata=ours)
        assert e.session_id == "prefill-0"
        rng = seeded("directory", kind)
        lb = Local(e, 2 * MiB, rng)
        t = Target(p, 1 * MiB + 3, seed=80)
        assert e.transfer_sync_write(name, lb.addr + 1, t.addr + 2, MiB) == 0, e.last_error
        t.expect(2, lb.array[1:1 + MiB])
        t.check(f"a write by name through {kind}")
        assert e.transfer_sync_read(name, lb.addr + MiB, t.addr, 4099) == 0, e.last_error
        assert lb.array[MiB:MiB + 4099].tobytes() == bytes(t.want[:4099])
        start = time.monotonic()
        assert e.transfer_sync_write("decode-9", lb.addr, t.addr, 10) < 0, "a name nobody published"
        assert time.monotonic() - start < TIMEOUT_S + MARGIN_S
    finally:
        if e is not None:
            e.close()
        if p is not None:
            p.stop()
        server.kill()
        server.wait(10)


def test_a_cached_table_of_a_buffer_registered_again_lands_in_the_new_registration(engine, pool, peer, target):
    """The initiator holds the target's table from an earlier write; the target
    unregisters the buffer and registers the same address again before the
    next write. The table's descriptor names the old registration, which the
    target refuses before a byte moves; the initiator asks for the table again
    and the write lands in the new registration (the caller named an address,
    and it is registered again), with every other byte of it untouched."""
    session = session_of(peer)
    for round_ in range(5):
        t = target(64 * KiB, seed=40 + round_)
        assert engine.transfer_sync_write(session, pool.addr, t.addr, 1000) == 0, engine.last_error
        t.expect(0, pool.array[:1000])
        assert peer.call("unregister", t.addr) == 0
        assert peer.call("register", t.addr, t.n) == 0
        rc = engine.transfer_sync_write(session, pool.addr + 333, t.addr + 9, 4099)
        assert rc == 0, f"round {round_}: {engine.last_error}"
        t.expect(9, pool.array[333:333 + 4099])
        t.check(f"round {round_}: a write after the buffer was registered again")
        assert engine.transfer_sync_write(session, pool.addr, t.addr + 20000, 100) == 0, engine.last_error
        t.expect(20000, pool.array[:100])
        t.check(f"round {round_}: the next write")
