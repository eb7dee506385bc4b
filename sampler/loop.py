"""The sampling schedule: absolute deadlines start + k * interval, no catch-up bursts.

``run_schedule`` calls ``sweep(k)`` for deadline k, within k's own slot
[start + k * interval, start + (k + 1) * interval). When the loop gets to deadline k only after the
next deadline has passed too (a long sweep, a stall, a late wake-up), the passed deadlines are
*missed*: skipped and counted, never made up; the latest passed one is taken at once. So a stall
never produces a burst of back-to-back sweeps, a steady wake-up latency below one interval costs
no sweep, and every deadline is either taken or missed exactly once.

Waiting is ``sleep`` until ``spin_ns`` before the deadline, then a busy spin on ``clock`` (set
``spin_ns=0``, the default, to sleep straight to the deadline). Clock and sleep are injectable:
tests run the loop on a fake clock (see ``tests/test_loop.py``), like pyinstrument's
``fake_time_util``.

Also here: best-effort timer slack reduction (``prctl(PR_SET_TIMERSLACK, 1)``), CPU affinity and
SCHED_FIFO priority for the sampling thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

PR_SET_TIMERSLACK = 29  # <linux/prctl.h>


@dataclass
class ScheduleStats:
    """What the schedule did: sweeps taken, deadlines missed, index of the next deadline."""

    taken: int = 0
    missed: int = 0
    next_k: int = 0
    start_ns: int = 0


def run_schedule(sweep: Callable[[int], None], interval_ns: int, *,
                 should_stop: Callable[[], bool],
                 clock: Callable[[], int] = time.perf_counter_ns,
                 sleep: Callable[[float], None] = time.sleep,
                 start_ns: int | None = None,
                 spin_ns: int = 0,
                 max_sweeps: int | None = None,
                 n_deadlines: int | None = None,
                 stats: ScheduleStats | None = None) -> ScheduleStats:
    """Call ``sweep(k)`` at deadlines ``start_ns + k * interval_ns`` until ``should_stop()``.

    ``clock`` returns int ns (CLOCK_MONOTONIC); ``sleep`` takes seconds. ``start_ns`` defaults to
    ``clock()``, so sweep 0 runs at once. ``should_stop`` is checked before every wait. Sweep k
    starts in [deadline k, deadline k+1); deadlines passed entirely are counted in
    ``stats.missed`` and skipped (the latest passed deadline is taken at once). ``max_sweeps``
    bounds the sweeps taken (tests). ``n_deadlines`` (``--duration``): only deadlines
    0 .. n_deadlines - 1 exist; the loop ends after the last, and a late wake-up past it counts
    the deadlines it passed as missed without taking a sweep beyond them, so taken + missed is
    exactly ``n_deadlines`` (a stall across the end once gave taken + missed = n + 1). ``stats``
    (updated in place, also returned) lets another thread watch progress. Raises ``ValueError``
    for a non-positive interval.
    """
    if interval_ns <= 0:
        raise ValueError(f"interval_ns must be > 0, got {interval_ns}")
    st = stats if stats is not None else ScheduleStats()
    start = clock() if start_ns is None else start_ns
    st.start_ns = start
    k = st.next_k = 0
    while not should_stop():
        if max_sweeps is not None and st.taken >= max_sweeps:
            break
        if n_deadlines is not None and k >= n_deadlines:
            break
        deadline = start + k * interval_ns
        now = clock()
        if now < deadline:
            wait = deadline - now - spin_ns
            if wait > 0:
                sleep(wait * 1e-9)
            now = clock()
            while now < deadline:
                now = clock()
        if now - deadline >= interval_ns:
            # The next deadline(s) passed too: skip to the latest passed one and count the
            # skipped ones as missed. No catch-up burst.
            m = (now - start) // interval_ns
            if n_deadlines is not None and m >= n_deadlines:
                # woke up after the last deadline: the ones left were missed; no sweep beyond
                st.missed += n_deadlines - k
                k = st.next_k = n_deadlines
                break
            st.missed += m - k
            k = m
        sweep(k)
        st.taken += 1
        k += 1
        st.next_k = k
    return st


# ----------------------------------------------------------------------------------------------
# Thread tuning (best effort / clear errors)
# ----------------------------------------------------------------------------------------------


def reduce_timer_slack(slack_ns: int = 1) -> bool:
    """Set this thread's timer slack to ``slack_ns`` (prctl PR_SET_TIMERSLACK); True on success.

    The default slack of 50 us lets the kernel delay wake-ups to batch them; the sampler wants
    its 1 ms deadlines honoured. Best effort: returns False when prctl is unavailable.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(slack_ns), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_cpu_affinity(cpu: int) -> None:
    """Pin this process to CPU ``cpu``. Raises ``ValueError`` naming the allowed CPUs."""
    allowed = sorted(os.sched_getaffinity(0))
    if cpu not in allowed:
        raise ValueError(f"--cpu {cpu}: not an allowed CPU for this process "
                         f"(allowed: {', '.join(map(str, allowed))})")
    os.sched_setaffinity(0, {cpu})


def set_rt_priority(priority: int) -> None:
    """Run this process under SCHED_FIFO at ``priority``.

    Raises ``ValueError`` for a priority outside the system's SCHED_FIFO range and
    ``PermissionError`` with an explanation when not permitted (needs root or CAP_SYS_NICE, or
    an RLIMIT_RTPRIO allowance).
    """
    lo = os.sched_get_priority_min(os.SCHED_FIFO)
    hi = os.sched_get_priority_max(os.SCHED_FIFO)
    if not lo <= priority <= hi:
        raise ValueError(f"--rt-priority {priority}: SCHED_FIFO priority must be in {lo}..{hi}")
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError as exc:
        raise PermissionError(
            f"--rt-priority {priority}: not permitted to use SCHED_FIFO ({exc.strerror}); run as "
            "root, grant CAP_SYS_NICE, or raise RLIMIT_RTPRIO (e.g. LimitRTPRIO= in the systemd "
            "unit)") from exc
