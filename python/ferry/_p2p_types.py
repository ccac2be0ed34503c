"""Value types of today's UCCL p2p module, as ferry.p2p exports them.

UCCL's binding defines these in C++ (nanobind); code written for it builds
and inspects them (`p2p.XferDesc()`, `desc.addr`, `p2p.FloatType.kFloat16`),
so ferry.p2p provides the same names, fields and repr in Python.
"""

from __future__ import annotations

import enum
from typing import List, NamedTuple

# UCCL's "no such id" (UINT64_MAX): conn_id_of_rank's answer for an unknown
# rank, and the mr_id of a descriptor that names no local registration.
NO_ID = (1 << 64) - 1


class FloatType(enum.IntEnum):
    """The element type reg() may be told about. UCCL uses it to compress
    floats in flight (DietGPU); ferry moves bytes as they are and ignores it."""

    kUndefined = 0
    kFloat16 = 1
    kBFloat16 = 2
    kFloat32 = 3
    kFloat8E4M3FN = 4
    kFloat8E5M2 = 5


class XferDesc:
    """One registered buffer, as register_memory returns it and a peer receives
    it through get_serialized_descs / deserialize_descs.

    addr, size: the buffer. mr_id: its registration on the endpoint that made
    it (NO_ID on a descriptor that came from a peer). lkeys, rkeys: UCCL's
    per-NIC RDMA keys; ferry needs none and leaves them empty. The access key
    a peer needs travels in `advertisement`, the 64-byte blob advertise()
    would return for the buffer. Also readable as desc["addr"] etc., as an
    earlier UCCL API returned dicts.
    """

    __slots__ = ("addr", "size", "mr_id", "lkeys", "rkeys", "advertisement")
    _FIELDS = ("addr", "size", "mr_id", "lkeys", "rkeys")

    def __init__(self, addr: int = 0, size: int = 0, mr_id: int = NO_ID, lkeys: List[int] = (),
                 rkeys: List[int] = (), advertisement: bytes = b"") -> None:
        self.addr = addr
        self.size = size
        self.mr_id = mr_id
        self.lkeys = list(lkeys)
        self.rkeys = list(rkeys)
        self.advertisement = bytes(advertisement)

    def __getitem__(self, field: str):
        if field not in self._FIELDS:
            raise KeyError(field)
        return getattr(self, field)

    def __contains__(self, field: str) -> bool:
        return field in self._FIELDS

    def __eq__(self, other) -> bool:
        if not isinstance(other, XferDesc):
            return NotImplemented
        # mr_id names a registration on the endpoint that made the descriptor;
        # it does not travel, so a descriptor equals its round trip without it.
        return all(getattr(self, f) == getattr(other, f) for f in self.__slots__ if f != "mr_id")

    __hash__ = None  # mutable, like UCCL's

    def __repr__(self) -> str:
        return f"<XferDesc addr={self.addr} size={self.size} mr_id={self.mr_id}>"


class XferHandle(NamedTuple):
    """A transfer started by transfer(), for check_xfer_state."""

    conn_id: int
    op_name: str
    transfer_id: int
