"""The client of Mooncake's HTTP metadata server, for ferry.mooncake.

With ``metadata_server="http://host:port/metadata"`` Mooncake's engines find
each other through a plain key-value store over HTTP: Mooncake's
``mooncake_http_metadata_server``, or the Go server of its examples, which
its CI runs. The protocol, as Mooncake's HTTPStoragePlugin speaks it:

  GET    <url>?key=<key>   200 and the value; anything else: no value
  PUT    <url>?key=<key>   the value as the body; 200 when stored
  DELETE <url>?key=<key>   200 when gone

Values are JSON. The key is percent-encoded as curl_easy_escape does (every
byte but ``A-Z a-z 0-9 - . _ ~``) and appended to the URL as given. Every
request has Mooncake's bounds: 1.5 s to connect, 3 s in all.

What the facade stores, under Mooncake's keys and in Mooncake's shapes
(the prefix is ``mooncake/``, or ``mooncake/<MC_METADATA_CLUSTER_ID>/``):

  rpc_meta/<name>  {"ip_or_host_name": host, "rpc_port": port}: where the
                   engine named <name> listens. A peer's name is looked up
                   here and the ferry engine at that address is connected.
  ram/<name>       the segment: {"name", "protocol": "tcp", "tcp_data_port",
                   "timestamp", "buffers": [{"name": location, "addr",
                   "length"}, ...]}. A name with a "/" is its own key, as in
                   Mooncake. Kept current at each registration, for people
                   and tools that read the server; peers take the buffers,
                   with the descriptors that export them, from the engine.

A server's answers are checked before use (status, size, JSON shape, port
range); anything else is a MetadataError that says what and where.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
import time
import urllib.parse
from typing import Callable, Optional, Sequence, Tuple

log = logging.getLogger("ferry.mooncake")

CONNECT_TIMEOUT_S = 1.5  # Mooncake's CURLOPT_CONNECTTIMEOUT_MS
REQUEST_TIMEOUT_S = 3.0  # Mooncake's CURLOPT_TIMEOUT_MS
MAX_VALUE_BYTES = 1 << 20  # a value larger than this is no entry of ours: refused unread
KEY_PREFIX = "mooncake/"
CLUSTER_ID_ENV = "MC_METADATA_CLUSTER_ID"


class MetadataError(Exception):
    """The server could not be reached, refused a request, or answered with
    something that is not what the protocol allows."""


def key_prefix() -> str:
    """mooncake/, with MC_METADATA_CLUSTER_ID and a "/" after it when set."""
    cluster = os.environ.get(CLUSTER_ID_ENV, "")
    if cluster and not cluster.endswith("/"):
        cluster += "/"
    return KEY_PREFIX + cluster


def segment_key(name: str) -> str:
    """Where the segment `name` is kept: ram/<name>, or <name> itself when it holds a "/"."""
    return key_prefix() + (name if "/" in name else "ram/" + name)


def rpc_meta_key(name: str) -> str:
    return key_prefix() + "rpc_meta/" + name


def segment_entry(name: str, rpc_port: int, buffers: Sequence[Tuple[str, int, int]]) -> dict:
    """The ram/<name> value for `buffers`, each (location, address, length),
    as Mooncake's TCP transport writes it."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
    return {"name": name, "protocol": "tcp", "tcp_data_port": rpc_port, "timestamp": stamp,
            "buffers": [{"name": where, "addr": addr, "length": length} for where, addr, length in buffers]}


class HttpMetadata:
    """A client of one metadata server URL. Thread-safe: every request opens
    its own connection (a request is rare: at start, at each registration,
    and when a peer is first reached)."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise MetadataError(f"metadata server {url!r}: expected http://host[:port]/path")
        try:
            parts.port  # noqa: B018 - raises ValueError on a port out of range
        except ValueError as e:
            raise MetadataError(f"metadata server {url!r}: {e}") from None
        self.url = url
        self._parts = parts

    # ---- the three requests ---------------------------------------------------

    def get(self, key: str, deadline: Optional[float] = None) -> Optional[object]:
        """The value under `key`, parsed; None when the server has none (any
        status but 200, as Mooncake reads it). Raises MetadataError when the
        server cannot be reached or sends a value that is no JSON."""
        status, body = self._request("GET", key, None, deadline)
        if status != 200:
            return None
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise MetadataError(f"GET {self._show(key)}: the value is no JSON: {e}") from None

    def put(self, key: str, value: object, deadline: Optional[float] = None) -> None:
        payload = json.dumps(value, separators=(",", ":")).encode()
        status, body = self._request("PUT", key, payload, deadline)
        if status != 200:
            raise MetadataError(f"PUT {self._show(key)}: HTTP {status}: {body[:200]!r}")

    def delete(self, key: str, deadline: Optional[float] = None) -> None:
        status, body = self._request("DELETE", key, None, deadline)
        if status != 200:
            raise MetadataError(f"DELETE {self._show(key)}: HTTP {status}: {body[:200]!r}")

    # ---- what the facade keeps there --------------------------------------------

    def locate(self, name: str, deadline: Optional[float] = None) -> str:
        """"host:port" of the engine published as `name` (rpc_meta/<name>).
        Raises MetadataError when nobody published it or the entry is malformed."""
        entry = self.get(rpc_meta_key(name), deadline)
        if entry is None:
            raise MetadataError(f"{self._show(rpc_meta_key(name))}: no engine is published as {name!r}")
        host, port = _rpc_meta_fields(entry, name)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    # ---- the wire ---------------------------------------------------------------

    def _show(self, key: str) -> str:
        return f"{self.url}?key={key}"

    def _target(self, key: str) -> str:
        path = self._parts.path or "/"
        query = self._parts.query + "&" if self._parts.query else ""
        return f"{path}?{query}key={urllib.parse.quote(key, safe='-._~')}"

    def _request(self, method: str, key: str, body: Optional[bytes], deadline: Optional[float]) -> Tuple[int, bytes]:
        """(status, body) of one request, within REQUEST_TIMEOUT_S and `deadline`."""
        left = REQUEST_TIMEOUT_S if deadline is None else min(REQUEST_TIMEOUT_S, deadline - time.monotonic())
        if left <= 0:
            raise MetadataError(f"{method} {self._show(key)}: no time left")
        kind = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(self._parts.hostname, self._parts.port, timeout=min(left, CONNECT_TIMEOUT_S))
        try:
            conn.connect()
            conn.sock.settimeout(left)
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, self._target(key), body=body, headers=headers)
            response = conn.getresponse()
            length = response.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) > MAX_VALUE_BYTES:
                raise MetadataError(f"{method} {self._show(key)}: a {length}-byte answer, at most {MAX_VALUE_BYTES}")
            data = response.read(MAX_VALUE_BYTES + 1)
            if len(data) > MAX_VALUE_BYTES:
                raise MetadataError(f"{method} {self._show(key)}: an answer past {MAX_VALUE_BYTES} bytes")
            return response.status, data
        except (OSError, http.client.HTTPException) as e:
            raise MetadataError(f"{method} {self._show(key)}: {type(e).__name__}: {e}") from None
        finally:
            conn.close()


class Publication:
    """One engine's entries on a metadata server: both put at start, the
    segment replaced at each registration, both deleted at the end (as
    Mooncake's engine does when it is freed). Thread-safe."""

    def __init__(self, url: str, name: str, address: str) -> None:
        """`address`: "host:port" of the engine, as peers are to reach it."""
        self.metadata = HttpMetadata(url)
        self.name = name
        host, _, port = address.rpartition(":")
        self.host = host.strip("[]")
        self.rpc_port = int(port)
        self._lock = threading.Lock()  # one segment PUT at a time, each of the latest buffers

    def publish(self, buffers: Callable[[], Sequence[Tuple[str, int, int]]]) -> None:
        """Puts rpc_meta/<name> and the segment; on a failure deletes what it
        put and raises MetadataError."""
        try:
            self.metadata.put(rpc_meta_key(self.name), {"ip_or_host_name": self.host, "rpc_port": self.rpc_port})
            self.update(buffers)
        except MetadataError:
            self.unpublish()
            raise

    def update(self, buffers: Callable[[], Sequence[Tuple[str, int, int]]]) -> None:
        """Replaces the segment entry with one of `buffers()`, each (location,
        address, length), taken under the lock: concurrent updates land in
        order, the last with the latest buffers."""
        with self._lock:
            self.metadata.put(segment_key(self.name), segment_entry(self.name, self.rpc_port, buffers()))

    def unpublish(self) -> None:
        """Deletes both entries; logs what fails (the engine is going anyway)."""
        for key in (rpc_meta_key(self.name), segment_key(self.name)):
            try:
                self.metadata.delete(key)
            except MetadataError as e:
                log.warning("mooncake: cannot remove %s from the metadata server: %s", key, e)


def _rpc_meta_fields(entry: object, name: str) -> Tuple[str, int]:
    if not isinstance(entry, dict):
        raise MetadataError(f"rpc_meta/{name}: {type(entry).__name__}, expected an object")
    host = entry.get("ip_or_host_name")
    port = entry.get("rpc_port")
    if not isinstance(host, str) or not host or len(host) > 255 or any(c in host for c in "/ \t\r\n[]"):
        raise MetadataError(f"rpc_meta/{name}: ip_or_host_name {host!r} is no host")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise MetadataError(f"rpc_meta/{name}: rpc_port {port!r} is no port")
    return host, port
