"""`ferry top` (the CLI) against a real engine's metrics page: while the
engine moves random bytes, its JSON lines and its table show the sends, their
bytes and the peer; an address nothing answers on fails at once. Skips where
this build has no CLI beside its Python module (the sanitizer trees)."""

import json
import pathlib
import re
import subprocess
import threading
import time

import ferry
import numpy as np
import pytest

from conftest import engine_pair, free_base_port

SIZE = 1_000_003  # odd, so a rate of whole messages shows as such


def cli():
    program = pathlib.Path(ferry.__file__).resolve().parents[2] / "bin" / "ferry"
    if not program.exists():
        pytest.skip(f"no ferry CLI at {program} (this tree builds the Python module alone)")
    return str(program)


def sending(ca, cb, a, b, stop):
    """Sends SIZE random bytes again and again until `stop` is set, checking each."""
    rng = np.random.default_rng(3)
    src = rng.integers(0, 256, SIZE, dtype=np.uint8)
    dst = np.zeros(SIZE, dtype=np.uint8)
    b.reg(src)
    a.reg(dst)
    sent = 0
    while not stop.is_set():
        r = ca.recv_async(dst)
        cb.send(src, timeout=10)
        assert r.wait(10) == SIZE
        assert np.array_equal(dst, src)
        sent += 1
    return sent


def test_top_shows_what_the_engine_moves():
    program = cli()
    with engine_pair(transport="tcp", metrics_listen="127.0.0.1:0") as (a, ca, b, cb):
        stop = threading.Event()
        errors = []

        def run():
            try:
                sending(ca, cb, a, b, stop)
            except Exception as e:  # reported below
                errors.append(e)

        t = threading.Thread(target=run, name="top-sender")
        t.start()
        try:
            out = subprocess.run([program, "top", a.metrics_address, "--interval", "0.5", "--count", "3", "--json"],
                                 capture_output=True, text=True, timeout=30)
            table = subprocess.run([program, "top", "http://" + a.metrics_address + "/metrics", "--interval", "0.5",
                                    "--count", "1"], capture_output=True, text=True, timeout=30)
        finally:
            stop.set()
            t.join(20)
        assert not t.is_alive() and not errors, errors
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(lines) == 3, out.stdout
        for view in lines:
            assert view["source"] == f"http://{a.metrics_address}/metrics"
            # a is the receiving side: its receives, from one peer.
            recv = [op for op in view["ops"] if op["op"] == "recv" and op["transport"] == "tcp"]
            assert recv and recv[0]["bytes_per_s"] > 0, view
            # Whole messages only: bytes are a multiple of SIZE over the window.
            messages = recv[0]["bytes_per_s"] * view["seconds"] / SIZE
            assert abs(messages - round(messages)) < 1e-6 and round(messages) >= 1, view
            assert recv[0]["p50_seconds"] > 0 and recv[0]["p99_seconds"] >= recv[0]["p50_seconds"], view
            assert len(view["peers"]) == 1 and view["peers"][0]["bytes_per_s"] == recv[0]["bytes_per_s"], view
            assert view["connections_up"] == 1, view
        assert table.returncode == 0, table.stderr
        assert "recv" in table.stdout and "peer" in table.stdout, table.stdout
        assert re.search(r"\n127\.0\.0\.1:\d+ +[0-9.]+/s +0/s +[0-9.]+ [KMGT]B/s\n", table.stdout), table.stdout


def test_top_fails_at_once_where_nothing_answers():
    program = cli()
    port = free_base_port(1)
    start = time.monotonic()
    r = subprocess.run([program, "top", f"127.0.0.1:{port}", "--count", "1"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1, r
    assert f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert time.monotonic() - start < 10
    bad = subprocess.run([program, "top", "no-port-here"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "host:port" in bad.stderr, bad
    bad = subprocess.run([program, "top", "127.0.0.1:1", "--interval", "0"], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 2 and "--interval" in bad.stderr, bad
