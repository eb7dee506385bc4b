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
