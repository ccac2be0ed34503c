#!/usr/bin/env bash
# ferry bench --alternate-nics end to end on loopback (--local target):
#   bench_alternate_cli_test.sh FERRY_BINARY
# Two sets naming the same NIC take turns; the output must hold one row per
# round, a summary row per set with the first set's ratio at exactly 1, and
# bad lists must fail with a message naming the fault.
set -uo pipefail
ferry=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

timeout 60 "$ferry" bench --local --op write --sizes 1M --iters 2 --rounds 3 --alternate-nics lo/lo \
  >"$work/out" 2>"$work/err" || { cat "$work/out" "$work/err" >&2; fail "alternating run exited $?"; }
cat "$work/out"
rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 3 && $2 > 0 && $3 > 0' "$work/out" | wc -l)
[ "$rows" -eq 3 ] || fail "expected 3 round rows with two positive rates, got $rows"
grep -Eq '^lo +[0-9.]+ +1\.000 +\[ *1\.000, *1\.000\] +0/3$' "$work/out" || fail "no summary row for the first set"
[ "$(grep -c '^lo ' "$work/out")" -eq 2 ] || fail "expected a summary row per set"

for bad in "lo" "lo//lo" "lo/,lo"; do
  timeout 30 "$ferry" bench --local --op write --sizes 1M --alternate-nics "$bad" >"$work/bad" 2>&1 && fail "'$bad' accepted"
  grep -q -- "--alternate-nics" "$work/bad" || { cat "$work/bad" >&2; fail "'$bad': message does not name the flag"; }
done
timeout 30 "$ferry" bench --local --op write --sizes 1M,2M --alternate-nics lo/lo >"$work/bad" 2>&1 && fail "two sizes accepted"
grep -q "one size" "$work/bad" || { cat "$work/bad" >&2; fail "two sizes: unclear message"; }
echo "ok"
