"""The UCCL-style benchmark scripts (python/benchmarks) run briefly under torchrun.

Each script runs as the two ranks of `torchrun --nnodes=1 --nproc_per_node=2`
on this host with --device cpu, small sizes and few iterations; the test checks
the exit status and that both ranks printed their per-size lines in UCCL's
format (and that the receiving side verified the data). Skips without torch.

The runs start together and share one deadline: each spends ~5 s, mostly
importing torch in three processes, so on a 2-core host their sum would be
far slower than running them side by side. Every script also gets --timeout,
so a rank whose peer died gives up by itself.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from conftest import free_base_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(ROOT, "python", "benchmarks")
sys.path.insert(0, BENCHMARKS)

import bench_common  # noqa: E402

DEADLINE_S = 150  # for all runs together; a hang fails the test here
SCRIPT_TIMEOUT_S = 30  # the scripts' own --timeout for each wait
SIZES = [256, 65536, 1048576]
SHORT = ["--device", "cpu", "--sizes", ",".join(map(str, SIZES)), "--iters", "5",
         "--timeout", str(SCRIPT_TIMEOUT_S)]

# name -> (script, extra flags, launcher). "torchrun": the two ranks of one
# torchrun on this host (ranks take GPU indices 0 and 1). "two-nodes": two
# processes started as two one-rank nodes of one host would be, both
# --local-gpu-idx 0, so the second endpoint must move off the shared port.
RUNS = {
    "ferry": ("benchmark_ferry.py", [], "torchrun"),
    "ferry_async_kvblocks": ("benchmark_ferry.py", ["--async-api", "--num-kvblocks", "2"], "torchrun"),
    "ferry_dual": ("benchmark_ferry_dual.py", [], "torchrun"),
    "ferry_dual_same_gpu_index": ("benchmark_ferry_dual.py", ["--iters", "2"], "two-nodes"),
    "ferry_read": ("benchmark_ferry_read.py", ["--num-iovs", "2"], "torchrun"),
    "nccl": ("benchmark_nccl.py", [], "torchrun"),
}

NUMBER = r"\d+\.\d+"


def p2p_line(tag: str, size: int) -> str:
    """benchmark_uccl.py's line: size : Gbps | GB/s  | seconds per message."""
    return (rf"\[{tag}\]\s+{re.escape(bench_common.pretty_size(size))} :\s+{NUMBER} Gbps \|\s+{NUMBER} GB/s  \|"
            rf"\s+{NUMBER} s$")


def read_line(size: int) -> str:
    """benchmark_uccl_read.py's line: one space before the last bar."""
    return (rf"\[Client\]\s+{re.escape(bench_common.pretty_size(size))} :\s+{NUMBER} Gbps \|\s+{NUMBER} GB/s \|"
            rf"\s+{NUMBER} s$")


def nccl_line(tag: str, size: int) -> str:
    """benchmark_nccl.py's line: no latency column."""
    return rf"\[{tag}\]\s+{re.escape(bench_common.pretty_size(size))} :\s+{NUMBER} Gbps \|\s+{NUMBER} GB/s$"


EXPECTED = {
    "ferry": [p2p_line(t, s) for t in ("Client", "Server") for s in SIZES]
    + [r"\[Client\] Connected to 127\.0\.0\.1:\d+ \(GPU 1\) conn_id=\d+",
       r"\[Server\] Accept from 127\.0\.0\.1 \(GPU 0\)", r"Device: cpu \| Local GPU idx: 1 \|",
       r"\[Server\] Received data verified", r"\[Client\] Benchmark complete", r"mode: Standard \| API: Sync"],
    "ferry_async_kvblocks": [p2p_line(t, s) for t in ("Client", "Server") for s in SIZES]
    + [r"\[Server\] Received data verified", r"mode: Standard \| API: Async",
       r"Number of key-value blocks per message: 2"],
    "ferry_dual": [p2p_line(t, s) for t in ("Client", "Server") for s in SIZES]
    + [r"\[Client\] Received data verified", r"\[Server\] Received data verified",
       r"\[Server\] Connected to 127\.0\.0\.1:\d+", r"\[Client\] Accept from 127\.0\.0\.1"],
    "ferry_dual_same_gpu_index": [p2p_line(t, s) for t in ("Client", "Server") for s in SIZES]
    + [r"\[Client\] Received data verified", r"\[Server\] Received data verified",
       r"\[Server\] Connected to 127\.0\.0\.1:\d+ \(GPU 0\)", r"\[Client\] Connected to 127\.0\.0\.1:\d+ \(GPU 0\)"],
    "ferry_read": [read_line(s) for s in SIZES]
    + [r"\[Client\] Read data verified", r"\[Server\] Benchmark complete",
       r"\[Client\] Connected to 127\.0\.0\.1:\d+ id="],
    "nccl": [nccl_line(t, s) for t in ("Client", "Server") for s in SIZES]
    + [r"\[Server\] Received data verified", r"NCCL Benchmark — role: client", r"\| Iters: 5"],
}


def torchrun_command(script: str, flags: list, log_dir: str) -> list:
    # --redirects 1 --tee 1: Debian's torch 1.13 under Python 3.11 cannot parse
    # the default ("0") of these flags (its IntFlag lookup misses NONE) and
    # stops with "'NoneType' object has no attribute 'get'"; these values work
    # on every torch. --monitor_interval: the default, 5 s, delays each exit.
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", f"--master_port={free_base_port(1)}", "--redirects", "1", "--tee", "1",
            "--monitor_interval", "0.1", "--log_dir", log_dir,
            os.path.join(BENCHMARKS, script), *SHORT, *flags]


class Run:
    """The processes of one benchmark run, each in a process group of its own, output in files."""

    def __init__(self, name: str, folder) -> None:
        script, flags, launcher = RUNS[name]
        env = dict(os.environ, FERRY_P2P_BASE_PORT=str(free_base_port()), PYTHONUNBUFFERED="1")
        self.procs = []
        self.logs = []
        if launcher == "torchrun":
            self._start(torchrun_command(script, flags, str(folder / "logs")), env, folder / "output.txt")
        else:  # what torchrun sets for a rank that is alone on its node
            job = dict(env, WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(free_base_port(1)))
            for rank in (0, 1):
                self._start([sys.executable, os.path.join(BENCHMARKS, script), *SHORT, *flags],
                            dict(job, RANK=str(rank), GROUP_RANK=str(rank)), folder / f"rank{rank}.txt")

    def _start(self, command: list, env: dict, log_path) -> None:
        log = open(log_path, "w+", encoding="utf-8", errors="replace")
        self.logs.append(log)
        self.procs.append(subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def wait(self, deadline: float) -> tuple:
        """(worst exit status, the output of every process) once all exit or the deadline passes."""
        statuses = []
        note = ""
        for proc in self.procs:
            try:
                statuses.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                statuses.append(proc.wait(timeout=10))
                note = f"\n[test_benchmarks: killed after the {DEADLINE_S} s deadline]"
        output = ""
        for log in self.logs:
            log.seek(0)
            output += log.read()
        return max(statuses, key=abs), output + note

    def kill(self) -> None:
        """Kills the processes this run started, with whatever they started (their process groups)."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)

    def close(self) -> None:
        self.kill()
        for log in self.logs:
            log.close()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """name -> (exit status, output) of every run in RUNS, started together."""
    runs = {}
    try:
        for name in RUNS:
            runs[name] = Run(name, tmp_path_factory.mktemp(name))
        deadline = time.monotonic() + DEADLINE_S
        yield {name: run.wait(deadline) for name, run in runs.items()}
    finally:
        for run in runs.values():
            run.close()


@pytest.mark.parametrize("name", list(RUNS))
def test_script_runs_and_prints_its_lines(outputs, name):
    status, output = outputs[name]
    assert status == 0, f"{RUNS[name][0]} exited {status}:\n{output}"
    for pattern in EXPECTED[name]:
        assert re.search(pattern, output, re.MULTILINE), f"no line matching {pattern!r} in:\n{output}"
    # Each endpoint found a port of its own, without ferry.p2p's fallback warning.
    assert "cannot listen on port" not in output, output


def test_pretty_size_matches_uccl():
    assert [bench_common.pretty_size(n) for n in (256, 1024, 65536, 10485760, 104857600, 3 << 30)] == \
        ["256 B", "1.0 KB", "64.0 KB", "10.0 MB", "100.0 MB", "3.0 GB"]


def test_parse_sizes():
    assert bench_common.parse_sizes("256,1024,") == [256, 1024]
    for bad in ("1k", "0", "-5", ""):
        with pytest.raises(Exception):
            bench_common.parse_sizes(bad)


def test_a_changed_byte_is_reported():
    sent = bench_common.random_bytes(4096, torch.device("cpu"), seed=7)
    expected = bench_common.digest([sent])
    received = sent.clone()
    bench_common.check_received([received], expected, "same bytes")
    received[4095] ^= 1
    with pytest.raises(bench_common.BenchmarkError, match="differ from the bytes sent"):
        bench_common.check_received([received], expected, "one bit flipped")
