"""Bursts on the 1 ms series: threshold with hysteresis relative to the link capacity.

Prefill traffic appears as bursts of a few milliseconds at or near line rate separated by compute
gaps; each burst is (about) one all-reduce (method.md, "Prefill and decode load the network in
opposite ways"). A burst starts at the first window whose rate reaches ``enter_frac`` x capacity
and lasts while the rate stays at or above ``leave_frac`` x capacity (hysteresis: the short dips
inside one all-reduce do not split it). A NaN window (reset/saturated/unavailable/implausible) is
never part of a burst: it ends the current one, and is counted in the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .peaks import rebin_view
from .series import default_origin, to_gbps

__all__ = ["allreduce_bytes", "detect_bursts", "burst_analysis", "BurstResult"]

MS = 1_000_000


def allreduce_bytes(tokens: int, hidden_size: int, bytes_per_value: int, tp: int) -> float:
    """Return the bytes one node sends in one ring all-reduce: 2(N-1)/N x tokens x hidden x bytes.

    method.md, "What tensor parallelism sends": a 4,096-token chunk, hidden 6,144, 2 bytes, TP8
    -> 1.75 x 50.3 MB = 88.1 MB. Decimal bytes. Raises ``ValueError`` for tp < 1 or negatives.
    """
    if tp < 1 or tokens < 0 or hidden_size <= 0 or bytes_per_value <= 0:
        raise ValueError(f"need tp >= 1, tokens >= 0, hidden_size > 0, bytes_per_value > 0 "
                         f"(got tp={tp}, tokens={tokens}, hidden={hidden_size}, "
                         f"bytes={bytes_per_value})")
    return 2.0 * (tp - 1) / tp * tokens * hidden_size * bytes_per_value


def detect_bursts(bytes_per_window: pd.Series, width_ns: int, *, capacity_gbps: float,
                  enter_frac: float = 0.25, leave_frac: float = 0.10) -> pd.DataFrame:
    """Find bursts in one series of bytes per window (index: window start, int64 ns).

    Hysteresis (module docstring): enter at >= ``enter_frac`` x ``capacity_gbps``, stay while
    >= ``leave_frac`` x capacity. Returns one row per burst: start_ns, end_ns (end of its last
    window), duration_s, bytes, peak_gbps (highest window), mean_gbps (bytes x 8 / duration),
    gap_before_s (from the previous burst's end; NaN for the first). Raises ``ValueError`` when
    0 < leave_frac <= enter_frac does not hold or capacity is not positive.
    """
    if capacity_gbps <= 0:
        raise ValueError(f"link capacity must be positive, got {capacity_gbps} Gb/s")
    if not 0 < leave_frac <= enter_frac:
        raise ValueError(f"need 0 < leave ({leave_frac}) <= enter ({enter_frac})")
    b = bytes_per_window.to_numpy(np.float64)
    t = bytes_per_window.index.to_numpy(np.int64)
    if len(t) > 1 and (np.diff(t) != width_ns).any():
        raise ValueError("windows must be consecutive and of the given width")
    rate = to_gbps(b, width_ns)
    valid = ~np.isnan(rate)
    hi = valid & (rate >= enter_frac * capacity_gbps)
    stay = valid & (rate >= leave_frac * capacity_gbps)
    # runs of `stay`; a burst is a run from its first `hi` window to the run's end
    edges = np.diff(np.concatenate([[0], stay.astype(np.int8), [0]]))
    run_s = np.flatnonzero(edges == 1)
    run_e = np.flatnonzero(edges == -1)  # exclusive
    his = np.flatnonzero(hi)
    first_hi = his[np.minimum(np.searchsorted(his, run_s), len(his) - 1)] if len(his) else \
        np.full(len(run_s), -1)
    keep = (first_hi >= run_s) & (first_hi < run_e) if len(his) else np.zeros(len(run_s), bool)
    s_idx, e_idx = first_hi[keep], run_e[keep]
    cb = np.concatenate([[0.0], np.cumsum(np.where(valid, b, 0.0))])
    byt = cb[e_idx] - cb[s_idx]
    peak = np.array([np.max(rate[s:e]) for s, e in zip(s_idx, e_idx, strict=True)])
    start = t[s_idx] if len(t) else np.zeros(0, np.int64)
    end = (t[e_idx - 1] + width_ns) if len(t) else np.zeros(0, np.int64)
    dur = (end - start) / 1e9
    gap = np.concatenate([[np.nan], (start[1:] - end[:-1]) / 1e9]) if len(start) else \
        np.zeros(0)
    return pd.DataFrame({
        "start_ns": start.astype(np.int64), "end_ns": end.astype(np.int64),
        "duration_s": dur, "bytes": byt,
        "peak_gbps": peak if len(peak) else np.zeros(0),
        "mean_gbps": np.divide(byt * 8, (end - start).astype(float),
                               out=np.zeros(len(byt)), where=(end - start) > 0),
        "gap_before_s": gap,
    })


@dataclass
class BurstResult:
    """Bursts of every series over a range: ``table`` (one row per burst, with a ``series``
    column, ``t_start_s`` relative to ``t_ref_ns`` and, with model parameters,
    ``expected_allreduce_bytes`` and ``allreduces`` = bytes / expected) and ``summary`` (one row
    per series: n_bursts, duty_cycle (burst time / valid time), burst_bytes, total_bytes,
    burst_share, mean/median/min gap_s, nan_windows, capacity_gbps, enter_gbps, leave_gbps)."""

    table: pd.DataFrame
    summary: pd.DataFrame
    params: dict[str, Any] = field(default_factory=dict)


def burst_analysis(intervals: pd.DataFrame, *, capacity_gbps: float, start_ns: int | None = None,
                   end_ns: int | None = None, width_ns: int = MS, origin_ns: int | None = None,
                   by: str | None = "series", groups: dict[str, list[str]] | None = None,
                   keep: bool = True, enter_frac: float = 0.25, leave_frac: float = 0.10,
                   expected_allreduce: float | None = None, t_ref_ns: int | None = None
                   ) -> BurstResult:
    """Re-bin to ``width_ns`` (1 ms) windows and detect bursts in each series (and link).

    ``capacity_gbps``: the link capacity the thresholds are relative to (e.g. 200 for a Spark
    cable summed over twins, ~109 for one twin). ``expected_allreduce``: bytes of one all-reduce
    per node (``allreduce_bytes``) to set beside each burst's bytes. Windows default to start at
    ``start_ns`` (or the first reading). Raises ``ValueError`` as ``detect_bursts``/``rebin``.
    """
    lo = int(intervals["t0_ns"].min()) if start_ns is None else int(start_ns)
    hi = int(intervals["t1_ns"].max()) if end_ns is None else int(end_ns)
    origin = default_origin(intervals, lo) if origin_ns is None else int(origin_ns)
    t_ref = lo if t_ref_ns is None else int(t_ref_ns)
    b, _ = rebin_view(intervals, width_ns, origin_ns=origin, start_ns=lo, end_ns=hi, by=by,
                      groups=groups, keep=keep)
    tables, summary = [], []
    for col in b.columns:
        s = b[col]
        bt = detect_bursts(s, width_ns, capacity_gbps=capacity_gbps, enter_frac=enter_frac,
                           leave_frac=leave_frac)
        bt.insert(0, "series", col)
        bt.insert(3, "t_start_s", (bt["start_ns"] - t_ref) / 1e9)
        if expected_allreduce:
            bt["expected_allreduce_bytes"] = float(expected_allreduce)
            bt["allreduces"] = bt["bytes"] / float(expected_allreduce)
        tables.append(bt)
        nvalid = int(s.notna().sum())
        # no known window at all (an unreadable counter): its bytes are unknown, never 0
        total = float(np.nansum(s.to_numpy())) if nvalid else np.nan
        gaps = bt["gap_before_s"].dropna()
        summary.append({
            "series": col, "n_bursts": len(bt),
            "duty_cycle": float(bt["duration_s"].sum() * 1e9 / (nvalid * width_ns))
            if nvalid else np.nan,
            "burst_bytes": float(bt["bytes"].sum()) if nvalid else np.nan,
            "total_bytes": total,
            "burst_share": float(bt["bytes"].sum() / total) if total > 0 else np.nan,
            "mean_gap_s": float(gaps.mean()) if len(gaps) else np.nan,
            "median_gap_s": float(gaps.median()) if len(gaps) else np.nan,
            "min_gap_s": float(gaps.min()) if len(gaps) else np.nan,
            "nan_windows": int(s.isna().sum()),
            "capacity_gbps": float(capacity_gbps),
            "enter_gbps": enter_frac * capacity_gbps, "leave_gbps": leave_frac * capacity_gbps,
        })
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return BurstResult(table=table, summary=pd.DataFrame(summary),
                       params={"capacity_gbps": capacity_gbps, "enter_frac": enter_frac,
                               "leave_frac": leave_frac, "width_ns": width_ns,
                               "start_ns": lo, "end_ns": hi,
                               "expected_allreduce_bytes": expected_allreduce})
