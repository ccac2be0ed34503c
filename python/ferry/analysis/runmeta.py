"""Readers for the small files of a `ferry profile` run directory that need no
pandas: the YAML subset of metadata_rank_N.yml, and Chrome traces.

The YAML reader understands what ferry writes (block maps, block lists, plain
and double-quoted scalars, {} and []); every scalar is returned as a string.
It is used when PyYAML is not installed, and gives the same strings.
"""

from __future__ import annotations

import json
import re

EVENT_NAME = re.compile(r"^p2p_cfg(\d+)_s(\d+)d(\d+)_sz(\d+)_r(\d+)$")


class RunError(ValueError):
    """The run directory cannot be analysed (missing files, malformed content)."""


def parse_event_name(name: str):
    """'p2p_cfg0042_s0d1_sz1048576_r0' -> dict(config_id, src, dst, size, repetition), or None."""
    m = EVENT_NAME.match(name)
    if not m:
        return None
    keys = ("config_id", "src", "dst", "size", "repetition")
    return dict(zip(keys, (int(g) for g in m.groups())))


def _unquote(text: str, line: int) -> str:
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise RunError(f"YAML line {line}: bad quoted text {text!r}")
    out, i, body = [], 0, text[1:-1]
    escapes = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "/": "/"}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1] if i + 1 < len(body) else ""
        if e == "x":
            out.append(chr(int(body[i + 2:i + 4], 16)))
            i += 4
        elif e in escapes:
            out.append(escapes[e])
            i += 2
        else:
            raise RunError(f"YAML line {line}: unknown escape \\{e}")
    return "".join(out)


def _closing_quote(t: str) -> int:
    i = 1
    while i < len(t):
        if t[i] == "\\":
            i += 2
            continue
        if t[i] == '"':
            return i
        i += 1
    return -1


def _split_key(t: str, line: int):
    """'key: rest' -> (key, rest) or None when t is not a key line."""
    if t.startswith('"'):
        close = _closing_quote(t)
        if close < 0 or t[close + 1:close + 2] != ":":
            return None
        return _unquote(t[:close + 1], line), t[close + 2:].strip()
    m = re.match(r"^([^:]+):(?: (.*))?$", t)
    if not m:
        return None
    return m.group(1), (m.group(2) or "").strip()


def _scalar(v: str, line: int):
    if v == "{}":
        return {}
    if v == "[]":
        return []
    if v.startswith('"'):
        return _unquote(v, line)
    hash_at = v.find(" #")
    return (v[:hash_at] if hash_at >= 0 else v).rstrip()


def parse_yaml(text: str):
    """The metadata YAML subset -> dicts, lists and strings."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.rstrip()
        body = stripped.lstrip(" ")
        if not body or body.startswith("#") or body in ("---", "..."):
            continue
        lines.append([len(stripped) - len(body), body, number])
    pos = 0

    def block(indent):
        if lines[pos][1] == "-" or lines[pos][1].startswith("- "):
            return seq(indent)
        return mapping(indent)

    def nested(indent):
        nonlocal pos
        if pos < len(lines) and lines[pos][0] > indent:
            return block(lines[pos][0])
        return ""

    def seq(indent):
        nonlocal pos
        out = []
        while pos < len(lines) and lines[pos][0] == indent and (lines[pos][1] == "-" or lines[pos][1].startswith("- ")):
            ln = lines[pos]
            if ln[1] == "-":
                pos += 1
                out.append(nested(indent))
                continue
            rest = ln[1][2:]
            if _split_key(rest, ln[2]) is not None:
                ln[0], ln[1] = indent + 2, rest
                out.append(mapping(indent + 2))
            else:
                out.append(_scalar(rest, ln[2]))
                pos += 1
        return out

    def mapping(indent):
        nonlocal pos
        out = {}
        while pos < len(lines) and lines[pos][0] == indent:
            ln = lines[pos]
            kv = _split_key(ln[1], ln[2])
            if kv is None:
                raise RunError(f"YAML line {ln[2]}: expected key: value")
            key, rest = kv
            pos += 1
            if rest:
                out[key] = _scalar(rest, ln[2])
            elif pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("- "):
                out[key] = seq(indent)
            else:
                out[key] = nested(indent)
        return out

    if not lines:
        return {}
    if len(lines) == 1 and lines[0][1] in ("{}", "[]"):
        return {} if lines[0][1] == "{}" else []
    root = block(lines[0][0])
    if pos != len(lines):
        raise RunError(f"YAML line {lines[pos][2]}: unexpected indentation")
    return root


def read_yaml(path: str):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        import yaml  # PyYAML, when present; every scalar as text, like ours
        return yaml.load(text, Loader=yaml.BaseLoader)
    except ImportError:
        return parse_yaml(text)


def read_trace(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise RunError(f"{path}: {e}") from e
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise RunError(f"{path}: not a Chrome trace (no traceEvents)")
    return doc


def event_start_ns(e: dict) -> int:
    args = e.get("args") or {}
    if isinstance(args.get("start_ns"), int):
        return args["start_ns"]
    return int(round(float(e["ts"]) * 1000))


def event_duration_ns(e: dict) -> int:
    args = e.get("args") or {}
    if isinstance(args.get("dur_ns"), int):
        return args["dur_ns"]
    return int(round(float(e.get("dur", 0)) * 1000))
