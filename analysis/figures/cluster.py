"""The cluster view: several hosts of one run on one time axis (the nodes x time heatmap and
the zoom where their bursts line up)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .base import (
    PALETTE,
    PREFILL_COLOR,
    RATE_LABEL,
    _as_frame,
    _draw_capacities,
    _headroom,
    _legend_above,
    _new_figure,
    _seconds,
    _step_xy,
    _style,
    figure_of,
)

# ----------------------------------------------------------------------------------------------
# The cluster view (several hosts of one run on one time axis)
# ----------------------------------------------------------------------------------------------


def plot_cluster_heatmap(
    rates_gbps: pd.DataFrame,
    *,
    requests: pd.DataFrame | None = None,
    origin_ns: int | None = None,
    max_columns: int = 1600,
    vmax_gbps: float | None = None,
    title: str | None = None,
    ax: Axes | None = None,
    order: Sequence[str] | None = None,
    max_rows: int = 40,
) -> Axes:
    """Draw a nodes x time heatmap of 1 ms rates, with the requests' prefill and decode marked.

    Fleet size: ``order`` (hosts, worst first: failing, stragglers, furthest off the median)
    sorts the rows; with more than ``max_rows`` nodes the first ``max_rows - 1`` of that order
    get a row each and the rest are folded into one last row, the **median** of their rates
    per window ("median of N other nodes"), so 256 nodes stay a readable figure (the axis label
    says so; ``ax.rdmascope_folded`` holds the number folded). The index may be coarser than
    1 ms (each value then the highest 1 ms rate of its bin): the pooled label counts in the
    index's step.

    ``rates_gbps``: Gb/s per 1 ms window on one time axis (the run set's reference clock),
    indexed by window start (int64 ns), one column per host. Longer than ``max_columns``
    windows, each pixel column shows the **highest** 1 ms rate of the windows it covers (so a
    burst never fades into an average; the colour bar says so). NaN (unknown) windows are
    grey. ``requests``: rows with ``t_send_ns``, ``t_first_ns``, ``t_last_ns`` on the same
    clock; prefill [send, first token] is drawn as a dark bar and decode [first, last token] as
    a light bar in a strip above the nodes. ``vmax_gbps``: top of the colour scale (default the
    highest value). Returns the heatmap's Axes. Raises ValueError for a frame without columns.
    """
    from matplotlib.colors import Normalize

    rates = _as_frame(rates_gbps, "plot_cluster_heatmap rates_gbps")
    if order is not None:
        rates = rates[[h for h in order if h in rates.columns]
                      + [h for h in rates.columns if h not in set(order)]]
    folded = 0
    if rates.shape[1] > max_rows:
        keep = list(rates.columns[: max_rows - 1])
        rest = rates.columns[max_rows - 1:]
        folded = len(rest)
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                med = np.nanmedian(rates[rest].to_numpy(dtype=float), axis=1)
        rates = rates[keep].copy()
        rates[f"median of {folded} other nodes"] = med
    step_ms = (float(np.median(np.diff(rates.index.to_numpy(np.int64)))) / 1e6
               if len(rates) > 1 else 1.0)
    if ax is None:
        fig, grid = _new_figure(2, 1, figsize=(11, 1.2 + 0.32 * rates.shape[1]),
                                sharex=True, height_ratios=[1, max(3, rates.shape[1])])
        strip, ax = grid[0, 0], grid[1, 0]
    else:
        strip = None
    if origin_ns is None:
        origin_ns = int(rates.index.min()) if len(rates) else 0
    v = rates.to_numpy(dtype=float).T  # hosts x windows
    t = _seconds(rates.index, origin_ns)
    width_s = float(np.median(np.diff(t))) if len(t) > 1 else 1e-3
    k = max(1, int(np.ceil(v.shape[1] / max_columns)))
    # said under the x axis: on the colour bar (a few rows tall) the long label was cut off
    pooled = "" if k == 1 and step_ms <= 1.0 else \
        f"; each column: the highest 1 ms rate of {k * step_ms:g} ms"
    if folded:
        pooled += f"; rows: worst first, the last the median of {folded} nodes"
    if k > 1:
        n = v.shape[1] // k * k
        blocks = v[:, :n].reshape(v.shape[0], -1, k)
        with np.errstate(all="ignore"):
            allnan = np.isnan(blocks).all(axis=2)
            v = np.where(allnan, np.nan, np.nanmax(np.where(np.isnan(blocks), -np.inf, blocks),
                                                   axis=2))
        t = t[:n:k]
    extent = (t[0] if len(t) else 0.0, (t[-1] if len(t) else 0.0) + width_s * k,
              v.shape[0] - 0.5, -0.5)
    top = vmax_gbps or (float(np.nanmax(v)) if np.isfinite(v).any() else 1.0)
    cmap = _cmap_with_grey_nan()
    im = ax.imshow(np.ma.masked_invalid(v), aspect="auto", interpolation="nearest",
                   extent=extent, cmap=cmap, norm=Normalize(0, max(top, 1e-9)))
    ax.set_yticks(range(rates.shape[1]), [str(c) for c in rates.columns], fontsize=8)
    ax.set_xlabel(f"time on the reference host's clock (s){pooled}")
    cb = figure_of(ax).colorbar(im, ax=ax, pad=0.01, fraction=0.03)
    cb.set_label("Gb/s (1 ms)", fontsize=8)
    if strip is not None:
        strip.set_yticks([])
        for side in ("top", "right", "left"):
            strip.spines[side].set_visible(False)
        strip.set_title(title or "1 ms RDMA rate of every node", loc="left")
        if requests is not None and len(requests):
            for _, r in requests.iterrows():
                s, f, la = ((r[c] - origin_ns) / 1e9 for c in ("t_send_ns", "t_first_ns",
                                                               "t_last_ns"))
                strip.axvspan(s, f, ymin=0.1, ymax=0.9, color=PREFILL_COLOR, alpha=0.9,
                              gid="prefill")
                strip.axvspan(f, la, ymin=0.1, ymax=0.9, color=PALETTE[0], alpha=0.35,
                              gid="decode")
            from matplotlib.patches import Patch

            _legend_above(strip, handles=[Patch(color=PREFILL_COLOR, label="prefill"),
                                          Patch(color=PALETTE[0], alpha=0.35, label="decode")])
    elif title:
        ax.set_title(title, loc="left")
    ax.rdmascope_folded = folded
    return ax


def _cmap_with_grey_nan():
    from matplotlib import colormaps

    return colormaps["viridis"].with_extremes(bad="0.8")


def plot_cluster_zoom(
    rates_gbps: pd.DataFrame,
    *,
    origin_ns: int | None = None,
    link_gbps=None,
    title: str | None = None,
    ax: Axes | None = None,
    order: Sequence[str] | None = None,
    max_lines: int = 8,
) -> Axes:
    """Overlay every node's rate over a short stretch (a zoom where the bursts line up).

    ``rates_gbps``: Gb/s per window, indexed by window start (int64 ns, one time axis), one
    column per host, already cut to the stretch to show. Time in ms from ``origin_ns`` (default
    the first window). With more than ``max_lines`` nodes, the first ``max_lines`` of ``order``
    (worst first; default the columns' order) are drawn as lines and every node as a band
    (lowest to highest per window) with the median, so the legend stays one or two rows under
    the title (``ax.rdmascope_banded``: nodes in the band). Returns the Axes. Raises ValueError
    for a frame without columns.
    """
    rates = _as_frame(rates_gbps, "plot_cluster_zoom rates_gbps")
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(10, 3.8))
        ax = grid[0, 0]
    if origin_ns is None:
        origin_ns = int(rates.index.min()) if len(rates) else 0
    peak = 0.0
    banded = 0
    if rates.shape[1] > max_lines:
        banded = rates.shape[1]
        v = rates.to_numpy(dtype=float)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo_, hi_, med = (np.nanmin(v, axis=1), np.nanmax(v, axis=1),
                             np.nanmedian(v, axis=1))
        x, y_lo = _step_xy(rates.index, lo_, origin_ns, scale=1e-3)
        _, y_hi = _step_xy(rates.index, hi_, origin_ns, scale=1e-3)
        _, y_md = _step_xy(rates.index, med, origin_ns, scale=1e-3)
        ax.fill_between(x, y_lo, y_hi, step="post", color="0.8",
                        label=f"all {banded} nodes (lowest to highest)")
        ax.plot(x, y_md, drawstyle="steps-post", lw=1.2, color="0.3",
                label=f"median of {banded} nodes")
        if np.isfinite(y_hi).any():
            peak = float(np.nanmax(y_hi))
        pick = [h for h in (order or []) if h in rates.columns][:max_lines] or \
            list(rates.columns[:max_lines])
        rates = rates[pick]
    for i, c in enumerate(rates.columns):
        x, y = _step_xy(rates.index, rates[c].to_numpy(dtype=float), origin_ns, scale=1e-3)
        ax.plot(x, y, drawstyle="steps-post", lw=1.0, alpha=0.8, label=str(c),
                color=PALETTE[i % len(PALETTE)] if i < len(PALETTE) else None)
        if np.isfinite(y).any():
            peak = max(peak, float(np.nanmax(y)))
    _draw_capacities(ax, link_gbps)
    _headroom(ax, [peak], link_gbps)
    ax.set_xlabel("time (ms) on the reference host's clock")
    ax.set_ylabel(RATE_LABEL)
    ax.set_title(title or ("Every node's bursts, aligned" if not banded else
                           f"{banded} nodes' bursts, aligned: the band holds every node, "
                           f"lines the {rates.shape[1]} worst"), loc="left", pad=20)
    n_items = rates.shape[1] + (2 if banded else 0)
    ncols = min(n_items, 8 if not banded else 5)
    rows = -(-n_items // ncols)
    ax.title.set_y(1.0)
    ax.set_title(ax.get_title(loc="left"), loc="left", pad=20 + 13 * (rows - 1))
    _legend_above(ax, ncols=ncols)
    _style(ax)
    ax.rdmascope_banded = banded
    return ax
