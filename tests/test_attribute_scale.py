"""attribute at scale: the vectorized per-range window stats equal the per-range rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis.attribute import RangeWindowStats
from rdmascope.analysis.bursts import detect_bursts
from rdmascope.analysis.peaks import HEADLINE_EXCLUDE
from rdmascope.analysis.series import QUALITY_OVER_LINE

MS = 1_000_000


def _per_range(t, v, qq, a, b, cap):
    """The rule range by range (the code RangeWindowStats replaced): nanmax of the headline
    windows, detect_bursts on the range's windows, over-line windows counted."""
    rate = v * 8.0 / MS
    good = np.where((qq & HEADLINE_EXCLUDE) == 0, rate, np.nan)
    over = (qq & QUALITY_OVER_LINE) != 0
    fine = pd.Series(v, index=t)
    peak, nb, n_over = np.full(len(a), np.nan), np.zeros(len(a), int), np.zeros(len(a), int)
    lo = np.searchsorted(t, a, "left")
    hi = np.searchsorted(t + MS, b, "right")
    for i in range(len(a)):
        if hi[i] > lo[i]:
            seg = good[lo[i]:hi[i]]
            if np.isfinite(seg).any():
                peak[i] = np.nanmax(seg)
            n_over[i] = over[lo[i]:hi[i]].sum()
            nb[i] = len(detect_bursts(fine.iloc[lo[i]:hi[i]], MS, capacity_gbps=cap))
    return peak, nb, n_over


@pytest.mark.parametrize("seed", range(12))
def test_range_window_stats_equal_the_per_range_rule_across_blocks(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(50, 400))
    t = (10_000 + np.arange(m)) * MS
    cap = 100.0
    # rates around the leave (10 Gb/s) and enter (25 Gb/s) thresholds, NaN windows, exact
    # threshold values, quality bits
    levels = np.array([0.0, 5.0, 10.0, 12.0, 25.0, 30.0, 150.0])
    rate = levels[rng.integers(0, len(levels), m)]
    rate = np.where(rng.random(m) < 0.7, np.repeat(rate[::3], 3)[:m], rate)  # runs
    v = rate * MS / 8.0
    v[rng.random(m) < 0.05] = np.nan
    bits = np.array([0, 0, 0, QUALITY_OVER_LINE, HEADLINE_EXCLUDE & ~QUALITY_OVER_LINE])
    qq = bits[rng.integers(0, len(bits), m)].astype(np.int64)
    n = 300
    a = t[0] - 3 * MS + rng.integers(0, (m + 6) * MS, n)
    length = np.where(rng.random(n) < 0.1, rng.integers(0, (m + 6) * MS, n),
                      rng.integers(0, 40 * MS, n))
    b = a + length
    a[:5] = t[0]  # the whole series, and exact window edges
    b[:5] = t[-1] + MS
    want = _per_range(t, v, qq, a, b, cap)
    assert (want[1] > 0).sum() > 20 and (want[1] > 1).sum() > 5  # bursts to count
    for n_blocks in (1, 2, 5, 17):
        cuts = np.sort(rng.choice(np.arange(1, m), size=min(n_blocks - 1, m - 1),
                                  replace=False)) if n_blocks > 1 else np.array([], int)
        st = RangeWindowStats(a, b, MS, cap)
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [m]]),
                          strict=True):
            st.add(t[lo:hi], v[lo:hi], qq[lo:hi])
        got = st.result()
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1], err_msg=f"{n_blocks} blocks")
        np.testing.assert_array_equal(got[2], want[2])


def test_range_window_stats_hand_computed():
    # windows (Gb/s at 100 Gb/s capacity: enter 25, leave 10):
    #   0: 30  1: 12  2: 5  3: 12  4: 12  5: 40  6: 11  7: 0
    # whole range: runs [0,2) with enter -> burst; [3,7) with enter at 5 -> burst: 2
    # range over windows 1..4: runs [1,2) (no enter), [3,5) (no enter): 0 bursts, peak 12
    # range over windows 4..6, cut by a block edge after window 4: run [4,7) enter at 5: 1
    rate = np.array([30, 12, 5, 12, 12, 40, 11, 0], float)
    t = np.arange(8) * MS
    v = rate * MS / 8
    a = np.array([0, 1 * MS, 4 * MS])
    b = np.array([8 * MS, 5 * MS, 7 * MS])
    st = RangeWindowStats(a, b, MS, 100.0)
    st.add(t[:5], v[:5])
    st.add(t[5:], v[5:])
    peak, nb, n_over = st.result()
    assert nb.tolist() == [2, 0, 1]
    assert peak.tolist() == [40.0, 12.0, 40.0]
    assert n_over.tolist() == [0, 0, 0]
