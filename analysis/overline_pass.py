"""The over-line rule for windows of the streamed engine (``OverLineFlagger``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .curve import INSTANT_UNC_NS, CounterCurve
from .intervals import DEFAULT_GAP_FACTOR, intervals_frame, line_attrs, select_counters
from .overline import (
    flag_over_line,
    line_gbps_of,
    lowest_bytes,
    members_of,
    over_line_causes,
    regular_cause,
)
from .stream import capture_info, iter_intervals

__all__ = ["OverLineFlagger", "flag_over_line_capture"]


class OverLineFlagger:
    """``flag_over_line`` and ``over_line_causes`` for the chunked path (no intervals in memory).

    Built once per command on a capture directory or ``stream.CaptureInfo``; called on each
    block of windows ``(bytes_df, quality_df, width_ns)`` as ``stream.iter_windows`` yields
    them (links of ``groups`` included, with their over-line bit cleared), it returns the
    block's quality with ``QUALITY_OVER_LINE`` set by the same rule as ``flag_over_line``: only
    the few windows whose rate exceeds the line rate are examined, by re-reading the segments
    around them (``stream.iter_intervals`` over their time span). ``causes(starts, width_ns,
    column)`` names their likely causes the same way. Windows must all have ``width_ns``
    (pass only the whole windows of a clipped grid). Raises the loader errors.
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
        stub = cdf.loc[self.ids, ["series", "device", "direction", "source"]].reset_index()
        line_attrs(stub, info.meta, cdf, self.ids, info.interval_ns)
        self.stub = stub
        self.members = members_of(stub, by, groups)
        self.lines = line_gbps_of(stub, by, groups=groups, line_gbps=line_gbps)

    def _parts(self, t0: int, t1: int):
        pad = 2 * int(self.info.interval_ns) + self.extra
        for parts, _ in iter_intervals(self.info, counters=self.ids, source=self.source,
                                       start_ns=t0 - pad, end_ns=t1 + pad,
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
                 width_ns: int) -> pd.DataFrame:
        return flag_over_line(self.stub, bytes_df, quality_df, int(width_ns), by=self.by,
                              groups=self.groups, line_gbps=self.line_gbps,
                              instant_unc_ns=self.extra,
                              low_bytes=lambda s: self._low(s, int(width_ns)),
                              lines_members=(self.lines, self.members))

    def causes(self, starts_ns, width_ns: int, column) -> list[str]:
        """``over_line_causes`` of windows of ``column`` (a group or link), re-reading only the
        segments around them."""
        starts = np.asarray(starts_ns, np.int64)
        if not len(starts):
            return []
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
                                interval_ns=int(self.info.interval_ns))


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

