"""Segment tables: ferry.mooncake names memory by raw address, as Mooncake
does, and ferry by region and offset; a table says which is which.

A SegmentIndex is immutable: a registration makes a new one, so a transfer
resolves against one consistent table without holding a lock.
"""

from __future__ import annotations

from typing import Generic, List, Sequence, Tuple, TypeVar

import numpy as np

T = TypeVar("T")


class Unmapped(LookupError):
    """Entry `index` of a request does not lie inside one segment."""

    def __init__(self, index: int, address: int, length: int) -> None:
        super().__init__(f"[{address:#x}, +{length}) lies in no registered segment")
        self.index = index
        self.address = address
        self.length = length


class SegmentIndex(Generic[T]):
    """Segments (base, length, payload) sorted by base, not overlapping.

    `payload` is what a resolved entry needs: a local Region, or a peer's
    RemoteDescriptor. `version` says which registration made this table.
    """

    def __init__(self, segments: Sequence[Tuple[int, int, T]] = (), version: int = 0) -> None:
        ordered = sorted(segments, key=lambda s: s[0])
        self.version = version
        self.payloads: List[T] = [s[2] for s in ordered]
        self.bases = np.array([s[0] for s in ordered], dtype=np.uint64)
        self.ends = self.bases + np.array([s[1] for s in ordered], dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.payloads)

    def overlaps(self, base: int, length: int) -> bool:
        i = int(np.searchsorted(self.bases, np.uint64(base + length), side="left"))
        return i > 0 and int(self.ends[i - 1]) > base

    def find_base(self, base: int) -> int:
        """The index of the segment that starts at `base`, or -1."""
        i = int(np.searchsorted(self.bases, np.uint64(base), side="left"))
        return i if i < len(self.payloads) and int(self.bases[i]) == base else -1

    def locate_one(self, address: int, length: int) -> Tuple[int, int]:
        """(segment index, offset in it) of [address, +length); raises Unmapped
        if that does not lie inside one segment. (Batches are resolved by
        ferry._ferry._address_blocks against bases and ends.)"""
        i = int(np.searchsorted(self.bases, np.uint64(address), side="right")) - 1
        if i < 0 or address >= int(self.ends[i]) or length > int(self.ends[i]) - address:
            raise Unmapped(0, address, length)
        return i, address - int(self.bases[i])
