"""The core ferry API: one-sided write and read against an exported region,
with a notification that arrives after the data.

Two processes on one host:

    PYTHONPATH=build/python /usr/bin/python3 python/examples/ferry_api.py target 127.0.0.1:7300
    PYTHONPATH=build/python /usr/bin/python3 python/examples/ferry_api.py initiator 127.0.0.1:7300

The target registers a NumPy array, exports it and sends the descriptor; the
initiator writes into it with a notification, then reads it back.
"""
import sys
import time

import numpy as np

import ferry

N = 1_000_003  # odd on purpose


def target(address):
    with ferry.Engine(listen=address) as engine:
        kv = np.zeros(N, dtype=np.float32)
        region = engine.reg(kv)
        conn = engine.accept(timeout=60)
        desc = engine.export_region(region)
        conn.notify(desc.serialize(), timeout=10)         # the descriptor, through any channel
        note = conn.wait_notification(timeout=60)          # arrives only after the data is in place
        assert note == b"kv block 7 ready", note
        assert np.array_equal(kv, np.arange(N, dtype=np.float32))
        print(f"target: got {note.decode()!r}, data verified")
        conn.wait_notification(timeout=60)                 # the initiator is done reading


def initiator(address):
    with ferry.Engine() as engine:
        src = np.arange(N, dtype=np.float32)
        back = np.zeros_like(src)
        engine.reg(src)
        engine.reg(back)
        conn = None
        for _ in range(300):  # the target may not be listening yet
            try:
                conn = engine.connect(address, timeout=30)
                break
            except ferry.Unavailable:
                time.sleep(0.1)
        assert conn is not None, f"nobody listens on {address}"
        desc = ferry.RemoteDescriptor.parse(conn.wait_notification(timeout=30))
        conn.write(src, desc, 0, notification=b"kv block 7 ready", timeout=30)
        conn.read(back, desc, 0, timeout=30)
        assert np.array_equal(back, src)
        conn.notify(b"done", timeout=10)
        print(f"initiator: wrote and read back {src.nbytes} bytes, verified")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("target", "initiator"):
        sys.exit(f"usage: {sys.argv[0]} target|initiator HOST:PORT")
    (target if sys.argv[1] == "target" else initiator)(sys.argv[2])
