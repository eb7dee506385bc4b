"""Large request logs: the readers stay linear and lean, and give the same results as before."""

from __future__ import annotations

import json

import pytest
from rdmascope.analysis.requestlogs import RequestLogError, _json_sequence, read_request_log


def test_json_sequence_line_numbers_counted_incrementally(tmp_path):
    # three pretty-printed runs; the third breaks on its 3rd line: the line of the value and
    # of the fault are counted from the file's start (by hand: run 1 is lines 1-4, run 2
    # lines 5-8, blank line 9, run 3 starts on line 10, its fault on line 12)
    run = '{\n "ttfts": [0.5],\n "input_lens": [8], "output_lens": [2]\n}'
    text = run + "\n" + run + "\n\n" + '{\n "ttfts": [0.5],\n "input_lens": [8 x]\n}\n'
    p = tmp_path / "runs.jsonl"
    seq = _json_sequence(p, run + "\n" + run + "\n")
    assert [line for line, _ in seq] == [1, 5]
    with pytest.raises(RequestLogError, match=r"line 12\) in the value starting on line 10") \
            as ei:
        _json_sequence(p, text)
    assert ei.value.row == 10


def test_many_jsonl_rows_detected_as_native_not_as_runs(tmp_path):
    # a native JSONL log whose first row is a request, not a vLLM/SGLang run: detected and read
    # once; a bad row further down fails alone with its reason
    rows = [{"request_id": f"r{i}", "t_send": 10.0 + i, "t_first_token": 10.5 + i,
             "t_last_token": 10.9 + i, "prompt_tokens": 8, "output_tokens": 4}
            for i in range(3000)]
    rows[1234]["t_last_token"] = rows[1234]["t_send"]
    p = tmp_path / "requests.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = read_request_log(p)
    assert log.format == "native" and len(log.requests) == 3000 and log.n_failed == 1
    bad = log.requests[~log.requests["ok"]].iloc[0]
    assert bad["request_id"] == "r1234" and bad["row"] == 1235
    assert bad["error"].startswith("invalid: t_last_token: last token at")


GENAI_FILES = ["genai_perf_profile_export.json", "kinds/genai_perf_error_event.json",
               "kinds/genai_perf_reasoning_sse.json", "cases/M4.json", "cases/R6.json"]


def _same_log(a, b):
    import pandas as pd

    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    assert (a.format, a.clock, a.notes, a.runs) == (b.format, b.clock, b.notes, b.runs)


@pytest.mark.parametrize("name", GENAI_FILES)
def test_genai_perf_walked_request_by_request_equals_reading_it_whole(name, monkeypatch):
    from pathlib import Path

    from rdmascope.analysis import requestlogs as R

    p = Path(__file__).parent / "data" / "requestlogs" / name
    try:
        whole = read_request_log(p)
    except RequestLogError as exc:
        whole = exc
    monkeypatch.setattr(R.jsonwalk, "LAZY_JSON_CHARS", 0)
    monkeypatch.setattr(R.genai_perf, "_read_genai_perf", None)  # the walk alone must read these files
    try:
        lazy = read_request_log(p)
    except RequestLogError as exc:
        lazy = exc
    if isinstance(whole, RequestLogError):
        assert str(lazy) == str(whole)
    else:
        _same_log(lazy, whole)


def test_genai_perf_walk_with_several_experiments_and_bad_rows(tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    from rdmascope.analysis import requestlogs as R

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from requestlog_gen import write

    p = write(tmp_path / "g.json", "genai-perf", 1200, 100.0, 160.0,
              realtime_minus_mono_ns=1_700_000_000 * 10**9)
    d = json.loads(p.read_text())
    reqs = d["experiments"][0]["requests"]
    d["experiments"] = [{"experiment": {"value": 1}, "requests": reqs[:500]},
                        {"requests": reqs[500:], "experiment": {"value": 2}}]
    p.write_text(json.dumps(d, indent=2))
    whole = read_request_log(p)
    monkeypatch.setattr(R.jsonwalk, "LAZY_JSON_CHARS", 0)
    calls = []
    real = R.genai_perf._read_genai_perf
    monkeypatch.setattr(R.genai_perf, "_read_genai_perf", lambda *a: calls.append(1) or real(*a))
    lazy = read_request_log(p)
    assert not calls  # walked, not read whole
    _same_log(lazy, whole)
    assert set(lazy.requests["test"]) == {"experiment0", "experiment1"}
    assert lazy.n_failed == whole.n_failed > 0
    # a bad row: the same error (row and field) as reading the file whole
    d["experiments"][1]["requests"][7]["timestamp"] = "soon"
    p.write_text(json.dumps(d))
    monkeypatch.setattr(R.jsonwalk, "LAZY_JSON_CHARS", 10**12)
    with pytest.raises(RequestLogError) as e_whole:
        read_request_log(p)
    monkeypatch.setattr(R.jsonwalk, "LAZY_JSON_CHARS", 0)
    with pytest.raises(RequestLogError) as e_lazy:
        read_request_log(p)
    assert str(e_lazy.value) == str(e_whole.value) and e_lazy.value.row == 508
    # a bad row and a truncated file: the malformed JSON is reported, as before
    p.write_text(json.dumps(d)[:-40])
    with pytest.raises(RequestLogError, match="malformed JSON"):
        read_request_log(p)


@pytest.mark.parametrize("name,fmt", [("vllm_serve_result.json", "vllm"),
                                      ("guidellm_benchmarks_v04.json", "guidellm"),
                                      ("genai_perf_profile_export.json", "genai-perf"),
                                      ("inference_perf_per_request_lifecycle_metrics.json",
                                       "inference-perf")])
def test_detection_of_large_files_by_their_keys(name, fmt, monkeypatch):
    # every file taken as "large": the key walk stops at a vLLM/guidellm key and the whole
    # file decides as before; genai-perf is told by its keys alone
    from pathlib import Path

    from rdmascope.analysis import requestlogs as R

    monkeypatch.setattr(R.jsonwalk, "LAZY_JSON_CHARS", 0)
    p = Path(__file__).parent / "data" / "requestlogs" / name
    assert R.detect_format(p) == fmt
