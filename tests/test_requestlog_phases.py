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
