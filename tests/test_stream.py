"""Segment-by-segment analysis (analysis.stream) equals the in-memory functions.

Captures with segment edges at awkward places: a glitch reading as the last or first reading of
a segment, a run of unreadable readings across a roll, missed sweeps across a roll, a reset.
The in-memory path (load_capture -> byte_intervals -> rebin_with_quality) is the reference.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, netdev, write_capture
from rdmascope.analysis import byte_intervals, load_capture, rebin_with_quality
from rdmascope.analysis.stream import WindowGrid, iter_intervals, iter_windows, open_capture

OK, ERR = STATUS_OK, STATUS_READ_ERROR


def _edgy_capture(path, *, n=200, roll_every=20, close=True, seed=5, short=False):
    rng = np.random.default_rng(seed)
    t = T0 + 300_000 + np.arange(n) * MS + rng.integers(-150_000, 150_000, size=n)
    t[90:] += 7 * MS  # missed sweeps (a gap) between sweep 89 and 90
    v0 = np.cumsum(rng.integers(0, 30_000, size=n)).astype(np.int64)
    v1 = np.cumsum(rng.integers(0, 3_000, size=n)).astype(np.int64)
    v0[19] = v0[18] - 5  # a glitch: the last reading of segment 0
    v0[40] = v0[41] + 10**6  # a glitch: the first reading of segment 2
    v0[120:] -= v0[119] + 1  # a reset
    v0[120:] = np.maximum(v0[120:], 0)
    rd = {0: [(int(t[k]), 1500, int(v0[k]), OK) for k in range(n)],
          1: [(int(t[k]) + 3000, 1500, None if 57 <= k <= 63 else int(v1[k]),
               ERR if 57 <= k <= 63 else OK) for k in range(n)],
          2: [(int(t[k]) + 5000, 900, int(v1[k]) * 3, OK) for k in range(n)],
          # unreadable at the start (across the first roll) and at the end: "unavailable"
          3: [(int(t[k]) + 7000, 900, None if k < 23 or k > n - 12 else int(v1[k]) * 2,
               ERR if k < 23 or k > n - 12 else OK) for k in range(n)],
          4: [(int(t[k]) + 9000, 900, None, ERR) for k in range(n)]}  # never readable
    if short:  # one counter stops early: later sweeps hold fewer counters
        rd[2] = rd[2][:n - 37]
    return write_capture(path, [ib("a", "tx"), ib("b", "rx"), netdev("a", "eth0", "tx"),
                                ib("c", "tx"), ib("d", "rx")], rd,
                         roll_every=roll_every, close=close)


def _stream_intervals(path, source):
    out = {}
    for parts, _ in iter_intervals(path, source=source):
        for c, iv in parts.items():
            out.setdefault(c, []).append(iv)
    return {c: {k: np.concatenate([p[k] for p in v]) for k in v[0]} for c, v in out.items()}


@pytest.mark.parametrize("roll_every", [20, 7, 1000])
@pytest.mark.parametrize("close", [True, False])
def test_intervals_equal_in_memory(tmp_path, roll_every, close):
    path = _edgy_capture(tmp_path / "c", roll_every=roll_every, close=close)
    want = byte_intervals(load_capture(path), source=None)
    got = _stream_intervals(path, None)
    assert sorted(got) == sorted(int(c) for c in want["counter_id"].unique())
    for c, g in got.items():
        w = want[want["counter_id"] == c]
        np.testing.assert_array_equal(g["t0_ns"], w["t0_ns"].to_numpy())
        np.testing.assert_array_equal(g["t1_ns"], w["t1_ns"].to_numpy())
        np.testing.assert_array_equal(g["t1_unc_ns"], w["t1_unc_ns"].to_numpy())
        np.testing.assert_array_equal(g["bytes"], w["bytes"].to_numpy())  # exact, NaN too
        np.testing.assert_array_equal(g["flag"], w["flag"].cat.codes.to_numpy())
    flags = set(want["flag"].astype(str))
    assert {"gap", "reset", "unavailable"} <= flags  # the edge cases are really there


@pytest.mark.parametrize("width", [MS, 3 * MS, 7 * MS + 1, 50 * MS])
def test_windows_equal_in_memory(tmp_path, width):
    path = _edgy_capture(tmp_path / "c", roll_every=13)
    iv = byte_intervals(load_capture(path))
    grids = [WindowGrid(width, T0), WindowGrid(width, T0 + 12_345, start_ns=T0 + 31 * MS,
                                                 end_ns=T0 + 150 * MS),
             WindowGrid(width, T0 + 31 * MS, start_ns=T0 + 31 * MS, end_ns=T0 + 150 * MS,
                        clip=True)]
    blocks: dict[int, list] = {}
    for i, b, q in iter_windows(path, grids):
        blocks.setdefault(i, []).append((b, q))
    for i, g in enumerate(grids):
        b = pd.concat([x[0] for x in blocks[i]])
        q = pd.concat([x[1] for x in blocks[i]])
        if g.clip:
            continue
        wb, wq = rebin_with_quality(iv, width, origin_ns=g.origin_ns, start_ns=g.start_ns,
                                    end_ns=g.end_ns)
        pd.testing.assert_index_equal(b.index, wb.index)
        pd.testing.assert_frame_equal(q, wq)
        pd.testing.assert_frame_equal(b, wb, check_exact=False, rtol=1e-13, atol=1e-9)
        # bytes conserved: whole intervals' sums are exact
        assert np.nansum(b.to_numpy()) == pytest.approx(np.nansum(wb.to_numpy()), rel=1e-15)


def test_open_capture_needs_no_readings(tmp_path):
    path = _edgy_capture(tmp_path / "c", roll_every=20)
    info = open_capture(path)
    cap = load_capture(path)
    assert info.rows == len(cap.readings)
    assert info.t_start_ns == cap.t_start_ns and info.t_end_ns == cap.t_end_ns
    pd.testing.assert_frame_equal(info.counters, cap.counters)


def _peaks_both(path, **kw):
    from rdmascope.analysis import peak_table
    from rdmascope.analysis.peaks import peak_table_capture

    source = kw.pop("source", "infiniband")
    mem = kw.pop("mem_values", 4_000_000)
    want = peak_table(byte_intervals(load_capture(path), source=source), **kw)
    got = peak_table_capture(path, source=source, mem_values=mem, **kw)
    return got, want


@pytest.mark.parametrize("kw", [
    {},
    {"start_ns": T0 + 33 * MS + 17, "end_ns": T0 + 170 * MS},
    {"start_ns": T0 + 33 * MS, "origin_ns": T0},
    {"end_ns": T0 + 100 * MS + 3, "origin_ns": T0 + 5},
    {"source": None, "mem_values": 10},  # percentiles from the spill file
    {"windows_ns": (MS, 2 * MS, 11 * MS), "by": "direction", "percentiles": (0, 37.5, 100)},
])
def test_peak_table_capture_equals_in_memory(tmp_path, kw):
    """One engine: the pass over the capture's segments (each edge carried) equals the same
    pass over the loaded intervals as one segment (``stream.MemoryCapture``)."""
    path = _edgy_capture(tmp_path / "c", roll_every=9)
    got, want = _peaks_both(path, **kw)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)


def test_peak_table_against_rebin_by_hand(tmp_path):
    """A second method, not the engine's pass: the 1 ms headline peak is the highest window of
    ``rebin_with_quality`` with none of HEADLINE_EXCLUDE, the whole-range mean is the bytes over
    the span, on the segmented capture and in memory alike."""
    from rdmascope.analysis import peak_table
    from rdmascope.analysis.curve import HEADLINE_EXCLUDE
    from rdmascope.analysis.peaks import peak_table_capture

    path = _edgy_capture(tmp_path / "c", roll_every=9)
    iv = byte_intervals(load_capture(path))
    b, q = rebin_with_quality(iv, MS)
    lo, hi = int(iv["t0_ns"].min()), int(iv["t1_ns"].max())
    for tab in (peak_table(iv, windows_ns=(MS,)), peak_table_capture(path, windows_ns=(MS,))):
        rows = tab.set_index(["series", "window"])
        for col in b.columns:
            good = (q[col].to_numpy() & HEADLINE_EXCLUDE) == 0
            rate = b[col].to_numpy()[good] * 8.0 / MS
            if not len(rate):
                assert pd.isna(rows.at[(col, "1 ms"), "peak_gbps"])
                continue
            assert rows.at[(col, "1 ms"), "peak_gbps"] == pytest.approx(rate.max(), rel=1e-12)
            assert rows.at[(col, "1 ms"), "peak_t_ns"] == int(
                b.index.to_numpy()[good][np.argmax(rate)])
            mine = iv.loc[iv["series"] == col, "bytes"]
            want = np.nan if mine.isna().any() else mine.sum() * 8.0 / (hi - lo)
            assert rows.at[(col, "whole range"), "peak_gbps"] == pytest.approx(
                want, rel=1e-9, nan_ok=True)
        assert rows["peak_gbps"].notna().any()


def test_peak_table_capture_twin_links(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from rdmascope.analysis import twin_links
    from scale_capture import build

    path = build(tmp_path / "c", 150, segment_s=7)
    groups = twin_links(load_capture(path))
    got, want = _peaks_both(path, groups=groups, mem_values=1000)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
    assert got["series"].str.startswith("link:").any()
    # the peak of the 1 ms windows is a burst near line rate, found across segment edges
    assert got.query("window == '1 ms'")["peak_gbps"].max() > 140


@pytest.mark.parametrize("kw", [{}, {"start_ns": T0 + 33 * MS + 17, "end_ns": T0 + 170 * MS}])
def test_peak_uncertainty_from_segments_equals_in_memory(tmp_path, kw):
    from rdmascope.analysis import peak_table
    from rdmascope.analysis.peaks import peak_table_capture, peak_table_uncertainty

    path = _edgy_capture(tmp_path / "c", roll_every=9)
    want = peak_table(byte_intervals(load_capture(path)), uncertainty=True,
                      instant_unc_ns=200_000, **kw)
    info = open_capture(path)
    got = peak_table_uncertainty(info, peak_table_capture(info, **kw), instant_unc_ns=200_000)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9)


def test_peak_uncertainty_whole_range_clean_capture(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from rdmascope.analysis import peak_table, twin_links
    from rdmascope.analysis.peaks import peak_table_capture, peak_table_uncertainty
    from scale_capture import build

    path = build(tmp_path / "c", 40, segment_s=3)
    cap = load_capture(path)
    groups = twin_links(cap)
    kw = {"start_ns": cap.t_start_ns + 2_345_678, "end_ns": cap.t_start_ns + 31 * 10**9 + 7}
    want = peak_table(byte_intervals(cap), uncertainty=True, groups=groups, **kw)
    info = open_capture(path)
    got = peak_table_uncertainty(info, peak_table_capture(info, groups=groups, **kw),
                                 groups=groups)
    whole = want[want.window == "whole range"]
    assert whole["peak_low_gbps"].notna().all() and (whole["peak_low_gbps"] <
                                                     whole["peak_high_gbps"]).all()
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9)


def _bench_capture(tmp_path, seconds=90, segment_s=4):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from scale_capture import build

    return build(tmp_path / "bench", seconds, segment_s=segment_s)


@pytest.mark.parametrize("kw", [
    {},
    {"start_ns": T0 + 33 * MS + 17, "end_ns": T0 + 170 * MS},
    {"width_ns": 3 * MS, "origin_ns": T0 + 77, "enter_frac": 0.001, "leave_frac": 0.0005},
])
def test_bursts_capture_equals_in_memory_edgy(tmp_path, kw):
    from rdmascope.analysis import burst_analysis
    from rdmascope.analysis.bursts import burst_analysis_capture

    path = _edgy_capture(tmp_path / "c", roll_every=9)
    kw = {"capacity_gbps": 1.0, **kw}
    want = burst_analysis(byte_intervals(load_capture(path)), **kw)
    got = burst_analysis_capture(path, **kw)
    assert len(want.table) > 3
    pd.testing.assert_frame_equal(got.table, want.table, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(got.summary, want.summary, check_exact=False, rtol=1e-9)
    assert got.params == want.params
    if kw.get("enter_frac") == 0.001:  # long bursts: some span segment edges (every 9 sweeps)
        edges = T0 + 300_000 + 9 * MS * np.arange(1, 23)
        t = got.table
        cross = ((t["start_ns"].to_numpy()[:, None] < edges)
                 & (t["end_ns"].to_numpy()[:, None] > edges + MS)).any(axis=1)
        assert cross.sum() >= 3


def test_bursts_spanning_segment_edges(tmp_path):
    """Trains of all-reduces over 1 s segments: the streamed table is the in-memory one, and
    the total bytes are the intervals' (conserved)."""
    from rdmascope.analysis import burst_analysis, twin_links
    from rdmascope.analysis.bursts import burst_analysis_capture

    path = _bench_capture(tmp_path, seconds=60, segment_s=1)
    cap = load_capture(path)
    groups = twin_links(cap)
    kw = {"capacity_gbps": 200.0, "groups": groups, "expected_allreduce": 88.1e6,
          "t_ref_ns": cap.t_start_ns}
    want = burst_analysis(byte_intervals(cap), **kw)
    got = burst_analysis_capture(path, **kw)
    pd.testing.assert_frame_equal(got.table, want.table, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(got.summary, want.summary, check_exact=False, rtol=1e-9)
    s = got.summary.set_index("series")
    iv = byte_intervals(cap)
    total = iv[iv["series"] == "rocep1s0f1/tx"]["bytes"].sum()
    assert s.at["rocep1s0f1/tx", "total_bytes"] == pytest.approx(total, rel=1e-12)


def _verdicts_equal(got, want):
    assert got.status == want.status and got.ok == want.ok
    assert (got.start_ns, got.end_ns) == (want.start_ns, want.end_ns)
    pd.testing.assert_frame_equal(got.devices, want.devices, check_exact=False, rtol=1e-9)
    if want.kernel is None:
        assert got.kernel is None
    else:
        pd.testing.assert_frame_equal(got.kernel, want.kernel, check_exact=False, rtol=1e-9)
    assert got.message == want.message


@pytest.mark.parametrize("kw", [{}, {"start_ns": T0 + 33 * MS + 17, "end_ns": T0 + 170 * MS},
                                {"origin_ns": T0 + 250_000, "expect": "both"}])
def test_verify_emulation_streamed_equals_in_memory(tmp_path, kw):
    from rdmascope.analysis import verify_emulation

    path = _edgy_capture(tmp_path / "c", roll_every=9)
    want = verify_emulation(load_capture(path), **kw)
    got = verify_emulation(open_capture(path), **kw)
    assert (want.devices["nan_windows"] > 0).any()  # the reset and the unreadable run count
    _verdicts_equal(got, want)


def test_verify_emulation_streamed_bench_capture(tmp_path):
    from rdmascope.analysis import verify_emulation

    path = _bench_capture(tmp_path, seconds=30, segment_s=2)
    want = verify_emulation(load_capture(path))
    got = verify_emulation(path)
    assert want.ok and want.kernel is not None and want.kernel["kernel_bytes"].sum() > 0
    _verdicts_equal(got, want)


@pytest.mark.parametrize("kw", [{}, {"start_ns": "mid"}])
def test_verify_emulation_streamed_reads_each_segment_once(tmp_path, monkeypatch, kw):
    """The kernel (netdev) bytes come from a second grid of the same pass: each segment is
    read once by the pass (plus the first and last segments for the range), and the verdict
    equals the in-memory one and the separate kernel pass it replaces."""
    from rdmascope.analysis import stream, verify_emulation
    from rdmascope.analysis.verify import kernel_bytes_reread

    path = _bench_capture(tmp_path, seconds=24, segment_s=2)
    if kw.get("start_ns") == "mid":
        kw = {"start_ns": open_capture(path).t_start_ns + 5_123_456_789}
    reads: list[str] = []
    real = stream.iter_capture_tables

    def counting(*a, **k):
        for f, t in real(*a, **k):
            reads.append(f.name)
            yield f, t

    monkeypatch.setattr(stream, "iter_capture_tables", counting)
    got = verify_emulation(path, **kw)
    n_seg = len(list((path / "segments").glob("*.parquet")))
    assert len(reads) <= n_seg + 6  # one pass, plus up to 3 segments at each end for the range
    monkeypatch.setattr(stream, "iter_capture_tables", real)
    want = verify_emulation(load_capture(path), **kw)
    assert want.kernel is not None and want.kernel["kernel_bytes"].sum() > 0
    _verdicts_equal(got, want)
    info = open_capture(path)
    sep = kernel_bytes_reread(info, info.t_start_ns)(got.start_ns, got.end_ns)
    assert got.kernel["kernel_known_bytes"].to_dict() == pytest.approx(
        {d: k for d, (k, _u) in sep.items()}, rel=1e-12)
    assert got.kernel["kernel_unknown_windows"].to_dict() == {d: u for d, (_k, u) in sep.items()}


@pytest.mark.parametrize("roll_every,short", [(7, False), (1000, False), (7, True)])
def test_inspect_streamed_equals_whole_table(tmp_path, roll_every, short):
    """inspect's summary, computed segment by segment, against the same quantities computed
    from the whole table (read_capture) by the formulas in summarize_capture's docstring."""
    from rdmascope.capture import read_capture
    from rdmascope.cli.inspect import summarize_capture

    path = _edgy_capture(tmp_path / "c", roll_every=roll_every, close=False,  # no audit
                         short=short)
    s = summarize_capture(str(path))
    t = read_capture(path).table
    cid, sweep = t["counter_id"].to_numpy(), t["sweep"].to_numpy()
    tb, st = t["t_before_ns"].to_numpy(), t["status"].to_numpy()
    dur = t["read_duration_ns"].to_numpy()
    assert s["rows"] == t.num_rows
    assert [c["rows"] for c in s["counters"]] == [int((cid == i).sum()) for i in range(5)]
    assert s["counters"][4]["by_status"] == {"read_error": 200}
    sw = np.unique(sweep)
    starts = np.array([tb[sweep == k].min() for k in sw])
    d = np.diff(sw)
    assert s["gaps"]["count"] == int((d > 1).sum())
    q = s["quality"]
    assert q["sweeps_taken"] == len(sw)
    iv = np.diff(starts)
    assert q["interval_ns"]["p50"] == np.percentile(iv, 50)
    assert q["interval_ns"]["p99"] == np.percentile(iv, 99)
    assert q["interval_ns"]["max"] == iv.max()
    r1 = q["read_duration_ns"][1]
    ok = dur[(cid == 1) & (st == 0)]
    assert (r1["p50"], r1["p99"], r1["max"]) == (np.percentile(ok, 50), np.percentile(ok, 99),
                                                 ok.max())
    assert s["span"]["first_t_ns"] == tb.min() and s["span"]["last_t_ns"] == tb.max()


def test_exact_percentiles_spilled_equal_numpy():
    from rdmascope.quantiles import ExactPercentiles

    rng = np.random.default_rng(1)
    for data in (rng.normal(size=20_000), np.round(rng.exponential(size=20_000), 2),
                 np.zeros(5_000), np.r_[np.zeros(9_000), rng.uniform(size=100) * 1e-300, 1e300]):
        e = ExactPercentiles(mem_values=1000)
        for c in np.array_split(data, 37):
            e.add(c)
        assert e.file is not None  # spilled
        qs = [0, 1, 50, 90, 99, 99.9, 100]
        assert e.percentiles(qs) == [float(v) for v in np.percentile(data, qs)]
        e.close()


@pytest.mark.parametrize("gather", [1, 7, 300])
def test_exact_percentiles_narrowing_equal_numpy(gather):
    """Spilled values whose histogram bins hold more than ``GATHER`` values are narrowed by
    histogram passes over the file (and a bin of equal values ends at once): still exactly
    numpy's percentiles (ties, +-0.0, negatives, tiny and huge values, one crowded bin)."""
    from rdmascope.quantiles import ExactPercentiles

    rng = np.random.default_rng(2)
    for data in (rng.normal(size=6_000), np.round(rng.exponential(size=6_000), 1),
                 np.r_[np.zeros(3_000), -np.zeros(500), np.full(800, 17.0), 17.0 + np.arange(50)
                       * 1e-12, rng.uniform(16, 18, size=900), -rng.uniform(size=40) * 1e-300],
                 np.full(4_000, 3.25)):
        rng.shuffle(data)
        e = ExactPercentiles(mem_values=500)
        e.GATHER = gather
        for c in np.array_split(data, 11):
            e.add(c)
        assert e.file is not None
        qs = [0, 0.1, 1, 25, 50, 75, 90, 99, 99.9, 100]
        assert e.percentiles(qs) == [float(v) for v in np.percentile(data, qs)]
        e.close()


@pytest.mark.parametrize("args", [["--window", "1ms", "--bytes"],
                                  ["--window", "3ms", "--from", "0.05s", "--to", "0.15s"],
                                  ["--window", "1ms", "--group", "twins", "--source", "all"]])
def test_rates_csv_and_parquet_stream_equal_json(tmp_path, args):
    import io
    import json

    from click.testing import CliRunner

    from rdmascope.cli import main

    path = (_bench_capture(tmp_path, seconds=12, segment_s=2) if "twins" in args
            else _edgy_capture(tmp_path / "c", roll_every=9))
    r = CliRunner()
    js = r.invoke(main, ["rates", str(path), *args, "--json"])
    assert js.exit_code == 0, js.output
    want = pd.DataFrame(json.loads(js.output)["rates"]).set_index("window_start_ns")
    cs = r.invoke(main, ["rates", str(path), *args, "--csv"])
    assert cs.exit_code == 0, cs.output
    got = pd.read_csv(io.StringIO(cs.output), index_col="window_start_ns")
    want = want.astype({c: "int8" for c in want if c.endswith("_quality")})
    got = got.astype({c: "int8" for c in got if c.endswith("_quality")})
    pd.testing.assert_frame_equal(got, want.astype(got.dtypes.to_dict()), check_exact=False,
                                  rtol=1e-15)
    pq_path = tmp_path / "r.parquet"
    pr = r.invoke(main, ["rates", str(path), *args, "--parquet", str(pq_path), "--csv"])
    assert pr.exit_code == 0, pr.output
    back = pd.read_parquet(pq_path)
    pd.testing.assert_frame_equal(back, got.astype(back.dtypes.to_dict()), check_exact=False,
                                  rtol=1e-15, check_names=False)
    assert len(got) > 10


def test_byte_intervals_of_capture_info_equal_loaded(tmp_path):
    """attribute, report, compare and cluster make their intervals from the segments (no
    readings in memory): the same frame as from the loaded capture."""
    path = _edgy_capture(tmp_path / "c", roll_every=9)
    for source in ("infiniband", None):
        want = byte_intervals(load_capture(path), source=source)
        got = byte_intervals(open_capture(path), source=source)
        pd.testing.assert_frame_equal(got, want)
        assert got.attrs == want.attrs


def test_time_range_reads_only_the_segments_around_it(tmp_path):
    from rdmascope.capture import iter_capture_tables

    path = _edgy_capture(tmp_path / "c", roll_every=10)  # 20 segments of 10 sweeps
    allf = [f.name for f, _ in iter_capture_tables(path)]
    some = [f.name for f, _ in iter_capture_tables(path, start_ns=T0 + 55 * MS,
                                                   end_ns=T0 + 75 * MS)]
    assert len(allf) == 20 and 3 <= len(some) <= 5
    # and what is read there gives the in-memory windows of the range
    from rdmascope.analysis import rebin_capture

    b, q = rebin_capture(path, MS, origin_ns=T0, start_ns=T0 + 55 * MS, end_ns=T0 + 75 * MS)
    wb, wq = rebin_with_quality(byte_intervals(load_capture(path)), MS, origin_ns=T0,
                                start_ns=T0 + 55 * MS, end_ns=T0 + 75 * MS)
    pd.testing.assert_frame_equal(q, wq)
    pd.testing.assert_frame_equal(b, wb, check_exact=False, rtol=1e-13)


def _attr_equal(got, want):
    for name in ("requests", "by_series", "rounds", "tests", "timeline", "time_classes"):
        g, w = getattr(got, name), getattr(want, name)
        pd.testing.assert_frame_equal(g, w, check_exact=False, rtol=1e-9, obj=name)
    # NaN (unknown, e.g. the idle split of a capture with unreadable time) equals NaN here
    assert got.summary.keys() == want.summary.keys()
    for k, v in want.summary.items():
        g = got.summary[k]
        both_nan = isinstance(v, float) and isinstance(g, float) and v != v and g != g
        assert both_nan or g == v, (k, g, v)
    assert got.notes == want.notes


def test_attribute_streamed_equals_in_memory(tmp_path):
    from rdmascope.analysis.attribute import attribute
    from rdmascope.analysis.requestlogs import align, read_request_log

    path = _bench_capture(tmp_path, seconds=40, segment_s=3)
    cap = load_capture(path)
    log = align(read_request_log(path / "requests.jsonl"), cap)
    want = attribute(cap, log)
    info = open_capture(path)
    got = attribute(info, align(read_request_log(path / "requests.jsonl"), info))
    assert want.requests["prefill_tx_bytes"].notna().all()
    assert (want.requests["prefill_bursts"] > 0).all()
    _attr_equal(got, want)


def test_attribute_streamed_equals_in_memory_edgy(tmp_path):
    import json

    from rdmascope.analysis.attribute import attribute
    from rdmascope.analysis.requestlogs import align, read_request_log

    path = _edgy_capture(tmp_path / "c", roll_every=9, n=260)
    log_path = tmp_path / "req.jsonl"
    with open(log_path, "w") as f:
        for i, (s, fst, lst) in enumerate([(2, 15, 40), (14, 30, 95), (50, 61, 150),
                                           (118, 121, 200), (200, 230, 266)]):
            f.write(json.dumps({"request_id": f"r{i}", "t_send": (T0 + s * MS) / 1e9,
                                "t_first_token": (T0 + fst * MS) / 1e9,
                                "t_last_token": (T0 + lst * MS) / 1e9, "prompt_tokens": 100,
                                "output_tokens": 10, "test": "P1", "round": 1,
                                "clock": "CLOCK_MONOTONIC"}) + "\n")
    cap = load_capture(path)
    want = attribute(cap, align(read_request_log(log_path), cap), link_capacity_gbps=1.0)
    info = open_capture(path)
    got = attribute(info, align(read_request_log(log_path), info), link_capacity_gbps=1.0)
    _attr_equal(got, want)


def test_integer_percentiles_equal_numpy():
    from rdmascope.quantiles import IntegerPercentiles

    rng = np.random.default_rng(3)
    for data in (rng.integers(0, 1000, 100_000), rng.integers(10**6, 10**6 + 500, 77_777),
                 np.array([5]), rng.integers(-50, 50, 10)):
        e = IntegerPercentiles()
        for c in np.array_split(data, 13):
            e.add(c)
        qs = [0, 1, 50, 90, 99, 99.9, 100]
        assert e.percentiles(qs) == [float(v) for v in np.percentile(data, qs)]
        assert e.max() == data.max()


@pytest.mark.parametrize("kw", [{}, {"after_s": 13}, {"threshold_gbps": 50.0, "after_s": 7}])
def test_first_burst_streamed_equals_in_memory(tmp_path, kw):
    from rdmascope.analysis.requestlogs import first_burst_start_ns

    path = _bench_capture(tmp_path, seconds=25, segment_s=2)
    cap = load_capture(path)
    if "after_s" in kw:
        kw["after_ns"] = cap.t_start_ns + kw.pop("after_s") * 10**9
    want = first_burst_start_ns(cap, **kw)
    got = first_burst_start_ns(open_capture(path), **kw)
    assert got == want
    if "after_ns" in kw:
        assert want[0] >= kw["after_ns"] > cap.t_start_ns + 5 * 10**9


def test_regular_grid_count_equals_the_binary_search():
    """``CounterCurve.ends_before`` with a step (the windows' regular grid, first and last edge
    possibly cut to a range) counts intervals ending at or before each edge in linear time; it
    must equal ``searchsorted(t1, e, "right")`` exactly (zero-length intervals, edges on
    interval ends, grids starting before or ending after every interval)."""
    from rdmascope.analysis.curve import CounterCurve

    rng = np.random.default_rng(5)
    for _ in range(2000):
        n = int(rng.integers(1, 300))
        d = rng.integers(0, 2500, n)
        gaps = rng.integers(0, 3, n) * rng.integers(0, 1500, n)
        t0 = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(d)[:-1]]) \
            + int(rng.integers(-5000, 5000))
        t1 = t0 + d
        c = CounterCurve(t0, t1, rng.random(n) * 100, np.zeros(n, np.int8))
        step = int(rng.integers(1, 2000))
        e = int(rng.integers(-8000, 8000)) \
            + np.arange(int(rng.integers(2, 400)), dtype=np.int64) * step
        if rng.random() < 0.5:  # a grid clipped to a range (WindowGrid clip=True)
            lo, hi = e[0] + int(rng.integers(0, step)), e[-1] - int(rng.integers(0, step))
            if hi > lo:
                e = np.clip(e, lo, hi)
        assert np.array_equal(c.ends_before(e, step), np.searchsorted(t1, e, "right"))


def test_solid_curve_windows_equal_the_two_part_sum():
    """A counter read without a hole (``CounterCurve.solid``: consecutive intervals of positive
    duration) takes its covered time whole from the first reading; every window's bytes, NaN
    and gap marks and covered ns must be exactly those of the general two-part sum (grids
    before, inside and past the readings, regular, clipped and irregular edges)."""
    from rdmascope.analysis.curve import CounterCurve

    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(1, 400))
        t = int(rng.integers(-10**6, 10**6)) + np.concatenate(
            [[0], np.cumsum(rng.integers(1, 3000, n))]).astype(np.int64)
        # a few unknown intervals: counter resets and gaps (FLAG_RESET 1, FLAG_GAP 3)
        flag = rng.choice(np.array([0, 1, 3], np.int8), n, p=[0.9, 0.05, 0.05])
        b = np.where(flag != 0, np.nan, rng.integers(0, 10**9, n).astype(float))
        c = CounterCurve(t[:-1], t[1:], b, flag)
        assert c.solid
        step = int(rng.integers(1, 4000))
        e = int(t[0]) - int(rng.integers(0, 4 * step)) \
            + np.arange(int(rng.integers(2, 500)), dtype=np.int64) * step
        steps = [step, None]
        if rng.random() < 0.3:  # irregular edges
            e = np.unique(rng.integers(int(t[0]) - 5000, int(t[-1]) + 5000, 200))
            steps = [None]
        for st in steps:
            fast = c.edges(e, step=st)
            c.solid = False
            slow = c.edges(e, step=st)
            c.solid = True
            for x, y in zip(fast, slow, strict=True):
                assert np.array_equal(x, y, equal_nan=True)


def test_grids_sharing_edges_equal_each_grid_alone(tmp_path):
    """Grids of one pass whose edges are every r-th edge of a finer grid take the cumulative
    curve from it (``_GridAcc.add`` with a memo); each grid's windows must be exactly those of
    the grid re-binned alone (multiples and non-multiples of the finest width, another origin,
    a range start inside a window, a clipped grid)."""
    from rdmascope.analysis.stream import WindowGrid, iter_windows

    path = _edgy_capture(tmp_path / "c", roll_every=9)
    info = open_capture(path)
    o = info.t_start_ns
    grids = [WindowGrid(MS, o), WindowGrid(5 * MS, o), WindowGrid(3 * MS, o + 77),
             WindowGrid(7 * MS, o, o + 23 * MS + 5), WindowGrid(2 * MS, o),
             WindowGrid(10 * MS, o, o + 11 * MS, o + 150 * MS, clip=True)]

    def frames(gs):
        out: dict[int, list] = {}
        for i, b, q in iter_windows(info, gs):
            out.setdefault(i, []).append((b, q))
        return {i: (pd.concat([x[0] for x in v]), pd.concat([x[1] for x in v]))
                for i, v in out.items()}

    together = frames(grids)
    for i, g in enumerate(grids):
        alone = frames([g])[0]
        pd.testing.assert_frame_equal(together[i][0], alone[0], check_exact=True)
        pd.testing.assert_frame_equal(together[i][1], alone[1], check_exact=True)
