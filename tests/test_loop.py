"""The sampling schedule on a fake clock: absolute deadlines, skipping late sweeps, miss counting."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

import pytest
from rdmascope.sampler.loop import (
    ScheduleStats,
    reduce_timer_slack,
    run_schedule,
    set_cpu_affinity,
    set_rt_priority,
)

MS = 1_000_000


class FakeClock:
    """A clock in int ns whose ``sleep`` advances time (like pyinstrument's fake_time_util).

    ``oversleep_ns`` is added to every sleep (a late wake-up); ``tick_ns`` is added on every
    clock read (time passing while spinning).
    """

    def __init__(self, t0: int = 10 * MS, oversleep_ns: int = 0, tick_ns: int = 0):
        self.t = t0
        self.oversleep_ns = oversleep_ns
        self.tick_ns = tick_ns
        self.sleeps: list[float] = []
        self.reads = 0

    def clock(self) -> int:
        self.reads += 1
        self.t += self.tick_ns
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += int(round(s * 1e9)) + self.oversleep_ns

    def advance(self, ns: int) -> None:
        self.t += ns


def run(fc: FakeClock, n: int, cost=lambda k: 0, **kw):
    taken: list[tuple[int, int]] = []

    def sweep(k):
        taken.append((k, fc.t))
        fc.advance(cost(k))

    st = run_schedule(sweep, MS, should_stop=lambda: False, clock=fc.clock, sleep=fc.sleep,
                      max_sweeps=n, **kw)
    return st, taken


def test_on_time_sweeps_hit_absolute_deadlines():
    fc = FakeClock()
    start = fc.t
    st, taken = run(fc, 50, cost=lambda k: 300_000)  # each sweep takes 0.3 ms
    assert st.taken == 50 and st.missed == 0
    assert taken == [(k, start + k * MS) for k in range(50)]
    # sleeps are what remains of each interval: 1 ms - 0.3 ms (deadline-based, no drift)
    assert fc.sleeps == pytest.approx([0.0007] * 49)


def test_given_start_in_future_waits_for_sweep_zero():
    fc = FakeClock(t0=0)
    st, taken = run(fc, 3, start_ns=5 * MS)
    assert [t for _, t in taken] == [5 * MS, 6 * MS, 7 * MS]
    assert fc.sleeps[0] == pytest.approx(0.005)


def test_long_sweep_skips_missed_deadlines_without_catch_up_burst():
    fc = FakeClock()
    start = fc.t
    # sweep 3 takes 3.2 ms (ends at 6.2 ms): deadlines 4, 5 and 6 passed; 4 and 5 are missed,
    # 6 (the latest passed) is taken at once, then the loop is back on the grid.
    st, taken = run(fc, 8, cost=lambda k: 3_200_000 if k == 3 else 10_000)
    ks = [k for k, _ in taken]
    assert ks == [0, 1, 2, 3, 6, 7, 8, 9]
    assert st.missed == 2
    assert taken[4][1] == start + 3 * MS + 3_200_000  # 0.2 ms into slot 6
    assert taken[5][1] == start + 7 * MS
    # no catch-up burst: at most one sweep per slot, never two sweeps for one deadline
    times = [t for _, t in taken]
    assert all(b - a >= 700_000 for a, b in zip(times, times[1:], strict=False))


def test_exactly_one_interval_late_is_a_miss_less_is_not():
    fc = FakeClock()
    start = fc.t
    st, taken = run(fc, 3, cost=lambda k: MS - 1 if k == 0 else 0)
    assert [k for k, _ in taken] == [0, 1, 2] and st.missed == 0
    fc = FakeClock()
    start = fc.t
    st, taken = run(fc, 3, cost=lambda k: 2 * MS if k == 0 else 0)
    # sweep 0 ends exactly at deadline 2: deadline 1 passed entirely -> missed
    assert [k for k, _ in taken] == [0, 2, 3] and st.missed == 1
    assert taken[1][1] == start + 2 * MS


def test_steady_late_wakeup_below_one_interval_costs_no_sweep():
    fc = FakeClock(oversleep_ns=700_000)  # every wake-up 0.7 ms late
    start = fc.t
    st, taken = run(fc, 20)
    assert st.missed == 0
    assert [k for k, _ in taken] == list(range(20))
    for k, t in taken[1:]:
        assert t - (start + k * MS) == 700_000


def test_wakeup_later_than_one_interval_misses_and_makes_progress():
    fc = FakeClock(oversleep_ns=1_300_000)  # every wake-up 1.3 ms late
    start = fc.t
    st, taken = run(fc, 10)
    assert st.taken == 10  # progress despite the lateness
    # sleeping for deadline k wakes 0.3 ms into slot k+1: k is missed, k+1 taken at once, so
    # sweeps 0, 2, 4, ..., 18 are taken and 1, 3, ..., 17 missed
    assert [k for k, _ in taken] == list(range(0, 20, 2))
    assert st.missed == 9
    for k, t in taken:
        assert 0 <= t - (start + k * MS) < MS


def test_missed_plus_taken_equals_deadlines_under_random_costs():
    import random

    rng = random.Random(7)
    costs = {k: rng.choice([0, 100_000, 900_000, 1_600_000, 4_300_000]) for k in range(5000)}
    fc = FakeClock(oversleep_ns=50_000)
    start = fc.t
    st, taken = run(fc, 400, cost=lambda k: costs[k])
    ks = [k for k, _ in taken]
    assert ks == sorted(set(ks))  # strictly increasing, never repeated
    assert st.taken + st.missed == ks[-1] + 1
    assert st.next_k == ks[-1] + 1
    for k, t in taken:  # each taken sweep starts inside its own slot
        assert 0 <= t - (start + k * MS) < MS
    # independent count of misses: slots with no sweep between the first and the last sweep
    assert st.missed == (ks[-1] + 1) - len(ks)


def test_spin_sleeps_short_then_polls_the_clock():
    fc = FakeClock(tick_ns=20_000)  # each clock read takes 20 us
    start = fc.t + 20_000  # the loop's first clock read defines start
    st, taken = run(fc, 3, spin_ns=200_000)
    # the loop sleeps until 200 us before each deadline, then spins on the clock
    assert len(fc.sleeps) == 2
    # sleep = deadline - 200 us - now: now is 2 reads (sweep 0, late) or 1 read after the sweep
    assert fc.sleeps == pytest.approx([0.00076, 0.00078], abs=1e-12)
    assert fc.reads >= 20  # without the spin it would be 5 reads; 9 spin reads per deadline
    for k, t in taken:
        assert 0 <= t - (start + k * MS) <= 20_000  # the spin ends within one clock read


def test_should_stop_and_stats_object():
    fc = FakeClock()
    stats = ScheduleStats()
    n = {"calls": 0}

    def stop():
        n["calls"] += 1
        return stats.taken >= 5

    out = run_schedule(lambda k: None, MS, should_stop=stop, clock=fc.clock, sleep=fc.sleep,
                       stats=stats)
    assert out is stats and stats.taken == 5 and stats.next_k == 5


def test_bad_interval():
    with pytest.raises(ValueError, match="interval_ns"):
        run_schedule(lambda k: None, 0, should_stop=lambda: True)


def test_timer_slack_is_reduced_for_the_calling_thread():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    out = {}

    def body():
        out["before"] = libc.prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK
        out["ok"] = reduce_timer_slack(1)
        out["after"] = libc.prctl(30, 0, 0, 0, 0)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert out["ok"] is True
    assert out["after"] == 1


def test_cpu_affinity_rejects_unknown_cpu_and_accepts_allowed():
    with pytest.raises(ValueError, match="allowed"):
        set_cpu_affinity(10_000)
    before = os.sched_getaffinity(0)
    try:
        cpu = min(before)
        set_cpu_affinity(cpu)
        assert os.sched_getaffinity(0) == {cpu}
    finally:
        os.sched_setaffinity(0, before)


def test_rt_priority_out_of_range_is_a_clear_error():
    with pytest.raises(ValueError, match="SCHED_FIFO priority must be in"):
        set_rt_priority(1000)


def test_a_stall_across_the_last_deadline_takes_no_sweep_beyond_it():
    """--duration 1.5 s at 1 ms is 1500 deadlines (0..1499). A sweep that ends past the last
    one used to be followed by one more sweep (k = 1500): taken + missed = 1501 (the audit of
    issue 10: 1448 + 53 for 1500). Now the passed deadlines count as missed and the loop ends:
    taken + missed == 1500, and no sweep index reaches 1500."""
    fc = FakeClock()
    taken: list[int] = []

    def sweep(k):
        taken.append(k)
        if k == 1497:
            fc.advance(3 * MS + MS // 2)  # a stall from deadline 1497 to past 1500

    st = run_schedule(sweep, MS, should_stop=lambda: False, clock=fc.clock, sleep=fc.sleep,
                      n_deadlines=1500)
    assert max(taken) == 1497
    assert st.taken == 1498 and st.missed == 2 and st.taken + st.missed == 1500
    assert st.next_k == 1500
    # without a stall: every deadline taken once
    fc = FakeClock()
    st = run_schedule(lambda k: None, MS, should_stop=lambda: False, clock=fc.clock,
                      sleep=fc.sleep, n_deadlines=1500)
    assert (st.taken, st.missed) == (1500, 0)
