"""The counter reader on trees built in tmp_path: changing values, garbage, errors, vanishing files."""

from __future__ import annotations

import errno
import os

import pytest
from rdmascope.sampler.faketree import write_in_place
from rdmascope.sampler.reader import CounterReader, SweepBuffers

from rdmascope.capture import (
    STATUS_MISSING,
    STATUS_OK,
    STATUS_PARSE_ERROR,
    STATUS_READ_ERROR,
)


class Tick:
    """Fake CLOCK_MONOTONIC: every read advances 1000 ns; ``jump`` moves time on."""

    def __init__(self):
        self.t = 1_000_000

    def __call__(self):
        self.t += 1000
        return self.t

    def jump(self, ns):
        self.t += ns


@pytest.fixture
def files(tmp_path):
    paths = []
    for i, v in enumerate((10, 20, 30)):
        p = tmp_path / f"c{i}"
        p.write_text(f"{v}\n")
        paths.append(p)
    return paths


def rows(buf, start=0):
    return list(zip(buf.counter_id[start:], buf.sweep[start:], buf.value[start:],
                    buf.status[start:], strict=True))


def test_values_change_between_reads_same_descriptor(files):
    r = CounterReader(files)
    fds = list(r.fds)
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    write_in_place(files[0], 2880761508848)
    write_in_place(files[1], 21)
    r.read_sweep(1, buf)
    write_in_place(files[0], 7)  # shorter value: no stale digits (a reset, not a wrap)
    r.read_sweep(2, buf)
    assert r.fds == fds  # opened once, re-read with pread
    assert rows(buf) == [
        (0, 0, 10, 0), (1, 0, 20, 0), (2, 0, 30, 0),
        (0, 1, 2880761508848, 0), (1, 1, 21, 0), (2, 1, 30, 0),
        (0, 2, 7, 0), (1, 2, 21, 0), (2, 2, 30, 0),
    ]
    assert r.events == []
    r.close()


def test_every_read_is_bracketed_by_the_clock(files):
    clock = Tick()
    r = CounterReader(files, clock=clock)
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    r.read_sweep(1, buf)
    # each read: one clock call before, one after -> duration exactly one tick
    assert list(buf.read_duration_ns) == [1000] * 6
    tb = list(buf.t_before_ns)
    assert tb == sorted(tb) and len(set(tb)) == 6
    assert list(buf.sweep_start_ns) == [tb[0], tb[3]]


def test_full_u64_range_and_garbage(files, tmp_path):
    write_in_place(files[0], (1 << 64) - 1)
    write_in_place(files[1], "N/A (not available)\n")  # old kernels' text placeholder
    write_in_place(files[2], "-5\n")
    r = CounterReader(files)
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    assert rows(buf) == [(0, 0, (1 << 64) - 1, STATUS_OK), (1, 0, 0, STATUS_PARSE_ERROR),
                         (2, 0, 0, STATUS_PARSE_ERROR)]
    assert buf.n_bad == 2
    write_in_place(files[0], str(1 << 64) + "\n")
    r.read_sweep(1, buf)
    assert buf.status[3] == STATUS_PARSE_ERROR


def test_problem_reported_once_then_recovery_once(files):
    r = CounterReader(files, backoff_min_ns=0, backoff_max_ns=0)  # no back-off: read each sweep
    buf = SweepBuffers()
    write_in_place(files[1], "garbage\n")
    for k in range(5):
        r.read_sweep(k, buf)
    ev = r.drain_events()
    assert [(e[1], e[2]) for e in ev] == [(1, "unavailable")]
    assert "parse_error" in ev[0][3] and "garbage" in ev[0][3] and str(files[1]) in ev[0][3]
    write_in_place(files[1], 99)
    r.read_sweep(5, buf)
    r.read_sweep(6, buf)
    ev = r.drain_events()
    assert [(e[1], e[2]) for e in ev] == [(1, "recovered")]
    assert [buf.status[3 * k + 1] for k in range(7)] == [2, 2, 2, 2, 2, 0, 0]
    assert buf.value[3 * 5 + 1] == 99
    # the other counters never stopped
    assert all(buf.status[3 * k] == 0 and buf.status[3 * k + 2] == 0 for k in range(7))


def test_read_errno_is_read_error_and_others_go_on(files, monkeypatch):
    """A read failing with an errno (newer kernels on a failed firmware query; mocked)."""
    r = CounterReader(files, backoff_min_ns=0, backoff_max_ns=0)  # no back-off: every sweep
    bad_fd = r.fds[2]
    real = os.pread

    def pread(fd, n, off):
        if fd == bad_fd:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, n, off)

    monkeypatch.setattr(os, "pread", pread)
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    r.read_sweep(1, buf)
    assert [buf.status[i] for i in range(6)] == [0, 0, STATUS_READ_ERROR] * 2
    ev = r.drain_events()
    assert len(ev) == 1 and "read_error" in ev[0][3] and "Input/output error" in ev[0][3]
    assert bad_fd in (r.fds[2], r.parked[2])  # kept open: a later sweep tries again
    monkeypatch.setattr(os, "pread", real)
    r.read_sweep(2, buf)
    assert buf.status[8] == STATUS_OK
    assert [e[2] for e in r.drain_events()] == ["recovered"]


def test_enodev_closes_and_reopens_later(files, monkeypatch):
    """Device removed: kernfs answers reads with ENODEV (mocked); re-open once per second."""
    clock = Tick()
    r = CounterReader(files, clock=clock, reopen_interval_ns=1_000_000_000)
    victim = r.fds[0]
    real = os.pread

    def pread(fd, n, off):
        if fd == victim:
            raise OSError(errno.ENODEV, "No such device")
        return real(fd, n, off)

    monkeypatch.setattr(os, "pread", pread)
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    monkeypatch.setattr(os, "pread", real)
    assert buf.status[0] == STATUS_MISSING and r.fds[0] == -1
    r.read_sweep(1, buf)  # before the re-open interval: still missing, not even tried
    assert buf.status[3] == STATUS_MISSING and r.fds[0] == -1
    clock.jump(1_000_000_000)
    r.read_sweep(2, buf)
    assert buf.status[6] == STATUS_OK and buf.value[6] == 10
    assert [e[2] for e in r.drain_events()] == ["unavailable", "recovered"]


def test_file_disappears_and_returns(files):
    clock = Tick()
    r = CounterReader(files, clock=clock, reopen_interval_ns=1_000_000_000)
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    os.unlink(files[1])
    clock.jump(1_000_000_000)
    r.read_sweep(1, buf)  # the liveness check notices the unlinked file
    assert buf.status[4] == STATUS_MISSING and buf.status[3] == 0 and buf.status[5] == 0
    clock.jump(500_000_000)
    r.read_sweep(2, buf)
    assert buf.status[7] == STATUS_MISSING
    files[1].write_text("555\n")  # the device is back (a new file)
    r.read_sweep(3, buf)  # not yet: re-open attempts are at most once per interval
    assert buf.status[10] == STATUS_MISSING
    clock.jump(600_000_000)
    r.read_sweep(4, buf)
    assert buf.status[13] == STATUS_OK and buf.value[13] == 555
    ev = r.drain_events()
    assert [(e[1], e[2]) for e in ev] == [(1, "unavailable"), (1, "recovered")]
    assert "missing" in ev[0][3]


def test_missing_at_start(tmp_path, files):
    paths = [*files, tmp_path / "nope"]
    r = CounterReader(paths)
    assert r.fds[3] == -1
    ev = r.drain_events()
    assert len(ev) == 1 and ev[0][1] == 3 and "missing" in ev[0][3] and "nope" in ev[0][3]
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    assert list(buf.status) == [0, 0, 0, STATUS_MISSING]
    assert buf.read_duration_ns[3] == 0
    assert r.drain_events() == []  # said once


def test_failing_read_backs_off_doubling_to_1s_and_resumes_at_once(files):
    """A counter whose reads fail is read again after 2, 4, 8 ... ms, at most 1 s apart (the
    same error repeating), not every sweep; its skipped sweeps still get an unknown row; the
    first good read ends the back-off (read every sweep again). On a fake clock."""
    now = [10**9]
    r = CounterReader(files, clock=lambda: now[0])
    write_in_place(files[1], "garbage\n")
    buf = SweepBuffers()
    tried = []
    for k in range(4000):  # 4 s of 1 ms sweeps
        before = r.skipped[1]
        r.read_sweep(k, buf)
        if r.skipped[1] == before:
            tried.append(k)
        now[0] += 1_000_000
    # tries at 0, +2, +4, +8 ... ms, the pause capped at 1 s: 0,2,6,14,30,62,126,254,510,1022,
    # 2022, 3022 (the pause starts at the failed read, which is the sweep's own instant here)
    assert tried == [0, 2, 6, 14, 30, 62, 126, 254, 510, 1022, 2022, 3022]
    st = buf.status.tolist()[1::3]
    assert set(st) == {STATUS_PARSE_ERROR}  # every sweep has a row, all unknown
    write_in_place(files[1], 7)
    k0 = 4000
    for k in range(k0, k0 + 1100):
        r.read_sweep(k, buf)
        now[0] += 1_000_000
    st = buf.status.tolist()[1::3][k0:]
    first_ok = st.index(0)
    assert first_ok <= 1000 and all(s == 0 for s in st[first_ok:])  # then every sweep
    assert r.backoff_ns[1] == 0
