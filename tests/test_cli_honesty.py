"""Small CLI honesty fixes: full windows at the capture edges, wording, format hints, offsets.

Captures are hand-built (tests/capture_builders.py) so every expected value is computed here.
"""

from __future__ import annotations

import json

import numpy as np
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from click.testing import CliRunner
from rdmascope.analysis import QUALITY_PARTIAL, byte_intervals, load_capture, rebin_with_quality

from rdmascope.cli import main

DEV = [{"name": "rocep1s0f1", "ports": [{"port": 1, "rate_gbps": 200.0}]}]


def _two_seconds(path, first_delay_us=6, last_ms=2000):
    """Readings every 1 ms from the capture start (T0, the first sweep deadline) to ``last_ms``,
    each taken ``first_delay_us`` after its deadline with a 2 us bracket (instant = deadline +
    delay + 1 us), carrying 1.25 MB per ms (10 Gb/s)."""
    n = last_ms + 1
    units = np.arange(n, dtype=np.int64) * (1_250_000 // 4)
    rd = {0: [(T0 + k * MS + first_delay_us * 1000, 2000, int(units[k]), STATUS_OK)
              for k in range(n)]}
    return write_capture(path, [ib("rocep1s0f1", "tx")], rd, devices=DEV)


def _peaks(path, *extra):
    r = CliRunner().invoke(main, ["peaks", str(path), "--windows", "1s", "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["peaks"]


def test_a_two_second_capture_has_two_full_1s_windows(tmp_path):
    cap = _two_seconds(tmp_path / "c")
    # the first reading is 7 us after the window start: within 0.1 ms (and 1 % of 1 s)
    _, q = rebin_with_quality(byte_intervals(load_capture(cap)), 1000 * MS)
    assert len(q) == 3  # [0, 1 s), [1 s, 2 s) and the last reading's 7 us past 2 s
    assert ((q.iloc[:2].to_numpy() & QUALITY_PARTIAL) == 0).all()
    assert (q.iloc[2].to_numpy() & QUALITY_PARTIAL != 0).all()
    row = [r for r in _peaks(cap) if r["window"] == "1 s"][0]
    # 1.25 MB per ms over a whole second, less the 7 us before the first reading: the covered
    # part's bytes (10 Gb/s x (1 - 7e-6))
    assert row["n_windows"] == 2
    assert row["peak_gbps"] == __import__("pytest").approx(10.0, rel=1e-5)


def test_a_window_missing_more_than_the_tolerance_is_partial(tmp_path):
    # first reading 150 us after the start: more than 0.1 ms uncovered -> the first 1 s window
    # stays partial and only [1 s, 2 s) counts
    cap = _two_seconds(tmp_path / "c", first_delay_us=150)
    _, q = rebin_with_quality(byte_intervals(load_capture(cap)), 1000 * MS)
    assert (q.iloc[0].to_numpy() & QUALITY_PARTIAL != 0).all()
    assert (q.iloc[1].to_numpy() & QUALITY_PARTIAL == 0).all()
    assert [r for r in _peaks(cap) if r["window"] == "1 s"][0]["n_windows"] == 1
    # a 1 ms window may miss at most 1 % (10 us): 7 us -> full, 150 us -> partial
    _, q1 = rebin_with_quality(byte_intervals(load_capture(_two_seconds(tmp_path / "d"))), MS)
    assert (q1.iloc[0].to_numpy() & QUALITY_PARTIAL == 0).all()
    _, q2 = rebin_with_quality(byte_intervals(load_capture(cap)), MS)
    assert (q2.iloc[0].to_numpy() & QUALITY_PARTIAL != 0).all()


def test_estimate_real_b_says_each_speed_once():
    r = CliRunner().invoke(main, ["estimate", "--preset", "qwen3-30b-a3b", "--tp", "2",
                                  "--link-a", "400", "--link-b", "200", "--b-real"])
    assert r.exit_code == 0, r.output
    # one all-reduce of a 4096-token chunk at TP2: 4096 x 2048 x 2 B = 16.78 MB sent per node
    # (ring factor 2(N-1)/N = 1): 16.78e6 x 8 / 400e9 = 0.34 ms, / 200e9 = 0.67 ms
    line = [ln for ln in r.output.splitlines() if ln.startswith("one all-reduce")][0]
    assert line.endswith("; 0.3 ms at 400 Gb/s, 0.7 ms at 200")
    bound = [ln for ln in r.output.splitlines() if ln.startswith("TTFT increase bound")][0]
    assert bound.count("400 -> 200") == 1
    assert "200->200" not in r.output and "bound @200" not in r.output
    # the emulated default keeps its third speed, named as the emulated link's real one
    e = CliRunner().invoke(main, ["estimate", "--preset", "qwen3-30b-a3b", "--tp", "2"])
    assert "1.3 ms at 100, 1.2 ms at 109 (what the emulated 100 Gb/s link really carries)" \
        in e.output
    assert "109->100 (s)" in e.output


def test_attribute_wrong_format_suggests_the_detected_one(fixtures_dir):
    logs = fixtures_dir.parent / "tests" / "data" / "requestlogs"
    for path, given, seen in ((logs / "vllm_serve_result.json", "native", "vllm"),
                              (logs / "native.jsonl", "vllm", "native")):
        r = CliRunner().invoke(main, ["attribute", str(fixtures_dir / "sim-p2-200"),
                                      "--requests", str(path), "--format", given])
        assert r.exit_code == 4, r.output
        assert (f"the file looks like format '{seen}', not '{given}': give --format {seen} "
                "(or no --format, to detect it)") in r.output
        assert "Traceback" not in r.output


def test_negative_from_or_to_is_a_usage_error(fixtures_dir):
    cap = str(fixtures_dir / "sim-p2-200")
    for args, opt in ((["peaks", cap, "--from", "-5"], "--from"),
                      (["rates", cap, "--window", "1s", "--to", "-1s"], "--to"),
                      (["bursts", cap, "--from", "-0.5"], "--from"),
                      (["export", "perfetto", cap, "-o", "/tmp/never.json", "--from", "-1"],
                       "--from")):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert f"Invalid value for '{opt}'" in r.output and "must be >= 0" in r.output
    # zero is the capture start: accepted
    r = CliRunner().invoke(main, ["peaks", cap, "--from", "0", "--to", "1s", "--windows", "1s"])
    assert r.exit_code == 0, r.output


def test_report_takes_run(tmp_path):
    from rdmascope.analysis.requestlogs import read_request_log

    cases = __import__("pathlib").Path(__file__).parent / "data" / "requestlogs" / "cases"
    cap, log = cases / "demo16_capture", cases / "R7a_M1.jsonl"
    assert len(read_request_log(log).runs) > 1  # a file with several runs
    send = "3600.5"  # the relative log's offset onto the capture (as test_requestlogs_cases)
    r = CliRunner().invoke(main, ["report", str(cap), "--requests", str(log), "--run", "1",
                                  "--offset", send, "-o", str(tmp_path / "r1")])
    assert r.exit_code == 0, r.output
    import pandas as pd

    def request_ids(d):
        (csv,) = (tmp_path / d / "tables").glob("*_per-request.csv")
        return pd.read_csv(csv)["request_id"].tolist()

    assert request_ids("r1") == ["run1-0"]
    r = CliRunner().invoke(main, ["report", str(cap), "--requests", str(log), "--offset", send,
                                  "-o", str(tmp_path / "all")])
    assert r.exit_code == 0, r.output
    assert request_ids("all") == ["run1-0", "run2-0"]  # without --run: every run
    # a run the file does not hold: a usage error (exit 2) naming the option and the runs there
    r = CliRunner().invoke(main, ["report", str(cap), "--requests", str(log), "--run", "9",
                                  "--offset", send, "-o", str(tmp_path / "r9")])
    assert r.exit_code == 2 and "run 9 does not exist" in r.output, r.output
    assert "'--run'" in r.output and "holds 2 runs (expected 1..2)" in r.output
    r = CliRunner().invoke(main, ["report", str(cap), "--requests", str(log), "--run", "1",
                                  "--run", "2", "-o", str(tmp_path / "rx")])
    assert r.exit_code == 2 and "give one --run for every capture or one per capture" in r.output
