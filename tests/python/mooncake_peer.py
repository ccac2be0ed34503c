"""The target process of the ferry.mooncake tests (test_mooncake.py, test_mooncake_cuda.py).

Mooncake's API is between processes: an engine names its peer by session and
raw address, so the tests need a second process that owns a TransferEngine and
registered memory. This program is that process. It initializes a
TransferEngine (P2PHANDSHAKE, or the metadata URL of --metadata), prints one
JSON line {"session", "port"}, then reads one JSON command per line on stdin
and answers each with one JSON line on stdout: {"ok": result} or
{"error": text}. Commands (addresses are ints, bytes travel as base64):

  ["alloc", n, seed|null, register]  a new buffer of n bytes (zeros, or random
                                     bytes from seed): its address
  ["register", addr, n] / ["unregister", addr]  register_memory / unregister_memory: the return
  ["free", addr]                     unregisters what it registered in a buffer, drops it
  ["get", addr, n]                   the bytes of [addr, addr+n), base64
  ["sha256", addr, n]                their SHA-256, hex
  ["put", addr, b64]                 writes bytes there
  ["notifies"]                       get_notifies() as [[name, msg], ...]
  ["wait_notifies", seconds, addr, n, b64|null]  polls get_notifies until one arrives
                                     (or the deadline); then at once writes b64 at addr,
                                     if given, and takes the bytes of [addr, addr+n):
                                     [[name, msg], ...] and those bytes
  ["first"]                          get_first_buffer_address(its own session id)
  ["write", session, local, remote, n]  transfer_sync_write from here: the return
  ["exit"]

With --cuda GPU the buffers are torch CUDA tensors on that GPU (their bytes go
through .cpu()).
The process exits when stdin closes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import time

import numpy as np

from ferry.mooncake import TransferEngine


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hostname", default="127.0.0.1")
    ap.add_argument("--metadata", default="P2PHANDSHAKE")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--cuda", type=int, default=None, metavar="GPU", help="buffers are CUDA tensors on this GPU")
    args = ap.parse_args()

    cuda = args.cuda is not None
    if cuda:
        import torch

        device = torch.device("cuda", args.cuda)
        torch.cuda.set_device(device)
    engine = TransferEngine()
    rc = engine.initialize(args.hostname, args.metadata, args.protocol, "")
    if rc != 0:
        print(json.dumps({"error": f"initialize returned {rc}: {engine.last_error}"}), flush=True)
        return 1
    print(json.dumps({"session": engine.session_id, "port": engine.get_rpc_port()}), flush=True)

    buffers = {}  # address -> the array or tensor that owns it
    registered = set()  # addresses this peer registered and did not unregister

    def view(addr: int, n: int):
        for base, buf in buffers.items():
            size = buf.numel() if cuda else buf.size
            if base <= addr and addr + n <= base + size:
                return buf[addr - base:addr - base + n]
        raise ValueError(f"[{addr:#x}, +{n}) is in no buffer of this peer")

    def get(addr: int, n: int) -> bytes:
        v = view(addr, n)
        return v.cpu().numpy().tobytes() if cuda else v.tobytes()

    def put(addr: int, b64: str) -> None:
        data = base64.b64decode(b64)
        v = view(addr, len(data))
        if cuda:
            v.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            torch.cuda.synchronize()
        else:
            v[:] = np.frombuffer(data, dtype=np.uint8)

    for line in sys.stdin:
        cmd, *a = json.loads(line)
        try:
            if cmd == "exit":
                print(json.dumps({"ok": None}), flush=True)
                break
            if cmd == "alloc":
                n, seed, register = a
                data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8) if seed is not None \
                    else np.zeros(n, dtype=np.uint8)
                buf = torch.from_numpy(data).to(device) if cuda else data
                addr = buf.data_ptr() if cuda else buf.ctypes.data
                buffers[addr] = buf
                if register:
                    if engine.register_memory(addr, n) != 0:
                        raise RuntimeError(f"register_memory: {engine.last_error}")
                    registered.add(addr)
                result = addr
            elif cmd == "register":
                result = engine.register_memory(a[0], a[1])
                if result == 0:
                    registered.add(a[0])
            elif cmd == "unregister":
                result = engine.unregister_memory(a[0])
                if result == 0:
                    registered.discard(a[0])
            elif cmd == "free":
                buf = buffers.pop(a[0])
                end = a[0] + (buf.numel() if cuda else buf.size)
                for r in [r for r in registered if a[0] <= r < end]:
                    engine.unregister_memory(r)
                    registered.discard(r)
                result = None
            elif cmd == "get":
                result = base64.b64encode(get(a[0], a[1])).decode()
            elif cmd == "sha256":
                result = hashlib.sha256(get(a[0], a[1])).hexdigest()
            elif cmd == "put":
                result = put(a[0], a[1])
            elif cmd == "notifies":
                result = [[n.name, n.msg] for n in engine.get_notifies()]
            elif cmd == "wait_notifies":
                seconds, addr, n, then_put = a
                deadline = time.monotonic() + seconds
                got = engine.get_notifies()
                while not got and time.monotonic() < deadline:
                    time.sleep(0.0002)  # seen at once: what is tested is what lands before it
                    got = engine.get_notifies()
                if got and then_put is not None:
                    put(addr, then_put)
                snapshot = get(addr, n)
                result = [[[x.name, x.msg] for x in got], base64.b64encode(snapshot).decode()]
            elif cmd == "first":
                result = engine.get_first_buffer_address(engine.session_id)
            elif cmd == "write":
                result = engine.transfer_sync_write(*a)
            else:
                raise ValueError(f"unknown command {cmd!r}")
            print(json.dumps({"ok": result}), flush=True)
        except Exception as e:  # the test decides
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
