"""Sender half of the seed's usage examples (UCCL P2P README), run on ferry.

Start p2p_server.py first (or within FERRY_P2P_CONNECT_TIMEOUT seconds, 30 by
default: connect retries while the server is not listening yet), then:

    PYTHONPATH=build/python /usr/bin/python3 python/examples/p2p_client.py [SERVER_IP]

SERVER_IP defaults to 127.0.0.1 (the seed's example uses 192.168.1.100).
Changes from the seed's code: the import (ferry instead of uccl), the server's
address, and asserts on the returned success flags.
"""
import sys

from ferry import p2p
import torch
import numpy as np

server_ip = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"

# ---- Basic Endpoint Setup
# Create endpoint with local GPU index and number of CPUs
endpoint = p2p.Endpoint(local_gpu_idx=0, num_cpus=4)

# ---- Client-Server Communication
# Client side - connect to remote server
success, conn_id = endpoint.connect(server_ip, remote_gpu_idx=1)
if success:
    print(f"Connected with conn_id={conn_id}")
assert success

# ---- PyTorch Tensor Transfer
# Sender side
send_tensor = torch.ones(1024, dtype=torch.float32)
assert send_tensor.is_contiguous()  # Ensure tensor is contiguous

# Register tensor for RDMA
success, mr_id = endpoint.reg(send_tensor.data_ptr(), send_tensor.numel() * 4)
assert success

# Send the tensor
success = endpoint.send(conn_id, mr_id, send_tensor.data_ptr(), send_tensor.numel() * 4)
assert success

# ---- NumPy Array Transfer
# Create and prepare NumPy array
data = np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32)
assert data.flags['C_CONTIGUOUS']  # Ensure array is contiguous

# Register for RDMA
ptr = data.ctypes.data
size = data.nbytes
success, mr_id = endpoint.reg(ptr, size)

# Send array
if success:
    success = endpoint.send(conn_id, mr_id, ptr, size)
assert success

# ---- Vectorized Multi-Tensor Transfer
# Sender side - send multiple tensors at once
tensors = [
    torch.ones(512, dtype=torch.float32),
    torch.ones(1024, dtype=torch.float32),
    torch.ones(256, dtype=torch.float32)
]

# Ensure all tensors are contiguous
for tensor in tensors:
    assert tensor.is_contiguous()

# Register all tensors
mr_ids = []
for tensor in tensors:
    success, mr_id = endpoint.reg(tensor.data_ptr(), tensor.numel() * 4)
    assert success
    mr_ids.append(mr_id)

# Prepare data for vectorized send
ptr_list = [tensor.data_ptr() for tensor in tensors]
size_list = [tensor.numel() * 4 for tensor in tensors]
num_iovs = len(tensors)

# Send all tensors in one operation
success = endpoint.sendv(conn_id, mr_ids, ptr_list, size_list, num_iovs)
assert success
print("p2p_client: tensor, array and vector sent")
