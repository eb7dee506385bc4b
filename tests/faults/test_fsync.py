"""The capture writer syncs what it promises (docs/ARCHITECTURE.md, "Durability and file
safety"): one ``fdatasync`` of the live file per batch handed over (a host crash loses at most
the batch being written), and every rename (segment, manifest) preceded by an fsync of the
renamed file and followed by an fsync of its directory (the new name survives a crash).

The calls are counted by wrapping ``os.fdatasync``, ``os.fsync``, ``os.write`` and
``os.replace``; each file descriptor is named by what it points to at the time of the call.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rdmascope.capture import STATUS_OK, CaptureWriter, make_batch, read_capture

COUNTER = {"source": "infiniband", "device": "mlx5_0", "port": 1, "name": "port_xmit_data",
           "path": "/sys/x", "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64,
           "direction": "tx"}
FIELDS = {"interval_ns": 1_000_000, "counters": [COUNTER],
          "start": {"monotonic_ns": 0, "realtime_ns": 1_700_000_000 * 10**9}}  # the readings start at 0 ns


def batch(k0: int, n: int):
    ks = list(range(k0, k0 + n))
    return make_batch([0] * n, ks, ks, [5] * n, ks, [STATUS_OK] * n)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """The writer's sync, write and rename calls under tmp_path, in order: (op, path)."""
    log: list[tuple[str, str]] = []
    real = {n: getattr(os, n) for n in ("fsync", "fdatasync", "write", "replace")}
    root = str(tmp_path)

    def mine(path: str) -> bool:
        return path.startswith(root)

    def fsync(fd):
        p = _fd_path(fd)
        if mine(p):
            log.append(("fsync", p))
        return real["fsync"](fd)

    def fdatasync(fd):
        p = _fd_path(fd)
        if mine(p):
            log.append(("fdatasync", p))
        return real["fdatasync"](fd)

    def write(fd, data):
        p = _fd_path(fd)
        if mine(p):
            log.append(("write", p))
        return real["write"](fd, data)

    def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        d = _fd_path(dst_dir_fd) if dst_dir_fd is not None else os.path.dirname(str(dst))
        if mine(d):
            log.append(("replace", f"{d}/{os.path.basename(str(src))} -> {os.path.basename(str(dst))}"))
        return real["replace"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    for name, fn in (("fsync", fsync), ("fdatasync", fdatasync), ("write", write),
                     ("replace", replace)):
        monkeypatch.setattr(os, name, fn)
    return log


def test_each_batch_is_fdatasynced_once_after_its_write(tmp_path, calls):
    w = CaptureWriter.create(tmp_path / "cap", FIELDS)
    for k in range(5):
        before = len(calls)
        w.write_batch(batch(10 * k, 10))
        new = calls[before:]
        syncs = [p for op, p in new if op == "fdatasync"]
        assert len(syncs) == 1 and Path(syncs[0]).name.startswith("live-"), new
        # the sync comes after the batch's write to the same file (nothing written after it)
        assert new[-1] == ("fdatasync", syncs[0]), new
        assert ("write", syncs[0]) in new, new
    w.close()
    assert read_capture(tmp_path / "cap").table.num_rows == 50


def test_without_fsync_no_batch_is_synced(tmp_path, calls):
    """``fsync=False`` (benchmarks only) is the one way to skip it: the counter above sees it."""
    w = CaptureWriter.create(tmp_path / "cap", FIELDS, fsync=False)
    before = len(calls)
    for k in range(3):
        w.write_batch(batch(10 * k, 10))
    assert [c for c in calls[before:] if c[0] == "fdatasync"] == []
    w.close()


def test_every_rename_is_synced_before_and_after(tmp_path, calls):
    """Segment rolls, manifest rewrites (events, clock pairs, close): the file is fsynced before
    its rename, and its directory right after, before any other rename."""
    w = CaptureWriter.create(tmp_path / "cap", FIELDS)
    w.write_batch(batch(0, 10))
    w.add_event(1, None, "test", "saved")
    w.roll()
    w.write_batch(batch(10, 10))
    w.add_clock_pair()
    w.close()
    renames = [i for i, (op, _) in enumerate(calls) if op == "replace"]
    kinds = set()
    for i in renames:
        where, names = calls[i][1].rsplit("/", 1)
        tmp, final = names.split(" -> ")
        kinds.add("segment" if final.endswith(".parquet") else final)
        before = [c for c in calls[:i] if c[1] == f"{where}/{tmp}"]
        assert before and before[-1][0] == "fsync", (calls[i], calls[:i])
        after = calls[i + 1:]
        nxt = next((j for j, c in enumerate(after) if c[0] == "replace"), len(after))
        assert ("fsync", where) in after[:nxt], (calls[i], after[:nxt])
    assert kinds == {"segment", "manifest.json"}, calls
    # two segments (the roll and the close's roll), and the manifest written several times
    assert sum(1 for i in renames if calls[i][1].endswith(".parquet")) == 2
    assert sum(1 for i in renames if calls[i][1].endswith("manifest.json")) >= 4
    assert read_capture(tmp_path / "cap").table.num_rows == 20
