"""Counters to bytes, and bytes to windows of any width: the public face of the exact core.

The work is done one layer down (docs/ARCHITECTURE.md): ``intervals`` (counters -> intervals,
the flags and the model of the module docstring there), ``curve`` (the cumulative byte curve and
the window rule), ``windows`` (``rebin``, ``rebin_with_quality``, ``integrate``, ``to_gbps`` in
memory), ``overline`` / ``overline_pass`` (windows over line rate), ``links`` (twin devices) and
``stream`` (the engine: a capture segment by segment). This module adds what needs both the
in-memory and the streamed side: ``byte_intervals`` of a loaded ``Capture`` or a
``stream.CaptureInfo``, and ``iter_rebin_capture`` / ``rebin_capture``, and re-exports the rest
under the names the analysis has always used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from . import intervals as _iv
from .curve import (
    COVER_TOLERANCE_NS,
    HEADLINE_EXCLUDE,
    INSTANT_UNC_NS,
    QUALITY_EMPTY,
    QUALITY_GAP,
    QUALITY_INVALID,
    QUALITY_OVER_LINE,
    QUALITY_PARTIAL,
    cover_tolerance_ns,
)
from .intervals import (
    DEFAULT_GAP_FACTOR,
    DEFAULT_MAX_GBPS,
    FLAGS,
    PLAUSIBLE_FACTOR,
    default_origin,
    plausible_gbps,
)
from .links import group_links, twin_links
from .load import Capture
from .overline import (
    OVER_LINE_CAUSES,
    flag_over_line,
    line_gbps_of,
    line_rate_lines,
    line_rates,
    over_line_causes,
    window_low_bytes,
)
from .overline_pass import OverLineFlagger, flag_over_line_capture
from .stream import WindowGrid, byte_intervals_streamed, iter_windows, open_capture
from .windows import (
    Coverage,
    coverage_frames,
    integrate,
    link_coverage,
    rebin,
    rebin_with_quality,
    to_gbps,
    window_columns,
)

__all__ = [
    "FLAGS",
    "QUALITY_GAP",
    "QUALITY_INVALID",
    "QUALITY_PARTIAL",
    "QUALITY_EMPTY",
    "QUALITY_OVER_LINE",
    "INSTANT_UNC_NS",
    "OVER_LINE_CAUSES",
    "line_gbps_of",
    "line_rates",
    "line_rate_lines",
    "window_low_bytes",
    "flag_over_line",
    "over_line_causes",
    "flag_over_line_capture",
    "OverLineFlagger",
    "DEFAULT_GAP_FACTOR",
    "DEFAULT_MAX_GBPS",
    "PLAUSIBLE_FACTOR",
    "plausible_gbps",
    "byte_intervals",
    "default_origin",
    "rebin",
    "rebin_with_quality",
    "to_gbps",
    "integrate",
    "group_links",
    "twin_links",
    "iter_rebin_capture",
    "rebin_capture",
    "COVER_TOLERANCE_NS",
    "HEADLINE_EXCLUDE",
    "cover_tolerance_ns",
    "Coverage",
    "coverage_frames",
    "link_coverage",
    "window_columns",
]


def byte_intervals(capture: Capture, *, counters=None, source: str | None = "infiniband",
                   gap_factor: float = DEFAULT_GAP_FACTOR,
                   max_gbps: float | None = None) -> pd.DataFrame:
    """``intervals.byte_intervals`` of a loaded ``Capture``, or of a ``stream.CaptureInfo``
    (``stream.open_capture``: no readings in memory), whose intervals are then made segment by
    segment (``stream.byte_intervals_streamed``) with the same result and only the intervals'
    memory. Arguments, result and errors as ``intervals.byte_intervals``.
    """
    if not hasattr(capture, "readings"):  # a stream.CaptureInfo: read segment by segment
        return byte_intervals_streamed(capture, counters=counters, source=source,
                                       gap_factor=gap_factor, max_gbps=max_gbps)
    return _iv.byte_intervals(capture, counters=counters, source=source, gap_factor=gap_factor,
                              max_gbps=max_gbps)


# ----------------------------------------------------------------------------------------------
# Chunked path over stream.iter_windows (bounded memory for day-long captures)
# ----------------------------------------------------------------------------------------------


def iter_rebin_capture(path: str | os.PathLike, width_ns: int, *, origin_ns: int | None = None,
                       start_ns: int | None = None, end_ns: int | None = None,
                       by: str | None = "series", source: str | None = "infiniband",
                       gap_factor: float = DEFAULT_GAP_FACTOR, max_gbps: float | None = None,
                       batch_rows: int = 1 << 20, progress: Callable[[int], None] | None = None,
                       coverage: bool = False, **hooks) -> Iterator[tuple]:
    """Re-bin a capture segment by segment, yielding finished windows in bounded memory.

    Same result as ``rebin_with_quality(byte_intervals(load_capture(path)), ...)`` with the
    same origin, through ``stream.iter_windows``: one segment at a time, keeping only the windows
    not yet final (about one segment's), whatever the capture length. ``batch_rows`` is kept for
    compatibility and ignored (a segment is the unit read). ``start_ns``/``end_ns``: only the
    windows overlapping this range, reading only the segments around it (``--from/--to``). ``origin_ns``
    defaults to the capture's start (manifest); ``gap_factor`` and ``max_gbps`` as
    ``byte_intervals``. ``progress`` is called with the intervals settled per segment (about
    its readings). ``hooks``: consumers registered on the pass (``on_parts``, ``on_final``,
    ``on_horizon``, ``hold_files`` of ``stream.iter_windows``; e.g.
    ``overline_pass.pass_hooks([flagger])``). Yields (bytes_df, quality_df) blocks in time order; concatenate them, or reduce
    each (e.g. a running maximum) for a day at 1 ms. ``coverage``: yields (bytes_df,
    quality_df, ``windows.Coverage``): each window's covered time and rate over its covered
    part (as ``rebin_with_quality(..., coverage=True)``).
    Raises the loader errors of ``load_capture`` and ``ValueError`` as ``rebin`` does.
    """
    if not isinstance(width_ns, (int, np.integer)) or width_ns <= 0:
        raise ValueError(f"window width must be a positive integer of ns, got {width_ns!r}")
    info = open_capture(path)
    origin = info.t_start_ns if origin_ns is None else int(origin_ns)
    grid = WindowGrid(int(width_ns), origin, start_ns, end_ns)
    for _, b, q, *cov in iter_windows(info, [grid], by=by, source=source,
                                      gap_factor=gap_factor, max_gbps=max_gbps,
                                      progress=progress, coverage=coverage, **hooks):
        yield (b, q, coverage_frames(b, cov[0])) if coverage else (b, q)


def rebin_capture(path: str | os.PathLike, width_ns: int, **kwargs) -> tuple[pd.DataFrame,
                                                                               pd.DataFrame]:
    """Re-bin a whole capture through the chunked path; return (bytes_df, quality_df).

    Keyword arguments as ``iter_rebin_capture``. The reading side runs in bounded memory; the
    result itself has one row per window (a day at 1 s is 86,400 rows; for a day at 1 ms
    consume ``iter_rebin_capture`` block by block instead). Windows before the first reading
    (between the origin and it) are left out.
    """
    blocks = list(iter_rebin_capture(path, width_ns, **kwargs))
    if not blocks:
        raise ValueError(f"{path}: no intervals to re-bin (fewer than two valid readings)")
    b = pd.concat([x[0] for x in blocks])
    q = pd.concat([x[1] for x in blocks])
    keep = (q & QUALITY_EMPTY).eq(0).any(axis=1).to_numpy()
    first = int(np.argmax(keep)) if keep.any() else len(keep)
    return b.iloc[first:], q.iloc[first:]

