"""ferry's counterpart of UCCL's p2p/benchmarks/benchmark_uccl_read.py: one-sided READ.

Why it exists: UCCL's users measure one-sided reads with benchmark_uccl_read.py
under torchrun; this script takes the same flags and prints the same lines:

    torchrun --nnodes=2 --nproc_per_node=1 --node_rank=0 --master_addr=<IP> \
        benchmark_ferry_read.py --device gpu --local-gpu-idx 0 --num-cpus 4

ferry.p2p has no read (nor UCCL's advertise), so the connection comes from
ferry.p2p as in the other scripts and the read from ferry's own API: rank 1
(server) registers --num-iovs blocks with endpoint.engine.reg, exports them
(Engine.export_region, the counterpart of UCCL's advertise) and gives the
serialized descriptors to rank 0 through torch.distributed; rank 0 (client)
reads them with Connection.read (one block) or Connection.readv (several), or
with --async-api their _async forms polled until done. The server takes no
part in the transfers; a barrier after each size keeps its memory until the
client is done. The client prints a line per size:
"[Client]   1.0 MB :  12.34 Gbps |   1.54 GB/s | 0.000680 s". The warm-up read
and the last timed one fetch different random bytes, checked against digests
the server sends; a mismatch exits non-zero.
"""

from __future__ import annotations

import argparse
import time

import torch.distributed as dist

import bench_common as bc
from bench_common import say

DEFAULT_SIZES = "256,1024,4096,16384,65536,262144,1048576,10485760,67108864,104857600"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="ferry READ benchmark (one-sided)")
    bc.add_endpoint_flags(p, DEFAULT_SIZES, default_iters=10)
    p.add_argument("--async-api", action="store_true", help="use read_async/readv_async, polled until done")
    p.add_argument("--num-iovs", type=int, default=1, help="number of blocks read in a single call")
    bc.add_timeout_flag(p)
    args = p.parse_args()
    bc.check_iters(p, args.iters)
    args.local_gpu_idx = bc.local_gpu_index(args.local_gpu_idx)
    if args.num_iovs < 1 or min(args.sizes) < args.num_iovs:
        p.error("--num-iovs must be at least 1 and at most the smallest size")
    return args


def read_result_line(size: int, total_bytes: int, elapsed_s: float, iters: int) -> str:
    """The per-size line of benchmark_uccl_read.py (one space before the last bar, unlike the others)."""
    gbps, gb_per_s = bc.rates(total_bytes, elapsed_s)
    return f"[Client] {bc.pretty_size(size):>8} : {gbps:6.2f} Gbps | {gb_per_s:6.2f} GB/s | {elapsed_s / iters:6.6f} s"


def run_server(args, rank, device, endpoint) -> None:
    say("[Server] Waiting for connection …")
    remote_ip, remote_gpu, conn_id = bc.accept(endpoint, args.timeout)
    say(f"[Server] Connected to {remote_ip} (GPU {remote_gpu}) id={conn_id}")
    engine = endpoint.engine
    for size in args.sizes:
        block = size // args.num_iovs
        # Each block holds the bytes of the first read, then those of the last.
        exposed = [bc.random_bytes(2 * block, device, bc.seed_for(rank, size, i)) for i in range(args.num_iovs)]
        regions = [engine.reg(buf) for buf in exposed]
        try:
            bc.exchange({"descriptors": [engine.export_region(r).serialize() for r in regions],
                         "first": bc.digest([b[:block] for b in exposed]),
                         "last": bc.digest([b[block:] for b in exposed])})
            dist.barrier()  # the client has read this size
        finally:
            for region in regions:
                engine.dereg(region)
    say("[Server] Benchmark complete")


def run_client(args, rank, device, endpoint, peer, ferry) -> None:
    conn_id = bc.connect(endpoint, peer, args.timeout)
    say(f"[Client] Connected to {peer.ip}:{peer.port} id={conn_id}")
    conn = endpoint.connection(conn_id)
    engine = endpoint.engine
    for size in args.sizes:
        block = size // args.num_iovs
        sinks = [bc.zeros(block, device) for _ in range(args.num_iovs)]
        regions = [engine.reg(buf) for buf in sinks]
        exposed = bc.exchange(None)
        remotes = [ferry.RemoteDescriptor.parse(blob) for blob in exposed["descriptors"]]

        def read(remote_offset: int) -> None:
            try:
                if args.async_api:
                    if len(sinks) == 1:
                        transfer = conn.read_async(sinks[0], remotes[0], remote_offset)
                    else:
                        transfer = conn.readv_async([(s, r, remote_offset) for s, r in zip(sinks, remotes)])
                    bc.poll_until_done(bc.transfer_done(transfer, None, "read"), args.timeout, "read")
                elif len(sinks) == 1:
                    conn.read(sinks[0], remotes[0], remote_offset, timeout=args.timeout)
                else:
                    conn.readv([(s, r, remote_offset) for s, r in zip(sinks, remotes)], timeout=args.timeout)
            except ferry.FerryError as e:
                raise bc.BenchmarkError(f"read of {bc.pretty_size(size)} failed: {e}") from e

        try:
            read(0)  # warm-up
            bc.check_received(sinks, exposed["first"], f"{bc.pretty_size(size)}, warm-up read")
            last = args.iters - 1
            start = time.perf_counter()
            for i in range(args.iters):
                read(block if i == last else 0)
            elapsed = time.perf_counter() - start
            bc.check_received(sinks, exposed["last"], f"{bc.pretty_size(size)}, last read")
        finally:
            for region in regions:
                engine.dereg(region)
        dist.barrier()  # the server may free this size's memory
        say(read_result_line(size, args.iters * block * args.num_iovs, elapsed, args.iters))
    say("[Client] Read data verified (warm-up and last read of every size)")
    say("[Client] Benchmark complete")


def main() -> None:
    args = parse_args()
    ferry, p2p = bc.import_ferry()
    say("Sizes:", ", ".join(bc.pretty_size(s) for s in args.sizes))
    if args.async_api:
        say("Async path enabled")
    rank = bc.init_distributed("gloo", args.timeout)
    device = bc.select_device(args.device, args.local_gpu_idx)
    endpoint, peer = bc.open_endpoint(p2p, rank, args.local_gpu_idx, args.num_cpus)
    try:
        if rank == bc.CLIENT_RANK:
            run_client(args, rank, device, endpoint, peer, ferry)
        else:
            run_server(args, rank, device, endpoint)
        bc.finish()
    finally:
        endpoint.close()


if __name__ == "__main__":
    bc.run_main(main)
