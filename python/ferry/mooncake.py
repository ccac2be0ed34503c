"""ferry.mooncake: the Python API of Mooncake's Transfer Engine, on ferry.

Code written for ``mooncake.engine`` runs on ferry with the import changed::

    from ferry.mooncake import TransferEngine, TransferOpcode, TransferNotify
    engine = TransferEngine()
    engine.initialize("10.0.0.1", "P2PHANDSHAKE", "tcp", "")
    session = f"10.0.0.1:{engine.get_rpc_port()}"       # what peers name this engine by
    engine.register_memory(kv_pool.data_ptr(), kv_pool.nbytes)
    engine.batch_transfer_sync_write("10.0.0.2:15001", local_addrs, remote_addrs, lengths)

Same signatures, same returns: 0 on success and a negative number on failure
(never an exception for a failed transfer; the reason is logged on the
``ferry.mooncake`` logger and kept in ``engine.last_error``), batch ids (0
when a batch could not be posted), ``transfer_check_status`` 1 / 0 / -1 / -2,
``TransferOpcode.Read`` / ``.Write`` (also ``TransferEngine.TransferOpcode``).

Remote memory is named by raw address. An engine learns a peer's registered
segments (address ranges, each with the ferry descriptor that exports it)
when it first talks to it, and again when an address is not in what it knows;
an address is turned into (segment, offset) here, and the peer's engine still
checks every byte against what it exported. An address outside the peer's
segments, a length past a segment's end, a local buffer outside this engine's
registered memory, a dead peer: a negative return, nothing written, and the
engine goes on working. (A buffer the peer unregistered after telling of it
is refused by the peer when the bytes arrive: that block fails the batch,
and the batch's other blocks may have landed, as in Mooncake.) A batch to
one peer is one ferry operation (writes: one block write between pools
prepared once per pair of tables).

Differences from Mooncake, all stated:
- ``metadata_server``: ``"P2PHANDSHAKE"`` (peers named ``host:rpc_port``, no
  server), a ferry directory URL ``redis://host:port[/ns]`` /
  ``etcd://host:port[/ns]`` (a bare ``host:port`` means etcd, as in
  Mooncake), or Mooncake's HTTP metadata server ``http(s)://host:port/path``
  (``metadata_type="http"`` with a bare ``host:port/path``). With a server
  the engine publishes itself under its ``local_hostname`` and resolves
  peers' names there. In a ferry directory a name's ``:`` and other
  characters outside ``[A-Za-z0-9._-]`` become ``_``, and the entry is
  ferry's, not Mooncake's. On an HTTP server the entries are Mooncake's
  keys and shapes (``mooncake/rpc_meta/<name>``, ``mooncake/ram/<name>``;
  ferry/_mooncake_http.py), but peers take the buffers, with the descriptors
  that export them, from the engine, not from the server: a Mooncake engine
  and a ferry one still cannot talk.
- The port of ``local_hostname`` is tried first; when it is taken the
  engine listens on another, as Mooncake's P2PHANDSHAKE engine does (it
  takes a free one), and ``get_rpc_port()`` says which. With P2PHANDSHAKE
  the engine's name is ``host:<that port>``.
- ``protocol``: ``"tcp"`` and ``"rdma"`` both run on ferry's transports (TCP
  between hosts, the same-host transport within one); other names are refused.
- ``device_name``: NICs to use, comma-separated interface names (ferry's
  ``nics``); names that are no network interface here (RDMA devices such as
  ``mlx5_0``) are ignored with a log line.
- Local buffers must lie in memory registered with ``register_memory`` or
  ``allocate_managed_buffer``; anything else is refused (-1), as Mooncake's
  RDMA transport does.
- ``register_memory``'s ``location`` (``batch_register_memory``'s: one, or
  one per buffer) is checked against what ferry detects the memory to be:
  ``"cpu:N"`` for host memory, ``"cuda:N"`` for GPU N's; a contradiction,
  or a kind ferry does not register (``"npu:0"``), is refused with -1 and
  nothing registered. ``"*"`` and ``""`` detect. The NUMA node of
  ``"cpu:N"`` is not checked.
- ``get_local_topology()`` names network interfaces (ferry's NICs), not
  RDMA devices, and ranks NICs for a GPU by NUMA node, not PCI distance
  (ferry/_mooncake_topology.py describes its fields).
- ``*_on_cuda(stream_ptr)`` returns at once, as Mooncake's does: the
  transfer is held until the stream has run the work queued before the call,
  and the stream waits on the GPU for the transfer before the work queued
  after it (Mooncake runs the transfer in a host function on the stream). A
  failure is logged and counted in ``engine.cuda_failures`` once the
  transfer ends; the process is not ended. Where the driver cannot make a
  stream wait, the call returns once the transfer ended.
- ``MC_TRANSFER_TIMEOUT`` (seconds, default 30) bounds every transfer and
  connection (reaching a peer takes at most 3 s of it, so a dead peer fails
  each call within that); ``MC_TCP_BIND_ADDRESS`` picks the address to listen on (default
  every address).
- A call that reports a timeout (-1 from a sync call or
  ``get_batch_transfer_status``, -2 from ``transfer_check_status``) first
  stops the transfer: a read is cancelled, and one that cannot be, or a
  write, ends with its connection (the next call to that peer connects
  anew). Nothing of it lands in this process's buffers after the call
  returned.
- TransferNotify messages that ``get_notifies`` has not collected are held
  up to 64 MiB (their Python strings). Past that the engine takes no more
  notifications from ferry until ``get_notifies`` is called; ferry holds them
  within its per-connection budget (``FERRY_CONNECTION_MEMORY``, 256 MiB),
  and fails a connection that goes past it. Table requests, which are
  notifications too, wait as well.

What peers send is checked before use (every number against its field's
range); a message that is malformed, or whose handling fails, is dropped with
a log line, and the threads that serve peers go on. Each buffer is exported
once, when registered; a table request exports nothing.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import logging
import os
import threading
import time
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import ferry
from . import _mooncake_start as start
from . import _mooncake_topology as topology
from . import _mooncake_wire as wire
from ._mooncake_http import MetadataError, Publication
from ._mooncake_segments import SegmentIndex, Unmapped
from ._mooncake_service import Service

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "P2P_HANDSHAKE", "Read", "Write"]

log = logging.getLogger("ferry.mooncake")

P2P_HANDSHAKE = start.P2P_HANDSHAKE
DEFAULT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 3.0  # at most this long to reach a peer, within MC_TRANSFER_TIMEOUT

# Returns, Mooncake's codes where one fits.
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_ADDRESS_NOT_REGISTERED = -3
ERR_ADDRESS_OVERLAPPED = -7
ERR_SOCKET = -101
ERR_METADATA = -200
ERR_MEMORY = -302
ERR_NOT_IMPLEMENTED = -400
ERR_TRANSFER = -1

STATUS_COMPLETED = 1
STATUS_WAITING = 0
STATUS_FAILED = -1
STATUS_TIMEOUT = -2


class TransferOpcode(enum.IntEnum):
    """Mooncake spells the members Read and Write (also exported from the
    module, as its binding's export_values does); READ and WRITE, this
    facade's first spelling, name the same members."""

    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: `name` and `msg`, delivered to the target after the data."""

    __slots__ = ("name", "msg")

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TransferNotify) and (self.name, self.msg) == (other.name, other.msg)


class _Failure(Exception):
    """A request this facade refuses or that failed: its return code and why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _timeout_s() -> float:
    text = os.environ.get("MC_TRANSFER_TIMEOUT", "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"MC_TRANSFER_TIMEOUT={text!r}: expected seconds") from None
    if value <= 0:
        raise ValueError(f"MC_TRANSFER_TIMEOUT={text!r}: expected seconds > 0")
    return value


class _Peer:
    """One target: the connection to it and the segment table it last sent."""

    def __init__(self, name: str, conn: ferry.Connection) -> None:
        self.name = name
        self.conn = conn
        self.lock = threading.Lock()  # one table fetch at a time
        self.segments: SegmentIndex[ferry.RemoteDescriptor] = SegmentIndex()
        self.sequence = itertools.count(1)
        self.pools: Optional[Tuple[int, int, ferry.BlockPools]] = None  # (local version, remote version, pools)
        self.lost = False  # the connection failed: the next request connects anew
        self.stale = False  # an export in `segments` was revoked: ask for the table again
        self.first = 0  # the address of the first buffer the peer registered, 0 if none


class _Batch:
    __slots__ = ("transfers", "deadline", "notify", "peer", "reads")

    def __init__(self, transfers: List[ferry.Transfer], deadline: float, peer: _Peer,
                 notify: Optional[bytes], reads: bool) -> None:
        self.transfers = transfers
        self.deadline = deadline
        self.peer = peer
        self.notify = notify  # sent after a read completes (a write carries its own)
        self.reads = reads  # its bytes land in this process's memory


def _cancel(transfer: ferry.Transfer) -> bool:
    """transfer.cancel(), with a failure to cancel as False."""
    try:
        return transfer.cancel()
    except ferry.FerryError as e:
        log.debug("mooncake: cancelling a transfer past its deadline: %s", e)
        return False


def _shutdown(held: List[object]) -> None:
    """Takes the engine out of the HTTP metadata server (where it is in one),
    closes it and stops its threads; runs at close(), when the TransferEngine
    is collected, or at interpreter exit, whichever is first (ferry's threads
    must not outlive the interpreter)."""
    if not held:
        return
    engine, service, publication = held
    held.clear()
    if publication is not None:
        publication.unpublish()
    engine.close()
    service.stop()


def _check_location(location: object, region: Optional[ferry.Region] = None) -> None:
    """Raises _Failure (-1, as Mooncake refuses a location it does not
    know) when `location` is malformed, or names other memory than `region`
    (its kind and GPU as ferry detected them)."""
    try:
        topology.check_location(location, region)
    except ValueError as e:
        raise _Failure(ERR_INVALID_ARGUMENT, str(e)) from None


class TransferEngine:
    """Mooncake's TransferEngine on a ferry engine. Thread-safe."""

    TransferOpcode = TransferOpcode  # Mooncake's binding hangs the enum on the class too

    def __init__(self) -> None:
        self.last_error = ""
        self.cuda_failures = 0
        self._engine: Optional[ferry.Engine] = None
        self._service: Optional[Service] = None
        self._session = ""
        self._use_directory = False
        self._publication: Optional[Publication] = None  # on the HTTP metadata server, with one
        self._timeout = DEFAULT_TIMEOUT_S
        self._lock = threading.Lock()
        self._local: SegmentIndex[ferry.Region] = SegmentIndex()
        # What peers are told, in registration order (the first is get_first_buffer_address's):
        # each buffer exported once, when registered; its export goes with its region at unregistration.
        self._table: List[wire.Segment] = []
        self._locations: Dict[int, str] = {}  # base -> the location it was registered with, for the segment entry
        self._managed: Dict[int, Tuple[np.ndarray, int]] = {}
        self._peers: Dict[str, _Peer] = {}
        self._batches: Dict[int, _Batch] = {}
        self._batch_ids = itertools.count(1)
        self._stream_batches: List[Tuple[str, int, _Batch]] = []
        self._held: List[object] = []
        self._closer = weakref.finalize(self, _shutdown, self._held)

    # ---- failures ----------------------------------------------------------

    def _fail(self, what: str, code: int, message: str) -> int:
        self.last_error = f"{what}: {message}"
        log.warning("mooncake %s failed (%d): %s", what, code, message)
        return code

    def _guard(self, what: str, body) -> int:
        try:
            return body()
        except _Failure as f:
            return self._fail(what, f.code, str(f))
        except ferry.FerryError as e:
            code = ERR_SOCKET if isinstance(e, (ferry.Unavailable, ferry.PeerLost)) else ERR_TRANSFER
            return self._fail(what, code, f"{type(e).__name__}: {e}")

    def _ferry(self) -> ferry.Engine:
        if self._engine is None:
            raise _Failure(ERR_INVALID_ARGUMENT, "the engine is not initialized (call initialize first)")
        return self._engine

    # ---- initialization ---------------------------------------------------

    def initialize(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str) -> int:
        kind = "p2p" if metadata_server == P2P_HANDSHAKE else ""
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, kind)

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str,
                       metadata_type: str) -> int:
        return self._guard("initialize", lambda: self._initialize(local_hostname, metadata_server, protocol,
                                                                   device_name, metadata_type))

    def _initialize(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str,
                    metadata_type: str) -> int:
        if self._engine is not None:
            raise _Failure(ERR_INVALID_ARGUMENT, "already initialized")
        if protocol not in ("tcp", "rdma"):
            raise _Failure(ERR_NOT_IMPLEMENTED, f"protocol {protocol!r}: ferry's engine speaks tcp (and takes rdma "
                                                "as its alias)")
        if protocol == "rdma":
            log.info("mooncake: protocol 'rdma' runs on ferry's transports (TCP, and same-host copies)")
        try:
            directory, http_url = start.metadata_urls(metadata_server, metadata_type)
        except NotImplementedError as e:
            raise _Failure(ERR_NOT_IMPLEMENTED, str(e)) from None
        except ValueError as e:
            raise _Failure(ERR_INVALID_ARGUMENT, str(e)) from None
        host, port = start.split_host_port(local_hostname)
        if not host:
            raise _Failure(ERR_INVALID_ARGUMENT, f"local_hostname {local_hostname!r} names no host")
        bind = os.environ.get("MC_TCP_BIND_ADDRESS", "") or "0.0.0.0"
        fields: Dict[str, object] = {}
        nics = [n for n in device_name.split(",") if n.strip()] if device_name else []
        usable = [n.strip() for n in nics if os.path.exists(f"/sys/class/net/{n.strip()}")]
        if len(usable) != len(nics):
            log.info("mooncake: device_name %r: %s are no network interfaces here; ignored", device_name,
                     [n for n in nics if n.strip() not in usable])
        if usable:
            fields["nics"] = ",".join(usable)
        if directory:
            fields["directory"] = directory
            fields["name"] = start.directory_name(local_hostname)
        self._timeout = _timeout_s()
        # A silent peer fails its connection soon after MC_TRANSFER_TIMEOUT:
        # a transfer to it reports -2 (timed out) at the timeout, never -1
        # from a connection declared lost a moment before it.
        defaults = ferry.Options()
        peer_timeout = 1.5 * self._timeout
        if peer_timeout < defaults.peer_timeout:
            fields["peer_timeout"] = peer_timeout
            fields["heartbeat_interval"] = min(defaults.heartbeat_interval, self._timeout / 4)
        try:
            engine = start.listen(fields, bind, port)
        except ferry.FerryError as e:
            code = ERR_METADATA if directory else ERR_SOCKET
            raise _Failure(code, f"cannot start the engine listening on {bind}:{port or 0}: {e}") from None
        rpc_port = int(engine.address.rsplit(":", 1)[1])
        if http_url:
            try:
                self._publication = Publication(http_url, local_hostname, engine.address)
                self._publication.publish(self._published_buffers)
            except MetadataError as e:
                self._publication = None
                engine.close()
                raise _Failure(ERR_METADATA, f"cannot publish {local_hostname!r} on {http_url}: {e}") from None
        self._engine = engine
        self._use_directory = bool(directory)
        # P2PHANDSHAKE names an engine by the port it got, as Mooncake does; a
        # metadata service, by local_hostname.
        self._session = local_hostname if directory or http_url else \
            f"[{host}]:{rpc_port}" if ":" in host else f"{host}:{rpc_port}"
        method = weakref.WeakMethod(self._table_for_peers)  # the service must not keep this object alive
        peers = self._peers
        self._service = Service(engine, lambda: method()() if method() is not None else [],
                                lambda cid: next((p.conn for p in list(peers.values()) if p.conn.id == cid), None))
        self._held[:] = [engine, self._service, self._publication]
        return OK

    def get_rpc_port(self) -> int:
        """The port this engine listens on: local_hostname's, or another where
        that one was taken (as in Mooncake); -1 before initialize."""
        if self._engine is None:
            return -1
        return int(self._engine.address.rsplit(":", 1)[1])

    def get_engine(self) -> Optional[ferry.Engine]:
        """The ferry.Engine underneath (Mooncake returns its inner engine here)."""
        return self._engine

    @property
    def session_id(self) -> str:
        """The name peers reach this engine by: host:rpc_port with P2PHANDSHAKE,
        else local_hostname (under which it is published)."""
        return self._session

    def close(self) -> None:
        """Closes the engine: peers' connections end, registrations go."""
        if self._engine is None:
            return
        self._engine = None
        self._closer()
        self._publication = None
        with self._lock:
            self._peers.clear()
            self._batches.clear()
            self._stream_batches.clear()
            self._managed.clear()
            self._local = SegmentIndex()
            self._table = []
            self._locations.clear()

    def get_local_topology(self, device_name: Optional[str] = None) -> str:
        """Mooncake's NIC priority matrix, as JSON text: for each memory
        location ("cpu:<node>", "cuda:<ordinal>"), [preferred NICs, other
        NICs]. `device_name` (comma-separated) picks the NICs; without it, the
        engine's (device_name at initialize), else the host's. The fields are
        described in ferry/_mooncake_topology.py. Needs no initialize."""
        wanted = device_name or (self._engine.options.nics if self._engine is not None else "")
        return topology.local_topology([n.strip() for n in wanted.split(",") if n.strip()])

    # ---- memory -----------------------------------------------------------

    def _table_for_peers(self) -> List[wire.Segment]:
        """The segments a table request is answered with; exports nothing
        (a request per registration's export would let a peer grow this
        engine by asking)."""
        with self._lock:
            return list(self._table) if self._engine is not None else []

    def _register(self, addr: int, length: int, location: str = topology.WILDCARD_LOCATION) -> None:
        engine = self._ferry()
        if isinstance(addr, bool) or not isinstance(addr, int) or not isinstance(length, int):
            raise _Failure(ERR_INVALID_ARGUMENT, f"address {addr!r} and capacity {length!r} must be ints")
        if addr <= 0 or length <= 0 or addr + length > 1 << 64:
            raise _Failure(ERR_INVALID_ARGUMENT, f"[{addr:#x}, +{length}) is no memory range")
        _check_location(location)  # a malformed location is refused before anything is registered
        with self._lock:
            i = self._local.find_base(addr)
            if i >= 0 and int(self._local.ends[i]) - addr == length:
                _check_location(location, self._local.payloads[i])
                return  # already registered, as Mooncake allows
            if self._local.overlaps(addr, length):
                raise _Failure(ERR_ADDRESS_OVERLAPPED, f"[{addr:#x}, +{length}) overlaps a registered buffer")
            if len(self._local) >= wire.MAX_SEGMENTS:  # what one segment table carries to peers
                raise _Failure(ERR_MEMORY, f"{len(self._local)} buffers are registered, at most {wire.MAX_SEGMENTS}")
            region = engine.reg((addr, length))  # detects host, pinned or CUDA memory
            try:
                _check_location(location, region)
                exported = engine.export_region(region)
            except BaseException:
                engine.dereg(region)
                raise
            self._replace_local([(int(b), int(e - b), r) for b, e, r in
                                 zip(self._local.bases, self._local.ends, self._local.payloads)] + [(addr, length, region)])
            self._table.append(wire.Segment(addr, length, exported))
            self._locations[addr] = location or topology.WILDCARD_LOCATION

    def _unregister(self, addr: int) -> None:
        engine = self._ferry()
        with self._lock:
            i = self._local.find_base(addr) if isinstance(addr, int) else -1
            if i < 0:
                raise _Failure(ERR_ADDRESS_NOT_REGISTERED, f"no buffer is registered at {addr!r}")
            region = self._local.payloads[i]
            kept = [(int(b), int(e - b), r) for j, (b, e, r) in
                    enumerate(zip(self._local.bases, self._local.ends, self._local.payloads)) if j != i]
            self._replace_local(kept)
            self._table = [s for s in self._table if s.base != addr]
            self._locations.pop(addr, None)
        engine.dereg(region)  # revokes its export: a peer that still names it is refused

    def _replace_local(self, segments: List[Tuple[int, int, ferry.Region]]) -> None:
        self._local = SegmentIndex(segments, self._local.version + 1)

    def _published_buffers(self) -> List[Tuple[str, int, int]]:
        """(location, address, length) of each registered buffer, for the segment entry."""
        with self._lock:
            return [(self._locations.get(s.base, topology.WILDCARD_LOCATION), s.base, s.length) for s in self._table]

    def _registered(self, what: str, body) -> int:
        """_guard(body) for a call that changes the registered buffers; then,
        with an HTTP metadata server, the segment entry there is replaced by
        one of the buffers as they are now. Peers take the buffers from this
        engine, so a failed update is logged and the call's result stands."""
        result = self._guard(what, body)
        publication = self._publication
        if publication is not None and result >= 0:  # a failed call changed nothing (batches: all or nothing)
            try:
                publication.update(self._published_buffers)
            except MetadataError as e:
                log.warning("mooncake %s: the segment entry on %s is stale: %s", what, publication.metadata.url, e)
        return result

    def register_memory(self, buffer_addr: int, capacity: int, location: str = topology.WILDCARD_LOCATION) -> int:
        """Registers [buffer_addr, +capacity). `location` ("cpu:0", "cuda:1")
        says what the memory is; ferry detects that anyway, and refuses (-1)
        a location that contradicts it ("*" or "": detect)."""
        return self._registered("register_memory", lambda: self._register(buffer_addr, capacity, location) or OK)

    def unregister_memory(self, buffer_addr: int) -> int:
        return self._registered("unregister_memory", lambda: self._unregister(buffer_addr) or OK)

    def batch_register_memory(self, buffer_addresses: Sequence[int], capacities: Sequence[int],
                              location: object = topology.WILDCARD_LOCATION) -> int:
        """register_memory of each buffer, all or nothing. `location` is one
        location for all of them (as in Mooncake) or one per buffer."""
        def body() -> int:
            if len(buffer_addresses) != len(capacities):
                raise _Failure(ERR_INVALID_ARGUMENT, f"{len(buffer_addresses)} addresses but {len(capacities)} capacities")
            try:
                locations = [location] * len(capacities) if isinstance(location, str) else list(location)
            except TypeError:
                raise _Failure(ERR_INVALID_ARGUMENT, f"location {location!r}: expected a str or one per buffer") \
                    from None
            if len(locations) != len(capacities):
                raise _Failure(ERR_INVALID_ARGUMENT, f"{len(capacities)} buffers but {len(locations)} locations")
            done: List[int] = []
            try:
                for a, c, where in zip(buffer_addresses, capacities, locations):
                    fresh = not isinstance(a, int) or self._local.find_base(a) < 0
                    self._register(a, c, where)
                    if fresh:
                        done.append(a)
            except BaseException:
                for a in done:  # all or nothing
                    self._unregister(a)
                raise
            return OK
        return self._registered("batch_register_memory", body)

    def batch_unregister_memory(self, buffer_addresses: Sequence[int]) -> int:
        def body() -> int:
            missing = [a for a in buffer_addresses if not isinstance(a, int) or self._local.find_base(a) < 0]
            if missing:
                raise _Failure(ERR_ADDRESS_NOT_REGISTERED, f"not registered: {missing[:8]}")
            for a in buffer_addresses:
                self._unregister(a)
            return OK
        return self._registered("batch_unregister_memory", body)

    def allocate_managed_buffer(self, length: int) -> int:
        """Host memory, page-aligned and registered; its address, or 0 on failure."""
        def body() -> int:
            if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
                raise _Failure(ERR_INVALID_ARGUMENT, f"length {length!r}: expected bytes > 0")
            raw = np.zeros(length + 4096, dtype=np.uint8)
            start = (-raw.ctypes.data) % 4096
            view = raw[start:start + length]
            addr = view.ctypes.data
            self._register(addr, length)
            with self._lock:
                self._managed[addr] = (raw, length)
            return addr
        out = self._registered("allocate_managed_buffer", body)
        return out if out > 0 else 0

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        def body() -> int:
            with self._lock:
                held = self._managed.get(buffer_addr)
            if held is None:
                raise _Failure(ERR_ADDRESS_NOT_REGISTERED, f"{buffer_addr!r} is no managed buffer of this engine")
            if held[1] != length:
                raise _Failure(ERR_INVALID_ARGUMENT, f"buffer {buffer_addr:#x} has {held[1]} bytes, not {length}")
            self._unregister(buffer_addr)
            with self._lock:
                del self._managed[buffer_addr]
            return OK
        return self._registered("free_managed_buffer", body)

    def _host_span(self, address: int, length: int, what: str) -> None:
        try:
            i, _ = self._local.locate_one(address, length)
        except (Unmapped, OverflowError, TypeError):
            raise _Failure(ERR_ADDRESS_NOT_REGISTERED, f"{what}: [{address!r}, +{length!r}) is not inside "
                                                       "registered memory of this engine") from None
        if self._local.payloads[i].kind == ferry.MemoryKind.CUDA:
            raise _Failure(ERR_INVALID_ARGUMENT, f"{what}: [{address:#x}, +{length}) is GPU memory")

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: bytes, length: int) -> int:
        def body() -> int:
            data = bytes(src_ptr)
            if length < 0 or length > len(data):
                raise _Failure(ERR_INVALID_ARGUMENT, f"length {length} with {len(data)} bytes given")
            self._host_span(dest_address, length, "write_bytes_to_buffer")
            ctypes.memmove(dest_address, data, length)
            return OK
        return self._guard("write_bytes_to_buffer", body)

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        try:
            self._host_span(source_address, length, "read_bytes_from_buffer")
        except _Failure as f:
            self._fail("read_bytes_from_buffer", f.code, str(f))
            return b""
        return ctypes.string_at(source_address, length)

    def get_first_buffer_address(self, segment_name: str) -> int:
        """The first buffer registered in segment `segment_name` (this engine's
        session id, or a peer's), or 0."""
        if segment_name == self._session:
            with self._lock:
                return self._table[0].base if self._table else 0
        try:
            peer = self._peer(segment_name, time.monotonic() + self._timeout)
            self._refresh(peer, time.monotonic() + self._timeout)
            return peer.first
        except (_Failure, ferry.FerryError) as e:
            self._fail("get_first_buffer_address", ERR_SOCKET, str(e))
            return 0

    # ---- peers ------------------------------------------------------------

    def _peer(self, name: str, deadline: float) -> _Peer:
        engine = self._ferry()
        if not isinstance(name, str) or not name:
            raise _Failure(ERR_INVALID_ARGUMENT, f"target_hostname {name!r}: expected host:port")
        peer = self._peers.get(name)
        if peer is not None and not peer.lost:
            return peer  # a lost connection is noticed where a transfer on it fails (_finish, _post)
        if self._publication is not None:
            try:
                address = self._publication.metadata.locate(name, deadline)
            except MetadataError as e:
                raise _Failure(ERR_METADATA, f"target {name!r}: {e}") from None
        else:
            address = start.directory_name(name) if self._use_directory else name
        # A refused address is dialled again until the deadline; a dead peer
        # should cost each call little more than that, not MC_TRANSFER_TIMEOUT.
        conn = engine.connect(address, timeout=max(min(deadline - time.monotonic(), CONNECT_TIMEOUT_S), 0.001))
        fresh = _Peer(name, conn)
        self._refresh(fresh, deadline)
        with self._lock:
            old = self._peers.get(name)
            if old is not None and old is not peer and not old.lost:
                conn.close()  # another thread connected first
                return old
            self._peers[name] = fresh
        if peer is not None:
            peer.conn.close()
        return fresh

    def _refresh(self, peer: _Peer, deadline: float) -> None:
        """Asks `peer` for its segment table and waits for the answer."""
        engine = self._ferry()
        with peer.lock:
            sequence = next(peer.sequence)
            peer.conn.notify(wire.encode_request(sequence), timeout=max(deadline - time.monotonic(), 0.001))
            while True:
                size = peer.conn.probe(timeout=max(deadline - time.monotonic(), 0.001))
                if size > wire.MAX_TABLE_BYTES:
                    peer.conn.close()
                    peer.lost = True
                    raise _Failure(ERR_SOCKET, f"{peer.name} sent a {size}-byte table (at most "
                                               f"{wire.MAX_TABLE_BYTES}): connection closed")
                buffer = np.empty(max(size, 1), dtype=np.uint8)
                region = engine.reg(buffer)
                try:
                    got = peer.conn.recv(buffer, timeout=max(deadline - time.monotonic(), 0.001))
                finally:
                    engine.dereg(region)
                try:
                    answered, segments = wire.decode_table(buffer[:got].tobytes())
                except wire.WireError as e:
                    peer.conn.close()
                    peer.lost = True
                    raise _Failure(ERR_SOCKET, f"{peer.name}: {e}: connection closed") from None
                if answered == sequence:
                    break
                # an answer to an earlier request that timed out: skip it
            peer.segments = SegmentIndex([(s.base, s.length, s.descriptor) for s in segments],
                                         peer.segments.version + 1)
            peer.first = segments[0].base if segments else 0

    def send_probe(self, peer_server_name: str) -> int:
        """0 when the peer answers (its segment table arrives), non-zero otherwise."""
        def body() -> int:
            deadline = time.monotonic() + self._timeout
            self._refresh(self._peer(peer_server_name, deadline), deadline)
            return OK
        return self._guard("send_probe", body)

    # ---- posting ----------------------------------------------------------

    def _post(self, target: str, buffers: Sequence[int], peer_addresses: Sequence[int], lengths: Sequence[int],
              opcode: TransferOpcode, notify: Optional[TransferNotify], stream: Optional[int] = None) -> _Batch:
        try:
            opcode = TransferOpcode(opcode)
        except ValueError:
            raise _Failure(ERR_INVALID_ARGUMENT, f"opcode {opcode!r}: expected TransferOpcode.Read or Write") from None
        try:
            note = wire.encode_notify(notify.name, notify.msg) if notify is not None else None
        except (ValueError, AttributeError, UnicodeError) as e:
            raise _Failure(ERR_INVALID_ARGUMENT, f"notify: {e}") from None
        deadline = time.monotonic() + self._timeout
        peer = self._peer(target, deadline)
        local = self._local
        try:
            if peer.stale:
                peer.stale = False
                self._refresh(peer, deadline)
            blocks, remote = self._blocks(peer, local, buffers, peer_addresses, lengths, last_try=False)
            if blocks is None:
                self._refresh(peer, deadline)  # the peer may have registered it after we last asked
                blocks, remote = self._blocks(peer, local, buffers, peer_addresses, lengths, last_try=True)
            return self._start(peer, local, remote, blocks, opcode, note, deadline, stream)
        except (ferry.PeerLost, ferry.Unavailable, ferry.DeadlineExceeded):
            peer.lost = True  # the next request connects anew
            raise

    def _start(self, peer: _Peer, local: SegmentIndex, remote: SegmentIndex, blocks: np.ndarray,
               opcode: TransferOpcode, note: Optional[bytes], deadline: float, stream: Optional[int] = None) -> _Batch:
        conn = peer.conn
        n = len(blocks)
        if opcode == TransferOpcode.WRITE:
            if n == 0:
                transfers = [conn.notify_async(note)] if note else []
            else:
                transfers = [conn.write_blocks_async(self._pools(peer, local, remote), blocks, note, stream=stream)]
            return _Batch(transfers, deadline, peer, None, reads=False)
        items = [(int(local.bases[b[0]] + b[2]), remote.payloads[int(b[1])], int(b[3]), int(b[4])) for b in blocks]
        if n == 0:
            transfers = []
        elif n == 1:
            a, d, o, size = items[0]
            transfers = [conn.read_async((a, size), d, o, stream=stream)]
        else:
            transfers = [conn.readv_async(items, stream=stream)]
        return _Batch(transfers, deadline, peer, note, reads=True)

    def _blocks(self, peer: _Peer, local: SegmentIndex, buffers: Sequence[int], peer_addresses: Sequence[int],
                lengths: Sequence[int], last_try: bool) -> Tuple[Optional[np.ndarray], SegmentIndex]:
        """Block rows (local segment, remote segment, offsets, length) of a request;
        None if an address lies outside the peer's table as last received,
        unless this is the `last_try`."""
        remote = peer.segments
        try:
            blocks, side, index = ferry._ferry._address_blocks(local.bases, local.ends, remote.bases, remote.ends,
                                                               buffers, peer_addresses, lengths)
        except (TypeError, ValueError) as e:
            raise _Failure(ERR_INVALID_ARGUMENT, str(e)) from None
        if side == "local":
            raise _Failure(ERR_ADDRESS_NOT_REGISTERED,
                           f"entry {index}: local buffer [{buffers[index]:#x}, +{lengths[index]}) is not inside "
                           "memory registered with this engine (register_memory)")
        if side == "remote":
            if last_try:
                raise _Failure(ERR_ADDRESS_NOT_REGISTERED,
                               f"entry {index}: [{peer_addresses[index]:#x}, +{lengths[index]}) is not inside memory "
                               f"that {peer.name} registered")
            return None, remote
        return blocks, remote

    def _pools(self, peer: _Peer, local: SegmentIndex, remote: SegmentIndex) -> ferry.BlockPools:
        cached = peer.pools
        if cached is not None and cached[0] == local.version and cached[1] == remote.version:
            return cached[2]
        pools = peer.conn.prepare_blocks(local.payloads, remote.payloads)
        peer.pools = (local.version, remote.version, pools)
        return pools

    def _finish(self, batch: _Batch, block: bool) -> int:
        """STATUS_COMPLETED / WAITING / FAILED / TIMEOUT of `batch`; with `block`,
        waits until it ends or its deadline passes. Never blocks past the deadline."""
        for t in batch.transfers:
            if not t.test():
                if not block:
                    if time.monotonic() < batch.deadline:
                        return STATUS_WAITING
                    return self._ended(batch, STATUS_TIMEOUT)
                try:
                    t.wait(timeout=max(batch.deadline - time.monotonic(), 0.0))
                except ferry.DeadlineExceeded:
                    if not t.test():
                        return self._ended(batch, STATUS_TIMEOUT)
                except ferry.FerryError:
                    pass
            status = t.status()
            if not status.ok():
                if status.code == ferry.Code.NOT_FOUND:
                    batch.peer.stale = True  # an export it told us of is gone: ask again next time
                elif status.code in (ferry.Code.PEER_LOST, ferry.Code.UNAVAILABLE) or not batch.peer.conn.health().ok():
                    batch.peer.lost = True
                self._fail("transfer", ERR_TRANSFER, f"to {batch.peer.name}: {status.to_string()}")
                return self._ended(batch, STATUS_FAILED)
        if batch.notify is not None:
            batch.peer.conn.notify(batch.notify, timeout=max(batch.deadline - time.monotonic(), 0.001))
            batch.notify = None
        return STATUS_COMPLETED

    def _settle(self, what: str, batch: _Batch, block: bool) -> int:
        """_finish, with a failure of its own (the notify after a read) as STATUS_FAILED."""
        try:
            return self._finish(batch, block)
        except ferry.FerryError as e:
            self._fail(what, ERR_TRANSFER, str(e))
            return STATUS_FAILED

    def _ended(self, batch: _Batch, status: int) -> int:
        """Stops what of `batch` still runs (_stop), then `status`: the call
        that reports it returns when nothing of the batch lands any more."""
        self._stop(batch)
        if status == STATUS_TIMEOUT:
            batch.peer.lost = True
            self._fail("transfer", ERR_TRANSFER, f"to {batch.peer.name}: not done within {self._timeout} s "
                                                 "(MC_TRANSFER_TIMEOUT)")
        return status

    @staticmethod
    def _stop(batch: _Batch) -> None:
        """Returns once no transfer of `batch` runs any more, so that nothing
        of it lands after the call that gave up on it returned. A read is
        cancelled (ferry stops it and returns once nothing more of it lands).
        A read cancel() cannot stop, and a write, end with their connection,
        closed here (close returns once its threads are joined): a write's
        cancel waits for the peer to confirm, which for a silent peer is
        ferry's peer_timeout, past MC_TRANSFER_TIMEOUT. A timed-out peer's
        connection is opened anew by the next call anyway (peer.lost)."""
        running = [t for t in batch.transfers if not t.test()]
        if not running:
            return
        stopped = batch.reads and all([_cancel(t) for t in running])  # a list: cancel every one
        if not stopped:
            batch.peer.lost = True
            batch.peer.conn.close()
        for t in running:
            try:
                t.wait(timeout=None)  # finished or about to: cancel and close end it, in bounded time
            except ferry.FerryError:
                pass  # it failed (Cancelled): what matters is that it ended

    def _sync(self, what: str, target: str, buffers, peer_addresses, lengths, opcode, notify=None) -> int:
        def body() -> int:
            batch = self._post(target, buffers, peer_addresses, lengths, opcode, notify)
            status = self._finish(batch, block=True)
            if status == STATUS_FAILED and batch.peer.stale:
                # The peer revoked an export after it told us of it (unregistered
                # and registered again, say): once more with its table as it is now.
                status = self._finish(self._post(target, buffers, peer_addresses, lengths, opcode, notify), block=True)
            return OK if status == STATUS_COMPLETED else ERR_TRANSFER
        return self._guard(what, body)

    def _submit(self, what: str, target: str, buffers, peer_addresses, lengths, opcode) -> int:
        def body() -> int:
            batch = self._post(target, buffers, peer_addresses, lengths, opcode, None)
            with self._lock:
                batch_id = next(self._batch_ids)
                self._batches[batch_id] = batch
            return batch_id
        return self._guard(what, body)

    # ---- one buffer ---------------------------------------------------------

    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                            transport_hint: str = "") -> int:
        return self._sync("transfer_sync_write", target_hostname, [buffer], [peer_buffer_address], [length],
                          TransferOpcode.WRITE)

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                           transport_hint: str = "") -> int:
        return self._sync("transfer_sync_read", target_hostname, [buffer], [peer_buffer_address], [length],
                          TransferOpcode.READ)

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                      opcode: TransferOpcode, notify: Optional[TransferNotify] = None, transport_hint: str = "") -> int:
        return self._sync("transfer_sync", target_hostname, [buffer], [peer_buffer_address], [length], opcode, notify)

    def transfer_submit_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                              transport_hint: str = "") -> int:
        """A batch id (>= 1), or 0 (Mooncake's failed batch id) if the write
        could not be posted; last_error says why."""
        return max(self._submit("transfer_submit_write", target_hostname, [buffer], [peer_buffer_address], [length],
                                TransferOpcode.WRITE), 0)

    def transfer_check_status(self, batch_id: int) -> int:
        """1 done, 0 still moving, -1 failed (or no such batch), -2 past MC_TRANSFER_TIMEOUT.
        A batch reported done, failed or timed out is forgotten."""
        with self._lock:
            batch = self._batches.get(batch_id)
        if batch is None:
            self._fail("transfer_check_status", ERR_INVALID_ARGUMENT, f"no batch {batch_id!r}")
            return STATUS_FAILED
        status = self._settle("transfer_check_status", batch, block=False)
        if status != STATUS_WAITING:
            with self._lock:
                self._batches.pop(batch_id, None)
        return status

    # ---- batches ----------------------------------------------------------

    def batch_transfer_sync_write(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                  transport_hint: str = "") -> int:
        return self._sync("batch_transfer_sync_write", target_hostname, buffers, peer_buffer_addresses, lengths,
                          TransferOpcode.WRITE)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: Sequence[int],
                                 peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                 transport_hint: str = "") -> int:
        return self._sync("batch_transfer_sync_read", target_hostname, buffers, peer_buffer_addresses, lengths,
                          TransferOpcode.READ)

    def batch_transfer_sync(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                            lengths: Sequence[int], opcode: TransferOpcode, notify: Optional[TransferNotify] = None,
                            transport_hint: str = "") -> int:
        return self._sync("batch_transfer_sync", target_hostname, buffers, peer_buffer_addresses, lengths, opcode,
                          notify)

    def batch_transfer_async_write(self, target_hostname: str, buffers: Sequence[int],
                                   peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                   transport_hint: str = "") -> int:
        """A batch id, or 0 if the batch could not be posted."""
        return max(self._submit("batch_transfer_async_write", target_hostname, buffers, peer_buffer_addresses,
                                lengths, TransferOpcode.WRITE), 0)

    def batch_transfer_async_read(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                  transport_hint: str = "") -> int:
        return max(self._submit("batch_transfer_async_read", target_hostname, buffers, peer_buffer_addresses,
                                lengths, TransferOpcode.READ), 0)

    def batch_transfer_async(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                             lengths: Sequence[int], opcode: TransferOpcode, transport_hint: str = "") -> int:
        return max(self._submit("batch_transfer_async", target_hostname, buffers, peer_buffer_addresses, lengths,
                                opcode), 0)

    def get_batch_transfer_status(self, batch_ids: Sequence[int]) -> int:
        """Waits for every batch of `batch_ids`: 0 if all completed, -1 if any
        failed, timed out or is unknown. The batches are forgotten."""
        result = OK
        for batch_id in batch_ids:
            with self._lock:
                batch = self._batches.pop(batch_id, None)
            if batch is None:
                result = self._fail("get_batch_transfer_status", ERR_INVALID_ARGUMENT, f"no batch {batch_id!r}")
                continue
            status = self._settle("get_batch_transfer_status", batch, block=True)
            if status != STATUS_COMPLETED:
                result = ERR_TRANSFER
        return result

    # ---- ordered on a CUDA stream ---------------------------------------------

    def _on_stream(self, what: str, stream_ptr: int, target: str, buffers, peer_addresses, lengths,
                   opcode: TransferOpcode) -> None:
        """Mooncake's order: the transfer follows the work queued on the stream,
        and what is queued on it next follows the transfer. ferry holds the
        transfer until the stream gets there and makes the stream wait for it on
        the GPU (Connection.stream_wait), so the call returns at once; a failure
        counts in cuda_failures and is logged once the transfer ends. Where the
        driver cannot make a stream wait, the call waits for the transfer."""
        if self._engine is None:
            raise RuntimeError(f"{what}: the engine is not initialized")
        stream = int(stream_ptr)
        self._reap_stream_batches()

        def body() -> int:
            batch = self._post(target, buffers, peer_addresses, lengths, opcode, None, stream=stream)
            try:
                for t in batch.transfers:
                    batch.peer.conn.stream_wait(t, stream)
            except ferry.Unimplemented:
                return OK if self._finish(batch, block=True) == STATUS_COMPLETED else ERR_TRANSFER
            with self._lock:
                self._stream_batches.append((what, stream, batch))
            return OK

        if self._guard(what, body) != OK:
            self._cuda_failed(what, stream)

    def _cuda_failed(self, what: str, stream: int) -> None:
        self.cuda_failures += 1
        log.error("mooncake %s on CUDA stream %#x failed: %s", what, stream, self.last_error)

    def _reap_stream_batches(self, block: bool = False) -> None:
        """Settles the *_on_cuda transfers that ended (with `block`, all of them)."""
        with self._lock:
            batches, self._stream_batches = self._stream_batches, []
        for what, stream, batch in batches:
            status = self._finish(batch, block=block)
            if status == STATUS_WAITING:
                with self._lock:
                    self._stream_batches.append((what, stream, batch))
            elif status != STATUS_COMPLETED:
                self._cuda_failed(what, stream)

    def transfer_write_on_cuda(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                               stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_stream("transfer_write_on_cuda", stream_ptr, target_hostname, [buffer], [peer_buffer_address],
                        [length], TransferOpcode.WRITE)

    def transfer_read_on_cuda(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                              stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_stream("transfer_read_on_cuda", stream_ptr, target_hostname, [buffer], [peer_buffer_address],
                        [length], TransferOpcode.READ)

    def batch_transfer_write_on_cuda(self, target_hostname: str, buffers: Sequence[int],
                                     peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                     stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_stream("batch_transfer_write_on_cuda", stream_ptr, target_hostname, list(buffers),
                        list(peer_buffer_addresses), list(lengths), TransferOpcode.WRITE)

    def batch_transfer_read_on_cuda(self, target_hostname: str, buffers: Sequence[int],
                                    peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                    stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_stream("batch_transfer_read_on_cuda", stream_ptr, target_hostname, list(buffers),
                        list(peer_buffer_addresses), list(lengths), TransferOpcode.READ)

    # ---- notifications -----------------------------------------------------

    def get_notifies(self) -> List[TransferNotify]:
        """The notifications that arrived since the last call, oldest first."""
        if self._service is None:
            return []
        return [TransferNotify(name, msg) for name, msg in self._service.take_notifies()]
