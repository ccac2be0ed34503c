"""Who connected to a ferry.p2p Endpoint, and through which door.

UCCL has three ways in: accept() (a peer that dialled the endpoint's
address), accept_local() (a process on this host that named this endpoint's
GPU) and join_group (a member of a rendezvous group). A ferry engine has one
listener, so one thread takes every connection, reads the hello its peer sends
first (_p2p_wire.Hello) and files the connection by kind; each call takes from
its own queue, and a connection never reaches the wrong call. The thread starts
on first use: an endpoint that only dials out, or only serves one-sided
access, runs none.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import weakref
from typing import Callable, Deque, Dict, List, Optional, Tuple

import ferry

from ._p2p_wire import HELLO_KINDS, Hello, parse_hello

log = logging.getLogger("ferry.p2p")

# A peer that connects and says nothing is dropped after this long, so that
# half-open connections cannot pile up in the engine.
HELLO_TIMEOUT_S = 10.0
_IDLE_POLL_S = 0.2  # engine.accept's wait while no hello is outstanding: bounds close()
_HELLO_POLL_S = 0.005  # ... and while one is: bounds how late a slow hello is seen

Accepted = Tuple[ferry.Connection, Hello]

# Acceptor threads still running. At interpreter exit they are stopped before
# finalization: a daemon thread that finalization catches inside a ferry call
# is unwound by pthread_exit through C++ frames, which aborts the process.
_running: "weakref.WeakSet[Acceptor]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for acceptor in list(_running):
        acceptor.close()


def _error(code: ferry.Code, message: str) -> ferry.FerryError:
    return ferry.Status(code, message).exception()


class Acceptor:
    """Accepts an engine's connections and files them by hello kind.

    Thread-safe. Only its thread ("ferry-p2p-accept") calls engine.accept.
    In passive mode (start_passive_accept) every connection goes to
    `on_passive` instead of a queue.
    """

    def __init__(self, engine: ferry.Engine, on_passive: Callable[[ferry.Connection, Hello], None]) -> None:
        self._engine = engine
        self._on_passive = on_passive
        self._cond = threading.Condition()
        self._queues: Dict[str, Deque[Accepted]] = {kind: collections.deque() for kind in HELLO_KINDS}
        self._passive = False
        self._stopped: Optional[ferry.FerryError] = None
        self._thread = threading.Thread(target=self._run, name="ferry-p2p-accept", daemon=True)
        self._thread.start()
        _running.add(self)

    def set_passive(self) -> None:
        """From now on hands every connection, queued ones first, to on_passive."""
        with self._cond:
            self._passive = True
            queued = [item for queue in self._queues.values() for item in queue]
            for queue in self._queues.values():
                queue.clear()
        for conn, hello in queued:
            self._on_passive(conn, hello)

    def take(self, kind: str, timeout: Optional[float], rank: Optional[int] = None) -> Accepted:
        """The oldest connection of `kind` (and `rank`, if given); blocks up to
        `timeout` seconds (None: no limit). Raises DeadlineExceeded, or
        Cancelled once the endpoint closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                queue = self._queues[kind]
                for item in queue:
                    if rank is None or item[1].rank == rank:
                        queue.remove(item)
                        return item
                if self._stopped is not None:
                    raise _error(ferry.Code.CANCELLED, f"accept: the endpoint stopped accepting ({self._stopped})")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    what = f"rank {rank}" if rank is not None else f"{kind} peer"
                    raise _error(ferry.Code.DEADLINE_EXCEEDED, f"accept: no {what} connected within {timeout} s")
                # Short waits keep a blocked main thread responsive to Ctrl-C.
                self._cond.wait(0.5 if left is None else min(left, 0.5))

    def close(self) -> None:
        """Stops the thread (within _IDLE_POLL_S); pending take() calls fail."""
        with self._cond:
            if self._stopped is None:
                self._stopped = _error(ferry.Code.CANCELLED, "the endpoint was closed")
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()
        _running.discard(self)

    # ---- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        waiting: List[Tuple[ferry.Connection, float]] = []  # accepted, hello not read yet
        while True:
            with self._cond:
                if self._stopped is not None:
                    return
            try:
                conn = self._engine.accept(timeout=_HELLO_POLL_S if waiting else _IDLE_POLL_S)
                waiting.append((conn, time.monotonic() + HELLO_TIMEOUT_S))
            except ferry.DeadlineExceeded:
                pass
            except ferry.FerryError as e:  # the engine closed under us
                with self._cond:
                    self._stopped = self._stopped or e
                    self._cond.notify_all()
                return
            waiting = [item for item in waiting if not self._file(*item)]

    def _file(self, conn: ferry.Connection, deadline: float) -> bool:
        """Files `conn` once its hello is there; False while still waiting for it."""
        note = conn.poll_notification()
        if note is None:
            if time.monotonic() < deadline and conn.health().ok():
                return False
            log.warning("p2p accept: dropping connection from %s: no hello within %.0f s",
                        conn.peer_address, HELLO_TIMEOUT_S)
            conn.close()
            return True
        hello = parse_hello(note)
        if hello is None:
            log.warning("p2p accept: dropping connection from %s: not a ferry.p2p endpoint (first note %r)",
                        conn.peer_address, note[:64])
            conn.close()
            return True
        with self._cond:
            passive = self._passive
            if not passive:
                self._queues[hello.kind].append((conn, hello))
                self._cond.notify_all()
        if passive:
            self._on_passive(conn, hello)
        return True
