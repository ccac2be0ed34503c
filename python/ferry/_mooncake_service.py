"""The background side of a ferry.mooncake engine: accepts peers, answers
their requests for this engine's segment table, and queues the TransferNotify
messages that arrive, for get_notifies.

Two named threads: one accepts (ferry hands over every connection a peer
opens), one takes the engine's notifications in order. Both block in ferry
and wake when the engine closes; neither polls.

Limits against a hostile or careless peer: one table reply in flight per
connection (a request while one is pending is dropped; the asker times out
and asks again); a request on a connection accept() has not handed over yet
waits, one per connection and at most MAX_PARKED in all, for the accepting
thread to answer it, so no request ever stalls this thread; notifications wait here only up to MAX_PENDING_NOTIFIES,
past which this thread stops taking more, so they stay in ferry, whose
per-connection budget (connection_memory_bytes) then fails the connection
that floods.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

import ferry
from . import _mooncake_wire as wire

log = logging.getLogger("ferry.mooncake")

MAX_PENDING_NOTIFIES = 65536
MAX_PARKED = 1024


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
            with self._lock:
                self._forget_closed()
                self._accepted[conn.id] = conn
                sequence = self._parked.pop(conn.id, None)
            if sequence is not None:
                self._answer(conn.id, sequence)

    def _notification_loop(self) -> None:
        while True:
            with self._lock:
                while len(self._notifies) >= MAX_PENDING_NOTIFIES and not self._closing:
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
                log.warning("mooncake: dropped a message from %s (connection %d): %s",
                            note.peer_address, note.connection_id, e)

    def _handle(self, note: ferry.Notification) -> None:
        message = note.message
        sequence = wire.decode_request(message)
        if sequence is not None:
            self._answer(note.connection_id, sequence)
            return
        named = wire.decode_notify(message)
        if named is None:  # a plain ferry notification from an engine that is no facade
            named = ("", message.decode(errors="replace"))
        with self._lock:
            self._notifies.append(named)

    def _answer(self, connection_id: int, sequence: int) -> None:
        with self._answering:  # both threads answer; one reply per connection at a time
            try:
                self._answer_locked(connection_id, sequence)
            except (ferry.FerryError, wire.WireError) as e:  # neither thread may end over one reply
                log.warning("mooncake: cannot answer connection %d: %s", connection_id, e)

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

