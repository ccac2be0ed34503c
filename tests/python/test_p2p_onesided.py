"""ferry.p2p's one-sided calls: advertise in both eras' forms, write/read and
their vector and asynchronous forms, the seed's send(..., meta), between this
process and an endpoint in a child process (test_p2p.RemoteEndpoint); and
what a wrong, forged or revoked blob does. Random bytes at odd sizes and
offsets, checked at the end they land in, neighbours included.
"""

from __future__ import annotations

import numpy as np
import pytest

import ferry
from ferry import p2p
from peers import make_data
from test_p2p import WAIT, Buf, Pair, RemoteEndpoint, connected, reg, wait_done


@pytest.fixture(scope="module")
def link():
    remote, ep = RemoteEndpoint(gpu_idx=1), p2p.Endpoint(0, 2)
    conn_id, remote_conn = connected(remote, ep)
    yield Pair(ep, conn_id, remote, remote_conn)
    remote.close()
    ep.close()


def test_advertise_forms_of_both_eras(link):
    ep, conn_id, _, _ = link
    arr = np.zeros(1001, dtype=np.uint8)
    mr_id = reg(ep, arr)
    seed = ep.advertise(conn_id, mr_id, arr.ctypes.data, 1001)
    today = ep.advertise(mr_id, arr.ctypes.data, 1001)
    keywords = ep.advertise(conn_id=conn_id, mr_id=mr_id, ptr=arr.ctypes.data, size=1001)
    assert seed[0] and isinstance(seed[1], bytes) and len(seed[1]) == 64
    # One export per slice, however often and in whichever form it is advertised.
    assert seed == today == keywords == ep.advertise(mr_id=mr_id, ptr=arr.ctypes.data, size=1001)
    assert ep.advertise(mr_id, arr.ctypes.data + 1, 1000)[1] != seed[1]
    with pytest.raises(TypeError):
        ep.advertise(mr_id, arr.ctypes.data)
    with pytest.raises(TypeError):
        ep.advertise(conn_id, mr_id, arr.ctypes.data, 1001, 5)
    assert ep.advertise(mr_id, arr.ctypes.data, 1002) == (True, ep.advertise(0, arr.ctypes.data, 1002)[1])


def test_peer_writes_and_reads_an_advertised_buffer(link):
    ep, conn_id, remote, remote_conn = link
    target = np.zeros(70_011, dtype=np.uint8)
    mr_id = reg(ep, target)
    ok, blob = ep.advertise(conn_id, mr_id, target.ctypes.data + 5, 70_001)  # an odd slice
    assert ok
    _, n = remote.array("src", "uint8", 70_001, 200)
    remote_mr = remote.call("reg", Buf("src"), n)[1]
    assert remote.call("write", remote_conn, remote_mr, Buf("src"), n, blob, timeout=WAIT) is True
    want = make_data("uint8", 70_001, 200).tobytes()
    assert target[5:70_006].tobytes() == want
    assert not target[:5].any() and not target[70_006:].any()
    # read: the peer pulls what we hold, a prefix of the slice.
    remote.array("dst", "uint8", 4099)
    assert remote.call("read", remote_conn, remote.call("reg", Buf("dst"), 4099)[1], Buf("dst"), 4099, blob,
                       timeout=WAIT) is True
    assert remote.data("dst") == want[:4099]


def test_write_and_read_to_the_peer_async(link):
    ep, conn_id, remote, remote_conn = link
    _, n = remote.array("t", "float32", 33_333)
    ok, blob = remote.call("advertise", remote.call("reg", Buf("t"), n)[1], Buf("t"), n)
    assert ok
    src = make_data("float32", 33_333, 210)
    ok, tid = ep.write_async(conn_id, reg(ep, src), src.ctypes.data, src.nbytes, blob)
    assert ok and wait_done(ep, tid) == (True, True)
    assert remote.data("t") == src.tobytes()
    back = np.zeros(33_333, dtype=np.float32)
    ok, tid = ep.read_async(conn_id, reg(ep, back), back.ctypes.data, back.nbytes, blob)
    assert ok and wait_done(ep, tid) == (True, True)
    assert back.tobytes() == src.tobytes()


def test_vector_forms(link):
    ep, conn_id, remote, remote_conn = link
    counts = [3, 65_537, 1001]
    names = [f"v{i}" for i in range(len(counts))]
    sizes = [remote.array(n, "uint8", c)[1] for n, c in zip(names, counts)]
    mrs = [remote.call("reg", Buf(n), s)[1] for n, s in zip(names, sizes)]
    ok, blobs = remote.call("advertisev", mrs, [Buf(n) for n in names], sizes, len(names))
    assert ok and len(blobs) == 3 and all(len(b) == 64 for b in blobs)
    srcs = [make_data("uint8", c, 220 + i) for i, c in enumerate(counts)]
    mine = [reg(ep, s) for s in srcs]
    assert ep.writev(conn_id, mine, [s.ctypes.data for s in srcs], counts, blobs, 3, timeout=WAIT) is True
    assert [remote.data(n) for n in names] == [s.tobytes() for s in srcs]
    outs = [np.zeros(c, dtype=np.uint8) for c in counts]
    ok, tid = ep.readv_async(conn_id=conn_id, mr_id_v=[reg(ep, o) for o in outs], ptr_v=[o.ctypes.data for o in outs],
                             size_v=counts, meta_blob_v=blobs, num_iovs=3)
    assert ok and wait_done(ep, tid) == (True, True)
    assert [o.tobytes() for o in outs] == [s.tobytes() for s in srcs]
    # The other two: writev_async and readv.
    srcs2 = [make_data("uint8", c, 230 + i) for i, c in enumerate(counts)]
    ok, tid = ep.writev_async(conn_id, [reg(ep, s) for s in srcs2], [s.ctypes.data for s in srcs2], counts, blobs, 3)
    assert ok and wait_done(ep, tid) == (True, True)
    assert ep.readv(conn_id, [0, 0, 0], [o.ctypes.data for o in outs], counts, blobs, 3, timeout=WAIT) is True
    assert [o.tobytes() for o in outs] == [s.tobytes() for s in srcs2]
    with pytest.raises(RuntimeError, match="num_iovs"):
        ep.writev(conn_id, mine, [s.ctypes.data for s in srcs], counts, blobs, 2)


def test_seed_send_with_meta_writes_one_sided(link):
    # The seed's test_engine_nvlink.py: the target advertises with mr_id 0
    # (nothing registered) and posts no recv; the sender's send(..., meta),
    # also with mr_id 0, writes into the advertised buffer.
    ep, conn_id, remote, remote_conn = link
    _, n = remote.array("nv", "float32", 1024)
    ok, blob = remote.call("advertise", 12345, 0, Buf("nv"), n)
    assert ok
    src = make_data("float32", 1024, 240)
    assert ep.send(conn_id, 0, src.ctypes.data, src.nbytes, blob, timeout=WAIT) is True
    assert remote.data("nv") == src.tobytes()


def test_malformed_blobs_raise(link):
    ep, conn_id, _, _ = link
    buf = np.zeros(64, dtype=np.uint8)
    mr_id = reg(ep, buf)
    with pytest.raises(RuntimeError, match="exactly 64 bytes"):
        ep.write(conn_id, mr_id, buf.ctypes.data, 64, b"x" * 63)
    with pytest.raises(RuntimeError, match="not made by ferry.p2p"):
        ep.read(conn_id, mr_id, buf.ctypes.data, 64, bytes(64))
    with pytest.raises(TypeError):
        ep.write(conn_id, mr_id, buf.ctypes.data, 64, "a string")


def test_forged_too_long_and_revoked_blobs_fail(link):
    ep, conn_id, remote, remote_conn = link
    _, n = remote.array("guarded", "uint8", 4096)
    remote_mr = remote.call("reg", Buf("guarded"), n)[1]
    ok, blob = remote.call("advertise", remote_mr, Buf("guarded", 1024), 1024)
    assert ok
    src = make_data("uint8", 4096, 250)
    mr_id = reg(ep, src)
    forged = bytearray(blob)
    forged[16 + 32] ^= 0x5A  # a byte of the access key
    assert ep.write(conn_id, mr_id, src.ctypes.data, 1024, bytes(forged), timeout=WAIT) is False
    assert isinstance(ep.last_error, ferry.PermissionDenied)
    assert ep.write(conn_id, mr_id, src.ctypes.data, 1025, blob, timeout=WAIT) is False  # past the slice
    assert isinstance(ep.last_error, ferry.OutOfRange)
    assert remote.data("guarded") == bytes(4096)
    # Deregistering revokes what was advertised of the buffer.
    assert remote.call("dereg", remote_mr) is True
    assert ep.write(conn_id, mr_id, src.ctypes.data, 1024, blob, timeout=WAIT) is False
    assert isinstance(ep.last_error, ferry.NotFound)
    assert remote.data("guarded") == bytes(4096)


def test_unknown_connection_returns_failure(link):
    ep, _, _, _ = link
    buf = np.zeros(16, dtype=np.uint8)
    ok, blob = ep.advertise(reg(ep, buf), buf.ctypes.data, 16)
    assert ep.write(999_999, 0, buf.ctypes.data, 16, blob) is False
    assert isinstance(ep.last_error, ferry.NotFound)
    assert ep.read_async(999_999, 0, buf.ctypes.data, 16, blob) == (False, 0)
