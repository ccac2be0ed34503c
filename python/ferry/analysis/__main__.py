"""python3 -m ferry.analysis PATH [--out DIR]

PATH is a `ferry bench --sweep` CSV (see ferry.analysis.sweep). Run
directories of `ferry profile` are not supported yet. Exit status: 0 done,
2 unusable input.
"""

from __future__ import annotations

import argparse
import os
import sys

from .sweep import SweepError, analyze_sweep

PROG = "python3 -m ferry.analysis"


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Heatmaps and a summary of a `ferry bench --sweep` CSV.")
    parser.add_argument("path", help="the CSV written by `ferry bench --sweep FILE`")
    parser.add_argument("--out", metavar="DIR",
                        help="folder for the PNGs and summary.md (default: PATH without .csv, plus _analysis)")
    args = parser.parse_args(argv)

    if os.path.isdir(args.path):
        # Placeholder for `ferry profile` run directories.
        return _fail(f"{args.path} is a directory: run-directory analysis (for `ferry profile`) "
                     "is not available yet; give the CSV of `ferry bench --sweep FILE`")
    try:
        report = analyze_sweep(args.path, args.out)
    except SweepError as e:
        return _fail(str(e))
    sys.stdout.write(report.summary)
    print(f"{PROG}: wrote {len(report.images)} heatmaps and summary.md to {report.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
