"""docs/coming-from.md against the code: a call its tables list as there is
there, and one they list as missing is missing.

- The UCCL table: every call marked yes exists on ferry.p2p.Endpoint (or the
  module), and takes the argument names the table gives it.
- The Mooncake table: every Python call marked yes exists on
  ferry.mooncake.TransferEngine (or the module), with the argument names
  given; every one marked no does not; MC_* variables marked yes are read by
  ferry.mooncake, those marked no are not.
- The FERRY backend table: every NIXL backend call marked yes is overridden
  in plugins/nixl/ferry_backend.h (the supports* ones return true), every one
  marked no is left to NIXL's default.
- ferry's own API, wherever the page names it: `Engine::x`, `Connection::x`,
  `Transfer::x`, `RemoteDescriptor::x` and `Options::x` exist in
  include/ferry/, and `engine.x`, `conn.x`, `t.x`, `ferry.x` in Python, with
  the options `ferry.Engine(...)` is given.
"""

from __future__ import annotations

import glob
import inspect
import os
import re

import pytest

import ferry
from ferry import mooncake, p2p

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "coming-from.md")
HEADERS = os.path.join(ROOT, "include", "ferry")
BACKEND = os.path.join(ROOT, "plugins", "nixl", "ferry_backend.h")


def text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def table(header_start):
    """The rows (lists of cells) of the table whose header line starts so."""
    lines = text(DOC).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        # Pipes inside code spans are not cell borders.
        cells = re.split(r"\|(?=(?:[^`]*`[^`]*`)*[^`]*$)", line.strip().strip("|"))
        rows.append([c.strip() for c in cells])
    assert rows, f"no rows under {header_start!r}"
    return rows


def spans(cell):
    return re.findall(r"`([^`]+)`", cell)


def calls(cell):
    """(name, argument names or None) of each call a first cell names: `f(a, b=1)`,
    bare names, dotted names; `_x` after names means each of them + _x (`read_ipc`
    and `_async`), and `/ `_read`` after a `..._write` name its `..._read`.
    Spans that are values (quotes, `=`, `://`) are skipped; `...` means the
    arguments are not listed."""
    out = []
    for span in spans(cell):
        match = re.fullmatch(r"([A-Za-z_][\w.]*)(?:\((.*)\))?", span)
        if not match:
            continue
        name, args = match.group(1), match.group(2)
        if name.startswith("_") and not name.startswith("__") and out:
            bases = [n for n, _ in out]
            if name == "_read" and bases[-1].endswith("_write"):
                out.append((bases[-1][: -len("_write")] + "_read", None))
            else:
                out.extend((b + name, None) for b in bases)
            continue
        names = None
        if args is not None and "..." not in args:
            names = [a.split("=")[0].strip() for a in args.split(",") if a.strip()]
        out.append((name, names))
    return out


def resolve(roots, dotted):
    for root in roots:
        obj = root
        try:
            for part in dotted.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    return None


def check_arguments(obj, name, names):
    if not names:
        return
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values()):
        return  # the arguments decide the form (ferry.p2p's advertise)
    for n in names:
        assert n in params, f"{name} takes no argument {n!r} (it takes {list(params)})"


def test_every_uccl_call_the_table_lists_exists_with_its_argument_names():
    checked = 0
    for row in table("| UCCL call |"):
        assert row[2] == "yes", f"{row[0]}: the table says {row[2]!r}; add a test for what it means"
        for name, names in calls(row[0]):
            obj = resolve([p2p.Endpoint, p2p], name if name != "Endpoint" else "Endpoint")
            if name == "Endpoint":
                obj = p2p.Endpoint
            elif name.startswith("Endpoint."):
                obj = resolve([p2p], name)
            assert obj is not None, f"ferry.p2p has no {name} (row {row[0]})"
            check_arguments(obj, name, names)
            checked += 1
    assert checked > 60


def test_the_mooncake_table_says_what_ferry_mooncake_has_and_lacks():
    source = "\n".join(text(f) for f in glob.glob(os.path.join(ROOT, "python", "ferry", "*mooncake*.py")))
    checked = 0
    for row in table("| Mooncake (Python / C++) |"):
        status = row[1]
        has = status.startswith("yes") or status.startswith("Python: yes")
        assert has or status.startswith("no"), f"{row[0]}: ferry.mooncake column {status!r} is neither yes nor no"
        for name, names in calls(row[0]):
            if re.fullmatch(r"MC_[A-Z_]+", name):
                assert (f'"{name}"' in source) == has, f"{name}: the table says {status!r}"
                checked += 1
                continue
            if re.fullmatch(r"SUPPORT_[A-Z_]+", name):
                assert hasattr(mooncake, name) == has, f"{name}: the table says {status!r}"
                checked += 1
                continue
            if re.fullmatch(r"[A-Z]+", name):
                continue  # an HTTP method of the protocol, not a call
            obj = resolve([mooncake.TransferEngine, mooncake], name)
            if not has:
                assert obj is None, f"ferry.mooncake has {name}, which the table lists as missing"
            elif name[0].islower() and any(c.isupper() for c in name) and status.startswith("Python: yes"):
                continue  # the C++ spelling of a row whose Python call is there
            else:
                assert obj is not None, f"ferry.mooncake has no {name} (row {row[0]})"
                check_arguments(obj, name, names)
            checked += 1
    assert checked > 35


def test_the_ferry_backend_table_matches_the_plugin():
    header = text(BACKEND)
    for row in table("| NIXL backend call |"):
        has = row[1] == "yes"
        assert has or row[1] == "no", f"{row[0]}: {row[1]!r}"
        for name, _ in calls(row[0]):
            declared = re.search(rf"\b{name}\s*\(", header) is not None
            assert declared == has, f"{name}: the table says {row[1]}, ferry_backend.h {'declares' if declared else 'lacks'} it"
            if name.startswith("supports"):
                assert re.search(rf"{name}\(\) const override {{ return true; }}", header), name


def test_ferrys_own_api_as_the_page_names_it():
    headers = "\n".join(text(f) for f in glob.glob(os.path.join(HEADERS, "*.h")))
    page = text(DOC)
    options = ferry.Options()
    python_roots = {"engine": ferry.Engine, "conn": ferry.Connection, "t": ferry.Transfer, "ferry": ferry}
    seen = 0
    for span in set(re.findall(r"`([^`]+)`", page)):
        for cls, member in re.findall(r"\b(Engine|Connection|Transfer|RemoteDescriptor|Options)::(\w+)", span):
            if cls == "Options":
                assert re.search(rf"\b{member}\s*(=|;)", text(os.path.join(HEADERS, "options.h"))), \
                    f"Options has no {member}"
            elif member not in ("kAuto", "kTcp", "kLocal"):
                assert re.search(rf"\b{member}\s*\(", headers), f"{cls}::{member} is in no header"
            seen += 1
        for member in re.findall(r"\bTransportChoice::(\w+)", span):
            assert re.search(rf"\b{member}\b", headers), f"TransportChoice::{member}"
        match = re.match(r"(engine|conn|t|ferry)\.([\w.]+)", span)
        if match:
            obj = resolve([python_roots[match.group(1)]], match.group(2))
            assert obj is not None, f"{span}: Python has no {match.group(1)}.{match.group(2)}"
            seen += 1
        engine_call = re.match(r"ferry\.Engine\((.*)\)", span)
        if engine_call:
            for key in re.findall(r"(\w+)=", engine_call.group(1)):
                assert hasattr(options, key), f"{span}: ferry.Engine takes no option {key}"
    assert seen > 40


@pytest.mark.parametrize("cell, expected", [
    ("`write_ipc`, `read_ipc(conn_id, ptr, size, info)` and `_async`",
     ["write_ipc", "read_ipc", "write_ipc_async", "read_ipc_async"]),
    ("`batch_transfer_sync_write` / `_read`", ["batch_transfer_sync_write", "batch_transfer_sync_read"]),
    ('`metadata_server="P2PHANDSHAKE"`', []),
])
def test_the_cell_reader(cell, expected):
    assert [n for n, _ in calls(cell)] == expected
