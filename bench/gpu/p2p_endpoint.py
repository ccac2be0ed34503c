"""The seed's Endpoint(gpu, num_cpus) out of the box: GPU SEND_GPU -> GPU
RECV_GPU over ferry.p2p between two processes, as UCCL's benchmark_uccl.py
moves data (reg, then blocking send/recv of whole tensors), with no other
setting. bench/gpu/two_gpu.sh sets it beside ferry bench's best tuned row.

    python3 bench/gpu/p2p_endpoint.py SEND_GPU RECV_GPU NUM_CPUS SIZE...

Prints "SIZE GB/s" a size: the receiver's wall time over ITERS (8) blocking
receives after 2 untimed, the tensor checked against the sender's pattern
once at the end. The transport is the environment's (FERRY_TRANSPORT).
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time

ITERS, WARMUP = 8, 2


def device(gpu: int) -> str:
    return "cpu" if gpu < 0 else f"cuda:{gpu}"  # a negative index: host memory (a check without GPUs)


def pattern(torch, n: int, gpu: int):
    return (torch.arange(n, dtype=torch.int64, device=device(gpu)) * 2654435761 + 12345).to(torch.uint8)


def settle(torch, gpu: int) -> None:
    if gpu >= 0:
        torch.cuda.set_device(gpu)
        torch.cuda.synchronize(gpu)


def sender(gpu: int, num_cpus: int, sizes: list[int], pipe) -> None:
    import torch

    from ferry import p2p

    settle(torch, gpu)
    ep = p2p.Endpoint(max(gpu, 0), num_cpus)
    ok, conn = ep.connect(metadata=pipe.recv())
    assert ok, ep.last_error
    for n in sizes:
        t = pattern(torch, n, gpu)
        settle(torch, gpu)
        ok, mr = ep.reg(t.data_ptr(), n)
        assert ok, ep.last_error
        for _ in range(WARMUP + ITERS):
            assert ep.send(conn, mr, t.data_ptr(), n), ep.last_error
        pipe.recv()  # the receiver has checked this size
        ep.dereg(mr)
    ep.close()


def receiver(gpu: int, num_cpus: int, sizes: list[int], pipe) -> None:
    import torch

    from ferry import p2p

    settle(torch, gpu)
    ep = p2p.Endpoint(max(gpu, 0), num_cpus)
    pipe.send(ep.get_endpoint_metadata())
    ok, _, _, conn = ep.accept()
    assert ok, ep.last_error
    rates = []
    for n in sizes:
        t = torch.zeros(n, dtype=torch.uint8, device=device(gpu))
        settle(torch, gpu)
        ok, mr = ep.reg(t.data_ptr(), n)
        assert ok, ep.last_error
        for _ in range(WARMUP):
            assert ep.recv(conn, mr, t.data_ptr(), n), ep.last_error
        start = time.perf_counter()
        for _ in range(ITERS):
            assert ep.recv(conn, mr, t.data_ptr(), n), ep.last_error
        seconds = time.perf_counter() - start
        if not torch.equal(t, pattern(torch, n, gpu)):
            raise SystemExit(f"p2p_endpoint: {n} bytes received wrong")
        rates.append((n, n * ITERS / seconds / 1e9))
        ep.dereg(mr)
        pipe.send("next")
    ep.close()
    for n, gbs in rates:
        print(n, f"{gbs:.2f}", flush=True)


def main() -> int:
    send_gpu, recv_gpu, num_cpus = (int(a) for a in sys.argv[1:4])
    sizes = [int(a) for a in sys.argv[4:]]
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    procs = [ctx.Process(target=sender, args=(send_gpu, num_cpus, sizes, a)),
             ctx.Process(target=receiver, args=(recv_gpu, num_cpus, sizes, b))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    for p in procs:
        if p.is_alive():
            p.kill()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
