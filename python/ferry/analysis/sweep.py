"""Analysis of a `ferry bench --sweep FILE` CSV.

The CSV has one row per combination of chunk size, window, streams per NIC
pair and NIC count, and message size (`ferry bench` runs every size of its
--sizes list once per combination):

    op,bytes,chunk_bytes,window,streams,nics,iters,gbps,p50_us,p99_us,verified,transport
    write,67108864,131072,4,1,4,8,0.4747,140801.5,144938.4,,tcp

gbps is GB/s (10^9 bytes per second); `verified` is empty, "ok" or "FAILED";
`transport` is the one the row measured (older CSVs have no such column).
Chunk size, window and streams shape only TCP transfers: rows of another
transport (the local one, which two engines on one host take unless told
otherwise) measure the same thing at every combination, and summary.md says so.

analyze_sweep() writes, for each (op, bytes):
  * OP_SIZE_streamsS_nicsN.png per (streams, nics): chunk_bytes x window
    heatmap of GB/s, one colour scale for all of that (op, bytes);
  * OP_SIZE_streams_x_nics.png: streams x NICs at the best chunk and window;
and summary.md: the best configuration, its GB/s, and how far the worst and
the default configuration (DEFAULT_CONFIG, at the best's NIC count) are from it.

Rows that repeat a configuration are averaged. Rows with verified=FAILED are
left out of the ranking and the heatmaps, and listed in the summary.
pandas and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

SWEEP_HEADER = "op,bytes,chunk_bytes,window,streams,nics,iters,gbps,p50_us,p99_us,verified"
# The header since `ferry bench` names the transport of each row.
SWEEP_HEADER_WITH_TRANSPORT = SWEEP_HEADER + ",transport"
COLUMNS = SWEEP_HEADER.split(",")
INT_COLUMNS = ["bytes", "chunk_bytes", "window", "streams", "nics", "iters"]
FLOAT_COLUMNS = ["gbps", "p50_us", "p99_us"]
CONFIG = ["chunk_bytes", "window", "streams", "nics"]

# ferry::Options defaults (include/ferry/options.h); the NIC count is whatever
# the best configuration used.
DEFAULT_CONFIG = {"chunk_bytes": 512 * 1024, "window": 16, "streams": 2}

# Best and worst closer than this (fraction of the best): say it may be noise.
NOISE_HINT = 0.03


class SweepError(ValueError):
    """The input cannot be analysed (missing, not a sweep CSV, empty, malformed)."""


@dataclass
class SweepReport:
    summary: str  # the Markdown of summary.md
    out_dir: str
    images: list[str] = field(default_factory=list)  # PNG paths written


def format_bytes(n: int | float) -> str:
    """64K, 512K, 1M, 1.5M, 4096 -> 4K, 100 -> 100 (binary units)."""
    n = float(n)
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{n:.0f}"


def default_out_dir(csv_path: str) -> str:
    """sweep.csv -> sweep_analysis (next to the CSV)."""
    base, ext = os.path.splitext(csv_path)
    return (base if ext.lower() == ".csv" else csv_path) + "_analysis"


def load_sweep(csv_path: str):
    """The sweep as a pandas DataFrame with typed columns; SweepError if unusable."""
    if not os.path.exists(csv_path):
        raise SweepError(f"{csv_path}: no such file")
    if not os.path.isfile(csv_path):
        raise SweepError(f"{csv_path}: not a regular file")
    try:
        with open(csv_path, encoding="utf-8-sig", newline="") as f:
            header = f.readline().strip()
            rest = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise SweepError(f"{csv_path}: cannot read: {e}") from None
    if not header:
        raise SweepError(f"{csv_path}: empty file (expected the header {SWEEP_HEADER!r} and rows)")
    if header.replace(" ", "") not in (SWEEP_HEADER, SWEEP_HEADER_WITH_TRANSPORT):
        raise SweepError(f"{csv_path}: not a `ferry bench --sweep` CSV: header is {header!r}, "
                         f"expected {SWEEP_HEADER!r}")
    if not rest:
        raise SweepError(f"{csv_path}: empty sweep: the header but no rows")

    import pandas as pd

    try:
        df = pd.read_csv(csv_path, dtype=str, keep_default_na=False, skipinitialspace=True,
                         skip_blank_lines=True, encoding="utf-8-sig")
    except (pd.errors.ParserError, ValueError) as e:
        raise SweepError(f"{csv_path}: malformed CSV: {e}") from None
    df.columns = [c.strip() for c in df.columns]
    for col in INT_COLUMNS + FLOAT_COLUMNS:
        values = pd.to_numeric(df[col].str.strip(), errors="coerce")
        bad = values.isna()
        if col in INT_COLUMNS:
            bad |= values.notna() & (values != values.round())
        if bad.any():
            lines = ", ".join(str(i + 2) for i in df.index[bad][:5])  # line 1 is the header
            raise SweepError(f"{csv_path}: column {col!r} is not a number on line(s) {lines}")
        df[col] = values.astype("int64") if col in INT_COLUMNS else values.astype("float64")
    df["op"] = df["op"].str.strip()
    df["verified"] = df["verified"].str.strip()
    if "transport" in df.columns:
        df["transport"] = df["transport"].str.strip()
    if (df["op"] == "").any():
        raise SweepError(f"{csv_path}: empty 'op' on line(s) "
                         + ", ".join(str(i + 2) for i in df.index[df["op"] == ""][:5]))
    return df


def _describe(row) -> str:
    return (f"chunk {format_bytes(row['chunk_bytes'])}, window {int(row['window'])}, "
            f"streams {int(row['streams'])}, nics {int(row['nics'])}")


def _fmt_gbps(v: float) -> str:
    return f"{v:#.4g}".rstrip(".") if v < 999.5 else f"{v:.0f}"


def _pct(v: float, best: float) -> str:
    if best <= 0:
        return "n/a"
    d = (v - best) / best * 100
    return "0.0%" if abs(d) < 0.05 else f"{d:+.1f}%"


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s)


def _span(values, fmt=lambda v: str(int(v))) -> str:
    values = [fmt(v) for v in sorted(set(values))]
    return ", ".join(values) if len(values) <= 6 else f"{values[0]} .. {values[-1]} ({len(values)} values)"


def _heatmap(path, grid, xlabels, ylabels, xlabel, ylabel, title, vmin, vmax, marks) -> None:
    """grid: 2-D list (rows = y) of GB/s or NaN. marks: {(row, col): linestyle}."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib import colormaps

    data = np.ma.masked_invalid(np.array(grid, dtype=float))
    rows, cols = data.shape
    fig = Figure(figsize=(max(4.5, 1.9 + 0.95 * cols), max(3.2, 1.5 + 0.55 * rows)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    cmap = colormaps["viridis"].copy()
    cmap.set_bad("#d9d9d9")
    if vmax <= vmin:  # one value: any scale will do
        vmin, vmax = vmin - 0.5, vmax + 0.5
    im = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", origin="lower")
    ax.set_xticks(range(cols), labels=xlabels)
    ax.set_yticks(range(rows), labels=ylabels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    legend = " and ".join(name for name, style in (("best (solid)", "-"), ("default (dashed)", "--"))
                          if style in marks.values())
    ax.set_title(title + (f"\noutlined in red: {legend}" if legend else ""), fontsize=10)
    for r in range(rows):
        for c in range(cols):
            if data.mask is not np.ma.nomask and data.mask[r, c]:
                ax.text(c, r, "-", ha="center", va="center", fontsize=9, color="#555555")
                continue
            v = float(data[r, c])
            light = (v - vmin) / (vmax - vmin) > 0.6  # viridis is light at the top
            ax.text(c, r, _fmt_gbps(v), ha="center", va="center", fontsize=9,
                    color="black" if light else "white",
                    fontweight="bold" if marks.get((r, c)) == "-" else "normal")
    for (r, c), style in marks.items():
        ax.add_patch(_rect(c, r, style))
    fig.colorbar(im, ax=ax, label="GB/s")
    fig.tight_layout()
    fig.savefig(path)


def _rect(x, y, style):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.47, y - 0.47), 0.94, 0.94, fill=False, edgecolor="red",
                     linewidth=2.2, linestyle=style)


def _analyze_group(op: str, size: int, g, out_dir: str, vmin: float, vmax: float, images: list[str]):
    """Heatmaps for one (op, bytes); returns (best, worst, default or None) rows."""
    import math

    best = g.loc[g["gbps"].idxmax()]
    worst = g.loc[g["gbps"].idxmin()]
    default = None
    d = g[(g["chunk_bytes"] == DEFAULT_CONFIG["chunk_bytes"]) & (g["window"] == DEFAULT_CONFIG["window"])
          & (g["streams"] == DEFAULT_CONFIG["streams"])]
    if len(d):
        at_best_nics = d[d["nics"] == best["nics"]]
        default = (at_best_nics if len(at_best_nics) else d.sort_values("nics")).iloc[-1]

    label = f"{op} {format_bytes(size)}"
    stem = f"{_safe(op)}_{_safe(format_bytes(size))}"
    chunks = sorted(g["chunk_bytes"].unique())
    windows = sorted(g["window"].unique())
    lookup = {tuple(int(r[k]) for k in CONFIG): float(r["gbps"]) for _, r in g.iterrows()}

    def cell(chunk, window, streams, nics):
        return lookup.get((int(chunk), int(window), int(streams), int(nics)), math.nan)

    for (streams, nics), _ in g.groupby(["streams", "nics"], sort=True):
        grid = [[cell(c, w, streams, nics) for w in windows] for c in chunks]
        marks = {}
        if (streams, nics) == (best["streams"], best["nics"]):
            marks[(chunks.index(best["chunk_bytes"]), windows.index(best["window"]))] = "-"
        if (default is not None and (streams, nics) == (default["streams"], default["nics"])
                and default.name != best.name):
            marks[(chunks.index(default["chunk_bytes"]), windows.index(default["window"]))] = "--"
        path = os.path.join(out_dir, f"{stem}_streams{int(streams)}_nics{int(nics)}.png")
        _heatmap(path, grid, [str(int(w)) for w in windows], [format_bytes(c) for c in chunks],
                 "window (chunks in flight per path)", "chunk size",
                 f"{label}: GB/s, streams {int(streams)}, nics {int(nics)}", vmin, vmax, marks)
        images.append(path)

    streams_list = sorted(g["streams"].unique())
    nics_list = sorted(g["nics"].unique())
    grid = [[cell(best["chunk_bytes"], best["window"], s, n) for n in nics_list] for s in streams_list]
    marks = {(streams_list.index(best["streams"]), nics_list.index(best["nics"])): "-"}
    path = os.path.join(out_dir, f"{stem}_streams_x_nics.png")
    _heatmap(path, grid, [str(int(n)) for n in nics_list], [str(int(s)) for s in streams_list],
             "NICs", "streams per NIC pair",
             f"{label}: GB/s at chunk {format_bytes(best['chunk_bytes'])}, window {int(best['window'])}",
             vmin, vmax, marks)
    images.append(path)
    return best, worst, default


def analyze_sweep(csv_path: str, out_dir: str | None = None) -> SweepReport:
    """Writes the heatmaps and summary.md for a sweep CSV into out_dir; returns them."""
    df = load_sweep(csv_path)
    out_dir = out_dir or default_out_dir(csv_path)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise SweepError(f"cannot create the output folder {out_dir}: {e}") from None

    failed = df[df["verified"].str.upper() == "FAILED"]
    usable = df[df["verified"].str.upper() != "FAILED"]
    # A configuration measured more than once: the mean.
    agg = (usable.groupby(["op", "bytes"] + CONFIG, sort=True)
           .agg(gbps=("gbps", "mean"), p50_us=("p50_us", "mean"), p99_us=("p99_us", "mean"),
                runs=("gbps", "size"))
           .reset_index())

    d = DEFAULT_CONFIG
    lines = [f"# Sweep analysis: {os.path.basename(csv_path)}", "",
             f"{len(df)} rows from `{csv_path}`. GB/s is 10^9 bytes/s; a configuration measured "
             "more than once is averaged. vs best: how far below the best configuration. "
             f"Default: ferry's defaults (chunk {format_bytes(d['chunk_bytes'])}, window {d['window']}, "
             f"streams {d['streams']}) at the best configuration's NIC count.", ""]
    if "transport" in df.columns:
        others = sorted(set(df["transport"]) - {"tcp"})
        if others:
            lines += [f"**Not TCP:** {(df['transport'] != 'tcp').sum()} row(s) measured the {', '.join(others)} "
                      "transport, on which chunk size, window and streams do nothing: their differences are "
                      "noise. Sweep with `ferry bench --transport tcp` to tune TCP.", ""]
    images: list[str] = []
    for (op, size), g in df.groupby(["op", "bytes"], sort=True):
        lines += [f"## {op} {format_bytes(size)} ({int(size)} bytes)", ""]
        ga = agg[(agg["op"] == op) & (agg["bytes"] == size)].reset_index(drop=True)
        gf = failed[(failed["op"] == op) & (failed["bytes"] == size)]
        if ga.empty:
            lines += ["Every configuration FAILED verification; nothing to rank.", ""]
        else:
            best, worst, default = _analyze_group(op, int(size), ga, out_dir, float(ga["gbps"].min()),
                                                  float(ga["gbps"].max()), images)
            lines += [f"{len(ga)} configurations: chunk {_span(ga['chunk_bytes'], format_bytes)}; "
                      f"window {_span(ga['window'])}; streams {_span(ga['streams'])}; nics {_span(ga['nics'])}.", "",
                      "| | chunk | window | streams | nics | GB/s | vs best | p50 us | p99 us |",
                      "|---|---|---|---|---|---|---|---|---|"]

            def row(name, r):
                return (f"| {name} | {format_bytes(r['chunk_bytes'])} | {int(r['window'])} | {int(r['streams'])} "
                        f"| {int(r['nics'])} | {r['gbps']:.4f} | {_pct(r['gbps'], best['gbps'])} "
                        f"| {r['p50_us']:.1f} | {r['p99_us']:.1f} |")

            lines.append(row("best", best))
            if default is not None:
                lines.append(row("default", default))
            lines.append(row("worst", worst))
            lines.append("")
            lines.append(f"Best: {_describe(best)}: {best['gbps']:.4f} GB/s.")
            if default is None:
                lines.append(f"Default (chunk {format_bytes(d['chunk_bytes'])}, window {d['window']}, "
                             f"streams {d['streams']}): not in this sweep.")
            else:
                lines.append(f"Default ({_describe(default)}): {default['gbps']:.4f} GB/s, "
                             f"{_pct(default['gbps'], best['gbps'])} vs best.")
            lines.append(f"Worst: {_describe(worst)}: {worst['gbps']:.4f} GB/s, "
                         f"{_pct(worst['gbps'], best['gbps'])} vs best.")
            if ga["nics"].nunique() > 1:
                per_nics = ga.loc[ga.groupby("nics")["gbps"].idxmax()].sort_values("nics")
                lines.append("Best per NIC count: " + "; ".join(
                    f"nics {int(r['nics'])}: {r['gbps']:.4f} GB/s (chunk {format_bytes(r['chunk_bytes'])}, "
                    f"window {int(r['window'])}, streams {int(r['streams'])})" for _, r in per_nics.iterrows()) + ".")
            if best["gbps"] > 0 and (best["gbps"] - worst["gbps"]) / best["gbps"] < NOISE_HINT:
                lines.append(f"All configurations are within {NOISE_HINT:.0%} of each other: the ranking may be "
                             "run-to-run noise; repeat the sweep before choosing.")
            lines.append("")
        if len(gf):
            lines += [f"FAILED verification (left out): {len(gf)} row(s): "
                      + "; ".join(_describe(r) for _, r in gf.iterrows()), ""]

    lines += ["Heatmaps: " + ", ".join(os.path.basename(p) for p in images) if images else "No heatmaps.", ""]
    summary = "\n".join(lines)
    with open(os.path.join(out_dir, "summary.md"), "w", encoding="utf-8") as f:
        f.write(summary)
    return SweepReport(summary=summary, out_dir=out_dir, images=images)
