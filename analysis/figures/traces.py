"""Traffic over time: figure 1 (one request at 1 ms, zoom inside the prefill), figure 2 (the
configurations stacked on one time axis) and the per-device stacked traffic (the emulation
check at a glance)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .base import (
    FIRST_TOKEN_COLOR,
    PALETTE,
    PREFILL_ALPHA,
    PREFILL_COLOR,
    RATE_LABEL,
    _as_frame,
    _check_columns,
    _clip_kept_out,
    _declutter,
    _draw_capacities,
    _draw_kept_out,
    _figure_of,
    _finite_max,
    _headroom,
    _legend_above,
    _merge_spans,
    _new_figure,
    _panel_capacities,
    _seconds,
    _stacked_axes,
    _step_xy,
    _style,
    _width_of,
)

# ----------------------------------------------------------------------------------------------
# Figure 1: one request at 1 ms, with a zoom inside the prefill
# ----------------------------------------------------------------------------------------------


def plot_request(
    rates_gbps: pd.Series | pd.DataFrame,
    *,
    t_send_ns: int,
    t_first_ns: int,
    t_last_ns: int | None = None,
    zoom_ms: float | None = 200.0,
    zoom_start_ns: int | None = None,
    link_gbps=None,
    title: str | None = None,
    ax: Axes | None = None,
    zoom_ax: Axes | None = None,
) -> Figure:
    """Draw one request's traffic (1 ms windows) with the prefill shaded and the first token marked.

    Figure 1 of method.md. ``rates_gbps``: Gb/s per window, indexed by window start (int64 ns on
    the capture clock), one column per series (e.g. one node's summed ``tx``), as returned by
    ``to_gbps(rebin(...))``. The prefill ``[t_send_ns, t_first_ns)`` is shaded grey, the first
    token is a vertical line, and the decode runs to ``t_last_ns`` if given. The time axis is
    seconds since ``t_send_ns``.

    The zoom panel shows ``zoom_ms`` milliseconds (200 by default) inside the prefill, starting at
    ``zoom_start_ns`` or, by default, centred in the prefill (clipped to it when the prefill is
    shorter), in ms since send; its extent is outlined on the overview. ``zoom_ms=None`` draws no
    zoom. With ``ax`` given, the overview goes there and the zoom only if ``zoom_ax`` is given too.

    Returns the Figure. Raises ValueError if ``t_first_ns < t_send_ns``, ``zoom_start_ns`` lies
    outside the prefill ``[t_send_ns, t_first_ns)`` (when a zoom is drawn), or the data has the
    wrong shape.
    """
    rates = _as_frame(rates_gbps, "plot_request rates_gbps")
    t_send_ns, t_first_ns = int(t_send_ns), int(t_first_ns)
    if t_first_ns < t_send_ns:
        raise ValueError(f"plot_request: t_first_ns ({t_first_ns}) is before t_send_ns ({t_send_ns})")
    if (zoom_start_ns is not None and zoom_ms is not None and zoom_ms > 0
            and not t_send_ns <= int(zoom_start_ns) < t_first_ns):
        raise ValueError(f"plot_request: zoom start {(int(zoom_start_ns) - t_send_ns) / 1e9:g} s "
                         f"after the send is outside the prefill (0 to "
                         f"{(t_first_ns - t_send_ns) / 1e9:.3f} s after the send)")
    want_zoom = zoom_ms is not None and zoom_ms > 0
    if ax is None:
        if want_zoom:
            fig, axes = _new_figure(2, 1, figsize=(10, 6.2), height_ratios=[1, 1])
            ax, zoom_ax = axes[0, 0], axes[1, 0]
        else:
            fig, axes = _new_figure(1, 1, figsize=(10, 3.6))
            ax = axes[0, 0]
    fig = _figure_of(ax)
    if zoom_ax is None:
        want_zoom = False

    origin = t_send_ns
    multi = rates.shape[1] > 1
    width = _width_of(rates.index)
    # windows over line rate beyond their timing uncertainty (kept out of every headline) are
    # clipped at the axis top with a marker and a label, as in figure 3: drawn at their height
    # (344, 673 Gb/s on a 200 Gb/s link) they set the scale and squashed the real bursts
    drawn_all, kept = _clip_kept_out(rates, width, link_gbps)
    for i, col in enumerate(rates.columns):
        x, y = _step_xy(rates.index, drawn_all[col], origin)
        ax.plot(x, y, drawstyle="steps-post", linewidth=0.6, color=PALETTE[i % len(PALETTE)],
                label=str(col) if multi else f"{col} (1 ms windows)")
    any_kept = kept.any(axis=1).to_numpy()
    if any_kept.any():
        _draw_kept_out(ax, (rates.index[any_kept].to_numpy(np.int64) + width / 2 - origin) / 1e9,
                       rates.to_numpy(dtype=float)[kept.to_numpy()])
    prefill_s = (t_first_ns - t_send_ns) / 1e9
    ax.axvspan(0.0, prefill_s, color=PREFILL_COLOR, alpha=PREFILL_ALPHA, linewidth=0,
               label=f"prefill (TTFT {prefill_s:.2f} s)", gid="prefill")
    ax.axvline(prefill_s, color=FIRST_TOKEN_COLOR, linewidth=1.2, label="first token",
               gid="first_token")
    if t_last_ns is not None:
        ax.axvline((int(t_last_ns) - origin) / 1e9, color=FIRST_TOKEN_COLOR, linewidth=0.9,
                   linestyle=":", label="last token", gid="last_token")
    _draw_capacities(ax, link_gbps)
    _headroom(ax, _finite_max(drawn_all.to_numpy()), link_gbps)
    ax.set_xlabel("time since request sent (s)")
    ax.set_ylabel(RATE_LABEL)
    ax.set_title(title or "One request: prefill bursts, first token, steady decode", loc="left", pad=20)
    _legend_above(ax)
    _style(ax)

    if want_zoom:
        width_ns = int(round(zoom_ms * 1e6))
        prefill_ns = t_first_ns - t_send_ns
        if zoom_start_ns is None:
            if prefill_ns <= width_ns:
                z0, z1 = t_send_ns, t_first_ns
            else:
                z0 = t_send_ns + (prefill_ns - width_ns) // 2
                z1 = z0 + width_ns
        else:
            z0, z1 = int(zoom_start_ns), int(zoom_start_ns) + width_ns
        ax.axvspan((z0 - origin) / 1e9, (z1 - origin) / 1e9, facecolor="none",
                   edgecolor="black", linewidth=1.0, gid="zoom_extent", label="_zoom")
        ax.annotate("zoom below", xy=((z1 - origin) / 1e9, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(3, -2), textcoords="offset points", ha="left", va="top", fontsize=8)
        inside = (rates.index >= z0) & (rates.index < z1)
        sel = drawn_all[inside]
        sel_kept = kept[inside]
        for i, col in enumerate(sel.columns):
            x, y = _step_xy(sel.index, sel[col], origin, scale=1e-3)
            zoom_ax.plot(x, y, drawstyle="steps-post", linewidth=1.0,
                         color=PALETTE[i % len(PALETTE)], label=str(col))
            zoom_ax.fill_between(x, y, step="post", color=PALETTE[i % len(PALETTE)], alpha=0.25,
                                 linewidth=0)
        if z0 < t_first_ns <= z1:
            zoom_ax.axvline((t_first_ns - origin) / 1e6, color=FIRST_TOKEN_COLOR, linewidth=1.2,
                            gid="first_token")
        zk = sel_kept.any(axis=1).to_numpy()
        if zk.any():
            _draw_kept_out(zoom_ax, (sel.index[zk].to_numpy(np.int64) + width / 2 - origin) / 1e6,
                           rates[inside].to_numpy(dtype=float)[sel_kept.to_numpy()])
        _draw_capacities(zoom_ax, link_gbps)
        _headroom(zoom_ax, _finite_max(sel.to_numpy()), link_gbps)
        zoom_ax.set_xlim((z0 - origin) / 1e6, (z1 - origin) / 1e6)
        zoom_ax.set_xlabel("time since request sent (ms)")
        zoom_ax.set_ylabel(RATE_LABEL)
        zoom_ax.set_title(f"Zoom: {(z1 - z0) / 1e6:.0f} ms inside the prefill, 1 ms windows "
                          "(each burst is one all-reduce)", loc="left", fontsize=10)
        _style(zoom_ax)
    _declutter(fig)
    return fig


# ----------------------------------------------------------------------------------------------
# Figure 2: two configurations on one shared time axis
# ----------------------------------------------------------------------------------------------


def plot_comparison(
    rates_gbps: Mapping[str, pd.Series | pd.DataFrame],
    requests: Mapping[str, pd.DataFrame],
    *,
    link_gbps: Mapping[str, object] | None = None,
    title: str | None = None,
    axes: Sequence[Axes] | None = None,
    lows_gbps: Mapping[str, pd.Series] | None = None,
) -> Figure:
    """Draw each configuration's traffic in its own panel, stacked, on one shared time axis.

    Figure 2 of method.md. ``rates_gbps`` maps a configuration label (e.g. "200 Gb/s",
    "emulated 100 Gb/s"; first key on top) to its Gb/s rates over the whole test (all rounds),
    indexed by window start in int64 ns. ``requests`` maps the same labels to that test's request
    table (columns ``t_send_ns``, ``t_first_ns``, optional ``round``). Each panel's time axis is
    seconds since its own first send, so the rounds of both configurations line up; the x and y
    axes are shared. Each round's prefill (the union of its requests' ``[t_send, t_first]``) is
    shaded grey and ends at the (last) first token, marked by a red line per request.
    ``link_gbps`` maps a label to its capacity spec (a number, a list, or {label: Gb/s}).
    ``lows_gbps``: for a long test drawn as a min/max envelope (``envelope.MinMaxEnvelope``),
    per label the lowest window of each column, on the index of ``rates_gbps[label]`` (which
    then holds each column's highest window): the band between the two is shaded (gid
    "envelope"), the line is the highest.

    Returns the Figure. Raises ValueError when the labels of the two mappings differ or a request
    table lacks a column.
    """
    labels = list(rates_gbps)
    if not labels:
        raise ValueError("plot_comparison: no configuration given")
    if set(labels) != set(requests):
        raise ValueError(f"plot_comparison: rates are given for {labels} but requests for "
                         f"{list(requests)}; the labels must match")
    fig, axes = _stacked_axes(axes, len(labels), 2.6, 0.6, "plot_comparison", "configurations")
    link_gbps = link_gbps or {}
    top_values = []
    for i, (label, ax) in enumerate(zip(labels, axes, strict=True)):
        rates = _as_frame(rates_gbps[label], f"plot_comparison rates_gbps[{label!r}]")
        req = requests[label]
        _check_columns(req, ["t_send_ns", "t_first_ns"], f"plot_comparison requests[{label!r}]")
        if len(req) == 0:
            raise ValueError(f"plot_comparison requests[{label!r}]: no requests")
        origin = int(req["t_send_ns"].min())
        color = PALETTE[i % len(PALETTE)]
        width = _width_of(rates.index)
        raw = rates
        rates, kept = _clip_kept_out(rates, width, link_gbps.get(label))
        any_kept = kept.any(axis=1).to_numpy()
        if any_kept.any():
            _draw_kept_out(ax, (raw.index[any_kept].to_numpy(np.int64) + width / 2 - origin) / 1e9,
                           raw.to_numpy(dtype=float)[kept.to_numpy()])
        for j, col in enumerate(rates.columns):
            x, y = _step_xy(rates.index, rates[col], origin)
            ax.plot(x, y, drawstyle="steps-post", linewidth=0.6,
                    color=color if j == 0 else PALETTE[(i + j + 2) % len(PALETTE)],
                    label=str(col))
        low = (lows_gbps or {}).get(label)
        if low is not None and len(rates):
            xl, yl = _step_xy(low.index, low.to_numpy(dtype=float), origin)
            _, yh = _step_xy(rates.index, rates.iloc[:, 0].to_numpy(dtype=float), origin)
            band = ax.fill_between(xl, yl, yh, step="post", color=color, alpha=0.25,
                                   linewidth=0)
            band.set_gid("envelope")
        top_values.extend(_finite_max(rates.to_numpy()))
        rounds = req["round"] if "round" in req.columns else pd.Series(0, index=req.index)
        for rnd, group in req.groupby(rounds.to_numpy(), sort=True):
            spans = _merge_spans(list(zip(_seconds(group["t_send_ns"], origin),
                                          _seconds(group["t_first_ns"], origin), strict=True)))
            for a, b in spans:
                ax.axvspan(a, b, color=PREFILL_COLOR, alpha=PREFILL_ALPHA, linewidth=0,
                           gid="prefill")
            if "round" in req.columns and spans:
                ax.annotate(f"round {rnd}", xy=(spans[0][0], 1.0), xycoords=("data", "axes fraction"),
                            xytext=(2, -2), textcoords="offset points", ha="left", va="top",
                            fontsize=8, color="0.3")
        for t in _seconds(req["t_first_ns"], origin):
            ax.axvline(t, color=FIRST_TOKEN_COLOR, linewidth=0.8, gid="first_token")
        _draw_capacities(ax, link_gbps.get(label))
        ax.set_ylabel(RATE_LABEL)
        ax.set_title(label, loc="left", fontsize=10, fontweight="bold")
        _style(ax)
    caps = [g for lbl in labels for _, g in _panel_capacities(link_gbps.get(lbl))]
    _headroom(axes[0], top_values + caps, None)
    axes[-1].set_xlabel("time since the test's first request was sent (s)")
    # A proxy legend once, on the top panel: grey = prefill, red = first token.
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    _legend_above(axes[0], handles=[Patch(color=PREFILL_COLOR, alpha=0.4, label="prefill"),
                                    Line2D([], [], color=FIRST_TOKEN_COLOR, label="first token")])
    _declutter(fig)
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    return fig



# ----------------------------------------------------------------------------------------------
# Per-device (twin) stacked traffic: the emulation check at a glance
# ----------------------------------------------------------------------------------------------


def plot_devices(
    rates_gbps: pd.DataFrame,
    *,
    origin_ns: int | None = None,
    link_gbps=None,
    verdict: str | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Stack the traffic of each RDMA device (the twin PCIe paths of one port) over time.

    ``rates_gbps``: Gb/s per window, indexed by window start (int64 ns), one column per device
    series (e.g. "rocep1s0f1/tx", "roceP2p1s0f1/tx"), as from ``to_gbps(rebin(...))``. The areas
    are stacked in column order, so the top edge is the port total; on an NCCL_IB_HCA emulation
    one colour carries everything and the other stays flat at zero. ``link_gbps``: capacity
    reference lines (e.g. {"one PCIe x4 path ~109 Gb/s": 109, "port 200 Gb/s": 200}).
    ``verdict``: a short text (from ``analysis.verify``) shown under the title.

    Returns the Axes. Raises ValueError for a frame without columns.
    """
    rates = _as_frame(rates_gbps, "plot_devices rates_gbps")
    if ax is None:
        fig, grid = _new_figure(1, 1, figsize=(10, 3.8))
        ax = grid[0, 0]
    if origin_ns is None:
        origin_ns = int(rates.index.min()) if len(rates) else 0
    x = _seconds(rates.index, origin_ns)
    # unknown is never zero: a window where a device's bytes are unknown is not stacked (a gap,
    # never drawn as 0 Gb/s) and is shaded as unknown
    vals = rates.to_numpy(dtype=float)
    unknown = np.isnan(vals).any(axis=1) if vals.size else np.zeros(len(rates), bool)
    ys = [np.where(unknown, np.nan, vals[:, j]) for j in range(vals.shape[1])]
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(ys))]
    w = _width_of(rates.index) / 1e9
    # each window drawn from its start to its end (the last one and those next to a gap too)
    xs, ys_ = (np.column_stack([x, x + w]).ravel(), [np.repeat(y, 2) for y in ys]) if w > 0 \
        else (x, ys)
    ax.stackplot(xs, *ys_, labels=[str(c) for c in rates.columns], colors=colors, alpha=0.85,
                 linewidth=0)
    if unknown.any():
        for k, (a, b) in enumerate(_merge_spans([(t, t + w) for t in x[unknown]])):
            ax.axvspan(a, b, facecolor="0.9", edgecolor="0.6", hatch="//", linewidth=0,
                       gid="unknown", label="unknown (no reading)" if k == 0 else None)
    _draw_capacities(ax, link_gbps)
    _headroom(ax, [float(np.sum([m for y in ys for m in _finite_max(y)]))] if len(x) else [],
              link_gbps)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(RATE_LABEL)
    ax.set_title(title or "Traffic per RDMA device (twin PCIe paths of one port), stacked",
                 loc="left", pad=20)
    if verdict:
        ax.text(0.0, 1.0, verdict, transform=ax.transAxes, ha="left", va="top", fontsize=9,
                gid="verdict", bbox={"boxstyle": "round,pad=0.3", "facecolor": "white",
                                     "edgecolor": "0.7"})
    _legend_above(ax)
    _style(ax)
    return ax
