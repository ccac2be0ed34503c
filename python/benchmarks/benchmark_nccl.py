"""The baseline: UCCL's p2p/benchmarks/benchmark_nccl.py, send/recv through torch.distributed.

Why it exists: numbers from benchmark_ferry*.py mean most next to NCCL's on the
same machines. UCCL ships benchmark_nccl.py for that; this script takes its
flags and prints its lines, and adds what the ferry scripts have (a deadline on
every wait, a check of the data), so that all four run and fail the same way:

    torchrun --nnodes=2 --nproc_per_node=1 --node_rank=0 --master_addr=<IP> \
        benchmark_nccl.py --device gpu --local-gpu-idx 0

--device gpu sends CUDA tensors with the nccl backend; --device cpu sends host
tensors with gloo. Rank 0 (client) sends each size --iters times to rank 1
(server) after one untimed warm-up and a barrier; with --dual each iteration
also sends the other way (batch_isend_irecv). Both print a line per size:
"[Client]    1.0 MB :   12.34 Gbps |    1.54 GB/s" (UCCL's NCCL line: no
latency column). The warm-up and the last timed message carry different random
bytes, checked against digests exchanged over a gloo group; a mismatch exits
non-zero.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

import bench_common as bc
from bench_common import say

DEFAULT_SIZES = "256,1024,4096,16384,65536,262144,1048576,10485760,16777216,104857600"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Benchmark NCCL (torch.distributed) bandwidth")
    p.add_argument("--local-gpu-idx", type=int, default=0,
                   help="local GPU index (--device gpu); with several ranks per host, each rank adds its LOCAL_RANK")
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu",
                   help="gpu: CUDA tensors over nccl; cpu: host tensors over gloo")
    p.add_argument("--sizes", type=bc.parse_sizes, default=bc.parse_sizes(DEFAULT_SIZES),
                   help="comma separated list of message sizes in bytes")
    p.add_argument("--iters", type=int, default=10, help="iterations per message size (excluding 1 warm-up)")
    p.add_argument("--dual", action="store_true", help="run the dual benchmark (both directions at once)")
    bc.add_timeout_flag(p)
    args = p.parse_args()
    bc.check_iters(p, args.iters)
    args.local_gpu_idx = bc.local_gpu_index(args.local_gpu_idx)
    return args


def result_line(tag: str, size: int, total_bytes: int, elapsed_s: float) -> str:
    """The per-size line of benchmark_nccl.py."""
    gbps, gb_per_s = bc.rates(total_bytes, elapsed_s)
    return f"{tag} {bc.pretty_size(size):>9} : {gbps:7.2f} Gbps | {gb_per_s:7.2f} GB/s"


def both_ways(outgoing: torch.Tensor, incoming: torch.Tensor, peer: int) -> None:
    requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, peer),
                                       dist.P2POp(dist.irecv, incoming, peer)])
    for request in requests:
        request.wait()


def run(args, rank, device, object_group) -> None:
    tag = bc.role_tag(rank)
    peer = 1 - rank
    sends = args.dual or rank == bc.CLIENT_RANK
    receives = args.dual or rank == bc.SERVER_RANK
    for size in args.sizes:
        # The source holds the bytes of the first message, then those of the last.
        source = bc.random_bytes(2 * size, device, bc.seed_for(rank, size)) if sends else None
        sink = bc.zeros(size, device) if receives else None
        mine = {"first": bc.digest([source[:size]]), "last": bc.digest([source[size:]])} if sends else None
        peer_sent = bc.exchange(mine, group=object_group)

        first_out = source[:size] if sends else None
        last_out = source[size:] if sends else None

        def step(outgoing) -> None:
            if args.dual:
                both_ways(outgoing, sink, peer)
            elif sends:
                dist.send(outgoing, dst=peer)
            else:
                dist.recv(sink, src=peer)

        step(first_out)  # warm-up
        bc.synchronize(device)
        if receives:
            bc.check_received([sink], peer_sent["first"], f"{bc.pretty_size(size)}, warm-up message")
        dist.barrier(group=object_group)  # both timings start after the check
        last = args.iters - 1
        start = time.perf_counter()
        for i in range(args.iters):
            step(last_out if i == last else first_out)
        bc.synchronize(device)
        elapsed = time.perf_counter() - start
        if receives:
            bc.check_received([sink], peer_sent["last"], f"{bc.pretty_size(size)}, last message")
        say(result_line(tag, size, args.iters * size, elapsed))
    if receives:
        say(f"{tag} Received data verified (warm-up and last message of every size)")
    say(f"{tag} Benchmark complete")


def main() -> None:
    args = parse_args()
    backend = "nccl" if args.device == "gpu" else "gloo"
    if backend == "nccl":
        # Without this, a dead peer can leave NCCL waiting forever; with it, past --timeout it fails.
        # torch before 2.2 reads the variable's older name (which newer ones call deprecated).
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        if tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 2):
            os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "1")
    device = bc.select_device(args.device, args.local_gpu_idx)
    rank = bc.init_distributed(backend, args.timeout)
    # Digests travel over gloo: objects through nccl would take GPU copies of their own.
    object_group = dist.new_group(backend="gloo") if backend == "nccl" else None
    say("NCCL Benchmark — role:", "client" if rank == bc.CLIENT_RANK else "server")
    say("Message sizes:", ", ".join(bc.pretty_size(s) for s in args.sizes))
    say(f"Device: {args.device} | Local GPU idx: {args.local_gpu_idx} | Iters: {args.iters}")
    try:
        run(args, rank, device, object_group)
        dist.barrier(group=object_group)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    bc.run_main(main)
