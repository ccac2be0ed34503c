#!/usr/bin/env bash
# `ferry bench --local` starts its target as a child process; that child must
# never outlive the bench that started it, however the bench ends: a failure
# after the child started (a NIC that does not exist), its stdout closed under
# a sweep (SIGPIPE from `| head`), or the bench killed outright (SIGKILL, where
# only the kernel's parent-death signal can end the child).
# Usage: bench_orphans_cli_test.sh PATH/TO/ferry
set -uo pipefail
ferry=$(realpath "$1")
# shellcheck source=tests/cli/bench_cli_lib.sh
source "$(dirname "$0")/bench_cli_lib.sh"

# Each bench this test starts carries this mark in its environment and hands
# it to its target, so that the check below sees only this test's processes
# (other tests may run `ferry bench --listen` at the same time).
export FERRY_TEST_ORPHAN_MARK="orphans-$$-$RANDOM"

# The pids of targets (`ferry bench --listen`) carrying the mark, with their
# parents: "PID PPID".
marked_targets() {
  local pid
  for pid in $(ps -eo pid=,args= | awk '/[f]erry bench --listen/ {print $1}'); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "FERRY_TEST_ORPHAN_MARK=$FERRY_TEST_ORPHAN_MARK" &&
      echo "$pid $(ps -o ppid= -p "$pid" | tr -d ' ')"
  done
}

# Fails unless every marked target is gone within 5 s (the benches that
# started them have all exited by now).
expect_no_targets() {  # what
  local left
  for _ in $(seq 1 50); do
    left=$(marked_targets)
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  ps -o pid,ppid,args -p "$(awk '{print $1}' <<<"$left" | paste -sd,)" >&2
  kill -9 $(awk '{print $1}' <<<"$left") 2>/dev/null
  fail "$1: the target outlived its bench 5 s later (pid ppid: $left)"
}

# 1. The bench fails after its target started: exit 1, no target left.
FERRY_TRANSPORT=tcp timeout 30 "$ferry" bench --local --nics bogus0 --sizes 4K --iters 2 \
  >"$work/nics.out" 2>"$work/nics.err"
rc=$?
[ $rc = 1 ] || { cat "$work/nics.err" >&2; fail "--nics bogus0: exit $rc, expected 1"; }
grep -q "bogus0" "$work/nics.err" || { cat "$work/nics.err" >&2; fail "--nics bogus0: the error does not name the NIC"; }
expect_no_targets "--nics bogus0"

# 2. A sweep whose stdout closes after its header and first rows.
(
  cd "$work" || exit 1
  timeout 30 "$ferry" bench --local --sizes 4K --iters 2 --warmup 0 --sweep /dev/stdout \
    --sweep-chunk 64K,128K,256K --sweep-window 2,4 --sweep-streams 1 2>"$work/sweep.err" | head -2 >"$work/sweep.out"
)
[ "$(wc -l <"$work/sweep.out")" = 2 ] || { cat "$work/sweep.err" >&2; fail "sweep | head -2: no rows"; }
expect_no_targets "--sweep ... | head -2"

# 3. A sweep killed with SIGKILL while its target serves it (a sweep's target
#    serves session after session: only its parent's death can end it).
FERRY_TRANSPORT=tcp "$ferry" bench --local --sizes 16M --iters 100000 --warmup 0 --sweep "$work/kill.csv" \
  --sweep-chunk 64K --sweep-window 2 --sweep-streams 1 >/dev/null 2>"$work/kill.err" &
bench=$!
for _ in $(seq 1 100); do
  [ -n "$(marked_targets)" ] && break
  sleep 0.1
done
[ -n "$(marked_targets)" ] || { kill -9 $bench; cat "$work/kill.err" >&2; fail "SIGKILL: the target never started"; }
kill -9 $bench
wait $bench 2>/dev/null
expect_no_targets "the bench killed with SIGKILL"

echo "bench orphans CLI test: passed"
