"""Counters to byte intervals: x4, resets, saturation, unavailable readings, gaps, implausible
jumps (hand-computed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, netdev, write_capture
from rdmascope.analysis import byte_intervals, load_capture, plausible_gbps

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


# ------------------------------------------------------------------------------------------------
# Physically impossible jumps ("implausible"): hand-computed caps
# ------------------------------------------------------------------------------------------------

def _rate_dev(name, gbps):
    return {"name": name, "ports": [{"port": 1, "rate_gbps": gbps}]}


def _cap_dev(path, rd, counters=None, devices=None):
    counters = counters or [ib("rocep1s0f1", "tx")]
    return load_capture(write_capture(path, counters, rd, devices=devices or []))


def test_implausible_jump_flagged_at_four_times_the_port_rate(tmp_path):
    # 200 Gb/s port -> cap 800 Gb/s. 1 ms apart, brackets 2 us (half 1 us each): the longest
    # duration the readings allow is 1.002 ms, so the cap is 800e9 / 8 x 1.002e-3 = 100.2 MB =
    # 25,050,000 units of 4 bytes in one interval
    v = [0, 12_500_000, 37_550_000, 62_600_001, 62_600_001 + 2**32, 62_600_101]
    rd = {0: [(T0 + k * MS - 1000, 2000, x, OK) for k, x in enumerate(v)]}
    iv = byte_intervals(_cap_dev(tmp_path / "c", rd, devices=[_rate_dev("rocep1s0f1", 200.0)]))
    # 50 MB in 1 ms (400 Gb/s, a late sweep's ~2x line rate) and exactly the cap are accepted;
    # one unit above the cap is not; the torn read (2^32 units too high, between two readings
    # that agree) is dropped as a glitch: the 2 ms across it keeps its exact 100 units = 400 B
    assert iv.flag.tolist() == ["ok", "ok", "implausible", "gap"]
    assert iv.bytes.iloc[:2].tolist() == [50e6, 100.2e6]
    assert math.isnan(iv.bytes.iloc[2]) and iv.bytes.iloc[3] == 400.0
    assert iv.t0_ns.iloc[3] == T0 + 3 * MS and iv.t1_ns.iloc[3] == T0 + 5 * MS
    # the cap is a parameter; inf disables the check
    assert byte_intervals(_cap_dev(tmp_path / "c2", rd), max_gbps=300.0).flag.tolist()[:2] == \
        ["implausible", "implausible"]  # 399.2 and 800 Gb/s over 1.002 ms
    assert byte_intervals(_cap_dev(tmp_path / "c3", rd), max_gbps=math.inf).flag.tolist() == \
        ["ok", "ok", "ok", "gap"]
    with pytest.raises(ValueError, match="max_gbps must be positive"):
        byte_intervals(_cap_dev(tmp_path / "c4", rd), max_gbps=0)


def test_implausible_fallback_cap_gap_and_short_interval(tmp_path):
    # no port rate in the manifest: 1,600 Gb/s -> 200.4 MB per 1.002 ms
    rd = {0: [(T0 + k * MS - 1000, 2000, x, OK)
              for k, x in enumerate([0, 50_000_000, 100_250_000])]}
    iv = byte_intervals(_cap_dev(tmp_path / "a", rd))
    assert iv.flag.tolist() == ["ok", "implausible"]  # 200 MB ok; 201 MB > 200.4 MB
    # a gap of 5 ms (missed sweeps) may hold up to 800 x 5.002 ms / 8 = 500.2 MB at 200 Gb/s:
    # 400 MB is a gap, bytes kept; the same 400 MB in 1 ms is implausible
    rd = {0: [(T0 - 1000, 2000, 0, OK), (T0 + 5 * MS - 1000, 2000, 100_000_000, OK),
              (T0 + 6 * MS - 1000, 2000, 200_000_000, OK)]}
    iv = byte_intervals(_cap_dev(tmp_path / "b", rd, devices=[_rate_dev("rocep1s0f1", 200.0)]))
    assert iv.flag.tolist() == ["gap", "implausible"]
    assert iv.bytes.iloc[0] == 400e6 and math.isnan(iv.bytes.iloc[1])
    # a short interval (0.3 ms after a late sweep) is judged over at least one sampling
    # interval: 90 MB is 720 Gb/s over 1 ms, accepted; 101 MB (808 Gb/s) is not
    rd = {0: [(T0 - 1000, 2000, 0, OK), (T0 + 300_000 - 1000, 2000, 22_500_000, OK),
              (T0 + 600_000 - 1000, 2000, 22_500_000 + 25_250_000, OK)]}
    iv = byte_intervals(_cap_dev(tmp_path / "s", rd, devices=[_rate_dev("rocep1s0f1", 200.0)]))
    assert iv.flag.tolist() == ["ok", "implausible"]


def test_implausible_cap_per_device_and_netdev(tmp_path):
    # device A has a 100 Gb/s port (cap 400 Gb/s: 50.1 MB per 1.002 ms); device B records no rate
    # and falls back to the highest in the manifest (A's); the netdev of A uses A's rate
    counters = [ib("A", "tx"), ib("B", "tx"), netdev("A", "ethA", "tx")]
    units = [0, 12_500_000, 12_500_000 + 12_750_000]  # 50 MB then 51 MB per ms (x4 bytes)
    rd = {c: [(T0 + k * MS - 1000, 2000, x * (4 if c == 2 else 1), OK)
              for k, x in enumerate(units)] for c in range(3)}
    cap = _cap_dev(tmp_path / "c", rd, counters, devices=[_rate_dev("A", 100.0),
                                                          {"name": "B", "ports": [{"port": 1}]}])
    iv = byte_intervals(cap, source=None)
    for cid in range(3):
        assert iv[iv.counter_id == cid].flag.tolist() == ["ok", "implausible"], cid
    assert plausible_gbps(cap.meta, "A") == 400.0
    assert plausible_gbps(cap.meta, "B") == 400.0
    assert plausible_gbps({"devices": []}, "A") == 1600.0
    assert plausible_gbps({"devices": [_rate_dev("A", 100.0), _rate_dev("C", 200.0)]},
                          "C") == 800.0


# ------------------------------------------------------------------------------------------------
# Twin grouping keeps RDMA and netdev (kernel) series apart
# ------------------------------------------------------------------------------------------------

TWIN_DEVICES = [{"name": "rocep1s0f1", "pci": "0000:01:00.1"},
                {"name": "roceP2p1s0f1", "pci": "0002:01:00.1"}]


def _mixed_twins(tmp_path):
    """Twin RDMA devices with their netdevs: RDMA idle, kernel (TCP) traffic on one netdev."""
    from rdmascope.analysis import load_capture

    counters = [ib("rocep1s0f1", "tx"), ib("roceP2p1s0f1", "tx"),
                netdev("rocep1s0f1", "enp1s0f1np1", "tx"),
                netdev("roceP2p1s0f1", "enP2p1s0f1np1", "tx")]
    rd = {0: [(T0 + k * MS, 0, 0, OK) for k in range(4)],
          1: [(T0 + k * MS, 0, 0, OK) for k in range(4)],
          2: [(T0 + k * MS, 0, 5000 * k, OK) for k in range(4)],
          3: [(T0 + k * MS, 0, 0, OK) for k in range(4)]}
    return load_capture(write_capture(tmp_path / "c", counters, rd, devices=TWIN_DEVICES))


def test_twin_links_label_netdev_groups_by_their_netdevs(tmp_path):
    from rdmascope.analysis import twin_links

    cap = _mixed_twins(tmp_path)
    rdma = {"link:rocep1s0f1+roceP2p1s0f1/tx": ["rocep1s0f1/tx", "roceP2p1s0f1/tx"]}
    kernel = {"link:enp1s0f1np1+enP2p1s0f1np1 (netdev)/tx": ["netdev:enp1s0f1np1/tx",
                                                            "netdev:enP2p1s0f1np1/tx"]}
    assert twin_links(cap) == rdma  # default: RDMA port counters only, label unchanged
    assert twin_links(cap, source="infiniband") == rdma
    assert twin_links(cap, source="netdev") == kernel
    assert twin_links(cap, source=None) == {**rdma, **kernel}
    with pytest.raises(ValueError, match="source must be"):
        twin_links(cap, source="ethernet")


def test_netdev_link_sums_kernel_bytes_and_rdma_link_stays_zero(tmp_path):
    from rdmascope.analysis import group_links, rebin, twin_links

    cap = _mixed_twins(tmp_path)
    b = rebin(byte_intervals(cap, source=None), MS, origin_ns=T0, start_ns=T0,
              end_ns=T0 + 3 * MS)
    g = group_links(b, twin_links(cap, source=None))
    # 5000 B per ms on one netdev (1 byte per unit), nothing on the RDMA counters
    np.testing.assert_allclose(g["link:enp1s0f1np1+enP2p1s0f1np1 (netdev)/tx"], [5000.0] * 3)
    np.testing.assert_allclose(g["link:rocep1s0f1+roceP2p1s0f1/tx"], [0.0] * 3)


def test_group_links_refuses_to_mix_netdev_and_rdma_series(tmp_path):
    from rdmascope.analysis import group_links, rebin

    cap = _mixed_twins(tmp_path)
    b = rebin(byte_intervals(cap, source=None), MS, origin_ns=T0, start_ns=T0,
              end_ns=T0 + 3 * MS)
    with pytest.raises(ValueError, match="mixes netdev"):
        group_links(b, {"l/tx": ["rocep1s0f1/tx", "netdev:enp1s0f1np1/tx"]})


def test_single_glitch_reading_is_dropped_but_a_reset_stays_a_reset(tmp_path):
    """A reading below (or above) both neighbours while they agree is a torn read or firmware
    hiccup: dropped, the interval across it keeps the exact bytes. A real reset stays low."""
    def iv_of(values, name):
        rd = {0: [(T0 + k * MS - 1000, 2000, x, OK) for k, x in enumerate(values)]}
        return byte_intervals(_cap_dev(tmp_path / name, rd))

    low = iv_of([1000, 2000, 500, 3000, 4000], "low")        # torn low at k=2
    assert low.flag.tolist() == ["ok", "gap", "ok"]
    assert low.bytes.tolist() == [4000.0, 4000.0, 4000.0]   # (2000-1000)x4, (3000-2000)x4, ...
    assert low.bytes.sum() == (4000 - 1000) * 4             # conserved exactly
    # a small tear inside the neighbours' range is ambiguous (k=1 too high or k=2 too low):
    # both are dropped, the 3 ms across them keep the exact bytes
    amb = iv_of([1000, 2000, 1500, 3000, 4000], "amb")
    assert amb.flag.tolist() == ["gap", "ok"] and amb.bytes.tolist() == [8000.0, 4000.0]
    high = iv_of([1000, 2000, 9999, 3000, 4000], "high")     # torn high at k=2
    assert high.flag.tolist() == ["ok", "gap", "ok"] and high.bytes.sum() == 3000 * 4
    reset = iv_of([1000, 2000, 5, 10, 20], "reset")          # a reset stays low
    assert reset.flag.tolist() == ["ok", "reset", "ok", "ok"]
    assert math.isnan(reset.bytes.iloc[1]) and reset.bytes.iloc[2:].tolist() == [20.0, 40.0]


def test_unknown_width_above_32_bit_max_proves_64_bits(tmp_path):
    # an hfi1/mlx4 data counter of unknown width crossing 2^32-1: a 32-bit counter cannot hold
    # top + 5, so it is 64-bit and counts on (it was blanked for the rest of the run before)
    top = 2**32 - 1
    iv = byte_intervals(_cap(tmp_path, [top - 1, top, top + 5, top + 9], width_bits=None))
    assert iv.flag.tolist() == ["ok", "ok", "ok"]
    assert iv.bytes.tolist() == [4.0, 20.0, 16.0]


def test_netdev_statistics_are_64_bit_even_when_the_capture_does_not_say(tmp_path):
    # netdev tx_bytes are u64 (net/core/net-sysfs.c): 52 GB since boot is not "saturated"
    base = 52_000_000_000
    counters = [ib("rocep1s0f1", "tx"), netdev("rocep1s0f1", "enp1s0f1np1", "tx")]
    counters[1]["width_bits"] = None  # as captures written before the width table
    rd = {0: [(T0 + k * MS - 1000, 2000, 100 * k, OK) for k in range(4)],
          1: [(T0 + k * MS - 1000, 2000, base + 1_500_000 * k, OK) for k in range(4)]}
    cap = load_capture(write_capture(tmp_path / "c", counters, rd))
    iv = byte_intervals(cap, source="netdev")
    assert iv.flag.astype(str).tolist() == ["ok"] * 3
    assert iv.bytes.tolist() == [1_500_000.0] * 3


def test_drop_glitches_equals_the_rule_with_and_without_its_shortcuts():
    """``counters.drop_glitches`` returns at once for values that never go down and reads the
    values in place when every reading is valid; either way it drops exactly the readings
    the rule drops (a reading below the previous or above the next while those two agree),
    on random series with torn reads, resets, ties and unreadable readings."""
    from rdmascope.counters import drop_glitches

    def rule(idx, value):
        if len(idx) < 3:
            return idx
        v = value[idx]
        prev, cur, nxt = v[:-2], v[1:-1], v[2:]
        glitch = ((cur < prev) | (cur > nxt)) & (prev <= nxt)
        return np.delete(idx, 1 + np.flatnonzero(glitch))

    rng = np.random.default_rng(4)
    for _ in range(3000):
        n = int(rng.integers(0, 40))
        value = np.cumsum(rng.integers(0, 5, n)).astype(np.uint64) + np.uint64(10**12)
        if n and rng.random() < 0.5:  # torn reads and resets
            k = rng.integers(0, n, int(rng.integers(1, 4)))
            value[k] = rng.integers(0, 2 * 10**12, len(k)).astype(np.uint64)
        valid = rng.random(n) < (1.0 if rng.random() < 0.5 else 0.8)
        idx = np.flatnonzero(valid)
        assert np.array_equal(drop_glitches(idx, value), rule(idx, value))
