"""The blocking calls' deadlines are the C++ ones (Transfer::wait_or_cancel).

Past its deadline a receive, write or read that has not started moving data
is cancelled and raises DeadlineExceeded. One already moving data is stopped
(a write; over TCP a read, and a receive after a grace of half the peer
timeout, so a message already landing is returned, not lost) and raises
DeadlineExceeded once none of it lands any more; one that cannot stop (a read
on the local transport) runs to its end and returns its own result. Either
way no call returns while the engine still uses its buffer. A send raises
DeadlineExceeded at its deadline and goes on. Over both transports, between
two engines of this process.
"""

import time

import numpy as np
import pytest

import ferry
from conftest import engine_pair

BIG = 128 << 20  # takes tens of milliseconds on either transport: far past a 1 ms deadline


@pytest.fixture(params=["tcp", "local"])
def pair(request):
    with engine_pair(transport=request.param, local_same_process=True) as p:
        assert p[1].transport_name == request.param
        yield p


def pattern(n, seed):
    data = np.zeros(n, dtype=np.uint8)
    data[::4096] = np.random.default_rng(seed).integers(1, 256, len(data[::4096]), dtype=np.uint8)
    data[-1] = 0xAB
    return data


def test_a_receive_matched_before_its_deadline_returns_its_message(pair):
    a, ca, b, cb = pair
    src, dst = pattern(BIG, 1), np.zeros(BIG + 3, dtype=np.uint8)
    b.reg(src)
    a.reg(dst)
    sent = cb.send_async(src)
    time.sleep(0.1)  # the message is announced: the receive matches at once
    assert ca.recv(dst[3:], timeout=0.001) == BIG
    assert np.array_equal(dst[3:], src), "recv returned before its bytes were in place"
    sent.wait(30)
    # The next receive gets the next message, not the rest of the last one.
    small = np.arange(8, dtype=np.uint8)
    b.reg(small)
    cb.send_async(small)
    assert ca.recv(dst[:64], timeout=10) == 8
    assert np.array_equal(dst[:8], small)
    # With nothing sent the deadline holds: the receive is cancelled.
    with pytest.raises(ferry.DeadlineExceeded, match="cancelled"):
        ca.recv(dst[:64], timeout=0.02)
    assert ferry._ferry._graveyard_size() == 0


@pytest.mark.parametrize("op", ["write", "writev", "read", "readv"])
def test_one_sided_calls_moving_data_at_their_deadline_stop_or_end(pair, op):
    a, ca, b, cb = pair
    exported = np.zeros(BIG, dtype=np.uint8) if op.startswith("write") else pattern(BIG, 2)
    region = b.reg(exported)
    desc = b.export_region(region)
    local = pattern(BIG, 3) if op.startswith("write") else np.zeros(BIG, dtype=np.uint8)
    a.reg(local)
    half = BIG // 2
    call = {
        "write": lambda: ca.write(local, desc, timeout=0),
        "writev": lambda: ca.writev([(local[:half], desc, 0), (local[half:], desc, half)], timeout=0),
        "read": lambda: ca.read(local, desc, timeout=0),
        "readv": lambda: ca.readv([(local[:half], desc, 0), (local[half:], desc, half)], timeout=0),
    }[op]
    target = exported if op.startswith("write") else local
    stops = op.startswith("write") or ca.transport_name == "tcp"
    try:
        call()
        assert not stops, f"{op} moving data past its deadline was not stopped"
        assert np.array_equal(local, exported), f"{op} returned before its bytes were in place"
    except ferry.DeadlineExceeded as e:
        assert stops, f"{op} on the local transport cannot stop, yet raised {e}"
        assert "none of it lands" in str(e) or "cancelled" in str(e), str(e)
    # Whatever happened, nothing of it lands after the call returned.
    seen = target.copy()
    time.sleep(0.3)
    assert np.array_equal(target, seen), f"bytes of {op} landed after the call returned"
    assert ferry._ferry._graveyard_size() == 0, "no buffer is left in use"
    # The connection still works.
    small = np.arange(64, dtype=np.uint8)
    a.reg(small)
    ca.write(small, desc, timeout=10)
    assert np.array_equal(exported[:64], small)


def test_a_send_raises_at_its_deadline_and_goes_on(pair):
    a, ca, b, cb = pair
    src, dst = pattern(4 << 20, 4), np.zeros(4 << 20, dtype=np.uint8)
    b.reg(src)
    a.reg(dst)
    start = time.monotonic()
    with pytest.raises(ferry.DeadlineExceeded, match="will still be delivered"):
        cb.send(src, timeout=0.2)  # the peer posts no receive
    assert time.monotonic() - start < 2
    assert ca.recv(dst, timeout=30) == len(src), "the send went on"
    assert np.array_equal(dst, src)


def test_a_wait_without_a_deadline_says_it_is_still_waiting(caplog):
    # timeout=None waits for ever; after 5 s the `ferry` logger says so once,
    # rather than hanging without a word.
    with ferry.Engine() as a, ferry.Engine() as b:
        dialed = []  # held until the end: a dropped connection closes, and a would see its peer leave

        def late_peer():
            time.sleep(5.5)
            dialed.append(b.connect(a.address, timeout=10))

        import threading
        t = threading.Thread(target=late_peer)
        t.start()
        with caplog.at_level("WARNING", logger="ferry"):
            conn = a.accept()
        t.join(timeout=10)
        assert conn.health().ok()
    said = [r for r in caplog.records if "still waiting for a peer" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert "timeout=None waits for ever" in said[0].getMessage()
