"""ferry.p2p's byte formats (ferry/_p2p_wire.py): each round-trips, and each
parser refuses what a hostile peer or a careless caller could hand it, with
the error UCCL's binding raises (RuntimeError), never a crash or a hang."""

from __future__ import annotations

import struct

import pytest

from ferry import _p2p_wire as wire


def test_endpoint_metadata_both_families():
    v4 = wire.pack_endpoint_metadata("10.1.2.3", 55804, 7)
    assert len(v4) == 10 and v4[4:6] == struct.pack("!H", 55804) and v4[6:] == struct.pack("i", 7)
    assert wire.parse_endpoint_metadata(v4) == ("10.1.2.3", 55804, 7)
    v6 = wire.pack_endpoint_metadata("fd00::2", 1, 0)
    assert len(v6) == 22 and wire.parse_endpoint_metadata(bytearray(v6)) == ("fd00::2", 1, 0)
    for bad in (b"", v4[:9], v4 + b"\0", v6[:21]):
        with pytest.raises(RuntimeError, match="10 .* or 22"):
            wire.parse_endpoint_metadata(bad)


def test_advertisement():
    descriptor = bytes(range(48))
    blob = wire.pack_advertisement(descriptor)
    assert len(blob) == 64 and wire.parse_advertisement(blob) == descriptor
    assert wire.parse_advertisement(memoryview(blob)) == descriptor
    with pytest.raises(RuntimeError, match="exactly 64"):
        wire.parse_advertisement(blob[:-1])
    with pytest.raises(RuntimeError, match="bad magic"):
        wire.parse_advertisement(b"FIFO" + blob[4:])
    with pytest.raises(TypeError):
        wire.parse_advertisement(list(blob))
    with pytest.raises(RuntimeError):
        wire.pack_advertisement(descriptor[:47])


def test_hello():
    assert wire.parse_hello(wire.pack_hello(3, "net")) == wire.Hello(3, "net", None, "")
    assert wire.parse_hello(wire.pack_hello(0, "group", rank=12)) == wire.Hello(0, "group", 12, "")
    assert wire.parse_hello(wire.pack_hello(1, "local", bdf="0000:1b:00.0")) == wire.Hello(1, "local", None,
                                                                                             "0000:1b:00.0")
    refused = [
        b"hello", b"ferry.p2p/1 ", b"ferry.p2p/1 kind=net", b"ferry.p2p/1 gpu=x kind=net",
        b"ferry.p2p/1 gpu=" + b"9" * 40, b"ferry.p2p/1 gpu=1 kind=admin", b"ferry.p2p/1 gpu=1 rank=two",
        b"ferry.p2p/1 gpu=1 junk", "ferry.p2p/1 gpu=1 bdf=\u00e9".encode(), wire.pack_hello(1, "net") + b" " * 300,
        b"ferry.p2p/2 gpu=1",
    ]
    assert [wire.parse_hello(note) for note in refused] == [None] * len(refused)


def test_descriptor_lists():
    items = [(4096, 77, [1, 2], [3, 4], b"A" * 64), (0, 0, [], [], b"")]
    data = wire.pack_descs(items)
    assert wire.parse_descs(data) == items
    assert wire.parse_descs(wire.pack_descs([])) == [] == wire.parse_descs(b"")
    huge_count = struct.pack("<Q", 1 << 60) + data[8:]
    huge_keys = data[:24] + struct.pack("<Q", 1 << 40) + data[32:]
    huge_blob = data[:48] + struct.pack("<Q", 1 << 62) + data[56:]
    for bad in (data[:-1], data + b"\0", huge_count, huge_keys, huge_blob, b"\x01"):
        with pytest.raises(RuntimeError, match="Invalid serialized XferDesc"):
            wire.parse_descs(bad)
    with pytest.raises(RuntimeError, match="same length"):
        wire.pack_descs([(0, 0, [1], [], b"")])
