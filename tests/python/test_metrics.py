"""engine.metrics() and engine.metrics_text(): what two engines of this
process count while they move random bytes, on each transport."""

import numpy as np


def test_metrics_count_sends_writes_and_reads_with_their_bytes(transport_pair):
    a, ca, b, cb = transport_pair
    t = ca.transport_name
    rng = np.random.default_rng(3)
    src = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    dst = np.zeros(1 << 20, dtype=np.uint8)
    b.reg(src)
    a.reg(dst)
    desc = a.export_region(a.reg(np.zeros(1 << 20, dtype=np.uint8)))
    sizes = [int(x) for x in rng.integers(1, 1 << 20, 5)]
    for n in sizes:
        r = ca.recv_async(dst)
        cb.send(src[:n], timeout=10)
        assert r.wait(10) == n
        cb.write(src[:n], desc, 0, timeout=10)
    m = b.metrics()
    assert m["transfers"][("send", t)]["succeeded"] == len(sizes)
    assert m["transfers"][("send", t)]["bytes"] == sum(sizes)
    assert m["transfers"][("write", t)]["bytes"] == sum(sizes)
    assert m["transfers"][("write", t)]["within"][-1] == len(sizes)
    assert len(m["transfers"][("write", t)]["within"]) == len(m["latency_bounds"])
    assert m["connections"] == {t: 1}
    got = a.metrics()["transfers"][("recv", t)]
    assert (got["succeeded"], got["bytes"]) == (len(sizes), sum(sizes))
    # By peer: the one connection's, under the address each end sees.
    assert m["peers"][(cb.peer_address, "write")] == {"succeeded": len(sizes), "failed": 0, "bytes": sum(sizes)}
    assert a.metrics()["peers"][(ca.peer_address, "recv")]["bytes"] == sum(sizes)
    if t == "tcp":  # what the data streams carried (small messages ride the control stream)
        assert 0 < b.metrics()["nics"]["any"]["sent"] <= 2 * sum(sizes)
    text = b.metrics_text()
    assert f'ferry_transfer_bytes_total{{op="send",transport="{t}"}} {sum(sizes)}\n' in text
    assert f'ferry_transfers_total{{op="write",transport="{t}",result="ok"}} {len(sizes)}\n' in text
    # Host memory: no CUDA object was made on any thread, nothing staged.
    assert m["gpu_objects_made_late"] == 0
    assert m["staging"] == {} and a.metrics()["staging"] == {}
    # Nothing refused, no path lost, nothing resent; every message was received.
    assert (m["handshakes_refused"], m["paths_lost"], m["resent"], m["held_bytes"]) == ({}, {}, {}, 0)
    assert "ferry_gpu_objects_made_late_total 0\n" in text
