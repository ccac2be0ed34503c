#!/usr/bin/env bash
# The soak must be able to fail: a corrupted byte, a call that overruns its
# deadline and an impossible --gpu each fail the run, with the reason in the
# table. Usage: bench/soak/selftest.sh PATH/TO/ferry_soak
set -uo pipefail
bin=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "soak selftest: $*" >&2; exit 1; }

# 0. The plans never overlap pieces one end uses at once; the pattern finds any flipped byte.
"$bin" selfcheck || fail "selfcheck"

# 1. One flipped byte in the survivor: corruptions 1, exit 1.
"$bin" run --seconds 12 --transport tcp --faults none --probe-every 1000 --max-bytes 4194304 --corrupt-one \
  --out "$out/corrupt" >"$out/corrupt.txt" 2>&1
rc=$?
cat "$out/corrupt.txt"
[ $rc = 1 ] || fail "--corrupt-one: exit $rc, expected 1"
grep -Eq '^ +corruptions +1$' "$out/corrupt.txt" || fail "--corrupt-one: no 'corruptions 1' line"
grep -q 'FAILED' "$out/corrupt.txt" || fail "--corrupt-one: the table does not say FAILED"

# 2. One survivor call sleeps past its deadline and the watchdog's margin: hangs >= 1, exit 1.
"$bin" run --seconds 15 --transport local --faults none --probe-every 1000 --max-bytes 4194304 --hang-one \
  --out "$out/hang" >"$out/hang.txt" 2>&1
rc=$?
cat "$out/hang.txt"
[ $rc = 1 ] || fail "--hang-one: exit $rc, expected 1"
grep -Eq '^ +hangs +[1-9]' "$out/hang.txt" || fail "--hang-one: no hang counted"
grep -q 'still running' "$out/hang/events.log" || fail "--hang-one: the watchdog's HANG line is missing"

# 3. --gpu where the driver or a GPU is missing: exit 2 naming the driver.
"$bin" run --seconds 5 --gpu --out "$out/gpu" >"$out/gpu.txt" 2>&1
rc=$?
cat "$out/gpu.txt"
# A GPU host may run it (and pass); elsewhere it must refuse clearly.
if [ $rc != 0 ]; then
  [ $rc = 2 ] || fail "--gpu without a GPU: exit $rc, expected 2"
  grep -q -- '--gpu' "$out/gpu.txt" || fail "--gpu without a GPU: the message does not name --gpu"
fi
echo "soak selftest: passed"
