"""The other process of the two-process tests.

`serve` runs in a child started with multiprocessing's spawn method. It starts
an engine, reports its address over the pipe, accepts one connection, then
executes the commands the test sends over the pipe (receive this, send that,
export a region, check it) and answers each with ("ok", result) or
("error", exception class name, message). Every wait has a deadline, and the
child exits when the pipe stays silent for a minute.

Test data is deterministic: `make_data(dtype, count, seed)` on both sides
yields the same random bytes, so each side verifies what it received on its own.
"""

from __future__ import annotations

import threading
import traceback

import numpy as np

WAIT = 30.0  # seconds: the deadline of every ferry wait in the peer


def make_data(dtype: str, count: int, seed: int) -> np.ndarray:
    """`count` elements of `dtype` made of random bytes fixed by `seed`."""
    dt = np.dtype(dtype)
    raw = np.random.default_rng(seed).bytes(count * dt.itemsize)
    return np.frombuffer(raw, dtype=dt).copy()


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Bytewise equality (NaN payloads included)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def make_tensor(dtype: str, count: int, seed: int, device: str = "cpu"):
    import torch

    g = torch.Generator().manual_seed(seed)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        t = torch.randn(count, generator=g, dtype=torch.float32).to(torch_dtype(dtype))
    elif dtype == "bool":
        t = torch.randint(0, 2, (count,), generator=g).to(torch.bool)
    else:
        t = torch.randint(-100, 100, (count,), generator=g, dtype=torch.int64).to(torch_dtype(dtype))
    return t.to(device)


def serve(pipe, listen: str = "127.0.0.1:0", options: dict | None = None) -> None:
    import ferry

    engine = ferry.Engine(listen=listen, **(options or {}))
    pipe.send(("address", engine.address))
    conn = engine.accept(timeout=WAIT)
    keep = {}  # arrays the test refers to by name (exported regions)

    def reply_ok(result=None):
        pipe.send(("ok", result))

    while True:
        if not pipe.poll(60):
            return
        cmd, *args = pipe.recv()
        try:
            if cmd == "exit":
                reply_ok()
                return
            elif cmd == "recv":  # (dtype, count, seed[, capacity_extra])
                dtype, count, seed, *extra = args
                arr = np.zeros(count + (extra[0] if extra else 0), dtype=dtype)
                engine.reg(arr)
                n = conn.recv(arr, timeout=WAIT)
                want = make_data(dtype, count, seed)
                reply_ok((n, same_bytes(arr[:count], want)))
            elif cmd == "send":  # (dtype, count, seed)
                dtype, count, seed = args
                arr = make_data(dtype, count, seed)
                engine.reg(arr)
                conn.send(arr, timeout=WAIT)
                reply_ok()
            elif cmd == "recvv":  # ([(dtype, count)], seed)
                specs, seed = args
                arrs = [np.zeros(c, dtype=d) for d, c in specs]
                for a in arrs:
                    engine.reg(a)
                n = conn.recvv(arrs, timeout=WAIT)
                oks = [same_bytes(a, make_data(d, c, seed + i)) for i, (a, (d, c)) in enumerate(zip(arrs, specs))]
                reply_ok((n, oks))
            elif cmd == "sendv":  # ([(dtype, count)], seed)
                specs, seed = args
                arrs = [make_data(d, c, seed + i) for i, (d, c) in enumerate(specs)]
                for a in arrs:
                    engine.reg(a)
                conn.sendv(arrs, timeout=WAIT)
                reply_ok()
            elif cmd == "recv_async_many":  # ([(dtype, count, seed)]): post all receives, then wait
                arrs = [np.zeros(c, dtype=d) for d, c, _ in args[0]]
                for a in arrs:
                    engine.reg(a)
                transfers = [conn.recv_async(a) for a in arrs]
                sizes = [t.wait(WAIT) for t in transfers]
                oks = [same_bytes(a, make_data(d, c, s)) for a, (d, c, s) in zip(arrs, args[0])]
                reply_ok((sizes, oks))
            elif cmd == "recv_digests":  # (dtype, count, n): n messages, in arrival order, as SHA-1 digests
                import hashlib

                dtype, count, n = args
                digests = []
                for _ in range(n):
                    arr = np.zeros(count, dtype=dtype)
                    engine.reg(arr)
                    assert conn.recv(arr, timeout=WAIT) == arr.nbytes
                    digests.append(hashlib.sha1(arr.tobytes()).hexdigest())
                reply_ok(digests)
            elif cmd == "export":  # (name, dtype, count, seed or None, offset, length)
                name, dtype, count, seed, offset, length = args
                arr = make_data(dtype, count, seed) if seed is not None else np.zeros(count, dtype=dtype)
                region = engine.reg(arr)
                keep[name] = (arr, region)
                reply_ok(engine.export_region(region, offset, length).serialize())
            elif cmd == "torch_export":  # (name, count, device): an int64 CUDA tensor of zeros, exported whole
                import torch

                name, count, device = args
                t = torch.zeros(count, dtype=torch.int64, device=device)
                region = engine.reg(t)
                keep[name] = (t, region)
                reply_ok(engine.export_region(region, 0, 0).serialize())
            elif cmd == "unexport":  # (name): deregister, revoking the exports
                arr, region = keep.pop(args[0])
                engine.dereg(region)
                reply_ok()
            elif cmd == "check":  # (name, byte_offset, dtype, count, seed): bytes at offset equal the data
                name, offset, dtype, count, seed = args
                arr = keep[name][0]
                want = make_data(dtype, count, seed).tobytes()
                reply_ok(arr.tobytes()[offset:offset + len(want)] == want)
            elif cmd == "wait_note":
                reply_ok(conn.wait_notification(timeout=args[0] if args else WAIT))
            elif cmd == "wait_note_then_check":  # (name, offset, dtype, count, seed): the data is there at the note
                note = conn.wait_notification(timeout=WAIT)
                name, offset, dtype, count, seed = args
                want = make_data(dtype, count, seed).tobytes()
                reply_ok((note, keep[name][0].tobytes()[offset:offset + len(want)] == want))
            elif cmd == "notify":
                conn.notify(args[0], timeout=WAIT)
                reply_ok()
            elif cmd == "torch_recv":  # (dtype, count, seed, device)
                import torch

                dtype, count, seed, device = args
                t = torch.zeros(count, dtype=torch_dtype(dtype), device=device)
                engine.reg(t)
                n = conn.recv(t, timeout=WAIT)
                if device != "cpu":
                    torch.cuda.synchronize()
                reply_ok((n, bool(torch.equal(t.cpu(), make_tensor(dtype, count, seed)))))
            elif cmd == "torch_send":  # (dtype, count, seed, device)
                dtype, count, seed, device = args
                t = make_tensor(dtype, count, seed, device)
                engine.reg(t)
                conn.send(t, timeout=WAIT)
                reply_ok()
            elif cmd == "torch_user_recv":  # (count, k, device, stream, slow): wrong elements received
                import torch

                count, k, device, stream, slow = args
                t = torch.zeros(count, dtype=torch.int64, device=device)
                if slow:  # a fill still queued behind a long kernel when the receive is posted
                    with torch.cuda.device(device):  # the tensor's stream, whatever device is current
                        torch.cuda._sleep(slow)
                    t.zero_()
                engine.reg(t)
                n = conn.recv(t, timeout=WAIT, stream=stream)
                want = torch.arange(count, dtype=torch.int64, device=device) * k
                reply_ok((n, int((t != want).sum().item())))
            elif cmd == "torch_user_send":  # (count, k, device, stream, slow)
                import torch

                count, k, device, stream, slow = args
                if slow:  # the producer kernel queued behind a long one
                    with torch.cuda.device(device):
                        torch.cuda._sleep(slow)
                t = torch.arange(count, dtype=torch.int64, device=device) * k
                engine.reg(t)
                conn.send(t, timeout=WAIT, stream=stream)
                reply_ok()
            elif cmd == "close":
                conn.close()
                reply_ok()
            elif cmd == "health":
                reply_ok(conn.health().code.name)
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except Exception as e:  # reported to the test, which decides
            pipe.send(("error", type(e).__name__, f"{e}\n{traceback.format_exc()}"))


def p2p_serve(pipe, base_port: int, gpu_idx: int) -> None:
    """A ferry.p2p endpoint of GPU `gpu_idx` that accepts one peer and then,
    using only the seed's Endpoint API, receives or sends what the test asks."""
    import os

    os.environ["FERRY_P2P_BASE_PORT"] = str(base_port)
    from ferry import p2p

    ep = p2p.Endpoint(local_gpu_idx=gpu_idx, num_cpus=2)
    pipe.send(("port", ep.port))
    ok, ip, remote_gpu, conn_id = ep.accept(timeout=WAIT)
    pipe.send(("accepted", (ok, ip, remote_gpu)))
    while True:
        if not pipe.poll(60):
            return
        cmd, *args = pipe.recv()
        try:
            if cmd == "exit":
                pipe.send(("ok", None))
                return
            elif cmd == "recv":  # (dtype, count, seed)
                dtype, count, seed = args
                arr = np.zeros(count, dtype=dtype)
                ok, mr = ep.reg(arr.ctypes.data, arr.nbytes)
                ok2 = ep.recv(conn_id, mr, arr.ctypes.data, arr.nbytes, timeout=WAIT)
                pipe.send(("ok", (ok and ok2, same_bytes(arr, make_data(dtype, count, seed)))))
            elif cmd == "send":
                dtype, count, seed = args
                arr = make_data(dtype, count, seed)
                ok, mr = ep.reg(arr.ctypes.data, arr.nbytes)
                ok2 = ep.send(conn_id, mr, arr.ctypes.data, arr.nbytes, timeout=WAIT)
                pipe.send(("ok", ok and ok2))
            elif cmd == "recvv":  # ([(dtype, count)], seed)
                specs, seed = args
                arrs = [np.zeros(c, dtype=d) for d, c in specs]
                mrs = [ep.reg(a.ctypes.data, a.nbytes)[1] for a in arrs]
                ok = ep.recvv(conn_id, mrs, [a.ctypes.data for a in arrs], [a.nbytes for a in arrs], len(arrs),
                              timeout=WAIT)
                oks = [same_bytes(a, make_data(d, c, seed + i)) for i, (a, (d, c)) in enumerate(zip(arrs, specs))]
                pipe.send(("ok", (ok, oks)))
            elif cmd == "recv_async":  # ([(dtype, count, seed)]): post all, poll until done
                import time

                arrs = [np.zeros(c, dtype=d) for d, c, _ in args[0]]
                tids = []
                for a in arrs:
                    _, mr = ep.reg(a.ctypes.data, a.nbytes)
                    ok, tid = ep.recv_async(conn_id, mr, a.ctypes.data, a.nbytes)
                    assert ok, ep.last_error
                    tids.append(tid)
                pending, failed, deadline = set(tids), [], time.monotonic() + WAIT
                while pending and time.monotonic() < deadline:
                    for tid in list(pending):
                        ok, done = ep.poll_async(tid)
                        if done:
                            pending.discard(tid)
                            if not ok:
                                failed.append(type(ep.last_error).__name__)
                    time.sleep(0.0005)
                oks = [same_bytes(a, make_data(d, c, s)) for a, (d, c, s) in zip(arrs, args[0])]
                pipe.send(("ok", (not pending, failed, oks)))
            elif cmd == "torch_recv":  # (dtype, count, seed, device): into a tensor, by data_ptr
                import torch

                dtype, count, seed, device = args
                t = torch.zeros(count, dtype=torch_dtype(dtype), device=device)
                nbytes = t.numel() * t.element_size()
                ok, mr = ep.reg(t.data_ptr(), nbytes)
                ok2 = ep.recv(conn_id, mr, t.data_ptr(), nbytes, timeout=WAIT)
                if device != "cpu":
                    torch.cuda.synchronize()
                pipe.send(("ok", (ok and ok2, bool(torch.equal(t.cpu(), make_tensor(dtype, count, seed))))))
            elif cmd == "torch_send":
                dtype, count, seed, device = args
                t = make_tensor(dtype, count, seed, device)
                nbytes = t.numel() * t.element_size()
                ok, mr = ep.reg(t.data_ptr(), nbytes)
                ok2 = ep.send(conn_id, mr, t.data_ptr(), nbytes, timeout=WAIT)
                pipe.send(("ok", ok and ok2))
            elif cmd == "recv_size":  # (capacity): a receive of exactly `capacity` bytes; report success
                arr = np.zeros(args[0], dtype=np.uint8)
                _, mr = ep.reg(arr.ctypes.data, arr.nbytes)
                ok = ep.recv(conn_id, mr, arr.ctypes.data, arr.nbytes, timeout=WAIT)
                pipe.send(("ok", (ok, type(ep.last_error).__name__ if not ok else None)))
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except Exception as e:
            pipe.send(("error", type(e).__name__, f"{e}\n{traceback.format_exc()}"))



def stream_waits_on_fresh_streams(pipe, count: int, rounds: int, options: dict) -> None:
    """Two engines of this process over TCP on GPU 0, a sending to b. Each
    round makes a CUDA stream of its own (cuStreamCreate: made then, not
    taken from torch's pool), makes it wait for a receive of `count` int64
    into GPU memory, queues a sum behind the wait and only then sends: the
    receive lands through ferry's streams while the new stream waits, the
    first time on streams made just after it (the connection's kit).
    Sends ("ok", ([(landed, sum right), ...], CUDA objects made late, (bytes
    a staged out, bytes b staged in))) or ("error", name, text)."""
    import ctypes

    import torch

    import ferry

    try:
        a, b = ferry.Engine(**options), ferry.Engine(**options)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("conn", a.accept(timeout=WAIT)), name="accept")
        t.start()
        cb = b.connect(a.address, timeout=WAIT)
        t.join(WAIT)
        ca = got["conn"]
        src = torch.arange(count, dtype=torch.int64, device="cuda:0") * 3
        dst = torch.zeros(count, dtype=torch.int64, device="cuda:0")
        dst.sum()  # loaded before any wait (a first launch waits for every stream)
        host = torch.zeros(count, dtype=torch.int64)
        a.reg(src)
        b.reg(dst)
        b.reg(host)
        torch.cuda.synchronize()
        # A wait on a's end first, released by a small host message: it fills
        # a's kit (a connection's CUDA objects are made ahead by its first
        # stream_wait); then a sends from GPU memory and b receives into host
        # memory, so b's kit stays empty until the rounds' first wait.
        libcuda = ctypes.CDLL("libcuda.so.1")

        def new_stream():
            handle = ctypes.c_void_p()
            assert libcuda.cuStreamCreate(ctypes.byref(handle), 1) == 0  # CU_STREAM_NON_BLOCKING
            return torch.cuda.ExternalStream(handle.value)

        note = torch.zeros(16, dtype=torch.int64)
        a.reg(note)
        r = ca.recv_async(note, stream=None)
        ca.stream_wait(r, new_stream())
        cb.send(host[:16], stream=None, timeout=WAIT)
        r.wait(WAIT)
        r = cb.recv_async(host)
        ca.send_async(src, stream=None).wait(WAIT)
        r.wait(WAIT)
        want = 3 * count * (count - 1) // 2
        results = []
        for _ in range(rounds):
            stream = new_stream()
            dst.zero_()
            torch.cuda.synchronize()
            r = cb.recv_async(dst, stream=None)
            cb.stream_wait(r, stream)
            with torch.cuda.stream(stream):
                total = dst.sum()
            s = ca.send_async(src, stream=None)
            n = r.wait(WAIT)
            s.wait(WAIT)
            # The sum runs on `stream` once the wait ends, which may be after
            # r.wait() returned; item() reads on the current stream, which a
            # non-blocking stream does not order with.
            stream.synchronize()
            results.append((n, total.item() == want))
        late = a.metrics()["gpu_objects_made_late"] + b.metrics()["gpu_objects_made_late"]
        staged = (a.metrics()["staging"]["to_host"]["bytes"], b.metrics()["staging"]["to_device"]["bytes"])
        pipe.send(("ok", (results, late, staged)))
        b.close()
        a.close()
    except Exception as e:  # noqa: BLE001  (reported to the test)
        pipe.send(("error", type(e).__name__, str(e)))
