"""Exact percentiles of more values than fit in memory (numpy only: the lean install uses it).

``ExactPercentiles`` collects float64 values chunk by chunk; past a limit they go to a temporary
file. ``percentiles`` then follows ``numpy.percentile``'s default ("linear") rule on all of them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ExactPercentiles", "IntegerPercentiles"]


class ExactPercentiles:
    """Collect float64 values in bounded memory and return exact percentiles of all of them.

    Values are held in memory up to ``mem_values`` (default 1 M, 8 MB), then spilled to a
    temporary file. Percentiles follow ``numpy.percentile``'s default ("linear") rule: the
    order statistics at floor and ceil of q/100 x (n - 1), interpolated; on spilled values the
    order statistics are found exactly by narrowing a value range over the file (a histogram
    per pass, then the few values of the bin holding the rank), so memory stays bounded.
    """

    def __init__(self, mem_values: int = 1 << 20):
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

    def _iter(self, block: int = 1 << 20):
        """The spilled values, one block at a time (read, not mapped: mapped pages of a large
        file would count as the process's memory)."""
        self.file.flush()
        self.file.seek(0)
        left = self.n
        while left > 0:
            x = np.fromfile(self.file, dtype=np.float64, count=min(block, left))
            if not len(x):
                break
            left -= len(x)
            yield x
        self.file.seek(0, 2)  # back to the end: more values may be added

    @staticmethod
    def _key(x: np.ndarray) -> np.ndarray:
        """Sortable uint64 keys of float64 values (same order as the floats; -0.0 < 0.0)."""
        i = x.view(np.int64)
        k = i ^ ((i >> 63) & np.int64(0x7FFFFFFFFFFFFFFF))  # signed, in float order
        return k.view(np.uint64) ^ np.uint64(1 << 63)  # unsigned, same order

    def _select(self, ks: list[int], nb: int = 4096, gather: int = 1 << 21) -> dict[int, float]:
        """The k-th smallest values (0-based) of the spilled values, all ranks at once.

        Narrows an integer key range per rank (a histogram pass for every rank still open,
        4096 bins: at most ~6 passes for 64-bit keys), then gathers each rank's last bin.
        """
        lo0 = hi0 = None
        for x in self._iter():
            k = self._key(x)
            lo0 = int(k.min()) if lo0 is None else min(lo0, int(k.min()))
            hi0 = int(k.max()) if hi0 is None else max(hi0, int(k.max()))
        state = {k: [lo0, hi0, 0] for k in set(ks)}  # key range [lo, hi] and values below lo
        done: dict[int, float] = {}
        while state:
            ranges = {(v[0], v[1]) for v in state.values()}
            counts = {r: np.zeros(nb, np.int64) for r in ranges}
            for x in self._iter():
                key = self._key(x)
                for (lo, hi), cnt in counts.items():
                    m = key[(key >= np.uint64(lo)) & (key <= np.uint64(hi))]
                    width = (hi - lo) // nb + 1
                    b = ((m - np.uint64(lo)) // np.uint64(width)).astype(np.int64)
                    cnt += np.bincount(b, minlength=nb)[:nb]
            to_gather: dict[int, tuple[int, int, int]] = {}
            for k, (lo, hi, below) in list(state.items()):
                cnt = counts[(lo, hi)]
                width = (hi - lo) // nb + 1
                cum = np.cumsum(cnt)
                j = int(np.searchsorted(cum, k - below, side="right"))
                before = below + (int(cum[j - 1]) if j else 0)
                blo, bhi = lo + j * width, min(hi, lo + (j + 1) * width - 1)
                if cnt[j] <= gather or blo == bhi:
                    to_gather[k] = (blo, bhi, k - before)
                    del state[k]
                else:
                    state[k] = [blo, bhi, before]
            if to_gather:
                got: dict[tuple[int, int], list[np.ndarray]] = {
                    (g[0], g[1]): [] for g in to_gather.values()}
                for x in self._iter():
                    key = self._key(x)
                    for (blo, bhi), parts in got.items():
                        parts.append(x[(key >= np.uint64(blo)) & (key <= np.uint64(bhi))])
                for k, (blo, bhi, r) in to_gather.items():
                    v = np.concatenate(got[(blo, bhi)])
                    done[k] = float(np.partition(v, r)[r])
        return done

    def percentiles(self, qs) -> list[float]:
        """Return the percentiles ``qs`` (0..100) of every value added; NaN when none."""
        qs = list(qs)
        if self.n == 0:
            return [np.nan] * len(qs)
        if self.file is None:
            return [float(v) for v in np.percentile(np.concatenate(self.chunks), qs)]
        idx = []
        for q in qs:
            vi = (q / 100.0) * (self.n - 1)
            i0 = int(np.floor(vi))
            idx.append((vi, i0, min(i0 + 1, self.n - 1)))
        val = self._select([i for _, a, b in idx for i in (a, b)])
        out = []
        for vi, i0, i1 in idx:
            g = vi - i0
            a, b = val[i0], val[i1]
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
