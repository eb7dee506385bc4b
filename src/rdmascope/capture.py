"""The rdmascope capture format: the one module that owns it (schema, version, metadata, I/O).

A *capture* is a directory::

    CAPTURE/
      manifest.json             metadata (see MANIFEST KEYS below), rewritten atomically
      segments/seg-000000.parquet   closed segments, rows sorted by (counter_id, sweep)
      segments/seg-000001.parquet   ...
      live-000002.arrow         the open segment: an Arrow IPC *stream*, one record batch per flush
                                (<= FLUSH_INTERVAL_S of readings). Present while recording and after
                                a crash; rolled into a Parquet segment on roll/close.
      .lock                     while a writer has the capture open: an ``fcntl.flock`` exclusive
                                lock (holding the writer's pid) that refuses a second writer, even
                                with ``force``; released by the kernel when the writer dies, removed
                                on close. Not part of the data: readers ignore it.

Rows are *readings*: one row per counter read (long form). Columns (``SAMPLE_SCHEMA``):

=================  ========  ==================================================================
column             type      meaning
=================  ========  ==================================================================
counter_id         uint16    index into ``manifest["counters"]``
sweep              int64     sweep number k; its deadline is start_monotonic_ns + k * interval_ns
t_before_ns        int64     CLOCK_MONOTONIC ns taken just before the read (time.perf_counter_ns)
read_duration_ns   uint32    t_after - t_before, ns (the read's timing bracket)
value              uint64    the raw value as the kernel prints it (units per the counter's ``unit``,
                             e.g. 4 bytes for port_xmit_data); null when status != OK
status             uint8     STATUS_OK, STATUS_READ_ERROR, STATUS_PARSE_ERROR, STATUS_MISSING
=================  ========  ==================================================================

MANIFEST KEYS (``manifest.json``, a JSON object):

- ``format`` = ``"rdmascope-capture"``, ``format_version`` (int, ``FORMAT_VERSION``),
  ``capture_id`` (uuid4 hex), ``writer`` (``"sampler"`` | ``"simulate"``), ``sampler_version``.
- ``host``, ``kernel``, ``command_line`` (list of str), ``sysfs_root``.
- ``clock`` = ``"CLOCK_MONOTONIC"`` (clock of every ``*_ns`` column), ``interval_ns``.
- ``start`` = {``monotonic_ns``, ``realtime_ns``}; ``stop`` = same or ``null`` (null = unclean end).
- ``clock_pairs``: list of [realtime_ns, monotonic_ns] taken at start, every <= 10 s, and at stop.
- ``devices``: the discovery records of the sampled RDMA devices (free-form dicts from
  ``rdmascope.sampler``: name, ports with rate string / rate_gbps / link_layer / netdevs, pci, ...).
- ``devices[i].pcie`` (optional, added without a version change; absent in older captures and
  None for a device without PCIe link files: unknown, never a zero rate): the device's PCIe
  link as read at discovery, {``current_link_speed``, ``current_link_width``,
  ``max_link_speed``, ``max_link_width`` (the sysfs texts, e.g. "32.0 GT/s PCIe" and "4", null
  when unreadable), ``gts``, ``width``, ``bound_gbps``, ``max_gts``, ``max_width``,
  ``max_bound_gbps``} (``rdmascope.pcie.pcie_record``). Readers recompute the bound from the
  texts (``rdmascope.pcie.record_bound``) and treat anything malformed as unknown.
- ``discovered_devices`` (optional, added without a version change): EVERY RDMA device found under
  ``class/infiniband`` at record time, sampled or not (``--device`` may select fewer), as a list of
  {``name``, ``pci`` (str or null), ``netdevs`` (list of str)}. Tells a reader that a twin device
  existed even when only one was recorded. Absent in older captures: unknown, not "none".
- ``counters``: list of counter descriptors, position = ``counter_id``; each has
  ``source`` ("infiniband" | "netdev"), ``device``, ``port`` (int or null for netdev),
  ``name`` (kernel file name, e.g. "port_xmit_data" or "tx_bytes"), ``path``,
  ``unit`` ("4 bytes" | "bytes" | "packets" | "count"), ``bytes_per_unit`` (4, 1 or null),
  ``width_bits`` (64, 32, 16, 8 or null when unknown), ``direction`` ("tx" | "rx" | null).
  Optional (added without a version change; absent in older captures, e.g.
  ``fixtures/v1-capture``, whose byte counters are always ``counters/port_*_data``):
  ``byte_source``, on a port's byte counter, the file it was read from relative to the port,
  one of ``BYTE_SOURCE_FILES``: "counters/port_xmit_data" (unit "4 bytes"),
  "counters_ext/port_xmit_data_64" (legacy mlx4, "4 bytes", 64-bit), "hw_counters/tx_bytes"
  (bnxt_re, mana, efa: unit "bytes", bytes_per_unit 1) or, for irdma, "hw_counters/ip4OutOctets"
  and "hw_counters/ip6OutOctets" (two counters of one series, whose bytes add up; IP-level
  octets), and the rx counterparts (added without a version change: a reader older than these
  names refuses such a capture naming the value). The sampled
  devices' port records (``devices``) then also hold ``byte_source``, ``byte_files``,
  ``byte_unit``, ``byte_width_bits`` and ``byte_note`` (why that source, or why the port has
  no byte counter, e.g. soft iWARP).
- ``events``: list of {``t_ns``, ``counter_id`` (or null), ``kind``, ``message``}: unavailable
  counters (said once, with the reason), recoveries, write errors.
- ``segments``: one record per closed Parquet segment, {``name``, ``rows``, ``bytes``,
  ``sha256``}, appended at each roll; the reader refuses a listed segment that is missing, altered
  (size, SHA-256 or row count) or followed by unlisted ones. Manifests without the key (written
  before it existed, e.g. ``fixtures/v1-capture``) are read with Parquet page checksums only.
- ``audit``: the sampler's self-audit at stop (sweeps taken/missed, interval and read-bracket
  percentiles, CPU seconds), or ``null``.
- ``extra``: free-form (the emulator stores its scenario and ground truth pointers here).

Only this module reads or writes these files. The sampler writes through ``CaptureWriter``; the
analysis reads through ``read_capture``. Both depend only on pyarrow (no pandas).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

FORMAT_NAME = "rdmascope-capture"
FORMAT_VERSION = 1
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

# Parquet settings chosen for <= 8 bytes per reading on disk: the rows of a segment are sorted by
# (counter_id, sweep) so each column is a smooth per-counter series, delta-encoded, then zstd.
_PARQUET_ENCODINGS = {
    "sweep": "DELTA_BINARY_PACKED",
    "t_before_ns": "DELTA_BINARY_PACKED",
    "value": "DELTA_BINARY_PACKED",
}


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


def _atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically; on failure remove the temporary file."""
    tmp = path.with_name(f".{path.name}.tmp")
    data = json.dumps(obj, indent=1, sort_keys=False).encode()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # a disk-full write leaves a 0-byte or partial temporary file: do not leave it behind
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


def _lock_pid(fd: int) -> int | None:
    """Return the pid written in a lock file (None when it holds none)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def recording_pid(path: str | os.PathLike) -> int | None:
    """Return the pid of the process recording the capture at ``path`` now, or None.

    A writer holds ``.lock`` (an exclusive ``flock``) while it runs; a killed one holds nothing.
    Tested with a non-blocking shared lock taken and dropped at once. Returns -1 when the lock
    is held but names no pid; None when the capture is not being written (or has no lock file).
    """
    lock = Path(path) / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _lock_pid(fd)
            return pid if pid is not None else -1
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _acquire_lock(p: Path) -> int:
    """Take the capture's exclusive lock (``p/.lock``, non-blocking); return its file descriptor.

    Raises ``CaptureLockedError`` (naming the holder's pid) when another open file holds it and
    ``CaptureWriteError`` when ``.lock`` is a symbolic link. The lock is an ``fcntl.flock``: the
    kernel drops it when the holder dies (kill -9 leaves no stale lock). A lock file removed by
    its holder between our open and our flock is detected (different inode) and retried.
    """
    lock = p / LOCK_NAME
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CaptureWriteError(lock, "is a symbolic link; refusing to follow it") from exc
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _lock_pid(fd)
            os.close(fd)
            raise CaptureLockedError(p, pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            st, cur = os.fstat(fd), os.stat(lock, follow_symlinks=False)
            same = (st.st_dev, st.st_ino) == (cur.st_dev, cur.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed it after our open: lock the current one
    try:
        data = f"{os.getpid()}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # the pid is a courtesy for the error message; the lock itself is held
    return fd


def _release_lock(p: Path, fd: int | None) -> None:
    """Remove the lock file (while still holding it) and release the lock."""
    if fd is None:
        return
    try:
        (p / LOCK_NAME).unlink(missing_ok=True)
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass


#: The end-of-stream marker of the Arrow IPC stream format (continuation token, length 0).
_IPC_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


class _LiveFile:
    """The live segment's file: an Arrow IPC stream written one whole message at a time.

    Each message (the schema, then one per batch: ``pa.Schema.serialize``,
    ``pa.RecordBatch.serialize``, byte-identical to ``ipc.new_stream``'s output) is encoded in
    memory and handed to the OS in one write loop: no hidden buffer, so after a failed write
    (disk full) nothing of the failed batch can reach the file later (a buffered file flushes
    the rest on close once space is freed, completing a batch the writer counted as lost), and
    one syscall per batch keeps the writer thread off the GIL. Writing after ``close`` raises.
    """

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self.closed = False

    def write(self, data) -> None:
        """Write all of ``data`` (bytes or a pyarrow Buffer); raise OSError when it cannot."""
        if self.closed:
            raise ValueError("write to a closed live segment")
        mv = memoryview(data).cast("B")
        while len(mv):
            mv = mv[os.write(self.fd, mv):]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


def _safe_child(root: Path, name: str) -> Path:
    """Return root/name, refusing a symlink that would lead outside the capture directory."""
    p = root / name
    if p.is_symlink():
        raise CaptureWriteError(p, "is a symbolic link; refusing to write through it")
    return p


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


# ----------------------------------------------------------------------------------------------
# Writer
# ----------------------------------------------------------------------------------------------


class CaptureWriter:
    """Write one capture directory: manifest, live Arrow IPC segment, rolled Parquet segments.

    Usage::

        w = CaptureWriter.create(path, manifest_fields, force=False)
        w.write_batch(batch)      # a SAMPLE_SCHEMA RecordBatch (e.g. from make_batch); flushed
        w.add_clock_pair()        # every <= 10 s
        w.add_event(t_ns, counter_id, kind, message)
        w.roll()                  # every ROLL_INTERVAL_S: live stream -> Parquet segment
        w.close(audit={...})      # final roll, stop clock pair, manifest with stop record

    Memory is bounded by one roll interval of readings (they are kept to write the Parquet
    segment without re-reading the live file). Every method that writes raises
    ``CaptureWriteError`` on an OSError (disk full, permissions); data flushed before stays
    loadable. Not thread-safe: call from one thread.
    """

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest
        self._segment_index = 0
        self._pending: list[pa.RecordBatch] = []
        self._live_path: Path | None = None
        self._live_file: _LiveFile | None = None
        self._live_failed = False  # a write to the live file failed: append nothing more to it
        self.rows_written = 0
        self.closed = False
        self._lock_fd: int | None = None  # the capture's .lock, held until close()

    # -- creation ---------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike, fields: dict[str, Any], *, force: bool = False
               ) -> CaptureWriter:
        """Create a new capture directory and write its first manifest.

        ``fields`` are manifest keys (``counters``, ``devices``, ``interval_ns``, ``sysfs_root``,
        ``writer``, ``sampler_version``, ``command_line``, ``extra`` ...); format keys, host
        metadata, ``capture_id``, ``start`` and the first clock pair are filled in here unless
        given (``start`` may be given by the simulator for synthetic clocks).

        Raises ``CaptureExistsError`` if ``path`` already holds files and ``force`` is false (with
        ``force`` the old manifest, segments and live files are removed first), and
        ``CaptureWriteError`` if the directory cannot be created or written.
        """
        p = Path(path)
        lock_fd: int | None = None
        try:
            if p.is_symlink():
                raise CaptureWriteError(p, "output path is a symbolic link; refusing to follow it")
            if p.exists():
                if not p.is_dir():
                    raise CaptureExistsError(p, "exists and is not a directory")
                others = [c for c in p.iterdir() if c.name != LOCK_NAME]
                is_capture = (p / MANIFEST_NAME).exists() or (p / MANIFEST_NAME).is_symlink()
                if others and not is_capture and not (p / LOCK_NAME).exists():
                    # not a capture: leave it exactly as it is (no lock file planted in it)
                    if not force:
                        raise CaptureExistsError(
                            p, "already exists and is not empty; use --force to overwrite it")
                    _remove_capture_files(p)  # raises: not an rdmascope capture
                if (p / LOCK_NAME).is_symlink():  # planted: never followed, never a lock
                    if not force:
                        raise CaptureExistsError(
                            p, "already exists and is not empty; use --force to overwrite it")
                    (p / LOCK_NAME).unlink()
                # lock first: a directory another process is recording into is refused, even
                # with --force, before anything in it is touched
                lock_fd = _acquire_lock(p)
                if any(c.name != LOCK_NAME for c in p.iterdir()):
                    if not force:
                        raise CaptureExistsError(
                            p, "already exists and is not empty; use --force to overwrite it")
                    _remove_capture_files(p)
            p.mkdir(parents=True, exist_ok=True)
            if lock_fd is None:
                lock_fd = _acquire_lock(p)
            seg = _safe_child(p, SEGMENT_DIR)
            seg.mkdir(exist_ok=True)
        except CaptureLockedError:
            raise
        except CaptureError:
            _release_lock(p, lock_fd)
            raise
        except OSError as exc:
            _release_lock(p, lock_fd)
            raise CaptureWriteError(p, f"cannot create capture directory: {exc.strerror or exc}"
                                    ) from exc
        manifest: dict[str, Any] = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "capture_id": uuid.uuid4().hex,
            "writer": "sampler",
            "clock": "CLOCK_MONOTONIC",
            **host_metadata(),
            "start": None,
            "stop": None,
            "clock_pairs": [],
            "devices": [],
            "counters": [],
            "events": [],
            "segments": [],
            "audit": None,
            "extra": {},
        }
        manifest.update(fields)
        if manifest["start"] is None:
            rt, mono = clock_pair()
            manifest["start"] = {"realtime_ns": rt, "monotonic_ns": mono}
            manifest["clock_pairs"] = [[rt, mono]]
        try:
            _check_manifest_types(p / MANIFEST_NAME, manifest)
            w = cls(p, manifest)
            w._lock_fd = lock_fd
            w.write_manifest()
        except BaseException:
            _release_lock(p, lock_fd)
            raise
        return w

    # -- writing ----------------------------------------------------------------------------

    def write_manifest(self) -> None:
        """Rewrite manifest.json atomically (temporary file, fsync, rename)."""
        try:
            _atomic_write_json(_safe_child(self.path, MANIFEST_NAME), self.manifest)
        except OSError as exc:
            raise CaptureWriteError(self.path / MANIFEST_NAME,
                                    f"cannot write manifest: {exc.strerror or exc}") from exc

    def _open_live(self) -> None:
        name = f"{LIVE_PREFIX}{self._segment_index:06d}{LIVE_SUFFIX}"
        self._live_path = _safe_child(self.path, name)
        f = _LiveFile(self._live_path)
        try:
            f.write(SAMPLE_SCHEMA.serialize())
        except BaseException:
            f.close()  # not even the schema fitted: nothing to keep, retry under the same name
            self._live_path.unlink(missing_ok=True)
            raise
        self._live_file = f
        self._live_failed = False

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Append one batch to the live segment and flush it to the OS (survives kill -9).

        ``batch`` must have SAMPLE_SCHEMA (``make_batch`` builds one). Raises ``ValueError`` on a
        wrong schema and ``CaptureWriteError`` when the write fails.
        """
        if self.closed:
            raise ValueError("capture writer is closed")
        if not batch.schema.equals(SAMPLE_SCHEMA, check_metadata=False):
            raise ValueError(f"batch schema differs from SAMPLE_SCHEMA: {batch.schema}")
        if batch.num_rows == 0:
            return
        if self._live_failed:
            raise CaptureWriteError(self._live_path or self.path,
                                    "an earlier write to this live segment failed; roll() it first")
        try:
            if self._live_file is None:
                self._open_live()
            self._live_file.write(batch.serialize())
        except OSError as exc:
            # the file may end in part of this batch: readers drop that cut-off tail, and nothing
            # more is appended (close() neither finishes nor ends the stream)
            self._live_failed = self._live_file is not None
            raise CaptureWriteError(self._live_path or self.path,
                                    f"cannot write readings: {exc.strerror or exc}") from exc
        self._pending.append(batch)
        self.rows_written += batch.num_rows

    def add_clock_pair(self, pair: tuple[int, int] | None = None, *, save: bool = True) -> None:
        """Record a (CLOCK_REALTIME ns, CLOCK_MONOTONIC ns) pair and (by default) save the manifest."""
        rt, mono = pair if pair is not None else clock_pair()
        self.manifest["clock_pairs"].append([int(rt), int(mono)])
        if save:
            self.write_manifest()

    def add_event(self, t_ns: int, counter_id: int | None, kind: str, message: str,
                  *, save: bool = True) -> None:
        """Record an event (unavailable counter, recovery, write error ...) in the manifest."""
        self.manifest["events"].append(
            {"t_ns": int(t_ns), "counter_id": counter_id, "kind": kind, "message": message})
        if save:
            self.write_manifest()

    def roll(self) -> Path | None:
        """Turn the live segment into a Parquet segment; return its path (None if empty).

        The Parquet file is written to a temporary name, fsynced and renamed; only then is the
        live file removed, so a crash at any point leaves every reading loadable exactly once
        (the reader ignores temporary files and prefers a segment over a live file of the same
        index). Raises ``CaptureWriteError`` on failure; the live file is then kept.
        """
        if not self._pending:
            return None
        table = pa.Table.from_batches(self._pending, schema=SAMPLE_SCHEMA)
        table = table.sort_by([("counter_id", "ascending"), ("sweep", "ascending")])
        name = f"{SEGMENT_PREFIX}{self._segment_index:06d}{SEGMENT_SUFFIX}"
        seg_dir = _safe_child(self.path, SEGMENT_DIR)
        final = _safe_child(seg_dir, name)
        tmp = seg_dir / f".{name}.tmp"
        try:
            write_segment(table, tmp, counters=self.manifest.get("counters"))
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            entry = segment_entry(tmp, name, table.num_rows)
            os.replace(tmp, final)
        except OSError as exc:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            raise CaptureWriteError(final, f"cannot write segment: {exc.strerror or exc}") from exc
        self._close_live(remove=True)
        self._pending = []
        self._segment_index += 1
        # Listed in memory first: if this manifest write fails (disk full), the next one that
        # succeeds still lists the segment; until then the reader accepts it as the trailing,
        # unlisted segment a crash can leave.
        self.manifest.setdefault("segments", []).append(entry)
        self.write_manifest()
        return final

    def _close_live(self, *, remove: bool) -> None:
        if self._live_file is not None:
            try:
                if not self._live_failed:
                    self._live_file.write(_IPC_EOS)  # the stream's end marker
            except OSError:
                pass  # a stream without its end marker reads the same
            finally:
                self._live_file.close()
            if remove and self._live_path is not None:
                try:
                    self._live_path.unlink(missing_ok=True)
                except OSError:
                    pass
        self._live_file = None
        self._live_path = None
        self._live_failed = False

    def close(self, *, audit: dict[str, Any] | None = None,
              stop: dict[str, int] | None = None) -> None:
        """Roll the last segment, take the stop clock pair and save the final manifest.

        If the final roll fails (e.g. disk full) the live file stays and still loads; the error
        is recorded as an event and re-raised as ``CaptureWriteError`` after the manifest is
        saved (if it can be).
        """
        if self.closed:
            return
        err: CaptureWriteError | None = None
        try:
            self.roll()
        except CaptureWriteError as exc:
            err = exc
            self._close_live(remove=False)
        if stop is None:
            rt, mono = clock_pair()
            stop = {"realtime_ns": rt, "monotonic_ns": mono}
            self.manifest["clock_pairs"].append([rt, mono])
        self.manifest["stop"] = stop
        if audit is not None:
            self.manifest["audit"] = audit
        if err is not None:
            self.manifest["events"].append({"t_ns": stop["monotonic_ns"], "counter_id": None,
                                            "kind": "write_error", "message": err.message})
        self.closed = True
        try:
            self.write_manifest()
        except CaptureWriteError as exc:
            err = err or exc
        finally:
            _release_lock(self.path, self._lock_fd)
            self._lock_fd = None
        if err is not None:
            raise err


def segment_entry(path: str | os.PathLike, name: str, rows: int) -> dict[str, Any]:
    """Return the manifest's record of one closed segment: {name, rows, bytes, sha256}.

    The SHA-256 of the whole file lets the reader refuse any corruption, including flips in the
    Parquet footer that page checksums do not cover (a footer flip can silently drop rows).
    """
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return {"name": name, "rows": int(rows), "bytes": size, "sha256": h.hexdigest()}


#: Parquet key-value metadata of a segment holding its counter descriptors (JSON list, index =
#: counter_id), so a segment alone says which counter is which. ``PANDAS_ATTRS`` holds the same
#: as ``{"rdmascope.counters": [...]}``: pandas (>= 2.1) restores it as ``DataFrame.attrs`` in
#: ``pd.read_parquet(segment)``. Segments written before these keys existed have neither and stay
#: readable (the keys are optional; the manifest remains the reference).
SEGMENT_COUNTERS_KEY = b"rdmascope.counters"


def write_segment(table: pa.Table, path: str | os.PathLike, *,
                  counters: list[dict[str, Any]] | None = None) -> None:
    """Write a SAMPLE_SCHEMA table as one Parquet segment with the format's encodings.

    ``counters``: the manifest's counter descriptors, stored in the key-value metadata
    (``SEGMENT_COUNTERS_KEY`` and pandas' ``PANDAS_ATTRS``) with ``counter_id`` added.
    """
    if counters is not None:
        desc = [{"counter_id": i, **c} for i, c in enumerate(counters)]
        table = table.replace_schema_metadata({
            **(table.schema.metadata or {}),
            SEGMENT_COUNTERS_KEY: json.dumps(desc).encode(),
            b"PANDAS_ATTRS": json.dumps({SEGMENT_COUNTERS_KEY.decode(): desc}).encode()})
    pq.write_table(
        table,
        path,
        compression="zstd",
        compression_level=3,
        use_dictionary=["counter_id", "status"],
        column_encoding=_PARQUET_ENCODINGS,
        row_group_size=1 << 20,
        write_statistics=["counter_id", "sweep", "t_before_ns"],
        write_page_checksum=True,  # a flipped byte in a data page is an error, never a value
    )


_OWN_TOP = re.compile(r"(manifest\.json|\.manifest\.json\.tmp|\.lock|live-\d+\.arrow)")
_OWN_SEGMENT = re.compile(r"\.?seg-\d+\.parquet(\.tmp)?")


def foreign_entries(path: str | os.PathLike, *, allowed: tuple[str, ...] = ()) -> list[Path]:
    """Return the entries of a capture directory that are not the capture's own files.

    Own files: the manifest (and its atomic-write temporary), the lock, live segments, and the
    ``segments/`` folder holding only segments (and their temporaries). Symbolic links are never
    own files. ``allowed``: extra top-level file names to accept (e.g. the emulator's
    ``requests.jsonl`` and ``truth.json``). Used before anything removes a capture's files.
    """
    p = Path(path)
    out: list[Path] = []
    for child in sorted(p.iterdir()):
        if child.is_symlink():
            out.append(child)
        elif child.name == SEGMENT_DIR and child.is_dir():
            out.extend(f for f in sorted(child.iterdir())
                       if f.is_symlink() or not f.is_file() or not _OWN_SEGMENT.fullmatch(f.name))
        elif not child.is_file() or not (_OWN_TOP.fullmatch(child.name)
                                         or child.name in allowed):
            out.append(child)
    return out


def estimate_size(path: str | os.PathLike) -> tuple[int, int, int | None]:
    """Return (approximate readings, segment + live files, longest segment span ns or None).

    Cheap: Parquet footers only (row counts and ``t_before_ns`` statistics), live files by size
    (~40 bytes a reading). The span is None when unknown (no statistics, or live files only).
    Unreadable files are skipped: ``read_capture`` is the one that names them.
    """
    segs, lives = list_capture_files(path)
    n, span = 0, 0
    for s in segs:
        try:
            md = pq.ParquetFile(s).metadata
        except (OSError, ValueError):  # ArrowInvalid is a ValueError
            continue
        n += md.num_rows
        try:
            i = md.schema.names.index("t_before_ns")
            st = [md.row_group(g).column(i).statistics for g in range(md.num_row_groups)]
            span = max(span, max(x.max for x in st) - min(x.min for x in st))
        except (ValueError, AttributeError, TypeError):
            span = None if not lives else span
    return (n + sum(f.stat().st_size // 40 for f in lives), len(segs) + len(lives),
            None if lives or not span else int(span))


def check_output(path: str | os.PathLike, *, force: bool = False) -> None:
    """Refuse an output path ``CaptureWriter.create`` would refuse, without touching anything.

    For a clear first error: a recorder checks its output before looking for devices, so an
    existing capture is reported as such even on a machine without RDMA. ``create`` checks again
    (under the lock). Raises ``CaptureWriteError`` (a symbolic link) or ``CaptureExistsError``.
    """
    p = Path(path)
    if p.is_symlink():
        raise CaptureWriteError(p, "output path is a symbolic link; refusing to follow it")
    if not p.exists():
        return
    if not p.is_dir():
        raise CaptureExistsError(p, "exists and is not a directory")
    lock = p / LOCK_NAME
    if lock.is_file() and not lock.is_symlink():  # a live writer is the first thing to say
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CaptureLockedError(p, _lock_pid(fd)) from None
            finally:
                os.close(fd)
    if not force and any(c.name != LOCK_NAME for c in p.iterdir()):
        raise CaptureExistsError(p, "already exists and is not empty; use --force to overwrite it")


def _remove_capture_files(p: Path) -> None:
    """Remove a capture's own files (used by --force); refuse to wipe a directory that is not one."""
    manifest = p / MANIFEST_NAME
    if not manifest.exists():
        raise CaptureExistsError(
            p, "exists, is not empty and is not an rdmascope capture; refusing to overwrite it")
    foreign = foreign_entries(p)
    if foreign:
        f = foreign[0]
        what = f"{f}, a symbolic link" if f.is_symlink() else str(f)
        raise CaptureExistsError(
            p, f"holds entries that are not the capture's own (e.g. {what}); refusing to "
               "overwrite it even with --force: move them or choose another directory")
    for child in p.iterdir():
        if child.name == SEGMENT_DIR and child.is_dir() and not child.is_symlink():
            for f in child.iterdir():
                f.unlink()
            child.rmdir()
        elif child.name == LOCK_NAME:
            continue  # held by the caller: the lock outlives the old capture's files
        elif child.name == MANIFEST_NAME or child.name.startswith((LIVE_PREFIX, ".")):
            child.unlink()


# ----------------------------------------------------------------------------------------------
# Reader
# ----------------------------------------------------------------------------------------------

REQUIRED_MANIFEST_KEYS = ("format", "format_version", "capture_id", "host", "clock", "interval_ns",
                          "start", "stop", "clock_pairs", "counters", "events")


@dataclass
class RawCapture:
    """One capture as stored: the manifest and every reading, in pyarrow form.

    ``table`` has SAMPLE_SCHEMA columns, rows sorted by (counter_id, sweep), shape (n_readings, 6).
    ``clean_end`` is False when the manifest has no stop record (recorder killed or still running).
    ``live_rows`` counts rows recovered from live (un-rolled) segments; ``truncated_live`` lists live
    files whose last message was cut short (the rows before it are kept).
    """

    path: Path
    manifest: dict[str, Any]
    table: pa.Table
    files: list[Path] = field(default_factory=list)
    live_rows: int = 0
    truncated_live: list[Path] = field(default_factory=list)

    @property
    def clean_end(self) -> bool:
        return self.manifest.get("stop") is not None

    @property
    def counters(self) -> list[dict[str, Any]]:
        return self.manifest["counters"]


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate ``<path>/manifest.json``.

    Raises ``NotACaptureError`` (missing/not JSON/not our format), ``UnsupportedVersionError``
    (a newer or invalid ``format_version``, naming both versions), ``CaptureSchemaError`` (a
    required key is missing).
    """
    p = Path(path)
    mpath = p / MANIFEST_NAME
    if not p.is_dir():
        raise NotACaptureError(p, "is not a directory (a capture is a directory with manifest.json)")
    if not mpath.is_file():
        raise NotACaptureError(p, f"has no {MANIFEST_NAME}; not an rdmascope capture")
    try:
        m = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NotACaptureError(mpath, f"is not valid JSON ({exc})") from exc
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
        got = m.get("format") if isinstance(m, dict) else type(m).__name__
        raise NotACaptureError(mpath, f"format is {got!r}, expected {FORMAT_NAME!r}")
    v = m.get("format_version")
    if not isinstance(v, int) or v < 1:
        raise UnsupportedVersionError(mpath, f"format_version {v!r} is not a positive integer")
    if v > FORMAT_VERSION:
        raise UnsupportedVersionError(
            mpath, f"capture format version {v} is newer than this rdmascope supports "
                   f"(version {FORMAT_VERSION}); upgrade rdmascope to read it")
    missing = [k for k in REQUIRED_MANIFEST_KEYS if k not in m]
    if missing:
        raise CaptureSchemaError(mpath, f"manifest lacks required key(s): {', '.join(missing)}")
    _check_manifest_types(mpath, m)
    return m


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

    Each descriptor must be an object with ``COUNTER_KEYS``; ``bytes_per_unit`` a positive integer
    or null; ``width_bits`` an integer 1..64 or null. The message names ``path`` and the counter.
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
                path, f"manifest counter descriptor {i} lacks key(s): {', '.join(lacking)}")
        for key, hi in (("bytes_per_unit", None), ("width_bits", 64)):
            v = c[key]
            if not (v is None or (_is_int(v) and v > 0 and (hi is None or v <= hi))):
                expected = "a positive integer" if hi is None else f"an integer 1..{hi}"
                raise CaptureSchemaError(
                    path, f"manifest counter {i} ({c.get('device')} {c.get('name')}): {key!r} "
                          f"must be {expected} or null, got {json.dumps(v)}")
        bs = c.get("byte_source")
        if bs is not None and bs not in BYTE_SOURCE_FILES:
            raise CaptureSchemaError(
                path, f"manifest counter {i} ({c.get('device')} {c.get('name')}): "
                      f"'byte_source' must be one of {', '.join(BYTE_SOURCE_FILES)} or absent, "
                      f"got {json.dumps(bs)}")


def _check_manifest_types(mpath: Path, m: dict[str, Any]) -> None:
    """Raise ``CaptureSchemaError`` naming the key when a manifest value has the wrong type.

    A valid-JSON manifest with ``"counters": null`` or ``"interval_ns": "abc"`` must be refused
    here, with the key named, rather than crash a reader later.
    """
    def bad(key: str, expected: str, got: Any) -> CaptureSchemaError:
        shown = json.dumps(got)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return CaptureSchemaError(mpath, f"manifest key {key!r} must be {expected}, got {shown}")

    def instant(key: str, v: Any, *, nullable: bool = False) -> None:
        if v is None and nullable:
            return
        if not (isinstance(v, dict) and _is_int(v.get("monotonic_ns"))
                and _is_int(v.get("realtime_ns"))):
            raise bad(key, "an object with integer monotonic_ns and realtime_ns"
                      + (" (or null)" if nullable else ""), v)

    def list_of_objects(key: str, required: tuple[str, ...] = (), *, optional: bool = False):
        v = m.get(key)
        if v is None and optional and key not in m:
            return
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise bad(key, "a list of objects", v)
        for i, x in enumerate(v):
            lacking = [r for r in required if r not in x]
            if lacking:
                what = "counter descriptor" if key == "counters" else f"{key!r} entry"
                raise CaptureSchemaError(
                    mpath, f"manifest {what} {i} lacks key(s): {', '.join(lacking)}")

    if not isinstance(m["capture_id"], str):
        raise bad("capture_id", "a string", m["capture_id"])
    if not isinstance(m["host"], str):
        raise bad("host", "a string", m["host"])
    if m["clock"] != "CLOCK_MONOTONIC":
        raise bad("clock", '"CLOCK_MONOTONIC"', m["clock"])
    if not (_is_int(m["interval_ns"]) and m["interval_ns"] > 0):
        raise bad("interval_ns", "a positive integer (ns)", m["interval_ns"])
    instant("start", m["start"])
    instant("stop", m["stop"], nullable=True)
    pairs = m["clock_pairs"]
    if not (isinstance(pairs, list) and all(isinstance(x, list) and len(x) == 2
                                            and all(_is_int(y) for y in x) for x in pairs)):
        raise bad("clock_pairs", "a list of [realtime_ns, monotonic_ns] integer pairs", pairs)
    check_counter_descriptors(m["counters"], mpath)
    list_of_objects("events")
    list_of_objects("devices", ("name",), optional=True)
    list_of_objects("discovered_devices", ("name",), optional=True)
    list_of_objects("segments", ("name", "rows", "bytes", "sha256"), optional=True)
    for key in ("audit", "extra"):
        if m.get(key) is not None and not isinstance(m[key], dict):
            raise bad(key, "an object or null", m[key])


def segment_counters(path: str | os.PathLike) -> list[dict[str, Any]] | None:
    """Return the counter descriptors stored in a Parquet segment's key-value metadata (index =
    counter_id), or None for a segment written without them (older captures). Raises
    ``CorruptSegmentError`` when the file is not readable Parquet or the stored JSON is bad."""
    p = Path(path)
    try:
        meta = pq.read_schema(p).metadata or {}
        raw = meta.get(SEGMENT_COUNTERS_KEY)
        return None if raw is None else list(json.loads(raw))
    except (OSError, pa.ArrowException, ValueError, TypeError) as exc:
        raise CorruptSegmentError(p, f"cannot read its counter descriptors: {exc}") from exc


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
    if fv is not None and int(fv) > FORMAT_VERSION:
        raise UnsupportedVersionError(
            path, f"segment format version {int(fv)} is newer than supported ({FORMAT_VERSION})")


def _read_live(path: Path) -> tuple[list[pa.RecordBatch], bool]:
    """Read an Arrow IPC stream written by CaptureWriter, tolerating a cut-off tail.

    Returns (batches, truncated). A stream whose schema message is incomplete yields no batches.
    """
    batches: list[pa.RecordBatch] = []
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CorruptSegmentError(path, f"cannot read live segment: {exc.strerror or exc}") from exc
    if not data:
        return batches, False
    try:
        reader = ipc.open_stream(pa.BufferReader(data))
    except (pa.ArrowInvalid, OSError):
        return batches, True  # killed before the schema message was complete
    _check_schema(path, reader.schema)
    truncated = False
    while True:
        try:
            b = reader.read_next_batch()
        except StopIteration:
            break
        except (pa.ArrowInvalid, OSError):
            truncated = True
            break
        batches.append(b)
    return batches, truncated


def list_capture_files(path: str | os.PathLike) -> tuple[list[Path], list[Path]]:
    """Return (parquet segment paths, live IPC paths) of a capture, each sorted by index.

    A live file whose index also has a finished Parquet segment is left out (crash between the
    rename and the unlink: the segment holds the same rows).
    """
    p = Path(path)
    seg_dir = p / SEGMENT_DIR
    segs = sorted(f for f in seg_dir.glob(f"{SEGMENT_PREFIX}*{SEGMENT_SUFFIX}")) \
        if seg_dir.is_dir() else []
    seg_idx = {f.name[len(SEGMENT_PREFIX):-len(SEGMENT_SUFFIX)] for f in segs}
    lives = sorted(f for f in p.glob(f"{LIVE_PREFIX}*{LIVE_SUFFIX}")
                   if f.name[len(LIVE_PREFIX):-len(LIVE_SUFFIX)] not in seg_idx)
    return segs, lives


def read_capture(path: str | os.PathLike, *, columns: list[str] | None = None) -> RawCapture:
    """Read a whole capture: validated manifest plus every reading (segments and live files).

    Shapes: ``table`` is (n_readings, 6) with SAMPLE_SCHEMA (or the requested ``columns``),
    sorted by (counter_id, sweep). Raises ``NotACaptureError``, ``UnsupportedVersionError``,
    ``CaptureSchemaError`` (a segment with wrong columns/types, a counter_id beyond the manifest's
    counter list) or ``CorruptSegmentError`` (an unreadable Parquet file), each naming the file.
    """
    p = Path(path)
    manifest = read_manifest(p)
    segs, lives = list_capture_files(p)
    listed = _listed_segments(p, manifest, segs)
    tables: list[pa.Table] = []
    table_files: list[Path] = []
    for s in segs:
        pf = _open_segment(s, listed.get(s.name))
        try:
            t = pf.read()
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptSegmentError(s, f"cannot read Parquet segment ({exc}); the file is "
                                         "truncated or corrupted") from exc
        _check_rows(s, listed.get(s.name), t.num_rows)
        tables.append(t.select(list(COLUMNS)).cast(SAMPLE_SCHEMA))
        table_files.append(s)
    live_rows = 0
    truncated: list[Path] = []
    for lf in lives:
        batches, cut = _read_live(lf)
        if cut:
            truncated.append(lf)
        if batches:
            t = pa.Table.from_batches(batches).select(list(COLUMNS)).cast(SAMPLE_SCHEMA)
            live_rows += t.num_rows
            tables.append(t)
            table_files.append(lf)
    files = segs + lives
    table = pa.concat_tables(tables) if tables else empty_table()
    if table.num_rows:
        # Segments are stored sorted by (counter_id, sweep) and follow each other in time: the
        # whole capture's order is each counter's rows taken file after file (zero-copy slices),
        # checked below; only unsorted input (live files, mixed captures) pays for a full sort.
        merged = _merge_by_counter(tables) if all(_sorted_by_counter(x) for x in tables) \
            else None
        table = merged if merged is not None and _sorted_by_counter(merged) else \
            table.sort_by([("counter_id", "ascending"), ("sweep", "ascending")])
        max_id = pa.compute.max(table["counter_id"]).as_py()
        if max_id >= len(manifest["counters"]):
            raise CaptureSchemaError(
                p, f"readings use counter_id {max_id} but the manifest lists only "
                   f"{len(manifest['counters'])} counters")
        _check_unique_readings(p, table, table_files, tables)
    if columns is not None:
        table = table.select(columns)
    return RawCapture(path=p, manifest=manifest, table=table, files=files,
                      live_rows=live_rows, truncated_live=truncated)


def _merge_by_counter(tables: list[pa.Table]) -> pa.Table:
    """Concatenate tables each sorted by (counter_id, sweep): every counter's rows, file by file."""
    import numpy as np

    bounds = []
    ids: set[int] = set()
    for t in tables:
        cid = t["counter_id"].to_numpy()
        u = np.unique(cid)
        lo = np.searchsorted(cid, u, "left")
        hi = np.searchsorted(cid, u, "right")
        bounds.append({int(c): (int(a), int(b)) for c, a, b in zip(u, lo, hi, strict=True)})
        ids.update(int(c) for c in u)
    parts = [t.slice(a, b - a) for c in sorted(ids)
             for t, bd in zip(tables, bounds, strict=True) if c in bd
             for a, b in [bd[c]]]
    return pa.concat_tables(parts)


def _listed_segments(path: Path, manifest: dict[str, Any], segs: list[Path]
                     ) -> dict[str, dict[str, Any]]:
    """Return the manifest's segment records by name, checked against the files on disk.

    Captures whose manifest has no ``segments`` list (written before it existed) are not checked.
    A listed segment missing on disk is an error; a segment on disk that is not listed is accepted
    only after the last listed one (a crash between the segment's rename and the manifest write).
    """
    records = manifest.get("segments")
    if records is None:
        return {}
    listed = {r["name"]: r for r in records}
    on_disk = {f.name for f in segs}
    gone = [n for n in listed if n not in on_disk]
    if gone:
        raise CorruptSegmentError(path / SEGMENT_DIR / gone[0],
                                  f"is listed in the manifest ({len(gone)} segment(s) in all) but "
                                  "missing on disk; the capture is incomplete")
    last = max(listed) if listed else ""
    stray = [n for n in sorted(on_disk - set(listed)) if n < last]
    if stray:
        raise CaptureSchemaError(path / SEGMENT_DIR / stray[0],
                                 "is not listed in the manifest although later segments are; "
                                 "it does not belong to this capture")
    return listed


def _open_segment(s: Path, record: dict[str, Any] | None) -> pq.ParquetFile:
    """Open one Parquet segment, verifying its size and SHA-256 against the manifest record.

    Every read checks the digest (about 0.1 s of CPU per hour of an 8-counter capture): Parquet's
    page checksums do not cover the footer, where a flipped bit can drop or alter readings
    silently. (Hashing in a worker thread beside the decode was tried: the thread's stack and
    malloc arena took enough address space to push a two-run ``report`` over the limit of
    ``tests/test_memory_limit.py``.)
    """
    try:
        data = s.read_bytes()
    except OSError as exc:
        raise CorruptSegmentError(s, f"cannot read segment: {exc.strerror or exc}") from exc
    if record is not None:
        if len(data) != record["bytes"]:
            raise CorruptSegmentError(s, f"is {len(data)} bytes but the manifest recorded "
                                         f"{record['bytes']}; the file is truncated or corrupted")
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            raise CorruptSegmentError(s, "content does not match the SHA-256 recorded in the "
                                         "manifest; the file is corrupted")
    try:
        pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: undecodable footer
        raise CorruptSegmentError(s, f"cannot read Parquet segment ({exc}); the file is "
                                     "truncated or corrupted") from exc
    _check_schema(s, pf.schema_arrow)
    return pf


def _check_rows(s: Path, record: dict[str, Any] | None, rows: int) -> None:
    if record is not None and rows != record["rows"]:
        raise CorruptSegmentError(s, f"holds {rows} readings but the manifest recorded "
                                     f"{record['rows']}; the file is corrupted")


def _check_unique_readings(path: Path, table: pa.Table, files: list[Path],
                           tables: list[pa.Table]) -> None:
    """Raise ``CaptureSchemaError`` if a (counter_id, sweep) is stored twice (``table`` sorted).

    Each reading is stored once; a repeat means files of different captures were mixed in one
    directory (e.g. two nodes' segments copied together). The message names the files holding it.
    """
    import numpy as np

    cid = table["counter_id"].to_numpy()
    sweep = table["sweep"].to_numpy()
    dup = np.flatnonzero((cid[1:] == cid[:-1]) & (sweep[1:] == sweep[:-1]))
    if not dup.size:
        return
    c, k = int(cid[dup[0]]), int(sweep[dup[0]])
    holders = [f.name if f.parent == path else f"{f.parent.name}/{f.name}"
               for f, t in zip(files, tables, strict=True)
               if pa.compute.any(pa.compute.and_(pa.compute.equal(t["counter_id"], c),
                                                 pa.compute.equal(t["sweep"], k))).as_py()]
    raise CaptureSchemaError(
        path, f"{dup.size} reading(s) are stored twice (first: counter_id {c}, sweep {k}, in "
              f"{', '.join(holders)}); the directory mixes files of different captures (e.g. "
              "from two hosts); keep one capture per directory")


def iter_capture_batches(path: str | os.PathLike, *, batch_rows: int = 1 << 20):
    """Yield SAMPLE_SCHEMA record batches of a capture, segment by segment, in bounded memory.

    For day-long captures: each segment is read in batches of at most ``batch_rows`` rows; rows
    come sorted by (counter_id, sweep) within a segment, segments in time order. Same errors as
    ``read_capture``.
    """
    p = Path(path)
    manifest = read_manifest(p)
    segs, lives = list_capture_files(p)
    listed = _listed_segments(p, manifest, segs)
    for s in segs:
        pf = _open_segment(s, listed.get(s.name))
        _check_rows(s, listed.get(s.name), pf.metadata.num_rows)
        try:
            yield from pf.iter_batches(batch_size=batch_rows, columns=list(COLUMNS))
        except CaptureError:
            raise
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptSegmentError(s, f"cannot read Parquet segment ({exc})") from exc
    for lf in lives:
        batches, _ = _read_live(lf)
        yield from batches


def _segment_time_range(s: Path) -> tuple[int, int] | None:
    """Return (min, max) ``t_before_ns`` of a Parquet segment from its footer statistics, or None.

    Reads only the footer. None when the statistics are missing or the footer is unreadable (the
    segment is then read, and ``_open_segment`` names what is wrong with it).
    """
    try:
        md = pq.read_metadata(s)
        i = md.schema.names.index("t_before_ns")
        st = [md.row_group(g).column(i).statistics for g in range(md.num_row_groups)]
        if not st or any(x is None or not x.has_min_max for x in st):
            return None
        return int(min(x.min for x in st)), int(max(x.max for x in st))
    except (OSError, ValueError, AttributeError, TypeError):  # ArrowInvalid is a ValueError
        return None


def _sorted_by_counter(t: pa.Table) -> bool:
    """True when a table's rows are sorted by (counter_id, sweep) (as the writer stores them)."""
    if t.num_rows < 2:
        return True
    cid = t["counter_id"].to_numpy()
    sw = t["sweep"].to_numpy()
    change = cid[1:] != cid[:-1]
    if not (cid[1:][change] > cid[:-1][change]).all():
        return False
    return bool(((sw[1:] > sw[:-1]) | change).all())


def _counter_slices(t: pa.Table, counter_ids) -> pa.Table:
    """Rows of the given counters of a table sorted by counter_id (zero-copy slices)."""
    import numpy as np

    cid = t["counter_id"].to_numpy()
    keys = np.asarray(sorted(set(int(c) for c in counter_ids)), dtype=cid.dtype)
    lo = np.searchsorted(cid, keys, "left")
    hi = np.searchsorted(cid, keys, "right")
    parts = [t.slice(int(a), int(b - a)) for a, b in zip(lo, hi, strict=True) if b > a]
    return pa.concat_tables(parts) if parts else t.slice(0, 0)


def iter_capture_tables(path: str | os.PathLike, *, columns: list[str] | None = None,
                        counter_ids=None, start_ns: int | None = None,
                        end_ns: int | None = None, manifest: dict[str, Any] | None = None,
                        report: dict[str, Any] | None = None):
    """Yield (file, table) per segment and live file, in time order, reading only what is asked.

    For analysis in bounded memory (one segment at a time, ~60 s of readings). Each table has
    the requested ``columns`` (default all of ``COLUMNS``; ``counter_id`` and ``sweep`` are
    always included) and only the rows of ``counter_ids`` (default all), sorted by
    (counter_id, sweep). With ``start_ns``/``end_ns`` (CLOCK_MONOTONIC), segments whose
    ``t_before_ns`` range (footer statistics) lies wholly before ``start_ns`` or after
    ``end_ns`` are skipped without being read, except the one just before and the one just after
    the range, which hold the readings bracketing its edges. A segment's row count is checked
    against the manifest; a skipped segment is not read (so not checked). ``report``: a dict
    filled with ``files`` (every segment and live file), ``live_rows`` and ``truncated_live``
    (as ``RawCapture``). Same errors as ``read_capture``, each naming the file.
    """
    p = Path(path)
    m = read_manifest(p) if manifest is None else manifest
    segs, lives = list_capture_files(p)
    listed = _listed_segments(p, m, segs)
    if report is not None:
        report.update(files=segs + lives, live_rows=0, truncated_live=[])
    cols = list(dict.fromkeys(["counter_id", "sweep", *(columns or COLUMNS)]))
    bad = [c for c in cols if c not in COLUMNS]
    if bad:
        raise ValueError(f"no column {bad[0]!r} in a capture (columns: {', '.join(COLUMNS)})")
    keep = list(range(len(segs)))
    if (start_ns is not None or end_ns is not None) and segs:
        ranges = [_segment_time_range(s) for s in segs]
        lo = -(1 << 62) if start_ns is None else int(start_ns)
        hi = (1 << 62) if end_ns is None else int(end_ns)
        inside = [r is None or (r[1] >= lo and r[0] <= hi) for r in ranges]
        if any(inside):
            first = inside.index(True)
            last = len(inside) - 1 - inside[::-1].index(True)
            keep = list(range(max(0, first - 1), min(len(segs), last + 2)))
        else:  # the range falls between two segments (or beyond): keep its neighbours
            before = [i for i, r in enumerate(ranges) if r is not None and r[1] < lo]
            after = [i for i, r in enumerate(ranges) if r is not None and r[0] > hi]
            keep = sorted({*before[-1:], *after[:1]})
    for i in keep:
        s = segs[i]
        rec = listed.get(s.name)
        pf = _open_segment(s, rec)
        _check_rows(s, rec, pf.metadata.num_rows)
        try:
            t = pf.read(columns=cols)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptSegmentError(s, f"cannot read Parquet segment ({exc}); the file is "
                                         "truncated or corrupted") from exc
        t = t.cast(pa.schema([SAMPLE_SCHEMA.field(c) for c in cols]))
        yield s, _prepare(p, m, s, t, counter_ids)
    for lf in lives:
        batches, cut = _read_live(lf)
        if report is not None:
            report["live_rows"] += sum(b.num_rows for b in batches)
            if cut:
                report["truncated_live"].append(lf)
        if batches:
            t = pa.Table.from_batches(batches).select(cols)
            t = t.cast(pa.schema([SAMPLE_SCHEMA.field(c) for c in cols]))
            yield lf, _prepare(p, m, lf, t, counter_ids)


def _prepare(p: Path, m: dict[str, Any], f: Path, t: pa.Table, counter_ids) -> pa.Table:
    """Sort one file's rows by (counter_id, sweep) if needed, check ids, keep the asked counters."""
    if not t.num_rows:
        return t
    if not _sorted_by_counter(t):  # live files hold rows in sweep order
        t = t.sort_by([("counter_id", "ascending"), ("sweep", "ascending")])
    top = int(t["counter_id"][-1].as_py())
    if top >= len(m["counters"]):
        raise CaptureSchemaError(
            p, f"readings use counter_id {top} but the manifest lists only "
               f"{len(m['counters'])} counters")
    if counter_ids is not None:
        t = _counter_slices(t, counter_ids)
    return t


def is_enospc(exc: BaseException) -> bool:
    """True when an exception chain contains an ENOSPC (disk full) OSError."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        exc = exc.__cause__
    return False
