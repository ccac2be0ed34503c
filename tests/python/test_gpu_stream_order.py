"""CUDA tensors as users hand them over: their producer kernels, or a fill of
the receive buffer, still queued on torch's current stream when ferry gets
them. ferry orders each transfer after that work (stream="auto"); the same
rounds with the ordering turned off (stream=None) must go wrong, or this test
could not tell.

Both processes use the first GPU (the peer the last), so on one host the
connection is the local transport (CUDA IPC); FERRY_TRANSPORT=tcp runs the
same rounds through GPU staging. Skips without a CUDA device.
"""

import time

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import ferry  # noqa: E402
import peers  # noqa: E402
from conftest import Link, Peer, PeerError  # noqa: E402

WAIT = 60
LOCAL = "cuda:0"
REMOTE = f"cuda:{torch.cuda.device_count() - 1}"
COUNT = 4_000_037
ROUNDS = 50
SLOW = 20_000_000  # cycles of torch.cuda._sleep: about 10 ms of queued work


@pytest.fixture(scope="module")
def link():
    lk = Link()
    yield lk
    lk.close()


def user_rounds(link, stream):
    """Runs ROUNDS rounds each way; returns (wrong rounds, rounds)."""
    wrong = 0
    for r in range(ROUNDS):
        slow = SLOW if r % 2 else 0  # odd rounds: the work is queued behind a long kernel
        k = r + 2
        # this process -> peer: the producer kernel is still queued
        link.peer.call_async("torch_user_recv", COUNT, k, REMOTE, stream, slow)
        if slow:
            torch.cuda._sleep(slow)
        src = torch.arange(COUNT, dtype=torch.int64, device=LOCAL) * k
        link.engine.reg(src)
        link.conn.send(src, timeout=WAIT, stream=stream)
        n, bad = link.peer.expect("ok", timeout=WAIT)
        assert n == COUNT * 8
        wrong += bad > 0
        # peer -> this process: a fill of the destination is still queued
        dst = torch.zeros(COUNT, dtype=torch.int64, device=LOCAL)
        if slow:
            torch.cuda._sleep(slow)
            dst.zero_()
        link.engine.reg(dst)
        link.peer.call_async("torch_user_send", COUNT, k + 1000, REMOTE, stream, slow)
        assert link.conn.recv(dst, timeout=WAIT, stream=stream) == COUNT * 8
        link.peer.expect("ok", timeout=WAIT)
        want = torch.arange(COUNT, dtype=torch.int64, device=LOCAL) * (k + 1000)
        wrong += not torch.equal(dst, want)
    return wrong, 2 * ROUNDS


def test_transfers_follow_the_work_queued_on_the_current_stream(link):
    wrong, rounds = user_rounds(link, "auto")
    print(f"stream order on ({link.conn.transport_name}): {wrong} of {rounds} rounds wrong")
    assert wrong == 0


def test_without_the_order_the_same_rounds_go_wrong(link):
    wrong, rounds = user_rounds(link, None)
    print(f"stream order off ({link.conn.transport_name}): {wrong} of {rounds} rounds wrong")
    assert wrong > 0, "the hazard never showed: this test could not catch a missing order"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_a_device_that_is_not_the_current_one_follow_their_own_stream(link):
    # torch.cuda.current_stream(cuda:1) of a tensor on cuda:1 is handle 0,
    # the default stream of cuda:1; the thread's current device is cuda:0,
    # whose default stream is idle. Asked in the current context, the
    # transfer would go at once, ahead of the producer and the fill queued
    # on cuda:1 behind a long kernel.
    other = "cuda:1"
    assert torch.cuda.current_device() == 0
    for r in range(4):
        k = 500 + r
        link.peer.call_async("torch_user_recv", COUNT, k, REMOTE, "auto", 0)
        with torch.cuda.device(other):
            torch.cuda._sleep(5 * SLOW)
        src = torch.arange(COUNT, dtype=torch.int64, device=other) * k
        assert torch.cuda.current_device() == 0
        link.engine.reg(src)
        link.conn.send(src, timeout=WAIT)
        n, bad = link.peer.expect("ok", timeout=WAIT)
        assert (n, bad) == (COUNT * 8, 0), f"round {r}: {bad} elements sent before their producer ran"
        dst = torch.zeros(COUNT, dtype=torch.int64, device=other)
        with torch.cuda.device(other):
            torch.cuda._sleep(5 * SLOW)
        dst.zero_()  # queued behind the long kernel: must not overwrite what lands
        link.engine.reg(dst)
        link.peer.call_async("torch_user_send", COUNT, k + 1000, REMOTE, "auto", 0)
        assert link.conn.recv(dst, timeout=WAIT) == COUNT * 8
        link.peer.expect("ok", timeout=WAIT)
        want = torch.arange(COUNT, dtype=torch.int64, device=other) * (k + 1000)
        assert torch.equal(dst, want), f"round {r}: a fill queued before the receive overwrote what landed"


PEER_DELAY = 2_000_000_000  # cycles of torch.cuda._sleep on the peer before its send: about 1 s


def receive_behind_a_stream_wait(lk, k):
    """Posts a receive, makes the current stream wait for it on the GPU and
    queues a sum behind the wait while the peer's send is still a second
    away; returns how long queuing the sum took on the host."""
    dst = torch.zeros(COUNT, dtype=torch.int64, device=LOCAL)
    dst.sum()  # the sum kernel is loaded: a first launch (CUDA lazy loading) waits for every stream
    lk.engine.reg(dst)
    t = lk.conn.recv_async(dst)
    lk.conn.stream_wait(t, torch.cuda.current_stream())
    # The connection's kit is full now: nothing more is made while the stream waits.
    late = lk.engine.metrics()["gpu_objects_made_late"]
    lk.peer.call_async("torch_user_send", COUNT, k, REMOTE, "auto", PEER_DELAY)
    began = time.monotonic()
    total = dst.sum()  # queued behind the wait
    queued = time.monotonic() - began
    assert t.wait(WAIT) == COUNT * 8
    lk.peer.expect("ok", timeout=WAIT)
    assert total.item() == k * COUNT * (COUNT - 1) // 2
    assert lk.engine.metrics()["gpu_objects_made_late"] == late
    return queued


def test_a_stream_waits_on_the_gpu_for_a_receive(link):
    # The kernel that consumes the receive is queued without a host wait.
    assert receive_behind_a_stream_wait(link, 7) < 0.5


def test_a_new_engine_whose_first_gpu_transfer_a_stream_waits_for():
    # Nothing of ferry's GPU path was loaded before the wait was queued: its
    # kernels load at stream_wait, not on a ferry thread behind the waiting
    # stream (loading a module waits for every stream of the context), and
    # the streams, events and pinned slots that land the receive are made
    # there too: a path thread creating its first stream while the stream
    # waited once sat in cuStreamCreate for good, holding the driver's lock.
    lk = Link()
    try:
        assert receive_behind_a_stream_wait(lk, 3) < 0.5
        assert lk.engine.metrics()["gpu_objects_made_late"] == 0
    finally:
        lk.close()


@pytest.mark.parametrize("staging_copy", ["kernel", "engine"])
def test_receives_behind_waits_on_new_streams_land_with_nothing_made_late(staging_copy):
    # Each round's waiting stream is new (made with cuStreamCreate, not taken
    # from torch's pool), the first made just before the connection's kit:
    # a receive over 16 paths lands behind each wait, with a copy kernel and
    # with the copy engines, and nothing of what lands it is made while a
    # stream waits. In a child process: a wait that never ends would hold
    # this one's exit. (Whether the kit's streams share a hardware queue
    # with a waiting stream is tests/gpu/gpu_kit_streams_test.cc's.)
    child = Peer(peers.stream_waits_on_fresh_streams, COUNT, 8, dict(transport="tcp", streams=16, staging_copy=staging_copy))
    try:
        results = child.expect("ok", timeout=150)
    finally:
        child.stop()
    landed, late, staged = results
    assert landed == [(COUNT * 8, True)] * 8
    assert late == 0
    # Every byte went through pinned slots: the warm-up's and the rounds' out
    # of GPU memory on a, the rounds' into it on b.
    assert staged == (9 * COUNT * 8, 8 * COUNT * 8)


def test_a_peer_revoking_its_memory_while_a_stream_waits_stalls_nothing(link):
    # This process opened the peer's GPU allocation (a write into its
    # export); the peer deregisters it while this process's stream waits for
    # a receive on the same connection. Closing the mapping would wait for
    # that stream; the connection's thread must go on and land the receive.
    desc = ferry.RemoteDescriptor.parse(link.peer.call("torch_export", "kv", COUNT, REMOTE))
    src = torch.arange(COUNT, dtype=torch.int64, device=LOCAL) * 11
    link.engine.reg(src)
    link.conn.write(src, desc, 0, timeout=WAIT)
    dst = torch.zeros(COUNT, dtype=torch.int64, device=LOCAL)
    dst.sum()
    link.engine.reg(dst)
    t = link.conn.recv_async(dst)
    link.conn.stream_wait(t, torch.cuda.current_stream())
    total = dst.sum()
    link.peer.call("unexport", "kv", timeout=WAIT)
    link.peer.call("torch_user_send", COUNT, 13, REMOTE, "auto", 0, timeout=WAIT)
    assert t.wait(WAIT) == COUNT * 8
    assert total.item() == 13 * COUNT * (COUNT - 1) // 2


def test_an_explicit_stream_is_followed(link):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLOW)
        src = torch.arange(COUNT, dtype=torch.int64, device=LOCAL) * 5
    link.engine.reg(src)
    link.peer.call_async("torch_user_recv", COUNT, 5, REMOTE, "auto", 0)
    link.conn.send(src, timeout=WAIT, stream=side)
    n, bad = link.peer.expect("ok", timeout=WAIT)
    assert (n, bad) == (COUNT * 8, 0)


def test_a_bad_stream_argument_is_refused_before_anything_is_posted(link):
    src = torch.zeros(16, device=LOCAL)
    with pytest.raises(TypeError, match="stream"):
        link.conn.send_async(src, stream="current")


def test_a_peer_that_revokes_more_than_a_waiting_stream_lets_close_is_refused():
    # Closing a mapping of the peer's GPU memory waits for every stream of the
    # context, so while this process's stream waits on ferry the closes of
    # revoked mappings are held. A peer revoking as fast as it exports more
    # would make them pile up: past GpuImports::kMaxHeldPerPeer the peer's
    # new allocations are refused, and the waiting stream still goes on.
    lk = Link()
    try:
        if lk.conn.transport_name != "local":
            pytest.skip("mappings of a peer's GPU memory are the local transport's")
        held_cap = 64
        # 16 MiB of int64: each export an allocation of its own (torch's
        # caching allocator packs tensors of 1-10 MiB into shared segments).
        n = 1 << 21
        src = torch.arange(n, dtype=torch.int64, device=LOCAL) * 3
        lk.engine.reg(src)
        names = [f"churn{i}" for i in range(held_cap)]
        for name in names:
            lk.conn.write(src, ferry.RemoteDescriptor.parse(lk.peer.call("torch_export", name, n, REMOTE)), 0,
                          timeout=WAIT)
        dst = torch.zeros(COUNT, dtype=torch.int64, device=LOCAL)
        dst.sum()
        lk.engine.reg(dst)
        t = lk.conn.recv_async(dst)
        lk.conn.stream_wait(t, torch.cuda.current_stream())
        total = dst.sum()
        for name in names:
            lk.peer.call("unexport", name, timeout=WAIT)
        # The note comes after the revokes on the same channel: once it is
        # here, every revoke was handled.
        lk.peer.call("notify", "revoked", timeout=WAIT)
        assert lk.conn.wait_notification(timeout=WAIT) == b"revoked"
        extra = ferry.RemoteDescriptor.parse(lk.peer.call("torch_export", "extra", n, REMOTE))
        # stream=None: ordered after the current stream, the write would
        # wait for the receive that stream waits on.
        with pytest.raises(ferry.ResourceExhausted, match="revoked 64 GPU allocations"):
            lk.conn.write(src, extra, 0, timeout=WAIT, stream=None)
        # The waiting stream is not stuck behind the refusal. Its receive
        # lands, or, where this side copies from the sender's memory (one
        # more of the peer's allocations), it is refused as well and the
        # wait is released.
        lk.peer.call_async("torch_user_send", COUNT, 13, REMOTE, "auto", 0)
        done = torch.cuda.Event()
        done.record()
        deadline = time.monotonic() + WAIT
        while not done.query():
            assert time.monotonic() < deadline, "the stream still waits after the peer's send"
            time.sleep(0.01)
        try:
            landed = t.wait(WAIT)
        except ferry.ResourceExhausted as e:
            assert "revoked 64 GPU allocations" in str(e)
            landed = None
        try:
            lk.peer.expect("ok", timeout=WAIT)
        except PeerError:
            assert landed is None, "the peer's send failed although the receive landed"
        if landed is not None:
            assert landed == COUNT * 8
            assert total.item() == 13 * COUNT * (COUNT - 1) // 2
        # The stream's wait ended: the peer's memory is opened again.
        again = ferry.RemoteDescriptor.parse(lk.peer.call("torch_export", "again", n, REMOTE))
        lk.conn.write(src, again, 0, timeout=WAIT)
    finally:
        lk.close()
