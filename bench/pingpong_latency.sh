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
  port=$(free_port)
  sockperf server --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  sp+=("$(sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m 16 -t 5 --full-rtt 2>&1 |
          awk '/percentile 50.000/ {print $NF}')")
  kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null || true
  fy+=("$($ferry bench --local --op pingpong --sizes 16 --iters 20000 --warmup 500 2>/dev/null | table_value 16 3)")
  echo "round $r: sockperf p50 ${sp[-1]} us, ferry p50 ${fy[-1]} us" >&2
done
s=$(median "${sp[@]}"); f=$(median "${fy[@]}")
printf '%-40s %10s %8s\n' "16-byte round trip, p50 (median of $rounds)" "us" "ratio"
printf '%-40s %10.1f %8s\n' "sockperf ping-pong --tcp --full-rtt" "$s" "1.00"
printf '%-40s %10.1f %8.2f\n' "ferry bench --op pingpong" "$f" "$(awk -v a="$f" -v b="$s" 'BEGIN{print a/b}')"
