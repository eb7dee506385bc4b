"""Reading a capture: the manifest (validated), segments and live files, checked as read.

The analysis reads captures only through this module (and ``rdmascope.capture.schema``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from rdmascope.capture.schema import (
    COLUMNS,
    FORMAT_NAME,
    FORMAT_VERSION,
    LIVE_PREFIX,
    LIVE_SUFFIX,
    MANIFEST_NAME,
    SAMPLE_SCHEMA,
    SEGMENT_COUNTERS_KEY,
    SEGMENT_DIR,
    SEGMENT_PREFIX,
    SEGMENT_SUFFIX,
    CaptureError,
    CaptureSchemaError,
    CorruptSegmentError,
    NotACaptureError,
    UnsupportedVersionError,
    _check_manifest_types,
    _check_schema,
    check_origin,
    empty_table,
)

# ----------------------------------------------------------------------------------------------
# Reader
# ----------------------------------------------------------------------------------------------

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
    required key of ``MANIFEST_FIELDS`` is missing, a value has the wrong type or is out of
    range, ``counters`` is empty or differs from the first segment's stored descriptors, or
    ``start`` is after the first reading: see ``_check_manifest_files``), each naming the file
    and the key. Every reader of this module (and every command) starts here.
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
    if not isinstance(m, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(m), "a number")
        raise NotACaptureError(mpath, f"holds {kind}, not an object; a capture manifest is a "
                                      f"JSON object with \"format\": \"{FORMAT_NAME}\"")
    if m.get("format") != FORMAT_NAME:
        raise NotACaptureError(mpath, f"format is {m.get('format')!r}, expected {FORMAT_NAME!r}")
    v = m.get("format_version")
    if not isinstance(v, int) or v < 1:
        raise UnsupportedVersionError(mpath, f"format_version {v!r} is not a positive integer")
    if v > FORMAT_VERSION:
        raise UnsupportedVersionError(
            mpath, f"capture format version {v} is newer than this rdmascope supports "
                   f"(version {FORMAT_VERSION}); upgrade rdmascope to read it")
    _check_manifest_types(mpath, m)  # MANIFEST_FIELDS: the required keys, types and ranges
    _check_manifest_files(p, mpath, m)
    return m


#: Readings may precede the manifest's start by at most this much (or two intervals, whichever
#: is longer): the recorder stamps the start before its first sweep (the first reading follows
#: it by well under 1 ms), so a start later than that was edited or belongs to another capture.
START_TOLERANCE_NS = 1_000_000_000


def _first_file(p: Path, m: dict[str, Any]
                ) -> tuple[Path, dict[bytes, bytes] | None, int | None] | None:
    """(first segment or live file, its schema metadata, its first ``t_before_ns``), or None
    when the capture has no file yet, or the first one cannot be read or does not match its
    manifest record's size and SHA-256 (a corrupt file: its reader names that, not the
    manifest)."""
    segs, lives = list_capture_files(p)
    try:
        if segs:
            rec = {r["name"]: r for r in m.get("segments") or []}.get(segs[0].name)
            data = segs[0].read_bytes()
            if rec is not None and (len(data) != rec["bytes"]
                                    or hashlib.sha256(data).hexdigest() != rec["sha256"]):
                return None
            meta = pq.read_schema(pa.BufferReader(data)).metadata
            rng = segment_time_range(pa.BufferReader(data))
            return segs[0], meta, None if rng is None else rng[0]
        if lives:
            with open(lives[0], "rb") as f:
                reader = ipc.open_stream(f)
                meta = reader.schema.metadata
                try:
                    b = reader.read_next_batch()
                except StopIteration:
                    return lives[0], meta, None
                t = b.column(b.schema.get_field_index("t_before_ns"))
                first = int(t.to_numpy(zero_copy_only=False).min()) if b.num_rows else None
                return lives[0], meta, first
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError, AttributeError):
        return None
    return None


def _check_manifest_files(p: Path, mpath: Path, m: dict[str, Any]) -> None:
    """The manifest against the capture's files, before any analysis reads it: ``counters`` is
    non-empty; the first segment (or live file) was written with these counter descriptors and
    this capture id (``check_origin``); the first reading does not precede ``start`` by more than
    ``START_TOLERANCE_NS`` (or two intervals). Raises ``CaptureSchemaError`` naming the manifest
    (or the file) and the key. Cheap: one Parquet footer, or a live file's first batch."""
    if not m["counters"]:
        raise CaptureSchemaError(mpath, "manifest key 'counters' is empty: a capture records at "
                                        "least one counter, and its segments name theirs (the "
                                        "list was emptied by hand?)")
    first = _first_file(p, m)
    if first is None:
        return
    f, meta, t_first = first
    check_origin(f, meta, m)
    start = m["start"]["monotonic_ns"]
    tol = max(START_TOLERANCE_NS, 2 * m["interval_ns"])
    if t_first is not None and t_first < start - tol:
        raise CaptureSchemaError(
            mpath, f"manifest key 'start': monotonic_ns {start} is {(start - t_first) / 1e9:.3f} s "
                   f"after the first reading ({t_first} ns, in {f.parent.name}/{f.name}); a "
                   f"capture starts before its first reading (at most {tol / 1e9:g} s of clock "
                   "noise): the manifest was edited or the files are another capture's")


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


def _read_live(path: Path, manifest: dict[str, Any] | None = None
               ) -> tuple[list[pa.RecordBatch], bool]:
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
    if manifest is not None:
        check_origin(path, reader.schema.metadata, manifest)
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
    listed = listed_segments(p, manifest, segs)
    tables: list[pa.Table] = []
    table_files: list[Path] = []
    for s in segs:
        pf = _open_segment(s, listed.get(s.name), manifest)
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
        batches, cut = _read_live(lf, manifest)
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


def listed_segments(path: Path, manifest: dict[str, Any], segs: list[Path]
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
                                  f"is listed in the manifest but missing on disk ({len(gone)} "
                                  f"of its {len(listed)} listed segment(s) are); the capture is "
                                  "incomplete")
    last = max(listed) if listed else ""
    stray = [n for n in sorted(on_disk - set(listed)) if n < last]
    if stray:
        raise CaptureSchemaError(path / SEGMENT_DIR / stray[0],
                                 "is not listed in the manifest although later segments are; "
                                 "it does not belong to this capture")
    return listed


def _open_segment(s: Path, record: dict[str, Any] | None,
                  manifest: dict[str, Any] | None = None) -> pq.ParquetFile:
    """Open one Parquet segment, verifying its size and SHA-256 against the manifest record.

    Every read checks the digest (about 0.1 s of CPU per hour of an 8-counter capture): Parquet's
    page checksums do not cover the footer, where a flipped bit can drop or alter readings
    silently. The page checksums are verified only for a segment without a record. (Hashing in a
    worker thread beside the decode was tried: the thread's stack and malloc arena took enough
    address space to push a two-run ``report`` over the limit of ``tests/test_memory_limit.py``.)
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
        # the page checksums are checked where no digest was: a segment the manifest does not
        # list yet (a crash between its rename and the manifest write); the digest already
        # covers every byte of the pages (checking both cost ~0.08 s of CPU per hour)
        pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=record is None)
    except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: undecodable footer
        raise CorruptSegmentError(s, f"cannot read Parquet segment ({exc}); the file is "
                                     "truncated or corrupted") from exc
    _check_schema(s, pf.schema_arrow)
    if manifest is not None:
        check_origin(s, pf.schema_arrow.metadata, manifest)
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
    listed = listed_segments(p, manifest, segs)
    for s in segs:
        pf = _open_segment(s, listed.get(s.name), manifest)
        _check_rows(s, listed.get(s.name), pf.metadata.num_rows)
        try:
            yield from pf.iter_batches(batch_size=batch_rows, columns=list(COLUMNS))
        except CaptureError:
            raise
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptSegmentError(s, f"cannot read Parquet segment ({exc})") from exc
    for lf in lives:
        batches, _ = _read_live(lf, manifest)
        yield from batches


def segment_time_range(s: Path | pa.BufferReader) -> tuple[int, int] | None:
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


def live_time_range(f: Path) -> tuple[int, int] | None:
    """Return (min, max) ``t_before_ns`` of a live Arrow IPC segment, or None when it holds none.

    A live segment has no footer statistics, so its readings are read (at most one segment's
    worth, ~60 s); a cut-off tail (a recorder killed mid-write, or one still writing) yields the
    complete batches before it. An unreadable file gives None (its reader names the problem).
    """
    try:
        batches, _ = _read_live(Path(f))
    except (CorruptSegmentError, OSError, ValueError):
        return None
    lo = hi = None
    for b in batches:
        if b.num_rows == 0:
            continue
        t = b.column(b.schema.get_field_index("t_before_ns")).to_numpy(zero_copy_only=False)
        bmin, bmax = int(t.min()), int(t.max())
        lo = bmin if lo is None else min(lo, bmin)
        hi = bmax if hi is None else max(hi, bmax)
    return None if lo is None else (int(lo), int(hi))


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
    listed = listed_segments(p, m, segs)
    if report is not None:
        report.update(files=segs + lives, live_rows=0, truncated_live=[])
    cols = list(dict.fromkeys(["counter_id", "sweep", *(columns or COLUMNS)]))
    bad = [c for c in cols if c not in COLUMNS]
    if bad:
        raise ValueError(f"no column {bad[0]!r} in a capture (columns: {', '.join(COLUMNS)})")
    keep = list(range(len(segs)))
    if (start_ns is not None or end_ns is not None) and segs:
        ranges = [segment_time_range(s) for s in segs]
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
        pf = _open_segment(s, rec, m)
        _check_rows(s, rec, pf.metadata.num_rows)
        try:
            t = pf.read(columns=cols)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptSegmentError(s, f"cannot read Parquet segment ({exc}); the file is "
                                         "truncated or corrupted") from exc
        t = t.cast(pa.schema([SAMPLE_SCHEMA.field(c) for c in cols]))
        # handed over, not kept: this frame holds no reference to the table while the consumer
        # works on it and the next segment is read (two segments' tables in memory otherwise)
        box = [_prepare(p, m, s, t, counter_ids)]
        del t, pf
        yield s, box.pop()
    for lf in lives:
        batches, cut = _read_live(lf, m)
        if report is not None:
            report["live_rows"] += sum(b.num_rows for b in batches)
            if cut:
                report["truncated_live"].append(lf)
        if batches:
            t = pa.Table.from_batches(batches).select(cols)
            t = t.cast(pa.schema([SAMPLE_SCHEMA.field(c) for c in cols]))
            box = [_prepare(p, m, lf, t, counter_ids)]
            del t, batches
            yield lf, box.pop()


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
