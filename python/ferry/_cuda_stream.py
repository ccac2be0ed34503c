"""Work ordered on a CUDA stream: runs a Python callable once everything
queued on the stream before it has finished, and holds back what is queued
after it until the callable returns (cuLaunchHostFunc).

A host function must make no CUDA call, and a ferry transfer makes some
(its copies, on ferry's own non-blocking streams, may be issued by the thread
that posts). So the host function only hands the callable to a thread of
this object ("ferry-mc-stream") and waits for it: the stream stays held
while the transfer runs, and no CUDA call is made on the driver's thread.
The driver is loaded on first use; without one, launching raises
RuntimeError.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import queue
import threading
from typing import Callable, Dict, Optional, Tuple

log = logging.getLogger("ferry.mooncake")

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class StreamWork:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Dict[int, Callable[[], None]] = {}
        self._keys = itertools.count(1)
        self._launch: Optional[Callable[..., int]] = None
        self._trampoline = _HOST_FN(self._run)  # kept alive as long as this object
        self._work: "queue.SimpleQueue[Tuple[Callable[[], None], threading.Event]]" = queue.SimpleQueue()
        self._worker: Optional[threading.Thread] = None

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
            if self._worker is None:
                self._worker = threading.Thread(target=self._serve, name="ferry-mc-stream", daemon=True)
                self._worker.start()
            key = next(self._keys)
            self._pending[key] = work
        rc = launch(ctypes.c_void_p(stream_ptr or None), self._trampoline, ctypes.c_void_p(key))
        if rc != 0:
            with self._lock:
                self._pending.pop(key, None)
            raise RuntimeError(f"cuLaunchHostFunc on stream {stream_ptr:#x} failed: CUresult {rc}")

    def _run(self, key: Optional[int]) -> None:
        """The host function, on the driver's thread: holds the stream until
        the worker has run the work queued under `key`."""
        with self._lock:
            work = self._pending.pop(key or 0, None)
        if work is None:
            return
        done = threading.Event()
        self._work.put((work, done))
        done.wait()

    def _serve(self) -> None:
        while True:
            work, done = self._work.get()  # blocks until a stream reaches its work
            try:
                work()
            except BaseException:  # the stream must be let go whatever happened
                log.exception("mooncake: work on a CUDA stream failed")
            finally:
                done.set()
