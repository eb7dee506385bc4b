"""One engine for windows and ranges: the in-memory functions are its pass over one segment.

``windows.integrate`` is ``windows.RangeBytes`` (the consumer that answers attribution's byte
ranges on a capture's segments) fed the intervals as one segment, and ``rebin_with_quality`` is
``stream.iter_windows`` over them. Checked here against the capture's segments (ranges and
windows cut by segment edges, gaps, glitches, a reset and unreadable runs) and against a
computation by hand that uses neither (tests/test_rebin.py holds the brute-force checks).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from capture_builders import MS, T0
from rdmascope.analysis import byte_intervals, integrate, load_capture, rebin_with_quality
from rdmascope.analysis.stream import iter_intervals, open_capture
from rdmascope.analysis.windows import RangeBytes, group_keys
from test_stream import _edgy_capture


@pytest.mark.parametrize("allow_partial", [False, True])
@pytest.mark.parametrize("by", ["series", "direction"])
def test_integrate_equals_the_ranges_summed_over_segments(tmp_path, allow_partial, by):
    path = _edgy_capture(tmp_path / "c", roll_every=9)
    iv = byte_intervals(load_capture(path), source=None)
    rng = np.random.default_rng(3)
    a = T0 + rng.integers(-5 * MS, 215 * MS, size=400)
    e = a + rng.integers(0, 40 * MS, size=400)
    e[::9] = a[::9]  # zero-length ranges
    want = integrate(iv, a, e, by=by, allow_partial=allow_partial)
    info = open_capture(path)
    rb = RangeBytes(a, e)
    n_files = 0
    for parts, _ in iter_intervals(info, source=None):
        rb.on_parts(parts)
        n_files += 1
    assert n_files > 10  # the ranges cross many segment edges
    got = rb.result(group_keys(info.counters, by, sorted(rb.first)), by,
                    allow_partial=allow_partial)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
    assert want.notna().to_numpy().sum() > 200 and want.isna().to_numpy().any()


def test_in_memory_windows_and_ranges_by_hand():
    """Two counters of one series, intervals [0, 10), [10, 20) ns with 10 and 30 bytes, and
    [5, 15) with 20 bytes then a reset [15, 25): 5 ns windows and a few ranges, by hand."""
    iv = pd.DataFrame({"counter_id": [0, 0, 1, 1], "series": ["s"] * 4,
                       "t0_ns": [0, 10, 5, 15], "t1_ns": [10, 20, 15, 25],
                       "bytes": [10.0, 30.0, 20.0, np.nan],
                       "flag": ["ok", "ok", "ok", "reset"]})
    b, q = rebin_with_quality(iv, 5, origin_ns=0)
    assert b.index.tolist() == [0, 5, 10, 15, 20]
    # [0, 5): counter 1 not read yet, unknown (never counter 0's 5 alone); [5, 10): 5 + 10;
    # [10, 15): 15 + 10; [15, 20) and [20, 25) touch the reset: unknown
    assert np.isnan(b["s"].iloc[0]) and b["s"].iloc[1:3].tolist() == [15.0, 25.0]
    assert b["s"].iloc[3:].isna().all()
    assert q["s"].tolist()[:3] == [8 | 4, 0, 0]  # QUALITY_EMPTY | QUALITY_PARTIAL, then whole
    assert q["s"].iloc[3] & 2  # QUALITY_INVALID
    r = integrate(iv, [5, 0, 12, 14], [15, 10, 12, 16])["s"]
    # [5, 15): 5 + 15 + 20; [0, 10): counter 1 unread before 5 (NaN); [12, 12): 0; [14, 16):
    # touches the reset (NaN)
    assert r.iloc[0] == 40.0 and np.isnan(r.iloc[1]) and r.iloc[2] == 0.0
    assert np.isnan(r.iloc[3])
    assert integrate(iv, [0], [10], allow_partial=True)["s"].iloc[0] == 20.0
