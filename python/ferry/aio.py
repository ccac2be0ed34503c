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
(an unmatched receive, a write, or over TCP a receive or read moving data:
Transfer.cancel, which for one moving data holds the loop until none of it
lands any more); on the local transport a receive or read already moving
data runs to its end, and its buffers stay alive until then, as with a
dropped Transfer.
"""

import asyncio
import weakref
from typing import Dict, List, Optional, Tuple

from . import _ferry

__all__ = ["wait", "notification", "engine_notification"]


class _Notes:
    """Futures waiting for the notifications of one connection or engine."""

    def __init__(self, poll, ended, stop_waking):
        self.poll = poll                # -> the next note, or None
        self.ended = ended              # -> the exception once no note can come, or None
        self.stop_waking = stop_waking  # uninstalls the waker
        self.futures: List[asyncio.Future] = []

    def hand_out(self) -> bool:
        """Settles what it can; True once nothing waits any more."""
        self.futures[:] = [f for f in self.futures if not f.done()]
        while self.futures:
            note = self.poll()
            if note is None:
                break
            self.futures.pop(0).set_result(note)
        error = self.ended() if self.futures else None
        if error is not None:
            for f in self.futures:
                f.set_exception(error)
            self.futures.clear()
        if self.futures:
            return False
        self.stop_waking()
        return True


class _LoopWaker:
    """The eventfd of one event loop and what waits on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.waker = _ferry._Waker()
        self.transfers: List[Tuple[_ferry.Transfer, asyncio.Future]] = []
        self.notes: Dict[int, _Notes] = {}  # by id() of the connection or engine
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
        for key, notes in list(self.notes.items()):
            if notes.hand_out():
                del self.notes[key]


_wakers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaker]" = weakref.WeakKeyDictionary()


def _waker_of(loop: asyncio.AbstractEventLoop) -> _LoopWaker:
    w = _wakers.get(loop)
    if w is None:
        w = _wakers[loop] = _LoopWaker(loop)
    return w


async def _within(fut: asyncio.Future, timeout: Optional[float], late: str):
    """Awaits `fut`; after `timeout` seconds cancels it (not the operation
    behind it) and raises DeadlineExceeded(late)."""
    try:
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)
    except asyncio.TimeoutError:
        raise _ferry.DeadlineExceeded(late) from None


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
        return await _within(fut, timeout, f"transfer {transfer.id} still running at its deadline")
    except asyncio.CancelledError:
        transfer.cancel()  # stops what can stop (on the local transport a receive or read moving data goes on)
        raise


async def _next_note(source, make_notes, install_waker, timeout: Optional[float], late: str):
    """The next note of `source` (a connection or an engine), on this loop."""
    w = _waker_of(asyncio.get_running_loop())
    fut = asyncio.get_running_loop().create_future()
    notes = w.notes.get(id(source))
    if notes is None:
        notes = w.notes[id(source)] = make_notes()
    notes.futures.append(fut)
    # Installed before the look that the signal causes: a note queued in
    # between signals it again.
    install_waker(w.waker)
    w.waker.signal()
    return await _within(fut, timeout, late)


async def notification(conn: _ferry.Connection, timeout: Optional[float] = None) -> bytes:
    """Awaits the next notification from `conn`'s peer (bytes), in the order
    they were sent. Raises the connection's failure, or DeadlineExceeded after
    `timeout` seconds."""
    note = conn.poll_notification()
    if note is not None:
        return note

    def ended():
        health = conn.health()
        return None if health.ok() else health.exception()

    return await _next_note(
        conn, lambda: _Notes(conn.poll_notification, ended, lambda: conn._set_notification_waker(None)),
        conn._set_notification_waker, timeout,
        f"no notification from connection {conn.id} to {conn.peer_address} by the deadline")


async def engine_notification(engine: _ferry.Engine, timeout: Optional[float] = None) -> _ferry.Notification:
    """Awaits the next notification from any connection of `engine`, as a
    ferry.Notification (connection_id, peer_engine_id, peer_address,
    message): Engine.wait_notification for an event loop. Raises Cancelled
    once the engine closes, or DeadlineExceeded after `timeout` seconds."""
    if not engine.closed:
        note = engine.poll_notification()
        if note is not None:
            return note

    def stop_waking():
        if not engine.closed:
            engine._set_notification_waker(None)

    def install_waker(waker):
        if not engine.closed:
            engine._set_notification_waker(waker)

    return await _next_note(
        engine,
        lambda: _Notes(lambda: None if engine.closed else engine.poll_notification(),
                       lambda: _ferry.Cancelled("wait_notification: the engine was closed") if engine.closed else None,
                       stop_waking),
        install_waker, timeout, "no notification from any peer of the engine by the deadline")


def _await_transfer(self: _ferry.Transfer):
    return wait(self).__await__()


_ferry.Transfer.__await__ = _await_transfer
