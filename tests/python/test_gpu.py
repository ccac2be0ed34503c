"""torch CUDA tensors between two processes, both directions, data verified.

Skips without a CUDA device (Debian's torch is CPU-only). On a GPU host the
peer process uses the last GPU and this one the first, so with two GPUs the
bytes cross devices.

Both processes are on one host, so the connection uses the local transport
(CUDA IPC); FERRY_TRANSPORT=tcp runs the same tests through GPU staging.
"""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import ferry  # noqa: E402
from conftest import Link, Peer  # noqa: E402
from ferry import p2p  # noqa: E402
from peers import make_tensor, p2p_serve  # noqa: E402

WAIT = 60
LOCAL = "cuda:0"
REMOTE = f"cuda:{torch.cuda.device_count() - 1}"
DTYPES = ["float32", "bfloat16", "int64", "uint8"]
COUNT = 1_000_003


@pytest.fixture(scope="module")
def link():
    lk = Link()
    yield lk
    lk.close()


def test_cuda_memory_is_registered_as_cuda():
    with ferry.Engine() as e:
        t = torch.zeros(1000, device=LOCAL)
        r = e.reg(t)
        assert r.kind == ferry.MemoryKind.CUDA and r.device == 0
        assert (r.base, r.length) == (t.data_ptr(), 4000)
        assert e.export_region(r).kind == ferry.MemoryKind.CUDA
        with pytest.raises(ValueError, match="not contiguous"):
            e.reg(torch.zeros(10, 10, device=LOCAL).t())


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_tensors_both_directions(link, dtype):
    # host -> this GPU -> peer GPU
    src = make_tensor(dtype, COUNT, 1, LOCAL)
    link.engine.reg(src)
    link.peer.call_async("torch_recv", dtype, COUNT, 1, REMOTE)
    link.conn.send(src, timeout=WAIT)
    n, ok = link.peer.expect("ok")
    assert n == src.numel() * src.element_size() and ok
    # peer GPU -> this GPU
    out = torch.zeros(COUNT, dtype=getattr(torch, dtype), device=LOCAL)
    link.engine.reg(out)
    link.peer.call_async("torch_send", dtype, COUNT, 2, REMOTE)
    link.conn.recv(out, timeout=WAIT)
    link.peer.expect("ok")
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), make_tensor(dtype, COUNT, 2))


def test_cuda_write_and_read(link):
    # Write a CUDA tensor into the peer's exported host memory, read it back into
    # another CUDA tensor: both one-sided directions touch GPU memory here.
    src = make_tensor("float32", COUNT, 3, LOCAL)
    dst = torch.zeros(COUNT, device=LOCAL)
    link.engine.reg(src)
    link.engine.reg(dst)
    remote = ferry.RemoteDescriptor.parse(link.peer.call("export", "g", "float32", COUNT, None, 0, 0))
    link.conn.write(src, remote, 0, timeout=WAIT)
    link.conn.read(dst, remote, 0, timeout=WAIT)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)
    link.peer.call("unexport", "g")


@pytest.mark.parametrize("direction", ["to_peer", "from_peer"])
def test_cuda_tensors_p2p(base_port, direction):
    peer = Peer(p2p_serve, base_port, 1)
    try:
        assert peer.expect("port") == base_port + 1
        with p2p.Endpoint(local_gpu_idx=0, num_cpus=4) as ep:
            ok, conn_id = ep.connect("127.0.0.1", remote_gpu_idx=1)
            assert ok
            assert peer.expect("accepted")[0] is True
            if direction == "to_peer":
                t = make_tensor("float32", COUNT, 4, LOCAL)
                ok, mr = ep.reg(t.data_ptr(), t.numel() * 4)
                assert ok
                peer.call_async("torch_recv", "float32", COUNT, 4, REMOTE)
                assert ep.send(conn_id, mr, t.data_ptr(), t.numel() * 4)
                assert peer.expect("ok") == (True, True)
            else:
                t = torch.zeros(COUNT, device=LOCAL)
                ok, mr = ep.reg(t.data_ptr(), t.numel() * 4)
                assert ok
                peer.call_async("torch_send", "float32", COUNT, 5, REMOTE)
                assert ep.recv(conn_id, mr, t.data_ptr(), t.numel() * 4)
                assert peer.expect("ok") is True
                torch.cuda.synchronize()
                assert torch.equal(t.cpu(), make_tensor("float32", COUNT, 5))
    finally:
        peer.stop()
