"""Security: no privileges beyond reading sysfs, no network, writes only inside the output
directory, and no symlink followed out of it.

- The recorder runs as ``nobody`` (``setpriv``, when the test is root) on a world-readable tree:
  it records normally with no capability and no supplementary group; ``--rt-priority`` as
  ``nobody`` is refused with a clear message before anything is written.
- While it runs, its open descriptors hold no socket and psutil sees no connection.
- Under ``strace -f`` every file-changing system call (open for writing, create, mkdir, rename,
  unlink, chmod, truncate, link/symlink) names a path inside the output directory (or
  /dev/null), and no socket is created at all.
- A symlink leading out of the output directory is refused or removed, never written through:
  the output path itself, a planted ``segments/``, and (with ``--force``) planted
  ``manifest.json``, ``live-*.arrow``, ``segments/seg-*.parquet`` and ``.manifest.json.tmp``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import psutil
import pytest
from rdmascope.analysis.load import load_capture

from rdmascope.capture import CaptureWriter

from .conftest import Recorder, drop_privileges_prefix, make_tree, make_world_readable

WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def _sockets(pid: int) -> list[str]:
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return [t for t in fds if t.startswith("socket:")]


def test_unprivileged_no_network(tmp_path, world_dir):
    prefix, uid = drop_privileges_prefix()
    tree = make_tree(world_dir / "sys")
    make_world_readable(world_dir / "sys")
    (world_dir / "out").mkdir()
    os.chown(world_dir / "out", uid, -1)
    out = world_dir / "out" / "cap"
    rec = Recorder(out, tree.root, "--duration", "2s", prefix=prefix, logdir=tmp_path)
    try:
        rec.wait_sampling()
        checks = 0
        while rec.proc.poll() is None and checks < 5:
            st = _proc_status(rec.pid)
            if prefix:  # setpriv exec'd the recorder: same pid, nobody, no capability
                assert st["Uid"].split() == [str(uid)] * 4, st["Uid"]
                assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0
            assert _sockets(rec.pid) == []
            assert psutil.Process(rec.pid).net_connections(kind="all") == []
            checks += 1
            time.sleep(0.2)
        assert checks >= 3
        rc = rec.wait()
    finally:
        rec.kill()
    assert rc == 0, rec.stderr
    cap = load_capture(out)
    assert cap.clean_end and len(cap.readings) > 0 and cap.readings["valid"].all()
    assert all(os.stat(p).st_uid == uid for p in [out, *out.rglob("*")])


def test_rt_priority_needs_privilege(tmp_path, world_dir):
    prefix, uid = drop_privileges_prefix()
    if not prefix:
        pytest.skip("needs root to test an unprivileged --rt-priority")
    tree = make_tree(world_dir / "sys")
    make_world_readable(world_dir / "sys")
    (world_dir / "out").mkdir()
    os.chown(world_dir / "out", uid, -1)
    out = world_dir / "out" / "cap"
    rec = Recorder(out, tree.root, "--duration", "1s", "--rt-priority", "10", prefix=prefix,
                   logdir=tmp_path)
    assert rec.wait() == 4
    assert "--rt-priority 10: not permitted" in rec.stderr
    assert "CAP_SYS_NICE" in rec.stderr
    assert not out.exists()  # refused before anything was written


_PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')


#: a directory descriptor argument as ``strace -y`` prints it (``5</tmp/cap>``), then a path
_AT_PATH = re.compile(r'(?:(?:\d+|AT_FDCWD)(?:<([^>]*)>)?,\s*)?"((?:[^"\\]|\\.)*)"')


def _at_paths(rest: str) -> list[tuple[str | None, str]]:
    """(directory of the dirfd or None, path) of each path argument of a strace line: files are
    made relative to the capture directory's handle (openat(dirfd, name)), so a relative name is
    joined to the directory that descriptor names."""
    return [(base or None, path) for base, path in _AT_PATH.findall(rest)]


def test_writes_only_inside_output_dir(tmp_path):
    if shutil.which("strace") is None:
        pytest.skip("strace not available")
    tree = make_tree(tmp_path / "sys")
    out = tmp_path / "cap"
    work = tmp_path / "cwd"
    work.mkdir()
    log = tmp_path / "strace.log"
    calls = ("open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,"
             "rmdir,symlink,symlinkat,link,linkat,chmod,fchmodat,truncate,socket,bind,listen,"
             "connect")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    res = subprocess.run(
        ["strace", "-f", "-qq", "-y", "-o", str(log), "-e", f"trace={calls}",
         sys.executable, "-c",
         "import sys; import rdmascope.sampler.writer_thread as w; w.ROLL_INTERVAL_S = 0.3; "
         "from rdmascope.cli import main; main(prog_name='rdmascope')",
         "record", "-o", str(out), "--sysfs-root", str(tree.root), "--duration", "1.2s",
         "--no-status"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    if res.returncode != 0 and "ptrace" in res.stderr:
        pytest.skip(f"strace not permitted here: {res.stderr.strip()[:200]}")
    assert res.returncode == 0, res.stderr
    assert load_capture(out).clean_end
    writes, outside = [], []
    for line in log.read_text().splitlines():
        m = re.match(r"\d+\s+(\w+)\((.*)", line)
        if not m:
            continue
        name, rest = m.groups()
        assert name not in ("socket", "bind", "listen", "connect"), line
        if name in ("open", "openat", "openat2", "creat"):
            if name != "creat" and not any(f in rest for f in WRITE_FLAGS):
                continue
            paths = _at_paths(rest)[:1]
        else:
            paths = _at_paths(rest)
        for base, p in paths:
            full = os.path.normpath(os.path.join(base or work, p))
            writes.append(full)
            if full == "/dev/null":
                continue
            if not (full == str(out) or full.startswith(str(out) + os.sep)):
                outside.append(line)
    assert not outside, "writes outside the output directory:\n" + "\n".join(outside)
    assert any(w.endswith("manifest.json") for w in writes)
    assert any("/segments/seg-" in w for w in writes)  # rolls happened, and were seen


@pytest.fixture
def victim(tmp_path):
    """A directory outside the capture holding a precious file; returns (dir, snapshot())."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious").write_bytes(b"precious data\n")

    def snapshot():
        return {p.name: p.read_bytes() for p in d.iterdir()}

    return d, snapshot


def _old_capture(path):
    """An existing (finished) capture to overwrite with --force."""
    w = CaptureWriter.create(path, {"counters": [], "interval_ns": 1_000_000})
    w.close()


def test_symlinked_output_dir_refused(tmp_path, tree, victim):
    d, snap = victim
    before = snap()
    (tmp_path / "cap").symlink_to(d)
    for extra in ([], ["--force"]):
        rec = Recorder(tmp_path / "cap", tree.root, "--duration", "0.3s", *extra)
        assert rec.wait() == 4
        assert "symbolic link" in rec.stderr and str(tmp_path / "cap") in rec.stderr
    assert snap() == before


def test_planted_segments_symlink_refused(tmp_path, tree, victim):
    d, snap = victim
    before = snap()
    out = tmp_path / "cap"
    _old_capture(out)
    shutil.rmtree(out / "segments")
    (out / "segments").symlink_to(d)
    rec = Recorder(out, tree.root, "--duration", "0.3s", "--force")
    assert rec.wait() == 4
    assert "symbolic link" in rec.stderr and str(out / "segments") in rec.stderr
    assert snap() == before


@pytest.mark.parametrize("planted", ["manifest.json", "live-000000.arrow",
                                     "segments/seg-000000.parquet", ".manifest.json.tmp",
                                     "segments/.seg-000000.parquet.tmp", ".lock"])
def test_planted_file_symlinks_not_followed(tmp_path, tree, victim, planted):
    d, snap = victim
    before = snap()
    out = tmp_path / "cap"
    _old_capture(out)
    link = out / planted
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(d / "precious")
    rec = Recorder(out, tree.root, "--duration", "0.3s")  # without --force: refused
    assert rec.wait() == 4 and "already exists" in rec.stderr
    rec = Recorder(out, tree.root, "--duration", "0.3s", "--force")
    rc = rec.wait()
    assert snap() == before, "a file outside the capture was changed through a symlink"
    if rc == 0:
        assert not any(p.is_symlink() for p in [out, *out.rglob("*")])
        cap = load_capture(out)
        assert cap.clean_end and len(cap.readings) > 0
    else:
        assert "symbolic link" in rec.stderr
