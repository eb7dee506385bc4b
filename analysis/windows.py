"""Windows of any width, and bytes in arbitrary ranges, of intervals in memory: the engine's
pass over them.

Windows are [origin + k x width, origin + (k+1) x width) on the one origin rule that
``intervals`` states and ``default_origin`` applies (the capture start unless given; a range
selects windows of that grid, never moves it).

One engine: ``rebin_with_quality`` is ``stream.iter_windows`` (with the over-line flagger of
``overline_pass`` registered, as every command's pass) over the intervals presented as a
capture of one segment (``stream.memory_capture``); ``integrate`` is ``RangeBytes``, the
consumer that answers ``ranges.RangeQueries``' byte ranges on a capture's segments, fed that one
segment. Neither computes a window or a range by a rule of its own.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from .curve import INSTANT_UNC_NS, CounterCurve, WindowCoverage, combine_windows
from .intervals import default_origin
from .links import group_links
from .overline_pass import OverLineFlagger, pass_hooks
from .stream import WindowGrid, iter_intervals, iter_windows, memory_capture

__all__ = ["rebin_with_quality", "rebin", "to_gbps", "integrate", "RangeBytes", "RangeIndex",
           "Coverage", "coverage_frames", "link_coverage", "window_columns"]


class Coverage(NamedTuple):
    """Per window and column, frames shaped as the windows' bytes (``rebin_with_quality(...,
    coverage=True)``, ``series.iter_rebin_capture(..., coverage=True)``):

    - ``covered_ns`` (int64): the ns of the window the readings cover, the least of the
      column's counters'; a window they leave at most ``cover_tolerance_ns`` uncovered (0.1
      ms, at most 1 %: the tolerance of ``QUALITY_PARTIAL``) counts as wholly covered (its
      width).
    - ``gbps`` (float64, Gb/s): the rate over the covered part. A wholly covered window: its
      bytes x 8 / its width. A partly covered one (``QUALITY_PARTIAL``): each counter's bytes
      x 8 / its covered ns, summed over the column. NaN where the bytes are NaN. Time without
      readings (before the first, after the last) is unknown, never zero traffic: it never
      dilutes the rate.

    The window's bytes frame holds the bytes of the covered part; a partly covered window's
    whole bytes are unknown (``window_columns`` shows them as NaN beside ``covered_bytes``).
    """

    covered_ns: pd.DataFrame
    gbps: pd.DataFrame


def coverage_frames(b: pd.DataFrame, cov: WindowCoverage) -> Coverage:
    """The ``Coverage`` frames of a block of windows: ``b`` its bytes, ``cov`` the
    ``curve.WindowCoverage`` the engine gave with it (``stream.iter_windows(coverage=True)``)."""
    return Coverage(cov.covered_ns(b), cov.gbps(b))


def link_coverage(c: Coverage, groups: dict[str, list[str]], *, keep: bool = True) -> Coverage:
    """``Coverage`` with the links of ``groups`` (twin devices of one cable) added as
    ``links.group_links`` adds them to the bytes: a link's covered ns is the least of its
    members', its rate their sum (NaN where a member's is)."""
    if not groups:
        return c
    cov = c.covered_ns.copy() if keep else pd.DataFrame(index=c.covered_ns.index)
    for link, members in groups.items():
        cov[link] = c.covered_ns[list(members)].min(axis=1)
    return Coverage(cov, group_links(c.gbps, groups, keep=keep))


def window_columns(b: pd.DataFrame, q: pd.DataFrame, c: Coverage, column: str,
                   with_bytes: bool) -> dict[str, np.ndarray]:
    """The columns a user sees for one column of windows: ``<column>_gbps`` (the rate over the
    covered part, ``Coverage.gbps``) and, with ``with_bytes``, ``<column>_bytes`` (the
    window's bytes; NaN, unknown, for a partly covered window: its uncovered part's bytes are
    unknown), ``<column>_covered_bytes`` (the bytes of the covered part) and
    ``<column>_covered_s`` (how long that part is, s). ``q``: the quality bits of ``b``."""
    from .curve import QUALITY_PARTIAL

    out = {f"{column}_gbps": c.gbps[column].to_numpy(np.float64)}
    if with_bytes:
        cb = b[column].to_numpy(np.float64)
        part = (q[column].to_numpy() & QUALITY_PARTIAL) != 0
        out[f"{column}_bytes"] = np.where(part, np.nan, cb)
        out[f"{column}_covered_bytes"] = cb
        out[f"{column}_covered_s"] = np.where(np.isnan(cb), np.nan,
                                              c.covered_ns[column].to_numpy(np.float64) / 1e9)
    return out


def rebin_with_quality(intervals: pd.DataFrame, width_ns: int, *, origin_ns: int | None = None,
                       start_ns: int | None = None, end_ns: int | None = None,
                       by: str | None = "series", line_gbps: float | dict | None = None,
                       instant_unc_ns: int = INSTANT_UNC_NS, coverage: bool = False
                       ) -> tuple:
    """Re-bin intervals to windows and also return each window's quality bits.

    Returns (bytes_df, quality_df), same index and columns (see ``rebin``); quality_df holds an
    int8 bitmask per window and group: ``QUALITY_GAP`` (gap-spread bytes), ``QUALITY_INVALID``
    (overlaps a reset/saturated/unavailable/implausible interval: NaN), ``QUALITY_PARTIAL``
    (part of the window lies outside the readings), ``QUALITY_EMPTY`` (no readings at all: NaN),
    ``QUALITY_OVER_LINE`` (the rate exceeds the line rate by more than the window's timing
    uncertainty allows, ``flag_over_line`` with ``line_gbps`` and ``instant_unc_ns``; checked
    when the line rates are known: intervals from ``byte_intervals`` on a manifest with port
    rates, or ``line_gbps`` given). Raises ``ValueError`` as ``rebin`` does.

    A partly covered window (``QUALITY_PARTIAL``) holds the bytes of its covered part: its
    bytes over its width is no rate. ``coverage``: return (bytes_df, quality_df,
    ``Coverage``): each window's covered time and its rate over the covered part, the
    numbers ``rdmascope rates`` shows (the streamed ``series.iter_rebin_capture`` gives the
    same).
    """
    src = memory_capture(intervals, by)  # raises as counters_of: no intervals, overlaps
    if not isinstance(width_ns, (int, np.integer)) or width_ns <= 0:
        raise ValueError(f"window width must be a positive integer of ns, got {width_ns!r}")
    start = min(int(p["t0_ns"][0]) for p in src.parts.values()) if start_ns is None \
        else int(start_ns)
    end = src.t_end_ns if end_ns is None else int(end_ns)
    if end <= start:
        raise ValueError(f"empty time range: start {start} ns >= end {end} ns")
    if origin_ns is None:
        origin_ns = default_origin(intervals, start_ns)
    w = int(width_ns)
    grid = WindowGrid(w, int(origin_ns), start_ns, end_ns)
    flag = None
    if line_gbps is not None or (getattr(intervals, "attrs", {}) or {}).get("line_gbps"):
        flag = OverLineFlagger(src, by=by, source=None, line_gbps=line_gbps,
                               instant_unc_ns=instant_unc_ns)
    hooks = pass_hooks([flag]) if flag is not None else {}
    # one segment: one block, every window at once
    # coverage always: a partly covered window is judged over line over its covered part
    (_, b, q, cv), = iter_windows(src, [grid], by=by, source=None, coverage=True, **hooks)
    if flag is not None:
        q = flag(b, q, w, cv.covered_ns(b) if cv.partial else None)
    b.columns.name = q.columns.name = by
    if coverage:
        return b, q, coverage_frames(b, cv)
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
    ``RangeBytes`` fed the intervals as one segment (``stream.memory_capture``).

    Raises ``ValueError`` on unequal lengths or a range with t1 < t0, and as ``rebin``.
    """
    a = np.asarray(t0_ns, dtype=np.int64).ravel()
    b = np.asarray(t1_ns, dtype=np.int64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"t0_ns and t1_ns have unequal lengths ({len(a)} and {len(b)})")
    if (b < a).any():
        i = int(np.flatnonzero(b < a)[0])
        raise ValueError(f"range {i} ends before it starts ({a[i]} > {b[i]} ns)")
    src = memory_capture(intervals, by)
    rb = RangeBytes(a, b)
    key_of = group_keys(src.counters, by, list(src.counters.index))

    def items():
        # the one segment holds each counter whole: fed and taken one counter at a time, so
        # only one counter's sums are held beside the groups'
        for parts, _ in iter_intervals(src, source=None):
            for c, iv in parts.items():
                rb.on_parts({c: iv})
                yield from rb.items(key_of, allow_partial=allow_partial)

    return range_frame(items(), b - a, by)


def group_keys(counters: pd.DataFrame, by, ids) -> dict:
    """{counter id: its group's key}: the value of column ``by`` ("total" when None; the id
    itself for "counter_id"), as the engine's pass names its columns."""
    if by is None:
        return {c: "total" for c in ids}
    return {c: (c if by == "counter_id" else counters.at[c, by]) for c in ids}


class RangeIndex:
    """The ranges [a, b] touching a span, found without looking at every range.

    ``touching(lo, hi)`` returns the sorted indices i with ``a[i] < hi`` and ``b[i] > lo``
    (the same set as ``np.flatnonzero((a < hi) & (b > lo))``). The ranges up to the 99th
    percentile of length are kept sorted by start, so only those starting within that length
    before ``lo`` are looked at; the longer ones (1 % or fewer) are checked one by one. A pass
    over a capture's segments then costs about the ranges that touch each segment, not every
    range times every segment.
    """

    def __init__(self, a, b):
        self.a = np.asarray(a, dtype=np.int64).ravel()
        self.b = np.asarray(b, dtype=np.int64).ravel()
        length = self.b - self.a
        if len(length):
            cut = np.sort(length)[int(0.99 * (len(length) - 1))]
            long = length > cut
        else:
            long = np.zeros(0, bool)
        self.long = np.flatnonzero(long)
        short = np.flatnonzero(~long)
        self.order = short[np.argsort(self.a[short], kind="stable")]
        self.a_sorted = self.a[self.order]
        self.max_len = int(length[short].max()) if len(short) else 0

    def touching(self, lo: int, hi: int) -> np.ndarray:
        """Sorted int64 indices of the ranges with ``a < hi`` and ``b > lo`` (ns)."""
        # a short range starting at or before lo - max_len ends at or before lo
        k0 = np.searchsorted(self.a_sorted, lo - self.max_len, "right")
        k1 = np.searchsorted(self.a_sorted, hi, "left")
        cand = self.order[k0:k1]
        cand = cand[self.b[cand] > lo]
        lg = self.long[(self.a[self.long] < hi) & (self.b[self.long] > lo)]
        return np.sort(np.concatenate([cand, lg])) if len(lg) else np.sort(cand)


class RangeBytes:
    """The bytes of fixed ranges [a[i], b[i]) per counter, a consumer of the engine's pass.

    Fed each file's intervals (``on_parts``, or ``add`` one counter's ``CounterCurve``), it
    evaluates every range touching them on the part inside them (``RangeIndex``) and sums a
    range's parts over the files it crosses; ``result`` combines the counters into groups by
    the window rule for ranges (``curve.combine_windows``, ``partial_nan``): NaN where a range
    overlaps a NaN interval or is not wholly covered (``allow_partial``: the covered part's
    bytes), a zero-length range inside a counter's readings 0. ``integrate`` is this fed
    intervals in memory as one segment; ``ranges.RangeQueries`` feeds it a capture's segments.
    Memory grows with the ranges and counters, not the readings.
    """

    def __init__(self, a, b):
        self.a = np.asarray(a, dtype=np.int64).ravel()
        self.b = np.asarray(b, dtype=np.int64).ravel()
        self.index: RangeIndex | None = None  # made when first needed
        self.a_max = int(self.a.max()) if len(self.a) else 0
        self.b_min = int(self.b.min()) if len(self.b) else 0
        self.acc: dict[int, list[np.ndarray]] = {}  # counter -> bytes, #NaN, #gaps, covered ns
        self.first: dict[int, int] = {}  # counter -> its first interval's start
        self.last: dict[int, int] = {}  # counter -> its last interval's end, so far
        self.taken: set[int] = set()  # counters whose sums ``items`` gave out

    def on_parts(self, parts: dict) -> None:
        """One file's intervals ({counter: arrays}, as ``stream.iter_intervals`` yields them)."""
        for c, iv in parts.items():
            if len(iv["t0_ns"]):
                self.add(c, CounterCurve(iv["t0_ns"], iv["t1_ns"], iv["bytes"], iv["flag"]))

    def add(self, c: int, cnt: CounterCurve) -> None:
        """One counter's intervals of one file (non-empty, later than those added before)."""
        plan = self._plan(c, cnt)
        if plan is not None:
            self._fold(c, plan[0], plan[1], cnt.windows(plan[2], plan[3]))

    @staticmethod
    def add_all(rbs, c: int, cnt: CounterCurve) -> None:
        """``add`` to each of several ``RangeBytes`` at once: one ``windows`` evaluation over
        all their ranges touching the intervals (a range's numbers do not depend on the others
        evaluated with it), instead of one per ``RangeBytes``."""
        plans = [(rb, rb._plan(c, cnt)) for rb in rbs]
        plans = [(rb, p) for rb, p in plans if p is not None]
        if not plans:
            return
        got = cnt.windows(np.concatenate([p[2] for _, p in plans]),
                          np.concatenate([p[3] for _, p in plans]))
        k = 0
        for rb, p in plans:
            n = len(p[2])
            rb._fold(c, p[0], p[1], tuple(x[k:k + n].copy() for x in got))
            k += n

    def _plan(self, c: int, cnt: CounterCurve):
        """(every, idx, a, b): the ranges of ``add`` touching the counter's intervals (all of
        them, or those of ``idx``), cut to them; None when none touches."""
        c0, c1 = int(cnt.t0[0]), int(cnt.t1[-1])
        self.first.setdefault(c, c0)
        self.last[c] = c1
        if len(self.a) and self.a_max < c1 and self.b_min > c0:
            idx = None  # every range touches (e.g. one segment holding every interval)
        else:
            if self.index is None:
                self.index = RangeIndex(self.a, self.b)
            idx = self.index.touching(c0, c1)
            if not len(idx):
                return None
        every = idx is None or len(idx) == len(self.a)
        a, b = (self.a, self.b) if every else (self.a[idx], self.b[idx])
        return every, idx, np.maximum(a, c0), np.minimum(b, c1)

    def _fold(self, c: int, every: bool, idx, got) -> None:
        """Add one evaluation of the planned ranges to counter c's sums."""
        x = self.acc.get(c)
        if x is None and every:
            self.acc[c] = list(got)
            return
        if x is None:
            n = len(self.a)
            x = self.acc[c] = [np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64),
                               np.zeros(n, np.int64)]
        for acc, part in zip(x, got, strict=True):
            if every:
                acc += part
            else:
                acc[idx] += part

    def items(self, key_of: dict, *, allow_partial: bool = False):
        """(group key, (bytes, #NaN, #gaps, covered ns)) of each counter fed and not taken yet,
        in counter order, as ``curve.combine_windows`` takes them; a counter's sums are
        dropped once taken (so a caller feeding whole counters one at a time holds one)."""
        a = self.a
        width = self.b - a
        n = len(a)
        for c in sorted(self.first):
            if c in self.taken:
                continue
            self.taken.add(c)
            byt, nan, gap, cov = self.acc.pop(c, None) or [
                np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64),
                np.zeros(n, np.int64)]
            # a zero-length range inside the readings holds 0 bytes (covered), not NaN
            cov = np.where((width == 0) & (a >= self.first[c]) & (a <= self.last[c]), 1, cov)
            if allow_partial:
                cov = np.where(cov > 0, np.maximum(cov, width), cov)
            yield key_of[c], (byt, nan, gap, cov)

    def result(self, key_of: dict, by, *, allow_partial: bool = False, known: bool = False):
        """One row per range (RangeIndex), one float64 column of bytes per group of the
        counters fed (``key_of``: {counter: group key}), by the window rule for ranges.
        ``known``: (that frame, the known parts' frame of ``range_frame``)."""
        return range_frame(self.items(key_of, allow_partial=allow_partial), self.b - self.a,
                           by, known=known)


def range_frame(items, width: np.ndarray, by, *, known: bool = False):
    """``RangeBytes.items`` combined into groups (``curve.combine_windows`` with
    ``partial_nan``: NaN unless wholly covered): one row per range, one column per group.

    ``known``: return (that frame, the known part's frame): per range and group the bytes
    its counters read there, without the unreadable intervals (reset, saturated, unavailable,
    implausible) and the time outside every reading, so a range whose bytes are unknown
    because one twin could not be read for 1 s still shows the other twin's bytes and the
    first one's readable part (a lower bound of the bytes: 0 for a range wholly inside
    unreadable intervals; NaN where no counter of the group has an interval in the range).
    Same shape and columns."""
    if not known:
        out, _ = combine_windows(items, width, pd.RangeIndex(len(width)), partial_nan=True)
        out.columns.name = by
        return out
    part: dict = {}  # group -> [known bytes, any of it read]

    def tee():
        for k, parts in items:
            b, _nan, _gap, cov = parts
            if k in part:
                part[k][0] += b
                part[k][1] |= cov > 0
            else:
                part[k] = [np.array(b, np.float64, copy=True), cov > 0]
            yield k, parts

    out, _ = combine_windows(tee(), width, pd.RangeIndex(len(width)), partial_nan=True)
    out.columns.name = by
    kn = pd.DataFrame({k: np.where(part[k][1], part[k][0], np.nan) for k in out.columns},
                      index=out.index, columns=out.columns.copy())
    return out, kn
