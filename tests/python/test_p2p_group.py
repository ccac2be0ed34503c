"""ferry.p2p's rendezvous calls of the seed: Endpoint.CreateAndJoin,
join_group and conn_id_of_rank, through a real redis-server started here on
loopback with a free port (skipped, saying why, without one). Members are
endpoints of this process, one thread each; every pair exchanges random bytes.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import ferry
from ferry import p2p
from peers import make_data
from test_p2p import WAIT, reg

NO_CONN = (1 << 64) - 1


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    program = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(program, os.X_OK):
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen([program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                               "no", "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/p2p{os.getpid()}"
    deadline = time.monotonic() + 15
    while True:
        try:
            ferry.Directory(url).list(timeout=0.5)
            break
        except ferry.Unavailable:
            if time.monotonic() > deadline:
                server.kill()
                pytest.fail("redis-server did not come up within 15 s")
            time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(10)


def join_all(redis_url: str, group: str, world: int):
    endpoints, errors = {}, []

    def member(rank: int) -> None:
        try:
            endpoints[rank] = p2p.Endpoint.CreateAndJoin(redis_url, group, world, rank, rank, 1, 0)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=member, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT + 5)
    assert not errors and len(endpoints) == world, errors
    return endpoints


def test_create_and_join_connects_every_pair(redis_url):
    endpoints = join_all(redis_url, "trio", 3)
    try:
        for rank, ep in endpoints.items():
            assert ep.conn_id_of_rank(rank) == NO_CONN
            assert all(ep.conn_id_of_rank(other) in ep._conns for other in endpoints if other != rank)
            assert ep.conn_id_of_rank(rank=7) == NO_CONN
        for src, dst in ((0, 2), (2, 1), (1, 0)):
            data = make_data("uint8", 10_007, 500 + src)
            got = np.zeros_like(data)
            dst_ep, src_ep = endpoints[dst], endpoints[src]
            result = {}
            t = threading.Thread(target=lambda: result.setdefault("ok", dst_ep.recv(
                dst_ep.conn_id_of_rank(src), reg(dst_ep, got), got.ctypes.data, got.nbytes, timeout=WAIT)))
            t.start()
            assert src_ep.send(src_ep.conn_id_of_rank(dst), reg(src_ep, data), data.ctypes.data, data.nbytes,
                               timeout=WAIT)
            t.join(WAIT)
            assert result == {"ok": True} and got.tobytes() == data.tobytes()
    finally:
        for ep in endpoints.values():
            ep.close()


def test_join_group_needs_a_fresh_endpoint(redis_url):
    with p2p.Endpoint(0, 1) as ep:
        arr = np.zeros(8, dtype=np.uint8)
        reg(ep, arr)
        assert ep.join_group(redis_url, "busy", 1, 0, 0) is False
        assert isinstance(ep.last_error, ferry.InvalidArgument) and "CreateAndJoin" in str(ep.last_error)


def test_join_group_waits_with_a_deadline(redis_url):
    with p2p.Endpoint(0, 1) as ep:
        start = time.monotonic()
        assert ep.join_group(redis_url, "lonely", 2, 1, 0, timeout=0.5) is False  # rank 0 never comes
        assert isinstance(ep.last_error, ferry.DeadlineExceeded)
        assert time.monotonic() - start < 5
    with pytest.raises(RuntimeError, match="CreateAndJoin"):
        p2p.Endpoint.CreateAndJoin(redis_url, "bad", 2, 5, 0, 1, 0)  # rank outside the group
