"""ferry.analysis: reports on ferry's measurements.

    python3 -m ferry.analysis SWEEP.csv [--out DIR]

reads the CSV that `ferry bench --sweep FILE` writes and leaves, in DIR
(default: SWEEP_analysis/ next to the CSV), chunk x window heatmaps of GB/s
for each operation, message size, streams and NIC count, a streams x NICs
heatmap at the best chunk and window, and summary.md (also printed): the
best configuration per operation and size, and how far the worst and the
default configuration fall behind it.

From Python: ferry.analysis.analyze_sweep(csv_path, out_dir=None) returns a
SweepReport (.summary, .out_dir, .images) and raises SweepError for input it
cannot use.

pandas and matplotlib are imported only when an analysis runs, so
`import ferry` and `import ferry.analysis` work without them.
"""

from .sweep import DEFAULT_CONFIG, SWEEP_HEADER, SweepError, SweepReport, analyze_sweep, format_bytes

__all__ = ["DEFAULT_CONFIG", "SWEEP_HEADER", "SweepError", "SweepReport", "analyze_sweep", "format_bytes"]
