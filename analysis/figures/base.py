"""What every figure shares: colours, the Agg figure (no pyplot), axes styling, the bound lines
and their labels, the kept-out windows over line rate, and ``save_figure``.

Private helpers here are shared by the figure modules of this package only (``figures`` is a
split package, ``tests/test_import_graph.py``); outside it they stay private.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

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
    from ..curve import INSTANT_UNC_NS

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
