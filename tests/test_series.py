"""Counters to byte intervals: x4, resets, saturation, unavailable readings, gaps (hand-computed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, netdev, write_capture
from rdmascope.analysis import byte_intervals, load_capture

OK, ERR = STATUS_OK, STATUS_READ_ERROR


def _cap(tmp_path, values, *, times_ms=None, width_bits=64, status=None, extra=None):
    """One tx counter with the given unit values at T0 + t ms (bracket 2 us centred on it)."""
    times_ms = times_ms if times_ms is not None else list(range(len(values)))
    status = status or [OK if v is not None else ERR for v in values]
    rd = {0: [(T0 + int(t * MS) - 1000, 2000, v, s)
              for t, v, s in zip(times_ms, values, status, strict=True)]}
    counters = [ib("rocep1s0f1", "tx", width_bits=width_bits)]
    if extra:
        counters += extra[0]
        rd.update(extra[1])
    return load_capture(write_capture(tmp_path / "c", counters, rd))


def test_bytes_are_four_times_the_counter(tmp_path):
    iv = byte_intervals(_cap(tmp_path, [0, 250, 250, 1000]))
    assert iv.bytes.tolist() == [1000.0, 0.0, 3000.0]
    assert iv.flag.tolist() == ["ok"] * 3
    assert iv.t0_ns.tolist() == [T0, T0 + MS, T0 + 2 * MS]
    assert iv.t1_ns.tolist() == [T0 + MS, T0 + 2 * MS, T0 + 3 * MS]
    assert (iv.t0_unc_ns == 1000).all() and (iv.t1_unc_ns == 1000).all()
    assert iv.series.tolist() == ["rocep1s0f1/tx"] * 3
    assert iv.direction.tolist() == ["tx"] * 3


def test_reset_is_flagged_not_negative(tmp_path):
    iv = byte_intervals(_cap(tmp_path, [100, 200, 50, 80]))
    assert iv.flag.tolist() == ["ok", "reset", "ok"]
    assert iv.bytes.iloc[0] == 400.0
    assert math.isnan(iv.bytes.iloc[1])
    assert iv.bytes.iloc[2] == 120.0  # (80 - 50) x 4: counting resumes after the reset
    assert not (iv.bytes < 0).any()


def test_saturated_narrow_counter(tmp_path):
    top = 2**32 - 1
    iv = byte_intervals(_cap(tmp_path, [top - 10, top - 4, top, top], width_bits=32))
    assert iv.flag.tolist() == ["ok", "saturated", "saturated"]
    assert iv.bytes.iloc[0] == 24.0
    assert iv.bytes.iloc[1:].isna().all()  # stuck at all-ones: not idle, not counted


def test_saturation_when_width_unknown_uses_32_bit_max(tmp_path):
    top = 2**32 - 1
    iv = byte_intervals(_cap(tmp_path, [top - 1, top, top], width_bits=None))
    assert iv.flag.tolist() == ["saturated", "saturated"]


def test_wide_counter_never_saturates_at_32_bit_max(tmp_path):
    top = 2**32 - 1
    iv = byte_intervals(_cap(tmp_path, [top - 1, top, top + 5], width_bits=64))
    assert iv.flag.tolist() == ["ok", "ok"]
    assert iv.bytes.tolist() == [4.0, 20.0]


def test_unavailable_reading_between(tmp_path):
    iv = byte_intervals(_cap(tmp_path, [0, 10, None, 30, 40]))
    # intervals run between consecutive *valid* readings: 0-1 ms, 1-3 ms (across the bad one), 3-4
    assert iv.t0_ns.tolist() == [T0, T0 + MS, T0 + 3 * MS]
    assert iv.flag.tolist() == ["ok", "unavailable", "ok"]
    assert iv.bytes.iloc[0] == 40.0 and math.isnan(iv.bytes.iloc[1]) and iv.bytes.iloc[2] == 40.0


def test_gap_keeps_the_exact_bytes(tmp_path):
    # sweeps 3 and 4 were missed: the readings at 2 ms and 5 ms are 3 intervals apart
    c = _cap(tmp_path, [0, 10, 20, 50, 60], times_ms=[0, 1, 2, 5, 6])
    iv = byte_intervals(c)
    assert iv.flag.tolist() == ["ok", "ok", "gap", "ok"]
    assert iv.bytes.tolist() == [40.0, 40.0, 120.0, 40.0]  # the counter difference, x4
    # the factor is a parameter: 3 intervals apart is no gap at factor 4
    assert byte_intervals(c, gap_factor=4).flag.tolist() == ["ok"] * 4
    # 1.4 intervals is not a gap at the default 1.5
    c2 = load_capture(write_capture(tmp_path / "c2", [ib("d", "tx")],
                                    {0: [(T0, 0, 0, OK), (T0 + 1_400_000, 0, 5, OK)]}))
    assert byte_intervals(c2).flag.tolist() == ["ok"]


def test_reset_takes_precedence_over_gap(tmp_path):
    iv = byte_intervals(_cap(tmp_path, [100, 5], times_ms=[0, 10]))
    assert iv.flag.tolist() == ["reset"]


def test_select_counters_and_sources(tmp_path):
    extra = ([ib("rocep1s0f1", "rx"), netdev("rocep1s0f1", "enp1s0f1np1", "tx")],
             {1: [(T0 + k * MS, 0, 3 * k, OK) for k in range(3)],
              2: [(T0 + k * MS, 0, 1000 * k, OK) for k in range(3)]})
    c = _cap(tmp_path, [0, 1, 2], extra=extra)
    assert set(byte_intervals(c).series) == {"rocep1s0f1/tx", "rocep1s0f1/rx"}
    nd = byte_intervals(c, source="netdev")
    assert nd.series.unique().tolist() == ["netdev:enp1s0f1np1/tx"]
    assert nd.bytes.tolist() == [1000.0, 1000.0]  # netdev bytes are plain bytes (x1)
    assert len(byte_intervals(c, source=None)) == 6
    rx = byte_intervals(c, counters=["rocep1s0f1/rx"])
    assert rx.bytes.tolist() == [12.0, 12.0]
    assert byte_intervals(c, counters=[1]).equals(rx)
    with pytest.raises(ValueError, match="no byte counter named 'nope/tx'"):
        byte_intervals(c, counters=["nope/tx"])


def test_single_reading_gives_no_interval(tmp_path):
    iv = byte_intervals(_cap(tmp_path, [7]))
    assert len(iv) == 0
    assert list(iv.columns)[:2] == ["counter_id", "series"]


def test_values_near_2_to_64_stay_exact(tmp_path):
    big = 2**62
    iv = byte_intervals(_cap(tmp_path, [big, big + 3]))
    assert iv.bytes.tolist() == [12.0]
    assert iv.bytes.dtype == np.float64
