"""Figure functions: assert on the data behind each plot, built from small hand-made inputs.

Inputs follow the analysis contract (docs/ARCHITECTURE.md): Gb/s DataFrames indexed by window
start in int64 ns, one column per series; request tables with t_send_ns / t_first_ns.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from matplotlib.lines import Line2D
from rdmascope.analysis import figures as F

MS = 1_000_000
S = 1_000_000_000


def rates_frame(values, start_ns=0, width_ns=MS, name="node0/tx"):
    idx = pd.Index(start_ns + np.arange(len(values), dtype=np.int64) * width_ns, name="t_ns")
    return pd.DataFrame({name: np.asarray(values, dtype=float)}, index=idx)


def data_lines(ax):
    """Lines carrying data (not reference lines / markers drawn with a gid)."""
    return [ln for ln in ax.get_lines() if ln.get_gid() is None]


def gid_artists(ax, gid):
    return [a for a in ax.get_children() if a.get_gid() == gid]


def span_x(patch):
    """x extent of an axvspan (Rectangle in matplotlib >= 3.9, Polygon before)."""
    xs = np.asarray(patch.get_path().transformed(patch.get_patch_transform()).vertices[:, 0]) \
        if hasattr(patch, "get_patch_transform") else patch.get_xy()[:, 0]
    return float(xs.min()), float(xs.max())


def capacity_ys(ax):
    return sorted(float(ln.get_ydata()[0]) for ln in ax.get_lines() if ln.get_gid() == "capacity")


# ------------------------------------------------------------------------------------------------
# Figure 1
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def one_request():
    """1 s idle, 1 s prefill with a 3 ms burst at 180 Gb/s every 20 ms, 1 s decode at 3 Gb/s."""
    t0 = 50 * S  # capture clock: the request is sent at t = 51 s
    n = 3000
    v = np.zeros(n)
    rel = np.arange(n) - 1000
    pre = (rel >= 0) & (rel < 1000)
    v[pre & (rel % 20 < 3)] = 180.0
    v[(rel >= 1000) & (rel < 2000)] = 3.0
    r = rates_frame(v, start_ns=t0)
    return r, t0 + 1 * S, t0 + 2 * S, t0 + 3 * S


def test_request_plots_the_series_in_seconds_since_send(one_request):
    r, send, first, last = one_request
    fig = F.plot_request(r, t_send_ns=send, t_first_ns=first, t_last_ns=last, link_gbps=200)
    ax, zoom = fig.axes
    (line,) = data_lines(ax)
    x, y = line.get_xdata(), line.get_ydata()
    # window starts relative to the send, plus the closing edge of the last window
    np.testing.assert_allclose(x[:-1], (r.index.to_numpy() - send) / 1e9)
    assert x[0] == pytest.approx(-1.0) and x[-1] == pytest.approx(2.0)
    np.testing.assert_array_equal(y[:-1], r["node0/tx"].to_numpy())
    assert line.get_drawstyle() == "steps-post"


def test_request_shades_the_prefill_and_marks_the_first_token(one_request):
    r, send, first, last = one_request
    fig = F.plot_request(r, t_send_ns=send, t_first_ns=first, t_last_ns=last, link_gbps=200)
    ax = fig.axes[0]
    (prefill,) = gid_artists(ax, "prefill")
    assert span_x(prefill) == pytest.approx((0.0, 1.0))
    (ft,) = gid_artists(ax, "first_token")
    assert list(ft.get_xdata()) == [pytest.approx(1.0)] * 2
    (lt,) = gid_artists(ax, "last_token")
    assert lt.get_xdata()[0] == pytest.approx(2.0)
    assert capacity_ys(ax) == [200.0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "prefill (TTFT 1.00 s)" in labels and "first token" in labels
    assert ax.get_xlabel() == "time since request sent (s)"
    assert ax.get_ylabel() == "rate (Gb/s)"


def test_request_zoom_is_centred_in_the_prefill_and_shows_every_burst(one_request):
    r, send, first, last = one_request
    fig = F.plot_request(r, t_send_ns=send, t_first_ns=first, zoom_ms=200)
    ax, zoom = fig.axes
    # prefill 1000 ms, zoom 200 ms centred: 400..600 ms after the send
    assert zoom.get_xlim() == pytest.approx((400.0, 600.0))
    (extent,) = gid_artists(ax, "zoom_extent")
    assert span_x(extent) == pytest.approx((0.4, 0.6))
    (zl,) = data_lines(zoom)
    x, y = zl.get_xdata(), zl.get_ydata()
    np.testing.assert_allclose(x[:-1], np.arange(400, 600))  # ms since send, 1 ms windows
    # 200 ms / 20 ms period = 10 bursts, each 3 windows at 180 Gb/s
    high = (y[:-1] > 100).astype(int)
    assert int(np.sum(np.diff(high) == 1) + high[0]) == 10
    assert int(high.sum()) == 30
    assert zoom.get_xlabel() == "time since request sent (ms)"


def test_request_zoom_at_a_given_start_and_clipped_to_a_short_prefill(one_request):
    r, send, first, _ = one_request
    fig = F.plot_request(r, t_send_ns=send, t_first_ns=first, zoom_start_ns=send + 100 * MS,
                         zoom_ms=50)
    assert fig.axes[1].get_xlim() == pytest.approx((100.0, 150.0))
    # prefill of 120 ms < 200 ms zoom: the zoom is the whole prefill
    fig = F.plot_request(r, t_send_ns=send, t_first_ns=send + 120 * MS)
    assert fig.axes[1].get_xlim() == pytest.approx((0.0, 120.0))
    # no zoom
    assert len(F.plot_request(r, t_send_ns=send, t_first_ns=first, zoom_ms=None).axes) == 1


def test_request_rejects_a_first_token_before_the_send(one_request):
    r, send, first, _ = one_request
    with pytest.raises(ValueError, match="before t_send_ns"):
        F.plot_request(r, t_send_ns=first, t_first_ns=send)
    with pytest.raises(ValueError, match="int64 ns"):
        F.plot_request(r.set_axis(r.index / 1e9), t_send_ns=send, t_first_ns=first)


def test_request_rejects_a_zoom_start_outside_the_prefill(one_request):
    r, send, first, _ = one_request  # prefill: 1 s after the send
    for bad in (first, first + 5 * S, send - 1):
        with pytest.raises(ValueError, match=r"outside the prefill \(0 to 1.000 s after the "
                                             r"send\)"):
            F.plot_request(r, t_send_ns=send, t_first_ns=first, zoom_start_ns=bad)
    # the last instant inside the prefill is accepted; without a zoom the start is unused
    F.plot_request(r, t_send_ns=send, t_first_ns=first, zoom_start_ns=first - 1, zoom_ms=1)
    assert len(F.plot_request(r, t_send_ns=send, t_first_ns=first, zoom_ms=None,
                              zoom_start_ns=first + 5 * S).axes) == 1


# ------------------------------------------------------------------------------------------------
# Figure 2
# ------------------------------------------------------------------------------------------------


def _config(t0, prefill_s, peak, rounds=3, period_s=10):
    rows = []
    for k in range(rounds):
        send = t0 + k * period_s * S
        rows.append({"request_id": f"r{k}", "t_send_ns": send,
                     "t_first_ns": send + int(prefill_s * S), "round": k + 1})
    n = rounds * period_s * 100  # 10 ms windows
    v = np.zeros(n)
    for row in rows:
        a = (row["t_send_ns"] - t0) // (10 * MS)
        b = (row["t_first_ns"] - t0) // (10 * MS)
        v[a:b] = peak
    return rates_frame(v, start_ns=t0, width_ns=10 * MS), pd.DataFrame(rows)


def test_comparison_stacks_two_configs_on_a_shared_time_axis():
    r200, q200 = _config(100 * S, 2.0, 150.0)
    r100, q100 = _config(900 * S, 2.5, 105.0)
    fig = F.plot_comparison({"200 Gb/s": r200, "emulated 100 Gb/s": r100},
                            {"200 Gb/s": q200, "emulated 100 Gb/s": q100},
                            link_gbps={"200 Gb/s": 200, "emulated 100 Gb/s": 109})
    top, bottom = fig.axes
    assert top.get_title(loc="left") == "200 Gb/s"
    assert bottom.get_title(loc="left") == "emulated 100 Gb/s"
    assert top.get_shared_x_axes().joined(top, bottom)
    # each panel's time axis starts at its own first send
    for ax, r, q in ((top, r200, q200), (bottom, r100, q100)):
        (line,) = data_lines(ax)
        np.testing.assert_allclose(line.get_xdata()[:-1],
                                   (r.index.to_numpy() - q.t_send_ns.min()) / 1e9)
        np.testing.assert_array_equal(line.get_ydata()[:-1], r.iloc[:, 0].to_numpy())
    spans = sorted(span_x(p) for p in gid_artists(bottom, "prefill"))
    assert spans == [pytest.approx((0, 2.5)), pytest.approx((10, 12.5)), pytest.approx((20, 22.5))]
    firsts = sorted(ln.get_xdata()[0] for ln in gid_artists(top, "first_token"))
    assert firsts == pytest.approx([2.0, 12.0, 22.0])
    assert capacity_ys(top) == [200.0] and capacity_ys(bottom) == [109.0]
    texts = {t.get_text() for t in top.texts}
    assert {"round 1", "round 2", "round 3"} <= texts


def test_comparison_shades_the_union_of_concurrent_prefills():
    r, _ = _config(0, 1.0, 150.0, rounds=1)
    # 4 requests sent together; first tokens at 3, 4, 6, 7 s: one grey band [0, 7]
    q = pd.DataFrame({"t_send_ns": [0, 0, 0, 0], "t_first_ns": [3 * S, 4 * S, 6 * S, 7 * S],
                      "round": [1, 1, 1, 1]})
    fig = F.plot_comparison({"a": r}, {"a": q})
    (span,) = gid_artists(fig.axes[0], "prefill")
    assert span_x(span) == pytest.approx((0.0, 7.0))
    assert len(gid_artists(fig.axes[0], "first_token")) == 4


def test_comparison_rejects_mismatched_labels_and_missing_columns():
    r, q = _config(0, 1.0, 150.0)
    with pytest.raises(ValueError, match="labels must match"):
        F.plot_comparison({"a": r}, {"b": q})
    with pytest.raises(ValueError, match=r"missing column\(s\) \['t_first_ns'\]"):
        F.plot_comparison({"a": r}, {"a": q.drop(columns="t_first_ns")})


# ------------------------------------------------------------------------------------------------
# Figure 3
# ------------------------------------------------------------------------------------------------


def test_windows_panels_label_each_peak():
    # 1 ms: a burst of 4 windows at 180 Gb/s every 20 ms; 5 ms and 100 ms averages by hand
    one = np.tile([180.0] * 4 + [0.0] * 16, 10)  # 200 ms
    five = np.tile([144.0, 0.0, 0.0, 0.0], 10)  # 4 ms x 180 in a 5 ms window = 144 Gb/s
    hundred = np.array([36.0, 36.0])  # 4/20 x 180
    t0 = 7 * S
    fig = F.plot_windows({MS: rates_frame(one, t0), 5 * MS: rates_frame(five, t0, 5 * MS),
                          100 * MS: rates_frame(hundred, t0, 100 * MS)}, link_gbps=200)
    axes = fig.axes
    assert len(axes) == 3
    texts = [next(t.get_text() for t in ax.texts if t.get_gid() == "peak_label") for ax in axes]
    labels = [t.split("\n")[0] for t in texts]
    # the 5 ms panel (windows narrower than the ~20 ms burst period) explains its beat
    assert ["beat" in t for t in texts] == [False, True, False]
    assert labels == ["1 ms windows, peak 180 Gb/s", "5 ms windows, peak 144 Gb/s",
                      "100 ms windows, peak 36 Gb/s"]
    for ax, peak in zip(axes, (180, 144, 36), strict=True):
        (pl,) = gid_artists(ax, "peak_line")
        assert pl.get_ydata()[0] == peak
        (mk,) = gid_artists(ax, "peak_marker")
        assert mk.get_ydata()[0] == peak
        assert capacity_ys(ax) == [200.0]
    # the 5 ms marker sits in the middle of the first 5 ms window
    (mk,) = gid_artists(axes[1], "peak_marker")
    assert mk.get_xdata()[0] == pytest.approx(0.0025)
    (line,) = data_lines(axes[2])
    np.testing.assert_allclose(line.get_xdata(), [0.0, 0.1, 0.2])


def test_windows_uses_given_peaks_and_rejects_wide_frames():
    s = rates_frame([1.0, 2.0, 3.0])
    fig = F.plot_windows({MS: s}, peaks_gbps={MS: 181.4})
    assert any(t.get_text() == "1 ms windows, peak 181 Gb/s" for t in fig.axes[0].texts)
    wide = s.assign(other=1.0)
    with pytest.raises(ValueError, match="2 columns"):
        F.plot_windows({MS: wide})


@pytest.mark.parametrize("ns,label", [(MS, "1 ms"), (100 * MS, "100 ms"), (S, "1 s"),
                                      (250_000, "250 us"), (7, "7 ns")])
def test_window_label(ns, label):
    assert F.window_label(ns) == label


# ------------------------------------------------------------------------------------------------
# Figures 4-6
# ------------------------------------------------------------------------------------------------


def test_extra_prefill_bars_and_min_max_error_bars():
    t = pd.DataFrame({"test": ["P1", "P2"], "extra_prefill_s": [0.01, 0.88],
                      "extra_prefill_min_s": [0.0, 0.80], "extra_prefill_max_s": [0.03, 0.95],
                      "estimate_s": [0.14, 1.10]})
    ax = F.plot_extra_prefill(t)
    bars = [c for c in ax.containers if c.__class__.__name__ == "BarContainer"]
    meas, est = bars
    assert [p.get_height() for p in meas] == pytest.approx([0.01, 0.88])
    assert [p.get_height() for p in est] == pytest.approx([0.14, 1.10])
    (err,) = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
    segs = err.lines[2][0].get_segments()
    assert [tuple(s[:, 1]) for s in segs] == [pytest.approx((0.0, 0.03)),
                                              pytest.approx((0.80, 0.95))]
    assert [tl.get_text() for tl in ax.get_xticklabels()] == ["P1", "P2"]
    value_texts = {t.get_text() for t in ax.texts}
    assert {"0.88", "1.10", "0.14"} <= value_texts
    assert ax.get_ylabel() == "extra prefill time (s)"


def test_extra_prefill_names_a_missing_column():
    with pytest.raises(ValueError, match="estimate_s"):
        F.plot_extra_prefill(pd.DataFrame({"test": ["P1"], "extra_prefill_s": [1.0]}))


def test_increase_vs_tokens_points_and_estimate_lines():
    m = pd.DataFrame({"test": ["P1", "P2", "P2"], "prompt_tokens": [1024, 8192, 8192],
                      "increase_s": [0.01, 0.85, 0.90]})
    est = {"bound to 100 Gb/s": pd.DataFrame({"prompt_tokens": [8000, 0],
                                              "estimate_s": [1.08, 0.0]}),
           "bound to 109 Gb/s": pd.DataFrame({"prompt_tokens": [0, 8000],
                                              "estimate_s": [0.0, 0.88]})}
    ax = F.plot_increase_vs_tokens(m, est)
    lines = {ln.get_label(): ln for ln in ax.get_lines() if ln.get_gid() == "estimate"}
    # sorted by tokens, x in thousands
    np.testing.assert_allclose(lines["bound to 100 Gb/s"].get_xdata(), [0.0, 8.0])
    np.testing.assert_allclose(lines["bound to 100 Gb/s"].get_ydata(), [0.0, 1.08])
    pts = {ln.get_label(): ln for ln in ax.get_lines() if ln.get_gid() == "measured"}
    assert set(pts) == {"measured P1", "measured P2"}
    np.testing.assert_allclose(pts["measured P2"].get_xdata(), [8.192, 8.192])
    np.testing.assert_allclose(pts["measured P2"].get_ydata(), [0.85, 0.90])
    assert ax.get_xlabel() == "prompt tokens (thousands)"


def test_tp_projection_lines_ticks_and_value_labels():
    proj = pd.DataFrame({"8K prompt": [3.0, 7.0, 14.0, 27.0]}, index=[2, 4, 8, 16])
    ax = F.plot_tp_projection(proj)
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "8K prompt"]
    np.testing.assert_allclose(line.get_xdata(), [2, 4, 8, 16])
    np.testing.assert_allclose(line.get_ydata(), [3, 7, 14, 27])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["TP2", "TP4", "TP8", "TP16"]
    assert [t.get_text() for t in ax.texts if t.get_gid() == "value_label"] == \
        ["3.0", "7.0", "14.0", "27.0"]
    assert ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="empty"):
        F.plot_tp_projection(pd.DataFrame())


# ------------------------------------------------------------------------------------------------
# Per-device stacked traffic
# ------------------------------------------------------------------------------------------------


def test_devices_stack_tops_at_the_port_total():
    idx = pd.Index(np.arange(5, dtype=np.int64) * 10 * MS + 3 * S)
    r = pd.DataFrame({"rocep1s0f1/tx": [0, 100, 105, 0, 0.0],
                      "roceP2p1s0f1/tx": [0, 0, 0, 0, 0.0]}, index=idx)
    ax = F.plot_devices(r, link_gbps={"one path ~109 Gb/s": 109, "port 200 Gb/s": 200},
                        verdict="emulation confirmed: all traffic on rocep1s0f1")
    polys = ax.collections
    assert len(polys) == 2
    tops = [p.get_paths()[0].vertices[:, 1].max() for p in polys]
    assert tops == pytest.approx([105.0, 105.0])  # second area stacked on the first, adds zero
    assert capacity_ys(ax) == [109.0, 200.0]
    (v,) = gid_artists(ax, "verdict")
    assert v.get_text().startswith("emulation confirmed")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(r.columns)


# ------------------------------------------------------------------------------------------------
# Saving, backend
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext,magic", [("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_save_figure_writes_each_format(tmp_path, one_request, ext, magic):
    r, send, first, _ = one_request
    fig = F.plot_request(r, t_send_ns=send, t_first_ns=first, link_gbps=200)
    out = F.save_figure(fig, tmp_path / "sub" / f"fig.{ext}")
    data = out.read_bytes()
    assert data.startswith(magic) and len(data) > 1000


def test_save_figure_accepts_axes_and_rejects_other_formats(tmp_path):
    ax = F.plot_tp_projection(pd.Series([1.0, 2.0], index=[2, 8], name="x"))
    assert F.save_figure(ax, tmp_path / "a.png").stat().st_size > 0
    with pytest.raises(ValueError, match=r"unsupported figure format '\.jpg'"):
        F.save_figure(ax, tmp_path / "a.jpg")


def test_figures_draw_into_given_axes():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert F.plot_tp_projection(pd.Series([1.0], index=[8]), ax=ax) is ax
    assert isinstance(ax.get_lines()[0], Line2D)


def test_figures_module_does_not_use_pyplot():
    code = ("import sys, rdmascope.analysis.figures; "
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_axis_top_of_an_unreadable_series_is_none_without_a_warning():
    import warnings

    from rdmascope.analysis import figures as F

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.nanmax of all-NaN warned here before
        assert F._finite_max(np.full((3, 2), np.nan)) == []
        assert F._finite_max(np.array([[np.nan, 2.5], [np.inf, 1.0]])) == [2.5]
        assert F._finite_max(np.zeros(0)) == []


def test_kept_out_windows_are_clipped_marked_and_the_marker_sits_at_its_label():
    """Figure 3's emulated 5 ms marker said "peak 71" but sat at the raw 140, and the kept-out
    windows (344 and 673 Gb/s) set the y-axis to 700, squashing the 109 Gb/s bursts."""
    vals = [50.0, 109.0, 673.0, 80.0, 344.0, 60.0]
    s = rates_frame(vals)
    fig = F.plot_windows({MS: s}, peaks_gbps={MS: 109.0}, link_gbps={"line": 126.0})
    ax = fig.axes[0]
    (mk,) = gid_artists(ax, "peak_marker")
    assert mk.get_ydata()[0] == 109.0 and mk.get_xdata()[0] == pytest.approx(0.0015)
    assert ax.get_ylim()[1] < 200  # the scale follows the headline and the capacity, not 673
    (ko,) = gid_artists(ax, "kept_out_marker")
    np.testing.assert_allclose(ko.get_xdata(), [0.0025, 0.0045])
    labels = [t.get_text() for t in ax.texts if t.get_gid() == "kept_out_label"]
    assert labels == ["2 window(s) kept out (up to 673 Gb/s: over line rate or gap-spread; "
                      "clipped)"]
    (line,) = data_lines(ax)
    assert np.nanmax(line.get_ydata()) == 109.0  # the kept-out windows are not drawn at height


# ------------------------------------------------------------------------------------------------
# One rule for a peak in every figure: kept-out windows clipped, bound lines that matter
# ------------------------------------------------------------------------------------------------

#: 1 ms windows of a node's tx on a 200 Gb/s port: real bursts at 109 Gb/s and two windows over
#: line rate beyond the timing uncertainty (a counter updated late: 344 and 673 Gb/s), which
#: ``peaks`` keeps out of every headline. 0.8 ms of a 1 ms window at 200 Gb/s is at most 160 of
#: the window's 200 Gb/s, so 344 * 0.8 = 275 > 200 and 673 * 0.8 = 538 > 200: kept out; 230
#: * 0.8 = 184 <= 200 is within the uncertainty (``peaks`` says "at line rate"): drawn.
OVER = [0.0, 109.0, 20.0, 673.0, 109.0, 0.0, 344.0, 109.0, 230.0, 5.0]
SPARK_LINES = {"port 200 Gb/s": 200.0, "one PCIe x4 path ~109 Gb/s": 109.0,
               "twin PCIe link bound 126 Gb/s": 126.0}


def assert_texts_do_not_overlap(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        texts = [t for t in ax.texts if t.get_visible() and t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
        for i, (ta, a) in enumerate(boxes):
            for tb, b in boxes[i + 1:]:
                assert not a.overlaps(b), f"labels overlap: {ta!r} and {tb!r}"


def test_kept_out_mask_is_the_over_line_rule_on_rates():
    m = F.kept_out_mask(OVER + [np.nan], 200.0, MS)
    assert list(np.flatnonzero(m)) == [3, 6]
    # a 0.2 ms window cannot rule anything out from its rate alone (all of it is uncertain)
    assert not F.kept_out_mask([673.0], 200.0, 200_000).any()
    assert not F.kept_out_mask([673.0], None, MS).any()


def test_request_figure_clips_kept_out_windows_at_the_axis_with_a_label():
    """Figures 1/2 drew the kept-out 344 and 673 Gb/s windows at full height, unlabelled: the
    y-axis reached 700 and squashed the real 109 Gb/s bursts."""
    r = rates_frame(OVER, start_ns=0)
    fig = F.plot_request(r, t_send_ns=0, t_first_ns=9 * MS, zoom_ms=5, zoom_start_ns=2 * MS,
                         link_gbps={"port 200 Gb/s": 200.0})
    ax, zoom = fig.axes[0], fig.axes[1]
    assert 200 < ax.get_ylim()[1] < 300  # the port line and the 230 window, never 673
    (line,) = data_lines(ax)
    assert np.nanmax(line.get_ydata()) == 230.0
    (ko,) = gid_artists(ax, "kept_out_marker")
    np.testing.assert_allclose(ko.get_xdata(), [0.0035, 0.0065])  # window centres, s
    labels = [t.get_text() for t in ax.texts if t.get_gid() == "kept_out_label"]
    assert labels == ["2 window(s) kept out (up to 673 Gb/s: over line rate; clipped)"]
    # the zoom (2-7 ms) holds both, in ms
    (kz,) = gid_artists(zoom, "kept_out_marker")
    np.testing.assert_allclose(kz.get_xdata(), [3.5, 6.5])
    assert zoom.get_ylim()[1] < 300
    assert_texts_do_not_overlap(fig)


def test_comparison_figure_clips_kept_out_windows_per_panel():
    r1 = rates_frame(OVER, start_ns=0)
    r2 = rates_frame([0.0, 100.0, 0.0, 90.0, 0.0, 0, 0, 0, 0, 0], start_ns=0)
    reqs = {k: pd.DataFrame({"t_send_ns": [0], "t_first_ns": [8 * MS]}) for k in ("a", "b")}
    fig = F.plot_comparison({"a": r1, "b": r2}, reqs,
                            link_gbps={"a": {"port 200 Gb/s": 200.0},
                                       "b": {"port 200 Gb/s": 200.0}})
    a, b = fig.axes[:2]
    assert a.get_ylim()[1] < 300
    (ko,) = gid_artists(a, "kept_out_marker")
    np.testing.assert_allclose(ko.get_xdata(), [0.0035, 0.0065])
    assert not gid_artists(b, "kept_out_marker")
    assert [t.get_text() for t in a.texts if t.get_gid() == "kept_out_label"] == \
        ["2 window(s) kept out (up to 673 Gb/s: over line rate; clipped)"]
    assert_texts_do_not_overlap(fig)


@pytest.mark.parametrize("plot", ["request", "windows"])
def test_bound_lines_are_the_port_and_the_lowest_bound_labelled_once_without_overlap(plot):
    """The old figures drew every bound (port, PCIe path, twin PCIe link) dashed with labels
    printed over each other and over the kept-out label."""
    r = rates_frame(OVER, start_ns=0)
    if plot == "request":
        fig = F.plot_request(r, t_send_ns=0, t_first_ns=9 * MS, zoom_ms=None,
                             link_gbps=SPARK_LINES)
    else:
        fig = F.plot_windows({MS: r}, peaks_gbps={MS: 200.0}, link_gbps=SPARK_LINES)
    ax = fig.axes[0]
    assert capacity_ys(ax) == [109.0, 200.0]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("port 200 Gb/s") == 1 and texts.count("one PCIe x4 path ~109 Gb/s") == 1
    assert "twin PCIe link bound 126 Gb/s" not in texts
    assert_texts_do_not_overlap(fig)


def test_timeline_clips_kept_out_windows_and_scales_to_the_headline():
    pytest.importorskip("plotly")
    import re

    s = rates_frame(OVER, start_ns=0).iloc[:, 0]
    html, _ = F.timeline_html({"tx": s}, origin_ns=0, width_ns=MS, title="t",
                              link_gbps=SPARK_LINES)
    html = html.replace("\\u002f", "/")  # plotly's JSON escapes "/"
    assert "2 window(s) kept out (up to 673 Gb/s: over line rate; clipped)" in html
    tops = [float(v) for v in re.findall(r'"range":\[0(?:\.0)?,([0-9.e+]+)\]', html)]
    assert tops and max(tops) == pytest.approx(230.0 * 1.12)  # not 673 * 1.12
    assert "twin PCIe link bound 126 Gb/s" not in html
    assert "port 200 Gb/s" in html and "one PCIe x4 path ~109 Gb/s" in html


def test_a_peak_at_line_rate_is_labelled_so_and_marked_at_the_line():
    """The report's figure 3 said "1 ms windows, peak 109 Gb/s" above bars reaching ~130 and put
    the marker at 130, while the CLI says "at line rate (109.00)": windows above the line by less
    than their timing uncertainty. By hand: 1 ms windows 50, 104, 60 on a 100 Gb/s line whose
    table says at_line_rate: the label names it, the marker sits at 100 on the 104 window, the
    104 window is drawn (not kept out)."""
    s = rates_frame([50.0, 104.0, 60.0])
    fig = F.plot_windows({MS: s}, peaks_gbps={MS: 100.0}, link_gbps={"line": 100.0},
                         at_line_rate={MS: True})
    ax = fig.axes[0]
    (label,) = [t.get_text() for t in ax.texts if t.get_gid() == "peak_label"]
    assert label.startswith("1 ms windows, peak at line rate (100 Gb/s): windows above it by "
                            "less than their timing uncertainty"), label
    (mk,) = gid_artists(ax, "peak_marker")
    assert mk.get_ydata()[0] == 100.0 and mk.get_xdata()[0] == pytest.approx(0.0015)
    assert not gid_artists(ax, "kept_out_marker")
    (line,) = data_lines(ax)
    assert np.nanmax(line.get_ydata()) == 104.0
    # without the flag: the plain label
    fig = F.plot_windows({MS: s}, peaks_gbps={MS: 100.0}, link_gbps={"line": 100.0})
    (label,) = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "peak_label"]
    assert label == "1 ms windows, peak 100 Gb/s"
