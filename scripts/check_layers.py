#!/usr/bin/env python3
"""Fails when a file of src/ includes a layer above its own, or anything of
ops/: the table of docs/architecture.md ("## Layers": | folder | may include |)
says which folders each folder's files may include. Run from anywhere:

    python3 scripts/check_layers.py [REPO]

Prints every offending include as FILE:LINE: "INCLUDE" (LAYER may not include
TARGET), and exits 1 if there is one; 0 and a one-line summary otherwise.
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def read_table(doc):
    """{folder (relative to src/, "" never): set of folders it may include}."""
    rows, in_layers = {}, False
    with open(doc) as f:
        for line in f:
            if line.startswith("## "):
                in_layers = line.strip() == "## Layers"
                continue
            m = re.match(r"^\|\s*src/([a-z_/]+)/\s*\|\s*([a-z_/, ]+?)\s*\|\s*$", line)
            if in_layers and m:
                rows[m.group(1)] = {p.strip() for p in m.group(2).split(",") if p.strip()}
    return rows


def layer_of(path, folders):
    """The longest folder of the table that holds `path` (relative to src/)."""
    best = None
    for folder in folders:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    src, ops = os.path.join(repo, "src"), os.path.join(repo, "ops")
    table = read_table(os.path.join(repo, "docs", "architecture.md"))
    if not table:
        print("check_layers: no table under '## Layers' in docs/architecture.md")
        return 1
    bad, files, includes = [], 0, 0
    for root, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith((".h", ".cc", ".cu", ".inc")):
                continue
            path = os.path.relpath(os.path.join(root, name), src)
            own = layer_of(path, table)
            if own is None:
                bad.append(f"src/{path}: in no folder of the table in docs/architecture.md")
                continue
            files += 1
            with open(os.path.join(root, name), errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    if target.startswith("ferry/"):
                        continue  # the public API
                    if os.path.exists(os.path.join(ops, target)):
                        bad.append(f'src/{path}:{number}: "{target}" (src/ may not include the operations tooling)')
                        continue
                    if not os.path.exists(os.path.join(src, target)):
                        continue  # not ferry's (a generated or third-party header)
                    includes += 1
                    to = layer_of(target, table)
                    if to is None or to not in table[own]:
                        bad.append(f'src/{path}:{number}: "{target}" ({own} may not include {to})')
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against the layers of docs/architecture.md")
        return 1
    print(f"check_layers: {files} files, {includes} includes of src/, all downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
