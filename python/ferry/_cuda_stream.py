"""Work ordered on a CUDA stream: runs a Python callable once everything
queued on the stream before it has finished, and holds back what is queued
after it until the callable returns (cuLaunchHostFunc).

The callable runs on a thread of the CUDA driver and must not call CUDA
itself; ferry's own copies run on ferry's non-blocking streams, so a transfer
may run there. The driver is loaded on first use; without one, launching
raises RuntimeError.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
from typing import Callable, Dict, Optional

log = logging.getLogger("ferry.mooncake")

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class StreamWork:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Dict[int, Callable[[], None]] = {}
        self._keys = itertools.count(1)
        self._launch: Optional[Callable[..., int]] = None
        self._trampoline = _HOST_FN(self._run)  # kept alive as long as this object

    def _driver(self) -> Callable[..., int]:
        if self._launch is None:
            try:
                cuda = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise RuntimeError(f"CUDA stream work needs the CUDA driver (libcuda.so.1): {e}") from None
            launch = cuda.cuLaunchHostFunc
            launch.restype = ctypes.c_int
            launch.argtypes = [ctypes.c_void_p, _HOST_FN, ctypes.c_void_p]
            self._launch = launch
        return self._launch

    def launch(self, stream_ptr: int, work: Callable[[], None]) -> None:
        """Queues `work` on the stream `stream_ptr` (a cudaStream_t as an int; 0:
        the legacy default stream). Raises RuntimeError if the driver refuses."""
        launch = self._driver()
        with self._lock:
            key = next(self._keys)
            self._pending[key] = work
        rc = launch(ctypes.c_void_p(stream_ptr or None), self._trampoline, ctypes.c_void_p(key))
        if rc != 0:
            with self._lock:
                self._pending.pop(key, None)
            raise RuntimeError(f"cuLaunchHostFunc on stream {stream_ptr:#x} failed: CUresult {rc}")

    def _run(self, key: Optional[int]) -> None:
        with self._lock:
            work = self._pending.pop(key or 0, None)
        if work is None:
            return
        try:
            work()
        except BaseException:  # nothing may unwind into the driver's thread
            log.exception("mooncake: work on a CUDA stream failed")
