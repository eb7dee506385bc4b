"""Counters to bytes, and bytes to windows of any width: the exact, byte-conserving core.

Model (method.md, "The sampler"): a counter's value is exact, its reading instant is known to the
read bracket. Between two consecutive valid readings of one counter the counter difference times
``bytes_per_unit`` is the number of bytes of that *interval*; nothing is known about how they were
spread inside it, so re-binning spreads them uniformly: the cumulative byte count of a counter is
the piecewise-linear curve through (reading instant, counter value), and the bytes of a window
[a, b) are F(b) - F(a). Windows of a range therefore sum exactly to the counter difference across
it, whatever the window width, origin, or spacing of the readings.

Flags (column ``flag`` of ``byte_intervals``; one per interval):

- ``ok``: bytes = (v1 - v0) x bytes_per_unit.
- ``reset``: the counter went down (driver reload, firmware reset, ``perfquery -R``): bytes NaN.
- ``saturated``: a narrow counter (``width_bits`` <= 32) reached 2^w - 1 at the interval's end,
  or a counter of unknown width reads exactly 2^32 - 1 while none of its values exceeds it: it
  no longer counts, bytes NaN (sysfs.md). A value above 2^32 - 1 proves 64 bits for the series
  from then on; netdev statistics are 64-bit whatever the capture says (``counter_width``). A
  64-bit counter never wraps in practice: a decrease is a reset.
- ``unavailable``: one or more readings between the two were unavailable (status != OK): the
  counter may have been reset while unreadable (a driver reload makes the file vanish), so the
  difference cannot be trusted: bytes NaN.
- ``implausible``: the difference implies a rate no port can carry (a torn read, a firmware
  glitch: e.g. terabytes in 1 ms): bytes NaN, like ``reset``. The interval's rate is taken over
  the longest duration its readings allow (the instants' distance plus both half-brackets) and at
  least one sampling interval, and compared with ``max_gbps`` (see ``plausible_gbps``: default
  4 x the highest port rate of the counter's device, 800 Gb/s for a 200 Gb/s port). Reading-time
  jitter legitimately shows up to ~2x line rate in a single 1 ms interval when a sweep is late;
  the 4x cap and the one-interval floor keep well clear of that.
- ``gap``: missed sweeps (the two valid readings are more than ``gap_factor`` x interval apart,
  no unavailable reading between them). The counter kept counting, so the bytes are known
  exactly (the difference); only their timing inside the gap is not. **Policy: keep the bytes**
  (conservation holds) and spread them uniformly like any interval. A gap that ends inside one
  window gives that window its exact bytes; only a gap that crosses a window edge splits its
  bytes between windows by assumption. Those windows (a gap interval strictly across one of
  their edges) are marked ``QUALITY_GAP`` by ``rebin_with_quality``: rates there are averages
  over the gap, not measured values. So a missed sweep leaves the 1 ms windows around it flagged
  but not the 1 s window holding it whole (under load, a sampler misses a sweep every few
  seconds; flagging every window that merely holds one would blank every 1 s peak).

Glitch readings: before intervals are formed, a single valid reading that breaks monotonicity
while its two neighbours agree with each other (below the previous one with the next one above
it, or above the next one with the previous one below it) is dropped as a torn read or firmware
hiccup; the interval across it then holds exactly the neighbours' difference and is a ``gap``.
A real reset stays low after the drop, so it still shows as ``reset``. When a small tear leaves
two adjacent readings ambiguous, both are dropped (bytes still exact, timing coarser). This rule,
the gap rule and the unreadable-between rule are stated in ``rdmascope.counters`` (numpy only),
which the recorder's live peak gauges (``sampler.gridpeaks``) import too.

Windows (``rebin``) overlapping a NaN interval, or not covered by any interval (before the first
or after the last reading), are NaN: never zero, never negative, never huge.

Window origin (one rule everywhere, ``default_origin``): windows are [origin + k x width,
origin + (k+1) x width). Unless given, the origin is the capture start
(``manifest["start"]["monotonic_ns"]`` = ``Capture.t_start_ns``), which ``byte_intervals``
records in ``intervals.attrs["t_start_ns"]`` (pandas keeps ``attrs`` through selections, copies
and sorting). A range (``start_ns``/``end_ns``, the CLI's ``--from/--to``) only selects windows of
that grid; it never moves it. So ``rebin(byte_intervals(cap), w)``, ``rebin_capture``,
``peaks.peak_table``, ``bursts.burst_analysis``, ``verify.verify_emulation``, ``attribute`` and
every ``rdmascope`` command give the same windows, and windows of two widths that divide one
another nest. Intervals without that attribute (built by hand, or concatenated from two
captures) fall back to the first interval's start.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from rdmascope.counters import GAP_FACTOR, drop_glitches, is_gap, unreadable_between
from rdmascope.plausibility import (
    DEFAULT_MAX_GBPS,
    PLAUSIBLE_FACTOR,
    cap_gbps,
    counter_cap_gbps,
    implausible,
    line_ceilings,
    port_line_ceilings,
)

from .links import link_keys
from .load import Capture

__all__ = ["FLAGS", "FLAG_OK", "FLAG_RESET", "FLAG_SATURATED", "FLAG_GAP", "FLAG_UNAVAILABLE",
           "FLAG_IMPLAUSIBLE", "NAN_FLAGS", "IS_NAN_FLAG", "DEFAULT_GAP_FACTOR", "DEFAULT_MAX_GBPS",
           "PLAUSIBLE_FACTOR", "plausible_gbps", "counter_caps", "counter_intervals",
           "select_counters", "counter_width", "U32_MAX", "INTERVAL_COLUMNS", "intervals_frame",
           "byte_intervals",
           "line_attr_dict", "line_attrs", "default_origin"]

#: Interval flags, in category order (codes 0..5).
FLAGS = ("ok", "reset", "saturated", "gap", "unavailable", "implausible")
FLAG_OK, FLAG_RESET, FLAG_SATURATED, FLAG_GAP, FLAG_UNAVAILABLE, FLAG_IMPLAUSIBLE = range(6)
NAN_FLAGS = (FLAG_RESET, FLAG_SATURATED, FLAG_UNAVAILABLE, FLAG_IMPLAUSIBLE)

#: Consecutive valid readings further apart than this many sampling intervals form a gap
#: (``rdmascope.counters.GAP_FACTOR``, the recorder's live gauges' too).
DEFAULT_GAP_FACTOR = GAP_FACTOR


U32_MAX = (1 << 32) - 1


def _width_unknown(width_bits) -> bool:
    return width_bits is None or (isinstance(width_bits, float) and math.isnan(width_bits))


def counter_width(d) -> int | None:
    """The width in bits of a counter descriptor ``d`` (a manifest ``counters`` entry or a row of
    the loaded counters table): its ``width_bits``, else the width its source has by the width
    table (netdev statistics: 64, ``net/core/net-sysfs.c``; captures written before the
    recorder stored it), else None (unknown: judged from the values, ``_saturation_limit``)."""
    w = d.get("width_bits")
    if not _width_unknown(w):
        return int(w)
    if d.get("source") == "netdev":
        return 64
    return None


def _saturation_limit(width_bits) -> int | None:
    """The value at which a counter of ``width_bits`` saturates, or None (64-bit: never)."""
    if _width_unknown(width_bits):
        return U32_MAX  # unknown width: a 32-bit counter would stick at exactly 2^32 - 1
    w = int(width_bits)
    return (1 << w) - 1 if w <= 32 else None


def plausible_gbps(meta: dict, device: str | None = None, *,
                   factor: float = PLAUSIBLE_FACTOR) -> float:
    """Return the plausibility cap (Gb/s) for a byte counter of ``device`` from a manifest.

    ``factor`` (4) x the device's link rate: the highest of its ports' ``rate_gbps`` and netdev
    ``speed_gbps`` in ``meta["devices"]``, or the ``--link-gbps`` override
    (``rdmascope.plausibility.cap_gbps``; for a netdev counter: the RDMA device the netdev
    belongs to, the counter's ``device``); when that device records no rate, ``factor`` x the
    highest rate of any device; when none does, ``DEFAULT_MAX_GBPS`` (1,600 Gb/s). Used by
    ``byte_intervals`` to flag "implausible" jumps.
    """
    return cap_gbps(meta, device, factor=factor)


def counter_caps(meta: dict, cdf: pd.DataFrame, ids, max_gbps: float | None) -> dict[int, float]:
    """Plausibility cap per counter id: ``max_gbps`` if given, else ``plausible_gbps`` (times
    lifespan / interval for bytes read from ``hw_counters/``: ``counter_cap_gbps``)."""
    if max_gbps is not None:
        if not max_gbps > 0:
            raise ValueError(f"max_gbps must be positive (or inf to disable), got {max_gbps!r}")
        return {int(c): float(max_gbps) for c in ids}
    # per counter: hw_counters byte sources are cached for lifespan ms (counter_cap_gbps)
    return {int(c): counter_cap_gbps(meta, int(c)) for c in ids}


def counter_intervals(t: np.ndarray, unc: np.ndarray, value: np.ndarray, valid: np.ndarray, *,
                   bytes_per_unit: int, width_bits, interval_ns: int, gap_factor: float,
                   max_gbps: float = math.inf, label: str = "") -> dict[str, np.ndarray]:
    """Intervals of one counter from its readings (time-ordered); see the module docstring."""
    # A single reading that breaks monotonicity while its two neighbours agree with each
    # other (a torn read, a firmware hiccup) is dropped: the interval across it keeps the
    # exact bytes of its neighbours' difference (flagged a gap: timing inside unknown). A
    # real reset stays low after the drop, so its neighbours disagree and it stays a reset.
    # (rdmascope.counters.drop_glitches: the rule the recorder's live gauges apply too)
    idx = drop_glitches(np.flatnonzero(valid), value)
    if len(idx) < 2:
        z = np.zeros(0, np.int64)
        return _unknown_edges(t, unc, idx, interval_ns,
                              {"t0_ns": z, "t1_ns": z, "t0_unc_ns": z, "t1_unc_ns": z,
                               "bytes": np.zeros(0), "flag": np.zeros(0, np.int8)})
    every = len(idx) == len(t)  # every reading valid and kept: slices instead of gathers
    if every:
        i0, i1 = slice(0, -1), slice(1, None)
    else:
        i0, i1 = idx[:-1], idx[1:]
    t0, t1 = t[i0], t[i1]
    dt = t1 - t0
    if (dt < 0).any():
        k = int(np.flatnonzero(dt < 0)[0])
        r0, r1 = (k, k + 1) if every else (int(i0[k]), int(i1[k]))
        raise ValueError(f"readings of {label or 'a counter'} go back in time between rows "
                         f"{r0} and {r1} ({int(t0[k])} -> {int(t1[k])} ns)")
    v0, v1 = value[i0], value[i1]
    u0, u1 = unc[i0], unc[i1]
    flag = is_gap(dt, interval_ns, gap_factor).view(np.int8) * np.int8(FLAG_GAP)
    if not every and not valid.all():
        flag[unreadable_between(valid, i0, i1)] = FLAG_UNAVAILABLE
    limit = _saturation_limit(width_bits)
    if limit is not None and _width_unknown(width_bits):
        # unknown width: a value above 2^32-1 proves 64 bits (a 32-bit counter cannot hold
        # it), for the whole series; while none is seen, only a value of exactly 2^32-1 (where
        # a 32-bit counter sticks) is taken as saturated
        if len(idx) and int(value[idx].max()) > limit:
            limit = None
        else:
            flag[v1 == np.uint64(limit)] = FLAG_SATURATED
    elif limit is not None:
        flag[v1 >= np.uint64(limit)] = FLAG_SATURATED
    reset = v1 < v0
    if reset.any():
        flag[reset] = FLAG_RESET
        diff = np.where(reset, np.uint64(0), v1 - v0)  # never wraps into huge values
    else:
        diff = v1 - v0
    b = diff.astype(np.float64)
    b *= float(bytes_per_unit)
    if math.isfinite(max_gbps):
        # over the longest duration the readings allow, at least one sampling interval
        # (rdmascope.plausibility, the rule inspect uses too)
        imp = implausible(b, dt, u0, u1, interval_ns, max_gbps)
        if imp.any():
            flag[_OK_OR_GAP[flag] & imp] = FLAG_IMPLAUSIBLE
    if flag.any():  # all "ok" (the usual file): no flag makes bytes unknown
        b[IS_NAN_FLAG[flag]] = np.nan
    return _unknown_edges(t, unc, idx, interval_ns,
                          {"t0_ns": t0, "t1_ns": t1, "t0_unc_ns": u0, "t1_unc_ns": u1,
                           "bytes": b, "flag": flag})


#: lookup tables by flag code (``FLAGS``): cheaper than ``np.isin`` per interval
IS_NAN_FLAG = np.isin(np.arange(len(FLAGS)), NAN_FLAGS)
_OK_OR_GAP = np.isin(np.arange(len(FLAGS)), (FLAG_OK, FLAG_GAP))


def _unknown_edges(t: np.ndarray, unc: np.ndarray, idx: np.ndarray, interval_ns: int,
                   iv: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add "unavailable" intervals (bytes NaN) for unreadable readings outside the valid ones.

    Readings before the first valid one, after the last valid one, or all of them when fewer
    than two are valid, were taken while the counter could not be read: the bytes of that time
    are unknown, never zero (a counter that fails every read must not look idle). The span runs
    from the first unreadable reading to the first valid one, and from the last valid one to the
    last unreadable reading (at least one sampling interval long).
    """
    n = len(t)
    if n == 0 or (len(idx) and idx[0] == 0 and idx[-1] == n - 1):
        return iv
    spans = []
    if len(idx) == 0:
        spans.append((0, n - 1))
    else:
        if idx[0] > 0:
            spans.append((0, int(idx[0])))
        if idx[-1] < n - 1:
            spans.append((int(idx[-1]), n - 1))
    t0 = np.array([t[a] for a, _ in spans], np.int64)
    # a span that ends at a valid reading ends exactly there (the next interval starts there);
    # a trailing one lasts at least one sampling interval
    t1 = np.array([int(t[b]) if (len(idx) and b == idx[0] and a < b)
                   else max(int(t[b]), int(t[a]) + int(interval_ns)) for a, b in spans], np.int64)
    lead = {"t0_ns": t0, "t1_ns": t1,
            "t0_unc_ns": np.array([unc[a] for a, _ in spans], np.int64),
            "t1_unc_ns": np.array([unc[b] for _, b in spans], np.int64),
            "bytes": np.full(len(spans), np.nan), "flag": np.full(len(spans), FLAG_UNAVAILABLE, np.int8)}
    first = [k for k, (a, _) in enumerate(spans) if a == 0 and len(idx) and idx[0] > 0]
    last = [k for k in range(len(spans)) if k not in first]
    out = {}
    for key, arr in iv.items():
        out[key] = np.concatenate([lead[key][first], arr, lead[key][last]]).astype(
            arr.dtype, copy=False)
    return out


def select_counters(counters: pd.DataFrame, sel, source: str | None) -> list[int]:
    data = counters[counters["data"]]
    if sel is None:
        if source is not None:
            data = data[data["source"] == source]
        return [int(i) for i in data.index]
    out = []
    for s in sel:
        if isinstance(s, (int, np.integer)):
            if int(s) not in counters.index or not counters.at[int(s), "data"]:
                raise ValueError(f"counter_id {s} is not a byte counter of this capture")
            out.append(int(s))
        else:
            hit = data.index[data["series"] == s]
            if len(hit) == 0:
                known = ", ".join(str(x) for x in data["series"])
                raise ValueError(f"no byte counter named {s!r} (series: {known})")
            out.extend(int(i) for i in hit)
    return out


INTERVAL_COLUMNS = ["counter_id", "series", "device", "direction", "source", "t0_ns", "t1_ns",
                     "t0_unc_ns", "t1_unc_ns", "bytes", "flag"]


def intervals_frame(parts: list[tuple[int, dict, dict[str, np.ndarray]]]) -> pd.DataFrame:
    """Assemble per-counter interval arrays into the intervals DataFrame (categorical labels)."""
    n = [len(p[2]["t0_ns"]) for p in parts]
    cat = {}
    for key in ("series", "device", "direction", "source"):
        labels = list(dict.fromkeys(str(p[1][key]) for p in parts))
        codes = np.concatenate([np.full(k, labels.index(str(p[1][key])), np.int16)
                                for k, p in zip(n, parts, strict=True)]) if parts else \
            np.zeros(0, np.int16)
        cat[key] = pd.Categorical.from_codes(codes, categories=labels)

    def cc(name, dtype):
        if not parts:
            return np.zeros(0, dtype)
        return np.concatenate([p[2][name].astype(dtype, copy=False) for p in parts])

    df = pd.DataFrame({
        "counter_id": np.concatenate([np.full(k, p[0], np.uint16)
                                      for k, p in zip(n, parts, strict=True)])
        if parts else np.zeros(0, np.uint16),
        **cat,
        "t0_ns": cc("t0_ns", np.int64),
        "t1_ns": cc("t1_ns", np.int64),
        "t0_unc_ns": cc("t0_unc_ns", np.int64),
        "t1_unc_ns": cc("t1_unc_ns", np.int64),
        "bytes": cc("bytes", np.float64),
        "flag": pd.Categorical.from_codes(cc("flag", np.int8), categories=list(FLAGS)),
    }, copy=False)
    return df[INTERVAL_COLUMNS]


def byte_intervals(capture: Capture, *, counters=None, source: str | None = "infiniband",
                   gap_factor: float = DEFAULT_GAP_FACTOR,
                   max_gbps: float | None = None) -> pd.DataFrame:
    """Turn a capture's byte counters into intervals between consecutive valid readings.

    ``capture``: a loaded ``Capture`` (``series.byte_intervals`` also takes a
    ``stream.CaptureInfo``, made segment by segment).

    ``counters``: None for every byte counter of ``source`` ("infiniband" = the RDMA data
    counters port_xmit_data/port_rcv_data; "netdev" = kernel-stack tx_bytes/rx_bytes; None =
    both), or a list of counter_ids and/or series names. ``gap_factor``: valid readings more
    than ``gap_factor`` x ``interval_ns`` apart form a gap (default 1.5). ``max_gbps``: the
    plausibility cap; an interval whose rate exceeds it is flagged "implausible" (default per
    counter ``plausible_gbps``: 4 x its device's port rate, else 1,600 Gb/s; ``math.inf``
    disables the check; see the module docstring).

    Returns a DataFrame, one row per interval, sorted by (counter_id, t0_ns): counter_id,
    series, device, direction, source (categorical), t0_ns, t1_ns (int64 ns: the two readings'
    instants, middle of their read brackets), t0_unc_ns, t1_unc_ns (half-brackets), bytes
    (float64 decimal bytes = counter difference x bytes_per_unit, e.g. x4 for port_xmit_data,
    never the lane count; NaN when flagged reset/saturated/unavailable/implausible) and flag
    (one of ``FLAGS``; see the module docstring for the gap policy). ``attrs["t_start_ns"]``
    holds the capture start, the default window origin of ``rebin`` (see ``default_origin``).

    Raises ``ValueError`` for an unknown counter, readings that go back in time, or a
    non-positive ``max_gbps``.
    """
    cdf = capture.counters
    ids = select_counters(cdf, counters, source)
    caps = counter_caps(capture.meta, cdf, ids, max_gbps)
    r = capture.readings
    cid = r["counter_id"].to_numpy()
    t = r["t_ns"].to_numpy()
    unc = r["t_unc_ns"].to_numpy()
    val = r["value"].to_numpy()
    valid = r["valid"].to_numpy()
    sweep = r["sweep"].to_numpy()
    parts = []
    # every counter's row range at once, searched with keys of the column's own dtype (a Python
    # int key made numpy convert the whole uint16 column on every call)
    keys = np.asarray(ids, dtype=cid.dtype)
    los, his = np.searchsorted(cid, keys, "left"), np.searchsorted(cid, keys, "right")
    for c, lo, hi in zip(ids, los.tolist(), his.tolist(), strict=True):
        if hi - lo < 2:
            continue
        sl = slice(lo, hi)
        if (np.diff(sweep[sl]) <= 0).any():
            raise ValueError(f"{capture.path}: counter {c} has duplicate or unordered sweeps")
        d = cdf.loc[c]
        iv = counter_intervals(t[sl], unc[sl], val[sl], valid[sl],
                            bytes_per_unit=int(d["bytes_per_unit"]), width_bits=counter_width(d),
                            interval_ns=capture.interval_ns, gap_factor=gap_factor,
                            max_gbps=caps[c],
                            label=f"counter {c} ({d['series']}) in {capture.path}")
        if len(iv["t0_ns"]):
            parts.append((c, d.to_dict(), iv))
    out = intervals_frame(parts)
    out.attrs["t_start_ns"] = int(capture.t_start_ns)
    line_attrs(out, capture.meta, cdf, ids, capture.interval_ns)
    return out


def line_attr_dict(meta: dict, cdf: pd.DataFrame, ids) -> dict[str, Any]:
    """What ``line_gbps_of`` needs, per series of the infiniband counters ``ids``: the
    ceiling (``line_gbps``), the port rate and PCIe bound it came from (``port_gbps``,
    ``pcie_gbps``, ``pcie_key``: twins on one cable share the port, functions on one PCIe
    link share that link), its source (``line_source``) and the cable (``link_key``)."""
    ceil = line_ceilings(meta)
    per_port = port_line_ceilings(meta)  # each port of a multi-port device: its own rate
    keys = link_keys(meta, cdf)
    out: dict[str, dict] = {k: {} for k in ("line_gbps", "port_gbps", "pcie_gbps", "pcie_key",
                                            "line_source", "line_kind")}
    for c in ids:
        sname = str(cdf.at[c, "series"])
        if cdf.at[c, "source"] != "infiniband":
            continue
        pn = cdf.at[c, "port"]
        lc = per_port.get((str(cdf.at[c, "device"]), int(pn))) if isinstance(
            pn, (int, np.integer, float)) and pn == pn else None
        lc = lc or ceil.get(str(cdf.at[c, "device"]))
        out["line_gbps"][sname] = lc.gbps if lc else None
        out["port_gbps"][sname] = lc.port_gbps if lc else None
        out["pcie_gbps"][sname] = lc.pcie_gbps if lc else None
        out["pcie_key"][sname] = lc.pcie_key if lc else None
        out["line_source"][sname] = lc.text if lc else None
        out["line_kind"][sname] = lc.source if lc else None
    out["link_key"] = {str(cdf.at[c, "series"]): keys.get(c) for c in ids}
    return out


def line_attrs(out: pd.DataFrame, meta: dict, cdf: pd.DataFrame, ids, interval_ns) -> None:
    """Record what ``flag_over_line`` needs in ``out.attrs``: the sampling interval and, per
    series, the line-rate ceiling and where it came from (``line_attr_dict``)."""
    out.attrs["interval_ns"] = int(interval_ns)
    out.attrs.update(line_attr_dict(meta, cdf, ids))


def default_origin(intervals: pd.DataFrame, start_ns: int | None = None) -> int:
    """Return the window origin used when none is given (int64 ns, CLOCK_MONOTONIC).

    The capture start recorded by ``byte_intervals`` in ``intervals.attrs["t_start_ns"]`` (as
    ``iter_rebin_capture`` and every ``rdmascope`` command); else, for intervals without it
    (built by hand, or concatenated from different captures), the first interval's start; else
    ``start_ns``. A range start never moves the grid when the capture start is known: ``--from``
    selects windows of the one grid. Raises ``ValueError`` when there is nothing to take an
    origin from (no capture start, no intervals and no ``start_ns``).
    """
    t = intervals.attrs.get("t_start_ns") if hasattr(intervals, "attrs") else None
    if t is not None:
        return int(t)
    if len(intervals):
        return int(intervals["t0_ns"].min())
    if start_ns is not None:
        return int(start_ns)
    raise ValueError("no intervals to take a window origin from")

