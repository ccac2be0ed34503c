"""The `ferry` console command of an installed package: runs the CLI binary
that `pip install` put beside this file (ferry/bin/ferry)."""

import os
import sys
from pathlib import Path


def main() -> None:
    binary = Path(__file__).resolve().parent / "bin" / "ferry"
    if not os.access(binary, os.X_OK):
        sys.exit(f"ferry: no CLI binary at {binary}; this ferry package was not installed with pip "
                 "(from a source tree, run build/bin/ferry)")
    os.execv(binary, [str(binary), *sys.argv[1:]])


if __name__ == "__main__":
    main()
