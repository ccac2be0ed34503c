#!/usr/bin/env bash
# `pip install .` works offline and gives a usable package: installs this
# source tree into a fresh virtual environment (the system's setuptools, NumPy
# and pytest visible, no index), then, from outside the source tree, imports
# ferry, moves random bytes between two engines and runs the `ferry` command.
#
#   tests/package/install_test.sh [CMAKE_BUILD_DIR]
# With CMAKE_BUILD_DIR (CTest passes the configured tree) the package is made
# from what that tree built; without it pip builds everything from scratch.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# Given to pip alone: engines warn of FERRY_* variables that are not theirs.
FERRY_CMAKE_BUILD_DIR=${1:-} timeout 1200 "$work/venv/bin/pip" install --no-build-isolation --no-index --no-input -q "$src"

cd "$work"
timeout 120 "$work/venv/bin/python" - "$src" <<'PY'
import os, sys
import numpy as np
import ferry

src = sys.argv[1]
where = os.path.dirname(ferry.__file__)
assert not where.startswith(src), f"ferry was imported from the source tree ({where})"
assert "site-packages" in where, where

rng = np.random.default_rng()
with ferry.Engine(listen="127.0.0.1:0", transport="tcp") as a, ferry.Engine(listen="127.0.0.1:0", transport="tcp") as b:
    src_buf = rng.integers(0, 256, 3 * 1024 * 1024 + 7, dtype=np.uint8)
    dst_buf = np.zeros(src_buf.size + 64, dtype=np.uint8)
    a.reg(src_buf)
    remote = b.export_region(b.reg(dst_buf))
    conn = a.connect(b.address, timeout=10)
    peer = b.accept(timeout=10)
    conn.write(src_buf[5:], remote, 13, notification=b"done", timeout=30)
    assert peer.wait_notification(timeout=10) == b"done"
    assert np.array_equal(dst_buf[13:13 + src_buf.size - 5], src_buf[5:]), "bytes differ"
    assert not dst_buf[:13].any() and not dst_buf[13 + src_buf.size - 5:].any(), "bytes outside the target changed"
print(f"installed package at {where}: write of {src_buf.size - 5} random bytes verified")
PY

out=$(timeout 60 "$work/venv/bin/ferry" --help)
grep -q "bench" <<<"$out" || { echo "install_test: 'ferry --help' from the venv does not list bench:"; echo "$out"; exit 1; }
echo "install_test: ferry on the venv's PATH runs ($work/venv/bin/ferry)"
echo "1 passed, 0 failed"
