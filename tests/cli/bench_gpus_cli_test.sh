#!/usr/bin/env bash
# ferry bench --gpus with host memory standing in on both sides ("host" in
# either list), on loopback (--local target), without a GPU:
#   bench_gpus_cli_test.sh FERRY_BINARY
# Two sessions at once must move verified bytes and print a row per size
# with a column per session; malformed lists must fail with a message.
set -uo pipefail
ferry=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

timeout 60 "$ferry" bench --local --op send --gpus host,host --peer-gpus host,host --sizes 4097,3M --iters 3 \
  --verify >"$work/out" 2>"$work/err" || { cat "$work/out" "$work/err" >&2; fail "run exited $?"; }
cat "$work/out"
grep -Eq '^size +host->host +host->host +aggregate +verify$' "$work/out" || fail "no header with a column per session"
rows=$(awk '$NF == "ok" && $2 > 0 && $3 > 0 && $4 > 0' "$work/out" | wc -l)
[ "$rows" -eq 2 ] || fail "expected 2 verified rows with positive rates, got $rows"

# --json -: a line per size with each session's rate and latency, and --inflight passes through.
timeout 60 "$ferry" bench --local --op send --gpus host,host --peer-gpus host,host --sizes 65537,2M --iters 4 \
  --inflight 2 --verify --json - >"$work/json" 2>"$work/err" || { cat "$work/json" "$work/err" >&2; fail "--json run exited $?"; }
python3 - "$work/json" <<'PY' || fail "--json lines not as expected"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [l["bytes"] for l in lines] == [65537, 2 << 20], lines
for l in lines:
    assert l["verified"] is True and l["aggregate_bytes_per_s"] > 0, l
    for key in ("per_gpu_bytes_per_s", "per_gpu_p50_us", "per_gpu_p99_us"):
        assert len(l[key]) == 2 and all(v > 0 for v in l[key]), (key, l)
    assert all(p99 >= p50 for p50, p99 in zip(l["per_gpu_p50_us"], l["per_gpu_p99_us"])), l
PY
grep -q "2 in flight" "$work/err" || fail "the sessions' header does not say 2 in flight"

for bad in "host,x" "gpu0" "2-1"; do
  timeout 30 "$ferry" bench --local --op send --gpus "$bad" --sizes 1M >"$work/bad" 2>&1 && fail "--gpus $bad accepted"
  grep -q -- "--gpus takes a list" "$work/bad" || { cat "$work/bad" >&2; fail "--gpus $bad: no message naming the flag"; }
done
echo "PASS"
