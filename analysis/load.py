"""Load captures written by the sampler (or the emulator) into pandas, strictly.

Every reading goes through ``rdmascope.capture.read_capture`` (this module never imports the
sampler). The loader is strict: a foreign directory, a newer format version, a segment with the
wrong columns or a truncated/corrupted Parquet file raise the specific ``rdmascope.capture``
error, whose message names the file. A capture left by ``kill -9`` (a live Arrow IPC segment, no
stop record) loads, with ``clean_end=False``.

Data model (docs/ARCHITECTURE.md, "Analysis data model"): times are int64 ns on CLOCK_MONOTONIC;
each reading is placed at the middle of its read bracket, ``t_ns = t_before_ns +
read_duration_ns // 2``, with ``t_unc_ns = ceil(read_duration_ns / 2)`` as its timing
uncertainty (the reading happened somewhere inside the bracket).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rdmascope.capture import (
    COUNTER_KEYS,
    STATUS_OK,
    RawCapture,
    check_counter_descriptors,
    read_capture,
)
from rdmascope.plausibility import port_rates_gbps as _port_rates_gbps

__all__ = [
    "Capture",
    "capture_host",
    "load_capture",
    "load_captures",
    "counters_frame",
    "readings_frame",
    "series_name",
    "realtime_to_monotonic",
    "monotonic_to_realtime",
]

_DESCRIPTOR_KEYS = COUNTER_KEYS  # owned by rdmascope.capture



def port_rates_gbps(meta: dict[str, Any], *, override: bool = True) -> dict[str, float]:
    """Return {device: link rate in Gb/s} from a manifest's ``devices`` records.

    The highest of each device's port ``rate`` strings (e.g. 200 for "200 Gb/sec (4X HDR)") and
    netdev ``speed`` values, or the ``--link-gbps`` override: ``rdmascope.plausibility``. The
    rate string is not a reliable capacity (sysfs.md: a Spark twin reports 200 but carries ~109;
    mlx5 falls back to 40 for modes it does not know). Malformed records are skipped.
    ``override=False``: the recorded rates even while ``--link-gbps`` is in effect.
    """
    return _port_rates_gbps(meta, override=override)


class CaptureFacts:
    """What every capture view derives from ``meta``, ``path`` and its span (mixin).

    Shared by ``Capture`` (readings loaded) and ``stream.CaptureInfo`` (readings left on disk);
    needs the attributes ``meta`` (manifest dict), ``path``, ``t_start_ns`` and ``t_end_ns``.
    """

    meta: dict[str, Any]
    path: Path
    t_start_ns: int
    t_end_ns: int

    @property
    def interval_ns(self) -> int:
        """The sampling interval the sampler aimed at, ns."""
        return int(self.meta["interval_ns"])

    @property
    def name(self) -> str:
        """A short label: the host name, else the directory name."""
        return str(self.meta.get("host") or self.path.name)

    def duration_s(self) -> float:
        """Return the capture's span t_end - t_start in seconds."""
        return (self.t_end_ns - self.t_start_ns) / 1e9


@dataclass
class Capture(CaptureFacts):
    """One loaded capture.

    Attributes:
        path: the capture directory.
        meta: the manifest (dict, see ``rdmascope.capture``).
        counters: DataFrame indexed by ``counter_id`` with columns source, device, port, name,
            unit, bytes_per_unit, width_bits, direction, netdev, ``data`` (bool: a byte counter
            with a direction) and ``series`` ("<device>/<direction>" for RDMA data counters,
            "<device>:<port>/<direction>" when a device has several sampled ports,
            "netdev:<netdev>/<direction>" for netdev byte counters, None otherwise).
        readings: DataFrame (n_readings rows, sorted by counter_id then sweep): counter_id,
            sweep, t_before_ns, read_duration_ns, value (uint64; 0 where not valid), status,
            ``valid`` (status == OK and a value present), ``t_ns`` (int64, reading instant),
            ``t_unc_ns`` (int64, half the read bracket).
        clean_end: False when the manifest has no stop record (recorder killed or running).
        clock_pairs: (n, 2) int64 array of (realtime_ns, monotonic_ns).
        t_start_ns / t_end_ns: capture start (manifest) and end (stop record, else the end of
            the last read bracket), monotonic ns.
        live_rows: readings recovered from live (un-rolled) segments.
        truncated_live: live files whose last message was cut short (earlier rows kept).
    """

    path: Path
    meta: dict[str, Any]
    counters: pd.DataFrame
    readings: pd.DataFrame
    clean_end: bool
    clock_pairs: np.ndarray
    t_start_ns: int
    t_end_ns: int
    live_rows: int = 0
    truncated_live: list[Path] = field(default_factory=list)


def series_name(desc: dict[str, Any], multi_port: bool = False) -> str | None:
    """Return the series label of one counter descriptor, or None if it is not a byte counter.

    "<device>/<direction>" for RDMA data counters ("<device>:<port>/<direction>" when
    ``multi_port``), "netdev:<netdev>/<direction>" for netdev byte counters.
    """
    if desc.get("bytes_per_unit") in (None, 0) or desc.get("direction") not in ("tx", "rx"):
        return None
    if desc.get("source") == "netdev":
        nd = desc.get("netdev") or desc.get("device")
        return f"netdev:{nd}/{desc['direction']}"
    if multi_port:
        return f"{desc['device']}:{desc['port']}/{desc['direction']}"
    return f"{desc['device']}/{desc['direction']}"


def counters_frame(manifest: dict[str, Any], path: str | os.PathLike = "") -> pd.DataFrame:
    """Build the counters DataFrame (indexed by counter_id) from a manifest's descriptors.

    Raises ``CaptureSchemaError`` naming ``path`` and the counter when a descriptor lacks a key
    or has an impossible ``bytes_per_unit``/``width_bits``.
    """
    descs = manifest.get("counters")
    check_counter_descriptors(descs, path)
    # A device with data counters on several ports gets the port in its series names.
    ports: dict[tuple[str, str], set] = {}
    for d in descs:
        if d.get("source") != "netdev" and series_name(d) is not None:
            ports.setdefault((d["device"], d["direction"]), set()).add(d["port"])
    multi = {dev for (dev, _), p in ports.items() if len(p) > 1}
    rows = []
    for d in descs:
        row = {k: d[k] for k in _DESCRIPTOR_KEYS}
        row["netdev"] = d.get("netdev")
        s = series_name(d, multi_port=d["device"] in multi and d.get("source") != "netdev")
        row["data"] = s is not None
        row["series"] = s
        rows.append(row)
    df = pd.DataFrame(rows, columns=[*_DESCRIPTOR_KEYS, "netdev", "data", "series"])
    df.index = pd.RangeIndex(len(df), name="counter_id")
    return df


def readings_frame(table: pa.Table) -> pd.DataFrame:
    """Convert a SAMPLE_SCHEMA table (or record batch) to the readings DataFrame.

    Shape (n_readings, 9): the six stored columns (``value`` as uint64 with 0 where null, never
    converted to float) plus ``valid``, ``t_ns`` and ``t_unc_ns`` (int64 ns).
    """
    def col(name: str) -> np.ndarray:
        c = table.column(name)
        if isinstance(c, pa.ChunkedArray):
            c = c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)
        return c

    value = col("value")
    has_value = value.is_valid().to_numpy(zero_copy_only=False)
    value_np = pc.fill_null(value, 0).to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    status = col("status").to_numpy(zero_copy_only=False)
    t_before = col("t_before_ns").to_numpy(zero_copy_only=False)
    dur = col("read_duration_ns").to_numpy(zero_copy_only=False)
    dur64 = dur.astype(np.int64)
    return pd.DataFrame({
        "counter_id": col("counter_id").to_numpy(zero_copy_only=False),
        "sweep": col("sweep").to_numpy(zero_copy_only=False),
        "t_before_ns": t_before,
        "read_duration_ns": dur,
        "value": value_np,
        "status": status,
        "valid": (status == STATUS_OK) & has_value,
        "t_ns": t_before + dur64 // 2,
        "t_unc_ns": (dur64 + 1) // 2,
    }, copy=False)


def _capture_from_raw(raw: RawCapture) -> Capture:
    m = raw.manifest
    counters = counters_frame(m, raw.path / "manifest.json")
    readings = readings_frame(raw.table)
    raw.table = None  # release the Arrow copy early (halves peak memory on long captures)
    pairs = np.asarray(m.get("clock_pairs") or [], dtype=np.int64).reshape(-1, 2)
    start = m.get("start") or {}
    if len(readings):
        first = int(readings["t_before_ns"].min())
        last = int((readings["t_before_ns"] + readings["read_duration_ns"].astype(np.int64)).max())
    else:
        first = last = None
    t_start = start.get("monotonic_ns") if isinstance(start, dict) else None
    if t_start is None:
        t_start = first if first is not None else 0
    stop = m.get("stop")
    if isinstance(stop, dict) and stop.get("monotonic_ns") is not None:
        t_end = int(stop["monotonic_ns"])
        if last is not None:
            t_end = max(t_end, last)
    else:
        t_end = last if last is not None else int(t_start)
    return Capture(path=raw.path, meta=m, counters=counters, readings=readings,
                   clean_end=raw.clean_end, clock_pairs=pairs, t_start_ns=int(t_start),
                   t_end_ns=int(t_end), live_rows=raw.live_rows,
                   truncated_live=list(raw.truncated_live))


def load_capture(path: str | os.PathLike) -> Capture:
    """Load one capture directory (all Parquet segments plus any live segment left by a crash).

    Returns a ``Capture`` (see its docstring for the frames' columns and units).

    Raises (all from ``rdmascope.capture``, each naming the offending file): ``NotACaptureError``
    (no/foreign manifest), ``UnsupportedVersionError`` (newer format version),
    ``CaptureSchemaError`` (wrong segment columns or types, a counter_id beyond the manifest, a
    malformed counter descriptor), ``CorruptSegmentError`` (truncated or corrupted Parquet).
    """
    return _capture_from_raw(read_capture(path))


def load_captures(paths: Iterable[str | os.PathLike]) -> list[Capture]:
    """Load several captures (e.g. one per node) side by side, in the order given.

    Raises the first loader error met (see ``load_capture``); the message names the file.
    """
    return [load_capture(p) for p in paths]


def _offsets(capture: Capture) -> tuple[np.ndarray, np.ndarray]:
    pairs = capture.clock_pairs
    if len(pairs) == 0:
        start = capture.meta.get("start") or {}
        if start.get("realtime_ns") is None or start.get("monotonic_ns") is None:
            raise ValueError(f"{capture.path}: the capture has no clock pairs")
        pairs = np.array([[start["realtime_ns"], start["monotonic_ns"]]], dtype=np.int64)
    order = np.argsort(pairs[:, 1], kind="stable")
    pairs = pairs[order]
    return pairs[:, 1], pairs[:, 0] - pairs[:, 1]  # monotonic, realtime - monotonic


def _interp_offset(t: np.ndarray, x: np.ndarray, off: np.ndarray) -> np.ndarray:
    # Interpolate in coordinates relative to the first pair: realtime ns (~1.7e18) would lose
    # ~256 ns to float64 rounding if interpolated directly.
    x0, o0 = x[0], off[0]
    o = np.interp((t - x0).astype(np.float64), (x - x0).astype(np.float64),
                  (off - o0).astype(np.float64))
    return o0 + np.rint(o).astype(np.int64)


def monotonic_to_realtime(capture: Capture, monotonic_ns) -> np.ndarray:
    """Convert CLOCK_MONOTONIC ns to CLOCK_REALTIME ns via the capture's clock pairs.

    The offset (realtime - monotonic) is interpolated linearly between pairs and held constant
    beyond the first/last pair. Shape follows ``monotonic_ns``; returns int64 ns.
    Raises ``ValueError`` when the capture holds no clock pair.
    """
    mono, off = _offsets(capture)
    t = np.asarray(monotonic_ns, dtype=np.int64)
    return t + _interp_offset(t, mono, off)


def realtime_to_monotonic(capture: Capture, realtime_ns) -> np.ndarray:
    """Convert CLOCK_REALTIME ns to CLOCK_MONOTONIC ns via the capture's clock pairs.

    Inverse of ``monotonic_to_realtime`` (offset interpolated over the pairs' realtime instants,
    held constant outside). Returns int64 ns. Raises ``ValueError`` without clock pairs.
    """
    mono, off = _offsets(capture)
    t = np.asarray(realtime_ns, dtype=np.int64)
    return t - _interp_offset(t, mono + off, off)


def capture_host(cap) -> str:
    """The host a capture names in its manifest (``meta["host"]``: a name, or a dict with
    ``hostname``/``name``), "unknown-host" without one. ``cap``: anything with a ``meta`` dict
    (``Capture``, ``stream.CaptureInfo``). Used wherever captures are told apart by host
    (Perfetto processes, dataset partitions, per-host clock offsets)."""
    h = cap.meta.get("host")
    if isinstance(h, dict):
        h = h.get("hostname") or h.get("name")
    return str(h or "unknown-host")
