"""Analysis of a `ferry profile` run directory.

    python3 -m ferry.analysis RUN_DIR [--out DIR]

reads execution_log.csv, clock_drift.csv, temperatures.csv, reference.csv (ce
runs), rank_N.trace.json and metadata_rank_N.yml, and writes to DIR (default
RUN_DIR/analysis):

  * bandwidth_vs_size.png   median GB/s against size, one line per pair (log axes)
  * latency_vs_size.png     median time per operation against size (log axes)
  * pair_matrix.png         N x N median GB/s at the largest size
  * cv_per_config.png       coefficient of variation of every configuration
  * temperatures.png        NVML temperature, power and SM clock over the run
  * merged_trace.json       every rank's trace on one timeline (below)
  * summary.md              per pair: asymptotic bandwidth, latency floor,
                            sizes reaching 50% and 90% of the asymptote; weak
                            links; the reference ratio (ce); drift; what the
                            run ran on

An operation's time is its receiver's device time (CUDA events around the
receive, or around the copy when one process drives both GPUs): an operation
is done when the data is in place. GB/s is 10^9 bytes per second.

Definitions, per directed pair:
  * asymptotic bandwidth: the highest median GB/s over all sizes;
  * latency floor: the lowest median time over all sizes;
  * size at X%: the smallest size whose median GB/s is at least X% of the
    asymptote.

A weak link: a pair more than 5% below the median of the other pairs at the
same size, at some size of 256 MiB or more (on a node whose pairs should be
alike, a link that trained down, a GPU that throttles, a slow switch port).

Timeline alignment (seed 003): host events carry CLOCK_MONOTONIC, which every
process of a host shares; device events carry the GPU's own timer
(args.gpu_start_ns). clock_drift.csv gives, per GPU, a point of the GPU-to-host
line at the start and at the end of the run; device events are mapped through
the line joining them (or the start window's rate alone), so every rank's
events land on the host timeline. merged_trace.json holds them all, one
process per rank.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field

from .runmeta import RunError, event_duration_ns, event_start_ns, read_trace, read_yaml
from .sweep import format_bytes

LOG_COLUMNS = ["config_id", "src", "dst", "size", "repetition", "start_ns", "end_ns", "duration_ns", "device_ns",
               "rank", "role", "gpu", "gpu_start_ns"]
DRIFT_COLUMNS = ["rank", "gpu", "phase", "host_ref_ns", "gpu_ref_ns", "ppm", "residual_ns", "samples", "span_s"]
CV_TARGET = 0.05
CV_FROM_SIZE = 1 << 20
WEAK_FROM_SIZE = 256 << 20
WEAK_TOLERANCE = 0.05


@dataclass
class PairSummary:
    src: int
    dst: int
    asymptote_gbps: float
    asymptote_size: int
    latency_floor_us: float
    latency_floor_size: int
    size_50: int | None
    size_90: int | None
    max_cv_large: float  # highest CV at sizes >= 1 MiB


@dataclass
class WeakLink:
    src: int
    dst: int
    size: int
    gbps: float
    others_median_gbps: float  # median of the other pairs at this size

    @property
    def ratio(self) -> float:
        return self.gbps / self.others_median_gbps


@dataclass
class RunReport:
    summary: str
    out_dir: str
    pairs: list[PairSummary] = field(default_factory=list)
    weak_links: list[WeakLink] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    merged_trace: str = ""
    reference_ratios: dict = field(default_factory=dict)  # (src, dst, size) -> ce / reference


def _read_csv(path: str, columns: list[str], required: bool = True):
    import pandas as pd
    if not os.path.exists(path):
        if required:
            raise RunError(f"{path}: missing (is this a `ferry profile` run directory?)")
        return None
    try:
        df = pd.read_csv(path, dtype={"role": str, "phase": str})
    except Exception as e:  # pandas raises several types for malformed CSV
        raise RunError(f"{path}: {e}") from e
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise RunError(f"{path}: no column(s) {', '.join(missing)}")
    return df


def operation_times(log):
    """One row per (config, repetition): the receiver's (or the copy's) times."""
    ops = log[log["role"].isin(["recv", "copy"])].copy()
    if ops.empty:
        raise RunError("execution_log.csv has no recv or copy rows")
    return ops


def config_stats(ops):
    """Per configuration: median device and host ns, GB/s, CV of device time."""
    g = ops.groupby(["config_id", "src", "dst", "size"])
    stats = g.agg(reps=("device_ns", "size"), device_ns=("device_ns", "median"),
                  host_ns=("duration_ns", "median"), mean_ns=("device_ns", "mean"),
                  std_ns=("device_ns", "std")).reset_index()
    stats["gbps"] = stats["size"] / stats["device_ns"]
    stats["cv"] = (stats["std_ns"] / stats["mean_ns"]).fillna(0.0)
    return stats.sort_values(["src", "dst", "size"]).reset_index(drop=True)


def pair_summaries(stats) -> list[PairSummary]:
    out = []
    for (src, dst), p in stats.groupby(["src", "dst"]):
        p = p.sort_values("size")
        best = p.loc[p["gbps"].idxmax()]
        fastest = p.loc[p["device_ns"].idxmin()]
        asym = float(best["gbps"])

        def first_at(frac):
            hit = p[p["gbps"] >= frac * asym]
            return int(hit["size"].iloc[0]) if len(hit) else None

        large = p[p["size"] >= CV_FROM_SIZE]
        out.append(PairSummary(int(src), int(dst), asym, int(best["size"]), float(fastest["device_ns"]) / 1e3,
                               int(fastest["size"]), first_at(0.5), first_at(0.9),
                               float(large["cv"].max()) if len(large) else 0.0))
    return out


def weak_links(stats, from_size: int = WEAK_FROM_SIZE, tolerance: float = WEAK_TOLERANCE) -> list[WeakLink]:
    """Pairs more than `tolerance` below the median of the other pairs at a size >= from_size."""
    import numpy as np
    out = []
    for size, g in stats[stats["size"] >= from_size].groupby("size"):
        if len(g) < 2:
            continue
        gbps = g["gbps"].to_numpy()
        for i, row in enumerate(g.itertuples()):
            others = float(np.median(np.delete(gbps, i)))
            if others > 0 and row.gbps < (1 - tolerance) * others:
                out.append(WeakLink(int(row.src), int(row.dst), int(size), float(row.gbps), others))
    return sorted(out, key=lambda w: (w.src, w.dst, w.size))


class ClockMap:
    """GPU timer -> host CLOCK_MONOTONIC, as ferry::profile::ClockMap."""

    def __init__(self, start: dict, end: dict | None = None):
        self.host_ref = int(start["host_ref_ns"])
        self.gpu_ref = int(start["gpu_ref_ns"])
        self.rate = 1.0 + float(start["ppm"]) * 1e-6
        if end is not None and int(end["host_ref_ns"]) != self.host_ref:
            self.rate = (int(end["gpu_ref_ns"]) - self.gpu_ref) / (int(end["host_ref_ns"]) - self.host_ref)

    def to_host(self, gpu_ns: int) -> int:
        return self.host_ref + int(round((int(gpu_ns) - self.gpu_ref) / self.rate))


def clock_maps(drift) -> dict:
    """(rank, gpu) -> ClockMap from clock_drift.csv rows."""
    maps = {}
    if drift is None:
        return maps
    for (rank, gpu), g in drift.groupby(["rank", "gpu"]):
        rows = {r["phase"]: r for r in g.to_dict("records")}
        if "start" in rows:
            maps[(int(rank), int(gpu))] = ClockMap(rows["start"], rows.get("end"))
    return maps


def merge_traces(run_dir: str, maps: dict, out_path: str) -> dict:
    """Writes every rank's events on the host timeline; returns alignment facts."""
    events, offsets = [], {}
    files = sorted(glob.glob(os.path.join(run_dir, "rank_*.trace.json")),
                   key=lambda p: int(os.path.basename(p).split("_")[1].split(".")[0]))
    if not files:
        raise RunError(f"{run_dir}: no rank_N.trace.json")
    for path in files:
        rank = int(os.path.basename(path).split("_")[1].split(".")[0])
        doc = read_trace(path)
        host_start = {}
        for e in doc["traceEvents"]:
            if e.get("ph") == "M":
                e = dict(e, pid=rank)
                events.append(e)
                continue
            if e.get("ph") != "X":
                continue
            args = dict(e.get("args") or {})
            start = event_start_ns(e)
            dur = event_duration_ns(e)
            if e.get("cat") == "device" and "gpu_start_ns" in args and (rank, int(args.get("gpu", -1))) in maps:
                start = maps[(rank, int(args["gpu"]))].to_host(int(args["gpu_start_ns"]))
            elif e.get("cat") == "host":
                host_start[e["name"]] = start
            args["start_ns"], args["dur_ns"] = start, dur
            events.append(dict(e, pid=rank, ts=start / 1000.0, dur=dur / 1000.0, args=args))
        # How far each device event starts after its host posting: a check of the alignment.
        lags = [ev["args"]["start_ns"] - host_start[ev["name"]] for ev in events
                if ev.get("pid") == rank and ev.get("cat") == "device" and ev.get("name") in host_start]
        if lags:
            lags.sort()
            offsets[rank] = {"median_lag_ns": lags[len(lags) // 2], "min_lag_ns": lags[0], "max_lag_ns": lags[-1],
                             "events": len(lags)}
    with open(out_path, "w", encoding="utf-8") as f:
        f.write('{"displayTimeUnit":"ns",\n"otherData":{"aligned_to":"host CLOCK_MONOTONIC"},\n"traceEvents":[\n')
        f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in events))
        f.write("\n]}\n")
    return offsets


def _plots(stats, temps, out_dir: str, images: list[str]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def save(fig, name):
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        images.append(path)

    sizes = sorted(stats["size"].unique())
    ticks = [s for s in sizes if s in (1, 1 << 10, 1 << 20, 1 << 30) or s == sizes[0] or s == sizes[-1]]
    for metric, ylabel, name, title in (
            ("gbps", "GB/s (median)", "bandwidth_vs_size.png", "Bandwidth against size"),
            ("device_us", "time per operation, us (median)", "latency_vs_size.png", "Latency against size")):
        fig, ax = plt.subplots(figsize=(8, 5))
        for (src, dst), p in stats.groupby(["src", "dst"]):
            y = p["gbps"] if metric == "gbps" else p["device_ns"] / 1e3
            ax.plot(p["size"], y, marker="o", markersize=3, label=f"GPU {src} -> {dst}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_bytes(t) for t in ticks])
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, name)

    gpus = sorted(set(stats["src"]) | set(stats["dst"]))
    largest = max(sizes)
    at = stats[stats["size"] == largest]
    grid = np.full((len(gpus), len(gpus)), np.nan)
    for r in at.itertuples():
        grid[gpus.index(r.src), gpus.index(r.dst)] = r.gbps
    fig, ax = plt.subplots(figsize=(1.2 * len(gpus) + 3, 1.0 * len(gpus) + 2.5))
    # An absolute scale from 0: pairs that differ by a fraction of a percent look alike, as they should.
    top = float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=top)
    for i in range(len(gpus)):
        for j in range(len(gpus)):
            ax.text(j, i, "-" if np.isnan(grid[i, j]) else f"{grid[i, j]:.1f}", ha="center", va="center",
                    color="w" if not np.isnan(grid[i, j]) and grid[i, j] < top * 0.6 else "k")
    ax.set_xticks(range(len(gpus)), [str(g) for g in gpus])
    ax.set_yticks(range(len(gpus)), [str(g) for g in gpus])
    ax.set_xlabel("destination GPU")
    ax.set_ylabel("source GPU")
    ax.set_title(f"GB/s at {format_bytes(largest)}")
    fig.colorbar(im, ax=ax, label="GB/s")
    save(fig, "pair_matrix.png")

    fig, ax = plt.subplots(figsize=(8, 5))
    for (src, dst), p in stats.groupby(["src", "dst"]):
        ax.scatter(p["size"], 100 * p["cv"], s=14, label=f"GPU {src} -> {dst}")
    ax.axhline(100 * CV_TARGET, color="r", linestyle="--", linewidth=1, label="5%")
    ax.axvline(CV_FROM_SIZE, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_bytes(t) for t in ticks])
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("coefficient of variation, % (device time)")
    ax.set_title("Variation per configuration")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "cv_per_config.png")

    if temps is not None and len(temps):
        fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
        t0 = temps["host_ns"].min()
        for gpu, g in temps.groupby("gpu"):
            x = (g["host_ns"] - t0) / 1e9
            axes[0].plot(x, g["temperature_c"], label=f"GPU {gpu}")
            axes[1].plot(x, g["power_w"], label=f"GPU {gpu}")
            axes[2].plot(x, g["sm_clock_mhz"], label=f"GPU {gpu}")
        for ax, label in zip(axes, ("temperature, C", "power, W", "SM clock, MHz")):
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=8)
        axes[2].set_xlabel("seconds since the first sample")
        axes[0].set_title("NVML samples")
        save(fig, "temperatures.png")


def _size(n) -> str:
    return "never" if n is None else format_bytes(n)


def analyze_run(run_dir: str, out_dir: str | None = None) -> RunReport:
    """Analyses RUN_DIR; raises RunError for input it cannot use."""
    import pandas as pd  # noqa: F401  (fail early and clearly when missing)

    if not os.path.isdir(run_dir):
        raise RunError(f"{run_dir}: not a directory")
    out_dir = out_dir or os.path.join(run_dir, "analysis")
    os.makedirs(out_dir, exist_ok=True)
    log = _read_csv(os.path.join(run_dir, "execution_log.csv"), LOG_COLUMNS)
    drift = _read_csv(os.path.join(run_dir, "clock_drift.csv"), DRIFT_COLUMNS, required=False)
    temps = _read_csv(os.path.join(run_dir, "temperatures.csv"),
                      ["host_ns", "gpu", "temperature_c", "power_w", "sm_clock_mhz"], required=False)
    ref = _read_csv(os.path.join(run_dir, "reference.csv"), ["src", "dst", "size", "device_ns", "copies"],
                    required=False)
    metas = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "metadata_rank_*.yml"))):
        rank = int(os.path.basename(path)[len("metadata_rank_"):-len(".yml")])
        metas[rank] = read_yaml(path)

    ops = operation_times(log)
    stats = config_stats(ops)
    pairs = pair_summaries(stats)
    report = RunReport(summary="", out_dir=out_dir, pairs=pairs, weak_links=weak_links(stats))
    _plots(stats, temps, out_dir, report.images)
    report.merged_trace = os.path.join(out_dir, "merged_trace.json")
    offsets = merge_traces(run_dir, clock_maps(drift), report.merged_trace)

    m0 = metas.get(min(metas)) if metas else {}
    lines = [f"# ferry profile: {os.path.basename(os.path.normpath(run_dir))}", ""]
    if m0:
        gpus = m0.get("gpus") or []
        soft = m0.get("software") or {}
        names = sorted({g.get("name", "?") for m in metas.values() for g in (m.get("gpus") or [])})
        lines += [f"- backend: {m0.get('backend', '?')}, ranks: {len(metas)}, GPUs: {', '.join(names) or '?'}",
                  f"- driver {soft.get('nvidia_driver', '?')}, CUDA runtime {soft.get('cuda_runtime', '?')}"
                  + (f", NCCL {soft['nccl']}" if "nccl" in soft else "")
                  + f", ferry {m0.get('ferry_version', '?')}",
                  f"- command: `{m0.get('command_line', '?')}`"]
        plan = m0.get("plan") or {}
        lines.append(f"- plan: seed {plan.get('seed', '?')}, {plan.get('configurations', '?')} configurations, "
                     f"warm-up {plan.get('warmup', '?')}, repetitions {plan.get('repetitions', '?')}")
        if "device_timing" in m0:
            lines.append(f"- device timing: {m0['device_timing']}")
        bad = [r for r, m in metas.items() if (m.get("verification") or {}).get("result") != "ok"]
        lines.append("- data verified: " + ("ok on every rank" if not bad else f"FAILED on rank(s) {bad}"))
        for w in sorted({w for m in metas.values() for w in (m.get("warnings") or [])}):
            lines.append(f"- warning: {w}")
        del gpus
    lines += ["", "Times are the receiver's CUDA-event time per operation (median of the repetitions).", "",
              "| pair | asymptotic GB/s (at) | latency floor us (at) | 50% at | 90% at | max CV >= 1M |",
              "|---|---|---|---|---|---|"]
    for p in pairs:
        lines.append(f"| {p.src} -> {p.dst} | {p.asymptote_gbps:.1f} ({format_bytes(p.asymptote_size)}) | "
                     f"{p.latency_floor_us:.2f} ({format_bytes(p.latency_floor_size)}) | {_size(p.size_50)} | "
                     f"{_size(p.size_90)} | {100 * p.max_cv_large:.2f}% |")

    lines += ["", f"Weak links (a pair more than {100 * WEAK_TOLERANCE:.0f}% below the median of the other pairs at "
              f"a size of {format_bytes(WEAK_FROM_SIZE)} or more): "
              + ("none." if not report.weak_links else f"{len(report.weak_links)}."), ""]
    if report.weak_links:
        lines += ["| pair | size | GB/s | others' median GB/s | ratio |", "|---|---|---|---|---|"]
        for w in report.weak_links:
            lines.append(f"| {w.src} -> {w.dst} | {format_bytes(w.size)} | {w.gbps:.1f} | "
                         f"{w.others_median_gbps:.1f} | {w.ratio:.3f} |")

    if ref is not None and len(ref):
        ref = ref.copy()
        ref["gbps"] = ref["size"] * ref["copies"] / ref["device_ns"]
        lines += ["", "Against the spin-gated cudaMemcpyPeerAsync loop (nvbandwidth's method), same run:", "",
                  "| pair | size | this run GB/s | reference GB/s | ratio |", "|---|---|---|---|---|"]
        for (src, dst, size), g in ref.groupby(["src", "dst", "size"]):
            mine = stats[(stats["src"] == src) & (stats["dst"] == dst) & (stats["size"] == size)]
            if mine.empty:
                continue
            r = float(g["gbps"].median())
            ratio = float(mine["gbps"].iloc[0]) / r if r > 0 else float("nan")
            report.reference_ratios[(int(src), int(dst), int(size))] = ratio
            lines.append(f"| {src} -> {dst} | {format_bytes(size)} | {float(mine['gbps'].iloc[0]):.1f} | {r:.1f} | "
                         f"{ratio:.4f} |")

    if drift is not None and len(drift):
        lines += ["", "Clock drift of each GPU's timer against the host clock (ppm):", "",
                  "| rank | gpu | start | end | change |", "|---|---|---|---|---|"]
        for (rank, gpu), g in drift.groupby(["rank", "gpu"]):
            d = {r["phase"]: float(r["ppm"]) for r in g.to_dict("records")}
            s, e = d.get("start", float("nan")), d.get("end", float("nan"))
            lines.append(f"| {rank} | {gpu} | {s:.3f} | {e:.3f} | {e - s:+.3f} |")
    if offsets:
        lines += ["", "Aligned timeline (merged_trace.json): device start minus host posting, per rank:", ""]
        for rank, o in sorted(offsets.items()):
            lines.append(f"- rank {rank}: median {o['median_lag_ns'] / 1e3:.2f} us "
                         f"(min {o['min_lag_ns'] / 1e3:.2f}, max {o['max_lag_ns'] / 1e3:.2f}) over {o['events']} events")
    if temps is not None and len(temps):
        lines += ["", "| gpu | temperature C (min-max) | power W (median) | SM MHz (min-max) |", "|---|---|---|---|"]
        for gpu, g in temps.groupby("gpu"):
            lines.append(f"| {gpu} | {g['temperature_c'].min()}-{g['temperature_c'].max()} | "
                         f"{g['power_w'].median():.1f} | {g['sm_clock_mhz'].min()}-{g['sm_clock_mhz'].max()} |")
    lines += ["", "Plots: " + ", ".join(os.path.basename(i) for i in report.images), ""]
    report.summary = "\n".join(lines)
    with open(os.path.join(out_dir, "summary.md"), "w", encoding="utf-8") as f:
        f.write(report.summary)
    return report
