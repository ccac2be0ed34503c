"""What ferry.mooncake engines say to each other on top of ferry: the segment
table (which address ranges an engine registered, with the descriptor that
exports each), the request for it, and TransferNotify messages.

Every byte here comes from a peer and is checked before use, every number
against the range its field carries: a malformed message raises WireError
(and nothing else) and is never half-applied. The target still checks
every write and read against its own exports, so a table that lies only
sends its reader's requests to places ferry refuses.

  request       notification  REQUEST_PREFIX + decimal sequence number
  table         message       TABLE_MAGIC, u32 format, u64 sequence, u32 count,
                              count x (u64 base, u64 length, u16 n, n bytes of
                              a serialized ferry.RemoteDescriptor), big-endian
  notify        notification  NOTIFY_PREFIX, u16 n, n bytes of name, the message
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import ferry

REQUEST_PREFIX = b"ferry.mooncake/1 table? "
NOTIFY_PREFIX = b"ferry.mooncake/1 notify "
TABLE_MAGIC = b"FMCT"
TABLE_FORMAT = 1
# A table's limits: segments of one engine, and bytes of one table message.
MAX_SEGMENTS = 4096
MAX_TABLE_BYTES = 1 << 20
MAX_SEQUENCE_DIGITS = 20
MAX_SEQUENCE = (1 << 64) - 1  # the table's u64: a request's number must fit the answer
MAX_DESCRIPTOR_BYTES = 256

_TABLE_HEAD = struct.Struct(">4sIQI")
_ENTRY_HEAD = struct.Struct(">QQH")
_NAME_LENGTH = struct.Struct(">H")


class WireError(ValueError):
    """A peer's message that is not what this format allows; says what and where."""


@dataclass(frozen=True)
class Segment:
    """A registered address range and the descriptor that exports all of it."""

    base: int
    length: int
    descriptor: ferry.RemoteDescriptor


def encode_request(sequence: int) -> bytes:
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise WireError(f"table request: sequence number {sequence} is outside [0, {MAX_SEQUENCE}]")
    return REQUEST_PREFIX + str(sequence).encode()


def decode_request(message: bytes) -> Optional[int]:
    """The sequence number of a table request, in [0, MAX_SEQUENCE]; None if
    `message` is none."""
    if not message.startswith(REQUEST_PREFIX):
        return None
    digits = message[len(REQUEST_PREFIX):]
    if not digits or len(digits) > MAX_SEQUENCE_DIGITS or not digits.isdigit():
        raise WireError(f"table request: {digits[:40]!r} is not a sequence number (1-{MAX_SEQUENCE_DIGITS} digits)")
    sequence = int(digits)
    if sequence > MAX_SEQUENCE:
        raise WireError(f"table request: sequence number {sequence} is past {MAX_SEQUENCE} (a table carries a u64)")
    return sequence


def encode_table(sequence: int, segments: Sequence[Segment]) -> bytes:
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise WireError(f"table: sequence number {sequence} is outside [0, {MAX_SEQUENCE}]")
    if len(segments) > MAX_SEGMENTS:
        raise WireError(f"table: {len(segments)} segments, at most {MAX_SEGMENTS} go in one table")
    parts = [_TABLE_HEAD.pack(TABLE_MAGIC, TABLE_FORMAT, sequence, len(segments))]
    for s in segments:
        blob = s.descriptor.serialize()
        parts.append(_ENTRY_HEAD.pack(s.base, s.length, len(blob)))
        parts.append(blob)
    out = b"".join(parts)
    if len(out) > MAX_TABLE_BYTES:
        raise WireError(f"table: {len(out)} bytes, at most {MAX_TABLE_BYTES}")
    return out


def decode_table(data: bytes) -> Tuple[int, List[Segment]]:
    """(sequence, segments in the order sent: the peer's registration order);
    raises WireError on anything else."""
    if len(data) > MAX_TABLE_BYTES:
        raise WireError(f"table: {len(data)} bytes, at most {MAX_TABLE_BYTES}")
    if len(data) < _TABLE_HEAD.size:
        raise WireError(f"table: {len(data)} bytes, shorter than its {_TABLE_HEAD.size}-byte header")
    magic, fmt, sequence, count = _TABLE_HEAD.unpack_from(data, 0)
    if magic != TABLE_MAGIC:
        raise WireError(f"table: magic {magic!r}, expected {TABLE_MAGIC!r}")
    if fmt != TABLE_FORMAT:
        raise WireError(f"table: format {fmt}, this engine reads {TABLE_FORMAT}")
    if count > MAX_SEGMENTS:
        raise WireError(f"table: {count} segments, at most {MAX_SEGMENTS}")
    at = _TABLE_HEAD.size
    segments: List[Segment] = []
    for i in range(count):
        if at + _ENTRY_HEAD.size > len(data):
            raise WireError(f"table: segment {i} of {count} starts past the end ({len(data)} bytes)")
        base, length, n = _ENTRY_HEAD.unpack_from(data, at)
        at += _ENTRY_HEAD.size
        if n == 0 or n > MAX_DESCRIPTOR_BYTES or at + n > len(data):
            raise WireError(f"table: segment {i}: a {n}-byte descriptor at byte {at} of {len(data)}")
        if length == 0 or base + length > 1 << 64:
            raise WireError(f"table: segment {i}: [{base:#x}, +{length}) is empty or wraps")
        try:
            descriptor = ferry.RemoteDescriptor.parse(data[at:at + n])
        except (ferry.FerryError, ValueError) as e:
            raise WireError(f"table: segment {i}: descriptor does not parse: {e}") from None
        if descriptor.length != length:
            raise WireError(f"table: segment {i}: {length} bytes, but its descriptor exports {descriptor.length}")
        at += n
        segments.append(Segment(base, length, descriptor))
    if at != len(data):
        raise WireError(f"table: {len(data) - at} bytes after the last of {count} segments")
    by_base = sorted(segments, key=lambda s: s.base)
    for a, b in zip(by_base, by_base[1:]):
        if a.base + a.length > b.base:
            raise WireError(f"table: segments [{a.base:#x}, +{a.length}) and [{b.base:#x}, +{b.length}) overlap")
    return sequence, segments


def encode_notify(name: str, message: str) -> bytes:
    name_bytes = name.encode()
    if len(name_bytes) > 0xFFFF:
        raise ValueError(f"TransferNotify name: {len(name_bytes)} bytes, at most 65535")
    out = NOTIFY_PREFIX + _NAME_LENGTH.pack(len(name_bytes)) + name_bytes + message.encode()
    if len(out) > ferry.Connection.MAX_NOTIFICATION:
        raise ValueError(f"TransferNotify: {len(out)} bytes encoded, at most {ferry.Connection.MAX_NOTIFICATION}")
    return out


def decode_notify(message: bytes) -> Optional[Tuple[str, str]]:
    """(name, msg) of a TransferNotify; None if `message` is none."""
    if not message.startswith(NOTIFY_PREFIX):
        return None
    at = len(NOTIFY_PREFIX)
    if len(message) < at + _NAME_LENGTH.size:
        raise WireError(f"notify: {len(message)} bytes, too short for its name length")
    (n,) = _NAME_LENGTH.unpack_from(message, at)
    at += _NAME_LENGTH.size
    if at + n > len(message):
        raise WireError(f"notify: a {n}-byte name, but only {len(message) - at} bytes follow")
    return (message[at:at + n].decode(errors="replace"), message[at + n:].decode(errors="replace"))
