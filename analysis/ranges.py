"""Bytes in many ranges, and the 1 ms peaks and bursts inside them: what attribution asks of a capture.

Attribution (``attribute.attribute``) asks two questions about the request windows: the bytes
of each range (``integrate``) and, per range, the headline 1 ms rate, the burst count and the
over-line window count of the windows inside it (``window_stats``). One answerer,
``RangeQueries``, records the questions in a dry run and answers them all in one pass of the
engine (``stream.iter_windows``), its consumer fed the pass's intervals and windows: over a
capture's segments, or over intervals in memory as one segment (``stream.memory_capture``).
A range's bytes are ``windows.RangeBytes`` (the consumer ``windows.integrate`` feeds one segment
in memory; ``RangeIndex`` finds the ranges touching a span), ``RangeWindowStats`` folds blocks
of windows into every range's statistics, vectorized over the ranges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .curve import HEADLINE_EXCLUDE, QUALITY_OVER_LINE, CounterCurve
from .load import port_rates_gbps
from .overline_pass import OverLineFlagger, pass_hooks
from .stream import WindowGrid, capture_info, edge_spans, iter_windows
from .windows import RangeBytes, RangeIndex, group_keys

__all__ = ["DEFAULT_CAPACITY_GBPS", "capacity_gbps", "RangeQueries",
           "RangeIndex", "RangeWindowStats", "WindowBlock", "window_stats"]

#: The capacity bursts are judged against when the manifest records no port rate (Gb/s).
DEFAULT_CAPACITY_GBPS = 200.0


def at_bound(result, bound: float | None):
    """``window_stats``' result with each headline above ``bound`` (Gb/s, the lowest physical
    bound of the node's tx path: ``overline.line_gbps_of``) given as the bound: such a window
    is over the bound by no more than its timing uncertainty (else it was kept out as over line
    rate), so it is "at line rate", never above it (the headline rule of ``peaks``)."""
    peak, nb, n_over = result
    if bound is not None and np.isfinite(bound):
        peak = np.where(np.asarray(peak) > bound, float(bound), peak)
    return peak, nb, n_over


def capacity_gbps(capture) -> float:
    """Return the port rate recorded in the capture's device records (Gb/s), else 200."""
    return max(port_rates_gbps(capture.meta).values(), default=DEFAULT_CAPACITY_GBPS)


def window_stats(t0: np.ndarray, t1: np.ndarray, fine: pd.Series, width_ns: int,
                  capacity: float, quality: pd.Series | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Headline fine-window rate (Gb/s), burst count and over-line window count inside each
    [t0, t1] (full windows only).

    ``fine``: bytes per ``width_ns`` window; ``quality``: its ``rebin_with_quality`` bits. The
    headline is the highest window consistent with physics (``peaks.HEADLINE_EXCLUDE``: never
    gap-spread, partial or over line rate), as ``peaks.peak_table`` finds it. Bursts follow
    ``bursts.detect_bursts`` (hysteresis relative to ``capacity``) on the windows inside the
    range. One block of ``RangeWindowStats``.
    """
    st = RangeWindowStats(t0, t1, width_ns, capacity)
    st.add(fine.index.to_numpy(dtype=np.int64), fine.to_numpy(dtype=float),
           None if quality is None else quality.to_numpy(dtype=np.int64))
    return st.result()


class RangeWindowStats:
    """Per range [a, b]: the headline 1 ms rate, the burst count and the over-line window count
    of the windows lying wholly inside it, fed block by block (vectorized over the ranges).

    ``a``, ``b``: int64 ns arrays, shape (n,); ``width_ns``: window width; ``capacity_gbps``:
    burst thresholds as ``bursts.detect_bursts`` (enter at ``enter_frac``, stay while at or
    above ``leave_frac`` of it). ``add(t, v, qq)`` takes consecutive windows (starts ``t``
    int64 ns, bytes ``v``, ``rebin_with_quality`` bits ``qq`` or None) in time order; blocks
    follow each other without a gap. ``result()`` returns ``(peak_gbps float (n,), bursts int64
    (n,), over_line int64 (n,))``: the same as ``detect_bursts`` and ``peaks.HEADLINE_EXCLUDE``
    on each range's windows (a burst = a run of valid windows at or above the leave threshold
    holding one at or above the enter threshold; a run reaching a block's end is carried into
    the next block). Cost: O(windows + ranges x blocks they touch) (``RangeIndex``), no Python
    loop per range.
    """

    def __init__(self, a, b, width_ns: int, capacity_gbps: float, *, enter_frac: float = 0.25,
                 leave_frac: float = 0.10):
        self.a = np.asarray(a, dtype=np.int64).ravel()
        self.b = np.asarray(b, dtype=np.int64).ravel()
        self.w = int(width_ns)
        self.enter = enter_frac * float(capacity_gbps)
        self.leave = leave_frac * float(capacity_gbps)
        n = len(self.a)
        self.index = RangeIndex(self.a, self.b)
        self.peak = np.full(n, -np.inf)
        self.n_over = np.zeros(n, np.int64)
        self.count = np.zeros(n, np.int64)
        self.open = np.zeros(n, bool)  # the range's last part ended inside a run ...
        self.open_hi = np.zeros(n, bool)  # ... which already holds an enter window

    def add(self, t: np.ndarray, v: np.ndarray, qq: np.ndarray | None = None) -> None:
        """Fold in the next block of windows: starts ``t`` (int64 ns), bytes ``v`` (float64),
        quality bits ``qq`` (int, or None for all good), each shape (m,)."""
        self.add_block(WindowBlock(t, v, qq, self.w))

    def add_block(self, blk: WindowBlock) -> None:
        """``add`` of a ``WindowBlock`` (one block's rates, runs and maxima, shared by every
        ``RangeWindowStats`` of the same width and thresholds that it is added to)."""
        t = blk.t
        m = len(t)
        if not m or not len(self.a):
            return
        w = self.w
        if blk.w != w:
            raise ValueError("RangeWindowStats: a block of another window width")
        idx = self.index.touching(int(t[0]), int(t[-1]) + w)
        if not len(idx):
            return
        s0 = np.searchsorted(t, self.a[idx], "left")
        s1 = np.searchsorted(blk.t_end, self.b[idx], "right")
        keep = s1 > s0
        idx, s0, s1 = idx[keep], s0[keep], s1[keep]
        if not len(idx):
            return
        c_over = blk.c_over
        self.n_over[idx] += c_over[s1] - c_over[s0]
        self.peak[idx] = np.maximum(self.peak[idx], blk.range_max(s0, s1))
        c_hi, run_s, run_e, c_run = blk.runs(self.enter, self.leave)
        # runs wholly inside [s0, s1)
        j_lo = np.searchsorted(run_s, s0, "left")
        j_hi = np.searchsorted(run_e, s1, "right")
        cnt = np.where(j_hi > j_lo, c_run[np.maximum(j_hi, j_lo)] - c_run[j_lo], 0)
        # the run holding s0 (started before it), cut at s0 (and at s1)
        j0 = np.searchsorted(run_s, s0, "right") - 1
        j0c = np.maximum(j0, 0)
        in0 = (j0 >= 0) & (run_e[j0c] > s0) if len(run_s) else np.zeros(len(s0), bool)
        e_first = np.minimum(run_e[j0c], s1) if len(run_s) else s0
        first_hi = in0 & ((c_hi[e_first] - c_hi[s0]) > 0)
        cut0 = in0 & (run_s[j0c] < s0) if len(run_s) else in0
        cnt += cut0 & first_hi
        # the run holding s1 - 1 that started inside the range, cut at s1
        jl = np.searchsorted(run_s, s1 - 1, "right") - 1
        jlc = np.maximum(jl, 0)
        inl = (jl >= 0) & (run_e[jlc] > s1 - 1) if len(run_s) else np.zeros(len(s0), bool)
        st_l = np.maximum(run_s[jlc], s0) if len(run_s) else s0
        last_hi = inl & ((c_hi[s1] - c_hi[st_l]) > 0)
        cut1 = inl & (run_e[jlc] > s1) & (run_s[jlc] >= s0) if len(run_s) else inl
        cnt += cut1 & last_hi
        # cnt: every run inside the part, cut at its ends, that holds an enter window; now the
        # run carried from the previous block joins the first, and the last one is carried on
        single = in0 & inl & (j0c == jlc)
        op, oh = self.open[idx], self.open_hi[idx]
        join = op & in0
        cnt -= join & first_hi  # the joined first run is counted once, below
        merged_hi = oh | first_hi
        ends_here = join & ~single  # the joined run ends inside this part
        cnt += ends_here & merged_hi
        cnt += op & ~in0 & oh  # the carried run ended with the previous block
        # the run reaching the part's end stays open (not yet counted)
        new_open = inl
        new_hi = np.where(join & single, merged_hi, last_hi)
        cnt -= inl & ~(join & single) & last_hi
        self.count[idx] += cnt
        self.open[idx] = new_open
        self.open_hi[idx] = new_hi

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(peak Gb/s float64 (n,), NaN where no valid window; bursts int64 (n,); over-line windows
        int64 (n,)), a run still open at the last block counted when it holds an enter window."""
        peak = np.where(np.isfinite(self.peak), self.peak, np.nan)
        return peak, self.count + (self.open & self.open_hi), self.n_over.copy()


class WindowBlock:
    """One block of windows as every ``RangeWindowStats`` reads it, computed once for all of
    them: starts ``t``, ends ``t_end``, the over-line count before each window (``c_over``),
    the headline values (``good``: the rate, -inf where ``peaks.HEADLINE_EXCLUDE`` keeps a
    window out or it is NaN) and their sparse table of maxima (``range_max``, levels made as
    far as a range asks), the burst runs per pair of thresholds (``runs``)."""

    def __init__(self, t: np.ndarray, v: np.ndarray, qq: np.ndarray | None, width_ns: int):
        self.t = np.asarray(t, dtype=np.int64)
        self.w = w = int(width_ns)
        m = len(self.t)
        self.t_end = self.t + w
        self.rate = rate = np.asarray(v, dtype=np.float64) * 8.0 / float(w)
        q = np.zeros(m, np.int64) if qq is None else np.asarray(qq, dtype=np.int64)
        self.valid = ~np.isnan(rate)
        self.good = np.where(((q & HEADLINE_EXCLUDE) == 0) & self.valid, rate, -np.inf)
        self.c_over = np.concatenate([[0], np.cumsum((q & QUALITY_OVER_LINE) != 0)])
        self.levels = [self.good]  # levels[k][i] = max(good[i:i + 2**k])
        self._runs: dict[tuple[float, float], tuple] = {}

    def range_max(self, s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
        """max(good[s0[i]:s1[i]]) for every i (s1 > s0), by the sparse table: O(m log L + n)."""
        need = int(np.max(s1 - s0))
        out = np.full(len(s0), -np.inf)
        length = s1 - s0
        k = 0
        while True:
            # ranges whose highest power of two <= length is 2**k
            sel = (length >= (1 << k)) & (length < (1 << (k + 1)))
            if sel.any():
                table = self.levels[k]
                a, b = s0[sel], s1[sel] - (1 << k)
                out[sel] = np.maximum(table[a], table[b])
            if (1 << (k + 1)) > need:
                return out
            if len(self.levels) == k + 1:
                table, step = self.levels[k], 1 << k
                self.levels.append(np.maximum(table[:-step], table[step:])
                                   if len(table) > step else table[:0])
            k += 1

    def runs(self, enter: float, leave: float) -> tuple:
        """(c_hi, run_s, run_e, c_run) of the burst runs at these thresholds: windows at or
        above ``leave`` in a row (starts, exclusive ends), how many windows at or above
        ``enter`` before each window, how many runs holding one before each run."""
        got = self._runs.get((enter, leave))
        if got is None:
            rate, valid = self.rate, self.valid
            hi = valid & (rate >= enter)
            stay = valid & (rate >= leave)
            c_hi = np.concatenate([[0], np.cumsum(hi)])
            edges = np.diff(np.concatenate([[0], stay.astype(np.int8), [0]]))
            run_s = np.flatnonzero(edges == 1)
            run_e = np.flatnonzero(edges == -1)  # exclusive
            run_has = (c_hi[run_e] - c_hi[run_s]) > 0
            c_run = np.concatenate([[0], np.cumsum(run_has)])
            got = self._runs[(enter, leave)] = (c_hi, run_s, run_e, c_run)
        return got


class RangeQueries:
    """Bytes in many ranges and the 1 ms peaks and bursts inside them, in one pass (attribute).

    Used twice around one ``run``: first every ``integrate`` / ``window_stats`` call is recorded
    (answers are placeholders of the right shape), then ``run`` reads the capture once, segment
    by segment, and the same calls in the same order get the real answers: those of
    ``series.integrate`` and ``attribute._window_stats`` on the whole capture. A range's bytes
    are summed over the segments it crosses (each segment's intervals evaluated on the part of
    the range inside them); the 1 ms windows of ``series.rebin(by="direction")`` stream by, and
    ``attribute.RangeWindowStats`` keeps every range's running peak, over-line count and burst
    state (a run carried across blocks) over the windows lying wholly inside it, vectorized
    over the ranges. Memory grows with the number of ranges, not the readings.
    """

    def __init__(self, capture, *, origin_ns: int, width_ns: int, capacity_gbps: float,
                 source: str = "infiniband"):
        self.info = capture_info(capture)
        self.source = source
        self.width_ns = int(width_ns)
        self.origin = int(origin_ns)
        self.capacity = float(capacity_gbps)
        self.spans = edge_spans(self.info, source)
        self.queries: list[tuple] = []
        self.answers: list | None = None
        self.cursor = 0

    # -- what attribute asks ----------------------------------------------------------------

    def has_intervals(self) -> bool:
        return bool(self.spans)

    @property
    def recording(self) -> bool:
        """True in the dry run (the ranges asked are being recorded, answers are NaN), so a
        caller can skip work whose result the dry run throws away."""
        return self.answers is None

    def common_span(self) -> tuple[int, int]:
        return (max(s[0] for s in self.spans.values()), min(s[1] for s in self.spans.values()))

    def span(self) -> tuple[int, int]:
        return (min(s[0] for s in self.spans.values()), max(s[1] for s in self.spans.values()))

    def set_grid(self, origin: int, capacity: float) -> None:
        if int(origin) != self.origin or float(capacity) != self.capacity:
            raise ValueError("RangeQueries: grid origin or capacity changed between runs")

    def _ask(self, q: tuple):
        if self.answers is None:
            self.queries.append(q)
            return None
        k = self.cursor
        self.cursor += 1
        old = self.queries[k]
        if old[0] != q[0] or not (np.array_equal(old[1], q[1]) and np.array_equal(old[2], q[2])):
            raise RuntimeError("RangeQueries: the second run asked different ranges")
        return self.answers[k]

    def integrate(self, a, b, *, by: str, allow_partial: bool = False, known: bool = False):
        """The bytes of ranges [a[i], b[i]) per group ``by`` (``windows.integrate``'s rule;
        NaN in the dry run). ``known``: (that frame, the known parts: ``windows.range_frame``)."""
        a = np.asarray(a, dtype=np.int64).ravel()
        b = np.asarray(b, dtype=np.int64).ravel()
        got = self._ask(("integrate", a, b, by, allow_partial, known))
        if got is not None:
            return got
        cdf = self.info.counters
        cols = list(dict.fromkeys(cdf.at[c, by] for c in sorted(self.spans)))
        out = pd.DataFrame(np.full((len(a), len(cols)), np.nan), columns=cols)
        out.columns.name = by
        return (out, out.copy()) if known else out

    def window_stats(self, a, b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = np.asarray(a, dtype=np.int64).ravel()
        b = np.asarray(b, dtype=np.int64).ravel()
        got = self._ask(("stats", a, b))
        if got is not None:
            return got
        return (np.full(len(a), np.nan), np.zeros(len(a), np.int64),
                np.zeros(len(a), np.int64))

    # -- the pass ---------------------------------------------------------------------------

    def run(self) -> None:
        """Answer every recorded query in one pass over the capture."""
        rr = self.consumer()
        # only the tx windows are asked about (``_RangeRun.add``): the other counters are read
        # in the same pass for their intervals (the bytes of the ranges, the spans), not
        # re-binned; a direction's windows are the sum of its own counters', so tx's are the
        # same, and windows before or after every tx reading hold nothing a range counts
        cdf = self.info.counters
        kw: dict = {}
        if self.source is not None and {"source", "direction"} <= set(cdf.columns):
            data = cdf.index[cdf["data"] & (cdf["source"] == self.source)]
            tx = [int(c) for c in data if cdf.at[c, "direction"] == "tx"]
            if tx:
                kw = {"counters": tx, "extra_counters": [int(c) for c in data
                                                         if int(c) not in tx]}
        for _, bb, qq in iter_windows(self.info, [rr.grid], by="direction", source=self.source,
                                      **kw, **pass_hooks([rr.flag], on_parts=rr.on_parts)):
            rr.add(bb, qq)
        rr.finish()

    def consumer(self) -> _RangeRun:
        """The pass of ``run`` as a consumer, for a caller's own pass (the report's
        ``capture_pass``): feed ``on_parts`` with each file's intervals (of this source's
        counters only) and ``add`` with the blocks of windows of ``grid`` (``by="direction"``,
        this source's data counters, in order), then ``finish()`` stores the answers."""
        return _RangeRun(self)


class _RangeRun:
    """One pass answering a ``RangeQueries``' recorded queries (see ``RangeQueries.run``)."""

    def __init__(self, rq: RangeQueries):
        self.rq = rq
        self.flag = OverLineFlagger(rq.info, by="direction", source=rq.source)
        self.integ = [(k, q) for k, q in enumerate(rq.queries) if q[0] == "integrate"]
        stats = [(k, q) for k, q in enumerate(rq.queries) if q[0] == "stats"]
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        # each integrate query's ranges, summed over the segments they cross
        self.bytes = {k: RangeBytes(q[1], q[2]) for k, q in self.integ}
        # per stats query: the 1 ms peaks, over-line counts and bursts of every range, fed
        # block by block (attribute.RangeWindowStats: vectorized over the ranges)
        self.rstats = {k: RangeWindowStats(a, b, rq.width_ns, rq.capacity)
                       for k, (_, a, b) in stats}
        self.grid = WindowGrid(rq.width_ns, rq.origin)

    def on_parts(self, parts) -> None:
        first, last = self.first, self.last
        for c, iv in parts.items():
            if not len(iv["t0_ns"]):
                continue
            first.setdefault(c, int(iv["t0_ns"][0]))
            last[c] = int(iv["t1_ns"][-1])
            cnt = CounterCurve(iv["t0_ns"], iv["t1_ns"], iv["bytes"], iv["flag"])
            RangeBytes.add_all(self.bytes.values(), c, cnt)  # one evaluation for all

    def add(self, bb: pd.DataFrame, qq: pd.DataFrame) -> None:
        if "tx" not in bb.columns or not len(bb):
            return
        w = self.rq.width_ns
        # the headline rule of every 1 ms peak (peaks.headline_peak): over line rate,
        # gap-spread and partial windows never become a peak
        qtx = self.flag(bb["tx"].to_frame(), qq["tx"].to_frame(), w)["tx"].to_numpy(np.int64)
        blk = WindowBlock(bb.index.to_numpy(), bb["tx"].to_numpy(np.float64), qtx, w)
        for st in self.rstats.values():
            st.add_block(blk)  # the block's rates, runs and maxima made once for all

    def finish(self) -> None:
        rq = self.rq
        cdf = rq.info.counters
        first, last = self.first, self.last
        answers: list = [None] * len(rq.queries)
        for k, st in self.rstats.items():
            answers[k] = at_bound(st.result(), self.flag.lines.get("tx"))
        for k, (_, _a, _b, by, allow_partial, known) in self.integ:
            answers[k] = self.bytes[k].result(group_keys(cdf, by, sorted(first)), by,
                                              allow_partial=allow_partial, known=known)
        rq.answers = answers
        rq.cursor = 0
        # the two ends of the capture decided the attribution's span; the pass saw them all
        spans = {c: [first[c], last[c]] for c in first}
        if spans != rq.spans:
            raise RuntimeError(f"{rq.info.path}: a counter's first or last interval lies "
                               "outside the capture's first and last segments; attribute it "
                               "from a loaded capture (load_capture)")
