"""Segment-by-segment analysis of a capture: intervals and windows in bounded memory.

A day at 1 kHz is ~700 M readings: too many to hold. Everything here reads a capture one
segment (~60 s of readings) at a time through ``rdmascope.capture.iter_capture_tables``, only
the columns and counters it needs, skipping segments outside a time range, and carries across
segment edges exactly what the in-memory functions would see:

- ``iter_intervals``: the intervals of ``series.byte_intervals`` (same rows, same flags, same
  bytes), produced file by file. Each counter carries the raw readings from its last settled
  reading on (a run of unreadable readings kept as one: only "was there one" matters), so the
  glitch rule, the unavailable rule and the gap rule judge every reading with the same
  neighbours as on the whole capture.
- ``iter_windows``: the windows of ``series.rebin_with_quality`` for several (width, origin)
  grids at once, emitted as soon as no later interval can touch them. A window's bytes are the
  same differences of the cumulative byte curve (the cumulative sums of whole intervals are
  sums of integers, exact in float64 below 2^53 bytes), so the result equals the in-memory one
  except in the last bits of a window cut by a segment edge.

- ``MemoryCapture`` (``memory_capture``): an intervals DataFrame presented as a capture of one
  segment, so the in-memory functions (``peaks.peak_table``, ...) are this same pass over it,
  not a second implementation.

Memory: one segment's readings plus the windows not yet final (about one segment's), whatever
the capture's length. See ``benchmarks/bench_scale.py`` for time and peak memory per command.

Size: one module (about 900 lines) because it is the engine's one pass: the per-counter
interval streams and the window grids share the carry-over state across segment edges that makes
the streamed result equal the in-memory one. The seam if it grows: the window grids' buffers
(``WindowGrid``, ``_GridAcc``) apart from the interval streams.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rdmascope.capture import (
    LIVE_PREFIX,
    STATUS_OK,
    iter_capture_tables,
    list_capture_files,
    listed_segments,
    live_time_range,
    read_manifest,
    segment_time_range,
)
from rdmascope.quantiles import ExactPercentiles

from .curve import QUALITY_EMPTY, CounterCurve, combine_windows, counter_rows
from .intervals import (
    DEFAULT_GAP_FACTOR,
    U32_MAX,
    counter_caps,
    counter_intervals,
    counter_width,
    default_origin,
    intervals_frame,
    line_attrs,
    select_counters,
)
from .load import CaptureFacts, counters_frame

__all__ = ["CaptureInfo", "MemoryCapture", "memory_capture", "open_capture", "capture_info", "iter_intervals", "WindowGrid",
           "iter_windows", "drop_empty_edges", "byte_intervals_streamed", "edge_spans", "FAR_NS",
           "ExactPercentiles"]

#: "no bound" in ns (int64-safe)
FAR_NS = 1 << 62


@dataclass
class CaptureInfo(CaptureFacts):
    """What a capture says about itself without reading its readings (manifest + footers).

    ``path``, ``meta`` (manifest), ``counters`` (as ``load.Capture.counters``), ``t_start_ns``
    (manifest start), ``t_end_ns`` (stop record, else the latest ``t_before_ns`` in the segment
    footers, else the start), ``rows`` (readings: the manifest's per-segment counts, plus the
    live files' readings estimated from their size), ``clean_end``. Duck-types the parts of
    ``load.Capture`` that need no readings (``meta``, ``counters``, ``path``, ``interval_ns``,
    ``t_start_ns``, ``t_end_ns``, ``name``), so ``twin_links`` and ``missing_twins`` accept it.
    """

    path: Path
    meta: dict[str, Any]
    counters: pd.DataFrame
    t_start_ns: int
    t_end_ns: int
    rows: int
    clean_end: bool
    clock_pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    #: ``edge_spans`` already found, by source (the two ends are read once per capture)
    spans_memo: dict = field(default_factory=dict, repr=False, compare=False)


def open_capture(path: str | os.PathLike) -> CaptureInfo:
    """Read a capture's manifest and segment footers (no readings); return a ``CaptureInfo``.

    Raises the ``rdmascope.capture`` errors of ``read_manifest`` (not a capture, newer version,
    malformed manifest or counter descriptor), naming the file.
    """
    import pyarrow.parquet as pq

    p = Path(path)
    m = read_manifest(p)
    cdf = counters_frame(m, p / "manifest.json")
    segs, lives = list_capture_files(p)
    listed = listed_segments(p, m, segs)  # a listed segment missing on disk is an error here
    rows = 0
    last = None
    for s in segs:
        rec = listed.get(s.name)
        if rec is not None:
            rows += int(rec["rows"])
        else:
            try:
                rows += pq.read_metadata(s).num_rows
            except (OSError, ValueError):
                pass
    if segs:
        r = segment_time_range(segs[-1])
        last = r[1] if r is not None else None
    for f in reversed([f for f in lives if f.name.startswith(LIVE_PREFIX)]):
        # a capture being recorded or left by a kill: its newest readings are in the live
        # segment, which has no footer; without it the span would end at the last closed
        # segment (or at the start) and requests in the tail would read as outside the capture
        r = live_time_range(f)
        if r is not None:
            last = r[1] if last is None else max(last, r[1])
            break
    rows += sum(f.stat().st_size // 40 for f in lives if f.name.startswith(LIVE_PREFIX))
    t0 = int(m["start"]["monotonic_ns"])
    stop = m.get("stop")
    if isinstance(stop, dict):
        t1 = int(stop["monotonic_ns"])
        if last is not None:
            t1 = max(t1, last)
    else:
        t1 = last if last is not None else t0
    pairs = np.asarray(m.get("clock_pairs") or [], dtype=np.int64).reshape(-1, 2)
    return CaptureInfo(path=p, meta=m, counters=cdf, t_start_ns=t0, t_end_ns=int(t1),
                       rows=int(rows), clean_end=stop is not None, clock_pairs=pairs)


@dataclass
class MemoryCapture:
    """An intervals DataFrame presented to the engine as a capture of one segment.

    The in-memory functions (``peaks.peak_table``, ``bursts.burst_analysis``, ...) are the
    streamed pass run over this source: ``iter_intervals`` yields every counter's intervals at
    once as one file's (bound ``FAR_NS``: nothing later), so ``iter_windows`` and the consumers
    registered on it see them exactly as they see a capture's, with no segment edge inside.
    Duck-types ``CaptureInfo`` where the engine reads it: ``counters`` (indexed by counter key,
    the label columns of the intervals and ``data`` True), ``meta`` (empty), ``path``,
    ``t_start_ns`` (``intervals.default_origin``), ``t_end_ns``, ``interval_ns`` (the
    intervals' ``attrs["interval_ns"]``, else None). ``intervals``: the frame itself;
    ``parts``: {counter key: interval arrays} as ``iter_intervals`` yields them. Made by
    ``memory_capture``.
    """

    intervals: pd.DataFrame
    counters: pd.DataFrame
    parts: dict
    t_start_ns: int
    t_end_ns: int
    interval_ns: int | None
    meta: dict = field(default_factory=dict)
    path: Path = Path("<in memory>")
    spans_memo: dict = field(default_factory=dict, repr=False, compare=False)


#: label columns of an intervals frame carried into a ``MemoryCapture``'s counters
_LABELS = ("series", "device", "direction", "source")


def memory_capture(intervals: pd.DataFrame, by: str | None = "series") -> MemoryCapture:
    """An intervals DataFrame (``byte_intervals``, or built by hand) as a ``MemoryCapture``.

    The counters are split and checked as ``curve.counters_of`` does (sorted by counter_id and
    start; one counter when there is no counter_id column); each counter's labels are those of
    its first row. ``by``: the column the caller groups by, checked to exist. Raises
    ``ValueError`` as ``counters_of`` (no intervals, a missing column, overlapping intervals).
    """
    specs, keys, first = counter_rows(intervals, by)
    cols = [c for c in (*_LABELS, *([by] if by not in (None, *_LABELS, "counter_id") else []))
            if c in intervals.columns]
    rows = intervals.iloc[first]
    cdf = pd.DataFrame({c: [x if not isinstance(x, np.generic) else x.item()
                            for x in rows[c].tolist()] for c in cols},
                       index=pd.Index([int(k) for k in keys], name="counter_id"))
    if "series" not in cdf.columns:
        cdf["series"] = [str(k) for k in cdf.index]
    cdf["data"] = True
    has_unc = {"t0_unc_ns", "t1_unc_ns"} <= set(intervals.columns)
    if has_unc:  # one array each: a counter's rows in order are views of it (no copy)
        unc0 = intervals["t0_unc_ns"].to_numpy(np.int64)
        unc1 = intervals["t1_unc_ns"].to_numpy(np.int64)
    parts = {}
    for k, (spec, idx) in zip(cdf.index, specs, strict=True):
        if has_unc:
            u0, u1 = unc0[idx], unc1[idx]
        else:
            u0 = u1 = np.zeros(len(spec.t0), np.int64)
        parts[int(k)] = {"t0_ns": spec.t0, "t1_ns": spec.t1, "t0_unc_ns": u0, "t1_unc_ns": u1,
                         "bytes": spec.b, "flag": spec.flag}
    t_end = max(int(p["t1_ns"][-1]) for p in parts.values())
    attrs = getattr(intervals, "attrs", {}) or {}
    iv_ns = attrs.get("interval_ns")
    return MemoryCapture(intervals=intervals, counters=cdf, parts=parts,
                         t_start_ns=default_origin(intervals), t_end_ns=t_end,
                         interval_ns=None if iv_ns is None else int(iv_ns))


def capture_info(capture) -> CaptureInfo | MemoryCapture:
    """``capture`` itself when it is a ``CaptureInfo`` or ``MemoryCapture``, else
    ``open_capture(capture)`` (a path)."""
    return capture if isinstance(capture, (CaptureInfo, MemoryCapture)) else open_capture(capture)


def _squeeze_invalid(t, unc, val, valid):
    """Keep the first and last row of each run of unreadable readings (only their presence and
    the run's ends matter: a trailing run's span ends at its last reading)."""
    inv = ~valid
    if inv.sum() < 3:
        return t, unc, val, valid
    inner = np.zeros(len(inv), bool)
    inner[1:-1] = inv[1:-1] & inv[:-2] & inv[2:]
    keep = ~inner
    return t[keep], unc[keep], val[keep], valid[keep]


class _CounterStream:
    """One counter's readings, fed file by file, turned into the intervals of ``counter_intervals``.

    The carry holds the raw readings from the last *settled* valid reading K on (the end of the
    last interval given out). K is never dropped and opens the next interval; every later
    reading has its earlier neighbour in the carry, so the glitch rule judges it as on the
    whole series. The interval ending at the last valid reading is held back: that reading is
    judged only when the next one is known.
    """

    def __init__(self, c: int, d: dict, *, interval_ns: int, gap_factor: float, max_gbps: float,
                 label: str):
        self.c = c
        self.kw = dict(bytes_per_unit=int(d["bytes_per_unit"]), width_bits=counter_width(d),
                       interval_ns=interval_ns, gap_factor=gap_factor, max_gbps=max_gbps,
                       label=label)
        self.label = label
        self.carry: tuple[np.ndarray, ...] | None = None
        self.last_sweep: int | None = None
        self.first_t0: int | None = None
        self.last_t: int | None = None  # latest reading instant seen (valid or not)
        self.rows = 0

    def feed(self, t_before, dur, val, valid, sweep, *, final: bool = False,
             file: str | None = None) -> dict[str, np.ndarray]:
        """One file's readings of the counter (``t_before_ns``, ``read_duration_ns``, value,
        valid, sweep); return the intervals they settle. ``file``: how to name the file in the
        ``ValueError`` for sweeps that repeat or go back (e.g. ``segments/seg-000003.parquet``,
        a segment copied in twice)."""
        n_new = len(sweep)
        k = 0 if self.carry is None else len(self.carry[0])
        # the reading instants (middle of the read bracket) and half-brackets, written after
        # the rows carried from the last file (no concatenation of separate arrays)
        t = np.empty(k + n_new, np.int64)
        unc = np.empty(k + n_new, np.int64)
        d = np.asarray(dur).astype(np.int64)
        np.right_shift(d, 1, out=t[k:])  # d // 2
        t[k:] += t_before
        d += 1
        np.right_shift(d, 1, out=unc[k:])  # (d + 1) // 2
        del d
        if n_new:
            where = f" in {file}" if file else ""
            if (sweep[1:] <= sweep[:-1]).any():
                raise ValueError(f"{self.label}: duplicate or unordered sweeps{where}")
            if self.last_sweep is not None and sweep[0] <= self.last_sweep:
                raise ValueError(f"{self.label}: duplicate or unordered sweeps{where}: its "
                                 f"first sweep {int(sweep[0])} is not after sweep "
                                 f"{self.last_sweep} of the files before it (a segment copied "
                                 "in twice, or one of another recording?)")
            self.last_sweep = int(sweep[-1])
            self.last_t = int(t[-1])
        self.rows += n_new
        if self.carry is not None:
            ct, cu, cv, cok = self.carry
            t[:k], unc[:k] = ct, cu
            val, valid = np.concatenate([cv, val]), np.concatenate([cok, valid])
        if final and self.rows < 2:  # byte_intervals skips a counter with fewer than 2 rows
            self.carry = None
            return counter_intervals(t[:0], unc[:0], val[:0], valid[:0], **self.kw)
        iv = counter_intervals(t, unc, val, valid, **self.kw)
        if (self.kw["width_bits"] is None and len(val)
                and int(val[valid].max(initial=0)) > U32_MAX):
            self.kw["width_bits"] = 64  # proven 64-bit: from then on (intervals._saturation_limit)
        every = bool(valid.all())
        vidx = None if every else np.flatnonzero(valid)
        if final:
            n = len(iv["t0_ns"])
            self.carry = None
        elif not len(t) or (vidx is not None and len(vidx) == 0):
            # nothing readable yet: all of it may still become an interval
            n = 0
            self.carry = _squeeze_invalid(t, unc, val, valid)
        else:
            # hold back everything from the last valid reading on: it is judged only when the
            # next one is known, and unreadable readings after it may end in a valid one
            t_last = t[-1] if every else t[vidx[-1]]
            n = int(np.searchsorted(iv["t1_ns"], t_last, "left"))
            if n:
                # K = the end of the last interval given out: the valid reading at that instant
                if every:
                    k = int(np.searchsorted(t, iv["t1_ns"][n - 1], "right") - 1)
                else:
                    k = int(vidx[np.searchsorted(t[vidx], iv["t1_ns"][n - 1], "right") - 1])
            else:
                k = 0  # nothing settled yet (a leading unreadable run is kept with it)
            self.carry = _squeeze_invalid(t[k:], unc[k:], val[k:], valid[k:])
        # a copy of the few rows held: a view would keep this file's whole arrays (and the
        # Arrow buffers they view) alive until the next file is read
        if self.carry is not None:
            self.carry = tuple(a.copy() for a in self.carry)
        out = {key: a[:n] for key, a in iv.items()}
        if n and self.first_t0 is None:
            self.first_t0 = int(out["t0_ns"][0])
        return out


def iter_intervals(capture, *, counters=None, source: str | None = "infiniband",
                   start_ns: int | None = None, end_ns: int | None = None,
                   gap_factor: float = DEFAULT_GAP_FACTOR, max_gbps: float | None = None
                   ) -> Iterator[tuple[dict[int, dict[str, np.ndarray]], int]]:
    """Yield the intervals of ``series.byte_intervals`` file by file, in bounded memory.

    ``capture``: a path or ``CaptureInfo``; ``counters``, ``source``, ``gap_factor``,
    ``max_gbps`` as ``byte_intervals``. ``start_ns``/``end_ns``: only segments around this range
    are read (intervals reaching into it are all produced; others may be missing). Yields
    (parts, bound_ns): ``parts`` maps counter_id -> arrays t0_ns, t1_ns, t0_unc_ns, t1_unc_ns,
    bytes, flag (codes of ``series.FLAGS``) of intervals settled by this file, in time order;
    ``bound_ns``: no interval yielded later starts before it. Raises ``ValueError`` as
    ``byte_intervals`` and the loader errors of ``rdmascope.capture``.
    """
    info = capture_info(capture)
    cdf = info.counters
    ids = select_counters(cdf, counters, source)
    if isinstance(info, MemoryCapture):
        # one segment holding every interval: nothing to read, nothing comes later
        yield {c: info.parts[c] for c in ids}, FAR_NS
        return
    caps = counter_caps(info.meta, cdf, ids, max_gbps)
    streams = {c: _CounterStream(c, cdf.loc[c].to_dict(), interval_ns=info.interval_ns,
                                 gap_factor=gap_factor, max_gbps=caps[c],
                                 label=f"counter {c} ({cdf.at[c, 'series']}) in {info.path}")
               for c in ids}
    if not ids:
        return
    ids_sorted = sorted(streams)
    keys = np.asarray(ids_sorted, dtype=np.uint16)
    # every counter's rows are read and sliced here (views): cheaper than Arrow slices of the
    # asked counters concatenated and converted again
    listed = {r.get("name") for r in info.meta.get("segments") or () if isinstance(r, dict)}
    for _f, tab in iter_capture_tables(info.path, counter_ids=None, start_ns=start_ns,
                                       end_ns=end_ns, manifest=info.meta,
                                       columns=["t_before_ns", "read_duration_ns", "value",
                                                "status"]):
        if not tab.num_rows:
            continue
        cid, t_before, dur, value, ok = _reading_columns(tab)
        sweep = _numpy(tab.column("sweep"))
        lo = np.searchsorted(cid, keys, "left")
        hi = np.searchsorted(cid, keys, "right")
        parts = {}
        name = f"{Path(_f).parent.name}/{Path(_f).name}" + (
            " (not listed in the manifest)" if info.meta.get("segments") is not None
            and Path(_f).suffix == ".parquet" and Path(_f).name not in listed else "")
        for c, a, b in zip(ids_sorted, lo.tolist(), hi.tolist(), strict=True):
            if b <= a:
                continue
            parts[c] = streams[c].feed(t_before[a:b], dur[a:b], value[a:b], ok[a:b],
                                       sweep[a:b], file=name)
        del tab, cid, t_before, dur, value, ok, sweep
        # handed over, not kept: this frame holds no reference to the file's intervals while
        # the next file is read
        box = [parts]
        del parts
        yield box.pop(), _bound(streams)
    last = {c: s.feed(*(np.zeros(0, x) for x in (np.int64, np.int64, np.uint64, bool,
                                                  np.int64)), final=True)
            for c, s in streams.items()}
    yield last, FAR_NS


def _numpy(c) -> np.ndarray:
    """A non-null Arrow column as a numpy array (zero-copy when it is one chunk)."""
    if isinstance(c, pa.ChunkedArray):
        c = c.chunk(0) if c.num_chunks == 1 else c.combine_chunks()
    return c.to_numpy(zero_copy_only=False)


def _reading_columns(tab) -> tuple[np.ndarray, ...]:
    """(counter_id, t_before_ns, read_duration_ns, value, valid) of a SAMPLE_SCHEMA table as
    ``load.readings_frame`` reads them (value 0 where null; valid = status OK and a value),
    without building a DataFrame."""
    v = tab.column("value")
    v = v.chunk(0) if v.num_chunks == 1 else v.combine_chunks()
    status = _numpy(tab.column("status"))
    ok = status == STATUS_OK
    if v.null_count:
        ok &= v.is_valid().to_numpy(zero_copy_only=False)
        v = pc.fill_null(v, 0)
    value = v.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    return (_numpy(tab.column("counter_id")), _numpy(tab.column("t_before_ns")),
            _numpy(tab.column("read_duration_ns")), value, ok)


def _bound(streams: dict[int, _CounterStream]) -> int:
    """The instant before which no later interval can start: the earliest carried reading."""
    b = FAR_NS
    for s in streams.values():
        if s.carry is not None and len(s.carry[0]):
            b = min(b, int(s.carry[0][0]))
        elif s.last_t is None:
            return -FAR_NS  # a counter not seen yet holds everything back
    return b


@dataclass(frozen=True)
class WindowGrid:
    """Windows [origin + k x width, origin + (k+1) x width) over [start_ns, end_ns).

    ``start_ns``/``end_ns`` None: from the first interval's start / to the last interval's end
    (as ``rebin_with_quality``). ``origin_ns`` None: the first interval's start, which then is
    also the range start (as ``peak_table`` and ``burst_analysis`` without ``start_ns``).
    ``clip``: cut the first and last window at the range (their covered time and "partial" flag
    then refer to the cut window, as ``integrate`` does). ``counters``: counter ids re-binned on
    this grid instead of ``iter_windows``' selection (read in the same pass, e.g. the netdev
    counters beside the RDMA ones); such a grid needs ``origin_ns``, ``start_ns`` and
    ``end_ns``. ``by``: this grid's grouping instead of ``iter_windows``' ``by``.
    """

    width_ns: int
    origin_ns: int | None
    start_ns: int | None = None
    end_ns: int | None = None
    clip: bool = False
    counters: tuple[int, ...] | None = None
    by: Any = "<iter_windows' by>"


_SAME_BY = WindowGrid.__dataclass_fields__["by"].default


class _GridAcc:
    """Per-counter window accumulators of one grid, for the windows not yet final."""

    def __init__(self, g: WindowGrid, ids: list[int]):
        self.g = g
        self.ids = ids
        self.k_lo: int | None = None  # window number of acc[...][0]
        self.n = 0
        self.emitted = False
        # the arrays are buffers reused from file to file (fresh memory for every file cost
        # more than the sums written into it: a page fault per 4 kB): positions [0, n) are the
        # windows held, [0, filled[c]) of counter c's arrays are written (sums, or zeros before
        # its data), the rest is written before it is read
        # per counter: bytes, overlaps a NaN interval, holds a gap (whether, not how many:
        # one byte a window), covered ns
        self.acc = {c: [np.zeros(0), np.zeros(0, bool), np.zeros(0, bool),
                        np.zeros(0, np.int64)] for c in ids}
        self.filled = dict.fromkeys(ids, 0)
        self.cap = 0
        self.origin: int | None = None
        self.columns: pd.Index | None = None
        self.start_ns: int | None = g.start_ns
        self.buffer: list[tuple[int, CounterCurve]] = []  # parts added before the origin is known
        if g.origin_ns is not None:
            self.resolve(int(g.origin_ns))

    def resolve(self, origin: int, first_t0: int | None = None) -> None:
        """Fix the origin (and, for a grid without one, the range start: the first interval)."""
        g = self.g
        self.origin = int(origin)
        if self.start_ns is None and g.origin_ns is None:
            self.start_ns = first_t0
        w, o = g.width_ns, self.origin
        self.k_min = None if self.start_ns is None else (int(self.start_ns) - o) // w
        self.k_max = None if g.end_ns is None else -((o - int(g.end_ns)) // w)  # exclusive
        buf, self.buffer = self.buffer, []
        for c, cnt in buf:
            self.add(c, cnt)

    @property
    def _cuts(self) -> bool:
        """A clipped grid with a range end to cut its first or last window at (clipping to no
        bound changes nothing)."""
        return self.g.clip and (self.start_ns is not None or self.g.end_ns is not None)

    def _edges(self, ka: int, kb: int) -> np.ndarray:
        g = self.g
        e = self.origin + np.arange(ka, kb + 1, dtype=np.int64) * g.width_ns
        if self._cuts:
            lo = -FAR_NS if self.start_ns is None else int(self.start_ns)
            hi = FAR_NS if g.end_ns is None else int(g.end_ns)
            e = np.clip(e, lo, hi)
        return e

    def _grow(self, ka: int, kb: int) -> None:
        """Hold windows [ka, kb) besides those held (the buffers grow with 1/16 to spare, so a
        pass of files of about equal length reallocates them once or twice, not per file)."""
        if self.k_lo is None:
            self.k_lo, self.n = ka, 0
        lo = min(self.k_lo, ka)
        hi = max(self.k_lo + self.n, kb)
        shift = self.k_lo - lo
        if hi - lo <= self.cap and not shift:
            self.n = max(self.n, hi - lo)
            return
        need = hi - lo
        if need > self.cap:
            self.cap = need if not self.cap else need + need // 16
        for c in self.ids:
            old, f = self.acc[c], self.filled[c]
            new = [np.empty(self.cap), np.empty(self.cap, bool), np.empty(self.cap, bool),
                   np.empty(self.cap, np.int64)]
            for a_new, a_old in zip(new, old, strict=True):
                a_new[:shift] = 0  # windows before the data held: empty
                a_new[shift:shift + f] = a_old[:f]
            self.acc[c] = new
            self.filled[c] = shift + f
        self.k_lo, self.n = lo, need

    def _fill(self, c: int, upto: int) -> None:
        """Zeros in counter c's unwritten windows before position ``upto``."""
        f = self.filled[c]
        if f < upto:
            for a in self.acc[c]:
                a[f:upto] = 0
            self.filled[c] = upto

    def reserve(self, t0: int, t1: int) -> None:
        """Hold the windows of [t0, t1) at once (one file's intervals, before its counters
        are added one by one)."""
        if self.origin is None:
            return
        ka, kb = self._span(t0, t1)
        if kb > ka:
            self._grow(ka, kb)

    def _span(self, t0: int, t1: int) -> tuple[int, int]:
        w, o = self.g.width_ns, self.origin
        ka = (t0 - o) // w
        kb = -((o - t1) // w)
        if self.k_min is not None:
            ka = max(ka, self.k_min)
        if self.k_max is not None:
            kb = min(kb, self.k_max)
        return ka, kb

    def add(self, c: int, cnt: CounterCurve, memo: dict | None = None) -> None:
        """Add one counter's intervals of one file. ``memo``: {(origin, width): (first window
        number, ``cum`` at its edges)} shared by the grids this part goes to, finest first: a
        grid whose edges are every r-th edge of a finer one takes ``cum`` from it."""
        if self.origin is None:
            self.buffer.append((c, cnt))
            return
        w, o = self.g.width_ns, self.origin
        ka, kb = self._span(int(cnt.t0[0]), int(cnt.t1[-1]))
        if kb <= ka:
            return
        self._grow(ka, kb)
        e = self._edges(ka, kb)
        cums = None
        share = memo is not None and not self.g.clip
        if share:
            for (o1, w1), (k1, fine) in memo.items():
                if o1 != o or w % w1:
                    continue
                # edge i of this grid is edge first + i x r of the finer one: those within it
                # (i0 <= i < i1) are a strided slice of its values
                r, n_e, n_f = w // w1, kb - ka + 1, len(fine[0])
                first = ka * r - k1
                i0 = max(0, -(first // r))
                i1 = min(n_e, (n_f - 1 - first) // r + 1) if n_f - 1 - first >= 0 else 0
                if i1 <= i0:
                    continue
                sl = slice(first + i0 * r, first + (i1 - 1) * r + 1, r)
                if i0 == 0 and i1 == n_e:
                    cums = tuple(y[sl] for y in fine)
                else:
                    cums = tuple(np.empty(n_e, y.dtype) for y in fine)
                    rest = cnt.cum(np.concatenate([e[:i0], e[i1:]]))
                    for x, y, z in zip(cums, fine, rest, strict=True):
                        x[i0:i1] = y[sl]
                        x[:i0], x[i1:] = z[:i0], z[i0:]
                break
        keep: list | None = [] if share and cums is None else None
        off = ka - self.k_lo
        self._fill(c, off)
        # the windows are written into the buffers; those already written (the one shared with
        # the counter's previous file) then get their earlier sums added back
        f = self.filled[c]
        end = off + kb - ka
        mid = min(max(f, off), end)
        acc = self.acc[c]
        before = [a[off:mid].copy() for a in acc] if mid > off else None
        cnt.edges(e, step=w, cums=cums, keep=keep,  # regular but for clipping
                  out=tuple(a[off:end] for a in acc))
        if keep:
            memo[(o, w)] = (ka, keep[0])
        if before is not None:
            for a, x in zip(acc, before, strict=True):
                a[off:mid] += x
        self.filled[c] = max(f, end)

    def start(self, k: int) -> None:
        """Make sure the accumulators begin at window k (empty windows before the data)."""
        if self.emitted:
            return
        if self.k_lo is None:
            self._grow(k, k)
        elif k < self.k_lo:
            self._grow(k, self.k_lo)

    def take(self, k_end: int, key_of, names, by, coverage: bool = False):
        """Pop the windows before window number ``k_end``; return (bytes_df, quality_df), with
        ``coverage`` (bytes_df, quality_df, ``curve.WindowCoverage``)."""
        if self.k_lo is None or self.origin is None:
            return None
        if self.k_max is not None:
            k_end = min(k_end, self.k_max)
        if k_end > self.k_lo + self.n:  # windows with no data yet at all: empty
            self._grow(self.k_lo, k_end)
        cut = max(0, min(self.n, k_end - self.k_lo))
        if cut == 0:
            return None
        e = self._edges(self.k_lo, self.k_lo + cut)
        if self.columns is None:
            self.columns = pd.Index(names, name=by)
        for c in self.ids:
            self._fill(c, cut)
        # the groups come in the order of ``names`` (the first counter of each), so the
        # frames need no reindexing; the frames hold copies, never views of the buffers
        b, q, *cov = combine_windows(
            ((key_of[c], tuple(a[:cut] for a in self.acc[c])) for c in self.ids),
            np.diff(e) if self._cuts else self.g.width_ns,
            pd.Index(e[:-1], name="window_start_ns"), columns=self.columns, coverage=coverage)
        b.columns.name = q.columns.name = by
        for c in self.ids:
            # the few windows left move to the front of the buffers
            f = self.filled[c]
            for a in self.acc[c]:
                a[:f - cut] = a[cut:f]
            self.filled[c] = f - cut
        self.k_lo += cut
        self.n -= cut
        self.emitted = True
        return (b, q, *cov)


def iter_windows(capture, grids: list[WindowGrid], *, by: str | None = "series",
                 counters=None, source: str | None = "infiniband",
                 gap_factor: float = DEFAULT_GAP_FACTOR, max_gbps: float | None = None,
                 progress=None, state: dict | None = None, on_parts=None,
                 extra_counters=(), on_final=None, on_horizon=None, hold_files: int = 0,
                 coverage: bool = False) -> Iterator[tuple]:
    """Re-bin a capture to several window grids in one pass, yielding final windows in order.

    Yields (grid index, bytes_df, quality_df) blocks; the blocks of one grid concatenated equal
    ``series.rebin_with_quality(byte_intervals(capture), width, origin_ns=..., start_ns=...,
    end_ns=..., by=by)`` (same index, columns, NaN and quality bits; see the module docstring
    for the float rounding at segment edges). With no ``start_ns`` the windows begin at the
    first interval's; with no ``end_ns`` they end at the last interval's. ``by``, ``counters``,
    ``source``, ``gap_factor``, ``max_gbps`` as ``byte_intervals``/``rebin``. ``progress``:
    called with the number of intervals settled per file. ``state``: a dict filled as the
    stream goes with ``spans`` = {group: [first interval start, last interval end]} of the
    groups that have intervals (the columns ``rebin`` would have), in counter order.
    ``on_parts``: called with each file's intervals (as ``iter_intervals`` yields them).
    ``extra_counters``: counter ids read in the same pass whose intervals only go to
    ``on_parts`` (not re-binned, no column; e.g. the netdev counters beside the RDMA ones).
    A grid with its own ``counters`` reads them in the same pass too (their intervals also go
    to ``on_parts``; they take no part in ``spans`` or the default range).
    Consumers registered on the pass: ``on_final()`` is called once every interval has gone to
    ``on_parts``; ``hold_files``: each block is yielded only after the intervals of that many
    more files have gone to ``on_parts`` (or all of them), so a consumer judging a window
    from the intervals around it (``overline_pass.OverLineFlagger``) has them without reading
    again; ``on_horizon(t_ns)``: called before each block is yielded, no window yielded from
    then on starts before ``t_ns`` (what a consumer keeping intervals may drop).
    ``coverage``: yield (grid index, bytes_df, quality_df, ``curve.WindowCoverage``): each
    window's covered time and its rate over the covered part (a rate shown to a user: never
    diluted by time without readings).
    Raises ``ValueError`` as ``rebin``
    (no intervals at all) and ``byte_intervals``.
    """
    if not hold_files and on_horizon is None:
        yield from _windows(capture, grids, by=by, counters=counters, source=source,
                            gap_factor=gap_factor, max_gbps=max_gbps, progress=progress,
                            state=state, on_parts=on_parts, extra_counters=extra_counters,
                            on_final=on_final, coverage=coverage)
        return
    files = 0
    done = False

    def count(parts):
        nonlocal files
        files += 1
        if on_parts is not None:
            on_parts(parts)

    def finished():
        nonlocal done
        done = True
        if on_final is not None:
            on_final()

    pending: list[tuple] = []  # (files seen, grid, bytes_df, quality_df[, coverage])
    nxt: dict[int, int] = {}  # grid -> start of its next window (after the last one yielded)

    def release(everything: bool):
        while pending and (everything or done or pending[0][0] + hold_files <= files):
            _, i, b, q, *cov = pending.pop(0)
            if len(b):
                nxt[i] = int(b.index[-1]) + int(grids[i].width_ns)
                end = grids[i].end_ns
                if end is not None and nxt[i] >= int(end):
                    # the grid's last window is out: it holds nothing back (a figure's short
                    # range on a capture's pass would otherwise keep every interval after it)
                    del nxt[i]
            if on_horizon is not None:
                # no window still to come starts before the earliest pending one, nor before
                # any grid's next window (a grid that has yielded nothing yet, e.g. one window
                # over the whole range, is not counted: a consumer judging it at the end reads
                # its neighbourhood again)
                firsts = [int(x[2].index[0]) for x in pending if len(x[2])]
                if len(b):
                    firsts.append(int(b.index[0]))
                on_horizon(min([*firsts, *nxt.values()]))
            yield (i, b, q, *cov)

    for i, b, q, *cov in _windows(capture, grids, by=by, counters=counters, source=source,
                                  gap_factor=gap_factor, max_gbps=max_gbps, progress=progress,
                                  state=state, on_parts=count, extra_counters=extra_counters,
                                  on_final=finished, coverage=coverage):
        yield from release(False)
        pending.append((files, i, b, q, *cov))
    yield from release(True)


def _windows(capture, grids: list[WindowGrid], *, by, counters, source, gap_factor, max_gbps,
             progress, state, on_parts, extra_counters, on_final, coverage=False
             ) -> Iterator[tuple]:
    """The pass of ``iter_windows`` (its arguments), blocks yielded as soon as they are final."""
    info = capture_info(capture)
    cdf = info.counters
    ids = select_counters(cdf, counters, source)
    for g in grids:
        if not isinstance(g.width_ns, (int, np.integer)) or g.width_ns <= 0:
            raise ValueError(f"window width must be a positive integer of ns, got "
                             f"{g.width_ns!r}")
        if g.start_ns is not None and g.end_ns is not None and g.end_ns <= g.start_ns:
            raise ValueError(f"empty time range: start {g.start_ns} ns >= end {g.end_ns} ns")
    def keys(by_, ids_):
        if by_ is None:
            return {c: "total" for c in ids_}
        return {c: (c if by_ == "counter_id" else cdf.at[c, by_]) for c in ids_}

    key_of = keys(by, ids)
    own = [None if g.counters is None else select_counters(cdf, list(g.counters), None)
           for g in grids]
    for g, o in zip(grids, own, strict=True):
        if o is not None and (g.origin_ns is None or g.start_ns is None or g.end_ns is None):
            raise ValueError("a window grid with its own counters needs origin_ns, start_ns "
                             "and end_ns")
    grid_ids = [ids if o is None else o for o in own]
    grid_by = [by if g.by is _SAME_BY else g.by for g in grids]
    grid_keys = [key_of if o is None and b_ == by else keys(b_, gi)
                 for o, b_, gi in zip(own, grid_by, grid_ids, strict=True)]
    grid_names = [list(dict.fromkeys(k[c] for c in gi))
                  for k, gi in zip(grid_keys, grid_ids, strict=True)]
    accs = [_GridAcc(g, gi) for g, gi in zip(grids, grid_ids, strict=True)]
    grid_sets = [set(gi) for gi in grid_ids]
    by_width = sorted(range(len(grids)), key=lambda i: grids[i].width_ns)
    lo_read = min((g.start_ns for g in grids if g.start_ns is not None), default=None)
    hi_read = max((g.end_ns for g in grids if g.end_ns is not None), default=None)
    if any(g.start_ns is None for g in grids):
        lo_read = None
    if any(g.end_ns is None for g in grids):
        hi_read = None
    spans: dict = {} if state is None else state.setdefault("spans", {})
    first_t0: int | None = None
    last_t1: int | None = None
    read_ids = list(dict.fromkeys([*ids, *(int(c) for c in extra_counters),
                                   *(c for gi in grid_ids for c in gi)]))
    for parts, bound in iter_intervals(info, counters=read_ids, source=source,
                                       start_ns=lo_read, end_ns=hi_read, gap_factor=gap_factor,
                                       max_gbps=max_gbps):
        n_iv = 0
        if on_parts is not None:
            on_parts(parts)
        ends = {c: (int(iv["t0_ns"][0]), int(iv["t1_ns"][-1])) for c, iv in parts.items()
                if len(iv["t0_ns"])}
        for a, gs in zip(accs, grid_sets, strict=True):
            got = [x for c, x in ends.items() if c in gs]
            if got:  # every window of the file at once, not counter by counter
                a.reserve(min(x[0] for x in got), max(x[1] for x in got))
        for c, iv in parts.items():
            if not len(iv["t0_ns"]):
                continue
            if c in key_of:
                n_iv += len(iv["t0_ns"])
                t0, t1 = int(iv["t0_ns"][0]), int(iv["t1_ns"][-1])
                sp = spans.setdefault(key_of[c], [t0, t1])
                sp[0], sp[1] = min(sp[0], t0), max(sp[1], t1)
                first_t0 = t0 if first_t0 is None else min(first_t0, t0)
                last_t1 = t1 if last_t1 is None else max(last_t1, t1)
            cnt = None
            memo: dict = {}  # cum at the edges of this part, shared by the grids (finest first)
            for i in by_width:
                if c in grid_sets[i]:
                    if cnt is None:
                        cnt = CounterCurve(iv["t0_ns"], iv["t1_ns"], iv["bytes"], iv["flag"])
                    accs[i].add(c, cnt, memo)
        # the file's intervals are in the accumulators: not held while its blocks are taken
        # and the next file is read (whoever keeps them, e.g. ``on_parts``, keeps them)
        parts = iv = cnt = memo = None
        if progress is not None:
            progress(n_iv)
        if first_t0 is None:
            continue
        for i, a in enumerate(accs):
            g = a.g
            if a.origin is None:
                # the first interval's start is known once no later interval can start before it
                if first_t0 > bound and bound < FAR_NS:
                    continue
                a.resolve(first_t0, first_t0)
            start = first_t0 if a.start_ns is None else int(a.start_ns)
            a.start((start - a.origin) // g.width_ns)
            if bound >= FAR_NS:
                continue
            out = a.take((bound - a.origin) // g.width_ns, grid_keys[i], grid_names[i],
                         grid_by[i], coverage)
            if out is not None:
                yield i, *out
    if on_final is not None:
        on_final()
    if first_t0 is None:
        raise ValueError("no intervals to re-bin (the capture holds fewer than two valid "
                         "readings of any selected counter)")
    for i, a in enumerate(accs):
        g = a.g
        if a.origin is None:
            a.resolve(first_t0, first_t0)
            a.start((first_t0 - a.origin) // g.width_ns)
        k_end = (-((a.origin - last_t1) // g.width_ns) if g.end_ns is None
                 else -((a.origin - int(g.end_ns)) // g.width_ns))
        out = a.take(k_end, grid_keys[i], grid_names[i], grid_by[i], coverage)
        if out is not None:
            yield i, *out


def drop_empty_edges(b: pd.DataFrame, q: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Drop leading and trailing windows that no series has readings in (QUALITY_EMPTY)."""
    has = ((q & QUALITY_EMPTY) == 0).any(axis=1).to_numpy()
    if not has.any():
        return b.iloc[:0], q.iloc[:0]
    lo, hi = int(np.argmax(has)), len(has) - int(np.argmax(has[::-1]))
    return b.iloc[lo:hi], q.iloc[lo:hi]


def byte_intervals_streamed(capture, *, counters=None, source: str | None = "infiniband",
                            gap_factor: float = DEFAULT_GAP_FACTOR,
                            max_gbps: float | None = None) -> pd.DataFrame:
    """``series.byte_intervals`` of a capture on disk without loading its readings.

    The intervals come from ``iter_intervals`` segment by segment (only the selected counters'
    rows are kept, and only until their intervals are made), so the peak memory is the
    intervals' (~50 bytes each), not the readings' plus the intervals'. Same rows, flags and
    bytes as ``byte_intervals(load_capture(path), ...)``; ``attrs["t_start_ns"]`` is the capture
    start. Raises what ``iter_intervals`` raises.
    """
    info = capture_info(capture)
    got: dict[int, list[dict[str, np.ndarray]]] = {}
    for parts, _ in iter_intervals(info, counters=counters, source=source,
                                   gap_factor=gap_factor, max_gbps=max_gbps):
        for c, iv in parts.items():
            if len(iv["t0_ns"]):
                got.setdefault(c, []).append(iv)
    pieces = []
    for c in sorted(got):
        chunks = got.pop(c)
        arrays = {k: np.concatenate([p[k] for p in chunks]) for k in chunks[0]}
        del chunks
        pieces.append((c, info.counters.loc[c].to_dict(), arrays))
    out = intervals_frame(pieces)
    out.attrs["t_start_ns"] = int(info.t_start_ns)
    line_attrs(out, info.meta, info.counters,
                select_counters(info.counters, counters, source), info.interval_ns)
    return out


def edge_spans(info: CaptureInfo, source) -> dict[int, list[int]]:
    """Per counter: [first interval start, last interval end], from the first and last files.

    A counter's first interval starts at its first reading (a leading unreadable run is an
    "unavailable" interval) and its last ends at its last reading (or one interval after its
    last valid one): the segments at the two ends decide both. Found once per ``CaptureInfo``
    and source (``spans_memo``); each call returns its own copy.
    """
    memo = getattr(info, "spans_memo", None)
    if memo is not None and source in memo:
        return {c: list(v) for c, v in memo[source].items()}
    spans: dict[int, list[int]] = {}
    for at in (info.t_start_ns, info.t_end_ns):
        for parts, _ in iter_intervals(info, source=source, start_ns=at, end_ns=at):
            for c, iv in parts.items():
                if not len(iv["t0_ns"]):
                    continue
                sp = spans.setdefault(c, [int(iv["t0_ns"][0]), int(iv["t1_ns"][-1])])
                sp[0] = min(sp[0], int(iv["t0_ns"][0]))
                sp[1] = max(sp[1], int(iv["t1_ns"][-1]))
    if memo is not None:
        memo[source] = {c: list(v) for c, v in spans.items()}
    return spans
