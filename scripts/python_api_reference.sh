#!/usr/bin/env bash
# The Python API reference, generated from the docstrings and signatures by
# pydoc (Debian's python3), one HTML page per module plus an index.
#
#   scripts/python_api_reference.sh [BUILD_DIR] [OUT_DIR]
#
# BUILD_DIR (default build) holds the built package in BUILD_DIR/python;
# OUT_DIR defaults to BUILD_DIR/docs/python. Fails if a page is missing, if
# a documented call lacks its signature, or if C++ types leak into the text.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$build/docs/python}
py=/usr/bin/python3
modules=(ferry ferry.aio ferry.p2p ferry.mooncake ferry._ferry)
mkdir -p "$out"
cd "$out"
PYTHONPATH="$build/python" "$py" -m pydoc -w "${modules[@]}" >/dev/null
{
  echo "<html><head><title>ferry Python API</title></head><body><h1>ferry Python API</h1><ul>"
  for m in "${modules[@]}"; do echo "<li><a href=\"$m.html\">$m</a></li>"; done
  echo "</ul></body></html>"
} >index.html
fail() { echo "python_api_reference: $*" >&2; exit 1; }
for m in "${modules[@]}"; do [ -s "$m.html" ] || fail "no page for $m"; done
# Signatures as Python writes them (pydoc puts them after the name's anchor).
for want in "send</strong></a>(self, data, size=None, *, timeout=None, stream=" "probe</strong></a>(self, *, timeout=None)" \
    "wait_notification</strong></a>(self, timeout=None)" "notification</strong></a>(conn"; do
  grep -qF "$want" ferry._ferry.html ferry.aio.html || fail "no signature '$want' in the reference"
done
# No C++ types in any signature or text (pybind11's own enum machinery aside).
leaks=$(grep -oE "ferry::[A-Za-z_:]*|PyConnection|std::[a-z_]*|</strong></a>\([^)]*handle" ferry._ferry.html | sort -u | head -5 || true)
[ -z "$leaks" ] || fail "C++ names in the reference: $leaks"
echo "python API reference: $out/index.html (${#modules[@]} modules)"
