#!/usr/bin/env bash
# A user's first day across two hosts, in a netns lab: two network
# namespaces ("hosts" A and B) joined by one veth link, where A's loopback is
# not B's. A listens on 0.0.0.0 and publishes what peers need; B reaches it
# using only what A published, and random bytes are checked both ways:
#   1. a metadata blob (ferry's Python API);
#   2. a name in a Redis directory served on A's address;
#   3. `ferry bench --listen 0.0.0.0:0`: the address it prints;
#   4. NIXL agent metadata (backend FERRY with its default listen);
#   5. a Mooncake session name (ferry.mooncake, P2PHANDSHAKE).
# Before, every one of them carried 127.0.0.1, which in B is B itself.
#
# usage: two_hosts_test.sh FERRY_CLI PYTHONPATH_OF_THE_MODULE [NIXL_PYTHONPATH NIXL_PLUGIN_DIR]
# Exit 77 (skipped) without root or network namespaces.
set -uo pipefail
ferry=${1:?usage: two_hosts_test.sh path/to/ferry build/python [nixl-pythonpath nixl-plugin-dir]}
module=${2:?}
nixl_py=${3:-}
nixl_plugins=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
lab="$here/../../scripts/netns-lab"
peer="$here/two_hosts_peer.py"
python=${FERRY_TEST_PYTHON:-/usr/bin/python3}
export FERRY_LAB=ferry2h$$
# Namespaces of one host share a kernel: force what two hosts would use.
export FERRY_TRANSPORT=tcp
A="$FERRY_LAB-a"; B="$FERRY_LAB-b"
A_IP=10.77.0.1

[ "$(id -u)" -eq 0 ] || { echo "skip: needs root"; exit 77; }
command -v ip >/dev/null || { echo "skip: needs iproute2"; exit 77; }
ip netns add "$FERRY_LAB-probe" 2>/dev/null || { echo "skip: cannot create network namespaces"; exit 77; }
ip netns del "$FERRY_LAB-probe"

work=$(mktemp -d)
pids=()
fail() { echo "FAIL: $*"; exit 1; }
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  "$lab" down >/dev/null 2>&1
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
"$lab" up 1 >/dev/null || fail "lab up"

# in_ns NS CMD...: CMD in namespace NS, with the module (and NIXL) importable.
in_ns() {
  local ns=$1; shift
  timeout 60 ip netns exec "$ns" env -u FERRY_LAB PYTHONPATH="$module${nixl_py:+:$nixl_py}" PYTHONDONTWRITEBYTECODE=1 \
    ${nixl_plugins:+NIXL_PLUGIN_DIR=$nixl_plugins} "$@"
}

# run_pair NAME NS_A TARGET_ARGS... -- NS_B INITIATOR_ARGS...: both sides
# with a deadline; the case fails unless both exit 0.
run_pair() {
  local name=$1; shift
  local t=() i=()
  while [ "$1" != "--" ]; do t+=("$1"); shift; done
  shift
  i=("$@")
  mkdir -p "$work/$name"
  in_ns "${t[@]}" >"$work/$name/target.out" 2>&1 &
  local tp=$!
  in_ns "${i[@]}" >"$work/$name/initiator.out" 2>&1
  local irc=$?
  wait "$tp"
  local trc=$?
  cat "$work/$name/target.out" "$work/$name/initiator.out" | grep -E "verified|reached|wrote|done|FAIL" | sed "s/^/  /"
  [ "$irc" -eq 0 ] && [ "$trc" -eq 0 ] || fail "$name: target exited $trc, initiator $irc"
}

echo "== 1. a metadata blob"
run_pair blob "$A" "$python" "$peer" engine-target "$work/blob" -- \
  "$B" "$python" "$peer" engine-initiator "$work/blob"
grep -q "\"address\": \"$A_IP:" "$work/blob/engine.json" || fail "the blob's address is not A's: $(cat "$work/blob/engine.json")"

echo "== 2. a name in a directory"
if command -v redis-server >/dev/null; then
  port=$((20000 + $$ % 20000))
  ip netns exec "$A" redis-server --bind "$A_IP" --port "$port" --save "" --appendonly no --protected-mode no >"$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do ip netns exec "$B" bash -c "exec 3<>/dev/tcp/$A_IP/$port" 2>/dev/null && break; sleep 0.1; done
  dir="redis://$A_IP:$port/firstday"
  run_pair named "$A" env FERRY_DIRECTORY="$dir" FERRY_NAME=hostA "$python" "$peer" engine-target "$work/named" -- \
    "$B" env FERRY_DIRECTORY="$dir" "$python" "$peer" engine-initiator "$work/named" --by-name hostA
  entry=$(ip netns exec "$B" "$ferry" dir get "$dir" hostA 2>&1 || true)
  echo "$entry" | grep -q "127.0.0.1" && fail "the directory entry carries 127.0.0.1: $entry"
else
  echo "  skipped: no redis-server"
fi

echo "== 3. ferry bench --listen 0.0.0.0:0"
out="$work/bench-target.out"
ip netns exec "$A" "$ferry" bench --listen 0.0.0.0:0 --once >"$out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.1; done
addr=$(awk '/listening on/ {print $NF}' "$out")
case "$addr" in "$A_IP":*) ;; *) fail "bench --listen 0.0.0.0:0 printed '$addr': $(cat "$out")" ;; esac
res=$(timeout 60 ip netns exec "$B" "$ferry" bench --peer "$addr" --op write --sizes 4095,1M --iters 3 --warmup 1 \
      --verify 2>&1) || fail "bench --peer $addr: $res"
echo "$res" | tail -3 | sed "s/^/  /"

echo "== 4. NIXL agent metadata"
if [ -n "$nixl_py" ] && [ -n "$nixl_plugins" ]; then
  run_pair nixl "$A" "$python" "$peer" nixl-target "$work/nixl" -- \
    "$B" "$python" "$peer" nixl-initiator "$work/nixl"
else
  echo "  skipped: NIXL was not built"
fi

echo "== 5. a Mooncake session name"
run_pair mooncake "$A" "$python" "$peer" mooncake-target "$work/mooncake" "$A_IP" -- \
  "$B" "$python" "$peer" mooncake-initiator "$work/mooncake"

echo "PASS: every published address reached across the lab"
