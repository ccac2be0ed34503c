"""ferry's counterpart of UCCL's p2p/benchmarks/benchmark_uccl.py: send/recv bandwidth.

Why it exists: users of UCCL measure its P2P engine with benchmark_uccl.py under
torchrun. This script takes the same flags and prints the same lines, but runs
ferry through ferry.p2p (UCCL's Endpoint API on ferry), so the two are compared
with the command a user already knows:

    torchrun --nnodes=2 --nproc_per_node=1 --node_rank=0 --master_addr=<IP> \
        benchmark_ferry.py --device gpu --local-gpu-idx 0 --num-cpus 4

Rank 0 (client) sends each message size --iters times to rank 1 (server), after
one untimed warm-up transfer and a barrier; both print a line per size:
"[Client]   1.0 MB :  12.34 Gbps |   1.54 GB/s  | 0.000680 s" (size, Gbps,
GB/s, seconds per message). The warm-up and the last timed transfer carry
different random bytes; the server checks both against the digests the client
sends through torch.distributed and exits non-zero on a mismatch.

--dual runs benchmark_ferry_dual.py's test (both directions at once), as
benchmark_uccl.py --dual does. README.md in this folder has the one-host
commands and the differences from UCCL's script.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist

import bench_common as bc
from bench_common import say

DEFAULT_SIZES = "256,1024,4096,16384,65536,262144,1048576,10485760,16777216,104857600"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Benchmark ferry P2P (ferry.p2p Endpoint) bandwidth")
    bc.add_endpoint_flags(p, DEFAULT_SIZES, default_iters=10)
    p.add_argument("--pinned", action="store_true", help="use pinned (page-locked) memory for CPU buffers")
    p.add_argument("--num-kvblocks", type=int, default=1,
                   help="number of blocks sent/received as one message (sendv/recvv)")
    p.add_argument("--async-api", "--async-transfer", dest="async_api", action="store_true",
                   help="use send_async/recv_async and poll_async")
    p.add_argument("--dual", action="store_true", help="run the dual benchmark (both directions at once)")
    bc.add_timeout_flag(p)
    args = p.parse_args()
    bc.check_iters(p, args.iters)
    args.local_gpu_idx = bc.local_gpu_index(args.local_gpu_idx)
    if args.num_kvblocks < 1 or min(args.sizes) < args.num_kvblocks:
        p.error("--num-kvblocks must be at least 1 and at most the smallest size")
    if args.pinned and args.device == "cpu" and not torch.cuda.is_available():
        p.error("--pinned: page-locked memory needs CUDA, which torch does not see here")
    return args


def run_client(args, rank, device, endpoint, peer) -> None:
    conn_id = bc.connect(endpoint, peer, args.timeout)
    say(f"[Client] Connected to {peer.ip}:{peer.port} (GPU {peer.gpu_idx}) conn_id={conn_id}")
    channel = bc.Channel(endpoint, conn_id, args.async_api, args.timeout)
    for size in args.sizes:
        block = size // args.num_kvblocks
        # Each block holds the bytes of the first transfer, then those of the last.
        sources = [bc.random_bytes(2 * block, device, bc.seed_for(rank, size, i), args.pinned)
                   for i in range(args.num_kvblocks)]
        bc.exchange({"first": bc.digest([s[:block] for s in sources]),
                     "last": bc.digest([s[block:] for s in sources])})
        registered = bc.Registered(endpoint, sources)
        first_ptrs, last_ptrs = registered.ptrs(0), registered.ptrs(block)
        try:
            channel.send(registered.mr_ids, first_ptrs, block)  # warm-up, checked by the server
            dist.barrier()  # both timings start after the server's check
            last = args.iters - 1
            start = time.perf_counter()
            for i in range(args.iters):
                channel.send(registered.mr_ids, last_ptrs if i == last else first_ptrs, block)
            elapsed = time.perf_counter() - start
        finally:
            registered.release()
        say(bc.p2p_result_line("[Client]", size, args.iters * block * args.num_kvblocks, elapsed, args.iters))
    say("[Client] Benchmark complete")


def run_server(args, device, endpoint) -> None:
    remote_ip, remote_gpu, conn_id = bc.accept(endpoint, args.timeout)
    say(f"[Server] Accept from {remote_ip} (GPU {remote_gpu}) conn_id={conn_id}")
    channel = bc.Channel(endpoint, conn_id, args.async_api, args.timeout)
    for size in args.sizes:
        block = size // args.num_kvblocks
        sinks = [bc.zeros(block, device, args.pinned) for _ in range(args.num_kvblocks)]
        sent = bc.exchange(None)
        registered = bc.Registered(endpoint, sinks)
        ptrs = registered.ptrs()
        try:
            channel.recv(registered.mr_ids, ptrs, block)
            bc.check_received(sinks, sent["first"], f"{bc.pretty_size(size)}, warm-up transfer")
            dist.barrier()  # both timings start after this check
            start = time.perf_counter()
            for _ in range(args.iters):
                channel.recv(registered.mr_ids, ptrs, block)
            elapsed = time.perf_counter() - start
        finally:
            registered.release()
        bc.check_received(sinks, sent["last"], f"{bc.pretty_size(size)}, last transfer")
        say(bc.p2p_result_line("[Server]", size, args.iters * block * args.num_kvblocks, elapsed, args.iters))
    say("[Server] Received data verified (warm-up and last transfer of every size)")
    say("[Server] Benchmark complete")


def main() -> None:
    args = parse_args()
    _, p2p = bc.import_ferry()
    rank = bc.init_distributed("gloo", args.timeout)
    device = bc.select_device(args.device, args.local_gpu_idx)
    mode = "Dual" if args.dual else "Standard"
    api = "Async" if args.async_api or args.dual else "Sync"
    say(f"ferry P2P Benchmark — mode: {mode} | API: {api} | role:", "client" if rank == bc.CLIENT_RANK else "server")
    if not args.dual:
        say("Number of key-value blocks per message:", args.num_kvblocks)
    say("Message sizes:", ", ".join(bc.pretty_size(s) for s in args.sizes))
    pinned = " (pinned)" if args.pinned else ""
    say(f"Device: {args.device}{pinned} | Local GPU idx: {args.local_gpu_idx} | Iterations: {args.iters}")

    endpoint, peer = bc.open_endpoint(p2p, rank, args.local_gpu_idx, args.num_cpus)
    try:
        if args.dual:
            import benchmark_ferry_dual
            benchmark_ferry_dual.run_dual(args, rank, device, endpoint, peer)
        elif rank == bc.CLIENT_RANK:
            run_client(args, rank, device, endpoint, peer)
        else:
            run_server(args, device, endpoint)
        bc.finish()
    finally:
        endpoint.close()


if __name__ == "__main__":
    bc.run_main(main)
