"""The ``--metrics`` peak gauges and ``rdmascope peaks`` give one number: the gauge's streamed
window rule (``rdmascope.sampler.gridpeaks.GridWindows``, fed the readings in flush batches of
any size) against ``analysis.peaks.peak_table`` on a capture of the same readings, through
jittered instants, long read brackets, missed sweeps, unreadable readings, a counter reset, a
torn read, bursts above the line rate and bursts at it."""

from __future__ import annotations

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, write_capture
from rdmascope.analysis.intervals import byte_intervals
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.peaks import peak_table
from rdmascope.sampler.gridpeaks import GridWindows

LINE = 100.0  # Gb/s: 12.5 MB per ms


def _readings(seed: int, n: int = 1500):
    """(t_before, dur, value, status) rows of one tx counter with every fault kind."""
    rng = np.random.default_rng(seed)
    rows, v, k = [], 10_000, 0
    t = T0 + int(rng.integers(0, 40_000))
    while len(rows) < n:
        k += 1
        t += MS + int(rng.normal(0, 60_000))
        if rng.random() < 0.01:  # missed sweeps: a gap
            t += int(rng.integers(1, 6)) * MS
        dur = int(rng.integers(1_000, 30_000)) if rng.random() > 0.02 else 400_000
        units = int(rng.integers(0, 20_000))  # background, 4 bytes each
        r = rng.random()
        if r < 0.03:
            units += 2_600_000  # ~10.4 MB: near or at 100 Gb/s in 1 ms
        elif r < 0.04:
            units += 9_000_000  # 36 MB in one interval: over line rate
        v += units
        if len(rows) == n // 2:
            v = 5_000  # a reset
        st = STATUS_READ_ERROR if rng.random() < 0.01 else STATUS_OK
        rows.append((t, dur, None if st != STATUS_OK else v, st))
        if len(rows) == n // 3:  # a torn read between two agreeing neighbours
            rows.append((t + MS, 2_000, v - 1_000_000, STATUS_OK))
            t += MS
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_gauge_windows_equal_peaks_on_the_same_readings(tmp_path, seed):
    rows = _readings(seed)
    path = write_capture(tmp_path / "cap", [ib("mlx5_0", "tx")], {0: rows})
    t = np.array([r[0] + r[1] // 2 for r in rows], np.int64)
    ok = np.array([r[3] == STATUS_OK for r in rows])
    v = np.array([r[2] if r[2] is not None else 0 for r in rows], np.uint64)
    u = np.array([(r[1] + 1) // 2 for r in rows], np.int64)
    rng = np.random.default_rng(seed + 100)
    for width in (MS, 5 * MS):
        g = GridWindows(T0, width, MS, 4, LINE)
        rates, n_over, s = [], 0, 0
        while s < len(rows):  # flush batches of random sizes
            e = s + int(rng.integers(1, 400))
            r, o = g.feed(t[s:e], v[s:e], u[s:e], ok[s:e])
            rates.append(r)
            n_over += o
            s = e
        got = np.concatenate(rates)
        # the gauge has evaluated the windows ending by the second-last valid reading
        valid_t = np.sort(t[ok])
        end = int(valid_t[-2])
        tab = peak_table(byte_intervals(load_capture(path)), windows_ns=(width,), end_ns=end,
                         line_gbps=LINE)
        row = tab[tab["series"] == "mlx5_0/tx"].iloc[0]
        assert got.size > 100
        assert got.max() == pytest.approx(row["peak_gbps"], rel=1e-9)
        assert n_over == row["n_over_line_windows"]
        if width == MS:  # the over-line bursts were judged, not only the plain ones
            assert n_over > 0
        # every window counted once: none evaluated twice across batches
        assert got.size <= (end - T0) // width + 1


def test_a_window_is_evaluated_once_whatever_the_batches():
    t = T0 + np.arange(1, 101, dtype=np.int64) * MS
    v = np.arange(1, 101, dtype=np.uint64) * 1000
    one = GridWindows(T0, MS, MS, 4).feed(t, v, np.zeros(100, np.int64), np.ones(100, bool))[0]
    g = GridWindows(T0, MS, MS, 4)
    many = np.concatenate([g.feed(t[i:i + 1], v[i:i + 1], np.zeros(1, np.int64),
                                  np.ones(1, bool))[0] for i in range(100)])
    assert np.array_equal(one, many)
    # 1,000 units x 4 bytes per ms = 0.032 Gb/s in each whole window from the first reading
    assert one.size == 98 and np.allclose(one, 4000 * 8 / MS)


def test_a_window_within_reach_of_unknown_bytes_is_not_judged_over_line(tmp_path):
    """Long read brackets (2 ms: each instant uncertain by 1.1 ms with the 0.1 ms floor) and an
    unreadable reading at 53 ms: the 5 ms window [55, 60) ms holds a 100 MB burst (160 Gb/s on a
    100 Gb/s line) and no unknown interval, but widened by the uncertainty it reaches the
    unavailable interval [52, 54) ms. peaks judges nothing from unknown bytes
    (``rdmascope.counters.fewest_bytes`` is NaN there): the window is not over line rate and
    its headline is the line rate; the gauge said over line rate and left it out."""
    rows, v = [], 0
    for k in range(100):
        v += 2_500 + (12_500_000 if k in (57, 58) else 0)  # 50 MB per ms for 2 ms
        bad = k == 53
        rows.append((T0 + k * MS + 50_000 - MS, 2 * MS, None if bad else v,
                     STATUS_READ_ERROR if bad else STATUS_OK))
    path = write_capture(tmp_path / "cap", [ib("mlx5_0", "tx")], {0: rows})
    t = np.array([r[0] + r[1] // 2 for r in rows], np.int64)
    ok = np.array([r[3] == STATUS_OK for r in rows])
    vals = np.array([r[2] or 0 for r in rows], np.uint64)
    u = np.array([(r[1] + 1) // 2 for r in rows], np.int64)
    rates, n_over = GridWindows(T0, 5 * MS, MS, 4, LINE).feed(t, vals, u, ok)
    tab = peak_table(byte_intervals(load_capture(path)), windows_ns=(5 * MS,),
                     end_ns=int(np.sort(t[ok])[-2]), line_gbps=LINE)
    row = tab[tab["series"] == "mlx5_0/tx"].iloc[0]
    assert row["n_over_line_windows"] == 0 and row["at_line_rate"]
    assert n_over == 0 and rates.max() == pytest.approx(row["peak_gbps"]) == LINE
