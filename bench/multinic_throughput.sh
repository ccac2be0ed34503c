#!/usr/bin/env bash
# Striping over K links in the netns lab (needs root): 64 MiB writes over
# K = 1, 2, 4 veth links, first each limited to RATE (default 1gbit), then
# unlimited. Prints aggregate GB/s and the ratios the multi-NIC issue asks for,
# all measured in this one run.
# Every figure is the median of several runs, the configurations interleaved
# (K up in odd rounds, down in even ones) so that machine noise falls on all of
# them alike, each run started once the CPUs are idle.
# - Limited links: ROUNDS rounds, a lab of K links for each run.
# - Unlimited links: UNLIMITED_ROUNDS (default 15) rounds in one lab of four
#   links, naming 1, 2 or 4 of its NICs, so that only the links used differ.
#   Each run moves UNLIMITED_ITERS (default 100) writes, 1.5 s at 4-5 GB/s:
#   long enough that the path governor's first probes (see
#   src/transport/tcp/path_governor.h) are not most of the measurement. One
#   run on a shared 2-core host varies by 20 % and more, so besides the
#   medians the script prints the median of the paired ratios (each round's
#   K-link run against that round's one-link run) with a 90 % bootstrap
#   interval.
# Usage: bench/multinic_throughput.sh [RATE] [ITERS] [STREAMS_PER_PAIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
iters=${2:-40}
streams=${3:-1}
rounds=${4:-3}
unlimited_iters=${UNLIMITED_ITERS:-100}
unlimited_rounds=${UNLIMITED_ROUNDS:-15}
export FERRY_TRANSPORT=tcp  # both engines on this host would pick the local transport
ferry=build/bin/ferry
lab=scripts/netns-lab
export FERRY_LAB=ferrybench$$
A="$FERRY_LAB-a"; B="$FERRY_LAB-b"
[ -x "$ferry" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
target=""
trap '[ -n "$target" ] && kill $target 2>/dev/null; $lab down >/dev/null 2>&1' EXIT

# Waits (at most 5 s) until the CPUs are at least 90% idle over 200 ms: the
# kernel tears a deleted namespace down in the background, and that work
# would otherwise fall on whichever run comes next.
cpu_idle_total() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $5, t }' /proc/stat; }
settle() {
  local i idle0 total0 idle1 total1
  for i in $(seq 25); do
    read -r idle0 total0 < <(cpu_idle_total); sleep 0.2; read -r idle1 total1 < <(cpu_idle_total)
    (( (idle1 - idle0) * 10 >= (total1 - total0) * 9 )) && return 0
  done
}

# run K RATE ITERS [LINKS] -> prints GB/s of 64 MiB writes striped over K
# links; LINKS given: the lab (of that many links, unlimited) is up already.
run() {
  local k=$1 r=$2 n=$3 links=${4:-} out nics_a="" nics_b=""
  [ -z "$links" ] && $lab up "$k" $r >/dev/null
  settle
  for ((i = 0; i < k; i++)); do nics_a+="${nics_a:+,}fa$i"; done
  for ((i = 0; i < ${links:-$k}; i++)); do nics_b+="${nics_b:+,}fb$i"; done
  out=$(mktemp)
  ip netns exec "$B" "$ferry" bench --listen 0.0.0.0:0 --nics "$nics_b" >"$out" 2>&1 &
  target=$!
  for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.1; done
  local addr; addr=$(awk '/listening on/ {print $NF}' "$out")
  ip netns exec "$A" "$ferry" bench --peer "$addr" --nics "$nics_a" --streams "$streams" --op write \
    --sizes 64M --iters "$n" --warmup 3 2>/dev/null | awk '$1 == "64M" {print $2}'
  kill "$target" 2>/dev/null; wait "$target" 2>/dev/null || true; target=""
  rm -f "$out"
}

link_gbs=$(awk -v r="$rate" 'BEGIN { v = r + 0; u = substr(r, length(v "") + 1);
  m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1; printf "%.4f", v * m / 8 / 1e9 }')
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A lim unl all_lim all_unl
for r in $(seq "$rounds"); do
  # Odd rounds take K up, even rounds down, so that no K always runs first.
  order="1 2 4"; ((r % 2 == 0)) && order="4 2 1"
  for k in $order; do v=$(run "$k" "$rate" "$iters"); all_lim[$k]+=" $v"; echo "round $r K=$k at $rate: $v GB/s" >&2; done
done
$lab up 4 >/dev/null
for r in $(seq "$unlimited_rounds"); do
  order="1 2 4"; ((r % 2 == 0)) && order="4 2 1"
  for k in $order; do v=$(run "$k" "" "$unlimited_iters" 4); all_unl[$k]+=" $v"; echo "round $r K=$k unlimited: $v GB/s" >&2; done
done
for k in 1 2 4; do lim[$k]=$(median ${all_lim[$k]}); unl[$k]=$(median ${all_unl[$k]}); done

# Unlimited links, paired: each round's K-link run against that round's K=1
# run; the median of those ratios and a 90 % percentile-bootstrap interval.
declare -A paired
for k in 1 2 4; do
  paired[$k]=$(awk -v one="${all_unl[1]}" -v many="${all_unl[$k]}" 'BEGIN {
    n = split(one, a, " "); split(many, b, " ")
    for (i = 1; i <= n; i++) r[i] = b[i] / a[i]
    srand(1)
    for (t = 1; t <= 2000; t++) {
      for (i = 1; i <= n; i++) s[i] = r[int(rand() * n) + 1]
      m[t] = med(s, n)
    }
    sort(m, 2000)
    printf "%.3f [%.3f, %.3f]", med(r, n), m[100], m[1900]
  }
  function sort(x, n,   i, j, v) { for (i = 2; i <= n; i++) { v = x[i]; for (j = i - 1; j >= 1 && x[j] > v; j--) x[j + 1] = x[j]; x[j + 1] = v } }
  function med(x, n,   y, i) { for (i = 1; i <= n; i++) y[i] = x[i]; sort(y, n); return n % 2 ? y[(n + 1) / 2] : (y[n / 2] + y[n / 2 + 1]) / 2 }')
done

printf '%-4s %12s %14s %16s %14s %12s %24s\n' K "GB/s@$rate" "vs K x rate" "vs K x own K=1" "GB/s unlim." "vs own K=1" "paired ratio [90% CI]"
for k in 1 2 4; do
  awk -v k="$k" -v a="${lim[$k]}" -v one="${lim[1]}" -v link="$link_gbs" -v u="${unl[$k]}" -v u1="${unl[1]}" -v p="${paired[$k]}" \
    'BEGIN { printf "%-4d %12.3f %14.3f %16.3f %14.3f %12.3f %24s\n", k, a, a / (k * link), a / (k * one), u, u / u1, p }'
done
echo "(limited: medians of $rounds rounds, a lab of K links each; unlimited: medians of $unlimited_rounds rounds in one"
echo " lab of four links, K of them named; paired ratio: median over rounds of K links / K=1 in the same round;"
echo " targets: vs K x rate >= 0.90, vs K x own K=1 >= 0.95, unlimited vs own K=1 >= 1.00)"
