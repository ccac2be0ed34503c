#!/usr/bin/env bash
# `ferry profile` on two GPUs, short runs of the ce, nccl and ferry backends: every
# file of the run directory is there, row counts match the plan, the data
# verified, and the analysis (when pandas is there) reads the result.
# Exit 77 (skipped) without two GPUs or without CUDA in this build.
# Usage: profile_gpu_test.sh FERRY [PYTHONPATH_FOR_ANALYSIS]
set -uo pipefail
ferry=$1
pypath=${2:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${n:-0}" -lt 2 ]; then echo "skipped: needs two GPUs, found ${n:-0}"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--gpus 0,1 --sizes 1,4095,1M,64M --reps 3 --warmup 1 --drift-seconds 1 --allow-busy)

"$ferry" profile --backend ce "${common[@]}" --reference-min 64M --reference-samples 2 --out "$tmp/ce" >"$tmp/ce.out" 2>"$tmp/ce.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "built without CUDA" "$tmp/ce.err"; then echo "skipped: no CUDA in this build"; exit 77; fi
cat "$tmp/ce.out" "$tmp/ce.err"
[ $rc -eq 0 ] || fail "ce run exited $rc"
for f in execution_log.csv clock_drift.csv temperatures.csv reference.csv rank_0.trace.json metadata_rank_0.yml; do
  [ -s "$tmp/ce/$f" ] || fail "ce: $f missing"
done
rows=$(($(wc -l <"$tmp/ce/execution_log.csv") - 1))
[ $rows -eq 24 ] || fail "ce: 2 pairs x 4 sizes x 3 reps = 24 rows, got $rows"
grep -q "result: ok" "$tmp/ce/metadata_rank_0.yml" || fail "ce: data did not verify"
grep -q "^device_timing: held$" "$tmp/ce/metadata_rank_0.yml" || fail "ce: device times not held (see device_timing)"
grep -q '"name":"p2p_cfg[0-9]*_s0d1_sz1048576_r2"' "$tmp/ce/rank_0.trace.json" || fail "ce: trace lacks event names"

# The files of a run of one process per GPU, both ranks', and its row count.
check_two_ranks() {
  local b=$1 f rows
  for f in execution_log.csv clock_drift.csv rank_0.trace.json rank_1.trace.json metadata_rank_0.yml metadata_rank_1.yml; do
    [ -s "$tmp/$b/$f" ] || fail "$b: $f missing"
  done
  rows=$(($(wc -l <"$tmp/$b/execution_log.csv") - 1))
  [ $rows -eq 48 ] || fail "$b: 24 operations x 2 ranks = 48 rows, got $rows"
}

"$ferry" profile --backend nccl "${common[@]}" --out "$tmp/nccl" >"$tmp/nccl.out" 2>"$tmp/nccl.err"
rc=$?
cat "$tmp/nccl.out" "$tmp/nccl.err"
if [ $rc -ne 0 ] && grep -q "NCCL not found" "$tmp/nccl.err"; then
  echo "nccl: NCCL not found here; ce checked"
else
  [ $rc -eq 0 ] || fail "nccl run exited $rc"
  check_two_ranks nccl
  grep -q "^  nccl: " "$tmp/nccl/metadata_rank_1.yml" || fail "nccl: no NCCL version recorded"
fi

"$ferry" profile --backend ferry "${common[@]}" --out "$tmp/ferry" >"$tmp/ferry.out" 2>"$tmp/ferry.err"
rc=$?
cat "$tmp/ferry.out" "$tmp/ferry.err"
[ $rc -eq 0 ] || fail "ferry run exited $rc"
check_two_ranks ferry
grep -q "result: ok" "$tmp/ferry/metadata_rank_1.yml" || fail "ferry: data did not verify"
grep -q "^  ferry: " "$tmp/ferry/metadata_rank_1.yml" || fail "ferry: no engine version recorded"
[ ! -e "$tmp/ferry/rendezvous" ] || fail "ferry: the rendezvous directory was left behind"

if [ -n "$pypath" ] && python3 -c "import pandas, matplotlib" 2>/dev/null; then
  PYTHONPATH=$pypath python3 -m ferry.analysis "$tmp/ce" >/dev/null || fail "analysis of the ce run failed"
  [ -s "$tmp/ce/analysis/bandwidth_vs_size.png" ] || fail "analysis wrote no plot"
fi
echo "profile GPU backends: ok"
