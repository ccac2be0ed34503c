"""ferry: point-to-point transfers between the memories of machines.

The Python API mirrors the C++ one (include/ferry/):

    import ferry, numpy as np

    engine = ferry.Engine(listen="0.0.0.0:7000", streams=4)   # Options as keywords
    buf = np.zeros(1 << 20, dtype=np.uint8)
    region = engine.reg(buf)                   # every buffer must lie in registered memory
    conn = engine.accept(timeout=30)           # or engine.connect("10.0.0.2:7000", timeout=5)
    n = conn.recv(buf, timeout=5)              # the message size; the GIL is released meanwhile
    desc = engine.export_region(region)        # give desc.serialize() to the peer ...
    # ... which does conn.write(src, ferry.RemoteDescriptor.parse(blob), 0, notification=b"ready")

Buffers are NumPy arrays, any buffer-protocol object, torch tensors (CPU or
CUDA), objects with __cuda_array_interface__ or __dlpack__, (address, size)
tuples, or an address (int) with size=. Nothing is copied; non-contiguous
memory is rejected with a ValueError naming the argument.

Errors are ferry.FerryError subclasses, one per status code, carrying the C++
message (`.code`, `.message`): Cancelled, InvalidArgument, DeadlineExceeded,
NotFound, OutOfRange, PermissionDenied, Unauthenticated,
ResourceExhausted, Unavailable, PeerLost, BufferTooSmall, Unimplemented,
DataLoss, InternalError. Each also derives from the built-in exception a Python
program would catch (ValueError, TimeoutError, LookupError, IndexError,
PermissionError, ConnectionError, NotImplementedError) where one fits.

Every blocking call takes `timeout` in seconds (None: no deadline), releases
the GIL, and raises KeyboardInterrupt on Ctrl-C.

Engines find each other by name through Redis or etcd:

    engine = ferry.Engine(directory="redis://10.0.0.1:6379/prod", name="prefill-0")
    conn = engine.connect("decode-3", timeout=5)      # resolved through the directory
    engine.directory.list()                           # [DirectoryEntry, ...]
    ferry.Directory("etcd://10.0.0.1:2379").watch().next(timeout=60)

`ferry.p2p` is a facade with the Endpoint API of UCCL's P2P engine;
`ferry.mooncake` one with the TransferEngine API of Mooncake's Transfer Engine.

Logs: ferry's C++ lines go to Python's `logging`, to the loggers
"ferry.engine", "ferry.tcp", "ferry.local", "ferry.directory", ... (the facades
log to "ferry.p2p" and "ferry.mooncake"); FERRY_LOG (default warn) decides
which lines exist. Without any logging configuration they are printed on
stderr as the C++ library prints them. ferry.logs_to_python(False) or
FERRY_LOG_STDERR=1 keeps them on stderr.

Versions: ferry.__version__, and ferry.version_info() for the wire protocol
versions and what the build holds (what `ferry --version` prints).
"""

from typing import Any, Optional

from . import _ferry
from ._ferry import (
    BlockPools,
    BufferTooSmall,
    Cancelled,
    Code,
    Connection,
    DataLoss,
    DeadlineExceeded,
    Directory,
    DirectoryEntry,
    DirectoryEvent,
    DirectoryWatch,
    FerryError,
    InternalError,
    InvalidArgument,
    LogLevel,
    MemoryKind,
    NotFound,
    Note,
    Notification,
    Options,
    OutOfRange,
    PeerLost,
    PermissionDenied,
    Region,
    RemoteDescriptor,
    ResourceExhausted,
    Status,
    Transfer,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    apply_environment,
    code_name,
    describe_tunables,
    validate,
)
from . import _logs

__version__: str = _ferry.build_info()["version"]

from . import aio  # noqa: E402  (makes a Transfer awaitable)

# The class was called NotRegistered before it took C++'s name (not_found);
# the old name still catches it.
NotRegistered = NotFound

__all__ = [
    "BlockPools", "BufferTooSmall", "Cancelled", "Code", "Connection", "DataLoss", "DeadlineExceeded", "Directory",
    "DirectoryEntry", "DirectoryEvent", "DirectoryWatch", "Engine",
    "FerryError", "InternalError", "InvalidArgument", "LogLevel", "MemoryKind", "NotFound", "Note", "Notification",
    "Options", "OutOfRange", "PeerLost", "PermissionDenied", "Region", "RemoteDescriptor",
    "ResourceExhausted", "Status", "Transfer", "Unauthenticated", "Unavailable", "Unimplemented",
    "apply_environment", "code_name", "describe_tunables", "logs_to_python", "make_options", "validate",
    "version_info",
]


def version_info() -> "dict[str, Any]":
    """What this build of ferry is, as `ferry --version` prints it.

    Keys: version ("0.1.0"); protocol, the wire protocol version it speaks
    best, and protocol_range, (lowest, highest) it accepts from a peer;
    cuda (GPU memory support; the driver is loaded at run time), nixl_plugin
    (the NIXL backend plugin was built with it), directories (the directory
    servers its clients speak: "redis", "etcd"); text, the lines of
    `ferry --version` about the library.
    """
    return _ferry.build_info()


def logs_to_python(enable: bool = True) -> None:
    """Whether ferry's C++ log lines go to Python's `logging` (the default).

    True: a daemon thread, "ferry-log", hands each line to the logger
    "ferry.<subsystem>" at its level, with the line's own time and thread
    name; lines about one engine start with "engine 1a2b3c4d: " and carry
    record.ferry_engine. Nothing configured for those loggers: the lines are
    printed on stderr as C++ prints them. ferry's threads never wait for
    Python: past 4096 lines not yet taken, lines are dropped and counted.
    False: lines go straight to stderr (as FERRY_LOG_STDERR=1 at start).
    FERRY_LOG or Options.log_level decides which lines exist either way.
    """
    _logs.to_python(enable)


def make_options(options: Optional[Options] = None, **fields: Any) -> Options:
    """Returns a copy of `options` (default: ferry's defaults) with `fields` set.

    Field names are those of ferry.Options (listen, nics, streams, chunk_bytes,
    window, inline_max, auth_token, heartbeat_interval, peer_timeout,
    path_timeout, handshake_timeout, socket_buffer_bytes, transport, log_level);
    durations are seconds. An unknown name is a TypeError.
    """
    out = Options(options) if options is not None else Options()
    for name, value in fields.items():
        if name.startswith("_") or not hasattr(out, name):
            raise TypeError(f"ferry.Options has no field {name!r}")
        setattr(out, name, value)
    return out


class Engine(_ferry.Engine):
    """The process's transfer engine; one per process serves every NIC and GPU.

    Engine(options=None, **fields): `fields` are ferry.Options fields given as
    keywords (they override `options`); FERRY_* environment variables override
    both. Starts listening and the background threads; allocates nothing on any
    GPU. Raises InvalidArgument for bad options, Unavailable if it cannot
    listen. Use as a context manager, or call close().
    """

    def __init__(self, options: Optional[Options] = None, **fields: Any) -> None:
        super().__init__(make_options(options, **fields))

    def lookup(self, name: str, timeout: Optional[float] = 5.0) -> DirectoryEntry:
        """The directory entry of `name` (engine.directory.lookup)."""
        return self.directory.lookup(name, timeout)

    def list(self, timeout: Optional[float] = 5.0) -> "list[DirectoryEntry]":
        """Every engine in this engine's directory (engine.directory.list)."""
        return self.directory.list(timeout)
