"""The recorder's writer thread never dies silently.

A status line that cannot be written (``record --status 2>&1 | head -1``) is dropped and the
status turned off, said once in the capture; any other error of the writer thread stops the
recording with the error in the capture (event, audit) and the exit code; a writer that falls
behind fills a bounded queue, which stops the recording with an error that says so, and every
sweep taken is still written.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner
from rdmascope.sampler import writer_thread
from rdmascope.sampler.faketree import build_device

from rdmascope.capture import read_capture
from rdmascope.cli import main


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    build_device(root, "roceP2p1s0f1", pci="0002:01:00.1", netdev="enP2p1s0f1np1")
    return root


def _sweeps_on_disk(cap) -> int:
    return int(np.unique(cap.table["sweep"].to_numpy()).size)


def _events(cap, kind):
    return [e for e in cap.manifest["events"] if e["kind"] == kind]


def test_closed_stderr_pipe_turns_status_off_and_every_sweep_is_written(tree, tmp_path):
    """`record --status 2>&1 | head -1`: the reader of stderr goes away after one line. The
    recording goes on to its end; every sweep taken is in the capture; the capture says once
    that the status was turned off; the run ends cleanly (exit 0, stopped by its duration)."""
    out = tmp_path / "cap"
    p = subprocess.Popen([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                          "--sysfs-root", str(tree), "--duration", "2s", "--status"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = p.stderr.readline()  # "rdmascope record: sweep: ..." (head -1), then gone
    assert first.startswith(b"rdmascope record:"), first
    p.stderr.close()
    assert p.wait(timeout=120) == 0
    cap = read_capture(out)
    a = cap.manifest["audit"]
    assert a["stopped_by"] == "duration"
    assert cap.clean_end
    on_disk = _sweeps_on_disk(cap)
    # every one of the 2001 deadlines is taken or missed (a loaded machine misses some: counted,
    # never a share asserted), and every sweep taken is on disk
    assert a["sweeps_taken"] + a["sweeps_missed"] == 2001, a
    assert on_disk == a["sweeps_taken"] == a["sweeps_written"] > 0
    assert cap.table.num_rows == 4 * on_disk == a["rows_written"]
    off = _events(cap, "status_off")
    assert len(off) == 1, cap.manifest["events"]
    assert "status turned off" in off[0]["message"]
    assert not _events(cap, "write_error")


def test_failing_writer_stops_the_recording_with_the_error_in_the_capture(tree, tmp_path,
                                                                          monkeypatch):
    """An unexpected error inside the writer thread (here: building the third batch) stops the
    sampler at once: exit 4 naming the error, audit stopped_by write_error, a write_error event
    naming it, and the capture holds exactly the readings the audit says were written."""
    real = writer_thread.to_batch
    calls = {"n": 0}

    def flaky(buf):
        if threading.current_thread().name == "rdmascope-writer":
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("simulated writer bug")
        return real(buf)

    monkeypatch.setattr(writer_thread, "to_batch", flaky)
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, ["record", "-o", str(out), "--sysfs-root", str(tree),
                                  "--duration", "20s", "--no-status"])
    monkeypatch.undo()
    assert r.exit_code == 4, r.output
    assert "simulated writer bug" in r.output
    cap = read_capture(out)
    a = cap.manifest["audit"]
    # stopped by the error, not by the 20 s duration: its own count of the deadlines it passed
    assert a["stopped_by"] == "write_error"
    assert a["sweeps_taken"] + a["sweeps_missed"] < 20_001, a
    ev = _events(cap, "write_error")
    assert ev and "RuntimeError: simulated writer bug" in ev[0]["message"]
    assert cap.table.num_rows == a["rows_written"] == 4 * _sweeps_on_disk(cap) > 0
    assert a["sweeps_not_written"] == a["sweeps_taken"] - a["sweeps_written"] > 0


def test_full_queue_is_a_said_error_and_nothing_taken_is_lost(tree, tmp_path, monkeypatch):
    """A writer that stalls (a hung disk, here 1.5 s inside the second write) fills the bounded
    queue (2 handoffs): the recording stops with an error saying the writer fell behind, and
    once the writer resumes every sweep taken is written. The stall (1.5 s) is three times the
    queue's 0.5 s, so the handoffs due meanwhile fill it even on a loaded machine."""
    real_init = writer_thread.WriterThread.__init__

    def small_queue(self, *a, **kw):
        kw["max_queued"] = 2
        real_init(self, *a, **kw)

    monkeypatch.setattr(writer_thread.WriterThread, "__init__", small_queue)
    from rdmascope.capture import CaptureWriter

    real_write = CaptureWriter.write_batch
    n = {"calls": 0}

    def stalling(self, batch):
        n["calls"] += 1
        if n["calls"] == 2:
            time.sleep(1.5)
        return real_write(self, batch)

    monkeypatch.setattr(CaptureWriter, "write_batch", stalling)
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, ["record", "-o", str(out), "--sysfs-root", str(tree),
                                  "--duration", "30s", "--no-status"])
    monkeypatch.undo()
    assert r.exit_code == 4, r.output
    assert "fell 0.5 s behind" in r.output
    cap = read_capture(out)
    a = cap.manifest["audit"]
    assert a["stopped_by"] == "write_error"
    assert any("fell 0.5 s behind" in e["message"] for e in _events(cap, "write_error"))
    assert a["sweeps_taken"] + a["sweeps_missed"] < 30_001  # before the 30 s duration's end
    assert _sweeps_on_disk(cap) == a["sweeps_taken"] == a["sweeps_written"]
    assert a["sweeps_not_written"] == 0


def test_sighup_ends_the_capture_cleanly(tree, tmp_path):
    """SIGHUP (a dropped ssh session) is handled like SIGTERM: a clean end with the audit."""
    out = tmp_path / "cap"
    p = subprocess.Popen([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                          "--sysfs-root", str(tree), "--no-status"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end:
        try:
            if read_capture(out).table.num_rows >= 400:
                break
        except Exception:  # not yet created / being replaced
            pass
        time.sleep(0.1)
    p.send_signal(signal.SIGHUP)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    cap = read_capture(out)
    assert cap.clean_end
    a = cap.manifest["audit"]
    assert a["stopped_by"] == "SIGHUP"
    assert _sweeps_on_disk(cap) == a["sweeps_taken"] == a["sweeps_written"]
