"""The seed's two-sided calls of ferry.p2p.Endpoint: send and recv, their
vector forms and their asynchronous forms (a mixin of Endpoint, which
provides _conn, _span, _fail and _track).

Messages match receives in order on each connection, as in UCCL. The size a
receive is given is its capacity, as UCCL treats it: a shorter message lands
and the call succeeds. A longer one fails on both sides (ferry never cuts a
message silently), and since ferry never writes outside registered memory,
recv's capacity ends where its region ends.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import ferry


def _error(code: ferry.Code, message: str) -> ferry.FerryError:
    return ferry.Status(code, message).exception()


class TwoSidedCalls:
    """send/recv, sendv/recvv, send_async/recv_async of Endpoint."""

    def _parts(self, mr_id_v: Sequence[int], data_ptr_v: Sequence[int], size_v: Sequence[int], num_iovs: int,
               what: str) -> List[Tuple[int, int]]:
        if isinstance(num_iovs, bool) or not isinstance(num_iovs, int):
            raise TypeError(f"num_iovs must be an int, not {type(num_iovs).__name__}")
        if not (len(mr_id_v) == len(data_ptr_v) == len(size_v) == num_iovs):
            raise _error(ferry.Code.INVALID_ARGUMENT,
                         f"{what}: num_iovs is {num_iovs} but the lists hold {len(mr_id_v)} mr_ids, "
                         f"{len(data_ptr_v)} pointers and {len(size_v)} sizes")
        parts = []
        for i, (mr_id, ptr, size) in enumerate(zip(mr_id_v, data_ptr_v, size_v)):
            self._span(mr_id, ptr, size, f"{what}[{i}]")
            parts.append((ptr, size))
        return parts

    def _capacity(self, mr_id: int, ptr: int, size: int, what: str) -> int:
        """recv's capacity: `size`, cut at the end of region `mr_id`."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise TypeError(f"{what}: size must be an int >= 0, not {size!r}")
        region = self._span(mr_id, ptr, 0, what)
        return min(size, region.base + region.length - ptr)

    def send(self, conn_id: int, mr_id: int, ptr: int, size: int, meta: Optional[bytes] = None, *,
             timeout: Optional[float] = None) -> bool:
        """Sends [ptr, ptr+size) as one message; blocks until the peer holds it.

        With `meta` (a blob from the peer's advertise) it writes into the
        advertised buffer instead, one-sided, as the seed's send(..., meta)
        does; `mr_id` may then name no registration.
        """
        if meta is not None:
            return self._one_sided("write", conn_id, [mr_id], [ptr], [size], [meta], "send", timeout)
        try:
            self._span(mr_id, ptr, size, "send")
            self._conn(conn_id).send(ptr, size, timeout=timeout)
        except ferry.FerryError as e:
            self._fail("send", e)
            return False
        return True

    def recv(self, conn_id: int, mr_id: int, ptr: int, size: int, *, timeout: Optional[float] = None) -> bool:
        """Receives the next message, up to `size` bytes, at `ptr`; blocks."""
        try:
            capacity = self._capacity(mr_id, ptr, size, "recv")
            self._conn(conn_id).recv(ptr, capacity, timeout=timeout)
        except ferry.FerryError as e:
            self._fail("recv", e)
            return False
        return True

    def sendv(self, conn_id: int, mr_id_v: Sequence[int], data_ptr_v: Sequence[int], size_v: Sequence[int],
              num_iovs: int, *, timeout: Optional[float] = None) -> bool:
        """Sends the `num_iovs` pieces, in order, as one message; blocks."""
        try:
            parts = self._parts(mr_id_v, data_ptr_v, size_v, num_iovs, "sendv")
            self._conn(conn_id).sendv(parts, timeout=timeout)
        except ferry.FerryError as e:
            self._fail("sendv", e)
            return False
        return True

    def recvv(self, conn_id: int, mr_id_v: Sequence[int], data_ptr_v: Sequence[int], size_v: Sequence[int],
              num_iovs: int, *, timeout: Optional[float] = None) -> bool:
        """Receives the next message scattered over the pieces in order (up to
        their total size; each piece must lie in its region); blocks."""
        try:
            parts = self._parts(mr_id_v, data_ptr_v, size_v, num_iovs, "recvv")
            self._conn(conn_id).recvv(parts, timeout=timeout)
        except ferry.FerryError as e:
            self._fail("recvv", e)
            return False
        return True

    def send_async(self, conn_id: int, mr_id: int, ptr: int, size: int) -> Tuple[bool, int]:
        """Starts send; returns (success, transfer_id) for poll_async."""
        try:
            self._span(mr_id, ptr, size, "send_async")
            transfer = self._conn(conn_id).send_async(ptr, size)
        except ferry.FerryError as e:
            self._fail("send_async", e)
            return False, 0
        return True, self._track(transfer, "send_async")

    def recv_async(self, conn_id: int, mr_id: int, ptr: int, size: int) -> Tuple[bool, int]:
        """Starts recv (up to `size` bytes); returns (success, transfer_id) for poll_async."""
        try:
            capacity = self._capacity(mr_id, ptr, size, "recv_async")
            transfer = self._conn(conn_id).recv_async(ptr, capacity)
        except ferry.FerryError as e:
            self._fail("recv_async", e)
            return False, 0
        return True, self._track(transfer, "recv_async")
