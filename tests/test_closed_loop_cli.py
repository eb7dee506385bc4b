"""Closed-loop cells end to end through the CLI: ``rdmascope simulate capture`` with a scenario of
closed-loop cells (concurrency, requests per cell, warm-ups), then ``rdmascope attribute`` on the
capture. The request log's send and finish times never put more requests in flight than the
cell's concurrency (and reach it), and every cell has its request count, warm-ups kept apart.
"""

from __future__ import annotations

import json
from collections import defaultdict

from click.testing import CliRunner

from rdmascope.cli import main

#: two cells in one capture, each its own test: 12 requests at concurrency 2 and at 4, the first
#: 2 of each warm-ups (round 0), the other 10 measured (round 1)
SCENARIO = "prompt=512,concurrency=2+4,requests=12,warmup=2,output=4,gap=1"
CELLS = {"512xc2": 2, "512xc4": 4}
REQUESTS, WARMUP = 12, 2


def _max_in_flight(spans: list[tuple[float, float]]) -> int:
    """Most requests in flight at once: sent and not yet finished, ``[t_send, t_last)`` (a
    request finishing at the instant another is sent frees its slot first)."""
    events = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans])
    level = peak = 0
    for _, step in events:
        level += step
        assert level >= 0
        peak = max(peak, level)
    return peak


def test_closed_loop_cells_through_simulate_capture_and_attribute(tmp_path):
    cap = tmp_path / "cap"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(cap), "--scenario",
                                  SCENARIO])
    assert r.exit_code == 0, r.output

    # the request log the capture came with: per cell, in flight never above the concurrency
    # (and the closed loop fills it), 12 requests, the first 2 in round 0
    log = [json.loads(ln) for ln in (cap / "requests.jsonl").read_text().splitlines() if ln]
    by_test: dict[str, list[dict]] = defaultdict(list)
    for rec in log:
        by_test[rec["test"]].append(rec)
    assert set(by_test) == set(CELLS)
    for test, conc in CELLS.items():
        recs = by_test[test]
        assert len(recs) == REQUESTS, test
        assert sum(rec["round"] == 0 for rec in recs) == WARMUP, test
        spans = [(rec["t_send"], rec["t_last_token"]) for rec in recs]
        assert all(t0 < t1 for t0, t1 in spans)
        assert _max_in_flight(spans) == conc, test
        # a closed loop: after the first `conc`, each request is sent as one finishes
        recs = sorted(recs, key=lambda rec: (rec["t_send"], rec["request_id"]))
        finishes = {rec["t_last_token"] for rec in recs}
        assert all(rec["t_send"] in finishes for rec in recs[conc:]), test

    # attribute on the capture (warm-ups: round 0 of each cell)
    a = CliRunner().invoke(main, ["attribute", str(cap), "--json", "--warmup-rounds", "1"])
    assert a.exit_code == 0, a.output
    j = json.loads(a.stdout)
    reqs = j["requests"]
    assert len(reqs) == len(CELLS) * REQUESTS and not j["failed"]
    for test, conc in CELLS.items():
        mine = [q for q in reqs if q["test"] == test]
        assert len(mine) == REQUESTS
        assert sum(q["warmup"] for q in mine) == WARMUP
        # the same bound on the capture's clock, as attribute placed the requests
        assert _max_in_flight([(q["t_send_ns"], q["t_last_ns"]) for q in mine]) == conc
        (row,) = [t for t in j["tests"] if t["test"] == test]
        assert (row["n_requests"], row["rounds"], row["warmup_rounds"]) == (REQUESTS - WARMUP,
                                                                            1, 1)
        rounds = {rd["round"]: rd for rd in j["rounds"] if rd["test"] == test}
        assert rounds[0]["n_requests"] == WARMUP and rounds[0]["warmup"]
        assert rounds[1]["n_requests"] == REQUESTS - WARMUP and not rounds[1]["warmup"]
        (cell,) = [c for c in j["cells"] if c["scope"] == "test" and c["test"] == test]
        assert cell["n_requests"] == REQUESTS - WARMUP


def test_the_emulators_warmups_are_marked_and_kept_out_without_warmup_rounds(tmp_path):
    """The emulator's request log marks a closed-loop cell's warm-ups (``"phase": "warmup"``),
    so ``attribute`` with no ``--warmup-rounds`` keeps them out of every measured number (per
    test, per cell, summary TTFT) and names them, while the conserving split still gives their
    bytes to them: the measured requests' split bytes match the emulator's truth and all
    bytes add up to the counters. ``--warmup-rounds 1`` counts the marked round: same result."""
    cap = tmp_path / "cap"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(cap), "--scenario",
                                  SCENARIO])
    assert r.exit_code == 0, r.output
    log = [json.loads(ln) for ln in (cap / "requests.jsonl").read_text().splitlines() if ln]
    assert all((rec.get("phase") == "warmup") == (rec["round"] == 0) for rec in log)
    truth = json.loads((cap / "truth.json").read_text())
    rdma_tx = [s["key"] for s in truth["series"]
               if s["source"] == "infiniband" and s["direction"] == "tx"]
    true_split = {t["request_id"]: sum(t["prefill_bytes_split"][k] + t["decode_bytes_split"][k]
                                       for k in rdma_tx) for t in truth["requests"]}
    measured = [t for t in truth["requests"] if t["round"] == 1]

    runs = {}
    for extra in ([], ["--warmup-rounds", "1"]):
        a = CliRunner().invoke(main, ["attribute", str(cap), "--json", *extra])
        assert a.exit_code == 0, a.output
        j = json.loads(a.stdout)
        notes = j["meta"]["notes"]
        assert notes[0].startswith(f"{len(CELLS) * WARMUP} warm-up request(s) kept out of "
                                   "every number"), notes
        reqs = j["requests"]
        assert {q["request_id"] for q in reqs if q["warmup"]} == {
            t["request_id"] for t in truth["requests"] if t["round"] == 0}
        for test in CELLS:
            (row,) = [t for t in j["tests"] if t["test"] == test]
            assert (row["n_requests"], row["rounds"]) == (REQUESTS - WARMUP, 1)
            mine = [t for t in measured if t["test"] == test]
            true_ttft = sum(t["ttft_s"] for t in mine) / len(mine)
            assert abs(row["mean_ttft_s"] - true_ttft) < 1e-6
            assert abs(j["meta"]["summary"]["ttft_by_test_s"][test] - true_ttft) < 1e-6
            (cell,) = [c for c in j["cells"] if c["scope"] == "test" and c["test"] == test]
            assert cell["n_requests"] == REQUESTS - WARMUP
            assert abs(cell["ttft_mean_s"] - true_ttft) < 1e-6
        # the split: each request (warm-ups too) keeps its own bytes; nothing is lost
        s = j["meta"]["summary"]
        split = {q["request_id"]: q["prefill_tx_split_bytes"] + q["decode_tx_split_bytes"]
                 for q in reqs}
        for rid, b in split.items():
            assert abs(b - true_split[rid]) < 0.05 * true_split[rid], rid
        got = sum(b for rid, b in split.items() if not rid.startswith(tuple(
            f"{t}-r0-" for t in CELLS)))
        assert abs(got - sum(true_split[t["request_id"]] for t in measured)) < \
            0.01 * got
        assert abs(sum(split.values()) + s["split_idle_tx_bytes"]
                   - s["split_total_tx_bytes"]) < 1e-6 * s["split_total_tx_bytes"]
        runs[tuple(extra)] = (j["tests"], j["cells"])
    assert runs[()] == runs[("--warmup-rounds", "1")]
