"""One side of tests/netns/two_hosts_test.sh, run inside a network namespace
that stands for a host: the target publishes what a peer on another host
needs (a metadata blob, a directory entry, NIXL agent metadata, a Mooncake
session name) into a shared folder, and the initiator in the other namespace
reaches it using only that, moving random bytes both ways and checking them.

    two_hosts_peer.py engine-target DIR      [FERRY_DIRECTORY, FERRY_NAME: publish by name]
    two_hosts_peer.py engine-initiator DIR   [--by-name NAME: connect by name]
    two_hosts_peer.py nixl-target DIR
    two_hosts_peer.py nixl-initiator DIR
    two_hosts_peer.py mooncake-target DIR HOST
    two_hosts_peer.py mooncake-initiator DIR

A target writes DIR/<kind>.json when ready and exits 0 once the initiator's
bytes are in place and verified; everything waits with a deadline. Exit 1 on
any failure, saying what.
"""

import hashlib
import json
import os
import sys
import time

import numpy as np

SIZE = (1 << 20) + 13  # odd on purpose
DEADLINE_S = 30


def pattern(seed, n=SIZE):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def sha(a):
    return hashlib.sha256(a.tobytes()).hexdigest()


def publish(folder, kind, fields):
    tmp = os.path.join(folder, kind + ".tmp")
    with open(tmp, "w") as f:
        json.dump(fields, f)
    os.rename(tmp, os.path.join(folder, kind + ".json"))


def wait_for(folder, kind):
    path = os.path.join(folder, kind + ".json")
    until = time.monotonic() + DEADLINE_S
    while not os.path.exists(path):
        if time.monotonic() > until:
            sys.exit(f"FAIL: {kind}.json never appeared")
        time.sleep(0.05)
    with open(path) as f:
        return json.load(f)


def fail(what):
    print("FAIL: " + what, flush=True)
    sys.exit(1)


def engine_target(folder):
    import ferry
    with ferry.Engine(ferry.apply_environment(_options(listen="0.0.0.0:0"))) as e:
        if e.address.startswith("127."):
            fail(f"an engine listening on 0.0.0.0 publishes {e.address}")
        mem = pattern(1)
        region = e.reg(mem)
        desc = e.export_region(region)
        publish(folder, "engine", {"metadata": e.metadata.hex(), "address": e.address,
                                   "descriptor": desc.serialize().hex(), "sha": sha(mem)})
        conn = e.accept(timeout=DEADLINE_S)
        note = conn.wait_notification(timeout=DEADLINE_S)
        if note != b"written":
            fail(f"unexpected note {note!r}")
        expected = pattern(1)
        expected[7:7 + 4096] = pattern(2, 4096)
        if not np.array_equal(mem, expected):
            fail("the initiator's write did not land as sent")
        print(f"engine target at {e.address}: read and write verified", flush=True)


def _options(**fields):
    import ferry
    o = ferry.Options()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def engine_initiator(folder, by_name=None):
    import ferry
    t = wait_for(folder, "engine")
    with ferry.Engine(ferry.apply_environment(ferry.Options())) as e:
        peer = by_name if by_name else bytes.fromhex(t["metadata"])
        conn = e.connect(peer, timeout=DEADLINE_S)
        desc = ferry.RemoteDescriptor.parse(bytes.fromhex(t["descriptor"]))
        into = np.zeros(SIZE, dtype=np.uint8)
        e.reg(into)
        conn.read(into, desc, timeout=DEADLINE_S)
        if sha(into) != t["sha"]:
            fail("the bytes read differ from the target's")
        src = pattern(2, 4096)
        e.reg(src)
        conn.write(src, desc, 7, timeout=DEADLINE_S)
        conn.notify(b"written", timeout=DEADLINE_S)
        print(f"engine initiator reached {conn.peer_address} by {'name' if by_name else 'metadata'}", flush=True)


def nixl_target(folder):
    from nixl_cu12._api import nixl_agent, nixl_agent_config
    agent = nixl_agent("decode", nixl_agent_config(backends=["FERRY"]))
    pool = np.zeros(SIZE, dtype=np.uint8)
    agent.register_memory([(pool.ctypes.data, pool.nbytes, 0, "")], "DRAM", backends=["FERRY"])
    publish(folder, "nixl", {"md": agent.get_agent_metadata().hex(), "base": pool.ctypes.data})
    until, seen = time.monotonic() + DEADLINE_S, {}
    while not seen and time.monotonic() < until:
        seen = agent.get_new_notifs()
        time.sleep(0.002)
    if seen != {"prefill": [b"req-1 done"]}:
        fail(f"decode got {seen!r}")
    if not np.array_equal(pool[5:5 + 64 * 1024], pattern(3, 64 * 1024)):
        fail("the blocks NIXL wrote did not land as sent")
    print("nixl target: blocks and notification verified", flush=True)


def nixl_initiator(folder):
    from nixl_cu12._api import nixl_agent, nixl_agent_config
    t = wait_for(folder, "nixl")
    agent = nixl_agent("prefill", nixl_agent_config(backends=["FERRY"]))
    src = pattern(3, 64 * 1024)
    agent.register_memory([(src.ctypes.data, src.nbytes, 0, "")], "DRAM", backends=["FERRY"])
    if agent.add_remote_agent(bytes.fromhex(t["md"])) != b"decode":
        fail("the metadata named another agent")
    blocks = 16
    size = src.nbytes // blocks
    local = agent.prep_xfer_dlist("NIXL_INIT_AGENT", [(src.ctypes.data + i * size, size, 0) for i in range(blocks)],
                                  "DRAM", backends=["FERRY"])
    remote = agent.prep_xfer_dlist("decode", [(t["base"] + 5 + i * size, size, 0) for i in range(blocks)], "DRAM",
                                   backends=["FERRY"])
    handle = agent.make_prepped_xfer("WRITE", local, list(range(blocks)), remote, list(range(blocks)), b"req-1 done")
    state = agent.transfer(handle)
    until = time.monotonic() + DEADLINE_S
    while state == "PROC" and time.monotonic() < until:
        state = agent.check_xfer_state(handle)
        time.sleep(0.001)
    if state != "DONE":
        fail(f"the NIXL write ended {state}")
    print("nixl initiator: write done", flush=True)


def mooncake_target(folder, host):
    from ferry.mooncake import TransferEngine
    engine = TransferEngine()
    if engine.initialize(host, "P2PHANDSHAKE", "tcp", "") != 0:
        fail("initialize failed")
    buf = engine.allocate_managed_buffer(SIZE)
    if buf == 0:
        fail("allocate_managed_buffer failed")
    session = f"{host}:{engine.get_rpc_port()}"
    publish(folder, "mooncake", {"session": session, "buffer": buf})
    want = pattern(4).tobytes()
    until = time.monotonic() + DEADLINE_S
    while time.monotonic() < until:
        if engine.read_bytes_from_buffer(buf, SIZE) == want:
            print(f"mooncake target {session}: write verified", flush=True)
            return
        time.sleep(0.05)
    fail("the Mooncake write never landed as sent")


def mooncake_initiator(folder):
    from ferry.mooncake import TransferEngine
    t = wait_for(folder, "mooncake")
    engine = TransferEngine()
    if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        fail("initialize failed")
    src = engine.allocate_managed_buffer(SIZE)
    engine.write_bytes_to_buffer(src, pattern(4).tobytes(), SIZE)
    rc = engine.transfer_sync_write(t["session"], src, t["buffer"], SIZE)
    if rc != 0:
        fail(f"transfer_sync_write to {t['session']} returned {rc}")
    print(f"mooncake initiator wrote to {t['session']}", flush=True)


def main():
    role, folder = sys.argv[1], sys.argv[2]
    if role == "engine-target":
        engine_target(folder)
    elif role == "engine-initiator":
        engine_initiator(folder, sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--by-name" else None)
    elif role == "nixl-target":
        nixl_target(folder)
    elif role == "nixl-initiator":
        nixl_initiator(folder)
    elif role == "mooncake-target":
        mooncake_target(folder, sys.argv[3])
    elif role == "mooncake-initiator":
        mooncake_initiator(folder)
    else:
        sys.exit(f"unknown role {role}")


if __name__ == "__main__":
    main()
