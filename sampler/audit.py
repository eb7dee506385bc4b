"""Self-audit helpers: bounded-memory histograms for interval and read-bracket percentiles.

A capture of days has ~10^8 sweeps, so percentiles come from log-spaced histograms (64 bins per
octave: +-0.55 % resolution) with the exact maximum kept aside. Memory is fixed (a few KB each).
"""

from __future__ import annotations

import numpy as np

_BINS_PER_OCTAVE = 64
_N_BINS = 44 * _BINS_PER_OCTAVE  # up to 2^44 ns (~4.9 h): beyond that the last bin


class LogHistogram:
    """Count non-negative integer samples (ns) in log-spaced bins; quantiles within ~0.55 %."""

    def __init__(self) -> None:
        self.counts = np.zeros(_N_BINS + 1, dtype=np.int64)  # bin 0: values < 1
        self.n = 0
        self.max = 0
        self.total = 0

    def add(self, values: np.ndarray) -> None:
        """Add an array of samples (ns, >= 0)."""
        v = np.asarray(values, dtype=np.int64)
        if v.size == 0:
            return
        self.n += int(v.size)
        self.max = max(self.max, int(v.max()))
        self.total += int(v.sum())
        pos = v >= 1
        idx = np.zeros(v.shape, dtype=np.int64)
        idx[pos] = 1 + np.minimum(
            (np.log2(v[pos].astype(np.float64)) * _BINS_PER_OCTAVE).astype(np.int64),
            _N_BINS - 1)
        self.counts += np.bincount(idx, minlength=_N_BINS + 1)

    def quantile(self, q: float) -> int | None:
        """Return the ``q`` quantile (0..1) in ns (bin geometric midpoint; the max for q = 1)."""
        if self.n == 0:
            return None
        if q >= 1:
            return self.max
        target = q * self.n
        cum = np.cumsum(self.counts)
        b = int(np.searchsorted(cum, target, side="left" if target > 0 else "right"))
        b = min(b, _N_BINS)
        if b == 0:
            return 0
        mid = 2.0 ** ((b - 1 + 0.5) / _BINS_PER_OCTAVE)
        return int(round(min(mid, self.max)))

    def summary(self) -> dict[str, int | float | None]:
        """Return {n, p50, p99, max, mean} in ns."""
        return {
            "n": self.n,
            "p50": self.quantile(0.5),
            "p99": self.quantile(0.99),
            "max": self.max if self.n else None,
            "mean": (self.total / self.n) if self.n else None,
        }
