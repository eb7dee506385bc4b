"""Read counter files: open once, re-read with ``pread`` at offset 0, stamp every read.

Re-reading an open sysfs file with ``pread(fd, 64, 0)`` re-runs the kernel's show function (a fresh
firmware query for ``counters/*``); keeping descriptors open is the cheap way to poll (sysfs.md).
Each read is bracketed by ``time.perf_counter_ns()`` (CLOCK_MONOTONIC) just before and after.

Faults (sysfs.md, "Robustness rule"): a read that fails with an errno gives STATUS_READ_ERROR, content
that is not an unsigned integer STATUS_PARSE_ERROR, a file that is gone (ENOENT/ENODEV on open or
read, or unlinked while open) STATUS_MISSING; a missing file is re-opened at most once per
``reopen_interval_ns`` so a device that comes back is resumed. Each distinct problem of a counter is
reported once as an event, and so is its recovery; the other counters go on.

A read slower than ``slow_ns`` (the recorder passes 5 x the sampling interval: on mlx5 each read
is a firmware command whose timeout is 60 s) is counted per counter (``slow_reads``,
``slow_max_ns``) and reported once per counter as a "slow_read" event naming the file and the
duration (later slow reads of that counter are counted, and reported again only when one takes
more than twice the longest reported). Its reading is kept: the value is exact, only its instant
is uncertain (by the bracket, as for every reading).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from array import array
from collections.abc import Callable, Sequence

from rdmascope.capture import (
    STATUS_MISSING,
    STATUS_NAMES,
    STATUS_OK,
    STATUS_PARSE_ERROR,
    STATUS_READ_ERROR,
)

_BLANKS = b" \t\n"
_U64_MAX = (1 << 64) - 1
#: errnos that mean "the file or its device is gone" (kernfs returns ENODEV after removal).
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENODEV, errno.ESTALE, errno.ENXIO})
#: Bytes requested per read (sysfs.md: read at least 32 bytes in one call; u64 has 20 digits).
READ_SIZE = 64
#: ``CounterReader.fds`` value of a counter backing off after failed reads (not a descriptor).
_PAUSED = -2


class SweepBuffers:
    """Column buffers for one flush batch (typed ``array.array``s; no per-reading objects kept).

    Columns match capture.SAMPLE_SCHEMA; ``value`` holds 0 where status != OK, and ``n_bad``
    counts such rows so the batch builder knows when a null mask is needed.
    """

    __slots__ = ("counter_id", "sweep", "t_before_ns", "read_duration_ns", "value", "status",
                 "sweep_start_ns", "n_bad")

    def __init__(self) -> None:
        self.counter_id = array("H")
        self.sweep = array("q")
        self.t_before_ns = array("q")
        self.read_duration_ns = array("I")
        self.value = array("Q")
        self.status = array("B")
        self.sweep_start_ns = array("q")  # one per sweep: t_before of its first read
        self.n_bad = 0

    def width(self, default: int) -> int:
        """Rows per sweep in this buffer (every sweep of a buffer reads the same counters; the
        counter set only grows between buffers, when a device appears): ``default`` when empty.
        Consumers with fewer counters take the first columns of ``reshape(-1, width)``."""
        nsw = len(self.sweep_start_ns)
        return len(self.sweep) // nsw if nsw else default

    def __len__(self) -> int:
        return len(self.sweep)


class CounterReader:
    """Keep one descriptor per counter file open and read them all in one sweep.

    ``paths[i]`` is the file of counter_id ``i``. ``clock`` returns int ns (CLOCK_MONOTONIC;
    injectable for tests). Events (``(t_ns, counter_id, kind, message)``, kind one of
    "unavailable", "recovered") accumulate in ``events`` until the caller drains them.
    """

    def __init__(self, paths: Sequence[str], *, clock: Callable[[], int] = time.perf_counter_ns,
                 reopen_interval_ns: int = 1_000_000_000,
                 backoff_min_ns: int = 2_000_000, backoff_max_ns: int = 1_000_000_000,
                 slow_ns: int = 5_000_000):
        self.paths = [str(p) for p in paths]
        #: a read taking longer than this (ns) is a slow read (counted, reported)
        self.slow_ns = int(slow_ns)
        self.clock = clock
        self.reopen_interval_ns = int(reopen_interval_ns)
        self.backoff_min_ns = int(backoff_min_ns)
        self.backoff_max_ns = int(backoff_max_ns)
        n = len(self.paths)
        self.fds: list[int] = [-1] * n
        # back-off of a counter whose reads fail (touched only on errors): its descriptor is
        # parked here while fds[i] holds _PAUSED, and next_check_ns[i] is the next try
        self.parked: list[int] = [-1] * n
        self.backoff_ns: list[int] = [0] * n
        self.skipped: list[int] = [0] * n  # reads skipped while backing off, per counter
        self.state: list[int] = [STATUS_OK] * n     # last status reported per counter
        self.reason: list[str | None] = [None] * n  # last problem reported per counter
        self.next_check_ns: list[int] = [0] * n     # next re-open attempt / liveness check
        self.events: list[tuple[int, int, str, str]] = []
        self.n_reads = 0
        self.slow_reads: list[int] = [0] * n    # reads slower than slow_ns, per counter
        self.slow_max_ns: list[int] = [0] * n   # the longest of them
        self._slow_said: list[int] = [0] * n    # the longest one reported as an event
        #: min(next_check_ns) for the compiled sweep (csweep.py), which reads it before every
        #: sweep; ``request_check`` lowers both under ``_check_lock`` from another thread
        self.check_at = array("q", [0])
        self._check_lock = threading.Lock()
        now = clock()
        for i in range(n):
            self._open(i, now)
            self.next_check_ns[i] = now + self.reopen_interval_ns

    def add(self, paths: Sequence[str]) -> list[int]:
        """Add counters (files ``paths``) after the start (a device that appeared): they get
        the next counter ids, are opened now and read from the next sweep on. Call it only from
        the sampling thread between sweeps (it grows the per-counter lists the sweep walks).
        Returns the new counter ids."""
        first = len(self.paths)
        now = self.clock()
        for p in paths:
            i = len(self.paths)
            self.paths.append(str(p))
            for lst, v in ((self.fds, -1), (self.parked, -1), (self.backoff_ns, 0),
                           (self.skipped, 0), (self.state, STATUS_OK), (self.reason, None),
                           (self.next_check_ns, 0), (self.slow_reads, 0),
                           (self.slow_max_ns, 0), (self._slow_said, 0)):
                lst.append(v)
            self._open(i, now)
            self.next_check_ns[i] = now + self.reopen_interval_ns
        return list(range(first, len(self.paths)))

    def request_check(self, i: int) -> None:
        """Have counter ``i`` checked (re-opened if missing) at its next read: safe from another
        thread (the writer thread re-points a renamed device's paths), and seen by a compiled
        sweep that is already running."""
        with self._check_lock:
            self.next_check_ns[i] = 0
            self.check_at[0] = 0

    def wake(self) -> None:
        """Have a compiled sweep that is running come back to Python before its next sweep (as
        for a check due; nothing is checked that is not): safe from another thread. The writer
        thread calls this when it hands the sampling thread counters to add (a device that
        appeared), so they are read from the next sweep or so on, not up to ``csweep.POLL_NS``
        later (that time would be present but unread: unknown)."""
        with self._check_lock:
            self.check_at[0] = 0

    def run_checks(self, now: int) -> None:
        """Run every check due at ``now`` (what ``read_sweep`` does per counter at its read):
        the compiled sweep calls this before the sweep at which checks fall due."""
        nc = self.next_check_ns
        for i in range(len(nc)):
            if now >= nc[i]:
                self._check(i, now)

    # -- state changes (rare path) -----------------------------------------------------------

    def _open(self, i: int, now: int) -> bool:
        try:
            self.fds[i] = os.open(self.paths[i], os.O_RDONLY | os.O_CLOEXEC)
            return True
        except OSError as exc:
            self.fds[i] = -1
            if exc.errno in _GONE_ERRNOS:
                self._problem(i, now, STATUS_MISSING, f"{self.paths[i]}: missing "
                              f"({exc.strerror}); will retry opening it every "
                              f"{self.reopen_interval_ns / 1e9:g} s")
            else:
                self._problem(i, now, STATUS_MISSING, f"{self.paths[i]}: cannot open "
                              f"({exc.strerror}); will retry every "
                              f"{self.reopen_interval_ns / 1e9:g} s")
            return False

    def _close(self, i: int) -> None:
        if self.fds[i] == _PAUSED:
            self.fds[i] = self.parked[i]
            self.parked[i] = -1
        fd = self.fds[i]
        self.fds[i] = -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def _problem(self, i: int, now: int, status: int, message: str) -> None:
        """Report a counter's problem once (a new kind of problem is reported again)."""
        kind = STATUS_NAMES[status]
        if self.state[i] != status or self.reason[i] is None:
            self.events.append((now, i, "unavailable", f"{kind}: {message}"))
        self.state[i] = status
        self.reason[i] = message

    def _recovered(self, i: int, now: int) -> None:
        self.events.append((now, i, "recovered",
                            f"{self.paths[i]}: readable again after "
                            f"{STATUS_NAMES[self.state[i]]}"))
        self.state[i] = STATUS_OK
        self.reason[i] = None
        self.backoff_ns[i] = 0

    def slow_read(self, i: int, t1: int, d: int) -> None:
        """Counter ``i``'s read took ``d`` ns (> ``slow_ns``), ending at ``t1``: count it; report
        it once (again only when one takes more than twice the longest reported)."""
        self.slow_reads[i] += 1
        if d > self.slow_max_ns[i]:
            self.slow_max_ns[i] = d
        if d > 2 * self._slow_said[i]:
            self._slow_said[i] = d
            self.events.append((t1, i, "slow_read",
                                f"{self.paths[i]}: one read took {d / 1e9:.3f} s (bound "
                                f"{self.slow_ns / 1e6:g} ms, 5 x the interval); every counter "
                                "after it in that sweep was read late, and no counter was read "
                                "while it lasted (that time is unknown, not zero)"))

    def _back_off(self, i: int, now: int, repeated: bool) -> None:
        """After a failed read: skip this counter's reads for a while (a failing read is a
        firmware command on real hardware). The pause doubles while the same error repeats,
        from ``backoff_min_ns`` up to ``backoff_max_ns``; a new error starts again short."""
        b = self.backoff_ns[i]
        b = self.backoff_min_ns if not repeated or b == 0 else min(2 * b, self.backoff_max_ns)
        self.backoff_ns[i] = b
        self.parked[i] = self.fds[i]
        self.fds[i] = _PAUSED
        self.next_check_ns[i] = now + b

    def _check(self, i: int, now: int) -> None:
        """Once per reopen interval: re-open a missing file; notice a file unlinked while open.

        For a counter backing off, the pause is over: its descriptor is read again now."""
        self.next_check_ns[i] = now + self.reopen_interval_ns
        if self.fds[i] == _PAUSED:
            self.fds[i] = self.parked[i]
            self.parked[i] = -1
        fd = self.fds[i]
        if fd >= 0:
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError:
                gone = True
            if gone:  # replaced or removed under us (e.g. a rebuilt tree): open the new file
                self._close(i)
                if not self._open(i, now):
                    return
        else:
            self._open(i, now)

    def _unparsable(self, i: int, t1: int, b: bytes) -> None:
        """Counter ``i`` read content ``b`` that is not an unsigned integer: report, back off."""
        msg = f"{self.paths[i]}: content {b[:40]!r} is not an unsigned integer"
        same = self.state[i] == STATUS_PARSE_ERROR
        self._problem(i, t1, STATUS_PARSE_ERROR, msg)
        self._back_off(i, t1, same)

    def _read_failed(self, i: int, t1: int, err: int | None, strerror: str | None) -> int:
        """Counter ``i``'s read failed with errno ``err``: a gone file is closed (re-opened
        later), any other error backs off. Returns the reading's status."""
        if err in _GONE_ERRNOS:
            self._close(i)
            self._problem(i, t1, STATUS_MISSING, f"{self.paths[i]}: gone ({strerror}); will "
                          f"retry opening it every {self.reopen_interval_ns / 1e9:g} s")
            return STATUS_MISSING
        msg = f"{self.paths[i]}: read failed ({strerror})"
        same = self.state[i] == STATUS_READ_ERROR and self.reason[i] == msg
        self._problem(i, t1, STATUS_READ_ERROR, msg)
        self._back_off(i, t1, same)
        return STATUS_READ_ERROR

    # -- the hot path ------------------------------------------------------------------------

    def read_sweep(self, k: int, buf: SweepBuffers) -> None:
        """Read every counter once for sweep ``k`` and append one row per counter to ``buf``.

        Each row: counter_id, k, t_before_ns, read_duration_ns, value (raw unsigned integer, 0
        when not OK), status. An unavailable counter gets a row with status != OK (a MISSING one
        is not read: t_before = the clock, duration 0).
        """
        pread = os.pread
        clock = self.clock
        fds = self.fds
        state = self.state
        cid_a = buf.counter_id.append
        sw_a = buf.sweep.append
        tb_a = buf.t_before_ns.append
        rd_a = buf.read_duration_ns.append
        v_a = buf.value.append
        st_a = buf.status.append
        next_check = self.next_check_ns
        first = True
        for i in range(len(fds)):
            fd = fds[i]
            t0 = clock()
            if t0 >= next_check[i]:
                self._check(i, t0)
                fd = fds[i]
                t0 = clock()
            if fd < 0:
                if fd == _PAUSED:  # backing off after failed reads: not read, still unknown
                    st = state[i]
                    self.skipped[i] += 1
                else:
                    st = STATUS_MISSING
                v = 0
                t1 = t0
            else:
                try:
                    b = pread(fd, READ_SIZE, 0)
                    t1 = clock()
                    # the kernel prints plain decimal digits; int() alone would also take
                    # "+5", "-0" or "1_000", so only ASCII digits (plus blanks) are a value
                    d = b.strip(_BLANKS)
                    if d.isdigit():
                        v = int(d)
                        st = STATUS_OK if v <= _U64_MAX else STATUS_PARSE_ERROR
                    else:
                        st = STATUS_PARSE_ERROR
                    if st:
                        v = 0
                        self._unparsable(i, t1, b)
                except OSError as exc:
                    t1 = clock()
                    v = 0
                    st = self._read_failed(i, t1, exc.errno, exc.strerror)
            if st != state[i] and st == STATUS_OK:
                self._recovered(i, t1)
            if first:
                buf.sweep_start_ns.append(t0)
                first = False
            cid_a(i)
            sw_a(k)
            tb_a(t0)
            d = t1 - t0
            if d > self.slow_ns:
                self.slow_read(i, t1, d)
            rd_a(d if d < 4294967295 else 4294967295)  # uint32 column; a >4 s read saturates
            v_a(v)
            st_a(st)
            if st:
                buf.n_bad += 1
        self.n_reads += len(fds)

    def drain_events(self) -> list[tuple[int, int, str, str]]:
        """Return and clear the events reported since the last call."""
        ev, self.events = self.events, []
        return ev

    def close(self) -> None:
        """Close every descriptor."""
        for i in range(len(self.fds)):
            self._close(i)
