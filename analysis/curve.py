"""Intervals to windows, the exact core: one counter's cumulative byte curve and the window rule.

A counter's cumulative bytes are the piecewise-linear curve through its readings (method.md,
"The sampler"); the bytes of a window [a, b) are F(b) - F(a) (``CounterCurve``). ``combine_windows``
sums per-counter window parts into group columns with the quality bits (``QUALITY_*``): NaN
where an interval is NaN or nothing is covered, never zero. The engine (``stream``'s windows,
``windows.RangeBytes``' ranges) uses these, and the in-memory functions
(``windows.rebin_with_quality``, ``windows.integrate``) are the engine over one segment, so a
window is computed by one rule everywhere. The parts of that rule the recorder's live
peak gauges apply too (the intervals a window touches, a gap across its edge, its cover
tolerance, the instant uncertainty) are stated in ``rdmascope.counters``, numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rdmascope.counters import (
    COVER_TOLERANCE_NS,
    INSTANT_UNC_NS,
    cover_tolerance_ns,
    overlapping,
    strictly_across,
)

from .intervals import FLAG_GAP, FLAGS, IS_NAN_FLAG

__all__ = ["QUALITY_GAP", "QUALITY_INVALID", "QUALITY_PARTIAL", "QUALITY_EMPTY",
           "QUALITY_OVER_LINE", "HEADLINE_EXCLUDE", "INSTANT_UNC_NS", "COVER_TOLERANCE_NS",
           "CounterCurve", "CurveSpec", "counters_of", "counter_rows", "cover_tolerance_ns",
           "combine_windows", "WindowCoverage"]

#: Window quality bits (``rebin_with_quality``).
QUALITY_GAP = 1  #: a gap (missed sweeps) crosses one of the window's edges: bytes split by assumption
QUALITY_INVALID = 2  #: the window overlaps a NaN-flagged interval (see NAN_FLAGS): bytes NaN
QUALITY_PARTIAL = 4  #: part of the window is outside every interval (capture edges)
QUALITY_EMPTY = 8  #: no interval overlaps the window at all: bytes NaN
#: the window's rate exceeds its line rate by more than its timing uncertainty allows (see
#: ``flag_over_line``): bytes kept, never a headline peak
QUALITY_OVER_LINE = 16

# INSTANT_UNC_NS (0.1 ms: each reading's instant beyond its read bracket) and
# COVER_TOLERANCE_NS / cover_tolerance_ns (how much of a window may go uncovered and it is still
# full, ``combine_windows``) are stated in ``rdmascope.counters``, for the live gauges too.
#: Quality bits that keep a window out of every headline peak (``peaks.headline_peak``): partial
#: or empty windows, NaN readings, gap-spread bytes and windows over line rate.
HEADLINE_EXCLUDE = (QUALITY_PARTIAL | QUALITY_EMPTY | QUALITY_INVALID | QUALITY_GAP
                    | QUALITY_OVER_LINE)


class CounterCurve:
    """One counter's intervals, sorted and non-overlapping, with the precomputed cumulative sums."""

    __slots__ = ("t0", "t1", "b", "cb", "dur", "cdur", "nan_t0", "nan_t1", "gap_t0", "gap_t1",
                 "unc", "solid")

    def __init__(self, t0: np.ndarray, t1: np.ndarray, b: np.ndarray, flag: np.ndarray,
                 unc: np.ndarray | None = None):
        self.t0, self.t1 = t0, t1
        self.unc = unc  # per interval: max of its two readings' half-brackets (ns), or None
        n = len(t0)
        nan = np.isnan(b)
        if flag.any():  # only flags other than "ok" (0) make bytes unknown
            nan |= IS_NAN_FLAG[flag]
        if nan.any():
            self.b = np.where(nan, 0.0, b)
            self.nan_t0, self.nan_t1 = t0[nan], t1[nan]
        else:
            self.b = np.asarray(b, np.float64)
            self.nan_t0 = self.nan_t1 = t0[:0]
        # the cumulative sums written in place after a leading 0 (same sums, no extra copy)
        self.cb = np.empty(n + 1)
        self.cb[0] = 0.0
        np.cumsum(self.b, out=self.cb[1:])
        self.dur = t1 - t0
        self.cdur = np.empty(n + 1, self.dur.dtype if n else np.int64)
        self.cdur[0] = 0
        self.solid = False
        if n and (t0[1:] == t1[:-1]).all():
            # consecutive intervals (each starts where the last ended, as a counter's readings
            # make them): the covered time up to an interval's end is the same integer as the
            # running sum of durations, without the sequential sum
            np.subtract(t1, t0[0], out=self.cdur[1:])
            # and of positive durations: the covered time up to any instant is the time since
            # the first reading, clipped to the span (``cum``)
            self.solid = bool((self.dur > 0).all())
        else:
            np.cumsum(self.dur, out=self.cdur[1:])
        g = flag == FLAG_GAP
        if g.any():
            self.gap_t0, self.gap_t1 = t0[g], t1[g]
        else:
            self.gap_t0 = self.gap_t1 = t0[:0]

    def ends_before(self, e: np.ndarray, step: int | None = None) -> np.ndarray:
        """Per instant e (sorted): how many intervals end at or before it (``searchsorted(t1, e,
        "right")``). ``step``: e is the regular grid e[0] + k x step, except that its first and
        last edge may be cut to a range (``_GridAcc`` with ``clip``); then counted in linear
        time (each interval's first edge at or after its end, ceil((t1 - e[0]) / step), in
        exact integer arithmetic, histogrammed and summed), which equals the binary search."""
        m = len(e)
        if step is None or m < 64:
            return np.searchsorted(self.t1, e, side="right")
        step = int(step)
        j = np.empty(m, np.int64)
        a = 1 if e[1] - e[0] != step else 0  # a first edge cut to the range start
        b = m - 1 if e[-1] - e[-2] != step else m  # a last edge cut to the range end
        if a:
            j[0] = np.searchsorted(self.t1, e[0], side="right")
        if b < m:
            j[-1] = np.searchsorted(self.t1, e[-1], side="right")
        r0, r1 = int(e[a]), int(e[b - 1])
        # intervals ending at or before r0 count for every edge; those ending after the last
        # edge for none; the rest from the first edge at or after their end
        lo, hi = np.searchsorted(self.t1, [r0, r1], side="right")
        k = self.t1[lo:hi] - r0
        k = np.negative(np.floor_divide(np.negative(k, out=k), step, out=k), out=k)
        jr = j[a:b]
        np.cumsum(np.bincount(k, minlength=b - a)[:b - a], out=jr)
        jr += lo
        return j

    def cum(self, e: np.ndarray, step: int | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Cumulative bytes (whole intervals, partial interval) and covered ns (same) at e.

        ``step``: e is a regular grid of this step (see ``ends_before``).

        For consecutive intervals of positive duration (``solid``: a counter read without a
        hole, as the sampler's readings make them) the covered ns comes whole as the third part
        (the time since the first reading, clipped to the span: the same integers) and the
        fourth is zero, read-only and zero-strided (``is_zero``; ``edges`` skips it); the bytes
        are the same floats either way."""
        n = len(self.t0)
        j = self.ends_before(e, step)  # intervals ending at or before e
        jj = np.minimum(j, n - 1)
        if self.solid and len(e) >= _SOLID_MIN:
            num = e - self.t0[jj]
            frac = np.divide(num, self.dur[jj])
            frac[(j >= n) | (num <= 0)] = 0.0  # past the last interval or before its start
            cov = np.clip(e - self.t0[0], 0, self.cdur[-1])
            return self.cb[j], self.b[jj] * frac, cov, _zeros(len(e), np.int64)
        t0j = self.t0[jj]
        inside = (j < n) & (t0j < e)
        num = np.where(inside, e - t0j, 0)
        d = self.dur[jj]
        frac = np.divide(num, d, out=np.zeros(len(e)), where=inside & (d > 0))
        return self.cb[j], self.b[jj] * frac, self.cdur[j], num

    def at(self, e: np.ndarray) -> np.ndarray:
        """Cumulative bytes F at each instant e (NaN intervals counted as 0)."""
        full, part, _, _ = self.cum(e)
        return full + part

    def edge_unc(self, e: np.ndarray) -> np.ndarray:
        """Timing uncertainty (ns) of the readings bracketing each instant e (0 if unknown)."""
        if self.unc is None:
            return np.zeros(len(e), np.int64)
        j = np.minimum(np.searchsorted(self.t1, e, side="left"), len(self.t0) - 1)
        return self.unc[j]

    def windows(self, a: np.ndarray, b: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per range [a, b): (bytes without NaN intervals, #NaN intervals, #gaps, covered ns)."""
        fa, pa_, ca, na = self.cum(a)
        fb, pb, cb, nb = self.cum(b)
        byt = (fb - fa) + (pb - pa_)
        cov = (cb - ca) + (nb - na)
        nan = overlapping(self.nan_t0, self.nan_t1, a, b)
        gap = self._gap_across(a) + self._gap_across(b)
        return byt, nan, gap, cov

    def _gap_across(self, x: np.ndarray) -> np.ndarray:
        """Per instant x: 1 if a gap interval lies strictly across it (t0 < x < t1), else 0.
        The gap intervals are sorted and disjoint, so #(t0 < x) - #(t1 <= x) counts them."""
        if not len(self.gap_t0):
            return np.zeros(len(x), np.int64)
        return strictly_across(self.gap_t0, self.gap_t1, x)

    def edges(self, e: np.ndarray, block: int = 1 << 19, step: int | None = None,
              cums: tuple | None = None, keep: list | None = None, out: tuple | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Same as ``windows`` for contiguous windows between consecutive edges.

        Evaluated in blocks of ``block`` edges so the temporaries stay small (and in cache);
        returns (bytes float64, overlaps-NaN bool, holds-gap bool, covered ns int64).
        ``step``: the edges are the regular grid e[0] + k x step (a faster exact count).
        ``cums``: ``cum(e)`` already known (e.g. taken from a finer grid's edges: ``cum`` is
        evaluated edge by edge, so a subset of its values is exactly ``cum`` of the subset).
        ``keep``: a list that receives ``cum(e)`` when it was computed in one block.
        ``out``: four arrays of len(e) - 1 to write the result into (returned; overlaps-NaN and
        holds-gap as 0/1 in their dtype).
        """
        m = len(e) - 1
        byt = np.empty(m) if out is None else out[0]
        cov = np.empty(m, np.int64) if out is None else out[3]
        if keep is not None and m > block:
            keep = None
        for s in range(0, m, block):
            ee = e[s:min(m, s + block) + 1]
            if cums is not None:
                f, p, c, nn = (x[s:s + len(ee)] for x in cums)
            else:
                f, p, c, nn = self.cum(ee, step)
                if keep is not None:
                    keep.append((f, p, c, nn))
            np.subtract(f[1:], f[:-1], out=byt[s:s + len(ee) - 1])
            byt[s:s + len(ee) - 1] += np.diff(p)
            np.subtract(c[1:], c[:-1], out=cov[s:s + len(ee) - 1])
            if not is_zero(nn):
                cov[s:s + len(ee) - 1] += np.diff(nn)
        a, b = e[:-1], e[1:]
        if len(self.nan_t0):
            nan = overlapping(self.nan_t0, self.nan_t1, a, b) > 0
        else:
            nan = np.zeros(m, bool) if out is None else 0
        if len(self.gap_t0):  # a gap across either edge of the window (see _gap_across)
            cross = self._gap_across(e) > 0
            gap = cross[:-1] | cross[1:]
        else:
            gap = np.zeros(m, bool) if out is None else 0
        if out is None:
            return byt, nan, gap, cov
        out[1][...] = nan
        out[2][...] = gap
        return out


#: ``CounterCurve.cum`` takes the covered time whole from this many instants on (below it the
#: two-part sum is as fast)
_SOLID_MIN = 64


def _zeros(n: int, dtype=np.float64) -> np.ndarray:
    """n zeros that take no memory (one value, stride 0, read-only: ``is_zero``)."""
    return np.broadcast_to(np.zeros(1, dtype), (n,))


def is_zero(a: np.ndarray) -> bool:
    """True for the zero-strided zeros ``CounterCurve.cum`` returns for a part it does not use."""
    return a.ndim == 1 and a.strides == (0,) and len(a) > 0 and not a.flags.writeable


class CurveSpec:
    """A counter's sorted interval arrays (views); ``build()`` makes the heavy ``CounterCurve``.

    Kept lazy so that re-binning holds the cumulative arrays of one counter at a time.
    """

    __slots__ = ("t0", "t1", "b", "flag", "unc")

    def __init__(self, t0, t1, b, flag, unc):
        self.t0, self.t1, self.b, self.flag, self.unc = t0, t1, b, flag, unc

    def build(self) -> CounterCurve:
        return CounterCurve(self.t0, self.t1, self.b, self.flag, self.unc)


def counters_of(intervals: pd.DataFrame, by, with_unc: bool = False
                 ) -> list[tuple[Any, CurveSpec]]:
    """Split intervals per counter (each sorted, checked non-overlapping) with their group key.

    ``with_unc``: also carry each interval's timing uncertainty (for ``peak_bounds``).
    """
    return _split(intervals, by, with_unc)[0]


def counter_rows(intervals: pd.DataFrame, by) -> tuple[list, np.ndarray, np.ndarray]:
    """``counters_of``'s split with where it came from: ([(CurveSpec, row positions: a slice
    when the rows are in counter order already, else an index array)], the counter keys
    (counter_id, 0 without that column), each counter's first row position).
    Checks and errors as ``counters_of``."""
    out, key, first, rows = _split(intervals, by, False, rows=True)
    return [(spec, r) for (_, spec), r in zip(out, rows, strict=True)], key, first


def _split(intervals: pd.DataFrame, by, with_unc: bool, rows: bool = False):
    if len(intervals) == 0:
        raise ValueError("no intervals to re-bin (the capture holds fewer than two valid "
                         "readings of any selected counter)")
    for col in ("t0_ns", "t1_ns", "bytes", "flag"):
        if col not in intervals.columns:
            raise ValueError(f"intervals lack column {col!r} (make them with byte_intervals)")
    if by is not None and by not in intervals.columns:
        raise ValueError(f"cannot group by {by!r}: no such column "
                         f"(columns: {', '.join(map(str, intervals.columns))})")
    key = intervals["counter_id"].to_numpy() if "counter_id" in intervals.columns else \
        np.zeros(len(intervals), np.int64)
    t0 = intervals["t0_ns"].to_numpy(np.int64)
    t1 = intervals["t1_ns"].to_numpy(np.int64)
    if (t1 < t0).any():
        raise ValueError("an interval ends before it starts (t1_ns < t0_ns)")
    flag = intervals["flag"]
    fcode = (flag.cat.codes.to_numpy(np.int8) if isinstance(flag.dtype, pd.CategoricalDtype)
             and list(flag.cat.categories) == list(FLAGS)
             else pd.Categorical(flag, categories=list(FLAGS)).codes.astype(np.int8))
    b = intervals["bytes"].to_numpy(np.float64)
    unc = (np.maximum(intervals["t0_unc_ns"].to_numpy(np.int64),
                      intervals["t1_unc_ns"].to_numpy(np.int64))
           if with_unc and {"t0_unc_ns", "t1_unc_ns"} <= set(intervals.columns) else None)
    order = None
    kd = np.diff(key.astype(np.int32)) if len(key) > 1 else np.zeros(0, np.int32)
    if len(key) > 1 and ((kd < 0).any() or ((kd == 0) & (t0[1:] < t0[:-1])).any()):
        order = np.lexsort((t0, key))
        key, t0, t1, fcode, b = key[order], t0[order], t1[order], fcode[order], b[order]
        if unc is not None:
            unc = unc[order]
        kd = np.diff(key.astype(np.int32))
    bounds = np.flatnonzero(kd) + 1
    del kd
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(key)]])
    # the group key of each counter: its first row's value (avoids materialising the column)
    first_rows = starts if order is None else order[starts]
    groups = intervals[by].iloc[first_rows].tolist() if by is not None else None
    out = []
    for s, e in zip(starts, ends, strict=True):
        ct0, ct1 = t0[s:e], t1[s:e]
        if (ct0[1:] < ct1[:-1]).any():
            raise ValueError(f"intervals of counter {key[s]} overlap; each counter's intervals "
                             "must be consecutive (as byte_intervals makes them)")
        g = groups[len(out)] if groups is not None else "total"
        out.append((g, CurveSpec(ct0, ct1, b[s:e], fcode[s:e], None if unc is None else unc[s:e])))
    if not rows:
        return out, None
    # rows already in counter order: each counter's rows as a slice (its columns then views)
    return (out, key[starts], first_rows,
            [slice(int(s), int(e)) if order is None else order[s:e]
             for s, e in zip(starts, ends, strict=True)])


def combine_windows(items, width: np.ndarray | int, index: pd.Index, partial_nan: bool = False,
                    columns: pd.Index | None = None, coverage: bool = False) -> tuple:
    """Sum per-counter window parts into group columns; NaN and quality bits per the policy.

    ``items`` yields (group key, (bytes, n_nan, n_gap, covered_ns)) per counter, consumed one at
    a time (so only one counter's parts need to be alive). ``columns``: the group keys in the
    order ``items`` first yields them, as an Index to copy (cheaper than building one per
    block; the caller guarantees the order).

    A window (``partial_nan`` false) is partial only when its uncovered part exceeds
    ``COVER_TOLERANCE_NS`` (0.1 ms, the counter's own update uncertainty) or 1 % of the window,
    whichever is less: the grid starts at the capture start, the first sweep's deadline, and
    the first reading is taken a few microseconds after it, so without this every capture's
    first window (a 2 s capture's only full 1 s window) was partial. Ranges
    (``partial_nan``, ``integrate``) keep the strict rule.

    Returns (bytes_df, quality_df); with ``coverage`` (bytes_df, quality_df,
    ``WindowCoverage``): each window's covered time and its rate over that covered part.
    """
    tol = 0 if partial_nan else cover_tolerance_ns(width)
    cover = _CoverSums(width) if coverage else None
    if columns is not None and not partial_nan and len(index) * len(columns) <= _BLOCK_2D_MAX:
        return _combine_block(items, width - tol, index, columns, cover)
    acc: dict[Any, list] = {}
    for k, (b, nan, gap, cov) in items:
        qq = (gap > 0).view(np.int8) * np.int8(QUALITY_GAP)
        bad = nan > 0
        qq |= bad.view(np.int8) * np.int8(QUALITY_INVALID)
        part = cov < width - tol
        if cover is not None:
            cover.add(k, b, cov, part, acc[k][0] if k in acc else None)
        qq |= part.view(np.int8) * np.int8(QUALITY_PARTIAL)
        empty = cov <= 0
        qq |= empty.view(np.int8) * np.int8(QUALITY_EMPTY)
        bad |= empty
        if partial_nan:
            bad |= part
        if k not in acc:
            acc[k] = [np.array(b, dtype=np.float64, copy=True), qq, bad]
        else:
            acc[k][0] += b
            acc[k][1] |= qq
            acc[k][2] |= bad
    names = list(acc)
    n = len(index)
    for v in acc.values():
        v[0][v[2]] = np.nan
    cols = pd.Index(names) if columns is None else columns.copy()  # frames never share one
    if n * len(names) > _BLOCK_2D_MAX:
        # large frames (a whole capture in memory): the columns as they are, never a copy
        out = (pd.DataFrame({k: acc[k][0] for k in names}, index=index, columns=cols,
                            copy=False),
               pd.DataFrame({k: acc[k][1] for k in names}, index=index, columns=cols.copy(),
                            copy=False))
        return out if cover is None else (*out, cover.result(names))
    # small frames (the streamed blocks): one 2-D block per frame (each column contiguous),
    # much cheaper to build than one block per column
    bb = np.empty((len(names), n))
    qa = np.empty((len(names), n), np.int8)
    for i, name in enumerate(names):
        bb[i] = acc[name][0]
        qa[i] = acc[name][1]
    out = (pd.DataFrame(bb.T, index=index, columns=cols, copy=False),
           pd.DataFrame(qa.T, index=index, columns=cols.copy(), copy=False))
    return out if cover is None else (*out, cover.result(names))


#: above this many values a frame of ``combine_windows`` keeps its columns as separate arrays (no copy)
_BLOCK_2D_MAX = 1 << 22


def _combine_block(items, full, index: pd.Index, columns: pd.Index, cover=None) -> tuple:
    """``combine_windows`` of a streamed block (its groups known: ``columns``; windows with
    less covered time than ``full`` are partial): the same sums, bits and NaN, written
    straight into the frames' 2-D blocks, and a bit's masks made only where the block has it.
    """
    n, row = len(index), {k: i for i, k in enumerate(columns)}
    # an empty window (nothing covered) is partial too, unless a window has no length at all
    empty_in_partial = bool(np.all(np.asarray(full) > 0))
    bb = np.empty((len(columns), n))
    qa = np.empty((len(columns), n), np.int8)
    bads: dict[int, np.ndarray] = {}
    for k, (b, nan, gap, cov) in items:
        i = row[k]
        qq = np.zeros(n, np.int8)
        if gap.any():  # counts (or bools) of gaps, never negative
            qq |= (gap > 0).view(np.int8) * np.int8(QUALITY_GAP)
        bad = nan > 0
        if bad.any():
            qq |= bad.view(np.int8) * np.int8(QUALITY_INVALID)
        part = cov < full
        some_part = part.any()
        if some_part:
            qq |= part.view(np.int8) * np.int8(QUALITY_PARTIAL)
        if cover is not None and (some_part or i in cover.g):
            cover.add(i, b, cov, part, bb[i] if i in bads else None)
        if some_part or not empty_in_partial:
            empty = cov <= 0
            if empty.any():
                qq |= empty.view(np.int8) * np.int8(QUALITY_EMPTY)
                bad |= empty
        if i not in bads:
            bb[i] = b
            qa[i] = qq
            bads[i] = bad
        else:
            bb[i] += b
            qa[i] |= qq
            bads[i] |= bad
    if len(bads) != len(columns):
        raise ValueError("combine_windows: a group of columns got no counter")
    for i, bad in bads.items():
        if bad.any():
            bb[i][bad] = np.nan
    out = (pd.DataFrame(bb.T, index=index, columns=columns.copy(), copy=False),
           pd.DataFrame(qa.T, index=index, columns=columns.copy(), copy=False))
    return out if cover is None else (*out, cover.result(range(len(columns))))


class _CoverSums:
    """``combine_windows``' coverage, group by group, kept only for a group with a partly
    covered window (the others: every window wholly covered, their rate their bytes over the
    width)."""

    def __init__(self, width):
        self.width = width  # int, or int64 per window (a clipped grid)
        self.g: dict[Any, list[np.ndarray]] = {}  # group -> [rate bytes, covered ns]

    def add(self, k, b, cov, part, before) -> None:
        """One counter of group ``k``: its bytes, covered ns, partial mask (covered less than
        the width minus the tolerance); ``before``: the group's byte sum before this counter
        (None: it is the group's first)."""
        g = self.g.get(k)
        some = bool(part.any())
        if g is None:
            if not some:
                return
            rb = np.zeros(len(b)) if before is None else np.array(before, np.float64)
            cv = np.empty(len(b), np.int64)
            cv[:] = self.width
            g = self.g[k] = [rb, cv]
        rb, cv = g
        if not some:
            rb += b
            return
        # a partly covered window: this counter's bytes at the rate of its covered part (an
        # empty one, nothing covered, makes the group's window NaN: its rate too)
        with np.errstate(divide="ignore", invalid="ignore"):
            rb += np.where(part, b * self.width / np.maximum(cov, 1), b)
        np.minimum(cv, np.where(part, np.maximum(cov, 0), self.width), out=cv)

    def result(self, keys) -> WindowCoverage:
        """The coverage of the groups ``keys`` (in column order)."""
        return WindowCoverage(self.width, {j: self.g[k] for j, k in enumerate(keys)
                                           if k in self.g})


class WindowCoverage:
    """How much of each window of a block its readings cover and the rate over that part: what
    ``combine_windows(coverage=True)`` and ``stream.iter_windows(coverage=True)`` give beside
    a block's bytes ``b`` (the bytes of the covered part; NaN for a window touching an unknown
    interval or without readings). Each method takes that frame and returns one of its shape:

    - ``covered_ns(b)`` (int64): the ns of the window the group's readings cover, the least of
      its counters'; a window they leave at most ``cover_tolerance_ns`` uncovered (the
      tolerance of ``QUALITY_PARTIAL``) is wholly covered: its width.
    - ``gbps(b)`` (float64, Gb/s): the rate over the covered part: a wholly covered window's
      bytes x 8 / its width; a partly covered one (``QUALITY_PARTIAL``) the sum over the
      group's counters of each one's bytes x 8 / its covered ns. NaN where ``b`` is NaN. Time
      without readings (before the first, after the last) is unknown, never zero traffic: it
      never dilutes the rate.

    ``partial``: whether a window of the block is partly covered (else ``covered_ns`` is the
    width and ``gbps`` is ``b`` x 8 / width).
    """

    __slots__ = ("width", "g")

    def __init__(self, width, groups: dict[int, list[np.ndarray]]):
        self.width = width
        self.g = groups  # column position -> [rate bytes, covered ns]

    @property
    def partial(self) -> bool:
        return bool(self.g)

    def _width_column(self):
        w = self.width
        return np.asarray(w, np.float64).reshape(-1, 1) if np.ndim(w) else float(w)

    def covered_ns(self, b: pd.DataFrame) -> pd.DataFrame:
        a = np.empty(b.shape, np.int64)
        a[:] = np.asarray(self.width, np.int64).reshape(-1, 1) if np.ndim(self.width) \
            else int(self.width)
        for j, (_, cv) in self.g.items():
            a[:, j] = cv
        return pd.DataFrame(a, index=b.index, columns=b.columns.copy(), copy=False)

    def rate_bytes(self, b: pd.DataFrame) -> np.ndarray:
        """The bytes each window would hold at the rate of its covered part (``b`` where
        wholly covered; NaN where ``b`` is), a float64 array of ``b``'s shape: ``gbps`` is it
        x 8 / width, and a sum of columns' is the column of their sum's."""
        a = b.to_numpy(np.float64, copy=True)
        for j, (rb, _) in self.g.items():
            a[:, j] = np.where(np.isnan(a[:, j]), np.nan, rb)
        return a

    def gbps(self, b: pd.DataFrame) -> pd.DataFrame:
        a = self.rate_bytes(b)
        a *= 8.0
        a /= self._width_column()
        return pd.DataFrame(a, index=b.index, columns=b.columns.copy(), copy=False)

