"""The live peak gauges' window rule: fixed-grid windows over the readings as they arrive.

``rdmascope peaks`` re-bins a capture onto windows [origin + k x width, origin + (k+1) x width)
with the origin at the capture start (``manifest["start"]["monotonic_ns"]``), takes each
window's bytes from the piecewise-linear cumulative byte curve through the readings (F(b) - F(a);
docs/method.md, "The sampler") and headlines the highest window that is whole, holds no unknown
interval, has no gap (missed sweeps) across an edge and is not over line rate beyond its timing
uncertainty; a headline above the line rate but within that uncertainty is given at the line
rate. The recorder's ``--metrics`` gauges apply the same rule to the same grid, one flush batch
at a time, so ``max_over_time(rdmascope_peak_bytes_per_second{window="1ms"})`` and ``peaks
--windows 1ms`` over one span give one number (``tests/test_metrics.py`` checks the gauge
against ``peaks`` on the capture the recorder wrote).

The sampler never imports the analysis (no pandas on an inference node). The rules both apply
to a counter's readings, numpy only, are stated once in ``rdmascope.counters`` and imported by
both: the torn read, the unreadable reading between two valid ones, the gap, the window's cover
tolerance, the intervals a window touches, a gap across a window edge, the instant uncertainty,
the fewest bytes a window can hold (the over-line test). What this module adds is the stream:
the readings carried between batches, each window evaluated once, the window bytes from the
curve through the readings by ``np.interp`` (the analysis: ``analysis.curve``) and the headline
(``analysis.peaks``).
"""

from __future__ import annotations

import math

import numpy as np

from rdmascope.counters import (
    GAP_FACTOR,
    INSTANT_UNC_NS,
    cover_tolerance_ns,
    drop_glitches,
    is_gap,
    over_line,
    overlapping,
    strictly_across,
    unreadable_between,
    window_fewest_bytes,
)

__all__ = ["INSTANT_UNC_NS", "GAP_FACTOR", "GridWindows"]


class GridWindows:
    """One counter's windows of one width on the capture's grid, evaluated as readings arrive.

    ``origin_ns``: the capture start (CLOCK_MONOTONIC ns); ``width_ns``; ``interval_ns``: the
    sampling interval; ``bytes_per_unit``; ``line_gbps``: the lowest physical bound of the
    counter's path (NaN: never judged over line rate). ``feed(t, v, u, ok)`` takes the next
    readings in time order (instants ns = read start + half the read bracket; raw values;
    half read brackets ns; ok = the read succeeded) and returns (rates of the windows that count,
    Gb/s, as ``peaks`` headlines them; the number of windows kept out as over line rate). Each
    window is evaluated once, when the readings after its end are known (the reading after its
    end decides whether the one before is a torn read), so a window is counted at most once.
    """

    __slots__ = ("origin", "width", "interval", "bpu", "line", "done_k", "t", "v", "u", "ok")

    def __init__(self, origin_ns: int, width_ns: int, interval_ns: int, bytes_per_unit: int,
                 line_gbps: float = math.nan):
        self.origin, self.width, self.interval = int(origin_ns), int(width_ns), int(interval_ns)
        self.bpu = float(bytes_per_unit)
        self.line = float(line_gbps) if line_gbps is not None else math.nan
        self.done_k: int | None = None  # the last window index evaluated
        z = np.zeros(0, np.int64)
        self.t, self.v, self.u, self.ok = z, np.zeros(0, np.uint64), z, np.zeros(0, bool)

    def feed(self, t: np.ndarray, v: np.ndarray, u: np.ndarray, ok: np.ndarray
             ) -> tuple[np.ndarray, int]:
        t = np.concatenate([self.t, np.asarray(t, np.int64)])
        v = np.concatenate([self.v, np.asarray(v, np.uint64)])
        u = np.concatenate([self.u, np.asarray(u, np.int64)])
        ok = np.concatenate([self.ok, np.asarray(ok, bool)])
        rates, n_over, keep_from = self._windows(t, v, u, ok)
        self.t, self.v, self.u, self.ok = (t[keep_from:], v[keep_from:], u[keep_from:],
                                           ok[keep_from:])
        return rates, n_over

    def _windows(self, t, v, u, ok) -> tuple[np.ndarray, int, int]:
        none = np.zeros(0)
        idx = drop_glitches(np.flatnonzero(ok), v)  # a torn read between agreeing neighbours
        if len(idx) < 3:
            return none, 0, 0
        tk, vk, uk = t[idx], v[idx], u[idx]
        t0, t1 = tk[:-1], tk[1:]
        reset = vk[1:] < vk[:-1]
        nan = reset | unreadable_between(ok, idx[:-1], idx[1:])
        gap = is_gap(t1 - t0, self.interval) & ~nan
        step = np.where(nan, np.uint64(0), vk[1:] - np.where(reset, vk[1:], vk[:-1]))
        cum = np.concatenate([[0.0], np.cumsum(step.astype(np.float64) * self.bpu)])
        unc = np.maximum(uk[:-1], uk[1:])  # each interval's edge uncertainty (curve.edge_unc)
        w, o = self.width, self.origin
        lo, hi = int(tk[0]), int(tk[-2])  # the last reading's fate waits for the next one
        tol = int(cover_tolerance_ns(w))
        k0 = -((o - (lo - tol)) // w)  # ceil
        if self.done_k is not None:
            k0 = max(k0, self.done_k + 1)
        k1 = (hi - o) // w - 1
        # keep the readings a later window may need: from two valid readings before the next
        # window's start less its uncertainty
        nxt = o + max(k0, k1 + 1) * w - w - 2 * INSTANT_UNC_NS - int(uk.max())
        keep_from = int(idx[max(0, int(np.searchsorted(tk, nxt)) - 2)])
        if k1 < k0:
            return none, 0, keep_from
        self.done_k = k1
        a = o + np.arange(k0, k1 + 1, dtype=np.int64) * w
        b = a + w
        tf = tk.astype(np.float64)
        byt = np.interp(b, tf, cum) - np.interp(a, tf, cum)
        bad = np.zeros(len(a), bool)
        if nan.any():  # a NaN interval overlapping the window: its bytes are unknown
            bad |= overlapping(t0[nan], t1[nan], a, b) > 0
        if gap.any():  # a gap across either edge: the window's bytes are spread by assumption
            g0, g1 = t0[gap], t1[gap]
            for e in (a, b):
                bad |= strictly_across(g0, g1, e) > 0
        rate = byt * 8.0 / w  # Gb/s (bits per ns)
        n_over = 0
        if math.isfinite(self.line):
            low = window_fewest_bytes(lambda x: np.interp(x, tf, cum), t1, unc, t0[nan],
                                      t1[nan], a, b)
            over = ~bad & over_line(low, w, self.line)  # NaN: not judged (as peaks)
            n_over = int(over.sum())
            bad |= over
            rate = np.minimum(rate, self.line)  # within the uncertainty: at line rate
        return rate[~bad], n_over, keep_from
