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
# The round trip's p50 (us) and CPU time per round trip (us: user and system
# of the bench and its target, whole run, setup included, over the 20,500
# round trips; the same for both builds, and readable from builds older than
# the bench's own CPU columns).
round_trip() {
  local table wall user sys
  table=$(mktemp)
  read -r wall user sys < <({ TIMEFORMAT='%3R %3U %3S'; time FERRY_TRANSPORT=tcp "$1" bench --local --op pingpong \
    --sizes 16 --iters 20000 --warmup 500 >"$table" 2>/dev/null; } 2>&1)
  echo "$(tcp_table_value 16 3 <"$table") $(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.1f", (u + s) * 1e6 / 20500}')"
  rm -f "$table"
}

iperf=(); rtt=(); rttc=(); bs=(); as=(); bw=(); aw=(); bp=(); ap=(); bc=(); ac=()
for r in $(seq "$rounds"); do
  iperf+=("$(iperf3_gbytes)")
  read -r p50 cpu < <(sockperf_p50_and_cpu_us); rtt+=("$p50"); rttc+=("$cpu")
  bs+=("$(bandwidth "$before" send)"); as+=("$(bandwidth "$after" send)")
  bw+=("$(bandwidth "$before" write)"); aw+=("$(bandwidth "$after" write)")
  read -r p50 cpu < <(round_trip "$before"); bp+=("$p50"); bc+=("$cpu")
  read -r p50 cpu < <(round_trip "$after"); ap+=("$p50"); ac+=("$cpu")
  echo "round $r: iperf3 ${iperf[-1]} GB/s sockperf ${rtt[-1]} us | send ${bs[-1]} -> ${as[-1]} GB/s," \
       "write ${bw[-1]} -> ${aw[-1]} GB/s, round trip ${bp[-1]} -> ${ap[-1]} us, cpu ${bc[-1]} -> ${ac[-1]} us" >&2
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
i=$(median "${iperf[@]}"); t=$(median "${rtt[@]}")
printf '%-32s %9s %9s %9s %9s %12s\n' "median of $rounds rounds" "anchor" "before" "after" "after/anc" "after/before"
row() { printf '%-32s %9.3f %9.3f %9.3f %9s %12s\n' "$1" "$2" "$3" "$4" "$(ratio "$4" "$2")" "$(ratio "$4" "$3")"; }
row "send 64M, 1 stream (GB/s)" "$i" "$(median "${bs[@]}")" "$(median "${as[@]}")"
row "write 64M, 1 stream (GB/s)" "$i" "$(median "${bw[@]}")" "$(median "${aw[@]}")"
row "16-byte round trip p50 (us)" "$t" "$(median "${bp[@]}")" "$(median "${ap[@]}")"
row "CPU per round trip (us)" "$(median "${rttc[@]}")" "$(median "${bc[@]}")" "$(median "${ac[@]}")"
echo "(anchors: iperf3 -P 1 for bandwidth, sockperf ping-pong --full-rtt for the round trip and its CPU time, both ends; for a time, lower is better)"
