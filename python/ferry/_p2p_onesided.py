"""The one-sided calls of ferry.p2p.Endpoint: advertise, write, read, their
vector, asynchronous and IPC forms, and today's descriptor API (a mixin of
Endpoint, which provides _conn, _span, _advertisement, _fail and _track).

The owner of a buffer advertises it and hands the 64-byte blob to a peer,
which then writes or reads it with no call on the owner's side. Under the
blob is a ferry export: the owner's engine checks its key and bounds before a
byte lands, and deregistering the buffer revokes it. UCCL's *_ipc calls are
the same operations on a connection to a process of the same host, where
ferry uses its local transport by itself, so they share this code. Where
UCCL's IPC path needs no registration (and the seed lets send(..., meta) name
mr_id 0), ferry registers the memory itself and keeps it until close().
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import ferry

from ._p2p_types import NO_ID, XferDesc, XferHandle
from ._p2p_wire import pack_descs, parse_advertisement, parse_descs

_OPS = ("write", "read")


def _check_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


def _bind(args: tuple, kwargs: dict, names: Tuple[str, ...], what: str) -> List[Any]:
    """Python's own argument binding, for a call whose era picks the names."""
    if len(args) > len(names):
        raise TypeError(f"{what}() takes {len(names)} arguments ({', '.join(names)}), {len(args)} given")
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names or name in values:
            raise TypeError(f"{what}() got an unexpected or repeated argument {name!r}")
        values[name] = value
    missing = [name for name in names if name not in values]
    if missing:
        raise TypeError(f"{what}() missing argument(s): {', '.join(missing)}")
    return [values[name] for name in names]


class OneSidedCalls:
    """advertise*, write*/read* (and _async, _ipc), register_memory, transfer of Endpoint."""

    # ---- advertising -----------------------------------------------------------------

    def advertise(self, *args, **kwargs) -> Tuple[bool, bytes]:
        """Lets peers write or read [ptr, ptr+size); returns (success, 64-byte blob).

        Seed: advertise(conn_id, mr_id, ptr, size); today: advertise(mr_id,
        ptr, size). Four arguments, or a conn_id keyword, mean the seed's. The
        blob is not tied to a connection: any peer connected to this endpoint
        can use it, and conn_id is only checked to be an int.
        """
        if len(args) + len(kwargs) == 4 or "conn_id" in kwargs:
            conn_id, mr_id, ptr, size = _bind(args, kwargs, ("conn_id", "mr_id", "ptr", "size"), "advertise")
            _check_int(conn_id, "conn_id")
        else:
            mr_id, ptr, size = _bind(args, kwargs, ("mr_id", "ptr", "size"), "advertise")
        try:
            return True, self._advertisement(self._span(mr_id, ptr, size, "advertise", implicit=True), ptr, size)
        except ferry.FerryError as e:
            self._fail("advertise", e)
            return False, b""

    def advertisev(self, mr_id_v: Sequence[int], ptr_v: Sequence[int], size_v: Sequence[int],
                   num_iovs: int) -> Tuple[bool, List[bytes]]:
        """advertise for each buffer; returns (success, [blob, ...])."""
        if not (len(mr_id_v) == len(ptr_v) == len(size_v) == _check_int(num_iovs, "num_iovs")):
            raise RuntimeError("advertisev: mr_id_v, ptr_v and size_v must each hold num_iovs items")
        blobs = []
        for mr_id, ptr, size in zip(mr_id_v, ptr_v, size_v):
            ok, blob = self.advertise(mr_id, ptr, size)
            if not ok:
                return False, []
            blobs.append(blob)
        return True, blobs

    def advertise_ipc(self, conn_id: int, ptr: int, size: int) -> Tuple[bool, bytes]:
        """advertise for a peer on this host (no registration needed)."""
        return self.advertise(conn_id, NO_ID, ptr, size)

    def advertisev_ipc(self, conn_id: int, ptr_v: Sequence[int], size_v: Sequence[int]) -> Tuple[bool, List[bytes]]:
        if len(ptr_v) != len(size_v):
            raise RuntimeError("advertisev_ipc: ptr_v and size_v must have the same length")
        _check_int(conn_id, "conn_id")
        return self.advertisev([NO_ID] * len(ptr_v), ptr_v, size_v, len(ptr_v))

    # ---- writes and reads ------------------------------------------------------------

    def _items(self, mr_id_v: Sequence[int], ptr_v: Sequence[int], size_v: Sequence[int], meta_v: Sequence,
               what: str) -> list:
        """ferry writev/readv items; a malformed blob raises (RuntimeError/TypeError)."""
        descriptors = [parse_advertisement(meta, f"{what}: meta") for meta in meta_v]
        items = []
        for i, (mr_id, ptr, size, descriptor) in enumerate(zip(mr_id_v, ptr_v, size_v, descriptors)):
            self._span(mr_id, ptr, size, f"{what}[{i}]" if len(descriptors) > 1 else what, implicit=True)
            items.append(((ptr, size), descriptor, 0, size))
        return items

    def _one_sided(self, op: str, conn_id: int, mr_id_v: Sequence[int], ptr_v: Sequence[int],
                   size_v: Sequence[int], meta_v: Sequence, what: str, timeout: Optional[float]) -> bool:
        try:
            conn = self._conn(conn_id)
            items = self._items(mr_id_v, ptr_v, size_v, meta_v, what)
            (conn.writev if op == "write" else conn.readv)(items, timeout=timeout)
        except ferry.FerryError as e:
            self._fail(what, e)
            return False
        return True

    def _one_sided_async(self, op: str, conn_id: int, mr_id_v: Sequence[int], ptr_v: Sequence[int],
                         size_v: Sequence[int], meta_v: Sequence, what: str) -> Tuple[bool, int]:
        try:
            conn = self._conn(conn_id)
            items = self._items(mr_id_v, ptr_v, size_v, meta_v, what)
            transfer = (conn.writev_async if op == "write" else conn.readv_async)(items)
        except ferry.FerryError as e:
            self._fail(what, e)
            return False, 0
        return True, self._track(transfer, what)

    @staticmethod
    def _vectors(num_iovs: int, what: str, *lists: Sequence) -> None:
        if any(len(v) != _check_int(num_iovs, "num_iovs") for v in lists):
            raise RuntimeError(f"{what}: all input vectors/lists must have length num_iovs ({num_iovs})")

    def write(self, conn_id: int, mr_id: int, ptr: int, size: int, meta: bytes, *,
              timeout: Optional[float] = None) -> bool:
        """Writes [ptr, ptr+size) into the buffer `meta` advertises; blocks until it is there."""
        return self._one_sided("write", conn_id, [mr_id], [ptr], [size], [meta], "write", timeout)

    def read(self, conn_id: int, mr_id: int, ptr: int, size: int, meta: bytes, *,
             timeout: Optional[float] = None) -> bool:
        """Reads `size` bytes of the buffer `meta` advertises into [ptr, ptr+size); blocks."""
        return self._one_sided("read", conn_id, [mr_id], [ptr], [size], [meta], "read", timeout)

    def write_async(self, conn_id: int, mr_id: int, ptr: int, size: int, meta: bytes) -> Tuple[bool, int]:
        return self._one_sided_async("write", conn_id, [mr_id], [ptr], [size], [meta], "write_async")

    def read_async(self, conn_id: int, mr_id: int, ptr: int, size: int, meta: bytes) -> Tuple[bool, int]:
        return self._one_sided_async("read", conn_id, [mr_id], [ptr], [size], [meta], "read_async")

    def writev(self, conn_id: int, mr_id_v: Sequence[int], ptr_v: Sequence[int], size_v: Sequence[int],
               meta_blob_v: Sequence[bytes], num_iovs: int, *, timeout: Optional[float] = None) -> bool:
        """write for each buffer, as one operation; blocks."""
        self._vectors(num_iovs, "writev", mr_id_v, ptr_v, size_v, meta_blob_v)
        return self._one_sided("write", conn_id, mr_id_v, ptr_v, size_v, meta_blob_v, "writev", timeout)

    def readv(self, conn_id: int, mr_id_v: Sequence[int], ptr_v: Sequence[int], size_v: Sequence[int],
              meta_blob_v: Sequence[bytes], num_iovs: int, *, timeout: Optional[float] = None) -> bool:
        self._vectors(num_iovs, "readv", mr_id_v, ptr_v, size_v, meta_blob_v)
        return self._one_sided("read", conn_id, mr_id_v, ptr_v, size_v, meta_blob_v, "readv", timeout)

    def writev_async(self, conn_id: int, mr_id_v: Sequence[int], ptr_v: Sequence[int], size_v: Sequence[int],
                     meta_blob_v: Sequence[bytes], num_iovs: int) -> Tuple[bool, int]:
        self._vectors(num_iovs, "writev_async", mr_id_v, ptr_v, size_v, meta_blob_v)
        return self._one_sided_async("write", conn_id, mr_id_v, ptr_v, size_v, meta_blob_v,
                                     "writev_async")

    def readv_async(self, conn_id: int, mr_id_v: Sequence[int], ptr_v: Sequence[int], size_v: Sequence[int],
                    meta_blob_v: Sequence[bytes], num_iovs: int) -> Tuple[bool, int]:
        self._vectors(num_iovs, "readv_async", mr_id_v, ptr_v, size_v, meta_blob_v)
        return self._one_sided_async("read", conn_id, mr_id_v, ptr_v, size_v, meta_blob_v,
                                     "readv_async")

    # ---- the same on a local connection (UCCL's *_ipc: no registration) -------------------

    def write_ipc(self, conn_id: int, ptr: int, size: int, info: bytes, *, timeout: Optional[float] = None) -> bool:
        return self._one_sided("write", conn_id, [NO_ID], [ptr], [size], [info], "write_ipc", timeout)

    def read_ipc(self, conn_id: int, ptr: int, size: int, info: bytes, *, timeout: Optional[float] = None) -> bool:
        return self._one_sided("read", conn_id, [NO_ID], [ptr], [size], [info], "read_ipc", timeout)

    def write_ipc_async(self, conn_id: int, ptr: int, size: int, info: bytes) -> Tuple[bool, int]:
        return self._one_sided_async("write", conn_id, [NO_ID], [ptr], [size], [info], "write_ipc_async")

    def read_ipc_async(self, conn_id: int, ptr: int, size: int, info: bytes) -> Tuple[bool, int]:
        return self._one_sided_async("read", conn_id, [NO_ID], [ptr], [size], [info], "read_ipc_async")

    def _ipc_vectors(self, ptr_v, size_v, info_v, what: str) -> list:
        if not (len(ptr_v) == len(size_v) == len(info_v)):
            raise RuntimeError(f"{what}: ptr_v, size_v and info_v must have the same length")
        return [NO_ID] * len(ptr_v)

    def writev_ipc(self, conn_id: int, ptr_v: Sequence[int], size_v: Sequence[int], info_v: Sequence[bytes], *,
                   timeout: Optional[float] = None) -> bool:
        no_mrs = self._ipc_vectors(ptr_v, size_v, info_v, "writev_ipc")
        return self._one_sided("write", conn_id, no_mrs, ptr_v, size_v, info_v, "writev_ipc", timeout)

    def readv_ipc(self, conn_id: int, ptr_v: Sequence[int], size_v: Sequence[int], info_v: Sequence[bytes], *,
                  timeout: Optional[float] = None) -> bool:
        no_mrs = self._ipc_vectors(ptr_v, size_v, info_v, "readv_ipc")
        return self._one_sided("read", conn_id, no_mrs, ptr_v, size_v, info_v, "readv_ipc", timeout)

    def writev_ipc_async(self, conn_id: int, ptr_v: Sequence[int], size_v: Sequence[int],
                         info_v: Sequence[bytes]) -> Tuple[bool, int]:
        no_mrs = self._ipc_vectors(ptr_v, size_v, info_v, "writev_ipc_async")
        return self._one_sided_async("write", conn_id, no_mrs, ptr_v, size_v, info_v, "writev_ipc_async")

    def readv_ipc_async(self, conn_id: int, ptr_v: Sequence[int], size_v: Sequence[int],
                        info_v: Sequence[bytes]) -> Tuple[bool, int]:
        no_mrs = self._ipc_vectors(ptr_v, size_v, info_v, "readv_ipc_async")
        return self._one_sided_async("read", conn_id, no_mrs, ptr_v, size_v, info_v, "readv_ipc_async")

    # ---- today's descriptor API ---------------------------------------------------------

    def register_memory(self, tensor_list: Sequence) -> List[XferDesc]:
        """Registers each tensor (anything with data_ptr(), numel(), element_size())
        and returns one XferDesc each, carrying the blob a peer needs.
        RuntimeError, with nothing left registered, if any of them fails."""
        descs: List[XferDesc] = []
        try:
            for i, tensor in enumerate(tensor_list):
                if not all(hasattr(tensor, m) for m in ("data_ptr", "numel", "element_size")):
                    raise RuntimeError(f"Object at index {i} is not a tensor (missing data_ptr() method)")
                ptr, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
                ok, mr_id = self.reg(ptr, size)
                if not ok:
                    raise RuntimeError(f"register_memory: tensor {i}: {self.last_error}")
                descs.append(XferDesc(ptr, size, mr_id))
                descs[-1].advertisement = self._advertisement(self._regions[mr_id], ptr, size)
        except BaseException:
            self.deregister_memory(descs)
            raise
        return descs

    def deregister_memory(self, desc_list: Sequence[XferDesc]) -> None:
        """dereg of every descriptor from register_memory."""
        for desc in desc_list:
            if desc.mr_id != NO_ID:
                self.dereg(desc.mr_id)

    def get_serialized_descs(self, desc_list: Sequence[XferDesc]) -> bytes:
        """Descriptors as bytes, for a peer's deserialize_descs."""
        for desc in desc_list:
            if not isinstance(desc, XferDesc):
                raise TypeError(f"get_serialized_descs takes XferDesc objects, not {type(desc).__name__}")
        return pack_descs([(d.addr, d.size, d.lkeys, d.rkeys, d.advertisement) for d in desc_list])

    def deserialize_descs(self, serialized_bytes: bytes) -> List[XferDesc]:
        """A peer's descriptors, for transfer(); RuntimeError if malformed."""
        return [XferDesc(addr, size, NO_ID, lkeys, rkeys, blob)
                for addr, size, lkeys, rkeys, blob in parse_descs(serialized_bytes)]

    def transfer(self, conn_id: int, op_name: str, local_desc_list: Sequence[XferDesc],
                 remote_desc_list: Sequence[XferDesc]) -> Tuple[bool, int]:
        """Starts writing ("write") each local buffer into the matching remote
        one, or reading ("read") the other way; returns (success, transfer_id)
        for poll_async or check_xfer_state. Each moves the local size."""
        if len(local_desc_list) != len(remote_desc_list):
            raise RuntimeError("Local and remote descriptors must have the same size")
        op = str(op_name).lower()
        if op not in _OPS:
            raise RuntimeError(f"Invalid op_name: {op_name}")
        if conn_id not in self._conns:
            raise RuntimeError(f"Invalid conn_id {conn_id}")
        for desc in remote_desc_list:
            if not desc.advertisement:
                raise RuntimeError("a remote descriptor carries no ferry advertisement "
                                   "(it must come from a ferry.p2p register_memory)")
        return self._one_sided_async(op, conn_id, [d.mr_id for d in local_desc_list],
                                     [d.addr for d in local_desc_list], [d.size for d in local_desc_list],
                                     [d.advertisement for d in remote_desc_list], f"transfer {op}")

    def check_xfer_state(self, handle) -> bool:
        """True once a transfer (an XferHandle or a transfer_id) is done, False
        while it runs; RuntimeError if it failed or is unknown."""
        transfer_id = handle.transfer_id if isinstance(handle, XferHandle) else handle
        ok, done = self.poll_async(transfer_id)
        if not ok:
            raise RuntimeError(f"transfer {transfer_id}: {self.last_error}")
        return done
