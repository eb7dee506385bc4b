"""The rules that turn one counter's readings into intervals and windows, numpy only.

Two sides apply them: the analysis (``analysis.intervals`` makes a counter's intervals from its
readings, ``analysis.curve`` their windows) and the recorder's live peak gauges
(``sampler.gridpeaks``, ``record --metrics``), which must give the number ``peaks`` gives but may
not import the analysis (no pandas on an inference node). Each rule is stated here once, for
both; ``analysis.intervals`` says why each is what it is.

- A *torn read* (``drop_glitches``): a single valid reading that breaks monotonicity while its
  two neighbours agree with each other is dropped; a real reset stays low after the drop.
- *Unreadable between* (``unreadable_between``): an interval whose two valid readings have an
  unreadable one between them is "unavailable" (bytes unknown: a reset may hide inside).
- A *gap* (``is_gap``): two valid readings more than ``GAP_FACTOR`` sampling intervals apart
  (missed sweeps); the bytes are exact, their timing inside is not.
- A window is *whole* when its readings leave at most ``cover_tolerance_ns`` of it uncovered.
- A window *touches* an interval when they overlap (``overlapping``); a gap is spread into a
  window when it lies strictly across one of its edges (``strictly_across``).
- Each reading's instant is uncertain by its half read bracket plus ``INSTANT_UNC_NS``
  (``edge_uncertainty``: a window edge takes the uncertainty of the interval it falls in); the
  fewest bytes a window can hold when they move (``fewest_bytes``, ``window_fewest_bytes``)
  decide whether it is over line rate (``over_line``). This is the one over-line judgement:
  ``peaks`` (``analysis.overline``), the live gauges, the Perfetto export and the dataset's
  ``quality`` column all call it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INSTANT_UNC_NS", "GAP_FACTOR", "COVER_TOLERANCE_NS", "cover_tolerance_ns",
           "drop_glitches", "unreadable_between", "is_gap", "overlapping", "strictly_across",
           "fewest_bytes", "edge_uncertainty", "window_fewest_bytes", "over_line"]

#: Timing uncertainty of each reading's instant beyond its read bracket, ns: the adapter updates
#: its counter files only every ~0.1-0.2 ms, so the bytes read at an instant were counted up to
#: that long before it (docs/method.md, "The sampler": each reading's instant is known only to
#: about +-0.1-0.2 ms, so a single 1 ms value carries about +-15-25 %). The low end, 0.1 ms.
INSTANT_UNC_NS = 100_000
#: Consecutive valid readings further apart than this many sampling intervals form a gap.
GAP_FACTOR = 1.5
#: A window whose readings leave at most this much of it uncovered (and at most 1 %) is full,
#: not partial: a reading that close to its edge is indistinguishable from one on it.
COVER_TOLERANCE_NS = INSTANT_UNC_NS


def cover_tolerance_ns(width_ns):
    """How much of a window of ``width_ns`` its readings may leave uncovered and the window still
    count as full (``COVER_TOLERANCE_NS``, at most 1 % of the window); int or int array."""
    return np.minimum(COVER_TOLERANCE_NS, np.asarray(width_ns, dtype=np.int64) // 100)


def drop_glitches(idx: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``idx`` (positions of the valid readings, in time order) without the torn reads.

    A reading that breaks monotonicity (below the previous one, or above the next one) while
    its two neighbours agree (the previous at most the next) is dropped: the interval across
    it keeps its neighbours' exact difference. A small tear inside the neighbours' range leaves
    it ambiguous which of two adjacent readings is wrong; both are then dropped.
    """
    if len(idx) < 3:
        return idx
    # every reading valid (idx is then 0..n-1): the values themselves, not a copy
    v = value if len(idx) == len(value) else value[idx]
    if not (v[1:] < v[:-1]).any():
        return idx  # never going down: no reading breaks monotonicity (the usual case)
    prev, cur, nxt = v[:-2], v[1:-1], v[2:]
    glitch = ((cur < prev) | (cur > nxt)) & (prev <= nxt)
    if glitch.any():
        idx = np.delete(idx, 1 + np.flatnonzero(glitch))
    return idx


def unreadable_between(valid: np.ndarray, i0: np.ndarray, i1: np.ndarray) -> np.ndarray:
    """Per interval from reading ``i0[k]`` to reading ``i1[k]``: True when a reading strictly
    between them is unreadable (``valid`` False)."""
    n_invalid = np.concatenate([[0], np.cumsum(~valid.astype(bool))])
    return (n_invalid[i1] - n_invalid[i0 + 1]) > 0


def is_gap(dt_ns: np.ndarray, interval_ns: int, gap_factor: float = GAP_FACTOR) -> np.ndarray:
    """Per interval of ``dt_ns``: True when its readings are more than ``gap_factor`` sampling
    intervals apart (missed sweeps)."""
    return dt_ns > gap_factor * interval_ns


def overlapping(t0: np.ndarray, t1: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per range [a, b): how many of the intervals [t0, t1) (sorted, disjoint) overlap it."""
    return np.searchsorted(t0, b, "left") - np.searchsorted(t1, a, "right")


def strictly_across(t0: np.ndarray, t1: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per instant x: how many of the intervals (sorted, disjoint) lie strictly across it
    (t0 < x < t1): #(t0 < x) - #(t1 <= x)."""
    return np.searchsorted(t0, x, "left") - np.searchsorted(t1, x, "right")


def fewest_bytes(cum, nan_t0: np.ndarray, nan_t1: np.ndarray, a: np.ndarray, b: np.ndarray,
                 ua: np.ndarray, ub: np.ndarray) -> np.ndarray:
    """The fewest bytes each window [a, b) can hold when the readings' instants move within
    their uncertainty (``ua`` at its start, ``ub`` at its end, ns): F(b - ub) - F(a + ua), 0 if
    negative; NaN where the widened window [a - ua, b + ub) touches an unknown interval
    [nan_t0, nan_t1) (nothing is judged from unknown bytes). ``cum``: the counter's cumulative
    bytes F at an array of instants. A window whose fewest bytes exceed what the line carries
    in it is over line rate.
    """
    low = np.maximum(cum(b - ub) - cum(a + ua), 0.0)
    return np.where(overlapping(nan_t0, nan_t1, a - ua, b + ub) > 0, np.nan, low)


def edge_uncertainty(t1: np.ndarray, unc: np.ndarray | None, e: np.ndarray,
                     extra_ns: int = INSTANT_UNC_NS) -> np.ndarray:
    """Timing uncertainty (ns, int64) of each window edge ``e``: that of the readings of the
    interval the edge falls in (the first interval ending at or after it, the last one for an
    edge after every interval), ``unc`` (per interval: the larger of its two readings' half read
    brackets; None: 0), plus ``extra_ns`` (the adapter's counter update lag, ``INSTANT_UNC_NS``).
    ``t1``: the counter's interval ends (sorted)."""
    e = np.asarray(e, np.int64)
    if unc is None or not len(t1):
        return np.full(len(e), int(extra_ns), np.int64)
    j = np.minimum(np.searchsorted(t1, e, side="left"), len(t1) - 1)
    return np.asarray(unc, np.int64)[j] + int(extra_ns)


def window_fewest_bytes(cum, t1: np.ndarray, unc: np.ndarray | None, nan_t0: np.ndarray,
                        nan_t1: np.ndarray, a: np.ndarray, b: np.ndarray,
                        extra_ns: int = INSTANT_UNC_NS) -> np.ndarray:
    """The fewest bytes (float) each window [a, b) (ns) of one counter can hold: ``fewest_bytes``
    with each edge's uncertainty from ``edge_uncertainty`` (``t1``, ``unc``, ``extra_ns`` as
    there). NaN where the widened window touches an unknown interval [nan_t0, nan_t1)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ua = edge_uncertainty(t1, unc, a, extra_ns)
    ub = edge_uncertainty(t1, unc, b, extra_ns)
    return fewest_bytes(cum, nan_t0, nan_t1, a, b, ua, ub)


def over_line(low_bytes, width_ns, line_gbps) -> np.ndarray:
    """The over-line judgement: True where a window's fewest bytes (``window_fewest_bytes``,
    summed over the counters of a group) exceed what a line of ``line_gbps`` (Gb/s) carries in
    its ``width_ns`` (ns): low_bytes x 8 / width_ns > line_gbps. False where the fewest bytes
    are NaN (nothing is judged from unknown bytes) or the line rate is unknown (None or NaN: never
    judged). Arrays broadcast."""
    low = np.asarray(low_bytes, np.float64)
    if line_gbps is None:
        return np.zeros(low.shape, bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        return low * 8.0 / np.asarray(width_ns, np.float64) > np.asarray(line_gbps, np.float64)
