#!/usr/bin/env bash
# ferry bench --inflight on loopback (--local target), host memory:
#   bench_inflight_cli_test.sh FERRY_BINARY
# Several operations in flight at once (send, write both ways, read; send
# on the same-host transport too) must move verified bytes of odd sizes and
# report the setting and the transport; pingpong with more than one in
# flight and out-of-range values must fail with a message.
set -uo pipefail
ferry=$1
source "$(dirname "$0")/bench_cli_lib.sh"
check() {  # name, inflight, rows, transport
  python3 - "$work/$1.json" "$2" "$3" "$4" <<'PY' || fail "$1: results not as expected"
import json, sys
j = json.load(open(sys.argv[1]))
want_inflight, want_rows = int(sys.argv[2]), int(sys.argv[3])
assert j["config"]["inflight"] == want_inflight, j["config"]
assert j["config"]["transport"] == sys.argv[4], j["config"]
rows = j["results"]
assert len(rows) == want_rows, rows
for r in rows:
    assert r["verified"] is True and r["bytes_per_s"] > 0 and r["lat_us"]["p50"] > 0, r
PY
}

run send --op send --sizes 1,4097,3M --iters 9 --warmup 1 --inflight 4 --verify --streams 3
check send 4 3 tcp
run write --op write --bidir --sizes 65537,2M --iters 5 --warmup 1 --inflight 3 --verify
check write 3 2 tcp
run read --op read --sizes 12345,1M --iters 6 --warmup 2 --inflight 2 --verify --streams 2
check read 2 2 tcp
FERRY_TRANSPORT=local run local --op send --sizes 7,65537,3M --iters 6 --warmup 1 --inflight 3 --verify
check local 3 3 local
grep -q "in flight" "$work/send.err" || fail "the run's header does not say how many operations are in flight"

timeout 30 "$ferry" bench --local --op pingpong --sizes 16 --inflight 2 >"$work/bad" 2>&1 && fail "pingpong --inflight 2 accepted"
grep -q -- "--inflight must be 1" "$work/bad" || { cat "$work/bad" >&2; fail "pingpong: no message naming --inflight"; }
for bad in 0 65 x; do
  timeout 30 "$ferry" bench --local --op send --sizes 1M --inflight "$bad" >"$work/bad" 2>&1 && fail "--inflight $bad accepted"
  grep -q -- "--inflight" "$work/bad" || { cat "$work/bad" >&2; fail "--inflight $bad: no message naming the flag"; }
done
echo "PASS"
