"""The capture format as the sampler uses it: round trip, the frozen v1 capture, refusals."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from rdmascope.sampler.reader import SweepBuffers
from rdmascope.sampler.writer_thread import to_batch

from rdmascope.capture import (
    FORMAT_VERSION,
    CaptureExistsError,
    CaptureLockedError,
    CaptureWriter,
    NotACaptureError,
    UnsupportedVersionError,
    read_capture,
)

COUNTER = {"source": "infiniband", "device": "mlx5_0", "port": 1, "name": "port_xmit_data",
           "path": "/sys/x", "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64,
           "direction": "tx"}


#: a start at 0 ns, where these tests' readings start (a reader refuses readings long before
#: the manifest's start)
START0 = {"monotonic_ns": 0, "realtime_ns": 1_700_000_000 * 10**9}

def buffer_rows(rows):
    buf = SweepBuffers()
    for cid, k, tb, d, v, st in rows:
        if cid == 0:
            buf.sweep_start_ns.append(tb)
        buf.counter_id.append(cid)
        buf.sweep.append(k)
        buf.t_before_ns.append(tb)
        buf.read_duration_ns.append(d)
        buf.value.append(0 if st else v)
        buf.status.append(st)
        buf.n_bad += bool(st)
    return buf


def test_round_trip_through_sampler_buffers(tmp_path):
    rows = [(c, k, 1_000_000 * k + 10 * c, 700 + c, (1 << 63) + 5 * k + c, 0)
            for k in range(300) for c in range(2)]
    rows[7] = (1, 3, rows[7][2], 0, 0, 3)  # one missing reading -> null value
    w = CaptureWriter.create(tmp_path / "cap", {"interval_ns": 1_000_000,
                                                "counters": [COUNTER, {**COUNTER, "port": 2}],
                                                "start": START0})
    w.write_batch(to_batch(buffer_rows(rows[:200])))
    w.roll()
    w.write_batch(to_batch(buffer_rows(rows[200:])))
    w.add_event(5, 1, "unavailable", "missing: test")
    w.close(audit={"sweeps_taken": 300})
    cap = read_capture(tmp_path / "cap")
    assert cap.clean_end and cap.manifest["audit"] == {"sweeps_taken": 300}
    got = sorted(tuple(r.values()) for r in cap.table.to_pylist())
    want = sorted((c, k, tb, d, None if st else v, st) for c, k, tb, d, v, st in rows)
    assert got == want
    assert cap.manifest["events"][0]["message"] == "missing: test"


def test_committed_v1_capture_loads(fixtures_dir):
    cap = read_capture(fixtures_dir / "v1-capture")
    m = cap.manifest
    assert m["format_version"] == 1 and m["writer"] == "sampler" and cap.clean_end
    assert m["interval_ns"] == 1_000_000
    names = [(c["device"], c["name"]) for c in m["counters"]]
    assert names[:4] == [("roceP2p1s0f1", "port_xmit_data"), ("roceP2p1s0f1", "port_rcv_data"),
                         ("rocep1s0f1", "port_xmit_data"), ("rocep1s0f1", "port_rcv_data")]
    t = cap.table
    assert t.num_rows == 8 * m["audit"]["sweeps_taken"] == 16000
    assert set(np.asarray(t["status"]).tolist()) == {0}
    cid = np.asarray(t["counter_id"])
    # the twin left alone kept its start value (1000 + port 1) for the whole capture
    assert set(np.asarray(t["value"])[cid == 0].tolist()) == {1001}
    # the busy twin: starts at 2,880,761,508,849+, moves in steps of 1,250 units (5,000 bytes)
    tx = np.asarray(t["value"])[cid == 2].astype(np.int64)
    assert tx[0] >= 2880761508849 and np.all(np.diff(tx) >= 0)
    steps = np.diff(tx)
    assert np.all(steps % 1250 == 0) and steps.sum() > 0
    assert m["counters"][2]["bytes_per_unit"] == 4


def test_corrupt_manifest_is_refused_with_the_file_named(tmp_path, fixtures_dir):
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(fixtures_dir / "v1-capture", cap)
    (cap / "manifest.json").write_bytes(b"\x00\x01garbage{")
    with pytest.raises(NotACaptureError, match="manifest.json.*not valid JSON"):
        read_capture(cap)
    (cap / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(NotACaptureError, match="expected 'rdmascope-capture'"):
        read_capture(cap)


def test_newer_version_refused_naming_both_versions(tmp_path, fixtures_dir):
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(fixtures_dir / "v1-capture", cap)
    m = json.loads((cap / "manifest.json").read_text())
    m["format_version"] = FORMAT_VERSION + 1
    (cap / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UnsupportedVersionError) as ei:
        read_capture(cap)
    msg = str(ei.value)
    assert f"version {FORMAT_VERSION + 1}" in msg and f"version {FORMAT_VERSION}" in msg


def test_to_batch_masks_bad_rows():
    buf = buffer_rows([(0, 0, 5, 1, 42, 0), (1, 0, 6, 1, 0, 2)])
    b = to_batch(buf)
    assert b.column("value").to_pylist() == [42, None]
    assert b.column("status").type == pa.uint8()


def test_truncated_segment_is_refused_with_the_file_named(tmp_path, fixtures_dir):
    import shutil

    from rdmascope.capture import CorruptSegmentError

    cap = tmp_path / "cap"
    shutil.copytree(fixtures_dir / "v1-capture", cap)
    seg = cap / "segments" / "seg-000000.parquet"
    data = seg.read_bytes()
    seg.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptSegmentError, match="seg-000000.parquet"):
        read_capture(cap)


def test_lock_refuses_a_second_writer_and_readers_ignore_it(tmp_path):
    import os

    path = tmp_path / "cap"
    fields = {"interval_ns": 1_000_000, "counters": [COUNTER], "start": START0}
    w = CaptureWriter.create(path, fields)
    w.write_batch(to_batch(buffer_rows([(0, 0, 10, 5, 7, 0)])))
    for force in (False, True):
        with pytest.raises(CaptureLockedError) as ei:
            CaptureWriter.create(path, fields, force=force)
        assert ei.value.pid == os.getpid()
        assert f"being recorded by another process (pid {os.getpid()})" in str(ei.value)
    # the refused writers touched nothing: the live file and the lock are still there
    assert sorted(p.name for p in path.iterdir()) == [".lock", "live-000000.arrow",
                                                      "manifest.json", "segments"]
    cap = read_capture(path)  # a reader while recording: the lock file is not a segment
    assert cap.table.num_rows == 1 and [f.name for f in cap.files] == ["live-000000.arrow"]
    w.close()
    assert not (path / ".lock").exists()
    with pytest.raises(CaptureExistsError, match="use --force"):
        CaptureWriter.create(path, fields)
    assert not (path / ".lock").exists()  # a refusal leaves no lock file behind
    w2 = CaptureWriter.create(path, fields, force=True)
    w2.close()
    assert read_capture(path).table.num_rows == 0


def test_lock_of_a_dead_writer_is_not_stale(tmp_path):
    """A writer killed without close() leaves .lock on disk; the kernel dropped the flock."""
    import subprocess
    import sys

    path = tmp_path / "cap"
    code = ("import os, sys; from rdmascope.capture import CaptureWriter; "
            "CaptureWriter.create(sys.argv[1], {'interval_ns': 1000000, 'counters': []}); "
            "os._exit(0)")  # exits without close(), like a kill -9
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    assert (path / ".lock").exists()
    w = CaptureWriter.create(path, {"interval_ns": 1_000_000, "counters": []}, force=True)
    w.close()


def test_non_capture_directory_gets_no_lock_file(tmp_path):
    d = tmp_path / "home"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    for force in (False, True):
        with pytest.raises(CaptureExistsError):
            CaptureWriter.create(d, {"interval_ns": 1_000_000, "counters": []}, force=force)
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]


def test_failed_manifest_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """Disk full while saving the manifest: the old manifest stays, no 0-byte .tmp is left."""
    import errno
    import os

    from rdmascope.capture import CaptureWriteError, is_enospc

    w = CaptureWriter.create(tmp_path / "cap", {"interval_ns": 1_000_000, "counters": [COUNTER],
                                                "start": START0})
    before = (tmp_path / "cap" / "manifest.json").read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    w.add_event(1, None, "test", "not saved", save=False)
    with pytest.raises(CaptureWriteError, match="cannot write manifest: No space left") as ei:
        w.write_manifest()
    assert is_enospc(ei.value)
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "cap").iterdir()) == [".lock", "manifest.json",
                                                                   "segments"]
    assert (tmp_path / "cap" / "manifest.json").read_bytes() == before
    w.close()


def test_failed_live_write_keeps_exactly_the_counted_rows(tmp_path, monkeypatch):
    """A live write that fills the disk mid-batch: the cut-off batch is never completed later
    (not even when space returns before close), so rows on disk == rows_written."""
    import errno
    import os

    import rdmascope.capture as C

    quota = {"left": None}
    real_write = os.write

    def limited(fd, data):
        if quota["left"] is not None:
            if quota["left"] <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            data = memoryview(data)[:quota["left"]]
            quota["left"] -= len(data)
        return real_write(fd, data)

    rows = [(0, k, k, 5, k, 0) for k in range(3000)]
    w = CaptureWriter.create(tmp_path / "cap", {"interval_ns": 1_000_000, "counters": [COUNTER],
                                                "start": START0})
    w.write_batch(to_batch(buffer_rows(rows[:1000])))
    monkeypatch.setattr(C.os, "write", limited)
    quota["left"] = 700  # part of the next batch fits, then the disk is full
    with pytest.raises(C.CaptureWriteError, match="No space left on device"):
        w.write_batch(to_batch(buffer_rows(rows[1000:2000])))
    with pytest.raises(C.CaptureWriteError, match="earlier write to this live segment failed"):
        w.write_batch(to_batch(buffer_rows(rows[2000:])))
    quota["left"] = None  # space is back (e.g. a failed roll's temporary file was removed)
    cap = read_capture(tmp_path / "cap")
    assert cap.table.num_rows == 1000 == w.rows_written and cap.truncated_live
    w._close_live(remove=False)  # as close() does when the final roll fails
    cap = read_capture(tmp_path / "cap")
    assert cap.table.num_rows == 1000 and cap.table["sweep"].to_pylist() == list(range(1000))


def test_force_never_removes_what_is_not_the_capture_s_own(tmp_path):
    """--force used to remove every top-level name starting with '.' or 'live-'; a user's hidden
    file in a capture directory must survive and the overwrite be refused, naming it."""
    from rdmascope.capture import CaptureExistsError, foreign_entries

    counters = [{"source": "infiniband", "device": "a", "port": 1, "name": "port_xmit_data",
                 "path": "x", "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64,
                 "direction": "tx"}]
    cap = tmp_path / "c"
    CaptureWriter.create(cap, {"counters": counters, "interval_ns": 1_000_000}).close()
    assert foreign_entries(cap) == []
    (cap / ".notes").write_text("mine")
    (cap / "segments" / "README").write_text("mine too")
    assert [p.name for p in foreign_entries(cap)] == [".notes", "README"]
    assert foreign_entries(cap, allowed=(".notes",)) == [cap / "segments" / "README"]
    with pytest.raises(CaptureExistsError, match=r"\.notes"):
        CaptureWriter.create(cap, {"counters": counters, "interval_ns": 1_000_000}, force=True)
    assert (cap / ".notes").read_text() == "mine"
    (cap / ".notes").unlink()
    (cap / "segments" / "README").unlink()
    CaptureWriter.create(cap, {"counters": counters, "interval_ns": 1_000_000}, force=True).close()
