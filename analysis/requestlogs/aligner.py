"""Placing a request log on the capture's CLOCK_MONOTONIC (``align``) and checking it against the
capture's span."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from .common import (
    _TIME_COLUMNS,
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    RequestLog,
    RequestLogError,
    _join_flag,
    _s_to_ns,
)


def _shift(df: pd.DataFrame, offset_ns) -> pd.DataFrame:
    """Add ``offset_ns`` (scalar, or a function of int64 arrays) to every time column."""
    out = df.copy()
    fn = offset_ns if callable(offset_ns) else (lambda t: t + int(offset_ns))
    for c in _TIME_COLUMNS:
        col = out[c]
        mask = col.notna().to_numpy()
        vals = col.to_numpy(dtype="int64", na_value=0)
        new = np.asarray(fn(vals[mask]), dtype=np.int64)
        arr = pd.array([None] * len(col), dtype="Int64")
        arr[mask] = new
        out[c] = arr
    def move(ch):
        return None if ch is None else [int(x) for x in
                                        np.asarray(fn(np.asarray(ch, dtype=np.int64)))]

    out["chunk_times"] = [move(ch) for ch in out["chunk_times"]]
    out["fix"] = [None if not fx else
                  {**fx, "t_first_ns": move([fx["t_first_ns"]])[0],
                   "t_last_ns": move([fx["t_last_ns"]])[0],
                   "chunk_times": move(fx["chunk_times"])} for fx in out["fix"]]
    return out


#: A 1 ms window whose summed tx rate exceeds the node's line rate (sum of its tx ports' rates)
#: by more than the 1 ms timing uncertainty (+-25 %) cannot be a real burst start.
ANCHOR_LINE_SLACK = 1.25

#: Around a found anchor: the windows looked at for its fit (ns, each side).
ANCHOR_FIT_NS = 200_000_000

#: A prefill burst lasts: an anchor window with no other window at half its threshold within
#: this many ns on either side is an isolated spike, and the anchor ambiguous.
ANCHOR_ISOLATED_NS = 20_000_000


class AnchorError(ValueError):
    """No window to anchor to, or an ambiguous one (the message gives the options)."""


def _tx_ids(capture) -> list[int]:
    cdf = capture.counters
    return [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")
                                      & (cdf["direction"] == "tx")]]


def _line_total_gbps(capture, ids) -> float | None:
    """Sum of the port rates of the devices behind the tx counters (Gb/s), None if unknown."""
    from rdmascope.analysis.load import port_rates_gbps

    rates = port_rates_gbps(capture.meta)
    devs = set(capture.counters.loc[ids, "device"])
    if not devs or any(d not in rates for d in devs):
        return None
    return float(sum(rates[d] for d in devs))


def _windows(capture, width_ns: int, start_ns=None, end_ns=None):
    """Yield (t int64 ns, summed tx Gb/s float64 with flagged windows NaN) blocks: a window is
    flagged (never an anchor) when any counter's bits are in ``HEADLINE_EXCLUDE`` (gap-spread,
    partial, invalid/implausible, over line rate) or the sum is over the node's line rate by
    more than ``ANCHOR_LINE_SLACK``."""
    from rdmascope.analysis.curve import HEADLINE_EXCLUDE
    from rdmascope.analysis.series import to_gbps

    ids = _tx_ids(capture)
    if not ids:
        raise AnchorError(f"{capture.path}: no tx data counters to find a burst in")
    line = _line_total_gbps(capture, ids)
    from rdmascope.analysis.overline_pass import OverLineFlagger, pass_hooks
    from rdmascope.analysis.stream import WindowGrid, iter_windows, memory_capture

    try:
        if hasattr(capture, "readings"):  # a loaded capture: the same pass over its intervals
            from rdmascope.analysis import series

            iv = series.byte_intervals(capture)
            src, source, counters = memory_capture(iv[iv["direction"] == "tx"], "series"), None, None
        else:
            src, source, counters = capture, "infiniband", ids
        # one rule for both: each counter's windows over its line rate by more than the timing
        # uncertainty allows are flagged on the pass (as in peaks), never an anchor
        flag = OverLineFlagger(src, by="series", source=source)
        grid = WindowGrid(int(width_ns), int(capture.t_start_ns), start_ns, end_ns)
        blocks = ((bb, flag(bb, qq, int(width_ns)))
                  for _, bb, qq in iter_windows(src, [grid], by="series", source=source,
                                                counters=counters, **pass_hooks([flag])))
        for b, q in blocks:
            v = to_gbps(b, width_ns).sum(axis=1, min_count=1).to_numpy(np.float64)
            bad = ((q.to_numpy(np.int64) & HEADLINE_EXCLUDE) != 0).any(axis=1) \
                if q.shape[1] else np.zeros(len(v), bool)
            if line is not None:
                bad |= v > ANCHOR_LINE_SLACK * line
            yield b.index.to_numpy(np.int64), np.where(bad, np.nan, v)
    except ValueError as exc:
        if "no intervals" not in str(exc):
            raise
        raise AnchorError(f"{capture.path}: no tx data counters to find a burst in") from exc


def first_burst_start_ns(capture, *, threshold_gbps: float | None = None,
                         width_ns: int = 1_000_000, after_ns: int | None = None
                         ) -> tuple[int, float]:
    """Return (start of the first prefill burst in ns, threshold used in Gb/s) of a capture.

    The summed tx rate of all data series is re-binned to ``width_ns`` windows; flagged windows
    (``_windows``: gap-spread, partial, invalid, over line rate) are never used. The first window
    at or above ``threshold_gbps`` (default: 25 % of the capture's highest unflagged window, at
    least 5 Gb/s, well above decode traffic of a few Gb/s) starts the burst; with ``after_ns``
    the first such window starting at or after it (the next run of a file holding several).
    One pass over the capture (a ``stream.CaptureInfo`` segment by segment). Raises
    ``AnchorError`` (a ``ValueError``) when nothing reaches the threshold.
    """
    top = -np.inf
    records: list[tuple[int, float]] = []  # prefix maxima from after_ns on: (start, Gb/s)
    first_hit = None
    for t, v in _windows(capture, width_ns):
        if len(v) and np.isfinite(v).any():
            top = max(top, float(np.nanmax(v)))
        if after_ns is not None:
            keep = t >= after_ns
            t, v = t[keep], v[keep]
        if threshold_gbps is not None:
            if first_hit is None:
                hit = np.flatnonzero(v >= threshold_gbps)
                if len(hit):
                    first_hit = int(t[hit[0]])
            continue
        vv = np.where(np.isnan(v), -np.inf, v)
        best = records[-1][1] if records else -np.inf
        run = np.maximum.accumulate(np.concatenate([[best], vv]))[1:]
        new = np.flatnonzero(vv > np.concatenate([[best], run[:-1]]))
        records.extend((int(t[i]), float(vv[i])) for i in new)
    if threshold_gbps is None:
        threshold_gbps = max(5.0, 0.25 * float(top))
        first_hit = next((t for t, v in records if v >= threshold_gbps), None)
    if first_hit is None:
        after = "" if after_ns is None else f" after {after_ns / 1e9:.6f} s"
        raise AnchorError(f"{capture.path}: no unflagged {width_ns / 1e6:g} ms window{after} "
                          f"reaches {threshold_gbps:g} Gb/s; cannot anchor the requests to a "
                          "burst")
    return first_hit, float(threshold_gbps)


def anchor_fit(capture, t_hit: int, threshold_gbps: float, *, width_ns: int = 1_000_000
               ) -> tuple[int, int, str]:
    """How well the anchor window at ``t_hit`` is placed: ``(uncertainty_ns, t_rise_ns, how)``.

    The candidates are the first unflagged windows of the burst's rise at half, the whole and
    1.5x the threshold (within ``ANCHOR_FIT_NS`` before the hit and the burst after it): the
    spread of their starts plus one window is the uncertainty (a sharp rise gives one window; a
    slow one, or a threshold crossed late, more). Raises ``AnchorError`` when the anchor is an
    isolated spike (no other window at half the threshold within ``ANCHOR_ISOLATED_NS``): a
    prefill burst lasts several windows, so a lone window is no evidence of the first send.
    """
    t_parts, v_parts = [], []
    for t, v in _windows(capture, width_ns, max(int(capture.t_start_ns), t_hit - ANCHOR_FIT_NS),
                         t_hit + ANCHOR_FIT_NS):
        t_parts.append(t)
        v_parts.append(v)
    t = np.concatenate(t_parts) if t_parts else np.zeros(0, np.int64)
    v = np.concatenate(v_parts) if v_parts else np.zeros(0)
    half = v >= 0.5 * threshold_gbps
    near = half & (np.abs(t - t_hit) <= ANCHOR_ISOLATED_NS) & (t != t_hit)
    if not near.any():
        raise AnchorError(
            f"{capture.path}: ambiguous anchor: the first window reaching {threshold_gbps:.1f} "
            f"Gb/s ({t_hit / 1e9:.6f} s) is an isolated spike (no other window at half that "
            f"within {ANCHOR_ISOLATED_NS / 1e6:g} ms), not a prefill burst")
    # the rise: back from the hit while windows stay at half the threshold or more
    k = int(np.searchsorted(t, t_hit))
    j = k
    while j > 0 and half[j - 1] and t[j - 1] == t[j] - width_ns:
        j -= 1
    cands = [int(t[j]), int(t_hit)]
    over = np.flatnonzero((t >= t_hit) & (v >= 1.5 * threshold_gbps)
                          & (t - t_hit <= ANCHOR_ISOLATED_NS))
    if len(over):
        cands.append(int(t[over[0]]))
    unc = max(cands) - min(cands) + width_ns
    return unc, int(t[j]), (f"rise from {t[j] / 1e9:.6f} s, {threshold_gbps:.1f} Gb/s crossed at "
                            f"{t_hit / 1e9:.6f} s")


def _offsets_per_run(log: RequestLog, offset_s) -> list[float | None]:
    runs = [r["run"] for r in log.runs]
    if offset_s is None:
        return [None] * len(runs)
    if isinstance(offset_s, (int, float)):
        return [float(offset_s)] * len(runs)
    offs = [float(x) for x in offset_s]
    if len(offs) == 1:
        return offs * len(runs)
    if len(offs) != len(runs):
        raise RequestLogError(log.path, f"holds {len(runs)} run(s) but {len(offs)} offsets were "
                                        "given; give one offset (for every run) or one per run",
                              field="offset")
    return offs


def _align_one(df: pd.DataFrame, clock: str, capture, offset_s, *, path, label: str,
               anchor_threshold_gbps, after_ns) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Place the requests of one run on the capture's clock (see ``align``)."""
    if offset_s is not None:
        off = _s_to_ns(offset_s)
        return _shift(df, off), {"method": "offset", "offset_ns": off, "uncertainty_ns": 0,
                                 "note": f"{label}times shifted by the given offset "
                                         f"{offset_s:+.6f} s"}
    if clock == CLOCK_MONOTONIC:
        return df.copy(), {"method": "monotonic", "offset_ns": 0, "uncertainty_ns": 0,
                           "note": f"{label}log and capture share CLOCK_MONOTONIC"}
    if clock == CLOCK_REALTIME:
        from rdmascope.analysis.load import realtime_to_monotonic
        pairs = np.asarray(capture.clock_pairs, dtype=np.int64).reshape(-1, 2)
        if not len(pairs):
            start = capture.meta.get("start") or {}
            if start.get("realtime_ns") is None:
                raise RequestLogError(path, "is on CLOCK_REALTIME but the capture "
                                            f"{capture.path} has no clock pairs to convert it")
            pairs = np.array([[start["realtime_ns"], start["monotonic_ns"]]], dtype=np.int64)
        offs = pairs[:, 0] - pairs[:, 1]
        return (_shift(df, lambda t: realtime_to_monotonic(capture, t)),
                {"method": "clock_pairs", "offset_ns": int(np.median(offs)),
                 "uncertainty_ns": int((offs.max() - offs.min()) // 2),
                 "note": f"{label}CLOCK_REALTIME converted through {len(pairs)} clock pair(s)"})
    try:
        t_burst, thr = first_burst_start_ns(capture, threshold_gbps=anchor_threshold_gbps,
                                            after_ns=after_ns)
        unc, _rise, how = anchor_fit(capture, t_burst, thr)
    except ValueError as exc:
        raise RequestLogError(path, f"{label}has only relative times and cannot be anchored: "
                                    f"{exc}; give --offset S (seconds from the capture's clock "
                                    "to the log's time 0), or record the log with absolute "
                                    "times (a clock field: native clock = CLOCK_MONOTONIC, "
                                    "vLLM start_times)") from exc
    sends = df.loc[df["ok"], "t_send_ns"]
    t0 = int(sends.min()) if len(sends) else 0
    off = t_burst - t0
    after = "" if after_ns is None else " after the previous run"
    return _shift(df, off), {
        "method": "anchor", "offset_ns": off, "uncertainty_ns": int(unc),
        "note": (f"{label}ESTIMATE: first send anchored to the first prefill burst{after} "
                 f"({how}; flagged windows never used); +-{unc / 1e6:g} ms from the burst's "
                 "rise, and the true send may be earlier by the engine's time before its first "
                 "all-reduce; give --offset to override")}


def align(log: RequestLog, capture, offset_s: float | list[float] | None = None, *,
          anchor_threshold_gbps: float | None = None) -> RequestLog:
    """Place a request log on the capture's CLOCK_MONOTONIC and check it against the capture.

    - CLOCK_MONOTONIC logs align directly (same host, same clock; uncertainty 0).
    - CLOCK_REALTIME logs go through the capture's clock pairs (``manifest["clock_pairs"]``,
      [realtime_ns, monotonic_ns]; offset interpolated between pairs, held beyond them). The
      uncertainty reported is half the spread of the pairs' offsets (NTP slewing during the run).
    - ``offset_s`` (any clock) is added to the log's times instead; for relative logs it places
      time 0 of the log at ``offset_s`` seconds on the capture's monotonic clock. A list gives
      one offset per run of a file holding several (``RequestLog.runs``); one value applies to
      every run.
    - Relative logs without an offset are anchored: the earliest send is put at the start of the
      first prefill burst (``first_burst_start_ns``); each further run at the first burst after
      the previous run's last token. This is an *estimate*: the true send precedes the first
      all-reduce by the engine's queueing, tokenisation and first-layer compute, which the trace
      cannot see; the reported uncertainty is one 1 ms window plus that unknown lead.

    Each run is placed on its own (``alignment["runs"]``: one dict per run). Then every
    successful request is checked against the capture's span [t_start_ns, t_end_ns]: one wholly
    outside becomes failed ("outside the capture"); one partly outside stays, flagged
    (column ``flag``: "runs past the capture end" / "starts before the capture start"), and is
    attributed over what was captured. Only when no request lies in the capture is the log
    refused (``RequestLogError`` naming the first request's row and field; times that look like
    Unix epoch seconds on a log read as CLOCK_MONOTONIC get a hint to declare CLOCK_REALTIME).

    Returns a new ``RequestLog`` with ``clock = CLOCK_MONOTONIC`` and ``alignment`` filled in
    (``method``, ``offset_ns``, ``uncertainty_ns``, ``note``; of the first run when several,
    the largest uncertainty). Raises ``RequestLogError`` as above, when a relative log cannot be
    anchored, or when the number of offsets matches neither 1 nor the number of runs.
    """
    if log.alignment is not None:
        return log
    df = log.requests
    offs = _offsets_per_run(log, offset_s)
    parts, als, after = [], [], None
    several = len(log.runs) > 1
    for r, off in zip(log.runs, offs, strict=True):
        sub = df[df["run"] == r["run"]]
        label = f"{r['label']}: " if several else ""
        out, al = _align_one(sub, log.clock, capture, off, path=log.path, label=label,
                             anchor_threshold_gbps=anchor_threshold_gbps, after_ns=after)
        al["run"] = r["run"]
        parts.append(out)
        als.append(al)
        lasts = out.loc[out["ok"], "t_last_ns"].dropna()
        if len(lasts):
            after = int(lasts.max())
    out = pd.concat(parts).sort_values(["t_send_ns", "row"], na_position="last", kind="stable")
    out = out.reset_index(drop=True)
    al = dict(als[0])
    if several:
        al["uncertainty_ns"] = max(a["uncertainty_ns"] for a in als)
        al["note"] = "; ".join(a["note"] for a in als)
        al["runs"] = als
    res = replace(log, requests=out, clock=CLOCK_MONOTONIC, alignment=al, notes=list(log.notes))
    return _check_span(res, capture, log.clock)


#: Seconds since 1970 that look like a Unix epoch time (2001-09 .. 2099): never a CLOCK_MONOTONIC
#: time (seconds since boot) of a machine that has not been up for decades.
EPOCH_RANGE_S = (1.0e9, 4.1e9)


def _epoch_hint(t_ns: int, clock: str) -> str:
    s_ = t_ns / 1e9
    if clock != CLOCK_MONOTONIC or not EPOCH_RANGE_S[0] <= s_ <= EPOCH_RANGE_S[1]:
        return ""
    import datetime as _dt
    day = _dt.datetime.fromtimestamp(s_, tz=_dt.timezone.utc).strftime("%Y-%m-%d")
    return (f"; these times look like Unix epoch seconds ({day}), not CLOCK_MONOTONIC: if the "
            "log is on CLOCK_REALTIME, say so (native format: a column or field clock = "
            "CLOCK_REALTIME)")


def _span(ns: int) -> str:
    """A distance in natural units: "491.150 s", "3.2 h", "778 days"."""
    s_ = ns / 1e9
    if s_ < 3600:
        return f"{s_:.3f} s"
    if s_ < 2 * 86400:
        return f"{s_ / 3600:.1f} h"
    return f"{s_ / 86400:,.0f} days"


def _clock_hint(sends, lasts, t0: int, t1: int, clock: str) -> str:
    """Where the requests lie when none is in the capture [t0, t1] (ns, after alignment), and
    what on their clock makes that happen, or "" when they are not all on one side."""
    if not len(sends):
        return ""
    if int(lasts.max()) < t0:
        where = (f"every request ends before the capture starts (the last "
                 f"{_span(t0 - int(lasts.max()))} before it)")
    elif int(sends.min()) > t1:
        where = (f"every request starts after the capture ends (the first "
                 f"{_span(int(sends.min()) - t1)} after it)")
    else:
        return ""
    why = {CLOCK_MONOTONIC: "CLOCK_MONOTONIC counts from each host's boot: a log of another "
                            "host or another run, or times on another clock?",
           CLOCK_REALTIME: "the log's wall-clock times went through the capture's clock pairs: a log "
                           "of another run, or a wall clock set wrong?"}.get(clock, "")
    return f"; {where}" + (f"; {why}" if why else "") + " (--offset S moves the log's times)"


def _check_span(log: RequestLog, capture, log_clock: str) -> RequestLog:
    t0, t1 = int(capture.t_start_ns), int(capture.t_end_ns)
    df = log.requests.copy()
    first_bad = None
    n_out = n_part = 0
    ok = df["ok"].to_numpy(copy=True)  # the rows ok as read (df's own "ok" changes below)
    sends = df["t_send_ns"].to_numpy(dtype="int64", na_value=0)
    lasts = df["t_last_ns"].to_numpy(dtype="int64", na_value=0)
    inside = ok & (sends >= t0) & (lasts <= t1)
    for idx, r in df[ok & ~inside].iterrows():  # only the rows not wholly inside
        send, last = int(r["t_send_ns"]), int(r["t_last_ns"])
        if last < t0 or send > t1:
            fld, v = ("t_send", send) if send > t1 or send < t0 else ("t_last_token", last)
            if first_bad is None:
                first_bad = (r, fld, v)
            df.at[idx, "ok"] = False
            df.at[idx, "error"] = (f"outside the capture: {fld} at {v / 1e9:.6f} s "
                                   f"(CLOCK_MONOTONIC, after alignment) is outside the capture "
                                   f"span {t0 / 1e9:.6f}-{t1 / 1e9:.6f} s")
            n_out += 1
            continue
        flags = []
        if send < t0:
            flags.append(f"starts before the capture start ({(t0 - send) / 1e9:.3f} s before; "
                         "attributed over what was captured)")
        if last > t1:
            flags.append(f"runs past the capture end ({(last - t1) / 1e9:.3f} s after; "
                         "attributed over what was captured)")
        if flags:
            df.at[idx, "flag"] = _join_flag(df.at[idx, "flag"], "; ".join(flags))
            n_part += 1
    notes = list(log.notes)
    if not df["ok"].any():
        if first_bad is None:
            return replace(log, requests=df, notes=notes)
        r, fld, v = first_bad
        hint = _epoch_hint(int(r['t_send_ns']) - int(log.alignment['offset_ns']), log_clock)
        if not hint:
            hint = _clock_hint(sends[ok], lasts[ok], t0, t1, log_clock)
        raise RequestLogError(
            log.path, f"request {r['request_id']!r} at {v / 1e9:.6f} s (CLOCK_MONOTONIC, after "
                      f"alignment: {log.alignment['method']}) is outside the capture "
                      f"{capture.path} span {t0 / 1e9:.6f}-{t1 / 1e9:.6f} s, and so is every "
                      f"other request{hint}",
            row=int(r["row"]), field=fld)
    if n_out:
        notes.append(f"{n_out} request(s) lie wholly outside the capture: counted as failed")
    if n_part:
        notes.append(f"{n_part} request(s) run past the capture's span: attributed over what "
                     "was captured and flagged (column 'flag')")
    return replace(log, requests=df, notes=notes)
