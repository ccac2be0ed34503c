"""ferry.analysis: reports on ferry's measurements.

    python3 -m ferry.analysis RUN_DIR [--out DIR]

reads a `ferry profile` run directory and leaves, in DIR (default
RUN_DIR/analysis), bandwidth and latency against size per GPU pair, an N x N
pair matrix at the largest size, the coefficient of variation per
configuration, NVML temperatures, every rank's trace merged on one timeline
(merged_trace.json) and summary.md (see ferry.analysis.profile). From Python:
ferry.analysis.analyze_run(run_dir, out_dir=None) returns a RunReport and
raises RunError for input it cannot use.

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

from .runmeta import RunError, parse_event_name, parse_yaml
from .sweep import DEFAULT_CONFIG, SWEEP_HEADER, SweepError, SweepReport, analyze_sweep, format_bytes


def analyze_run(run_dir, out_dir=None):
    """See ferry.analysis.profile.analyze_run (imported on use: it needs pandas)."""
    from .profile import analyze_run as run
    return run(run_dir, out_dir)


__all__ = ["DEFAULT_CONFIG", "SWEEP_HEADER", "RunError", "SweepError", "SweepReport", "analyze_run", "analyze_sweep",
           "format_bytes", "parse_event_name", "parse_yaml"]
