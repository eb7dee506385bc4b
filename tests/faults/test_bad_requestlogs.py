"""Request logs the analysis must reject clearly: empty, malformed, unknown shape, wrong clock (no
overlap with the capture), rows out of order. Each message names the file, and the row (1-based
line for JSONL/CSV, position in the request list otherwise) and field where there is one.

Rows out of order: the *order of rows* in a file is not an error (a concurrent client writes a
request when it completes, not when it was sent), so rows are sorted by send time and the result
is the same as for the sorted file. Times out of order *within* a request (first token at or
before the send, last before first, chunks going back) and a request outside the capture are
that row's problem: the row fails with the reason naming the field, the rest is used; only a
file with nothing usable is refused (naming the first row's reason). vLLM's dispatch-ordered
``start_times`` going back refuse the file (the order of every row is in doubt).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import RequestLogError, align, read_request_log
from requestlog_helpers import MS, build_capture

from .conftest import run_cli

T0 = 5_000 * 10**9  # capture start: 5000 s on CLOCK_MONOTONIC


def _row(i, send, first, last, **kw):
    return {"request_id": f"r{i}", "t_send": send, "t_first_token": first, "t_last_token": last,
            "prompt_tokens": 100, "output_tokens": 10, **kw}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    p = tmp_path_factory.mktemp("cap") / "cap"
    build_capture(p, T0, {"rocep1s0f1/tx": np.full(2000, 4000), "rocep1s0f1/rx": np.full(2000, 4000)})
    return load_capture(p)


def _row_fails(path, *, row, field, match, fmt=None):
    """The file is read; row ``row`` failed with a reason naming ``field`` and ``match``."""
    log = read_request_log(path, fmt)
    bad = log.requests[~log.requests["ok"]].set_index("row")["error"]
    assert row in bad.index, bad
    assert bad[row].startswith(f"invalid: {field}:") and match in bad[row], bad[row]
    assert len(log.ok) == len(log.requests) - 1
    assert any(f"row {row}: invalid: {field}" in n for n in log.notes), log.notes
    return log


def _fails(path, *, row=None, field=None, match=None, fmt=None):
    with pytest.raises(RequestLogError) as ei:
        read_request_log(path, fmt)
    e = ei.value
    msg = str(e)
    assert str(path) in msg
    assert e.row == row, msg
    assert e.field == field, msg
    if row is not None:
        assert f"row {row}" in msg
    if field is not None:
        assert f"field {field!r}" in msg
    if match:
        assert match in msg, msg
    return msg


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty(tmp_path, content):
    p = tmp_path / "log.jsonl"
    p.write_text(content)
    _fails(p, match="is empty")


def test_header_only_csv_and_empty_list(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("request_id,t_send,t_first_token,t_last_token,prompt_tokens,output_tokens\n")
    _fails(p, fmt="native", match="holds no requests")
    q = tmp_path / "log.json"
    q.write_text("[]")
    _fails(q, fmt="native", match="holds no requests")


def test_malformed_json_line(tmp_path):
    p = tmp_path / "log.jsonl"
    good = [json.dumps(_row(i, 5001 + i, 5001.1 + i, 5001.5 + i)) for i in range(3)]
    p.write_text(good[0] + "\n" + good[1] + "\n" + '{"request_id": "r2", "t_send": 50' + "\n")
    _fails(p, fmt="native", row=3, match="malformed JSON line")


@pytest.mark.parametrize("field,value,match", [
    ("t_send", "soon", "expected a number"),
    ("t_first_token", float("nan"), "finite"),
    ("t_last_token", None, "missing value"),
    ("output_tokens", -3, "non-negative integer"),
    ("prompt_tokens", 1.5, "non-negative integer"),
])
def test_malformed_field(tmp_path, field, value, match):
    rows = [_row(i, 5001 + i, 5001.1 + i, 5001.5 + i) for i in range(4)]
    rows[2][field] = value
    p = tmp_path / "log.jsonl"
    p.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in rows))
    _fails(p, fmt="native", row=3, field=field, match=match)


def test_missing_field(tmp_path):
    rows = [_row(i, 5001 + i, 5001.1 + i, 5001.5 + i) for i in range(3)]
    del rows[1]["t_first_token"]
    _fails(_jsonl(tmp_path / "log.jsonl", rows), fmt="native", row=2, field="t_first_token",
           match="missing")


def test_csv_row_with_extra_values(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("request_id,t_send,t_first_token,t_last_token,prompt_tokens,output_tokens\n"
                 "a,5001,5001.1,5001.5,100,10\n"
                 "b,5002,5002.1,5002.5,100,10,oops\n")
    _fails(p, fmt="native", row=3, match="values but the header names 6")


@pytest.mark.parametrize("content,match", [
    (json.dumps({"hello": 1, "world": [1, 2]}), "unknown format"),
    (json.dumps([1, 2, 3]), "unknown format"),
    (json.dumps({"x": 1}) + "\n" + json.dumps({"y": 2}) + "\n", "unknown format"),
    ("this is not a log\nat all\n", "unknown format"),
])
def test_unknown_shape(tmp_path, content, match):
    p = tmp_path / "log.json"
    p.write_text(content)
    msg = _fails(p, match=match)
    assert "native" in msg  # says what was expected


def test_not_utf8(tmp_path):
    p = tmp_path / "log.jsonl"
    p.write_bytes(b'{"request_id": "\xff\xfe"}\n')
    _fails(p, match="not UTF-8 text (byte")


def test_unknown_clock_name(tmp_path):
    rows = [_row(0, 5001, 5001.1, 5001.5, clock="tsc")]
    _fails(_jsonl(tmp_path / "log.jsonl", rows), fmt="native", row=1, field="clock",
           match="unknown clock 'tsc'")


@pytest.mark.parametrize("clock,send", [
    ("CLOCK_MONOTONIC", 12.0),  # another boot / host: long before the capture
    ("CLOCK_MONOTONIC", 5003.5),  # starts inside but ends after the capture (2 s long)
    ("CLOCK_REALTIME", 1_600_000_000.0),  # a realtime log from another day
])
def test_wrong_clock_no_overlap(tmp_path, capture, clock, send):
    rows = [_row(0, 5000.5, 5000.6, 5000.9, clock=clock) if clock == "CLOCK_MONOTONIC" else
            _row(0, 1_700_000_000 + 5000.5, 1_700_000_000 + 5000.6, 1_700_000_000 + 5000.9,
                 clock=clock),
            _row(1, send, send + 0.1, send + 0.4, clock=clock)]
    p = _jsonl(tmp_path / "log.jsonl", rows)
    log = read_request_log(p)
    # a request wholly outside the capture fails alone, with the reason; the other is used
    a = align(log, capture)
    bad = a.requests[~a.requests["ok"]]
    assert bad["row"].tolist() == [2]
    assert "outside the capture" in bad["error"].iloc[0]
    assert a.ok["row"].tolist() == [1]
    res = run_cli("attribute", capture.path, "--requests", p)
    assert res.exit_code == 0 and "outside the capture" in res.output, res.output
    # nothing inside: the log is refused, naming the file, row and field
    p = _jsonl(tmp_path / "all_out.jsonl", rows[1:])
    with pytest.raises(RequestLogError) as ei:
        align(read_request_log(p), capture)
    e = ei.value
    msg = str(e)
    assert str(p) in msg and e.row == 1 and e.field in ("t_send", "t_last_token"), msg
    assert "outside the capture" in msg and str(capture.path) in msg
    # the CLI says the same and exits 4
    res = run_cli("attribute", capture.path, "--requests", p)
    assert res.exit_code == 4 and str(p) in res.output and "row 1" in res.output, res.output


def test_row_order_does_not_matter(tmp_path, capture):
    rows = [_row(i, 5000.2 + 0.1 * i, 5000.25 + 0.1 * i, 5000.5 + 0.1 * i) for i in range(8)]
    shuffled = [rows[i] for i in (5, 0, 7, 2, 1, 6, 3, 4)]
    a = read_request_log(_jsonl(tmp_path / "sorted.jsonl", rows)).requests
    b = read_request_log(_jsonl(tmp_path / "shuffled.jsonl", shuffled)).requests
    cols = ["request_id", "t_send_ns", "t_first_ns", "t_last_ns"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert list(b["request_id"]) == [f"r{i}" for i in range(8)]


@pytest.mark.parametrize("bad,field,match", [
    (dict(t_first_token=5000.1), "t_first_token", "before the send"),
    (dict(t_last_token=5000.21), "t_last_token", "before the first token"),
    (dict(chunk_times=[5000.25, 5000.3, 5000.28]), "chunk_times", "chunk 2 arrives before chunk 1"),
])
def test_times_out_of_order_within_a_request(tmp_path, bad, field, match):
    rows = [_row(i, 5000.2 + i, 5000.25 + i, 5000.5 + i) for i in range(3)]
    rows[0].update(bad)
    _row_fails(_jsonl(tmp_path / "log.jsonl", rows), fmt="native", row=1, field=field,
               match=match)
    # the same row alone: nothing usable, refused naming the row, field and reason
    _fails(_jsonl(tmp_path / "one.jsonl", rows[:1]), fmt="native", row=1, field=field,
           match=match)


def test_vllm_start_times_out_of_order(tmp_path):
    p = tmp_path / "vllm.json"
    p.write_text(json.dumps({
        "input_lens": [10, 10, 10], "output_lens": [5, 5, 5], "ttfts": [0.1, 0.1, 0.1],
        "itls": [[0.01] * 4] * 3, "latencies": [0.2, 0.2, 0.2], "errors": ["", "", ""],
        "start_times": [100.0, 100.5, 100.2]}))
    _fails(p, row=3, field="start_times", match="before the previous request's")


def test_all_requests_failed(tmp_path):
    rows = [_row(i, 5001 + i, None, None, error="timeout") for i in range(3)]
    _fails(_jsonl(tmp_path / "log.jsonl", rows), fmt="native",
           match="holds no successful request (3 failed: row 1: timeout; row 2: timeout; "
                 "row 3: timeout)")


def test_alignment_is_exact_for_a_good_log(tmp_path, capture):
    """Control: the same shapes, valid, align exactly (monotonic: offset 0)."""
    rows = [_row(i, 5000.2 + 0.1 * i, 5000.25 + 0.1 * i, 5000.5 + 0.1 * i) for i in range(3)]
    log = align(read_request_log(_jsonl(tmp_path / "ok.jsonl", rows)), capture)
    assert log.requests["t_send_ns"].tolist() == [5_000_200_000_000 + i * 100 * MS
                                                  for i in range(3)]


def test_first_token_at_the_send_instant(tmp_path):
    """TTFT 0 (t_first_token == t_send) is impossible, like a first token before the send."""
    rows = [_row(i, 5000.2 + i, 5000.25 + i, 5000.5 + i) for i in range(3)]
    rows[1]["t_first_token"] = rows[1]["t_send"]
    p = _jsonl(tmp_path / "log.jsonl", rows)
    _row_fails(p, fmt="native", row=2, field="t_first_token",
               match="a TTFT of 0 s is impossible")
    # the same instant on a failed request is not an error (its times are not used)
    rows[1]["error"] = "timeout"
    log = read_request_log(_jsonl(tmp_path / "failed.jsonl", rows))
    assert log.n_failed == 1 and list(log.ok["request_id"]) == ["r0", "r2"]


def test_vllm_ttft_of_zero(tmp_path):
    p = tmp_path / "vllm.json"
    p.write_text(json.dumps({
        "input_lens": [10, 10], "output_lens": [5, 5], "ttfts": [0.1, 0.0],
        "itls": [[0.01] * 4] * 2, "latencies": [0.2, 0.2], "errors": ["", ""],
        "start_times": [100.0, 100.5]}))
    _row_fails(p, row=2, field="t_first_token", match="a TTFT of 0 s is impossible")


def test_attribute_cli_fails_a_ttft_of_zero_alone(tmp_path, capture):
    from click.testing import CliRunner

    from rdmascope.cli import main

    rows = [_row(i, 5000.2 + 0.1 * i, 5000.25 + 0.1 * i, 5000.5 + 0.1 * i) for i in range(3)]
    rows[2]["t_first_token"] = rows[2]["t_send"]
    p = _jsonl(tmp_path / "log.jsonl", rows)
    r = CliRunner().invoke(main, ["attribute", str(capture.path), "--requests", str(p)])
    assert r.exit_code == 0, r.output
    assert "2 ok, 1 failed" in r.output and "Failed requests" in r.output
    assert "invalid: t_first_token" in r.output and "TTFT of 0 s is impossible" in r.output
    p = _jsonl(tmp_path / "only.jsonl", rows[2:])
    r = CliRunner().invoke(main, ["attribute", str(capture.path), "--requests", str(p)])
    assert r.exit_code == 4
    assert str(p) in r.output and "row 1" in r.output and "t_first_token" in r.output
    assert "TTFT of 0 s is impossible" in r.output


def test_aiperf_line_that_is_not_an_object_is_named(tmp_path):
    """An AIPerf JSONL line holding a JSON array (not a record object) is refused with its line
    number, like a native JSONL line; it used to reach ``.get`` and crash."""
    src = pathlib.Path(__file__).resolve().parents[1] / "data" / "requestlogs" / "aiperf_profile_export.jsonl"
    lines = src.read_text().splitlines()
    bad = tmp_path / "profile_export.jsonl"
    bad.write_text("\n".join([lines[0], "[1, 2, 3]", *lines[1:]]) + "\n")
    with pytest.raises(RequestLogError) as ei:
        read_request_log(bad, format="aiperf")
    assert ei.value.row == 2
    assert "expected a JSON object, got list" in str(ei.value)
    assert str(bad) in str(ei.value)


def test_guidellm_flat_requests_list_names_the_accepted_layouts(tmp_path):
    """guidellm never wrote benchmarks[].requests as a flat list (v0.1: results[]/errors[];
    v0.2-0.3: requests.{successful,incomplete,errored}[] with flat times; v0.4+: the same with
    info.timings): refused, and the message lists the layouts that are read."""
    req = {"request_id": "a", "prompt_tokens": 8, "output_tokens": 4, "start_time": 1.7e9,
           "first_token_time": 1.7e9 + 1, "last_token_time": 1.7e9 + 2, "end_time": 1.7e9 + 2}
    p = tmp_path / "benchmarks.json"
    p.write_text(json.dumps({"benchmarks": [{"requests": [req]}]}))
    with pytest.raises(RequestLogError) as e:
        read_request_log(p)
    msg = str(e.value)
    assert str(p) in msg and "benchmarks[0].requests" in msg
    assert "'requests' is a list: no guidellm version writes a flat requests[] list" in msg
    for layout in ("requests.{successful,incomplete,errored}[] (v0.2+",
                   "info.timings.{request_start,first_token_iteration,last_token_iteration}",
                   "flat start_time/first_token_time/last_token_time in v0.2-0.3",
                   "benchmarks[].results[] with errors[] (v0.1"):
        assert layout in msg
    # the same request in the layouts guidellm wrote is read
    for bench in ({"requests": {"successful": [req], "incomplete": [], "errored": []}},
                  {"results": [{**req, "prompt_token_count": 8, "output_token_count": 4}],
                   "errors": [{"request": {"prompt": "x"}, "message": "timeout"}]}):
        p.write_text(json.dumps({"benchmarks": [bench]}))
        log = read_request_log(p)
        ok = log.ok.iloc[0]
        assert (ok["t_first_ns"] - ok["t_send_ns"], ok["prompt_tokens"]) == (10**9, 8)
    # v0.1's errors carry 'message': kept as the failure's error text
    assert log.n_failed == 1 and log.requests.loc[~log.requests["ok"], "error"].iloc[0] \
        == "timeout"


@pytest.mark.parametrize("field,value", [("output_tokens", 10**30), ("prompt_tokens", 2**63)])
def test_token_count_beyond_int64_is_refused_naming_row_and_field(tmp_path, field, value):
    """A count that cannot be stored (above 2^63-1) is refused with its row and field; it used to
    escape as an OverflowError traceback from pandas."""
    rows = [_row(i, 5001 + i, 5001.1 + i, 5001.5 + i) for i in range(4)]
    rows[2][field] = value
    _fails(_jsonl(tmp_path / "log.jsonl", rows), fmt="native", row=3, field=field,
           match="too large")


@pytest.mark.parametrize("send", [1.7e18, 1e300])
def test_time_beyond_int64_ns_is_refused_naming_the_row(tmp_path, send):
    """Epoch nanoseconds written into a seconds field (1.7e18 s) or an absurd time: refused with
    the row and a hint, never an OverflowError (the ns value exceeds int64 or even a float)."""
    rows = [_row(i, 5001 + i, 5001.1 + i, 5001.5 + i) for i in range(4)]
    rows[1].update(t_send=send, t_first_token=send + 1, t_last_token=send + 2)
    msg = _fails(_jsonl(tmp_path / "log.jsonl", rows), fmt="native", row=2,
                 match="send time: a time of ")
    assert "int64 nanoseconds" in msg and "ns or us written as seconds" in msg


def test_attribute_cli_refuses_a_huge_count_with_one_error_line(tmp_path, capture):
    rows = [_row(i, 5000.2 + 0.1 * i, 5000.25 + 0.1 * i, 5000.5 + 0.1 * i) for i in range(3)]
    rows[0]["output_tokens"] = 10**30
    p = _jsonl(tmp_path / "log.jsonl", rows)
    r = run_cli("attribute", str(capture.path), "--requests", str(p))
    assert r.exit_code == 4, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert f"Error: {p}: row 1: field 'output_tokens'" in r.output


# ------------------------------------------------------------------------------------------------
# Wrong JSON types reach no reader unchecked; the one plausibility rule in every reader
# ------------------------------------------------------------------------------------------------

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "requestlogs"


def _ip_requests(n=3, t0=7000.0):
    """inference-perf lifecycle records, by hand: 4 chunks 0.1 s apart, 4 output tokens."""
    return [{"start_time": t0 + 10 * i, "end_time": t0 + 10 * i + 1.0, "error": None,
             "info": {"input_tokens": 64, "response_metrics": {
                 "output_tokens": 4,
                 "chunk_times": [t0 + 10 * i + 0.5 + 0.1 * k for k in range(4)]}}}
            for i in range(n)]


def _genai(reqs):
    return {"experiments": [{"requests": reqs}]}


def _vllm(**kw):
    d = {"start_times": [10.0, 11.0], "input_lens": [8, 8], "output_lens": [3, 3],
         "ttfts": [0.5, 0.5], "itls": [[0.1, 0.1], [0.1, 0.1]], "latencies": [0.7, 0.7],
         "errors": ["", ""]}
    d.update(kw)
    return d


@pytest.mark.parametrize("name,content,fmt,row,field,match", [
    # genai-perf: a request that is null, timestamps that are a number, outputs an object
    ("g.json", _genai([None]), "genai-perf", 1, "requests[]", "got null"),
    ("g.json", _genai([{"timestamp": 1, "response_timestamps": 5}]), "genai-perf", 1,
     "response_timestamps", "expected a JSON list, got a number"),
    ("g.json", _genai([{"timestamp": 1, "response_timestamps": [2],
                        "response_outputs": {"a": 1}}]), "genai-perf", 1, "response_outputs",
     "got a JSON object"),
    ("g.json", {"experiments": [7]}, "genai-perf", None, "experiments[0]", "got a number"),
    # inference-perf: info a list, response_metrics a number, chunk_times a number
    ("i.json", [{"start_time": 1.0, "info": []}], "inference-perf", 1, "info", "got a JSON list"),
    ("i.json", [{"start_time": 1.0, "info": {"response_metrics": 7}}], "inference-perf", 1,
     "info.response_metrics", "got a number"),
    ("i.json", [{"start_time": 1.0, "info": {"response_metrics": {"chunk_times": 3.5,
                                                                  "output_tokens": 2}}}],
     "inference-perf", 1, "info.response_metrics.chunk_times", "got a number"),
    # native: chunk_times a number, or text that is no JSON list
    ("n.jsonl", [_row(0, 1, 2, 3, chunk_times=5)], "native", 1, "chunk_times", "got a number"),
    ("n.jsonl", [_row(0, 1, 2, 3, chunk_times="[1,")], "native", 1, "chunk_times",
     "expected a JSON list of times"),
    # vLLM: an array that is null, one request's ITLs a number, max_concurrency a string
    ("v.json", _vllm(ttfts=None), "vllm", None, "ttfts", "got null"),
    ("v.json", _vllm(itls=[5, [0.1]]), "vllm", 1, "itls", "got a number"),
    ("v.json", {**_vllm(), "start_times": None, "max_concurrency": "x"}, "vllm", None,
     "max_concurrency", "expected a number"),
    # aiperf: metrics a list, a scalar metric given a list
    ("a.jsonl", [{"metadata": {"request_start_ns": 1}, "metrics": []}], "aiperf", 1, "metrics",
     "got a JSON list"),
    ("a.jsonl", [{"metadata": {"request_start_ns": 1}, "metrics": {
        "time_to_first_token": {"value": [1, 2], "unit": "ms"}}}], "aiperf", 1,
     "metrics.time_to_first_token.value", "got a JSON list"),
    # guidellm: a status list that is a number
    ("b.json", {"benchmarks": [{"requests": {"successful": 3}}]}, "guidellm", None,
     "benchmarks[0].requests.successful", "got a number"),
])
def test_wrong_json_types_are_refused_naming_row_and_field(tmp_path, name, content, fmt, row,
                                                           field, match):
    """A null, a number or a list where the layout has an object or a list (or the reverse) is
    refused at the edge with the file, row and field named and the type found: these reached
    ``.get``, ``len`` or ``<`` before and escaped as tracebacks."""
    p = tmp_path / name
    if name.endswith(".jsonl"):
        p.write_text("".join(json.dumps(r) + "\n" for r in content))
    else:
        p.write_text(json.dumps(content))
    for f in (fmt, None):
        if f is None and fmt in ("aiperf", "native") and not content:
            continue
        try:
            msg = _fails(p, fmt=f, row=row, field=field, match=match)
        except AssertionError:
            if f is None:  # detection may refuse a mutant earlier, naming what it saw
                with pytest.raises(RequestLogError):
                    read_request_log(p)
                continue
            raise
        assert "Traceback" not in msg


def _ip_file(tmp_path, reqs):
    p = tmp_path / "per_request_lifecycle_metrics.json"
    p.write_text(json.dumps(reqs))
    return p


def test_inference_perf_chunk_times_going_back_fail_that_row(tmp_path):
    """inference-perf appends chunk times as they arrive: a list going back in time is that
    row's fault (it used to be sorted silently and read as a good request)."""
    reqs = _ip_requests()
    ch = reqs[1]["info"]["response_metrics"]["chunk_times"]
    ch[1], ch[2] = ch[2], ch[1]
    log = _row_fails(_ip_file(tmp_path, reqs), row=2, field="info.response_metrics.chunk_times",
                     match="chunk 2 arrives before chunk 1")
    assert len(log.ok) == 2


@pytest.mark.parametrize("fmt", ["inference-perf", "native"])
def test_more_token_chunks_than_output_tokens_fail_that_row(tmp_path, fmt):
    """A chunk carries at least one token: 4 token chunks for 2 output tokens is no request,
    whichever reader built it (the same rule in every reader)."""
    if fmt == "inference-perf":
        reqs = _ip_requests()
        reqs[0]["info"]["response_metrics"]["output_tokens"] = 2
        p = _ip_file(tmp_path, reqs)
    else:
        rows = [_row(i, 5001 + i, 5001.5 + i, 5001.8 + i, output_tokens=4,
                     chunk_times=[5001.5 + i, 5001.6 + i, 5001.7 + i, 5001.8 + i])
                for i in range(3)]
        rows[0]["output_tokens"] = 2
        p = _jsonl(tmp_path / "log.jsonl", rows)
    _row_fails(p, row=1, field="chunk_times", match="4 token-bearing chunks for 2 output tokens")


def test_a_send_time_of_zero_among_real_ones_fails_that_row(tmp_path):
    """``start_time: 0`` among sends at ~1.77e9 s made a 56-year TTFT that became the test's
    mean: the row fails, naming the day rule."""
    reqs = _ip_requests(t0=1.767e9)
    reqs[2]["start_time"] = 0
    log = _row_fails(_ip_file(tmp_path, reqs), row=3, field="t_last_token",
                     match="beyond a day")
    assert len(log.ok) == 2
    # with epoch times (genai-perf, ns): the same rule, the same reason
    base = 1_767_225_600 * 10**9
    g = [{"timestamp": base + i * 10**9, "response_timestamps": [base + i * 10**9 + 5 * 10**8],
          "response_outputs": [{"response": 'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'}]}
         for i in range(3)]
    g[0]["timestamp"] = 0
    p = tmp_path / "profile_export.json"
    p.write_text(json.dumps(_genai(g)))
    _row_fails(p, row=1, field="t_last_token", match="beyond a day")


def test_a_send_a_day_away_from_the_others_fails_that_row(tmp_path):
    """Each request alone is plausible, but one send lies 2 days from the log's others (another
    clock or a unit slip): the row fails, the rest is read."""
    rows = [_row(i, 5001 + i, 5001.5 + i, 5001.8 + i) for i in range(4)]
    rows[3].update(t_send=5001 + 2 * 86400, t_first_token=5001.5 + 2 * 86400,
                   t_last_token=5001.8 + 2 * 86400)
    _row_fails(_jsonl(tmp_path / "log.jsonl", rows), row=4, field="t_send",
               match="days from the log's median send")


@pytest.mark.parametrize("fmt,field", [("native", "output_tokens"), ("inference-perf",
                                                                     "output_tokens"),
                                       ("native", "prompt_tokens")])
def test_token_counts_beyond_any_context_fail_that_row(tmp_path, fmt, field):
    """1.77e9 output tokens (an epoch second in a count field) is no request: that row fails
    naming the field, in every reader."""
    if fmt == "native":
        rows = [_row(i, 5001 + i, 5001.5 + i, 5001.8 + i) for i in range(3)]
        rows[1][field] = 1_770_000_000
        p = _jsonl(tmp_path / "log.jsonl", rows)
    else:
        reqs = _ip_requests()
        reqs[1]["info"]["response_metrics"]["output_tokens"] = 1_770_000_000
        p = _ip_file(tmp_path, reqs)
    _row_fails(p, row=2, field=field, match="beyond any model's context")
