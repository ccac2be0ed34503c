"""Notes of writes that failed or were cancelled: Connection.wait_note and
poll_note give them as not delivered, in the order the writes were posted;
wait_notification and poll_notification never show them. Two engines in
this process, over each transport."""

from __future__ import annotations


import numpy as np
import pytest

import ferry
from conftest import engine_pair

WAIT = 30


@pytest.fixture(params=["tcp", "local"])
def pair(request):
    with engine_pair(transport=request.param, local_same_process=True) as p:
        yield p


def random_bytes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_failed_write_note_comes_in_order_as_not_delivered(pair):
    a, ca, b, cb = pair
    gone = np.zeros(4099, dtype=np.uint8)
    gone_region = a.reg(gone)
    gone_desc = a.export_region(gone_region)
    a.dereg(gone_region)  # withdrawn: the writes below fail on the peer
    target = np.zeros(70_001, dtype=np.uint8)
    desc = a.export_region(a.reg(target))
    src = random_bytes(70_001, 1)
    b.reg(src)

    with pytest.raises(ferry.NotFound):
        cb.write(src[:4099], gone_desc, 0, b"block 1 lost", timeout=WAIT)
    cb.write(src[3:], desc, 3, b"block 2 in place", timeout=WAIT)

    first = ca.wait_note(timeout=WAIT)
    assert isinstance(first, ferry.Note)
    assert (first.message, first.delivered) == (b"block 1 lost", False)
    assert "not delivered" in repr(first)
    second = ca.wait_note(timeout=WAIT)
    assert (second.message, second.delivered) == (b"block 2 in place", True)
    assert np.array_equal(target[3:], src[3:]) and not target[:3].any()
    assert ca.poll_note() is None

    # The string stream drops the undelivered one and keeps the order of the rest.
    with pytest.raises(ferry.NotFound):
        cb.write(src[:10], gone_desc, 0, b"lost again", timeout=WAIT)
    cb.notify(b"after it", timeout=WAIT)
    assert ca.wait_notification(timeout=WAIT) == b"after it"
    assert ca.poll_notification() is None
    assert ca.poll_note() is None
    with pytest.raises(ferry.DeadlineExceeded, match="no notification from connection"):
        ca.wait_note(timeout=0.1)


def test_cancelled_write_note_says_whether_it_landed(pair):
    a, ca, b, cb = pair
    size = 256 << 20
    target = np.zeros(size, dtype=np.uint8)
    desc = a.export_region(a.reg(target))
    src = random_bytes(size, 2)
    b.reg(src)

    t = cb.write_async(src, desc, 0, b"big one")
    stopped = t.cancel()  # blocks until no byte of it lands any more
    note = ca.wait_note(timeout=WAIT)
    assert note.message == b"big one"
    if stopped:
        assert t.status().code == ferry.Code.CANCELLED
        assert not note.delivered
        snapshot = target.copy()  # nothing lands after the cancel returned
        cb.notify(b"fence", timeout=WAIT)
        assert ca.wait_note(timeout=WAIT).message == b"fence"
        assert np.array_equal(snapshot, target)
    else:
        assert t.wait(WAIT) == size
        assert note.delivered
        assert np.array_equal(target, src)

    # The connection carries on: the same blocks again, in full.
    cb.write(src, desc, 0, b"again", timeout=WAIT)
    again = ca.wait_note(timeout=WAIT)
    assert (again.message, again.delivered) == (b"again", True)
    assert np.array_equal(target, src)
