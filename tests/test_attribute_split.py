"""The conserving split of overlapping requests, against the emulator's truth (docs/method.md).

The emulator schedules like vLLM V1 (chunked prefill under a token budget, speculative decode
steps) and writes, per request, the true split by the same definition: each engine step's
bytes divided over the tokens scheduled in it (``truth.json``: ``prefill_bytes_split``,
``decode_bytes_split``). The analysis sees only the request log and the counters. Checked at
concurrency 1, 8, 16 and 64: conservation (per-request bytes + idle/other = what the counters saw,
summed independently with ``series.integrate`` over the span), equality with the window view at
concurrency 1, and closeness to the truth.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from rdmascope.analysis import series
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import align, read_request_log

from rdmascope.emulator.model import scenario_from_spec, simulate
from rdmascope.emulator.simcapture import simulate_capture

#: per concurrency: (largest relative error of one request's prefill, of one request's decode,
#: of the summed decode) against the truth; at 1 the split is the window view
TOLERANCE = {1: (0.01, 0.02, 0.02), 8: (0.03, 0.25, 0.05), 16: (0.04, 0.25, 0.05), 64: (0.08, 0.30, 0.06)}


@pytest.fixture(scope="module", params=[1, 8, 16, 64])
def run(request, tmp_path_factory):
    c = request.param
    d = tmp_path_factory.mktemp(f"c{c}")
    tr = simulate(scenario_from_spec(f"prompt=2048,concurrency={c},output=32,rounds=1,warmup=0,"
                                     "gap=1"), seed=0)
    simulate_capture(d / "cap", tr)
    cap = load_capture(d / "cap")
    at = attribute(cap, align(read_request_log(d / "cap" / "requests.jsonl"), cap))
    truth = json.loads((d / "cap" / "truth.json").read_text())
    return c, cap, at, truth


def _ib_tx(per_series: dict) -> float:
    return sum(v for k, v in per_series.items() if k.startswith("roce") and k.endswith("/tx"))


def test_every_byte_goes_to_exactly_one_place(run):
    c, cap, at, truth = run
    r = at.requests
    iv = series.byte_intervals(cap)
    lo, hi = int(iv["t0_ns"].min()), int(iv["t1_ns"].max())
    counters = float(series.integrate(iv[iv["direction"] == "tx"], [lo], [hi],
                                      by="direction", allow_partial=True)["tx"].iloc[0])
    given = (r["prefill_tx_split_bytes"].sum() + r["decode_tx_split_bytes"].sum()
             + at.summary["split_idle_tx_bytes"])
    assert given == pytest.approx(counters, rel=1e-9)
    assert at.summary["split_total_tx_bytes"] == pytest.approx(counters, rel=1e-9)
    # and what the counters saw is what the model sent (the whole scenario is in the capture)
    assert counters == pytest.approx(_ib_tx(truth["totals_bytes"]), rel=1e-3)
    rx = (r["prefill_rx_split_bytes"].sum() + r["decode_rx_split_bytes"].sum()
          + at.summary["split_idle_rx_bytes"])
    assert rx == pytest.approx(at.summary["split_total_rx_bytes"], rel=1e-9)


def test_split_is_close_to_the_truth(run):
    c, cap, at, truth = run
    r = at.requests.set_index("request_id")
    ids = [t["request_id"] for t in truth["requests"]]
    assert len(ids) == c
    tp = np.array([_ib_tx(t["prefill_bytes_split"]) for t in truth["requests"]])
    td = np.array([_ib_tx(t["decode_bytes_split"]) for t in truth["requests"]])
    # the truth conserves too: its split adds up to the model's bytes
    assert tp.sum() + td.sum() == pytest.approx(_ib_tx(truth["totals_bytes"]), rel=1e-9)
    ep = r.loc[ids, "prefill_tx_split_bytes"].to_numpy()
    ed = r.loc[ids, "decode_tx_split_bytes"].to_numpy()
    pre_tol, dec_tol, dec_sum_tol = TOLERANCE[c]
    assert np.max(np.abs(ep / tp - 1)) <= pre_tol
    assert np.max(np.abs(ed / td - 1)) <= dec_tol
    assert abs(ed.sum() / td.sum() - 1) <= dec_sum_tol


def test_alone_the_split_is_the_window_view_and_overlap_is_said(run):
    c, cap, at, truth = run
    r = at.requests
    overlap = [n for n in at.notes if n.startswith("requests overlap")]
    if c == 1:
        for w in ("prefill", "decode"):
            for d in ("tx", "rx"):
                np.testing.assert_allclose(r[f"{w}_{d}_split_bytes"], r[f"{w}_{d}_bytes"],
                                           rtol=1e-9)
        assert not overlap
    else:
        # the window view counts shared bytes once per request: c times the wire, roughly
        assert at.summary["window_sum_tx_bytes"] > 0.5 * c * at.summary["split_total_tx_bytes"]
        assert len(overlap) == 1 and "*_split_bytes" in overlap[0]
        # per prompt token the split gives the model's bytes per token, the window view c times
        bpt = truth["bytes_per_token"]
        ib_share = sum(s["collective_share"] for s in truth["series"]
                       if s["source"] == "infiniband" and s["direction"] == "tx")
        per_tok = r["prefill_per_token_split_bytes"] / (bpt * ib_share)
        assert per_tok.between(0.9, 1.1).all()
        assert (r["prefill_per_token_bytes"] / (bpt * ib_share)).max() > 0.5 * c


def test_a_split_too_dense_to_hold_is_unknown_and_said(monkeypatch):
    """More requests in flight in one segment than MAX_PAIRS (no time block can hold it): the
    per-request split is not computed, NaN (unknown, never 0), the totals still the counters',
    and attribute says why and what fits. (More pairs in all are split in time blocks:
    tests/test_attribute_split_blocks.py.)"""
    from rdmascope.analysis import attribute as A
    from rdmascope.analysis import conserving

    n = 50
    send = np.arange(n, dtype=np.int64) * 1_000
    first, last = send + 500_000, send + 900_000  # every request overlaps every other

    def integ(a, b):
        return (b - a).astype(float), np.zeros(len(a))

    full = conserving.split(send, first, last, np.full(n, 10.0), np.full(n, 5.0), integ,
                            0, 2_000_000)
    assert full.pairs_over_budget == 0 and np.isfinite(full.prefill_tx).all()
    monkeypatch.setattr(conserving, "MAX_PAIRS", 40)  # all 50 prefill at once
    sp = conserving.split(send, first, last, np.full(n, 10.0), np.full(n, 5.0), integ,
                          0, 2_000_000)
    assert sp.pairs_over_budget > 40 and np.isnan(sp.prefill_tx).all()
    assert np.isnan(sp.decode_rx).all() and np.isnan(sp.idle_tx)
    assert sp.total_tx == full.total_tx == 2_000_000.0
    (note,) = A.split_notes({"split_pairs_over_budget": sp.pairs_over_budget})
    assert "too densely" in note and "in flight at one instant" in note


def test_known_totals_of_a_direction_never_read_are_unknown_not_zero():
    """An ``integrate`` that gives only (tx, rx) and no readable part: a direction whose every
    piece is unknown has an unknown known total (NaN), never a known 0; the other direction's
    known total is its bytes."""
    from rdmascope.analysis import conserving

    send = np.array([100, 400], np.int64)
    first, last = send + 100, send + 200

    def integ(a, b):
        return np.full(len(a), np.nan), (b - a).astype(float)

    sp = conserving.split(send, first, last, np.full(2, 10.0), np.full(2, 5.0), integ, 0, 1000)
    assert np.isnan(sp.total_tx) and np.isnan(sp.total_tx_known) and np.isnan(sp.idle_tx_known)
    assert np.isnan(sp.prefill_tx).all() and (sp.prefill_tx_known == 0).all()
    assert sp.total_rx == sp.total_rx_known == 1000.0
