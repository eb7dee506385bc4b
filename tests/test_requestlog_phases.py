"""Named phases and stages of a benchmark become tests (cells), each from its writer's layout.

- AIPerf ``profile_export.jsonl``: ``metadata.benchmark_phase`` is AIPerf's ``CreditPhase``
  ("warmup" or "profiling"; ai-dynamo/aiperf ``src/aiperf/common/models/record_models.py`` at
  f86c6c0d). "warmup" is kept out; any other value is never pooled with "profiling": each phase
  becomes its own test "phase <value>".
- inference-perf ``per_request_lifecycle_metrics.json`` holds no stage (its writer,
  ``inference_perf/reportgen/base.py`` at 7de5ef2e, writes start_time, end_time, request,
  response, info, error); the ``stage_<k>_lifecycle_metrics.json`` beside it give each stage's
  request count (``load_summary.count``), and stages run one after another, so the requests in
  send order are cut into stages, each its own test "stage k".
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import read_request_log
from requestlog_helpers import build_capture

DATA = Path(__file__).parent / "data" / "requestlogs"
S = 1_000_000_000
T0 = 1000 * S  # capture start on CLOCK_MONOTONIC
REALTIME = 1_700_000_000_000_000_000  # build_capture's CLOCK_REALTIME - CLOCK_MONOTONIC


def _capture(tmp_path, seconds=8):
    n = seconds * 1000
    return build_capture(tmp_path / "cap", T0, {"rocep1s0f1/tx": np.full(n, 4000),
                                                "rocep1s0f1/rx": np.full(n, 4000)})


def _aiperf(rid: str, phase: str, send_s: float) -> dict:
    """One AIPerf record (the committed fixture's layout): TTFT 100 ms, chunks 50 ms apart."""
    rec = json.loads((DATA / "aiperf_profile_export.jsonl").read_text().splitlines()[0])
    start = REALTIME + T0 + int(send_s * S)
    rec["metadata"].update(x_request_id=rid, benchmark_phase=phase, request_start_ns=start,
                           request_ack_ns=start, request_end_ns=start + 200_000_000)
    rec["metrics"].update(
        input_sequence_length={"value": 512, "unit": "tokens"},
        time_to_first_token={"value": 100.0, "unit": "ms"},
        request_latency={"value": 200.0, "unit": "ms"},
        inter_chunk_latency={"value": [50.0, 50.0], "unit": "ms"},
        output_sequence_length={"value": 3, "unit": "tokens"},
        output_token_count={"value": 3, "unit": "tokens"})
    return rec


def test_aiperf_phases_other_than_warmup_become_tests(tmp_path):
    cap = _capture(tmp_path)
    recs = [_aiperf("w0", "warmup", 0.2), _aiperf("p0", "profiling", 1.0),
            _aiperf("p1", "profiling", 1.5), _aiperf("s0", "steady_state", 3.0),
            _aiperf("s1", "steady_state", 3.5), _aiperf("s2", "steady_state", 4.0)]
    p = tmp_path / "profile_export.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    log = read_request_log(p)
    assert log.format == "aiperf"
    assert dict(zip(log.requests["request_id"], log.requests["test"], strict=True)) == {
        "p0": "phase profiling", "p1": "phase profiling", "s0": "phase steady_state",
        "s1": "phase steady_state", "s2": "phase steady_state"}
    assert log.notes[0].startswith("1 warm-up request(s) kept out of every number")
    assert any("'phase profiling': 2 request(s), 'phase steady_state': 3 request(s)" in n
               for n in log.notes)
    at = attribute(load_capture(cap), log)
    cells = at.cells[at.cells["scope"] == "test"].set_index("test")
    assert cells.loc["phase profiling", "n_requests"] == 2
    assert cells.loc["phase steady_state", "n_requests"] == 3
    assert set(at.tests["test"]) == {"phase profiling", "phase steady_state"}
    assert np.allclose(cells["ttft_mean_s"], 0.1)

    # only profiling (what AIPerf writes): no phase label, as before
    p.write_text("".join(json.dumps(r) + "\n" for r in recs[:3]))
    log = read_request_log(p)
    assert log.requests["test"].isna().all() or set(log.requests["test"]) == {None}
    assert not any("benchmark_phase values" in n for n in log.notes)


def _ip(send_s: float, ttft_s: float = 0.1, chunks: int = 3) -> dict:
    """One inference-perf record (the committed fixture's layout) on CLOCK_MONOTONIC seconds."""
    rec = json.loads((DATA / "inference_perf_per_request_lifecycle_metrics.json").read_text())[0]
    t0 = (T0 / S) + send_s
    times = [t0 + ttft_s + 0.05 * k for k in range(chunks)]
    rec.update(start_time=t0, end_time=times[-1])
    rm = rec["info"]["response_metrics"]
    rm.update(output_tokens=chunks, chunk_times=times, output_token_times=times,
              response_chunks=["x"] * chunks,
              server_usage={"prompt_tokens": 256, "completion_tokens": chunks})
    rec["info"]["request_metrics"]["text"]["input_tokens"] = 256
    rec["info"]["input_tokens"] = 256
    return rec


def test_inference_perf_stages_become_tests(tmp_path):
    cap = _capture(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    # stage 0: 2 requests at 1 s (TTFT 100 ms); stage 1: 3 requests at 3 s (TTFT 300 ms)
    recs = [_ip(1.0), _ip(1.05), _ip(3.0, 0.3), _ip(3.1, 0.3), _ip(3.2, 0.3)]
    p = run / "per_request_lifecycle_metrics.json"
    p.write_text(json.dumps(recs[::-1]))  # the file's order is not the send order
    for k, n in ((0, 2), (1, 3)):
        (run / f"stage_{k}_lifecycle_metrics.json").write_text(json.dumps(
            {"load_summary": {"count": n, "send_duration": 0.1, "requested_rate": 1.0},
             "successes": {}, "failures": {}, "benchmark_time_seconds": 1.0}))
    log = read_request_log(p)
    assert log.format == "inference-perf"
    by_send = log.requests.sort_values("t_send_ns")
    assert list(by_send["test"]) == ["stage 0"] * 2 + ["stage 1"] * 3
    assert any(n.startswith("inference-perf stages from the stage_<k>_lifecycle_metrics.json")
               for n in log.notes)
    at = attribute(load_capture(cap), log)
    cells = at.cells[at.cells["scope"] == "test"].set_index("test")
    assert cells.loc["stage 0", "n_requests"] == 2 and cells.loc["stage 1", "n_requests"] == 3
    assert np.isclose(cells.loc["stage 0", "ttft_mean_s"], 0.1)
    assert np.isclose(cells.loc["stage 1", "ttft_mean_s"], 0.3)

    # counts that do not add up: no stage assigned, said so
    (run / "stage_1_lifecycle_metrics.json").write_text(json.dumps({"load_summary": {"count": 4}}))
    log = read_request_log(p)
    assert log.requests["test"].isna().all() or set(log.requests["test"]) == {None}
    assert any("do not add up to its 5 requests" in n for n in log.notes)
    # a stage whose last request ends after the next stage's first send: refused, said so
    (run / "stage_1_lifecycle_metrics.json").write_text(json.dumps({"load_summary": {"count": 3}}))
    recs[1] = _ip(1.05, ttft_s=2.5)
    p.write_text(json.dumps(recs))
    log = read_request_log(p)
    assert log.requests["test"].isna().all() or set(log.requests["test"]) == {None}
    assert any("ends after stage 1's first send" in n for n in log.notes)
    # one stage summary only: nothing to cut
    (run / "stage_1_lifecycle_metrics.json").unlink()
    assert not any("stage" in n for n in read_request_log(p).notes)
