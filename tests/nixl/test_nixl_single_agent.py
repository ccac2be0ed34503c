"""The FERRY NIXL backend within one agent (supportsLocal), over TCP and over
the local transport:

- NIXL's own single-agent program, test/python/prep_xfer_perf.py, taken from
  the NIXL sources in its offline kit and run unchanged but for the backend's
  name (UCX -> FERRY), with tests/nixl/shim making `nixl` the package NIXL's
  build installs. It names the agent itself as the remote of a prepared
  transfer.
- NIXL's Python API, one agent moving random bytes between its own
  descriptor lists (odd sizes and offsets), WRITE and READ, prepared and not,
  notifications to itself; every byte checked, every wait with a deadline.

Needs NIXL's Python package on PYTHONPATH and NIXL_PLUGIN_DIR naming the
folder with libplugin_FERRY.so (ctest sets both, and FERRY_NIXL_REQUIRED:
tests/nixl/CMakeLists.txt); elsewhere it skips without NIXL. The upstream
file comes from FERRY_NIXL_KIT (ctest names the kit scripts/setup.sh builds
from); without a kit that test skips and says so.
"""

import glob
import os
import subprocess
import sys
import tarfile
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

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(HERE, "shim")
TRANSPORTS = ["tcp", "local"]
NAME = "solo"
BYTES = (4 << 20) + 4099  # odd
TIMEOUT = 120.0


def upstream_file(member_suffix):
    """The text of one file of the NIXL sources in the kit, or None."""
    kit = os.environ.get("FERRY_NIXL_KIT", "")
    tarballs = sorted(glob.glob(os.path.join(kit, "src", "nixl-*.tar.gz"))) if kit else []
    if not tarballs:
        return None
    with tarfile.open(tarballs[-1]) as tar:
        for member in tar.getmembers():
            if member.name.endswith("/" + member_suffix):
                return tar.extractfile(member).read().decode()
    return None


@pytest.fixture(params=TRANSPORTS)
def transport(request, monkeypatch):
    assert os.environ.get("NIXL_PLUGIN_DIR"), "NIXL_PLUGIN_DIR must name the folder with libplugin_FERRY.so"
    monkeypatch.setenv("FERRY_TRANSPORT", request.param)
    return request.param


@pytest.mark.parametrize("mode", ["list", "array"])
def test_nixl_prep_xfer_perf_runs_unchanged_on_ferry(transport, mode, tmp_path):
    text = upstream_file("test/python/prep_xfer_perf.py")
    if text is None:
        pytest.skip("no NIXL kit with sources at FERRY_NIXL_KIT=" + os.environ.get("FERRY_NIXL_KIT", "(unset)"))
    # The backend's name is all that changes.
    assert text.count('backends=["UCX"]') == 1, "prep_xfer_perf.py no longer names its backend as it did"
    program = tmp_path / "prep_xfer_perf.py"
    program.write_text(text.replace('backends=["UCX"]', 'backends=["FERRY"]'))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SHIM, os.environ.get("PYTHONPATH", "")]),
               PYTHONDONTWRITEBYTECODE="1", NIXL_LOG_LEVEL="INFO")
    run = subprocess.run([sys.executable, str(program), mode], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=TIMEOUT)
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"prep_xfer_perf.py {mode} over {transport} exited {run.returncode}:\n{output}"
    # Its last step, after preparing the agent itself as the remote.
    assert "prep_xfer_dlist SELF" in output and "make_prepped_xfer" in output, output


def wait_done(agent, handle, timeout=30.0):
    """"DONE", "PROC" past the deadline, or "ERR" (NIXL's Python raises for
    some failures, which count as "ERR" too)."""
    deadline = time.monotonic() + timeout
    state = "PROC"
    while state == "PROC" and time.monotonic() < deadline:
        try:
            state = agent.check_xfer_state(handle)
        except NIXL_ERRORS:
            return "ERR"
        if state == "PROC":
            time.sleep(0.0002)
    return state


def notes_to_self(agent, count, timeout=20.0):
    """Up to `count` notifications, all from the agent itself, by the deadline."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for sender, messages in agent.get_new_notifs().items():
            assert sender == NAME, f"a notification from {sender!r}"
            got.extend(messages)
        if len(got) < count:
            time.sleep(0.0005)
    return got


def blocks(count, seed, limit=BYTES):
    """(local offset, remote offset, size) at odd offsets, 1..20000 bytes each."""
    rng = np.random.default_rng(seed)
    out, local, remote = [], 1 + int(rng.integers(60)), 3 + int(rng.integers(90))
    for _ in range(count):
        size = 1 + int(rng.integers(20000))
        out.append((local, remote, size))
        local += size + 1 + int(rng.integers(29))
        remote += size + 1 + int(rng.integers(31))
    assert max(local, remote) <= limit
    return out


@pytest.fixture
def solo(transport):
    agent = nixl_api.nixl_agent(NAME, nixl_api.nixl_agent_config(backends=["FERRY"]))
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, BYTES, dtype=np.uint8)
    dst = rng.integers(0, 256, BYTES, dtype=np.uint8)
    regs = agent.get_reg_descs([(src.ctypes.data, src.nbytes, 0, ""), (dst.ctypes.data, dst.nbytes, 0, "")], "DRAM")
    assert agent.register_memory(regs) is not None
    yield agent, src, dst
    agent.deregister_memory(regs)


def test_one_agent_writes_and_reads_its_own_memory_and_hears_itself(solo):
    agent, src, dst = solo
    moves = blocks(200, 11)
    local = [(src.ctypes.data + lo, n, 0) for lo, _, n in moves]
    remote = [(dst.ctypes.data + ro, n, 0) for _, ro, n in moves]
    local_side = agent.prep_xfer_dlist("NIXL_INIT_AGENT", local, "DRAM")
    remote_side = agent.prep_xfer_dlist(NAME, remote, "DRAM")  # the agent itself as the remote
    picked = list(range(0, len(moves), 3))[::-1]

    # WRITE, prepared once, posted twice with fresh bytes.
    handle = agent.make_prepped_xfer("WRITE", local_side, picked, remote_side, picked, b"written")
    for round_ in range(2):
        src[:] = np.random.default_rng(100 + round_).integers(0, 256, BYTES, dtype=np.uint8)
        expected = dst.copy()
        for i in picked:
            lo, ro, n = moves[i]
            expected[ro:ro + n] = src[lo:lo + n]
        assert agent.transfer(handle) in ("DONE", "PROC")
        assert wait_done(agent, handle) == "DONE"
        assert notes_to_self(agent, 1) == [b"written"]
        assert np.array_equal(dst, expected), f"round {round_}: bytes differ"
    agent.release_xfer_handle(handle)

    # READ of every block back into a cleared source, its note after the data.
    dst[:] = np.random.default_rng(5).integers(0, 256, BYTES, dtype=np.uint8)
    expected = src.copy()
    for lo, ro, n in moves:
        expected[lo:lo + n] = dst[ro:ro + n]
    handle = agent.initialize_xfer("READ", agent.get_xfer_descs(local, "DRAM"), agent.get_xfer_descs(remote, "DRAM"),
                                   NAME, b"read back")
    assert agent.transfer(handle) in ("DONE", "PROC")
    assert wait_done(agent, handle) == "DONE"
    assert notes_to_self(agent, 1) == [b"read back"]
    assert np.array_equal(src, expected), "read bytes or their neighbours differ"
    agent.release_xfer_handle(handle)
    agent.release_dlist_handle(local_side)
    agent.release_dlist_handle(remote_side)

    # A notification alone, as NIXL's users wait for one.
    agent.send_notif(NAME, b"ping self")
    deadline = time.monotonic() + 20
    while not agent.check_remote_xfer_done(NAME, b"ping self"):
        assert time.monotonic() < deadline, "the agent did not hear itself"
        time.sleep(0.0005)


def test_a_descriptor_outside_the_agents_memory_is_refused(solo):
    agent, src, dst = solo
    before = dst.copy()
    local = agent.get_xfer_descs([(src.ctypes.data, 64, 0)], "DRAM")
    past_end = agent.get_xfer_descs([(dst.ctypes.data + BYTES - 10, 64, 0)], "DRAM")
    with pytest.raises(NIXL_ERRORS):
        agent.initialize_xfer("WRITE", local, past_end, NAME)
    assert np.array_equal(dst, before)
    # The agent goes on moving its bytes.
    inside = agent.get_xfer_descs([(dst.ctypes.data + 3, 64, 0)], "DRAM")
    handle = agent.initialize_xfer("WRITE", local, inside, NAME)
    assert agent.transfer(handle) in ("DONE", "PROC")
    assert wait_done(agent, handle) == "DONE"
    before[3:67] = src[:64]
    assert np.array_equal(dst, before)
    agent.release_xfer_handle(handle)
