"""Figure 3: the same traffic averaged over several windows, the peak of each labelled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..peaks import window_label
from .base import (
    PALETTE,
    RATE_LABEL,
    WINDOW_COLORS,
    _as_frame,
    _capacities,
    _declutter,
    _draw_capacities,
    _draw_kept_out,
    _headroom,
    _stacked_axes,
    _step_xy,
    _style,
    kept_out_mask,
)

# ----------------------------------------------------------------------------------------------
# Figure 3: one traffic trace at several windows, peak of each labelled
# ----------------------------------------------------------------------------------------------


def plot_windows(
    rates_by_window: Mapping[int, pd.Series | pd.DataFrame],
    *,
    peaks_gbps: Mapping[int, float] | None = None,
    origin_ns: int | None = None,
    link_gbps=None,
    title: str | None = None,
    xlabel: str = "time since start (s)",
    axes: Sequence[Axes] | None = None,
    at_line_rate: Mapping[int, bool] | None = None,
) -> Figure:
    """Stack the same traffic averaged over several windows, one panel each, peaks labelled.

    Figure 3 of method.md. ``rates_by_window`` maps a window width in ns (e.g. 1_000_000,
    5_000_000, 100_000_000) to a one-column Gb/s Series/DataFrame at that width, indexed by
    window start (int64 ns). One panel per width, narrowest on top, sharing the time and rate
    axes so the fall of the peak with the window is read straight down. ``peaks_gbps`` maps the
    same widths to the peak values to label (from ``analysis.peaks``); when omitted, each label is
    the maximum of the series as passed. Each panel has a dotted line at its peak, a marker on the
    window holding the maximum, and the label "<width> windows, peak <v> Gb/s" ("peak at line
    rate (<v> Gb/s)" for a width whose ``at_line_rate`` is True: windows above the line by less
    than their timing uncertainty, drawn, the peak given as the line rate). Time axis: seconds
    since ``origin_ns`` (default: the earliest window start).

    Returns the Figure. Raises ValueError for an empty mapping, a multi-column frame, or a
    number of ``axes`` different from the number of windows.
    """
    if not rates_by_window:
        raise ValueError("plot_windows: no window given")
    frames = {}
    for width, r in rates_by_window.items():
        f = _as_frame(r, f"plot_windows rates_by_window[{width}]")
        if f.shape[1] != 1:
            raise ValueError(f"plot_windows: window {window_label(width)} has {f.shape[1]} "
                             "columns; pass one series per window (e.g. the node's total tx)")
        frames[int(width)] = f.iloc[:, 0]
    widths = sorted(frames)
    fig, axes = _stacked_axes(axes, len(widths), 1.9, 0.9, "plot_windows", "windows")
    if origin_ns is None:
        origin_ns = min(int(s.index.min()) for s in frames.values() if len(s))
    peaks = []
    for i, (width, ax) in enumerate(zip(widths, axes, strict=True)):
        s = frames[width]
        color = WINDOW_COLORS.get(width, PALETTE[i % len(PALETTE)])
        label = window_label(width)
        peak = float(peaks_gbps[width]) if peaks_gbps and width in peaks_gbps else float(s.max())
        peaks.append(peak)
        # windows above the headline peak (over line rate beyond their timing uncertainty, or
        # gap-spread: the text says "kept out") are not drawn at their height, which set the
        # scale's maximum and squashed the real bursts: clipped at the axis, marked, labelled
        kept_out = (s > peak * (1 + 1e-9)) if np.isfinite(peak) else s.isna() & False
        if np.isfinite(peak) and any(abs(g - peak) <= 1e-9 * peak
                                     for _, g in _capacities(link_gbps)):
            # a peak at a bound line is "at line rate": the windows above the bound within
            # their timing uncertainty are the headline's (drawn); beyond it, kept out
            kept_out = kept_out & pd.Series(kept_out_mask(s.to_numpy(), peak, width),
                                            index=s.index)
        drawn = s.where(~kept_out)
        x, y = _step_xy(s.index, drawn.to_numpy(), origin_ns)
        # a step line; filled only for 1 ms (single bursts) and wide windows: a filled 5 ms panel
        # of a long prefill turns the beat between the window and the ~20 ms burst period into
        # a moire that reads as a drawing bug
        beat = 1_000_000 < width < 50_000_000
        ax.plot(x, y, drawstyle="steps-post",
                linewidth=0.7 if width <= 1_000_000 else (0.6 if beat else 1.2),
                color=color, label=f"{label} windows")
        if not beat:
            ax.fill_between(x, np.nan_to_num(y), step="post", color=color, alpha=0.3,
                            linewidth=0)
        if drawn.notna().any():  # an all-unknown series (unreadable counters) has no peak
            # the marker sits at the value its label gives: the headline window, not a raw one
            # (a peak at line rate: windows above it within their uncertainty are drawn at
            # their height, the marker at the line rate the label gives)
            t_peak = (int(drawn.idxmax()) + width / 2 - origin_ns) / 1e9
            y_peak = float(drawn.max())
            if at_line_rate and at_line_rate.get(width) and np.isfinite(peak):
                y_peak = min(y_peak, peak)
            ax.plot([t_peak], [y_peak], marker="o", markersize=5, color=color,
                    markeredgecolor="black", markeredgewidth=0.6, zorder=10, gid="peak_marker",
                    linestyle="none", label="_peak")
        if kept_out.any():
            _draw_kept_out(ax, (s.index[kept_out].to_numpy(np.int64) + width / 2 - origin_ns)
                           / 1e9, s[kept_out].to_numpy(), why="over line rate or gap-spread")
        ax.axhline(peak, color="black", linestyle=":", linewidth=1.0, zorder=1.6, gid="peak_line")
        if not np.isfinite(peak):
            peak_text = "unknown (no readable window)"
        elif at_line_rate and at_line_rate.get(width):
            peak_text = (f"peak at line rate ({peak:.0f} Gb/s): windows above it by less than "
                         "their timing uncertainty")
        else:
            peak_text = f"peak {peak:.0f} Gb/s"
        text = f"{label} windows, {peak_text}"
        if beat:
            text += ("\nstep line: a window holds a whole burst, part of one or none, so the "
                     "values beat with the burst period")
        ax.annotate(text, xy=(0.0, 1.0),
                    xycoords="axes fraction", xytext=(4, -3), textcoords="offset points",
                    ha="left", va="top", fontsize=9, fontweight="bold", gid="peak_label",
                    bbox={"boxstyle": "round,pad=0.25", "facecolor": "white",
                          "edgecolor": color, "alpha": 0.9})
        _draw_capacities(ax, link_gbps)
        ax.set_ylabel(RATE_LABEL)
        _style(ax)
    _headroom(axes[0], peaks, link_gbps)
    axes[-1].set_xlabel(xlabel)
    axes[0].set_title(title or "The averaging window decides the peak", loc="left")
    _declutter(fig)
    return fig
