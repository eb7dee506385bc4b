"""Peak rate per window width over a time range: the study's peak-vs-window table.

The averaging window decides the peak (method.md, "Reference observations": the same 8K prefill
peaked at 181 Gb/s in 1 ms windows, 96 in 5 ms, 44 in 100 ms, 40 in 1 s, 37 over the whole
prefill). ``peak_table`` reproduces that table's shape for any range of a capture: for each
series and each window width the highest rate, when it happened, percentiles of the window rates,
and the mean over the range; optionally the uncertainty of each peak from the readings' timing
brackets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rdmascope.counters import fewest_bytes
from rdmascope.quantiles import ExactPercentiles

from .curve import (
    HEADLINE_EXCLUDE,
    INSTANT_UNC_NS,
    QUALITY_EMPTY,
    QUALITY_GAP,
    QUALITY_INVALID,
    QUALITY_OVER_LINE,
    QUALITY_PARTIAL,
    counters_of,
    cover_tolerance_ns,
)
from .intervals import DEFAULT_GAP_FACTOR, intervals_frame
from .links import group_links
from .overline import flag_over_line
from .overline_pass import OverLineFlagger, pass_hooks
from .stream import (
    FAR_NS,
    MemoryCapture,
    WindowGrid,
    capture_info,
    iter_intervals,
    iter_windows,
    memory_capture,
)
from .windows import link_coverage, rebin_with_quality, to_gbps

__all__ = ["DEFAULT_WINDOWS_NS", "INSTANT_UNC_NS", "HEADLINE_EXCLUDE", "peak_table",
           "window_label", "rebin_view", "peak_bounds", "headline_peak"]

MS = 1_000_000
# HEADLINE_EXCLUDE (the quality bits that keep a window out of a headline peak) and
# INSTANT_UNC_NS (0.1 ms) live with the window rule in ``curve``.
#: The study's window widths: 1 ms, 5 ms, 100 ms, 1 s (the whole range is added as a last row).
DEFAULT_WINDOWS_NS = (MS, 5 * MS, 100 * MS, 1000 * MS)


def window_label(width_ns: int) -> str:
    """Return a short label for a window width: "1 ms", "100 ms", "1 s", "250 us"."""
    for unit, ns in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if width_ns >= ns and width_ns % ns == 0:
            return f"{width_ns // ns} {unit}"
    for unit, ns in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if width_ns >= ns:
            return f"{width_ns / ns:g} {unit}"
    return f"{width_ns} ns"


def rebin_view(intervals: pd.DataFrame, width_ns: int, *, origin_ns: int | None = None,
               start_ns: int | None = None, end_ns: int | None = None, by: str | None = "series",
               groups: dict[str, list[str]] | None = None, keep: bool = True,
               line_gbps: float | dict | None = None, instant_unc_ns: int = INSTANT_UNC_NS,
               coverage: bool = False) -> tuple:
    """Re-bin with quality and, when ``groups`` is given, add the summed link columns.

    Returns (bytes_df, quality_df) as ``rebin_with_quality``; a link's quality is the OR of its
    members' gap/invalid/partial/empty bits, and its own ``QUALITY_OVER_LINE`` judged against
    the link's line rate (``series.flag_over_line``). With ``keep=False`` only the links remain.
    ``line_gbps`` overrides line rates (one number, or {column: Gb/s}). Errors as ``rebin`` and
    ``group_links``. ``coverage``: return (bytes_df, quality_df, ``windows.Coverage``) with
    the links' coverage too (``windows.link_coverage``): the rate over each window's covered
    part.
    """
    # the coverage: asked for, or the links' (a partly covered window judged over its part)
    b, q, *cov = rebin_with_quality(intervals, width_ns, origin_ns=origin_ns,
                                    start_ns=start_ns, end_ns=end_ns, by=by,
                                    line_gbps=line_gbps, instant_unc_ns=instant_unc_ns,
                                    coverage=coverage or bool(groups))
    cov = link_coverage(cov[0], groups, keep=keep) if cov else None
    if groups:
        b = group_links(b, groups, keep=keep)
        q2 = q.copy() if keep else pd.DataFrame(index=q.index)
        for link, members in groups.items():
            q2[link] = np.bitwise_or.reduce(q[list(members)].to_numpy(), axis=1) \
                & ~np.int8(QUALITY_OVER_LINE)
        links = list(groups)
        q2[links] = flag_over_line(intervals, b[links], q2[links], int(width_ns), by="series",
                                   groups=groups, line_gbps=line_gbps,
                                   instant_unc_ns=instant_unc_ns,
                                   covered_ns=cov.covered_ns[links])
        q = q2
    return (b, q, cov) if coverage else (b, q)


def headline_peak(gbps, quality) -> tuple[int | None, int | None]:
    """Return (index of the headline window, index of the raw maximum) of one series.

    The headline is the highest window whose ``quality`` has none of ``HEADLINE_EXCLUDE``: a
    peak consistent with physics, never gap-spread, partial or over line rate; the raw maximum
    is the highest finite window of all. ``gbps``/``quality``: equal-length arrays. None where
    no window qualifies.
    """
    r = np.asarray(gbps, dtype=np.float64)
    qq = np.asarray(quality, dtype=np.int64)
    fin = np.isfinite(r)
    good = fin & ((qq & HEADLINE_EXCLUDE) == 0)
    head = int(np.flatnonzero(good)[np.argmax(r[good])]) if good.any() else None
    raw = int(np.flatnonzero(fin)[np.argmax(r[fin])]) if fin.any() else None
    return head, raw


def _cause_text(causes: list[str]) -> str:
    counts = {c: causes.count(c) for c in dict.fromkeys(causes)}
    return "; ".join(f"{c} x{n}" for c, n in counts.items())


def peak_bounds(intervals: pd.DataFrame, window_start_ns, width_ns: int, *,
                by: str | None = "series", groups: dict[str, list[str]] | None = None,
                instant_unc_ns: int = INSTANT_UNC_NS) -> pd.DataFrame:
    """Return the low/high bytes of given windows when reading instants move within their
    timing uncertainty.

    Each reading's instant is uncertain by u = half its read bracket (``t_unc_ns``, the
    system call: microseconds) + ``instant_unc_ns`` (default ``INSTANT_UNC_NS``, 0.1 ms: the
    adapter's counter update period, which the read bracket does not see; method.md, "The
    sampler": each instant is known only to about +-0.1-0.2 ms, so a single 1 ms value carries
    about +-15-25 %). The two add up (worst case). The cumulative byte curve F through the
    readings can then lie anywhere between itself shifted earlier and later by the local u, so
    a window [a, b) holds between F(b - u_b) - F(a + u_a) and F(b + u_b) - F(a - u_a) bytes.
    ``window_start_ns``: one start per column (a Series indexed by group name, e.g. each
    series' peak window). Returns a DataFrame indexed by group: ``low_bytes``, ``high_bytes``
    (NaN when the window touches a NaN interval; ``high_bytes`` NaN too when the widened window
    reaches past the first or last reading of a counter: unknown bytes, never 0). Raises ``ValueError`` on a negative
    ``instant_unc_ns``.
    """
    if not instant_unc_ns >= 0:
        raise ValueError(f"instant_unc_ns must be >= 0 ns, got {instant_unc_ns!r}")
    extra = int(instant_unc_ns)
    counters = counters_of(intervals, by, with_unc=True)
    names = list(window_start_ns.index)
    members = {n: [n] for n in names}
    for link, ms in (groups or {}).items():
        if link in members:
            members[link] = list(ms)
    lo = dict.fromkeys(names, 0.0)
    hi = dict.fromkeys(names, 0.0)
    for key, spec in counters:
        c = None
        for name in names:
            if key not in members[name] or pd.isna(window_start_ns[name]):
                continue
            c = c or spec.build()
            a = np.array([int(window_start_ns[name])], np.int64)
            b = a + int(width_ns)
            ua, ub = c.edge_unc(a) + extra, c.edge_unc(b) + extra
            # F(b - ub) - F(a + ua): the over-line rule's fewest bytes (rdmascope.counters)
            low = fewest_bytes(c.at, c.nan_t0, c.nan_t1, a, b, ua, ub)[0]
            if np.isnan(low):  # the widened window touches an unknown interval
                lo[name] = hi[name] = np.nan
                continue
            lo[name] += float(low)
            if len(c.t0) == 0 or a[0] - ua[0] < c.t0[0] or b[0] + ub[0] > c.t1[-1]:
                # the widened window reaches past the counter's first or last reading: the
                # bytes there are unknown, never 0, so the most it can hold is unknown
                hi[name] = np.nan
            else:
                hi[name] += float((c.at(b + ub) - c.at(a - ua))[0])
    rows = {n: ((lo[n], hi[n]) if not pd.isna(window_start_ns[n]) else (np.nan, np.nan))
            for n in names}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["low_bytes", "high_bytes"])


def _whole_range_row(col: str, mean: float, qq: int, lo: int, hi: int, t_ref: int,
                     percentiles) -> dict:
    """The peak table's "whole range" row of one series: its mean rate over [lo, hi).

    ``mean`` in Gb/s, ``qq`` the range's quality bits (series.QUALITY_*), times in ns on the
    capture's clock (``t_ref`` is t = 0 of ``peak_t_s``); every percentile equals the mean.
    """
    known = bool(np.isfinite(mean))  # an unknown mean has no instant to show
    # peak_t_ns stays the range's start (the row's window, which --uncertainty reads)
    row = {"series": col, "window": "whole range", "window_ns": hi - lo,
           "peak_gbps": mean, "peak_t_ns": lo,
           "peak_t_s": (lo - t_ref) / 1e9 if known else np.nan,
           "raw_max_gbps": mean, "raw_max_t_ns": lo,
           "n_windows": 1 if not (qq & (QUALITY_EMPTY | QUALITY_INVALID)) else 0,
           "n_nan_windows": int(bool(qq & QUALITY_INVALID)),
           "n_gap_windows": int(bool(qq & QUALITY_GAP)),
           "n_over_line_windows": int(bool(qq & QUALITY_OVER_LINE)),
           "over_line_causes": "", "bound_gbps": np.nan, "at_line_rate": False}
    for p in percentiles:
        row[f"p{p:g}_gbps"] = mean
    return row


def peak_table(intervals: pd.DataFrame, *, start_ns: int | None = None,
               end_ns: int | None = None, windows_ns=DEFAULT_WINDOWS_NS,
               origin_ns: int | None = None, by: str | None = "series",
               groups: dict[str, list[str]] | None = None, keep: bool = True,
               percentiles=(50, 90, 99), uncertainty: bool = False,
               t_ref_ns: int | None = None, instant_unc_ns: int = INSTANT_UNC_NS,
               line_gbps: float | dict | None = None) -> pd.DataFrame:
    """Return the peak-vs-window table of a time range [start_ns, end_ns).

    For each series (columns of ``rebin``, plus links of ``groups``) and each width in
    ``windows_ns``: windows aligned to ``origin_ns`` (default: the capture start,
    ``series.default_origin``; the range never moves the grid), only those lying
    wholly inside the range and fully covered by readings; the headline ``peak_gbps`` and the
    start of its window ``peak_t_ns``: the highest window consistent with physics (none of
    ``HEADLINE_EXCLUDE``: never gap-spread, partial or over line rate; ``headline_peak``);
    beside it ``raw_max_gbps`` / ``raw_max_t_ns``, the highest window of all; percentiles
    ``p<q>_gbps`` of the window rates, the counts ``n_windows`` / ``n_nan_windows`` (windows
    touching a reset/saturated/unavailable/implausible interval, left out) / ``n_gap_windows``
    (holding gap-spread bytes) / ``n_over_line_windows`` (over the line rate by more than the
    timing uncertainty allows, ``series.flag_over_line``) and ``over_line_causes`` (e.g. "late
    counter update x2; gap spread x1", ``series.over_line_causes``). A last
    row per series with window "whole range" gives the mean over the range (bytes / duration).
    ``mean_gbps`` repeats that mean on every row. With ``uncertainty`` each row also has
    ``peak_low_gbps`` / ``peak_high_gbps``: the bounds of its window (the peak's, or the whole
    range) when each reading's instant moves by its half read bracket + ``instant_unc_ns``
    (default 0.1 ms, see ``peak_bounds``). ``t_ref_ns`` (default
    ``start_ns``) makes ``peak_t_s`` relative seconds.

    Rates in Gb/s (1e9 bit/s). Returns a long DataFrame: series, window, window_ns, peak_gbps,
    peak_t_ns, peak_t_s, mean_gbps, p.._gbps, n_windows, n_nan_windows, n_gap_windows,
    raw_max_gbps, raw_max_t_ns, n_over_line_windows, over_line_causes, bound_gbps,
    at_line_rate [, peak_low_gbps, peak_high_gbps]. The headline never exceeds the lowest
    physical bound of its path (``bound_gbps``: ``overline.line_gbps_of``, the port rate or
    the PCIe link, the lower): a window above it by more than the timing uncertainty is kept
    out (over line rate), one above it within the uncertainty is reported as the bound itself
    with ``at_line_rate`` True ("at line rate"). ``line_gbps`` overrides the line rates
    (``series.line_gbps_of``). Raises ``ValueError`` on an empty range or no intervals.

    One engine: this is ``peak_table_capture``'s pass run over ``intervals`` presented as a
    capture of one segment (``stream.memory_capture``), and the ``uncertainty`` bounds are
    ``peak_table_uncertainty`` over that same capture (its one segment holds every interval).
    """
    if start_ns is not None and end_ns is not None and int(end_ns) <= int(start_ns):
        raise ValueError(f"empty time range: {int(start_ns)} ns to {int(end_ns)} ns")
    # the engine's pass over the intervals as a one-segment capture (``stream.MemoryCapture``)
    src = memory_capture(intervals, by)
    out = peak_table_capture(src, start_ns=start_ns, end_ns=end_ns, windows_ns=windows_ns,
                             origin_ns=origin_ns, by=by, source=None, groups=groups, keep=keep,
                             percentiles=percentiles, t_ref_ns=t_ref_ns,
                             mem_values=IN_MEMORY, instant_unc_ns=instant_unc_ns,
                             line_gbps=line_gbps)
    if uncertainty:
        out = peak_table_uncertainty(src, out, by=by, source=None, groups=groups,
                                     instant_unc_ns=instant_unc_ns)
    return out


#: ``mem_values`` of the percentiles when the values are in memory anyway (never spilled)
IN_MEMORY = 1 << 62


def link_view(b: pd.DataFrame, q: pd.DataFrame, groups, keep: bool):
    """Add the summed link columns to one block, as ``rebin_view`` does on the whole range."""
    if not groups:
        return b, q
    b = group_links(b, groups, keep=keep)
    q2 = q.copy() if keep else pd.DataFrame(index=q.index)
    for link, members in groups.items():
        # a link's own over-line bit is judged against the link's rate (flag_over_line)
        q2[link] = np.bitwise_or.reduce(q[list(members)].to_numpy(), axis=1) \
            & ~np.int8(QUALITY_OVER_LINE)
    return b, q2


class PeakAcc:
    """Running headline peak, raw maximum, counts and percentile values of one series at one
    width (``headline_peak``'s rule, block by block)."""

    #: at most this many over-line window starts kept per series to name their causes
    MAX_OVER_KEPT = 10_000

    def __init__(self, mem_values: int | None, max_over: int | None = MAX_OVER_KEPT):
        self.max_over = max_over  # None: every over-line window's start kept
        self.n = self.n_nan = self.n_gap = self.n_over = 0
        self.peak = -np.inf
        self.t_peak: int | None = None
        self.raw = -np.inf
        self.t_raw: int | None = None
        self.over_t: list[int] = []
        # None: the peak and counts only (no percentiles)
        self.values = None if mem_values is None else ExactPercentiles(mem_values)

    def add(self, t: np.ndarray, gbps: np.ndarray, qq: np.ndarray) -> None:
        # one pass over the quality bits: how many windows carry each combination
        counts = np.bincount(np.asarray(qq, np.int8).view(np.uint8), minlength=256)
        self.n_nan += int(counts[_HAS_INVALID].sum())
        self.n_gap += int(counts[_HAS_GAP].sum())
        n_over = int(counts[_HAS_OVER].sum())
        self.n_over += n_over
        room = None if self.max_over is None else self.max_over - len(self.over_t)
        if n_over and (room is None or room > 0):
            over = (qq & QUALITY_OVER_LINE) != 0
            self.over_t.extend(int(x) for x in t[over][:room])
        if not counts[_HAS_EXCLUDED].any() and len(gbps) and np.isfinite(gbps).all():
            # every window may head the table: headline and raw maximum are the first maximum
            head = raw = int(np.argmax(gbps))
        else:
            head, raw = headline_peak(gbps, qq)
        if head is not None and gbps[head] > self.peak:
            self.peak, self.t_peak = float(gbps[head]), int(t[head])
        if raw is not None and gbps[raw] > self.raw:
            self.raw, self.t_raw = float(gbps[raw]), int(t[raw])
        n_bad = int(counts[_HAS_UNUSABLE].sum())
        r = gbps if not n_bad else gbps[(qq & _UNUSABLE) == 0]
        if not len(r):
            return
        self.n += len(r)
        if self.values is not None:
            self.values.add(r)


#: quality bits that keep a window out of the percentiles (``PeakAcc``); per value of a
#: window's quality byte, whether it carries them / each bit ``PeakAcc.add`` counts
_UNUSABLE = QUALITY_PARTIAL | QUALITY_EMPTY | QUALITY_INVALID
_CODES = np.arange(256)
_HAS_UNUSABLE = (_CODES & _UNUSABLE) != 0
_HAS_INVALID = (_CODES & QUALITY_INVALID) != 0
_HAS_GAP = (_CODES & QUALITY_GAP) != 0
_HAS_OVER = (_CODES & QUALITY_OVER_LINE) != 0
_HAS_EXCLUDED = (_CODES & HEADLINE_EXCLUDE) != 0


def peak_table_capture(capture, *, start_ns: int | None = None, end_ns: int | None = None,
                       windows_ns=DEFAULT_WINDOWS_NS, origin_ns: int | None = None,
                       by: str | None = "series", source: str | None = "infiniband",
                       groups: dict[str, list[str]] | None = None, keep: bool = True,
                       percentiles=(50, 90, 99), t_ref_ns: int | None = None,
                       gap_factor: float | None = None, max_gbps: float | None = None,
                       mem_values: int = 1 << 20, progress=None,
                       instant_unc_ns: int = INSTANT_UNC_NS,
                       line_gbps: float | dict | None = None) -> pd.DataFrame:
    """``peak_table`` of a capture on disk, in one pass over its segments and bounded memory.

    ``capture``: a capture directory, ``stream.CaptureInfo`` or ``stream.MemoryCapture`` (what
    ``peak_table`` passes: the same pass over intervals in memory). Returns the same table as
    ``peak_table(byte_intervals(load_capture(capture), source=source), ...)`` with the same
    arguments (without ``uncertainty``: see ``peak_table_uncertainty``), on the same grid
    (``origin_ns``, default the capture start): every
    width's windows and the whole range are re-binned in one pass (``stream.iter_windows``),
    keeping per series the running peak, counts and the usable window rates for the
    percentiles (``stream.ExactPercentiles``: in memory up to ``mem_values`` values, then in a
    temporary file; exact either way). Only the segments around [start_ns, end_ns) are read.
    Windows over line rate (``series.OverLineFlagger`` with ``instant_unc_ns`` and the
    ``line_gbps`` override) are counted and kept out of the headline, the whole range judged as
    one window by the same rule. The pass is ``PeakTablePass`` on a pass of its own.
    Raises ``ValueError`` on an empty range or no intervals.
    """
    if start_ns is not None and end_ns is not None and int(end_ns) <= int(start_ns):
        raise ValueError(f"empty time range: {int(start_ns)} ns to {int(end_ns)} ns")
    capture = capture_info(capture)
    pt = PeakTablePass(capture, start_ns=start_ns, end_ns=end_ns, windows_ns=windows_ns,
                       origin_ns=origin_ns, by=by, source=source, groups=groups, keep=keep,
                       percentiles=percentiles, t_ref_ns=t_ref_ns, gap_factor=gap_factor,
                       mem_values=mem_values, instant_unc_ns=instant_unc_ns,
                       line_gbps=line_gbps)
    state: dict = {}
    for i, b, q in iter_windows(capture, pt.grids, by=by, source=source,
                                gap_factor=pt.gap_factor, max_gbps=max_gbps, progress=progress,
                                state=state, **pass_hooks([pt.flag])):
        pt.add(i, b, q, state["spans"])
    return pt.table(state.get("spans", {}))


class PeakTablePass:
    """``peak_table_capture``'s table fed by a pass: a consumer registered on the engine's pass
    (``stream.iter_windows``), so that a caller's own pass (the report's ``capture_pass``) makes
    a range's peak table without reading its segments again.

    Arguments as ``peak_table_capture``. Put ``grids`` on the pass (each carries ``by``, so a
    pass of another grouping re-bins them as asked; their counters are the pass's selection,
    which must be ``source``'s data counters) and register ``flag`` on it
    (``overline_pass.pass_hooks``); hand each block of the k-th of ``grids`` to ``add(k, b, q,
    spans)`` and call ``table(spans)`` once the pass is over (``spans``: ``state["spans"]`` of
    the pass keyed like the table's series; ``add`` needs them only without ``start_ns``).
    Raises ``ValueError`` on an empty range.
    """

    def __init__(self, capture, *, start_ns: int | None = None, end_ns: int | None = None,
                 windows_ns=DEFAULT_WINDOWS_NS, origin_ns: int | None = None,
                 by: str | None = "series", source: str | None = "infiniband",
                 groups: dict[str, list[str]] | None = None, keep: bool = True,
                 percentiles=(50, 90, 99), t_ref_ns: int | None = None,
                 gap_factor: float | None = None, mem_values: int = 1 << 20,
                 instant_unc_ns: int = INSTANT_UNC_NS, line_gbps: float | dict | None = None):
        if start_ns is not None and end_ns is not None and int(end_ns) <= int(start_ns):
            raise ValueError(f"empty time range: {int(start_ns)} ns to {int(end_ns)} ns")
        capture = capture_info(capture)
        # one grid: the capture start unless ``origin_ns`` (the range only selects windows)
        origin = int(capture.t_start_ns) if origin_ns is None else int(origin_ns)
        self.start_ns, self.end_ns = start_ns, end_ns
        self.groups, self.keep, self.percentiles = groups, keep, percentiles
        self.t_ref_ns, self.mem_values = t_ref_ns, mem_values
        self.widths = widths = [int(w) for w in windows_ns]
        whole_w = FAR_NS if end_ns is None or start_ns is None else int(end_ns) - int(start_ns)
        self.grids = [WindowGrid(w, origin, start_ns, end_ns, by=by) for w in widths]
        self.grids.append(WindowGrid(whole_w, start_ns, start_ns, end_ns, clip=True, by=by))
        self.gap_factor = DEFAULT_GAP_FACTOR if gap_factor is None else gap_factor
        self.flag = OverLineFlagger(capture, by=by, groups=groups, source=source,
                                    gap_factor=self.gap_factor, line_gbps=line_gbps,
                                    instant_unc_ns=instant_unc_ns)
        # over-line windows kept to name their causes: all of them when the intervals are in
        # memory
        self.max_over = None if self.flag.memory else PeakAcc.MAX_OVER_KEPT
        self.accs: list[dict[str, PeakAcc]] = [{} for _ in widths]
        # each width's last window, until the end
        self.held: list[tuple | None] = [None] * len(widths)
        self.whole: list[tuple[pd.DataFrame, pd.DataFrame]] = []
        self.lo: int | None = None if start_ns is None else int(start_ns)

    def _view(self, i: int, b: pd.DataFrame, q: pd.DataFrame) -> tuple:
        """A block's (starts, Gb/s, quality, columns) with links and the over-line bit (both
        judged window by window, so a block is judged alone)."""
        w = self.widths[i]
        b, q = link_view(b, q, self.groups, self.keep)
        q = self.flag(b, q, w)
        return (b.index.to_numpy(), to_gbps(b.to_numpy(np.float64), w), q.to_numpy(),
                list(b.columns))

    def _consume(self, i: int, t: np.ndarray, gbps: np.ndarray, qa: np.ndarray,
                 cols: list) -> None:
        w, lo, end_ns = self.widths[i], self.lo, self.end_ns
        tol = int(cover_tolerance_ns(w)) if self.start_ns is None else 0  # as peak_table
        inside = t + tol >= lo if lo is not None else np.ones(len(t), bool)
        if end_ns is not None:
            inside &= t + w <= int(end_ns)
        if not inside.all():
            t, gbps, qa = t[inside], gbps[inside], qa[inside]
        for j, col in enumerate(cols):
            acc = self.accs[i].get(col)
            if acc is None:
                acc = self.accs[i][col] = PeakAcc(self.mem_values, self.max_over)
            acc.add(t, gbps[:, j], qa[:, j])

    def add(self, i: int, b: pd.DataFrame, q: pd.DataFrame, spans: dict) -> None:
        """One block of windows of ``grids[i]``."""
        if i == len(self.widths):
            if self.start_ns is not None and self.end_ns is not None:
                # judged now, while the pass still holds the intervals around the range (at
                # the end they may be gone and read again)
                b, q = link_view(b, q, self.groups, self.keep)
                q = self.flag(b, q, int(self.end_ns) - int(self.start_ns))
            self.whole.append((b, q))
            return
        if self.start_ns is None:
            # the range starts at the first interval: the earliest so far (a later one starts
            # after every window emitted up to now, so those windows are classified right)
            self.lo = min(s[0] for s in spans.values())
        t, gbps, qa, cols = self._view(i, b, q)
        # hold back each width's last window: it may end after the range's end (unknown yet)
        held = self.held
        if held[i] is not None:
            ht, hg, hq, hcols = held[i]
            if hcols != cols:
                raise AssertionError("peak_table_capture: a block's columns changed")
            t, gbps, qa = (np.concatenate([ht, t]), np.concatenate([hg, gbps]),
                           np.concatenate([hq, qa]))
        held[i] = (t[-1:], gbps[-1:], qa[-1:], cols)
        if len(t) > 1:
            self._consume(i, t[:-1], gbps[:-1], qa[:-1], cols)

    def table(self, spans: dict) -> pd.DataFrame:
        """The peak table (``peak_table_capture``'s) of the blocks added."""
        start_ns, end_ns, percentiles = self.start_ns, self.end_ns, self.percentiles
        groups, keep, flag, mem_values = self.groups, self.keep, self.flag, self.mem_values
        accs, held, whole, widths = self.accs, self.held, self.whole, self.widths
        if not spans:
            raise ValueError("no intervals to re-bin (the capture holds fewer than two valid "
                             "readings of any selected counter)")
        hi = int(end_ns) if end_ns is not None else max(s[1] for s in spans.values())
        if self.lo is None:
            self.lo = min(s[0] for s in spans.values())
        lo = self.lo
        if hi <= lo:
            raise ValueError(f"empty time range: {lo} ns to {hi} ns")
        t_ref = lo if self.t_ref_ns is None else int(self.t_ref_ns)
        for i, w in enumerate(widths):
            if held[i] is not None:
                ht, hg, hq, hcols = held[i]
                tol = int(cover_tolerance_ns(w)) if end_ns is None else 0
                n_keep = len(ht) if (ht + w <= hi + tol).all() else 0
                self._consume(i, ht[:n_keep], hg[:n_keep], hq[:n_keep], hcols)
        wb = pd.concat([x[0] for x in whole])
        wq = pd.concat([x[1] for x in whole])
        if start_ns is None or end_ns is None:  # else judged as it came (``add``)
            wb, wq = link_view(wb, wq, groups, keep)
            wq = flag(wb, wq, hi - lo)  # the whole range [lo, hi) as one window, as the others
        cols = list(wb.columns)
        whole_gbps = to_gbps(wb, hi - lo)
        rows = []
        for i, w in enumerate(widths):
            for col in cols:
                acc = accs[i].get(col) or PeakAcc(mem_values)
                row = {"series": col, "window": window_label(w), "window_ns": w,
                       "n_windows": acc.n, "n_nan_windows": acc.n_nan,
                       "n_gap_windows": acc.n_gap, "n_over_line_windows": acc.n_over,
                       "over_line_causes": ""}
                bound = flag.lines.get(col)  # the lowest physical bound (as peak_table)
                row["bound_gbps"] = np.nan if bound is None else float(bound)
                row["at_line_rate"] = False
                if acc.t_peak is not None:
                    pk = float(acc.peak)
                    if bound is not None and pk > bound:
                        pk, row["at_line_rate"] = float(bound), True
                    row.update(peak_gbps=pk, peak_t_ns=acc.t_peak,
                               peak_t_s=(acc.t_peak - t_ref) / 1e9)
                else:
                    row.update(peak_gbps=np.nan, peak_t_ns=None, peak_t_s=np.nan)
                row.update(raw_max_gbps=acc.raw if acc.t_raw is not None else np.nan,
                           raw_max_t_ns=acc.t_raw)
                if acc.n:
                    for p, v in zip(percentiles, acc.values.percentiles(percentiles),
                                    strict=True):
                        row[f"p{p:g}_gbps"] = float(v)
                else:
                    for p in percentiles:
                        row[f"p{p:g}_gbps"] = np.nan
                if acc.over_t:
                    causes = flag.causes(acc.over_t, w, col)
                    if acc.n_over > len(acc.over_t):
                        causes += ["not examined"] * (acc.n_over - len(acc.over_t))
                    row["over_line_causes"] = _cause_text(causes)
                acc.values.close()
                rows.append(row)
        for col in cols:
            rows.append(_whole_range_row(col, float(whole_gbps[col].iloc[0]),
                                         int(wq[col].iloc[0]), lo, hi, t_ref, percentiles))
        out = pd.DataFrame(rows)
        means = {col: float(whole_gbps[col].iloc[0]) for col in cols}
        out["mean_gbps"] = out["series"].map(means)
        order = {c: k for k, c in enumerate(cols)}
        out["_o"] = out["series"].map(order)
        out = out.sort_values(["_o", "window_ns"], kind="stable").drop(columns="_o")
        names = ["series", "window", "window_ns", "peak_gbps", "peak_t_ns", "peak_t_s",
                 "mean_gbps", *[f"p{p:g}_gbps" for p in percentiles], "n_windows",
                 "n_nan_windows", "n_gap_windows", "raw_max_gbps", "raw_max_t_ns",
                 "n_over_line_windows", "over_line_causes", "bound_gbps", "at_line_rate"]
        out = out[names].reset_index(drop=True)
        out["peak_t_ns"] = out["peak_t_ns"].astype("Int64")
        out["raw_max_t_ns"] = out["raw_max_t_ns"].astype("Int64")
        return out


def _local_intervals(capture, t0: int, t1: int, source) -> pd.DataFrame:
    """Intervals of the segments around [t0, t1) (read segment by segment, nothing else); of a
    ``stream.MemoryCapture``, its one segment: every interval (its own frame)."""
    if isinstance(capture, MemoryCapture):
        return capture.intervals
    cdf = capture.counters
    got: dict[int, list[dict]] = {}
    for parts, _ in iter_intervals(capture, source=source, start_ns=t0, end_ns=t1):
        for c, iv in parts.items():
            if len(iv["t0_ns"]):
                got.setdefault(c, []).append(iv)
    pieces = [(c, cdf.loc[c].to_dict(), {k: np.concatenate([p[k] for p in v]) for k in v[0]})
              for c, v in sorted(got.items())]
    return intervals_frame(pieces)


def peak_table_uncertainty(capture, table: pd.DataFrame, *, by: str | None = "series",
                           source: str | None = "infiniband",
                           groups: dict[str, list[str]] | None = None,
                           instant_unc_ns: int = INSTANT_UNC_NS) -> pd.DataFrame:
    """Add ``peak_low_gbps`` / ``peak_high_gbps`` to a ``peak_table_capture`` table.

    The bounds of ``peak_table(..., uncertainty=True)``, which is this function over a
    ``stream.MemoryCapture``: each peak window's from ``peak_bounds`` on the intervals of the
    few segments around it (a memory capture's one segment holds them all); the whole range's
    are its bytes plus or minus the bytes its two edges can move, F(lo) - F(lo - u) and
    F(hi + u) - F(hi) wider, F(lo + u) - F(lo) and F(hi) - F(hi - u) narrower, read around
    each edge, so memory stays bounded. Unknown is never zero: a range whose bytes are NaN
    (a NaN window, no readings of a series, a link with a member unknown) or whose edge can
    move onto a NaN interval has NaN bounds. ``capture``: a ``stream.CaptureInfo`` or
    ``stream.MemoryCapture``. Raises ``ValueError`` on a negative ``instant_unc_ns``.
    """
    if not instant_unc_ns >= 0:
        raise ValueError(f"instant_unc_ns must be >= 0 ns, got {instant_unc_ns!r}")
    memory = isinstance(capture, MemoryCapture)
    margin = 0 if memory else 4 * int(capture.interval_ns) + int(instant_unc_ns) + 10 * MS
    out = table.copy()
    out["peak_low_gbps"] = np.nan
    out["peak_high_gbps"] = np.nan
    last: list = [None, None]  # the most recent range read and its intervals

    def key_of(a: int, b: int):
        return None if memory else (a - margin, b + margin)

    def local(key) -> pd.DataFrame:
        if last[0] != key or last[1] is None:
            last[1] = None  # release the previous range before reading the next
            last[1] = _local_intervals(capture, *(key or (0, 0)), source)
            last[0] = key
        return last[1]

    # the peak windows, those read from the same intervals together (a memory capture: each
    # width's in one call)
    todo: dict[tuple, list[tuple]] = {}
    for i, row in out.iterrows():
        w = int(row["window_ns"])
        if row["window"] == "whole range" or pd.isna(row["peak_t_ns"]):
            continue
        a = int(row["peak_t_ns"])
        todo.setdefault((key_of(a, a + w), w), []).append((i, row["series"], a))
    for (key, w), rows in todo.items():
        starts = pd.Series({s: a for _, s, a in rows}, dtype=object)
        bd = to_gbps(peak_bounds(local(key), starts, w, by=by, groups=groups,
                                 instant_unc_ns=instant_unc_ns), w)
        for i, s, _ in rows:
            out.at[i, "peak_low_gbps"] = float(bd.at[s, "low_bytes"])
            out.at[i, "peak_high_gbps"] = float(bd.at[s, "high_bytes"])
    whole = out[out["window"] == "whole range"]
    if not len(whole):
        return out
    lo = int(whole["peak_t_ns"].iloc[0])
    span = int(whole["window_ns"].iloc[0])
    hi = lo + span
    members = {s: [s] for s in whole["series"]}
    for link, ms in (groups or {}).items():
        if link in members:
            members[link] = list(ms)
    extra = int(instant_unc_ns)
    edge: dict[str, list[float]] = {s: [0.0, 0.0] for s in members}  # widen, narrow (bytes)
    for t_edge, sign in ((lo, -1), (hi, 1)):
        iv = local(key_of(t_edge, t_edge))
        for key, spec in counters_of(iv, by, with_unc=True):
            if not any(key in ms for ms in members.values()):
                continue
            c = spec.build()
            e = np.array([t_edge], np.int64)
            u = c.edge_unc(e) + extra
            pts = np.array([t_edge - u[0], t_edge, t_edge + u[0]], np.int64)
            full, part, _, _ = c.cum(pts)
            f = full + part
            nan = c.windows(pts[:1], pts[2:])[1][0] > 0
            # the edge moving past the counter's first or last reading: unknown bytes there
            # (never 0), so how much the range can grow is unknown
            past = len(c.t0) == 0 or pts[0] < c.t0[0] or pts[2] > c.t1[-1]
            for s, ms in members.items():
                if key not in ms:
                    continue
                if nan:
                    edge[s] = [np.nan, np.nan]
                    continue
                # the range can grow by F(lo) - F(lo - u) at its start, F(hi + u) - F(hi) at
                # its end, and shrink by F(lo + u) - F(lo), F(hi) - F(hi - u)
                grow = np.nan if past else (f[1] - f[0]) if sign < 0 else (f[2] - f[1])
                shrink = (f[2] - f[1]) if sign < 0 else (f[1] - f[0])
                edge[s][0] += float(grow)
                edge[s][1] += float(shrink)
    for i, row in whole.iterrows():
        b = float(row["peak_gbps"]) * span / 8.0
        g, sh = edge[row["series"]]
        if int(row["n_nan_windows"]) or not np.isfinite([b, sh]).all():
            continue  # unknown bytes, or an edge that can move onto unknown ones: NaN
        out.at[i, "peak_low_gbps"] = float(to_gbps(max(0.0, b - sh), span))
        # NaN (unknown) when an edge can move past the readings
        out.at[i, "peak_high_gbps"] = float(to_gbps(b + g, span)) if np.isfinite(g) else np.nan
    return out
