"""The report's second witness: NCCL's log beside a capture's emulation verdict.

A capture directory holding NCCL's INFO log in ``nccl/`` (as ``simulate`` writes it, or
``NCCL_DEBUG_FILE=<capture>/nccl/%h.%p`` on a real run) gets one more verdict line in the
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
    head = {"ok": "NCCL's log and the counters agree",
            "fail": "NCCL's log and the counters disagree" if w.network != "Socket"
            else "NCCL's log says it used TCP sockets (NET/Socket), not RDMA",
            "warn": "NCCL's log cannot witness this capture"}[status]
    return f"{label}: {head}", status, w.message.removeprefix("cannot judge: ")
