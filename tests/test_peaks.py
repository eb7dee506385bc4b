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
    # 5 ms windows aligned to the range start: [102, 107) holds 3 x 5 MB
    assert by.at["5 ms", "peak_gbps"] == pytest.approx(15e6 * 8 / 5e6)
    # mean over the range: 15 MB in 8 ms = 15 Gb/s
    assert by.at["whole range", "peak_gbps"] == pytest.approx(15.0)


def test_one_ms_peak_uncertainty_from_brackets():
    # each reading known to +-0.1 ms: the peak window [100, 101) ms can hold between
    # F(100.9) - F(100.1) = 0.8 x 22.5 = 18 MB and F(101.1) - F(99.9) = 22.5 + 0.5 = 23 MB
    tab = peak_table(_profile(_burst_profile(), unc_ns=100_000), windows_ns=(MS,),
                     uncertainty=True)
    row = tab.iloc[0]
    assert row.peak_low_gbps == pytest.approx(18e6 * 8 / 1e6)
    assert row.peak_high_gbps == pytest.approx(23e6 * 8 / 1e6)
    b = peak_bounds(_profile(_burst_profile(), unc_ns=0), pd.Series({"d/tx": 100 * MS}), MS)
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
