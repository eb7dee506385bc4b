"""The capture writer writes by handle, never by path: planted links, swapped directories and
the umask cannot make it write anywhere but the capture it created, with its own modes."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import time

import pytest
from rdmascope.sampler.faketree import build_device

from rdmascope.capture import (
    STATUS_OK,
    CaptureExistsError,
    CaptureWriteError,
    CaptureWriter,
    make_batch,
    read_capture,
)

COUNTER = {"source": "infiniband", "device": "mlx5_0", "port": 1, "name": "port_xmit_data",
           "path": "/sys/x", "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64,
           "direction": "tx"}
FIELDS = {"interval_ns": 1_000_000, "counters": [COUNTER],
          # the readings start at 0 ns: so does the capture (a reader refuses readings
          # long before its start)
          "start": {"monotonic_ns": 0, "realtime_ns": 1_700_000_000 * 10**9}}


def batch(k0: int, n: int):
    ks = list(range(k0, k0 + n))
    return make_batch([0] * n, ks, ks, [5] * n, ks, [STATUS_OK] * n)


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


def test_symlink_at_the_old_manifest_temporary_name_is_never_followed(tmp_path, victim):
    """Who can write the capture directory plants `.manifest.json.tmp -> /any/file`: the next
    manifest write does not touch that file (temporary names are unique, made O_EXCL)."""
    w = CaptureWriter.create(tmp_path / "cap", FIELDS)
    os.symlink(victim, tmp_path / "cap" / ".manifest.json.tmp")
    w.write_batch(batch(0, 10))
    w.add_event(1, None, "test", "saved")
    assert victim.read_text() == "precious\n"
    assert json.loads((tmp_path / "cap" / "manifest.json").read_text())["events"][-1][
        "message"] == "saved"
    os.unlink(tmp_path / "cap" / ".manifest.json.tmp")
    w.close()
    assert victim.read_text() == "precious\n"
    assert read_capture(tmp_path / "cap").table.num_rows == 10


def test_symlink_at_the_old_segment_temporary_name_is_never_followed(tmp_path, victim):
    w = CaptureWriter.create(tmp_path / "cap", FIELDS)
    w.write_batch(batch(0, 10))
    os.symlink(victim, tmp_path / "cap" / "segments" / ".seg-000000.parquet.tmp")
    w.roll()
    assert victim.read_text() == "precious\n"
    os.unlink(tmp_path / "cap" / "segments" / ".seg-000000.parquet.tmp")
    w.close()
    assert read_capture(tmp_path / "cap").table.num_rows == 10


def test_planted_live_file_or_segment_is_refused_not_written_through(tmp_path, victim):
    w = CaptureWriter.create(tmp_path / "cap", FIELDS)
    w.write_batch(batch(0, 10))
    w.roll()
    os.symlink(victim, tmp_path / "cap" / "live-000001.arrow")
    with pytest.raises(CaptureWriteError, match="live-000001.arrow: already exists"):
        w.write_batch(batch(10, 10))
    assert victim.read_text() == "precious\n"


def test_directory_swapped_for_a_symlink_mid_run_stops_and_writes_nothing_there(tmp_path):
    """The capture directory is renamed and a symbolic link to another capture put in its
    place: the next write stops with a clear error, the other capture is untouched, and the
    original directory (where it is now) is closed cleanly with every reading written."""
    other = tmp_path / "other"
    o = CaptureWriter.create(other, FIELDS)
    o.write_batch(batch(0, 5))
    o.close()
    before = {p.name: p.read_bytes() for p in sorted(other.rglob("*")) if p.is_file()}

    cap = tmp_path / "cap"
    w = CaptureWriter.create(cap, FIELDS)
    w.write_batch(batch(0, 100))
    w.roll()
    w.write_batch(batch(100, 50))
    os.rename(cap, tmp_path / "moved")
    os.symlink(other, cap)
    with pytest.raises(CaptureWriteError, match="moved, removed or replaced") as ei:
        w.write_batch(batch(150, 50))
    assert str(tmp_path / "moved") in str(ei.value)
    w.write_manifest()  # said once: closing goes on by handle, into the original directory
    w.close()
    after = {p.name: p.read_bytes() for p in sorted(other.rglob("*")) if p.is_file()}
    assert after == before
    got = read_capture(tmp_path / "moved")
    assert got.clean_end and got.table.num_rows == 150
    assert w.location() == tmp_path / "moved"


def test_directory_deleted_and_recreated_mid_run_is_said_never_clean(tmp_path):
    cap = tmp_path / "cap"
    w = CaptureWriter.create(cap, FIELDS)
    w.write_batch(batch(0, 100))
    for p in sorted(cap.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    cap.rmdir()
    cap.mkdir()
    with pytest.raises(CaptureWriteError, match="deleted: the readings written so far are lost"):
        w.write_batch(batch(100, 10))
    with pytest.raises(CaptureWriteError):
        w.close()
    assert list(cap.iterdir()) == []  # nothing written into the new directory
    assert w.location() is None


@pytest.mark.parametrize("private", [False, True])
def test_modes_are_explicit_whatever_the_umask(tmp_path, private):
    old = os.umask(0)
    try:
        w = CaptureWriter.create(tmp_path / "cap", FIELDS, private=private)
        w.write_batch(batch(0, 10))
        w.roll()
        w.write_batch(batch(10, 10))
        cap = tmp_path / "cap"
        modes = {p.relative_to(cap).as_posix(): stat.S_IMODE(p.stat().st_mode)
                 for p in [cap, *cap.rglob("*")]}
        w.close()
    finally:
        os.umask(old)
    d, f = (0o700, 0o600) if private else (0o755, 0o644)
    assert modes == {".": d, "segments": d, "manifest.json": f, ".lock": f,
                     "segments/seg-000000.parquet": f, "live-000001.arrow": f}


def test_failed_start_on_a_full_disk_leaves_nothing_that_blocks_the_retry(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    for target in (tmp_path / "new", tmp_path / "empty"):
        if target.name == "empty":
            target.mkdir()
        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(CaptureWriteError, match="No space left"):
            CaptureWriter.create(target, FIELDS)
        monkeypatch.undo()
        if target.name == "new":
            assert not target.exists()  # made by the failed start: removed again
        else:
            assert list(target.iterdir()) == []  # the user's empty directory: empty again
        w = CaptureWriter.create(target, FIELDS)  # the retry, without --force
        w.close()
        assert read_capture(target).clean_end


def test_force_retries_over_what_an_older_failed_start_left(tmp_path):
    """An empty segments/ and nothing else (no manifest, no readings), as a failed start of an
    older version left it: --force records over it; a segments/ holding files is refused."""
    d = tmp_path / "cap"
    (d / "segments").mkdir(parents=True)
    w = CaptureWriter.create(d, FIELDS, force=True)
    w.close()
    assert read_capture(d).clean_end
    e = tmp_path / "other"
    (e / "segments").mkdir(parents=True)
    (e / "segments" / "notes.txt").write_text("x")
    with pytest.raises(CaptureExistsError, match="not an rdmascope capture"):
        CaptureWriter.create(e, FIELDS, force=True)
    assert (e / "segments" / "notes.txt").read_text() == "x"


def test_record_host_placeholder_is_sanitised_and_said(tmp_path):
    """An emulated node's host name with '/' and '..' in -o {host}: one safe directory under
    the parent, and a note saying what it became."""
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    (root / ".rdmascope-host").write_text(json.dumps({"host": "../x/\x1b[2Jnode"}))
    runs = tmp_path / "runs"
    runs.mkdir()
    r = subprocess.run([sys.executable, "-m", "rdmascope", "record", "-o", str(runs / "{host}"),
                        "--sysfs-root", str(root), "--duration", "0.3s", "--no-status"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in runs.iterdir()] == ["_.._x___2Jnode"]
    assert "'{host}' in -o became '_.._x___2Jnode'" in r.stderr
    assert not (tmp_path / "x").exists()


def test_record_stops_when_its_directory_is_swapped(tmp_path):
    """A live recording whose directory is renamed and replaced by a symlink to another
    directory: it stops within a handoff with exit 1 naming where the capture now is, and
    writes nothing into the other directory."""
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    out, other = tmp_path / "cap", tmp_path / "other"
    other.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                          "--sysfs-root", str(root), "--duration", "60s", "--no-status"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end and not list(out.glob("live-*.arrow")):
        time.sleep(0.05)
    os.rename(out, tmp_path / "moved")
    os.symlink(other, out)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 4, err
    assert "moved, removed or replaced" in err
    assert f"kept and loads in {tmp_path / 'moved'}" in err
    assert list(other.iterdir()) == []
    cap = read_capture(tmp_path / "moved")
    assert cap.clean_end and cap.manifest["audit"]["stopped_by"] == "write_error"
    assert cap.table.num_rows == cap.manifest["audit"]["rows_written"] > 0


def test_record_says_when_its_directory_was_deleted(tmp_path):
    """A live recording whose directory is deleted: it stops with exit 4, says the capture
    directory was deleted and what was taken, and never claims that anything 'is kept and
    loads'."""
    import shutil

    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    out = tmp_path / "cap"
    p = subprocess.Popen([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                          "--sysfs-root", str(root), "--duration", "60s", "--no-status"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end and not list(out.glob("live-*.arrow")):
        time.sleep(0.05)
    shutil.rmtree(out)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 4, err
    assert "the capture directory was deleted: what was written is lost" in err, err
    assert "kept and loads" not in err
    assert not out.exists()
