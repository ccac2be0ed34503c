"""ferry.p2p: the seed's Endpoint API between two processes, and its failures."""

import logging
import time

import numpy as np
import pytest

import ferry
from conftest import Peer
from ferry import p2p
from peers import make_data, p2p_serve

WAIT = 30


def test_port_derivation(monkeypatch):
    monkeypatch.delenv("FERRY_P2P_BASE_PORT", raising=False)
    assert p2p.base_port() == p2p.DEFAULT_BASE_PORT == 19800
    assert p2p.port_for_gpu(3) == 19803
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", "25000")
    assert p2p.port_for_gpu(0) == 25000 and p2p.port_for_gpu(7) == 25007
    monkeypatch.setenv("FERRY_P2P_BASE_PORT", "http")
    with pytest.raises(ValueError, match="FERRY_P2P_BASE_PORT"):
        p2p.base_port()


def test_endpoint_listens_on_its_gpu_port(base_port):
    with p2p.Endpoint(local_gpu_idx=2, num_cpus=4) as ep:
        assert ep.port == base_port + 2
        assert ep.engine.options.streams == 4
        assert ep.engine.options.listen == f"0.0.0.0:{base_port + 2}"
    with pytest.raises(ValueError):
        p2p.Endpoint(local_gpu_idx=-1, num_cpus=1)
    with pytest.raises(TypeError):
        p2p.Endpoint(local_gpu_idx="0", num_cpus=1)


def test_taken_port_falls_back_with_a_warning(base_port, caplog):
    with p2p.Endpoint(local_gpu_idx=0, num_cpus=1) as first:
        with caplog.at_level(logging.WARNING, logger="ferry.p2p"):
            with p2p.Endpoint(local_gpu_idx=0, num_cpus=1) as second:
                assert first.port == base_port and second.port != base_port
                assert "cannot listen" in caplog.text
                # The second reaches the first by GPU index; the first is not fooled into itself.
                ok, conn_id = second.connect("127.0.0.1", remote_gpu_idx=0, timeout=5)
                assert ok
                ok, ip, gpu, _ = first.accept(timeout=5)
                assert (ok, ip, gpu) == (True, "127.0.0.1", 0)


def test_connect_to_itself_is_refused(base_port):
    with p2p.Endpoint(local_gpu_idx=1, num_cpus=1) as ep:
        ok, conn_id = ep.connect("127.0.0.1", remote_gpu_idx=1, timeout=5)
        assert (ok, conn_id) == (False, 0)
        assert isinstance(ep.last_error, ferry.Unavailable) and "itself" in str(ep.last_error)


def test_connect_to_nobody_fails_after_retrying(base_port):
    with p2p.Endpoint(local_gpu_idx=0, num_cpus=1) as ep:
        start = time.monotonic()
        ok, conn_id = ep.connect("127.0.0.1", remote_gpu_idx=3, timeout=0.5)
        assert (ok, conn_id) == (False, 0)
        assert isinstance(ep.last_error, ferry.Unavailable)
        assert 0.3 < time.monotonic() - start < 5


def test_accept_timeout_returns_failure(base_port):
    with p2p.Endpoint(local_gpu_idx=0, num_cpus=1) as ep:
        assert ep.accept(timeout=0.2) == (False, "", -1, 0)
        assert isinstance(ep.last_error, ferry.DeadlineExceeded)


def test_accept_drops_peers_that_are_not_endpoints(base_port):
    with p2p.Endpoint(local_gpu_idx=0, num_cpus=1) as ep, ferry.Engine() as plain:
        conn = plain.connect(f"127.0.0.1:{ep.port}", timeout=5)
        conn.notify(b"hello, I am not an endpoint", timeout=5)
        assert ep.accept(timeout=1.0)[0] is False  # dropped, then no one else came
        deadline = time.monotonic() + 10
        while conn.health().ok() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not conn.health().ok()


@pytest.fixture
def endpoint_pair(base_port):
    """A p2p server process (GPU 1) and this process's endpoint (GPU 0), connected."""
    peer = Peer(p2p_serve, base_port, 1)
    assert peer.expect("port") == base_port + 1
    ep = p2p.Endpoint(local_gpu_idx=0, num_cpus=2)
    ok, conn_id = ep.connect("127.0.0.1", remote_gpu_idx=1)
    assert ok and conn_id > 0
    assert peer.expect("accepted") == (True, "127.0.0.1", 0)
    yield ep, conn_id, peer
    peer.stop()
    ep.close()


def reg(ep, arr):
    ok, mr_id = ep.reg(arr.ctypes.data, arr.nbytes)
    assert ok and mr_id > 0
    return mr_id


@pytest.mark.parametrize("dtype,count", [("float32", 1024), ("uint8", 1), ("int64", 70001), ("float16", 1_000_003)])
def test_send_recv(endpoint_pair, dtype, count):
    ep, conn_id, peer = endpoint_pair
    peer.call_async("recv", dtype, count, 60)
    arr = make_data(dtype, count, 60)
    mr_id = reg(ep, arr)
    assert ep.send(conn_id, mr_id, arr.ctypes.data, arr.nbytes) is True
    assert peer.expect("ok") == (True, True)
    # And back over the same connection (ferry connections are bidirectional).
    out = np.zeros(count, dtype=dtype)
    out_mr = reg(ep, out)
    peer.call_async("send", dtype, count, 61)
    assert ep.recv(conn_id, out_mr, out.ctypes.data, out.nbytes) is True
    assert peer.expect("ok") is True
    assert out.tobytes() == make_data(dtype, count, 61).tobytes()


def test_sendv_recvv(endpoint_pair):
    ep, conn_id, peer = endpoint_pair
    specs = [("float32", 512), ("float32", 1024), ("uint8", 70001)]
    peer.call_async("recvv", specs, 70)
    arrs = [make_data(d, c, 70 + i) for i, (d, c) in enumerate(specs)]
    mr_ids = [reg(ep, a) for a in arrs]
    assert ep.sendv(conn_id, mr_ids, [a.ctypes.data for a in arrs], [a.nbytes for a in arrs], len(arrs)) is True
    assert peer.expect("ok") == (True, [True, True, True])


def test_async_send_and_poll(endpoint_pair):
    ep, conn_id, peer = endpoint_pair
    specs = [("float32", 1 + 1000 * i, 80 + i) for i in range(5)] + [("uint8", 3_000_001, 90)]
    peer.call_async("recv_async", specs)
    arrs = [make_data(d, c, s) for d, c, s in specs]
    tids = []
    for a in arrs:
        ok, tid = ep.send_async(conn_id, reg(ep, a), a.ctypes.data, a.nbytes)
        assert ok
        tids.append(tid)
    assert len(set(tids)) == len(tids)
    deadline = time.monotonic() + WAIT
    pending = set(tids)
    while pending and time.monotonic() < deadline:
        for tid in list(pending):
            ok, done = ep.poll_async(tid)
            assert ok
            if done:
                pending.discard(tid)
        time.sleep(0.0005)
    assert not pending
    assert ep.poll_async(tids[0]) == (False, False)  # reported done once, then forgotten
    all_done, failed, oks = peer.expect("ok")
    assert all_done and failed == [] and all(oks)


def test_async_receive(endpoint_pair):
    ep, conn_id, peer = endpoint_pair
    out = np.zeros(250_000, dtype=np.float64)
    ok, tid = ep.recv_async(conn_id, reg(ep, out), out.ctypes.data, out.nbytes)
    assert ok
    assert ep.poll_async(tid) == (True, False)  # nothing sent yet
    assert peer.call("send", "float64", 250_000, 95) is True
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ok, done = ep.poll_async(tid)
        assert ok
        if done:
            break
        time.sleep(0.001)
    assert done
    assert out.tobytes() == make_data("float64", 250_000, 95).tobytes()


def test_bad_input_returns_failure(endpoint_pair, caplog):
    ep, conn_id, peer = endpoint_pair
    arr = make_data("uint8", 4096, 100)
    mr_id = reg(ep, arr)
    with caplog.at_level(logging.WARNING, logger="ferry.p2p"):
        # unknown memory region
        assert ep.send(conn_id, 987654, arr.ctypes.data, arr.nbytes) is False
        assert isinstance(ep.last_error, ferry.NotFound) and "mr_id 987654" in str(ep.last_error)
        # a pointer and size outside the region
        assert ep.send(conn_id, mr_id, arr.ctypes.data + 1, arr.nbytes) is False
        assert isinstance(ep.last_error, ferry.OutOfRange)
        assert ep.send_async(conn_id, mr_id, arr.ctypes.data - 8, 16) == (False, 0)
        assert isinstance(ep.last_error, ferry.OutOfRange)
        # unknown connection
        assert ep.send(424242, mr_id, arr.ctypes.data, arr.nbytes) is False
        assert isinstance(ep.last_error, ferry.NotFound) and "conn_id 424242" in str(ep.last_error)
        # num_iovs disagreeing with the lists
        assert ep.sendv(conn_id, [mr_id], [arr.ctypes.data], [16], 2) is False
        assert isinstance(ep.last_error, ferry.InvalidArgument)
        # unknown transfer id
        assert ep.poll_async(31337) == (False, False)
        # registration of nothing
        assert ep.reg(arr.ctypes.data, 0) == (False, 0)
        assert isinstance(ep.last_error, ferry.InvalidArgument)
        assert ep.dereg(987654) is False
    assert "p2p send failed: NotFound" in caplog.text
    with pytest.raises(TypeError):
        ep.send(conn_id, mr_id, "not a pointer", 16)


def test_recv_requires_the_exact_size(endpoint_pair):
    ep, conn_id, peer = endpoint_pair
    # A smaller message than `size`: the receive reports failure.
    peer.call_async("recv_size", 100)
    arr = make_data("uint8", 60, 110)
    assert ep.send(conn_id, reg(ep, arr), arr.ctypes.data, 60) is True
    ok, error = peer.expect("ok")
    assert ok is False and error == "InvalidArgument"
    # A larger one fails both sides.
    peer.call_async("recv_size", 10)
    assert ep.send(conn_id, reg(ep, arr), arr.ctypes.data, 60) is False
    assert isinstance(ep.last_error, ferry.BufferTooSmall)
    assert peer.expect("ok") == (False, "BufferTooSmall")


def test_closed_connection(endpoint_pair):
    ep, conn_id, peer = endpoint_pair
    arr = make_data("uint8", 64, 120)
    mr_id = reg(ep, arr)
    assert ep.close_connection(conn_id) is True
    assert ep.send(conn_id, mr_id, arr.ctypes.data, 64) is False
    assert isinstance(ep.last_error, ferry.NotFound)
    assert ep.close_connection(conn_id) is False


def test_dereg_counts_registrations(base_port):
    with p2p.Endpoint(local_gpu_idx=0, num_cpus=1) as ep:
        arr = np.zeros(100, dtype=np.uint8)
        ok1, a = ep.reg(arr.ctypes.data, 100)
        ok2, b = ep.reg(arr.ctypes.data, 100)
        assert ok1 and ok2 and a == b
        assert ep.dereg(a) is True
        assert ep.dereg(a) is True
        assert ep.dereg(a) is False


def test_peer_gone(endpoint_pair):
    ep, conn_id, peer = endpoint_pair
    arr = make_data("uint8", 64, 130)
    mr_id = reg(ep, arr)
    ok, tid = ep.recv_async(conn_id, mr_id, arr.ctypes.data, 64)
    assert ok
    peer.stop()  # the peer process exits; its engine closes the connection
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        ok, done = ep.poll_async(tid)
        if done:
            break
        time.sleep(0.01)
    assert (ok, done) == (False, True)
    assert isinstance(ep.last_error, (ferry.PeerLost, ferry.Cancelled))
    assert ep.send(conn_id, mr_id, arr.ctypes.data, 64) is False
    assert isinstance(ep.last_error, (ferry.PeerLost, ferry.Cancelled))
