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

# Whether FILE is UTF-8 without control characters (C0 but newline, DEL, C1):
# what a terminal shows as text, never acts on.
only_printable() {
  python3 -c '
import sys
data = open(sys.argv[1], "rb").read()
try:
    text = data.decode("utf-8")
except UnicodeDecodeError as e:
    sys.exit("not UTF-8: %s" % e)
bad = [hex(ord(c)) for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
if bad:
    sys.exit("control characters: %s" % " ".join(bad[:10]))
' "$1"
}

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
  # Without a URL, the one FERRY_DIRECTORY names (as the engines take it).
  FERRY_DIRECTORY="$url" "$ferry" dir ls >"$work/$kind-ls-env.out" || fail "$kind: dir ls with FERRY_DIRECTORY exited $?"
  grep -q "^decode-3 " "$work/$kind-ls-env.out" || fail "$kind: dir ls with FERRY_DIRECTORY does not list decode-3"
  FERRY_DIRECTORY="$url" "$ferry" dir get decode-3 >/dev/null || fail "$kind: dir get NAME with FERRY_DIRECTORY"
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

  # An entry written straight into the server holding terminal escapes in the
  # fields the JSON parser takes (a host id, an address's host): the table,
  # `get` and the watch must show them escaped, never raw.
  evil='{"ferry":1,"name":"evil","engine":"00000000000000ee","incarnation":1,'
  evil+='"host":"\u001b]0;owned\u0007\u001b[2Jh\u007f","addresses":["\u001b[31mred\u009b1m:7000"],'
  evil+='"pid":1,"started_unix_ms":1}'
  if [ "$kind" = redis ]; then
    redis-cli -p "$port" SET cli/engines/evil "$evil" >/dev/null || fail "redis: cannot write the hostile entry"
  else
    etcdctl --endpoints "http://127.0.0.1:$port" put cli/engines/evil "$evil" >/dev/null ||
      fail "etcd: cannot write the hostile entry"
  fi
  "$ferry" dir ls "$url" >"$work/$kind-evil-ls.out" || fail "$kind: dir ls with a hostile entry exited $?"
  "$ferry" dir get "$url" evil >"$work/$kind-evil-get.out" || fail "$kind: dir get evil exited $?"
  for f in "$work/$kind-evil-ls.out" "$work/$kind-evil-get.out"; do
    only_printable "$f" || fail "$kind: $(basename "$f") carries raw control bytes"
  done
  grep -qF '\x1b[31mred' "$work/$kind-evil-ls.out" || fail "$kind: dir ls does not show the escape as \\x1b"
  grep -qF '\x1b]0;owned\x07\x1b[2Jh\x7f' "$work/$kind-evil-ls.out" || fail "$kind: dir ls does not show the host escaped"
  grep -qF '\x1b[31mred\xc2\x9b1m:7000' "$work/$kind-evil-get.out" || fail "$kind: dir get does not show the address escaped"

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
  grep -q "^appeared  evil " "$work/$kind-watch.out" || fail "$kind: the watch did not see the hostile entry"
  only_printable "$work/$kind-watch.out" || fail "$kind: dir watch printed raw control bytes"
  echo "$kind: ok"
done
[ "$ran" = 1 ] || exit 77
