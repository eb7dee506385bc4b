"""Writing a capture: ``CaptureWriter`` (manifest, live Arrow IPC segment, Parquet segments).

The sampler writes through this module; the analysis never imports it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rdmascope.capture.lock import _acquire_lock, _lock_pid, _release_lock
from rdmascope.capture.schema import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LIVE_PREFIX,
    LIVE_SUFFIX,
    LOCK_NAME,
    MANIFEST_NAME,
    SAMPLE_SCHEMA,
    SEGMENT_COUNTERS_KEY,
    SEGMENT_DIR,
    SEGMENT_PREFIX,
    SEGMENT_SUFFIX,
    CaptureError,
    CaptureExistsError,
    CaptureLockedError,
    CaptureWriteError,
    _check_manifest_types,
    clock_pair,
    host_metadata,
)

# Parquet settings chosen for <= 8 bytes per reading on disk: the rows of a segment are sorted by
# (counter_id, sweep) so each column is a smooth per-counter series, delta-encoded, then zstd.
_PARQUET_ENCODINGS = {
    "sweep": "DELTA_BINARY_PACKED",
    "t_before_ns": "DELTA_BINARY_PACKED",
    "value": "DELTA_BINARY_PACKED",
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
