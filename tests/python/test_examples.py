"""The seed's usage examples (python/examples) run as two processes on one host."""

import os
import subprocess
import sys

import pytest

from conftest import free_base_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "python", "examples")
TIMEOUT = 120


def run_pair(first, second, env_extra=None):
    """Starts `first` (the listening side), then `second`; both must exit 0."""
    env = dict(os.environ, **(env_extra or {}))
    server = subprocess.Popen([sys.executable, *first], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        client = subprocess.run([sys.executable, *second], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
        server_out, _ = server.communicate(timeout=TIMEOUT)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    assert client.returncode == 0, client.stdout
    assert server.returncode == 0, server_out
    return server_out, client.stdout


def test_seed_examples():
    base = free_base_port()
    server_out, client_out = run_pair([os.path.join(EXAMPLES, "p2p_server.py")],
                                      [os.path.join(EXAMPLES, "p2p_client.py"), "127.0.0.1"],
                                      {"FERRY_P2P_BASE_PORT": str(base)})
    assert "Connected to 127.0.0.1, GPU 0, conn_id=" in server_out
    assert "p2p_server: tensor, array and vector received and verified" in server_out
    assert "Connected with conn_id=" in client_out


def test_async_example():
    base = free_base_port()
    server_out, client_out = run_pair([os.path.join(EXAMPLES, "p2p_async.py"), "server"],
                                      [os.path.join(EXAMPLES, "p2p_async.py"), "client", "127.0.0.1"],
                                      {"FERRY_P2P_BASE_PORT": str(base)})
    assert "8 chunks received and verified" in server_out
    assert "p2p_async client: sent 64 MiB" in client_out


def test_core_api_example():
    address = f"127.0.0.1:{free_base_port(1)}"
    target_out, initiator_out = run_pair([os.path.join(EXAMPLES, "ferry_api.py"), "target", address],
                                         [os.path.join(EXAMPLES, "ferry_api.py"), "initiator", address])
    assert "target: got 'kv block 7 ready', data verified" in target_out
    assert "wrote and read back 4000012 bytes, verified" in initiator_out
