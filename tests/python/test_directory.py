"""The directory from Python: ferry.Engine(directory=..., name=...),
engine.connect("name"), engine.directory.list(), ferry.Directory(url).watch().

Runs against a real redis-server (and etcd, when installed) started here on
loopback with a random port; each case skips, saying why, without one.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest

import ferry

TTL = 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(kind: str, tmp: str):
    port = _free_port()
    if kind == "redis":
        prog = shutil.which("redis-server") or "/usr/bin/redis-server"
        args = [prog, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", tmp, "--protected-mode", "no"]
    else:
        prog = shutil.which("etcd") or "/usr/bin/etcd"
        peer = _free_port()
        args = [prog, "--name", "t", "--data-dir", os.path.join(tmp, "data"),
                "--listen-client-urls", f"http://127.0.0.1:{port}",
                "--advertise-client-urls", f"http://127.0.0.1:{port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"t=http://127.0.0.1:{peer}",
                "--heartbeat-interval", "10", "--election-timeout", "100"]
    if not os.access(prog, os.X_OK):
        pytest.skip(f"{os.path.basename(prog)} is not installed (scripts/setup.sh installs it)")
    log = open(os.path.join(tmp, "server.log"), "w")
    proc = subprocess.Popen(args, stdout=log, stderr=log)
    url = f"{kind}://127.0.0.1:{port}/py{os.getpid()}"
    d = ferry.Directory(url)
    deadline = time.monotonic() + 15
    while True:
        try:
            d.list(timeout=0.5)
            break
        except ferry.Unavailable:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    return proc, url


@pytest.fixture(params=["redis", "etcd"])
def directory_url(request):
    tmp = tempfile.mkdtemp(prefix="ferry-dir-py-")
    proc, url = _start(request.param, tmp)
    yield url
    proc.kill()
    proc.wait(timeout=10)
    shutil.rmtree(tmp, ignore_errors=True)


def test_options_and_environment_names():
    o = ferry.make_options(directory="redis://u:pw@127.0.0.1:6379/x", name="decode-3", directory_ttl=1.5)
    assert o.directory == "redis://u:pw@127.0.0.1:6379/x" and o.name == "decode-3"
    assert o.directory_ttl == pytest.approx(1.5)
    assert "pw" not in repr(o)  # the URL is shown without its password
    tunables = {t["name"]: t for t in ferry.describe_tunables(o)}
    assert tunables["directory"]["env"] == "FERRY_DIRECTORY"
    assert tunables["name"]["env"] == "FERRY_NAME"
    assert tunables["directory_ttl"]["env"] == "FERRY_DIRECTORY_TTL_MS"
    with pytest.raises(ferry.InvalidArgument):
        ferry.Engine(directory="memcached://h:1")
    with pytest.raises(ferry.InvalidArgument):
        ferry.Directory("redis://nohostport")
    with ferry.Engine(transport="tcp") as e:
        assert e.name == "" and e.incarnation == 0
        with pytest.raises(ferry.InvalidArgument):
            e.connect("decode-3", timeout=1)
        with pytest.raises(ferry.InvalidArgument):
            e.directory.list()
        assert "unavailable" in repr(e.directory)  # repr() never raises


def test_publish_connect_by_name_list_and_watch(directory_url):
    watch = ferry.Directory(directory_url).watch()
    assert watch.poll(timeout=2) == []
    with ferry.Engine(directory=directory_url, name="decode-3", directory_ttl=TTL, transport="tcp") as server, \
         ferry.Engine(directory=directory_url, name="prefill-0", directory_ttl=TTL, transport="tcp") as client:
        assert server.name == "decode-3" and server.incarnation > 0
        entry = client.lookup("decode-3")
        assert entry.engine_id == server.id and entry.addresses == [server.address]
        assert entry.incarnation == server.incarnation
        assert [e.name for e in client.directory.list()] == ["decode-3", "prefill-0"]
        with pytest.raises(ferry.NotFound):
            client.directory.lookup("nobody", timeout=2)

        events = watch.next(timeout=5, interval=0.02)
        assert sorted((ev.kind, ev.entry.name) for ev in events) == [("appeared", "decode-3"),
                                                                     ("appeared", "prefill-0")]

        src = np.random.default_rng(7).integers(0, 256, (3 << 20) + 11, dtype=np.uint8)
        dst = np.zeros_like(src)
        client.reg(src)
        server.reg(dst)
        got = {}

        def serve():
            c = server.accept(timeout=10)
            got["n"] = c.recv(dst, timeout=10)

        t = threading.Thread(target=serve)
        t.start()
        conn = client.connect("decode-3", timeout=5)
        assert conn.peer_engine_id == server.id
        conn.send(src, timeout=10)
        t.join(timeout=20)
        assert got["n"] == src.size and np.array_equal(src, dst)

    # Both closed cleanly: their entries are deleted at once, not after the TTL.
    events = watch.next(timeout=TTL / 2, interval=0.02)
    assert sorted((ev.kind, ev.entry.name) for ev in events) == [("vanished", "decode-3"),
                                                                 ("vanished", "prefill-0")]


def test_a_dead_directory_is_unavailable_within_the_timeout():
    port = _free_port()  # nothing listens there
    with ferry.Engine(directory=f"redis://127.0.0.1:{port}/x", name="lonely", directory_ttl=TTL,
                      transport="tcp") as e:
        t0 = time.monotonic()
        with pytest.raises(ferry.Unavailable):
            e.connect("someone", timeout=0.3)
        assert time.monotonic() - t0 < 1.0
