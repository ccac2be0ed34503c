#!/usr/bin/env bash
# Round trip of a 16-byte message (send, echo back) on loopback: ferry against
# sockperf's TCP ping-pong, both reported as full round trips, same run, with
# the CPU time both ends spend per round trip.
# Usage: bench/pingpong_latency.sh [ROUNDS]   (default 3; medians are reported)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
rounds=${1:-3}
ferry=build/bin/ferry
[ -x "$ferry" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
command -v sockperf >/dev/null || { echo "sockperf missing: scripts/setup.sh" >&2; exit 1; }

sp=(); fy=(); spc=(); fyc=()
for r in $(seq "$rounds"); do
  read -r p50 cpu < <(sockperf_p50_and_cpu_us)
  sp+=("$p50"); spc+=("$cpu")
  table=$($ferry bench --local --transport tcp --op pingpong --sizes 16 --iters 20000 --warmup 500 2>/dev/null)
  fy+=("$(tcp_table_value 16 3 <<<"$table")")
  # CPU per round trip: the initiator's and the target's columns together.
  fyc+=("$(awk '$1 == "16" { print $5 + $6 }' <<<"$table")")
  echo "round $r: sockperf p50 ${sp[-1]} us cpu ${spc[-1]} us, ferry p50 ${fy[-1]} us cpu ${fyc[-1]} us" >&2
done
s=$(median "${sp[@]}"); f=$(median "${fy[@]}"); sc=$(median "${spc[@]}"); fc=$(median "${fyc[@]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
printf '%-40s %10s %8s %14s %8s\n' "16-byte round trip (median of $rounds)" "p50_us" "ratio" "cpu_us/trip" "ratio"
printf '%-40s %10.1f %8s %14.1f %8s\n' "sockperf ping-pong --tcp --full-rtt" "$s" "1.00" "$sc" "1.00"
printf '%-40s %10.1f %8s %14.1f %8s\n' "ferry bench --op pingpong" "$f" "$(ratio "$f" "$s")" "$fc" "$(ratio "$fc" "$sc")"
echo "(cpu_us/trip: user and system time of both processes, client and server, per round trip)"
