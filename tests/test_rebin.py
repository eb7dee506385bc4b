"""Re-binning: proportional overlap, exact conservation, NaN for flagged intervals, twins, chunks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, write_capture
from rdmascope.analysis import (
    QUALITY_EMPTY,
    QUALITY_GAP,
    QUALITY_INVALID,
    QUALITY_PARTIAL,
    byte_intervals,
    default_origin,
    group_links,
    integrate,
    load_capture,
    rebin,
    rebin_capture,
    rebin_with_quality,
    to_gbps,
    twin_links,
)

OK, ERR = STATUS_OK, STATUS_READ_ERROR


def _intervals(t0, t1, b, flag=None, series="d/tx", cid=0):
    n = len(t0)
    return pd.DataFrame({"counter_id": np.full(n, cid, np.uint16), "series": [series] * n,
                         "t0_ns": np.asarray(t0, np.int64), "t1_ns": np.asarray(t1, np.int64),
                         "bytes": np.asarray(b, float), "flag": flag or ["ok"] * n})


def _brute(t0, t1, b, edges):
    """Second method: loop over windows and intervals, overlap fraction by hand."""
    out = []
    for a, e in zip(edges[:-1], edges[1:], strict=True):
        s = 0.0
        for x0, x1, bb in zip(t0, t1, b, strict=True):
            ov = max(0, min(e, x1) - max(a, x0))
            s += bb * ov / (x1 - x0)
        out.append(s)
    return np.array(out)


def test_two_samples_straddling_window_edges(tmp_path):
    # readings at 0.5 ms and 2.5 ms after T0 (a 2 ms sampler), counter 0 -> 500 units =
    # 2000 bytes over 2 ms
    cap = load_capture(write_capture(tmp_path / "c", [ib("d", "tx")], {
        0: [(T0 + 500_000 - 100, 200, 0, OK), (T0 + 2_500_000 - 100, 200, 500, OK)]},
        interval_ns=2 * MS))
    iv = byte_intervals(cap)
    b, q = rebin_with_quality(iv, MS, origin_ns=T0)
    # [0,1) ms holds 0.5 ms of the interval: 500 B; [1,2): 1000 B; [2,3): 500 B
    assert b.index.tolist() == [T0, T0 + MS, T0 + 2 * MS]
    assert b["d/tx"].tolist() == [500.0, 1000.0, 500.0]
    assert q["d/tx"].tolist() == [QUALITY_PARTIAL, 0, QUALITY_PARTIAL]
    assert b.index.name == "window_start_ns"
    # default origin: the capture start (T0, recorded by byte_intervals), the same windows
    assert iv.attrs["t_start_ns"] == T0
    d = rebin(iv, MS)
    assert d.index.tolist() == [T0, T0 + MS, T0 + 2 * MS]
    assert d["d/tx"].tolist() == [500.0, 1000.0, 500.0]
    # an origin at the first reading: windows [0.5, 1.5) and [1.5, 2.5)
    assert rebin(iv, MS, origin_ns=T0 + 500_000)["d/tx"].tolist() == [1000.0, 1000.0]
    # one 5 ms window from T0 holds everything
    assert rebin(iv, 5 * MS, origin_ns=T0)["d/tx"].tolist() == [2000.0]
    # rates: 1000 bytes in 1 ms = 8 Gb/s... x1e-3: 1000 B x 8 / 1e6 ns = 0.008 Gb/s
    assert to_gbps(b, MS)["d/tx"].tolist() == [0.004, 0.008, 0.004]


def test_irregular_intervals_match_brute_force_and_conserve():
    rng = np.random.default_rng(7)
    dt = rng.integers(200_000, 2_700_000, size=300)  # 0.2 - 2.7 ms, irregular
    t = 5_000_123 + np.concatenate([[0], np.cumsum(dt)])
    b = rng.integers(0, 3_000_000, size=300).astype(float) * 4
    iv = _intervals(t[:-1], t[1:], b)
    for width in (MS, 5 * MS, 100 * MS, 1_000_000_000, 333_333):
        for origin in (0, 123_456, int(t[0])):
            out = rebin(iv, width, origin_ns=origin)["d/tx"].to_numpy()
            edges = np.append(rebin(iv, width, origin_ns=origin).index.to_numpy(),
                              rebin(iv, width, origin_ns=origin).index[-1] + width)
            np.testing.assert_allclose(out, _brute(t[:-1], t[1:], b, edges), rtol=1e-12,
                                       atol=1e-6)
            # exact conservation: the windows sum to the counter difference across the range
            assert abs(out.sum() - b.sum()) < 1e-3
            assert (out >= 0).all()


def test_conservation_over_sub_ranges_with_integrate():
    rng = np.random.default_rng(3)
    t = np.concatenate([[0], np.cumsum(rng.integers(1, 3 * MS, size=200))])
    b = rng.integers(0, 10**7, size=200).astype(float)
    iv = _intervals(t[:-1], t[1:], b)
    cum = np.concatenate([[0], np.cumsum(b)])
    # a range between two readings holds exactly the counter difference between them
    i, j = 17, 150
    got = integrate(iv, [t[i]], [t[j]])["d/tx"].iloc[0]
    assert got == cum[j] - cum[i]
    # arbitrary ranges: compare with the brute force, any order, overlapping allowed
    a = rng.integers(0, t[-1] - 10 * MS, size=50)
    e = a + rng.integers(0, 10 * MS, size=50)
    got = integrate(iv, a, e)["d/tx"].to_numpy()
    want = np.array([_brute(t[:-1], t[1:], b, [x, y])[0] for x, y in zip(a, e, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-6)


def _gap_intervals(tmp_path):
    """Intervals of readings at 0, 1, 2 ms then 6, 7 ms (sweeps 3-5 missed): 40 B per ms, 400 B
    across the gap."""
    vals = [0, 10, 20, 120, 130]
    times = [0, 1, 2, 6, 7]
    cap = load_capture(write_capture(tmp_path / "c", [ib("d", "tx")], {
        0: [(T0 + t * MS, 0, v, OK) for t, v in zip(times, vals, strict=True)]}))
    return byte_intervals(cap)


def test_gap_bytes_spread_and_windows_flagged(tmp_path):
    # readings at 0,1,2 ms then 6,7 ms (sweeps 3-5 missed); 40 B per ms, 400 B across the gap
    iv = _gap_intervals(tmp_path)
    b, q = rebin_with_quality(iv, MS, origin_ns=T0)
    # the 400 gap bytes are spread evenly over the 4 ms of the gap: 100 B per window
    assert b["d/tx"].tolist() == [40.0, 40.0, 100.0, 100.0, 100.0, 100.0, 40.0]
    assert q["d/tx"].tolist() == [0, 0, QUALITY_GAP, QUALITY_GAP, QUALITY_GAP, QUALITY_GAP, 0]
    assert b["d/tx"].sum() == 130 * 4  # conserved


def test_gap_inside_one_window_leaves_it_exact_and_unflagged(tmp_path):
    # the same readings (sweeps 3-5 missed, 400 B across [2, 6) ms): a 10 ms window holds the
    # whole gap, so its bytes are the exact counter difference (130 x 4 B) and it is not flagged;
    # 4 ms windows from 0: [0, 4) and [4, 8) share the gap across their edge at 4 ms -> both
    # flagged, and 2 + 2 ms of the gap's 100 B/ms are split between them by assumption
    iv = _gap_intervals(tmp_path)
    b, q = rebin_with_quality(iv, 10 * MS, origin_ns=T0)
    assert b["d/tx"].tolist() == [520.0]
    assert (q["d/tx"] & QUALITY_GAP).tolist() == [0]
    b, q = rebin_with_quality(iv, 4 * MS, origin_ns=T0)
    assert b["d/tx"].tolist() == [40.0 * 2 + 200.0, 200.0 + 40.0]
    assert (q["d/tx"] & QUALITY_GAP).tolist() == [QUALITY_GAP, QUALITY_GAP]
    # a window edge exactly on a reading of the gap's end does not cut the gap: [0, 6) + [6, 12)
    b, q = rebin_with_quality(iv, 6 * MS, origin_ns=T0)
    assert b["d/tx"].tolist() == [480.0, 40.0]
    assert (q["d/tx"] & QUALITY_GAP).tolist() == [0, 0]


def test_reset_window_is_nan_not_negative(tmp_path):
    vals = [0, 10, 20, 5, 15]
    cap = load_capture(write_capture(tmp_path / "c", [ib("d", "tx")], {
        0: [(T0 + k * MS, 0, v, OK) for k, v in enumerate(vals)]}))
    b, q = rebin_with_quality(byte_intervals(cap), MS, origin_ns=T0)
    assert b["d/tx"].iloc[[0, 1, 3]].tolist() == [40.0, 40.0, 40.0]
    assert np.isnan(b["d/tx"].iloc[2])
    assert q["d/tx"].iloc[2] == QUALITY_INVALID
    # 2 ms windows: the reset sits in [2, 4) -> NaN; [0, 2) is clean
    b2 = rebin(byte_intervals(cap), 2 * MS, origin_ns=T0)["d/tx"]
    assert b2.iloc[0] == 80.0 and np.isnan(b2.iloc[1])


def test_unavailable_and_uncovered_windows_are_nan_never_zero(tmp_path):
    rd = {0: [(T0 + k * MS, 0, None if k == 2 else 10 * k, ERR if k == 2 else OK)
              for k in range(5)]}
    cap = load_capture(write_capture(tmp_path / "c", [ib("d", "tx")], rd))
    b, q = rebin_with_quality(byte_intervals(cap), MS, origin_ns=T0,
                              start_ns=T0 - 2 * MS, end_ns=T0 + 6 * MS)
    s = b["d/tx"]
    assert s.index[0] == T0 - 2 * MS and len(s) == 8
    assert s.iloc[:2].isna().all() and (q["d/tx"].iloc[:2] == QUALITY_EMPTY | QUALITY_PARTIAL).all()
    assert s.iloc[2] == 40.0
    assert s.iloc[3:5].isna().all()  # the unavailable reading spoils 1-3 ms
    assert s.iloc[5] == 40.0
    assert s.iloc[6:].isna().all()


def test_twins_summed_and_reported_separately(tmp_path):
    devices = [{"name": "rocep1s0f1", "pci": "0000:01:00.1"},
               {"name": "roceP2p1s0f1", "pci": "0002:01:00.1"}]
    counters = [ib("rocep1s0f1", "tx"), ib("roceP2p1s0f1", "tx")]
    rd = {0: [(T0 + k * MS, 0, 1000 * k, OK) for k in range(4)],
          1: [(T0 + k * MS + 10_000, 0, 250 * k, OK) for k in range(4)]}
    cap = load_capture(write_capture(tmp_path / "c", counters, rd, devices=devices))
    links = twin_links(cap)
    assert links == {"link:rocep1s0f1+roceP2p1s0f1/tx": ["rocep1s0f1/tx", "roceP2p1s0f1/tx"]}
    b = rebin(byte_intervals(cap), MS, origin_ns=T0 + 10_000, start_ns=T0 + 10_000,
              end_ns=T0 + 3 * MS)
    g = group_links(b, links)
    assert list(g.columns) == ["rocep1s0f1/tx", "roceP2p1s0f1/tx",
                               "link:rocep1s0f1+roceP2p1s0f1/tx"]
    # window [0.01, 1.01) ms: twin 0 gives 0.99 ms x 4000 B/ms + 0.01 ms x 4000 = 4000 B
    np.testing.assert_allclose(g["rocep1s0f1/tx"].iloc[:2], [4000.0, 4000.0])
    np.testing.assert_allclose(g["roceP2p1s0f1/tx"].iloc[:2], [1000.0, 1000.0])
    np.testing.assert_allclose(g.iloc[:2, 2], [5000.0, 5000.0])
    only = group_links(b, links, keep=False)
    assert list(only.columns) == ["link:rocep1s0f1+roceP2p1s0f1/tx"]
    with pytest.raises(ValueError, match="no series 'x/tx'"):
        group_links(b, {"l": ["x/tx"]})
    # by="direction" sums the twins directly
    d = rebin(byte_intervals(cap), MS, origin_ns=T0 + 10_000, start_ns=T0 + 10_000,
              end_ns=T0 + 3 * MS, by="direction")
    np.testing.assert_allclose(d["tx"], g.iloc[:, 2])
    # a NaN twin makes the link NaN (never half the traffic)
    b2 = b.copy()
    b2.iloc[0, 1] = np.nan
    assert np.isnan(group_links(b2, links).iloc[0, 2])


def test_integrate_partial_and_nan():
    iv = _intervals([0, 10, 20], [10, 20, 30], [100.0, np.nan, 300.0],
                    flag=["ok", "reset", "ok"])
    out = integrate(iv, [0, 5, 22, 25, -5, 40, 3], [5, 8, 30, 35, 5, 50, 3])["d/tx"]
    assert out.iloc[0] == 50.0 and out.iloc[1] == 30.0 and out.iloc[2] == 240.0
    assert np.isnan(out.iloc[3])  # runs past the last reading
    assert np.isnan(out.iloc[4])  # starts before the first reading
    assert np.isnan(out.iloc[5])  # entirely outside
    assert out.iloc[6] == 0.0  # an empty range inside the readings
    part = integrate(iv, [25, -5, 40, 5], [35, 5, 50, 15], allow_partial=True)["d/tx"]
    assert part.iloc[0] == 150.0 and part.iloc[1] == 50.0
    assert np.isnan(part.iloc[2])  # nothing covered: NaN, never a silent zero
    assert np.isnan(part.iloc[3])  # overlaps the reset interval
    with pytest.raises(ValueError, match="ends before it starts"):
        integrate(iv, [5], [4])


def test_bad_arguments():
    iv = _intervals([0, 10], [10, 20], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive integer"):
        rebin(iv, 0)
    with pytest.raises(ValueError, match="overlap"):
        rebin(_intervals([0, 5], [10, 20], [1.0, 2.0]), 5)
    with pytest.raises(ValueError, match="no intervals"):
        rebin(iv.iloc[:0], 5)
    with pytest.raises(ValueError, match="cannot group by 'nope'"):
        rebin(iv, 5, by="nope")


def test_chunked_path_equals_in_memory(tmp_path):
    # two counters, 3 segments + a live tail, a gap, an unavailable reading across a roll
    rng = np.random.default_rng(11)
    n = 60
    t = T0 + np.arange(n) * MS + rng.integers(-200_000, 200_000, size=n)
    t[30:] += 4 * MS  # missed sweeps
    v0 = np.cumsum(rng.integers(0, 50_000, size=n))
    v1 = np.cumsum(rng.integers(0, 5_000, size=n))
    rd = {0: [(int(t[k]), 1500, int(v0[k]), OK) for k in range(n)],
          1: [(int(t[k]) + 3000, 1500, None if k in (19, 20) else int(v1[k]),
               ERR if k in (19, 20) else OK) for k in range(n)]}
    path = write_capture(tmp_path / "c", [ib("a", "tx"), ib("b", "rx")], rd, roll_every=20,
                         close=False)
    want_b, want_q = rebin_with_quality(byte_intervals(load_capture(path)), MS, origin_ns=T0)
    for rows in (7, 1 << 20):
        got_b, got_q = rebin_capture(path, MS, origin_ns=T0, batch_rows=rows)
        got_b = got_b.loc[want_b.index[0]:want_b.index[-1]]
        got_q = got_q.loc[want_q.index[0]:want_q.index[-1]]
        pd.testing.assert_frame_equal(got_b, want_b, check_exact=False, rtol=1e-12, atol=1e-6)
        pd.testing.assert_frame_equal(got_q, want_q)
    assert (want_q["a/tx"] & QUALITY_GAP).sum() >= 4
    assert want_b["b/rx"].isna().sum() >= 2


def test_default_origin_rule(tmp_path):
    # readings from 2.3 ms after the capture start, every ~1 ms
    cap = load_capture(write_capture(tmp_path / "c", [ib("d", "tx")], {
        0: [(T0 + 2_300_000 + k * MS, 0, 100 * k, OK) for k in range(6)]}))
    iv = byte_intervals(cap)
    assert default_origin(iv) == T0
    # a range start never moves the grid
    assert default_origin(iv, start_ns=T0 + 4_100_000) == T0
    # windows on the capture start's grid: the first is [2, 3) ms, holding 0.7 ms of 400 B
    b = rebin(iv, MS)
    assert b.index[0] == T0 + 2 * MS and b.index[-1] == T0 + 7 * MS
    assert b["d/tx"].iloc[0] == pytest.approx(280.0)
    # the attribute survives a selection; a range start selects windows of the same grid
    sel = iv[iv["direction"] == "tx"]
    assert rebin(sel, MS).index.equals(b.index)
    r = rebin(iv, MS, start_ns=T0 + 4_100_000)
    assert r.index[0] == T0 + 4 * MS
    assert r["d/tx"].iloc[1:].equals(b["d/tx"].iloc[3:])
    # intervals without the attribute (built by hand): the first interval's start
    bare = iv.copy()
    bare.attrs = {}
    assert default_origin(bare) == T0 + 2_300_000
    assert rebin(bare, MS).index[0] == T0 + 2_300_000
    with pytest.raises(ValueError, match="no intervals"):
        default_origin(bare.iloc[:0])
    assert default_origin(bare.iloc[:0], start_ns=T0 + 5) == T0 + 5


def test_rates_cli_and_python_rebin_give_the_same_windows(tmp_path):
    """``rdmascope rates`` (chunked path) and ``rebin(byte_intervals(...))`` line up exactly."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    rng = np.random.default_rng(5)
    n = 40
    # the first reading 3.37 ms after the capture start, irregular spacing, 2 counters
    t = T0 + 3_370_000 + np.arange(n) * MS + rng.integers(-150_000, 150_000, size=n)
    v0 = np.cumsum(rng.integers(0, 40_000, size=n))
    v1 = np.cumsum(rng.integers(0, 9_000, size=n))
    rd = {0: [(int(t[k]), 2000, int(v0[k]), OK) for k in range(n)],
          1: [(int(t[k]) + 4000, 2000, int(v1[k]), OK) for k in range(n)]}
    path = write_capture(tmp_path / "c", [ib("a", "tx"), ib("b", "rx")], rd, roll_every=15)
    for width in (MS, 5 * MS):
        out = tmp_path / f"r{width}.parquet"
        r = CliRunner().invoke(main, ["rates", str(path), "--window", f"{width // MS}ms",
                                      "--bytes", "--parquet", str(out)])
        assert r.exit_code == 0, r.output
        cli = pd.read_parquet(out)
        py = rebin(byte_intervals(load_capture(path)), width)
        assert cli.index.tolist() == py.index.tolist()
        assert (py.index[0] - T0) % width == 0  # on the capture start's grid
        for s in ("a/tx", "b/rx"):
            # the bytes of each window's covered part; a partly covered window's (the first,
            # after the capture start, and the last) whole bytes are unknown: NaN
            np.testing.assert_allclose(cli[f"{s}_covered_bytes"].to_numpy(), py[s].to_numpy(),
                                       rtol=1e-12, atol=1e-6)
            part = (cli[f"{s}_quality"].to_numpy() & QUALITY_PARTIAL) != 0
            assert part[0] and part[-1]
            np.testing.assert_allclose(cli[f"{s}_bytes"].to_numpy(),
                                       np.where(part, np.nan, py[s].to_numpy()),
                                       rtol=1e-12, atol=1e-6)
