"""The FERRY NIXL backend through NIXL's Python API, called the way vLLM's
NixlConnector calls it: nixl_agent(backends=["FERRY"]), register_memory,
get_agent_metadata / add_remote_agent, prep_xfer_dlist on both sides,
make_prepped_xfer(op, ..., notif_msg), transfer, check_xfer_state,
get_new_notifs and send_notif. The block holder runs in its own process
(nixl_python_peer.py). Random bytes, odd block sizes, every byte checked.

Needs NIXL's Python package on PYTHONPATH and NIXL_PLUGIN_DIR naming the
folder with libplugin_FERRY.so (ctest sets both, and FERRY_NIXL_REQUIRED:
tests/nixl/CMakeLists.txt); elsewhere it skips without NIXL.
"""

import base64
import json
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

if os.environ.get("FERRY_NIXL_REQUIRED"):  # ctest: a missing NIXL is a failure, not a skip
    import nixl_cu12._api as nixl_api
    import nixl_cu12._bindings as nixl_bindings
else:
    nixl_api = pytest.importorskip("nixl_cu12._api")
    nixl_bindings = pytest.importorskip("nixl_cu12._bindings")
NIXL_ERRORS = tuple(getattr(nixl_bindings, n) for n in dir(nixl_bindings) if n.startswith("nixl") and n.endswith("Error"))

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nixl_python_peer.py")
BLOCK = 16 * 1024 + 3  # an odd block size
BLOCKS = 300
PEER_BYTES = (64 << 20) + BLOCK * BLOCKS + 4096


def sha(array):
    import hashlib

    return hashlib.sha256(array.tobytes()).hexdigest()


class Peer:
    """The block holder's process, driven one JSON line at a time."""

    def __init__(self, name="prefill"):
        self.proc = subprocess.Popen([sys.executable, PEER, name, str(PEER_BYTES)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, timeout=30.0, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"the peer did not answer {cmd['op']} within {timeout} s"
        line = self.proc.stdout.readline()
        assert line, "the peer exited"
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def pair():
    assert os.environ.get("NIXL_PLUGIN_DIR"), "NIXL_PLUGIN_DIR must name the folder with libplugin_FERRY.so"
    peer = Peer()
    agent = nixl_api.nixl_agent("decode", nixl_api.nixl_agent_config(backends=["FERRY"]))
    local = np.random.default_rng(5).integers(0, 256, PEER_BYTES, dtype=np.uint8)
    agent.register_memory([(local.ctypes.data, local.nbytes, 0, "")], "DRAM", backends=["FERRY"])
    hello = peer.ask(op="hello")
    remote_name = agent.add_remote_agent(base64.b64decode(hello["md"]))
    assert remote_name == b"prefill"  # NIXL returns the name as bytes
    peer.ask(op="fill", seed=11)
    remote = np.random.default_rng(11).integers(0, 256, PEER_BYTES, dtype=np.uint8)
    try:
        yield agent, peer, local, remote, hello["base"]
    finally:
        peer.close()


def block_lists(agent, local, base):
    """vLLM's prepared lists: every block on each side, by index."""
    local_blocks = [(local.ctypes.data + 1 + i * BLOCK, BLOCK, 0) for i in range(BLOCKS)]
    remote_blocks = [(base + 7 + i * BLOCK, BLOCK, 0) for i in range(BLOCKS)]
    return (agent.prep_xfer_dlist("NIXL_INIT_AGENT", local_blocks, "DRAM", backends=["FERRY"]),
            agent.prep_xfer_dlist("prefill", remote_blocks, "DRAM", backends=["FERRY"]))


def freeze(proc, timeout=5.0):
    """SIGSTOP, then wait until the kernel shows the process stopped."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.001)
    raise AssertionError("the peer did not stop")


def wait_done(agent, handle, timeout=30.0):
    """"DONE", "PROC" past the deadline, or "ERR"; NIXL's Python raises for
    some failures (a lost peer: nixlRemoteDisconnectError), which count as
    "ERR" too."""
    deadline = time.monotonic() + timeout
    state = "PROC"
    while state == "PROC" and time.monotonic() < deadline:
        try:
            state = agent.check_xfer_state(handle)
        except NIXL_ERRORS:
            return "ERR"
        if state == "PROC":
            time.sleep(0.0005)
    return state


def notifs(peer, count, ms=20000):
    got = peer.ask(timeout=ms / 1000 + 10, op="notifs", count=count, ms=ms)["notifs"]
    return [(a, base64.b64decode(m), d) for a, m, d in got]


@pytest.mark.parametrize("count", [1, 7, 256])
def test_prepped_write_lands_before_its_notification(pair, count):
    agent, peer, local, remote, base = pair
    local_side, remote_side = block_lists(agent, local, base)
    rng = np.random.default_rng(count)
    local_ids = rng.choice(BLOCKS, count, replace=False)
    remote_ids = rng.choice(BLOCKS, count, replace=False)
    handle = agent.make_prepped_xfer("WRITE", local_side, local_ids, remote_side, remote_ids,
                                     notif_msg=b"req-%d" % count)
    assert agent.transfer(handle) in ("DONE", "PROC")
    assert wait_done(agent, handle) == "DONE"
    for li, ri in zip(local_ids, remote_ids):
        remote[7 + ri * BLOCK:7 + (ri + 1) * BLOCK] = local[1 + li * BLOCK:1 + (li + 1) * BLOCK]
    got = notifs(peer, 1)
    assert [(a, m) for a, m, _ in got] == [("decode", b"req-%d" % count)]
    assert got[0][2] == sha(remote), "the notification came before the data, or bytes differ"
    agent.release_xfer_handle(handle)


@pytest.mark.parametrize("count", [1, 7, 256])
def test_prepped_read_fills_the_blocks_and_notifies_the_holder(pair, count):
    agent, peer, local, remote, base = pair
    local_side, remote_side = block_lists(agent, local, base)
    rng = np.random.default_rng(100 + count)
    local_ids = rng.choice(BLOCKS, count, replace=False)
    remote_ids = rng.choice(BLOCKS, count, replace=False)
    expected = local.copy()
    for li, ri in zip(local_ids, remote_ids):
        expected[1 + li * BLOCK:1 + (li + 1) * BLOCK] = remote[7 + ri * BLOCK:7 + (ri + 1) * BLOCK]
    handle = agent.make_prepped_xfer("READ", local_side, local_ids, remote_side, remote_ids, notif_msg=b"done")
    assert agent.transfer(handle) in ("DONE", "PROC")
    assert wait_done(agent, handle) == "DONE"
    assert np.array_equal(local, expected)
    assert [(a, m) for a, m, _ in notifs(peer, 1)] == [("decode", b"done")]
    agent.release_xfer_handle(handle)


@pytest.mark.parametrize("size", [1, 4093, (64 << 20) + 1])
def test_unprepared_transfers_of_odd_sizes(pair, size):
    agent, peer, local, remote, base = pair
    src = agent.get_xfer_descs([(local.ctypes.data + 3, size, 0)], "DRAM")
    dst = agent.get_xfer_descs([(base + 5, size, 0)], "DRAM")
    handle = agent.initialize_xfer("WRITE", src, dst, "prefill", b"w")
    assert agent.transfer(handle) in ("DONE", "PROC")
    assert wait_done(agent, handle, timeout=60) == "DONE"
    remote[5:5 + size] = local[3:3 + size]
    got = notifs(peer, 1)
    assert got[0][1] == b"w" and got[0][2] == sha(remote)
    agent.release_xfer_handle(handle)


def test_notifications_go_both_ways(pair):
    agent, peer, _, _, _ = pair
    agent.send_notif("prefill", b"\x00binary\xff")
    assert [(a, m) for a, m, _ in notifs(peer, 1)] == [("decode", b"\x00binary\xff")]
    assert peer.ask(op="load", md=base64.b64encode(agent.get_agent_metadata()).decode())["agent"] == "decode"
    peer.ask(op="send_notif", agent="decode", msg=base64.b64encode(b"free 3 blocks").decode())
    deadline, seen = time.monotonic() + 10, {}
    while not seen and time.monotonic() < deadline:
        seen = agent.get_new_notifs()
        time.sleep(0.001)
    assert seen == {"prefill": [b"free 3 blocks"]}


def test_a_killed_peer_fails_the_transfer_within_the_peer_timeout(pair):
    agent, peer, local, _, base = pair
    src = agent.get_xfer_descs([(local.ctypes.data, 64 << 20, 0)], "DRAM")
    dst = agent.get_xfer_descs([(base, 64 << 20, 0)], "DRAM")
    handle = agent.initialize_xfer("READ", src, dst, "prefill")
    freeze(peer.proc)
    start = time.monotonic()
    state = agent.transfer(handle)
    time.sleep(0.1)
    peer.proc.kill()
    if state == "PROC":
        state = wait_done(agent, handle, timeout=15)
    assert state == "ERR"
    assert time.monotonic() - start < 8  # ferry's default peer timeout is 5 s


def test_a_block_past_the_holders_memory_is_refused(pair):
    agent, peer, local, _, base = pair
    before = peer.ask(op="digest")["digest"]
    src = agent.get_xfer_descs([(local.ctypes.data, 64, 0)], "DRAM")
    dst = agent.get_xfer_descs([(base + PEER_BYTES - 32, 64, 0)], "DRAM")
    with pytest.raises(NIXL_ERRORS):
        agent.initialize_xfer("WRITE", src, dst, "prefill", b"x")
    assert peer.ask(op="digest")["digest"] == before
