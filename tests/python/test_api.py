"""The API surface in one process: the error table, options, descriptors,
registration, buffer checks and deadlines. Data moving between two processes
is in test_transfers.py."""

import datetime
import pickle
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import engine_pair

# ---- the Status -> exception table ------------------------------------------

TABLE = {
    ferry.Code.CANCELLED: (ferry.Cancelled, None),
    ferry.Code.INVALID_ARGUMENT: (ferry.InvalidArgument, ValueError),
    ferry.Code.DEADLINE_EXCEEDED: (ferry.DeadlineExceeded, TimeoutError),
    ferry.Code.NOT_FOUND: (ferry.NotFound, LookupError),
    ferry.Code.OUT_OF_RANGE: (ferry.OutOfRange, IndexError),
    ferry.Code.PERMISSION_DENIED: (ferry.PermissionDenied, PermissionError),
    ferry.Code.UNAUTHENTICATED: (ferry.Unauthenticated, PermissionError),
    ferry.Code.RESOURCE_EXHAUSTED: (ferry.ResourceExhausted, None),
    ferry.Code.UNAVAILABLE: (ferry.Unavailable, ConnectionError),
    ferry.Code.PEER_LOST: (ferry.PeerLost, ConnectionError),
    ferry.Code.BUFFER_TOO_SMALL: (ferry.BufferTooSmall, None),
    ferry.Code.UNIMPLEMENTED: (ferry.Unimplemented, NotImplementedError),
    ferry.Code.DATA_LOSS: (ferry.DataLoss, None),
    ferry.Code.INTERNAL: (ferry.InternalError, None),
}


def test_every_code_has_its_exception():
    codes = [c for c in ferry.Code.__members__.values() if c != ferry.Code.OK]
    assert set(codes) == set(TABLE)
    for code, (cls, builtin) in TABLE.items():
        exc = ferry.Status(code, f"what failed and where ({code.name})").exception()
        assert type(exc) is cls
        assert isinstance(exc, ferry.FerryError)
        if builtin is not None:
            assert isinstance(exc, builtin)
        assert exc.code == code
        assert exc.message == f"what failed and where ({code.name})"
        assert str(exc) == exc.message
        assert cls.__module__ == "ferry" and cls.__doc__
        with pytest.raises(cls, match=code.name):
            ferry.Status(code, f"raised ({code.name})").raise_if_error()


def test_status_values():
    ok = ferry.Status()
    assert ok.ok() and ok.code == ferry.Code.OK and ok.exception() is None
    ok.raise_if_error()
    s = ferry.Status(ferry.Code.PEER_LOST, "connection 3 to 10.0.0.2:7000: peer went silent")
    assert not s.ok()
    assert s.to_string() == "peer_lost: connection 3 to 10.0.0.2:7000: peer went silent"
    assert ferry.code_name(ferry.Code.BUFFER_TOO_SMALL) == "buffer_too_small"
    assert s == ferry.Status(ferry.Code.PEER_LOST, "connection 3 to 10.0.0.2:7000: peer went silent")


# ---- options -----------------------------------------------------------------------


def test_options_as_keywords():
    o = ferry.make_options(streams=3, chunk_bytes=1 << 20, peer_timeout=2, heartbeat_interval=0.25,
                           handshake_timeout=datetime.timedelta(seconds=4), log_level="error", auth_token="s3cret")
    assert (o.streams, o.chunk_bytes) == (3, 1 << 20)
    assert o.peer_timeout == 2.0 and o.heartbeat_interval == 0.25 and o.handshake_timeout == 4.0
    assert ferry.make_options(wait_spin=0.0025).wait_spin == pytest.approx(0.0025)  # microseconds survive
    assert ferry.make_options(gather_linger=0.002).gather_linger == pytest.approx(0.002)
    assert o.log_level == ferry.LogLevel.ERROR
    assert "s3cret" not in repr(o)
    base = ferry.Options()
    assert ferry.make_options(base, window=4).window == 4 and base.window == 16  # a copy
    with pytest.raises(TypeError, match="no field 'stream'"):
        ferry.make_options(stream=3)
    with pytest.raises(ValueError):
        ferry.make_options(log_level="loud")
    with pytest.raises(ValueError):
        ferry.make_options(peer_timeout=-1)


def test_options_that_name_a_choice_take_and_give_their_names(monkeypatch):
    o = ferry.Options()
    assert (o.transport, o.nic_policy, o.path_policy, o.staging_copy) == ("auto", "nearest", "adaptive", "kernel")
    o = ferry.make_options(transport="local", nic_policy="all", path_policy="all", staging_copy="engine")
    assert (o.transport, o.nic_policy, o.path_policy, o.staging_copy) == ("local", "all", "all", "engine")
    o.transport = "tcp"
    assert o.transport == "tcp" and "transport=tcp" in repr(o)
    assert {t["name"]: t["value"] for t in ferry.describe_tunables(o)}["transport"] == "tcp"
    with pytest.raises(ferry.InvalidArgument, match='transport must be auto, tcp or local, got "udp"'):
        ferry.Engine(transport="udp")
    for field, bad, names in [("nic_policy", "closest", "nearest or all"),
                              ("path_policy", "sometimes", "adaptive or all"),
                              ("staging_copy", "dma", "kernel or engine"),
                              ("transport", "TCP", "auto, tcp or local")]:
        with pytest.raises(ferry.InvalidArgument, match=f'{field} must be {names}, got "{bad}"'):
            setattr(o, field, bad)
    assert o.transport == "tcp"  # a refused name changes nothing
    with pytest.raises(TypeError):
        o.transport = 1
    monkeypatch.setenv("FERRY_TRANSPORT", "udp")
    with pytest.raises(ferry.InvalidArgument, match='FERRY_TRANSPORT: transport must be auto, tcp or local, got "udp"'):
        ferry.apply_environment(ferry.Options())
    monkeypatch.setenv("FERRY_TRANSPORT", "tcp")
    assert ferry.apply_environment(ferry.Options()).transport == "tcp"


def test_engine_options_and_environment(monkeypatch):
    monkeypatch.setenv("FERRY_STREAMS", "5")
    with ferry.Engine(streams=2, window=8) as e:
        assert e.options.streams == 5  # the environment wins
        assert e.options.window == 8
    assert ferry.apply_environment(ferry.Options()).streams == 5
    monkeypatch.setenv("FERRY_STREAMS", "many")
    with pytest.raises(ferry.InvalidArgument, match="FERRY_STREAMS"):
        ferry.Engine()
    monkeypatch.delenv("FERRY_STREAMS")
    with pytest.raises(ferry.InvalidArgument, match="streams"):
        ferry.validate(ferry.make_options(streams=-1))
    with pytest.raises(ferry.InvalidArgument):
        ferry.Engine(streams=65)
    assert ferry.Options().streams == 0  # automatic
    with pytest.raises(ferry.InvalidArgument):
        ferry.Engine(listen="no port here")
    names = {t["name"] for t in ferry.describe_tunables(ferry.Options())}
    assert {"streams", "chunk_bytes", "peer_timeout"} <= names
    # Every tunable of the C++ registry can be set from Python (python/src/engine.cc binds each field).
    for name in names:
        assert hasattr(ferry.Options(), name), f"Options.{name} is not bound in python/src/engine.cc"


# ---- descriptors -------------------------------------------------------------------


def test_descriptor_serialize_parse_pickle():
    with ferry.Engine() as e:
        buf = np.zeros(1000, dtype=np.uint8)
        region = e.reg(buf)
        d = e.export_region(region, 100, 300)
        assert d.engine_id == e.id and d.length == 300 and d.kind == ferry.MemoryKind.HOST
        blob = d.serialize()
        assert isinstance(blob, bytes)
        assert ferry.RemoteDescriptor.parse(blob) == d
        assert pickle.loads(pickle.dumps(d)) == d
        assert e.export_region(region).length == 1000
        with pytest.raises(ferry.InvalidArgument):
            ferry.RemoteDescriptor.parse(b"not a descriptor")
        with pytest.raises(ferry.OutOfRange):
            e.export_region(region, 900, 200)


# ---- registration --------------------------------------------------------------------


def test_reg_kinds_and_counting():
    with ferry.Engine() as e:
        arr = np.zeros((3, 5), dtype=np.float64)
        r1 = e.reg(arr)
        assert (r1.base, r1.length) == (arr.ctypes.data, arr.nbytes)
        assert r1.kind == ferry.MemoryKind.HOST and r1.device == -1
        r2 = e.reg(arr.ctypes.data, arr.nbytes)  # the same range: the same region, counted
        assert r2.id == r1.id
        e.dereg(r1)
        e.dereg(r1)
        with pytest.raises(ferry.NotFound, match="not registered"):
            e.dereg(r1)
        assert e.reg(bytearray(7)).length == 7
        assert e.reg(memoryview(b"read-only is fine to register")).length == 29
        assert e.reg(np.zeros(10, dtype=np.int32), 12).length == 12
        with pytest.raises(ferry.InvalidArgument, match="zero size"):
            e.reg(arr.ctypes.data, 0)
        with pytest.raises(ferry.InvalidArgument, match="null"):
            e.reg(0, 16)


def test_reg_keeps_the_memory_alive():
    import gc
    import weakref

    class Owner(bytearray):  # weak-referenceable buffer
        pass

    with ferry.Engine() as e:
        buf = Owner(4096)
        ref = weakref.ref(buf)
        region = e.reg(buf)
        del buf
        gc.collect()
        assert ref() is not None  # registered memory stays allocated
        e.dereg(region)
        gc.collect()
        assert ref() is None


def test_torch_cpu_registration():
    torch = pytest.importorskip("torch")
    with ferry.Engine() as e:
        t = torch.zeros(100, dtype=torch.float16)
        r = e.reg(t)
        assert (r.base, r.length) == (t.data_ptr(), 200)
        with pytest.raises(ValueError, match="argument 'data'.*not contiguous"):
            e.reg(torch.zeros(10, 10).t())


# ---- argument checks on a live connection (one process, two engines) --------------------


@pytest.fixture(scope="module")
def pair():
    with engine_pair() as p:
        yield p


def test_buffer_arguments_are_checked(pair):
    a, ca, b, cb = pair
    arr = np.zeros((8, 8), dtype=np.float32)
    b.reg(arr)
    with pytest.raises(ValueError, match=r"argument 'data': memory is not contiguous"):
        cb.send(arr[:, ::2])
    with pytest.raises(ValueError, match=r"argument 'parts\[1\]': memory is not contiguous"):
        cb.sendv([arr[0], arr[::2, 0]])
    with pytest.raises(ValueError, match="argument 'data': buffer is read-only"):
        cb.recv(b"immutable")
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cb.recv_async(ro)
    with pytest.raises(ValueError, match="size 1000 exceeds the object's 256 bytes"):
        cb.send(arr, 1000)
    with pytest.raises(TypeError, match="address \\(int\\): pass its size"):
        cb.send(arr.ctypes.data)
    with pytest.raises(TypeError, match="argument 'data'"):
        cb.send("a string is not a buffer")
    with pytest.raises(ValueError, match="negative"):
        cb.send(-5, 10)
    with pytest.raises(TypeError, match="list"):
        cb.sendv(b"bytes are not a list of parts")
    with pytest.raises(ValueError):
        cb.send(arr, timeout=-1)


def test_unregistered_and_out_of_region(pair):
    a, ca, b, cb = pair
    loose = np.ones(64, dtype=np.uint8)
    with pytest.raises(ferry.NotFound, match="not inside any registered region"):
        cb.send(loose, timeout=5)
    with pytest.raises(ferry.NotFound):
        cb.send_async(loose).wait(5)
    inside = np.ones(64, dtype=np.uint8)
    region = b.reg(inside)
    with pytest.raises(ferry.OutOfRange, match="runs past the end of region"):
        cb.send(region.base + 32, 64, timeout=5)
    b.dereg(region)


def test_deadlines(pair):
    a, ca, b, cb = pair
    buf = np.zeros(16, dtype=np.uint8)
    a.reg(buf)
    start = time.monotonic()
    with pytest.raises(ferry.DeadlineExceeded):
        ca.recv(buf, timeout=0.3)  # nothing was sent; the receive is cancelled on the deadline
    with pytest.raises(ferry.DeadlineExceeded):
        ca.wait_notification(timeout=0.2)
    with pytest.raises(ferry.DeadlineExceeded, match="accept"):
        a.accept(timeout=0.2)
    assert time.monotonic() - start < 3
    t = ca.recv_async(buf)
    assert not t.test()
    with pytest.raises(ferry.DeadlineExceeded):
        t.wait(0.1)
    assert t.cancel()
    with pytest.raises(ferry.Cancelled):
        t.wait(1)
    assert t.status().code == ferry.Code.CANCELLED
    assert ca.poll_notification() is None


def free_port():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connect_failures():
    with ferry.Engine() as e:
        port = free_port()
        start = time.monotonic()
        with pytest.raises(ferry.Unavailable, match="refused .* times until the deadline"):
            e.connect(f"127.0.0.1:{port}", timeout=1)
        assert 0.7 < time.monotonic() - start < 3, "a refused address is retried until the deadline"
        with pytest.raises(ferry.InvalidArgument):
            e.connect("nonsense", timeout=5)


def test_connect_waits_for_a_peer_that_starts_listening_later():
    port = free_port()
    started = {}

    def late_listener():
        time.sleep(0.5)
        started["engine"] = ferry.Engine(listen=f"127.0.0.1:{port}")
        started["conn"] = started["engine"].accept(timeout=10)

    t = threading.Thread(target=late_listener)
    t.start()
    try:
        with ferry.Engine() as e:
            conn = e.connect(f"127.0.0.1:{port}", timeout=10)
            assert conn.health().ok()
            t.join(15)  # the connection stays open until the listener took it
            assert "conn" in started, "the listener took no connection"
            assert started["conn"].health().ok()
            conn.close()
    finally:
        t.join(15)
        if "engine" in started:
            started["engine"].close()


# Every wrong argument is a TypeError or ValueError naming it, never printing
# its value (an argument can be a large array).
def test_scalar_arguments_are_checked_by_name(pair):
    a, ca, b, cb = pair
    arr = np.arange(1 << 16, dtype=np.uint8)
    b.reg(arr)
    cases = [
        (lambda: b.connect(1234), TypeError, "argument 'peer' must be a str"),
        (lambda: b.connect(a.address, timeout="1"), TypeError, "argument 'timeout' must be a number of seconds"),
        (lambda: cb.send(arr, size=-1), ValueError, "argument 'size' must be >= 0"),
        (lambda: cb.send(arr, size=1.5), TypeError, "argument 'size' must be an int, not float"),
        (lambda: cb.recv(arr, timeout="1"), TypeError, "argument 'timeout' must be a number of seconds or None, not str"),
        (lambda: cb.write(arr, 5, 0), TypeError, "argument 'remote' must be a RemoteDescriptor or the bytes"),
        (lambda: cb.write(arr, b"short", 0), ValueError, "argument 'remote': remote descriptor must be 48 bytes"),
        (lambda: cb.read(arr, ferry.RemoteDescriptor(), -1), ValueError, "argument 'remote_offset' must be >= 0"),
        (lambda: cb.writev([(arr, "x", 0)]), TypeError, r"argument 'items\[0\].remote'"),
        (lambda: cb.readv([(arr, ferry.RemoteDescriptor(), 0, "big")]), TypeError, r"argument 'items\[0\].size'"),
        (lambda: b.dereg(5), TypeError, "argument 'region' must be a Region"),
        (lambda: b.export_region(b.reg(arr), -1), ValueError, "argument 'offset' must be >= 0"),
        (lambda: a.accept(timeout=[1]), TypeError, "argument 'timeout'"),
        # (unregistered memory: a transfer that failed at once, not one left pending)
        (lambda: cb.send_async(np.ones(4)).wait("soon"), TypeError, "argument 'timeout'"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message) as e:
            call()
        text = str(e.value)
        assert "pybind11" not in text and "Invoked with" not in text and "C++" not in text, text
        assert "array(" not in text and "65535" not in text, "an argument's value was printed: " + text


def test_descriptor_bytes_go_where_a_descriptor_goes(pair):
    a, ca, b, cb = pair
    target = np.zeros(1 << 12, dtype=np.uint8)
    source = np.random.default_rng(5).integers(0, 256, 1 << 12, dtype=np.uint8)
    a.reg(target)
    b.reg(source)
    wire = a.export_region(a.reg(target)).serialize()
    cb.write(source[:1001], wire, 7, timeout=10)
    assert np.array_equal(target[7:1008], source[:1001])
    back = np.zeros(1001, dtype=np.uint8)
    b.reg(back)
    cb.read(back, bytearray(wire), 7, timeout=10)
    assert np.array_equal(back, source[:1001])
    cb.writev([(source[:5], wire, 2000)], timeout=10)
    assert np.array_equal(target[2000:2005], source[:5])


def test_every_public_call_has_a_readable_signature():
    import inspect

    assert str(inspect.signature(ferry.Connection.send)) == "(self, data, size=None, *, timeout=None, stream='auto')"
    assert str(inspect.signature(ferry.Connection.write)) == (
        "(self, local, remote, remote_offset=0, notification=None, *, size=None, timeout=None, stream='auto')")
    assert str(inspect.signature(ferry.Engine.connect)) == "(self, peer, timeout=None)"
    for cls in (ferry.Connection, ferry.Engine, ferry.Transfer, ferry.Directory, ferry.RemoteDescriptor):
        for name, member in vars(cls).items():
            if name.startswith("_") or isinstance(member, property) or not callable(getattr(cls, name)):
                continue
            fn = getattr(cls, name)
            inspect.signature(fn)  # raises if unreadable
            doc = fn.__doc__ or ""
            assert doc.strip(), f"{cls.__name__}.{name} has no docstring"
            for leak in ("handle", "ferry::", "PyConnection", "std::"):
                assert leak not in doc.split(".")[0] and leak not in str(inspect.signature(fn)), (cls, name, doc)


def test_exception_names_match_the_codes():
    assert ferry.NotFound.__name__ == "NotFound" and ferry.code_name(ferry.Code.NOT_FOUND) == "not_found"
    assert ferry.NotRegistered is ferry.NotFound  # the former name still catches it


def test_auth_mismatch():
    with ferry.Engine(auth_token="alpha") as a, ferry.Engine(auth_token="beta") as b:
        with pytest.raises(ferry.Unauthenticated):
            b.connect(a.address, timeout=5)
        with ferry.Engine() as c:
            with pytest.raises(ferry.Unauthenticated):
                c.connect(a.address, timeout=5)


def test_closed_engine_and_connection():
    a, b = ferry.Engine(), ferry.Engine()
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("conn", a.accept(timeout=10)))
    t.start()
    cb = b.connect(a.metadata, timeout=10)  # metadata bytes work in place of an address
    t.join(10)
    buf = np.zeros(8)
    b.reg(buf)
    cb.close()
    cb.close()  # idempotent
    # A local close should read CANCELLED; the engine (tcp_connection.cc, close()) sends its
    # goodbye before recording that, so the peer's reply can win the race as PEER_LOST.
    assert cb.health().code in (ferry.Code.CANCELLED, ferry.Code.PEER_LOST)
    with pytest.raises((ferry.Cancelled, ferry.PeerLost), match="closed"):
        cb.send(buf, timeout=5)
    b.close()
    assert b.closed
    with pytest.raises(ferry.Cancelled, match="closed"):
        b.reg(buf)
    with pytest.raises(ferry.Cancelled):
        b.connect(a.address, timeout=1)
    a.close()
    a.close()


def test_accept_ends_when_engine_closes():
    e = ferry.Engine()
    errors = []

    def waiter():
        try:
            e.accept()
        except ferry.FerryError as ex:
            errors.append(ex)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.2)
    e.close()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ferry.Cancelled)


def test_gil_is_released_while_waiting(pair):
    a, ca, b, cb = pair
    buf = np.zeros(8, dtype=np.uint8)
    a.reg(buf)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.005)

    t = threading.Thread(target=ticker)
    t.start()
    with pytest.raises(ferry.DeadlineExceeded):
        ca.recv(buf, timeout=0.5)
    stop.set()
    t.join(5)
    assert len(ticks) > 20  # the other thread ran during the wait


def test_stubs_match_the_module():
    import ast
    import os

    import ferry._ferry as native

    stub = os.path.join(os.path.dirname(ferry.__file__), "_ferry.pyi")
    tree = ast.parse(open(stub).read())
    stubbed = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    public = {name for name in dir(native) if not name.startswith("__")}
    assert set(stubbed) == public
    for name, node in stubbed.items():
        if isinstance(node, ast.ClassDef) and not issubclass(getattr(native, name), BaseException):
            members = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
            members |= {m.target.id for m in node.body if isinstance(m, ast.AnnAssign)}
            for m in members:
                assert hasattr(getattr(native, name), m), f"{name}.{m} is stubbed but missing"
            if name in ("Connection", "Engine", "Transfer"):
                real = {m for m in dir(getattr(native, name)) if not m.startswith("_")}
                assert real <= members, f"{name}: not stubbed: {real - members}"
    for name in ("__init__.py", "p2p.py", "py.typed"):
        assert os.path.exists(os.path.join(os.path.dirname(ferry.__file__), name))


def test_dropped_transfer_keeps_its_buffer_until_done(pair):
    import gc
    import weakref

    a, ca, b, cb = pair
    big = np.zeros(1000, dtype=np.uint8)
    a.reg(big)
    view = big[100:300]  # its own object, kept only by the transfer
    ref = weakref.ref(view)
    t = ca.recv_async(view)
    del view, t
    gc.collect()
    assert ref() is not None and ferry._ferry._graveyard_size() == 1
    src = np.arange(200, dtype=np.uint8)
    b.reg(src)
    cb.send(src, timeout=10)
    deadline = time.monotonic() + 10
    while ferry._ferry._graveyard_size() and time.monotonic() < deadline:
        time.sleep(0.01)
    gc.collect()
    assert ref() is None
    assert (big[100:300] == src).all()


def test_probe_sizes_the_buffer_and_too_small_drops_the_message(pair):
    a, ca, b, cb = pair
    src = np.random.default_rng(8).integers(0, 256, 70001, dtype=np.uint8)
    b.reg(src)
    dst = np.zeros(1 << 17, dtype=np.uint8)
    a.reg(dst)
    with pytest.raises(ferry.DeadlineExceeded):
        ca.probe(timeout=0.05)
    cb.send_async(src[:70001])
    n = ca.probe(timeout=10)
    assert n == 70001 and ca.probe(timeout=1) == 70001, "probing takes nothing"
    assert ca.recv(dst[:n], timeout=10) == n
    assert np.array_equal(dst[:n], src)
    # Too small: both ends fail and the message is gone (the next one arrives next).
    s = cb.send_async(src[:5000])
    with pytest.raises(ferry.BufferTooSmall):
        ca.recv(dst[:100], timeout=10)
    with pytest.raises(ferry.BufferTooSmall):
        s.wait(10)
    cb.send_async(src[:3])
    assert ca.probe(timeout=10) == 3
    assert ca.recv(dst, timeout=10) == 3
    with pytest.raises(TypeError, match="argument 'timeout'"):
        ca.probe(timeout="x")
