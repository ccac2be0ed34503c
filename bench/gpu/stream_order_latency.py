"""What ordering a transfer after torch's current stream costs the posting
thread: a 4 KiB write of a CUDA tensor into a peer engine's CUDA export,
posted with stream=None (the caller synchronised) and stream="auto" (ferry
follows torch.cuda.current_stream()), on an idle stream and on one with
work queued (a 1 ms kernel: the write is held until it ends). Prints the
median and p99 time for the write_async call to return, and the median
round trip (post to finished) on the idle stream.

    python3 bench/gpu/stream_order_latency.py [--transport tcp|local] [--iters N]

Both engines live in this process (the local transport by default).
"""

import argparse
import os
import statistics
import sys
import time


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transport", default="local")
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()
    os.environ["FERRY_TRANSPORT"] = args.transport
    import torch

    import ferry

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    a, b = ferry.Engine(), ferry.Engine()
    cb = None

    import threading

    def accept():
        nonlocal cb
        cb = b.accept(timeout=30)

    th = threading.Thread(target=accept)
    th.start()
    ca = a.connect(b.address, timeout=30)
    th.join()
    src = torch.arange(1024, dtype=torch.int32, device="cuda")  # 4 KiB
    dst = torch.zeros(1024, dtype=torch.int32, device="cuda")
    a.reg(src)
    remote = b.export_region(b.reg(dst))
    torch.cuda.synchronize()

    rows = []
    for label, stream, busy in (("stream=None, idle", None, False), ('stream="auto", idle', "auto", False),
                                ('stream="auto", 1 ms queued', "auto", True)):
        post, total = [], []
        for i in range(args.iters + 100):
            if busy:
                torch.cuda._sleep(2_000_000)  # about 1 ms
            t0 = time.perf_counter_ns()
            t = ca.write_async(src, remote, 0, stream=stream)
            t1 = time.perf_counter_ns()
            t.wait(30)
            t2 = time.perf_counter_ns()
            if i >= 100:
                post.append((t1 - t0) / 1000)
                total.append((t2 - t0) / 1000)
        torch.cuda.synchronize()
        rows.append((label, statistics.median(post), percentile(post, 99), statistics.median(total)))
    assert torch.equal(dst, src)
    print(f"== 4 KiB CUDA write, posting latency ({ca.transport_name}, {torch.cuda.get_device_name()}, "
          f"{args.iters} iterations)")
    print(f"{'case':30s} {'post p50 us':>12s} {'post p99 us':>12s} {'round trip p50 us':>18s}")
    for label, p50, p99, rt in rows:
        print(f"{label:30s} {p50:12.1f} {p99:12.1f} {rt:18.1f}")
    print(f"added posting latency, idle stream (p50): {rows[1][1] - rows[0][1]:+.1f} us")
    ca.close()
    cb.close()
    a.close()
    b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
