#!/usr/bin/env bash
# docs/performance.md stays one page a user reads, and its links to the dated
# benchmark records lead somewhere: the page is at most 300 lines, every
# benchmarks/... file it names exists, and it names at least one. The index,
# docs/benchmarks.md, lists every record under docs/benchmarks/ and links
# none that is missing.
# Usage: performance_doc_test.sh [SOURCE_ROOT]   (default: this checkout)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
page=$root/docs/performance.md
index=$root/docs/benchmarks.md
max_lines=300
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

[ -f "$page" ] || { echo "FAIL: $page is missing" >&2; exit 1; }
[ -f "$index" ] || { echo "FAIL: $index is missing" >&2; exit 1; }

lines=$(wc -l <"$page")
[ "$lines" -le "$max_lines" ] || bad "docs/performance.md has $lines lines, more than $max_lines"

# The records a page links: Markdown links into benchmarks/ (relative to
# docs/; an #anchor is ignored), and paths written out as docs/benchmarks/....
records() {
  { grep -oE '\]\((\./)?benchmarks/[^)#[:space:]]*' "$1" | sed -E 's/^\]\((\.\/)?//'
    grep -oE 'docs/benchmarks/[0-9A-Za-z._-]+\.md' "$1" | sed 's/^docs\///'
  } | sort -u
}

mapfile -t named < <(records "$page")
[ "${#named[@]}" -gt 0 ] || bad "docs/performance.md links no record under docs/benchmarks/"
for rel in "${named[@]}"; do
  [ -e "$root/docs/$rel" ] || bad "docs/performance.md links docs/$rel, which does not exist"
done

mapfile -t indexed < <(records "$index")
for rel in "${indexed[@]}"; do
  [ -e "$root/docs/$rel" ] || bad "docs/benchmarks.md links docs/$rel, which does not exist"
done
for file in "$root"/docs/benchmarks/*.md; do
  [ -e "$file" ] || continue
  rel=benchmarks/$(basename "$file")
  printf '%s\n' "${indexed[@]}" | grep -qxF "$rel" || bad "docs/benchmarks.md does not list docs/$rel"
done

[ "$fail" -eq 0 ] && echo "ok: docs/performance.md $lines lines, ${#named[@]} records linked, ${#indexed[@]} in the index"
exit "$fail"
