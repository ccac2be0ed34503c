"""send_async / recv_async / poll_async with the seed's Endpoint API.

Two processes on one host:

    PYTHONPATH=build/python /usr/bin/python3 python/examples/p2p_async.py server
    PYTHONPATH=build/python /usr/bin/python3 python/examples/p2p_async.py client [SERVER_IP]

The client (GPU 0) sends 8 chunks of a 64 MiB float32 tensor asynchronously to
the server (GPU 1), which receives them asynchronously and checks them.
"""
import sys
import time

import torch
from ferry import p2p

CHUNKS = 8
CHUNK_ELEMS = 2 * 1024 * 1024  # 8 MiB of float32 per chunk


def wait_all(endpoint, transfer_ids):
    pending = set(transfer_ids)
    while pending:
        for transfer_id in list(pending):
            success, is_done = endpoint.poll_async(transfer_id)
            assert success, endpoint.last_error
            if is_done:
                pending.discard(transfer_id)
        time.sleep(0.001)


def server():
    endpoint = p2p.Endpoint(local_gpu_idx=1, num_cpus=4)
    success, remote_ip_addr, remote_gpu_idx, conn_id = endpoint.accept()
    assert success
    print(f"Connected to {remote_ip_addr}, GPU {remote_gpu_idx}, conn_id={conn_id}")
    tensor = torch.zeros(CHUNKS * CHUNK_ELEMS, dtype=torch.float32)
    success, mr_id = endpoint.reg(tensor.data_ptr(), tensor.numel() * 4)
    assert success
    ids = []
    for i in range(CHUNKS):
        ptr = tensor.data_ptr() + i * CHUNK_ELEMS * 4
        success, transfer_id = endpoint.recv_async(conn_id, mr_id, ptr, CHUNK_ELEMS * 4)
        assert success
        ids.append(transfer_id)
    wait_all(endpoint, ids)
    assert torch.equal(tensor, torch.arange(CHUNKS * CHUNK_ELEMS, dtype=torch.float32))
    print("p2p_async server: 8 chunks received and verified")


def client(server_ip):
    endpoint = p2p.Endpoint(local_gpu_idx=0, num_cpus=4)
    success, conn_id = endpoint.connect(server_ip, remote_gpu_idx=1)
    assert success
    tensor = torch.arange(CHUNKS * CHUNK_ELEMS, dtype=torch.float32)
    success, mr_id = endpoint.reg(tensor.data_ptr(), tensor.numel() * 4)
    assert success
    ids = []
    start = time.perf_counter()
    for i in range(CHUNKS):
        ptr = tensor.data_ptr() + i * CHUNK_ELEMS * 4
        success, transfer_id = endpoint.send_async(conn_id, mr_id, ptr, CHUNK_ELEMS * 4)
        assert success
        ids.append(transfer_id)
    wait_all(endpoint, ids)
    seconds = time.perf_counter() - start
    print(f"p2p_async client: sent {tensor.numel() * 4 / 2**20:.0f} MiB in {seconds * 1e3:.1f} ms "
          f"({tensor.numel() * 4 / seconds / 1e9:.2f} GB/s)")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("server", "client"):
        sys.exit(f"usage: {sys.argv[0]} server | client [SERVER_IP]")
    if sys.argv[1] == "server":
        server()
    else:
        client(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1")
