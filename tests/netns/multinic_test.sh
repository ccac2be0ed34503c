#!/usr/bin/env bash
# Multi-NIC end to end, in a netns lab of 4 veth links (needs root):
#   1. one message striped over 4 links, random data verified, every link used
#      (FERRY_PATH_POLICY=all: striping itself, whatever the governor thinks);
#   1b. the default adaptive policy on links of 1 Gbit/s each: every link adds
#      bandwidth, so the governor keeps all four;
#   2. a link set down mid-transfer: the transfer completes with correct data;
#   3. every link down: a clear peer_lost error within a bounded time.
# Exit 77 (skipped) without root or network namespaces.
set -uo pipefail
ferry=${1:?usage: multinic_test.sh path/to/ferry}
here=$(cd "$(dirname "$0")" && pwd)
lab="$here/../../scripts/netns-lab"
export FERRY_LAB=ferrytest$$
# Namespaces of one host: the engines would pick the local transport.
export FERRY_TRANSPORT=tcp
A="$FERRY_LAB-a"; B="$FERRY_LAB-b"

[ "$(id -u)" -eq 0 ] || { echo "skip: needs root"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "skip: needs iproute2"; exit 77; }
ip netns add "$FERRY_LAB-probe" 2>/dev/null || { echo "skip: cannot create network namespaces"; exit 77; }
ip netns del "$FERRY_LAB-probe"

fail() { echo "FAIL: $*"; exit 1; }
target_pid=""
cleanup() { [ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null; "$lab" down >/dev/null 2>&1; }
trap cleanup EXIT

tx_bytes() { ip netns exec "$A" cat "/sys/class/net/$1/statistics/tx_bytes"; }
# mark_links, then every_link_carried MIN WHY: each of fa0..fa3 sent more than
# MIN bytes since the mark, else fail saying WHY.
mark_links() { for k in 0 1 2 3; do before[$k]=$(tx_bytes fa$k); done; }
every_link_carried() {
  local k moved
  for k in 0 1 2 3; do
    moved=$(( $(tx_bytes fa$k) - before[$k] ))
    echo "link fa$k carried $moved bytes"
    [ "$moved" -gt "$1" ] || fail "link fa$k carried only $moved bytes: $2"
  done
}

# Starts a target in B serving NICs fb0..fb3; sets $target_pid and $addr.
start_target() {
  local out; out=$(mktemp)
  ip netns exec "$B" "$ferry" bench --listen 0.0.0.0:0 --nics fb0,fb1,fb2,fb3 >"$out" 2>&1 &
  target_pid=$!
  for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.1; done
  addr=$(awk '/listening on/ {print $NF}' "$out")
  [ -n "$addr" ] || fail "target did not start: $(cat "$out")"
}

echo "== 1. striping over 4 links, verified"
"$lab" up 4 >/dev/null || fail "lab up"
start_target
declare -A before
mark_links
out=$(timeout 120 ip netns exec "$A" env FERRY_PATH_POLICY=all "$ferry" bench --peer "$addr" --nics fa0,fa1,fa2,fa3 \
      --streams 1 --op write --sizes 1,4095,3145731,64M --iters 5 --warmup 1 --verify 2>&1) || fail "bench failed: $out"
echo "$out" | tail -5
[ "$(echo "$out" | grep -cE '^[0-9]+[KMG]? +[0-9.]+ .* ok$')" -eq 4 ] || fail "not every size verified: $out"
every_link_carried $((16 << 20)) "the message was not striped"
kill "$target_pid" 2>/dev/null; wait "$target_pid" 2>/dev/null; target_pid=""

echo "== 1b. the adaptive policy keeps every rate-limited link"
"$lab" up 4 1gbit >/dev/null || fail "lab up"
start_target
mark_links
out=$(timeout 120 ip netns exec "$A" env FERRY_PATH_POLICY=adaptive "$ferry" bench --peer "$addr" \
      --nics fa0,fa1,fa2,fa3 --streams 1 --op write --sizes 64M --iters 6 --warmup 0 --verify 2>&1) ||
  fail "bench failed: $out"
echo "$out" | grep -qE "^64M .* ok$" || fail "not verified: $out"
# 384 MiB in all, about 96 MiB per link when all four carry it.
every_link_carried $((48 << 20)) "the governor dropped it"
kill "$target_pid" 2>/dev/null; wait "$target_pid" 2>/dev/null; target_pid=""

echo "== 2. a link goes down mid-transfer"
"$lab" up 4 1gbit >/dev/null || fail "lab up"
start_target
( sleep 1.5; "$lab" link 2 down ) &
downer=$!
# Every path in use (FERRY_PATH_POLICY=all): a path the governor had set
# aside carries nothing, so its link could go down unnoticed and the failover
# under test would not run.
out=$(timeout 120 ip netns exec "$A" env FERRY_PATH_TIMEOUT_MS=1000 FERRY_PATH_POLICY=all "$ferry" bench \
      --peer "$addr" --nics fa0,fa1,fa2,fa3 --streams 1 --op write --sizes 32M --iters 40 --warmup 0 --verify 2>&1)
rc=$?
wait "$downer"
echo "$out" | grep -E "lost|32M" | tail -3
[ $rc -eq 0 ] || fail "transfer did not survive the link going down (rc $rc): $out"
echo "$out" | grep -q "data path .* lost" || fail "the downed link was never noticed: $out"
# The chunks the downed path had sent unconfirmed went again on the others,
# and the engine counted them (ferry_chunks_resent_total).
echo "$out" | grep -qE "ferry bench: [1-9][0-9]* data path\(s\) lost; [1-9][0-9]* chunks \([1-9][0-9]* bytes\) resent" ||
  fail "no resent chunks counted after the failover: $out"
echo "$out" | grep -qE "^32M .* ok$" || fail "data not verified after failover: $out"
kill "$target_pid" 2>/dev/null; wait "$target_pid" 2>/dev/null; target_pid=""

echo "== 3. every link goes down"
"$lab" up 4 1gbit >/dev/null || fail "lab up"
start_target
( sleep 1.5; for k in 0 1 2 3; do "$lab" link $k down; done ) &
downer=$!
t0=$(date +%s.%N)
out=$(timeout 60 ip netns exec "$A" env FERRY_PATH_TIMEOUT_MS=1000 FERRY_PEER_TIMEOUT_MS=2000 FERRY_HEARTBEAT_MS=200 FERRY_PATH_POLICY=all \
      "$ferry" bench --peer "$addr" --nics fa0,fa1,fa2,fa3 --streams 1 --op write --sizes 32M --iters 100 --warmup 0 2>&1)
rc=$?
wait "$downer"
took=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b - 1.5 }')
echo "$out" | tail -2
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "expected a clean failure, got rc $rc"
echo "$out" | grep -q "peer_lost" || fail "the error does not say peer_lost: $out"
echo "failed ${took}s after the links went down"
awk -v t="$took" 'BEGIN { exit !(t < 8) }' || fail "took ${took}s to fail (bound 8 s)"
echo "PASS"
