#!/usr/bin/env bash
# 64 MiB send and write over one data stream on loopback, against iperf3 with
# one stream, measured in the same run. Prints each figure and the ratios.
# Usage: bench/tcp_throughput.sh [ROUNDS]   (default 3; medians are reported)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
rounds=${1:-3}
ferry=build/bin/ferry
[ -x "$ferry" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 missing: scripts/setup.sh" >&2; exit 1; }

iperf=(); send=(); write=()
for r in $(seq "$rounds"); do
  iperf+=("$(iperf3_gbytes)")
  send+=("$($ferry bench --local --transport tcp --op send --sizes 64M --streams 1 --iters 60 --warmup 5 2>/dev/null | tcp_table_value 64M 2)")
  write+=("$($ferry bench --local --transport tcp --op write --sizes 64M --streams 1 --iters 60 --warmup 5 2>/dev/null | tcp_table_value 64M 2)")
  echo "round $r: iperf3 ${iperf[-1]} GB/s, ferry send ${send[-1]} GB/s, ferry write ${write[-1]} GB/s" >&2
done
i=$(median "${iperf[@]}"); s=$(median "${send[@]}"); w=$(median "${write[@]}")
printf '%-34s %8s %8s\n' "what (median of $rounds rounds)" "GB/s" "ratio"
printf '%-34s %8.3f %8s\n' "iperf3, 1 stream" "$i" "1.00"
printf '%-34s %8.3f %8.2f\n' "ferry send 64M, 1 data stream" "$s" "$(awk -v a="$s" -v b="$i" 'BEGIN{print a/b}')"
printf '%-34s %8.3f %8.2f\n' "ferry write 64M, 1 data stream" "$w" "$(awk -v a="$w" -v b="$i" 'BEGIN{print a/b}')"
