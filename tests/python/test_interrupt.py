"""Ctrl-C during a blocking call raises KeyboardInterrupt promptly.

A child process blocks in one call with no deadline; the test sends it SIGINT
and expects it to print INTERRUPTED (it caught KeyboardInterrupt) and exit
within a couple of seconds."""

import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import ferry
from conftest import free_base_port

CHILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    import ferry
    from ferry import p2p

    mode, address = sys.argv[1], sys.argv[2]
    if mode == "p2p_recv":
        ep = p2p.Endpoint(local_gpu_idx=0, num_cpus=1)
        ok, conn_id = ep.connect("127.0.0.1", remote_gpu_idx=1, timeout=10)
        assert ok, ep.last_error
        buf = np.zeros(64, dtype=np.uint8)
        ok, mr = ep.reg(buf.ctypes.data, 64)
        call = lambda: ep.recv(conn_id, mr, buf.ctypes.data, 64)
    else:
        e = ferry.Engine()
        buf = np.zeros(4 << 20, dtype=np.uint8)
        e.reg(buf)
        if mode != "connect" and mode != "accept":
            conn = e.connect(address, timeout=10)
        call = {
            "recv": lambda: conn.recv(buf),
            "recvv": lambda: conn.recvv([buf[:10], buf[10:20]]),
            "send": lambda: conn.send(buf),  # 4 MiB: waits for a receive the peer never posts
            "transfer_wait": lambda: conn.recv_async(buf).wait(),
            "wait_notification": lambda: conn.wait_notification(),
            "accept": lambda: e.accept(),
            "connect": lambda: e.connect(address),  # a listener that never answers the handshake
        }[mode]
    print("READY", flush=True)
    try:
        call()
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        sys.exit(3)
    print("NOT INTERRUPTED", flush=True)
    sys.exit(1)
""")


def wait_line(proc, want, timeout):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.strip() == want:
            return
    raise AssertionError(f"child never printed {want}: {''.join(seen)} {proc.stderr.read() if proc.poll() else ''}")


def interrupt(mode, address="-", extra=(), env=None):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, address, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})))
    try:
        wait_line(proc, "READY", 30)
        time.sleep(0.4)  # well inside the blocking call
        assert proc.poll() is None, proc.stderr.read()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        wait_line(proc, "INTERRUPTED", 10)
        proc.wait(10)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 3, proc.stderr.read()
    assert elapsed < 3, f"took {elapsed:.2f} s to stop"


@pytest.fixture
def server():
    e = ferry.Engine()
    yield e
    e.close()


@pytest.mark.parametrize("mode", ["recv", "recvv", "send", "transfer_wait", "wait_notification"])
def test_interrupt_connection_calls(server, mode):
    interrupt_with_peer(server, mode)


def interrupt_with_peer(server, mode):
    import threading

    got = {}
    t = threading.Thread(target=lambda: got.setdefault("conn", server.accept(timeout=30)))
    t.start()
    try:
        interrupt(mode, server.address)
    finally:
        t.join(30)


def test_interrupt_accept():
    interrupt("accept")


def test_interrupt_connect_during_handshake():
    with socket.socket() as s:  # accepts TCP (backlog) but never speaks the protocol
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        interrupt("connect", f"127.0.0.1:{s.getsockname()[1]}")


def test_interrupt_p2p_recv():
    from ferry import p2p

    base = free_base_port()
    os.environ["FERRY_P2P_BASE_PORT"] = str(base)
    try:
        with p2p.Endpoint(local_gpu_idx=1, num_cpus=1) as ep:
            import threading

            result = {}
            t = threading.Thread(target=lambda: result.setdefault("r", ep.accept(timeout=30)))
            t.start()
            try:
                interrupt("p2p_recv", env={"FERRY_P2P_BASE_PORT": str(base)})
            finally:
                t.join(30)
            assert result["r"][0] is True
    finally:
        del os.environ["FERRY_P2P_BASE_PORT"]
