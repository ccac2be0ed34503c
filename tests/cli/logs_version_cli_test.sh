#!/usr/bin/env bash
# Logs and versions on the command line (issue 59): `ferry --version` names
# the wire protocol versions and what the build holds; FERRY_LOG takes a level
# in any case; a bad FERRY_LOG is one error that names the variable, the
# value and the accepted levels (not a second one about the --local target);
# a log line carries a UTC timestamp, the pid and the engine.
# Usage: logs_version_cli_test.sh PATH/TO/ferry
set -uo pipefail
ferry=$(realpath "$1")
# shellcheck source=tests/cli/bench_cli_lib.sh
source "$(dirname "$0")/bench_cli_lib.sh"
unset FERRY_LOG

"$ferry" --version >"$work/version" 2>&1 || fail "ferry --version exited $?"
cat "$work/version"
for want in '^ferry [0-9]+\.[0-9]+\.[0-9]+$' '^wire protocol [0-9]+ \(accepts peers speaking [0-9]+\.\.[0-9]+\)$' \
  '^cuda: (yes|no)' '^nixl plugin: (yes|no)' '^directories: ' '^profile GPU backends: (yes|no)'; do
  grep -Eq -- "$want" "$work/version" || fail "ferry --version: no line like '$want'"
done

# Any case works, for the bench (and for config, below).
for level in INFO Info info; do
  FERRY_TRANSPORT=tcp FERRY_LOG=$level timeout 60 "$ferry" bench --local --sizes 4k --iters 1 --warmup 0 \
    >"$work/out" 2>"$work/err" || { cat "$work/out" "$work/err" >&2; fail "FERRY_LOG=$level ferry bench exited $?"; }
done

# The last bench's info lines (the target's and the bench's own): UTC time
# with milliseconds, the pid, the level, the subsystem, the engine.
line='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z ferry\[[0-9]+\] info \[engine\] engine [0-9a-f]{8}: listening on '
grep -Eq "$line" "$work/err" || { cat "$work/err" >&2; fail "no timestamped info line naming its engine"; }
[ "$(grep -Ec "$line" "$work/err")" -ge 2 ] || { cat "$work/err" >&2; fail "the bench and its target should both log"; }
pids=$(grep -E "$line" "$work/err" | sed -E 's/.* ferry\[([0-9]+)\].*/\1/' | sort -u | wc -l)
[ "$pids" -eq 2 ] || { cat "$work/err" >&2; fail "the two processes' lines carry $pids distinct pids"; }

FERRY_LOG=Debug "$ferry" config >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; fail "FERRY_LOG=Debug ferry config failed"; }
grep -Eq '^log_level +FERRY_LOG +warn +debug +environment' "$work/out" || { cat "$work/out" >&2; fail "ferry config does not show FERRY_LOG=debug"; }

# A bad level: exit 2, one error naming FERRY_LOG, the value and the levels.
FERRY_LOG=verbose timeout 30 "$ferry" bench --local --sizes 4k --iters 1 >"$work/out" 2>"$work/err"
rc=$?
cat "$work/err"
[ "$rc" = 2 ] || fail "FERRY_LOG=verbose ferry bench: exit $rc, expected 2"
[ "$(wc -l <"$work/err")" -eq 1 ] || fail "FERRY_LOG=verbose ferry bench: more than one line of error"
grep -q 'FERRY_LOG="verbose"' "$work/err" || fail "the error does not name the variable and the value"
grep -q 'error, warn, info, debug or trace' "$work/err" || fail "the error does not name the accepted levels"
! grep -q "local target" "$work/err" || fail "a second error about the --local target"
FERRY_LOG=verbose "$ferry" config >/dev/null 2>"$work/err"
[ $? = 2 ] && grep -q 'FERRY_LOG="verbose"' "$work/err" || fail "ferry config with FERRY_LOG=verbose"
echo "logs and versions on the command line: ok"
