#!/usr/bin/env python3
"""What ferry.mooncake costs over ferry's own API, on SGLang's pattern: a KV
cache's 256 blocks of 16 KiB at random places in a registered pool, written
with one `batch_transfer_sync_write` call, against the same blocks written by
ferry's fastest path (`Connection.write_blocks` with pools prepared once and
the block table already built) and by its vector write from prebuilt tuples
(`Connection.writev`, what a caller holding lists of addresses would use),
over the same connection, batch by batch in turn.

    PYTHONPATH=build/python /usr/bin/python3 bench/mooncake_facade.py [--blocks 256] [--block-size 16384]
        [--device cpu|gpu --gpu 0 --peer-gpu 1]      (gpu: pools are torch CUDA tensors)
    FERRY_TRANSPORT=tcp ... (both processes inherit it)

Runs the target as a child process. Prints p50 time per batch of each and
the facade's ratios to both (1.00: the facade costs nothing), and verifies
the target's bytes after the last round.
"""

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from ferry.mooncake import TransferEngine


def pool_of(nbytes: int, gpu, random: bool):
    """(host view as NumPy, address, keep-alive) of a pool on the host or GPU `gpu`."""
    data = np.random.default_rng().integers(0, 256, nbytes, dtype=np.uint8) if random else np.zeros(nbytes, np.uint8)
    if gpu is None:
        return (lambda: data), data.ctypes.data, data
    import torch
    tensor = torch.from_numpy(data).to(f"cuda:{gpu}")
    return (lambda: tensor.cpu().numpy()), tensor.data_ptr(), tensor


def target(pool_bytes: int, gpu) -> None:
    engine = TransferEngine()
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, engine.last_error
    view, address, _pool = pool_of(pool_bytes, gpu, random=False)
    assert engine.register_memory(address, pool_bytes) == 0, engine.last_error
    print(json.dumps({"session": engine.session_id, "pool": address}), flush=True)
    for line in sys.stdin:  # [OFFSETS, SIZE]: a checksum of those blocks, for the initiator's check
        offsets, size = json.loads(line)
        pool = view()
        print(json.dumps(int(sum(int(pool[o:o + size].astype(np.uint64).sum()) for o in offsets))), flush=True)


def p50(samples):
    return float(np.median(samples))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--iters", type=int, default=50, help="batches per round and path (rounds x iters in all)")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--gpu", type=int, default=0, help="this side's GPU (--device gpu)")
    ap.add_argument("--peer-gpu", type=int, default=0, help="the target's GPU (--device gpu)")
    ap.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    footprint = args.blocks * args.block_size
    if args.target:
        target(2 * footprint, args.peer_gpu if args.device == "gpu" else None)
        return

    child = subprocess.Popen([sys.executable, __file__, "--target", "--blocks", str(args.blocks),
                              "--block-size", str(args.block_size), "--device", args.device,
                              "--peer-gpu", str(args.peer_gpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        hello = json.loads(child.stdout.readline())
        session, remote_pool = hello["session"], hello["pool"]
        engine = TransferEngine()
        assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, engine.last_error
        view, base, _local = pool_of(2 * footprint, args.gpu if args.device == "gpu" else None, random=True)
        local = view()
        assert engine.register_memory(base, 2 * footprint) == 0, engine.last_error
        rng = np.random.default_rng(7)
        slots = 2 * footprint // args.block_size
        local_offsets = (rng.choice(slots, args.blocks, replace=False) * args.block_size).tolist()
        remote_offsets = (rng.choice(slots, args.blocks, replace=False) * args.block_size).tolist()
        buffers = [base + o for o in local_offsets]
        peer_addresses = [remote_pool + o for o in remote_offsets]
        lengths = [args.block_size] * args.blocks
        assert engine.batch_transfer_sync_write(session, buffers, peer_addresses, lengths) == 0, engine.last_error

        # ferry's own API over the facade's own connection, with the pools the
        # facade registered and learned (read from its insides).
        conn = engine._peers[session].conn
        region = engine._local.payloads[engine._local.find_base(base)]
        descriptor = engine._peers[session].segments.payloads[0]
        pools = conn.prepare_blocks([region], [descriptor])
        blocks = np.zeros((args.blocks, 5), dtype=np.uint64)
        blocks[:, 2] = local_offsets
        blocks[:, 3] = remote_offsets
        blocks[:, 4] = args.block_size

        # The same blocks through ferry's vector write, from prebuilt tuples:
        # what a caller holding lists of addresses writes with ferry's API.
        items = [(base + lo, descriptor, ro, args.block_size) for lo, ro in zip(local_offsets, remote_offsets)]

        facade, native, vector = [], [], []
        for _ in range(args.rounds * args.iters):  # the three take turns, batch by batch
            t = time.perf_counter()
            rc = engine.batch_transfer_sync_write(session, buffers, peer_addresses, lengths)
            facade.append(time.perf_counter() - t)
            assert rc == 0, engine.last_error
            t = time.perf_counter()
            conn.write_blocks(pools, blocks, timeout=30)
            native.append(time.perf_counter() - t)
            t = time.perf_counter()
            conn.writev(items, timeout=30)
            vector.append(time.perf_counter() - t)

        child.stdin.write(json.dumps([remote_offsets, args.block_size]) + "\n")
        child.stdin.flush()
        got = json.loads(child.stdout.readline())
        want = int(sum(int(local[o:o + args.block_size].astype(np.uint64).sum()) for o in local_offsets))
        assert got == want, f"target's blocks sum to {got}, the sent ones to {want}"

        f, n, v = p50(facade), p50(native), p50(vector)
        transport = conn.transport_name
        print(f"{'device':<7} {'transport':<10} {'blocks':>7} {'block':>7} {'facade us':>10} {'blocks us':>10} "
              f"{'writev us':>10} {'facade/blocks':>14} {'facade/writev':>14}")
        print(f"{args.device:<7} {transport:<10} {args.blocks:>7} {args.block_size:>7} {f * 1e6:>10.1f} {n * 1e6:>10.1f} "
              f"{v * 1e6:>10.1f} {f / n:>14.3f} {f / v:>14.3f}")
    finally:
        child.stdin.close()
        child.wait(timeout=30)


if __name__ == "__main__":
    main()
