"""ferry.mooncake as Mooncake's own tests and examples use it: the gaps of issue 52.

Each test here failed on the facade before the fix it is named for (its
docstring says how) and passes since:

  transfer_submit_write that cannot post returns batch id 0, as Mooncake's
  TransferOpcode.Read / .Write and TransferEngine.TransferOpcode, Mooncake's spellings
  register_memory / batch_register_memory take a location, checked against the memory
  the port of local_hostname is not a promise: engines with one name all start
  an http:// metadata server (Mooncake's HTTP protocol), served here by http.server
  get_local_topology(): the NIC priority matrix, as JSON text

Helpers and the target process are test_mooncake.py's (mooncake_peer.py).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from ferry import mooncake
from ferry.mooncake import TransferEngine, TransferOpcode

import test_mooncake as mc
from test_mooncake import KiB, MiB, Local, McPeer, Target, new_engine, seeded

ERR_INVALID_ARGUMENT = -1
ERR_ADDRESS_NOT_REGISTERED = -3
ERR_METADATA = -200


@pytest.fixture(scope="module")
def peer():
    p = McPeer()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def engine():
    e = new_engine()
    yield e
    e.close()


@pytest.fixture(scope="module")
def pool(engine):
    lb = Local(engine, 1 * MiB, np.random.default_rng(52))
    yield lb
    lb.close()


# ---- 1. a batch that cannot be posted is batch 0 -----------------------------------


def test_transfer_submit_write_that_cannot_post_returns_batch_0(pool):
    """Mooncake's failed batch id is 0, as batch_transfer_async_* already
    returned here. Before: -101 for a peer nobody answers, -1 for a name
    with no port; code that tests `if batch_id:` took those for batches."""
    e = pool.engine
    for name in [f"127.0.0.1:{mc.closed_port()}", "no-port-here", ""]:
        start = time.monotonic()
        assert e.transfer_submit_write(name, pool.addr, 1 << 20, 10) == 0, f"to {name!r}"
        assert time.monotonic() - start < mooncake.CONNECT_TIMEOUT_S + mc.MARGIN_S, f"to {name!r}"
        assert e.transfer_check_status(0) == -1, "batch 0 is no batch"


# ---- 2. TransferOpcode as Mooncake spells it ------------------------------------------


def test_transfer_opcode_has_mooncake_spellings(engine, pool, peer):
    """Mooncake's binding: TransferOpcode.Read / .Write, the enum also on
    TransferEngine and its values in the module. The first spellings stay.
    Before: AttributeError for each of them."""
    assert TransferOpcode.Read == 0 and TransferOpcode.Write == 1
    assert TransferOpcode.READ is TransferOpcode.Read and TransferOpcode.WRITE is TransferOpcode.Write
    assert TransferEngine.TransferOpcode is TransferOpcode and engine.TransferOpcode is TransferOpcode
    assert mooncake.Read is TransferOpcode.Read and mooncake.Write is TransferOpcode.Write
    t = Target(peer, 64 * KiB, seed=520)
    back = Local(engine, 64 * KiB)
    try:
        session = mc.session_of(peer)
        assert engine.transfer_sync(session, pool.addr + 7, t.addr + 3, 5000, TransferEngine.TransferOpcode.Write) \
            == 0, engine.last_error
        t.expect(3, pool.array[7:5007])
        t.check("transfer_sync with TransferEngine.TransferOpcode.Write")
        assert engine.batch_transfer_sync(session, [back.addr, back.addr + 100], [t.addr, t.addr + 9000], [100, 50],
                                          TransferOpcode.Read) == 0, engine.last_error
        assert back.array[:150].tobytes() == bytes(t.want[:100]) + bytes(t.want[9000:9050])
    finally:
        back.close()
        t.free()


# ---- 3. register_memory's location ----------------------------------------------------


@pytest.mark.parametrize("location", ["cpu:0", "cpu:3", "*", ""])
def test_register_memory_takes_a_location_that_fits(engine, peer, location):
    """Host memory registered as "cpu:N" (the node is not checked), or with
    the location detected. Before: TypeError, register_memory took two arguments."""
    src = np.random.default_rng(53).integers(0, 256, 8192, dtype=np.uint8)
    assert engine.register_memory(src.ctypes.data, src.size, location) == 0, engine.last_error
    t = Target(peer, 8192, seed=None)
    try:
        assert engine.transfer_sync_write(mc.session_of(peer), src.ctypes.data, t.addr, 8192) == 0, engine.last_error
        t.expect(0, src)
        t.check(f"a write from memory registered at {location!r}")
    finally:
        assert engine.unregister_memory(src.ctypes.data) == 0, engine.last_error
        t.free()


@pytest.mark.parametrize("location", ["cuda:0", "cuda:7", "npu:0", "cpu", "gpu:0", "cuda:-1", "cuda:0 ", None, 0])
def test_register_memory_refuses_a_location_that_contradicts_the_memory(engine, location):
    """Host memory named as GPU memory, a kind ferry does not register, or
    no location at all: -1 (Mooncake's ERR_INVALID_ARGUMENT), and nothing
    registered. Before: TypeError for the third argument."""
    buf = np.zeros(4096, dtype=np.uint8)
    addr = buf.ctypes.data
    assert engine.register_memory(addr, buf.size, location) == ERR_INVALID_ARGUMENT, f"{location!r}"
    assert repr(location) in engine.last_error or str(location) in engine.last_error
    assert engine.unregister_memory(addr) == ERR_ADDRESS_NOT_REGISTERED, "a refused registration left one behind"
    # Registered without a location it works; naming it wrongly again changes nothing.
    assert engine.register_memory(addr, buf.size) == 0, engine.last_error
    try:
        assert engine.register_memory(addr, buf.size, location) == ERR_INVALID_ARGUMENT
        assert engine.register_memory(addr, buf.size, "cpu:0") == 0, "the same buffer, named rightly"
    finally:
        assert engine.unregister_memory(addr) == 0, engine.last_error


def test_batch_register_memory_takes_one_location_or_one_per_buffer(engine):
    """Mooncake passes one location for the batch; one per buffer works too.
    A contradiction anywhere registers none of the batch. Before: TypeError."""
    bufs = [np.zeros(4096 + i, dtype=np.uint8) for i in range(3)]
    addrs = [b.ctypes.data for b in bufs]
    sizes = [b.size for b in bufs]
    assert engine.batch_register_memory(addrs, sizes, "cpu:0") == 0, engine.last_error
    assert engine.batch_unregister_memory(addrs) == 0, engine.last_error
    assert engine.batch_register_memory(addrs, sizes, ["cpu:0", "*", ""]) == 0, engine.last_error
    assert engine.batch_unregister_memory(addrs) == 0, engine.last_error
    for bad in (["cpu:0", "cuda:0", "*"], ["cpu:0", "*"], "npu:1"):
        assert engine.batch_register_memory(addrs, sizes, bad) == ERR_INVALID_ARGUMENT, f"{bad!r}"
        for a in addrs:
            assert engine.unregister_memory(a) == ERR_ADDRESS_NOT_REGISTERED, f"{bad!r}: not all or nothing"


# ---- 4. the port of local_hostname is no promise --------------------------------------


def test_engines_with_the_same_local_hostname_all_start_and_are_reached_by_their_port():
    """Mooncake's P2PHANDSHAKE engine listens where it can and says where
    with get_rpc_port(); its name is host:<that port>. Three engines given
    one local_hostname: the first gets the port it names, the others
    another each, and each is reached by its own name. Before: the second
    initialize returned -101 (the port was taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = f"127.0.0.1:{port}"
    first = new_engine(hostname=name)
    peers = []
    try:
        assert first.get_rpc_port() == port, "a free port is taken as asked"
        assert first.session_id == name
        peers = [McPeer("--hostname", name) for _ in range(2)]
        assert len({first.get_rpc_port(), *(p.port for p in peers)}) == 3, "every engine listens on its own port"
        rng = seeded("same hostname")
        lb = Local(first, 256 * KiB, rng)
        for i, p in enumerate(peers):
            assert p.session == f"127.0.0.1:{p.port}", "a P2PHANDSHAKE name is host:get_rpc_port()"
            t = Target(p, 64 * KiB + 1, seed=540 + i)
            assert first.transfer_sync_write(p.session, lb.addr + i, t.addr + 1, 64 * KiB) == 0, first.last_error
            t.expect(1, lb.array[i:i + 64 * KiB])
            t.check(f"a write to engine {i + 1} of those named {name}")
            src = p.alloc(5000, seed=545 + i)
            at = 100 * KiB + i * 8192
            assert p.call("write", first.session_id, src, lb.addr + at, 5000) == 0, "a write back by first's name"
            assert lb.array[at:at + 5000].tobytes() == p.get(src, 5000)
    finally:
        for p in peers:
            p.stop()
        first.close()


def test_a_taken_port_in_local_hostname_is_replaced():
    """Whatever holds the port (here a plain socket), the engine starts on
    another and says so. Before: -101."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        e = new_engine(hostname=f"127.0.0.1:{port}")
        try:
            assert e.get_rpc_port() not in (port, -1)
            assert e.session_id == f"127.0.0.1:{e.get_rpc_port()}"
            with socket.create_connection(("127.0.0.1", e.get_rpc_port()), timeout=5):
                pass
        finally:
            e.close()


# ---- 5. Mooncake's HTTP metadata server ------------------------------------------------


class MetadataServer:
    """Mooncake's HTTP metadata server, as its Go example and
    mooncake_http_metadata_server serve it: GET / PUT / DELETE on
    /metadata?key=<key>; 200 with the value, 404 when there is none. Runs
    on loopback in a thread; `store` holds the raw values, `requests` what
    was asked, as (method, key)."""

    def __init__(self) -> None:
        self.store: dict = {}
        self.requests: list = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _key(self):
                url = urllib.parse.urlsplit(self.path)
                keys = urllib.parse.parse_qs(url.query).get("key")
                if url.path != "/metadata" or not keys:
                    self._answer(404, b"no such path")
                    return None
                with server.lock:
                    server.requests.append((self.command, keys[0]))
                return keys[0]

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                key = self._key()
                if key is not None:
                    with server.lock:
                        value = server.store.get(key)
                    self._answer(200, value) if value is not None else self._answer(404, b"metadata not found")

            def do_PUT(self):
                key = self._key()
                if key is not None:
                    body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                    with server.lock:
                        server.store[key] = body
                    self._answer(200, b"metadata updated")

            def do_DELETE(self):
                key = self._key()
                if key is not None:
                    with server.lock:
                        server.store.pop(key, None)
                    self._answer(200, b"metadata deleted")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metadata"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="mc-http-metadata", daemon=True)
        self.thread.start()

    def value(self, key: str):
        with self.lock:
            raw = self.store.get(key)
        return None if raw is None else json.loads(raw)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metadata_server():
    server = MetadataServer()
    yield server
    server.close()


def test_http_metadata_server_names_engines(metadata_server):
    """Two engines find each other only through the HTTP metadata server:
    random bytes written and read by name, both ways. Their entries are
    Mooncake's keys and shapes, the segment kept current as buffers come
    and go, and gone when the engine closes. Before: initialize refused
    http:// (-400), so the target did not start."""
    server = metadata_server
    p = McPeer("--hostname", "decode-0", "--metadata", server.url)
    e = None
    try:
        assert p.session == "decode-0"
        e = new_engine(hostname="prefill-0", metadata=server.url)
        assert e.session_id == "prefill-0"
        where = server.value("mooncake/rpc_meta/decode-0")
        assert isinstance(where["ip_or_host_name"], str) and where["rpc_port"] == p.port, where

        rng = seeded("http metadata")
        lb = Local(e, 2 * MiB, rng)
        t = Target(p, 1 * MiB + 3, seed=550)
        segment = server.value("mooncake/ram/decode-0")
        assert segment["name"] == "decode-0" and segment["protocol"] == "tcp" and segment["tcp_data_port"] == p.port
        assert {"name": "*", "addr": t.addr, "length": t.n} in segment["buffers"], segment
        assert {"name": "*", "addr": lb.addr, "length": lb.n} in server.value("mooncake/ram/prefill-0")["buffers"]

        assert e.transfer_sync_write("decode-0", lb.addr + 1, t.addr + 2, MiB) == 0, e.last_error
        t.expect(2, lb.array[1:1 + MiB])
        t.check("a write by name through the HTTP metadata server")
        assert e.transfer_sync_read("decode-0", lb.addr + MiB, t.addr, 4099) == 0, e.last_error
        assert lb.array[MiB:MiB + 4099].tobytes() == bytes(t.want[:4099])
        src = p.alloc(10_000, seed=551)
        assert p.call("write", "prefill-0", src, lb.addr + 7, 10_000) == 0, "the target writes back by name"
        assert lb.array[7:10_007].tobytes() == p.get(src, 10_000)

        start = time.monotonic()
        assert e.transfer_sync_write("decode-9", lb.addr, t.addr, 10) < 0, "a name nobody published"
        assert e.transfer_submit_write("decode-9", lb.addr, t.addr, 10) == 0
        assert time.monotonic() - start < 2 * mc.TIMEOUT_S + mc.MARGIN_S

        lb.close()
        assert server.value("mooncake/ram/prefill-0")["buffers"] == [], "an unregistered buffer leaves the entry"
        e.close()
        assert server.value("mooncake/rpc_meta/prefill-0") is None and server.value("mooncake/ram/prefill-0") is None
        methods = {m for m, _ in server.requests}
        assert methods == {"GET", "PUT", "DELETE"}, methods
    finally:
        if e is not None:
            e.close()
        p.stop()


@pytest.mark.parametrize("entry", [b"not json", b"[1, 2]", b'{"ip_or_host_name": 5, "rpc_port": 1}',
                                   b'{"ip_or_host_name": "127.0.0.1", "rpc_port": 70000}',
                                   b'{"ip_or_host_name": "127.0.0.1"}', b'{"ip_or_host_name": "a/b", "rpc_port": 9}'])
def test_http_metadata_entries_that_are_no_address_fail_the_call(metadata_server, entry):
    """What the server says is checked before use: a malformed entry fails
    the call (negative, or batch 0), never raises. Before: initialize refused http://."""
    e = new_engine(hostname="prefill-1", metadata=metadata_server.url)
    try:
        lb = Local(e, 4096)
        metadata_server.store["mooncake/rpc_meta/odd-0"] = entry
        assert e.transfer_sync_write("odd-0", lb.addr, 1 << 20, 10) == ERR_METADATA, e.last_error
        assert e.transfer_submit_write("odd-0", lb.addr, 1 << 20, 10) == 0
        assert "odd-0" in e.last_error
    finally:
        e.close()


def test_http_metadata_server_that_is_not_there_fails_initialize():
    """Nothing listens at the URL: initialize fails with ERR_METADATA soon,
    and the object still initializes afterwards. Before: -400 (refused
    unread), whatever the server."""
    e = TransferEngine()
    try:
        start = time.monotonic()
        assert e.initialize("prefill-2", f"http://127.0.0.1:{mc.closed_port()}/metadata", "tcp", "") == ERR_METADATA
        assert time.monotonic() - start < 3.0 + mc.MARGIN_S
        assert e.get_rpc_port() == -1
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, e.last_error
    finally:
        e.close()


# ---- 6. get_local_topology ---------------------------------------------------------------


def _check_matrix(text: str) -> dict:
    """The topology's JSON, checked for Mooncake's shape: {location: [[preferred], [others]]}."""
    assert isinstance(text, str)
    matrix = json.loads(text)
    assert isinstance(matrix, dict) and matrix, matrix
    nics = None
    for location, (preferred, others) in matrix.items():
        assert re.fullmatch(r"(cpu|cuda):\d+", location), location
        assert all(isinstance(n, str) and os.path.exists(f"/sys/class/net/{n}") for n in preferred + others)
        assert not set(preferred) & set(others), f"{location}: a NIC both preferred and not"
        every = sorted(preferred + others)
        assert nics is None or every == nics, "every location lists the same NICs"
        nics = every
    return matrix


def test_get_local_topology_describes_this_host():
    """One "cpu:N" per NUMA node with CPUs (the node folders of sysfs), one
    "cuda:N" per NVIDIA GPU, each with the NICs ranked; device_name picks the
    NICs, as does the engine's device_name once initialized. Needs no
    initialize. Before: AttributeError."""
    e = TransferEngine()
    try:
        matrix = _check_matrix(e.get_local_topology())
        node_dir = "/sys/devices/system/node"
        nodes = sorted(int(n[4:]) for n in (os.listdir(node_dir) if os.path.isdir(node_dir) else [])
                       if re.fullmatch(r"node\d+", n) and open(os.path.join(node_dir, n, "cpulist")).read().strip())
        assert [k for k in matrix if k.startswith("cpu:")] == [f"cpu:{n}" for n in nodes or [0]]
        pci = "/sys/bus/pci/devices"
        gpus = [f for f in os.listdir(pci) if open(os.path.join(pci, f, "vendor")).read().strip() == "0x10de"
                and open(os.path.join(pci, f, "class")).read().startswith(("0x0300", "0x0302"))]
        if "CUDA_VISIBLE_DEVICES" not in os.environ:
            assert len([k for k in matrix if k.startswith("cuda:")]) == len(gpus)

        only_lo = _check_matrix(e.get_local_topology("lo"))
        assert all(sorted(a + b) == ["lo"] for a, b in only_lo.values()), only_lo
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "lo") == 0, e.last_error
        assert _check_matrix(e.get_local_topology()) == only_lo, "the engine's NICs"
    finally:
        e.close()
