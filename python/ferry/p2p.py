"""ferry.p2p: the Endpoint API of UCCL's P2P engine, on top of ferry.

Code written for ``uccl.p2p`` runs unchanged once it imports ``from ferry
import p2p``::

    from ferry import p2p
    endpoint = p2p.Endpoint(local_gpu_idx=0, num_cpus=4)
    success, conn_id = endpoint.connect("10.0.0.2", remote_gpu_idx=1)
    success, mr_id = endpoint.reg(tensor.data_ptr(), tensor.numel() * 4)
    success = endpoint.send(conn_id, mr_id, tensor.data_ptr(), tensor.numel() * 4)

Every call returns the seed's tuples; ``success`` is False when the operation
failed, and the reason (a ``ferry.FerryError`` carrying the engine's message)
is logged as a warning on the ``ferry.p2p`` logger and kept in
``endpoint.last_error``. Wrong argument types raise TypeError/ValueError as
usual, and Ctrl-C during a blocking call raises KeyboardInterrupt.

Ports. The endpoint of GPU ``i`` listens on 0.0.0.0, port ``BASE + i``, where
BASE is ``FERRY_P2P_BASE_PORT`` (default 19800). ``connect(ip, remote_gpu_idx)``
therefore needs nothing but the peer's address and GPU index: it dials
``ip:(BASE + remote_gpu_idx)``; both hosts must use the same BASE. ``connect``
retries a refused connection (the peer not listening yet) for
``FERRY_P2P_CONNECT_TIMEOUT`` seconds (default 30). If the port is taken (say,
two endpoints of the same GPU index on one host), the endpoint warns and listens
on a free port instead, which peers reach only with ``connect(...,
remote_port=endpoint.port)``. (``FERRY_LISTEN``, ferry's own listen override,
wins over all of this when set.)

GPU index exchange. Right after connecting, ``connect`` sends one standalone
ferry notification, ``b"ferry.p2p/1 gpu=<local_gpu_idx>"``, and waits until the
peer has queued it; ``accept`` takes that first notification to report
``remote_gpu_idx`` (and closes connections that send none within 10 s).

Differences from the seed, all supersets: connections are bidirectional (both
sides may send and receive); ``recv``/``recv_async`` fail (success False) when
the message is not exactly ``size`` bytes (a larger one fails both sides); and
a few extras exist: ``dereg``, ``close``, ``port``, ``engine``, ``connection``,
``last_error``, keyword-only ``timeout``/``remote_port`` arguments.
On a host without GPUs, ``Endpoint(local_gpu_idx=0, ...)`` serves host memory;
the GPU index only names the port and what ``accept`` reports.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import ferry

__all__ = ["Endpoint", "DEFAULT_BASE_PORT", "base_port", "port_for_gpu"]

log = logging.getLogger("ferry.p2p")

DEFAULT_BASE_PORT = 19800
BASE_PORT_ENV = "FERRY_P2P_BASE_PORT"
CONNECT_TIMEOUT_ENV = "FERRY_P2P_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT = 30.0
HELLO_TIMEOUT = 10.0
HELLO_PREFIX = b"ferry.p2p/1 gpu="
# A GPU index has at most this many digits (its port must stay below 65536);
# a longer one in a peer's hello is refused before int() has to read it.
MAX_GPU_INDEX_DIGITS = 5
MAX_STREAMS = 16


def base_port() -> int:
    """The base port: FERRY_P2P_BASE_PORT, or 19800."""
    text = os.environ.get(BASE_PORT_ENV, "")
    if not text:
        return DEFAULT_BASE_PORT
    try:
        port = int(text)
    except ValueError:
        raise ValueError(f"{BASE_PORT_ENV}={text!r}: expected a port number") from None
    if not 0 < port < 65536:
        raise ValueError(f"{BASE_PORT_ENV}={text!r}: expected a port number in 1..65535")
    return port


def port_for_gpu(gpu_idx: int) -> int:
    """The port the endpoint of GPU `gpu_idx` listens on: base_port() + gpu_idx."""
    port = base_port() + int(gpu_idx)
    if port > 65535:
        raise ValueError(f"GPU index {gpu_idx} puts the port past 65535 ({BASE_PORT_ENV}={base_port()})")
    return port


def _connect_timeout() -> float:
    text = os.environ.get(CONNECT_TIMEOUT_ENV, "")
    try:
        return float(text) if text else DEFAULT_CONNECT_TIMEOUT
    except ValueError:
        raise ValueError(f"{CONNECT_TIMEOUT_ENV}={text!r}: expected seconds") from None


def _error(code: ferry.Code, message: str) -> ferry.FerryError:
    return ferry.Status(code, message).exception()


def _host_of(address: str) -> str:
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _index(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


class _Pending:
    """An asynchronous operation that poll_async has not reported done yet."""

    __slots__ = ("transfer", "expect", "what")

    def __init__(self, transfer: ferry.Transfer, expect: Optional[int], what: str) -> None:
        self.transfer = transfer
        self.expect = expect  # exact message size a receive must get, None for a send
        self.what = what


class Endpoint:
    """A P2P endpoint: one ferry engine listening on 0.0.0.0:(BASE + local_gpu_idx).

    Endpoint(local_gpu_idx, num_cpus): `local_gpu_idx` names this endpoint's GPU
    (and so its port); `num_cpus` is the number of data streams per connection
    (1..16), each with its own sending and receiving thread: a transfer one
    way keeps one thread a stream busy at each end, so about `num_cpus` CPUs
    an end (over loopback or a fast NIC each carries 2.5-5 GB/s). Thread-safe.
    """

    def __init__(self, local_gpu_idx: int, num_cpus: int, *, port: Optional[int] = None) -> None:
        self.local_gpu_idx = _index(local_gpu_idx, "local_gpu_idx")
        num_cpus = _index(num_cpus, "num_cpus")
        self.last_error: Optional[ferry.FerryError] = None
        self._lock = threading.Lock()
        self._conns: Dict[int, ferry.Connection] = {}
        self._regions: Dict[int, ferry.Region] = {}
        self._reg_counts: Dict[int, int] = {}
        self._pending: Dict[int, _Pending] = {}
        self._next_transfer = itertools.count(1)
        streams = min(max(num_cpus, 1), MAX_STREAMS)
        wanted = port if port is not None else port_for_gpu(self.local_gpu_idx)
        try:
            self.engine = ferry.Engine(listen=f"0.0.0.0:{wanted}", streams=streams)
        except ferry.Unavailable as e:
            log.warning("p2p endpoint of GPU %d: cannot listen on port %d (%s); listening on a free port instead, "
                        "which peers reach only with connect(..., remote_port=endpoint.port)",
                        self.local_gpu_idx, wanted, e)
            self.engine = ferry.Engine(listen="0.0.0.0:0", streams=streams)
        self.port = int(self.engine.address.rsplit(":", 1)[1])

    # ---- failures ----------------------------------------------------------

    def _fail(self, what: str, error: BaseException) -> None:
        self.last_error = error  # type: ignore[assignment]
        log.warning("p2p %s failed: %s: %s", what, type(error).__name__, error)

    def _conn(self, conn_id: int) -> ferry.Connection:
        conn = self._conns.get(conn_id)
        if conn is None:
            raise _error(ferry.Code.NOT_FOUND, f"conn_id {conn_id} is not a connection of this endpoint")
        return conn

    def _span(self, mr_id: int, ptr: int, size: int, what: str) -> Tuple[int, int]:
        """Checks that [ptr, ptr+size) lies inside region `mr_id`."""
        region = self._regions.get(mr_id)
        if region is None:
            raise _error(ferry.Code.NOT_FOUND, f"{what}: mr_id {mr_id} is not registered with this endpoint")
        ptr = _index(ptr, f"{what}: ptr")
        size = _index(size, f"{what}: size")
        if ptr < region.base or ptr + size > region.base + region.length:
            raise _error(ferry.Code.OUT_OF_RANGE,
                         f"{what}: [{ptr:#x}, +{size}) is not inside region {mr_id} "
                         f"[{region.base:#x}, +{region.length})")
        return ptr, size

    def _spans(self, mr_ids: Sequence[int], ptrs: Sequence[int], sizes: Sequence[int], num_iovs: int,
               what: str) -> List[Tuple[int, int]]:
        num_iovs = _index(num_iovs, "num_iovs")
        if not (len(mr_ids) == len(ptrs) == len(sizes) == num_iovs):
            raise _error(ferry.Code.INVALID_ARGUMENT,
                         f"{what}: num_iovs is {num_iovs} but the lists hold {len(mr_ids)} mr_ids, "
                         f"{len(ptrs)} pointers and {len(sizes)} sizes")
        return [self._span(m, p, s, f"{what}[{i}]") for i, (m, p, s) in enumerate(zip(mr_ids, ptrs, sizes))]

    @staticmethod
    def _check_size(got: int, expect: int, what: str) -> None:
        if got != expect:
            raise _error(ferry.Code.INVALID_ARGUMENT,
                         f"{what}: the message has {got} bytes, {expect} were expected")

    # ---- connection management ------------------------------------------------

    def connect(self, remote_ip_addr: str, remote_gpu_idx: int, *,
                remote_port: Optional[int] = None, timeout: Optional[float] = None) -> Tuple[bool, int]:
        """Connects to the endpoint of GPU `remote_gpu_idx` on `remote_ip_addr`.

        Dials remote_ip_addr:(BASE + remote_gpu_idx) (or `remote_port`), retrying
        while refused for `timeout` seconds (default FERRY_P2P_CONNECT_TIMEOUT or
        30), then tells the peer this endpoint's GPU index. Returns (success,
        conn_id).
        """
        remote_gpu_idx = _index(remote_gpu_idx, "remote_gpu_idx")
        try:
            port = remote_port if remote_port is not None else port_for_gpu(remote_gpu_idx)
            host = f"[{remote_ip_addr}]" if ":" in remote_ip_addr else remote_ip_addr
            address = f"{host}:{port}"
            budget = _connect_timeout() if timeout is None else timeout
            deadline = time.monotonic() + budget
            while True:
                try:
                    conn = self.engine.connect(address, timeout=max(0.0, deadline - time.monotonic()))
                    break
                except ferry.Unavailable:
                    if time.monotonic() + 0.1 >= deadline:
                        raise
                    time.sleep(0.1)
            if conn.peer_engine_id == self.engine.id:
                conn.close()
                raise _error(ferry.Code.UNAVAILABLE,
                             f"connect to {address} reached this endpoint itself: the endpoint of GPU "
                             f"{remote_gpu_idx} there is not running, and this one listens on its port")
            try:
                conn.notify(HELLO_PREFIX + str(self.local_gpu_idx).encode(),
                            timeout=max(HELLO_TIMEOUT, deadline - time.monotonic()))
            except BaseException:
                conn.close()
                raise
        except ferry.FerryError as e:
            self._fail(f"connect to {remote_ip_addr} GPU {remote_gpu_idx}", e)
            return False, 0
        with self._lock:
            self._conns[conn.id] = conn
        return True, conn.id

    def accept(self, *, timeout: Optional[float] = None) -> Tuple[bool, str, int, int]:
        """Waits for a peer endpoint to connect (blocking; `timeout` seconds, None: forever).

        Returns (success, remote_ip_addr, remote_gpu_idx, conn_id).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                conn = self.engine.accept(timeout=left)
            except ferry.FerryError as e:
                self._fail("accept", e)
                return False, "", -1, 0
            try:
                hello = conn.wait_notification(timeout=HELLO_TIMEOUT)
            except ferry.FerryError as e:
                log.warning("p2p accept: dropping connection from %s: no hello (%s)", conn.peer_address, e)
                conn.close()
                continue
            index = hello[len(HELLO_PREFIX):]
            if not hello.startswith(HELLO_PREFIX) or not index.isdigit() or len(index) > MAX_GPU_INDEX_DIGITS:
                log.warning("p2p accept: dropping connection from %s: not a ferry.p2p endpoint (first note %r)",
                            conn.peer_address, hello[:64])
                conn.close()
                continue
            with self._lock:
                self._conns[conn.id] = conn
            return True, _host_of(conn.peer_address), int(index), conn.id

    def connection(self, conn_id: int) -> ferry.Connection:
        """The ferry.Connection behind `conn_id`, for the full API (write/read, notifications)."""
        return self._conn(conn_id)

    def close_connection(self, conn_id: int) -> bool:
        """Closes one connection; its pending transfers fail."""
        with self._lock:
            conn = self._conns.pop(conn_id, None)
        if conn is None:
            self._fail("close_connection", _error(ferry.Code.NOT_FOUND, f"conn_id {conn_id} is not a connection"))
            return False
        conn.close()
        return True

    # ---- memory -------------------------------------------------------------------

    def reg(self, ptr: int, size: int) -> Tuple[bool, int]:
        """Registers [ptr, ptr+size) (host or GPU memory). Returns (success, mr_id)."""
        try:
            region = self.engine.reg(ptr, size)
        except ferry.FerryError as e:
            self._fail("reg", e)
            return False, 0
        with self._lock:
            self._regions[region.id] = region
            self._reg_counts[region.id] = self._reg_counts.get(region.id, 0) + 1
        return True, region.id

    def dereg(self, mr_id: int) -> bool:
        """Drops one registration of `mr_id` (ferry extension)."""
        region = self._regions.get(mr_id)
        try:
            if region is None:
                raise _error(ferry.Code.NOT_FOUND, f"dereg: mr_id {mr_id} is not registered with this endpoint")
            self.engine.dereg(region)
        except ferry.FerryError as e:
            self._fail("dereg", e)
            return False
        with self._lock:
            self._reg_counts[mr_id] -= 1
            if self._reg_counts[mr_id] == 0:  # the engine counts registrations of one range the same way
                del self._reg_counts[mr_id]
                del self._regions[mr_id]
        return True

    # ---- blocking transfers -------------------------------------------------------

    def send(self, conn_id: int, mr_id: int, ptr: int, size: int, *, timeout: Optional[float] = None) -> bool:
        """Sends [ptr, ptr+size) as one message; blocks until the peer holds it."""
        try:
            ptr, size = self._span(mr_id, ptr, size, "send")
            self._conn(conn_id).send(ptr, size, timeout=timeout)
            return True
        except ferry.FerryError as e:
            self._fail("send", e)
            return False

    def recv(self, conn_id: int, mr_id: int, ptr: int, size: int, *, timeout: Optional[float] = None) -> bool:
        """Receives the next message, exactly `size` bytes, into [ptr, ptr+size); blocks."""
        try:
            ptr, size = self._span(mr_id, ptr, size, "recv")
            got = self._conn(conn_id).recv(ptr, size, timeout=timeout)
            self._check_size(got, size, "recv")
            return True
        except ferry.FerryError as e:
            self._fail("recv", e)
            return False

    def sendv(self, conn_id: int, mr_id_list: Sequence[int], ptr_list: Sequence[int], size_list: Sequence[int],
              num_iovs: int, *, timeout: Optional[float] = None) -> bool:
        """Sends the concatenation of the `num_iovs` pieces as one message; blocks."""
        try:
            parts = self._spans(mr_id_list, ptr_list, size_list, num_iovs, "sendv")
            self._conn(conn_id).sendv(parts, timeout=timeout)
            return True
        except ferry.FerryError as e:
            self._fail("sendv", e)
            return False

    def recvv(self, conn_id: int, mr_id_list: Sequence[int], ptr_list: Sequence[int], size_list: Sequence[int],
              num_iovs: int, *, timeout: Optional[float] = None) -> bool:
        """Receives the next message scattered over the `num_iovs` pieces (exactly their total size); blocks."""
        try:
            parts = self._spans(mr_id_list, ptr_list, size_list, num_iovs, "recvv")
            got = self._conn(conn_id).recvv(parts, timeout=timeout)
            self._check_size(got, sum(s for _, s in parts), "recvv")
            return True
        except ferry.FerryError as e:
            self._fail("recvv", e)
            return False

    # ---- asynchronous transfers ----------------------------------------------------

    def _track(self, transfer: ferry.Transfer, expect: Optional[int], what: str) -> int:
        with self._lock:
            transfer_id = next(self._next_transfer)
            self._pending[transfer_id] = _Pending(transfer, expect, what)
        return transfer_id

    def send_async(self, conn_id: int, mr_id: int, ptr: int, size: int) -> Tuple[bool, int]:
        """Starts sending [ptr, ptr+size); returns (success, transfer_id) for poll_async."""
        try:
            ptr, size = self._span(mr_id, ptr, size, "send_async")
            transfer = self._conn(conn_id).send_async(ptr, size)
        except ferry.FerryError as e:
            self._fail("send_async", e)
            return False, 0
        return True, self._track(transfer, None, "send_async")

    def recv_async(self, conn_id: int, mr_id: int, ptr: int, size: int) -> Tuple[bool, int]:
        """Starts receiving exactly `size` bytes into [ptr, ptr+size); returns (success, transfer_id)."""
        try:
            ptr, size = self._span(mr_id, ptr, size, "recv_async")
            transfer = self._conn(conn_id).recv_async(ptr, size)
        except ferry.FerryError as e:
            self._fail("recv_async", e)
            return False, 0
        return True, self._track(transfer, size, "recv_async")

    def poll_async(self, transfer_id: int) -> Tuple[bool, bool]:
        """Returns (success, is_done) for an asynchronous transfer; never blocks.

        (True, False): still running. (True, True): finished successfully.
        (False, True): finished with an error (see last_error). (False, False):
        unknown transfer_id (never issued, or already reported done).
        Once reported done, the id is forgotten.
        """
        pending = self._pending.get(transfer_id)
        if pending is None:
            self._fail("poll_async", _error(ferry.Code.NOT_FOUND,
                                            f"transfer_id {transfer_id} is unknown (or already reported done)"))
            return False, False
        if not pending.transfer.test():
            return True, False
        with self._lock:
            self._pending.pop(transfer_id, None)
        try:
            pending.transfer.status().raise_if_error()
            if pending.expect is not None:
                self._check_size(pending.transfer.bytes, pending.expect, pending.what)
        except ferry.FerryError as e:
            self._fail(f"{pending.what} (transfer {transfer_id})", e)
            return False, True
        return True, True

    # ---- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Closes every connection and the engine (ferry extension). Idempotent."""
        with self._lock:
            self._conns.clear()
            self._pending.clear()
            self._regions.clear()
            self._reg_counts.clear()
        self.engine.close()

    def __enter__(self) -> "Endpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ferry.p2p.Endpoint gpu={self.local_gpu_idx} port={self.port} connections={len(self._conns)}>"
