"""Read-only Python memory (bytes, a read-only memoryview, a NumPy array with
writeable=False) may be registered and sent from, but no peer and no local
receive may write into it: an immutable bytes object that changes breaks
every Python program holding it (hashes, interned constants, dict keys).

Two engines of this process, one connection (conftest.engine_pair)."""

import numpy as np
import pytest

import ferry
from conftest import engine_pair

WAIT = 10
SIZE = 64 * 1024 + 3  # past the inline limit: the bulk path


def fresh_bytes(fill: int) -> bytes:
    """A bytes object of its own (never a cached constant)."""
    return bytes(bytearray([fill]) * SIZE)


READ_ONLY = {
    "bytes": lambda: fresh_bytes(0x11),
    "memoryview": lambda: memoryview(bytearray([0x22]) * SIZE).toreadonly(),
    "numpy": lambda: np.frombuffer(fresh_bytes(0x33), dtype=np.uint8),
}


def snapshot(obj) -> bytes:
    return bytes(memoryview(obj).cast("B"))


@pytest.mark.parametrize("kind", sorted(READ_ONLY))
def test_an_export_of_read_only_memory_is_refused_and_a_peer_cannot_change_it(kind):
    with engine_pair() as (a, _, b, cb):
        data = READ_ONLY[kind]()
        before = snapshot(data)
        region = a.reg(data)
        for args in [(), (0, 100), (SIZE - 1, 1)]:
            try:
                desc = a.export_region(region, *args)
            except ferry.InvalidArgument as e:
                assert "read-only" in str(e) and "writable" in str(e), str(e)
                continue
            # Exported: a peer may now write into memory Python holds immutable.
            src = bytearray(b"\xee") * desc.length
            b.reg(src)
            cb.write(src, desc, timeout=WAIT)
            changed = snapshot(data) != before
            pytest.fail(f"export_region{args} of {kind} was not refused; a peer's write "
                        f"{'changed' if changed else 'did not change'} the {kind} object")
        assert snapshot(data) == before


@pytest.mark.parametrize("kind", sorted(READ_ONLY))
def test_read_only_memory_is_still_a_source(kind):
    with engine_pair() as (a, ca, b, cb):
        data = READ_ONLY[kind]()
        a.reg(data)
        out = bytearray(SIZE)
        b.reg(out)
        t = cb.recv_async(out)
        ca.send(data, timeout=WAIT)
        assert t.wait(WAIT) == SIZE and bytes(out) == snapshot(data)
        # And one-sided, into a writable export of the peer.
        target = bytearray(SIZE)
        desc = b.export_region(b.reg(target))
        ca.write(data, desc, timeout=WAIT)
        assert bytes(target) == snapshot(data)


@pytest.mark.parametrize("kind", sorted(READ_ONLY))
def test_nothing_is_received_or_read_into_read_only_memory(kind):
    with engine_pair() as (a, ca, b, cb):
        data = READ_ONLY[kind]()
        before = snapshot(data)
        region = a.reg(data)
        src = bytearray(b"\xee") * SIZE
        desc = b.export_region(b.reg(src))
        # Named as the object itself: refused by the buffer protocol's flag.
        with pytest.raises(ValueError, match="read-only"):
            ca.recv(data, timeout=WAIT)
        with pytest.raises(ValueError, match="read-only"):
            ca.read(data, desc, timeout=WAIT)
        # Named by address: the registration remembers the memory is read-only.
        raw = (region.base, region.length)
        inside = (region.base + 5, 7)
        for dst in [raw, inside]:
            ops = [("recv", lambda d: ca.recv_async(d)), ("recvv", lambda d: ca.recvv_async([d])),
                   ("read", lambda d: ca.read_async(d, desc)), ("readv", lambda d: ca.readv_async([(d, desc, 0)]))]
            for name, op in ops:
                try:
                    t = op(dst)
                except ferry.InvalidArgument as e:
                    assert "read-only" in str(e), str(e)
                    continue
                if name.startswith("recv"):
                    cb.send(src, size=dst[1], timeout=WAIT)  # what the posted receive takes
                try:
                    t.wait(WAIT)
                except ferry.FerryError:
                    pass
                changed = snapshot(data) != before
                pytest.fail(f"{name} into the {kind}'s memory by address was posted; it "
                            f"{'changed' if changed else 'did not change'} the object")
        assert snapshot(data) == before


def test_writable_memory_still_exports_and_a_dereg_ends_the_refusal():
    with engine_pair() as (a, _, b, cb):
        writable = bytearray(SIZE)
        desc = a.export_region(a.reg(writable))
        src = bytearray(b"\x5a") * SIZE
        b.reg(src)
        cb.write(src, desc, timeout=WAIT)
        assert writable == src
        # The same read-only object, registered twice: refused until both go.
        data = fresh_bytes(0x44)
        r1 = a.reg(data)
        r2 = a.reg(data)
        assert r1.id == r2.id
        a.dereg(r1)
        with pytest.raises(ferry.InvalidArgument, match="read-only"):
            a.export_region(r2)
        a.dereg(r2)
        with pytest.raises(ferry.NotFound):
            a.export_region(r2)
