"""``export perfetto`` streams (``analysis.timeline_stream``): the trace written block by block is
the trace of the whole capture built at once (``timeline.build_timeline``), and a capture whose
whole trace does not fit an address-space limit is exported under it.

Equality is checked with blocks far smaller than the default (milliseconds, seconds) so every
join is exercised: counter values across a block edge (one held value, not written twice),
window runs cut by an edge (``no valid data``, ``over line rate (kept out)``, ``gap: bytes
spread (kept out)``: one slice with the windows of both parts), bursts (never cut: a block ends
where no burst is in progress) and requests (written once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import align, read_request_log
from rdmascope.analysis.timeline import build_timeline, write_chrome_json
from rdmascope.analysis.timeline_stream import stream_timeline

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _events(path) -> dict:
    """{(pid, track name): sorted events}, floats rounded to 9 significant digits (a burst's
    mean is summed in another order across blocks: equal to ~1e-14)."""
    doc = json.loads(Path(path).read_text())
    th = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
          if e["ph"] == "M" and e["name"] == "thread_name"}

    def r(a):
        return {k: (float(f"{v:.9g}") if isinstance(v, float) else v) for k, v in a.items()}

    out: dict = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            out.setdefault((e["pid"], e["name"]), []).append((e["ts"], json.dumps(e["args"])))
        elif e["ph"] == "X":
            out.setdefault((e["pid"], th[(e["pid"], e["tid"])]), []).append(
                (e["ts"], e["dur"], e["name"], json.dumps(r(e["args"]), sort_keys=True)))
    return {k: sorted(v) for k, v in out.items()}, doc["otherData"]


def _same(tmp_path, cap_dir, *, block_ns, lookahead_ns, log=None, **kw):
    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    write_chrome_json(build_timeline([load_capture(cap_dir)], log=log, **kw), whole)
    tl = stream_timeline([cap_dir], part, "json", log=log, block_ns=block_ns,
                         lookahead_ns=lookahead_ns, **kw)
    a, b = _events(whole), _events(part)
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        assert a[0][k] == b[0][k], k
    assert a[1] == b[1]
    assert not Path(str(part) + ".part").exists()
    return tl


def test_blocks_join_into_the_whole_trace_across_holes_over_line_and_gaps(tmp_path):
    n = 200
    units = np.full(n - 1, 250_000, np.int64)   # 8 Gb/s
    units[49:53] = 10_000_000                   # over line, a run crossing the 50 ms edge
    units[60] = 3_150_000                       # at line rate
    vals = np.concatenate([[0], np.cumsum(units)])
    vals[150:] = vals[150:] - vals[150] + 1     # a reset: window 149 unknown
    skip = {78, 79, 80, 81, 82}                 # missed sweeps across the 80 ms edge
    rd = {0: [(T0 + k * MS, 0, int(vals[k]), STATUS_OK) for k in range(n) if k not in skip]}
    dev = [{"name": "rocep1s0f1", "pci": "0000:01:00.1",
            "ports": [{"port": 1, "rate": "100 Gb/sec (4X EDR)", "rate_gbps": 100.0}]}]
    cap = write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx")], rd, devices=dev)
    for block in (10, 17, 30):  # edges inside every run
        _same(tmp_path, cap, block_ns=block * MS, lookahead_ns=5 * MS)


def test_blocks_join_into_the_whole_trace_with_bursts_and_requests(tmp_path):
    sys.path.insert(0, str(BENCH))
    from scale_capture import build

    cap = build(tmp_path / "cap", 60)
    log = align(read_request_log(cap / "requests.jsonl"), load_capture(cap), None)
    _same(tmp_path, cap, block_ns=7 * 10**9, lookahead_ns=2 * 10**9, log=log)
    _same(tmp_path, cap, block_ns=9 * 10**9, lookahead_ns=2 * 10**9, log=log,
          from_s=5.0005, to_s=41, width_ns=10 * MS)


LIMIT = 640 * 2**20
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2"}


def _run_limited(code: str) -> subprocess.CompletedProcess:
    prog = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({LIMIT}, {LIMIT}))
    """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                          env={**os.environ, **ENV}, timeout=900)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS semantics: Linux")
def test_export_perfetto_of_a_whole_capture_streams_under_a_memory_limit(tmp_path):
    """8 minutes at 1 kHz, 8 counters (as tests/test_memory_limit.py): the whole trace built in
    memory (``build_timeline``, then the same writer) raises MemoryError under 640 MB of
    address space (it fits in 1 GB since the writer writes event by event); the streamed
    export writes it (its peak is one block's: ~0.45 GB RSS whatever the capture's length;
    it also runs under 512 MB)."""
    sys.path.insert(0, str(BENCH))
    from scale_capture import build

    cap = build(tmp_path / "cap", 8 * 60)
    old = _run_limited(f"""
        from rdmascope.analysis.load import load_capture
        from rdmascope.analysis.timeline import build_timeline, write_chrome_json
        try:
            write_chrome_json(build_timeline([load_capture({str(cap)!r})]), {str(tmp_path / "o.json")!r})
        except MemoryError:
            print("MemoryError")
    """)
    assert "MemoryError" in old.stdout + old.stderr, "the control must exceed the limit"
    new = _run_limited(f"""
        from rdmascope.cli import main
        main(["export", "perfetto", {str(cap)!r}, "-o", {str(tmp_path / "t.json")!r}],
             standalone_mode=False)
    """)
    assert new.returncode == 0, new.stderr[-2000:]
    doc = json.loads((tmp_path / "t.json").read_text())
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert counters and max(e["ts"] for e in counters) - min(e["ts"] for e in counters) > 470e6


def test_a_range_holds_its_rows_and_the_valid_readings_past_its_edges(tmp_path):
    """``load_capture_range`` keeps, of the segments it reads, only the range's rows and per
    counter the readings out to the 3rd valid one past each edge: the intervals over the range
    are the whole capture's when an edge falls in a pause of the readings (a 40 ms gap), on
    unreadable readings (flagged unavailable) or next to a torn read (a glitch dropped by its
    two neighbours), and a 1-minute range of an 8-minute capture holds about a minute, not
    its bracketing segments (~3 minutes)."""
    from rdmascope.analysis.series import byte_intervals
    from rdmascope.analysis.timeline import load_capture_range

    n = 400
    vals = np.cumsum(np.full(n, 250_000, np.int64))
    vals[199] = 5                                     # a torn read just before the 200 ms edge
    gap = set(range(100, 140))                        # no readings across the 120 ms edge
    bad = {298, 299, 301}                             # unreadable around the 300 ms edge
    rd = {0: [(T0 + k * MS, 0, int(vals[k]), STATUS_OK if k not in bad else 2)
              for k in range(n) if k not in gap],
          1: [(T0 + k * MS + 500, 0, int(vals[k] // 2), STATUS_OK) for k in range(n)]}
    cap = write_capture(tmp_path / "c", [ib("d0", "tx"), ib("d0", "rx")], rd, roll_every=50)
    cols = ["counter_id", "t0_ns", "t1_ns", "bytes", "flag"]

    def over(iv, a, b):
        return iv[(iv["t1_ns"] > a) & (iv["t0_ns"] < b)][cols].reset_index(drop=True)

    whole = byte_intervals(load_capture(cap))
    for a, b in ((120, 200), (200, 300), (300, 399), (0, 120), (150, 151)):
        lo, hi = T0 + a * MS, T0 + b * MS
        part = load_capture_range(cap, lo, hi)
        assert len(part.readings) < 0.6 * 2 * n
        got, want = over(byte_intervals(part), lo, hi), over(whole, lo, hi)
        assert got.equals(want), (a, b)

    sys.path.insert(0, str(BENCH))
    from scale_capture import build

    big = build(tmp_path / "cap", 8 * 60)
    t0 = load_capture_range(big, 0, 0).t_start_ns
    part = load_capture_range(big, t0 + 118 * 10**9, t0 + 182 * 10**9)
    assert 8 * 64_000 <= len(part.readings) <= 8 * 64_100  # 64 s of 8 counters at 1 kHz
