"""How connect_local finds the endpoint of a GPU on this host.

UCCL's connect_local(remote_gpu) names a GPU, not an address. An endpoint
that accepts local peers (accept_local, start_passive_accept) therefore leaves
a small file, named after its GPU, in a folder only this user can enter:
"PORT ENGINE_ID PID". connect_local reads it, dials 127.0.0.1:PORT and checks
that the engine answering is the one the file names; ferry itself then picks
its local transport (shared memory, CUDA IPC) for the connection. A file whose
process is gone counts as absent. The folder is ferry-p2p-UID in the
temporary folder (TMPDIR, else /tmp), so both processes must agree on TMPDIR.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import time
from typing import List, Optional, Tuple, Union

import ferry

_BDF = re.compile(r"[0-9A-Za-z:._-]{1,64}")


def _error(code: ferry.Code, message: str) -> ferry.FerryError:
    return ferry.Status(code, message).exception()


def local_dir() -> str:
    """The rendezvous folder, created private (0700) and checked to be ours:
    in a shared /tmp another user could otherwise plant files in it."""
    path = os.path.join(tempfile.gettempdir(), f"ferry-p2p-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise _error(ferry.Code.PERMISSION_DENIED,
                     f"local rendezvous folder {path} must be a directory of uid {os.getuid()} with mode 0700")
    return path


def gpu_key(gpu: Union[int, str]) -> str:
    """The file name for a GPU given as an index (3, "3") or a PCI address ("0000:1b:00.0")."""
    if isinstance(gpu, bool) or not isinstance(gpu, (int, str)):
        raise TypeError(f"remote_gpu_bdf must be a GPU index or PCI address, not {type(gpu).__name__}")
    text = str(gpu).strip()
    if text.isdigit() and len(text) <= 10:
        return f"gpu-{int(text)}"
    if not _BDF.fullmatch(text):
        raise ValueError(f"remote_gpu_bdf {gpu!r} is neither a GPU index nor a PCI address")
    return "bdf-" + text.lower().replace(":", "_")


def publish(keys: List[str], port: int, engine_id: int) -> List[str]:
    """Writes one file per key (atomically); returns their paths."""
    folder = local_dir()
    paths = []
    for key in keys:
        path = os.path.join(folder, key)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            f.write(f"{port} {engine_id} {os.getpid()}\n")
        os.replace(temporary, path)
        paths.append(path)
    return paths


def _read(path: str) -> Optional[Tuple[int, int, int]]:
    try:
        with open(path) as f:
            port, engine_id, pid = (int(field) for field in f.read(100).split())
    except (OSError, ValueError):  # absent, or being replaced
        return None
    return port, engine_id, pid


def unpublish(paths: List[str], engine_id: int) -> None:
    """Removes the files that still name this engine (a newer endpoint of the GPU may have replaced them)."""
    for path in paths:
        entry = _read(path)
        if entry is not None and entry[1] == engine_id:
            try:
                os.unlink(path)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find(gpu: Union[int, str], deadline: float) -> Tuple[int, int]:
    """(port, engine_id) of the endpoint accepting local peers for `gpu`;
    waits for one to appear until `deadline` (time.monotonic()), then raises Unavailable."""
    path = os.path.join(local_dir(), gpu_key(gpu))
    while True:
        entry = _read(path)
        if entry is not None and _alive(entry[2]):
            return entry[0], entry[1]
        if time.monotonic() >= deadline:
            raise _error(ferry.Code.UNAVAILABLE,
                         f"connect_local: no endpoint of GPU {gpu!r} accepts local peers on this host "
                         f"(no live {path}: the peer must call accept_local or start_passive_accept)")
        time.sleep(0.05)
