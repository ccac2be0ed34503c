#!/usr/bin/env bash
# UCCL's own P2P tests and benchmarks, unchanged, against ferry.p2p.
#
# The measure of ferry.p2p is whether code written for UCCL runs on it as it
# is (docs/coming-from.md). This runs the upstream files of the seed's commit
# (../shared/third_party/uccl_p2p/seed-a1184318, found from the repository
# root) with `uccl.p2p` made ferry.p2p by tests/uccl_shim, and prints one
# line per test or benchmark: passed, failed or skipped, and why.
#
# Environment: PYTHON (default /usr/bin/python3) and PYTHONPATH, where the
# built ferry package is (default build/python). Exit status 1 if anything
# that could run failed, 0 otherwise (also when the upstream folder is absent).
#
# Benchmarks run in their CPU form (--device cpu) at small sizes; their GPU
# forms, and the tests that allocate CUDA memory, run only where torch sees a
# GPU (on a GPU host, bench/gpu/uccl.sh runs those under torchrun, over each
# transport). Two-rank programs are started here, one process per rank with the
# variables torchrun sets, because Debian's torchrun (torch 1.13) fails
# before starting any worker.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
upstream="$root/../shared/third_party/uccl_p2p/seed-a1184318"
if [ ! -d "$upstream" ]; then
  echo "uccl_conformance: skipped: no UCCL upstream files at $upstream"
  exit 0
fi

PYTHON=${PYTHON:-/usr/bin/python3}
# Absolute, since each program runs from its own folder.
module_path=
IFS=: read -r -a entries <<<"${PYTHONPATH:-$root/build/python}"
for entry in "${entries[@]}"; do
  [ -n "$entry" ] || continue
  case $entry in /*) ;; *) entry="$PWD/$entry" ;; esac
  module_path="$module_path:$entry"
done
export PYTHONPATH="$root/tests/uccl_shim$module_path"
export PYTHONDONTWRITEBYTECODE=1
# NVLink multicast stays off on the GPU hosts these run on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ITEM_TIMEOUT=${UCCL_CONFORMANCE_TIMEOUT:-180}
SIZES=256,4099,65536,1048576,10485760
ITERS=20

logs=$(mktemp -d "${TMPDIR:-/tmp}/uccl-conformance.XXXXXX")
results=()
failed=0

record() {  # name result note
  results+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")")
  [ "$2" = failed ] && failed=1
  printf '%-44s %-8s %s\n' "$1" "$2" "$3" >&2
}

if ! "$PYTHON" -c "import ferry.p2p, uccl.p2p" 2>"$logs/import.log"; then
  echo "uccl_conformance: cannot import ferry.p2p through the shim with $PYTHON (PYTHONPATH=$PYTHONPATH):" >&2
  cat "$logs/import.log" >&2
  exit 1
fi
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "uccl_conformance: skipped: UCCL's tests and benchmarks need torch, which $PYTHON lacks"
  exit 0
fi
gpu=$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
no_gpu_note="needs a GPU: torch sees none here"

# A single-process test spawns its server and client with multiprocessing and
# exits 0 even when one of them failed an assert. It runs under this wrapper,
# which fails the run when any child process exited non-zero.
run_single() {  # name file
  local name=$1 file=$2 log
  log="$logs/$(log_name "$1").log"
  (cd "$(dirname "$file")" && timeout "$ITEM_TIMEOUT" "$PYTHON" - "$file" >"$log" 2>&1 <<'EOF'
import multiprocessing.process as process
import runpy
import sys

failed_children = []
join = process.BaseProcess.join


def join_and_check(self, *args, **kwargs):
    result = join(self, *args, **kwargs)
    if self.exitcode not in (0, None):
        failed_children.append(f"{self.name} exited with {self.exitcode}")
    return result


process.BaseProcess.join = join_and_check
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
if failed_children:
    sys.exit("child processes failed: " + ", ".join(failed_children))
EOF
  )
  local rc=$?
  if [ $rc -eq 0 ]; then record "$name" passed ""; else record "$name" failed "exit $rc, see $log"; fi
}

log_name() {  # a display name as a file name
  printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run_ranks() {  # name file args...: two ranks on this host, as torchrun --nproc_per_node=2 starts them
  local name=$1 file=$2 port pids=() rc=0 rank log
  shift 2
  log="$logs/$(log_name "$name")"
  port=$(free_port)
  for rank in 0 1; do
    (cd "$(dirname "$file")" && MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=$rank \
      LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 GROUP_RANK=0 timeout "$ITEM_TIMEOUT" "$PYTHON" "$file" "$@" \
      >"$log.rank$rank.log" 2>&1) &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  if [ $rc -eq 0 ]; then record "$name" passed ""; else record "$name" failed "exit $rc, see $log.rank*.log"; fi
}

tests="$upstream/tests"
bench="$upstream/benchmarks"

# ---- tests (the seed README's "Testing" section) ----
run_single test_engine_metadata.py "$tests/test_engine_metadata.py"
run_single test_engine_write.py "$tests/test_engine_write.py"
if [ "$gpu" = 1 ]; then
  run_single test_engine_read.py "$tests/test_engine_read.py"
  run_ranks test_engine_nvlink.py "$tests/test_engine_nvlink.py"
else
  record test_engine_read.py skipped "$no_gpu_note (reads into a cuda:0 tensor)"
  record test_engine_nvlink.py skipped "$no_gpu_note (torchrun, two ranks, cuda:0)"
fi

# ---- benchmarks ----
cpu_args=(--device cpu --sizes "$SIZES" --iters "$ITERS")
gpu_args=(--device gpu --sizes "$SIZES" --iters "$ITERS")
bad_cpu="its --device cpu form is broken upstream (np.float32.itemsize is a descriptor: TypeError before any p2p call)"
record "benchmark_uccl.py --device cpu" skipped "$bad_cpu"
record "benchmark_uccl.py --device cpu --async" skipped "$bad_cpu"
record "benchmark_uccl.py --device cpu --kvblocks 4" skipped "$bad_cpu"
run_ranks "benchmark_uccl_dual.py --device cpu" "$bench/benchmark_uccl_dual.py" "${cpu_args[@]}"
if [ "$gpu" = 1 ]; then
  run_ranks "benchmark_uccl_read.py --device cpu" "$bench/benchmark_uccl_read.py" "${cpu_args[@]}"
  run_ranks "benchmark_uccl.py --device gpu" "$bench/benchmark_uccl.py" "${gpu_args[@]}"
  run_ranks "benchmark_uccl.py --device gpu --async" "$bench/benchmark_uccl.py" "${gpu_args[@]}" --async-transfer
  run_ranks "benchmark_uccl.py --device gpu --kvblocks 4" "$bench/benchmark_uccl.py" "${gpu_args[@]}" --num-kvblocks 4
  run_ranks "benchmark_uccl_dual.py --device gpu" "$bench/benchmark_uccl_dual.py" "${gpu_args[@]}"
  run_ranks "benchmark_uccl_read.py --device gpu" "$bench/benchmark_uccl_read.py" "${gpu_args[@]}"
else
  record "benchmark_uccl_read.py --device cpu" skipped "$no_gpu_note (its cpu buffers are pinned: torch pin_memory needs CUDA)"
  record "benchmark_uccl*.py --device gpu" skipped "$no_gpu_note"
fi
# The anchors UCCL measures itself against (torch.distributed; gloo on CPU): no p2p call.
run_ranks "benchmark_nccl.py --device cpu (anchor)" "$bench/benchmark_nccl.py" "${cpu_args[@]}"
record "benchmark_nccl_dual.py --device cpu" skipped "its --device cpu form is broken upstream (hands a NumPy array to dist.P2POp)"
record benchmark_nixl.py skipped "NIXL's benchmark (needs nixl and zmq), no uccl.p2p call"
record benchmark_redis.py skipped "broken upstream: imports uccl_p2p, an older module, and reads args.remote_gpu_idx, an option it never defines"

echo
echo "UCCL conformance of ferry.p2p ($upstream, logs in $logs)"
printf '%-44s %-8s %s\n' "test / benchmark" result note
printf '%s\n' "${results[@]}"
exit $failed
