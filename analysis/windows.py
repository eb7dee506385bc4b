"""Re-binning intervals in memory: windows of any width, and bytes in arbitrary ranges.

Windows are [origin + k x width, origin + (k+1) x width) on the one origin rule that
``intervals`` states and ``default_origin`` applies (the capture start unless given; a range
selects windows of that grid, never moves it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .curve import INSTANT_UNC_NS, combine_windows, counters_of, grid_edges
from .intervals import default_origin
from .overline import flag_over_line

__all__ = ["rebin_with_quality", "rebin", "to_gbps", "integrate"]


def rebin_with_quality(intervals: pd.DataFrame, width_ns: int, *, origin_ns: int | None = None,
                       start_ns: int | None = None, end_ns: int | None = None,
                       by: str | None = "series", line_gbps: float | dict | None = None,
                       instant_unc_ns: int = INSTANT_UNC_NS
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Re-bin intervals to windows and also return each window's quality bits.

    Returns (bytes_df, quality_df), same index and columns (see ``rebin``); quality_df holds an
    int8 bitmask per window and group: ``QUALITY_GAP`` (gap-spread bytes), ``QUALITY_INVALID``
    (overlaps a reset/saturated/unavailable/implausible interval: NaN), ``QUALITY_PARTIAL``
    (part of the window lies outside the readings), ``QUALITY_EMPTY`` (no readings at all: NaN),
    ``QUALITY_OVER_LINE`` (the rate exceeds the line rate by more than the window's timing
    uncertainty allows, ``flag_over_line`` with ``line_gbps`` and ``instant_unc_ns``; checked
    when the line rates are known: intervals from ``byte_intervals`` on a manifest with port
    rates, or ``line_gbps`` given). Raises ``ValueError`` as ``rebin`` does.
    """
    counters = counters_of(intervals, by)
    if origin_ns is None:
        origin_ns = default_origin(intervals, start_ns)
    edges = grid_edges(counters, width_ns, origin_ns, start_ns, end_ns)
    index = pd.Index(edges[:-1], name="window_start_ns")
    b, q = combine_windows(((k, spec.build().edges(edges, step=int(width_ns))) for k, spec in counters),
                    int(width_ns),
                    index)
    if line_gbps is not None or (getattr(intervals, "attrs", {}) or {}).get("line_gbps"):
        q = flag_over_line(intervals, b, q, int(width_ns), by=by, line_gbps=line_gbps,
                           instant_unc_ns=instant_unc_ns)
    b.columns.name = q.columns.name = by
    return b, q


def rebin(intervals: pd.DataFrame, width_ns: int, *, origin_ns: int | None = None,
          start_ns: int | None = None, end_ns: int | None = None,
          by: str | None = "series") -> pd.DataFrame:
    """Re-bin byte intervals to windows of ``width_ns``, spreading each interval by overlap.

    Windows are [origin + k x width, origin + (k+1) x width) for every k whose window overlaps
    [start_ns, end_ns) (defaults: ``start_ns`` = the first interval's start, ``end_ns`` = the
    last interval's end; ``origin_ns`` = the capture start from
    ``intervals.attrs["t_start_ns"]`` as set by ``byte_intervals``, else the first interval's
    start, never ``start_ns``: see ``default_origin``; the same windows as ``rebin_capture`` and ``rdmascope
    rates``). Each interval's bytes go to the windows it overlaps in proportion to the
    overlap (method.md, "The sampler"), computed exactly as differences of the piecewise-linear
    cumulative byte curve at the window edges, so the windows of a range sum to the counter
    difference across it (to float rounding, < 1e-6 bytes per window).

    ``by``: a column of ``intervals`` to sum counters by ("series" default, "device",
    "direction", "counter_id") or None for one "total" column.

    Returns a DataFrame: index ``window_start_ns`` (int64 ns), one float64 column of bytes per
    group. NaN where the window overlaps a reset/saturated/unavailable/implausible interval or
    has no reading around it (never zero). Raises ``ValueError`` on a non-positive width, an empty
    range, no intervals or overlapping intervals of one counter.
    """
    return rebin_with_quality(intervals, width_ns, origin_ns=origin_ns, start_ns=start_ns,
                              end_ns=end_ns, by=by)[0]


def to_gbps(bytes_df, width_ns: int | float):
    """Convert bytes per window of ``width_ns`` to Gb/s (1e9 bit/s): bytes x 8 / width_ns.

    Works on a DataFrame, Series or array of any shape; NaN stays NaN.
    """
    if width_ns <= 0:
        raise ValueError(f"window width must be positive, got {width_ns!r}")
    return bytes_df * 8.0 / float(width_ns)


def integrate(intervals: pd.DataFrame, t0_ns, t1_ns, *, by: str | None = "series",
              allow_partial: bool = False) -> pd.DataFrame:
    """Return the bytes of each series inside arbitrary ranges [t0_ns[i], t1_ns[i]).

    Shapes: ``t0_ns``, ``t1_ns`` int64 arrays of length n (any order, may overlap) -> DataFrame
    of n rows (RangeIndex) x one column per group (``by`` as in ``rebin``), float64 bytes, each
    interval counted in proportion to its overlap with the range (method.md, "The sampler";
    the attribution of requests uses this). A range overlapping a reset/saturated/unavailable/
    implausible interval is NaN; a range not entirely covered by readings is NaN unless ``allow_partial``
    (then the covered part's bytes; still NaN when nothing is covered). Gap-spread bytes count.

    Raises ``ValueError`` on unequal lengths or a range with t1 < t0.
    """
    a = np.asarray(t0_ns, dtype=np.int64).ravel()
    b = np.asarray(t1_ns, dtype=np.int64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"t0_ns and t1_ns have unequal lengths ({len(a)} and {len(b)})")
    if (b < a).any():
        i = int(np.flatnonzero(b < a)[0])
        raise ValueError(f"range {i} ends before it starts ({a[i]} > {b[i]} ns)")
    counters = counters_of(intervals, by)
    width = b - a
    def parts():
        for k, spec in counters:
            yield k, one(spec.build())

    def one(c):
        byt, nan, gap, cov = c.windows(a, b)
        # a zero-length range inside the readings holds 0 bytes (covered), not NaN
        cov = np.where((width == 0) & (a >= c.t0[0]) & (a <= c.t1[-1]), 1, cov)
        if allow_partial:
            cov = np.where(cov > 0, np.maximum(cov, width), cov)
        return byt, nan, gap, cov

    out, _ = combine_windows(parts(), width, pd.RangeIndex(len(a)), partial_nan=True)
    out.columns.name = by
    return out


