"""Min/max envelope of a window series: a long 1 ms series drawn honestly in a few columns.

A 6 h capture has 21.6 M windows of 1 ms; a figure has ~1,000 pixel columns and a zoomable
timeline a few hundred thousand points. Averaging windows into wider ones would flatten the
bursts (the reason the study looks at 1 ms at all), and keeping every k-th window would drop
most peaks. The envelope keeps, per bucket of ``k`` consecutive windows, the highest and the
lowest known value: the standard min/max decimation of oscilloscopes and plotting libraries
(e.g. the "MinMax" downsampler of tsdownsample / plotly-resampler), so every peak of the 1 ms
series is still drawn at its full height and every quiet stretch at its floor.

``MinMaxEnvelope`` is fed blocks of windows as they stream by (``stream.iter_windows``), in any
order, and holds only ``n_buckets`` values per column: memory does not grow with the capture.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["MinMaxEnvelope", "bucket_windows"]


def bucket_windows(n_windows: int, columns: int) -> int:
    """Return k, the windows per bucket: 1 when ``n_windows`` fit in ``columns``, else
    ``ceil(n_windows / columns)`` (so at most ``columns`` buckets). Raises ValueError when
    ``columns`` < 1."""
    if columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    return max(1, -(-int(n_windows) // int(columns)))


class MinMaxEnvelope:
    """Per bucket of ``k`` windows of ``width_ns``: the max and min of the known values.

    Windows lie on the grid ``origin_ns + i x width_ns``; bucket j holds the windows
    ``k_start + j x k`` to ``k_start + (j + 1) x k - 1``, where ``k_start`` is the window
    containing ``start_ns``; the buckets cover [start_ns, end_ns). NaN values (unknown
    windows) are skipped; a bucket with no known value is NaN in both columns (unknown, never
    zero). Values outside the range are ignored.
    """

    def __init__(self, *, start_ns: int, end_ns: int, width_ns: int, origin_ns: int, k: int):
        if width_ns <= 0 or k < 1:
            raise ValueError(f"width_ns and k must be positive, got {width_ns}, {k}")
        if end_ns <= start_ns:
            raise ValueError(f"empty range: {start_ns} ns to {end_ns} ns")
        self.width_ns, self.origin_ns, self.k = int(width_ns), int(origin_ns), int(k)
        self.k_start = (int(start_ns) - self.origin_ns) // self.width_ns
        k_end = -((self.origin_ns - int(end_ns)) // self.width_ns)  # exclusive
        self.n = -(-(k_end - self.k_start) // self.k)
        self.hi = np.full(self.n, np.nan)
        self.lo = np.full(self.n, np.nan)

    @property
    def bucket_ns(self) -> int:
        """The time one bucket spans (ns)."""
        return self.k * self.width_ns

    def add(self, t_ns, values) -> None:
        """Fold windows in: ``t_ns`` their starts (int64 ns, on the grid), ``values`` theirs."""
        t = np.asarray(t_ns, dtype=np.int64)
        v = np.asarray(values, dtype=np.float64)
        if not len(t):
            return
        j = ((t - self.origin_ns) // self.width_ns - self.k_start) // self.k
        keep = (j >= 0) & (j < self.n) & ~np.isnan(v)
        if not keep.all():
            j, v = j[keep], v[keep]
        if not len(j):
            return
        if len(j) > 1 and np.any(j[1:] < j[:-1]):  # unsorted block: sort it once
            order = np.argsort(j, kind="stable")
            j, v = j[order], v[order]
        starts = np.flatnonzero(np.r_[True, j[1:] != j[:-1]])
        b = j[starts]
        self.hi[b] = np.fmax(self.hi[b], np.maximum.reduceat(v, starts))
        self.lo[b] = np.fmin(self.lo[b], np.minimum.reduceat(v, starts))

    def frame(self) -> pd.DataFrame:
        """Columns ``max`` and ``min``, indexed by bucket start (int64 ns, ``window_start_ns``)."""
        idx = self.origin_ns + (self.k_start + np.arange(self.n, dtype=np.int64) * self.k) \
            * self.width_ns
        return pd.DataFrame({"max": self.hi.copy(), "min": self.lo.copy()},
                            index=pd.Index(idx, name="window_start_ns"))
