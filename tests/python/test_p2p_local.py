"""ferry.p2p on one host: connect_local / accept_local (found by GPU through
the rendezvous folder), the *_ipc calls on such a connection, and GPU memory
advertised the way UCCL's test_engine_nvlink.py does (skipped without CUDA).
The peer is a child process (test_p2p.RemoteEndpoint), so ferry's local
transport carries the bytes; random bytes at odd sizes, checked where they land.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

import numpy as np
import pytest
import torch

import ferry
from ferry import _p2p_local, p2p
from peers import make_data
from test_p2p import WAIT, Buf, RemoteEndpoint, wait_done


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    """A temporary folder of the test's own, for this process and its children
    (the rendezvous folder lives in it): {"TMPDIR": path}."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return {"TMPDIR": str(tmp_path)}


@pytest.fixture
def local_dir(tmpdir_env):
    return os.path.join(tmpdir_env["TMPDIR"], f"ferry-p2p-{os.getuid()}")


@pytest.fixture
def local_pair(tmpdir_env):
    """This process's endpoint (GPU 0) connect_local()ed to a child's (GPU 1)."""
    remote, ep = RemoteEndpoint(gpu_idx=1, env=tmpdir_env), p2p.Endpoint(0, 2)
    remote.start("accept_local", timeout=WAIT)
    ok, conn_id = ep.connect_local(remote_gpu_bdf=1, timeout=WAIT)
    assert ok, ep.last_error
    accepted, remote_gpu, remote_conn = remote.result()
    assert accepted and remote_gpu == "0"  # the peer's PCI address when torch knows it, else its index
    yield ep, conn_id, remote, remote_conn
    remote.close()
    ep.close()


def test_connect_local_uses_the_local_transport(local_pair):
    ep, conn_id, remote, remote_conn = local_pair
    assert ep.connection(conn_id).transport_name == "local"
    assert remote.call("transport", remote_conn) == "local"


def test_ipc_calls(local_pair):
    ep, conn_id, remote, remote_conn = local_pair
    _, n = remote.array("t", "uint8", 100_003)
    ok, info = remote.call("advertise_ipc", remote_conn, Buf("t"), n)  # no registration needed
    assert ok and len(info) == 64
    src = make_data("uint8", 100_003, 400)
    assert ep.write_ipc(conn_id, src.ctypes.data, src.nbytes, info, timeout=WAIT) is True
    assert remote.data("t") == src.tobytes()
    back = np.zeros(100_003, dtype=np.uint8)
    assert ep.read_ipc(conn_id=conn_id, ptr=back.ctypes.data, size=back.nbytes, info=info, timeout=WAIT) is True
    assert back.tobytes() == src.tobytes()
    src2 = make_data("uint8", 100_003, 401)
    ok, tid = ep.write_ipc_async(conn_id, src2.ctypes.data, src2.nbytes, info)
    assert ok and wait_done(ep, tid) == (True, True) and remote.data("t") == src2.tobytes()
    ok, tid = ep.read_ipc_async(conn_id, back.ctypes.data, 77, info)
    assert ok and wait_done(ep, tid) == (True, True) and back[:77].tobytes() == src2[:77].tobytes()


def test_vector_ipc_calls(local_pair):
    ep, conn_id, remote, remote_conn = local_pair
    counts = [5, 40_961, 999]
    names = [f"v{i}" for i in range(len(counts))]
    for name, count in zip(names, counts):
        remote.array(name, "uint8", count)
    ok, infos = remote.call("advertisev_ipc", remote_conn, [Buf(n) for n in names], counts)
    assert ok and len(infos) == 3
    srcs = [make_data("uint8", c, 410 + i) for i, c in enumerate(counts)]
    assert ep.writev_ipc(conn_id, [s.ctypes.data for s in srcs], counts, infos, timeout=WAIT) is True
    assert [remote.data(n) for n in names] == [s.tobytes() for s in srcs]
    outs = [np.zeros(c, dtype=np.uint8) for c in counts]
    assert ep.readv_ipc(conn_id, [o.ctypes.data for o in outs], counts, infos, timeout=WAIT) is True
    assert [o.tobytes() for o in outs] == [s.tobytes() for s in srcs]
    srcs2 = [make_data("uint8", c, 420 + i) for i, c in enumerate(counts)]
    ok, tid = ep.writev_ipc_async(conn_id, [s.ctypes.data for s in srcs2], counts, infos)
    assert ok and wait_done(ep, tid) == (True, True)
    ok, tid = ep.readv_ipc_async(conn_id, ptr_v=[o.ctypes.data for o in outs], size_v=counts, info_v=infos)
    assert ok and wait_done(ep, tid) == (True, True)
    assert [o.tobytes() for o in outs] == [s.tobytes() for s in srcs2]
    with pytest.raises(RuntimeError, match="same length"):
        ep.writev_ipc(conn_id, [srcs[0].ctypes.data], counts, infos)


def test_accept_local_publishes_this_gpu(tmpdir_env, local_dir):
    remote, ep = RemoteEndpoint(gpu_idx=1, env=tmpdir_env), p2p.Endpoint(4, 1)
    try:
        remote.start("connect_local", "4", timeout=WAIT)  # waits for the file accept_local leaves
        ok, remote_gpu, conn_id = ep.accept_local(timeout=WAIT)
        assert ok and remote_gpu == "1"
        ok, remote_conn = remote.result()
        assert ok and os.listdir(local_dir) == ["gpu-4"]
    finally:
        remote.close()
        ep.close()
    assert os.listdir(local_dir) == []  # close() takes the file away


def test_connect_local_to_nobody_fails(local_dir):
    with p2p.Endpoint(0, 1) as ep:
        assert ep.connect_local(9, timeout=0.3) == (False, 0)
        assert isinstance(ep.last_error, ferry.Unavailable) and "GPU 9" in str(ep.last_error)
        # A file left by a process that is gone counts as absent.
        dead = subprocess.Popen(["true"])
        dead.wait()
        with open(os.path.join(_p2p_local.local_dir(), "gpu-5"), "w") as f:
            f.write(f"{ep.port} {ep.engine.id} {dead.pid}\n")
        assert ep.connect_local(5, timeout=0.3) == (False, 0)


def test_rendezvous_folder_must_be_private(local_dir):
    os.makedirs(local_dir, mode=0o755)
    os.chmod(local_dir, 0o755)
    with p2p.Endpoint(0, 1) as ep:
        assert ep.accept_local(timeout=0.1) == (False, "", 0)
        assert isinstance(ep.last_error, ferry.PermissionDenied)
        assert ep.connect_local(1, timeout=0.1) == (False, 0)
        assert ep.start_passive_accept() is False


def test_gpu_keys():
    assert _p2p_local.gpu_key(3) == _p2p_local.gpu_key("3") == "gpu-3"
    assert _p2p_local.gpu_key("0000:1B:00.0") == "bdf-0000_1b_00.0"
    with pytest.raises(ValueError):
        _p2p_local.gpu_key("../../etc/passwd")
    with pytest.raises(TypeError):
        _p2p_local.gpu_key(1.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_memory_as_in_uccl_nvlink_test():
    # test_engine_nvlink.py's calls: the target advertises a CUDA tensor with
    # mr_id 0 and the sender writes its own CUDA tensor with send(..., meta).
    with p2p.Endpoint(0, 2) as target, p2p.Endpoint(0, 2) as sender:
        ok, conn_id = sender.connect(target.get_metadata(), timeout=WAIT)
        assert ok
        received = torch.zeros(250_001, dtype=torch.uint8, device="cuda:0")
        ok, blob = target.advertise(conn_id, 0, received.data_ptr(), received.numel())
        assert ok and len(blob) == 64
        data = torch.from_numpy(make_data("uint8", 250_001, 430)).to("cuda:0")
        assert sender.send(conn_id, 0, data.data_ptr(), data.numel(), blob, timeout=WAIT) is True
        torch.cuda.synchronize()
        assert torch.equal(received, data)
        back = torch.zeros_like(data)
        assert sender.read(conn_id, 0, back.data_ptr(), back.numel(), blob, timeout=WAIT) is True
        torch.cuda.synchronize()
        assert torch.equal(back, data)
