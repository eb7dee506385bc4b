"""Peak-vs-window table: hand-computed peaks, means, percentiles and 1 ms peak uncertainty."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis import peak_bounds, peak_table

MS = 1_000_000


def _profile(mb_per_ms, unc_ns=0, series="d/tx", cid=0, flags=None):
    """Intervals of 1 ms, [k, k+1) ms, holding the given MB each."""
    n = len(mb_per_ms)
    t = np.arange(n + 1, dtype=np.int64) * MS
    return pd.DataFrame({
        "counter_id": np.full(n, cid, np.uint16), "series": [series] * n,
        "t0_ns": t[:-1], "t1_ns": t[1:], "t0_unc_ns": np.full(n, unc_ns),
        "t1_unc_ns": np.full(n, unc_ns), "bytes": np.asarray(mb_per_ms, float) * 1e6,
        "flag": flags or ["ok"] * n})


def _burst_profile():
    mb = np.zeros(1000)
    mb[100] = 22.5  # 180 Gb/s for 1 ms
    mb[101:105] = 5.0  # 40 Gb/s for 4 ms
    return mb


def test_peak_depends_on_window_like_the_study():
    tab = peak_table(_profile(_burst_profile()))
    by = tab.set_index("window")
    assert by.index.tolist() == ["1 ms", "5 ms", "100 ms", "1 s", "whole range"]
    # 1 ms: 22.5 MB x 8 / 1 ms = 180 Gb/s, in the window starting at 100 ms
    assert by.at["1 ms", "peak_gbps"] == pytest.approx(180.0)
    assert by.at["1 ms", "peak_t_ns"] == 100 * MS
    assert by.at["1 ms", "peak_t_s"] == pytest.approx(0.1)
    # 5 ms [100, 105): 42.5 MB -> 68 Gb/s; 100 ms [100, 200): 3.4 Gb/s; 1 s: 0.34 Gb/s
    assert by.at["5 ms", "peak_gbps"] == pytest.approx(68.0)
    assert by.at["100 ms", "peak_gbps"] == pytest.approx(3.4)
    assert by.at["1 s", "peak_gbps"] == pytest.approx(0.34)
    assert by.at["whole range", "peak_gbps"] == pytest.approx(0.34)
    np.testing.assert_allclose(tab.mean_gbps, 0.34)
    assert by.at["1 ms", "n_windows"] == 1000 and by.at["5 ms", "n_windows"] == 200
    assert by.at["1 ms", "p50_gbps"] == 0.0
    # 995 of 1000 windows are 0, then 40 x 4 and 180: p99.6 of the sorted rates is 40
    assert peak_table(_profile(_burst_profile()), percentiles=(99.6,)).set_index(
        "window").at["1 ms", "p99.6_gbps"] == pytest.approx(40.0)


def test_sub_range_and_origin():
    iv = _profile(_burst_profile())
    tab = peak_table(iv, start_ns=102 * MS, end_ns=110 * MS, windows_ns=(MS, 5 * MS))
    by = tab.set_index("window")
    assert by.at["1 ms", "peak_gbps"] == pytest.approx(40.0)
    assert by.at["1 ms", "n_windows"] == 8
    # the range never moves the grid: 5 ms windows stay on the origin (0 here), so only
    # [105, 110) lies wholly inside [102, 110) and it holds nothing
    assert by.at["5 ms", "peak_gbps"] == 0.0 and by.at["5 ms", "n_windows"] == 1
    assert by.at["5 ms", "peak_t_ns"] == 105 * MS
    # an explicit origin moves it: [102, 107) holds 3 x 5 MB
    moved = peak_table(iv, start_ns=102 * MS, end_ns=110 * MS, windows_ns=(5 * MS,),
                       origin_ns=102 * MS).set_index("window")
    assert moved.at["5 ms", "peak_gbps"] == pytest.approx(15e6 * 8 / 5e6)
    # mean over the range: 15 MB in 8 ms = 15 Gb/s
    assert by.at["whole range", "peak_gbps"] == pytest.approx(15.0)


def test_one_ms_peak_uncertainty_from_brackets():
    # each reading known to +-0.1 ms: the peak window [100, 101) ms can hold between
    # F(100.9) - F(100.1) = 0.8 x 22.5 = 18 MB and F(101.1) - F(99.9) = 22.5 + 0.5 = 23 MB
    # (the bracket alone: no extra instant uncertainty)
    tab = peak_table(_profile(_burst_profile(), unc_ns=100_000), windows_ns=(MS,),
                     uncertainty=True, instant_unc_ns=0)
    row = tab.iloc[0]
    assert row.peak_low_gbps == pytest.approx(18e6 * 8 / 1e6)
    assert row.peak_high_gbps == pytest.approx(23e6 * 8 / 1e6)
    b = peak_bounds(_profile(_burst_profile(), unc_ns=0), pd.Series({"d/tx": 100 * MS}), MS,
                    instant_unc_ns=0)
    assert b.at["d/tx", "low_bytes"] == b.at["d/tx", "high_bytes"] == pytest.approx(22.5e6)


def test_nan_windows_are_left_out_and_counted():
    mb = np.ones(20)
    mb[5] = 50.0
    flags = ["ok"] * 20
    flags[5] = "reset"
    mb[5] = np.nan
    tab = peak_table(_profile(mb, flags=flags), windows_ns=(MS, 5 * MS))
    by = tab.set_index("window")
    assert by.at["1 ms", "peak_gbps"] == pytest.approx(8.0)
    assert by.at["1 ms", "n_nan_windows"] == 1 and by.at["1 ms", "n_windows"] == 19
    assert by.at["5 ms", "n_nan_windows"] == 1 and by.at["5 ms", "n_windows"] == 3
    assert np.isnan(by.at["whole range", "peak_gbps"])  # the range holds an unknown interval


def test_twins_grouped_into_a_link():
    a = _profile(_burst_profile(), series="a/tx", cid=0)
    b = _profile(_burst_profile() / 2, series="b/tx", cid=1)
    tab = peak_table(pd.concat([a, b], ignore_index=True), windows_ns=(MS,),
                     groups={"link/tx": ["a/tx", "b/tx"]})
    one = tab[tab.window == "1 ms"].set_index("series")
    assert one.index.tolist() == ["a/tx", "b/tx", "link/tx"]
    assert one.at["link/tx", "peak_gbps"] == pytest.approx(270.0)
    assert one.at["b/tx", "peak_gbps"] == pytest.approx(90.0)


def test_instant_uncertainty_floor_widens_the_bounds_by_hand():
    # no read bracket at all, the default 0.1 ms floor (method.md: each instant known to
    # +-0.1-0.2 ms): the same bounds as a 0.1 ms bracket above, 18 and 23 MB
    tab = peak_table(_profile(_burst_profile(), unc_ns=0), windows_ns=(MS,), uncertainty=True)
    assert tab.iloc[0].peak_low_gbps == pytest.approx(18e6 * 8 / 1e6)    # 144 Gb/s
    assert tab.iloc[0].peak_high_gbps == pytest.approx(23e6 * 8 / 1e6)   # 184 Gb/s
    # bracket half-width 0.05 ms + floor 0.1 ms add up to u = 0.15 ms: [100.15, 100.85) holds
    # 0.7 x 22.5 = 15.75 MB; [99.85, 101.15) holds 22.5 + 0.15 x 5 = 23.25 MB
    b = peak_bounds(_profile(_burst_profile(), unc_ns=50_000), pd.Series({"d/tx": 100 * MS}),
                    MS)
    assert b.at["d/tx", "low_bytes"] == pytest.approx(15.75e6)
    assert b.at["d/tx", "high_bytes"] == pytest.approx(23.25e6)
    # a 0.2 ms floor (the top of method.md's range): 0.6 x 22.5 and 22.5 + 0.2 x 5
    b = peak_bounds(_profile(_burst_profile(), unc_ns=0), pd.Series({"d/tx": 100 * MS}), MS,
                    instant_unc_ns=200_000)
    assert b.at["d/tx", "low_bytes"] == pytest.approx(13.5e6)
    assert b.at["d/tx", "high_bytes"] == pytest.approx(23.5e6)
    with pytest.raises(ValueError, match="instant_unc_ns must be >= 0"):
        peak_bounds(_profile([1.0]), pd.Series({"d/tx": 0}), MS, instant_unc_ns=-1)


def test_a_1ms_value_above_line_rate_has_bounds_that_reach_it():
    # 31.25 MB per ms = 250 Gb/s on a 200 Gb/s port, readings with a 4 us bracket (+-2 us):
    # the bracket alone bounds it to 250 x (1 -+ 0.004) = 249-251 Gb/s, which hides that the
    # counter's instant is only known to ~0.1 ms; with the floor u = 0.102 ms per edge:
    # 250 x (1 -+ 0.204) = 199-301 Gb/s, and the port's 200 Gb/s lies inside
    iv = _profile([31.25] * 10, unc_ns=2_000)
    narrow = peak_table(iv, start_ns=MS, end_ns=9 * MS, windows_ns=(MS,), uncertainty=True,
                        instant_unc_ns=0).set_index("window")
    assert narrow.at["1 ms", "peak_low_gbps"] == pytest.approx(249.0)
    assert narrow.at["1 ms", "peak_high_gbps"] == pytest.approx(251.0)
    tab = peak_table(iv, start_ns=MS, end_ns=9 * MS, windows_ns=(MS,),
                     uncertainty=True).set_index("window")
    assert tab.at["1 ms", "peak_gbps"] == pytest.approx(250.0)
    assert tab.at["1 ms", "peak_low_gbps"] == pytest.approx(199.0)
    assert tab.at["1 ms", "peak_high_gbps"] == pytest.approx(301.0)
    # the mean over the 8 ms range moves by 0.204 ms of 8: 250 x (1 -+ 0.0255)
    assert tab.at["whole range", "peak_low_gbps"] == pytest.approx(243.625)
    assert tab.at["whole range", "peak_high_gbps"] == pytest.approx(256.375)


def test_cli_peaks_instant_uncertainty(tmp_path):
    """`rdmascope peaks --uncertainty` on a tiny capture: 1 ms windows of 30, 30, 30, 31.25 x 5,
    30, 30 MB, readings at whole ms with a 4 us read bracket. The peak is [3, 4) ms at
    250 Gb/s. Bounds by hand, u = 2 us + 0.1 ms = 0.102 ms per edge:
    low = 0.796 x 31.25 MB = 24.875 MB (199.0 Gb/s); high = 31.25 + 0.102 x (31.25 + 30) MB
    = 37.4975 MB (299.98 Gb/s). With --instant-uncertainty 0 (the bracket alone): 249.0 and
    250.98 Gb/s."""
    import json

    from capture_builders import STATUS_OK, T0, ib, write_capture
    from click.testing import CliRunner

    from rdmascope.cli import main

    mb = [30.0] * 3 + [31.25] * 5 + [30.0] * 2
    units = np.concatenate([[0], np.cumsum(np.array(mb) * 1e6 / 4)]).astype(np.int64)
    rd = {0: [(T0 + k * MS - 2000, 4000, int(u), STATUS_OK) for k, u in enumerate(units)]}
    write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx")], rd,
                  devices=[{"name": "rocep1s0f1", "ports": [{"port": 1, "rate_gbps": 200}]}])

    def one_ms(*extra):
        r = CliRunner().invoke(main, ["peaks", str(tmp_path / "c"), "--windows", "1ms",
                                      "--uncertainty", "--json", *extra])
        assert r.exit_code == 0, r.output
        obj = json.loads(r.stdout[r.stdout.index("{"):])
        (row,) = [x for x in obj["peaks"] if x["window"] == "1 ms"]
        return row, obj["meta"]

    row, meta = one_ms()
    # 250 Gb/s on a 200 Gb/s port, possible within the timing uncertainty: the headline says
    # "at line rate" (the bound), never a number above it; the raw maximum keeps the 250
    assert row["peak_gbps"] == pytest.approx(200.0) and row["at_line_rate"] is True
    assert row["bound_gbps"] == 200.0 and row["raw_max_gbps"] == pytest.approx(250.0)
    assert row["peak_low_gbps"] == pytest.approx(199.0)
    assert row["peak_high_gbps"] == pytest.approx(299.98)
    assert meta["instant_unc_ns"] == 100_000
    assert row["n_over_line_windows"] == 0  # 199.0 <= 200: within the timing uncertainty
    row, _ = one_ms("--instant-uncertainty", "0")
    # the bracket alone: [3, 4) ms holds at least 249.0 Gb/s > the 200 Gb/s port: over line
    # rate, out of the headline (the 30 MB windows, 240 Gb/s, low 0.996 x 240 = 239.04 > 200:
    # over line rate too), so no window is consistent with physics
    assert row["n_over_line_windows"] == 10 and np.isnan(row["peak_gbps"] or np.nan)
    assert row["raw_max_gbps"] == pytest.approx(250.0)
    assert row["raw_max_t_ns"] == T0 + 3 * MS
    assert row["over_line_causes"] == "late counter update x10"
    bad = CliRunner().invoke(main, ["peaks", str(tmp_path / "c"), "--uncertainty",
                                    "--instant-uncertainty", "-1ms"])
    assert bad.exit_code == 2 and "'--instant-uncertainty'" in bad.output


def test_peak_acc_blocks_equal_the_rule_on_the_whole_series():
    """``peaks.PeakAcc`` fed block by block (its one pass over the quality bits, the shortcut
    when no window of a block is kept out) gives the headline peak, raw maximum, counts,
    over-line starts and percentiles of ``headline_peak`` and the quality rule applied to the
    whole series at once: blocks with partial, empty, invalid, gap-spread and over-line
    windows, NaN and tied rates, and blocks with none of them."""
    from rdmascope.analysis.curve import (
        QUALITY_EMPTY,
        QUALITY_GAP,
        QUALITY_INVALID,
        QUALITY_OVER_LINE,
        QUALITY_PARTIAL,
    )
    from rdmascope.analysis.peaks import PeakAcc, headline_peak

    rng = np.random.default_rng(11)
    bits = [QUALITY_PARTIAL, QUALITY_EMPTY, QUALITY_INVALID, QUALITY_GAP, QUALITY_OVER_LINE]
    for _ in range(200):
        blocks = []
        t0 = 0
        for _ in range(int(rng.integers(1, 6))):
            n = int(rng.integers(0, 50))
            g = np.round(rng.random(n) * 10, int(rng.integers(0, 3)))  # ties
            q = np.zeros(n, np.int8)
            if rng.random() < 0.5:
                for b in bits:
                    q[rng.random(n) < 0.1] |= np.int8(b)
                g[(q & (QUALITY_EMPTY | QUALITY_INVALID)) != 0] = np.nan
            blocks.append((np.arange(t0, t0 + n, dtype=np.int64), g, q))
            t0 += n
        acc = PeakAcc(mem_values=30, max_over=7)
        for t, g, q in blocks:
            acc.add(t, g, q)
        t = np.concatenate([b[0] for b in blocks])
        g = np.concatenate([b[1] for b in blocks])
        q = np.concatenate([b[2] for b in blocks])
        head, raw = headline_peak(g, q)
        assert acc.t_peak == (None if head is None else int(t[head]))
        assert acc.t_raw == (None if raw is None else int(t[raw]))
        if head is not None:
            assert acc.peak == g[head]
        usable = (q & (QUALITY_PARTIAL | QUALITY_EMPTY | QUALITY_INVALID)) == 0
        assert acc.n == int(usable.sum())
        assert acc.n_nan == int(((q & QUALITY_INVALID) != 0).sum())
        assert acc.n_gap == int(((q & QUALITY_GAP) != 0).sum())
        over = (q & QUALITY_OVER_LINE) != 0
        assert acc.n_over == int(over.sum())
        assert acc.over_t == [int(x) for x in t[over][:7]]
        if acc.n:
            assert acc.values.percentiles([0, 50, 99]) == [
                float(v) for v in np.percentile(g[usable], [0, 50, 99])]
        acc.values.close()
