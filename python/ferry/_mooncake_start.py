"""How a ferry.mooncake engine starts: which metadata service initialize's
arguments name, how local_hostname splits into host and port, the name an
engine has in a ferry directory, and the port it listens on.

Kept apart from mooncake.py, which is the API: this is what initialize
decides once (directory_name also serves each lookup in a ferry directory).
"""

from __future__ import annotations

import logging
import re
from typing import Dict, Optional, Tuple

import ferry

log = logging.getLogger("ferry.mooncake")

P2P_HANDSHAKE = "P2PHANDSHAKE"


def metadata_urls(metadata_server: str, metadata_type: str) -> Tuple[str, str]:
    """(ferry directory URL, HTTP metadata server URL) of initialize's
    arguments, at most one of them set; both "" for P2PHANDSHAKE. Raises
    NotImplementedError for a service ferry has no client for, ValueError
    for an empty one. A bare server means `metadata_type`'s service, etcd by
    default, as in Mooncake."""
    if metadata_server == P2P_HANDSHAKE or metadata_type == "p2p":
        return "", ""
    if metadata_server.startswith(("redis://", "etcd://")):
        return metadata_server, ""
    if metadata_server.startswith(("http://", "https://")):
        return "", metadata_server
    if "://" in metadata_server:
        raise NotImplementedError(f"metadata_server {metadata_server!r}: expected P2PHANDSHAKE, etcd://, redis:// "
                                  "or http://")
    kind = metadata_type or "etcd"
    if kind not in ("etcd", "redis", "http"):
        raise NotImplementedError(f"metadata_type {metadata_type!r}: expected p2p, etcd, redis or http")
    if not metadata_server:
        raise ValueError("metadata_server is empty")
    return ("", f"http://{metadata_server}") if kind == "http" else (f"{kind}://{metadata_server}", "")


def directory_name(session: str) -> str:
    """`session` as a ferry directory takes a name: [A-Za-z0-9._-], 128 at most."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", session)[:128]


def split_host_port(text: str) -> Tuple[str, Optional[int]]:
    """("host", port) of "host:port" or "[v6]:port"; (text, None) without a port."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if text.count(":") == 1:
        host, port = text.split(":")
        if port.isdigit():
            return host, int(port)
    return text, None


def listen(fields: Dict[str, object], bind: str, port: Optional[int]) -> ferry.Engine:
    """A ferry engine with `fields`, listening on `port` of `bind`, or, when
    that port is taken, on another: in Mooncake the port of local_hostname
    is not a promise either (its P2PHANDSHAKE engine binds one it finds
    free), and get_rpc_port() says which. Raises what ferry.Engine raises."""
    try:
        return ferry.Engine(**fields, listen=f"{bind}:{port or 0}")
    except ferry.Unavailable as e:
        if not port or "listen" not in str(e):  # not the port: a directory that cannot be reached, say
            raise
        log.info("mooncake: port %d is taken (%s); listening on another, reported by get_rpc_port()", port, e)
    return ferry.Engine(**fields, listen=f"{bind}:0")
