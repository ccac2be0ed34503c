"""A real Prometheus server (Debian's `prometheus`, started here on
loopback) scrapes an engine's metrics endpoint (metrics_listen) while the
engine moves random bytes; its query API must return ferry's series with the
byte counts the test sent, and follow them when more are sent."""

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest

from conftest import engine_pair, free_base_port

DEADLINE = 60.0  # seconds for Prometheus to start, and for a scrape to show a number


def prometheus_program():
    program = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(program, os.X_OK):
        pytest.fail("prometheus is not installed (scripts/setup.sh installs it)")
    return program


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


@pytest.fixture
def prometheus_scraping(tmp_path):
    """Yields (start(target) -> base URL); stops the server at the end."""
    procs = []

    def start(target):
        port = free_base_port(1)
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: ferry\n    static_configs:\n      - targets: ['{target}']\n"
        )
        log = open(tmp_path / "prometheus.log", "w")
        procs.append((subprocess.Popen(
            [prometheus_program(), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT), log))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                if "Ready" in http_get(base + "/-/ready", timeout=1):
                    return base
            except OSError:
                pass
            assert procs[-1][0].poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus was not ready in time"
            time.sleep(0.2)

    yield start
    for p, log in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        log.close()


def query(base, expr):
    """The instant vector of `expr` as {labels-without-__name__: value}."""
    body = json.loads(http_get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert body["status"] == "success", body
    out = {}
    for r in body["data"]["result"]:
        labels = {k: v for k, v in r["metric"].items() if k not in ("__name__", "job", "instance")}
        out[tuple(sorted(labels.items()))] = float(r["value"][1])
    return out


def wait_for(base, expr, labels, want):
    deadline = time.monotonic() + DEADLINE
    got = None
    while time.monotonic() < deadline:
        got = query(base, expr).get(tuple(sorted(labels.items())))
        if got == want:
            return
        time.sleep(0.25)
    pytest.fail(f"{expr}{labels}: Prometheus has {got}, want {want}")


def test_prometheus_scrapes_what_the_engine_moved(prometheus_scraping):
    with engine_pair(transport="tcp", metrics_listen="127.0.0.1:0") as (a, ca, b, cb):
        assert a.metrics_address.startswith("127.0.0.1:")
        base = prometheus_scraping(a.metrics_address)
        rng = np.random.default_rng(11)
        src = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
        dst = np.zeros(1 << 20, dtype=np.uint8)
        a.reg(src)
        b.reg(dst)
        sent = 0
        for n in (1, 4099, 777_777, 1 << 20):
            r = cb.recv_async(dst)
            ca.send(src[:n], timeout=10)
            assert r.wait(10) == n
            assert np.array_equal(dst[:n], src[:n])
            sent += n
        send = {"op": "send", "transport": "tcp"}
        wait_for(base, "ferry_transfer_bytes_total", send, sent)
        wait_for(base, "ferry_transfers_total", {**send, "result": "ok"}, 4)
        wait_for(base, "ferry_connections", {"transport": "tcp", "state": "up"}, 1)
        # The histogram: every send within +Inf.
        wait_for(base, "ferry_transfer_seconds_bucket", {**send, "le": "+Inf"}, 4)
        # Live: more bytes, a new number.
        r = cb.recv_async(dst)
        ca.send(src[:12345], timeout=10)
        assert r.wait(10) == 12345
        wait_for(base, "ferry_transfer_bytes_total", send, sent + 12345)
        up = query(base, "up")
        assert list(up.values()) == [1.0], up
