"""What the benchmark scripts of this folder share.

Why this file exists: benchmark_ferry.py, benchmark_ferry_dual.py,
benchmark_ferry_read.py and benchmark_nccl.py take the flags of UCCL's
p2p/benchmarks scripts and print their lines, so that a user compares ferry
with UCCL (and NCCL) using commands they already know. What the four have in
common lives here once: the rendezvous over torch.distributed (gloo, used only
to exchange addresses, digests and barriers, as UCCL's do), finding the peer's
address and port, buffers of random bytes and the check of what arrived, the
waits (each with a deadline), and the figures of a result line.

The scripts import it as a sibling module, so run them from this folder's
files (torchrun python/benchmarks/benchmark_ferry.py ...), not copied alone.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import ipaddress
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

CLIENT_RANK = 0  # UCCL's "client": sends, or reads from the server's memory
SERVER_RANK = 1  # UCCL's "server": receives, or exposes its memory to reads
DEFAULT_TIMEOUT_S = 600.0

# poll_async and Transfer.test never block, so waiting for an asynchronous
# transfer means polling. For the first SPIN_S the polls follow each other with
# only a sched_yield between them, as UCCL's benchmarks poll without pause: a
# sleep there would add its own granularity to the latency of every small
# transfer, while the yield lets ferry's threads run when cores are scarce
# (without it, 256 B took 1.3 ms instead of 23 us on a 2-core host). Past
# SPIN_S the transfer is long anyway, and a 100 us pause between polls leaves
# the CPU to ferry's threads.
SPIN_S = 0.001
POLL_PAUSE_S = 0.0001


class BenchmarkError(RuntimeError):
    """A transfer failed or delivered wrong bytes; the script exits non-zero."""


# ---- command line and output --------------------------------------------------


def parse_sizes(text: str) -> List[int]:
    """argparse type of --sizes: comma-separated message sizes in bytes."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("sizes must be comma-separated integers") from None
    if not sizes or any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError("sizes must be positive byte counts")
    return sizes


def add_endpoint_flags(parser: argparse.ArgumentParser, default_sizes: str, default_iters: int) -> None:
    """The flags UCCL's ferry-side scripts share: GPU index, streams, device, sizes, iterations."""
    parser.add_argument("--local-gpu-idx", type=int, default=0,
                        help="local GPU index to bind buffers (also names the endpoint's port); "
                             "with several ranks per host, each rank adds its LOCAL_RANK")
    parser.add_argument("--num-cpus", type=int, default=4, help="data streams per connection (ferry.p2p's num_cpus)")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="gpu", help="buffer location (cpu or gpu)")
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes(default_sizes),
                        help="comma separated list of message sizes in bytes")
    parser.add_argument("--iters", type=int, default=default_iters,
                        help="iterations per message size (excluding 1 warm-up)")


def add_timeout_flag(parser: argparse.ArgumentParser) -> None:
    """--timeout: ferry's addition to UCCL's flags (UCCL's scripts can wait forever)."""
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds any one wait may take (a transfer, the rendezvous, a barrier) "
                             f"before the run fails (default {DEFAULT_TIMEOUT_S:.0f})")


def check_iters(parser: argparse.ArgumentParser, iters: int) -> None:
    if iters < 1:
        parser.error("--iters must be at least 1 (the last iteration's data is checked)")


def pretty_size(num_bytes: int) -> str:
    """256 B, 1.0 KB, 10.0 MB: the size column of UCCL's lines (powers of 1024)."""
    value = float(num_bytes)
    if value < 1024:
        return f"{value:.0f} B"
    for unit in ("KB", "MB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} GB"


def rates(total_bytes: int, elapsed_s: float) -> Tuple[float, float]:
    """(Gbps, GB/s) of `total_bytes` moved in `elapsed_s`, decimal units as UCCL prints them."""
    elapsed_s = max(elapsed_s, 1e-12)
    return total_bytes * 8 / elapsed_s / 1e9, total_bytes / elapsed_s / 1e9


def role_tag(rank: int) -> str:
    return "[Client]" if rank == CLIENT_RANK else "[Server]"


def say(*parts: Any) -> None:
    """print, flushed: under torchrun stdout is a pipe, and lines should show as they happen."""
    print(*parts, flush=True)


def run_main(main: Callable[[], None]) -> None:
    """Runs `main`; a failed transfer or a data mismatch exits 1 with one clear line."""
    try:
        main()
    except BenchmarkError as e:
        rank = int(os.environ.get("RANK", "-1"))
        print(f"{role_tag(rank)} FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        print("\n[Interrupted] Benchmark aborted by user.", flush=True)
        sys.exit(1)


# ---- rendezvous over torch.distributed -----------------------------------------


def init_distributed(backend: str, timeout_s: float) -> int:
    """Joins the two-rank job torchrun started; returns this rank (0: client, 1: server)."""
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        sys.exit(f"{', '.join(missing)} not set: start this script with torchrun "
                 "(see python/benchmarks/README.md)")
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    if dist.get_world_size() != 2:
        sys.exit(f"This benchmark only supports 2 processes (the job has {dist.get_world_size()})")
    return dist.get_rank()


def exchange(value: Any, group: Optional[Any] = None) -> Any:
    """Gives `value` to the other rank and returns the other rank's (a collective: both call it)."""
    gathered: List[Any] = [None, None]
    dist.all_gather_object(gathered, value, group=group)
    return gathered[1 - dist.get_rank()]


def finish(group: Optional[Any] = None) -> None:
    """Waits for the other rank, then leaves the job."""
    dist.barrier(group=group)
    dist.destroy_process_group()


def local_gpu_index(flag_value: int) -> int:
    """--local-gpu-idx, plus torchrun's LOCAL_RANK when it runs several ranks on this host.

    With `torchrun --nproc_per_node=2` both ranks get the same flags; this way
    they take GPUs i and i+1 (NCCL refuses two ranks on one GPU, and ferry.p2p
    names an endpoint's port after its index). One rank a node: the flag as is.
    """
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > 1:
        return flag_value + int(os.environ.get("LOCAL_RANK", "0"))
    return flag_value


def host_identity() -> str:
    """Equal on two ranks exactly when they share a host (and its loopback)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def route_source(address: str) -> Optional[str]:
    """This host's address on the route towards `address` (None if there is none).

    A UDP connect sends nothing; it only picks the route and so the source address.
    """
    try:
        family, _, _, _, target = socket.getaddrinfo(address, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            return probe.getsockname()[0]
    except OSError:
        return None


def is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip.split("%")[0]).is_loopback
    except ValueError:
        return False


def rendezvous_ip() -> str:
    """A first guess at this host's address for the peer: the route towards MASTER_ADDR."""
    guess = route_source(os.environ.get("MASTER_ADDR", "")) if os.environ.get("MASTER_ADDR") else None
    if guess:
        return guess
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


# ---- ferry --------------------------------------------------------------------


def import_ferry():
    """ferry and ferry.p2p, or an exit that says how to make them importable."""
    try:
        import ferry
        from ferry import p2p
    except ImportError as e:
        sys.exit(f"cannot import ferry ({e}): install the ferry package, or from the source tree "
                 "run with PYTHONPATH=build/python")
    return ferry, p2p


@dataclass
class PeerEndpoint:
    ip: str  # the address this rank dials: 127.0.0.1 when both ranks share a host
    port: int  # the port the peer's endpoint really listens on
    gpu_idx: int


def open_endpoint(p2p, rank: int, local_gpu_idx: int, num_cpus: int):
    """Creates this rank's ferry.p2p.Endpoint; returns (endpoint, PeerEndpoint).

    Ports: ferry.p2p's endpoint of GPU i listens on FERRY_P2P_BASE_PORT + i
    (19800 + i). When both ranks share a host and a GPU index (two torchrun
    commands on one host, both --local-gpu-idx 0), both would want that port:
    the server then listens on a port the kernel picks. Either way the real
    port goes to the peer through torch.distributed, and connect() dials it
    (remote_port=), as UCCL's scripts send their endpoint metadata.

    Addresses: 127.0.0.1 on one host. Otherwise each rank offers its address
    on the route towards MASTER_ADDR; where that is a loopback address
    (MASTER_ADDR naming this very host, which Debian maps to 127.0.1.1), the
    rank offers its address on the route towards the peer's instead.
    """
    me = {"host": host_identity(), "ip": rendezvous_ip(), "gpu": local_gpu_idx}
    peer = exchange(me)
    same_host = peer["host"] == me["host"]
    port = 0 if same_host and peer["gpu"] == local_gpu_idx and rank == SERVER_RANK else None
    endpoint = p2p.Endpoint(local_gpu_idx, num_cpus, port=port)
    my_ip = "127.0.0.1" if same_host else me["ip"]
    if not same_host and is_loopback(my_ip) and not is_loopback(peer["ip"]):
        my_ip = route_source(peer["ip"]) or my_ip
    peer_final = exchange({"ip": my_ip, "port": endpoint.port})
    return endpoint, PeerEndpoint(peer_final["ip"], int(peer_final["port"]), int(peer["gpu"]))


def connect(endpoint, peer: PeerEndpoint, timeout_s: float) -> int:
    ok, conn_id = endpoint.connect(peer.ip, peer.gpu_idx, remote_port=peer.port, timeout=timeout_s)
    if not ok:
        raise BenchmarkError(f"connect to {peer.ip}:{peer.port} failed: {endpoint.last_error}")
    return conn_id


def accept(endpoint, timeout_s: float) -> Tuple[str, int, int]:
    """(remote ip, remote GPU index, conn_id) of the next peer that connects."""
    ok, remote_ip, remote_gpu, conn_id = endpoint.accept(timeout=timeout_s)
    if not ok:
        raise BenchmarkError(f"accept failed: {endpoint.last_error}")
    return remote_ip, remote_gpu, conn_id


def poll_until_done(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Calls done() until it returns True (it raises on failure); see SPIN_S for why it polls."""
    start = time.perf_counter()
    while not done():
        waited = time.perf_counter() - start
        if waited > timeout_s:
            raise BenchmarkError(f"{what}: not done after {timeout_s:.0f} s")
        if waited > SPIN_S:
            time.sleep(POLL_PAUSE_S)
        else:
            os.sched_yield()


def transfer_done(transfer, expect_bytes: Optional[int], what: str) -> Callable[[], bool]:
    """done() of a ferry.Transfer for poll_until_done: True once it succeeded, raises if it failed."""
    def done() -> bool:
        if not transfer.test():
            return False
        status = transfer.status()
        if not status.ok():
            raise BenchmarkError(f"{what} failed: {status.to_string()}")
        if expect_bytes is not None and transfer.bytes != expect_bytes:
            raise BenchmarkError(f"{what}: {transfer.bytes} bytes arrived, {expect_bytes} expected")
        return True
    return done


class Channel:
    """One connection of a ferry.p2p.Endpoint, driven with UCCL's calls.

    send/recv move one message made of one or more registered blocks, with the
    blocking calls (send, sendv) or, with async_api, the asynchronous ones and
    a poll until done. ferry.p2p has no sendv_async/recvv_async, so several
    blocks asynchronously use the ferry.Connection underneath.
    """

    def __init__(self, endpoint, conn_id: int, async_api: bool, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.conn_id = conn_id
        self.async_api = async_api
        self.timeout_s = timeout_s

    def _failed(self, what: str) -> BenchmarkError:
        return BenchmarkError(f"{what} failed: {self.endpoint.last_error}")

    def _facade_done(self, transfer_id: int, what: str) -> Callable[[], bool]:
        def done() -> bool:
            ok, finished = self.endpoint.poll_async(transfer_id)
            if not ok:
                raise self._failed(what)
            return finished
        return done

    def post_send(self, mr_ids: Sequence[int], ptrs: Sequence[int], block_bytes: int) -> Callable[[], bool]:
        if len(mr_ids) == 1:
            ok, transfer_id = self.endpoint.send_async(self.conn_id, mr_ids[0], ptrs[0], block_bytes)
            if not ok:
                raise self._failed("send_async")
            return self._facade_done(transfer_id, "send_async")
        transfer = self.endpoint.connection(self.conn_id).sendv_async([(p, block_bytes) for p in ptrs])
        return transfer_done(transfer, None, "sendv_async")

    def post_recv(self, mr_ids: Sequence[int], ptrs: Sequence[int], block_bytes: int) -> Callable[[], bool]:
        if len(mr_ids) == 1:
            ok, transfer_id = self.endpoint.recv_async(self.conn_id, mr_ids[0], ptrs[0], block_bytes)
            if not ok:
                raise self._failed("recv_async")
            return self._facade_done(transfer_id, "recv_async")
        transfer = self.endpoint.connection(self.conn_id).recvv_async([(p, block_bytes) for p in ptrs])
        return transfer_done(transfer, block_bytes * len(ptrs), "recvv_async")

    def wait(self, done: Callable[[], bool], what: str) -> None:
        poll_until_done(done, self.timeout_s, what)

    def send(self, mr_ids: Sequence[int], ptrs: Sequence[int], block_bytes: int) -> None:
        if self.async_api:
            self.wait(self.post_send(mr_ids, ptrs, block_bytes), "send")
        elif len(mr_ids) == 1:
            if not self.endpoint.send(self.conn_id, mr_ids[0], ptrs[0], block_bytes, timeout=self.timeout_s):
                raise self._failed("send")
        elif not self.endpoint.sendv(self.conn_id, list(mr_ids), list(ptrs), [block_bytes] * len(ptrs),
                                     len(ptrs), timeout=self.timeout_s):
            raise self._failed("sendv")

    def recv(self, mr_ids: Sequence[int], ptrs: Sequence[int], block_bytes: int) -> None:
        if self.async_api:
            self.wait(self.post_recv(mr_ids, ptrs, block_bytes), "recv")
        elif len(mr_ids) == 1:
            if not self.endpoint.recv(self.conn_id, mr_ids[0], ptrs[0], block_bytes, timeout=self.timeout_s):
                raise self._failed("recv")
        elif not self.endpoint.recvv(self.conn_id, list(mr_ids), list(ptrs), [block_bytes] * len(ptrs),
                                     len(ptrs), timeout=self.timeout_s):
            raise self._failed("recvv")


class Registered:
    """Buffers registered with a ferry.p2p.Endpoint, deregistered together."""

    def __init__(self, endpoint, buffers: Sequence[torch.Tensor]) -> None:
        self.endpoint = endpoint
        self.buffers = list(buffers)
        self.mr_ids: List[int] = []
        for buf in self.buffers:
            ok, mr_id = endpoint.reg(buf.data_ptr(), buf.numel())
            if not ok:
                self.release()
                raise BenchmarkError(f"reg of {buf.numel()} bytes failed: {endpoint.last_error}")
            self.mr_ids.append(mr_id)

    def ptrs(self, offset: int = 0) -> List[int]:
        return [buf.data_ptr() + offset for buf in self.buffers]

    def release(self) -> None:
        for mr_id in self.mr_ids:
            self.endpoint.dereg(mr_id)
        self.mr_ids = []


# ---- devices, buffers and the data check ----------------------------------------


def select_device(device: str, local_gpu_idx: int) -> torch.device:
    """torch's device for --device/--local-gpu-idx (the current CUDA device too)."""
    if device != "gpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("--device gpu: torch sees no CUDA device here (use --device cpu)")
    if not 0 <= local_gpu_idx < torch.cuda.device_count():
        sys.exit(f"--local-gpu-idx {local_gpu_idx}: this host has {torch.cuda.device_count()} GPUs")
    torch.cuda.set_device(local_gpu_idx)
    return torch.device("cuda", local_gpu_idx)


def zeros(num_bytes: int, device: torch.device, pinned: bool = False) -> torch.Tensor:
    """A contiguous byte buffer (uint8, so any size works, not only multiples of 4)."""
    return torch.zeros(num_bytes, dtype=torch.uint8, device=device, pin_memory=pinned and device.type == "cpu")


def random_bytes(num_bytes: int, device: torch.device, seed: int, pinned: bool = False) -> torch.Tensor:
    """A byte buffer of random bytes fixed by `seed`, ready for another engine to read."""
    generator = torch.Generator(device=device).manual_seed(seed)
    buf = torch.randint(0, 256, (num_bytes,), dtype=torch.uint8, device=device, generator=generator)
    if pinned:
        buf = zeros(num_bytes, device, pinned=True).copy_(buf)
    synchronize(device)
    return buf


def synchronize(device: torch.device) -> None:
    """Waits for the GPU's queued work (a no-op for host buffers)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def digest(buffers: Sequence[torch.Tensor]) -> str:
    """blake2b of the buffers' bytes, concatenated; the same whatever the torch version or device."""
    h = hashlib.blake2b(digest_size=16)
    for buf in buffers:
        h.update(buf.detach().cpu().contiguous().numpy())
    return h.hexdigest()


def check_received(buffers: Sequence[torch.Tensor], expected: str, what: str) -> None:
    """Raises BenchmarkError unless the buffers hold the bytes whose digest the sender reported."""
    got = digest(buffers)
    if got != expected:
        raise BenchmarkError(f"{what}: the received bytes differ from the bytes sent "
                             f"(blake2b {got}, the sender's {expected})")


def seed_for(rank: int, size: int, block_index: int = 0) -> int:
    """Seed of the random bytes of block `block_index` that `rank` sends at message size `size`."""
    return ((size * 1024 + block_index) * 2 + rank) % (1 << 63)


def p2p_result_line(tag: str, size: int, total_bytes: int, elapsed_s: float, iters: int) -> str:
    """The per-size line of benchmark_uccl.py and benchmark_uccl_dual.py."""
    gbps, gb_per_s = rates(total_bytes, elapsed_s)
    return (f"{tag} {pretty_size(size):>8} : {gbps:6.2f} Gbps | {gb_per_s:6.2f} GB/s  | "
            f"{elapsed_s / iters:6.6f} s")
