#!/usr/bin/env bash
# A `ferry bench --listen` target against hostile initiators, on loopback:
#   bench_hostile_cli_test.sh FERRY_BINARY HOSTILE_INITIATOR_BINARY
# Sessions that hang up at once, send bad JSON, wrong types, empty or absurd
# sizes (1 TiB), bad iteration counts, an unknown op, bad descriptors, a wrong
# begin, never begin, or vanish mid-transfer must each be refused or dropped
# with a line on the target's stderr; the target must stay up, and an honest
# verified run against it must still pass, also while idle sessions hold
# every slot. Every wait is bounded by `timeout`.
set -uo pipefail
ferry=$1
hostile=$2
source "$(dirname "$0")/bench_cli_lib.sh"

FERRY_TRANSPORT=tcp "$ferry" bench --listen 127.0.0.1:0 >"$work/target.out" 2>"$work/target.err" &
target=$!
trap 'kill $target 2>/dev/null; wait $target 2>/dev/null; rm -rf "$work"' EXIT
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/^ferry bench target listening on //p' "$work/target.out" 2>/dev/null)
  [ -n "$addr" ] && break
  kill -0 $target 2>/dev/null || break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$work/target.err" >&2; fail "the target did not report its address"; }

alive() {  # what was just done
  kill -0 $target 2>/dev/null || { cat "$work/target.err" >&2; fail "the target died after: $1"; }
}
attacks=0
attack() {  # description, hostile initiator args...
  local what=$1
  shift
  attacks=$((attacks + 1))
  FERRY_TRANSPORT=tcp timeout 30 "$hostile" "$addr" "$@" >>"$work/hostile.out" 2>&1 ||
    { cat "$work/hostile.out" "$work/target.err" >&2; fail "$what: the target did not refuse it cleanly"; }
  alive "$what"
}

# A raw TCP client that is not ferry at all, then a ferry peer that hangs up at once.
timeout 5 bash -c "exec 3<>/dev/tcp/${addr%:*}/${addr##*:}; printf 'GET / HTTP/1.0\r\n\r\n' >&3" 2>/dev/null
alive "a non-ferry client"
attack "hang up after the handshake" close

ok='"op":"send","iters":2,"warmup":0,"bidir":false,"verify":false'
attack "bad JSON" config '{"op": "send", "sizes": [4096'
attack "deeply nested JSON" config "$(printf '[%.0s' $(seq 60000))"
attack "not an object" config '[1, 2, 3]'
attack "no sizes" config "{$ok}"
attack "empty sizes" config "{$ok,\"sizes\":[]}"
attack "a 1 TiB size" config "{$ok,\"sizes\":[1099511627776]}"
attack "a size past 64 bits" config "{$ok,\"sizes\":[1e30]}"
attack "a zero size" config "{$ok,\"sizes\":[0]}"
attack "a negative size" config "{$ok,\"sizes\":[-4096]}"
attack "sizes of the wrong type" config "{$ok,\"sizes\":\"4K\"}"
attack "a 1 TiB footprint" config "{$ok,\"sizes\":[4096],\"footprint\":1099511627776}"
attack "unknown op" config '{"op":"rm -rf","sizes":[4096],"iters":2,"warmup":0,"bidir":false,"verify":false}'
attack "zero iterations" config '{"op":"send","sizes":[4096],"iters":0,"warmup":0,"bidir":false,"verify":false}'
attack "negative iterations" config '{"op":"send","sizes":[4096],"iters":-5,"warmup":0,"bidir":false,"verify":false}'
attack "iterations past int" config '{"op":"send","sizes":[4096],"iters":4294967297,"warmup":0,"bidir":false,"verify":false}'
attack "negative warmup" config '{"op":"send","sizes":[4096],"iters":2,"warmup":-1,"bidir":false,"verify":false}'
attack "inflight 0" config "{$ok,\"sizes\":[4096],\"inflight\":0}"
attack "inflight 1000000" config "{$ok,\"sizes\":[4096],\"inflight\":1000000}"
attack "pingpong in flight" config '{"op":"pingpong","sizes":[64],"iters":2,"warmup":0,"bidir":false,"verify":false,"inflight":4}'
attack "a bad GPU" config "{$ok,\"sizes\":[4096],\"gpu\":-7}"
attack "a GPU this host lacks" config "{$ok,\"sizes\":[4096],\"gpu\":99}"
attack "a huge group" config "{$ok,\"sizes\":[4096],\"group\":2000000000}"
attack "bad descriptors" descriptors
attack "a wrong begin" begin
# A session that never begins is closed at its start limit: 5 s, plus 2 s for
# its buffers' (first) GiB.
attack "a session that never begins" stall
stalled=$(sed -n 's/^stall: closed after \([0-9]*\) ms$/\1/p' "$work/hostile.out")
[ -n "$stalled" ] && [ "$stalled" -lt 12000 ] || fail "a session that never began was closed after ${stalled:-?} ms, not 7 s"
attack "vanishing mid-transfer" vanish

grep -q "need 2.0 TiB (2199023390720 bytes) of host memory; at most" "$work/target.err" ||
  { cat "$work/target.err" >&2; fail "the 1 TiB refusal does not say the limit"; }
# The target logs each failed session once its thread is done with it. The
# peer that hangs up at once may be gone before the target accepts it: the
# engine then drops it unaccepted, and no session (nor line) comes of it.
for _ in $(seq 150); do
  fails=$(grep -c "session from .* failed" "$work/target.err")
  [ "$fails" -ge $attacks ] && break
  [ "$fails" -ge $((attacks - 1)) ] && { sleep 1; fails=$(grep -c "session from .* failed" "$work/target.err"); break; }
  sleep 0.2
done
[ "$fails" -eq $attacks ] || [ "$fails" -eq $((attacks - 1)) ] ||
  { cat "$work/target.err" >&2; fail "expected a line per failed session ($attacks, or one less), got $fails"; }

# An honest initiator is still served, bytes verified, on every op.
for op in send write read; do
  FERRY_TRANSPORT=tcp timeout 60 "$ferry" bench --peer "$addr" --op $op --sizes 1,65537,1M --iters 3 --warmup 1 \
    --verify --json "$work/$op.json" >"$work/$op.out" 2>"$work/$op.err" ||
    { cat "$work/$op.out" "$work/$op.err" "$work/target.err" >&2; fail "honest $op run after the attacks failed"; }
  grep -c '"verified": true' "$work/$op.json" | grep -qx 3 || { cat "$work/$op.json" >&2; fail "$op: not verified"; }
done
alive "the honest runs"

# An honest initiator asking for too much: refused by its own side, or (with
# a limit of its own that allows it) by the target, which says why.
FERRY_TRANSPORT=tcp timeout 30 "$ferry" bench --peer "$addr" --sizes 4K --footprint 1000G --iters 1 \
  >"$work/big.out" 2>&1 && fail "a 1000 GiB footprint was accepted"
grep -q "this side's buffers need .*at most" "$work/big.out" || { cat "$work/big.out" >&2; fail "no local limit"; }
FERRY_TRANSPORT=tcp timeout 30 "$ferry" bench --peer "$addr" --sizes 4K --footprint 1000G --iters 1 \
  --max-memory 4000G >"$work/big.out" 2>&1 && fail "a 1000 GiB footprint was accepted by the target"
grep -q "the target refused the session: .*session's buffers need .*at most" "$work/big.out" ||
  { cat "$work/big.out" >&2; fail "the initiator does not say the target's limit"; }
alive "oversized honest requests"

# Sessions that only keep their connection alive (an engine heartbeats by
# itself) take every slot: 64 sessions, and the engine's 64 connections per
# peer address. The target closes each session that has not started within
# its start limit (5 s), so an honest initiator that tries again is served
# long before the 120 s one step of a session may take.
now_ms() { echo $(($(date +%s%N) / 1000000)); }
FERRY_TRANSPORT=tcp timeout 100 "$hostile" "$addr" idle 70 90 >"$work/idle.out" 2>&1 &
idle=$!
trap 'kill $target $idle 2>/dev/null; wait $target $idle 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 300); do grep -q "^idle: " "$work/idle.out" && break; sleep 0.1; done
held=$(sed -n 's/^idle: \([0-9]*\) held$/\1/p' "$work/idle.out")
[ "${held:-0}" -ge 64 ] || { cat "$work/idle.out" >&2; fail "the idle initiator held ${held:-no} sessions, not every slot (64)"; }
start=$(now_ms)
served=0
while [ $(($(now_ms) - start)) -lt 40000 ]; do
  if FERRY_TRANSPORT=tcp timeout 30 "$ferry" bench --peer "$addr" --op write --sizes 4K,65537 --iters 2 --warmup 0 \
    --verify --json "$work/after-idle.json" >"$work/after-idle.out" 2>"$work/after-idle.err"; then
    served=1
    break
  fi
  sleep 0.2
done
waited=$(($(now_ms) - start))
[ $served = 1 ] || { cat "$work/after-idle.err" >&2; fail "no honest session within 40 s of $held idle ones taking every slot"; }
[ $waited -lt 20000 ] || fail "an honest session waited $waited ms behind idle ones (start limit 5 s)"
grep -c '"verified": true' "$work/after-idle.json" | grep -qx 2 || fail "the session after the idle ones: not verified"
grep -q "session from .* failed: .*did not start within 7 s: no .begin." "$work/target.err" ||
  { cat "$work/target.err" >&2; fail "the target does not say why it closed the session that never began"; }
grep -q "session from .* failed: .*did not start within 5 s: no configuration" "$work/target.err" ||
  { cat "$work/target.err" >&2; fail "the target does not say why it closed the idle sessions"; }
echo "an honest session was served $waited ms after $held idle sessions took every slot"
alive "idle sessions"
echo "PASS"
