"""The capture format's schema: names, version, the readings' columns, errors, manifest checks.

See ``rdmascope.capture`` for the format (directory layout, columns, manifest keys). This module
holds what both sides share: the writer (``rdmascope.capture.writer``) and the reader
(``rdmascope.capture.reader``) import it; it imports neither.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

FORMAT_NAME = "rdmascope-capture"
#: 2: every segment and live file stores its capture's id, counter descriptors and interval
#: (``SEGMENT_CAPTURE_ID_KEY``, ``SEGMENT_COUNTERS_KEY``, ``SEGMENT_INTERVAL_KEY``), checked
#: against the manifest on every read. 1: no id (still read; descriptors checked when stored).
FORMAT_VERSION = 2
#: the versions this rdmascope reads
READABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
SEGMENT_DIR = "segments"
LIVE_PREFIX = "live-"
LIVE_SUFFIX = ".arrow"
SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".parquet"
#: Lock file of a capture being written (see the module docstring); readers ignore it.
LOCK_NAME = ".lock"

#: A flush of the live segment happens at least this often, bounding what a kill -9 can lose.
FLUSH_INTERVAL_S = 0.5
#: A live segment is rolled into a Parquet segment after this many seconds of readings.
ROLL_INTERVAL_S = 60.0

STATUS_OK = 0
STATUS_READ_ERROR = 1  # read() failed with an errno
STATUS_PARSE_ERROR = 2  # the file's content was not an unsigned integer
STATUS_MISSING = 3  # the file is gone / could not be (re)opened
STATUS_NAMES = {
    STATUS_OK: "ok",
    STATUS_READ_ERROR: "read_error",
    STATUS_PARSE_ERROR: "parse_error",
    STATUS_MISSING: "missing",
}

SAMPLE_SCHEMA = pa.schema(
    [
        pa.field("counter_id", pa.uint16(), nullable=False),
        pa.field("sweep", pa.int64(), nullable=False),
        pa.field("t_before_ns", pa.int64(), nullable=False),
        pa.field("read_duration_ns", pa.uint32(), nullable=False),
        pa.field("value", pa.uint64(), nullable=True),
        pa.field("status", pa.uint8(), nullable=False),
    ],
    metadata={b"rdmascope.format": FORMAT_NAME.encode(),
              b"rdmascope.format_version": str(FORMAT_VERSION).encode()},
)
COLUMNS = tuple(SAMPLE_SCHEMA.names)


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


class CaptureError(Exception):
    """Base class: something is wrong with a capture. ``path`` names the file or directory."""

    def __init__(self, path: str | os.PathLike, message: str):
        self.path = str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}")


class NotACaptureError(CaptureError):
    """The directory has no manifest, or the manifest is not an rdmascope capture manifest."""


class UnsupportedVersionError(CaptureError):
    """The capture was written by a newer (or unknown) format version than this reader supports."""


class CaptureSchemaError(CaptureError):
    """A segment's columns or types differ from SAMPLE_SCHEMA, or the manifest lacks a key."""


class CorruptSegmentError(CaptureError):
    """A Parquet segment cannot be read (truncated or corrupted)."""


class CaptureExistsError(CaptureError):
    """Refusing to overwrite an existing capture without ``force``."""


class CaptureLockedError(CaptureExistsError):
    """Another process is writing the capture (it holds the capture's lock); ``pid`` is its pid."""

    def __init__(self, path: str | os.PathLike, pid: int | None):
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(path, f"capture is being recorded by another process ({who}); refusing "
                               "a second writer, even with --force (stop that recorder first, "
                               "or record into another directory)")


class CaptureWriteError(CaptureError):
    """Writing failed (disk full, directory unwritable, ...). What was written before is intact."""


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def clock_pair() -> tuple[int, int]:
    """Return one (CLOCK_REALTIME ns, CLOCK_MONOTONIC ns) pair taken as close together as possible.

    Takes realtime between two monotonic readings and keeps the pair of the tightest of three tries,
    placing monotonic at the midpoint. Monotonic is ``time.perf_counter_ns`` (CLOCK_MONOTONIC on
    Linux, the clock of ``time.perf_counter()`` that benchmark clients use).
    """
    best = None
    for _ in range(3):
        m0 = time.perf_counter_ns()
        rt = time.time_ns()
        m1 = time.perf_counter_ns()
        if best is None or (m1 - m0) < best[0]:
            best = (m1 - m0, rt, (m0 + m1) // 2)
    return best[1], best[2]


def host_metadata() -> dict[str, Any]:
    """Return {host, kernel, python} for the manifest."""
    return {
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def empty_table() -> pa.Table:
    """Return an empty table with SAMPLE_SCHEMA."""
    return SAMPLE_SCHEMA.empty_table()


def make_batch(counter_id, sweep, t_before_ns, read_duration_ns, value, status) -> pa.RecordBatch:
    """Build a record batch with SAMPLE_SCHEMA from six equal-length sequences (lists/arrays).

    ``value`` may contain None (for non-OK rows). Raises ``ValueError`` on unequal lengths.
    """
    arrays = [
        pa.array(counter_id, pa.uint16()),
        pa.array(sweep, pa.int64()),
        pa.array(t_before_ns, pa.int64()),
        pa.array(read_duration_ns, pa.uint32()),
        pa.array(value, pa.uint64()),
        pa.array(status, pa.uint8()),
    ]
    n = {len(a) for a in arrays}
    if len(n) != 1:
        raise ValueError(f"columns have unequal lengths: {[len(a) for a in arrays]}")
    return pa.RecordBatch.from_arrays(arrays, schema=SAMPLE_SCHEMA)


#: Parquet key-value metadata of a segment holding its counter descriptors (JSON list, index =
#: counter_id), so a segment alone says which counter is which. ``PANDAS_ATTRS`` holds the same
#: as ``{"rdmascope.counters": [...]}``: pandas (>= 2.1) restores it as ``DataFrame.attrs`` in
#: ``pd.read_parquet(segment)``. Segments written before these keys existed have neither and stay
#: readable (the keys are optional; the manifest remains the reference).
SEGMENT_COUNTERS_KEY = b"rdmascope.counters"
#: Format version 2: the capture id (the manifest's ``capture_id``) and ``interval_ns`` of the
#: capture a segment or live file belongs to, in its schema metadata.
SEGMENT_CAPTURE_ID_KEY = b"rdmascope.capture_id"
SEGMENT_INTERVAL_KEY = b"rdmascope.interval_ns"
#: The descriptor keys a segment's stored counters must share with the manifest's.
CHECKED_COUNTER_KEYS = ("source", "device", "port", "name", "unit", "bytes_per_unit",
                        "width_bits", "direction", "byte_source")


def origin_metadata(manifest: dict[str, Any]) -> dict[bytes, bytes]:
    """The schema metadata tying a segment or live file to its capture (format version 2):
    capture id, counter descriptors (with ``counter_id``; also as pandas' ``PANDAS_ATTRS``)
    and ``interval_ns``."""
    desc = [{"counter_id": i, **c} for i, c in enumerate(manifest.get("counters") or [])]
    out = {SEGMENT_COUNTERS_KEY: json.dumps(desc).encode(),
           b"PANDAS_ATTRS": json.dumps({SEGMENT_COUNTERS_KEY.decode(): desc}).encode()}
    if manifest.get("capture_id") is not None:
        out[SEGMENT_CAPTURE_ID_KEY] = str(manifest["capture_id"]).encode()
    if manifest.get("interval_ns") is not None:
        out[SEGMENT_INTERVAL_KEY] = str(int(manifest["interval_ns"])).encode()
    return out


def check_origin(path: str | os.PathLike, meta: dict[bytes, bytes] | None,
                 manifest: dict[str, Any]) -> None:
    """Refuse a segment or live file (``path``, its schema metadata ``meta``) that is not this
    capture's: another capture's id, or (format version >= 2) no id at all; counter
    descriptors or ``interval_ns`` that differ from the manifest's (an edited manifest or a
    foreign file). Raises ``CaptureSchemaError`` naming the file, the counter and the key."""
    meta = meta or {}
    version = manifest.get("format_version", 1)
    cid = meta.get(SEGMENT_CAPTURE_ID_KEY)
    if cid is not None:
        got = cid.decode("utf-8", "replace")
        if got != manifest.get("capture_id"):
            raise CaptureSchemaError(path, f"belongs to another capture (capture id {got}; this "
                                           f"capture is {manifest.get('capture_id')}): it was "
                                           "copied in from elsewhere; remove it, or keep it "
                                           "with its own capture")
    elif _is_int(version) and version >= 2:
        raise CaptureSchemaError(path, f"carries no capture id although the manifest (format "
                                       f"version {version}) says every segment does: it was not "
                                       "written into this capture (a segment of an older "
                                       "capture copied in?)")
    raw = meta.get(SEGMENT_COUNTERS_KEY)
    if raw is not None:
        try:
            stored = json.loads(raw)
            if not isinstance(stored, list) or not all(isinstance(c, dict) for c in stored):
                raise ValueError("not a list of objects")
        except ValueError as exc:
            raise CorruptSegmentError(path, f"its stored counter descriptors are unreadable "
                                            f"({exc})") from exc
        mine = manifest.get("counters") or []
        if len(stored) > len(mine):
            raise CaptureSchemaError(path, f"stores {len(stored)} counter descriptors but the "
                                           f"manifest lists {len(mine)} counters; the manifest "
                                           "was edited or the file is another capture's")
        for i, (a, b) in enumerate(zip(stored, mine, strict=False)):
            for key in CHECKED_COUNTER_KEYS:
                if a.get(key) != b.get(key):
                    raise CaptureSchemaError(
                        path, f"counter {i} ({b.get('device')} {b.get('name')}): {key!r} is "
                              f"{json.dumps(b.get(key))} in the manifest but "
                              f"{json.dumps(a.get(key))} in this file, which was written with "
                              "it; the manifest was edited or the file is another capture's")
    iv = meta.get(SEGMENT_INTERVAL_KEY)
    if iv is not None:
        try:
            got_iv = int(iv)
        except ValueError:
            got_iv = None
        if got_iv != manifest.get("interval_ns"):
            raise CaptureSchemaError(path, f"was written at interval_ns {iv.decode('ascii', 'replace')}"
                                           f" but the manifest says {manifest.get('interval_ns')}"
                                           "; the manifest was edited or the file is another "
                                           "capture's")

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


COUNTER_KEYS = ("source", "device", "port", "name", "unit", "bytes_per_unit", "width_bits",
                "direction")
#: Values of the optional descriptor key ``byte_source`` (see MANIFEST KEYS).
BYTE_SOURCE_FILES = ("counters/port_xmit_data", "counters/port_rcv_data",
                     "counters_ext/port_xmit_data_64", "counters_ext/port_rcv_data_64",
                     "hw_counters/tx_bytes", "hw_counters/rx_bytes",
                     "hw_counters/ip4OutOctets", "hw_counters/ip6OutOctets",
                     "hw_counters/ip4InOctets", "hw_counters/ip6InOctets")


def check_counter_descriptors(counters: Any, path: str | os.PathLike) -> None:
    """Check a manifest's ``counters`` list (see MANIFEST KEYS); raise ``CaptureSchemaError``.

    Each descriptor must be an object with ``COUNTER_KEYS``; ``bytes_per_unit`` an integer
    1..2**32 or null; ``width_bits`` an integer 1..64 or null; ``port`` an integer 0..65535 or
    null. The message names ``path`` and the counter.
    Used when writing and reading a manifest, and by the analysis when it builds its counter table.
    """
    if not isinstance(counters, list) or not all(isinstance(c, dict) for c in counters):
        shown = json.dumps(counters, default=str)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise CaptureSchemaError(path, f"manifest key 'counters' must be a list of objects, "
                                       f"got {shown}")
    for i, c in enumerate(counters):
        lacking = [k for k in COUNTER_KEYS if k not in c]
        if lacking:
            raise CaptureSchemaError(
                path, f"manifest 'counters' descriptor {i} lacks key(s): {', '.join(lacking)}")
        who = f"manifest counter {i}"
        for key in ("source", "device", "name", "unit"):
            if not isinstance(c[key], str):
                raise CaptureSchemaError(path, f"{who}: {key!r} must be a string, got "
                                               f"{json.dumps(c[key], default=str)}")
        if not (c["port"] is None or (_is_int(c["port"]) and 0 <= c["port"] <= 65535)):
            raise CaptureSchemaError(path, f"{who}: 'port' must be an integer 0..65535 or null, "
                                           f"got {json.dumps(c['port'], default=str)}")
        if c["direction"] not in ("tx", "rx", None):
            raise CaptureSchemaError(path, f"{who}: 'direction' must be \"tx\", \"rx\" or "
                                           f"null, got {json.dumps(c['direction'], default=str)}")
        for key, hi in (("bytes_per_unit", 1 << 32), ("width_bits", 64)):
            v = c[key]
            if not (v is None or (_is_int(v) and 0 < v <= hi)):
                expected = f"an integer 1..{hi}"
                raise CaptureSchemaError(
                    path, f"manifest counter {i} ({c.get('device')} {c.get('name')}): {key!r} "
                          f"must be {expected} or null, got {json.dumps(v)}")
        bs = c.get("byte_source")
        if bs is not None and bs not in BYTE_SOURCE_FILES:
            raise CaptureSchemaError(
                path, f"manifest counter {i} ({c.get('device')} {c.get('name')}): "
                      f"'byte_source' must be one of {', '.join(BYTE_SOURCE_FILES)} or absent, "
                      f"got {json.dumps(bs)}")


#: The largest nanosecond instant or count a manifest may hold. Every reader takes them as int64
#: (numpy, Arrow); kept to 0..2**62 (146 years) so that the difference or sum of two stays
#: within int64. A value beyond it (an edited manifest) is refused naming the key.
NS_MAX = 1 << 62
#: The longest sampling interval a manifest may state (one day, in ns).
INTERVAL_NS_MAX = 86_400 * 10**9


def _ns(v: Any) -> bool:
    return _is_int(v) and 0 <= v <= NS_MAX


def _instant(v: Any) -> bool:
    return isinstance(v, dict) and _ns(v.get("monotonic_ns")) and _ns(v.get("realtime_ns"))


def _objects(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


def _pairs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, list) and len(x) == 2
                                       and all(_ns(y) for y in x) for x in v)


_NS_RANGE = f"0..{NS_MAX} (2**62)"
_INSTANT = f"an object with integer monotonic_ns and realtime_ns, each {_NS_RANGE} ns"

#: The manifest's top-level keys that the reader relies on (see MANIFEST KEYS in
#: ``rdmascope.capture``): key -> (required, what its value must be, the check). One table,
#: one check (``_check_manifest_types``, run when a manifest is written and when it is read):
#: a required key that is missing, or a value of the wrong type, is refused naming the file
#: and the key. Other keys (``writer``, ``kernel``, ``command_line``, ...) are free-form.
MANIFEST_FIELDS: dict[str, tuple[bool, str, Any]] = {
    "format": (True, f'"{FORMAT_NAME}"', lambda v: v == FORMAT_NAME),
    "format_version": (True, "a positive integer", lambda v: _is_int(v) and v >= 1),
    "capture_id": (True, "a non-empty string", lambda v: isinstance(v, str) and v != ""),
    "host": (True, "a non-empty string", lambda v: isinstance(v, str) and v != ""),
    "clock": (True, '"CLOCK_MONOTONIC"', lambda v: v == "CLOCK_MONOTONIC"),
    "interval_ns": (True, f"a positive integer (ns) up to {INTERVAL_NS_MAX} (one day)",
                    lambda v: _is_int(v) and 0 < v <= INTERVAL_NS_MAX),
    "start": (True, _INSTANT, _instant),
    "stop": (True, _INSTANT + " (or null)", lambda v: v is None or _instant(v)),
    "clock_pairs": (True, f"a list of [realtime_ns, monotonic_ns] integer pairs, each "
                          f"{_NS_RANGE}", _pairs),
    "devices": (True, "a list of objects", _objects),
    "counters": (True, "a list of objects", _objects),
    "events": (True, "a list of objects", _objects),
    "discovered_devices": (False, "a list of objects", _objects),
    "device_changes": (False, "a list of objects", _objects),
    "segments": (False, "a list of objects", _objects),
    "audit": (False, "an object or null", lambda v: v is None or isinstance(v, dict)),
    "extra": (False, "an object or null", lambda v: v is None or isinstance(v, dict)),
}

#: The keys every manifest has (``MANIFEST_FIELDS``' required ones).
REQUIRED_MANIFEST_KEYS = tuple(k for k, (required, _, _) in MANIFEST_FIELDS.items() if required)

#: Keys every entry of a list-of-objects key must have.
_ENTRY_KEYS = {"devices": ("name",), "discovered_devices": ("name",),
               "segments": ("name", "rows", "bytes", "sha256")}


def _check_manifest_types(mpath: Path, m: dict[str, Any]) -> None:
    """Raise ``CaptureSchemaError`` naming the file and the key when a required key of
    ``MANIFEST_FIELDS`` is missing or a value has the wrong type.

    A valid-JSON manifest without ``devices``, with ``"counters": null`` or with
    ``"interval_ns": "abc"`` must be refused here, with the key named, rather than be read
    as something else or crash a reader later. Ranges too: nanosecond instants and counts
    within 0..``NS_MAX``, ``interval_ns`` up to one day, ``stop`` not before ``start``.
    What needs the files (counters non-empty and matching the segments' descriptors, the start
    against the first readings) is ``rdmascope.capture.reader.read_manifest``'s.
    """
    def bad(key: str, expected: str, got: Any) -> CaptureSchemaError:
        shown = json.dumps(got, default=str)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return CaptureSchemaError(mpath, f"manifest key {key!r} must be {expected}, got {shown}")

    missing = [k for k in REQUIRED_MANIFEST_KEYS if k not in m]
    if missing:
        raise CaptureSchemaError(mpath, "manifest lacks required key(s): " + "; ".join(
            f"{k!r} ({MANIFEST_FIELDS[k][1]})" for k in missing))
    for key, (_, expected, ok) in MANIFEST_FIELDS.items():
        if key in m and not ok(m[key]):
            raise bad(key, expected, m[key])
    check_counter_descriptors(m["counters"], mpath)
    for key, required in _ENTRY_KEYS.items():
        for i, x in enumerate(m.get(key) or []):
            lacking = [r for r in required if r not in x]
            if lacking:
                raise CaptureSchemaError(
                    mpath, f"manifest {key!r} entry {i} lacks key(s): {', '.join(lacking)}")
    for i, rec in enumerate(m.get("segments") or []):
        if not isinstance(rec["name"], str):
            raise bad(f"segments[{i}].name", "a string", rec["name"])
        for k in ("rows", "bytes"):
            if not _ns(rec[k]):
                raise bad(f"segments[{i}].{k}", f"an integer {_NS_RANGE}", rec[k])
        if not isinstance(rec["sha256"], str):
            raise bad(f"segments[{i}].sha256", "a string (hex SHA-256)", rec["sha256"])
    if m["stop"] is not None and m["stop"]["monotonic_ns"] < m["start"]["monotonic_ns"]:
        raise CaptureSchemaError(
            mpath, f"manifest key 'stop': monotonic_ns {m['stop']['monotonic_ns']} is before "
                   f"'start' monotonic_ns {m['start']['monotonic_ns']}; a capture stops after "
                   "it starts (the manifest was edited)")
    for key in ("devices", "discovered_devices"):
        for i, d in enumerate(m.get(key) or []):
            if not isinstance(d["name"], str):
                raise bad(f"{key}[{i}].name", "a string", d["name"])
            ports = d.get("ports")
            if ports is not None and not _objects(ports):
                raise bad(f"{key}[{i}].ports", "a list of objects", ports)
            for j, port in enumerate(ports or []):
                if "port" in port and not (_is_int(port["port"]) and 0 <= port["port"] <= 65535):
                    raise bad(f"{key}[{i}].ports[{j}].port", "an integer 0..65535", port["port"])


def _check_schema(path: Path, schema: pa.Schema) -> None:
    got = {f.name: f.type for f in schema}
    for f in SAMPLE_SCHEMA:
        if f.name not in got:
            raise CaptureSchemaError(path, f"column {f.name!r} is missing "
                                           f"(columns: {', '.join(got) or 'none'})")
        if got[f.name] != f.type:
            raise CaptureSchemaError(path, f"column {f.name!r} has type {got[f.name]}, "
                                           f"expected {f.type}")
    meta = schema.metadata or {}
    fv = meta.get(b"rdmascope.format_version")
    if fv is not None and (not fv.isdigit() or int(fv) > FORMAT_VERSION):
        raise UnsupportedVersionError(
            path, f"segment format version {int(fv)} is newer than supported ({FORMAT_VERSION})")


def device_change_texts(manifest: dict[str, Any]) -> list[str]:
    """One phrase per entry of the manifest's ``device_changes`` (RDMA devices that appeared,
    vanished or returned while recording), in order, with its time after the start: "mlx5_4
    (pci 0000:05:00.0) appeared at 3.0 s, sampled from then on" when the capture holds its
    counters (the recorder added it), "... not recorded, its traffic is unknown" when not
    (``--device`` chose the devices). Empty without the key. What ``inspect``,
    ``verify-emulation``, ``cluster`` and the report say."""
    changes = manifest.get("device_changes") or []
    if not isinstance(changes, list):
        return []
    t0 = (manifest.get("start") or {}).get("monotonic_ns")
    recorded = {c.get("device") for c in manifest.get("counters") or []
                if isinstance(c, dict) and c.get("source") != "netdev"}
    out = []
    for ch in changes:
        if not isinstance(ch, dict):
            continue
        name, kind, t = ch.get("name"), ch.get("kind"), ch.get("t_ns")
        when = (f"at {(t - t0) / 1e9:.1f} s" if _is_int(t) and _is_int(t0)
                else "while recording")
        as_ = f" (as {ch['as']})" if ch.get("as") else ""
        if kind == "appeared":
            pci = ch.get("pci") or "unknown"
            out.append(f"{name} (pci {pci}) appeared {when}, sampled from then on"
                       if name in recorded else
                       f"{name} (pci {pci}) appeared {when}: not recorded, its traffic is unknown")
        elif kind == "renamed" and ch.get("netdev"):
            out.append(f"netdev {name} renamed {ch.get('as')} {when}, followed (read on under "
                       "its new name)")
        elif kind == "renamed":  # an RDMA device back at its PCI address under another name
            was = f" (then {ch['was']})" if ch.get("was") else ""
            pci = f" (pci {ch['pci']})" if ch.get("pci") else ""
            out.append(f"{name}{was} came back as {ch.get('as')}{pci} {when}, followed (read "
                       "from its new name's files; its counters restarted there: a reset, "
                       "not bytes)")
        elif kind == "returned":
            out.append(f"{name} returned{as_} {when}, sampled again (the time it was away is "
                       "unknown)")
        else:
            out.append(f"{name}{as_} {kind or 'changed'} {when}")
    return out


def is_enospc(exc: BaseException) -> bool:
    """True when an exception chain contains an ENOSPC (disk full) OSError."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        exc = exc.__cause__
    return False
