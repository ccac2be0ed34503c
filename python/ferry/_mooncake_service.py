"""The background side of a ferry.mooncake engine: accepts peers, answers
their requests for this engine's segment table, and queues the TransferNotify
messages that arrive, for get_notifies.

Two named threads: one accepts (ferry hands over every connection a peer
opens), one takes the engine's notifications in order. Both block in ferry
and wake when the engine closes; neither polls.

Neither thread ends on anything a peer sends: a message that does not
decode, or whose handling fails in any other way, is dropped with a log line
(at most one a second, with the count dropped since), and the thread goes on.

Limits against a hostile or careless peer: one table reply in flight per
connection (a request while one is pending is dropped; the asker times out
and asks again); a request on a connection accept() has not handed over yet
waits, one per connection and at most MAX_PARKED in all, for the accepting
thread to answer it, so no request ever stalls this thread; TransferNotify
messages wait here only up to MAX_PENDING_NOTIFY_BYTES of Python memory
(their strings, as sys.getsizeof counts them, and ENTRY_BYTES each), past
which this thread stops taking notifications from ferry, so they stay there,
whose per-connection budget (connection_memory_bytes) then fails the
connection that floods. (Table requests are notifications too: while the
queue is full they wait in ferry with the rest, until get_notifies empties
it.)
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import OrderedDict, deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

import ferry
from . import _mooncake_wire as wire

log = logging.getLogger("ferry.mooncake")

MAX_PENDING_NOTIFY_BYTES = 64 << 20  # TransferNotify messages get_notifies has not taken yet
ENTRY_BYTES = 120  # what one queued message costs besides its strings: its tuple and the deque's slot
MAX_PARKED = 1024
DROP_LOG_INTERVAL_S = 1.0  # at most one line a second about dropped messages


class _DropLog:
    """Logs messages the service drops, at most once per DROP_LOG_INTERVAL_S
    with the count dropped since: a peer that sends garbage must not flood
    the log. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0.0
        self._unlogged = 0

    def dropped(self, what: str, level: int = logging.WARNING) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._unlogged += 1
                return
            self._next = now + DROP_LOG_INTERVAL_S
            unlogged, self._unlogged = self._unlogged, 0
        more = f" ({unlogged} more dropped since the last line)" if unlogged else ""
        log.log(level, "mooncake: dropped %s%s", what, more)


class _Reply:
    """A table message in flight to one peer, with the memory it is sent from."""

    __slots__ = ("transfer", "region", "buffer")

    def __init__(self, transfer: ferry.Transfer, region: ferry.Region, buffer: np.ndarray) -> None:
        self.transfer = transfer
        self.region = region
        self.buffer = buffer


class Service:
    """Runs until the engine closes. `table()` gives the segments to send."""

    def __init__(self, engine: ferry.Engine, table: Callable[[], List[wire.Segment]],
                 outgoing: Callable[[int], Optional[ferry.Connection]]) -> None:
        """`outgoing(id)`: the connection of that id this engine opened, if any."""
        self._engine = engine
        self._table = table
        self._outgoing = outgoing
        self._lock = threading.Condition()
        self._answering = threading.Lock()
        self._accepted: Dict[int, ferry.Connection] = {}
        self._parked: "OrderedDict[int, int]" = OrderedDict()  # connection id -> sequence asked for
        self._replies: Dict[int, _Reply] = {}
        self._notifies: Deque[Tuple[str, str]] = deque()
        self._notify_bytes = 0  # what _notifies holds: its strings (sys.getsizeof) and ENTRY_BYTES each
        self._drops = _DropLog()
        self._closing = False
        self._threads = [
            threading.Thread(target=self._accept_loop, name="ferry-mc-accept", daemon=True),
            threading.Thread(target=self._notification_loop, name="ferry-mc-notify", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # ---- what the engine asks of it ---------------------------------------

    def take_notifies(self) -> List[Tuple[str, str]]:
        with self._lock:
            out = list(self._notifies)
            self._notifies.clear()
            self._notify_bytes = 0
            self._lock.notify_all()
        return out

    def stop(self, timeout: float = 10.0) -> None:
        """Call after the engine closed (that wakes both threads)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        for t in self._threads:
            t.join(timeout)
        with self._lock:
            for reply in self._replies.values():
                reply.transfer.cancel()
            self._replies.clear()
            self._accepted.clear()
            self._parked.clear()

    # ---- the threads ------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                conn = self._engine.accept(timeout=None)
            except ferry.FerryError as e:
                if self._engine.closed:
                    return
                log.warning("mooncake: accepting a peer failed: %s", e)
                continue
            try:
                with self._lock:
                    self._forget_closed()
                    self._accepted[conn.id] = conn
                    sequence = self._parked.pop(conn.id, None)
                if sequence is not None:
                    self._answer(conn.id, sequence)
            except Exception:  # a fault of ours must cost this connection's request, not the thread
                log.exception("mooncake: taking connection %d failed", conn.id)

    def _notification_loop(self) -> None:
        while True:
            with self._lock:
                while self._notify_bytes >= MAX_PENDING_NOTIFY_BYTES and not self._closing:
                    self._lock.wait()
                if self._closing:
                    return
            try:
                note = self._engine.wait_notification(timeout=None)
            except ferry.FerryError as e:
                if self._engine.closed:
                    return
                log.warning("mooncake: waiting for notifications failed: %s", e)
                continue
            try:
                self._handle(note)
            except wire.WireError as e:
                self._drops.dropped(f"a message from {note.peer_address} (connection {note.connection_id}): {e}")
            except Exception as e:  # a fault of ours must cost one message, not the thread
                self._drops.dropped(f"a message from {note.peer_address} (connection {note.connection_id}) "
                                    f"whose handling failed: {type(e).__name__}: {e}", logging.ERROR)

    def _handle(self, note: ferry.Notification) -> None:
        message = note.message
        sequence = wire.decode_request(message)
        if sequence is not None:
            self._answer(note.connection_id, sequence)
            return
        named = wire.decode_notify(message)
        if named is None:  # a plain ferry notification from an engine that is no facade
            named = ("", message.decode(errors="replace"))
        size = sys.getsizeof(named[0]) + sys.getsizeof(named[1]) + ENTRY_BYTES
        with self._lock:
            self._notifies.append(named)
            self._notify_bytes += size

    def _answer(self, connection_id: int, sequence: int) -> None:
        with self._answering:  # both threads answer; one reply per connection at a time
            try:
                self._answer_locked(connection_id, sequence)
            except (ferry.FerryError, wire.WireError) as e:  # neither thread may end over one reply
                self._drops.dropped(f"a table request of connection {connection_id}: cannot answer it: {e}")

    def _answer_locked(self, connection_id: int, sequence: int) -> None:
        with self._lock:
            if self._closing:
                return
            conn = self._accepted.get(connection_id) or self._outgoing(connection_id)
            if conn is None:  # not out of accept() yet: the accepting thread answers it
                self._parked[connection_id] = sequence
                self._parked.move_to_end(connection_id)
                while len(self._parked) > MAX_PARKED:
                    self._parked.popitem(last=False)
                return
            pending = self._replies.get(connection_id)
            if pending is not None and not pending.transfer.test():
                log.debug("mooncake: connection %d asked again while its table is on the way: dropped", connection_id)
                return
            if pending is not None:
                self._release(connection_id)
        payload = wire.encode_table(sequence, self._table())
        buffer = np.frombuffer(bytearray(payload), dtype=np.uint8)
        region = self._engine.reg(buffer)
        try:
            transfer = conn.send_async(buffer)
        except ferry.FerryError:
            self._engine.dereg(region)
            raise
        with self._lock:
            self._replies[connection_id] = _Reply(transfer, region, buffer)

    # ---- bookkeeping (under _lock) ------------------------------------------

    def _release(self, connection_id: int) -> None:
        reply = self._replies.pop(connection_id)
        try:
            self._engine.dereg(reply.region)
        except ferry.FerryError as e:
            log.debug("mooncake: deregistering a sent table: %s", e)

    def _forget_closed(self) -> None:
        for cid in [cid for cid, c in self._accepted.items() if not c.health().ok()]:
            del self._accepted[cid]
            self._parked.pop(cid, None)
        for cid in [cid for cid in self._replies if cid not in self._accepted and self._outgoing(cid) is None]:
            self._replies[cid].transfer.cancel()
            self._release(cid)

