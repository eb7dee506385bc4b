"""The report's second witness: NCCL's log beside a capture's emulation verdict.

A capture directory holding NCCL's INFO log in ``nccl/`` (as ``simulate`` writes it, or the
node's log files copied there after a real run) gets one more verdict line in the
report: ``witness.compare_witnesses`` of that log and the counters' verdict.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LOG_DIR", "witness_line"]

#: where the report looks for NCCL's log inside a capture directory
LOG_DIR = "nccl"


def witness_line(capture, verdict, label: str) -> tuple[str, str, str] | None:
    """Return (headline, status, text) for the report, or None without ``<capture>/nccl/``.

    status: "ok" (confirmed by both), "fail" (they disagree, or NCCL used NET/Socket) or
    "warn" (the log cannot witness this capture, or is not an NCCL log: the text says why).
    """
    from .log import NcclLogError
    from .witness import witness_capture

    d = Path(capture.path) / LOG_DIR
    if not d.is_dir():
        return None
    try:
        w = witness_capture(capture, verdict, [d], expect=getattr(verdict, "expect", "single"))
    except NcclLogError as exc:
        return f"{label}: NCCL's log was not read", "warn", str(exc)
    status = {"pass": "ok", "fail": "fail"}.get(w.status, "warn")
    fail = ("NCCL's log says it used TCP sockets (NET/Socket), not RDMA" if w.network == "Socket"
            else "NCCL's log and the counters agree: not emulated"
            if w.message.startswith("both witnesses say")
            else "NCCL's log agrees with the counters, whose own check failed"
            if w.message.startswith("the log agrees")
            else "NCCL's log and the counters disagree")
    head = {"ok": "NCCL's log and the counters agree", "fail": fail,
            "warn": "NCCL's log cannot witness this capture"}[status]
    return f"{label}: {head}", status, w.message.removeprefix("cannot judge: ")


#: where the report looks for NCCL Inspector records inside a capture directory
INSPECTOR_DIR = "nccl-inspector"


def collectives_tables(capture) -> list[dict]:
    """Tables for the report from ``<capture>/nccl-inspector/`` (none without it): the per size
    class wire/expected bytes (``collectives.size_class_table``) and the bursts with the
    collectives that caused them (``bursts_table``), as dicts with frame, title, note and name; an unreadable record directory gives one note-only entry naming the error."""
    import pandas as pd

    from .collectives import collectives_table, size_class_table
    from .inspector import InspectorError, read_inspector

    d = Path(capture.path) / INSPECTOR_DIR
    if not d.is_dir():
        return []
    try:
        recs = read_inspector([d])
        table, notes = collectives_table(capture, recs)
    except InspectorError as exc:
        return [{"frame": pd.DataFrame(), "title": "NCCL collectives (Inspector)",
                 "note": f"not read: {exc}", "name": "nccl-collectives"}]
    classes = size_class_table(table)
    note = (f"{len(table):,} collectives from NCCL Inspector records, placed on the capture's "
            "clock; wire bytes = tx bytes of all HCAs during each collective; expected = NCCL's "
            "bus-bandwidth factor x size (ring all-reduce 2(n-1)/n x size per rank). ratio_low / "
            "ratio_high bound the ratio over isolated collectives by the counters' 1 ms timing "
            "uncertainty. " + " ".join(notes))
    out = [{"frame": classes, "title": "NCCL collectives per size class: wire vs expected bytes",
            "note": note, "name": "nccl-collectives"}]
    bursts = bursts_table(capture, recs)
    if bursts is not None:
        out.append(bursts)
    return out


#: burst rows the report shows (every burst is counted in the note)
BURST_ROWS = 20


def bursts_table(capture, records) -> dict | None:
    """The report's tx bursts (1 ms windows, all RDMA devices summed, as its burst summary)
    with the collectives that caused each (``collectives.annotate_bursts``: ``collectives``,
    ``nccl`` e.g. "AllReduce x1 sn 12", ``nccl_expected_bytes``) and ``ratio`` = burst bytes /
    expected. Up to ``BURST_ROWS`` rows, in time order: the bursts no collective overlaps first
    (traffic NCCL did not record), then the largest; the note counts all. None without bursts
    or without a record of the capture's host."""
    import numpy as np

    from ..bursts import MS, burst_analysis, burst_analysis_capture
    from ..load import port_rates_gbps
    from .collectives import annotate_bursts, place_records
    from .inspector import InspectorError

    try:
        placed = place_records(capture, records)
    except InspectorError:
        return None
    cap_gbps = max(port_rates_gbps(capture.meta).values(), default=None) or 200.0
    t0 = int(capture.t_start_ns)
    kw = {"capacity_gbps": cap_gbps, "width_ns": MS, "by": "direction", "origin_ns": t0,
          "t_ref_ns": t0}
    try:
        if hasattr(capture, "readings"):  # a loaded capture
            from ..series import byte_intervals

            res = burst_analysis(byte_intervals(capture, source="infiniband"), **kw)
        else:  # a stream.CaptureInfo: one pass over the segments
            res = burst_analysis_capture(capture, source="infiniband", **kw)
    except ValueError:
        return None
    bt = res.table
    if not len(bt) or "series" not in bt:
        return None
    bt = annotate_bursts(bt[bt["series"] == "tx"].reset_index(drop=True), placed)
    if not len(bt):
        return None
    bt["nccl"] = bt["nccl"].where(bt["collectives"] > 0, "none")
    with np.errstate(divide="ignore", invalid="ignore"):
        bt["ratio"] = np.where(bt["nccl_expected_bytes"] > 0,
                               bt["bytes"] / bt["nccl_expected_bytes"], np.nan)
    lone = bt[bt["collectives"] == 0]
    shown = lone.head(BURST_ROWS)
    rest = bt[bt["collectives"] > 0].nlargest(BURST_ROWS - len(shown), "bytes", keep="first")
    shown = bt.loc[sorted([*shown.index, *rest.index])]
    cols = [c for c in ("t_start_s", "duration_s", "bytes", "peak_gbps", "collectives", "nccl",
                        "nccl_expected_bytes", "ratio") if c in shown]
    note = (f"{len(bt):,} tx bursts (1 ms windows, all RDMA devices); {len(bt) - len(lone):,} "
            f"overlap at least one NCCL collective, {len(lone):,} none"
            + (" (traffic NCCL's Inspector did not record: another process, or records "
               "missing)" if len(lone) else "")
            + f". Shown: {len(shown):,}"
            + (", those without a collective first, then the largest" if len(bt) > len(shown)
               else "")
            + ", in time order. nccl: the collectives that overlap the burst (type, count, "
              "sequence numbers); nccl_expected_bytes: their expected wire bytes per rank; "
              "ratio: the burst's bytes / those.")
    return {"frame": shown[cols].reset_index(drop=True),
            "title": "Bursts and the NCCL collectives that caused them", "note": note,
            "name": "nccl-bursts"}


def cluster_witness_lines(res) -> list[tuple[str, str, str]]:
    """``witness_line`` for every node of a ``cluster.ClusterResult`` whose capture directory
    holds ``nccl/`` (node order; the node's own emulation verdict beside its log)."""
    from ..stream import open_capture

    out = []
    for n in res.run_set.nodes:
        v = res.verdicts.get(n.host)
        if v is None or not (Path(n.path) / LOG_DIR).is_dir():
            continue
        line = witness_line(open_capture(n.path), v, n.host)
        if line is not None:
            out.append(line)
    return out
