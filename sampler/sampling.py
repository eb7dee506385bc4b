"""The sampling thread and its stop supervisor (``Sampling``), and the compiled sweep's schedule
(``run_compiled``).

``daemon.record`` builds the schedule (the Python sweep of ``loop.run_schedule`` or
``run_compiled`` over ``csweep.CompiledSweeper``) and hands it to ``Sampling``, which runs it in
its own thread and stops on time even when a read hangs.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from rdmascope.sampler.csweep import POLL_NS, CompiledSweeper
from rdmascope.sampler.loop import ScheduleStats
from rdmascope.sampler.reader import CounterReader, SweepBuffers
from rdmascope.sampler.writer_thread import WriterThread

#: A read still running this long (s) is said live, while it lasts.
HUNG_SAY_S = 1.0
#: How long (ns) past the end (the last deadline of --duration, or a stop request) the recorder
#: waits for the sampling thread before it stops without it (a read that hangs): the rows taken
#: are kept, the read in progress is marked unavailable.
STOP_GRACE_NS = 60_000_000
#: ... and at most this long (ns) for a sampling thread that is late but still reading.
STOP_WAIT_MAX_NS = 2_000_000_000


def run_compiled(module, reader: CounterReader, state: dict, wt: WriterThread,
                 stats: ScheduleStats, *, interval_ns: int, start_ns: int, spin_ns: int,
                 n_deadlines: int | None, handoff_ns: int, should_stop, grow=None) -> None:
    """The schedule of ``loop.run_schedule`` with the compiled sweep (``csweep``): the same
    deadlines, missed-deadline rule and ``n_deadlines`` end, but many sweeps per call into C.

    ``should_stop`` is polled between calls, at least every ``csweep.POLL_NS`` (and after a
    signal); buffers are handed to ``wt`` every ``handoff_ns`` as with the Python sweep.
    ``grow`` (optional, returns True when it added counters: a device appeared) is called
    between calls when ``state["pending"]`` holds counters; the compiled sweep is then rebuilt
    for the new counter set (its buffers are a few rows per counter: cheap) and goes on at the
    next deadline.
    """
    sweeper = CompiledSweeper(reader, module, handoff_ns // interval_ns + 8)
    sweeper.lock = state["lock"]  # one lock with the recorder's stop (Sampling.abandon)
    state["sweeper"] = sweeper
    clock = time.perf_counter_ns
    stats.start_ns = start_ns
    stats.next_k = 0
    while not should_stop():
        now = clock()
        until = min(state["next_handoff"], now + POLL_NS)
        reason = sweeper.run(stats.next_k, state["buf"], start_ns=start_ns,
                             interval_ns=interval_ns, n_deadlines=n_deadlines, until_ns=until,
                             spin_ns=spin_ns, stats=stats)
        now = clock()
        if now >= state["next_handoff"] or reason == module.R_FULL:
            with state["lock"]:
                if state["abandoned"]:
                    break
                wt.put(state["buf"], reader.drain_events())
                state["buf"] = SweepBuffers()
                state["next_handoff"] = now + handoff_ns
        if reason == module.R_END:
            break
        if grow is not None and state["pending"] and grow():
            sweeper = CompiledSweeper(reader, module, handoff_ns // interval_ns + 8)
            sweeper.lock = state["lock"]
            state["sweeper"] = sweeper


class Sampling:
    """Run the sampling schedule in its own thread and stop on time even when a read hangs.

    The calling thread supervises: it waits for the sampling thread, runs the signal handlers
    (SIGINT/SIGTERM are blocked in the sampling thread), says a read that has lasted more than
    ``HUNG_SAY_S`` while it lasts, and at the end (``end_ns``, the last deadline of
    ``--duration``, or ``stop_requested()``) gives the sampling thread ``STOP_GRACE_NS`` (at
    least one interval) to finish. If it has not (a read hangs: an mlx5 firmware command can
    take up to its 60 s timeout), the recorder stops without it (``abandon``): every reading
    taken so far is kept, the read in progress and the rest of its sweep become rows marked
    unavailable (so that time is unknown, never zero), and the hung read's thread is left to
    finish on its own (its result is dropped).
    """

    def __init__(self, target, state: dict, reader: CounterReader, wt: WriterThread,
                 stats: ScheduleStats, *, clock, interval_ns: int, end_ns: int | None,
                 stop_requested, n_deadlines: int | None = None):
        self.target, self.state, self.reader, self.wt, self.stats = target, state, reader, wt, stats
        self.clock, self.interval_ns, self.end_ns = clock, int(interval_ns), end_ns
        self.stop_requested = stop_requested
        self.n_deadlines = n_deadlines
        self.grace_ns = max(int(interval_ns), STOP_GRACE_NS)
        self.error: BaseException | None = None
        self.abandoned = False
        self.abandoned_read: dict[str, Any] | None = None
        self.events: list = []
        self.thread = threading.Thread(target=self._run_target, name="rdmascope-sampler",
                                       daemon=True)

    def _run_target(self) -> None:
        if hasattr(signal, "pthread_sigmask"):  # the stop signals go to the calling thread
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM,
                                                      signal.SIGHUP})
        try:
            self.target()
        except BaseException as exc:  # re-raised in the calling thread
            self.error = exc

    def _progress(self) -> tuple[int, int]:
        """(sweeps taken, rows stored by a running compiled call): changes with every reading
        of the compiled sweep, with every sweep of the Python one."""
        sw = self.state.get("sweeper")
        return self.stats.taken, (int(sw.progress[0]) if sw is not None and sw.in_call else -1) \
            + len(self.state["buf"].sweep)

    def run(self) -> dict | None:
        """Sample until the end; return None, or the buffer to write when stopped without the
        sampling thread (``abandon``). Re-raises the sampling thread's exception."""
        self.thread.start()
        stop_at = None
        last, since, said = self._progress(), self.clock(), False
        while True:
            # wake rarely (a signal interrupts the wait at once: handlers run in this thread),
            # but on time for the end and its grace
            wait = 0.25
            now = self.clock()
            if stop_at is not None:
                wait = min(wait, max(stop_at + self.grace_ns - now, 0) / 1e9 + 0.005, 0.02)
            elif self.end_ns is not None:
                wait = min(wait, max(self.end_ns - now, 0) / 1e9 + 0.005)
            self.thread.join(wait)
            if not self.thread.is_alive():
                break
            now = self.clock()
            p = self._progress()
            if p != last:
                last, since, said = p, now, False
            elif not said and now - since > HUNG_SAY_S * 1e9:
                said = True
                self._say_hung(now - since)
            if stop_at is None:
                if self.end_ns is not None and now >= self.end_ns:
                    stop_at = self.end_ns
                elif self.stop_requested():
                    stop_at = now
            # stop without the sampling thread only when it is stuck (no reading for the
            # grace): one that is merely late (a loaded machine) is waited for, up to 2 s
            if stop_at is not None and now >= stop_at + self.grace_ns and (
                    now - since >= self.grace_ns or now >= stop_at + STOP_WAIT_MAX_NS):
                buf = self.abandon_if_running(now)
                if buf is not None:
                    return buf
        if self.error is not None:
            raise self.error
        return None

    def _counter_in_progress(self, rows: int) -> int:
        return rows % len(self.reader.paths)

    def _say_hung(self, d_ns: int) -> None:
        rows = self._rows_of_running_sweep()
        i = self._counter_in_progress(rows)
        msg = (f"{self.reader.paths[i]}: no counter read for {d_ns / 1e9:.1f} s, waiting on this "
               "read (a slow firmware command?); the readings of that time are unknown")
        self.wt.put(SweepBuffers(), [(self.clock(), i, "slow_read", msg)])

    def _rows_of_running_sweep(self) -> int:
        sw = self.state.get("sweeper")
        if sw is not None and sw.in_call:
            return int(sw.progress[0])
        return len(self.state["buf"].sweep)

    def drain_events(self) -> list:
        ev, self.events = self.events, []
        return ev

    def abandon_if_running(self, now: int) -> SweepBuffers | None:
        """Stop without the sampling thread if it is still running; return the buffer of the
        readings it took that are not handed off yet (a sweep cut short completed with rows
        marked unavailable), or None when it has finished."""
        if not self.thread.is_alive() or self.abandoned:
            return None
        st = self.state
        with st["lock"]:
            st["abandoned"] = True
            self.abandoned = True
            old = st["buf"]
            sw = st.get("sweeper")
            extra = sw.abandon() if sw is not None else None
        n = len(self.reader.paths)
        buf = SweepBuffers()
        cols = (old.counter_id, old.sweep, old.t_before_ns, old.read_duration_ns, old.value,
                old.status)
        copies = [type(c)(c.typecode, c) for c in cols]  # the thread may still append: copy
        m = min(len(c) for c in copies)
        for dst, src in zip((buf.counter_id, buf.sweep, buf.t_before_ns, buf.read_duration_ns,
                             buf.value, buf.status), copies, strict=True):
            dst.extend(src[:m])
        buf.sweep_start_ns.extend(old.sweep_start_ns[:-(-m // n)] if m else [])
        if extra is not None:
            *xcols, xstarts = extra
            for dst, src in zip((buf.counter_id, buf.sweep, buf.t_before_ns,
                                 buf.read_duration_ns, buf.value, buf.status), xcols,
                                strict=True):
                dst.extend(src)
            buf.sweep_start_ns.extend(xstarts)
        buf.n_bad = sum(1 for x in buf.status if x)
        rows = len(buf.sweep)
        cut = rows % n
        # the sweeps of the running call (never returned) were taken; a sweep cut short too
        self.stats.taken += len(extra[-1]) if extra is not None else (1 if cut else 0)
        if self.n_deadlines is not None:  # the deadlines left were missed (the read hung)
            self.stats.missed = max(0, self.n_deadlines - self.stats.taken)
            self.stats.next_k = self.n_deadlines
        if cut:  # a sweep cut short by the read in progress: complete it, unknown
            from rdmascope.capture import STATUS_MISSING, STATUS_READ_ERROR

            k = buf.sweep[-1]
            hung = cut
            t0 = buf.t_before_ns[-1] + buf.read_duration_ns[-1]
            for i in range(cut, n):
                buf.counter_id.append(i)
                buf.sweep.append(k)
                buf.t_before_ns.append(now if i != hung else t0)
                buf.read_duration_ns.append(min(now - t0, 4294967295) if i == hung else 0)
                buf.value.append(0)
                buf.status.append(STATUS_READ_ERROR if i == hung else STATUS_MISSING)
                buf.n_bad += 1
            c = self.wt.counters[hung] if hung < len(self.wt.counters) else {
                "device": None, "port": None, "name": self.reader.paths[hung]}
            self.abandoned_read = {"counter_id": hung, "device": c["device"], "port": c["port"],
                                   "netdev": c.get("netdev"), "name": c["name"],
                                   "path": self.reader.paths[hung], "sweep": int(k),
                                   "running_ns": int(now - t0)}
            self.events.append((now, hung, "unavailable",
                                f"read_error: {self.reader.paths[hung]}: read still running "
                                f"after {(now - t0) / 1e9:.3f} s when the recording ended; "
                                "stopped without it (the rest of its sweep is unknown too)"))
        else:
            self.abandoned_read = {"counter_id": None, "sweep": None,
                                   "running_ns": None, "path": None,
                                   "note": "the sampling thread had not finished; no read of "
                                           "a sweep was in progress"}
        return buf

