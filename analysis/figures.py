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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .peaks import window_label  # one label format for window widths (re-exported here)

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
]

#: File formats :func:`save_figure` (and ``rdmascope plot -o``) can write.
FIGURE_FORMATS = ("png", "svg", "pdf")

RATE_LABEL = "rate (Gb/s)"
PREFILL_COLOR = "0.55"  # grey, as in the study's figures
PREFILL_ALPHA = 0.18
FIRST_TOKEN_COLOR = "#c0392b"
CAPACITY_COLOR = "0.25"
#: One colour per configuration / window / device, in order.
PALETTE = ("#1f77b4", "#e07b00", "#2ca02c", "#9467bd", "#8c564b", "#17becf")
#: Colours for windows by width, so 1 ms is always the same pale blue, 100 ms the same dark red.
WINDOW_COLORS = {1_000_000: "#8fb8de", 5_000_000: "#e07b00", 10_000_000: "#2ca02c",
                 100_000_000: "#b2182b", 1_000_000_000: "#333333"}


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _new_figure(nrows: int = 1, ncols: int = 1, *, figsize=(10, 4), sharex=False, sharey=False,
                height_ratios=None):
    """Create an Agg-backed figure with a grid of axes (no pyplot)."""
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    gridspec_kw = {"height_ratios": height_ratios} if height_ratios else None
    axes = fig.subplots(nrows, ncols, sharex=sharex, sharey=sharey, squeeze=False,
                        gridspec_kw=gridspec_kw)
    return fig, axes


def _stacked_axes(axes, n: int, row_in: float, extra_in: float, who: str, what: str):
    """(figure, list of ``n`` axes): the given ``axes`` (their count checked: ``ValueError``
    naming ``who`` and ``what``), else a new column of ``n`` axes sharing x and y, 10 inches wide
    and ``row_in`` inches per row plus ``extra_in``."""
    if axes is None:
        _, grid = _new_figure(n, 1, figsize=(10, row_in * n + extra_in), sharex=True, sharey=True)
        axes = list(grid[:, 0])
    elif len(axes) != n:
        raise ValueError(f"{who}: {n} {what} but {len(axes)} axes")
    return _figure_of(axes[0]), list(axes)


def _legend_above(ax: Axes, **kw):
    """Place the legend above the axes, right-aligned, in one row (never over the data)."""
    handles, labels = kw.pop("handles", None), None
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    kw.setdefault("ncols", len(handles))
    return ax.legend(handles=handles, **({"labels": labels} if labels else {}), loc="lower right",
                     bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False, borderaxespad=0.2,
                     handlelength=1.6, columnspacing=1.2, **kw)


def figure_of(ax: Axes) -> Figure:
    """Return the top-level Figure an Axes belongs to."""
    fig = ax.get_figure()
    while fig is not None and not isinstance(fig, Figure) and hasattr(fig, "get_figure"):
        fig = fig.get_figure()
    return fig


_figure_of = figure_of


def _style(ax: Axes) -> None:
    ax.grid(True, which="major", color="0.88", linewidth=0.7)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _as_frame(rates: pd.Series | pd.DataFrame, what: str) -> pd.DataFrame:
    """Return ``rates`` as a DataFrame indexed by int64 ns window start; check the shape."""
    if isinstance(rates, pd.Series):
        rates = rates.to_frame(name=rates.name if rates.name is not None else "rate")
    if not isinstance(rates, pd.DataFrame):
        raise TypeError(f"{what}: expected a pandas Series or DataFrame of Gb/s indexed by window "
                        f"start (int64 ns), got {type(rates).__name__}")
    if rates.shape[1] == 0:
        raise ValueError(f"{what}: no series to plot (the DataFrame has no columns)")
    if len(rates) and not np.issubdtype(rates.index.dtype, np.integer):
        raise ValueError(f"{what}: index must be window starts in int64 ns, got dtype "
                         f"{rates.index.dtype}")
    return rates


def _seconds(index_ns, origin_ns: int) -> np.ndarray:
    return (np.asarray(index_ns, dtype=np.int64) - np.int64(origin_ns)) / 1e9


def _capacities(link_gbps) -> list[tuple[str, float]]:
    """Normalise a capacity spec (None, a number, a sequence, or {label: Gb/s}) to (label, Gb/s)."""
    if link_gbps is None:
        return []
    if isinstance(link_gbps, Mapping):
        return [(str(k), float(v)) for k, v in link_gbps.items()]
    if np.isscalar(link_gbps):
        return [(f"{float(link_gbps):g} Gb/s link", float(link_gbps))]
    return [(f"{float(v):g} Gb/s link", float(v)) for v in link_gbps]


def _panel_capacities(link_gbps) -> list[tuple[str, float]]:
    """The bound lines that matter for one panel: the highest (the port rate: the most the
    node's path carries) and the lowest (the lowest physical bound of that path, e.g. one PCIe
    x4 path), each once (a second line at the same rate is dropped). Lines in between (a twin's
    PCIe link bound between the path and the port) are left out: they cluttered the panel with
    overlapping labels and bound nothing the two others do not."""
    caps = sorted(_capacities(link_gbps), key=lambda c: c[1])
    if len(caps) <= 2:
        out = caps
    else:
        out = [caps[0], caps[-1]]
    seen, keep = set(), []
    for label, g in sorted(out, key=lambda c: -c[1]):
        if g in seen:
            continue
        seen.add(g)
        keep.append((label, g))
    return keep


def _draw_capacities(ax: Axes, link_gbps) -> list:
    """Draw the panel's bound lines (``_panel_capacities``) dashed, each labelled once at the
    right edge: the highest above its line, the lower one below its own, so the two labels
    never print over each other (``_declutter`` moves any that still touch another label)."""
    lines = []
    caps = _panel_capacities(link_gbps)
    for i, (label, gbps) in enumerate(caps):
        line = ax.axhline(gbps, color=CAPACITY_COLOR, linestyle=(0, (5, 3)), linewidth=0.9,
                          zorder=1.5)
        line.set_gid("capacity")
        line.set_label("_" + label)  # kept off the legend; the text below names it
        below = i > 0  # caps run from the highest down: only the highest is labelled above
        ax.annotate(label, xy=(1.0, gbps), xycoords=("axes fraction", "data"),
                    xytext=(-3, -2 if below else 2), textcoords="offset points", ha="right",
                    va="top" if below else "bottom", fontsize=8, color=CAPACITY_COLOR,
                    gid="capacity_label")
        lines.append(line)
    return lines


#: Labels ``_declutter`` never moves.
_FIXED_LABELS = ("kept_out_label", "peak_label")


def _declutter(fig: Figure) -> None:
    """Move each axes' small labels (bound lines, "zoom below", rounds) down until none
    overlaps another label text.

    Measured on the laid-out figure (``get_window_extent`` with the canvas' renderer); the
    kept-out label and figure 3's peak label stay where they are (at the clipped top), the
    others give way, the highest first.
    """
    get_renderer = getattr(getattr(fig, "canvas", None), "get_renderer", None)
    if fig is None or get_renderer is None:
        return
    fig.draw_without_rendering()  # the layout engine places the axes first
    renderer = get_renderer()
    px_per_pt = fig.dpi / 72.0
    for ax in fig.axes:
        texts = [t for t in ax.texts if t.get_visible() and t.get_text()]
        fixed = [t for t in texts if t.get_gid() in _FIXED_LABELS]
        movable = sorted((t for t in texts if t.get_gid() not in _FIXED_LABELS),
                         key=lambda t: -t.get_window_extent(renderer).y1)
        placed = [t.get_window_extent(renderer) for t in fixed]
        for t in movable:
            for _ in range(20):
                box = t.get_window_extent(renderer)
                hit = [bb for bb in placed if box.overlaps(bb)]
                if not hit:
                    break
                dy = box.y1 - min(bb.y0 for bb in hit) + 1.0  # pixels to move down
                x, y = t.get_position()
                t.set_position((x, y - dy / px_per_pt))
            placed.append(t.get_window_extent(renderer))


#: Shown beside the markers of windows kept out of the headline (``_draw_kept_out``).
KEPT_OUT_COLOR = "#c0392b"


def kept_out_mask(values, ceiling_gbps: float | None, width_ns: int, *,
                  instant_unc_ns: int | None = None) -> np.ndarray:
    """Return a boolean array: which windows a figure draws as kept out of the headline.

    ``values``: Gb/s per window (array-like, any shape) of ``width_ns`` windows;
    ``ceiling_gbps``: the most the drawn path carries (the port rate of the node's cable,
    ``_panel_capacities``' highest line); None or NaN: nothing is kept out. The rule of
    ``overline.flag_over_line`` on rates alone: a window is over line rate when even its fewest
    possible bytes -- its rate over the window less the readings' instant uncertainty at each
    edge (``curve.INSTANT_UNC_NS``, 0.1 ms, by default) -- exceed what the line carries in the
    whole window. A window above the ceiling within that uncertainty stays drawn (``peaks``
    headlines it "at line rate"). Raises nothing; NaN windows are never kept out.
    """
    from .curve import INSTANT_UNC_NS

    v = np.asarray(values, dtype=float)
    if ceiling_gbps is None or not np.isfinite(float(ceiling_gbps)) or width_ns <= 0:
        return np.zeros(v.shape, dtype=bool)
    u = INSTANT_UNC_NS if instant_unc_ns is None else int(instant_unc_ns)
    low_share = max(float(width_ns) - 2.0 * u, 0.0) / float(width_ns)
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(v * low_share, nan=-np.inf) > float(ceiling_gbps)


def kept_out_text(n: int, raw_max_gbps: float, why: str = "over line rate") -> str:
    """The label beside kept-out markers: how many, the highest raw value, why, clipped."""
    return f"{int(n)} window(s) kept out (up to {float(raw_max_gbps):.0f} Gb/s: {why}; clipped)"


def _draw_kept_out(ax: Axes, x, raw_gbps, *, why: str = "over line rate") -> None:
    """Mark kept-out windows at the axis top: a red marker per window at ``x`` (data units)
    clipped at the top of the rate axis (never drawn at its height, which set the scale's
    maximum), and one label saying how many were kept out, up to which raw Gb/s, and why."""
    x = np.asarray(x, dtype=float)
    raw = np.asarray(raw_gbps, dtype=float)
    if not len(x):
        return
    ax.plot(x, np.ones(len(x)), transform=ax.get_xaxis_transform(), marker="^",
            markersize=6, color=KEPT_OUT_COLOR, linestyle="none", clip_on=False, zorder=11,
            gid="kept_out_marker", label="_kept_out")
    ax.annotate(kept_out_text(len(x), float(np.nanmax(raw)), why), xy=(1.0, 1.0),
                xycoords="axes fraction", xytext=(-4, -3), textcoords="offset points",
                ha="right", va="top", fontsize=8, color=KEPT_OUT_COLOR, gid="kept_out_label")


def _clip_kept_out(rates: pd.DataFrame, width_ns: int, link_gbps):
    """(drawn, kept) of a Gb/s frame: kept-out windows (``kept_out_mask`` against the panel's
    highest bound line) NaN in ``drawn``; ``kept`` the mask frame."""
    caps = _panel_capacities(link_gbps)
    ceiling = caps[0][1] if caps else None
    mask = kept_out_mask(rates.to_numpy(), ceiling, width_ns)
    kept = pd.DataFrame(mask, index=rates.index, columns=rates.columns)
    return rates.where(~kept), kept


def _width_of(index_ns) -> int:
    """The window width of a regular int64-ns index (its smallest step), 0 when unknown."""
    t = np.asarray(index_ns, dtype=np.int64)
    if len(t) < 2:
        return 0
    d = np.diff(t)
    d = d[d > 0]
    return int(d.min()) if len(d) else 0


def _finite_max(a) -> list[float]:
    """[the highest finite value of ``a``] for ``_headroom``, or [] when it has none (an
    unreadable counter's all-NaN rates: no warning, no axis from NaN)."""
    v = np.asarray(a, dtype=float).ravel()
    v = v[np.isfinite(v)]
    return [float(v.max())] if len(v) else []


def _headroom(ax: Axes, values: Sequence[float], link_gbps) -> None:
    """Set the rate axis from 0 to a bit above the highest value or capacity."""
    top = max([0.0] + [float(v) for v in values if np.isfinite(v)]
              + [g for _, g in _panel_capacities(link_gbps)])
    ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)


def _merge_spans(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping [start, end] spans (drawing only: one grey band per busy prefill)."""
    out: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in spans if np.isfinite(a) and np.isfinite(b)):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _check_columns(df: pd.DataFrame, needed: Sequence[str], what: str) -> None:
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing}; got {list(df.columns)}")


def _step_xy(index_ns, values, origin_ns: int, scale: float = 1.0):
    """x (window starts, in s/scale) and y for a steps-post line, with the last window closed."""
    x = _seconds(index_ns, origin_ns) / scale
    y = np.asarray(values, dtype=float)
    if len(x) >= 2:
        x = np.append(x, x[-1] + (x[-1] - x[-2]))
        y = np.append(y, y[-1])
    return x, y


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
) -> Figure:
    """Stack the same traffic averaged over several windows, one panel each, peaks labelled.

    Figure 3 of method.md. ``rates_by_window`` maps a window width in ns (e.g. 1_000_000,
    5_000_000, 100_000_000) to a one-column Gb/s Series/DataFrame at that width, indexed by
    window start (int64 ns). One panel per width, narrowest on top, sharing the time and rate
    axes so the fall of the peak with the window is read straight down. ``peaks_gbps`` maps the
    same widths to the peak values to label (from ``analysis.peaks``); when omitted, each label is
    the maximum of the series as passed. Each panel has a dotted line at its peak, a marker on the
    window holding the maximum, and the label "<width> peak: <v> Gb/s". Time axis: seconds since
    ``origin_ns`` (default: the earliest window start).

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
            t_peak = (int(drawn.idxmax()) + width / 2 - origin_ns) / 1e9
            ax.plot([t_peak], [float(drawn.max())], marker="o", markersize=5, color=color,
                    markeredgecolor="black", markeredgewidth=0.6, zorder=10, gid="peak_marker",
                    linestyle="none", label="_peak")
        if kept_out.any():
            _draw_kept_out(ax, (s.index[kept_out].to_numpy(np.int64) + width / 2 - origin_ns)
                           / 1e9, s[kept_out].to_numpy(), why="over line rate or gap-spread")
        ax.axhline(peak, color="black", linestyle=":", linewidth=1.0, zorder=1.6, gid="peak_line")
        peak_text = f"peak {peak:.0f} Gb/s" if np.isfinite(peak) else "unknown (no readable window)"
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
    ys = [np.nan_to_num(rates[c].to_numpy(dtype=float)) for c in rates.columns]
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(ys))]
    ax.stackplot(x, *ys, labels=[str(c) for c in rates.columns], colors=colors, alpha=0.85,
                 step="post", linewidth=0)
    _draw_capacities(ax, link_gbps)
    _headroom(ax, [float(np.sum([y.max() for y in ys]))] if len(x) else [], link_gbps)
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


# ----------------------------------------------------------------------------------------------
# Saving
# ----------------------------------------------------------------------------------------------


def save_figure(fig_or_ax: Figure | Axes, path: str | Path, *, dpi: int = 150) -> Path:
    """Write a figure to ``path`` as PNG, SVG or PDF (chosen by the suffix); return the path.

    Creates missing parent directories. Raises ValueError for any other suffix.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"{path}: unsupported figure format {path.suffix!r}; "
                         f"use one of {', '.join('.' + f for f in FIGURE_FORMATS)}")
    fig = _figure_of(fig_or_ax) if isinstance(fig_or_ax, Axes) else fig_or_ax
    if not isinstance(fig.canvas, FigureCanvasAgg) and fmt == "png":
        FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt, dpi=dpi)
    return path


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


__all__ += ["plot_cluster_heatmap", "plot_cluster_zoom"]


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

    from .envelope import MinMaxEnvelope, bucket_windows

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
