"""Build small hand-made captures for the analysis tests (CaptureWriter + make_batch).

Each reading is given as (t_before_ns, read_duration_ns, value, status); ``value`` None for an
unavailable reading. Times are small integers of ns so expectations can be computed by hand.
"""

from __future__ import annotations

from pathlib import Path

from rdmascope.capture import STATUS_OK, STATUS_READ_ERROR, CaptureWriter, make_batch

MS = 1_000_000
T0 = 1_000_000_000  # capture start, monotonic ns

__all__ = ["MS", "T0", "ib", "netdev", "write_capture", "relist_segments", "STATUS_OK",
           "STATUS_READ_ERROR"]


def relist_segments(path: Path) -> None:
    """Re-record every segment's size, rows and SHA-256 in the manifest after a test rewrote one.

    Tests that plant a segment with another schema or format version use this to make the capture
    self-consistent again (as a writer of that other version would have left it), so the check
    under test, not the manifest's digest, is what refuses the file.
    """
    import json

    import pyarrow.parquet as pq

    from rdmascope.capture import MANIFEST_NAME, SEGMENT_DIR, segment_entry

    mpath = Path(path) / MANIFEST_NAME
    m = json.loads(mpath.read_text())
    m["segments"] = [segment_entry(f, f.name, pq.ParquetFile(f).metadata.num_rows)
                     for f in sorted((Path(path) / SEGMENT_DIR).glob("seg-*.parquet"))]
    mpath.write_text(json.dumps(m))


def ib(device: str, direction: str, *, port: int = 1, width_bits: int | None = 64) -> dict:
    """An RDMA data counter descriptor (port_xmit_data / port_rcv_data, 4 bytes per unit)."""
    name = "port_xmit_data" if direction == "tx" else "port_rcv_data"
    return {"source": "infiniband", "device": device, "port": port, "name": name,
            "path": f"/sys/class/infiniband/{device}/ports/{port}/counters/{name}",
            "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": width_bits,
            "direction": direction}


def netdev(device: str, nd: str, direction: str) -> dict:
    """A netdev statistics byte counter descriptor (tx_bytes / rx_bytes, 1 byte per unit)."""
    name = f"{direction}_bytes"
    return {"source": "netdev", "device": device, "netdev": nd, "port": None, "name": name,
            "path": f"/sys/class/net/{nd}/statistics/{name}", "unit": "bytes",
            "bytes_per_unit": 1, "width_bits": None, "direction": direction}


def write_capture(path: Path, counters: list[dict], readings: dict[int, list[tuple]], *,
                  interval_ns: int = MS, close: bool = True, devices: list[dict] | None = None,
                  roll_every: int | None = None) -> Path:
    """Write a capture with ``readings[counter_id] = [(t_before, dur, value, status), ...]``.

    Readings are written sweep by sweep (sweep k = k-th reading of each counter), one batch per
    sweep, rolled into a Parquet segment every ``roll_every`` sweeps. ``close=False`` leaves
    the live segment and no stop record, as a ``kill -9`` would.
    """
    w = CaptureWriter.create(path, {
        "counters": counters, "interval_ns": interval_ns, "devices": devices or [],
        "start": {"monotonic_ns": T0, "realtime_ns": 1_700_000_000 * 10**9 + T0},
        "clock_pairs": [[1_700_000_000 * 10**9 + T0, T0]],
        "writer": "simulate", "sampler_version": "test",
    })
    n = max(len(v) for v in readings.values())
    for k in range(n):
        rows = [(cid, k, *rs[k]) for cid, rs in sorted(readings.items()) if k < len(rs)]
        cols = list(zip(*rows, strict=True))
        w.write_batch(make_batch(*cols))
        if roll_every and (k + 1) % roll_every == 0:
            w.roll()
    if close:
        last = max(r[-1][0] + r[-1][1] for r in readings.values())
        w.close(stop={"monotonic_ns": last + 1000, "realtime_ns": 1_700_000_000 * 10**9 + last})
    # else: leave it as kill -9 would: write_batch has flushed every batch, nothing is rolled
    return path
