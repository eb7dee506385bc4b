"""Windows over line rate: what physics rules out (``QUALITY_OVER_LINE``).

A window is over line rate when even its fewest possible bytes (the readings' instants moved
within their read brackets plus the counter update period) exceed what the line carries in it
(``line_gbps_of``). The rule on intervals in memory (``flag_over_line``, ``window_low_bytes``,
``over_line_causes``) and the line rates it judges against (``line_rates``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from rdmascope.counters import over_line, window_fewest_bytes

from .curve import INSTANT_UNC_NS, QUALITY_OVER_LINE, counters_of
from .intervals import line_attrs

__all__ = ["OVER_LINE_CAUSES", "line_gbps_of", "line_rates", "line_rate_lines", "members_of",
           "lowest_bytes", "window_low_bytes", "flag_over_line", "over_line_causes"]

#: Likely causes of a window over line rate (``over_line_causes``), in the order they are tested.
OVER_LINE_CAUSES = ("gap spread", "stalled sampler", "--link-gbps below the traffic",
                    "late counter update")


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
    members = members_of(intervals, by, groups)

    def direction_of(sname: str):
        k = keys.get(sname)
        return k[-1] if isinstance(k, tuple) and k else None

    def one(series: list[str]) -> float | None:
        # each direction has its own line (and PCIe) bandwidth: a group holding tx and rx
        # (``--by device``) is judged against the sum of both directions' bounds, never tx + rx
        # against one direction's
        dirs: dict = {}
        for sname in series:
            dirs.setdefault(direction_of(sname), []).append(sname)
        if len(dirs) > 1:
            parts = [one_direction(ms) for ms in dirs.values()]
            return None if any(p is None for p in parts) else float(sum(parts))
        return one_direction(series)

    def one_direction(series: list[str]) -> float | None:
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
    line_attrs(stub, capture.meta, cdf, ids, getattr(capture, "interval_ns", 1_000_000))
    lines = line_gbps_of(stub, "series", groups=groups, line_gbps=line_gbps)
    a = stub.attrs
    members = members_of(stub, "series", groups)
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


def members_of(intervals: pd.DataFrame, by, groups) -> dict[Any, list[str]]:
    if by is None:
        m = {"total": list(dict.fromkeys(intervals["series"]))}
    elif by == "series":
        m = {s: [s] for s in dict.fromkeys(intervals["series"])}
    else:
        m = {k: list(dict.fromkeys(v)) for k, v in intervals.groupby(by, observed=True)["series"]}
    for link, ms in (groups or {}).items():
        m[link] = list(ms)
    return m


def lowest_bytes(items, starts: np.ndarray, width_ns: int, extra_ns: int) -> dict[str, np.ndarray]:
    """Per series: the fewest bytes each window [a, a + width) can hold when every reading's
    instant moves within its half read bracket + ``extra_ns`` (NaN when the widened window
    touches a NaN interval: ``rdmascope.counters.window_fewest_bytes``, the live gauges' and
    the dataset's rule too). ``items`` yields (series, ``CounterCurve`` with ``unc``); several
    items of one series (counters, or one counter's parts) add up."""
    a = np.asarray(starts, np.int64)
    b = a + int(width_ns)
    out: dict[str, np.ndarray] = {}
    for name, c in items:
        if not len(c.t0):
            continue
        low = window_fewest_bytes(c.at, c.t1, c.unc, c.nan_t0, c.nan_t1, a, b, extra_ns)
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
    items = ((k, spec.build()) for k, spec in counters_of(intervals, "series", with_unc=True))
    low = lowest_bytes(items, a, int(width_ns), int(instant_unc_ns))
    return pd.DataFrame(low, index=pd.Index(a, name="window_start_ns"))


def flag_over_line(intervals: pd.DataFrame, bytes_df: pd.DataFrame, quality_df: pd.DataFrame,
                   width_ns: int, *, by: str | None = "series",
                   groups: dict[str, list[str]] | None = None,
                   line_gbps: float | dict | None = None,
                   instant_unc_ns: int = INSTANT_UNC_NS,
                   low_bytes: Callable[[np.ndarray], pd.DataFrame] | None = None,
                   lines_members: tuple[dict, dict] | None = None,
                   covered_ns: pd.DataFrame | None = None) -> pd.DataFrame:
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
    not per block). ``covered_ns``: each window's covered time (``windows.Coverage``, same
    index, columns by name): a partly covered window is judged over its covered part (its
    fewest bytes against what the line carries in that time), as its rate is shown; else every
    window over its width. Returns a new quality DataFrame.
    """
    q = quality_df.copy()
    if not len(bytes_df):
        return q
    if lines_members is None:
        lines = line_gbps_of(intervals, by, groups=groups, line_gbps=line_gbps)
        members = members_of(intervals, by, groups)
    else:
        lines, members = lines_members
    span = None  # per window and column, the time judged where a window is partly covered
    if covered_ns is not None:
        cv = covered_ns.reindex(columns=bytes_df.columns).to_numpy(np.float64)
        with np.errstate(invalid="ignore"):
            if (cv < width_ns).any():
                span = np.where(np.isnan(cv) | (cv <= 0), float(width_ns), cv)
    rate = bytes_df.to_numpy(np.float64) * 8.0 / (float(width_ns) if span is None else span)
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
        # the one judgement (counters), over the window or its covered part
        over = over_line(lo, int(width_ns) if span is None
                         else span[hit, bytes_df.columns.get_loc(col)], lines[col])
        if over.any():
            j = q.columns.get_loc(col)
            q.iloc[hit[over], j] = q.iloc[hit[over], j] | QUALITY_OVER_LINE
    return q


def over_line_causes(intervals: pd.DataFrame, starts_ns, width_ns: int, series,
                     interval_ns: int | None = None) -> list[str]:
    """Name the likely cause of each over-line window [a, a + width_ns) of the given series.

    Tested in this order (``OVER_LINE_CAUSES``): "gap spread" (an interval overlapping the
    window spans missed sweeps: its bytes are spread evenly over the gap, whose traffic came
    in bursts); "stalled sampler" (around the window the readings were off schedule: an
    interval more than 25 % longer or shorter than the sampling interval ``interval_ns``, or a
    read bracket longer than a quarter of it, within one interval of the window: the sampler
    set the window's timing, not the traffic); "--link-gbps below the traffic" (regular
    readings while the line rate is the one stated with ``--link-gbps``,
    ``plausibility.current_link_gbps``: a stated rate below the link's is far likelier than a
    counter holding bytes back); else "late counter update" (regular readings,
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
            out.append(regular_cause())
    return out


def regular_cause() -> str:
    """The cause of an over-line window on regular readings: the stated ``--link-gbps`` when one
    is in effect, else a late counter update."""
    from rdmascope.plausibility import current_link_gbps

    return "--link-gbps below the traffic" if current_link_gbps() is not None \
        else "late counter update"
