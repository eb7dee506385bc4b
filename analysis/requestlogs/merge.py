"""Several request logs of one run as one (one log per rank API server, or per client).

Each log is read and aligned on its own (its own clock, offset or anchor); ``merge_logs`` then
joins them: every request keeps its source (column ``source``: the file's name, or its parent
and name when two files share a name) and its id is made unique as ``<source>:<id>``; runs are
renumbered across the logs and labelled with their source; notes are prefixed with it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from .common import CLOCK_MONOTONIC, RepeatedLog, RequestLog, RequestLogError


def source_names(paths: list[Path]) -> list[str]:
    """Short unique names for the logs: the file name, else parent/name, else the full path."""
    for f in (lambda p: p.name, lambda p: f"{p.parent.name}/{p.name}", str):
        names = [f(Path(p)) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [f"log{k + 1}:{p}" for k, p in enumerate(paths)]


def merge_logs(logs: list[RequestLog]) -> RequestLog:
    """Join aligned logs into one ``RequestLog`` on CLOCK_MONOTONIC (module docstring).

    Every log must be aligned (``align``) to the same capture first. ``alignment`` of the result:
    method "several logs", the largest uncertainty, and ``logs``: each log's own alignment with
    its ``source``. ``format``: the formats joined with "+". Raises ``RequestLogError`` for an
    unaligned log or the same file given twice.
    """
    if len(logs) == 1:
        return logs[0]
    paths = [Path(lg.path) for lg in logs]
    if len({p.resolve() for p in paths}) < len(paths):
        raise RepeatedLog(paths[0])
    for lg in logs:
        if lg.alignment is None:
            raise RequestLogError(lg.path, "is not aligned to the capture (align it first)")
    names = source_names(paths)
    frames, runs, notes, als = [], [], [], []
    base = 0
    for name, lg in zip(names, logs, strict=True):
        df = lg.requests.copy()
        df["request_id"] = [f"{name}:{r}" for r in df["request_id"]]
        df["source"] = name
        df["run"] = df["run"].astype("Int64") + base
        for r in lg.runs:
            runs.append({**r, "run": int(r["run"]) + base, "label": f"{name} {r['label']}",
                         "source": name})
        base += max((int(r["run"]) for r in lg.runs), default=1)
        frames.append(df)
        notes += [f"{name}: {n}" for n in lg.notes]
        als.append({**lg.alignment, "source": name})
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values(["t_send_ns", "row"], na_position="last", kind="stable")
    out = out.reset_index(drop=True)
    counts = out.groupby("source", sort=False)["ok"].agg(["size", "sum"])
    notes.insert(0, f"{len(logs)} request logs merged, each aligned on its own: " + "; ".join(
        f"{n} ({lg.format}, {int(counts.loc[n, 'sum'])} ok of {int(counts.loc[n, 'size'])}, "
        f"{lg.alignment['method']})" for n, lg in zip(names, logs, strict=True))
        + "; request ids are '<source>:<id>'")
    al = {"method": "several logs", "offset_ns": als[0]["offset_ns"],
          "uncertainty_ns": max(a["uncertainty_ns"] for a in als),
          "note": "; ".join(f"{a['source']}: {a['method']} ({a['note']})" for a in als),
          "logs": als}
    return replace(logs[0], path=Path(", ".join(str(p) for p in paths)),
                   format="+".join(dict.fromkeys(lg.format for lg in logs)),
                   clock=CLOCK_MONOTONIC, requests=out, notes=notes, alignment=al, runs=runs)
