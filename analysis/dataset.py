"""A Hive-partitioned Parquet dataset of byte intervals, for engines that scale out.

``write_dataset`` writes ``DIR/host=<host>/capture=<capture>/part-0.parquet``: one row per
sampling interval of each byte counter (``series.byte_intervals``, RDMA port counters and netdev
statistics alike), self-describing so DuckDB, polars and Spark read it as it is:

| column | type | meaning |
|---|---|---|
| time | timestamp[us, UTC] | interval start on CLOCK_REALTIME (the capture's clock pairs); null without pairs |
| t0_ns, t1_ns | int64 | interval [start, end] on the host's CLOCK_MONOTONIC, ns (each reading's instant: the middle of its read bracket) |
| duration_ns | int64 | t1_ns - t0_ns |
| capture_start_ns | int64 | the capture's start (CLOCK_MONOTONIC ns): rdmascope's window grid origin |
| series | string | "<device>/<tx or rx>", "<device>:<port>/<dir>" or "netdev:<netdev>/<dir>" |
| device, direction, source, counter | string | RDMA device, "tx"/"rx", "infiniband"/"netdev", counter file name |
| port | int32 | port number (null for netdev counters) |
| bytes_per_unit | int32 | the counter's unit in bytes (4 for port_xmit_data/port_rcv_data) |
| bytes | float64 | bytes in the interval (counter step x bytes_per_unit); null when unknown |
| flag | string | ok, gap (missed sweeps: bytes exact, spread over a longer interval), reset, saturated, unavailable, implausible (the last four: bytes null) |

The partition columns ``host`` and ``capture`` come from the directory names (values limited to
letters, digits and ``._-``; the original names are in the file's key-value metadata under
``rdmascope.dataset``, with the manifest's counter descriptors). Types are chosen so every engine
reads them: no unsigned integers, microsecond timestamps (Spark refuses nanosecond ones) beside
the exact int64 ns columns.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .load import Capture, monotonic_to_realtime
from .series import byte_intervals

DATASET_SCHEMA = pa.schema([
    pa.field("time", pa.timestamp("us", tz="UTC")),
    pa.field("t0_ns", pa.int64(), nullable=False),
    pa.field("t1_ns", pa.int64(), nullable=False),
    pa.field("duration_ns", pa.int64(), nullable=False),
    pa.field("capture_start_ns", pa.int64(), nullable=False),
    pa.field("series", pa.string(), nullable=False),
    pa.field("device", pa.string()),
    pa.field("port", pa.int32()),
    pa.field("direction", pa.string()),
    pa.field("source", pa.string()),
    pa.field("counter", pa.string()),
    pa.field("bytes_per_unit", pa.int32()),
    pa.field("bytes", pa.float64()),
    pa.field("flag", pa.string(), nullable=False),
])
PART_NAME = "part-0.parquet"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def partition_value(text: str) -> str:
    """A Hive partition value every engine reads back unchanged: other characters become ``_``."""
    v = _UNSAFE.sub("_", str(text)) or "_"
    return "_" + v if v.startswith(".") else v


def _host(cap: Capture) -> str:
    h = cap.meta.get("host")
    if isinstance(h, dict):
        h = h.get("hostname") or h.get("name")
    return str(h or "unknown-host")


def capture_table(cap: Capture) -> tuple[pa.Table, list[str]]:
    """Return (rows of ``DATASET_SCHEMA`` for one capture, notes). Raises as ``byte_intervals``."""
    notes: list[str] = []
    iv = byte_intervals(cap, source=None)
    c = cap.counters
    n = len(iv)
    cid = iv["counter_id"].to_numpy()
    t0 = iv["t0_ns"].to_numpy(np.int64)
    t1 = iv["t1_ns"].to_numpy(np.int64)
    try:
        rt = monotonic_to_realtime(cap, t0) // 1000 if n else np.zeros(0, np.int64)
        time = pa.array(rt, pa.timestamp("us", tz="UTC"))
    except ValueError:
        time = pa.nulls(n, pa.timestamp("us", tz="UTC"))
        notes.append(f"{cap.path}: no clock pairs; the time column is null (t0_ns/t1_ns are set)")
    ports = c["port"].reindex(cid).to_numpy() if n else np.zeros(0)
    port = pa.array([None if p is None or p != p else int(p) for p in ports], pa.int32())
    bpu = c["bytes_per_unit"].reindex(cid).to_numpy() if n else np.zeros(0)
    b = iv["bytes"].to_numpy(np.float64)
    cols = {
        "time": time,
        "t0_ns": pa.array(t0, pa.int64()), "t1_ns": pa.array(t1, pa.int64()),
        "duration_ns": pa.array(t1 - t0, pa.int64()),
        "capture_start_ns": pa.array(np.full(n, int(cap.t_start_ns), np.int64), pa.int64()),
        "series": pa.array(iv["series"].astype(str).tolist(), pa.string()),
        "device": pa.array(iv["device"].astype(object).where(iv["device"].notna(), None).tolist(),
                           pa.string()),
        "port": port,
        "direction": pa.array(iv["direction"].astype(object).tolist(), pa.string()),
        "source": pa.array(iv["source"].astype(object).tolist(), pa.string()),
        "counter": pa.array(c["name"].reindex(cid).astype(object).tolist(), pa.string()),
        "bytes_per_unit": pa.array([None if v is None or v != v else int(v) for v in bpu],
                                   pa.int32()),
        "bytes": pa.array(b, pa.float64(), mask=np.isnan(b)),
        "flag": pa.array(iv["flag"].astype(str).tolist(), pa.string()),
    }
    return pa.table(cols, schema=DATASET_SCHEMA), notes


def write_dataset(captures: list[Capture], out_dir: str | os.PathLike, *,
                  force: bool = False) -> tuple[list[tuple[Path, int]], list[str]]:
    """Write each capture's partition under ``out_dir``; return ([(file, rows)], notes).

    ``out_dir`` may already hold a dataset: new partitions are added beside the others. Raises
    ``ValueError`` when two captures map to the same partition, or a partition exists and
    ``force`` is False (with ``force`` only that partition is replaced); ``OSError`` on write.
    """
    out = Path(out_dir)
    parts: dict[Path, Capture] = {}
    for cap in captures:
        d = out / f"host={partition_value(_host(cap))}" / \
            f"capture={partition_value(Path(str(cap.path)).resolve().name)}"
        if d in parts:
            raise ValueError(f"{cap.path} and {parts[d].path} map to the same partition {d} "
                             "(same host and capture directory name)")
        parts[d] = cap
    for d, cap in parts.items():
        if d.exists() and not force:
            raise ValueError(f"{d} already exists (an earlier export of {cap.path}?); use --force "
                             "to replace that partition")
    written, notes = [], []
    for d, cap in parts.items():
        table, n = capture_table(cap)
        notes += n
        meta = {"host": _host(cap), "capture": str(cap.path),
                "capture_id": cap.meta.get("capture_id"),
                "start": cap.meta.get("start"), "counters": cap.meta.get("counters"),
                "writer": "rdmascope export dataset"}
        table = table.replace_schema_metadata({
            **(table.schema.metadata or {}),
            b"rdmascope.dataset": json.dumps(meta, default=str).encode()})
        tmp = d.with_name("." + d.name + ".tmp")  # hidden: engines skip it if left behind
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        pq.write_table(table, tmp / PART_NAME, compression="zstd")
        if d.exists():
            shutil.rmtree(d)
        tmp.rename(d)
        written.append((d / PART_NAME, table.num_rows))
    return written, notes
