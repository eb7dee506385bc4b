"""A Hive-partitioned Parquet dataset of byte intervals, for engines that scale out.

``write_dataset`` writes, segment by segment in bounded memory, ``DIR/host=<host>/capture=<capture>/part-0.parquet``: one row per
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
| ref_offset_ns | int64 | add to t0_ns/t1_ns to place them on the run set's reference host's CLOCK_MONOTONIC (the offset ``rdmascope cluster`` refines from the traffic); null for a capture exported alone |
| t0_unc_ns, t1_unc_ns | int64 | half the read bracket of each instant, ns (its timing uncertainty is this plus the adapter's update lag, ``INSTANT_UNC_NS``: 0.1 ms) |
| line_gbps | float64 | the device's line rate, Gb/s (``plausibility.line_ceilings``: --link-gbps, port rate, record --emulated, PCIe link); null when unknown |
| bound_gbps | float64 | the lowest rate the interval's own span [t0_ns, t1_ns) can have carried, Gb/s: its fewest bytes when each reading's instant moves within its uncertainty (``rdmascope.counters.window_fewest_bytes``, the rule of ``peaks``: F(t1 - u_b) - F(t0 + u_a), each edge's u the larger half read bracket of the interval it falls in + ``INSTANT_UNC_NS``) x 8 / duration_ns; null when unknown (bytes null, or an unknown interval within that uncertainty) |
| quality | string | ok; gap (bytes spread over missed sweeps); over_line (``rdmascope.counters.over_line``: bound_gbps > line_gbps, the judgement ``peaks`` applies to a window, here to the interval's span: a window on the grid that is this span is kept out of headline peaks); unknown (bytes null). The headline rule of ``rdmascope peaks``: a window touching a gap or unknown interval, or over the line beyond its timing uncertainty, is no headline. Rows are intervals, not the grid's windows: ``peaks`` judges windows on its grid by the same rule |

The partition columns ``host`` and ``capture`` come from the directory names (values limited to
letters, digits and ``._-``; the original names are in the file's key-value metadata under
``rdmascope.dataset``, with the manifest's counter descriptors). Types are chosen so every engine
reads them: no unsigned integers, microsecond timestamps (Spark refuses nanosecond ones) beside
the exact int64 ns columns.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rdmascope.counters import INSTANT_UNC_NS, over_line, window_fewest_bytes

from .curve import CounterCurve
from .load import capture_host, monotonic_to_realtime
from .series import FLAGS

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
    pa.field("ref_offset_ns", pa.int64()),
    pa.field("t0_unc_ns", pa.int64()),
    pa.field("t1_unc_ns", pa.int64()),
    pa.field("line_gbps", pa.float64()),
    pa.field("bound_gbps", pa.float64()),
    pa.field("quality", pa.string(), nullable=False),
])
PART_NAME = "part-0.parquet"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def partition_value(text: str) -> str:
    """A Hive partition value every engine reads back unchanged: other characters become ``_``."""
    v = _UNSAFE.sub("_", str(text)) or "_"
    return "_" + v if v.startswith(".") else v


def _str_or_none(v):
    return None if v is None or v != v else str(v)


def _int_or_none(v):
    return None if v is None or v != v else int(v)


#: Rows of one table the dataset writer builds at a time (a 60 s segment of 8 counters at 1 ms
#: is 480,000 intervals).
DATASET_CHUNK_ROWS = 100_000


def iter_capture_tables(info, ref_offset_ns: int | None = None
                        ) -> Iterator[tuple[pa.Table, list[str]]]:
    """Yield ``DATASET_SCHEMA`` tables for one capture, one per capture file, in bounded memory.

    ``info``: a ``stream.CaptureInfo`` (``stream.open_capture(path)``). The rows are the
    intervals of ``series.byte_intervals(capture, source=None)`` (``stream.iter_intervals``: the
    same rows, flags and bytes, segment by segment). ``ref_offset_ns``: the host's offset to
    the run set's reference (the ``ref_offset_ns`` column; None: null). Yields (table, notes).
    Raises as ``stream.iter_intervals``.
    """
    from .stream import iter_intervals

    c = info.counters
    notes: list[str] = []
    try:
        monotonic_to_realtime(info, np.zeros(1, np.int64))
        has_pairs = True
    except ValueError:
        has_pairs = False
        notes.append(f"{info.path}: no clock pairs; the time column is null (t0_ns/t1_ns are set)")
    start = int(info.t_start_ns)
    from rdmascope.plausibility import line_ceilings

    lines = {d: c.gbps for d, c in line_ceilings(info.meta).items()}
    prev: dict = {}
    for parts, nxt in _with_next(iter_intervals(info, source=None)):
        cols: dict[str, list] = {k: [] for k in ("t0", "t1", "b", "flag", "cid", "u0", "u1",
                                                 "low")}
        for cid, a in parts.items():
            if not len(a["t0_ns"]):
                continue
            cols["low"].append(_own_span_fewest_bytes(prev.get(cid), a, nxt.get(cid)))
            prev[cid] = _tail(a)
            cols["t0"].append(np.asarray(a["t0_ns"], np.int64))
            cols["t1"].append(np.asarray(a["t1_ns"], np.int64))
            cols["b"].append(np.asarray(a["bytes"], np.float64))
            cols["flag"].append(np.asarray(a["flag"]))
            cols["cid"].append(np.full(len(a["t0_ns"]), cid, np.int64))
            cols["u0"].append(np.asarray(a["t0_unc_ns"], np.int64))
            cols["u1"].append(np.asarray(a["t1_unc_ns"], np.int64))
        if not cols["t0"]:
            continue
        t0, t1 = np.concatenate(cols["t0"]), np.concatenate(cols["t1"])
        b, cid = np.concatenate(cols["b"]), np.concatenate(cols["cid"])
        flag = np.concatenate(cols["flag"])
        u0, u1 = np.concatenate(cols["u0"]), np.concatenate(cols["u1"])
        low_all = np.concatenate(cols["low"])
        whole = (t0, t1, b, cid, flag, u0, u1, low_all)
        # a segment's rows in slices: the Arrow table of one slice is all that is held at once
        for s0 in range(0, len(whole[0]), DATASET_CHUNK_ROWS):
            t0, t1, b, cid, flag, u0, u1, low = (x[s0:s0 + DATASET_CHUNK_ROWS] for x in whole)
            n = len(t0)
            if has_pairs:
                time = pa.array(monotonic_to_realtime(info, t0) // 1000, pa.timestamp("us", tz="UTC"))
            else:
                time = pa.nulls(n, pa.timestamp("us", tz="UTC"))
            ids = np.unique(cid)
            pos = np.searchsorted(ids, cid)
            rows = [c.loc[int(i)] for i in ids]

            take = pa.array(pos)

            def col(key, conv, typ, rows=rows, take=take):
                # one value per counter, spread to the rows by Arrow (no Python object per row)
                return pa.array([conv(r.get(key)) for r in rows], typ).take(take)

            if flag.dtype.kind in "iu":
                fcode = flag.astype(np.int64)
                flags = pa.array(list(FLAGS), pa.string()).take(pa.array(fcode))
                is_gap = fcode == list(FLAGS).index("gap")
            else:
                flags = pa.array(flag.astype(object).tolist(), pa.string())
                is_gap = flag.astype(object) == "gap"
            dev_line = np.array([np.nan if lines.get(str(r.get("device"))) is None
                                 or r.get("device") is None else float(lines[str(r.get("device"))])
                                 for r in rows], np.float64)
            line = dev_line[pos]
            dur = (t1 - t0).astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = low * 8.0 / dur  # the fewest bytes of the interval's own span
            # the over-line judgement of peaks, on the interval's span (rdmascope.counters)
            over = over_line(low, dur, line)
            qcode = np.where(np.isnan(b), 0, np.where(over, 1, np.where(is_gap, 2, 3)))
            quality = pa.array(["unknown", "over_line", "gap", "ok"], pa.string()).take(
                pa.array(qcode.astype(np.int64)))
            table = pa.table({
                "time": time,
                "t0_ns": pa.array(t0, pa.int64()), "t1_ns": pa.array(t1, pa.int64()),
                "duration_ns": pa.array(t1 - t0, pa.int64()),
                "capture_start_ns": pa.array(np.full(n, start, np.int64), pa.int64()),
                "series": col("series", str, pa.string()),
                "device": col("device", _str_or_none, pa.string()),
                "port": col("port", _int_or_none, pa.int32()),
                "direction": col("direction", _str_or_none, pa.string()),
                "source": col("source", _str_or_none, pa.string()),
                "counter": col("name", _str_or_none, pa.string()),
                "bytes_per_unit": col("bytes_per_unit", _int_or_none, pa.int32()),
                "bytes": pa.array(b, pa.float64(), mask=np.isnan(b)),
                "flag": flags,
                "ref_offset_ns": pa.array(np.full(n, ref_offset_ns or 0, np.int64), pa.int64(),
                                          mask=np.full(n, ref_offset_ns is None)),
                "t0_unc_ns": pa.array(u0, pa.int64()), "t1_unc_ns": pa.array(u1, pa.int64()),
                "line_gbps": pa.array(line, pa.float64(), mask=np.isnan(line)),
                "bound_gbps": pa.array(bound, pa.float64(), mask=~np.isfinite(bound)),
                "quality": quality,
            }, schema=DATASET_SCHEMA)
            yield table, notes
            notes = []


def _with_next(it):
    """Yield (parts, the next file's parts or {}) for each file of ``iter_intervals``: an
    interval's fewest bytes look one uncertainty beyond its end."""
    cur = None
    for parts, _bound in it:
        if cur is not None:
            yield cur, parts
        cur = parts
    if cur is not None:
        yield cur, {}


def _reach(a) -> int:
    """How far (ns) the over-line rule may look beyond an edge of these intervals."""
    u = np.maximum(np.asarray(a["t0_unc_ns"], np.int64), np.asarray(a["t1_unc_ns"], np.int64))
    return (int(u.max()) if len(u) else 0) + INSTANT_UNC_NS


def _tail(a) -> dict:
    """The intervals of ``a`` the next file's first interval may need: its last, and those
    within one uncertainty before its end."""
    t1 = np.asarray(a["t1_ns"], np.int64)
    k = min(int(np.searchsorted(t1, int(t1[-1]) - _reach(a), "left")), len(t1) - 1)
    return {key: np.asarray(a[key])[k:] for key in _IV_KEYS}


_IV_KEYS = ("t0_ns", "t1_ns", "bytes", "flag", "t0_unc_ns", "t1_unc_ns")


def _own_span_fewest_bytes(before, a, after) -> np.ndarray:
    """Per interval of one counter's ``a`` (the arrays of ``iter_intervals``): the fewest bytes
    its own span [t0, t1) can hold (``rdmascope.counters.window_fewest_bytes``, the over-line
    rule of ``peaks``), on the counter's curve through ``before`` (the previous file's tail,
    ``_tail``), ``a`` and the head of ``after`` (the next file's intervals within one
    uncertainty of ``a``'s end): the rule reads the readings around each edge. NaN where the
    span widened by its uncertainty touches an unknown interval."""
    parts = [before] if before is not None else []
    parts.append(a)
    if after is not None and len(after["t0_ns"]):
        t0n = np.asarray(after["t0_ns"], np.int64)
        reach = max(_reach(a), _reach(after))
        k = max(int(np.searchsorted(t0n, int(np.asarray(a["t1_ns"])[-1]) + reach, "right")), 1)
        parts.append({key: np.asarray(after[key])[:k] for key in _IV_KEYS})
    col = {key: np.concatenate([np.asarray(p[key]) for p in parts]) for key in _IV_KEYS}
    flag = col["flag"]
    if flag.dtype.kind not in "iu":
        flag = np.array([FLAGS.index(str(f)) for f in flag], np.int8)
    unc = np.maximum(col["t0_unc_ns"].astype(np.int64), col["t1_unc_ns"].astype(np.int64))
    c = CounterCurve(col["t0_ns"].astype(np.int64), col["t1_ns"].astype(np.int64),
                     col["bytes"].astype(np.float64), flag.astype(np.int64), unc)
    t0 = np.asarray(a["t0_ns"], np.int64)
    t1 = np.asarray(a["t1_ns"], np.int64)
    return window_fewest_bytes(c.at, c.t1, c.unc, c.nan_t0, c.nan_t1, t0, t1)


def write_dataset(paths: list[str | os.PathLike], out_dir: str | os.PathLike, *,
                  force: bool = False, offsets: dict[str, int] | None = None,
                  reference: str | None = None) -> tuple[list[tuple[Path, int]], list[str]]:
    """Write each capture's partition under ``out_dir``; return ([(file, rows)], notes).

    ``paths``: capture directories, read segment by segment (memory bounded by one segment
    whatever the capture's length). ``out_dir`` may already hold a dataset: new partitions are
    added beside the others. Raises ``ValueError`` when two captures map to the same partition,
    or a partition exists and ``force`` is False (with ``force`` only that partition is
    replaced); the ``rdmascope.capture`` errors for a bad capture; ``OSError`` on write. A
    partition is written to a hidden temporary directory and renamed into place when complete.
    ``offsets``: {host: ns to add to its monotonic times to be on ``reference``'s} (the
    refined offsets of a run set, ``cluster_reduce.refined_offsets``): the ``ref_offset_ns``
    column and the metadata's ``reference``/``ref_offset_ns``.
    """
    from .stream import open_capture

    out = Path(out_dir)
    parts: dict[Path, object] = {}
    for path in paths:
        info = open_capture(path)
        d = out / f"host={partition_value(capture_host(info))}" / \
            f"capture={partition_value(Path(str(path)).resolve().name)}"
        if d in parts:
            raise ValueError(f"{path} and {parts[d].path} map to the same partition {d} "
                             "(same host and capture directory name)")
        parts[d] = info
    for d, info in parts.items():
        if d.exists() and not force:
            raise ValueError(f"{d} already exists (an earlier export of {info.path}?); use "
                             "--force to replace that partition")
    written, notes = [], []
    for d, info in parts.items():
        meta = {"host": capture_host(info), "capture": str(info.path),
                "capture_id": info.meta.get("capture_id"),
                "start": info.meta.get("start"), "counters": info.meta.get("counters"),
                "writer": "rdmascope export dataset"}
        off = (offsets or {}).get(capture_host(info))
        if off is not None:
            meta.update(reference=reference, ref_offset_ns=int(off),
                        ref_offset_note="refined from the traffic (rdmascope cluster)")
        schema = DATASET_SCHEMA.with_metadata(
            {b"rdmascope.dataset": json.dumps(meta, default=str).encode()})
        tmp = d.with_name("." + d.name + ".tmp")  # hidden: engines skip it if left behind
        shutil.rmtree(tmp, ignore_errors=True)
        created = [p for p in (out, d.parent) if not p.exists()]  # removed again on failure
        tmp.mkdir(parents=True)
        rows = 0
        try:
            with pq.ParquetWriter(tmp / PART_NAME, schema, compression="zstd") as w:
                for table, n in iter_capture_tables(info, off):
                    notes += n
                    w.write_table(table.replace_schema_metadata(schema.metadata))
                    rows += table.num_rows
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            for p in reversed(created):  # no empty host=/dataset directory left behind
                with contextlib.suppress(OSError):
                    p.rmdir()  # only if still empty
            raise
        if d.exists():
            shutil.rmtree(d)
        tmp.rename(d)
        written.append((d / PART_NAME, rows))
    return written, notes
