"""Receiver half of the seed's usage examples (UCCL P2P README), run on ferry.

Two processes on one host (from the repository root, after the build):

    PYTHONPATH=build/python /usr/bin/python3 python/examples/p2p_server.py
    PYTHONPATH=build/python /usr/bin/python3 python/examples/p2p_client.py 127.0.0.1

The client connects with remote_gpu_idx=1, as in the seed, so this side is the
endpoint of GPU 1: it listens on 0.0.0.0:(FERRY_P2P_BASE_PORT + 1), 19801 by
default. Without GPUs it serves host memory all the same.

Changes from the seed's code: the import (ferry instead of uccl), this side's
local_gpu_idx (1, the index the client's connect names), the sender's array
and num_iovs restated on this side, and the checks at the end.
"""
from ferry import p2p
import torch
import numpy as np

# ---- Basic Endpoint Setup
# Create endpoint with local GPU index and number of CPUs
endpoint = p2p.Endpoint(local_gpu_idx=1, num_cpus=4)

# ---- Client-Server Communication
# Server side - accept incoming connections
success, remote_ip_addr, remote_gpu_idx, conn_id = endpoint.accept()
if success:
    print(f"Connected to {remote_ip_addr}, GPU {remote_gpu_idx}, conn_id={conn_id}")
assert success

# ---- PyTorch Tensor Transfer
# Receiver side
recv_tensor = torch.zeros(1024, dtype=torch.float32)
assert recv_tensor.is_contiguous()

# Register receive buffer
success, mr_id = endpoint.reg(recv_tensor.data_ptr(), recv_tensor.numel() * 4)
assert success

# Receive the tensor
success = endpoint.recv(conn_id, mr_id, recv_tensor.data_ptr(), recv_tensor.numel() * 4)
assert success

# ---- NumPy Array Transfer
data = np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32)  # the sender's array (shape and dtype)

# Receive array
recv_data = np.zeros_like(data)
recv_ptr = recv_data.ctypes.data
success, recv_mr_id = endpoint.reg(recv_ptr, recv_data.nbytes)
success = endpoint.recv(conn_id, recv_mr_id, recv_ptr, recv_data.nbytes)
assert success

# ---- Vectorized Multi-Tensor Transfer
# Receiver side - receive multiple tensors at once
recv_tensors = [
    torch.zeros(512, dtype=torch.float32),
    torch.zeros(1024, dtype=torch.float32),
    torch.zeros(256, dtype=torch.float32)
]
num_iovs = len(recv_tensors)  # the sender's side defines it in the seed

# Register receive buffers
recv_mr_ids = []
for tensor in recv_tensors:
    success, mr_id = endpoint.reg(tensor.data_ptr(), tensor.numel() * 4)
    assert success
    recv_mr_ids.append(mr_id)

# Prepare data for vectorized receive
recv_ptr_list = [tensor.data_ptr() for tensor in recv_tensors]
size_list = [tensor.numel() * 4 for tensor in recv_tensors]

# Receive all tensors in one operation
success = endpoint.recvv(conn_id, recv_mr_ids, recv_ptr_list, size_list, num_iovs)
assert success

# ---- Checks (not in the seed): what arrived is what the client sent
assert remote_gpu_idx == 0, remote_gpu_idx
assert torch.equal(recv_tensor, torch.ones(1024, dtype=torch.float32))
assert np.array_equal(recv_data, data)
for tensor in recv_tensors:
    assert torch.equal(tensor, torch.ones_like(tensor))
print("p2p_server: tensor, array and vector received and verified")
