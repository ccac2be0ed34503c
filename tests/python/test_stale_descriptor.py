"""Memory registered again at the same address is a new registration: the
old descriptor reaches nothing, on both transports, for writes and reads,
and the new one works. (Allocators hand an address out again as soon as it
is freed; a peer still holding the old descriptor must be refused before a
byte moves.)"""

import numpy as np
import pytest

import ferry


def test_the_old_descriptor_of_memory_registered_again_is_refused(transport_pair):
    a, ca, b, cb = transport_pair  # b writes and reads a's memory
    n = 300_007
    theirs = np.zeros(n, dtype=np.uint8)
    mine = np.random.default_rng(5).integers(0, 256, n, dtype=np.uint8)
    back = np.zeros(n, dtype=np.uint8)
    b.reg(mine)
    b.reg(back)
    first = a.reg(theirs)
    old = a.export_region(first)
    cb.write(mine[:4099], old, 3, timeout=10)
    assert np.array_equal(theirs[3:4102], mine[:4099])

    a.dereg(first)
    second = a.reg(theirs)
    assert second.base == first.base
    before = theirs.copy()
    with pytest.raises(ferry.NotFound):
        cb.write(mine[:n - 50], old, 50, notification=b"stale", timeout=10)
    with pytest.raises(ferry.NotFound):
        cb.read(back, old, 0, timeout=10)
    assert np.array_equal(theirs, before), "a write with the old descriptor landed"
    assert not back.any(), "a read with the old descriptor delivered bytes"

    fresh = a.export_region(second)
    cb.write(mine[:n - 50], fresh, 50, notification=b"fresh", timeout=10)
    assert ca.wait_notification(timeout=10) == b"fresh"  # the refused write's never came
    assert np.array_equal(theirs[50:], mine[:n - 50])
    cb.read(back, fresh, 0, timeout=10)
    assert np.array_equal(back, theirs)
