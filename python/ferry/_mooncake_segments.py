"""Raw addresses to (segment, offset), many at once: ferry.mooncake names
memory by address, as Mooncake does, and ferry by region and offset.

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

    def locate(self, addresses: np.ndarray, lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(segment index, offset in it) of every [address, +length); raises
        Unmapped for the first entry that does not lie inside one segment."""
        if len(self.payloads) == 0:
            if len(addresses):
                raise Unmapped(0, int(addresses[0]), int(lengths[0]))
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
        index = np.searchsorted(self.bases, addresses, side="right").astype(np.int64) - 1
        clipped = np.maximum(index, 0)
        ends = self.ends[clipped]
        # addresses >= bases[index] wherever index >= 0 (searchsorted's
        # promise); the second test keeps ends - addresses from wrapping.
        inside = (index >= 0) & (addresses < ends) & (lengths <= ends - np.minimum(addresses, ends))
        if not inside.all():
            bad = int(np.argmin(inside))
            raise Unmapped(bad, int(addresses[bad]), int(lengths[bad]))
        return index, addresses - self.bases[index]

    def locate_one(self, address: int, length: int) -> Tuple[int, int]:
        index, offsets = self.locate(np.array([address], dtype=np.uint64), np.array([length], dtype=np.uint64))
        return int(index[0]), int(offsets[0])
