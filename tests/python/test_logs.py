"""ferry's C++ log lines in Python's `logging`, FERRY_LOG in any case, and the
version facts (issue 59, item 6).

Each case runs in a fresh interpreter: the log level and the log queue are
the process's, and what happens at interpreter exit is part of the contract.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import ferry

TIMEOUT = 60

# A handler that keeps records, on the "ferry" logger, printed as JSON at exit.
PRELUDE = textwrap.dedent("""
    import json, logging, os, sys, threading, time
    import ferry
    from ferry import _ferry
    records = []
    class Keep(logging.Handler):
        def emit(self, r):
            records.append({"name": r.name, "level": r.levelname, "message": r.getMessage(), "created": r.created,
                            "thread": r.threadName, "engine": getattr(r, "ferry_engine", None),
                            "reader": threading.current_thread().name})
    def configure():
        root = logging.getLogger("ferry")
        root.setLevel(5)
        root.addHandler(Keep(level=5))
    def wait_for(pred, seconds=10):
        end = time.time() + seconds
        while time.time() < end and not pred():
            time.sleep(0.02)
        return pred()
    def report(**more):
        print(json.dumps(dict(records=records, **more)))
""")


def run(code: str, env: dict | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    for name in ("FERRY_LOG", "FERRY_LOG_STDERR"):
        full.pop(name, None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=full, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def report_of(r: subprocess.CompletedProcess) -> dict:
    import json
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ferry\[(\d+)\] (\w+) \[(\w+)\] engine ([0-9a-f]{8}): ",
                     re.M)


def test_cpp_lines_reach_logging_at_their_level_with_their_engine_time_and_thread():
    r = run("""
        configure()
        before = time.time()
        a = ferry.Engine(listen="127.0.0.1:0", transport="tcp", log_level="info")
        b = ferry.Engine(listen="127.0.0.1:0", transport="tcp")
        b.connect(a.address, timeout=10).close()
        wait_for(lambda: any("connected to" in r["message"] for r in records))
        report(a=a.id, b=b.id, before=before, after=time.time(), pid=os.getpid())
    """)
    got = report_of(r)
    assert "listening on" not in r.stderr, "lines went to stderr although logging handles them"
    mine = [x for x in got["records"] if x["name"] != "ferry"]
    listening = [x for x in mine if x["name"] == "ferry.engine" and "listening on" in x["message"]]
    assert len(listening) == 2, mine
    for rec, eid in zip(sorted(listening, key=lambda x: x["engine"]), sorted([got["a"], got["b"]])):
        assert rec["level"] == "INFO"
        assert rec["engine"] == eid
        assert rec["message"].startswith(f"engine {eid >> 32:08x}: listening on 127.0.0.1:")
        assert got["before"] - 1 <= rec["created"] <= got["after"] + 1
        assert rec["reader"] == "ferry-log"
    connected = [x for x in mine if x["name"] == "ferry.tcp" and "connected to" in x["message"]]
    assert connected and connected[0]["engine"] == got["b"], mine
    # Lines a transport thread wrote carry that thread's name (the TCP data
    # plane's workers log their CPU binding as they start).
    assert any(x["thread"].startswith(("ferry-rx-", "ferry-tx-")) for x in mine), mine


def test_a_flood_while_python_holds_the_gil_neither_deadlocks_nor_grows():
    # 8 C++ threads log 20,000 lines while the main thread holds the GIL and
    # waits for them: a logger that took the GIL would hang here for ever.
    r = run("""
        import resource
        configure()
        ferry._logs.start()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.time()
        _ferry._log_lines_from_threads(8, 2500, ferry.LogLevel.WARN, "flood")
        held = time.time() - t0
        wait_for(lambda: any("dropped" in r["message"] for r in records))
        time.sleep(0.2)
        report(held=held, grew_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before)
    """, timeout=120)
    got = report_of(r)
    flood = [x for x in got["records"] if x["name"] == "ferry.flood"]
    dropped = [x for x in got["records"] if x["name"] == "ferry" and "log lines dropped" in x["message"]]
    # The queue holds CAPACITY; the reader may have taken a few before the GIL stopped it.
    assert 0 < len(flood) <= 2 * ferry._logs.CAPACITY, len(flood)
    assert len(dropped) >= 1, got["records"][-3:]
    told = sum(int(x["message"].split()[0]) for x in dropped)
    assert told + len(flood) == 20000, (told, len(flood))
    assert got["grew_kib"] < 64 * 1024, got["grew_kib"]


def test_the_reader_hands_on_the_last_lines_and_stops_at_exit():
    r = run("""
        import atexit
        # Registered first, so it runs last: after ferry's exit hook.
        atexit.register(lambda: report(alive=[t.name for t in threading.enumerate()]))
        configure()
        ferry._logs.start()
        _ferry._log_lines_from_threads(1, 3, ferry.LogLevel.ERROR, "last")
        # No wait: ferry's exit hook must deliver them, then the process ends.
    """, timeout=30)
    got = report_of(r)
    last = [x for x in got["records"] if x["name"] == "ferry.last"]
    assert [x["message"] for x in last] == [f"line {i} of thread 0" for i in range(3)]
    assert all(x["level"] == "ERROR" for x in last)
    assert "ferry-log" not in got["alive"], got["alive"]


def test_without_logging_configured_lines_are_printed_as_cpp_prints_them():
    r = run("""
        a = ferry.Engine(listen="127.0.0.1:0", transport="tcp")
        report(pid=os.getpid(), id=a.id)
    """, env={"FERRY_LOG": "Info"})
    got = report_of(r)
    lines = STAMPED.findall(r.stderr)
    assert (str(got["pid"]), "info", "engine", f"{got['id'] >> 32:08x}") in lines, r.stderr


def test_lines_can_stay_on_stderr():
    for env, call in (({"FERRY_LOG_STDERR": "1"}, ""), ({}, "ferry.logs_to_python(False)")):
        r = run(f"""
            configure()
            {call}
            a = ferry.Engine(listen="127.0.0.1:0", transport="tcp", log_level="INFO")
            time.sleep(0.3)
            report(alive=[t.name for t in threading.enumerate()])
        """, env=env)
        got = report_of(r)
        assert not [x for x in got["records"] if x["name"] == "ferry.engine"], (env, call)
        assert "ferry-log" not in got["alive"]
        assert STAMPED.search(r.stderr), r.stderr


def test_a_forked_child_hands_its_lines_to_logging_too():
    r = run("""
        configure()
        ferry._logs.start()
        pid = os.fork()
        if pid == 0:
            _ferry._log_lines_from_threads(1, 1, ferry.LogLevel.WARN, "child")
            ok = not wait_for(lambda: records, 0.5)  # no reader yet: the line went to stderr
            ferry._logs.start()
            _ferry._log_lines_from_threads(1, 1, ferry.LogLevel.WARN, "child")
            ok = ok and wait_for(lambda: any(r["name"] == "ferry.child" for r in records))
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        report(status=status)
    """)
    got = report_of(r)
    assert got["status"] == 0, r.stderr
    assert "warn [child] line 0 of thread 0" in r.stderr


def test_log_level_in_any_case_and_one_clear_error():
    e = ferry.Engine(listen="127.0.0.1:0", log_level="WARN")
    assert e.options.log_level == ferry.LogLevel.WARN
    e.close()
    r = run("""
        e = ferry.Engine(listen="127.0.0.1:0")
        report(level=str(e.options.log_level))
    """, env={"FERRY_LOG": "DEBUG"})
    assert report_of(r)["level"].endswith("DEBUG")
    r = run("""
        try:
            ferry.Engine(listen="127.0.0.1:0")
        except ferry.InvalidArgument as e:
            report(error=str(e))
    """, env={"FERRY_LOG": "verbose"})
    error = report_of(r)["error"]
    assert 'FERRY_LOG="verbose"' in error and "error, warn, info, debug or trace" in error, error


def test_version_info_says_what_ferry_version_says():
    info = ferry.version_info()
    assert ferry.__version__ == info["version"]
    lo, hi = info["protocol_range"]
    assert lo <= info["protocol"] == hi
    assert isinstance(info["cuda"], bool) and isinstance(info["nixl_plugin"], bool)
    assert set(info["directories"]) <= {"redis", "etcd"}
    assert info["text"].startswith(f"ferry {ferry.__version__}\nwire protocol {info['protocol']} ")
    cli = os.path.join(os.path.dirname(ferry.__file__), "..", "..", "bin", "ferry")
    if os.path.exists(cli):
        out = subprocess.run([cli, "--version"], stdout=subprocess.PIPE, text=True, timeout=TIMEOUT).stdout
        assert out.startswith(info["text"]), (out, info["text"])
