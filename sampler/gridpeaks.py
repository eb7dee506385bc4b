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

The sampler never imports the analysis; this module restates its rule for a stream, with numpy
only (the analysis' own statement of each part: ``analysis.intervals`` for intervals, glitches
and gaps, ``analysis.curve`` for the window bytes and quality, ``analysis.overline`` for the
over-line test, ``analysis.peaks`` for the headline).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["INSTANT_UNC_NS", "GAP_FACTOR", "GridWindows"]

#: Timing uncertainty of each reading's instant beyond its half read bracket, ns: the adapter
#: updates its counter files only every ~0.1-0.2 ms (analysis.curve.INSTANT_UNC_NS).
INSTANT_UNC_NS = 100_000
#: An interval longer than this many sampling intervals spans missed sweeps: a gap
#: (analysis.intervals.DEFAULT_GAP_FACTOR).
GAP_FACTOR = 1.5


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
        idx = np.flatnonzero(ok)
        if len(idx) >= 3:  # a torn read between two agreeing neighbours is dropped
            vv = v[idx]
            prev, cur, nxt = vv[:-2], vv[1:-1], vv[2:]
            glitch = ((cur < prev) | (cur > nxt)) & (prev <= nxt)
            if glitch.any():
                idx = np.delete(idx, 1 + np.flatnonzero(glitch))
        if len(idx) < 3:
            return none, 0, 0
        tk, vk, uk = t[idx], v[idx], u[idx]
        t0, t1 = tk[:-1], tk[1:]
        reset = vk[1:] < vk[:-1]
        inv = np.concatenate([[0], np.cumsum(~ok)])
        unavailable = (inv[idx[1:]] - inv[idx[:-1] + 1]) > 0
        nan = reset | unavailable
        gap = ((t1 - t0) > GAP_FACTOR * self.interval) & ~nan
        step = np.where(nan, np.uint64(0), vk[1:] - np.where(reset, vk[1:], vk[:-1]))
        cum = np.concatenate([[0.0], np.cumsum(step.astype(np.float64) * self.bpu)])
        unc = np.maximum(uk[:-1], uk[1:])  # each interval's edge uncertainty (curve.edge_unc)
        w, o = self.width, self.origin
        lo, hi = int(tk[0]), int(tk[-2])  # the last reading's fate waits for the next one
        tol = min(INSTANT_UNC_NS, w // 100)  # curve.cover_tolerance_ns
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
            n0, n1 = t0[nan], t1[nan]
            bad |= (np.searchsorted(n0, b, "left") - np.searchsorted(n1, a, "right")) > 0
        if gap.any():  # a gap across either edge: the window's bytes are spread by assumption
            g0, g1 = t0[gap], t1[gap]
            for e in (a, b):
                bad |= (np.searchsorted(g0, e, "left") - np.searchsorted(g1, e, "right")) > 0
        rate = byt * 8.0 / w  # Gb/s (bits per ns)
        n_over = 0
        if math.isfinite(self.line):
            j = np.minimum(np.searchsorted(t1, np.concatenate([a, b]), "left"), len(t1) - 1)
            ua, ub = unc[j[:len(a)]] + INSTANT_UNC_NS, unc[j[len(a):]] + INSTANT_UNC_NS
            low = np.maximum(np.interp(b - ub, tf, cum) - np.interp(a + ua, tf, cum), 0.0)
            over = ~bad & (low * 8.0 / w > self.line)
            n_over = int(over.sum())
            bad |= over
            rate = np.minimum(rate, self.line)  # within the uncertainty: at line rate
        return rate[~bad], n_over, keep_from
