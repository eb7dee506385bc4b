"""The over-line rule for windows of the streamed engine (``OverLineFlagger``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .curve import INSTANT_UNC_NS, QUALITY_OVER_LINE, CounterCurve
from .intervals import DEFAULT_GAP_FACTOR, intervals_frame, line_attrs, select_counters
from .overline import (
    flag_over_line,
    line_gbps_of,
    lowest_bytes,
    members_of,
    over_line_causes,
    regular_cause,
)
from .stream import MemoryCapture, capture_info, iter_intervals

__all__ = ["OverLineFlagger", "flag_over_line_capture", "pass_hooks"]


def pass_hooks(flaggers, on_parts=None) -> dict:
    """The keyword arguments of ``stream.iter_windows`` that register ``flaggers``
    (``OverLineFlagger``; None entries skipped) and a caller's own ``on_parts`` on one pass:
    each file's intervals go to every flagger (``feed``) and then to ``on_parts``, the end of
    the intervals and each horizon to every flagger, and blocks are held one file
    (``hold_files=1``) so every window's neighbourhood is in memory when it is judged."""
    fl = [f for f in flaggers if f is not None]

    def parts(p):
        for f in fl:
            f.feed(p)
        if on_parts is not None:
            on_parts(p)

    def final():
        for f in fl:
            f.final()

    def horizon(t):
        for f in fl:
            f.horizon(t)

    return {"on_parts": parts, "on_final": final, "on_horizon": horizon, "hold_files": 1}


class OverLineFlagger:
    """``flag_over_line`` and ``over_line_causes`` for the windows of the engine's pass.

    Built once per command on a capture directory or ``stream.CaptureInfo``; called on each
    block of windows ``(bytes_df, quality_df, width_ns)`` as ``stream.iter_windows`` yields
    them (links of ``groups`` included, with their over-line bit cleared), it returns the
    block's quality with ``QUALITY_OVER_LINE`` set by the same rule as ``flag_over_line``: only
    the few windows whose rate exceeds the line rate are examined, from the intervals around
    them. Registered on the pass (``on_parts=flagger.feed``, ``on_final=flagger.final``,
    ``hold_files=1``: a block is flagged once the next file's intervals are in), it keeps the
    intervals of the last files and drops those no block left to judge reaches, so nothing is
    read twice; used alone (or when the kept intervals do not cover a window's neighbourhood)
    it reads the segments around the windows (``stream.iter_intervals``; ``rereads`` counts
    those reads). ``causes(starts, width_ns, column)`` names the likely causes of over-line
    windows: those judged in the pass were named then, others are read again. Windows must all
    have ``width_ns`` (pass only the whole windows of a clipped grid). Raises the loader errors.
    """

    def __init__(self, capture, *, by: str | None = "series",
                 groups: dict[str, list[str]] | None = None, source: str | None = "infiniband",
                 gap_factor: float = DEFAULT_GAP_FACTOR, line_gbps: float | dict | None = None,
                 instant_unc_ns: int = INSTANT_UNC_NS):
        self.info = info = capture_info(capture)
        cdf = info.counters
        self.ids = select_counters(cdf, None, source)
        self.cdf, self.by, self.groups, self.source = cdf, by, groups, source
        self.gap_factor, self.line_gbps = gap_factor, line_gbps
        self.extra = int(instant_unc_ns)
        self.memory = isinstance(info, MemoryCapture)
        if self.memory:
            # intervals in memory: their own attrs say the line rates (byte_intervals)
            stub = cdf.loc[self.ids, [c for c in cdf.columns if c != "data"]].reset_index()
            stub.attrs.update(info.intervals.attrs)
        else:
            stub = cdf.loc[self.ids, ["series", "device", "direction", "source"]].reset_index()
            line_attrs(stub, info.meta, cdf, self.ids, info.interval_ns)
        self.stub = stub
        self.members = members_of(stub, by, groups)
        self.lines = line_gbps_of(stub, by, groups=groups, line_gbps=line_gbps)
        #: how far around a window its readings are looked at (brackets, update period)
        self.pad = 2 * int(info.interval_ns or 0) + self.extra
        self._idset = set(self.ids)
        self.kept: list[dict] = []  # per file fed: {counter: intervals}, oldest first
        self.first_dropped: dict[int, int] = {}  # counter -> latest t1 dropped from kept
        self.last_t1: dict[int, int] = {}
        self.fed = False  # registered on a pass (feed called)
        self.done = False  # the pass has fed every interval
        self.rereads = 0
        self._named: dict[tuple, str] = {}  # (column, width, start) -> cause
        self._n_named: dict[tuple, int] = {}

    # -- registered on the pass ---------------------------------------------------------------

    def feed(self, parts: dict) -> None:
        """``on_parts`` of the pass: keep this file's intervals of the flagger's counters."""
        self.fed = True
        if self.memory:
            return
        mine = {c: iv for c, iv in parts.items() if c in self._idset and len(iv["t0_ns"])}
        for c, iv in mine.items():
            self.last_t1[c] = int(iv["t1_ns"][-1])
        self.kept.append(mine)

    def final(self) -> None:
        """``on_final`` of the pass: every interval has been fed."""
        self.done = True

    def prune(self, before_ns: int) -> None:
        """Drop the kept intervals ending at or before ``before_ns`` (no window left to judge
        reaches back there)."""
        out = []
        for parts in self.kept:
            sliced = {}
            for c, iv in parts.items():
                if iv["t1_ns"][-1] <= before_ns:
                    self.first_dropped[c] = max(self.first_dropped.get(c, -(1 << 62)),
                                                int(iv["t1_ns"][-1]))
                    continue
                if iv["t1_ns"][0] <= before_ns:
                    # a counter's intervals are in time order: those kept are a suffix (found
                    # by a binary search, not a mask over all of them), copied when it is the
                    # smaller part (a view would keep the dropped part alive), else viewed
                    i = int(np.searchsorted(iv["t1_ns"], before_ns, "right"))
                    self.first_dropped[c] = max(self.first_dropped.get(c, -(1 << 62)),
                                                int(iv["t1_ns"][i - 1]))
                    small = 2 * i > len(iv["t1_ns"])
                    iv = {k: a[i:].copy() if small else a[i:] for k, a in iv.items()}
                sliced[c] = iv
            if sliced:
                out.append(sliced)
        self.kept = out

    def horizon(self, t_ns: int) -> None:
        """``on_horizon`` of the pass: no window to judge starts before ``t_ns``."""
        if not self.memory:
            self.prune(int(t_ns) - self.pad - 2 * int(self.info.interval_ns))

    def covers(self, t0: int, t1: int) -> bool:
        """Whether the kept intervals hold every interval of every counter touching [t0, t1]."""
        if not self.fed:
            return False
        for c in self.ids:
            if self.first_dropped.get(c, -(1 << 62)) > t0:
                return False
            if not self.done and self.last_t1.get(c, -(1 << 62)) < t1:
                return False
        return True

    # -- the rule -----------------------------------------------------------------------------

    def _parts(self, t0: int, t1: int):
        if self.memory:  # every interval is at hand: nothing to keep or read
            yield self.info.parts
            return
        if self.covers(t0 - self.pad, t1 + self.pad):
            yield from self.kept
            return
        self.rereads += 1
        for parts, _ in iter_intervals(self.info, counters=self.ids, source=self.source,
                                       start_ns=t0 - self.pad, end_ns=t1 + self.pad,
                                       gap_factor=self.gap_factor):
            yield parts

    def _low(self, starts: np.ndarray, width_ns: int) -> pd.DataFrame:
        acc: dict[str, np.ndarray] = {}
        for parts in self._parts(int(starts.min()), int(starts.max()) + int(width_ns)):
            items = []
            for c, iv in parts.items():
                if len(iv["t0_ns"]):
                    unc = np.maximum(iv["t0_unc_ns"], iv["t1_unc_ns"]).astype(np.int64)
                    items.append((str(self.cdf.at[c, "series"]),
                                  CounterCurve(iv["t0_ns"], iv["t1_ns"], iv["bytes"], iv["flag"],
                                               unc)))
            for k, v in lowest_bytes(items, starts, int(width_ns), self.extra).items():
                acc[k] = acc[k] + v if k in acc else v
        return pd.DataFrame(acc, index=pd.Index(starts, name="window_start_ns"))

    def __call__(self, bytes_df: pd.DataFrame, quality_df: pd.DataFrame,
                 width_ns: int, covered_ns: pd.DataFrame | None = None) -> pd.DataFrame:
        """``flag_over_line`` of a block (``covered_ns``: its windows' covered time, a
        partly covered window judged over its covered part)."""
        q = flag_over_line(self.stub, bytes_df, quality_df, int(width_ns), by=self.by,
                           groups=self.groups, line_gbps=self.line_gbps,
                           instant_unc_ns=self.extra,
                           low_bytes=lambda s: self._low(s, int(width_ns)),
                           lines_members=(self.lines, self.members), covered_ns=covered_ns)
        if self.fed and len(q):
            # name the causes of the new over-line windows now, from the intervals kept
            new = ((q.to_numpy() & QUALITY_OVER_LINE) != 0) & (
                (quality_df.to_numpy() & QUALITY_OVER_LINE) == 0)
            if new.any():
                starts = q.index.to_numpy(np.int64)
                for j, col in enumerate(q.columns):
                    key = (col, int(width_ns))
                    room = MAX_NAMED - self._n_named.get(key, 0)
                    at = starts[new[:, j]][:max(room, 0)]
                    if len(at):
                        self._n_named[key] = self._n_named.get(key, 0) + len(at)
                        for a, why in zip(at.tolist(), self._causes(at, int(width_ns), col),
                                          strict=True):
                            self._named[(col, int(width_ns), a)] = why
        return q

    def causes(self, starts_ns, width_ns: int, column) -> list[str]:
        """``over_line_causes`` of windows of ``column`` (a group or link): named when the pass
        judged them, else from the segments around them (read again)."""
        starts = np.asarray(starts_ns, np.int64)
        named = [self._named.get((column, int(width_ns), int(a))) for a in starts.tolist()]
        if all(x is not None for x in named):
            return named
        return self._causes(starts, width_ns, column)

    def _causes(self, starts: np.ndarray, width_ns: int, column) -> list[str]:
        if not len(starts):
            return []
        if self.memory:
            return over_line_causes(self.info.intervals, starts, width_ns,
                                    list(self.members.get(column, [column])),
                                    interval_ns=self.info.interval_ns)
        names = set(self.members.get(column, [column]))
        got: dict[int, list[dict]] = {}
        for parts in self._parts(int(starts.min()), int(starts.max()) + int(width_ns)):
            for c, iv in parts.items():
                if len(iv["t0_ns"]) and str(self.cdf.at[c, "series"]) in names:
                    got.setdefault(c, []).append(iv)
        pieces = [(c, self.cdf.loc[c].to_dict(),
                   {k: np.concatenate([p[k] for p in v]) for k in v[0]})
                  for c, v in sorted(got.items())]
        if not pieces:
            return [regular_cause()] * len(starts)
        iv = intervals_frame(pieces)
        return over_line_causes(iv, starts, width_ns, list(names),
                                interval_ns=self.info.interval_ns)


#: over-line windows per column and width whose causes are named during the pass (as many as
#: ``peaks.PeakAcc`` keeps)
MAX_NAMED = 10_000


def flag_over_line_capture(path, bytes_df: pd.DataFrame, quality_df: pd.DataFrame,
                           width_ns: int, *, by: str | None = "series",
                           groups: dict[str, list[str]] | None = None,
                           source: str | None = "infiniband",
                           gap_factor: float = DEFAULT_GAP_FACTOR,
                           line_gbps: float | dict | None = None,
                           instant_unc_ns: int = INSTANT_UNC_NS) -> pd.DataFrame:
    """``flag_over_line`` for windows of the chunked path: ``OverLineFlagger`` called once."""
    return OverLineFlagger(path, by=by, groups=groups, source=source, gap_factor=gap_factor,
                           line_gbps=line_gbps, instant_unc_ns=instant_unc_ns)(
        bytes_df, quality_df, width_ns)

