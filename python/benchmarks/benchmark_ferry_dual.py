"""ferry's counterpart of UCCL's p2p/benchmarks/benchmark_uccl_dual.py: both directions at once.

Why it exists: UCCL's users measure bidirectional bandwidth with
benchmark_uccl_dual.py under torchrun; this script takes the same flags and
prints the same lines, running ferry through ferry.p2p:

    torchrun --nnodes=2 --nproc_per_node=1 --node_rank=0 --master_addr=<IP> \
        benchmark_ferry_dual.py --device gpu --local-gpu-idx 0 --num-cpus 4

As in UCCL's script, each rank connects to the other and accepts the other's
connection; it sends on the connection it dialed and receives on the one it
accepted. Every iteration posts send_async and recv_async of one message and
polls both until done. The line per size counts one direction's bytes:
"[Client]   1.0 MB :  12.34 Gbps |   1.54 GB/s  | 0.000680 s" (the two
directions together moved twice that). Unlike UCCL's script there is one
untimed warm-up exchange per size, then a barrier; it and the last timed
exchange carry different random bytes, which each rank checks against the
digests its peer sends through torch.distributed (a mismatch exits non-zero).
"""

from __future__ import annotations

import argparse
import time

import torch.distributed as dist

import bench_common as bc
from bench_common import say

DEFAULT_SIZES = "256,1024,4096,16384,65536,262144,1048576,10485760,104857600"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Benchmark ferry P2P (ferry.p2p Endpoint) bandwidth, both directions")
    bc.add_endpoint_flags(p, DEFAULT_SIZES, default_iters=1000)
    p.add_argument("--async-transfer", "--async-api", dest="async_api", action="store_true",
                   help="accepted for UCCL's command lines; this test always uses the asynchronous calls")
    bc.add_timeout_flag(p)
    args = p.parse_args()
    bc.check_iters(p, args.iters)
    args.local_gpu_idx = bc.local_gpu_index(args.local_gpu_idx)
    args.pinned = False
    return args


def run_dual(args, rank, device, endpoint, peer) -> None:
    """The dual test; benchmark_ferry.py --dual runs it too."""
    tag = bc.role_tag(rank)
    if rank == bc.CLIENT_RANK:
        out_conn = bc.connect(endpoint, peer, args.timeout)
        say(f"{tag} Connected to {peer.ip}:{peer.port} (GPU {peer.gpu_idx}) conn_id={out_conn}")
        remote_ip, remote_gpu, in_conn = bc.accept(endpoint, args.timeout)
        say(f"{tag} Accept from {remote_ip} (GPU {remote_gpu}) conn_id={in_conn}")
    else:
        say(f"{tag} Waiting for connection …")
        remote_ip, remote_gpu, in_conn = bc.accept(endpoint, args.timeout)
        say(f"{tag} Accept from {remote_ip} (GPU {remote_gpu}) conn_id={in_conn}")
        out_conn = bc.connect(endpoint, peer, args.timeout)
        say(f"{tag} Connected to {peer.ip}:{peer.port} (GPU {peer.gpu_idx}) conn_id={out_conn}")
    outgoing = bc.Channel(endpoint, out_conn, True, args.timeout)
    incoming = bc.Channel(endpoint, in_conn, True, args.timeout)

    for size in args.sizes:
        # The source holds the bytes of the first exchange, then those of the last.
        source = bc.random_bytes(2 * size, device, bc.seed_for(rank, size), args.pinned)
        sink = bc.zeros(size, device, args.pinned)
        peer_sent = bc.exchange({"first": bc.digest([source[:size]]), "last": bc.digest([source[size:]])})
        sending = bc.Registered(endpoint, [source])
        receiving = bc.Registered(endpoint, [sink])

        def both_ways(source_offset: int) -> None:
            sent = outgoing.post_send(sending.mr_ids, sending.ptrs(source_offset), size)
            received = incoming.post_recv(receiving.mr_ids, receiving.ptrs(), size)
            outgoing.wait(sent, "send")
            incoming.wait(received, "recv")

        try:
            both_ways(0)  # warm-up
            bc.check_received([sink], peer_sent["first"], f"{bc.pretty_size(size)}, warm-up transfer")
            dist.barrier()  # both timings start after both checks
            last = args.iters - 1
            start = time.perf_counter()
            for i in range(args.iters):
                both_ways(size if i == last else 0)
            elapsed = time.perf_counter() - start
        finally:
            sending.release()
            receiving.release()
        bc.check_received([sink], peer_sent["last"], f"{bc.pretty_size(size)}, last transfer")
        say(bc.p2p_result_line(tag, size, args.iters * size, elapsed, args.iters))
    say(f"{tag} Received data verified (warm-up and last transfer of every size)")
    say(f"{tag} Benchmark complete")


def main() -> None:
    args = parse_args()
    _, p2p = bc.import_ferry()
    rank = bc.init_distributed("gloo", args.timeout)
    device = bc.select_device(args.device, args.local_gpu_idx)
    say("ferry P2P Benchmark — role:", "client" if rank == bc.CLIENT_RANK else "server")
    say("Message sizes:", ", ".join(bc.pretty_size(s) for s in args.sizes))
    say(f"Device: {args.device} | Local GPU idx: {args.local_gpu_idx} | Iterations: {args.iters}")
    endpoint, peer = bc.open_endpoint(p2p, rank, args.local_gpu_idx, args.num_cpus)
    try:
        run_dual(args, rank, device, endpoint, peer)
        bc.finish()
    finally:
        endpoint.close()


if __name__ == "__main__":
    bc.run_main(main)
