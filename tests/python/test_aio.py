"""ferry.aio: awaiting transfers and notifications on one asyncio loop; one
notification stream for an engine with many peers."""

import asyncio
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import engine_pair


@pytest.fixture()
def pair():
    with engine_pair() as p:
        yield p


def run(coro, within=20):
    return asyncio.run(asyncio.wait_for(coro, within))


def test_await_moves_the_bytes(pair):
    a, ca, b, cb = pair
    rng = np.random.default_rng(11)
    src = rng.integers(0, 256, (1 << 20) + 4099, dtype=np.uint8)
    dst = np.zeros(len(src) + 100, dtype=np.uint8)
    b.reg(src)
    a.reg(dst)

    async def main():
        r = ca.recv_async(dst[3:])
        s = cb.send_async(src[5:])
        return await r, await s

    got, sent = run(main())
    assert got == len(src) - 5 and sent == len(src) - 5
    assert np.array_equal(dst[3:3 + got], src[5:])


def test_many_transfers_and_peers_on_one_loop(pair):
    a, ca, b, cb = pair
    sizes = [1, 7, 4095, 65537, 1 << 20]
    src = np.random.default_rng(3).integers(0, 256, sum(sizes), dtype=np.uint8)
    dst = np.zeros_like(src)
    b.reg(src)
    a.reg(dst)

    async def main():
        recvs, sends, at = [], [], 0
        for n in sizes:
            recvs.append(ca.recv_async(dst[at:at + n]))
            sends.append(cb.send_async(src[at:at + n]))
            at += n
        return await asyncio.gather(*recvs, *sends)

    got = run(main())
    assert got == sizes + sizes
    assert np.array_equal(dst, src)


def test_a_failure_is_raised_by_await(pair):
    a, ca, b, cb = pair
    buf = np.zeros(64, dtype=np.uint8)
    a.reg(buf)

    async def main():
        r = ca.recv_async(buf)
        asyncio.get_running_loop().call_later(0.1, cb.close)
        await r

    with pytest.raises((ferry.PeerLost, ferry.Cancelled)):
        run(main())


def test_deadline_and_task_cancellation(pair):
    a, ca, b, cb = pair
    buf = np.zeros(64, dtype=np.uint8)
    a.reg(buf)

    async def deadline():
        r = ca.recv_async(buf)
        with pytest.raises(ferry.DeadlineExceeded):
            await ferry.aio.wait(r, timeout=0.2)
        assert not r.test(), "a deadline leaves the operation running"
        assert r.cancel()

    run(deadline())

    async def cancelled():
        r = ca.recv_async(buf)
        task = asyncio.ensure_future(ferry.aio.wait(r))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return r

    r = run(cancelled())
    assert r.test() and r.status().code == ferry.Code.CANCELLED, "cancelling the task cancels the unmatched receive"


def test_notifications_from_several_peers_on_one_loop(pair):
    a, ca, b, cb = pair
    c = ferry.Engine()
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("conn", a.accept(timeout=10)))
    t.start()
    cc = c.connect(a.address, timeout=10)
    t.join(10)
    a_to_c = got["conn"]
    try:
        async def main():
            loop = asyncio.get_running_loop()
            first = asyncio.ensure_future(ferry.aio.notification(ca))
            second = asyncio.ensure_future(ferry.aio.notification(a_to_c))
            await asyncio.sleep(0.05)
            assert not first.done() and not second.done()
            loop.call_soon(lambda: cc.notify_async(b"from c"))
            loop.call_later(0.05, lambda: cb.notify_async("from b"))
            results = await asyncio.gather(first, second)
            # Already queued: returned at once, in order.
            cb.notify(b"one", timeout=5)
            cb.notify(b"two", timeout=5)
            await asyncio.sleep(0.1)
            results += [await ferry.aio.notification(ca), await ferry.aio.notification(ca)]
            with pytest.raises(ferry.DeadlineExceeded):
                await ferry.aio.notification(ca, timeout=0.1)
            pending = asyncio.ensure_future(ferry.aio.notification(a_to_c))
            await asyncio.sleep(0.05)
            cc.close()
            with pytest.raises((ferry.PeerLost, ferry.Cancelled)):
                await pending
            return results

        assert run(main()) == [b"from b", b"from c", b"one", b"two"]
    finally:
        c.close()


def test_one_notification_stream_for_many_peers():
    server = ferry.Engine()
    peers, accepted = [], []
    try:
        for _ in range(3):
            got = {}
            t = threading.Thread(target=lambda: got.setdefault("conn", server.accept(timeout=10)))
            t.start()
            e = ferry.Engine()
            peers.append((e, e.connect(server.address, timeout=10)))
            t.join(10)
            accepted.append(got["conn"])
        with pytest.raises(ferry.DeadlineExceeded):
            server.wait_notification(timeout=0.1)
        assert server.poll_notification() is None
        for k, (e, conn) in enumerate(peers):
            for i in range(4):
                conn.notify(f"{k}:{i}", timeout=5)
        seen = {}
        for _ in range(12):
            n = server.wait_notification(timeout=5)
            k, i = n.message.decode().split(":")
            seen.setdefault(int(k), []).append(int(i))
            assert n.connection_id == accepted[int(k)].id
            assert n.peer_engine_id == peers[int(k)][0].id
            assert n.peer_address == accepted[int(k)].peer_address
        assert seen == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3], 2: [0, 1, 2, 3]}, "each peer's notes in order"
        # The same stream on an event loop.
        async def on_the_loop():
            pending = asyncio.ensure_future(ferry.aio.engine_notification(server))
            await asyncio.sleep(0.05)
            assert not pending.done()
            peers[1][1].notify(b"async", timeout=5)
            n = await pending
            assert (n.message, n.connection_id) == (b"async", accepted[1].id)
            with pytest.raises(ferry.DeadlineExceeded):
                await ferry.aio.engine_notification(server, timeout=0.1)

        run(on_the_loop())
        ended = {}

        def waiter_body():
            try:
                server.wait_notification(timeout=10)
            except ferry.Cancelled as e:
                ended["cancelled"] = str(e)

        waiter = threading.Thread(target=waiter_body)
        waiter.start()
        time.sleep(0.1)
        server.close()
        waiter.join(10)
        assert not waiter.is_alive() and "cancelled" in ended, "closing the engine ends an engine-wide wait"
    finally:
        for e, _ in peers:
            e.close()
        server.close()
