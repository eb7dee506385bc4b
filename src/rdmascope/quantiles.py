"""Exact percentiles of more values than fit in memory (numpy only: the lean install uses it).

``ExactPercentiles`` collects float64 values chunk by chunk; past a limit they go to a temporary
file. ``percentiles`` then follows ``numpy.percentile``'s default ("linear") rule on all of them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ExactPercentiles", "IntegerPercentiles"]


class ExactPercentiles:
    """Collect float64 values in bounded memory and return exact percentiles of all of them.

    Values are held in memory up to ``mem_values`` (default 4 M, 32 MB), then spilled to a
    temporary file. Percentiles follow ``numpy.percentile``'s default ("linear") rule: the
    order statistics at floor and ceil of q/100 x (n - 1), interpolated; on spilled values the
    order statistics are found exactly by narrowing a value range over the file (a histogram
    per pass, then the few values of the bin holding the rank), so memory stays bounded.
    """

    def __init__(self, mem_values: int = 4_000_000):
        self.mem_values = int(mem_values)
        self.chunks: list[np.ndarray] = []
        self.n_mem = 0
        self.n = 0
        self.file = None

    def add(self, x: np.ndarray) -> None:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if not len(x):
            return
        self.n += len(x)
        if self.file is None and self.n_mem + len(x) <= self.mem_values:
            self.chunks.append(x.copy())
            self.n_mem += len(x)
            return
        if self.file is None:
            import tempfile

            self.file = tempfile.TemporaryFile(prefix="rdmascope-pct-")
            for c in self.chunks:
                c.tofile(self.file)
            self.chunks, self.n_mem = [], 0
        x.tofile(self.file)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def _iter(self, block: int = 1 << 22):
        self.file.flush()
        mm = np.memmap(self.file, dtype=np.float64, mode="r", shape=(self.n,))
        for s in range(0, self.n, block):
            yield np.asarray(mm[s:s + block])

    def _kth(self, k: int, lo: float, hi: float, nb: int = 4096, gather: int = 1 << 21) -> float:
        below = 0  # values < lo
        while True:
            if lo == hi:
                return lo
            span = hi - lo
            counts = np.zeros(nb, np.int64)
            for x in self._iter():
                x = x[(x >= lo) & (x <= hi)]
                i = np.clip(((x - lo) / span * nb).astype(np.int64), 0, nb - 1)
                counts += np.bincount(i, minlength=nb)
            cum = np.cumsum(counts)
            j = int(np.searchsorted(cum, k - below, side="right"))
            before = below + (int(cum[j - 1]) if j else 0)
            if counts[j] <= gather:
                vals = []
                for x in self._iter():
                    x = x[(x >= lo) & (x <= hi)]
                    i = np.clip(((x - lo) / span * nb).astype(np.int64), 0, nb - 1)
                    vals.append(x[i == j])
                v = np.concatenate(vals)
                return float(np.partition(v, k - before)[k - before])
            new_lo = lo + span * j / nb
            new_hi = lo + span * (j + 1) / nb
            # keep the bin's own values: those that mapped to bin j lie within [new_lo, new_hi]
            # up to rounding, so widen by one ulp each side and count what lies below
            new_lo, new_hi = np.nextafter(new_lo, -np.inf), np.nextafter(new_hi, np.inf)
            if new_lo <= lo and new_hi >= hi:
                new_lo, new_hi = lo, hi  # no progress possible: gather below
                gather = int(counts[j])
                continue
            below += sum(int(((x >= lo) & (x < new_lo)).sum()) for x in self._iter())
            lo, hi = max(lo, new_lo), min(hi, new_hi)

    def percentiles(self, qs) -> list[float]:
        """Return the percentiles ``qs`` (0..100) of every value added; NaN when none."""
        qs = list(qs)
        if self.n == 0:
            return [np.nan] * len(qs)
        if self.file is None:
            return [float(v) for v in np.percentile(np.concatenate(self.chunks), qs)]
        lo = min(float(x.min()) for x in self._iter())
        hi = max(float(x.max()) for x in self._iter())
        out = []
        for q in qs:
            vi = (q / 100.0) * (self.n - 1)
            i0 = int(np.floor(vi))
            i1 = min(i0 + 1, self.n - 1)
            g = vi - i0
            a = self._kth(i0, lo, hi)
            b = a if i1 == i0 else self._kth(i1, lo, hi)
            d = b - a
            out.append(float(b - d * (1 - g) if g >= 0.5 else a + d * g))
        return out


class IntegerPercentiles:
    """Exact percentiles of integers (ns durations), kept as distinct values with counts.

    Memory grows with the number of distinct values (a few hundred thousand for read brackets
    or sweep intervals in ns), not with the values added; each ``percentiles`` call is one
    cumulative sum, no pass over the data. Same rule as ``numpy.percentile`` ("linear").
    """

    def __init__(self):
        self.vals = np.zeros(0, np.int64)
        self.cnts = np.zeros(0, np.int64)
        self.n = 0

    def add(self, x) -> None:
        x = np.asarray(x).astype(np.int64, copy=False).ravel()
        if not len(x):
            return
        self.n += len(x)
        u, c = np.unique(x, return_counts=True)
        vals = np.concatenate([self.vals, u])
        cnts = np.concatenate([self.cnts, c])
        uu, inv = np.unique(vals, return_inverse=True)
        acc = np.zeros(len(uu), np.int64)
        np.add.at(acc, inv, cnts)
        self.vals, self.cnts = uu, acc

    def close(self) -> None:
        pass

    def max(self) -> int | None:
        return int(self.vals[-1]) if self.n else None

    def _kth(self, k: int) -> int:
        return int(self.vals[np.searchsorted(np.cumsum(self.cnts), k, side="right")])

    def percentiles(self, qs) -> list[float]:
        """Return the percentiles ``qs`` (0..100) of every value added; NaN when none."""
        if self.n == 0:
            return [np.nan] * len(list(qs))
        out = []
        for q in qs:
            vi = (q / 100.0) * (self.n - 1)
            i0 = int(np.floor(vi))
            i1 = min(i0 + 1, self.n - 1)
            g = vi - i0
            a = self._kth(i0)
            b = a if i1 == i0 else self._kth(i1)
            d = float(b - a)
            out.append(float(b - d * (1 - g) if g >= 0.5 else a + d * g))
        return out
