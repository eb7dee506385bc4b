"""Writing a capture: ``CaptureWriter`` (manifest, live Arrow IPC segment, Parquet segments).

The sampler writes through this module; the analysis never imports it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
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
    origin_metadata,
)

# Parquet settings chosen for <= 8 bytes per reading on disk: the rows of a segment are sorted by
# (counter_id, sweep) so each column is a smooth per-counter series, delta-encoded, then zstd.
_PARQUET_ENCODINGS = {
    "sweep": "DELTA_BINARY_PACKED",
    "t_before_ns": "DELTA_BINARY_PACKED",
    "value": "DELTA_BINARY_PACKED",
}


#: Modes of what a capture writer creates, whatever the umask (``private``: owner only).
DIR_MODE, FILE_MODE = 0o755, 0o644
PRIVATE_DIR_MODE, PRIVATE_FILE_MODE = 0o700, 0o600

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _tmp_name(name: str) -> str:
    """A unique temporary name beside ``name`` (hidden; never a name someone could plant)."""
    return f".{name}.{uuid.uuid4().hex[:16]}.tmp"


def _create_file(name: str, dir_fd: int, mode: int, *, readable: bool = False) -> int:
    """Create ``name`` in the directory ``dir_fd`` (never following a link, never an existing
    file) with exactly ``mode``; return its descriptor (read-write with ``readable``)."""
    flags = (_O_NEW & ~os.O_WRONLY) | os.O_RDWR if readable else _O_NEW
    fd = os.open(name, flags, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # os.open's mode is masked by the umask
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _atomic_write_json(name: str, obj: Any, dir_fd: int, mode: int = FILE_MODE) -> None:
    """Write ``obj`` as JSON to ``name`` in the directory ``dir_fd`` atomically: a unique
    temporary file (O_EXCL, O_NOFOLLOW), fsync, rename, fsync of the directory. On failure the
    temporary file is removed."""
    tmp = _tmp_name(name)
    data = json.dumps(obj, indent=1, sort_keys=False).encode()
    try:
        with os.fdopen(_create_file(tmp, dir_fd, mode), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        # a disk-full write leaves a 0-byte or partial temporary file: do not leave it behind
        _unlink_quietly(tmp, dir_fd)
        raise
    os.fsync(dir_fd)  # the rename itself survives a host crash


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

    def __init__(self, name: str, dir_fd: int, mode: int = FILE_MODE):
        self.fd = _create_file(name, dir_fd, mode)
        self.closed = False

    def sync(self) -> None:
        """Push what was written to the disk (``fdatasync``): survives a host crash."""
        os.fdatasync(self.fd)

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


def _open_dir(name: str | os.PathLike, dir_fd: int | None = None) -> int:
    """Open a directory by handle (O_DIRECTORY | O_NOFOLLOW); a symlink is a CaptureWriteError."""
    try:
        return os.open(name, _O_DIR, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            where = name if dir_fd is None else f"{name} (in the capture directory)"
            raise CaptureWriteError(where, "is a symbolic link or not a directory; refusing "
                                           "to write through it") from exc
        raise


def _where_now(dir_fd: int) -> str | None:
    """Where the directory open as ``dir_fd`` is now (Linux /proc), None when deleted/unknown."""
    try:
        now = os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        return None
    return None if now.endswith(" (deleted)") else now


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

    def __init__(self, path: Path, manifest: dict[str, Any], *, dir_fd: int, seg_fd: int,
                 private: bool = False, fsync: bool = True):
        self.path = path
        self.manifest = manifest
        #: the capture directory and its segments/, opened once: every file is made relative
        #: to these handles, so a directory swapped for another (or a symlink) is never written
        self._dfd = dir_fd
        self._sfd = seg_fd
        st, sst = os.fstat(dir_fd), os.fstat(seg_fd)
        self._dir_id = (st.st_dev, st.st_ino)
        self._seg_id = (sst.st_dev, sst.st_ino)
        self._moved = False  # the path no longer names our directory: said once, then no checks
        self._location: Path | None | bool = False  # where it was at close (False: not closed)
        self.file_mode = PRIVATE_FILE_MODE if private else FILE_MODE
        self.dir_mode = PRIVATE_DIR_MODE if private else DIR_MODE
        #: fdatasync the live file after each batch (a host crash loses at most one batch)
        self.fsync = fsync
        self._segment_index = 0
        self._pending: list[pa.RecordBatch] = []
        self._live_name: str | None = None
        self._live_path: Path | None = None
        self._live_file: _LiveFile | None = None
        self._live_failed = False  # a write to the live file failed: append nothing more to it
        self.rows_written = 0
        self.closed = False
        self._lock_fd: int | None = None  # the capture's .lock, held until close()

    # -- creation ---------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike, fields: dict[str, Any], *, force: bool = False,
               private: bool = False, fsync: bool = True) -> CaptureWriter:
        """Create a new capture directory and write its first manifest.

        ``fields`` are manifest keys (``counters``, ``devices``, ``interval_ns``, ``sysfs_root``,
        ``writer``, ``sampler_version``, ``command_line``, ``extra`` ...); format keys, host
        metadata, ``capture_id``, ``start`` and the first clock pair are filled in here unless
        given (``start`` may be given by the simulator for synthetic clocks).

        Raises ``CaptureExistsError`` if ``path`` already holds files and ``force`` is false (with
        ``force`` the old manifest, segments and live files are removed first), and
        ``CaptureWriteError`` if the directory cannot be created or written.

        File safety: the directory and ``segments/`` are opened once (``O_DIRECTORY |
        O_NOFOLLOW``) and every file is created relative to them with ``O_EXCL | O_NOFOLLOW``
        under a unique temporary name; modes are 0755/0644 (``private``: 0700/0600) whatever the
        umask. A start that fails removes what it made (so a retry is not blocked). ``fsync``:
        fdatasync the live file after each batch (default).
        """
        p = Path(path)
        lock_fd: int | None = None
        dfd: int | None = None
        sfd: int | None = None
        made_dir = made_seg = False
        dir_mode = PRIVATE_DIR_MODE if private else DIR_MODE

        def undo() -> None:
            """Remove what this failed start made; nothing may block the retry."""
            if sfd is not None:
                os.close(sfd)
            if made_seg and dfd is not None:
                try:
                    os.rmdir(SEGMENT_DIR, dir_fd=dfd)
                except OSError:
                    pass
            _release_lock(p, lock_fd, dir_fd=dfd)
            if dfd is not None:
                os.close(dfd)
            if made_dir:
                try:
                    os.rmdir(p)
                except OSError:
                    pass

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
                lock_fd = _acquire_lock(p, mode=PRIVATE_FILE_MODE if private else FILE_MODE)
                if any(c.name != LOCK_NAME for c in p.iterdir()):
                    if not force:
                        raise CaptureExistsError(
                            p, "already exists and is not empty; use --force to overwrite it")
                    _remove_capture_files(p)
            if not os.path.lexists(p.parent):
                os.makedirs(p.parent, mode=dir_mode, exist_ok=True)
            try:
                os.mkdir(p, dir_mode)
                made_dir = True
            except FileExistsError:
                pass
            dfd = _open_dir(p)
            if made_dir:
                os.fchmod(dfd, dir_mode)  # os.mkdir's mode is masked by the umask
            st, now = os.fstat(dfd), os.stat(p, follow_symlinks=False)
            if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
                raise CaptureWriteError(p, "was replaced while the capture was being created")
            if lock_fd is None:
                lock_fd = _acquire_lock(p, dir_fd=dfd,
                                        mode=PRIVATE_FILE_MODE if private else FILE_MODE)
            try:
                os.mkdir(SEGMENT_DIR, dir_mode, dir_fd=dfd)
                made_seg = True
            except FileExistsError:
                pass
            sfd = _open_dir(SEGMENT_DIR, dir_fd=dfd)
            if made_seg:
                os.fchmod(sfd, dir_mode)
        except CaptureLockedError:
            undo()
            raise
        except CaptureError:
            undo()
            raise
        except OSError as exc:
            undo()
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
            w = cls(p, manifest, dir_fd=dfd, seg_fd=sfd, private=private, fsync=fsync)
            w._lock_fd = lock_fd
            w.write_manifest()
        except BaseException:
            undo()
            raise
        return w

    # -- where it writes --------------------------------------------------------------------

    def location(self) -> Path | None:
        """Where this capture's directory is now: ``path``, or where it was moved to (Linux),
        or None when it was deleted (or cannot be told)."""
        if not self._moved:
            return self.path
        if self._location is not False:  # told at close, while the handle was still open
            return self._location
        now = _where_now(self._dfd)
        return Path(now) if now is not None else None

    def check_place(self) -> None:
        """Raise ``CaptureWriteError`` (once) when ``path`` no longer names the directory this
        writer opened (moved, removed, swapped for another directory or a symbolic link), or
        ``segments/`` in it was replaced. Writing goes on by handle into the original directory
        only to close it cleanly; nothing is ever written where the path points now."""
        if self._moved:
            return
        try:
            st = os.stat(self.path, follow_symlinks=False)
            ok = stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == self._dir_id
            if ok:
                sst = os.stat(SEGMENT_DIR, dir_fd=self._dfd, follow_symlinks=False)
                ok = (sst.st_dev, sst.st_ino) == self._seg_id
        except OSError:
            ok = False
        if ok:
            return
        self._moved = True
        now = _where_now(self._dfd)
        if now is None:
            kept = "the original directory was deleted: the readings written so far are lost"
        elif now == str(self.path.absolute()):
            kept = f"its {SEGMENT_DIR}/ was replaced; the capture so far is in {now}"
        else:
            kept = f"the capture so far is in the original directory, now {now}"
        raise CaptureWriteError(self.path, "the capture directory was moved, removed or replaced "
                                           "(e.g. by a symbolic link) while recording; stopped "
                                           f"writing, nothing is written to what is there now "
                                           f"({kept})")

    # -- writing ----------------------------------------------------------------------------

    def write_manifest(self) -> None:
        """Rewrite manifest.json atomically (temporary file, fsync, rename)."""
        self.check_place()
        try:
            _atomic_write_json(MANIFEST_NAME, self.manifest, self._dfd, self.file_mode)
        except OSError as exc:
            raise CaptureWriteError(self.path / MANIFEST_NAME,
                                    f"cannot write manifest: {exc.strerror or exc}") from exc

    def _open_live(self) -> None:
        name = f"{LIVE_PREFIX}{self._segment_index:06d}{LIVE_SUFFIX}"
        self._live_path = self.path / name
        try:
            f = _LiveFile(name, self._dfd, self.file_mode)
        except FileExistsError as exc:  # planted (a file or a symbolic link): never written
            raise CaptureWriteError(self._live_path, "already exists (not made by this "
                                                     "recorder); refusing to write through it"
                                    ) from exc
        try:
            f.write(SAMPLE_SCHEMA.with_metadata({**SAMPLE_SCHEMA.metadata,
                                                 **origin_metadata(self.manifest)}).serialize())
        except BaseException:
            f.close()  # not even the schema fitted: nothing to keep, retry under the same name
            _unlink_quietly(name, self._dfd)
            raise
        self._live_name = name
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
        self.check_place()
        try:
            if self._live_file is None:
                self._open_live()
            self._live_file.write(batch.serialize())
            if self.fsync:
                self._live_file.sync()
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
        final = self.path / SEGMENT_DIR / name
        self.check_place()
        tmp = _tmp_name(name)
        sfd = self._sfd
        try:
            with os.fdopen(_create_file(tmp, sfd, self.file_mode, readable=True), "w+b") as f:
                write_segment(table, f, manifest=self.manifest)
                f.flush()
                os.fsync(f.fileno())
                f.seek(0)
                entry = _segment_entry_of(f, name, table.num_rows)
            if _exists(name, sfd):  # planted: never replaced (the reader would refuse it)
                raise CaptureWriteError(final, "already exists (not made by this recorder); "
                                               "refusing to replace it")
            os.replace(tmp, name, src_dir_fd=sfd, dst_dir_fd=sfd)
            os.fsync(sfd)  # the segment's name survives a host crash
        except (OSError, CaptureWriteError) as exc:
            _unlink_quietly(tmp, sfd)
            if isinstance(exc, CaptureWriteError):
                raise
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
            if remove and self._live_name is not None:
                _unlink_quietly(self._live_name, self._dfd)
                try:
                    os.fsync(self._dfd)
                except OSError:
                    pass
        self._live_file = None
        self._live_name = None
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
            self.check_place()
        except CaptureWriteError as exc:
            err = exc  # said; the capture is still closed cleanly in its original directory
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
            _release_lock(self.path, self._lock_fd, dir_fd=self._dfd)
            self._lock_fd = None
            self._location = self.location()
            for fd in (self._sfd, self._dfd):
                try:
                    os.close(fd)
                except OSError:
                    pass
        if err is not None:
            raise err


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _segment_entry_of(f, name: str, rows: int) -> dict[str, Any]:
    """``segment_entry`` of an open file read from its current position."""
    h = hashlib.sha256()
    size = 0
    while chunk := f.read(1 << 20):
        h.update(chunk)
        size += len(chunk)
    return {"name": name, "rows": int(rows), "bytes": size, "sha256": h.hexdigest()}


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
                  counters: list[dict[str, Any]] | None = None,
                  manifest: dict[str, Any] | None = None) -> None:
    """Write a SAMPLE_SCHEMA table as one Parquet segment with the format's encodings.

    ``manifest``: the capture's manifest; its id, counter descriptors and interval are stored
    in the key-value metadata (``schema.origin_metadata``: what readers check the segment
    against). ``counters`` alone (no manifest): only the descriptors (``SEGMENT_COUNTERS_KEY``
    and pandas' ``PANDAS_ATTRS``) with ``counter_id`` added.
    """
    if manifest is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               **origin_metadata(manifest)})
    elif counters is not None:
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


_OWN_TOP = re.compile(r"(manifest\.json|\.manifest\.json(\.[0-9a-f]+)?\.tmp|\.lock|"
                      r"live-\d+\.arrow)")
_OWN_SEGMENT = re.compile(r"\.?seg-\d+\.parquet(\.[0-9a-f]+)?(\.tmp)?")


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
    rest = [c for c in p.iterdir() if c.name != LOCK_NAME]
    if not manifest.exists() and rest and all(
            c.name == SEGMENT_DIR and c.is_dir() and not c.is_symlink() and not any(c.iterdir())
            for c in rest):
        # what a start that failed before its first manifest left (older versions did not
        # clean up): an empty segments/ and nothing else holds no readings; --force retries
        (p / SEGMENT_DIR).rmdir()
        return
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
