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

# refused SIZES SETS: the run must fail and leave no process behind (the
# --local target it may have started included): it runs as a session of its
# own, which must be empty afterwards.
refused() {
  setsid -w bash -c 'echo $$ >"$0/sid"; exec timeout 30 "$1" bench --local --op write --sizes "$2" --alternate-nics "$3"' \
    "$work" "$ferry" "$1" "$2" >"$work/bad" 2>&1 && fail "sizes $1, sets '$2' accepted"
  sleep 0.2
  if pgrep -s "$(cat "$work/sid")" >/dev/null; then
    pkill -s "$(cat "$work/sid")"
    fail "sizes $1, sets '$2': a process was left behind"
  fi
}
for bad in "lo" "lo//lo" "lo/,lo"; do
  refused 1M "$bad"
  grep -q -- "--alternate-nics" "$work/bad" || { cat "$work/bad" >&2; fail "'$bad': message does not name the flag"; }
done
refused 1M,2M lo/lo
grep -q "one size" "$work/bad" || { cat "$work/bad" >&2; fail "two sizes: unclear message"; }
echo "ok"
