"""Text that comes from a peer (a refusal's reason, an address in a metadata
blob, a descriptor) is bytes the peer chose, not necessarily UTF-8. It must
reach Python as a FerryError whose message shows those bytes escaped, never
as a UnicodeDecodeError out of the binding."""

import random
import socket
import struct
import threading

import pytest

import ferry

BAD = b"\xff\xfe bad \xc3\x28 utf-8 \xed\xa0\x80"  # invalid start, truncated pair, encoded surrogate


def test_status_with_invalid_utf8_becomes_ferry_error():
    s = ferry.Status(ferry.Code.DATA_LOSS, b"peer said: " + BAD)
    exc = s.exception()
    assert type(exc) is ferry.DataLoss
    assert isinstance(exc.message, str) and "\\xff\\xfe bad" in exc.message
    assert str(exc) == exc.message
    assert s.message == exc.message
    assert s.to_string() == "data_loss: " + exc.message
    assert "\\xff" in repr(s)
    with pytest.raises(ferry.DataLoss, match=r"peer said: \\xff"):
        s.raise_if_error()
    # Valid UTF-8 is passed through untouched.
    assert ferry.Status(ferry.Code.INTERNAL, "naïve ✓").message == "naïve ✓"


def _frame(ftype: int, aux: bytes, code: int = 0) -> bytes:
    """A wire frame header (docs/protocol.md) followed by its aux bytes."""
    return struct.pack("<IBBHII6Q", 0x31595246, ftype, 0, len(aux), 0, code, 0, 0, 0, 0, 0, 0) + aux


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = conn.recv(n - len(out))
        if not got:
            raise ConnectionError("closed")
        out += got
    return out


def test_peer_refusal_with_invalid_utf8_raises_ferry_error():
    """A hostile acceptor answers the HELLO with a REJECTED frame whose reason is not UTF-8."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)
    port = listener.getsockname()[1]
    served = threading.Event()

    def serve():
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                header = _recv_exact(conn, 64)
                (aux_len,) = struct.unpack_from("<H", header, 6)
                _recv_exact(conn, aux_len)
                conn.sendall(_frame(5, b"go away: " + BAD, code=int(ferry.Code.UNAVAILABLE)))
                served.set()
                conn.recv(1)  # until the engine hangs up
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with ferry.Engine() as e:
            with pytest.raises(ferry.Unavailable) as info:
                e.connect(f"127.0.0.1:{port}", timeout=10)
        # The server marks served only after its send returned, which may be
        # after the engine already read the frame and raised.
        assert served.wait(10)
        assert "go away: \\xff\\xfe bad" in info.value.message
        assert str(info.value) == info.value.message
    finally:
        listener.close()
        t.join(10)


def _metadata(addresses, host_id=b"host", engine_id=7, version=2) -> bytes:
    out = b"FRYM" + struct.pack("<HQ", version, engine_id) + struct.pack("<H", len(host_id)) + host_id
    out += struct.pack("<H", len(addresses))
    for a in addresses:
        out += struct.pack("<H", len(a)) + a
    return out


def test_metadata_with_invalid_utf8_address_raises_ferry_error():
    with ferry.Engine() as e:
        for addr in (b"\xff\xfe", b"\xff:1", b"[\xff]:1", b"127.0.0.1:\xff"):
            with pytest.raises(ferry.FerryError) as info:
                e.connect(_metadata([addr]), timeout=2)
            assert isinstance(info.value.message, str)


def _mutate(rng: random.Random, blob: bytes) -> bytes:
    b = bytearray(blob)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        if kind == 0 and b:  # flip a byte
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif kind == 1:  # insert bytes
            at = rng.randrange(len(b) + 1)
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 2 and b:  # cut the tail
            del b[rng.randrange(len(b)) :]
        elif kind == 3 and len(b) > 4:  # drop a run
            at = rng.randrange(4, len(b))
            del b[at : at + rng.randint(1, 6)]
        else:  # overwrite a u16 length with something large
            if len(b) >= 16:
                at = rng.randrange(14, len(b) - 1)
                b[at : at + 2] = struct.pack("<H", rng.choice([0, 1, 0xFFFF, rng.randrange(0x10000)]))
    return bytes(b)


def test_fuzzed_metadata_blobs_raise_only_ferry_errors():
    """Seeded mutations of metadata blobs: connect() may only raise FerryError.

    Every address names port 1 on loopback or an unresolvable host, so a blob
    that survives the mutations fails fast without reaching anyone."""
    rng = random.Random(20240611)
    seeds = [
        _metadata([b"127.0.0.1:1"]),
        _metadata([b"[::1]:1", b"127.0.0.1:1"]),
        _metadata([b"\xff\xfe.invalid:1", b"127.0.0.1:1"], host_id=BAD),
        _metadata([b"127.0.0.1:1"], version=1),
    ]
    with ferry.Engine() as e:
        for i in range(2000):
            blob = _mutate(rng, rng.choice(seeds))
            if not blob.startswith(b"FRYM"):
                blob = b"FRYM" + blob  # past the magic, where the decoder has work to do
            try:
                e.connect(blob, timeout=0.5).close()  # a mutated port may reach a live engine
            except ferry.FerryError as exc:
                assert isinstance(exc.message, str)
            except Exception as exc:  # noqa: BLE001 (what the test looks for)
                pytest.fail(f"blob {i} {blob!r} raised {type(exc).__name__}: {exc}")


def test_fuzzed_descriptors_raise_only_ferry_errors():
    rng = random.Random(7)
    with ferry.Engine() as e:
        region = e.reg(bytearray(64))
        good = e.export_region(region).serialize()
        parsed = 0
        for i in range(3000):
            blob = _mutate(rng, good) if i % 2 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 96)))
            try:
                ferry.RemoteDescriptor.parse(blob)
                parsed += 1
            except ferry.FerryError as exc:
                assert isinstance(exc.message, str)
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"descriptor {i} {blob!r} raised {type(exc).__name__}: {exc}")
        assert parsed > 0  # flips of fields that any value may take still parse


def test_p2p_accept_drops_a_hello_with_an_absurd_gpu_index(base_port):
    """The hello's GPU index is the peer's text too: 5,000 digits must not raise out of accept()."""
    from ferry import p2p
    from ferry._p2p_wire import HELLO_PREFIX

    with p2p.Endpoint(local_gpu_idx=0, num_cpus=1) as ep, ferry.Engine() as plain:
        conn = plain.connect(f"127.0.0.1:{ep.port}", timeout=5)
        conn.notify(HELLO_PREFIX + b"gpu=" + b"9" * 5000 + b" kind=net", timeout=5)
        assert ep.accept(timeout=1.0) == (False, "", -1, 0)  # dropped, then no one else came
