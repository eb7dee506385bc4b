"""Bursts on the 1 ms series: threshold with hysteresis relative to the link capacity.

Prefill traffic appears as bursts of a few milliseconds at or near line rate separated by compute
gaps; each burst is (about) one all-reduce (method.md, "Prefill and decode load the network in
opposite ways"). A burst starts at the first window whose rate reaches ``enter_frac`` x capacity
and lasts while the rate stays at or above ``leave_frac`` x capacity (hysteresis: the short dips
inside one all-reduce do not split it). A NaN window (reset/saturated/unavailable/implausible) is
never part of a burst: it ends the current one, and is counted in the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rdmascope.quantiles import ExactPercentiles

from .curve import HEADLINE_EXCLUDE, QUALITY_OVER_LINE
from .overline_pass import OverLineFlagger, pass_hooks
from .peaks import link_view
from .stream import WindowGrid, capture_info, iter_windows, memory_capture
from .windows import to_gbps

__all__ = ["allreduce_bytes", "detect_bursts", "burst_analysis", "BurstResult"]

MS = 1_000_000


def allreduce_bytes(tokens: int, hidden_size: int, bytes_per_value: int, tp: int) -> float:
    """Return the bytes one node sends in one ring all-reduce: 2(N-1)/N x tokens x hidden x bytes.

    method.md, "What tensor parallelism sends": a 4,096-token chunk, hidden 6,144, 2 bytes, TP8
    -> 1.75 x 50.3 MB = 88.1 MB. Decimal bytes. Raises ``ValueError`` for tp < 1 or negatives.
    """
    if tp < 1 or tokens < 0 or hidden_size <= 0 or bytes_per_value <= 0:
        raise ValueError(f"need tp >= 1, tokens >= 0, hidden_size > 0, bytes_per_value > 0 "
                         f"(got tp={tp}, tokens={tokens}, hidden={hidden_size}, "
                         f"bytes={bytes_per_value})")
    return 2.0 * (tp - 1) / tp * tokens * hidden_size * bytes_per_value


def detect_bursts(bytes_per_window: pd.Series, width_ns: int, *, capacity_gbps: float,
                  enter_frac: float = 0.25, leave_frac: float = 0.10,
                  quality: pd.Series | np.ndarray | None = None) -> pd.DataFrame:
    """Find bursts in one series of bytes per window (index: window start, int64 ns).

    Hysteresis (module docstring): enter at >= ``enter_frac`` x ``capacity_gbps``, stay while
    >= ``leave_frac`` x capacity. Returns one row per burst: start_ns, end_ns (end of its last
    window), duration_s, bytes, peak_gbps (highest window that can be a headline: with
    ``quality`` (the ``rebin_with_quality`` bits of the same windows) gap-spread, partly covered
    and over-line windows are left out, NaN when no window of the burst is left),
    raw_peak_gbps (highest window of all), over_line_windows (windows flagged
    ``QUALITY_OVER_LINE``), mean_gbps (bytes x 8 / duration), gap_before_s (from the previous
    burst's end; NaN for the first). Raises ``ValueError`` when
    0 < leave_frac <= enter_frac does not hold or capacity is not positive.
    """
    if capacity_gbps <= 0:
        raise ValueError(f"link capacity must be positive, got {capacity_gbps} Gb/s")
    if not 0 < leave_frac <= enter_frac:
        raise ValueError(f"need 0 < leave ({leave_frac}) <= enter ({enter_frac})")
    b = bytes_per_window.to_numpy(np.float64)
    t = bytes_per_window.index.to_numpy(np.int64)
    if len(t) > 1 and (np.diff(t) != width_ns).any():
        raise ValueError("windows must be consecutive and of the given width")
    # the one detector (``_BurstStream``), its windows given as one block
    det = _BurstStream(width_ns, enter_frac * capacity_gbps, leave_frac * capacity_gbps)
    det.add(t, b, None if quality is None else np.asarray(quality, dtype=np.int64))
    return det.finish()


@dataclass
class BurstResult:
    """Bursts of every series over a range: ``table`` (one row per burst, with a ``series``
    column, ``t_start_s`` relative to ``t_ref_ns`` and, with model parameters,
    ``expected_allreduce_bytes`` and ``allreduces`` = bytes / expected) and ``summary`` (one row
    per series: n_bursts, duty_cycle (burst time / valid time), burst_bytes, total_bytes,
    burst_share, mean/median/min gap_s, nan_windows, known_bytes, unknown_s, over_line_windows,
    capacity_gbps, enter_gbps, leave_gbps). ``total_bytes`` (bytes) is NaN, never the known
    part, when any window of the range is unknown (``nan_windows`` > 0; ``burst_share`` then NaN
    too): ``known_bytes`` is the known windows' bytes (a lower bound) and ``unknown_s`` the
    unknown windows' time (nan_windows x width, seconds)."""

    table: pd.DataFrame
    summary: pd.DataFrame
    params: dict[str, Any] = field(default_factory=dict)


def _summary_row(col, bt: pd.DataFrame, *, nvalid: int, nansum: float, nan_windows: int,
                 width_ns: int, capacity_gbps: float, enter_frac: float, leave_frac: float,
                 over_line_windows: int = 0, stats: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    """One series' burst summary from its burst table and window counts (see BurstResult).
    ``stats``: the sums of every burst when ``bt`` holds only the first ones
    (``_BurstStream.stats``)."""
    # unknown is never zero: with any unknown window (or none known) the total is unknown;
    # the known windows' bytes (a lower bound) and the unknown time are stated apart
    known = nansum if nvalid else np.nan
    total = known if not nan_windows else np.nan
    unknown = {"known_bytes": known, "unknown_s": nan_windows * width_ns / 1e9}
    if stats is not None:
        return {
            "series": col, "n_bursts": int(stats["n"]),
            "duty_cycle": float(stats["duration_s"] * 1e9 / (nvalid * width_ns))
            if nvalid else np.nan,
            "burst_bytes": float(stats["bytes"]) if nvalid else np.nan,
            "total_bytes": total,
            "burst_share": float(stats["bytes"] / total) if total > 0 else np.nan,
            "mean_gap_s": float(stats["mean_gap"]), "median_gap_s": float(stats["median_gap"]),
            "min_gap_s": float(stats["min_gap"]),
            "nan_windows": int(nan_windows), **unknown,
            "over_line_windows": int(over_line_windows),
            "capacity_gbps": float(capacity_gbps),
            "enter_gbps": enter_frac * capacity_gbps, "leave_gbps": leave_frac * capacity_gbps,
        }
    gaps = bt["gap_before_s"].dropna()
    return {
        "series": col, "n_bursts": len(bt),
        "duty_cycle": float(bt["duration_s"].sum() * 1e9 / (nvalid * width_ns))
        if nvalid else np.nan,
        "burst_bytes": float(bt["bytes"].sum()) if nvalid else np.nan,
        "total_bytes": total,
        "burst_share": float(bt["bytes"].sum() / total) if total > 0 else np.nan,
        "mean_gap_s": float(gaps.mean()) if len(gaps) else np.nan,
        "median_gap_s": float(gaps.median()) if len(gaps) else np.nan,
        "min_gap_s": float(gaps.min()) if len(gaps) else np.nan,
        "nan_windows": int(nan_windows), **unknown,
        "over_line_windows": int(over_line_windows),
        "capacity_gbps": float(capacity_gbps),
        "enter_gbps": enter_frac * capacity_gbps, "leave_gbps": leave_frac * capacity_gbps,
    }


def _label_table(bt: pd.DataFrame, col, t_ref: int, expected_allreduce) -> pd.DataFrame:
    """One series' burst table as ``BurstResult.table`` holds it: its ``series``, each burst's
    start in seconds after ``t_ref`` and, given one all-reduce's bytes, all-reduces per burst
    (the in-memory and the streamed analysis share it)."""
    bt.insert(0, "series", col)
    bt.insert(3, "t_start_s", (bt["start_ns"] - t_ref) / 1e9)
    if expected_allreduce:
        bt["expected_allreduce_bytes"] = float(expected_allreduce)
        bt["allreduces"] = bt["bytes"] / float(expected_allreduce)
    return bt


def _result(tables: list, summary: list, *, capacity_gbps, enter_frac, leave_frac, width_ns,
            lo: int, hi: int, expected_allreduce) -> BurstResult:
    """The ``BurstResult`` of per-series tables and summary rows, with the run's parameters."""
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return BurstResult(table=table, summary=pd.DataFrame(summary),
                       params={"capacity_gbps": capacity_gbps, "enter_frac": enter_frac,
                               "leave_frac": leave_frac, "width_ns": width_ns,
                               "start_ns": lo, "end_ns": hi,
                               "expected_allreduce_bytes": expected_allreduce})


def burst_analysis(intervals: pd.DataFrame, *, capacity_gbps: float, start_ns: int | None = None,
                   end_ns: int | None = None, width_ns: int = MS, origin_ns: int | None = None,
                   by: str | None = "series", groups: dict[str, list[str]] | None = None,
                   keep: bool = True, enter_frac: float = 0.25, leave_frac: float = 0.10,
                   expected_allreduce: float | None = None, t_ref_ns: int | None = None
                   ) -> BurstResult:
    """Re-bin to ``width_ns`` (1 ms) windows and detect bursts in each series (and link).

    ``capacity_gbps``: the link capacity the thresholds are relative to (e.g. 200 for a Spark
    cable summed over twins, ~109 for one twin). ``expected_allreduce``: bytes of one all-reduce
    per node (``allreduce_bytes``) to set beside each burst's bytes. Windows lie on the one grid
    (``origin_ns``, default the capture start: ``intervals.default_origin``) over ``start_ns``
    (or the first reading) to ``end_ns`` (or the last). Raises ``ValueError`` as
    ``detect_bursts``/``rebin``.

    One engine: this is ``burst_analysis_capture``'s pass over ``intervals`` presented as a
    capture of one segment (``stream.memory_capture``).
    """
    if capacity_gbps <= 0:
        raise ValueError(f"link capacity must be positive, got {capacity_gbps} Gb/s")
    if not 0 < leave_frac <= enter_frac:
        raise ValueError(f"need 0 < leave ({leave_frac}) <= enter ({enter_frac})")
    # the engine's pass over the intervals as a one-segment capture (``stream.MemoryCapture``)
    return burst_analysis_capture(memory_capture(intervals, by), capacity_gbps=capacity_gbps,
                                  start_ns=start_ns, end_ns=end_ns, width_ns=width_ns,
                                  origin_ns=origin_ns, by=by, source=None, groups=groups,
                                  keep=keep, enter_frac=enter_frac, leave_frac=leave_frac,
                                  expected_allreduce=expected_allreduce, t_ref_ns=t_ref_ns)


class _BurstStream:
    """Hysteresis burst detection over consecutive blocks of one series (``detect_bursts``'s
    rule): a run of windows at or above ``leave`` that reaches the block's end is carried as
    (burst start or None, bytes, peak) and continued by the next block."""

    def __init__(self, width_ns: int, enter_gbps: float, leave_gbps: float,
                 keep_rows: int | None = None):
        self.w = int(width_ns)
        # ``keep_rows``: keep only the first bursts (a table view shows that many) and fold
        # every burst into the summary's sums and gap statistics instead (memory flat in the
        # capture's length: the gaps' median from ``ExactPercentiles``, spilled to a file)
        self.keep = keep_rows
        self.n_rows = self.n_kept = 0
        self.dur_ns = 0
        self.sum_bytes = 0.0
        self.gap_sum, self.gap_n, self.gap_min = 0.0, 0, np.inf
        self.gaps = ExactPercentiles() if keep_rows is not None else None
        self.enter, self.leave = enter_gbps, leave_gbps
        self.open: list | None = None  # [start_ns or None, bytes, peak, end_ns]
        self.prev_end: int | None = None
        # finished bursts, column by column: numpy chunks (8 bytes a value; a serving day has
        # millions of bursts, and a Python tuple per burst cost ~300 bytes), plus the few
        # emitted one at a time, gathered in ``_pending`` and moved into chunks in blocks
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._pending: list[tuple] = []
        self.nvalid = 0
        self.nnan = 0
        self.total = 0.0

    def _emit(self, start: int, end: int, byt: float, peak: tuple) -> None:
        gap = np.nan if self.prev_end is None else (start - self.prev_end) / 1e9
        self._pending.append((start, end, byt, peak[0], peak[1], peak[2], gap))
        self.prev_end = end
        if len(self._pending) >= 4096:
            self._flush()

    _DTYPES = (np.int64, np.int64, np.float64, np.float64, np.float64, np.int64, np.float64)

    def _flush(self) -> None:
        if self._pending:
            cols = zip(*self._pending, strict=True)
            self._store(tuple(np.array(c, dt) for c, dt in zip(cols, self._DTYPES,
                                                               strict=True)))
            self._pending = []

    def _store(self, chunk: tuple[np.ndarray, ...]) -> None:
        """Keep a chunk of finished bursts (``keep_rows``: fold it into the sums and keep only
        the first rows)."""
        if self.keep is None:
            self._chunks.append(chunk)
            return
        start, end, byt, _, _, _, gap = chunk
        self.n_rows += len(start)
        self.dur_ns += int((end - start).sum())
        self.sum_bytes += float(byt.sum())
        g = gap[~np.isnan(gap)]
        if len(g):
            self.gap_sum += float(g.sum())
            self.gap_n += len(g)
            self.gap_min = min(self.gap_min, float(g.min()))
            self.gaps.add(g)
        room = self.keep - self.n_kept
        if room > 0:
            self._chunks.append(tuple(c[:room] for c in chunk))
            self.n_kept += min(room, len(start))

    def stats(self) -> dict[str, Any] | None:
        """With ``keep_rows``: what the summary needs of every burst (``_summary_row``)."""
        if self.keep is None:
            return None
        median = self.gaps.percentiles([50])[0] if self.gap_n else np.nan
        self.gaps.close()
        return {"n": self.n_rows, "duration_s": self.dur_ns / 1e9, "bytes": self.sum_bytes,
                "mean_gap": self.gap_sum / self.gap_n if self.gap_n else np.nan,
                "median_gap": float(median), "min_gap": self.gap_min if self.gap_n else np.nan}

    def _emit_many(self, start: np.ndarray, end: np.ndarray, byt: np.ndarray, peak: np.ndarray,
                   raw: np.ndarray, n_over: np.ndarray) -> None:
        """``_emit`` of several consecutive bursts at once (arrays of equal length)."""
        if not len(start):
            return
        self._flush()
        start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
        gap = np.empty(len(start), np.float64)  # integer ns differences, then seconds
        gap[0] = np.nan if self.prev_end is None else (int(start[0]) - self.prev_end) / 1e9
        gap[1:] = (start[1:] - end[:-1]) / 1e9
        self._store(tuple(np.asarray(c, dt) for c, dt in zip(
            (start, end, byt, peak, raw, n_over, gap), self._DTYPES, strict=True)))
        self.prev_end = int(end[-1])

    def add(self, t: np.ndarray, b: np.ndarray, qq: np.ndarray | None = None) -> None:
        """Add consecutive windows (starts ``t``, bytes ``b``, quality bits ``qq``)."""
        m = len(t)
        if not m:
            return
        rate = to_gbps(b, self.w)
        qq = np.zeros(m, np.int64) if qq is None else np.asarray(qq, np.int64)
        good = np.where((qq & HEADLINE_EXCLUDE) == 0, rate, np.nan)
        c_over = np.concatenate([[0], np.cumsum((qq & QUALITY_OVER_LINE) != 0)])

        def pk(f: int, e: int) -> tuple:
            g = good[f:e]
            x = float(np.fmax.reduce(g))  # the NaN-ignoring maximum (np.nanmax), one ufunc
            if not np.isfinite(x) and not np.isfinite(g).any():
                x = -np.inf
            return (x, float(np.maximum.reduce(rate[f:e])), int(c_over[e] - c_over[f]))

        valid = ~np.isnan(rate)
        self.nvalid += int(valid.sum())
        self.nnan += m - int(valid.sum())
        self.total += float(np.nansum(b))
        hi = valid & (rate >= self.enter)
        stay = valid & (rate >= self.leave)
        edges = np.diff(np.concatenate([[0], stay.astype(np.int8), [0]]))
        run_s = np.flatnonzero(edges == 1)
        run_e = np.flatnonzero(edges == -1)
        if self.open is not None and not (len(run_s) and run_s[0] == 0):
            st, byt, pko, end = self.open  # the carried run ended with the last block
            if st is not None:
                self._emit(st, end, byt, pko)
            self.open = None
        his = np.flatnonzero(hi)
        if len(his):
            first_hi = his[np.minimum(np.searchsorted(his, run_s), len(his) - 1)]
            has = (first_hi >= run_s) & (first_hi < run_e)
        else:
            first_hi = np.full(len(run_s), -1)
            has = np.zeros(len(run_s), bool)
        cb = np.concatenate([[0.0], np.cumsum(np.where(valid, b, 0.0))])
        for j in range(len(run_s)):
            s, e = int(run_s[j]), int(run_e[j])
            cont = j == 0 and s == 0 and self.open is not None
            if cont and self.open[0] is not None:
                st, byt0, pk0, _ = self.open
                byt = byt0 + float(cb[e] - cb[0])
                pk1 = pk(0, e)
                pkv = (max(pk0[0], pk1[0]), max(pk0[1], pk1[1]), pk0[2] + pk1[2])
            elif has[j]:
                f = int(first_hi[j])
                st, byt, pkv = int(t[f]), float(cb[e] - cb[f]), pk(f, e)
            else:
                st, byt, pkv = None, 0.0, (-np.inf, -np.inf, 0)
            end = int(t[e - 1]) + self.w
            if e == m:  # reaches the block's end: carry it on
                self.open = [st, byt, pkv, end]
            else:
                if cont:
                    self.open = None
                if st is not None:
                    self._emit(st, end, byt, pkv)
            if j > 2 and e < m and not cont:
                break  # the rest is vectorized below
        else:
            return
        # runs j+1 .. (all but a run reaching the end), as in detect_bursts
        rest = np.arange(j + 1, len(run_s))
        last_open = len(rest) and run_e[rest[-1]] == m
        done = rest[:-1] if last_open else rest
        done = done[has[done]]
        s_idx, e_idx = first_hi[done], run_e[done]
        byt = cb[e_idx] - cb[s_idx]
        if len(s_idx):
            # every burst's maxima at once: reduceat over [s, e) pairs (e < m here)
            at = np.column_stack([s_idx, e_idx]).ravel()
            gpk = np.fmax.reduceat(good, at)[::2]
            rpk = np.maximum.reduceat(rate, at)[::2]
            nov = c_over[e_idx] - c_over[s_idx]
            for k in np.flatnonzero(~np.isfinite(gpk)):  # as pk: no finite value -> -inf
                if not np.isfinite(good[s_idx[k]:e_idx[k]]).any():
                    gpk[k] = -np.inf
            self._emit_many(t[s_idx].astype(np.int64), (t[e_idx - 1] + self.w).astype(np.int64),
                            byt, gpk, rpk, nov)
        if last_open:
            r = int(rest[-1])
            s, e = int(run_s[r]), int(run_e[r])
            if has[r]:
                f = int(first_hi[r])
                self.open = [int(t[f]), float(cb[e] - cb[f]), pk(f, e),
                             int(t[e - 1]) + self.w]
            else:
                self.open = [None, 0.0, (-np.inf, -np.inf, 0), int(t[e - 1]) + self.w]

    def finish(self) -> pd.DataFrame:
        if self.open is not None and self.open[0] is not None:
            st, byt, pk, end = self.open
            self._emit(st, end, byt, pk)
        self.open = None
        self._flush()
        if self._chunks:
            start, end, byt, peak, raw, n_over, gap = (
                np.concatenate(c) for c in zip(*self._chunks, strict=True))
            peak = np.where(np.isfinite(peak), peak, np.nan)
        else:
            start = end = np.zeros(0, np.int64)
            byt = peak = raw = gap = np.zeros(0)
            n_over = np.zeros(0, np.int64)
        self._chunks = []
        dur = (end - start) / 1e9
        return pd.DataFrame({
            "start_ns": start.astype(np.int64), "end_ns": end.astype(np.int64),
            "duration_s": dur, "bytes": byt.astype(float), "peak_gbps": peak.astype(float),
            "raw_peak_gbps": raw.astype(float), "over_line_windows": n_over,
            "mean_gbps": np.divide(byt * 8, (end - start).astype(float),
                                   out=np.zeros(len(byt)), where=(end - start) > 0),
            "gap_before_s": gap.astype(float),
        })


def burst_analysis_capture(capture, *, capacity_gbps: float, start_ns: int | None = None,
                           end_ns: int | None = None, width_ns: int = MS,
                           origin_ns: int | None = None, by: str | None = "series",
                           source: str | None = "infiniband",
                           groups: dict[str, list[str]] | None = None, keep: bool = True,
                           enter_frac: float = 0.25, leave_frac: float = 0.10,
                           expected_allreduce: float | None = None,
                           t_ref_ns: int | None = None, progress=None,
                           keep_rows: int | None = None) -> BurstResult:
    """``burst_analysis`` of a capture on disk, one segment at a time (bounded memory).

    ``capture``: a capture directory, ``stream.CaptureInfo`` or ``stream.MemoryCapture`` (what
    ``burst_analysis`` passes). The same result as
    ``burst_analysis(byte_intervals(load_capture(capture), source=source), ...)`` with the same
    arguments (windows on the one grid: ``origin_ns``, default the capture start): the windows
    stream from ``stream.iter_windows`` and a run of windows above the leave threshold that
    crosses a segment edge is carried on, so bursts spanning segments are whole. Only the burst
    table and per-series counters are kept. ``keep_rows``: keep only each series' first bursts
    in ``table`` (the summary still counts every burst; memory then stays flat in the capture's
    length, as a table view needs). Raises ``ValueError`` as ``burst_analysis``.
    """
    if capacity_gbps <= 0:
        raise ValueError(f"link capacity must be positive, got {capacity_gbps} Gb/s")
    if not 0 < leave_frac <= enter_frac:
        raise ValueError(f"need 0 < leave ({leave_frac}) <= enter ({enter_frac})")
    info = capture_info(capture)
    origin = int(info.t_start_ns) if origin_ns is None else int(origin_ns)
    state: dict = {}
    acc = BurstStreamAcc(info, capacity_gbps=capacity_gbps, width_ns=width_ns, by=by,
                         source=source, groups=groups, keep=keep, enter_frac=enter_frac,
                         leave_frac=leave_frac, keep_rows=keep_rows)
    for _, b, q in iter_windows(info, [WindowGrid(int(width_ns), origin, start_ns, end_ns)],
                                by=by, source=source, progress=progress, state=state,
                                **pass_hooks([acc.flag])):
        acc.add(b, q)
    return acc.result(state.get("spans", {}), start_ns=start_ns, end_ns=end_ns,
                      expected_allreduce=expected_allreduce, t_ref_ns=t_ref_ns)


class BurstStreamAcc:
    """The detector of ``burst_analysis_capture`` fed block by block, so that a caller's own
    pass (the report's ``capture_pass``) can feed it: ``add`` each block of windows (bytes and
    quality frames of ``stream.iter_windows`` with ``by``/``source``), then ``result(spans)``
    (``spans``: ``state["spans"]`` of that pass, keyed like the columns). Arguments as
    ``burst_analysis_capture``."""

    def __init__(self, info, *, capacity_gbps: float, width_ns: int = MS,
                 by: str | None = "series", source: str | None = "infiniband",
                 groups: dict[str, list[str]] | None = None, keep: bool = True,
                 enter_frac: float = 0.25, leave_frac: float = 0.10,
                 keep_rows: int | None = None):
        self.capacity_gbps, self.width_ns = capacity_gbps, int(width_ns)
        self.keep_rows = keep_rows
        self.groups, self.keep = groups, keep
        self.enter_frac, self.leave_frac = enter_frac, leave_frac
        self.det: dict[str, _BurstStream] = {}
        self.n_over: dict[str, int] = {}
        self.flag = OverLineFlagger(info, by=by, groups=groups, source=source)

    def add(self, b: pd.DataFrame, q: pd.DataFrame) -> None:
        """Fold in one block of windows (bytes, quality; columns as the pass's ``by``)."""
        b, q = link_view(b, q, self.groups, self.keep)
        q = self.flag(b, q, self.width_ns)
        t = b.index.to_numpy()
        det, n_over = self.det, self.n_over
        for col in b.columns:
            d = det.get(col)
            if d is None:
                d = det[col] = _BurstStream(self.width_ns, self.enter_frac * self.capacity_gbps,
                                            self.leave_frac * self.capacity_gbps,
                                            keep_rows=self.keep_rows)
            qq = q[col].to_numpy(np.int64)
            n_over[col] = n_over.get(col, 0) + int(((qq & QUALITY_OVER_LINE) != 0).sum())
            d.add(t, b[col].to_numpy(np.float64), qq)

    def result(self, spans: dict, *, start_ns: int | None = None, end_ns: int | None = None,
               expected_allreduce: float | None = None, t_ref_ns: int | None = None,
               table: bool = True) -> BurstResult:
        """The ``BurstResult`` of the blocks added (``spans``: {column: [first, last] ns}).
        ``table=False``: the summary only (``BurstResult.table`` empty), so that a caller that
        shows the summary does not hold one row per burst of a long capture."""
        groups, width_ns, capacity_gbps = self.groups, self.width_ns, self.capacity_gbps
        enter_frac, leave_frac = self.enter_frac, self.leave_frac
        lo = int(start_ns) if start_ns is not None else min(s[0] for s in spans.values())
        hi = int(end_ns) if end_ns is not None else max(s[1] for s in spans.values())
        t_ref = lo if t_ref_ns is None else int(t_ref_ns)
        tables, summary = [], []
        for col, d in self.det.items():
            if col not in spans and col not in (groups or {}):
                continue
            bt = d.finish()
            if table:
                tables.append(_label_table(bt, col, t_ref, expected_allreduce))
            summary.append(_summary_row(col, bt, nvalid=d.nvalid, nansum=d.total,
                                        nan_windows=d.nnan, width_ns=width_ns,
                                        capacity_gbps=capacity_gbps, enter_frac=enter_frac,
                                        leave_frac=leave_frac,
                                        over_line_windows=self.n_over.get(col, 0),
                                        stats=d.stats()))
        return _result(tables, summary, capacity_gbps=capacity_gbps, enter_frac=enter_frac,
                       leave_frac=leave_frac, width_ns=width_ns, lo=lo, hi=hi,
                       expected_allreduce=expected_allreduce)
