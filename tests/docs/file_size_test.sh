#!/usr/bin/env bash
# No source file of the engine (src/, its .cc and .h) is over 600 lines: a
# file that grows past it has taken on a second concern and is split. The
# kernels' generated PTX (src/gpu/*_ptx.inc) is not source. Also fails on a
# planted 601-line file, so the check cannot pass whatever the tree holds.
# Usage: file_size_test.sh [SOURCE_ROOT]   (default: this checkout)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
limit=600
over() {  # dir: prints every .cc/.h under it over the limit, with its length
  find "$1" -type f \( -name '*.cc' -o -name '*.h' \) -print0 | xargs -0 wc -l |
    awk -v limit="$limit" '$2 != "total" && $1 > limit {print $2 ": " $1 " lines"}'
}
found=$(over "$root/src")
if [[ -n $found ]]; then
  echo "FAIL: over $limit lines (split by concern):" >&2
  echo "$found" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
seq 601 | sed 's/^/\/\/ /' >"$tmp/planted.cc"
[[ -n $(over "$tmp") ]] || { echo "FAIL: a planted 601-line file passed" >&2; exit 1; }
echo "file sizes: every file of src/ within $limit lines"
