"""python3 -m ferry.analysis PATH [--out DIR]

PATH is a `ferry bench --sweep` CSV (see ferry.analysis.sweep) or a `ferry
profile` run directory (see ferry.analysis.profile). Exit status: 0 done,
2 unusable input.
"""

from __future__ import annotations

import argparse
import os
import sys

from .runmeta import RunError
from .sweep import SweepError, analyze_sweep

PROG = "python3 -m ferry.analysis"


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Plots and a summary of a `ferry profile` run directory or a `ferry bench --sweep` CSV.")
    parser.add_argument("path", help="a `ferry profile` run directory, or the CSV of `ferry bench --sweep FILE`")
    parser.add_argument("--out", metavar="DIR",
                        help="folder for the PNGs and summary.md (default: RUN_DIR/analysis, or the CSV's path "
                             "without .csv, plus _analysis)")
    args = parser.parse_args(argv)

    if os.path.isdir(args.path):
        from .profile import analyze_run
        try:
            run = analyze_run(args.path, args.out)
        except RunError as e:
            return _fail(str(e))
        sys.stdout.write(run.summary)
        print(f"{PROG}: wrote {len(run.images)} plots, merged_trace.json and summary.md to {run.out_dir}",
              file=sys.stderr)
        return 0
    try:
        report = analyze_sweep(args.path, args.out)
    except SweepError as e:
        return _fail(str(e))
    sys.stdout.write(report.summary)
    print(f"{PROG}: wrote {len(report.images)} heatmaps and summary.md to {report.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
