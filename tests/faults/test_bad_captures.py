"""Bad captures the analysis must reject clearly, naming the file (never a plausible wrong number).

The captures are real: recorded by ``rdmascope record`` (a subprocess) on a small tree, with a
Parquet roll every 0.3 s so they hold several segments. Each fault is applied to a copy.

Where the "mixed captures" check lives: the analysis takes one capture directory per node and
run, so the way two hosts' data get "passed as one" is a directory that mixes their files (two
nodes' ``segments/`` copied together). Every reader goes through ``rdmascope.capture.read_capture``,
so the check is there: a reading (counter_id, sweep) stored twice is refused, naming the files.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from capture_builders import relist_segments
from rdmascope.analysis.load import load_capture, load_captures

from rdmascope.capture import (
    CaptureError,
    CaptureSchemaError,
    CorruptSegmentError,
    NotACaptureError,
    UnsupportedVersionError,
    read_capture,
)

from .conftest import Recorder, make_tree, run_cli


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two real captures (A and B, as if from two nodes), ~1 s each, several Parquet segments."""
    base = tmp_path_factory.mktemp("recorded")
    tree = make_tree(base / "sys")
    recs = [Recorder(base / name, tree.root, "--duration", "1.2s", fast_roll=0.3)
            for name in ("A", "B")]
    for r in recs:
        assert r.wait() == 0, r.stderr
    m = json.loads((base / "B" / "manifest.json").read_text())
    m["host"] = "node-b"  # the second node
    (base / "B" / "manifest.json").write_text(json.dumps(m))
    return base / "A", base / "B"


@pytest.fixture
def cap(recorded, tmp_path):
    """A fresh copy of capture A to damage."""
    dst = tmp_path / "cap"
    shutil.copytree(recorded[0], dst)
    return dst


def _segments(cap):
    segs = sorted((cap / "segments").glob("seg-*.parquet"))
    assert len(segs) >= 2, segs
    return segs


def _cli_fails_naming(path, *commands):
    """Each command exits 4 (rdmascope.exitcodes.EXIT_ERROR) with a message naming ``path`` (no traceback)."""
    for cmd in commands:
        res = run_cli(*cmd)
        assert res.exit_code == 4, (cmd, res.output, res.exception)
        assert str(path) in res.output, (cmd, res.output)
        assert "Traceback" not in res.output


@pytest.mark.parametrize("keep", [0, 3, 100, 0.5, -9, -1])
def test_truncated_segment(cap, keep):
    seg = _segments(cap)[1]
    data = seg.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else (keep if keep >= 0 else len(data) + keep)
    seg.write_bytes(data[:n])
    with pytest.raises(CorruptSegmentError) as ei:
        load_capture(cap)
    assert ei.value.path == str(seg)
    assert "truncated or corrupted" in str(ei.value)
    _cli_fails_naming(seg, ["inspect", cap], ["rates", cap], ["peaks", cap])


def test_every_single_byte_corruption_is_an_error_or_harmless(cap):
    """Flip one byte at a time (every byte of the footer, every 5th elsewhere): loading either
    raises a CaptureError naming the segment or returns exactly the original readings."""
    seg = _segments(cap)[0]
    data = seg.read_bytes()
    original = read_capture(cap).table
    footer_len = int.from_bytes(data[-8:-4], "little")
    footer_start = len(data) - 8 - footer_len
    positions = sorted(set(range(0, footer_start, 5)) | set(range(footer_start, len(data))))
    errors = harmless = 0
    silent = []
    for pos in positions:
        b = bytearray(data)
        b[pos] ^= 0xFF
        seg.write_bytes(bytes(b))
        try:
            t = read_capture(cap).table
        except CaptureError as exc:
            assert exc.path == str(seg), (pos, exc)
            errors += 1
            continue
        if t.equals(original):
            harmless += 1
        else:
            silent.append(pos)
    assert not silent, f"{len(silent)} of {len(positions)} single-byte corruptions of {seg.name} " \
                       f"loaded as different readings (first at byte {silent[:5]})"
    assert errors > 0.9 * len(positions)


def test_newer_format_version(cap):
    m = json.loads((cap / "manifest.json").read_text())
    m["format_version"] = 99
    (cap / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UnsupportedVersionError, match="version 99 is newer"):
        load_capture(cap)
    _cli_fails_naming(cap / "manifest.json", ["inspect", cap], ["rates", cap])


def test_newer_segment_format_version(cap):
    seg = _segments(cap)[1]
    t = pq.read_table(seg)
    t = t.replace_schema_metadata({**t.schema.metadata, b"rdmascope.format_version": b"7"})
    pq.write_table(t, seg)
    relist_segments(cap)  # as a newer writer would have listed it: the version check refuses it
    with pytest.raises(UnsupportedVersionError, match="segment format version 7") as ei:
        load_capture(cap)
    assert ei.value.path == str(seg)


@pytest.mark.parametrize("kind", ["empty dir", "other files", "a file", "foreign json",
                                  "broken json", "missing dir"])
def test_not_a_capture(tmp_path, kind):
    p = tmp_path / "x"
    if kind != "missing dir":
        p.mkdir()
    if kind == "other files":
        (p / "data.parquet").write_bytes(b"PAR1")
        (p / "segments").mkdir()
    elif kind == "a file":
        p.rmdir()
        p.write_text("hello")
    elif kind == "foreign json":
        (p / "manifest.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    elif kind == "broken json":
        (p / "manifest.json").write_text('{"format": "rdmascope-capture", ')
    with pytest.raises(NotACaptureError) as ei:
        load_capture(p)
    assert str(p) in str(ei.value)
    res = run_cli("inspect", p)
    assert res.exit_code != 0 and str(p) in res.output and "Traceback" not in res.output


def test_manifest_missing_keys(cap):
    m = json.loads((cap / "manifest.json").read_text())
    del m["counters"]
    (cap / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CaptureSchemaError, match="lacks required key.*counters"):
        load_capture(cap)


def test_mixed_captures_from_two_hosts_in_one_directory(recorded, cap):
    """Node B's segments copied into node A's capture: refused, naming the files."""
    _, b = recorded
    n = len(_segments(cap))
    for j, s in enumerate(sorted((b / "segments").glob("seg-*.parquet"))):
        shutil.copy(s, cap / "segments" / f"seg-{n + j:06d}.parquet")
    # each segment names its capture (format version 2): the first foreign one is refused, by name
    with pytest.raises(CaptureSchemaError, match="belongs to another capture") as ei:
        load_capture(cap)
    msg = str(ei.value)
    assert f"segments/seg-{n:06d}.parquet" in msg
    res = run_cli("inspect", cap)
    assert res.exit_code == 4 and "belongs to another capture" in res.output


def test_mixed_live_segment_from_another_capture(recorded, cap, tmp_path):
    """A live (crash-left) segment of another recording dropped into a capture: refused."""
    _, b = recorded
    other = tmp_path / "other"
    shutil.copytree(b, other)
    seg0 = sorted((other / "segments").glob("seg-*.parquet"))[0]
    # re-encode B's first segment as a live Arrow IPC stream with a new index
    t = pq.read_table(seg0)
    live = cap / "live-000099.arrow"
    with pa.OSFile(str(live), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    with pytest.raises(CaptureSchemaError, match="belongs to another capture") as ei:
        load_capture(cap)
    assert "live-000099.arrow" in str(ei.value)


def test_two_nodes_side_by_side_still_load(recorded):
    """The check does not refuse the normal case: two nodes' captures, each in its directory."""
    caps = load_captures(recorded)
    assert [c.meta["host"] for c in caps][1] == "node-b"
    assert all(c.clean_end and len(c.readings) for c in caps)
