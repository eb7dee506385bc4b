"""Figures 4-6: the measured extra prefill time against the estimate, the increase against
prompt tokens, and the projected TTFT increase against TP size."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .base import (
    PALETTE,
    _check_columns,
    _new_figure,
    _style,
)

# ----------------------------------------------------------------------------------------------
# Figures 4-6: measured vs estimated
# ----------------------------------------------------------------------------------------------


def plot_extra_prefill(
    table: pd.DataFrame,
    *,
    test: str = "test",
    measured: str = "extra_prefill_s",
    measured_min: str | None = "extra_prefill_min_s",
    measured_max: str | None = "extra_prefill_max_s",
    estimate: str = "estimate_s",
    title: str | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Draw the extra prefill time per test as grouped bars: measured (mean, min-max) vs estimate.

    Figure 4 of method.md. ``table`` has one row per test with the column names given by the
    keyword arguments (seconds): the measured mean extra prefill time, optionally its min and max
    over rounds (drawn as an error bar when both columns exist), and the estimate (the upper bound
    of method.md, "The estimate"). Bars are labelled with their values.

    Returns the Axes. Raises ValueError when a required column is missing.
    """
    _check_columns(table, [test, measured, estimate], "plot_extra_prefill table")
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(8, 4))
        ax = grid[0, 0]
    x = np.arange(len(table))
    w = 0.38
    meas = table[measured].to_numpy(dtype=float)
    est = table[estimate].to_numpy(dtype=float)
    yerr = None
    if measured_min in table.columns and measured_max in table.columns:
        lo = table[measured_min].to_numpy(dtype=float)
        hi = table[measured_max].to_numpy(dtype=float)
        yerr = np.vstack([meas - lo, hi - meas])
    b1 = ax.bar(x - w / 2, meas, w, color=PALETTE[0], label="measured (mean of rounds, min-max)",
                yerr=yerr, capsize=3, error_kw={"linewidth": 0.9})
    b2 = ax.bar(x + w / 2, est, w, color="none", edgecolor=PALETTE[1], hatch="///", linewidth=1.2,
                label="estimate (upper bound)")
    ax.bar_label(b1, labels=[f"{v:.2f}" for v in meas], fontsize=8, padding=2)
    ax.bar_label(b2, labels=[f"{v:.2f}" for v in est], fontsize=8, padding=2)
    ax.set_xticks(x, [str(t) for t in table[test]])
    ax.set_xlabel("test")
    ax.set_ylabel("extra prefill time (s)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_title(title or "Extra prefill time per test: measured vs estimate", loc="left")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    _style(ax)
    ax.margins(y=0.12)
    return ax


def plot_increase_vs_tokens(
    measured: pd.DataFrame,
    estimate: pd.DataFrame | Mapping[str, pd.DataFrame],
    *,
    tokens: str = "prompt_tokens",
    increase: str = "increase_s",
    estimate_col: str = "estimate_s",
    label: str | None = "test",
    title: str | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Draw the prefill-time increase against prompt tokens: measured points, estimated line(s).

    Figure 5 of method.md. ``measured`` has one row per round with ``tokens`` (prompt tokens,
    summed over the requests of a multi-request round) and ``increase`` (seconds); when the column
    ``label`` (default "test") exists, points are grouped and labelled by it. ``estimate`` is a
    DataFrame with ``tokens`` and ``estimate_col`` (seconds) drawn as a line, or a mapping
    {legend label: such DataFrame} for several bounds (e.g. "to 100 Gb/s", "to 109 Gb/s").
    x axis in thousands of prompt tokens, y in seconds.

    Returns the Axes. Raises ValueError when a required column is missing.
    """
    _check_columns(measured, [tokens, increase], "plot_increase_vs_tokens measured")
    estimates = estimate if isinstance(estimate, Mapping) else {"estimate (upper bound)": estimate}
    for name, est in estimates.items():
        _check_columns(est, [tokens, estimate_col], f"plot_increase_vs_tokens estimate[{name!r}]")
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(8, 4.2))
        ax = grid[0, 0]
    for i, (name, est) in enumerate(estimates.items()):
        e = est.sort_values(tokens)
        ax.plot(e[tokens].to_numpy(dtype=float) / 1e3, e[estimate_col].to_numpy(dtype=float),
                color=PALETTE[(i + 1) % len(PALETTE)], linestyle="--" if i else "-",
                linewidth=1.5, marker=None, label=name, gid="estimate")
    if label and label in measured.columns:
        groups = list(measured.groupby(label, sort=False))
    else:
        groups = [("measured", measured)]
    markers = "osD^v<>ph"
    for i, (name, g) in enumerate(groups):
        ax.plot(g[tokens].to_numpy(dtype=float) / 1e3, g[increase].to_numpy(dtype=float),
                linestyle="none", marker=markers[i % len(markers)], markersize=6,
                markerfacecolor=PALETTE[0], markeredgecolor="black", markeredgewidth=0.5,
                alpha=0.85, label=f"measured {name}" if len(groups) > 1 else "measured (per round)",
                gid="measured")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("prompt tokens (thousands)")
    ax.set_ylabel("prefill-time increase (s)")
    ax.set_xlim(left=0)
    ax.set_title(title or "Prefill-time increase vs prompt tokens", loc="left")
    ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=2)
    _style(ax)
    return ax


def plot_tp_projection(
    projection: pd.DataFrame | pd.Series,
    *,
    ylabel: str = "projected TTFT increase (%)",
    title: str | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Draw the projected TTFT increase against TP size, one line per column.

    Figure 6 of method.md (an illustration from the estimate). ``projection`` is indexed by TP
    size (e.g. 2, 4, 8, 16) with one column per scenario (e.g. per link change or prompt length)
    holding the projected increase (percent by default; pass ``ylabel`` for seconds). The x axis
    is logarithmic in base 2 with a tick at each TP size; each point is labelled with its value.

    Returns the Axes. Raises ValueError for an empty table.
    """
    if isinstance(projection, pd.Series):
        projection = projection.to_frame(name=projection.name or "projection")
    if projection.empty:
        raise ValueError("plot_tp_projection: the projection table is empty")
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(8, 4.4))
        ax = grid[0, 0]
    tp = projection.index.to_numpy(dtype=float)
    for i, col in enumerate(projection.columns):
        y = projection[col].to_numpy(dtype=float)
        ax.plot(tp, y, marker="o", color=PALETTE[i % len(PALETTE)], linewidth=1.6, label=str(col))
        # Value labels: the first line's above its points, the others' below, so they never meet.
        above = i == 0
        for xv, yv in zip(tp, y, strict=True):
            ax.annotate(f"{yv:.1f}", xy=(xv, yv), xytext=(0, 6 if above else -7),
                        textcoords="offset points", ha="center", va="bottom" if above else "top",
                        fontsize=8, color=PALETTE[i % len(PALETTE)], gid="value_label")
    ax.set_xscale("log", base=2)
    ax.set_xticks(tp, [f"TP{int(v)}" for v in tp])
    ax.minorticks_off()
    ax.set_xlabel("tensor-parallel size")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, float(np.nanmax(projection.to_numpy(dtype=float))) * 1.15)
    ax.set_title(title or "Projected TTFT increase vs TP size", loc="left")
    if projection.shape[1] > 1 or projection.columns[0] != "projection":
        ax.legend(loc="upper left", fontsize=8, frameon=False)
    _style(ax)
    return ax
