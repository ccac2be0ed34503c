#!/usr/bin/env bash
# Round trip of a 16-byte message (send, echo back) on loopback: ferry against
# sockperf's TCP ping-pong, both reported as full round trips, same run.
# Usage: bench/pingpong_latency.sh [ROUNDS]   (default 3; medians are reported)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
rounds=${1:-3}
ferry=build/bin/ferry
[ -x "$ferry" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
command -v sockperf >/dev/null || { echo "sockperf missing: scripts/setup.sh" >&2; exit 1; }

sp=(); fy=()
for r in $(seq "$rounds"); do
  sp+=("$(sockperf_p50_us)")
  fy+=("$($ferry bench --local --transport tcp --op pingpong --sizes 16 --iters 20000 --warmup 500 2>/dev/null | tcp_table_value 16 3)")
  echo "round $r: sockperf p50 ${sp[-1]} us, ferry p50 ${fy[-1]} us" >&2
done
s=$(median "${sp[@]}"); f=$(median "${fy[@]}")
printf '%-40s %10s %8s\n' "16-byte round trip, p50 (median of $rounds)" "us" "ratio"
printf '%-40s %10.1f %8s\n' "sockperf ping-pong --tcp --full-rtt" "$s" "1.00"
printf '%-40s %10.1f %8.2f\n' "ferry bench --op pingpong" "$f" "$(awk -v a="$f" -v b="$s" 'BEGIN{print a/b}')"
