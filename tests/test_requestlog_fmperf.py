"""fmperf results (fmperf-project/fmperf ``loadgen/run.py`` / ``sweep.py`` at 8d85bc3d) read and
placed on the committed demo capture. The right values come from the capture's own
``requests.jsonl`` (the emulator's truth) and from fmperf's own per-request formulas
(``utils/Parsing.py``: TTFT = ``duration_ms`` of ``response_idx`` 0, E2E = the sum of the
request's ``duration_ms``), never from the reader."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import RequestLogError, align, read_request_log
from rdmascope.analysis.requestlogs.detector import detect_format

DATA = Path(__file__).parent / "data" / "requestlogs"
KINDS = DATA / "kinds"
CAP = DATA / "cases" / "demo16_capture"
FILE = KINDS / "fmperf_results_vllm.json"
sys.path.insert(0, str(KINDS))
import make_kinds  # noqa: E402


@pytest.fixture(scope="module")
def cap():
    return load_capture(CAP)


@pytest.fixture(scope="module")
def ref(cap):
    att = attribute(cap, align(read_request_log(CAP / "requests.jsonl"), cap))
    return {r["test"]: r for r in att.requests.to_dict("records")}


def _fmperf_per_request(results: list) -> dict:
    """fmperf's own per-request TTFT and E2E (ms), as parse_results computes them."""
    out: dict = {}
    for r in results:
        k = f"w{r['worker_idx']}-r{r['request_idx']}"
        d = out.setdefault(k, {"e2e_ms": 0.0})
        if r["response_idx"] == 0:
            d["ttft_ms"] = r["duration_ms"]
        d["e2e_ms"] += r["duration_ms"]
    return out


def test_fmperf_run_results_give_the_reference(cap, ref):
    doc = json.loads(FILE.read_text())
    assert detect_format(FILE) == "fmperf"
    log = read_request_log(FILE)
    assert log.format == "fmperf" and log.clock == "CLOCK_REALTIME"
    # the broken stream is failed with fmperf's error text and its row; the request that ran
    # past duration + grace is kept out and named, as fmperf's n_exclude
    assert log.n_failed == 1
    bad = log.requests[~log.requests["ok"]].iloc[0]
    assert bad["request_id"] == "w0-r1" and "IncompleteRead" in bad["error"]
    assert log.notes[0].startswith("1 request(s) outside the tool's measured run kept out")
    assert "exclude" in log.notes[0]
    assert "w1-r1" not in set(log.requests["request_id"])
    att = attribute(cap, align(log, cap))
    got = att.requests.set_index("request_id")
    tool = _fmperf_per_request(doc["results"])
    for rid, test in (("w0-r0", "P1"), ("w1-r0", "P2")):
        g, w = got.loc[rid], ref[test]
        assert g["ttft_s"] == pytest.approx(w["ttft_s"], abs=1e-6)
        assert g["tpot_s"] == pytest.approx(w["tpot_s"], abs=1e-6)
        assert g["e2e_s"] == pytest.approx(w["e2e_s"], abs=1e-6)
        assert g["prefill_tx_bytes"] == pytest.approx(w["prefill_tx_bytes"], rel=1e-6)
        # fmperf's own formulas on the same records
        assert g["ttft_s"] * 1e3 == pytest.approx(tool[rid]["ttft_ms"], abs=1e-6)
        assert g["e2e_s"] * 1e3 == pytest.approx(tool[rid]["e2e_ms"], abs=1e-6)
        assert g["output_tokens"] == 16
    # P1's first chunk carried 3 tokens (3 records at one time): 14 chunks; P2 one per token
    assert got.loc["w0-r0", "n_chunks"] == 14 and got.loc["w1-r0", "n_chunks"] == 16


def test_fmperf_sweep_list_tgis_messages_become_tests(tmp_path):
    """sweep.py's all-results file: the bare list, two exp_num_users values (tests), TGIS
    messages carrying several tokens each."""
    R = make_kinds.ref()
    recs = []
    for users, (wid, p) in ((1, (0, R["P1"])), (2, (0, R["P2"]))):
        toks = p["tokens"]
        msgs = [(toks[0], 1)] + [(toks[i], 2) for i in range(2, 15, 2)] + [(toks[15], 1)]
        prev = p["t_send"]
        for k, (t, n) in enumerate(msgs):
            recs.append(make_kinds.fmperf_record(wid, 0, k, t, prev, n, users=users))
            prev = t
    f = tmp_path / "results_all.json"
    f.write_text(json.dumps(recs))
    assert detect_format(f) == "fmperf"
    log = read_request_log(f)
    df = log.requests.set_index("request_id")
    assert list(df.index) == ["u1-w0-r0", "u2-w0-r0"]
    assert list(df["test"]) == ["concurrency 1", "concurrency 2"]
    assert list(df["output_tokens"]) == [16, 16]
    assert [len(c) for c in df["chunk_times"]] == [9, 9]
    for rid, p in (("u1-w0-r0", R["P1"]), ("u2-w0-r0", R["P2"])):
        assert df.loc[rid, "t_send_ns"] == make_kinds.ns(p["t_send"])
        assert df.loc[rid, "t_first_ns"] == make_kinds.ns(p["t_first_token"])
        assert df.loc[rid, "t_last_ns"] == make_kinds.ns(p["tokens"][15])


def _write(tmp_path, doc) -> Path:
    p = tmp_path / "result.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("where,value,row,field,msg", [
    (("results",), {"a": 1}, None, "results", "expected a JSON list, got a JSON object"),
    (("results", 0), "x", 1, None, "expected a response record"),
    (("results", 0, "timestamp"), "soon", 1, "timestamp", "expected a number"),
    (("results", 1, "duration_ms"), [1], 2, "duration_ms", "expected a number"),
    (("results", 2, "ok"), "yes", 3, "ok", "expected true or false, got a string"),
    (("results", 0, "n_tokens"), -1, 1, "n_tokens", "non-negative integer"),
    (("results", 0, "worker_idx"), None, 1, "worker_idx", "missing value"),
])
def test_fmperf_bad_values_name_file_row_field(tmp_path, where, value, row, field, msg):
    doc = copy.deepcopy(json.loads(FILE.read_text()))
    cur = doc
    for k in where[:-1]:
        cur = cur[k]
    cur[where[-1]] = value
    with pytest.raises(RequestLogError, match=msg) as ei:
        read_request_log(_write(tmp_path, doc), format="fmperf")
    assert ei.value.row == row and ei.value.field == field
    assert str(_write(tmp_path, doc)) in str(ei.value)


def test_fmperf_missing_key_and_implausible_rows(tmp_path):
    doc = json.loads(FILE.read_text())
    d = copy.deepcopy(doc)
    del d["results"][4]["response_idx"]
    with pytest.raises(RequestLogError) as ei:
        read_request_log(_write(tmp_path, d), format="fmperf")
    assert ei.value.row == 5 and ei.value.field == "response_idx"
    # a request's own problems fail that request only (checks.PLAUSIBILITY), with the reason
    d = copy.deepcopy(doc)
    w0 = [r for r in d["results"] if (r["worker_idx"], r["request_idx"]) == (0, 0)]
    w0[5]["response_idx"] = 4                         # a record twice
    w1 = [r for r in d["results"] if (r["worker_idx"], r["request_idx"]) == (1, 0)]
    w1[0]["duration_ms"] = -5.0                        # the send after the first token
    with pytest.raises(RequestLogError, match="holds no successful request") as ei:
        read_request_log(_write(tmp_path, d))
    assert "row 1: invalid: response_idx: 4 appears more than once" in str(ei.value)
    assert "row 17: invalid: t_first_token: first token at" in str(ei.value)
    # no usable request: refused naming the rows' reasons
    d = copy.deepcopy(doc)
    for r in d["results"]:
        r["n_tokens"] = 0
    with pytest.raises(RequestLogError, match="no response record carried a token"):
        read_request_log(_write(tmp_path, d))
    # more tokens than any context: the shared plausibility rule
    d = copy.deepcopy(doc)
    w1 = [r for r in d["results"] if (r["worker_idx"], r["request_idx"]) == (1, 0)]
    w1[3]["n_tokens"] = 20_000_000
    log = read_request_log(_write(tmp_path, d))
    assert "output" in log.requests.set_index("request_id")["error"]["w1-r0"]


def test_fmperf_through_the_cli():
    from click.testing import CliRunner

    from rdmascope.cli import main

    res = CliRunner().invoke(main, ["attribute", str(CAP), "--requests", str(FILE),
                                    "--format", "fmperf"])
    assert res.exit_code == 0, res.output
    assert "outside the tool's measured run kept out" in res.output
