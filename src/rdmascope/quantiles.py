"""Exact percentiles of more values than fit in memory (numpy only: the lean install uses it).

``ExactPercentiles`` collects float64 values chunk by chunk; past a limit they go to a temporary
file. ``percentiles`` then follows ``numpy.percentile``'s default ("linear") rule on all of them.
"""

from __future__ import annotations

import sys

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

    #: the running histogram's bins: the top 16 bits of the sortable key (sign, exponent and 4
    #: mantissa bits: 1/16 of an octave per bin)
    HIST_SHIFT = 48

    def __init__(self, mem_values: int = 1 << 20):
        self.mem_values = int(mem_values)
        self.chunks: list[np.ndarray] = []
        self.n_mem = 0
        self.n = 0
        self.file = None
        self.hist: np.ndarray | None = None  # of the spilled values (see ``_count``)

    def _count(self, x: np.ndarray) -> None:
        """Add values to a histogram of their keys' top bits, kept once values spill: their
        order statistics then start from one bin, not from the whole key range (one pass over
        the file for most ranks, not ~7). Counted by the floats' own top 16 bits, read in place
        (``_top``); ``_key_hist`` orders the counts by key."""
        h = np.bincount(_top(x), minlength=1 << 16)
        if self.hist is None:
            self.hist = h
        else:
            self.hist += h

    def _key_hist(self) -> np.ndarray:
        """The histogram of the spilled values by their keys' top 16 bits (``_key`` >> 48)."""
        out = np.empty_like(self.hist)
        out[_RAW_TO_BIN] = self.hist
        return out

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
                self._count(c)
            self.chunks, self.n_mem = [], 0
        x.tofile(self.file)
        self._count(x)

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

    #: a bin of at most this many values is gathered into memory (16 MB) and selected there
    GATHER = 1 << 21

    def _select(self, ks: list[int], nb: int = 4096, gather: int | None = None
                ) -> dict[int, float]:
        """The k-th smallest values (0-based) of the spilled values, all ranks at once.

        Each rank starts from its bin of the running histogram (``add``); a bin of at most
        ``gather`` values is gathered in one pass and the rank selected among them. A larger bin
        is narrowed (a histogram pass over the file per rank still open, ``nb`` bins, the range
        also cut to the smallest and largest key found in it, so a bin of equal values ends at
        once), then gathered.
        """
        gather = self.GATHER if gather is None else int(gather)
        shift = self.HIST_SHIFT
        hist = self._key_hist()
        cum = np.cumsum(hist)
        state: dict[int, list[int]] = {}  # rank -> [key lo, key hi, values below lo]
        to_gather: dict[int, tuple[int, int, int]] = {}  # rank -> (key lo, key hi, rank in it)
        for k in set(ks):
            j = int(np.searchsorted(cum, k, side="right"))
            below = int(cum[j - 1]) if j else 0
            lo, hi = j << shift, ((j + 1) << shift) - 1
            if hist[j] <= gather:
                to_gather[k] = (lo, hi, k - below)
            else:
                state[k] = [lo, hi, below]
        done: dict[int, float] = {}
        while True:
            if to_gather:
                got: dict[tuple[int, int], list[np.ndarray]] = {
                    (g[0], g[1]): [] for g in to_gather.values()}
                # each range lies inside one histogram bin: keep those bins' values first (one
                # table lookup by the floats' top bits), then cut the few left to each range
                wanted = self._wanted(lo for lo, _ in got)
                for x in self._iter():
                    xs = x[wanted.take(_top(x))]
                    key = self._key(xs)
                    for (blo, bhi), parts in got.items():
                        parts.append(xs[(key >= np.uint64(blo)) & (key <= np.uint64(bhi))])
                for k, (blo, bhi, r) in to_gather.items():
                    v = np.concatenate(got[(blo, bhi)])
                    done[k] = float(np.partition(v, r)[r])
                to_gather = {}
            if not state:
                return done
            ranges = {(v[0], v[1]) for v in state.values()}
            counts = {r: np.zeros(nb, np.int64) for r in ranges}
            seen = {r: [None, None] for r in ranges}  # smallest and largest key in the range
            wanted = self._wanted(lo for lo, _ in ranges)
            for x in self._iter():
                key = self._key(x[wanted.take(_top(x))])  # the values of the ranges' bins
                for (lo, hi), cnt in counts.items():
                    m = key[(key >= np.uint64(lo)) & (key <= np.uint64(hi))]
                    if not len(m):
                        continue
                    width = (hi - lo) // nb + 1
                    b = ((m - np.uint64(lo)) // np.uint64(width)).astype(np.int64)
                    cnt += np.bincount(b, minlength=nb)[:nb]
                    mn = seen[(lo, hi)]
                    a, z = int(m.min()), int(m.max())
                    mn[0] = a if mn[0] is None else min(mn[0], a)
                    mn[1] = z if mn[1] is None else max(mn[1], z)
            for k, (lo, hi, below) in list(state.items()):
                cnt = counts[(lo, hi)]
                mn = seen[(lo, hi)]
                if mn[0] is not None and mn[0] == mn[1]:  # every value of the range is equal
                    done[k] = self._float_of(mn[0])
                    del state[k]
                    continue
                width = (hi - lo) // nb + 1
                c = np.cumsum(cnt)
                j = int(np.searchsorted(c, k - below, side="right"))
                before = below + (int(c[j - 1]) if j else 0)
                blo, bhi = lo + j * width, min(hi, lo + (j + 1) * width - 1)
                if mn[0] is not None:
                    blo, bhi = max(blo, mn[0]), min(bhi, mn[1])
                if cnt[j] <= gather or blo == bhi:
                    to_gather[k] = (blo, bhi, k - before)
                    del state[k]
                else:
                    state[k] = [blo, bhi, before]

    def _wanted(self, keys) -> np.ndarray:
        """A table by the floats' top 16 bits (``_top``): True for the histogram bins of the
        given keys."""
        wanted = np.zeros(1 << 16, bool)
        wanted[[int(k) >> self.HIST_SHIFT for k in keys]] = True
        return wanted[_RAW_TO_BIN]

    @staticmethod
    def _float_of(key: int) -> float:
        """The float64 of a sortable key (inverse of ``_key``)."""
        k = np.array([key], np.uint64) ^ np.uint64(1 << 63)
        i = k.view(np.int64)
        i = i ^ ((i >> 63) & np.int64(0x7FFFFFFFFFFFFFFF))
        return float(i.view(np.float64)[0])

    def percentiles(self, qs) -> list[float]:
        """Return the percentiles ``qs`` (0..100) of every value added; NaN when none."""
        qs = list(qs)
        if self.n == 0:
            return [np.nan] * len(qs)
        if self.file is None:
            # a fresh array (concatenate copies even one chunk): partitioned in place
            return [float(v) for v in np.percentile(np.concatenate(self.chunks), qs,
                                                    overwrite_input=True)]
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


def _top(x: np.ndarray) -> np.ndarray:
    """The top 16 bits (sign, exponent, 4 mantissa bits) of each value of a contiguous float64
    array, as a uint16 view (no copy)."""
    return x.view(np.uint16)[_TOP::4]


#: where the top 16 bits of a float64 lie among its four uint16
_TOP = 3 if sys.byteorder == "little" else 0
#: the key bin (``_key`` >> 48) of each value of a float64's top 16 bits: a positive float's key
#: is its bits with the sign bit set, a negative float's its bits inverted
_RAW = np.arange(1 << 16, dtype=np.int64)
_RAW_TO_BIN = np.where(_RAW < 0x8000, _RAW ^ 0x8000, 0xFFFF - _RAW).astype(np.intp)
del _RAW


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
