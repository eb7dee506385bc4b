"""Inspector collectives on a capture's clock, each beside the RDMA bytes the counters saw.

``collectives_table`` places every Inspector record of the capture's host on the capture's
CLOCK_MONOTONIC (Inspector times are CLOCK_REALTIME microseconds: converted through the
capture's clock pairs, ``load.realtime_to_monotonic``) and integrates each HCA's tx bytes over
the collective's span (``series.integrate``: proportional overlap with the 1 ms readings).

The counters' timing uncertainty: a reading interval (1 ms) straddling the collective's edges
spreads its bytes evenly, so bytes inside [start, end] can miss or gain up to one interval's
worth at each edge. Each collective therefore gets ``wire_bytes`` over [start, end] and
``wire_bytes_wide`` over [start - u, end + u] (u = one sampling interval + the placement's own
uncertainty). When it is ``isolated`` (no other collective within u) the true bytes lie between
the two; per size class the ratio to NCCL's expected bytes is ``ratio`` over all its
collectives and, over the isolated ones, the bounds ``ratio_low`` / ``ratio_high``. Back-to-back
collectives (a decode pass) share readings, so only their sum is well measured. Expected bytes per rank: ``inspector.expected_wire_bytes`` (ring all-reduce
``2(n-1)/n x size``). One rank per host is assumed (a DGX Spark has one GPU); with several ranks
per host the NIC carries only the inter-node hops and the ratio is not this simple.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..load import realtime_to_monotonic
from ..series import byte_intervals, integrate
from .inspector import InspectorError, expected_wire_bytes
from .log import short_host

__all__ = ["collectives_table", "size_class_table", "place_records", "annotate_bursts",
           "collective_slices"]


def collective_slices(placed: pd.DataFrame, *, clock: str = "monotonic") -> list[tuple]:
    """Slices (t0_ns, t1_ns, name, args) of ``place_records``'s collectives for a timeline
    track: on CLOCK_MONOTONIC (``start_ns``) or CLOCK_REALTIME (the records' own microseconds).
    name: "<coll> <size MB> MB"; args: sn, size_bytes, exec_us, busbw_gbs, placement."""
    out = []
    for r in placed.itertuples(index=False):
        if clock == "realtime":
            t0 = int(round(r.start_us * 1000))
            t1 = t0 + int(round(r.exec_us * 1000))
        else:
            t0, t1 = int(r.start_ns), int(r.end_ns)
        out.append((t0, max(t1, t0 + 1), f"{r.coll} {r.size_bytes / 1e6:,.2f} MB",
                    {"sn": int(r.sn) if r.sn == r.sn else None, "size_bytes": int(r.size_bytes),
                     "exec_us": float(r.exec_us), "busbw_gbs": float(r.busbw_gbs),
                     "placement": r.placement}))
    return out


def place_records(capture, records: pd.DataFrame) -> pd.DataFrame:
    """Return the records of ``capture``'s host with ``start_ns`` / ``end_ns`` on its
    CLOCK_MONOTONIC (realtime microseconds -> the clock pairs), sorted by start. Records of other
    hosts are left out; raises ``InspectorError`` when none is of this host."""
    host = short_host(capture.meta.get("host") or "")
    mine = records[records["host"].map(short_host) == host].copy()
    if mine.empty:
        hosts = ", ".join(sorted(set(records["host"]))) or "none"
        raise InspectorError(f"the Inspector records are of host(s) {hosts}, not of the "
                             f"capture's host {host}")
    mine["start_ns"] = realtime_to_monotonic(capture, np.rint(mine["start_us"].to_numpy() * 1000)
                                             .astype(np.int64))
    mine["end_ns"] = mine["start_ns"] + np.rint(mine["exec_us"].to_numpy() * 1000).astype(np.int64)
    mine["expected_bytes"] = [expected_wire_bytes(c, sz, n) for c, sz, n in
                              zip(mine["coll"], mine["size_bytes"], mine["nranks"], strict=False)]
    return mine.sort_values("start_ns", kind="stable").reset_index(drop=True)


def annotate_bursts(bursts: pd.DataFrame, placed: pd.DataFrame) -> pd.DataFrame:
    """Add to a bursts table (``start_ns``, ``end_ns`` columns) the collectives that overlap each
    burst: ``collectives`` (count), ``nccl`` (e.g. "AllReduce x3 sn 12-14", types in order of
    first appearance) and ``nccl_expected_bytes`` (their expected wire bytes per rank, summed).
    ``placed``: ``place_records``'s frame. Returns a copy; an empty table is returned as is."""
    out = bursts.copy()
    if not len(out):
        return out
    s = placed["start_ns"].to_numpy()
    e = placed["end_ns"].to_numpy()
    emax = np.maximum.accumulate(e) if len(e) else e
    counts, texts, exp = [], [], []
    for b0, b1 in zip(out["start_ns"].to_numpy(), out["end_ns"].to_numpy(), strict=False):
        hi = int(np.searchsorted(s, b1, side="left"))  # starts before the burst ends
        lo = int(np.searchsorted(emax, b0, side="right"))  # first whose running end passes b0
        idx = [i for i in range(lo, hi) if e[i] > b0]
        g = placed.iloc[idx]
        counts.append(len(idx))
        exp.append(float(g["expected_bytes"].sum()) if len(idx) else 0.0)
        parts = []
        for coll in dict.fromkeys(g["coll"]):
            sn = g.loc[g["coll"] == coll, "sn"]
            rng = f" sn {sn.min()}-{sn.max()}" if len(sn) > 1 else f" sn {sn.iloc[0]}"
            parts.append(f"{coll} x{len(sn)}{rng}")
        texts.append(", ".join(parts))
    out["collectives"] = counts
    out["nccl"] = texts
    out["nccl_expected_bytes"] = exp
    return out


def collectives_table(capture, records: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Return (table, notes): one row per collective of ``capture``'s host inside the capture.

    ``records``: ``inspector.read_inspector``'s frame. Columns: coll, sn, comm, rank, nranks,
    size_bytes, exec_us, busbw_gbs (NCCL's), t_start_s / t_end_s (s after capture start),
    placement, expected_bytes (per rank), ``tx_<device>`` bytes per HCA, wire_bytes (sum),
    wire_bytes_wide, measured_gbps (wire_bytes x 8 / span, Gb/s), ratio (wire / expected).
    Raises ``InspectorError`` when no record is of the capture's host.
    """
    notes: list[str] = []
    host = short_host(capture.meta.get("host") or "")
    if records.empty:
        raise InspectorError("no collective record in the Inspector files")
    mine = records[records["host"].map(short_host) == host]
    if mine.empty:
        hosts = ", ".join(sorted(set(records["host"])))
        raise InspectorError(f"the Inspector records are of host(s) {hosts}, not of the "
                             f"capture's host {host}")
    ranks = mine.groupby("comm")["rank"].nunique()
    if len(ranks) and int(ranks.max()) > 1:
        notes.append(f"communicator {ranks.idxmax()} has {int(ranks.max())} ranks on this host: "
                     "each record is one rank's, and the NIC carries only the inter-node hops, so "
                     "wire / expected is not 1 even when all is well")
    start_ns = realtime_to_monotonic(capture, np.rint(mine["start_us"].to_numpy() * 1000)
                                     .astype(np.int64))
    end_ns = start_ns + np.rint(mine["exec_us"].to_numpy() * 1000).astype(np.int64)
    t0, t1 = int(capture.t_start_ns), int(capture.t_end_ns)
    inside = (start_ns >= t0) & (end_ns <= t1)
    if (~inside).any():
        notes.append(f"{int((~inside).sum())} of {len(mine)} records lie outside the capture "
                     "(left out)")
    mine = mine[inside].reset_index(drop=True)
    start_ns, end_ns = start_ns[inside], end_ns[inside]
    if mine.empty:
        raise InspectorError("no Inspector record of this host lies inside the capture")
    iv = byte_intervals(capture, source="infiniband")
    iv = iv[iv["direction"] == "tx"]
    u = int(capture.interval_ns) + np.rint(mine["uncertainty_us"].to_numpy() * 1000).astype(np.int64)
    exact = integrate(iv, start_ns, end_ns, by="device")
    wide = integrate(iv, np.maximum(start_ns - u, t0), np.minimum(end_ns + u, t1), by="device",
                     allow_partial=True)
    out = pd.DataFrame({
        "coll": mine["coll"], "sn": mine["sn"], "comm": mine["comm"], "rank": mine["rank"],
        "nranks": mine["nranks"], "size_bytes": mine["size_bytes"], "exec_us": mine["exec_us"],
        "busbw_gbs": mine["busbw_gbs"], "t_start_s": (start_ns - t0) / 1e9,
        "t_end_s": (end_ns - t0) / 1e9, "placement": mine["placement"]})
    out["expected_bytes"] = [expected_wire_bytes(c, s, n) for c, s, n in
                             zip(mine["coll"], mine["size_bytes"], mine["nranks"], strict=False)]
    for dev in exact.columns:
        out[f"tx_{dev}"] = exact[dev].to_numpy()
    out["wire_bytes"] = exact.sum(axis=1, min_count=len(exact.columns)).to_numpy()
    out["wire_bytes_wide"] = wide.sum(axis=1, min_count=len(wide.columns)).to_numpy()
    # isolated: no other collective of this host within u of either edge (then the exact span
    # can only lose bytes to the idle neighbourhood, the widened one only gain: bounds)
    order = np.argsort(start_ns, kind="stable")
    s_o, e_o, u_o = start_ns[order], end_ns[order], u[order]
    gap_before = np.r_[np.inf, (s_o[1:] - e_o[:-1]).astype(float)]
    gap_after = np.r_[(s_o[1:] - e_o[:-1]).astype(float), np.inf]
    iso = np.empty(len(order), dtype=bool)
    iso[order] = (gap_before > u_o) & (gap_after > u_o)
    out["isolated"] = iso
    span_s = (end_ns - start_ns) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        out["measured_gbps"] = np.where(span_s > 0, out["wire_bytes"] * 8 / span_s / 1e9, np.nan)
        out["ratio"] = out["wire_bytes"] / out["expected_bytes"]
    if (mine["placement"] == "dump").any():
        notes.append("records without NCCL_INSPECTOR_DUMP_VERBOSE=1 carry only their dump time: "
                     "placed as [dump - exec, dump], uncertain by the dump interval")
    return out, notes


def _size_class(b: float) -> str:
    if not b > 0:
        return "0"
    k = int(np.floor(np.log2(b)))
    lo = 2 ** k
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if lo >= div:
            return f"{lo // div}-{2 * lo // div} {unit}"
    return f"{lo}-{2 * lo} B"


def size_class_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per (collective, size class: a power-of-two range of size_bytes): n, expected_bytes, wire
    bytes exact and widened (sums), ``ratio`` = wire / expected over all, and over the
    ``isolated`` collectives only the bounds ``ratio_low`` (exact spans) and ``ratio_high``
    (widened spans), between which the true ratio lies (see the module docstring; NaN without
    isolated collectives), mean NCCL busbw (GB/s) and mean measured rate (Gb/s). Unknown is never
    zero: a collective whose wire bytes are NaN (a span without readings) is counted in
    ``unknown`` and makes the class's ``wire_bytes``/``wire_bytes_wide`` NaN (never the known
    ones' sum passed off as the class's); the ratios are over the known collectives only, whose
    sums are beside: ``wire_known_bytes``, ``wire_known_bytes_wide`` and
    ``expected_known_bytes`` (the ratio's denominator; ``expected_bytes`` is over all)."""
    t = table.copy()
    t["size_class"] = t["size_bytes"].map(_size_class)
    t["_lo"] = t["size_bytes"].map(lambda b: 2 ** int(np.floor(np.log2(b))) if b > 0 else 0)
    rows = []
    for (coll, cls), g in t.groupby(["coll", "size_class"], sort=False):
        known = g[g["wire_bytes"].notna() & g["wire_bytes_wide"].notna()]
        exp = float(known["expected_bytes"].sum())
        iso = known[known["isolated"]]
        iexp = float(iso["expected_bytes"].sum())
        rows.append({"coll": coll, "size_class": cls, "_lo": int(g["_lo"].iloc[0]), "n": len(g),
                     "unknown": len(g) - len(known),
                     "expected_bytes": float(g["expected_bytes"].sum(skipna=False)),
                     "wire_bytes": float(g["wire_bytes"].sum(skipna=False)),
                     "wire_bytes_wide": float(g["wire_bytes_wide"].sum(skipna=False)),
                     "expected_known_bytes": exp,
                     "wire_known_bytes": float(known["wire_bytes"].sum()),
                     "wire_known_bytes_wide": float(known["wire_bytes_wide"].sum()),
                     "ratio": float(known["wire_bytes"].sum()) / exp if exp > 0 else np.nan,
                     "isolated": len(iso),
                     "ratio_low": float(iso["wire_bytes"].sum()) / iexp if iexp > 0 else np.nan,
                     "ratio_high": float(iso["wire_bytes_wide"].sum()) / iexp if iexp > 0 else np.nan,
                     "busbw_gbs": float(g["busbw_gbs"].mean()),
                     "measured_gbps": float(g["measured_gbps"].mean())})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["coll", "_lo"]).drop(columns="_lo").reset_index(drop=True)
