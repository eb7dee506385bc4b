"""Request logs as the tools really write them, placed on a committed demo capture.

``tests/data/requestlogs/cases/`` holds seven failing files (README there) and the capture they
are placed on (``demo16_capture``, made once by ``rdmascope simulate capture --scenario demo
--output-tokens 16`` and committed, so emulator changes cannot move it). ``kinds/`` holds our own
files, one or more per kind of fault. The right values are never copied from those files: they
come from the capture's own ``requests.jsonl`` (the emulator's truth on the capture's clock),
attributed the same way.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rdmascope.analysis import metrics as M
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import (
    RequestLogError,
    align,
    check_itls,
    classify_event,
    read_request_log,
    sse_events,
)

from rdmascope.cli import main

DATA = Path(__file__).parent / "data" / "requestlogs"
CASES = DATA / "cases"
KINDS = DATA / "kinds"
CAP = CASES / "demo16_capture"
P1_SEND, P2_SEND = 3600.5, 3602.79756086  # the sends of requests.jsonl (relative logs' offsets)


@pytest.fixture(scope="module")
def cap():
    return load_capture(CAP)


@pytest.fixture(scope="module")
def ref(cap):
    """Per-request truth: the capture's own request log, attributed (P1, P2 by test label)."""
    att = attribute(cap, align(read_request_log(CAP / "requests.jsonl"), cap))
    return {r["test"]: r for r in att.requests.to_dict("records")}


def _att(cap, path, offset=None, **kw):
    run = kw.pop("run", None)
    return attribute(cap, align(read_request_log(path, run=run), cap, offset), **kw)


def _same(row, want, *, prefill=True):
    """TTFT, TPOT to 1 us (epoch-ns logs carry ~0.1 us of float rounding); bytes to 1e-6."""
    assert row["ttft_s"] == pytest.approx(want["ttft_s"], abs=1e-6)
    assert row["tpot_s"] == pytest.approx(want["tpot_s"], abs=1e-6)
    if prefill:
        assert row["prefill_tx_bytes"] == pytest.approx(want["prefill_tx_bytes"], rel=1e-6)


def test_reference_is_the_readme_reference(ref):
    # the numbers the cases' README states, from the committed capture (a second check that the
    # capture is the one the cases were placed on)
    assert ref["P1"]["ttft_s"] == pytest.approx(0.962226, abs=1e-6)
    assert ref["P1"]["tpot_s"] == pytest.approx(0.0223557, abs=1e-7)
    assert ref["P1"]["prefill_tx_bytes"] / 1e6 == pytest.approx(3454.5, abs=0.1)
    assert ref["P2"]["ttft_s"] == pytest.approx(6.344915, abs=1e-6)
    assert ref["P2"]["tpot_s"] == pytest.approx(0.0225154, abs=1e-7)
    assert ref["P2"]["prefill_tx_bytes"] / 1e6 == pytest.approx(27652.9, abs=0.1)


# ------------------------------------------------------------------------------------------------
# The seven case files
# ------------------------------------------------------------------------------------------------


def test_r1b_ttft_repeated_as_first_itl(cap, ref):
    att = _att(cap, CASES / "R1b.json", P1_SEND)
    r = att.requests.iloc[0]
    assert "repeats the TTFT" in r["check"] and "7242" in r["check"]
    assert any("repeats the TTFT" in n for n in att.notes)
    # stored values kept by default (TPOT spoilt by the extra 0.96 s), corrected ones beside
    assert r["tpot_s"] == pytest.approx(0.0865, abs=1e-3)
    assert r["ttft_corrected_s"] == pytest.approx(ref["P1"]["ttft_s"], abs=1e-6)
    assert r["tpot_corrected_s"] == pytest.approx(ref["P1"]["tpot_s"], abs=1e-6)
    assert r["itl_mean_corrected_s"] == pytest.approx(0.02236, abs=1e-5)
    assert not r["corrected"]
    fixed = _att(cap, CASES / "R1b.json", P1_SEND, use_corrected=True).requests.iloc[0]
    _same(fixed, ref["P1"])
    assert fixed["corrected"] and fixed["n_chunks"] == 16
    assert fixed["itl_mean_s"] == pytest.approx(0.02236, abs=1e-5)


def test_r6_role_only_chunk_is_not_the_first_token(cap, ref):
    att = _att(cap, CASES / "R6.json")
    assert len(att.requests) == 1
    r = att.requests.iloc[0]
    _same(r, ref["P1"])
    assert r["n_chunks"] == 16  # role-only and usage-only responses are no chunks
    assert r["token_source"] == "usage record"


def test_m9_ttft_at_a_role_only_chunk_is_named_and_corrected(cap, ref):
    att = _att(cap, CASES / "M9.json")
    r = att.requests.iloc[0]
    assert r["ttft_s"] == pytest.approx(3.2, abs=1e-9)  # as vLLM stored it
    assert "15106" in r["check"] and "without a token" in r["check"]
    assert r["ttft_corrected_s"] == pytest.approx(ref["P2"]["ttft_s"], abs=1e-6)
    assert r["tpot_corrected_s"] == pytest.approx(ref["P2"]["tpot_s"], abs=1e-6)
    fixed = _att(cap, CASES / "M9.json", use_corrected=True).requests.iloc[0]
    _same(fixed, ref["P2"])
    assert "corrected: ttft-at-non-token-chunk" in fixed["flag"]


def test_r7a_m1_two_runs_in_one_file(cap, ref):
    log = read_request_log(CASES / "R7a_M1.jsonl")
    assert [r["run"] for r in log.runs] == [1, 2]
    assert log.requests["run"].tolist() == [1, 2]
    assert log.requests["test"].tolist() == ["run 1", "run 2"]
    assert "2 runs in one file" in log.notes[0]
    # a run chosen with an option
    one = _att(cap, CASES / "R7a_M1.jsonl", P1_SEND, run=2)
    assert len(one.requests) == 1 and one.requests.iloc[0]["run"] == 2
    _same(one.requests.iloc[0], ref["P1"])
    # each run with its own offset: run 2 placed 10 ms later moves only run 2's windows
    both = _att(cap, CASES / "R7a_M1.jsonl", [P1_SEND, P1_SEND + 0.01])
    sends = both.requests.set_index("run")["t_send_ns"]
    assert sends[2] - sends[1] == 10_000_000
    _same(both.requests.set_index("run").loc[1], ref["P1"])
    assert [a["method"] for a in both.alignment["runs"]] == ["offset", "offset"]
    with pytest.raises(RequestLogError, match="2 run.s. but 3 offsets"):
        align(log, cap, [1.0, 2.0, 3.0])
    with pytest.raises(RequestLogError, match="run 3 does not exist"):
        read_request_log(CASES / "R7a_M1.jsonl", run=3)


def test_m3_failed_row_is_that_rows_problem(cap, ref):
    att = _att(cap, CASES / "M3.json", P1_SEND)
    assert len(att.requests) == 1 and att.summary["n_failed"] == 1
    _same(att.requests.iloc[0], ref["P1"])
    assert "PR 5895" in att.failed.iloc[0]["error"]
    assert any("1 failed request(s)" in n and "PR 5895" in n for n in att.notes)


def test_m4_in_band_error_event_fails_the_request():
    # the file's only request ends in an error event: nothing usable, refused with the reason
    with pytest.raises(RequestLogError, match="EngineCore encountered an issue"):
        read_request_log(CASES / "M4.json")


def test_m6_reasoning_only_without_chunk_times(cap, ref):
    att = _att(cap, CASES / "M6.json")
    assert att.requests["request_id"].tolist() == ["1"]
    _same(att.requests.iloc[0], ref["P1"])
    err = att.failed.iloc[0]["error"]
    assert "streamed" in err and "16 completion tokens" in err


def test_cli_on_the_cases(tmp_path):
    r = CliRunner().invoke(main, ["attribute", str(CAP), "--requests", str(CASES / "M9.json"),
                                  "--use-corrected", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["requests"][0]["ttft_s"] == pytest.approx(6.344915, abs=1e-6)
    assert d["requests"][0]["corrected"] is True
    r = CliRunner().invoke(main, ["attribute", str(CAP), "--requests", str(CASES / "M9.json")])
    assert r.exit_code == 0 and "CORRECTED values (not used; --use-corrected" in r.output
    r = CliRunner().invoke(main, ["attribute", str(CAP), "--requests",
                                  str(CASES / "R7a_M1.jsonl"), "--offset", "1", "--offset", "2",
                                  "--offset", "3"])
    assert r.exit_code == 2 and "--offset given 3 times" in r.output
    r = CliRunner().invoke(main, ["attribute", str(CAP), "--requests",
                                  str(CASES / "R7a_M1.jsonl"), "--run", "1", "--offset",
                                  str(P1_SEND), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert [x["run"] for x in d["requests"]] == [1] and d["meta"]["runs"][0]["run"] == 1
    r = CliRunner().invoke(main, ["attribute", str(CAP), "--requests", str(CASES / "M3.json"),
                                  "--offset", str(P1_SEND)])
    assert r.exit_code == 0 and "Failed requests" in r.output and "PR 5895" in r.output


# ------------------------------------------------------------------------------------------------
# Our own files, per kind (kinds/README.md names the tool version and layout each follows)
# ------------------------------------------------------------------------------------------------


def test_kind1_non_token_events_reasoning_split_and_merged_reads(cap, ref):
    att = _att(cap, KINDS / "genai_perf_reasoning_sse.json")
    p1, p2 = att.requests.iloc[0], att.requests.iloc[1]
    _same(p1, ref["P1"])
    _same(p2, ref["P2"])
    # 16 token chunks each: chunk 3 split over two reads is one; chunks 7 and 8 merged in one
    # read are two (both at the read's time); keep-alive, role, empty, null, finish, usage and
    # [DONE] are none
    assert p1["n_chunks"] == 16 and p2["n_chunks"] == 16
    # reasoning: the first token is the first reasoning token; the answer starts at chunk 6
    assert p2["ttft_reasoning_s"] == pytest.approx(ref["P2"]["ttft_s"], abs=1e-6)
    want_answer = ref["P2"]["ttft_s"] + 6 * ref["P2"]["tpot_s"]
    assert p2["ttft_answer_s"] == pytest.approx(want_answer, abs=1e-6)
    assert math.isnan(p1["ttft_reasoning_s"]) and math.isnan(p1["ttft_answer_s"])
    log = read_request_log(KINDS / "genai_perf_reasoning_sse.json")
    ch = log.requests.iloc[0]["chunk_times"]
    assert ch[7] == ch[8]  # merged read: one arrival time for both events


def test_kind1_event_classes():
    assert classify_event('{"choices":[{"delta":{"role":"assistant","content":""}}]}')[0] == \
        "role"
    assert classify_event('{"choices":[{"delta":{"content":""}}]}')[0] == "empty"
    assert classify_event('{"choices":[{"delta":{"content":null}}]}')[0] == "empty"
    assert classify_event('{"choices":[{"delta":{},"finish_reason":"stop"}]}')[0] == "finish"
    assert classify_event('{"choices":[],"usage":{"completion_tokens":3}}')[0] == "usage"
    assert classify_event('{"choices":[{"text":"a"}]}')[0] == "answer"
    assert classify_event('{"choices":[{"delta":{"reasoning":"x"}}]}')[0] == "reasoning"
    assert classify_event("[DONE]")[0] == "done"
    assert classify_event(None)[0] == "keep-alive"
    assert classify_event('{"error":{"message":"boom"}}') == ("error", "boom")
    ev = sse_events([(1, 'data: {"choices":[{"delta":{"con'), (2, 'tent":"a"}}]}\n\n'),
                     (3, ': ping\n\ndata: {"choices":[{"delta":{"content":"b"}}]}\n\n'
                         'data: {"choices":[{"delta":{"content":"c"}}]}\n\n')])
    assert [(t, k) for t, k, _ in ev] == [(2, "answer"), (3, "keep-alive"), (3, "answer"),
                                          (3, "answer")]


def test_kind2_stored_values_checked_against_themselves(cap, ref):
    att = _att(cap, KINDS / "vllm_bench_serve_inconsistent.json")
    p1, p2 = att.requests.iloc[0], att.requests.iloc[1]
    assert "repeats the TTFT" in p1["check"] and "15106" in p2["check"]
    assert p1["ttft_corrected_s"] == pytest.approx(ref["P1"]["ttft_s"], abs=1e-6)
    assert p2["ttft_corrected_s"] == pytest.approx(ref["P2"]["ttft_s"], abs=1e-6)
    fixed = _att(cap, KINDS / "vllm_bench_serve_inconsistent.json", use_corrected=True)
    _same(fixed.requests.iloc[0], ref["P1"])
    _same(fixed.requests.iloc[1], ref["P2"])
    assert fixed.requests["n_chunks"].tolist() == [16, 16]
    # the check can fail: consistent values pass it, and a count alone is named but not fixed
    assert check_itls(1.0, [0.02] * 15, 16) is None
    note, kind, t, g = check_itls(1.0, [0.02] * 16, 16)
    assert kind == "itl-count" and t is None and "no known cause" in note
    assert check_itls(1.0, [1.0] + [0.02] * 15, 16)[1] == "ttft-repeated"
    # by sums: TTFT + ITLs beyond the stored E2E latency
    assert check_itls(1.0, [0.02] * 15, 16, latency_s=1.3 + 0.0005) is None
    note, kind, t, _ = check_itls(1.0, [0.02] * 15, 16, latency_s=1.2)
    assert kind == "itl-sum" and t is None and "exceeds the stored E2E latency" in note
    assert "exceeds the stored E2E latency" in p1["check"]  # the repeated TTFT breaks the sum
    assert "exceeds" not in p2["check"]  # a TTFT at a role-only chunk keeps it
    assert check_itls(1.0, [0.5] + [0.02] * 15, 16)[2] == pytest.approx(1.5)


def test_kind3_bad_rows_and_a_request_past_the_capture_end(cap, ref):
    att = _att(cap, KINDS / "native_bad_rows.csv")
    assert att.requests["request_id"].tolist() == ["P1", "P2-past-end"]
    _same(att.requests.iloc[0], ref["P1"])
    past = att.requests.iloc[1]
    assert past["flag"].startswith("runs past the capture end (2.000 s after")
    # prefill lies inside the capture: the same bytes as the truth; decode over what was
    # captured (first token .. capture end) equals the truth's decode plus the idle tail
    assert past["prefill_tx_bytes"] == pytest.approx(ref["P2"]["prefill_tx_bytes"], rel=1e-6)
    assert past["decode_tx_bytes"] >= ref["P2"]["decode_tx_bytes"]
    errs = att.failed.set_index("request_id")["error"]
    assert "TTFT of 0 s is impossible" in errs["ttft0"]
    assert "before the first token" in errs["backwards"]
    att2 = _att(cap, KINDS / "genai_perf_error_event.json")
    _same(att2.requests.iloc[0], ref["P1"])
    assert att2.failed.iloc[0]["error"] == "in-band error event: EngineCore encountered an issue."
    with pytest.raises(RequestLogError, match="look like Unix epoch seconds") as ei:
        align(read_request_log(KINDS / "native_epoch_noclock.jsonl"), cap)
    assert "CLOCK_REALTIME" in str(ei.value) and ei.value.row == 1


def test_kind4_5_sglang_two_runs_each_with_its_own_offset(cap, ref):
    log = read_request_log(KINDS / "sglang_bench_serving_two_runs.jsonl")
    assert log.format == "sglang" and log.clock == "relative"
    assert "backend=sglang-oai-chat" in log.runs[0]["label"]
    assert log.runs[1]["meta"]["random_input_len"] == 8192  # the nested ``details`` layout
    att = _att(cap, KINDS / "sglang_bench_serving_two_runs.jsonl", [P1_SEND, P2_SEND])
    by_run = att.requests.set_index("run")
    _same(by_run.loc[1], ref["P1"])
    _same(by_run.loc[2], ref["P2"])
    assert by_run.loc[2, "token_source"].startswith("tool field output_lens (SGLang")
    two = _att(cap, KINDS / "sglang_bench_serving_two_runs.jsonl", P2_SEND, run=2)
    _same(two.requests.iloc[0], ref["P2"])
    # anchored without offsets: each run to the first burst at/after the previous run's end
    anc = align(log, cap)
    assert [a["method"] for a in anc.alignment["runs"]] == ["anchor", "anchor"]
    s = anc.requests.set_index("run")["t_send_ns"]
    assert s[2] > anc.requests.set_index("run")["t_last_ns"][1]
    assert json.dumps(log.runs)  # no Infinity in the run metadata (valid JSON output)


def test_kind5_llmperf(cap, ref):
    att = _att(cap, KINDS / "llmperf_individual_responses.json", P1_SEND)
    r = att.requests.iloc[0]
    assert att.log_format == "llmperf"
    _same(r, ref["P1"])  # last token = start + ITL x tokens: llmperf's ITL includes the TTFT
    assert any("ITL includes the TTFT" in n for n in att.notes)
    log = read_request_log(KINDS / "llmperf_two_ok_one_error_individual_responses.json")
    assert log.n_failed == 1 and "error_code 500" in log.requests.iloc[-1]["error"]
    assert all("send time unknown" in c for c in log.ok["check"])
    assert any(n.startswith("ESTIMATE: llmperf saves no send times") for n in log.notes)


@pytest.mark.parametrize("name, what", [
    ("vllm_bench_serve_not_detailed.json", "vLLM bench serve result without per-request "
                                           "arrays.*--save-detailed"),
    ("sglang_bench_serving_no_details.jsonl", "SGLang bench_serving result without "
                                              "per-request arrays.*--output-details"),
])
def test_kind6_results_without_per_request_arrays(name, what):
    with pytest.raises(RequestLogError, match=what):
        read_request_log(KINDS / name)


# ------------------------------------------------------------------------------------------------
# Property: non-token chunks never move TTFT, TPOT or ITL
# ------------------------------------------------------------------------------------------------

NON_TOKEN = [
    'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
    'data: {"choices":[{"index":0,"delta":{"content":""}}]}\n\n',
    'data: {"choices":[{"index":0,"delta":{"content":null}}]}\n\n',
    'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}\n\n',
    ": keep-alive\n\n",
    "\n\n",
]


def _export(send_ns, reads) -> dict:
    return {"experiments": [{"requests": [{
        "timestamp": send_ns, "response_timestamps": [t for t, _ in reads],
        "response_outputs": [{"response": x} for _, x in reads]}]}]}


def _timing(doc) -> tuple:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "profile_export.json"
        p.write_text(json.dumps(doc))
        log = read_request_log(p)
    t = M.request_timing(log.ok).iloc[0]
    return t["ttft_s"], t["tpot_s"], t["itl_mean_s"], tuple(M.pooled_itl(log.ok))


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.integers(1, 50_000_000), min_size=1, max_size=12),
       ttft=st.integers(1, 5_000_000_000),
       extra=st.lists(st.tuples(st.integers(0, 10**9), st.sampled_from(NON_TOKEN),
                                st.booleans()), max_size=15),
       split=st.lists(st.integers(1, 30), max_size=4))
def test_non_token_chunks_never_move_ttft_tpot_itl(gaps, ttft, extra, split):
    send = 1_767_225_600_000_000_000
    toks = list(np.cumsum([send + ttft] + gaps))
    usage = 'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d}}\n\n'
    base = [(int(t), 'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n')
            for t in toks] + [(int(toks[-1]) + 1, usage % len(toks)),
                              (int(toks[-1]) + 2, "data: [DONE]\n\n")]
    want = _timing(_export(send, base))
    reads = list(base[:-2])
    # non-token events at any instant between the send and the last token (ties allowed), as
    # their own read or merged into the read before them
    for at, text, merge in extra:
        t = send + 1 + at % (int(toks[-1]) - send)
        reads.append((t, text, merge))
    reads = sorted(((r[0], r[1], r[2] if len(r) > 2 else False) for r in reads),
                   key=lambda r: r[0])
    merged: list[list] = []
    for t, text, merge in reads:
        if merge and merged and "content\":\"x" not in text:
            merged[-1][1] += text
        else:
            merged.append([t, text])
    # split some token events over two reads at the same instant
    out = []
    for i, (t, text) in enumerate(merged):
        k = split[i % len(split)] if split and i % 3 == 0 else 0
        if 0 < k < len(text) - 2:
            out += [(t, text[:k]), (t, text[k:])]
        else:
            out.append((t, text))
    got = _timing(_export(send, out + base[-2:]))
    assert got[0] == want[0]  # TTFT
    for a, b in ((got[1], want[1]), (got[2], want[2])):  # TPOT, mean ITL (NaN with 1 token)
        assert a == b or (math.isnan(a) and math.isnan(b))
    assert got[3] == want[3]  # every pooled ITL


def test_report_names_failed_requests_and_checks(tmp_path):
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["report", str(CAP), "--requests", str(CASES / "M3.json"),
                                  "--offset", str(P1_SEND), "-o", str(out)])
    assert r.exit_code == 0, r.output
    html = next(out.rglob("*.html")).read_text()
    assert "request log notes" in html and "PR 5895" in html


def test_genai_perf_non_sse_outputs(tmp_path):
    # Triton-style response objects (text_output) and a request without response_outputs
    send = 1_767_225_600_500_000_000
    doc = {"experiments": [{"requests": [
        {"timestamp": send, "response_timestamps": [send + 10, send + 20, send + 30],
         "response_outputs": [{"text_output": ""}, {"text_output": "a"}, {"text_output": "b"}]},
        {"timestamp": send + 5, "response_timestamps": [send + 40, send + 50]}]}]}
    p = tmp_path / "profile_export.json"
    p.write_text(json.dumps(doc))
    log = read_request_log(p)
    a, b = log.requests.iloc[0], log.requests.iloc[1]
    assert (a["t_first_ns"] - a["t_send_ns"], len(a["chunk_times"])) == (20, 2)
    assert (b["t_first_ns"] - b["t_send_ns"], len(b["chunk_times"])) == (35, 2)


def test_aiperf_reasoning_first_output_token(tmp_path):
    # AIPerf: time_to_first_output_token = start -> first non-reasoning token
    line = json.loads((DATA / "aiperf_profile_export.jsonl").read_text().splitlines()[0])
    line["metrics"]["time_to_first_output_token"] = {"value": 1100.0, "unit": "ms"}
    line["metrics"]["reasoning_token_count"] = {"value": 3, "unit": "tokens"}
    p = tmp_path / "profile_export.jsonl"
    p.write_text(json.dumps(line) + "\n")
    r = read_request_log(p).requests.iloc[0]
    assert r["t_first_reasoning_ns"] - r["t_send_ns"] == 1_000_000_000
    assert r["t_first_answer_ns"] - r["t_send_ns"] == 1_100_000_000
    from rdmascope.analysis.attribute import _log_columns
    cols = _log_columns(read_request_log(p).ok.astype({"t_send_ns": "int64"}))
    assert cols["ttft_answer_s"].iloc[0] == pytest.approx(1.1)


def test_compare_picks_a_run_of_each_log(tmp_path):
    import shutil

    b = tmp_path / "b"
    shutil.copytree(CAP, b)
    man = json.loads((b / "manifest.json").read_text())
    man["capture_id"] = "copy-of-demo16"
    (b / "manifest.json").write_text(json.dumps(man))
    log = str(KINDS / "sglang_bench_serving_two_runs.jsonl")
    base = ["compare", str(CAP), str(b), "--requests-a", log, "--requests-b", log,
            "--offset-a", str(P1_SEND), "--offset-b", str(P1_SEND), "--run-b", "1"]
    r = CliRunner().invoke(main, base + ["--run-a", "3"])
    # a usage error (exit 2) naming the side's option, not a problem of the log (exit 4)
    assert r.exit_code == 2 and "run 3 does not exist" in r.output, r.output
    assert "Invalid value for '--run-a'" in r.output
    r = CliRunner().invoke(main, base + ["--run-a", "1", "--json"])
    assert r.exit_code == 0, r.output


def test_inference_perf_reasoning_chunk_times(cap, ref, tmp_path):
    # inference-perf after its issue 559: reasoning-only chunks in reasoning_chunk_times, content
    # chunks in chunk_times, output_tokens counts content only; the server usage counts both
    d = json.loads((CASES / "M6.json").read_text())
    p2 = json.loads((CAP / "requests.jsonl").read_text().splitlines()[1])
    step = (p2["t_last_token"] - p2["t_first_token"]) / 15
    times = [p2["t_first_token"] + k * step for k in range(16)]
    rm = d[1]["info"]["response_metrics"]
    rm.update(reasoning_chunk_times=times[:6], chunk_times=times[6:], output_tokens=10)
    p = tmp_path / "per_request_lifecycle_metrics.json"
    p.write_text(json.dumps(d))
    att = _att(cap, p)
    r = att.requests.set_index("request_id").loc["2"]
    _same(r, ref["P2"])
    assert r["ttft_reasoning_s"] == pytest.approx(ref["P2"]["ttft_s"], abs=1e-6)
    assert r["ttft_answer_s"] == pytest.approx(ref["P2"]["ttft_s"] + 6 * step, abs=1e-6)
    assert r["token_source"].startswith("server usage completion_tokens")
    assert r["n_chunks"] == 16


def test_appended_runs_bad_input_names_the_run_line(tmp_path):
    good = (CASES / "R7a_M1.jsonl").read_text().splitlines()[0]
    p = tmp_path / "runs.jsonl"
    p.write_text(good + "\n" + '{"ttfts": [1' + "\n")
    with pytest.raises(RequestLogError, match="value starting on line 2") as ei:
        read_request_log(p)
    assert ei.value.row == 2
    p.write_text(good + "\n[1, 2]\n")
    with pytest.raises(RequestLogError, match="expected a JSON object per run") as ei:
        read_request_log(p)
    assert ei.value.row == 2


def test_vllm_multiturn_raw_csv_gives_the_reference(cap, ref, tmp_path):
    """vLLM's multi-turn benchmark raw data (RequestStats rows, CLOCK_MONOTONIC ms): written as
    its process_statistics does, P1 with a 3-token first chunk (its TTFT moved back by 2 x
    tpot_ms, as the benchmark does); the rebuilt first and last tokens are the reference's."""
    rows = [json.loads(x) for x in (CAP / "requests.jsonl").read_text().splitlines() if x]
    lines = ["ttft_ms,tpot_ms,latency_ms,start_time_ms,input_num_turns,input_num_tokens,"
             "output_num_tokens,output_num_chunks,output_num_first_chunk_tokens,"
             "approx_cached_percent,conversation_id,client_id,end_time_ms"]
    for k, r in enumerate(rows):
        ttft = (r["t_first_token"] - r["t_send"]) * 1e3
        lat = (r["t_last_token"] - r["t_send"]) * 1e3
        tpot = (lat - ttft) / (r["output_tokens"] - 1)
        first_k = 3 if k == 0 else 1
        shown = max(0.1, ttft - (first_k - 1) * tpot)
        lines.append(f"{shown!r},{tpot!r},{lat!r},{r['t_send'] * 1e3!r},1,{r['prompt_tokens']},"
                     f"{r['output_tokens']},{r['output_tokens'] - first_k},{first_k},0.0,"
                     f"conv{k},0,{(r['t_send'] * 1e3 + lat)!r}")
    p = tmp_path / "raw_data.csv"
    p.write_text("\n".join(lines) + "\n")
    log = read_request_log(p)
    assert log.format == "vllm-multiturn" and log.clock == "CLOCK_MONOTONIC"
    att = attribute(cap, align(log, cap))
    got = att.requests.set_index("request_id")
    for k, r in enumerate(rows):
        g, w = got.loc[f"conv{k}-t1"], ref[r["test"]]
        assert g["ttft_s"] == pytest.approx(w["ttft_s"], abs=2e-6)
        assert g["e2e_s"] == pytest.approx(w["e2e_s"], abs=2e-6)
        assert g["prefill_tx_bytes"] == pytest.approx(w["prefill_tx_bytes"], rel=1e-4)
    # the xlsx is refused naming the CSV
    x = tmp_path / "statistics_1_clients.xlsx"
    x.write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(RequestLogError, match="export its 'Raw data' sheet as CSV"):
        read_request_log(x)


def test_trtllm_bench_request_records_give_the_reference(cap, ref, tmp_path):
    """trtllm-bench per-request records (RequestRecord.model_dump + output_tokens, times
    perf_counter_ns = CLOCK_MONOTONIC): the demo's two requests, one not streamed (no first
    token: failed with the reason), one with error responses (failed)."""
    rows = [json.loads(x) for x in (CAP / "requests.jsonl").read_text().splitlines() if x]
    recs = []
    for k, r in enumerate(rows):
        s, f, la = (int(round(r[c] * 1e9)) for c in ("t_send", "t_first_token", "t_last_token"))
        recs.append({"id": k, "num_input_tokens": r["prompt_tokens"], "error_tokens": 0,
                     "start_timestamp": s, "first_token_timestamp": f, "end_timestamp": la,
                     "decode_iteration": r["output_tokens"] - 1, "output": "...",
                     "output_tokens": r["output_tokens"], "time_to_first_token": f - s,
                     "end_to_end_latency": la - s})
    recs.append({**recs[0], "id": 7, "first_token_timestamp": -1})
    recs.append({**recs[0], "id": 8, "error_tokens": 2})
    p = tmp_path / "request_info.json"
    p.write_text(json.dumps(recs))
    log = read_request_log(p)
    assert log.format == "trtllm-bench" and log.n_failed == 2
    bad = log.requests[~log.requests["ok"]].set_index("request_id")["error"]
    assert "--streaming" in bad["7"] and "error_tokens" in bad["8"]
    att = attribute(cap, align(log, cap))
    got = att.requests.set_index("request_id")
    for k, r in enumerate(rows):
        g, w = got.loc[str(k)], ref[r["test"]]
        assert g["ttft_s"] == pytest.approx(w["ttft_s"], abs=1e-9)
        assert g["prefill_tx_bytes"] == pytest.approx(w["prefill_tx_bytes"], rel=1e-9)
