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
two adjacent readings ambiguous, both are dropped (bytes still exact, timing coarser).

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
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from rdmascope.plausibility import (
    DEFAULT_MAX_GBPS,
    PLAUSIBLE_FACTOR,
    cap_gbps,
    counter_cap_gbps,
    implausible,
    line_ceilings,
)

from .load import Capture

__all__ = [
    "FLAGS",
    "QUALITY_GAP",
    "QUALITY_INVALID",
    "QUALITY_PARTIAL",
    "QUALITY_EMPTY",
    "QUALITY_OVER_LINE",
    "INSTANT_UNC_NS",
    "OVER_LINE_CAUSES",
    "line_gbps_of",
    "line_rates",
    "line_rate_lines",
    "window_low_bytes",
    "flag_over_line",
    "over_line_causes",
    "flag_over_line_capture",
    "OverLineFlagger",
    "DEFAULT_GAP_FACTOR",
    "DEFAULT_MAX_GBPS",
    "PLAUSIBLE_FACTOR",
    "plausible_gbps",
    "byte_intervals",
    "default_origin",
    "rebin",
    "rebin_with_quality",
    "to_gbps",
    "integrate",
    "group_links",
    "twin_links",
    "iter_rebin_capture",
    "rebin_capture",
]

#: Interval flags, in category order (codes 0..5).
FLAGS = ("ok", "reset", "saturated", "gap", "unavailable", "implausible")
_OK, _RESET, _SAT, _GAP, _UNAV, _IMPL = range(6)
_NAN_FLAGS = (_RESET, _SAT, _UNAV, _IMPL)

#: Window quality bits (``rebin_with_quality``).
QUALITY_GAP = 1  #: a gap (missed sweeps) crosses one of the window's edges: bytes split by assumption
QUALITY_INVALID = 2  #: the window overlaps a NaN-flagged interval (see _NAN_FLAGS): bytes NaN
QUALITY_PARTIAL = 4  #: part of the window is outside every interval (capture edges)
QUALITY_EMPTY = 8  #: no interval overlaps the window at all: bytes NaN
#: the window's rate exceeds its line rate by more than its timing uncertainty allows (see
#: ``flag_over_line``): bytes kept, never a headline peak
QUALITY_OVER_LINE = 16

#: Timing uncertainty of each reading's instant beyond its read bracket, ns: the adapter updates
#: its counter files only every ~0.1-0.2 ms, so the bytes read at an instant were counted up to
#: that long before it (docs/method.md, "The sampler": each reading's instant is known only to
#: about +-0.1-0.2 ms, so a single 1 ms value carries about +-15-25 %). The low end, 0.1 ms.
INSTANT_UNC_NS = 100_000
#: A window whose readings leave at most this much of it uncovered (and at most 1 %) is full,
#: not partial: a reading that close to its edge is indistinguishable from one on it (``_combine``).
COVER_TOLERANCE_NS = INSTANT_UNC_NS
#: Likely causes of a window over line rate (``over_line_causes``), in the order they are tested.
OVER_LINE_CAUSES = ("gap spread", "stalled sampler", "late counter update")

#: Consecutive valid readings further apart than this many sampling intervals form a gap.
DEFAULT_GAP_FACTOR = 1.5


_U32_MAX = (1 << 32) - 1


# ----------------------------------------------------------------------------------------------
# Counters -> intervals
# ----------------------------------------------------------------------------------------------


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
        return _U32_MAX  # unknown width: a 32-bit counter would stick at exactly 2^32 - 1
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


def _counter_caps(meta: dict, cdf: pd.DataFrame, ids, max_gbps: float | None) -> dict[int, float]:
    """Plausibility cap per counter id: ``max_gbps`` if given, else ``plausible_gbps`` (times
    lifespan / interval for bytes read from ``hw_counters/``: ``counter_cap_gbps``)."""
    if max_gbps is not None:
        if not max_gbps > 0:
            raise ValueError(f"max_gbps must be positive (or inf to disable), got {max_gbps!r}")
        return {int(c): float(max_gbps) for c in ids}
    # per counter: hw_counters byte sources are cached for lifespan ms (counter_cap_gbps)
    return {int(c): counter_cap_gbps(meta, int(c)) for c in ids}


def _intervals_one(t: np.ndarray, unc: np.ndarray, value: np.ndarray, valid: np.ndarray, *,
                   bytes_per_unit: int, width_bits, interval_ns: int, gap_factor: float,
                   max_gbps: float = math.inf, label: str = "") -> dict[str, np.ndarray]:
    """Intervals of one counter from its readings (time-ordered); see the module docstring."""
    idx = np.flatnonzero(valid)
    if len(idx) >= 3:
        # A single reading that breaks monotonicity while its two neighbours agree with each
        # other (a torn read, a firmware hiccup) is dropped: the interval across it keeps the
        # exact bytes of its neighbours' difference (flagged a gap: timing inside unknown). A
        # real reset stays low after the drop, so its neighbours disagree and it stays a reset.
        # A small tear inside the neighbours' range leaves it ambiguous which of two adjacent
        # readings is wrong; both are then dropped (bytes still exact, timing coarser).
        v = value[idx]
        prev, cur, nxt = v[:-2], v[1:-1], v[2:]
        glitch = ((cur < prev) | (cur > nxt)) & (prev <= nxt)
        if glitch.any():
            idx = np.delete(idx, 1 + np.flatnonzero(glitch))
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
    flag = (dt > gap_factor * interval_ns).view(np.int8) * np.int8(_GAP)
    if not every and not valid.all():
        n_invalid = np.concatenate([[0], np.cumsum(~valid.astype(bool))])
        flag[(n_invalid[i1] - n_invalid[i0 + 1]) > 0] = _UNAV  # unreadable readings between
    limit = _saturation_limit(width_bits)
    if limit is not None and _width_unknown(width_bits):
        # unknown width: a value above 2^32-1 proves 64 bits (a 32-bit counter cannot hold
        # it), for the whole series; while none is seen, only a value of exactly 2^32-1 (where
        # a 32-bit counter sticks) is taken as saturated
        if len(idx) and int(value[idx].max()) > limit:
            limit = None
        else:
            flag[v1 == np.uint64(limit)] = _SAT
    elif limit is not None:
        flag[v1 >= np.uint64(limit)] = _SAT
    reset = v1 < v0
    if reset.any():
        flag[reset] = _RESET
        diff = np.where(reset, np.uint64(0), v1 - v0)  # never wraps into huge values
    else:
        diff = v1 - v0
    b = diff.astype(np.float64)
    b *= float(bytes_per_unit)
    if math.isfinite(max_gbps):
        # over the longest duration the readings allow, at least one sampling interval
        # (rdmascope.plausibility, the rule inspect uses too)
        flag[_OK_OR_GAP[flag]
             & implausible(b, dt, u0, u1, interval_ns, max_gbps)] = _IMPL
    b[_IS_NAN_FLAG[flag]] = np.nan
    return _unknown_edges(t, unc, idx, interval_ns,
                          {"t0_ns": t0, "t1_ns": t1, "t0_unc_ns": u0, "t1_unc_ns": u1,
                           "bytes": b, "flag": flag})


#: lookup tables by flag code (``FLAGS``): cheaper than ``np.isin`` per interval
_IS_NAN_FLAG = np.isin(np.arange(len(FLAGS)), _NAN_FLAGS)
_OK_OR_GAP = np.isin(np.arange(len(FLAGS)), (_OK, _GAP))


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
            "bytes": np.full(len(spans), np.nan), "flag": np.full(len(spans), _UNAV, np.int8)}
    first = [k for k, (a, _) in enumerate(spans) if a == 0 and len(idx) and idx[0] > 0]
    last = [k for k in range(len(spans)) if k not in first]
    out = {}
    for key, arr in iv.items():
        out[key] = np.concatenate([lead[key][first], arr, lead[key][last]]).astype(
            arr.dtype, copy=False)
    return out


def _select_counters(counters: pd.DataFrame, sel, source: str | None) -> list[int]:
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


_INTERVAL_COLUMNS = ["counter_id", "series", "device", "direction", "source", "t0_ns", "t1_ns",
                     "t0_unc_ns", "t1_unc_ns", "bytes", "flag"]


def _intervals_frame(parts: list[tuple[int, dict, dict[str, np.ndarray]]]) -> pd.DataFrame:
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
    return df[_INTERVAL_COLUMNS]


def byte_intervals(capture: Capture, *, counters=None, source: str | None = "infiniband",
                   gap_factor: float = DEFAULT_GAP_FACTOR,
                   max_gbps: float | None = None) -> pd.DataFrame:
    """Turn a capture's byte counters into intervals between consecutive valid readings.

    ``capture``: a loaded ``Capture``, or a ``stream.CaptureInfo`` (``stream.open_capture``:
    no readings in memory), whose intervals are then made segment by segment with the same
    result and only the intervals' memory.

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
    if not hasattr(capture, "readings"):  # a stream.CaptureInfo: read segment by segment
        from .stream import byte_intervals_streamed

        return byte_intervals_streamed(capture, counters=counters, source=source,
                                       gap_factor=gap_factor, max_gbps=max_gbps)
    cdf = capture.counters
    ids = _select_counters(cdf, counters, source)
    caps = _counter_caps(capture.meta, cdf, ids, max_gbps)
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
        iv = _intervals_one(t[sl], unc[sl], val[sl], valid[sl],
                            bytes_per_unit=int(d["bytes_per_unit"]), width_bits=counter_width(d),
                            interval_ns=capture.interval_ns, gap_factor=gap_factor,
                            max_gbps=caps[c],
                            label=f"counter {c} ({d['series']}) in {capture.path}")
        if len(iv["t0_ns"]):
            parts.append((c, d.to_dict(), iv))
    out = _intervals_frame(parts)
    out.attrs["t_start_ns"] = int(capture.t_start_ns)
    _line_attrs(out, capture.meta, cdf, ids, capture.interval_ns)
    return out


def _line_rates(meta: dict) -> dict[str, float]:
    """{device: line-rate ceiling (Gb/s)} (``plausibility.line_ceilings``: ``--link-gbps``; else
    the port rate, lowered to what an emulated link really carries (``record --emulated
    GBPS``) and to the bound of the device's PCIe link). Devices with no known ceiling are
    left out."""
    return {d: c.gbps for d, c in line_ceilings(meta).items() if c.gbps is not None}


def _line_attr_dict(meta: dict, cdf: pd.DataFrame, ids) -> dict[str, Any]:
    """What ``line_gbps_of`` needs, per series of the infiniband counters ``ids``: the
    ceiling (``line_gbps``), the port rate and PCIe bound it came from (``port_gbps``,
    ``pcie_gbps``, ``pcie_key``: twins on one cable share the port, functions on one PCIe
    link share that link), its source (``line_source``) and the cable (``link_key``)."""
    ceil = line_ceilings(meta)
    keys = _link_keys(meta, cdf)
    out: dict[str, dict] = {k: {} for k in ("line_gbps", "port_gbps", "pcie_gbps", "pcie_key",
                                            "line_source", "line_kind")}
    for c in ids:
        sname = str(cdf.at[c, "series"])
        if cdf.at[c, "source"] != "infiniband":
            continue
        lc = ceil.get(str(cdf.at[c, "device"]))
        out["line_gbps"][sname] = lc.gbps if lc else None
        out["port_gbps"][sname] = lc.port_gbps if lc else None
        out["pcie_gbps"][sname] = lc.pcie_gbps if lc else None
        out["pcie_key"][sname] = lc.pcie_key if lc else None
        out["line_source"][sname] = lc.text if lc else None
        out["line_kind"][sname] = lc.source if lc else None
    out["link_key"] = {str(cdf.at[c, "series"]): keys.get(c) for c in ids}
    return out


def _line_attrs(out: pd.DataFrame, meta: dict, cdf: pd.DataFrame, ids, interval_ns) -> None:
    """Record what ``flag_over_line`` needs in ``out.attrs``: the sampling interval and, per
    series, the line-rate ceiling and where it came from (``_line_attr_dict``)."""
    out.attrs["interval_ns"] = int(interval_ns)
    out.attrs.update(_line_attr_dict(meta, cdf, ids))


def _link_key(info: dict, row) -> tuple:
    """The cable a counter's device sits on: PCI address without the domain (DGX Spark twins),
    else the guid, else one cable for all (see ``twin_links``)."""
    pci = info.get("pci")
    if pci and ":" in pci:
        k = ("pci", pci.split(":", 1)[1] if pci.count(":") == 2 else pci)
    elif info.get("sys_image_guid") or info.get("node_guid"):
        k = ("guid", info.get("sys_image_guid") or info.get("node_guid"))
    else:
        k = ("all",)
    return (row["source"], k, row["direction"])


def _link_keys(meta: dict, cdf: pd.DataFrame) -> dict:
    dev_info = {d.get("name"): d for d in meta.get("devices") or [] if isinstance(d, dict)}
    return {c: _link_key(dev_info.get(row["device"], {}), row) for c, row in cdf.iterrows()
            if row.get("data")}


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


# ----------------------------------------------------------------------------------------------
# Intervals -> windows
# ----------------------------------------------------------------------------------------------


class _Counter:
    """One counter's intervals, sorted and non-overlapping, with the precomputed cumulative sums."""

    __slots__ = ("t0", "t1", "b", "cb", "dur", "cdur", "nan_t0", "nan_t1", "gap_t0", "gap_t1",
                 "unc")

    def __init__(self, t0: np.ndarray, t1: np.ndarray, b: np.ndarray, flag: np.ndarray,
                 unc: np.ndarray | None = None):
        self.t0, self.t1 = t0, t1
        self.unc = unc  # per interval: max of its two readings' half-brackets (ns), or None
        n = len(t0)
        nan = np.isnan(b)
        nan |= _IS_NAN_FLAG[flag]
        if nan.any():
            self.b = np.where(nan, 0.0, b)
            self.nan_t0, self.nan_t1 = t0[nan], t1[nan]
        else:
            self.b = np.asarray(b, np.float64)
            self.nan_t0 = self.nan_t1 = t0[:0]
        # the cumulative sums written in place after a leading 0 (same sums, no extra copy)
        self.cb = np.empty(n + 1)
        self.cb[0] = 0.0
        np.cumsum(self.b, out=self.cb[1:])
        self.dur = t1 - t0
        self.cdur = np.empty(n + 1, self.dur.dtype if n else np.int64)
        self.cdur[0] = 0
        np.cumsum(self.dur, out=self.cdur[1:])
        g = flag == _GAP
        if g.any():
            self.gap_t0, self.gap_t1 = t0[g], t1[g]
        else:
            self.gap_t0 = self.gap_t1 = t0[:0]

    def ends_before(self, e: np.ndarray, step: int | None = None) -> np.ndarray:
        """Per instant e (sorted): how many intervals end at or before it (``searchsorted(t1, e,
        "right")``). ``step``: e is the regular grid e[0] + k x step, except that its first and
        last edge may be cut to a range (``_GridAcc`` with ``clip``); then counted in linear
        time (each interval's first edge at or after its end, ceil((t1 - e[0]) / step), in
        exact integer arithmetic, histogrammed and summed), which equals the binary search."""
        m = len(e)
        if step is None or m < 64:
            return np.searchsorted(self.t1, e, side="right")
        step = int(step)
        j = np.empty(m, np.int64)
        a = 1 if e[1] - e[0] != step else 0  # a first edge cut to the range start
        b = m - 1 if e[-1] - e[-2] != step else m  # a last edge cut to the range end
        if a:
            j[0] = np.searchsorted(self.t1, e[0], side="right")
        if b < m:
            j[-1] = np.searchsorted(self.t1, e[-1], side="right")
        r0, r1 = int(e[a]), int(e[b - 1])
        # intervals ending at or before r0 count for every edge; those ending after the last
        # edge for none; the rest from the first edge at or after their end
        lo, hi = np.searchsorted(self.t1, [r0, r1], side="right")
        k = self.t1[lo:hi] - r0
        k = np.negative(np.floor_divide(np.negative(k, out=k), step, out=k), out=k)
        jr = j[a:b]
        np.cumsum(np.bincount(k, minlength=b - a)[:b - a], out=jr)
        jr += lo
        return j

    def cum(self, e: np.ndarray, step: int | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Cumulative bytes (whole intervals, partial interval) and covered ns (same) at e.

        ``step``: e is a regular grid of this step (see ``ends_before``)."""
        n = len(self.t0)
        j = self.ends_before(e, step)  # intervals ending at or before e
        jj = np.minimum(j, n - 1)
        t0j = self.t0[jj]
        inside = (j < n) & (t0j < e)
        num = np.where(inside, e - t0j, 0)
        d = self.dur[jj]
        frac = np.divide(num, d, out=np.zeros(len(e)), where=inside & (d > 0))
        return self.cb[j], self.b[jj] * frac, self.cdur[j], num

    def edge_unc(self, e: np.ndarray) -> np.ndarray:
        """Timing uncertainty (ns) of the readings bracketing each instant e (0 if unknown)."""
        if self.unc is None:
            return np.zeros(len(e), np.int64)
        j = np.minimum(np.searchsorted(self.t1, e, side="left"), len(self.t0) - 1)
        return self.unc[j]

    def windows(self, a: np.ndarray, b: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per range [a, b): (bytes without NaN intervals, #NaN intervals, #gaps, covered ns)."""
        fa, pa_, ca, na = self.cum(a)
        fb, pb, cb, nb = self.cum(b)
        byt = (fb - fa) + (pb - pa_)
        cov = (cb - ca) + (nb - na)
        nan = (np.searchsorted(self.nan_t0, b, "left")
               - np.searchsorted(self.nan_t1, a, "right"))
        gap = self._gap_across(a) + self._gap_across(b)
        return byt, nan, gap, cov

    def _gap_across(self, x: np.ndarray) -> np.ndarray:
        """Per instant x: 1 if a gap interval lies strictly across it (t0 < x < t1), else 0.
        The gap intervals are sorted and disjoint, so #(t0 < x) - #(t1 <= x) counts them."""
        if not len(self.gap_t0):
            return np.zeros(len(x), np.int64)
        return (np.searchsorted(self.gap_t0, x, "left")
                - np.searchsorted(self.gap_t1, x, "right"))

    def edges(self, e: np.ndarray, block: int = 1 << 19, step: int | None = None,
              cums: tuple | None = None, keep: list | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Same as ``windows`` for contiguous windows between consecutive edges.

        Evaluated in blocks of ``block`` edges so the temporaries stay small (and in cache);
        returns (bytes float64, overlaps-NaN bool, holds-gap bool, covered ns int64).
        ``step``: the edges are the regular grid e[0] + k x step (a faster exact count).
        ``cums``: ``cum(e)`` already known (e.g. taken from a finer grid's edges: ``cum`` is
        evaluated edge by edge, so a subset of its values is exactly ``cum`` of the subset).
        ``keep``: a list that receives ``cum(e)`` when it was computed in one block.
        """
        m = len(e) - 1
        byt = np.empty(m)
        cov = np.empty(m, np.int64)
        if keep is not None and m > block:
            keep = None
        for s in range(0, m, block):
            ee = e[s:min(m, s + block) + 1]
            if cums is not None:
                f, p, c, nn = (x[s:s + len(ee)] for x in cums)
            else:
                f, p, c, nn = self.cum(ee, step)
                if keep is not None:
                    keep.append((f, p, c, nn))
            np.subtract(f[1:], f[:-1], out=byt[s:s + len(ee) - 1])
            byt[s:s + len(ee) - 1] += np.diff(p)
            np.subtract(c[1:], c[:-1], out=cov[s:s + len(ee) - 1])
            cov[s:s + len(ee) - 1] += np.diff(nn)
        a, b = e[:-1], e[1:]
        if len(self.nan_t0):
            nan = (np.searchsorted(self.nan_t0, b, "left")
                   - np.searchsorted(self.nan_t1, a, "right")) > 0
        else:
            nan = np.zeros(m, bool)
        if len(self.gap_t0):  # a gap across either edge of the window (see _gap_across)
            cross = self._gap_across(e) > 0
            gap = cross[:-1] | cross[1:]
        else:
            gap = np.zeros(m, bool)
        return byt, nan, gap, cov


class _Spec:
    """A counter's sorted interval arrays (views); ``build()`` makes the heavy ``_Counter``.

    Kept lazy so that re-binning holds the cumulative arrays of one counter at a time.
    """

    __slots__ = ("t0", "t1", "b", "flag", "unc")

    def __init__(self, t0, t1, b, flag, unc):
        self.t0, self.t1, self.b, self.flag, self.unc = t0, t1, b, flag, unc

    def build(self) -> _Counter:
        return _Counter(self.t0, self.t1, self.b, self.flag, self.unc)


def _counters_of(intervals: pd.DataFrame, by, with_unc: bool = False
                 ) -> list[tuple[Any, _Spec]]:
    """Split intervals per counter (each sorted, checked non-overlapping) with their group key.

    ``with_unc``: also carry each interval's timing uncertainty (for ``peak_bounds``).
    """
    if len(intervals) == 0:
        raise ValueError("no intervals to re-bin (the capture holds fewer than two valid "
                         "readings of any selected counter)")
    for col in ("t0_ns", "t1_ns", "bytes", "flag"):
        if col not in intervals.columns:
            raise ValueError(f"intervals lack column {col!r} (make them with byte_intervals)")
    if by is not None and by not in intervals.columns:
        raise ValueError(f"cannot group by {by!r}: no such column "
                         f"(columns: {', '.join(map(str, intervals.columns))})")
    key = intervals["counter_id"].to_numpy() if "counter_id" in intervals.columns else \
        np.zeros(len(intervals), np.int64)
    t0 = intervals["t0_ns"].to_numpy(np.int64)
    t1 = intervals["t1_ns"].to_numpy(np.int64)
    if (t1 < t0).any():
        raise ValueError("an interval ends before it starts (t1_ns < t0_ns)")
    flag = intervals["flag"]
    fcode = (flag.cat.codes.to_numpy(np.int8) if isinstance(flag.dtype, pd.CategoricalDtype)
             and list(flag.cat.categories) == list(FLAGS)
             else pd.Categorical(flag, categories=list(FLAGS)).codes.astype(np.int8))
    b = intervals["bytes"].to_numpy(np.float64)
    unc = (np.maximum(intervals["t0_unc_ns"].to_numpy(np.int64),
                      intervals["t1_unc_ns"].to_numpy(np.int64))
           if with_unc and {"t0_unc_ns", "t1_unc_ns"} <= set(intervals.columns) else None)
    order = None
    kd = np.diff(key.astype(np.int32)) if len(key) > 1 else np.zeros(0, np.int32)
    if len(key) > 1 and ((kd < 0).any() or ((kd == 0) & (t0[1:] < t0[:-1])).any()):
        order = np.lexsort((t0, key))
        key, t0, t1, fcode, b = key[order], t0[order], t1[order], fcode[order], b[order]
        if unc is not None:
            unc = unc[order]
        kd = np.diff(key.astype(np.int32))
    bounds = np.flatnonzero(kd) + 1
    del kd
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(key)]])
    # the group key of each counter: its first row's value (avoids materialising the column)
    first_rows = starts if order is None else order[starts]
    groups = intervals[by].iloc[first_rows].tolist() if by is not None else None
    out = []
    for s, e in zip(starts, ends, strict=True):
        ct0, ct1 = t0[s:e], t1[s:e]
        if (ct0[1:] < ct1[:-1]).any():
            raise ValueError(f"intervals of counter {key[s]} overlap; each counter's intervals "
                             "must be consecutive (as byte_intervals makes them)")
        g = groups[len(out)] if groups is not None else "total"
        out.append((g, _Spec(ct0, ct1, b[s:e], fcode[s:e], None if unc is None else unc[s:e])))
    return out


def _grid(counters, width_ns: int, origin_ns, start_ns, end_ns) -> np.ndarray:
    """Window edges; ``origin_ns`` already resolved by ``default_origin`` (None: first start)."""
    if not isinstance(width_ns, (int, np.integer)) or width_ns <= 0:
        raise ValueError(f"window width must be a positive integer of ns, got {width_ns!r}")
    lo = min(int(c.t0[0]) for _, c in counters)
    hi = max(int(c.t1[-1]) for _, c in counters)
    origin = lo if origin_ns is None else int(origin_ns)
    start = lo if start_ns is None else int(start_ns)
    end = hi if end_ns is None else int(end_ns)
    if end <= start:
        raise ValueError(f"empty time range: start {start} ns >= end {end} ns")
    k0 = (start - origin) // width_ns
    k1 = -((origin - end) // width_ns)  # ceil
    return origin + np.arange(k0, k1 + 1, dtype=np.int64) * int(width_ns)


def cover_tolerance_ns(width_ns):
    """How much of a window of ``width_ns`` its readings may leave uncovered and the window still
    count as full (``COVER_TOLERANCE_NS``, at most 1 % of the window); int or int array."""
    return np.minimum(COVER_TOLERANCE_NS, np.asarray(width_ns, dtype=np.int64) // 100)


def _combine(items, width: np.ndarray | int, index: pd.Index, partial_nan: bool = False,
             columns: pd.Index | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sum per-counter window parts into group columns; NaN and quality bits per the policy.

    ``items`` yields (group key, (bytes, n_nan, n_gap, covered_ns)) per counter, consumed one at
    a time (so only one counter's parts need to be alive). ``columns``: the group keys in the
    order ``items`` first yields them, as an Index to copy (cheaper than building one per
    block; the caller guarantees the order).

    A window (``partial_nan`` false) is partial only when its uncovered part exceeds
    ``COVER_TOLERANCE_NS`` (0.1 ms, the counter's own update uncertainty) or 1 % of the window,
    whichever is less: the grid starts at the capture start, the first sweep's deadline, and
    the first reading is taken a few microseconds after it, so without this every capture's
    first window (a 2 s capture's only full 1 s window) was partial. Ranges
    (``partial_nan``, ``integrate``) keep the strict rule.
    """
    tol = 0 if partial_nan else cover_tolerance_ns(width)
    acc: dict[Any, list] = {}
    for k, (b, nan, gap, cov) in items:
        qq = (gap > 0).view(np.int8) * np.int8(QUALITY_GAP)
        bad = nan > 0
        qq |= bad.view(np.int8) * np.int8(QUALITY_INVALID)
        part = cov < width - tol
        qq |= part.view(np.int8) * np.int8(QUALITY_PARTIAL)
        empty = cov <= 0
        qq |= empty.view(np.int8) * np.int8(QUALITY_EMPTY)
        bad |= empty
        if partial_nan:
            bad |= part
        if k not in acc:
            acc[k] = [np.array(b, dtype=np.float64, copy=True), qq, bad]
        else:
            acc[k][0] += b
            acc[k][1] |= qq
            acc[k][2] |= bad
    names = list(acc)
    n = len(index)
    for v in acc.values():
        v[0][v[2]] = np.nan
    cols = pd.Index(names) if columns is None else columns.copy()  # frames never share one
    if n * len(names) > _BLOCK_2D_MAX:
        # large frames (a whole capture in memory): the columns as they are, never a copy
        return (pd.DataFrame({k: acc[k][0] for k in names}, index=index, columns=cols,
                             copy=False),
                pd.DataFrame({k: acc[k][1] for k in names}, index=index, columns=cols.copy(),
                             copy=False))
    # small frames (the streamed blocks): one 2-D block per frame (each column contiguous),
    # much cheaper to build than one block per column
    bb = np.empty((len(names), n))
    qa = np.empty((len(names), n), np.int8)
    for i, name in enumerate(names):
        bb[i] = acc[name][0]
        qa[i] = acc[name][1]
    return (pd.DataFrame(bb.T, index=index, columns=cols, copy=False),
            pd.DataFrame(qa.T, index=index, columns=cols.copy(), copy=False))


#: above this many values a frame of ``_combine`` keeps its columns as separate arrays (no copy)
_BLOCK_2D_MAX = 1 << 22


def rebin_with_quality(intervals: pd.DataFrame, width_ns: int, *, origin_ns: int | None = None,
                       start_ns: int | None = None, end_ns: int | None = None,
                       by: str | None = "series", line_gbps: float | dict | None = None,
                       instant_unc_ns: int = INSTANT_UNC_NS
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Re-bin intervals to windows and also return each window's quality bits.

    Returns (bytes_df, quality_df), same index and columns (see ``rebin``); quality_df holds an
    int8 bitmask per window and group: ``QUALITY_GAP`` (gap-spread bytes), ``QUALITY_INVALID``
    (overlaps a reset/saturated/unavailable/implausible interval: NaN), ``QUALITY_PARTIAL``
    (part of the window lies outside the readings), ``QUALITY_EMPTY`` (no readings at all: NaN),
    ``QUALITY_OVER_LINE`` (the rate exceeds the line rate by more than the window's timing
    uncertainty allows, ``flag_over_line`` with ``line_gbps`` and ``instant_unc_ns``; checked
    when the line rates are known: intervals from ``byte_intervals`` on a manifest with port
    rates, or ``line_gbps`` given). Raises ``ValueError`` as ``rebin`` does.
    """
    counters = _counters_of(intervals, by)
    if origin_ns is None:
        origin_ns = default_origin(intervals, start_ns)
    edges = _grid(counters, width_ns, origin_ns, start_ns, end_ns)
    index = pd.Index(edges[:-1], name="window_start_ns")
    b, q = _combine(((k, spec.build().edges(edges, step=int(width_ns))) for k, spec in counters),
                    int(width_ns),
                    index)
    if line_gbps is not None or (getattr(intervals, "attrs", {}) or {}).get("line_gbps"):
        q = flag_over_line(intervals, b, q, int(width_ns), by=by, line_gbps=line_gbps,
                           instant_unc_ns=instant_unc_ns)
    b.columns.name = q.columns.name = by
    return b, q


def rebin(intervals: pd.DataFrame, width_ns: int, *, origin_ns: int | None = None,
          start_ns: int | None = None, end_ns: int | None = None,
          by: str | None = "series") -> pd.DataFrame:
    """Re-bin byte intervals to windows of ``width_ns``, spreading each interval by overlap.

    Windows are [origin + k x width, origin + (k+1) x width) for every k whose window overlaps
    [start_ns, end_ns) (defaults: ``start_ns`` = the first interval's start, ``end_ns`` = the
    last interval's end; ``origin_ns`` = the capture start from
    ``intervals.attrs["t_start_ns"]`` as set by ``byte_intervals``, else the first interval's
    start, never ``start_ns``: see ``default_origin``; the same windows as ``rebin_capture`` and ``rdmascope
    rates``). Each interval's bytes go to the windows it overlaps in proportion to the
    overlap (method.md, "The sampler"), computed exactly as differences of the piecewise-linear
    cumulative byte curve at the window edges, so the windows of a range sum to the counter
    difference across it (to float rounding, < 1e-6 bytes per window).

    ``by``: a column of ``intervals`` to sum counters by ("series" default, "device",
    "direction", "counter_id") or None for one "total" column.

    Returns a DataFrame: index ``window_start_ns`` (int64 ns), one float64 column of bytes per
    group. NaN where the window overlaps a reset/saturated/unavailable/implausible interval or
    has no reading around it (never zero). Raises ``ValueError`` on a non-positive width, an empty
    range, no intervals or overlapping intervals of one counter.
    """
    return rebin_with_quality(intervals, width_ns, origin_ns=origin_ns, start_ns=start_ns,
                              end_ns=end_ns, by=by)[0]


# ----------------------------------------------------------------------------------------------
# Windows over line rate: what physics rules out
# ----------------------------------------------------------------------------------------------


def line_gbps_of(intervals: pd.DataFrame, by: str | None = "series", *,
                 groups: dict[str, list[str]] | None = None,
                 line_gbps: float | dict | None = None) -> dict[Any, float | None]:
    """Return the line rate (Gb/s) of each group of ``rebin(intervals, by=by)`` and of each
    link of ``groups``: the most those counters together can carry.

    A series' line rate is its device's ceiling (``plausibility.line_ceilings``: the port rate,
    e.g. 200 for a "200 Gb/sec (4X HDR)" port; ``--link-gbps`` when given; at most the
    recorded real rate of an emulated link, ``record --emulated GBPS``, and at most the bound
    of the device's PCIe link, 126 Gb/s for a DGX Spark twin on Gen5 x4) recorded by
    ``byte_intervals`` in ``intervals.attrs``; counters of twin devices on one cable
    (``twin_links``) share that cable's port rate (the highest of theirs), bounded by the sum
    of their PCIe links (each link counted once), so a group's rate is the sum over the
    distinct cables in it. ``line_gbps``: one
    number for every group, or {group: Gb/s} overriding (e.g. the ~109 Gb/s one PCIe path of a
    Spark twin). None for a group with a counter whose port rate is unknown (netdev counters,
    manifests without rates): such groups are never flagged.
    """
    attrs = getattr(intervals, "attrs", {}) or {}
    rates = attrs.get("line_gbps") or {}
    keys = attrs.get("link_key") or {}
    ports = attrs.get("port_gbps", rates) or {}
    pcie = attrs.get("pcie_gbps") or {}
    pkeys = attrs.get("pcie_key") or {}
    members = _members_of(intervals, by, groups)

    def one(series: list[str]) -> float | None:
        per_key: dict = {}
        for sname in series:
            if rates.get(sname) is None:
                return None
            per_key.setdefault(keys.get(sname) or ("series", sname), []).append(sname)
        total = 0.0
        for cable in per_key.values():
            # the cable: its port rate (the highest of its twins'), at most the sum of its
            # twins' PCIe links (each link once; unknown if any twin's is unknown)
            port = [float(ports[m]) for m in cable if ports.get(m) is not None]
            links = {pkeys.get(m) or m: pcie.get(m) for m in cable}
            bound = (None if any(v is None for v in links.values())
                     else float(sum(links.values())))
            vals = [v for v in ((max(port) if port else None), bound) if v is not None]
            total += min(vals) if vals else max(float(rates[m]) for m in cable)
        # functions of one PCIe link on different cables (a dual-port card) share that link
        every = {pkeys.get(m) or m: pcie.get(m) for m in series}
        if per_key and not any(v is None for v in every.values()):
            total = min(total, float(sum(every.values())))
        return total if per_key else None

    out = {g: one(ms) for g, ms in members.items()}
    if isinstance(line_gbps, dict):
        out.update({g: (None if v is None else float(v)) for g, v in line_gbps.items()
                    if g in out})
    elif line_gbps is not None:
        out = dict.fromkeys(out, float(line_gbps))
    return out


def line_rates(capture, *, groups: dict[str, list[str]] | None = None,
               line_gbps: float | dict | None = None) -> dict[str, dict[str, Any]]:
    """Return {column: {"gbps": float | None, "source": str}}: the line-rate ceiling each series
    (``<device>/<dir>``) and each link of ``groups`` is judged against (``line_gbps_of``, the
    over-line flag and the headline peaks) and where it came from, e.g. "126.0 Gb/s: PCIe
    link 32 GT/s x4 (PCIe 5.0, 128b/130b), below the 200 Gb/s port rate" or, for a link,
    "200 Gb/s: port rate (its twins' PCIe links add up to 252.1 Gb/s)".

    ``capture``: a ``Capture`` or ``stream.CaptureInfo`` (manifest only is used). ``line_gbps``:
    as ``line_gbps_of`` (the source then says "line_gbps given"). Infiniband series only.
    """
    cdf = capture.counters
    ids = [c for c in cdf.index if cdf.at[c, "data"] and cdf.at[c, "source"] == "infiniband"]
    stub = cdf.loc[ids, ["series", "device", "direction", "source"]].reset_index()
    _line_attrs(stub, capture.meta, cdf, ids, getattr(capture, "interval_ns", 1_000_000))
    lines = line_gbps_of(stub, "series", groups=groups, line_gbps=line_gbps)
    a = stub.attrs
    members = _members_of(stub, "series", groups)
    out: dict[str, dict[str, Any]] = {}
    for col, g in lines.items():
        ms = members.get(col, [col])
        if line_gbps is not None:
            src = "--link-gbps" if isinstance(line_gbps, (int, float)) else "line_gbps given"
            text = f"{g:g} Gb/s: {src}" if g is not None else "unknown: never judged"
        elif g is None:
            text = "unknown (no port rate, no PCIe link recorded for a member): never judged"
        elif len(ms) == 1:
            text = a["line_source"].get(ms[0]) or f"{g:g} Gb/s"
        else:
            srcs = {a["line_kind"].get(m) for m in ms}
            if "--link-gbps" in srcs:
                text = f"{g:g} Gb/s: --link-gbps"
            else:
                pcie = {a["pcie_key"].get(m) or m: a["pcie_gbps"].get(m) for m in ms}
                port = [a["port_gbps"][m] for m in ms if a["port_gbps"].get(m) is not None]
                known = None if any(v is None for v in pcie.values()) else sum(pcie.values())
                what = "record --emulated" if "record --emulated" in srcs else "port rate"
                if known is not None and (not port or known < max(port)):
                    text = (f"{g:.1f} Gb/s: its twins' PCIe links ({len(pcie)} x "
                            f"{min(pcie.values()):.1f} Gb/s)"
                            + (f", below the {max(port):g} Gb/s {what}" if port else ""))
                else:
                    text = f"{g:g} Gb/s: {what}" + (
                        f" (its twins' PCIe links add up to {known:.1f} Gb/s)"
                        if known is not None else "")
        out[str(col)] = {"gbps": g, "source": text}
    return out


def line_rate_lines(rates: dict[str, dict[str, Any]]) -> list[str]:
    """Human lines for ``line_rates``: one per device or link (tx and rx share it)."""
    seen: dict[str, str] = {}
    for col, r in rates.items():
        name = col.rsplit("/", 1)[0]
        seen.setdefault(name, r["source"])
    return [f"line rate {name}: {text}" for name, text in seen.items()]


def _members_of(intervals: pd.DataFrame, by, groups) -> dict[Any, list[str]]:
    if by is None:
        m = {"total": list(dict.fromkeys(intervals["series"]))}
    elif by == "series":
        m = {s: [s] for s in dict.fromkeys(intervals["series"])}
    else:
        m = {k: list(dict.fromkeys(v)) for k, v in intervals.groupby(by, observed=True)["series"]}
    for link, ms in (groups or {}).items():
        m[link] = list(ms)
    return m


def _low_bytes(items, starts: np.ndarray, width_ns: int, extra_ns: int) -> dict[str, np.ndarray]:
    """Per series: the fewest bytes each window [a, a + width) can hold when every reading's
    instant moves within its half read bracket + ``extra_ns`` (NaN when the widened window
    touches a NaN interval). ``items`` yields (series, ``_Counter`` with ``unc``); several
    items of one series (counters, or one counter's parts) add up."""
    a = np.asarray(starts, np.int64)
    b = a + int(width_ns)
    out: dict[str, np.ndarray] = {}
    for name, c in items:
        if not len(c.t0):
            continue
        ua, ub = c.edge_unc(a) + extra_ns, c.edge_unc(b) + extra_ns
        fa = sum(c.cum(a + ua)[:2])
        fb = sum(c.cum(b - ub)[:2])
        low = np.maximum(fb - fa, 0.0)
        nan = c.windows(a - ua, b + ub)[1] > 0
        low = np.where(nan, np.nan, low)
        out[name] = out[name] + low if name in out else low
    return out


def window_low_bytes(intervals: pd.DataFrame, starts_ns, width_ns: int, *,
                     instant_unc_ns: int = INSTANT_UNC_NS) -> pd.DataFrame:
    """Return the fewest bytes each series can have carried in windows [a, a + width_ns).

    Each reading's instant is uncertain by its half read bracket (``t_unc_ns``) plus
    ``instant_unc_ns`` (default 0.1 ms: the adapter's counter update period; docs/method.md "The
    sampler"), worst case added. The cumulative byte curve F may then lie anywhere between
    itself shifted earlier and later by that, so [a, b) holds at least F(b - u_b) - F(a + u_a)
    bytes (0 if negative), the lower bound of ``peaks.peak_bounds``. ``starts_ns``: window
    starts (int64 ns). Returns a DataFrame indexed by the starts, one float column per series
    (NaN where the widened window touches a reset/saturated/unavailable/implausible interval).
    Raises ``ValueError`` on a negative ``instant_unc_ns``.
    """
    if not instant_unc_ns >= 0:
        raise ValueError(f"instant_unc_ns must be >= 0 ns, got {instant_unc_ns!r}")
    a = np.asarray(starts_ns, np.int64)
    items = ((k, spec.build()) for k, spec in _counters_of(intervals, "series", with_unc=True))
    low = _low_bytes(items, a, int(width_ns), int(instant_unc_ns))
    return pd.DataFrame(low, index=pd.Index(a, name="window_start_ns"))


def flag_over_line(intervals: pd.DataFrame, bytes_df: pd.DataFrame, quality_df: pd.DataFrame,
                   width_ns: int, *, by: str | None = "series",
                   groups: dict[str, list[str]] | None = None,
                   line_gbps: float | dict | None = None,
                   instant_unc_ns: int = INSTANT_UNC_NS,
                   low_bytes: Callable[[np.ndarray], pd.DataFrame] | None = None,
                   lines_members: tuple[dict, dict] | None = None) -> pd.DataFrame:
    """Return ``quality_df`` with ``QUALITY_OVER_LINE`` set on windows physics rules out.

    A window is over line rate when even its fewest possible bytes (``window_low_bytes``: the
    readings' instants moved within their read brackets plus ``instant_unc_ns``) exceed what
    the line carries in the window (``line_gbps_of``: the port rate, twins of one cable
    sharing it). Such a window's bytes are real (the counters are exact) but they were not
    carried in that window: a counter updated late, bytes spread over a gap, or a sampler that
    stalled (``over_line_causes``). Only windows whose rate exceeds the line rate are examined,
    so the cost is small. ``bytes_df``/``quality_df`` as ``rebin_with_quality`` (columns =
    groups of ``by`` and links of ``groups``), on windows of ``width_ns``. ``low_bytes``: a
    function of window starts returning per-series low bytes (default ``window_low_bytes`` on
    ``intervals``; the chunked path passes its own). ``lines_members``: (``line_gbps_of``,
    group members) already computed for these arguments (``OverLineFlagger``: once per command,
    not per block). Returns a new quality DataFrame.
    """
    q = quality_df.copy()
    if not len(bytes_df):
        return q
    if lines_members is None:
        lines = line_gbps_of(intervals, by, groups=groups, line_gbps=line_gbps)
        members = _members_of(intervals, by, groups)
    else:
        lines, members = lines_members
    rate = bytes_df.to_numpy(np.float64) * 8.0 / float(width_ns)
    cand = {}
    for j, col in enumerate(bytes_df.columns):
        lim = lines.get(col)
        if lim is None or col not in members:
            continue
        with np.errstate(invalid="ignore"):
            hit = np.flatnonzero(rate[:, j] > lim)
        if len(hit):
            cand[col] = hit
    if not cand:
        return q
    rows = np.unique(np.concatenate(list(cand.values())))
    starts = bytes_df.index.to_numpy(np.int64)[rows]
    low = (low_bytes(starts) if low_bytes is not None
           else window_low_bytes(intervals, starts, width_ns, instant_unc_ns=instant_unc_ns))
    pos = {r: i for i, r in enumerate(rows)}
    for col, hit in cand.items():
        ms = members[col]
        if not all(m in low.columns for m in ms):
            continue
        lo = low[ms].to_numpy(np.float64).sum(axis=1)[[pos[r] for r in hit]]
        over = lo * 8.0 / float(width_ns) > lines[col]
        if over.any():
            j = q.columns.get_loc(col)
            q.iloc[hit[over], j] = q.iloc[hit[over], j] | QUALITY_OVER_LINE
    return q


class OverLineFlagger:
    """``flag_over_line`` and ``over_line_causes`` for the chunked path (no intervals in memory).

    Built once per command on a capture directory or ``stream.CaptureInfo``; called on each
    block of windows ``(bytes_df, quality_df, width_ns)`` as ``stream.iter_windows`` yields
    them (links of ``groups`` included, with their over-line bit cleared), it returns the
    block's quality with ``QUALITY_OVER_LINE`` set by the same rule as ``flag_over_line``: only
    the few windows whose rate exceeds the line rate are examined, by re-reading the segments
    around them (``stream.iter_intervals`` over their time span). ``causes(starts, width_ns,
    column)`` names their likely causes the same way. Windows must all have ``width_ns``
    (pass only the whole windows of a clipped grid). Raises the loader errors.
    """

    def __init__(self, capture, *, by: str | None = "series",
                 groups: dict[str, list[str]] | None = None, source: str | None = "infiniband",
                 gap_factor: float = DEFAULT_GAP_FACTOR, line_gbps: float | dict | None = None,
                 instant_unc_ns: int = INSTANT_UNC_NS):
        from .stream import _info

        self.info = info = _info(capture)
        cdf = info.counters
        self.ids = _select_counters(cdf, None, source)
        self.cdf, self.by, self.groups, self.source = cdf, by, groups, source
        self.gap_factor, self.line_gbps = gap_factor, line_gbps
        self.extra = int(instant_unc_ns)
        stub = cdf.loc[self.ids, ["series", "device", "direction", "source"]].reset_index()
        _line_attrs(stub, info.meta, cdf, self.ids, info.interval_ns)
        self.stub = stub
        self.members = _members_of(stub, by, groups)
        self.lines = line_gbps_of(stub, by, groups=groups, line_gbps=line_gbps)

    def _parts(self, t0: int, t1: int):
        from .stream import iter_intervals

        pad = 2 * int(self.info.interval_ns) + self.extra
        for parts, _ in iter_intervals(self.info, counters=self.ids, source=self.source,
                                       start_ns=t0 - pad, end_ns=t1 + pad,
                                       gap_factor=self.gap_factor):
            yield parts

    def _low(self, starts: np.ndarray, width_ns: int) -> pd.DataFrame:
        acc: dict[str, np.ndarray] = {}
        for parts in self._parts(int(starts.min()), int(starts.max()) + int(width_ns)):
            items = []
            for c, iv in parts.items():
                if len(iv["t0_ns"]):
                    unc = np.maximum(iv["t0_unc_ns"], iv["t1_unc_ns"]).astype(np.int64)
                    items.append((str(self.cdf.at[c, "series"]),
                                  _Counter(iv["t0_ns"], iv["t1_ns"], iv["bytes"], iv["flag"],
                                           unc)))
            for k, v in _low_bytes(items, starts, int(width_ns), self.extra).items():
                acc[k] = acc[k] + v if k in acc else v
        return pd.DataFrame(acc, index=pd.Index(starts, name="window_start_ns"))

    def __call__(self, bytes_df: pd.DataFrame, quality_df: pd.DataFrame,
                 width_ns: int) -> pd.DataFrame:
        return flag_over_line(self.stub, bytes_df, quality_df, int(width_ns), by=self.by,
                              groups=self.groups, line_gbps=self.line_gbps,
                              instant_unc_ns=self.extra,
                              low_bytes=lambda s: self._low(s, int(width_ns)),
                              lines_members=(self.lines, self.members))

    def causes(self, starts_ns, width_ns: int, column) -> list[str]:
        """``over_line_causes`` of windows of ``column`` (a group or link), re-reading only the
        segments around them."""
        starts = np.asarray(starts_ns, np.int64)
        if not len(starts):
            return []
        names = set(self.members.get(column, [column]))
        got: dict[int, list[dict]] = {}
        for parts in self._parts(int(starts.min()), int(starts.max()) + int(width_ns)):
            for c, iv in parts.items():
                if len(iv["t0_ns"]) and str(self.cdf.at[c, "series"]) in names:
                    got.setdefault(c, []).append(iv)
        pieces = [(c, self.cdf.loc[c].to_dict(),
                   {k: np.concatenate([p[k] for p in v]) for k in v[0]})
                  for c, v in sorted(got.items())]
        if not pieces:
            return ["late counter update"] * len(starts)
        iv = _intervals_frame(pieces)
        return over_line_causes(iv, starts, width_ns, list(names),
                                interval_ns=int(self.info.interval_ns))


def flag_over_line_capture(path, bytes_df: pd.DataFrame, quality_df: pd.DataFrame,
                           width_ns: int, *, by: str | None = "series",
                           groups: dict[str, list[str]] | None = None,
                           source: str | None = "infiniband",
                           gap_factor: float = DEFAULT_GAP_FACTOR,
                           line_gbps: float | dict | None = None,
                           instant_unc_ns: int = INSTANT_UNC_NS) -> pd.DataFrame:
    """``flag_over_line`` for windows of the chunked path: ``OverLineFlagger`` called once."""
    return OverLineFlagger(path, by=by, groups=groups, source=source, gap_factor=gap_factor,
                           line_gbps=line_gbps, instant_unc_ns=instant_unc_ns)(
        bytes_df, quality_df, width_ns)


def over_line_causes(intervals: pd.DataFrame, starts_ns, width_ns: int, series,
                     interval_ns: int | None = None) -> list[str]:
    """Name the likely cause of each over-line window [a, a + width_ns) of the given series.

    Tested in this order (``OVER_LINE_CAUSES``): "gap spread" (an interval overlapping the
    window spans missed sweeps: its bytes are spread evenly over the gap, whose traffic came
    in bursts); "stalled sampler" (around the window the readings were off schedule: an
    interval more than 25 % longer or shorter than the sampling interval ``interval_ns``, or a
    read bracket longer than a quarter of it, within one interval of the window: the sampler
    set the window's timing, not the traffic); else "late counter update" (regular readings,
    but the counter held bytes back and released them at once: adapter firmware, or a traffic
    source that stalled and caught up). ``series``: the series (one name, or a list: a link's
    twins) whose intervals are examined. Returns one cause per start.
    """
    names = [series] if isinstance(series, str) else list(series)
    iv = intervals[intervals["series"].isin(names)]
    nominal = int(interval_ns or intervals.attrs.get("interval_ns") or
                  max(int(np.median(iv["t1_ns"] - iv["t0_ns"])), 1))
    t0 = iv["t0_ns"].to_numpy(np.int64)
    t1 = iv["t1_ns"].to_numpy(np.int64)
    dur = t1 - t0
    gap = (iv["flag"].astype(str) == "gap").to_numpy()
    br = 2 * np.maximum(iv["t0_unc_ns"].to_numpy(np.int64), iv["t1_unc_ns"].to_numpy(np.int64))
    odd = (dur > 1.25 * nominal) | (dur < 0.75 * nominal) | (br > 0.25 * nominal)
    out = []
    for a in np.asarray(starts_ns, np.int64):
        b = a + int(width_ns)
        inside = (t0 < b) & (t1 > a)
        near = (t0 < b + nominal) & (t1 > a - nominal)
        if (inside & gap).any():
            out.append("gap spread")
        elif (near & odd).any():
            out.append("stalled sampler")
        else:
            out.append("late counter update")
    return out


def to_gbps(bytes_df, width_ns: int | float):
    """Convert bytes per window of ``width_ns`` to Gb/s (1e9 bit/s): bytes x 8 / width_ns.

    Works on a DataFrame, Series or array of any shape; NaN stays NaN.
    """
    if width_ns <= 0:
        raise ValueError(f"window width must be positive, got {width_ns!r}")
    return bytes_df * 8.0 / float(width_ns)


def integrate(intervals: pd.DataFrame, t0_ns, t1_ns, *, by: str | None = "series",
              allow_partial: bool = False) -> pd.DataFrame:
    """Return the bytes of each series inside arbitrary ranges [t0_ns[i], t1_ns[i]).

    Shapes: ``t0_ns``, ``t1_ns`` int64 arrays of length n (any order, may overlap) -> DataFrame
    of n rows (RangeIndex) x one column per group (``by`` as in ``rebin``), float64 bytes, each
    interval counted in proportion to its overlap with the range (method.md, "The sampler";
    the attribution of requests uses this). A range overlapping a reset/saturated/unavailable/
    implausible interval is NaN; a range not entirely covered by readings is NaN unless ``allow_partial``
    (then the covered part's bytes; still NaN when nothing is covered). Gap-spread bytes count.

    Raises ``ValueError`` on unequal lengths or a range with t1 < t0.
    """
    a = np.asarray(t0_ns, dtype=np.int64).ravel()
    b = np.asarray(t1_ns, dtype=np.int64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"t0_ns and t1_ns have unequal lengths ({len(a)} and {len(b)})")
    if (b < a).any():
        i = int(np.flatnonzero(b < a)[0])
        raise ValueError(f"range {i} ends before it starts ({a[i]} > {b[i]} ns)")
    counters = _counters_of(intervals, by)
    width = b - a
    def parts():
        for k, spec in counters:
            yield k, one(spec.build())

    def one(c):
        byt, nan, gap, cov = c.windows(a, b)
        # a zero-length range inside the readings holds 0 bytes (covered), not NaN
        cov = np.where((width == 0) & (a >= c.t0[0]) & (a <= c.t1[-1]), 1, cov)
        if allow_partial:
            cov = np.where(cov > 0, np.maximum(cov, width), cov)
        return byt, nan, gap, cov

    out, _ = _combine(parts(), width, pd.RangeIndex(len(a)), partial_nan=True)
    out.columns.name = by
    return out


def group_links(df: pd.DataFrame, groups: dict[str, list[str]], *, keep: bool = True
                ) -> pd.DataFrame:
    """Sum twin series into per-link series (one cable seen as two PCI functions, sysfs.md).

    ``groups`` maps a link name to the series it sums, e.g. {"link/tx": ["rocep1s0f1/tx",
    "roceP2p1s0f1/tx"]}. A link is NaN where any member is NaN. With ``keep`` (default) the
    twins stay beside the links ("reported separately as well"); else only the links remain.
    Raises ``ValueError`` naming a member that is not a column, or a link that mixes netdev
    (kernel stack, "netdev:..." series) with RDMA port counter series: their bytes overlap in
    different ways and their sum would make the RDMA link look busy with kernel traffic.
    """
    out = df.copy() if keep else pd.DataFrame(index=df.index)
    for link, members in groups.items():
        missing = [m for m in members if m not in df.columns]
        if missing:
            raise ValueError(f"link {link!r}: no series {', '.join(map(repr, missing))} "
                             f"(columns: {', '.join(map(str, df.columns))})")
        kinds = {str(m).startswith("netdev:") for m in members}
        if len(kinds) > 1:
            raise ValueError(f"link {link!r} mixes netdev (kernel stack) and RDMA series "
                             f"({', '.join(map(str, members))}); group each source apart")
        out[link] = df[list(members)].sum(axis=1, skipna=False)
    return out


def twin_links(capture: Capture, *, source: str | None = "infiniband") -> dict[str, list[str]]:
    """Return the twin groups of a capture's series: {"link:<dev>+<dev>/<dir>": [series, ...]}.

    Devices are twins when their PCI addresses match without the PCI domain (DGX Spark:
    0000:01:00.1 and 0002:01:00.1, sysfs.md) or, when the manifest has no PCI address, when
    they share a ``sys_image_guid``/``node_guid``; with neither, all devices form one link (the
    study's one cable per node). Only groups of two or more series are returned.

    ``source``: "infiniband" (RDMA port counters, labels "link:<rdma dev>+<rdma dev>/<dir>"),
    "netdev" (kernel-stack byte counters, labels "link:<netdev>+<netdev> (netdev)/<dir>", named
    after the netdevs so they never read as the RDMA link) or None (both, each source grouped
    apart). Raises ``ValueError`` for another source.
    """
    if source not in ("infiniband", "netdev", None):
        raise ValueError(f"source must be 'infiniband', 'netdev' or None, got {source!r}")
    dev_info = {d.get("name"): d for d in capture.meta.get("devices") or [] if isinstance(d, dict)}
    c = capture.counters
    c = c[c["data"] if source is None else c["data"] & (c["source"] == source)]
    keys: dict[tuple, list[tuple[str, str]]] = {}
    for _, row in c.iterrows():
        is_netdev = row["source"] == "netdev"
        name = str(row["netdev"]) if is_netdev and isinstance(row.get("netdev"), str) \
            else str(row["device"])
        keys.setdefault(_link_key(dev_info.get(row["device"], {}), row), []).append(
            (name, row["series"]))
    out = {}
    for (src, _, direction), members in keys.items():
        if len(members) < 2:
            continue
        devs = "+".join(dict.fromkeys(m[0] for m in members))
        tag = " (netdev)" if src == "netdev" else ""
        out[f"link:{devs}{tag}/{direction}"] = [m[1] for m in members]
    return out


# ----------------------------------------------------------------------------------------------
# Chunked path over stream.iter_windows (bounded memory for day-long captures)
# ----------------------------------------------------------------------------------------------


def iter_rebin_capture(path: str | os.PathLike, width_ns: int, *, origin_ns: int | None = None,
                       start_ns: int | None = None, end_ns: int | None = None,
                       by: str | None = "series", source: str | None = "infiniband",
                       gap_factor: float = DEFAULT_GAP_FACTOR, max_gbps: float | None = None,
                       batch_rows: int = 1 << 20, progress: Callable[[int], None] | None = None,
                       ) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """Re-bin a capture segment by segment, yielding finished windows in bounded memory.

    Same result as ``rebin_with_quality(byte_intervals(load_capture(path)), ...)`` with the
    same origin, through ``stream.iter_windows``: one segment at a time, keeping only the windows
    not yet final (about one segment's), whatever the capture length. ``batch_rows`` is kept for
    compatibility and ignored (a segment is the unit read). ``start_ns``/``end_ns``: only the
    windows overlapping this range, reading only the segments around it (``--from/--to``). ``origin_ns``
    defaults to the capture's start (manifest); ``gap_factor`` and ``max_gbps`` as
    ``byte_intervals``. ``progress`` is called with the intervals settled per segment (about
    its readings). Yields (bytes_df, quality_df) blocks in time order; concatenate them, or reduce
    each (e.g. a running maximum) for a day at 1 ms.
    Raises the loader errors of ``load_capture`` and ``ValueError`` as ``rebin`` does.
    """
    from .stream import WindowGrid, iter_windows, open_capture

    if not isinstance(width_ns, (int, np.integer)) or width_ns <= 0:
        raise ValueError(f"window width must be a positive integer of ns, got {width_ns!r}")
    info = open_capture(path)
    origin = info.t_start_ns if origin_ns is None else int(origin_ns)
    grid = WindowGrid(int(width_ns), origin, start_ns, end_ns)
    for _, b, q in iter_windows(info, [grid], by=by, source=source,
                                gap_factor=gap_factor, max_gbps=max_gbps, progress=progress):
        yield b, q


def rebin_capture(path: str | os.PathLike, width_ns: int, **kwargs) -> tuple[pd.DataFrame,
                                                                               pd.DataFrame]:
    """Re-bin a whole capture through the chunked path; return (bytes_df, quality_df).

    Keyword arguments as ``iter_rebin_capture``. The reading side runs in bounded memory; the
    result itself has one row per window (a day at 1 s is 86,400 rows; for a day at 1 ms
    consume ``iter_rebin_capture`` block by block instead). Windows before the first reading
    (between the origin and it) are left out.
    """
    blocks = list(iter_rebin_capture(path, width_ns, **kwargs))
    if not blocks:
        raise ValueError(f"{path}: no intervals to re-bin (fewer than two valid readings)")
    b = pd.concat([x[0] for x in blocks])
    q = pd.concat([x[1] for x in blocks])
    keep = (q & QUALITY_EMPTY).eq(0).any(axis=1).to_numpy()
    first = int(np.argmax(keep)) if keep.any() else len(keep)
    return b.iloc[first:], q.iloc[first:]
