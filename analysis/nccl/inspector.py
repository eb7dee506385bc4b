"""Read NCCL Inspector records (``NCCL_INSPECTOR_ENABLE=1``): one JSON object per collective.

Layout, from the writer (NVIDIA/nccl ``plugins/profiler/inspector/inspector_json.cc``, earlier
``ext-profiler/inspector/inspector.cc``, NCCL 2.28+; format ``"v4.0"`` throughout): each line of
``<NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log`` is
``{"header": {id, comm_name (2.30+), rank, n_ranks, nnodes}, "metadata":
{inspector_output_format_version, git_rev, rec_mechanism, dump_timestamp_us, hostname, pid},
"coll_perf": {coll, coll_sn, coll_msg_size_bytes, coll_exec_time_us, coll_timing_source,
coll_algobw_gbs, coll_busbw_gbs[, event_trace_sn, event_trace_ts]}}`` (or ``p2p_perf``).

Clock: every ``*_ts`` and ``dump_timestamp_us`` is ``gettimeofday()`` in microseconds since the
epoch (``inspectorGetTime``), i.e. CLOCK_REALTIME. Without ``NCCL_INSPECTOR_DUMP_VERBOSE=1``
there is no per-collective time: only the dump time, at or after the collective's end (by up to
the dump interval), so such records are placed as ``[dump - exec, dump]`` with the placement
marked "dump" and an uncertainty of ``dump_slack_us``. Verbose records carry
``event_trace_ts.kernel_events[].kernel_start_ts`` / ``kernel_stop_ts`` (CPU times of the
profiler callbacks): placed from the earliest kernel start ("kernel").

``coll_busbw_gbs`` is NCCL's bus bandwidth in GB/s (10^9 bytes/s): algorithm bandwidth
(``size / time``, x nranks for AllGather/ReduceScatter) times ``2(n-1)/n`` for AllReduce,
``(n-1)/n`` for AllGather/ReduceScatter, 1 otherwise (``inspectorComputeOpBw``, after
nccl-tests' PERFORMANCE.md).

The Prometheus textfile variant (``NCCL_INSPECTOR_PROM_DUMP=1``,
``nccl_inspector_metrics_<gpu uuid>.prom``) holds per-interval aggregates per (communicator,
collective, message-size bucket, algo_proto): ``nccl_bus_bandwidth_gbs`` (geometric mean) and
``nccl_collective_exec_time_microseconds`` (mean); it cannot place single collectives and is read
as such (``read_prometheus``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

__all__ = ["InspectorError", "read_inspector", "read_prometheus", "KNOWN_FORMATS",
           "expected_wire_bytes"]

#: format versions whose layout this reader knows (major "v4")
KNOWN_FORMATS = ("v4",)


class InspectorError(ValueError):
    """An Inspector file that cannot be read (names the file and line)."""


def expected_wire_bytes(coll: str, size: float, nranks: int) -> float:
    """Bytes each rank sends on the wire for one collective, by NCCL's bus-bandwidth factors.

    AllReduce (ring): ``2(n-1)/n x size``; AllGather / ReduceScatter: ``(n-1) x size`` (size is
    the per-rank count in the Inspector's ``coll_msg_size_bytes``; traffic = size x n, factor
    (n-1)/n); Broadcast / Reduce / Send / Recv: ``size``. NaN for an unknown collective.
    Source: ``inspectorComputeOpBw`` (NCCL Inspector) and nccl-tests doc/PERFORMANCE.md.
    """
    n = max(int(nranks), 1)
    c = coll.lower()
    if c == "allreduce":
        return 2.0 * (n - 1) / n * size
    if c in ("allgather", "allgatherv", "reducescatter"):
        return (n - 1) * size
    if c in ("broadcast", "reduce", "send", "recv", "sendrecv"):
        return float(size)
    return float("nan")


def _files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            kids = sorted(q for q in p.rglob("*") if q.is_file() and q.suffix in (".log", ".json",
                                                                                ".jsonl", ".prom"))
            if not kids:
                raise InspectorError(f"{p}: no Inspector file (*.log, *.json, *.prom) in this "
                                     "directory")
            out += kids
        elif p.is_file():
            out.append(p)
        else:
            raise InspectorError(f"{p}: no such file or directory")
    return out


def read_inspector(paths: Iterable[str | os.PathLike], *, dump_slack_us: float = 1_000_000.0
                   ) -> pd.DataFrame:
    """Read Inspector JSON records (files or directories) into one row per collective.

    Columns: file, line, host, pid, comm, comm_name, rank, nranks, nnodes, coll, sn, size_bytes,
    exec_us, algobw_gbs, busbw_gbs, timing_source, start_us, end_us (realtime microseconds),
    placement ("kernel" or "dump"), uncertainty_us. P2P records are kept with coll = their
    operation. ``.prom`` files are skipped here (see ``read_prometheus``).

    A last line the file ends inside (no newline: a rank killed mid-write) is skipped and said in
    ``attrs["notes"]``, once records were read before it. Raises ``InspectorError`` naming file
    and line for a line that is not JSON, a record
    without the fields above, or a format version this reader does not know (a future one).
    """
    rows = []
    notes: list[str] = []
    for f in _files(paths):
        if f.suffix == ".prom":
            continue
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise InspectorError(f"{f}: cannot read: {exc.strerror or exc}") from exc
        if b"\x00" in data:
            at = data.count(b"\n", 0, data.find(b"\x00")) + 1
            raise InspectorError(f"{f}: line {at}: not a text file (a NUL byte); expected "
                                 "Inspector JSON lines")
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines()
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                if no == len(lines) and not text.endswith("\n") and rows:
                    # the file ends inside its last record (a rank killed mid-write, or a
                    # file copied while NCCL wrote it): that record alone is lost, not the file
                    notes.append(f"{f}: line {no}: truncated (the file ends inside it): that "
                                 f"record skipped, the {no - 1:,} lines before it read")
                    continue
                raise InspectorError(
                    f"{f}: line {no}: not JSON ({exc.msg}); expected one Inspector record per "
                    "line") from exc
            rows.append(_row(f, no, rec, dump_slack_us))
    cols = ["file", "line", "host", "pid", "comm", "comm_name", "rank", "nranks", "nnodes", "coll",
            "sn", "size_bytes", "exec_us", "algobw_gbs", "busbw_gbs", "timing_source", "start_us",
            "end_us", "placement", "uncertainty_us"]
    df = pd.DataFrame(rows, columns=cols)
    df.attrs["notes"] = notes
    return df


def _row(f: Path, no: int, rec, slack: float) -> dict:
    def bad(what):
        return InspectorError(f"{f}: line {no}: {what}")

    if not isinstance(rec, dict):
        raise bad("not a JSON object; expected an Inspector record")
    meta, head = rec.get("metadata"), rec.get("header")
    if not isinstance(meta, dict) or not isinstance(head, dict):
        raise bad("no 'header'/'metadata' object: not an NCCL Inspector record")
    ver = str(meta.get("inspector_output_format_version", ""))
    if ver.split(".")[0] not in KNOWN_FORMATS:
        raise bad(f"inspector_output_format_version {ver!r}: this reader knows "
                  f"{', '.join(v + '.x' for v in KNOWN_FORMATS)}; a newer rdmascope may read it")
    perf = rec.get("coll_perf")
    kind = "coll"
    if perf is None:
        perf, kind = rec.get("p2p_perf"), "p2p"
    if not isinstance(perf, dict):
        raise bad("neither 'coll_perf' nor 'p2p_perf'")
    try:
        size = int(perf[f"{kind}_msg_size_bytes"])
        exec_us = float(perf[f"{kind}_exec_time_us"])
        dump = float(meta["dump_timestamp_us"])
        nranks = int(head["n_ranks"])
        name = str(perf[kind])
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"missing or non-numeric field {exc}; expected {kind}_msg_size_bytes, "
                  f"{kind}_exec_time_us, metadata.dump_timestamp_us, header.n_ranks") from exc
    start = end = None
    placement, unc = "dump", slack
    ts = perf.get("event_trace_ts")
    if isinstance(ts, dict):
        ks = [k for k in ts.get("kernel_events") or [] if isinstance(k, dict)]
        starts = [float(k["kernel_start_ts"]) for k in ks if k.get("kernel_start_ts")]
        if starts:
            start = min(starts)
            end = start + exec_us
            stops = [float(k["kernel_stop_ts"]) for k in ks if k.get("kernel_stop_ts")]
            placement = "kernel"
            unc = max(abs(max(stops) - end), 0.0) if stops else exec_us
    if start is None:
        end, start = dump, dump - exec_us

    def num(key):
        v = perf.get(f"{kind}_{key}")
        try:
            return float(v)
        except (TypeError, ValueError):
            return float("nan")

    return {"file": str(f), "line": no, "host": str(meta.get("hostname", "")),
            "pid": meta.get("pid"), "comm": str(head.get("id", "")),
            "comm_name": head.get("comm_name"), "rank": head.get("rank"), "nranks": nranks,
            "nnodes": head.get("nnodes"), "coll": name, "sn": perf.get(f"{kind}_sn"),
            "size_bytes": size, "exec_us": exec_us, "algobw_gbs": num("algobw_gbs"),
            "busbw_gbs": num("busbw_gbs"), "timing_source": perf.get(f"{kind}_timing_source"),
            "start_us": start, "end_us": end, "placement": placement, "uncertainty_us": unc}


_PROM = re.compile(r"^(?P<metric>nccl_\w+)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def read_prometheus(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Read Inspector Prometheus textfiles (``*.prom``): one row per metric sample with its
    labels (version, node, gpu, comm_name, nranks, collective, message_size, algo_proto, ...),
    ``metric`` and ``value``. Lines that are comments or other metrics are skipped. Raises
    ``InspectorError`` naming the file and line for an ``nccl_`` sample that does not parse."""
    rows = []
    for f in _files(paths):
        if f.suffix != ".prom":
            continue
        for no, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if not line.startswith("nccl_"):
                continue
            m = _PROM.match(line)
            if not m or _LABEL.sub("", m["labels"]).replace(",", "").strip():
                raise InspectorError(f"{f}: line {no}: not a Prometheus sample: {line[:80]!r}")
            try:
                value = float(m["value"])
            except ValueError as exc:
                raise InspectorError(f"{f}: line {no}: value {m['value']!r} is not a number") from exc
            rows.append({"file": str(f), "line": no, "metric": m["metric"], "value": value,
                         **dict(_LABEL.findall(m["labels"]))})
    return pd.DataFrame(rows)
