#!/usr/bin/env bash
# `ferry dir ls|get|watch` and `ferry bench --listen NAME` / `--peer NAME`
# against real redis-server and etcd on loopback (each skipped when missing;
# exit 77 when both are). Every wait has a deadline.
set -euo pipefail
ferry=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log "$work"/*.out; do echo "--- $f" >&2; cat "$f" >&2; done; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to 15 s for `ferry dir ls URL` to succeed.
wait_up() {
  for _ in $(seq 150); do "$ferry" dir ls "$1" --timeout 0.5 >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

ran=0
for kind in redis etcd; do
  port=$(free_port)
  mkdir -p "$work/$kind"
  if [ "$kind" = redis ]; then
    command -v redis-server >/dev/null || { echo "skip: redis-server is not installed"; continue; }
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/$kind" \
      >"$work/$kind-server.log" 2>&1 &
  else
    command -v etcd >/dev/null || { echo "skip: etcd is not installed"; continue; }
    peer=$(free_port)
    etcd --name t --data-dir "$work/$kind/data" --listen-client-urls "http://127.0.0.1:$port" \
      --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$peer" \
      --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "t=http://127.0.0.1:$peer" \
      --heartbeat-interval 10 --election-timeout 100 >"$work/$kind-server.log" 2>&1 &
  fi
  pids+=($!)
  url="$kind://127.0.0.1:$port/cli"
  wait_up "$url" || fail "$kind did not answer within 15 s"
  ran=1

  # A watch running while a target is published, then killed.
  timeout 90 "$ferry" dir watch "$url" --interval 50 --for 60 >"$work/$kind-watch.out" 2>"$work/$kind-watch.log" &
  watch=$!
  # Not under timeout(1): SIGKILL must reach ferry itself (cleanup kills it).
  FERRY_DIRECTORY_TTL_MS=1000 "$ferry" bench --listen decode-3 --directory "$url" \
    >"$work/$kind-target.out" 2>"$work/$kind-target.log" &
  target=$!
  pids+=($target)
  for _ in $(seq 100); do grep -q "published as" "$work/$kind-target.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "published as \"decode-3\"" "$work/$kind-target.out" || fail "$kind: the target did not say it published"

  "$ferry" dir ls "$url" >"$work/$kind-ls.out" || fail "$kind: dir ls exited $?"
  grep -q "^decode-3 " "$work/$kind-ls.out" || fail "$kind: dir ls does not list decode-3"
  "$ferry" dir ls "$url" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert [e["name"] for e in d]==["decode-3"], d' ||
    fail "$kind: dir ls --json"
  "$ferry" dir get "$url" decode-3 --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["addresses"] and d["incarnation"]>0, d' ||
    fail "$kind: dir get --json"
  set +e
  "$ferry" dir get "$url" nobody 2>"$work/$kind-get.log"
  rc=$?
  set -e
  [ "$rc" = 3 ] || fail "$kind: dir get of an unknown name exited $rc, not 3"
  grep -q "not_found" "$work/$kind-get.log" || fail "$kind: dir get of an unknown name did not say not_found"

  # An initiator by name, every byte verified.
  timeout 60 "$ferry" bench --peer decode-3 --directory "$url" --op write --sizes 1,65537,3M --iters 3 --warmup 1 \
    --verify >"$work/$kind-bench.out" 2>"$work/$kind-bench.log" || fail "$kind: bench --peer decode-3 exited $?"
  grep -q "verify ok" "$work/$kind-bench.log" "$work/$kind-bench.out" || fail "$kind: no verified run"

  # SIGKILL: no goodbye; the entry expires within its 1 s TTL.
  kill -9 "$target"
  for _ in $(seq 50); do grep -q "^vanished  decode-3" "$work/$kind-watch.out" && break; sleep 0.1; done
  kill "$watch" 2>/dev/null || true
  wait "$watch" 2>/dev/null || true
  grep -q "^appeared  decode-3" "$work/$kind-watch.out" || fail "$kind: the watch did not see decode-3 appear"
  grep -q "^vanished  decode-3" "$work/$kind-watch.out" || fail "$kind: the watch did not see decode-3 vanish within 5 s"
  echo "$kind: ok"
done
[ "$ran" = 1 ] || exit 77
