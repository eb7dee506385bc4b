"""Peak uncertainty bounds: one implementation, in memory and on disk.

``peak_table(intervals, uncertainty=True)`` is ``peak_table_uncertainty`` over the intervals as a
one-segment capture (``stream.memory_capture``); the ``peaks --uncertainty`` command runs the same
function over the capture's segments. Checked here: both give the same bounds on captures with
every fault kind (missed sweeps, a reset, unreadable runs, readings that stop), with ranges whose
edges fall next to them, and the bounds of a tiny capture computed by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, write_capture
from rdmascope.analysis import byte_intervals, load_capture, peak_table
from rdmascope.analysis.peaks import peak_table_capture, peak_table_uncertainty
from rdmascope.analysis.stream import open_capture

OK, ERR = STATUS_OK, STATUS_READ_ERROR
BOUNDS = ["peak_low_gbps", "peak_high_gbps"]


def _faulty(path, fault: str, n: int = 120):
    """Three counters sampled every 1 ms (jittered), rolled every 9 sweeps, with one fault."""
    rng = np.random.default_rng(7)
    t = T0 + 300_000 + np.arange(n) * MS + rng.integers(-150_000, 150_000, size=n)
    v0 = np.cumsum(rng.integers(0, 30_000, size=n)).astype(np.int64)
    v1 = np.cumsum(rng.integers(0, 3_000, size=n)).astype(np.int64)
    bad1 = np.zeros(n, bool)
    if fault == "gap":  # missed sweeps between sweep 59 and 60
        t[60:] += 6 * MS
    elif fault == "reset":
        v0[70:] -= v0[69] + 1
        v0[70:] = np.maximum(v0[70:], 0)
    elif fault == "unavailable":  # an unreadable run inside, one at the start, one at the end
        bad1[40:52] = True
        bad1[:4] = True
        bad1[-5:] = True
    rd = {0: [(int(t[k]), 1500, int(v0[k]), OK) for k in range(n)],
          1: [(int(t[k]) + 3000, 1500, None if bad1[k] else int(v1[k]), ERR if bad1[k] else OK)
              for k in range(n)],
          2: [(int(t[k]) + 7000, 900, int(v1[k]) * 2, OK) for k in range(n)]}
    if fault == "stops":  # counter 2's readings stop after 50 sweeps
        rd[2] = rd[2][:50]
    write_capture(path, [ib("a", "tx"), ib("b", "rx"), ib("c", "tx")], rd, roll_every=9)
    return path, t


def _both(path, **kw):
    """(in memory, on disk) peak tables with bounds, same arguments."""
    unc = kw.pop("instant_unc_ns", 100_000)
    groups = kw.pop("groups", None)
    mem = peak_table(byte_intervals(load_capture(path)), uncertainty=True, groups=groups,
                     instant_unc_ns=unc, **kw)
    info = open_capture(path)
    disk = peak_table_uncertainty(info, peak_table_capture(info, groups=groups,
                                                           instant_unc_ns=unc, **kw),
                                  groups=groups, instant_unc_ns=unc)
    return mem, disk


def _ranges(t):
    """Ranges whose edges fall next to the faults (and none: the whole capture)."""
    return [{}, {"start_ns": int(t[3]) + 50_000, "end_ns": int(t[53]) - 30_000},
            {"start_ns": int(t[51]) + 20_000, "end_ns": int(t[110])},
            {"start_ns": int(t[58]), "end_ns": int(t[72]) + 400_000},
            {"start_ns": int(t[60])}, {"end_ns": int(t[40]) + 90_000}]


@pytest.mark.parametrize("fault", ["gap", "reset", "unavailable", "stops"])
@pytest.mark.parametrize("unc", [0, 300_000])
def test_bounds_in_memory_equal_the_segments(tmp_path, fault, unc):
    path, t = _faulty(tmp_path / "c", fault)
    for k, kw in enumerate(_ranges(t)):
        groups = {"link/tx": ["a/tx", "c/tx"]} if k % 2 else None
        mem, disk = _both(path, windows_ns=(MS, 5 * MS), instant_unc_ns=unc, groups=groups,
                          **kw)
        pd.testing.assert_frame_equal(disk, mem, check_exact=False, rtol=1e-9)
        assert mem[mem.window == "1 ms"]["peak_low_gbps"].notna().any()


def test_a_range_edge_next_to_an_unreadable_run_has_unknown_bounds(tmp_path):
    """The range [t[52] + 20 us, ...) holds known bytes, but its start can move 0.1 ms earlier
    onto the unreadable run before t[52]: the bounds are unknown (NaN) in memory and on disk
    alike, never a low bound of 0."""
    path, t = _faulty(tmp_path / "c", "unavailable")
    for tab in _both(path, windows_ns=(MS,), start_ns=int(t[52]) + 20_000,
                     end_ns=int(t[100])):
        row = tab.set_index(["series", "window"]).loc[("b/rx", "whole range")]
        assert np.isfinite(row["peak_gbps"]) and row["n_nan_windows"] == 0
        assert np.isnan(row["peak_low_gbps"]) and np.isnan(row["peak_high_gbps"])


def test_a_range_without_readings_has_unknown_bounds(tmp_path):
    """Counter c stops at sweep 50: over a range after that its mean is unknown, and so are its
    bounds and its link's (in memory they read 0 and the other member's bytes before)."""
    path, t = _faulty(tmp_path / "c", "stops")
    groups = {"link/tx": ["a/tx", "c/tx"]}
    mem, disk = _both(path, windows_ns=(MS,), groups=groups, start_ns=int(t[60]),
                      end_ns=int(t[100]))
    pd.testing.assert_frame_equal(disk, mem, check_exact=False, rtol=1e-9)
    rows = mem.set_index(["series", "window"])
    for s in ("c/tx", "link/tx"):
        row = rows.loc[(s, "whole range")]
        assert np.isnan(row["peak_gbps"]) and row[BOUNDS].isna().all()
    assert rows.loc[("a/tx", "whole range"), BOUNDS].notna().all()


def _tiny(path):
    """One counter read exactly every 1 ms from T0 (no read bracket); MB per 1 ms interval:
    1, 1, 1, 10, 2, 1, 1, 1, 1, 1; counter 1 reads the same but is unreadable at 1 ms, so
    its interval [0, 2) ms is unavailable."""
    mb = [1, 1, 1, 10, 2, 1, 1, 1, 1, 1]
    units = np.concatenate([[0], np.cumsum(mb)]) * 250_000  # 4 bytes per unit
    rd = {0: [(T0 + k * MS, 0, int(u), OK) for k, u in enumerate(units)],
          1: [(T0 + k * MS, 0, None if k == 1 else int(u), ERR if k == 1 else OK)
              for k, u in enumerate(units)]}
    return write_capture(path, [ib("a", "tx"), ib("b", "rx")], rd, roll_every=4)


def test_bounds_by_hand_on_a_tiny_capture(tmp_path):
    path = _tiny(tmp_path / "c")
    kw = {"windows_ns": (MS,), "start_ns": T0 + 1_500_000, "end_ns": T0 + 7_500_000}
    for tab in _both(path, **kw):
        rows = tab.set_index(["series", "window"])
        # the 1 ms peak [3, 4) ms holds 10 MB (80 Gb/s); each instant moves by u = 0.1 ms:
        # at least F(3.9) - F(3.1) = 8 MB, at most F(4.1) - F(2.9) = 10 + 0.2 + 0.1 MB
        one = rows.loc[("a/tx", "1 ms")]
        assert one["peak_gbps"] == pytest.approx(80.0)
        assert int(one["peak_t_ns"]) == T0 + 3 * MS
        assert one["peak_low_gbps"] == pytest.approx(8e6 * 8 / MS)
        assert one["peak_high_gbps"] == pytest.approx(10.3e6 * 8 / MS)
        # the range [1.5, 7.5) ms holds 0.5 + 1 + 10 + 2 + 1 + 1 + 0.5 = 16 MB in 6 ms; its
        # edges move by 0.1 ms over 1 MB/ms on both sides: 15.8 to 16.2 MB
        whole = rows.loc[("a/tx", "whole range")]
        assert whole["peak_gbps"] == pytest.approx(16e6 * 8 / (6 * MS))
        assert whole["peak_low_gbps"] == pytest.approx(15.8e6 * 8 / (6 * MS))
        assert whole["peak_high_gbps"] == pytest.approx(16.2e6 * 8 / (6 * MS))
        # b/rx: the same bytes after 2 ms, but [0, 2) ms is unknown; the 1 ms peak is known
        # as a/tx's, the range's mean is unknown (it holds [1.5, 2) ms) and so are its bounds
        assert rows.loc[("b/rx", "1 ms"), "peak_low_gbps"] == pytest.approx(8e6 * 8 / MS)
        assert rows.loc[("b/rx", "whole range"), BOUNDS].isna().all()
    # a range starting 0.05 ms after the unknown span: known bytes, but its start can move
    # 0.1 ms back onto the unknown span, so the bounds are unknown too
    for tab in _both(path, windows_ns=(MS,), start_ns=T0 + 2_050_000, end_ns=T0 + 7 * MS):
        row = tab.set_index(["series", "window"]).loc[("b/rx", "whole range")]
        assert row["peak_gbps"] == pytest.approx((0.95 + 10 + 2 + 1 + 1) * 1e6 * 8 / 4.95e6)
        assert row[BOUNDS].isna().all()
