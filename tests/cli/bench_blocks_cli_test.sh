#!/usr/bin/env bash
# ferry bench --blocks on loopback (--local target), host memory:
#   bench_blocks_cli_test.sh FERRY_BINARY
# A batch of blocks, scattered or adjacent, odd block sizes included, must
# land verified (the two sides agree on each operation's layout); the JSON
# must carry blocks, block_bytes, the contiguous anchor and the ratio; bad
# combinations must fail with a message naming the flag.
set -uo pipefail
ferry=$1
source "$(dirname "$0")/bench_cli_lib.sh"
check() {  # name, blocks, block_bytes, scatter
  python3 - "$work/$1.json" "$2" "$3" "$4" <<'PY' || fail "$1: results not as expected"
import json, sys
j = json.load(open(sys.argv[1]))
c = j["config"]
n, s, scatter = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
assert c["blocks"] == n and c["block_bytes"] == s and c["scatter"] == scatter, c
assert c["footprint"] == 2 * n * s, c
rows = j["results"]
assert len(rows) == 1, rows
r = rows[0]
assert r["verified"] is True and r["bytes"] == n * s and r["blocks"] == n and r["block_bytes"] == s, r
assert r["bytes_per_s"] > 0 and r["contiguous"]["bytes_per_s"] > 0 and r["ratio"] > 0, r
PY
}

run scattered --blocks 256 --block-size 16K --scatter --iters 10 --warmup 2 --verify
check scattered 256 16384 1
run odd --blocks 333 --block-size 4097 --scatter --iters 6 --warmup 1 --inflight 3 --verify
check odd 333 4097 1
run adjacent --blocks 64 --block-size 1000 --iters 6 --warmup 1 --verify
check adjacent 64 1000 0
grep -q "scattered" "$work/scattered.out" || fail "the table does not say the blocks were scattered"

expect_refused() {  # flag named in the message, args...
  local flag=$1
  shift
  timeout 30 "$ferry" bench --local "$@" >"$work/bad" 2>&1 && fail "$* accepted"
  grep -q -- "$flag" "$work/bad" || { cat "$work/bad" >&2; fail "$*: no message naming $flag"; }
}
expect_refused --block-size --blocks 16
expect_refused --op --blocks 16 --block-size 4K --op read
expect_refused --footprint --blocks 16 --block-size 4K --footprint 1M
expect_refused --block-size --blocks 1024 --block-size 2M
echo "PASS"
