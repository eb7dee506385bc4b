"""Long captures in the report's figures: the min/max envelope keeps every 1 ms peak.

A timeline or figure 2 longer than its pixel columns is drawn as, per column, the highest and the
lowest 1 ms window (``envelope.MinMaxEnvelope``, streamed by ``report.node_envelope``). Each
test checks the drawn values against the 1 ms windows computed a second way: from the loaded
capture's intervals (``series.rebin`` in memory), bucketed here with a plain loop.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis import figures as F
from rdmascope.analysis import report as R
from rdmascope.analysis.envelope import MinMaxEnvelope, bucket_windows
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.series import byte_intervals, rebin

MS = 1_000_000


def _runs(fixtures_dir):
    runs = [fixtures_dir / "sim-p2-200", fixtures_dir / "sim-p2-emulated100"]
    if not all((r / "manifest.json").exists() for r in runs):
        pytest.skip("fixtures sim-p2-200 / sim-p2-emulated100 not committed")
    return runs


def _true_1ms(run, cfg, start, end):
    """The node's 1 ms tx rates over [start, end) from the loaded capture (no streaming)."""
    iv = byte_intervals(load_capture(run))
    iv = iv[iv["direction"] == "tx"]
    b = rebin(iv, MS, origin_ns=R.window_origin(cfg), start_ns=start, end_ns=end,
              by="direction")
    return b["tx"] * 8.0 / MS


def _bucketed(rates: pd.Series, first_ns: int, k: int):
    """Per bucket of k windows from ``first_ns``: (max, min) of the known values, by a loop."""
    out: dict[int, list[float]] = {}
    for t, v in rates.items():
        if np.isnan(v):
            continue
        j = (int(t) - first_ns) // (k * MS)
        out.setdefault(j, []).append(float(v))
    return {j: (max(v), min(v)) for j, v in out.items()}


def test_bucket_windows():
    assert bucket_windows(1000, 2000) == 1
    assert bucket_windows(2000, 2000) == 1
    assert bucket_windows(2001, 2000) == 2
    assert bucket_windows(21_600_000, 2000) == 10_800
    with pytest.raises(ValueError):
        bucket_windows(10, 0)


def test_envelope_unknown_buckets_stay_unknown_and_order_does_not_matter():
    env = MinMaxEnvelope(start_ns=0, end_ns=10 * MS, width_ns=MS, origin_ns=0, k=4)
    t = np.arange(10, dtype=np.int64) * MS
    v = np.array([1.0, 5.0, np.nan, 2.0, np.nan, np.nan, np.nan, np.nan, 7.0, 3.0])
    env.add(t[5:], v[5:])  # later windows first
    env.add(t[:5], v[:5])
    f = env.frame()
    assert list(f.index) == [0, 4 * MS, 8 * MS]
    assert f["max"].tolist()[0] == 5.0 and f["min"].tolist()[0] == 1.0
    assert np.isnan(f["max"].iloc[1]) and np.isnan(f["min"].iloc[1])  # unknown, never 0
    assert (f["max"].iloc[2], f["min"].iloc[2]) == (7.0, 3.0)


@pytest.mark.parametrize("k", [1, 7, 64])
def test_node_envelope_equals_the_max_and_min_of_the_1ms_windows(fixtures_dir, k):
    run = _runs(fixtures_dir)[0]
    cfg = R.load_configuration(run, R.default_request_logs(run))
    assert cfg.streamed
    lo, hi = cfg.data_span("tx")
    env = R.node_envelope(cfg, MS, lo, hi, k=k)
    assert env.attrs["bucket_ns"] == k * MS
    true = _true_1ms(run, cfg, lo, hi)
    first = int(true.index[0])
    assert int(env.index[0]) == first
    want = _bucketed(true, first, k)
    assert len(env) == -(-len(true) // k)
    for j, (t, row) in enumerate(env.iterrows()):
        assert int(t) == first + j * k * MS
        if j in want:
            assert row["max"] == pytest.approx(want[j][0], rel=1e-12)
            assert row["min"] == pytest.approx(want[j][1], rel=1e-12, abs=1e-9)
        else:
            assert np.isnan(row["max"]) and np.isnan(row["min"])
    # the highest 1 ms window of the whole range is drawn at its full height
    assert env["max"].max() == pytest.approx(true.max(), rel=1e-12)


def test_comparison_figure_keeps_every_1ms_peak(fixtures_dir):
    runs = _runs(fixtures_dir)
    cfgs = [R.load_configuration(r, R.default_request_logs(r)) for r in runs]
    test = str(cfgs[0].requests["test"].iloc[0])
    # the fixture's test fits in the default columns: every 1 ms window is drawn, as before
    assert R.comparison_bucket(cfgs, test) == 1
    columns = 40
    k = R.comparison_bucket(cfgs, test, columns=columns, max_windows=0)
    assert k > 1
    fig = R.figure_comparison(cfgs, test, columns=columns, max_windows=0)
    assert f"the highest 1 ms window per {F.window_label(k * MS)}" in fig._suptitle.get_text()
    for ax, cfg, run in zip(fig.axes, cfgs, runs, strict=True):
        r = cfg.requests[cfg.requests["test"].astype(str) == test]
        a, b = int(r["t_send_ns"].min()) - 10**9, int(r["t_last_ns"].max()) + 10**9
        lo, hi = cfg.data_span("tx")
        a, b = max(a, lo), min(b, hi)
        true = _true_1ms(run, cfg, a, b)
        first = int(true.index[0])
        want = _bucketed(true, first, k)
        (line,) = [ln for ln in ax.get_lines() if ln.get_gid() is None]
        y = np.asarray(line.get_ydata())[:-1]  # the last point closes the last step
        x = np.asarray(line.get_xdata())[:-1]
        assert len(y) <= columns
        origin = int(r["t_send_ns"].min())
        for xi, yi in zip(x, y, strict=True):
            j = (int(round(xi * 1e9)) + origin - first) // (k * MS)
            if j in want:
                assert yi == pytest.approx(want[j][0], rel=1e-12)
            else:
                assert np.isnan(yi)
        assert np.nanmax(y) == pytest.approx(true.max(), rel=1e-12)
        (band,) = [c for c in ax.collections if c.get_gid() == "envelope"]
        # the band reaches down to each column's lowest window
        ys = band.get_paths()[0].vertices[:, 1]
        assert ys.min() == pytest.approx(min(v[1] for v in want.values()), abs=1e-9)


def test_timeline_of_a_long_series_is_bounded_and_keeps_the_peak(monkeypatch):
    pytest.importorskip("plotly")
    import json
    import re

    monkeypatch.setattr(F, "MAX_TIMELINE_POINTS", 1000)
    rng = np.random.default_rng(3)
    n = 50_000
    v = rng.uniform(0, 20, n)
    v[rng.choice(n, 30, replace=False)] = rng.uniform(150, 190, 30)  # lone 1 ms peaks
    v[100:110] = np.nan
    s = pd.Series(v, index=pd.Index(np.arange(n, dtype=np.int64) * MS))
    html, note = F.timeline_html({"tx": s}, origin_ns=0, width_ns=MS, title="t",
                                 spans_s=[(1.0, 2.0), (3.0, 4.5)], include_plotlyjs=False,
                                 zoom_hint="see `rdmascope rates`")
    k = bucket_windows(n, 500)
    assert f"highest 1 ms window of {F.window_label(k * MS)}" in note
    assert "see `rdmascope rates`" in note
    data = json.loads(re.search(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*(\[.*?\]),\s*\{", html,
                                re.S).group(1))
    hi = next(t for t in data if "highest" in t.get("name", ""))
    ys = np.array([np.nan if y is None else y for y in _values(hi["y"])], dtype=float)
    assert len(ys) <= 500
    want = [np.nanmax(v[j * k:(j + 1) * k]) for j in range(len(ys))]
    np.testing.assert_array_equal(ys, want)
    assert np.nanmax(ys) == np.nanmax(v)


def _values(y):
    """A plotly array as JSON: a list, or a typed array {"dtype", "bdata"} (plotly >= 6)."""
    if isinstance(y, dict):
        import base64

        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"]))
    return y


def test_plot_compare_from_to_draws_a_stretch_at_every_1ms_window(fixtures_dir, tmp_path):
    """`plot compare --from/--to`: the stretch of a test, every 1 ms window of it (the zoom of
    a long test's envelope); outside compare, or --to not after --from: a usage error."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    a, b = _runs(fixtures_dir)
    cfgs = [R.load_configuration(r, R.default_request_logs(r)) for r in (a, b)]
    test = str(cfgs[0].requests["test"].iloc[0])
    fig = R.figure_comparison(cfgs, test, start_s=0.5, end_s=1.5, max_windows=0, columns=5000)
    assert fig.axes[0].get_xlim() == pytest.approx((0.5, 1.5))
    for ax, cfg, run in zip(fig.axes, cfgs, (a, b), strict=True):
        r = cfg.requests[cfg.requests["test"].astype(str) == test]
        t0 = int(r["t_send_ns"].min())
        (line,) = [ln for ln in ax.get_lines() if ln.get_gid() is None]
        y = np.asarray(line.get_ydata())[:-1]
        true = _true_1ms(run, cfg, t0 + 500 * MS, t0 + 1500 * MS)
        # 1,000 windows in 5,000 columns: every 1 ms window drawn as it is
        np.testing.assert_allclose(y, true.to_numpy(), rtol=1e-12)
    runner = CliRunner()
    out = tmp_path / "f.png"
    res = runner.invoke(main, ["plot", "compare", str(a), str(b), "--test", test,
                               "--from", "0.5", "--to", "1.5", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 1000
    res = runner.invoke(main, ["plot", "devices", str(a), "--from", "1", "-o", str(out)])
    assert res.exit_code == 2 and "--from/--to apply to `plot compare` only" in res.output
    res = runner.invoke(main, ["plot", "compare", str(a), str(b), "--from", "2", "--to", "1",
                               "-o", str(out)])
    assert res.exit_code == 2 and "must be after --from" in res.output
