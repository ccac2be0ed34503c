"""ferry.p2p has every call of UCCL's two bindings, with their argument names
in their order (code passes them by keyword), and docs/coming-from.md tables
every one of them. The names are those of seed-a1184318/pybind_engine.cc and
current-da914a20/engine_api.cc in shared/third_party/uccl_p2p."""

from __future__ import annotations

import inspect
import os

import pytest

from ferry import p2p

# method -> its positional parameters (self aside), the union of both eras
# where one extends the other (today's reg adds floatType).
SEED = {
    "__init__": ["local_gpu_idx", "num_cpus"],
    "connect": ["remote_ip_addr", "remote_gpu_idx", "remote_port"],
    "accept": [],
    "reg": ["ptr", "size"],
    "regv": ["ptrs", "sizes"],
    "send": ["conn_id", "mr_id", "ptr", "size", "meta"],
    "read": ["conn_id", "mr_id", "ptr", "size", "meta"],
    "recv": ["conn_id", "mr_id", "ptr", "size"],
    "sendv": ["conn_id", "mr_id_v", "data_ptr_v", "size_v", "num_iovs"],
    "recvv": ["conn_id", "mr_id_v", "data_ptr_v", "size_v", "num_iovs"],
    "send_async": ["conn_id", "mr_id", "ptr", "size"],
    "recv_async": ["conn_id", "mr_id", "ptr", "size"],
    "poll_async": ["transfer_id"],
    "join_group": ["discovery_uri", "group_name", "world_size", "my_rank", "remote_gpu_idx"],
    "conn_id_of_rank": ["rank"],
    "CreateAndJoin": ["discovery_uri", "group_name", "world_size", "my_rank", "local_gpu_idx", "num_cpus",
                      "remote_gpu_idx"],
    "get_endpoint_metadata": [],
}
TODAY = {
    "start_passive_accept": [],
    "add_remote_endpoint": ["metadata_bytes"],
    "remove_remote_endpoint": ["conn_id"],
    "get_metadata": [],
    "parse_metadata": ["metadata"],
    "reg": ["ptr", "size", "floatType"],
    "register_memory": ["tensor_list"],
    "deregister_memory": ["desc_list"],
    "get_serialized_descs": ["desc_list"],
    "deserialize_descs": ["serialized_bytes"],
    "transfer": ["conn_id", "op_name", "local_desc_list", "remote_desc_list"],
    "check_xfer_state": ["handle"],
    "dereg": ["mr_id"],
    **{name: ["conn_id", "mr_id", "ptr", "size", "meta"] for name in ("read", "read_async", "write", "write_async")},
    **{name: ["conn_id", "mr_id_v", "ptr_v", "size_v", "meta_blob_v", "num_iovs"]
       for name in ("readv", "readv_async", "writev", "writev_async")},
    "advertisev": ["mr_id_v", "ptr_v", "size_v", "num_iovs"],
    "connect_local": ["remote_gpu_bdf"],
    "accept_local": [],
    **{name: ["conn_id", "ptr", "size", "info"] for name in ("write_ipc", "read_ipc", "write_ipc_async",
                                                           "read_ipc_async")},
    **{name: ["conn_id", "ptr_v", "size_v", "info_v"] for name in ("writev_ipc", "readv_ipc", "writev_ipc_async",
                                                                 "readv_ipc_async")},
    "advertise_ipc": ["conn_id", "ptr", "size"],
    "advertisev_ipc": ["conn_id", "ptr_v", "size_v"],
}


def positional(function) -> list:
    return [p.name for p in inspect.signature(function).parameters.values()
            if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "cls")]


@pytest.mark.parametrize("name", sorted(set(SEED) | set(TODAY)))
def test_argument_names_and_order(name):
    expected = TODAY.get(name, SEED.get(name))
    assert positional(getattr(p2p.Endpoint, name)) == expected
    if name in SEED:  # the seed's list is a prefix of the union
        assert expected[:len(SEED[name])] == SEED[name]


def test_the_other_spellings():
    connect = inspect.signature(p2p.Endpoint.connect).parameters
    assert {"metadata", "remote_gpu_bdf"} <= set(connect)  # connect(metadata), today's connect(ip, bdf, port)
    assert connect["remote_port"].default == -1
    assert isinstance(inspect.getattr_static(p2p.Endpoint, "parse_metadata"), staticmethod)
    assert inspect.signature(p2p.Endpoint.__init__).parameters["local_gpu_idx"].default is None  # both optional
    # advertise's two forms are told apart by their arguments (test_p2p_onesided.py runs both).
    for module_name in ("Endpoint", "get_oob_ip", "FloatType", "XferDesc", "XferHandle", "kUndefined"):
        assert module_name in p2p.__all__ and hasattr(p2p, module_name)


def test_docs_table_every_call():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "coming-from.md")
    with open(path) as f:
        text = f.read()
    section = text[text.index("## UCCL P2P engine and `ferry.p2p`"):]
    calls = (set(SEED) | set(TODAY) | {"advertise", "get_oob_ip", "FloatType", "XferDesc", "XferHandle"}) - {"__init__"}

    def tabled(name: str) -> bool:  # `name`, `Endpoint.name(`, or the sync form the row also covers
        return any(s in section for s in (f"`{name}", f"`Endpoint.{name}(", f"`{name.removesuffix('_async')}"))

    missing = [name for name in sorted(calls) if not tabled(name)]
    assert missing == []
