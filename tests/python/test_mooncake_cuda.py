"""ferry.mooncake on CUDA memory: torch CUDA tensors on both sides, two processes.

This process's buffers are tensors on its first GPU; the target process
(mooncake_peer.py --cuda) keeps its buffers on the last GPU, so with two GPUs
the bytes cross devices. Data is verified end to end, as in test_mooncake.py
(whose helpers this module uses).

The *_on_cuda forms are tested for their order on the stream: a kernel queued
on the stream just before the call fills the source (or a kernel just after
consumes the destination), and the transfer must come between the two.

Skips without a CUDA device (Debian's torch is CPU-only).
"""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
    pytest.skip("no CUDA device", allow_module_level=True)

import numpy as np  # noqa: E402

from ferry.mooncake import TransferEngine  # noqa: E402
from test_mooncake import (KiB, MiB, McPeer, Target, new_engine, place, seeded,  # noqa: E402
                           session_of)

LOCAL = torch.device("cuda", 0)
REMOTE_GPU = torch.cuda.device_count() - 1
BLOCK = 16 * KiB


class GpuLocal:
    """A registered CUDA tensor of n bytes in this process (random or zeros)."""

    def __init__(self, engine: TransferEngine, n: int, rng: np.random.Generator | None = None) -> None:
        data = rng.integers(0, 256, n, dtype=np.uint8) if rng is not None else np.zeros(n, dtype=np.uint8)
        self.host = data
        self.tensor = torch.from_numpy(data).to(LOCAL)
        torch.cuda.synchronize()
        self.engine = engine
        self.addr = self.tensor.data_ptr()
        self.n = n
        assert engine.register_memory(self.addr, n) == 0, engine.last_error

    def bytes(self) -> bytes:
        torch.cuda.synchronize()
        return self.tensor.cpu().numpy().tobytes()

    def close(self) -> None:
        assert self.engine.unregister_memory(self.addr) == 0, self.engine.last_error


def delay(stream: torch.cuda.Stream) -> None:
    """Keeps `stream` busy for a while (tens of ms), so that what is queued
    after it on the stream runs late: work that does not wait for the stream
    would then run first."""
    with torch.cuda.stream(stream):
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is not None:
            sleep(100_000_000)  # clock cycles
        else:
            a = torch.randn(2048, 2048, device=LOCAL)
            for _ in range(20):
                a = a @ a
                a /= a.norm()


@pytest.fixture(scope="module")
def peer():
    p = McPeer("--cuda", str(REMOTE_GPU))
    yield p
    p.stop()


@pytest.fixture(scope="module")
def engine():
    e = new_engine()
    yield e
    e.close()


@pytest.fixture
def gpu_target(peer):
    made = []

    def make(n: int, seed=0) -> Target:
        t = Target(peer, n, seed)
        made.append(t)
        return t

    yield make
    for t in made:
        t.free()


@pytest.mark.parametrize("size", [1, 4097, 3 * MiB + 5])
def test_cuda_transfer_sync_write_and_read(engine, peer, gpu_target, size):
    rng = seeded("cuda-sync", size)
    src = GpuLocal(engine, size + 64, rng)
    out = GpuLocal(engine, size + 64)
    t = gpu_target(size + 64, seed=size)
    try:
        assert engine.transfer_sync_write(session_of(peer), src.addr + 3, t.addr + 5, size) == 0, engine.last_error
        t.expect(5, src.host[3:3 + size])
        t.check(f"a write of {size} bytes between GPUs")
        assert engine.transfer_sync_read(session_of(peer), out.addr + 1, t.addr + 5, size) == 0, engine.last_error
        got = out.bytes()
        assert got[1:1 + size] == src.host[3:3 + size].tobytes(), "the read brought other bytes"
        assert got[:1] == b"\0" and not any(got[1 + size:]), "a read wrote outside its range"
    finally:
        src.close()
        out.close()


def test_cuda_batch_write_and_read_of_256_blocks(engine, peer, gpu_target):
    """SGLang's pattern: 256 KV blocks of 16 KiB at scattered places of GPU pools."""
    rng = seeded("cuda-batch")
    pool = GpuLocal(engine, 8 * MiB, rng)
    out = GpuLocal(engine, 8 * MiB)
    t = gpu_target(8 * MiB, seed=1)
    local = (rng.choice(pool.n // BLOCK, 256, replace=False) * BLOCK).tolist()
    remote = (rng.choice(t.n // BLOCK, 256, replace=False) * BLOCK).tolist()
    try:
        rc = engine.batch_transfer_sync_write(session_of(peer), [pool.addr + o for o in local],
                                              [t.addr + o for o in remote], [BLOCK] * 256)
        assert rc == 0, engine.last_error
        for lo, ro in zip(local, remote):
            t.expect(ro, pool.host[lo:lo + BLOCK])
        t.check("256 blocks written between GPUs")
        sizes = [1, 3, 4099, 65_537, 1 * MiB + 7, 13, 2 * MiB + 1]
        dst = place(rng, sizes, out.n)
        src = place(rng, sizes, t.n)
        rc = engine.batch_transfer_sync_read(session_of(peer), [out.addr + o for o in dst],
                                             [t.addr + o for o in src], sizes)
        assert rc == 0, engine.last_error
        got = out.bytes()
        want = bytearray(out.n)
        for d, s, n in zip(dst, src, sizes):
            want[d:d + n] = t.want[s:s + n]
        assert got == bytes(want), "a batch read into GPU memory"
    finally:
        pool.close()
        out.close()


def test_transfer_write_on_cuda_runs_in_stream_order(engine, peer, gpu_target):
    n = 4 * MiB + 3
    rng = seeded("write-on-cuda")
    src = GpuLocal(engine, n)  # zeros until the stream fills it
    pattern = torch.from_numpy(rng.integers(0, 256, n, dtype=np.uint8)).to(LOCAL)
    t = gpu_target(n, seed=2)
    stream = torch.cuda.Stream(device=LOCAL)
    torch.cuda.synchronize()
    try:
        delay(stream)
        with torch.cuda.stream(stream):
            src.tensor.copy_(pattern)  # just before the transfer, on its stream
        engine.transfer_write_on_cuda(session_of(peer), src.addr, t.addr, n, stream_ptr=stream.cuda_stream)
        with torch.cuda.stream(stream):
            src.tensor.fill_(0)  # just after: must not run before the transfer has read the source
        stream.synchronize()  # the transfer is done when the stream is
        assert engine.cuda_failures == 0, engine.last_error
        t.expect(0, pattern.cpu().numpy())
        t.check("transfer_write_on_cuda: the target must hold what the stream wrote just before")
    finally:
        src.close()


def test_batch_transfer_write_on_cuda_runs_in_stream_order(engine, peer, gpu_target):
    rng = seeded("batch-write-on-cuda")
    pool = GpuLocal(engine, 4 * MiB)
    pattern = torch.from_numpy(rng.integers(0, 256, pool.n, dtype=np.uint8)).to(LOCAL)
    t = gpu_target(8 * MiB, seed=3)
    local = (rng.choice(pool.n // BLOCK, 128, replace=False) * BLOCK).tolist()
    remote = (rng.choice(t.n // BLOCK, 128, replace=False) * BLOCK).tolist()
    stream = torch.cuda.Stream(device=LOCAL)
    torch.cuda.synchronize()
    try:
        delay(stream)
        with torch.cuda.stream(stream):
            pool.tensor.copy_(pattern)
        engine.batch_transfer_write_on_cuda(session_of(peer), [pool.addr + o for o in local],
                                            [t.addr + o for o in remote], [BLOCK] * 128,
                                            stream_ptr=stream.cuda_stream)
        with torch.cuda.stream(stream):
            pool.tensor.fill_(0)
        stream.synchronize()
        assert engine.cuda_failures == 0, engine.last_error
        host = pattern.cpu().numpy()
        for lo, ro in zip(local, remote):
            t.expect(ro, host[lo:lo + BLOCK])
        t.check("batch_transfer_write_on_cuda")
    finally:
        pool.close()


def test_transfer_read_on_cuda_runs_in_stream_order(engine, peer, gpu_target):
    n = 4 * MiB + 3
    t = gpu_target(n, seed=4)
    dst = GpuLocal(engine, n)
    stream = torch.cuda.Stream(device=LOCAL)
    torch.cuda.synchronize()
    try:
        delay(stream)
        with torch.cuda.stream(stream):
            dst.tensor.fill_(7)  # before the read: the read must land after it
        engine.transfer_read_on_cuda(session_of(peer), dst.addr, t.addr, n, stream_ptr=stream.cuda_stream)
        with torch.cuda.stream(stream):
            seen = dst.tensor.clone()  # after the read: a kernel that consumes what it brought
        stream.synchronize()
        assert engine.cuda_failures == 0, engine.last_error
        got = seen.cpu().numpy().tobytes()
        assert got == bytes(t.want), \
            "a kernel queued after transfer_read_on_cuda did not see the read data " \
            f"({sum(a != b for a, b in zip(got[:4096], t.want[:4096]))} of the first 4096 bytes differ)"
    finally:
        dst.close()


def test_failed_work_on_cuda_is_counted_and_the_stream_goes_on(engine, peer, gpu_target):
    """A difference from Mooncake, stated by the module: a failure inside
    *_on_cuda work is logged and counted, the process goes on."""
    t = gpu_target(4096, seed=5)
    src = GpuLocal(engine, 4096, seeded("fail-on-cuda"))
    stream = torch.cuda.Stream(device=LOCAL)
    before = engine.cuda_failures
    try:
        engine.transfer_write_on_cuda(session_of(peer), src.addr, t.addr + 4000, 200, stream_ptr=stream.cuda_stream)
        engine.transfer_write_on_cuda(session_of(peer), src.addr, t.addr + 1, 100, stream_ptr=stream.cuda_stream)
        stream.synchronize()
        assert engine.cuda_failures == before + 1, "one failed transfer on the stream"
        t.expect(1, src.host[:100])
        t.check("a good transfer on the stream after a failed one; nothing of the failed one")
    finally:
        src.close()


def test_cuda_register_memory_checks_the_location(engine, peer, gpu_target):
    """GPU memory registered as "cuda:<its GPU>" (or with the location
    detected) is written from; named as host memory or another GPU's it is
    refused with -1 and nothing is registered (issue 52)."""
    src = torch.from_numpy(seeded("cuda-location").integers(0, 256, 8192, dtype=np.uint8)).to(LOCAL)
    torch.cuda.synchronize()
    addr = src.data_ptr()
    for bad in ("cpu:0", f"cuda:{LOCAL.index + 1}", "npu:0"):
        assert engine.register_memory(addr, 8192, bad) == -1, f"{bad!r}"
        assert engine.unregister_memory(addr) == -3, f"{bad!r}: a refused registration left one behind"
    for good in (f"cuda:{LOCAL.index}", "*", ""):
        assert engine.register_memory(addr, 8192, good) == 0, engine.last_error
        t = gpu_target(8192, seed=None)
        try:
            assert engine.transfer_sync_write(session_of(peer), addr, t.addr, 8192) == 0, engine.last_error
            t.expect(0, src.cpu().numpy())
            t.check(f"a write from GPU memory registered at {good!r}")
        finally:
            assert engine.unregister_memory(addr) == 0, engine.last_error
