"""The two-GPU targets judged on the rounds of bench/gpu/two_gpu.sh: each
target's figure is computed in every round against the anchors of that same
round, and the worst round decides.

    python3 bench/gpu/two_gpu_table.py ROUND_DIR...

Each ROUND_DIR holds a round.txt ("ROW KEY VALUE..." lines). Prints a table a
target: the figure in each round, the worst, the target, MET or MISSED.
"""

from __future__ import annotations

import collections
import os
import sys

MiB = 1 << 20


def load(path: str) -> dict:
    """round.txt as {row name: [fields...], ...} lists of float-or-str fields."""
    rows = collections.defaultdict(list)
    for line in open(path):
        f = line.split()
        if len(f) < 2:
            continue
        vals = []
        for x in f[1:]:
            try:
                vals.append(float(x))
            except ValueError:
                vals.append(x)
        rows[f[0]].append(vals)
    return rows


def by_size(rows: dict, name: str, col: int = 1) -> dict:
    """{bytes: the float in column `col`} of the rows called `name` whose first field is a size."""
    out = {}
    for v in rows.get(name, []):
        if len(v) > col and isinstance(v[0], float) and isinstance(v[col], float):
            out[int(v[0])] = v[col]
    return out


def label(b: int) -> str:
    return f"{b >> 30} GiB" if b >= 1 << 30 else f"{b >> 20} MiB" if b >= MiB else f"{b >> 10} KiB"


def figures(rows: dict) -> dict:
    """{(target, cell): (figure, higher_is_better, threshold)} for one round."""
    out = {}
    tuned = collections.defaultdict(float)  # bytes -> the best tuned rate over streams and in-flight counts
    for s in (8, 16):
        staged = [v[1] for v in rows.get(f"staged_s{s}", []) if len(v) > 1 and isinstance(v[1], float)]
        floor = max(staged) if staged else None
        iperf = rows.get(f"iperf_s{s}", [[None]])[0][0]
        pcie = rows.get("pcie_together", [[None, None]])[0]
        ceiling = None
        if isinstance(iperf, float) and all(isinstance(x, float) for x in pcie):
            ceiling = min(iperf, *pcie)
        nccl = {}
        for name in ("nccl_default", "nccl_4x4"):
            for b, r in by_size(rows, name).items():
                nccl[b] = max(nccl.get(b, 0.0), r)
        for q in (1, 2):
            rates = by_size(rows, f"gpu_s{s}_q{q}")
            for b, r in rates.items():
                tuned[b] = max(tuned[b], r)
                cell = f"{s} streams, {q} in flight, {label(b)}"
                if floor:
                    out[("gpu/TCP vs the bare staged stream", cell)] = (r / floor, True, 0.9 if b >= 64 * MiB else 0.8)
                if ceiling and b >= 256 * MiB:
                    out[("gpu/TCP vs min(parallel iperf3, PCIe)", cell)] = (r / ceiling, True, 0.9)
                if nccl.get(b):
                    out[("gpu/TCP vs NCCL's socket transport, best setting", cell)] = (r / nccl[b], True, 5.0)
    for q in (1, 2):
        for b, r in by_size(rows, f"gpu_auto_q{q}").items():
            best = max([by_size(rows, f"gpu_s{s}_q{q}").get(b, 0.0) for s in (8, 16)])
            if best:
                out[("defaults (no --streams) vs the best tuned row", f"{q} in flight, {label(b)}")] = (r / best, True, 0.9)
    for b, r in by_size(rows, "p2p_cpus4").items():
        if b >= 64 * MiB and tuned.get(b):
            out[("Endpoint(gpu, num_cpus=4) vs the best tuned row", label(b))] = (r / tuned[b], True, 0.8)
    gpu, host = by_size(rows, "small_gpu"), by_size(rows, "small_host")
    d2h, h2d = by_size(rows, "copy_rt", 1), by_size(rows, "copy_rt", 2)
    for b in sorted(gpu):
        if b in host and b in d2h and b in h2d:
            # Microseconds over the budget: GPU p50 - (host p50 + both copies + 3 us); <= 0 meets it.
            over = gpu[b] - (host[b] + d2h[b] + h2d[b] + 3.0)
            out[("small GPU message over TCP: us above host + 2 copies + 3 us", label(b))] = (over, False, 0.0)
    for name, cell, want in (("blocks_256x16K", "256 x 16 KiB scattered", 0.9),
                             ("blocks_1024x4K", "1,024 x 4 KiB scattered", 0.8)):
        v = rows.get(name, [[]])[0]
        if len(v) >= 5 and isinstance(v[4], float):
            out[("KV blocks, local, vs one contiguous write", cell)] = (v[4], True, want)
            if len(v) >= 6 and v[5] != "ok":
                out[("KV blocks, local, verified", cell)] = (0.0, True, 1.0)
    for v in rows.get("block1", []):
        if len(v) >= 3 and all(isinstance(x, float) for x in v[:3]):
            out[("one block posted -> done: us above the copy engine", label(int(v[0])))] = (v[1] - v[2], False, 2.0)
    for v in rows.get("nvlink", []):
        if len(v) >= 4 and isinstance(v[0], float) and v[0] >= 64 * MiB and isinstance(v[3], float):
            out[("NVLink bulk vs the copy engine", label(int(v[0])))] = (v[3], True, 0.98)
    return out


def main() -> int:
    dirs = sys.argv[1:]
    if not dirs:
        print(__doc__)
        return 2
    rounds = [figures(load(os.path.join(d, "round.txt"))) for d in dirs]
    keys = []
    for r in rounds:
        keys += [k for k in r if k not in keys]
    targets = list(dict.fromkeys(k[0] for k in keys))
    keys.sort(key=lambda k: targets.index(k[0]))  # stable: cells keep their order within a target
    print(f"== two-GPU targets, {len(rounds)} round(s); each figure against the anchors of its own round")
    missed = 0
    target = None
    for k in keys:
        if k[0] != target:
            target = k[0]
            print(f"\n{target}")
        vals = [r.get(k) for r in rounds]
        got = [v[0] for v in vals if v is not None]
        higher, threshold = next(v for v in vals if v is not None)[1:]
        worst = min(got) if higher else max(got)
        ok = worst >= threshold if higher else worst <= threshold
        missed += not ok
        per = " ".join("-" if v is None else f"{v[0]:.2f}" for v in vals)
        sign = ">=" if higher else "<="
        print(f"  {k[1]:<34} {per:<24} worst {worst:7.2f}  target {sign} {threshold:g}  {'MET' if ok else 'MISSED'}")
    for d in dirs:
        for name in ("order_local.txt", "order_tcp.txt"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                for line in open(path):
                    if line.startswith("added posting latency"):
                        print(f"{os.path.basename(d.rstrip('/'))} {name[:-4]}: {line.strip()}")
    print(f"\n{missed} of {len(keys)} cells missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
