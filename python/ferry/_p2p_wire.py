"""Byte formats of ferry.p2p: what an Endpoint hands to its user and to peers.

UCCL users carry these blobs through channels of their own (multiprocessing
queues, torch.distributed, sockets), and some parse the endpoint metadata
themselves, so that one keeps UCCL's layout byte for byte. The others are
ferry's own but keep UCCL's sizes, since callers check `len(blob) == 64`.
Everything read here may come from a hostile peer: every parser checks sizes
and raises RuntimeError (what UCCL's binding raises) on malformed input.
"""

from __future__ import annotations

import socket
import struct
from typing import List, NamedTuple, Optional, Sequence, Tuple

# ---- endpoint metadata (UCCL's layout) ------------------------------------------
# IPv4: 4 address bytes, the port (network order), the GPU index (int32, host
# order): 10 bytes. IPv6: 16 address bytes, then the same: 22 bytes.

_PORT = struct.Struct("!H")
_GPU = struct.Struct("=i")


def pack_endpoint_metadata(ip: str, port: int, gpu_idx: int) -> bytes:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return socket.inet_pton(family, ip) + _PORT.pack(port) + _GPU.pack(gpu_idx)


def parse_endpoint_metadata(blob: bytes) -> Tuple[str, int, int]:
    """(ip, port, gpu_idx) of a blob from pack_endpoint_metadata."""
    blob = bytes(blob)
    if len(blob) == 10:
        family, address_bytes = socket.AF_INET, 4
    elif len(blob) == 22:
        family, address_bytes = socket.AF_INET6, 16
    else:
        raise RuntimeError(f"endpoint metadata must be 10 (IPv4) or 22 (IPv6) bytes, got {len(blob)}")
    ip = socket.inet_ntop(family, blob[:address_bytes])
    (port,) = _PORT.unpack_from(blob, address_bytes)
    (gpu_idx,) = _GPU.unpack_from(blob, address_bytes + 2)
    return ip, port, gpu_idx


# ---- advertised memory (64 bytes, as UCCL's serialized FifoItem) ------------------
# "FP2P", a version byte, 11 zero bytes, then the 48-byte ferry RemoteDescriptor
# (engine, export id, access key, length). The owner's engine checks key and
# bounds on every access, so a forged or stale blob fails, it never lands.

ADVERTISE_BYTES = 64
_ADVERTISE_MAGIC = b"FP2P\x01" + bytes(11)
_DESCRIPTOR_BYTES = ADVERTISE_BYTES - len(_ADVERTISE_MAGIC)


def pack_advertisement(descriptor: bytes) -> bytes:
    if len(descriptor) != _DESCRIPTOR_BYTES:
        raise RuntimeError(f"a ferry descriptor is {_DESCRIPTOR_BYTES} bytes, got {len(descriptor)}")
    return _ADVERTISE_MAGIC + descriptor


def parse_advertisement(blob, what: str = "meta") -> bytes:
    """The serialized ferry descriptor inside a blob from pack_advertisement."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be bytes (the blob advertise returned), not {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) != ADVERTISE_BYTES:
        raise RuntimeError(f"{what} must be exactly {ADVERTISE_BYTES} bytes (what advertise returned), "
                           f"got {len(blob)}")
    if not blob.startswith(_ADVERTISE_MAGIC):
        raise RuntimeError(f"{what} was not made by ferry.p2p's advertise (bad magic)")
    return blob[len(_ADVERTISE_MAGIC):]


# ---- hello: the first notification on every connection an Endpoint opens ------------
# b"ferry.p2p/1 gpu=3 kind=net" plus, optionally, "rank=N" (join_group) and
# "bdf=..." (the GPU's PCI address, what accept_local reports). The accepting
# side files the connection by kind: accept() takes "net", accept_local()
# "local", join_group "group".

HELLO_PREFIX = b"ferry.p2p/1 "
HELLO_KINDS = ("net", "local", "group")
_HELLO_MAX = 256
_INT_MAX_DIGITS = 10  # an int32 GPU index or rank; longer text is refused before int() reads it


class Hello(NamedTuple):
    gpu_idx: int
    kind: str
    rank: Optional[int]
    bdf: str


def pack_hello(gpu_idx: int, kind: str, rank: Optional[int] = None, bdf: str = "") -> bytes:
    parts = [f"gpu={gpu_idx}", f"kind={kind}"]
    if rank is not None:
        parts.append(f"rank={rank}")
    if bdf:
        parts.append(f"bdf={bdf}")
    return HELLO_PREFIX + " ".join(parts).encode("ascii")


def _small_int(text: str) -> Optional[int]:
    digits = text[1:] if text.startswith("-") else text
    if not digits.isdigit() or len(digits) > _INT_MAX_DIGITS:
        return None
    return int(text)


def parse_hello(note: bytes) -> Optional[Hello]:
    """The Hello in a peer's first notification; None when it is not one."""
    if len(note) > _HELLO_MAX or not note.startswith(HELLO_PREFIX):
        return None
    try:
        fields = dict(token.split("=", 1) for token in note[len(HELLO_PREFIX):].decode("ascii").split())
    except ValueError:  # undecodable, or a token without '='
        return None
    gpu_idx = _small_int(fields.get("gpu", ""))
    kind = fields.get("kind", "net")
    rank = _small_int(fields["rank"]) if "rank" in fields else None
    if gpu_idx is None or kind not in HELLO_KINDS or ("rank" in fields and rank is None):
        return None
    return Hello(gpu_idx, kind, rank, fields.get("bdf", ""))


# ---- transfer descriptors (today's UCCL layout, little-endian) -------------------------
# count; then per descriptor: addr, size, key count, lkeys, rkeys (u32 each),
# the length of a trailing blob and the blob. UCCL puts its IPC handle there;
# ferry puts the 64-byte advertisement of the registered buffer.

_U64 = struct.Struct("<Q")


def pack_descs(items: Sequence[Tuple[int, int, Sequence[int], Sequence[int], bytes]]) -> bytes:
    """items: (addr, size, lkeys, rkeys, blob) per descriptor."""
    out = [_U64.pack(len(items))]
    for addr, size, lkeys, rkeys, blob in items:
        if len(lkeys) != len(rkeys):
            raise RuntimeError("lkeys and rkeys of a descriptor must have the same length")
        out += [_U64.pack(addr), _U64.pack(size), _U64.pack(len(lkeys))]
        out += [struct.pack(f"<{len(lkeys)}I", *lkeys), struct.pack(f"<{len(rkeys)}I", *rkeys)]
        out += [_U64.pack(len(blob)), bytes(blob)]
    return b"".join(out)


def parse_descs(data: bytes) -> List[Tuple[int, int, List[int], List[int], bytes]]:
    """The items pack_descs was given; RuntimeError on anything malformed."""
    data = bytes(data)
    if not data:
        return []
    view = memoryview(data)
    at = 0

    def take(n: int) -> memoryview:
        nonlocal at
        if n > len(data) - at:
            raise RuntimeError("Invalid serialized XferDesc data: it ends inside a descriptor")
        at += n
        return view[at - n:at]

    def u64() -> int:
        return _U64.unpack(take(8))[0]

    count = u64()
    if count > len(data) // 32:  # a descriptor takes at least 32 bytes: refuse before looping
        raise RuntimeError(f"Invalid serialized XferDesc data: {count} descriptors in {len(data)} bytes")
    items = []
    for _ in range(count):
        addr, size, keys = u64(), u64(), u64()
        if keys > (len(data) - at) // 8:
            raise RuntimeError(f"Invalid serialized XferDesc data: {keys} keys do not fit")
        lkeys = list(struct.unpack(f"<{keys}I", take(4 * keys)))
        rkeys = list(struct.unpack(f"<{keys}I", take(4 * keys)))
        blob = bytes(take(u64())) if at < len(data) else b""
        items.append((addr, size, lkeys, rkeys, blob))
    if at != len(data):
        raise RuntimeError(f"Invalid serialized XferDesc data: {len(data) - at} bytes after the last descriptor")
    return items
