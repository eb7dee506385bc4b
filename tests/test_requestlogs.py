"""Request logs: every format from small files in the tools' shapes, clocks, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import (
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    CLOCK_RELATIVE,
    RequestLogError,
    align,
    detect_format,
    read_request_log,
)
from requestlog_helpers import MS, build_capture

DATA = Path(__file__).parent / "data" / "requestlogs"
S = 1_000_000_000


def ok_row(log, rid):
    r = log.requests.set_index("request_id").loc[rid]
    return r


# ------------------------------------------------------------------------------------------------
# Formats
# ------------------------------------------------------------------------------------------------


def test_native_jsonl():
    log = read_request_log(DATA / "native.jsonl")
    assert (log.format, log.clock, log.n_failed) == ("native", CLOCK_MONOTONIC, 1)
    assert list(log.requests["request_id"]) == ["p1-r1-0", "p4-r1-0", "p4-r1-1", "p4-r1-2"]
    r = ok_row(log, "p4-r1-1")
    assert (r.t_send_ns, r.t_first_ns, r.t_last_ns) == (1000_001_000_000, 1000_750_000_000,
                                                       1002_750_000_000)
    assert (r.prompt_tokens, r.output_tokens, r.test, r["round"], r.row) == (8192, 101, "P4", 1, 2)
    p1 = ok_row(log, "p1-r1-0")
    assert p1.chunk_times == [990_250_000_000, 990_500_000_000, 991_250_000_000]
    assert p1.row == 5  # the blank line is counted: rows are file lines
    failed = ok_row(log, "p4-r1-2")
    assert (not failed.ok) and failed.error == "HTTP 500"
    assert len(log.ok) == 3


def test_native_csv():
    log = read_request_log(DATA / "native.csv")
    assert (log.format, log.clock, log.n_failed) == ("native", CLOCK_MONOTONIC, 0)
    b = ok_row(log, "b")
    assert (b.t_send_ns, b.t_first_ns, b.t_last_ns, b["round"], b.row) == (
        1010 * S, 1010_400_000_000, 1012_400_000_000, 2, 3)


def test_vllm_with_start_times():
    log = read_request_log(DATA / "vllm_serve_result.json")
    assert (log.format, log.clock, log.n_failed) == ("vllm", CLOCK_MONOTONIC, 1)
    r1 = ok_row(log, "1")
    # t_send = start_times[1]; t_first = t_send + ttfts[1]; t_last = t_send + latencies[1]
    assert r1.t_send_ns == 5000_125_000_000
    assert r1.t_first_ns == 5000_125_000_000 + 6_500_000_000
    assert r1.t_last_ns == 5000_125_000_000 + 7_000_000_000
    # chunk k at t_first + sum(itls[:k])
    assert r1.chunk_times == [5006_625_000_000, 5006_875_000_000, 5007_125_000_000]
    assert (r1.prompt_tokens, r1.output_tokens) == (8192, 3)
    assert ok_row(log, "2").error == "Bad Request: prompt too long"


def test_vllm_without_start_times_is_relative():
    log = read_request_log(DATA / "vllm_serve_result_nostart.json")
    assert log.clock == CLOCK_RELATIVE
    assert list(log.ok["t_send_ns"]) == [0, 0]
    assert list(log.ok["t_first_ns"]) == [6_250_000_000, 6_500_000_000]
    assert any("start_times" in n for n in log.notes)


def test_vllm_finite_rate_without_start_times_refused(tmp_path):
    d = json.loads((DATA / "vllm_serve_result_nostart.json").read_text())
    d["request_rate"] = 2.0
    p = tmp_path / "v.json"
    p.write_text(json.dumps(d))
    with pytest.raises(RequestLogError, match="start_times") as ei:
        read_request_log(p)
    assert ei.value.field == "start_times"


def test_guidellm_v04_and_flat():
    log = read_request_log(DATA / "guidellm_benchmarks_v04.json")
    assert (log.format, log.clock, log.n_failed) == ("guidellm", CLOCK_REALTIME, 1)
    r = ok_row(log, "9c1f0b7e-1")
    assert r.t_send_ns == 1767261600 * S
    assert r.t_first_ns == 1767261600_960_000_000
    assert r.t_last_ns == 1767261601_960_000_000
    assert (r.prompt_tokens, r.output_tokens) == (1024, 11)
    flat = read_request_log(DATA / "guidellm_benchmarks_flat.json")
    assert flat.n_failed == 1  # the incomplete request is not a success
    r = ok_row(flat, "r-1")
    assert (r.t_send_ns, r.t_first_ns, r.t_last_ns) == (1767261700 * S, 1767261701 * S,
                                                       1767261703 * S)


def test_genai_perf():
    log = read_request_log(DATA / "genai_perf_profile_export.json")
    assert (log.format, log.clock, log.n_failed) == ("genai-perf", CLOCK_REALTIME, 1)
    r = log.ok.iloc[0]
    # the usage-only chunk and [DONE] are not tokens: last token = the third response
    assert (r.t_send_ns, r.t_first_ns, r.t_last_ns) == (
        1767261800_000_000_000, 1767261800_500_000_000, 1767261800_800_000_000)
    assert (r.prompt_tokens, r.output_tokens) == (1024, 4)  # from usage, not the chunk count
    assert len(r.chunk_times) == 3


def test_aiperf():
    log = read_request_log(DATA / "aiperf_profile_export.jsonl")
    assert (log.format, log.clock, log.n_failed) == ("aiperf", CLOCK_REALTIME, 1)
    r = log.ok.iloc[0]
    t0 = 1767261900_000_000_000
    # ttft 1000 ms; chunks at +100 ms and +150 ms after the first
    assert (r.t_send_ns, r.t_first_ns, r.t_last_ns) == (t0, t0 + S, t0 + S + 250 * MS)
    assert (r.prompt_tokens, r.output_tokens) == (8192, 11)
    assert "cancelled" in log.requests.loc[~log.requests["ok"], "error"].iloc[0]


def test_inference_perf():
    log = read_request_log(DATA / "inference_perf_per_request_lifecycle_metrics.json")
    assert (log.format, log.clock, log.n_failed) == ("inference-perf", CLOCK_MONOTONIC, 1)
    r = log.ok.iloc[0]
    assert (r.t_send_ns, r.t_first_ns, r.t_last_ns) == (7000 * S, 7001 * S, 7003 * S)
    assert (r.prompt_tokens, r.output_tokens) == (4096, 21)


@pytest.mark.parametrize("name, fmt", [
    ("native.jsonl", "native"), ("native.csv", "native"), ("vllm_serve_result.json", "vllm"),
    ("guidellm_benchmarks_v04.json", "guidellm"), ("guidellm_benchmarks_flat.json", "guidellm"),
    ("genai_perf_profile_export.json", "genai-perf"),
    ("aiperf_profile_export.jsonl", "aiperf"),
    ("inference_perf_per_request_lifecycle_metrics.json", "inference-perf"),
])
def test_detection_and_explicit_format(name, fmt):
    assert detect_format(DATA / name) == fmt
    assert read_request_log(DATA / name, format=fmt).format == fmt


def test_explicit_wrong_format_names_the_field():
    with pytest.raises(RequestLogError, match="input_lens"):
        read_request_log(DATA / "guidellm_benchmarks_v04.json", format="vllm")
    with pytest.raises(RequestLogError, match="unknown format 'tgi'"):
        read_request_log(DATA / "native.csv", format="tgi")


# ------------------------------------------------------------------------------------------------
# Bad input: each error names the file, the row and the field
# ------------------------------------------------------------------------------------------------

HDR = "request_id,t_send,t_first_token,t_last_token,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize("name, content, row, field, match", [
    ("empty.jsonl", "", None, None, "is empty"),
    ("blank.jsonl", "\n  \n", None, None, "is empty"),
    ("unknown.json", '{"foo": 1}', None, None, "unknown format"),
    ("unknown.txt", "hello world\n", None, None, "unknown format"),
    ("bad.jsonl", '{"request_id": "a", "t_send": 1, "t_first_token": 2, "t_last_token": 3, '
                  '"prompt_tokens": 1, "output_tokens": 2}\n{"request_id": "b", "t_send": \n',
     2, None, "malformed JSON"),
    ("missing.csv", "request_id,t_send,t_last_token,prompt_tokens,output_tokens\na,1,3,1,2\n",
     2, "t_first_token", "missing"),
    ("missing_tok.jsonl", '{"request_id": "a", "t_send": 1, "t_first_token": 2, '
                          '"t_last_token": 3, "prompt_tokens": 1}\n', 1, "output_tokens",
     "missing"),
    ("before.csv", HDR + "b,10,9.5,12,1,2\n", 2, "t_first_token", "before the send"),
    ("last.csv", HDR + "a,10,11,10.5,1,2\n", 2, "t_last_token", "before the first token"),
    ("nonnum.csv", HDR + "a,10,eleven,12,1,2\n", 2, "t_first_token", "expected a number"),
    ("negtok.csv", HDR + "a,10,11,12,-1,2\n", 2, "prompt_tokens", "non-negative integer"),
    ("extra.csv", HDR + "a,10,11,12,1,2,9\n", 2, None, "header names 6"),
    ("dup.csv", HDR + "a,10,11,12,1,2\na,20,21,22,1,2\n", 3, "request_id", "more than once"),
    ("noid.csv", HDR + ",10,11,12,1,2\n", 2, "request_id", "missing"),
    ("clock.jsonl", '{"request_id": "a", "t_send": 1, "t_first_token": 2, "t_last_token": 3, '
                    '"prompt_tokens": 1, "output_tokens": 2, "clock": "TAI"}\n', 1, "clock",
     "unknown clock"),
    ("mixed.jsonl", '{"request_id": "a", "t_send": 1, "t_first_token": 2, "t_last_token": 3, '
                    '"prompt_tokens": 1, "output_tokens": 2, "clock": "CLOCK_REALTIME"}\n'
                    '{"request_id": "b", "t_send": 1, "t_first_token": 2, "t_last_token": 3, '
                    '"prompt_tokens": 1, "output_tokens": 2}\n', None, "clock",
     "different clocks"),
    ("chunks.jsonl", '{"request_id": "a", "t_send": 1, "t_first_token": 2, "t_last_token": 3, '
                     '"prompt_tokens": 1, "output_tokens": 2, "chunk_times": [2, 2.5, 2.4, 3]}\n',
     1, "chunk_times", "out of order"),
    ("allfailed.csv", "request_id,t_send,t_first_token,t_last_token,prompt_tokens,"
                      "output_tokens,error\na,10,,,1,,boom\n", None, None,
     "no successful request .1 failed: row 2: boom"),
])
def test_bad_native_input(tmp_path, name, content, row, field, match):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(RequestLogError, match=match) as ei:
        read_request_log(p)
    e = ei.value
    assert str(p) in str(e)
    assert e.row == row
    assert e.field == field


def test_missing_file(tmp_path):
    with pytest.raises(RequestLogError, match="no such file"):
        read_request_log(tmp_path / "nope.jsonl")


def test_vllm_bad_inputs(tmp_path):
    base = json.loads((DATA / "vllm_serve_result.json").read_text())
    d = dict(base, start_times=[5000.0, 4999.0, 5000.25])
    p = tmp_path / "v.json"
    p.write_text(json.dumps(d))
    with pytest.raises(RequestLogError, match="dispatch order") as ei:
        read_request_log(p)
    assert (ei.value.row, ei.value.field) == (2, "start_times")
    d = dict(base, output_lens=[5, 3])
    p.write_text(json.dumps(d))
    with pytest.raises(RequestLogError, match="expected 3") as ei:
        read_request_log(p)
    assert ei.value.field == "output_lens"
    # a bad row is that row's problem: rows 2 and 3 fail with the reason, row 1 is read
    d = dict(base, ttfts=[6.25, -1.0, 0.0])
    p.write_text(json.dumps(d))
    log = read_request_log(p)
    assert log.ok["row"].tolist() == [1]
    bad = log.requests[~log.requests["ok"]].set_index("row")["error"]
    assert "before the send" in bad[2] and bad[2].startswith("invalid: t_first_token")
    assert bad[3] == "Bad Request: prompt too long"  # the tool's own failure, kept
    assert any("2 failed request(s)" in n and "row 2" in n for n in log.notes)
    d = dict(base, ttfts=[6.25, 0.0, 0.0], errors=["", "", "x"])
    p.write_text(json.dumps(d))
    bad = read_request_log(p).requests.set_index("row")["error"]
    assert "TTFT of 0 s is impossible" in bad[2]


def test_tool_missing_fields(tmp_path):
    d = json.loads((DATA / "guidellm_benchmarks_v04.json").read_text())
    del d["benchmarks"][0]["requests"]["successful"][0]["info"]["timings"]["first_token_iteration"]
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    with pytest.raises(RequestLogError) as ei:
        read_request_log(p)
    assert (ei.value.row, ei.value.field) == (1, "info.timings.first_token_iteration")
    lines = (DATA / "aiperf_profile_export.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    del rec["metrics"]["time_to_first_token"]
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    with pytest.raises(RequestLogError) as ei:
        read_request_log(p)
    assert (ei.value.row, ei.value.field) == (1, "metrics.time_to_first_token")
    d = json.loads((DATA / "inference_perf_per_request_lifecycle_metrics.json").read_text())
    d[0]["info"]["response_metrics"]["chunk_times"] = []
    d[0]["info"]["response_metrics"]["output_token_times"] = []
    p = tmp_path / "per_request_lifecycle_metrics.json"
    p.write_text(json.dumps(d))
    # that request fails with the reason (here the only one left: the file is refused, saying why)
    with pytest.raises(RequestLogError, match="row 1: streamed, but no chunk"):
        read_request_log(p)


# ------------------------------------------------------------------------------------------------
# Clock alignment
# ------------------------------------------------------------------------------------------------

T0 = 1000 * S  # capture start on CLOCK_MONOTONIC


def _capture(tmp_path, n=4000, burst_at_ms=None, pairs=None):
    tx = np.full(n, 400, dtype=np.int64)  # 3.2 Gb/s background
    if burst_at_ms is not None:
        tx[burst_at_ms:burst_at_ms + 5] = 20_000_000  # 160 Gb/s for 5 ms
    path = build_capture(tmp_path / "cap", T0, {"rocep1s0f1/tx": tx, "rocep1s0f1/rx": tx},
                         clock_pairs=pairs)
    return load_capture(path)


def _native(tmp_path, rows, clock=None, name="log.jsonl"):
    p = tmp_path / name
    with open(p, "w") as f:
        for i, (a, b, c) in enumerate(rows):
            d = {"request_id": f"r{i}", "t_send": a, "t_first_token": b, "t_last_token": c,
                 "prompt_tokens": 10, "output_tokens": 5}
            if clock:
                d["clock"] = clock
            f.write(json.dumps(d) + "\n")
    return read_request_log(p)


def test_align_monotonic_direct(tmp_path):
    cap = _capture(tmp_path)
    log = _native(tmp_path, [(1000.5, 1001.0, 1002.0)])
    a = align(log, cap)
    assert a.alignment["method"] == "monotonic"
    assert a.requests.loc[0, "t_send_ns"] == 1000_500_000_000


def test_align_realtime_through_clock_pairs(tmp_path):
    # realtime - monotonic = 1.7e18 + 0 at start, + 2 ms at the end (4 s later): the offset is
    # interpolated linearly, so at the middle (2 s) it is 1 ms.
    off = 1_700_000_000_000_000_000
    pairs = [[T0 + off, T0], [T0 + 4 * S + off + 2 * MS, T0 + 4 * S]]
    cap = _capture(tmp_path, pairs=pairs)
    rt_mid = (T0 + 2 * S + off + 1 * MS) / 1e9  # realtime seconds of monotonic T0 + 2 s
    log = _native(tmp_path, [(rt_mid, rt_mid + 0.5, rt_mid + 1.0)], clock="CLOCK_REALTIME")
    assert log.clock == CLOCK_REALTIME
    a = align(log, cap)
    assert a.alignment["method"] == "clock_pairs"
    # float seconds of an epoch time carry ~0.2 us of rounding; the mapping itself is exact
    assert abs(a.requests.loc[0, "t_send_ns"] - (T0 + 2 * S)) < 1000
    # at +2.5 s the offset has slewed by 0.5 ms/s: m - T0 = (2.5 s + 1 ms) / (1 + 0.5e-3)
    expected = T0 + (2.5 * S + 1 * MS) / (1 + 0.5e-3)
    assert abs(a.requests.loc[0, "t_first_ns"] - expected) < 1000
    assert a.alignment["uncertainty_ns"] == 1 * MS  # half the 2 ms spread of the offsets


def test_align_monotonic_to_realtime_both_ways(tmp_path):
    """A monotonic log and its realtime twin land on the same capture instants."""
    off = 1_700_000_000_000_000_000
    cap = _capture(tmp_path, pairs=[[T0 + off, T0], [T0 + 4 * S + off, T0 + 4 * S]])
    mono = align(_native(tmp_path, [(1001.0, 1001.5, 1003.0)], name="m.jsonl"), cap)
    rt = align(_native(tmp_path, [((T0 + off) / 1e9 + 1.0, (T0 + off) / 1e9 + 1.5,
                                   (T0 + off) / 1e9 + 3.0)], clock="realtime", name="r.jsonl"),
               cap)
    for c in ("t_send_ns", "t_first_ns", "t_last_ns"):
        assert abs(int(mono.requests.loc[0, c]) - int(rt.requests.loc[0, c])) < 1000


def test_align_relative_with_offset_and_anchor(tmp_path):
    cap = _capture(tmp_path, n=8000, burst_at_ms=1500)
    log = read_request_log(DATA / "vllm_serve_result_nostart.json")
    with pytest.raises(RequestLogError, match="outside the capture"):
        align(log, cap, offset_s=5000.0)  # placed beyond the 8 s capture
    a = align(log, cap, offset_s=1000.2)
    assert a.alignment["method"] == "offset"
    assert a.ok.loc[0, "t_send_ns"] == 1000_200_000_000
    assert a.ok.loc[0, "t_first_ns"] == 1000_200_000_000 + 6_250_000_000
    # anchored: the first send goes to the start of the first 1 ms window of the burst
    short = _native(tmp_path, [(0.0, 0.5, 1.0), (0.1, 0.7, 1.2)], clock="relative")
    b = align(short, cap)
    assert b.alignment["method"] == "anchor"
    assert "ESTIMATE" in b.alignment["note"]
    assert b.alignment["uncertainty_ns"] == 1 * MS
    assert b.ok.loc[0, "t_send_ns"] == T0 + 1500 * MS
    assert b.ok.loc[1, "t_send_ns"] == T0 + 1600 * MS


def test_align_relative_without_burst_fails(tmp_path):
    cap = _capture(tmp_path)  # flat 3.2 Gb/s: nothing reaches 5 Gb/s
    log = _native(tmp_path, [(0.0, 0.5, 1.0)], clock="relative")
    with pytest.raises(RequestLogError, match="cannot be anchored"):
        align(log, cap)


def test_request_outside_capture_span(tmp_path):
    cap = _capture(tmp_path)  # 1000 s .. 1004 s
    # a request running past the capture end is kept, flagged, attributed over what was captured
    log = _native(tmp_path, [(1001.0, 1001.5, 1002.0), (1003.0, 1003.5, 1004.5)])
    a = align(log, cap)
    assert a.requests["ok"].all()
    assert a.requests.loc[1, "flag"].startswith("runs past the capture end (0.500 s after")
    assert a.requests.loc[0, "flag"] == ""
    # one wholly outside becomes failed; the rest is used
    log = _native(tmp_path, [(1001.0, 1001.5, 1002.0), (1005.0, 1005.5, 1006.0)], name="o.jsonl")
    a = align(log, cap)
    assert a.requests["ok"].tolist() == [True, False]
    assert "outside the capture" in a.requests.loc[1, "error"]
    # nothing inside: refused, naming the first request's row and field
    log = _native(tmp_path, [(990.0, 990.5, 991.0)], name="early.jsonl")
    with pytest.raises(RequestLogError, match="outside the capture") as ei:
        align(log, cap)
    assert (ei.value.row, ei.value.field) == (1, "t_send")
    assert "epoch" not in str(ei.value)


def test_epoch_times_without_a_clock_get_a_realtime_hint(tmp_path):
    cap = _capture(tmp_path)
    t = 1_767_225_600.5  # 2026-01-01, read as CLOCK_MONOTONIC because the log names no clock
    log = _native(tmp_path, [(t, t + 0.5, t + 1.0)])
    with pytest.raises(RequestLogError, match="look like Unix epoch seconds .2026-01-01.") as ei:
        align(log, cap)
    assert "CLOCK_REALTIME" in str(ei.value)


# ------------------------------------------------------------------------------------------------
# Warm-up written by the tools: kept out of every number, named
# ------------------------------------------------------------------------------------------------


def test_aiperf_warmup_records_are_kept_out_and_named(tmp_path):
    """AIPerf 0.13+ writes warm-up records to profile_export.jsonl (metadata.benchmark_phase
    "warmup"); its own report leaves them out, so does rdmascope, and says so."""
    lines = (DATA / "aiperf_profile_export.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    warm = json.loads(lines[0])
    warm["metadata"].update(benchmark_phase="warmup", x_request_id="warm-0",
                            request_start_ns=first["metadata"]["request_start_ns"] - S)
    p = tmp_path / "profile_export.jsonl"
    p.write_text("\n".join([json.dumps(warm), *lines]) + "\n")
    log = read_request_log(p)
    whole = read_request_log(DATA / "aiperf_profile_export.jsonl")
    assert list(log.requests["request_id"]) == list(whole.requests["request_id"])
    assert "warm-0" not in set(log.requests["request_id"])
    assert log.notes[0] == ("1 warm-up request(s) kept out of every number (1 AIPerf "
                            "benchmark_phase 'warmup')")


def test_guidellm_requests_outside_the_measure_window_are_warmup(tmp_path):
    """guidellm keeps warm-up requests in requests.successful and measures only inside
    scheduler_metrics.measure_start_time .. measure_end_time: the same here."""
    t0 = 1.7e9

    def req(i, send):
        return {"request_id": f"q{i}", "prompt_tokens": 8, "output_tokens": 4,
                "info": {"timings": {"request_start": send, "first_token_iteration": send + 0.5,
                                     "last_token_iteration": send + 1.0}}}

    reqs = [req(0, t0), req(1, t0 + 5), req(2, t0 + 6), req(3, t0 + 20)]
    d = {"benchmarks": [{"scheduler_metrics": {"measure_start_time": t0 + 4,
                                               "measure_end_time": t0 + 10},
                         "requests": {"successful": reqs, "incomplete": [], "errored": []}}]}
    p = tmp_path / "benchmarks.json"
    p.write_text(json.dumps(d))
    log = read_request_log(p)
    assert list(log.requests["request_id"]) == ["q1", "q2"]
    assert log.notes[0] == ("2 warm-up request(s) kept out of every number (1 guidellm: sent "
                            "before the benchmark's measure_start_time; 1 guidellm: sent after "
                            "the benchmark's measure_end_time)")
    # only warm-up: refused, naming why
    d["benchmarks"][0]["requests"]["successful"] = [reqs[0]]
    p.write_text(json.dumps(d))
    with pytest.raises(RequestLogError, match="holds only warm-up requests"):
        read_request_log(p)


def test_vllm_pooling_result_is_refused_with_what_it_lacks(tmp_path):
    """vllm bench serve on an embedding model saves the EmbedBenchmarkMetrics result (keys as
    in vllm/benchmarks/serve.py): no start_times, no ttfts. Named as such, not 'unknown
    format'."""
    d = {"date": "20260101-000000", "backend": "openai-embeddings", "duration": 3.2,
         "completed": 2, "total_input_tokens": 1024, "total_input_sequences": 2,
         "request_throughput": 0.6, "input_sequence_throughput": 0.6,
         "total_token_throughput": 320.0, "input_lens": [512, 512], "latencies": [0.1, 0.12],
         "queue_times": [0.0, 0.0], "errors": ["", ""], "mean_e2el_ms": 110.0}
    p = tmp_path / "embed.json"
    p.write_text(json.dumps(d))
    for fmt in (None, "vllm"):
        with pytest.raises(RequestLogError) as e:
            read_request_log(p, fmt)
        msg = str(e.value)
        assert str(p) in msg and "unknown format" not in msg
        if fmt is None:
            assert "pooling (embeddings)" in msg and "no send times (start_times)" in msg
            assert "no TTFT (ttfts)" in msg


# ------------------------------------------------------------------------------------------------
# Anchoring a relative log: never on a flagged window; uncertainty from the fit; ambiguity said
# ------------------------------------------------------------------------------------------------


def _relative_vllm(tmp_path):
    p = tmp_path / "vllm_relative.json"
    p.write_text(json.dumps({"request_rate": "inf", "input_lens": [64], "output_lens": [4],
                             "ttfts": [0.03], "itls": [[0.01, 0.01, 0.01]], "errors": [""]}))
    return p


def _mb_per_ms(gbps):
    return int(gbps * 1e9 / 8 / 1000) // 4 * 4


def test_anchor_skips_an_over_line_glitch_window(tmp_path):
    """A 673 Gb/s window on a 200 Gb/s port (impossible: a late counter update) came first and
    set the threshold: the log was placed on it. Flagged windows are never an anchor, nor set
    the threshold: the anchor is the real burst at 1.000 s."""
    b = np.full(3000, _mb_per_ms(0.5))
    b[400] = _mb_per_ms(673)          # the glitch
    b[1000:1030] = _mb_per_ms(100)    # the prefill burst: 30 ms at 100 Gb/s
    cap = load_capture(build_capture(tmp_path / "cap", 1000 * S, {"rocep1s0f1/tx": b}))
    log = align(read_request_log(_relative_vllm(tmp_path)), cap)
    al = log.alignment
    assert al["method"] == "anchor"
    assert al["offset_ns"] == 1000 * S + 1000 * MS
    # a sharp rise: one window of uncertainty, and the note says where it came from
    assert al["uncertainty_ns"] == MS
    assert "flagged windows never used" in al["note"] and "+-1 ms" in al["note"]


def test_anchor_uncertainty_grows_with_a_slow_rise(tmp_path):
    b = np.full(3000, _mb_per_ms(0.5))
    b[1000:1040] = [_mb_per_ms(g) for g in np.linspace(20, 100, 40)]  # 40 ms ramp
    cap = load_capture(build_capture(tmp_path / "cap", 1000 * S, {"rocep1s0f1/tx": b}))
    al = align(read_request_log(_relative_vllm(tmp_path)), cap).alignment
    # threshold 25 Gb/s is crossed at 1.003 s, the rise (>= 12.5 Gb/s) starts at 1.000 s, 1.5x
    # the threshold (37.5) at 1.009 s: the spread of those and one window
    thr = 25.0
    g = np.linspace(20, 100, 40)
    hit = int(np.argmax(g >= thr))
    over = int(np.argmax(g >= 1.5 * thr))
    assert al["offset_ns"] == 1000 * S + (1000 + hit) * MS
    assert al["uncertainty_ns"] == (over - 0) * MS + MS


def test_an_isolated_spike_is_an_ambiguous_anchor_refused_with_the_options(tmp_path):
    b = np.full(3000, _mb_per_ms(0.5))
    b[500] = _mb_per_ms(150)          # one window alone: no burst
    b[1000:1030] = _mb_per_ms(100)
    cap = load_capture(build_capture(tmp_path / "cap", 1000 * S, {"rocep1s0f1/tx": b}))
    with pytest.raises(RequestLogError) as e:
        align(read_request_log(_relative_vllm(tmp_path)), cap)
    msg = str(e.value)
    assert "ambiguous anchor" in msg and "isolated spike" in msg
    assert "--offset" in msg and "clock field" in msg


@pytest.mark.parametrize("loaded", [True, False], ids=["loaded", "streamed"])
def test_anchor_never_uses_a_counter_over_its_own_line_rate(tmp_path, loaded):
    """One twin's 1 ms window at 450 Gb/s on its 200 Gb/s port (over its line rate by far more
    than the timing uncertainty: a late counter update) while the other twin is idle: the sum
    (450) stays under the node's 2 x 200 Gb/s x 1.25, so only the per-counter rule (peaks'
    over-line flag) keeps it out. A loaded capture and a streamed one judge it alike: the
    first burst is the real one at 1.000 s, never the glitch at 0.400 s."""
    from rdmascope.analysis.requestlogs import first_burst_start_ns
    from rdmascope.analysis.stream import open_capture

    a = np.full(3000, _mb_per_ms(0.5))
    a[400] = _mb_per_ms(450)          # the glitch on one twin
    a[1000:1030] = _mb_per_ms(100)    # the prefill burst: 30 ms at 100 Gb/s
    b = np.full(3000, _mb_per_ms(0.5))
    path = build_capture(tmp_path / "cap", 1000 * S, {"rocep1s0f1/tx": a, "roceP2p1s0f1/tx": b})
    cap = load_capture(path) if loaded else open_capture(path)
    t, _ = first_burst_start_ns(cap)
    assert t == 1000 * S + 1000 * MS


def test_a_number_written_as_a_string_is_read_as_that_number(tmp_path):
    """docs/request-logs.md: "0.99" where a number belongs is that number; "soon" is refused
    naming the file, row and field."""
    import json as _json

    row = {"request_id": "a", "t_send": 100.25, "t_first_token": 101.5, "t_last_token": 103.0,
           "prompt_tokens": 10, "output_tokens": 5}
    as_num = tmp_path / "num.jsonl"
    as_num.write_text(_json.dumps(row) + "\n")
    as_str = tmp_path / "str.jsonl"
    as_str.write_text(_json.dumps({**row, "t_send": "100.25", "prompt_tokens": "10"}) + "\n")
    a, b = read_request_log(as_num).requests, read_request_log(as_str).requests
    for c in ("t_send_ns", "t_first_ns", "t_last_ns", "prompt_tokens"):
        assert a[c].tolist() == b[c].tolist(), c
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_json.dumps({**row, "t_send": "soon"}) + "\n")
    with pytest.raises(RequestLogError, match=r"bad.jsonl: row 1: field 't_send'"):
        read_request_log(bad)
