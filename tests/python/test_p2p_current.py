"""ferry.p2p, today's UCCL era: the optional constructor arguments,
get_metadata / add_remote_endpoint / remove_remote_endpoint,
start_passive_accept, FloatType, XferDesc and the descriptor calls
(register_memory, get_serialized_descs, deserialize_descs, transfer,
check_xfer_state, deregister_memory), and connect with a GPU's PCI address.
Two-process cases use test_p2p.RemoteEndpoint; data is random bytes at odd
sizes, checked where it lands.
"""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest
import torch

import ferry
from ferry import p2p
from peers import make_data
from test_p2p import WAIT, Buf, RemoteEndpoint, connected, reg, wait_done


@pytest.fixture(scope="module")
def remote():
    peer = RemoteEndpoint(gpu_idx=1, num_cpus=None)  # Endpoint(local_gpu_idx=1), today's form
    yield peer
    peer.close()


def test_constructor_arguments_are_optional():
    with p2p.Endpoint() as default, p2p.Endpoint(local_gpu_idx=3) as third:
        assert default.local_gpu_idx == 0 and third.local_gpu_idx == 3
        assert p2p.Endpoint.parse_metadata(third.get_metadata())[2] == 3
        assert default.engine.options.streams == ferry.Options().streams  # ferry's default without num_cpus


def test_float_type_and_reg_with_it():
    assert [m.name for m in p2p.FloatType] == ["kUndefined", "kFloat16", "kBFloat16", "kFloat32",
                                               "kFloat8E4M3FN", "kFloat8E5M2"]
    assert p2p.kBFloat16 is p2p.FloatType.kBFloat16  # exported at module level, as UCCL's binding does
    with p2p.Endpoint() as ep:
        arr = np.zeros(10, dtype=np.float16)
        ok, mr_id = ep.reg(arr.ctypes.data, arr.nbytes, floatType=p2p.FloatType.kFloat16)
        assert ok and mr_id > 0 and ep.dereg(mr_id=mr_id)


def test_add_remote_endpoint_connects_once(remote):
    with p2p.Endpoint() as ep:
        remote.start("accept", timeout=WAIT)
        ok, conn_id = ep.add_remote_endpoint(remote.metadata)
        assert ok and remote.result()[0]
        assert ep.add_remote_endpoint(metadata_bytes=remote.metadata) == (True, conn_id)  # cached
        assert ep.remove_remote_endpoint(conn_id) is True
        assert ep.remove_remote_endpoint(conn_id) is False
        remote.start("accept", timeout=WAIT)
        ok, again = ep.add_remote_endpoint(remote.metadata)  # a new connection after removal
        assert ok and again != conn_id and remote.result()[0]


def test_passive_accept_serves_one_sided_calls_without_accept(remote):
    with p2p.Endpoint() as ep:
        assert ep.start_passive_accept() is True
        target = np.zeros(12_345, dtype=np.uint8)
        ok, blob = ep.advertise(reg(ep, target), target.ctypes.data, target.nbytes)
        assert ok
        ok, remote_conn = remote.call("connect", ep.get_metadata(), timeout=WAIT)
        assert ok
        _, n = remote.array("p", "uint8", 12_345, 300)
        assert remote.call("write", remote_conn, remote.call("reg", Buf("p"), n)[1], Buf("p"), n, blob,
                           timeout=WAIT) is True
        assert target.tobytes() == make_data("uint8", 12_345, 300).tobytes()
        deadline = time.monotonic() + WAIT
        while not ep._conns and time.monotonic() < deadline:  # the background accept registers it
            time.sleep(0.01)
        assert len(ep._conns) == 1


def test_connect_takes_a_pci_address():
    with p2p.Endpoint(0) as a, p2p.Endpoint(1) as b:
        ip, port, _ = p2p.Endpoint.parse_metadata(a.get_metadata())
        ok, conn_id = b.connect(ip, "0000:1b:00.0", port, timeout=5)  # today: (ip, remote_gpu_bdf, port)
        assert ok and a.accept(timeout=5)[0]
        ok, _ = b.connect(remote_ip_addr=ip, remote_gpu_bdf="0000:1b:00.0", remote_port=port, timeout=5)
        assert ok and a.accept(timeout=5)[0]


def test_xfer_desc_values():
    desc = p2p.XferDesc()
    desc.addr, desc.size, desc.mr_id = 4096, 77, 5
    assert repr(desc) == "<XferDesc addr=4096 size=77 mr_id=5>"
    assert desc["size"] == 77 and "rkeys" in desc and desc.lkeys == [] == desc.rkeys
    with pytest.raises(KeyError):
        desc["advertisement"]
    assert p2p.XferHandle(1, "write", 2).transfer_id == 2


def uccl_parse_descs(data: bytes):
    """(addr, size, lkeys, rkeys, blob) per descriptor, read as UCCL's serialize_xfer_descs writes them."""
    (count,), at, out = struct.unpack_from("<Q", data), 8, []
    for _ in range(count):
        addr, size, keys = struct.unpack_from("<QQQ", data, at)
        at += 24
        lkeys = list(struct.unpack_from(f"<{keys}I", data, at))
        rkeys = list(struct.unpack_from(f"<{keys}I", data, at + 4 * keys))
        at += 8 * keys
        (blob_len,) = struct.unpack_from("<Q", data, at)
        out.append((addr, size, lkeys, rkeys, data[at + 8:at + 8 + blob_len]))
        at += 8 + blob_len
    assert at == len(data)
    return out


def test_descriptors_round_trip_in_uccl_layout():
    with p2p.Endpoint() as ep:
        tensors = [torch.zeros(1001, dtype=torch.uint8), torch.zeros(333, dtype=torch.float16)]
        descs = ep.register_memory(tensors)
        assert [(d.addr, d.size) for d in descs] == [(t.data_ptr(), t.numel() * t.element_size()) for t in tensors]
        wire = ep.get_serialized_descs(descs)
        assert [(a, s) for a, s, *_ in uccl_parse_descs(wire)] == [(d.addr, d.size) for d in descs]
        back = ep.deserialize_descs(wire)
        assert back == descs and all(b.mr_id == (1 << 64) - 1 for b in back)  # no registration here
        assert ep.deserialize_descs(ep.get_serialized_descs([])) == []
        ep.deregister_memory(descs)
        assert ep._regions == {}
        with pytest.raises(RuntimeError, match="not a tensor"):
            ep.register_memory([tensors[0], 123])
        assert ep._regions == {}  # the first one was dropped again
        with pytest.raises(RuntimeError, match="Invalid serialized"):
            ep.deserialize_descs(wire[:-3])
        with pytest.raises(TypeError):
            ep.get_serialized_descs([{"addr": 1}])


def test_transfer_write_and_read(remote):
    with p2p.Endpoint() as ep:
        conn_id, remote_conn = connected(remote, ep)
        remote.call("array", "r0", "uint8", 70_001, None)
        remote.call("array", "r1", "uint8", 3, None)
        local = [torch.from_numpy(make_data("uint8", 70_001, 310)), torch.from_numpy(make_data("uint8", 3, 311))]
        mine = ep.register_memory(local)
        theirs = ep.deserialize_descs(remote.call("serialized_descs", ["r0", "r1"]))
        assert [d.size for d in theirs] == [70_001, 3]
        ok, tid = ep.transfer(conn_id, "write", mine, theirs)
        assert ok
        deadline = time.monotonic() + WAIT
        while not ep.check_xfer_state(p2p.XferHandle(conn_id, "write", tid)) and time.monotonic() < deadline:
            pass
        assert [remote.data("r0"), remote.data("r1")] == [t.numpy().tobytes() for t in local]
        back = [torch.zeros(70_001, dtype=torch.uint8), torch.zeros(3, dtype=torch.uint8)]
        ok, tid = ep.transfer(conn_id, "read", ep.register_memory(back), theirs)
        assert ok and wait_done(ep, tid) == (True, True)
        assert [b.numpy().tobytes() for b in back] == [t.numpy().tobytes() for t in local]
        with pytest.raises(RuntimeError, match="same size"):
            ep.transfer(conn_id, "write", mine, theirs[:1])
        with pytest.raises(RuntimeError, match="Invalid op_name"):
            ep.transfer(conn_id, "copy", mine, theirs)
        with pytest.raises(RuntimeError, match="Invalid conn_id"):
            ep.transfer(987_654, "write", mine, theirs)
        with pytest.raises(RuntimeError, match="no ferry advertisement"):
            ep.transfer(conn_id, "write", mine[:1], [p2p.XferDesc(0, 3)])
        with pytest.raises(RuntimeError):
            ep.check_xfer_state(424_242)


def test_get_oob_ip_is_the_metadata_address():
    ip = p2p.get_oob_ip()
    assert ip.count(".") == 3
    with p2p.Endpoint() as ep:
        assert p2p.Endpoint.parse_metadata(ep.get_metadata())[0] == ip
