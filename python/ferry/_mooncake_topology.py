"""Memory locations for ferry.mooncake: the "cpu:0" / "cuda:1" that
register_memory takes, checked against what ferry detects; and
get_local_topology(), the host's locations and the NICs that serve each, in
the JSON shape Mooncake's returns.

Mooncake answers with its NIC priority matrix, one entry per memory
location::

    {"cpu:0": [["eth0"], ["eth1"]], "cuda:0": [["eth1"], ["eth0"]]}

  key            a location as register_memory takes it: "cpu:<NUMA node>"
                 for each node with online CPUs (just "cpu:0" where sysfs has
                 no NUMA information), "cuda:<ordinal>" for each NVIDIA GPU
  value[0]       preferred NICs: those on the location's NUMA node (all of
                 them on a one-node host, or where sysfs tells no node)
  value[1]       the other NICs: usable, a NUMA hop away

Mooncake lists RDMA devices (mlx5_0); ferry moves bytes over network
interfaces, so the names here are interface names, the ones device_name
and ferry's ``nics`` take. Which interfaces: those named by `device_name`
(comma-separated), else those the engine was started with (its ``nics``),
else the host's physical NICs (an interface backed by a device, as ferry's
own topology counts them), else, where there is none (a container's veth),
every non-loopback interface that is up.

GPUs are read from sysfs (NVIDIA PCI display functions), numbered in PCI
order (CUDA_DEVICE_ORDER=PCI_BUS_ID) and renumbered by CUDA_VISIBLE_DEVICES
when it lists indices; nothing here initializes CUDA. A GPU's NICs are
ranked by NUMA node, where Mooncake ranks by PCI distance.

Everything is read under SYSFS_ROOT, so that tests can point it at a tree.
"""

from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import ferry

WILDCARD_LOCATION = "*"  # register_memory's location when ferry is to detect what the memory is
SYSFS_ROOT = "/sys"
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers


def parse_location(location: object) -> Tuple[str, int]:
    """("", -1) for a location that asks for detection ("*" or ""), else its
    (type, index): ("cpu", NUMA node) or ("cuda", GPU ordinal). Raises
    ValueError for anything else: ferry registers host and CUDA memory only."""
    if not isinstance(location, str):
        raise ValueError(f"location {location!r}: expected a str such as 'cpu:0', 'cuda:0' or '*'")
    if location in ("", WILDCARD_LOCATION):
        return "", -1
    found = re.fullmatch(r"(cpu|cuda):(\d{1,6})", location)
    if found is None:
        raise ValueError(f"location {location!r}: ferry registers host memory ('cpu:N') and CUDA memory "
                         "('cuda:N'), or detects which ('*')")
    return found.group(1), int(found.group(2))


def check_location(location: object, region: Optional[ferry.Region] = None) -> None:
    """Raises ValueError when `location` is malformed, or names another kind
    of memory, or another GPU, than ferry detected for `region`. The node of
    "cpu:N" is not checked: the pages of one buffer may lie on several."""
    kind, index = parse_location(location)
    if not kind or region is None:
        return
    cuda = region.kind == ferry.MemoryKind.CUDA
    if kind == "cpu" and cuda or kind == "cuda" and (not cuda or region.device != index):
        what = f"GPU {region.device}'s memory" if cuda else "host memory"
        raise ValueError(f"[{region.base:#x}, +{region.length}) is {what}, not {location!r}")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _node_of(device_dir: str) -> int:
    """The NUMA node sysfs gives a device, -1 when it gives none."""
    text = _read(os.path.join(device_dir, "numa_node"))
    return int(text) if re.fullmatch(r"-?\d+", text) else -1


def numa_nodes(root: str = SYSFS_ROOT) -> List[int]:
    """Nodes with online CPUs, ascending; [0] where sysfs has no NUMA information."""
    base = os.path.join(root, "devices/system/node")
    try:
        names = os.listdir(base)
    except OSError:
        return [0]
    nodes = sorted(int(n[4:]) for n in names if re.fullmatch(r"node\d+", n)
                   and _read(os.path.join(base, n, "cpulist")) != "")
    return nodes or [0]


def interfaces(root: str = SYSFS_ROOT, wanted: Sequence[str] = ()) -> Dict[str, int]:
    """{interface name: its NUMA node (-1 unknown)} of the NICs the topology
    lists: `wanted` where given (names that exist), else the physical ones,
    else every non-loopback interface that is up."""
    base = os.path.join(root, "class/net")
    try:
        present = sorted(os.listdir(base))
    except OSError:
        present = []
    if wanted:
        chosen = [n for n in wanted if n in present]
    else:
        chosen = [n for n in present if os.path.exists(os.path.join(base, n, "device"))]
        if not chosen:
            chosen = [n for n in present if n != "lo" and _read(os.path.join(base, n, "operstate")) == "up"]
    return {n: _node_of(os.path.join(base, n, "device")) for n in chosen}


def gpus(root: str = SYSFS_ROOT, visible: Optional[str] = None) -> List[int]:
    """The NUMA node of each GPU, indexed by CUDA ordinal (see the module docstring)."""
    base = os.path.join(root, "bus/pci/devices")
    try:
        functions = sorted(os.listdir(base))
    except OSError:
        return []
    nodes = [_node_of(os.path.join(base, f)) for f in functions
             if _read(os.path.join(base, f, "vendor")) == NVIDIA_VENDOR
             and _read(os.path.join(base, f, "class")).startswith(GPU_CLASSES)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None and re.fullmatch(r"\s*(\d+\s*(,\s*\d+\s*)*)?", visible):
        picked = [int(i) for i in visible.split(",") if i.strip()]
        nodes = [nodes[i] for i in picked if i < len(nodes)]
    return nodes


def local_topology(wanted: Sequence[str] = (), root: str = SYSFS_ROOT) -> str:
    """The JSON text of the module docstring, for the NICs `wanted` (all when empty)."""
    nics = interfaces(root, wanted)
    nodes = numa_nodes(root)
    one_node = len(nodes) == 1

    def ranked(node: int) -> List[List[str]]:
        near = [n for n, at in nics.items() if one_node or at < 0 or node < 0 or at == node]
        return [near, [n for n in nics if n not in near]]

    matrix = {f"cpu:{node}": ranked(node) for node in nodes}
    for ordinal, node in enumerate(gpus(root)):
        matrix[f"cuda:{ordinal}"] = ranked(node)
    return json.dumps(matrix, indent=3)
