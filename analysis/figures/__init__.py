"""Draw the study's figures from data the analysis has already computed.

Every function here takes plain data (pandas objects, arrays, dicts) in the shapes of the analysis
contract (``docs/ARCHITECTURE.md``) and an optional matplotlib ``ax``, and returns the figure or
axes it drew on. None of them re-bins, detects bursts, attributes or estimates anything: the caller
passes the rebinned rates (already in Gb/s, see ``series.to_gbps``), the request table, the peak
values and the estimate numbers. That keeps each figure a pure function of its inputs, and lets the
tests check the data behind each plot (Line2D data, shaded spans, label texts, reference lines).

Figures are built on :class:`matplotlib.figure.Figure` with the non-interactive Agg canvas, never
through ``pyplot``: nothing here touches a GUI or global figure state, so the functions are safe in
a daemon, a test, a CLI and a notebook alike (a returned ``Figure`` displays inline in Jupyter).

Conventions: rates in Gb/s (1e9 bit/s); time axes in seconds (ms on zooms) relative to an origin
(by default the first request's send time); link capacities as dashed horizontal reference lines.
The figure numbers follow method.md, "Figures the study shows".

One module per family of figures, each public name importable from here as before: ``base``
(colours, the Agg figure, bound lines, kept-out windows, ``save_figure``), ``traces`` (figures 1
and 2, the per-device traffic), ``windows`` (figure 3), ``estimate`` (figures 4-6), ``cluster``
(the nodes x time heatmap and zoom). The report's zoomable plotly timeline (``timeline_html``)
is defined here: it reads ``MAX_TIMELINE_POINTS`` from this module at each call, so a caller (or
a test) sets the limit on ``rdmascope.analysis.figures`` and the report's pass and the drawing
agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..peaks import window_label  # one label format for window widths (re-exported here)
from .base import (  # noqa: F401  (re-exported; _draw_capacities, _finite_max: for the tests)
    CAPACITY_COLOR,
    FIGURE_FORMATS,
    FIRST_TOKEN_COLOR,
    KEPT_OUT_COLOR,
    PALETTE,
    PREFILL_ALPHA,
    PREFILL_COLOR,
    RATE_LABEL,
    WINDOW_COLORS,
    _draw_capacities,
    _finite_max,
    _panel_capacities,
    figure_of,
    kept_out_mask,
    kept_out_text,
    save_figure,
)
from .cluster import plot_cluster_heatmap, plot_cluster_zoom
from .estimate import plot_extra_prefill, plot_increase_vs_tokens, plot_tp_projection
from .traces import plot_comparison, plot_devices, plot_request
from .windows import plot_windows

__all__ = [
    "FIGURE_FORMATS",
    "plot_request",
    "plot_comparison",
    "plot_windows",
    "plot_extra_prefill",
    "plot_increase_vs_tokens",
    "plot_tp_projection",
    "plot_devices",
    "save_figure",
    "window_label",
    "figure_of",
    "plot_cluster_heatmap",
    "plot_cluster_zoom",
]


# ----------------------------------------------------------------------------------------------
# Zoomable timelines for the HTML report (plotly, optional)
# ----------------------------------------------------------------------------------------------

#: Most points one zoomable trace carries; longer runs keep each bucket's highest 1 ms window.
MAX_TIMELINE_POINTS = 200_000


def timeline_html(rates: Mapping[str, pd.Series | pd.DataFrame], *, origin_ns: int,
                  width_ns: int, title: str, link_gbps: Mapping[str, float] | None = None,
                  spans_s: Sequence[tuple[float, float]] = (), include_plotlyjs: bool = True,
                  div_id: str | None = None, zoom_hint: str = "") -> tuple[str, str]:
    """Return (html, note): a zoomable plotly timeline of Gb/s series, and what it shows.

    ``rates``: {legend label: Gb/s Series indexed by window start (int64 ns)} of ``width_ns``
    windows; drawn as step lines against seconds since ``origin_ns``; ``link_gbps`` reference
    lines; ``spans_s`` shaded (e.g. prefills; one filled trace, so thousands of spans cost one
    trace, not one shape each). Drag to zoom a range, the mouse wheel zooms, double-click
    resets: from the whole run down to single all-reduces. A series longer than
    ``MAX_TIMELINE_POINTS`` is drawn as its min/max envelope (``envelope.MinMaxEnvelope``, at
    most ``MAX_TIMELINE_POINTS`` points in all): per bucket the highest window (the line: every
    burst keeps its height) and a band down to the lowest. A value may also be such an envelope
    already (a DataFrame with columns ``max`` and ``min`` indexed by bucket start, its
    ``attrs["bucket_ns"]`` the bucket's span, as ``report.node_envelope`` returns), so a long
    capture never needs its windows in memory. ``note`` then says what a point stands for,
    followed by ``zoom_hint`` (how to see every window of a stretch).
    ``include_plotlyjs``: embed plotly.js (once per page; the file stays self-contained).
    Raises ``ModuleNotFoundError`` when plotly is not installed (the analysis extra).
    """
    import plotly.graph_objects as go
    import plotly.io as pio

    from ..envelope import MinMaxEnvelope, bucket_windows

    fig = go.Figure()
    note = ""
    caps = _panel_capacities(dict(link_gbps or {}))
    ceiling = caps[0][1] if caps else None
    top_values: list[float] = []
    kept_x: list[float] = []
    kept_raw: list[float] = []

    def clip(x, v):
        # the figures' rule (kept_out_mask): windows over line rate beyond their timing
        # uncertainty are not drawn at their height (which set the scale) but marked at the top
        m = kept_out_mask(v, ceiling, int(width_ns))
        if m.any():
            kept_x.extend(np.asarray(x)[m].tolist())
            kept_raw.extend(np.asarray(v)[m].tolist())
            v = np.where(m, np.nan, v)
        top_values.extend(_finite_max(v))
        return v

    for i, (label, s) in enumerate(rates.items()):
        if isinstance(s, pd.Series) and len(s) > MAX_TIMELINE_POINTS:
            t = s.index.to_numpy(np.int64)
            env = MinMaxEnvelope(start_ns=int(t[0]), end_ns=int(t[-1]) + int(width_ns),
                                 width_ns=int(width_ns), origin_ns=int(t[0]),
                                 k=bucket_windows(len(s), MAX_TIMELINE_POINTS // 2))
            env.add(t, s.to_numpy(np.float64))
            s = env.frame()
            s.attrs["bucket_ns"] = env.bucket_ns
        color = PALETTE[i % len(PALETTE)]
        if isinstance(s, pd.DataFrame):
            bucket = int(s.attrs.get("bucket_ns", width_ns))
            x = (s.index.to_numpy(np.int64) - np.int64(origin_ns)) / 1e9
            hi = clip(x, s["max"].to_numpy(np.float64))
            lo = np.where(np.isnan(hi), np.nan, s["min"].to_numpy(np.float64))
            fig.add_trace(go.Scatter(x=x, y=lo, mode="lines", showlegend=False,
                                     line={"shape": "hv", "width": 0, "color": color},
                                     hoverinfo="skip", name=f"{label} (lowest)"))
            fig.add_trace(go.Scatter(
                x=x, y=hi, mode="lines", line={"shape": "hv", "width": 1, "color": color},
                fill="tonexty", fillcolor=_rgba(color, 0.25),
                name=f"{label}: highest per {window_label(bucket)}",
                hovertemplate=(f"%{{x:.3f}} s: highest {window_label(width_ns)} window of "
                               f"{window_label(bucket)} %{{y:.1f}} Gb/s<extra></extra>")))
            note = (f"each point is the highest {window_label(width_ns)} window of "
                    f"{window_label(bucket)} (the line: every burst keeps its "
                    f"{window_label(width_ns)} height; the band reaches down to the lowest "
                    f"window){'; ' + zoom_hint if zoom_hint else ''}")
            continue
        s = s.dropna()
        t = s.index.to_numpy(np.int64)
        v = s.to_numpy(np.float64)
        x = (t - np.int64(origin_ns)) / 1e9
        v = clip(x, v)
        fig.add_trace(go.Scatter(x=x, y=v, mode="lines", line={"shape": "hv", "width": 1},
                                 name=label,
                                 hovertemplate="%{x:.4f} s: %{y:.1f} Gb/s<extra></extra>"))
    for j, (name, gbps) in enumerate(caps):  # the highest labelled above, the lower below
        fig.add_hline(y=float(gbps), line={"dash": "dash", "width": 1, "color": "#555"},
                      annotation_text=name,
                      annotation_position="top right" if j == 0 else "bottom right")
    top = max([0.0] + top_values + [g for _, g in caps])
    y_top = top * 1.12 if top > 0 else 1.0
    if kept_x:
        fig.add_trace(go.Scatter(
            x=kept_x, y=[0.985] * len(kept_x), yaxis="y2", mode="markers",
            marker={"symbol": "triangle-up", "size": 9, "color": KEPT_OUT_COLOR},
            name="kept out (over line rate)", customdata=kept_raw,
            hovertemplate="%{x:.4f} s: kept out, raw %{customdata:.1f} Gb/s<extra></extra>"))
        fig.add_annotation(text=kept_out_text(len(kept_x), max(kept_raw)), xref="paper",
                           yref="paper", x=1.0, y=1.0, xanchor="right", yanchor="bottom",
                           showarrow=False, font={"size": 11, "color": KEPT_OUT_COLOR},
                           name="kept_out_label")
    if len(spans_s):
        # one trace of rectangles on a hidden [0, 1] axis: one shape per span (add_vrect) took
        # minutes for a few thousand requests and bloated the page
        xs, ys = [], []
        for a, b in spans_s:
            xs += [a, a, b, b, None]
            ys += [0, 1, 1, 0, None]
        fig.add_trace(go.Scatter(x=xs, y=ys, yaxis="y2", mode="lines", fill="toself",
                                 fillcolor="rgba(136,136,136,0.12)", line={"width": 0},
                                 hoverinfo="skip", name="prefill (send to first token)"))
    fig.update_layout(title={"text": title, "x": 0.01}, height=420,
                      margin={"l": 60, "r": 20, "t": 50, "b": 50}, dragmode="zoom",
                      xaxis={"title": {"text": "time since capture start (s)"}},
                      yaxis={"title": {"text": RATE_LABEL}, "fixedrange": True,
                             "range": [0, y_top]},
                      yaxis2={"overlaying": "y", "range": [0, 1], "visible": False,
                              "fixedrange": True},
                      legend={"orientation": "h", "y": -0.2}, template="plotly_white")
    html = pio.to_html(fig, full_html=False, include_plotlyjs=include_plotlyjs,
                       div_id=div_id, config={"scrollZoom": True, "displaylogo": False,
                                              "responsive": True})
    return html, note


def _rgba(hex_color: str, alpha: float) -> str:
    """"#1f77b4", 0.25 -> "rgba(31,119,180,0.25)" (plotly's fill colour)."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha:g})"
