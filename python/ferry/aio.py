"""asyncio for ferry: await a Transfer, await a connection's notifications.

    t = conn.recv_async(buf)
    n = await t                          # the message size; raises its failure
    note = await ferry.aio.notification(conn, timeout=5)
    n = await ferry.aio.engine_notification(engine)   # any peer's: a ferry.Notification

A serving loop awaits many transfers and many peers' notifications on one
event loop, without a thread per wait and without polling: each event loop
gets one eventfd (ferry._Waker) that ferry's own threads signal when a
transfer it waits for finishes or a notification arrives; the loop's reader
then settles every future whose transfer or connection is ready.

Cancelling the awaiting task cancels the operation when it can still stop
(an unmatched receive); one already moving data runs to its end, and its
buffers stay alive until then, as with a dropped Transfer.
"""

import asyncio
import weakref
from typing import Dict, List, Optional, Tuple

from . import _ferry

__all__ = ["wait", "notification", "engine_notification"]


class _LoopWaker:
    """The eventfd of one event loop and what waits on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.waker = _ferry._Waker()
        self.transfers: List[Tuple[_ferry.Transfer, asyncio.Future]] = []
        self.notes: Dict[int, Tuple[_ferry.Connection, List[asyncio.Future]]] = {}
        self.engine_notes: Dict[int, Tuple[_ferry.Engine, List[asyncio.Future]]] = {}
        loop.add_reader(self.waker.fileno(), self._ready)

    def _ready(self) -> None:
        self.waker.drain()
        waiting = []
        for t, fut in self.transfers:
            if fut.done():
                continue
            if not t.test():
                waiting.append((t, fut))
                continue
            try:
                fut.set_result(t.wait(0))
            except BaseException as e:  # the transfer's failure, for the awaiting task
                fut.set_exception(e)
        self.transfers = waiting
        for key, (conn, futs) in list(self.notes.items()):
            futs[:] = [f for f in futs if not f.done()]
            while futs:
                note = conn.poll_notification()
                if note is None:
                    break
                futs.pop(0).set_result(note)
            health = conn.health()
            if futs and not health.ok():
                for f in futs:
                    f.set_exception(health.exception())
                futs.clear()
            if not futs:
                conn._set_notification_waker(None)
                del self.notes[key]
        for key, (engine, futs) in list(self.engine_notes.items()):
            futs[:] = [f for f in futs if not f.done()]
            while futs and not engine.closed:
                note = engine.poll_notification()
                if note is None:
                    break
                futs.pop(0).set_result(note)
            if futs and engine.closed:
                for f in futs:
                    f.set_exception(_ferry.Cancelled("wait_notification: the engine was closed"))
                futs.clear()
            if not futs:
                if not engine.closed:
                    engine._set_notification_waker(None)
                del self.engine_notes[key]


_wakers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaker]" = weakref.WeakKeyDictionary()


def _waker_of(loop: asyncio.AbstractEventLoop) -> _LoopWaker:
    w = _wakers.get(loop)
    if w is None:
        w = _wakers[loop] = _LoopWaker(loop)
    return w


async def wait(transfer: _ferry.Transfer, timeout: Optional[float] = None) -> int:
    """Awaits `transfer`; returns its bytes moved (for a receive, the message
    size). Raises its failure as a ferry.FerryError subclass, or
    DeadlineExceeded after `timeout` seconds (the operation keeps running)."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise TypeError("argument 'timeout' must be a number of seconds >= 0 or None")
    loop = asyncio.get_running_loop()
    w = _waker_of(loop)
    fut = loop.create_future()
    w.transfers.append((transfer, fut))
    transfer._wake_when_done(w.waker)  # signals at once if it has finished
    try:
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)  # cancels only the future, not the transfer
    except asyncio.TimeoutError:
        raise _ferry.DeadlineExceeded(f"transfer {transfer.id} still running at its deadline") from None
    except asyncio.CancelledError:
        transfer.cancel()  # an unmatched receive stops; anything moving data goes on
        raise


async def notification(conn: _ferry.Connection, timeout: Optional[float] = None) -> bytes:
    """Awaits the next notification from `conn`'s peer (bytes), in the order
    they were sent. Raises the connection's failure, or DeadlineExceeded after
    `timeout` seconds."""
    note = conn.poll_notification()
    if note is not None:
        return note
    loop = asyncio.get_running_loop()
    w = _waker_of(loop)
    fut = loop.create_future()
    entry = w.notes.setdefault(id(conn), (conn, []))
    entry[1].append(fut)
    # Installed before the second look: a note queued in between signals it.
    conn._set_notification_waker(w.waker)
    w.waker.signal()
    try:
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)
    except asyncio.TimeoutError:
        raise _ferry.DeadlineExceeded(
            f"no notification from connection {conn.id} to {conn.peer_address} by the deadline") from None


async def engine_notification(engine: _ferry.Engine, timeout: Optional[float] = None) -> _ferry.Notification:
    """Awaits the next notification from any connection of `engine`, as a
    ferry.Notification (connection_id, peer_engine_id, peer_address,
    message): Engine.wait_notification for an event loop. Raises Cancelled
    once the engine closes, or DeadlineExceeded after `timeout` seconds."""
    if not engine.closed:
        note = engine.poll_notification()
        if note is not None:
            return note
    loop = asyncio.get_running_loop()
    w = _waker_of(loop)
    fut = loop.create_future()
    w.engine_notes.setdefault(id(engine), (engine, []))[1].append(fut)
    if not engine.closed:
        engine._set_notification_waker(w.waker)  # before the second look, in _ready
    w.waker.signal()
    try:
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)
    except asyncio.TimeoutError:
        raise _ferry.DeadlineExceeded("no notification from any peer of the engine by the deadline") from None


def _await_transfer(self: _ferry.Transfer):
    return wait(self).__await__()


_ferry.Transfer.__await__ = _await_transfer
