#!/usr/bin/env bash
# Two builds of ferry against each other and against the same anchors, in one
# invocation: 64 MiB send and write over one data stream (iperf3, one
# stream) and the 16-byte round trip (sockperf ping-pong), each round running
# the anchor and then both builds in turn, so they share the host's state.
# Usage: bench/compare_builds.sh BEFORE_FERRY AFTER_FERRY [ROUNDS]   (default 5; medians)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
before=$1 after=$2 rounds=${3:-5}
for b in "$before" "$after"; do [ -x "$b" ] || { echo "not a ferry binary: $b" >&2; exit 1; }; done
command -v iperf3 >/dev/null && command -v sockperf >/dev/null || { echo "iperf3 or sockperf missing: scripts/setup.sh" >&2; exit 1; }

# FERRY_TRANSPORT rather than --transport: the older build may not have the flag.
bandwidth() { FERRY_TRANSPORT=tcp "$1" bench --local --op "$2" --sizes 64M --streams 1 --iters 60 --warmup 5 2>/dev/null | tcp_table_value 64M 2; }
round_trip() { FERRY_TRANSPORT=tcp "$1" bench --local --op pingpong --sizes 16 --iters 20000 --warmup 500 2>/dev/null | tcp_table_value 16 3; }

iperf=(); rtt=(); bs=(); as=(); bw=(); aw=(); bp=(); ap=()
for r in $(seq "$rounds"); do
  iperf+=("$(iperf3_gbytes)")
  rtt+=("$(sockperf_p50_us)")
  bs+=("$(bandwidth "$before" send)"); as+=("$(bandwidth "$after" send)")
  bw+=("$(bandwidth "$before" write)"); aw+=("$(bandwidth "$after" write)")
  bp+=("$(round_trip "$before")"); ap+=("$(round_trip "$after")")
  echo "round $r: iperf3 ${iperf[-1]} GB/s sockperf ${rtt[-1]} us | send ${bs[-1]} -> ${as[-1]} GB/s," \
       "write ${bw[-1]} -> ${aw[-1]} GB/s, round trip ${bp[-1]} -> ${ap[-1]} us" >&2
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
i=$(median "${iperf[@]}"); t=$(median "${rtt[@]}")
printf '%-32s %9s %9s %9s %9s %12s\n' "median of $rounds rounds" "anchor" "before" "after" "after/anc" "after/before"
row() { printf '%-32s %9.3f %9.3f %9.3f %9s %12s\n' "$1" "$2" "$3" "$4" "$(ratio "$4" "$2")" "$(ratio "$4" "$3")"; }
row "send 64M, 1 stream (GB/s)" "$i" "$(median "${bs[@]}")" "$(median "${as[@]}")"
row "write 64M, 1 stream (GB/s)" "$i" "$(median "${bw[@]}")" "$(median "${aw[@]}")"
row "16-byte round trip p50 (us)" "$t" "$(median "${bp[@]}")" "$(median "${ap[@]}")"
echo "(anchors: iperf3 -P 1 for bandwidth, sockperf ping-pong --full-rtt for the round trip; for a time, lower is better)"
