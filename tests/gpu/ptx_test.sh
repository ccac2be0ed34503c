#!/usr/bin/env bash
# Every kernel's committed PTX is what its source makes: for each
# src/gpu/<name>.cu, scripts/make_ptx.sh regenerates <name>_ptx.inc into a
# scratch folder and the test fails when it differs from the committed one
# (or one of the pair is missing). The first line, which names the nvcc that
# made the file, is left out of the comparison; a failure prints both.
# Then a kernel is planted in a copy of one .cu, and the check must see it,
# so the test cannot be one that passes whatever the sources say.
# Needs nvcc (PATH, or /usr/local/cuda/bin): exits 77 (skipped) without it.
# A different nvcc release may write different PTX from the same source: the
# .inc files are made with the release their first line names.
# Usage: ptx_test.sh [SOURCE_ROOT]   (default: this checkout)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
gpu=$root/src/gpu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rc=0
"$root/scripts/make_ptx.sh" "$tmp/out" >"$tmp/log" 2>&1 || rc=$?
if [[ $rc == 77 ]]; then
  cat "$tmp/log"
  exit 77
fi
[[ $rc == 0 ]] || { echo "FAIL: scripts/make_ptx.sh failed" >&2; cat "$tmp/log" >&2; exit 1; }

# Whether $1 (committed) and $2 (regenerated) hold the same PTX; prints why not.
same() {
  cmp -s <(tail -n +2 "$1") <(tail -n +2 "$2") && return 0
  echo "$1 differs from what its .cu makes now:" >&2
  echo "  committed:   $(head -n 1 "$1")" >&2
  echo "  regenerated: $(head -n 1 "$2")" >&2
  diff <(tail -n +2 "$1") <(tail -n +2 "$2") | head -n 20 >&2 || true
  return 1
}

bad=0
shopt -s nullglob
for cu in "$gpu"/*.cu; do
  inc=$gpu/$(basename "$cu" .cu)_ptx.inc
  if [[ ! -f $inc ]]; then
    echo "FAIL: $cu has no committed $(basename "$inc")" >&2
    bad=1
  elif ! same "$inc" "$tmp/out/$(basename "$inc")"; then
    bad=1
  fi
done
for inc in "$gpu"/*_ptx.inc; do
  [[ -f ${inc%_ptx.inc}.cu ]] || { echo "FAIL: $inc has no .cu it is made from" >&2; bad=1; }
done
if [[ $bad != 0 ]]; then
  echo "FAIL: run scripts/make_ptx.sh and commit the .inc files it writes" >&2
  exit 1
fi

# The check sees a change: a copy of the first .cu with one more kernel.
cus=("$gpu"/*.cu)
mkdir -p "$tmp/plant/scripts" "$tmp/plant/src/gpu"
cp "$root/scripts/make_ptx.sh" "$tmp/plant/scripts/"
cp "${cus[0]}" "$tmp/plant/src/gpu/"
echo 'extern "C" __global__ void ferry_ptx_test_planted(int* p) { *p = 1; }' >>"$tmp/plant/src/gpu/$(basename "${cus[0]}")"
"$tmp/plant/scripts/make_ptx.sh" "$tmp/plant/out" >/dev/null
inc=$(basename "${cus[0]}" .cu)_ptx.inc
if same "$gpu/$inc" "$tmp/plant/out/$inc" 2>/dev/null; then
  echo "FAIL: a kernel planted in a copy of $(basename "${cus[0]}") went unseen" >&2
  exit 1
fi
echo "ptx: each of ${#cus[@]} .inc in src/gpu is what its .cu makes, and a planted kernel is caught"
