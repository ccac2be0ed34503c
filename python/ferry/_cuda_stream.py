"""Work ordered on a CUDA stream, for ferry.mooncake's *_on_cuda calls: the
work runs after everything queued on the stream before it, and everything
queued after it runs after the work.

It waits for the stream (cuStreamSynchronize, the GIL released), then runs
the work on the calling thread, then returns: what the caller queues next
comes after. Mooncake instead queues a host function on the stream that runs
the transfer; a ferry transfer of GPU memory inside a host function does not
complete (measured on H200: stuck until its deadline), so ferry takes the
order without the asynchrony. The driver is loaded on first use; without
one, or when the stream fails, RuntimeError.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Callable, Optional


class StreamWork:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._synchronize: Optional[Callable[..., int]] = None

    def _driver(self) -> Callable[..., int]:
        with self._lock:
            if self._synchronize is None:
                try:
                    cuda = ctypes.CDLL("libcuda.so.1")
                except OSError as e:
                    raise RuntimeError(f"CUDA stream work needs the CUDA driver (libcuda.so.1): {e}") from None
                synchronize = cuda.cuStreamSynchronize
                synchronize.restype = ctypes.c_int
                synchronize.argtypes = [ctypes.c_void_p]
                self._synchronize = synchronize
            return self._synchronize

    def run(self, stream_ptr: int, work: Callable[[], None]) -> None:
        """Runs `work` in the order of stream `stream_ptr` (a cudaStream_t as an
        int; 0: the legacy default stream)."""
        rc = self._driver()(ctypes.c_void_p(stream_ptr or None))
        if rc != 0:
            raise RuntimeError(f"cuStreamSynchronize on stream {stream_ptr:#x} failed: CUresult {rc}")
        work()
