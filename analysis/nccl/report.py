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
    class wire/expected bytes (``collectives.size_class_table``), as dicts with frame, title,
    note and name; an unreadable record directory gives one note-only entry naming the error."""
    import pandas as pd

    from .collectives import collectives_table, size_class_table
    from .inspector import InspectorError, read_inspector

    d = Path(capture.path) / INSPECTOR_DIR
    if not d.is_dir():
        return []
    try:
        table, notes = collectives_table(capture, read_inspector([d]))
    except InspectorError as exc:
        return [{"frame": pd.DataFrame(), "title": "NCCL collectives (Inspector)",
                 "note": f"not read: {exc}", "name": "nccl-collectives"}]
    classes = size_class_table(table)
    note = (f"{len(table):,} collectives from NCCL Inspector records, placed on the capture's "
            "clock; wire bytes = tx bytes of all HCAs during each collective; expected = NCCL's "
            "bus-bandwidth factor x size (ring all-reduce 2(n-1)/n x size per rank). ratio_low / "
            "ratio_high bound the ratio over isolated collectives by the counters' 1 ms timing "
            "uncertainty. " + " ".join(notes))
    return [{"frame": classes, "title": "NCCL collectives per size class: wire vs expected bytes",
             "note": note, "name": "nccl-collectives"}]


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
