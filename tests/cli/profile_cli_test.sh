#!/usr/bin/env bash
# `ferry profile` on the command line without a GPU: the shuffled plan
# (--dry-run) has one line per configuration, is the same on every run, moves
# with the seed; the ferry backend and bad flags fail clearly.
# Usage: profile_cli_test.sh FERRY
set -uo pipefail
ferry=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

plan() { "$ferry" profile --dry-run "$@"; }

out=$(plan --gpus 0,1) || fail "dry run exited $?"
rows=$(grep -c '^[0-9]' <<<"$out")
[ "$rows" -eq 62 ] || fail "2 GPUs x 31 sizes should be 62 configurations, got $rows"
grep -q 'p2p_cfg[0-9]\{4\}_s[01]d[01]_sz[0-9]*_r0' <<<"$out" || fail "no event names in the plan"
[ "$(plan --gpus 0,1)" = "$out" ] || fail "the same seed gave another order"
# The run time it states: 2 x 30 s of drift windows and 930 transfers (about
# 63 s on a 2-GPU host), and more with longer drift windows.
est() { sed -n 's/^# estimated run time: about \([0-9]*\) s .*/\1/p' <<<"$1"; }
secs=$(est "$out")
[ -n "$secs" ] && [ "$secs" -ge 60 ] && [ "$secs" -le 70 ] || fail "2 GPUs, full sizes: expected an estimate of 60-70 s, got '$secs'"
grep -q "930 transfers" <<<"$out" || fail "the estimate should count 62 x 15 transfers"
longer=$(est "$(plan --gpus 0,1 --drift-seconds 100)")
[ "$longer" -ge $((secs + 130)) ] || fail "drift windows of 100 s should add 140 s: $secs -> $longer"
grep -q "plus up to 60 s warming" <<<"$(plan --gpus 0,1 --warm-to 60)" || fail "--warm-to should add its limit to the estimate"
[ "$(plan --gpus 0,1 --seed 43)" != "$out" ] || fail "another seed gave the same order"
rows=$(plan --gpus 0-3 --sizes 4K,1M | grep -c '^[0-9]')
[ "$rows" -eq 24 ] || fail "4 GPUs x 2 sizes should be 24 configurations, got $rows"

# (Not piped into grep -q: grep stops reading at the first match, and with
# pipefail the plan's SIGPIPE would fail the check.)
grep -q "backend ferry" <<<"$(plan --gpus 0,1 --backend ferry)" || fail "--backend ferry --dry-run should plan"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
msg=$("$ferry" profile --backend ferry --gpus 0,1 --worker-rank 0 --worker-world 2 --out "$tmp" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "a ferry rank without a rendezvous directory should exit 1, got $rc"
grep -Eq "no rendezvous directory|built without CUDA" <<<"$msg" || fail "a ferry rank without a rendezvous directory should say so: $msg"

"$ferry" profile --dry-run --gpus 0,0 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "a repeated GPU should exit 2, got $rc"
"$ferry" profile --dry-run --gpus 0,1 --sizes 0 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "size 0 should exit 2, got $rc"
"$ferry" profile --dry-run --gpus 0,1 --backend nope >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "an unknown backend should exit 2, got $rc"
# A host without GPUs (the driver's device files absent): a plain run says
# what is missing and what a profile needs, exit 1 (a host matter, not bad
# usage), instead of CUDA's "driver version is insufficient".
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  for args in "" "--gpus 0,1"; do
    # shellcheck disable=SC2086
    msg=$(timeout 30 "$ferry" profile $args --out "$tmp/run" 2>&1); rc=$?
    [ $rc -eq 1 ] || fail "profile $args without a GPU should exit 1, got $rc: $msg"
    grep -q "^ferry profile: no GPU to profile: " <<<"$msg" || fail "profile $args without a GPU: $msg"
    grep -q "needs two or more NVIDIA GPUs and their driver" <<<"$msg" || fail "profile $args: not what it needs: $msg"
    if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
      grep -q "driver version is insufficient" <<<"$msg" && fail "profile $args without a driver: CUDA's words: $msg"
    fi
  done
fi
echo "profile CLI: ok"
