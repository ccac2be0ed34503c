"""Every operation between two processes on loopback, data verified end to end.

This process drives its own engine; the peer process (peers.serve) does the
other half on command and verifies what it received against the same seeded
random bytes."""

import numpy as np
import pytest

import ferry
from conftest import PeerError
from peers import make_data, make_tensor, same_bytes

WAIT = 30

DTYPES = ["uint8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64", "bool"]
# Odd lengths: tiny, below and above the inline limit (64 KiB), over several 512 KiB chunks.
COUNTS = [1, 7, 4099, 70001, 1_000_003]


def seed_of(*parts) -> int:
    return abs(hash(parts)) % (2**31)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", COUNTS)
def test_send_to_peer(link, dtype, count):
    seed = seed_of("send", dtype, count)
    link.peer.call_async("recv", dtype, count, seed)
    arr = make_data(dtype, count, seed)
    link.engine.reg(arr)
    link.conn.send(arr, timeout=WAIT)
    n, ok = link.peer.expect("ok")
    assert n == arr.nbytes and ok


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", COUNTS)
def test_recv_from_peer(link, dtype, count):
    seed = seed_of("recv", dtype, count)
    out = np.zeros(count, dtype=dtype)
    link.engine.reg(out)
    t = link.conn.recv_async(out)  # posted before the message exists
    link.peer.call("send", dtype, count, seed)
    assert t.wait(WAIT) == out.nbytes
    assert same_bytes(out, make_data(dtype, count, seed))


def test_recv_into_larger_buffer_reports_message_size(link):
    link.peer.call_async("send", "int32", 1001, 5)
    out = np.full(2000, -1, dtype=np.int32)
    link.engine.reg(out)
    n = link.conn.recv(out, timeout=WAIT)
    link.peer.expect("ok")
    assert n == 1001 * 4
    assert same_bytes(out[:1001], make_data("int32", 1001, 5))
    assert (out[1001:] == -1).all()  # nothing past the message was touched


def test_sendv_recvv_mixed_parts(link):
    specs = [("float32", 333), ("uint8", 1), ("int64", 70001), ("float16", 5)]
    link.peer.call_async("recvv", specs, 100)
    parts = [make_data(d, c, 100 + i) for i, (d, c) in enumerate(specs)]
    for p in parts:
        link.engine.reg(p)
    link.conn.sendv(parts, timeout=WAIT)
    n, oks = link.peer.expect("ok")
    assert n == sum(p.nbytes for p in parts) and all(oks)

    outs = [np.zeros(c, dtype=d) for d, c in specs]
    for o in outs:
        link.engine.reg(o)
    link.peer.call_async("sendv", specs, 200)
    assert link.conn.recvv(outs, timeout=WAIT) == sum(o.nbytes for o in outs)
    link.peer.expect("ok")
    for i, (o, (d, c)) in enumerate(zip(outs, specs)):
        assert same_bytes(o, make_data(d, c, 200 + i))


def test_recvv_scatters_one_message(link):
    # One sent message of 10,000 bytes lands across three receive parts.
    link.peer.call_async("send", "uint8", 10000, 7)
    parts = [np.zeros(n, dtype=np.uint8) for n in (1, 4999, 6000)]
    for p in parts:
        link.engine.reg(p)
    assert link.conn.recvv(parts, timeout=WAIT) == 10000
    link.peer.expect("ok")
    assert np.concatenate(parts)[:10000].tobytes() == make_data("uint8", 10000, 7).tobytes()


def test_many_async_sends_in_flight(link):
    specs = [("float64", 1 + 37 * i, seed_of("async", i)) for i in range(6)] + [("uint8", 2_000_001, 9)]
    link.peer.call_async("recv_async_many", specs)
    arrs = [make_data(d, c, s) for d, c, s in specs]
    for a in arrs:
        link.engine.reg(a)
    transfers = [link.conn.send_async(a) for a in arrs]
    assert [t.wait(WAIT) for t in transfers] == [a.nbytes for a in arrs]
    assert all(t.test() and t.status().ok() for t in transfers)
    sizes, oks = link.peer.expect("ok")
    assert sizes == [a.nbytes for a in arrs] and all(oks)


def test_buffer_protocol_sources(link):
    data = make_data("uint8", 3001, 11)
    for source in (bytearray(data.tobytes()), memoryview(bytearray(data.tobytes())), data.tobytes()):
        region = link.engine.reg(source)
        link.peer.call_async("recv", "uint8", 3001, 11)
        link.conn.send(source, timeout=WAIT)
        assert link.peer.expect("ok") == (3001, True)
        link.engine.dereg(region)


def test_pointer_and_tuple_arguments(link):
    arr = make_data("uint8", 5000, 12)
    link.engine.reg(arr.ctypes.data, arr.nbytes)
    link.peer.call_async("recv", "uint8", 4000, 12)
    link.conn.send(arr.ctypes.data, 4000, timeout=WAIT)  # a prefix, by address and size
    assert link.peer.expect("ok") == (4000, True)
    link.peer.call_async("recv", "uint8", 5000, 12)
    link.conn.send((arr.ctypes.data, arr.nbytes), timeout=WAIT)
    assert link.peer.expect("ok") == (5000, True)


def test_slices_of_a_registered_array(link):
    big = np.zeros(100_000, dtype=np.float32)
    link.engine.reg(big)
    link.peer.call_async("send", "float32", 777, 13)
    assert link.conn.recv(big[5000:5777], timeout=WAIT) == 777 * 4  # a view inside the region
    link.peer.expect("ok")
    assert same_bytes(big[5000:5777], make_data("float32", 777, 13))
    assert not big[:5000].any() and not big[5777:].any()


def test_buffer_too_small_fails_both_sides(link):
    small = np.zeros(10, dtype=np.uint8)
    link.engine.reg(small)
    link.peer.call_async("send", "uint8", 100, 14)
    with pytest.raises(ferry.BufferTooSmall, match="does not fit"):
        link.conn.recv(small, timeout=WAIT)
    with pytest.raises(PeerError) as e:
        link.peer.expect("ok")
    assert e.value.name == "BufferTooSmall"
    # The connection is still usable afterwards.
    link.peer.call_async("recv", "uint8", 10, 15)
    arr = make_data("uint8", 10, 15)
    link.engine.reg(arr)
    link.conn.send(arr, timeout=WAIT)
    assert link.peer.expect("ok") == (10, True)


# ---- one-sided ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,count", [("uint8", 1), ("float32", 4099), ("int64", 70001), ("float64", 300_001)])
def test_write_then_read_back(link, dtype, count):
    seed = seed_of("write", dtype, count)
    desc = ferry.RemoteDescriptor.parse(link.peer.call("export", "w", dtype, count + 3, None, 0, 0))
    src = make_data(dtype, count, seed)
    link.engine.reg(src)
    itemsize = src.itemsize
    link.conn.write(src, desc, 3 * itemsize, timeout=WAIT)  # at an offset
    assert link.peer.call("check", "w", 3 * itemsize, dtype, count, seed)
    back = np.zeros(count, dtype=dtype)
    link.engine.reg(back)
    link.conn.read(back, desc, 3 * itemsize, timeout=WAIT)
    assert same_bytes(back, src)
    link.peer.call("unexport", "w")


def test_read_peer_data_async(link):
    desc = ferry.RemoteDescriptor.parse(link.peer.call("export", "r", "float64", 50_001, 21, 0, 0))
    out = np.zeros(50_001, dtype=np.float64)
    link.engine.reg(out)
    t = link.conn.read_async(out, desc)
    assert t.wait(WAIT) == out.nbytes
    assert same_bytes(out, make_data("float64", 50_001, 21))
    link.peer.call("unexport", "r")


def test_exported_slice_bounds_and_offsets(link):
    # Export bytes [1000, 1000+4000) of an 8000-byte region: offsets are relative to the slice.
    desc = ferry.RemoteDescriptor.parse(link.peer.call("export", "s", "uint8", 8000, None, 1000, 4000))
    assert desc.length == 4000
    src = make_data("uint8", 4000, 22)
    link.engine.reg(src)
    link.conn.write(src, desc, 0, timeout=WAIT)
    assert link.peer.call("check", "s", 1000, "uint8", 4000, 22)
    with pytest.raises(ferry.OutOfRange, match="leaves"):
        link.conn.write(src, desc, 1, timeout=WAIT)  # one byte past the slice
    with pytest.raises(ferry.OutOfRange):
        link.conn.read(src, desc, 3999, size=2, timeout=WAIT)
    link.peer.call("unexport", "s")


def test_wrong_key_and_revoked_export(link):
    blob = link.peer.call("export", "k", "uint8", 256, None, 0, 0)
    desc = ferry.RemoteDescriptor.parse(blob)
    src = make_data("uint8", 256, 23)
    link.engine.reg(src)
    forged = ferry.RemoteDescriptor.parse(blob)
    forged.key ^= 0x5A5A
    with pytest.raises(ferry.PermissionDenied, match="wrong key"):
        link.conn.write(src, forged, 0, timeout=WAIT)
    assert link.peer.call("check", "k", 0, "uint8", 256, 23) is False  # nothing landed
    link.peer.call("unexport", "k")
    with pytest.raises(ferry.NotFound):
        link.conn.write(src, desc, 0, timeout=WAIT)


def test_writev_readv_with_notification_after_data(link):
    desc = ferry.RemoteDescriptor.parse(link.peer.call("export", "v", "uint8", 300_000, None, 0, 0))
    pieces = [make_data("uint8", n, 30 + i) for i, n in enumerate((1, 99_999, 150_000))]
    for p in pieces:
        link.engine.reg(p)
    items = [(pieces[0], desc, 0), (pieces[1], desc, 1), (pieces[2], desc, 100_000)]
    # The peer checks the bytes the instant the notification arrives.
    link.peer.call_async("wait_note_then_check", "v", 100_000, "uint8", 150_000, 32)
    link.conn.writev(items, b"three pieces in place", timeout=WAIT)
    note, in_place = link.peer.expect("ok")
    assert note == b"three pieces in place" and in_place
    backs = [np.zeros_like(p) for p in pieces]
    for b in backs:
        link.engine.reg(b)
    link.conn.readv([(backs[0], desc, 0), (backs[1], desc, 1), (backs[2].ctypes.data, desc, 100_000, 150_000)],
                    timeout=WAIT)
    for b, p in zip(backs, pieces):
        assert same_bytes(b, p)
    link.peer.call("unexport", "v")


def test_write_notification_arrives_after_data(link):
    desc = ferry.RemoteDescriptor.parse(link.peer.call("export", "n", "float32", 1_000_003, None, 0, 0))
    src = make_data("float32", 1_000_003, 40)
    link.engine.reg(src)
    link.peer.call_async("wait_note_then_check", "n", 0, "float32", 1_000_003, 40)
    t = link.conn.write_async(src, desc, 0, "kv block 7 ready")
    assert t.wait(WAIT) == src.nbytes
    assert link.peer.expect("ok") == (b"kv block 7 ready", True)
    link.peer.call("unexport", "n")


# ---- notifications ---------------------------------------------------------------------------


def test_standalone_notifications_in_order(link):
    for i in range(5):
        link.conn.notify(f"note {i}", timeout=WAIT)
    for i in range(5):
        assert link.peer.call("wait_note") == f"note {i}".encode()
    link.peer.call("notify", b"\x00binary\xff")
    assert link.conn.wait_notification(timeout=WAIT) == b"\x00binary\xff"
    link.peer.call("notify", "polled")
    for _ in range(1000):
        got = link.conn.poll_notification()
        if got is not None:
            break
        import time

        time.sleep(0.005)
    assert got == b"polled"
    assert link.conn.poll_notification() is None
    with pytest.raises(ferry.InvalidArgument, match="exceeds"):
        link.conn.notify(b"x" * (ferry.Connection.MAX_NOTIFICATION + 1), timeout=WAIT)


# ---- torch (CPU) -----------------------------------------------------------------------------

TORCH_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int32", "int64", "uint8", "bool"]


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_cpu_both_directions(link, dtype):
    torch = pytest.importorskip("torch")
    count = 65_537
    seed = seed_of("torch", dtype)
    link.peer.call_async("torch_recv", dtype, count, seed, "cpu")
    t = make_tensor(dtype, count, seed)
    link.engine.reg(t)
    link.conn.send(t, timeout=WAIT)
    n, ok = link.peer.expect("ok")
    assert n == t.numel() * t.element_size() and ok

    out = torch.zeros(count, dtype=getattr(torch, dtype))
    link.engine.reg(out)
    link.peer.call_async("torch_send", dtype, count, seed + 1, "cpu")
    assert link.conn.recv(out, timeout=WAIT) == out.numel() * out.element_size()
    link.peer.expect("ok")
    assert torch.equal(out, make_tensor(dtype, count, seed + 1))


def test_torch_views_and_noncontiguous(link):
    torch = pytest.importorskip("torch")
    m = torch.zeros(64, 64, dtype=torch.float32)
    link.engine.reg(m)
    with pytest.raises(ValueError, match="argument 'data': tensor is not contiguous"):
        link.conn.recv(m.t(), timeout=WAIT)
    with pytest.raises(ValueError, match=r"argument 'parts\[0\]': tensor is not contiguous"):
        link.conn.sendv([m[:, 1]], timeout=WAIT)
    # A contiguous row view of the registered tensor lands in place.
    link.peer.call_async("torch_send", "float32", 64, 50, "cpu")
    link.conn.recv(m[10], timeout=WAIT)
    link.peer.expect("ok")
    assert torch.equal(m[10], make_tensor("float32", 64, 50))
    assert m[:10].abs().sum() == 0 and m[11:].abs().sum() == 0


# ---- failures between processes ---------------------------------------------------------------


def test_pending_receive_fails_when_peer_closes(fresh_link):
    buf = np.zeros(100, dtype=np.uint8)
    fresh_link.engine.reg(buf)
    t = fresh_link.conn.recv_async(buf)
    fresh_link.peer.call("close")
    with pytest.raises((ferry.PeerLost, ferry.Cancelled)) as e:
        t.wait(WAIT)
    assert e.value.message  # the C++ message says which connection
    with pytest.raises((ferry.PeerLost, ferry.Cancelled)):
        fresh_link.conn.send(buf, timeout=WAIT)
    assert not fresh_link.conn.health().ok()


def test_peer_process_killed(fresh_link):
    buf = np.zeros(100, dtype=np.uint8)
    fresh_link.engine.reg(buf)
    t = fresh_link.conn.recv_async(buf)
    fresh_link.peer.proc.kill()
    with pytest.raises(ferry.PeerLost):
        t.wait(WAIT)
    assert fresh_link.conn.health().code == ferry.Code.PEER_LOST


# ---- other buffer producers: __cuda_array_interface__ and DLPack ---------------------------------


class ArrayInterface:
    """Exposes a NumPy array only through __cuda_array_interface__ (the layout is what matters)."""

    def __init__(self, arr, strides=None, readonly=False):
        self.arr = arr
        self.__cuda_array_interface__ = {
            "data": (arr.ctypes.data, readonly), "shape": arr.shape, "typestr": arr.dtype.str,
            "strides": strides, "version": 3,
        }


class DLPackOnly:
    """Exposes a NumPy array only through __dlpack__."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_cuda_array_interface_and_dlpack_objects(link):
    src = make_data("float32", 12_345, 60)
    dst = np.zeros(12_345, dtype=np.float32)
    link.engine.reg(src)
    link.engine.reg(dst)
    link.peer.call_async("recv", "float32", 12_345, 60)
    link.conn.send(ArrayInterface(src), timeout=WAIT)
    assert link.peer.expect("ok") == (src.nbytes, True)
    link.peer.call_async("send", "float32", 12_345, 61)
    assert link.conn.recv(DLPackOnly(dst), timeout=WAIT) == dst.nbytes
    link.peer.expect("ok")
    assert same_bytes(dst, make_data("float32", 12_345, 61))
    link.peer.call_async("recv", "float32", 12_345, 60)
    link.conn.send(DLPackOnly(src), timeout=WAIT)
    assert link.peer.expect("ok") == (src.nbytes, True)
    with pytest.raises(ValueError, match="argument 'data': device array is not contiguous"):
        link.conn.send(ArrayInterface(src[:5000].reshape(5, 1000), strides=(8000, 8)), timeout=WAIT)
    with pytest.raises(ValueError, match="read-only"):
        link.conn.recv(ArrayInterface(dst, readonly=True), timeout=WAIT)
    with pytest.raises(ValueError, match="DLPack tensor is not contiguous"):
        link.conn.send(DLPackOnly(src.reshape(5, 2469)[:, ::2]), timeout=WAIT)


def test_threads_share_a_connection(link):
    import threading

    count, per_thread, threads = 4097, 10, 4
    link.peer.call_async("recv_digests", "uint8", count, per_thread * threads)
    errors = []

    def sender(k):
        try:
            for i in range(k, per_thread * threads, threads):  # messages may interleave between threads
                arr = make_data("uint8", count, 70 + i)
                link.engine.reg(arr)
                link.conn.send(arr, timeout=WAIT)
        except Exception as e:  # reported below
            errors.append(e)

    workers = [threading.Thread(target=sender, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(WAIT)
    digests = link.peer.expect("ok")
    assert not errors
    # Order across threads is not defined, but every message arrived whole and once.
    import hashlib

    sent = [hashlib.sha1(make_data("uint8", count, 70 + i).tobytes()).hexdigest() for i in range(per_thread * threads)]
    assert sorted(digests) == sorted(sent)


def test_block_writes_between_prepared_pools(link):
    # A KV cache's write: blocks of odd sizes from a local pool to scattered
    # places of the peer's pool, as tuples and as a (n, 5) uint64 array.
    rng = np.random.default_rng(31)
    desc = ferry.RemoteDescriptor.parse(link.peer.call("export", "kv", "uint8", 1 << 20, None, 0, 0))
    pool = np.zeros(1 << 20, dtype=np.uint8)
    region = link.engine.reg(pool)
    pools = link.conn.prepare_blocks([region], [desc])
    assert (pools.local_pools, pools.remote_pools) == (1, 1)
    for form in ("tuples", "array"):
        sizes = rng.integers(1, 9000, size=40)
        slots = rng.permutation(100)[:40] * 10_000  # disjoint places on both sides
        dst = rng.permutation(100)[:40] * 10_000 + 7
        blocks = []
        for k, (size, s, d) in enumerate(zip(sizes, slots, dst)):
            seed = seed_of("kv", form, k)
            pool[s:s + size] = make_data("uint8", int(size), seed)
            blocks.append((0, 0, int(s), int(d), int(size)))
        arg = blocks if form == "tuples" else np.array(blocks, dtype=np.uint64)
        assert link.conn.write_blocks_async(pools, arg, notification=b"kv").wait(WAIT) == int(sizes.sum())
        for k, (_, _, _, d, size) in enumerate(blocks):
            assert link.peer.call("check", "kv", d, "uint8", size, seed_of("kv", form, k)), (form, k)
    with pytest.raises(ferry.OutOfRange, match="block 1"):
        link.conn.write_blocks(pools, [(0, 0, 0, 0, 8), (0, 0, (1 << 20) - 4, 0, 8)], timeout=WAIT)
    with pytest.raises(ferry.InvalidArgument, match="pool"):
        link.conn.write_blocks(pools, [(1, 0, 0, 0, 8)], timeout=WAIT)
    with pytest.raises(TypeError, match="5 columns"):
        link.conn.write_blocks(pools, np.zeros((2, 4), dtype=np.uint64), timeout=WAIT)
    link.peer.call("unexport", "kv")
