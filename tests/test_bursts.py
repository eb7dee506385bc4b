"""Burst detection with hysteresis: hand-made 1 ms series, duty cycle, gaps, all-reduce bytes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis import allreduce_bytes, burst_analysis, detect_bursts

MS = 1_000_000


def _series(gbps):
    b = np.asarray(gbps, float) * 1e9 / 8 * 1e-3  # bytes in 1 ms at that rate
    return pd.Series(b, index=pd.Index(np.arange(len(b), dtype=np.int64) * MS))


def _intervals(gbps):
    s = _series(gbps)
    n = len(s)
    t = np.arange(n + 1, dtype=np.int64) * MS
    return pd.DataFrame({"counter_id": np.zeros(n, np.uint16), "series": ["d/tx"] * n,
                         "t0_ns": t[:-1], "t1_ns": t[1:], "bytes": s.to_numpy(),
                         "flag": ["ok" if np.isfinite(x) else "reset" for x in s]})


RATES = [0, 30, 60, 100, 30, 10, 0, 60, 25, 15, 0, 30, 0]


def test_allreduce_bytes_matches_method():
    # 4,096 tokens x 6,144 x 2 B = 50.3 MB; x 1.75 at TP8 = 88.1 MB (method.md)
    assert allreduce_bytes(4096, 6144, 2, 8) == 1.75 * 4096 * 6144 * 2
    assert allreduce_bytes(4096, 6144, 2, 8) / 1e6 == pytest.approx(88.08, abs=0.01)
    assert allreduce_bytes(100, 10, 2, 2) == 2000.0  # TP2: 1.0x the block
    with pytest.raises(ValueError):
        allreduce_bytes(1, 1, 2, 0)


def test_hysteresis_by_hand():
    # capacity 200: enter at 50 Gb/s, leave below 20 Gb/s
    bt = detect_bursts(_series(RATES), MS, capacity_gbps=200)
    assert len(bt) == 2
    # burst 1: starts where 60 >= 50 (window 2; window 1's 30 is below enter), lasts while
    # >= 20 (windows 2-4), ends at 5 ms (10 < 20)
    assert bt.start_ns.tolist() == [2 * MS, 7 * MS]
    assert bt.end_ns.tolist() == [5 * MS, 9 * MS]
    assert bt.duration_s.tolist() == pytest.approx([0.003, 0.002])
    assert bt.bytes.tolist() == pytest.approx([(60 + 100 + 30) * 125_000, (60 + 25) * 125_000])
    assert bt.peak_gbps.tolist() == pytest.approx([100, 60])
    assert bt.mean_gbps.tolist() == pytest.approx([190 / 3, 42.5])
    assert np.isnan(bt.gap_before_s.iloc[0]) and bt.gap_before_s.iloc[1] == pytest.approx(0.002)
    # the 30 Gb/s blip at 11 ms never reaches the enter threshold: no burst
    # a lower capacity turns it into one
    assert len(detect_bursts(_series(RATES), MS, capacity_gbps=100)) == 3


def test_nan_ends_a_burst_and_is_never_part_of_one():
    rates = [0, 100, 100, np.nan, 100, 0]
    bt = detect_bursts(_series(rates), MS, capacity_gbps=200)
    assert bt.start_ns.tolist() == [MS, 4 * MS] and bt.end_ns.tolist() == [3 * MS, 5 * MS]


def test_bad_thresholds():
    with pytest.raises(ValueError, match="leave"):
        detect_bursts(_series(RATES), MS, capacity_gbps=200, enter_frac=0.1, leave_frac=0.2)
    with pytest.raises(ValueError, match="capacity"):
        detect_bursts(_series(RATES), MS, capacity_gbps=0)


def test_burst_analysis_summary_and_allreduce_ratio():
    exp = 10 * 125_000.0
    res = burst_analysis(_intervals(RATES), capacity_gbps=200, expected_allreduce=exp)
    t = res.table
    assert t.series.tolist() == ["d/tx", "d/tx"]
    assert t.allreduces.tolist() == pytest.approx([19.0, 8.5])
    assert t.t_start_s.tolist() == pytest.approx([0.002, 0.007])
    s = res.summary.iloc[0]
    assert s.n_bursts == 2
    assert s.duty_cycle == pytest.approx(5 / 13)
    total = sum(RATES) * 125_000
    assert s.total_bytes == pytest.approx(total)
    assert s.burst_share == pytest.approx(275 * 125_000 / total)
    assert s.mean_gap_s == pytest.approx(0.002)
    assert s.enter_gbps == 50 and s.leave_gbps == 20


def test_table_view_keeps_only_the_first_bursts_and_counts_them_all(tmp_path):
    """``keep_rows`` (the bursts command's table view): only each series' first bursts are held,
    the summary still counts every burst (flat memory in the capture's length): counts and the
    minimum gap exactly, sums, mean and median gap to float rounding (summed as they pass)."""
    import sys
    from pathlib import Path

    from rdmascope.analysis.bursts import burst_analysis_capture

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from scale_capture import build

    cap = build(tmp_path / "cap", 20, segment_s=4)
    full = burst_analysis_capture(cap, capacity_gbps=200.0)
    some = burst_analysis_capture(cap, capacity_gbps=200.0, keep_rows=7)
    assert len(full.table) > 20
    for s, t in some.table.groupby("series", sort=False):
        pd.testing.assert_frame_equal(t.reset_index(drop=True),
                                      full.table[full.table.series == s].head(7)
                                      .reset_index(drop=True))
    a, b = full.summary.set_index("series"), some.summary.set_index("series")
    for c in ("n_bursts", "nan_windows", "over_line_windows", "min_gap_s", "total_bytes"):
        pd.testing.assert_series_equal(a[c], b[c])
    for c in ("duty_cycle", "burst_bytes", "burst_share", "mean_gap_s", "median_gap_s"):
        np.testing.assert_allclose(b[c].to_numpy(float), a[c].to_numpy(float), rtol=1e-12)


def test_total_bytes_with_an_unknown_window_is_unknown_with_the_known_part_beside():
    """Unknown is never zero: one unknown 1 ms window makes the series' total unknown (NaN),
    never the known windows' sum passed off as the total; that sum (a lower bound) and the
    unknown time are stated beside it, and the burst share of an unknown total is unknown."""
    rates = [0, 60, 100, np.nan, 30, 0, 80, 0]
    r = burst_analysis(_intervals(rates), capacity_gbps=200.0).summary.set_index("series")
    # by hand: the known windows carry (60 + 100 + 30 + 80) Gb/s x 1 ms = 270e6 / 8 bytes
    assert r.at["d/tx", "nan_windows"] == 1
    assert np.isnan(r.at["d/tx", "total_bytes"]) and np.isnan(r.at["d/tx", "burst_share"])
    assert r.at["d/tx", "known_bytes"] == pytest.approx(270e9 / 8 * 1e-3)
    assert r.at["d/tx", "unknown_s"] == pytest.approx(0.001)
    # all known: the total is the known bytes, no unknown time
    k = burst_analysis(_intervals([0, 60, 100, 0]), capacity_gbps=200.0).summary.iloc[0]
    assert k["total_bytes"] == pytest.approx(160e9 / 8 * 1e-3) == k["known_bytes"]
    assert k["unknown_s"] == 0.0


def test_the_capacity_note_names_where_the_capacity_came_from():
    """`bursts --link-gbps 100` takes 100 Gb/s as the capacity and says so (it said "the
    ports' reported rate"); without it, the port rate is named as the source."""
    from pathlib import Path

    from click.testing import CliRunner

    from rdmascope.cli import main

    sim = str(Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200")
    r = CliRunner().invoke(main, ["bursts", sim, "--link-gbps", "100"])
    assert r.exit_code == 0, r.output
    assert "capacity 100 Gb/s (--link-gbps); a burst enters at >= 25 Gb/s" in r.output
    r = CliRunner().invoke(main, ["bursts", sim])
    assert "capacity 200 Gb/s (the ports' reported rate" in r.output
    r = CliRunner().invoke(main, ["bursts", sim, "--capacity", "150"])
    assert "capacity 150 Gb/s;" in r.output, r.output
