"""Unknown is never zero, bytes are conserved: sums over spans with unknown parts.

Every quantity covering a span with an unknown part is NaN (never the known part passed off as
the whole), with the known part beside it, and the splits still add up. The captures are built
by hand with unreadable readings (``requestlog_helpers.build_capture``); every expected value is
computed here from the counter values written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import align, read_request_log
from requestlog_helpers import MS, build_capture

T0 = 1000 * 1_000_000_000
A, B = "rocep1s0f1", "roceP2p1s0f1"
N = 100
PER_MS = {f"{A}/tx": 4000, f"{B}/tx": 8000, f"{A}/rx": 400, f"{B}/rx": 800}


def _capture(path, unreadable=None, n=N):
    return load_capture(build_capture(path, T0, {s: np.full(n, v) for s, v in PER_MS.items()},
                                      unreadable=unreadable))


def _log(path, rows):
    with open(path, "w") as f:
        for i, (s, a, b) in enumerate(rows):
            f.write(json.dumps({"request_id": f"r{i}", "t_send": (T0 + s * MS) / 1e9,
                                "t_first_token": (T0 + a * MS) / 1e9,
                                "t_last_token": (T0 + b * MS) / 1e9, "prompt_tokens": 1000,
                                "output_tokens": 11, "test": "t", "round": 1}) + "\n")
    return read_request_log(path)


def test_conserving_split_totals_are_unknown_with_an_unknown_segment_and_known_parts_add_up(
        tmp_path):
    # B's tx readings 40..44 unreadable: its interval [39, 45) ms has unknown bytes
    cap = _capture(tmp_path / "cap", {f"{B}/tx": (40, 45)})
    log = align(_log(tmp_path / "log.jsonl", [(10, 30, 60), (62, 70, 80)]), cap)
    at = attribute(cap, log)
    s = at.summary
    r = at.requests.set_index("request_id")
    tx_ms = PER_MS[f"{A}/tx"] + PER_MS[f"{B}/tx"]  # 12,000 B per ms, both devices
    rx_ms = PER_MS[f"{A}/rx"] + PER_MS[f"{B}/rx"]
    # the span [0, 100] ms is cut at 10, 30, 60, 62, 70, 80; [30, 60) holds the unknown ms
    known_ms = {"idle": 10 + 2 + 20, "r0 prefill": 20, "r1 prefill": 8, "r1 decode": 10}
    assert np.isnan(s["split_total_tx_bytes"])
    assert s["split_total_tx_known_bytes"] == pytest.approx(sum(known_ms.values()) * tx_ms)
    assert s["split_unknown_segments"] == 1 and s["split_unknown_s"] == pytest.approx(0.030)
    # every idle segment is known: idle/other is known
    assert s["split_idle_tx_bytes"] == s["split_idle_tx_known_bytes"] == \
        pytest.approx(known_ms["idle"] * tx_ms)
    # r0's decode [30, 60) is unknown (its known part: none); the others are known
    assert np.isnan(r.at["r0", "decode_tx_split_bytes"])
    assert r.at["r0", "decode_tx_split_known_bytes"] == 0.0
    assert r.at["r0", "prefill_tx_split_bytes"] == pytest.approx(known_ms["r0 prefill"] * tx_ms)
    assert r.at["r1", "prefill_tx_split_bytes"] == pytest.approx(known_ms["r1 prefill"] * tx_ms)
    assert r.at["r1", "decode_tx_split_bytes"] == pytest.approx(known_ms["r1 decode"] * tx_ms)
    # bytes are conserved: per-request known parts + idle/other = the known total
    given = sum(r[f"{w}_tx_split_known_bytes"].sum() for w in ("prefill", "decode"))
    assert given + s["split_idle_tx_known_bytes"] == pytest.approx(s["split_total_tx_known_bytes"])
    # rx was read throughout: known, and the headline split adds up to the counters
    assert s["split_total_rx_bytes"] == pytest.approx(N * rx_ms)
    given_rx = sum(r[f"{w}_rx_split_bytes"].sum() for w in ("prefill", "decode"))
    assert given_rx + s["split_idle_rx_bytes"] == pytest.approx(N * rx_ms)
    # the window view's sum: unknown (r0's decode window), its known part beside it
    assert np.isnan(s["window_sum_tx_bytes"])
    assert s["window_sum_tx_known_bytes"] == pytest.approx((20 + 8 + 10) * tx_ms)


def test_conserving_split_totals_without_unknown_equal_the_counters(tmp_path):
    cap = _capture(tmp_path / "cap")
    at = attribute(cap, align(_log(tmp_path / "log.jsonl", [(10, 30, 60), (62, 70, 80)]), cap))
    s = at.summary
    tx_ms = PER_MS[f"{A}/tx"] + PER_MS[f"{B}/tx"]
    assert s["split_total_tx_bytes"] == s["split_total_tx_known_bytes"] == \
        pytest.approx(N * tx_ms)
    assert s["split_unknown_segments"] == 0 and s["split_unknown_s"] == 0.0
    assert s["window_sum_tx_bytes"] == s["window_sum_tx_known_bytes"] == \
        pytest.approx((20 + 30 + 8 + 10) * tx_ms)
