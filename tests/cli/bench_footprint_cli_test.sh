#!/usr/bin/env bash
# ferry bench --footprint on loopback (--local target), host memory:
#   bench_footprint_cli_test.sh FERRY_BINARY
# Operations that take turns through a footprint larger than their size must
# still move verified bytes of odd sizes for every op (the two sides agree on
# each operation's slot), a footprint smaller than the size must work as none,
# the JSON must report it, and a bad value must fail with a message.
set -uo pipefail
ferry=$1
source "$(dirname "$0")/bench_cli_lib.sh"
check() {  # name, footprint, rows
  python3 - "$work/$1.json" "$2" "$3" <<'PY' || fail "$1: results not as expected"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["config"]["footprint"] == int(sys.argv[2]), j["config"]
rows = j["results"]
assert len(rows) == int(sys.argv[3]), rows
for r in rows:
    assert r["verified"] is True and r["bytes_per_s"] > 0, r
PY
}

run send --op send --sizes 1,4097,3M --iters 9 --warmup 2 --inflight 3 --footprint 16M --verify
check send $((16 << 20)) 3
run write --op write --bidir --sizes 65537,2M --iters 5 --warmup 1 --inflight 2 --footprint 12M --verify
check write $((12 << 20)) 2
run read --op read --sizes 12345,1M --iters 6 --warmup 2 --footprint 8M --verify
check read $((8 << 20)) 2
run pingpong --op pingpong --sizes 7,70000 --iters 5 --warmup 1 --footprint 1M --verify
check pingpong $((1 << 20)) 2
run small --op send --sizes 3M --iters 3 --warmup 1 --footprint 4K --verify
check small 4096 1
grep -q "footprint 16M" "$work/send.err" || fail "the run's header does not name the footprint"

for bad in x 12Q; do
  timeout 30 "$ferry" bench --local --op send --sizes 1M --footprint "$bad" >"$work/bad" 2>&1 && fail "--footprint $bad accepted"
  grep -q -- "--footprint" "$work/bad" || { cat "$work/bad" >&2; fail "--footprint $bad: no message naming the flag"; }
done
echo "PASS"
