"""Several request logs of one run (one per rank API server): ``--requests`` given several times.

The emulator's log of a 4-request round is split into two files as two rank servers would write
them (the same request ids in both). Each is aligned on its own; the merged attribution names
each request's source, keeps ids unique, and gives per-log and merged statistics; the merged
numbers are those of the one whole log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import RequestLogError, align, merge_logs, read_request_log

from rdmascope.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p4-200"


def _split(tmp_path):
    rows = [json.loads(x) for x in (FIX / "requests.jsonl").read_text().splitlines() if x]
    a, b = tmp_path / "rank0", tmp_path / "rank1"
    a.mkdir(), b.mkdir()
    for d, part in ((a, rows[:2]), (b, rows[2:])):
        # each rank server numbers its own requests from 0: the same ids in both files
        part = [{**r, "request_id": f"req-{i}"} for i, r in enumerate(part)]
        (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return a / "requests.jsonl", b / "requests.jsonl", rows


def test_merged_logs_name_their_source_and_equal_the_whole_log(tmp_path):
    pa, pb, rows = _split(tmp_path)
    cap = load_capture(FIX)
    merged = merge_logs([align(read_request_log(p), cap) for p in (pa, pb)])
    assert sorted(merged.requests["request_id"]) == ["rank0/requests.jsonl:req-0",
                                                     "rank0/requests.jsonl:req-1",
                                                     "rank1/requests.jsonl:req-0",
                                                     "rank1/requests.jsonl:req-1"]
    assert merged.notes[0].startswith("2 request logs merged, each aligned on its own")
    at = attribute(cap, merged)
    whole = attribute(cap, align(read_request_log(FIX / "requests.jsonl"), cap))
    # the same request in both: rank k's req-i is row 2k + i of the whole log
    order = ["rank0/requests.jsonl:req-0", "rank0/requests.jsonl:req-1",
             "rank1/requests.jsonl:req-0", "rank1/requests.jsonl:req-1"]
    r = at.requests.set_index("request_id").loc[order]
    w = whole.requests.set_index("request_id").loc[[x["request_id"] for x in rows]]
    assert list(r["source"]) == ["rank0/requests.jsonl"] * 2 + ["rank1/requests.jsonl"] * 2
    for col in ("prefill_tx_bytes", "decode_tx_bytes", "ttft_s", "prefill_tx_split_bytes"):
        assert list(r[col]) == pytest.approx(list(w[col]), rel=1e-12)
    c = at.cells
    merged_test = c[(c["scope"] == "test") & (c["source"] == "all")].iloc[0]
    whole_test = whole.cells[whole.cells["scope"] == "test"].iloc[0]
    assert merged_test["n_requests"] == 4
    assert merged_test["ttft_p99_s"] == pytest.approx(whole_test["ttft_p99_s"])
    per_log = c[c["scope"] == "log"].set_index("source")
    assert list(per_log["n_requests"]) == [2, 2]
    ttft = w["ttft_s"].to_numpy()
    assert per_log.loc["rank0/requests.jsonl", "ttft_max_s"] == pytest.approx(ttft[:2].max())
    assert per_log.loc["rank1/requests.jsonl", "ttft_max_s"] == pytest.approx(ttft[2:].max())


def test_cli_takes_requests_several_times(tmp_path):
    pa, pb, _ = _split(tmp_path)
    r = CliRunner().invoke(main, ["attribute", str(FIX), "--requests", str(pa), "--requests",
                                  str(pb), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    ids = [q["request_id"] for q in d["tables"]["requests"]] if "tables" in d else \
        [q["request_id"] for q in d["requests"]]
    assert len(ids) == len(set(ids)) == 4
    with pytest.raises(RequestLogError, match="more than once"):
        cap = load_capture(FIX)
        merge_logs([align(read_request_log(p), cap) for p in (pa, pa)])
    # on the command line: a usage error naming --requests (exit 2), not a log's problem (4)
    r = CliRunner().invoke(main, ["attribute", str(FIX), "--requests", str(pa), "--requests",
                                  str(pa)])
    assert r.exit_code == 2 and "Invalid value for '--requests'" in r.output, r.output
    assert "given more than once" in r.output
