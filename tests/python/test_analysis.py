"""`python3 -m ferry.analysis` on synthetic `ferry bench --sweep` CSVs whose best configuration is known.

Runs the module as a subprocess of this interpreter (Debian's /usr/bin/python3,
which has pandas and matplotlib) with the built package on PYTHONPATH.
"""

import itertools
import os
import subprocess
import sys

import pytest

pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

import ferry  # noqa: E402

HEADER = "op,bytes,chunk_bytes,window,streams,nics,iters,gbps,p50_us,p99_us,verified"
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__)))
CHUNKS = [64 << 10, 512 << 10, 1 << 20]
WINDOWS = [4, 16]
STREAMS = [1, 2]
NICS = [1, 2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TIMEOUT = 120


def run_analysis(*args, cwd=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "ferry.analysis", *map(str, args)], env=env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)


def gbps(op, chunk, window, streams, nics):
    """write prefers big chunks, read small ones; both prefer window 16, 2 streams, 2 NICs."""
    ci = CHUNKS.index(chunk)
    if op == "read":
        ci = len(CHUNKS) - 1 - ci
    return 1 + 0.5 * ci + 0.25 * WINDOWS.index(window) + 0.1 * (streams - 1) + 2 * (nics - 1)


def sweep_rows(ops_sizes, streams=STREAMS, verified=""):
    rows = []
    for op, size in ops_sizes:
        for chunk, window, s, n in itertools.product(CHUNKS, WINDOWS, streams, NICS):
            g = gbps(op, chunk, window, s, n)
            us = size / (g * 1e3)
            rows.append(f"{op},{size},{chunk},{window},{s},{n},8,{g:.4f},{us:.1f},{us * 1.1:.1f},{verified}")
    return rows


def write_csv(path, rows, header=HEADER):
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def check_png(path):
    assert path.is_file(), path
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 5000, (path, len(data))


def test_sweep_heatmaps_and_summary(tmp_path):
    csv = write_csv(tmp_path / "sweep.csv", sweep_rows([("write", 64 << 20), ("read", 4096)]))
    out = tmp_path / "report"
    r = run_analysis(csv, "--out", out)
    assert r.returncode == 0, r.stderr

    expected = set()
    for stem in ("write_64M", "read_4K"):
        expected |= {f"{stem}_streams{s}_nics{n}.png" for s in STREAMS for n in NICS}
        expected.add(f"{stem}_streams_x_nics.png")
    assert {p.name for p in out.glob("*.png")} == expected
    for name in expected:
        check_png(out / name)

    summary = (out / "summary.md").read_text()
    assert r.stdout == summary
    assert "## write 64M (67108864 bytes)" in summary
    assert "## read 4K (4096 bytes)" in summary
    write = summary[summary.index("## write"):]
    read = summary[summary.index("## read"):summary.index("## write")]
    # write: best 1M/16/2/2 = 4.35; default 512K/16/2/2 = 3.85 (-11.5%); worst 64K/4/1/1 = 1.0 (-77.0%).
    assert "Best: chunk 1M, window 16, streams 2, nics 2: 4.3500 GB/s." in write
    assert "| best | 1M | 16 | 2 | 2 | 4.3500 | 0.0% |" in write
    assert "Default (chunk 512K, window 16, streams 2, nics 2): 3.8500 GB/s, -11.5% vs best." in write
    assert "| default | 512K | 16 | 2 | 2 | 3.8500 | -11.5% |" in write
    assert "Worst: chunk 64K, window 4, streams 1, nics 1: 1.0000 GB/s, -77.0% vs best." in write
    # read: best 64K/16/2/2 = 4.35; default = 3.85; worst 1M/4/1/1 = 1.0.
    assert "Best: chunk 64K, window 16, streams 2, nics 2: 4.3500 GB/s." in read
    assert "Default (chunk 512K, window 16, streams 2, nics 2): 3.8500 GB/s, -11.5% vs best." in read
    assert "Worst: chunk 1M, window 4, streams 1, nics 1: 1.0000 GB/s, -77.0% vs best." in read
    assert "24 configurations: chunk 64K, 512K, 1M; window 4, 16; streams 1, 2; nics 1, 2." in read


def test_default_out_dir_next_to_csv(tmp_path):
    csv = write_csv(tmp_path / "sweep.csv", sweep_rows([("write", 1 << 20)]))
    r = run_analysis("sweep.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "sweep_analysis"
    assert (out / "summary.md").read_text() == r.stdout
    check_png(out / "write_1M_streams_x_nics.png")
    assert csv.is_file()


def test_default_absent_failed_rows_and_repeats(tmp_path):
    rows = sweep_rows([("write", 1 << 20)], streams=[1])
    # The fastest row failed verification: not the best. A repeated configuration is averaged.
    rows.append(f"write,{1 << 20},65536,4,1,1,8,99.0000,10.0,11.0,FAILED")
    rows.append(f"write,{1 << 20},{1 << 20},16,1,2,8,4.4500,10.0,11.0,ok")  # with 4.25: mean 4.35
    r = run_analysis(write_csv(tmp_path / "s.csv", rows), "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert "Best: chunk 1M, window 16, streams 1, nics 2: 4.3500 GB/s." in r.stdout
    assert "Default (chunk 512K, window 16, streams 2): not in this sweep." in r.stdout
    assert "FAILED verification (left out): 1 row(s): chunk 64K, window 4, streams 1, nics 1" in r.stdout
    assert "99.0" not in r.stdout
    assert "Best per NIC count: nics 1: 2.2500 GB/s" in r.stdout
    check_png(tmp_path / "o" / "write_1M_streams1_nics2.png")


@pytest.mark.parametrize("transport", ["tcp", "local"])
def test_a_sweep_that_names_its_transport(tmp_path, transport):
    # `ferry bench --sweep` writes the transport of each row last; on the local
    # transport chunk, window and streams do nothing, and the summary says so.
    rows = [r + "," + transport for r in sweep_rows([("write", 1 << 20)])]
    r = run_analysis(write_csv(tmp_path / "s.csv", rows, header=HEADER + ",transport"), "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert "Best: chunk 1M, window 16, streams 2, nics 2: 4.3500 GB/s." in r.stdout
    assert ("**Not TCP:** 24 row(s) measured the local transport" in r.stdout) == (transport == "local"), r.stdout


@pytest.mark.parametrize("case", ["missing", "wrong_header", "empty", "header_only", "not_numbers", "directory"])
def test_bad_input_exits_2(tmp_path, case):
    path = tmp_path / "sweep.csv"
    if case == "wrong_header":
        write_csv(path, ["write,1,2,3"], header="op,bytes,gbps,p50_us")
        expect = "not a `ferry bench --sweep` CSV"
    elif case == "empty":
        path.write_text("")
        expect = "empty file"
    elif case == "header_only":
        path.write_text(HEADER + "\n")
        expect = "header but no rows"
    elif case == "not_numbers":
        write_csv(path, sweep_rows([("write", 4096)])[:2] + ["write,4096,64K,4,1,1,8,1.0,1.0,1.0,"])
        expect = "column 'chunk_bytes' is not a number on line(s) 4"
    elif case == "directory":
        path = tmp_path
        expect = "execution_log.csv: missing"  # an empty folder is not a `ferry profile` run
    else:
        expect = "no such file"
    r = run_analysis(path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expect in r.stderr
    assert r.stderr.startswith("python3 -m ferry.analysis: error: ")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "sweep_analysis").exists()


def test_import_does_not_load_pandas_or_matplotlib():
    code = ("import sys, ferry, ferry.analysis; "
            "loaded = [m for m in ('pandas', 'matplotlib') if m in sys.modules]; "
            "assert not loaded, loaded")
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout
