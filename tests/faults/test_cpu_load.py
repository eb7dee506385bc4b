"""Heavy CPU load on both cores while sampling: the daemon keeps going and its self-audit tells
the truth about the readings it stored.

Two busy-loop processes (one per core) run through a 1.5 s capture (1,501 deadlines: the audit's
bookkeeping, not a length, is what is checked); an unloaded 0.5 s capture in the same test is the
reference. No timing assertion (a shared CI machine may or may not make the
sampler miss deadlines); instead each audit is checked against the readings actually on disk:

- every deadline is accounted for: sweeps taken + missed = the deadlines of ``--duration``;
- sweeps taken = the distinct sweeps stored; rows written = rows stored; the rows the audit
  counts as unavailable = the non-OK rows stored;
- the interval histogram holds one sample per pair of consecutive sweeps taken, its maximum is
  exactly the longest gap between consecutive stored sweep starts, and its p50/p99 lie within the
  histogram's resolution (+-0.6 %) of the same order statistics of the stored intervals.

The load is shown to be real by measurement, not by an assumption about how idle the machine was
before: the cores must have been saturated (at most 10 % idle, /proc/stat) during the loaded
capture; how much CPU each busy loop got depends on the other work on the machine and is only
printed. A run whose cores were not saturated (a CPU quota) is skipped with that reason.

The two runs' numbers are printed side by side (``pytest -s``) for the record.
"""

from __future__ import annotations

import math

import numpy as np
import psutil
import pytest
from rdmascope.analysis.load import load_capture

from .conftest import Recorder, busy_loops, make_tree

INTERVAL_NS = 1_000_000
#: The loaded capture counts as loaded when the machine's cores were at most this idle.
MAX_IDLE_FRACTION = 0.10


def _machine_cpu() -> tuple[float, float]:
    """(idle, total) CPU seconds of the whole machine since boot (/proc/stat via psutil).

    Idle includes iowait; total leaves out guest time (already counted in user on Linux).
    """
    c = psutil.cpu_times()._asdict()
    total = sum(v for k, v in c.items() if k not in ("guest", "guest_nice"))
    return c["idle"] + c.get("iowait", 0.0), total


def _order_stat(x: np.ndarray, q: float) -> float:
    """The sample the audit's histogram quantile approximates: rank ceil(q * n)."""
    s = np.sort(x)
    return float(s[max(0, math.ceil(q * len(s)) - 1)])


def _check_audit(out, duration_s: float) -> dict:
    cap = load_capture(out)
    a = cap.meta["audit"]
    r = cap.readings
    n = len(cap.counters)
    assert a["stopped_by"] == "duration"
    # deadlines at 0, 1, ..., duration (inclusive): the capture spans the whole duration
    assert a["sweeps_taken"] + a["sweeps_missed"] == round(duration_s * 1e9 / INTERVAL_NS) + 1
    sweeps = np.unique(r["sweep"].to_numpy())
    assert a["sweeps_taken"] == len(sweeps)
    assert a["rows_written"] == len(r) == len(sweeps) * n
    for x in a["read_duration_ns"]:
        assert x["bad_rows"] == int((~r.loc[r["counter_id"] == x["counter_id"], "valid"]).sum())
    # sweep start = t_before of the sweep's first read (counter 0)
    starts = r.loc[r["counter_id"] == 0].sort_values("sweep")["t_before_ns"].to_numpy()
    iv = np.diff(starts)
    hist = a["interval_ns"]
    assert hist["n"] == len(iv) == a["sweeps_taken"] - 1
    assert hist["max"] == int(iv.max())
    for q, key in ((0.5, "p50"), (0.99, "p99")):
        want = _order_stat(iv, q)
        assert abs(hist[key] - want) <= 0.006 * want + 1, (key, hist[key], want)
    # missed deadlines show up as holes in the stored sweep numbers (or after the last one)
    holes = int(sweeps[-1] + 1 - len(sweeps))
    assert holes <= a["sweeps_missed"]
    return {"taken": a["sweeps_taken"], "missed": a["sweeps_missed"], "p50_us": hist["p50"] / 1e3,
            "p99_us": hist["p99"] / 1e3, "max_us": hist["max"] / 1e3,
            "cpu_pct": a["cpu_pct_one_core"]}


def test_heavy_cpu_load(tmp_path):
    tree = make_tree(tmp_path / "sys")
    quiet = Recorder(tmp_path / "quiet", tree.root, "--duration", "0.5s")
    assert quiet.wait() == 0, quiet.stderr
    ref = _check_audit(tmp_path / "quiet", 0.5)

    hogs = busy_loops(2)
    try:
        machine0 = _machine_cpu()
        rec = Recorder(tmp_path / "loaded", tree.root, "--duration", "1.5s")
        rc = rec.wait(60)
        machine1 = _machine_cpu()
        hog_cpu = [psutil.Process(h.pid).cpu_times() for h in hogs]
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert rc == 0, rec.stderr
    loaded = _check_audit(tmp_path / "loaded", 1.5)
    # the audit printed at stop is the one saved
    assert f"{loaded['taken']} taken, {loaded['missed']} missed" in rec.stderr
    # the load was real: the busy loops ran, and the cores were saturated while the recorder ran
    # (by the loops alone on an idle machine, by the loops and everyone else's work on a busy one;
    # either way the recorder had to compete for a core). How much CPU each loop got depends on
    # how busy the machine already was, so it is measured, not bounded.
    hogs_s = [round(c.user + c.system, 2) for c in hog_cpu]
    assert all(x > 0 for x in hogs_s), hog_cpu
    idle_s, total_s = machine1[0] - machine0[0], machine1[1] - machine0[1]
    idle_frac = idle_s / total_s
    print("\nunloaded:", ref, "\nloaded:  ", loaded,
          f"\nbusy loops' CPU {hogs_s} s; machine idle {100 * idle_frac:.1f} % of "
          f"{total_s:.2f} CPU-s")
    if idle_frac > MAX_IDLE_FRACTION:
        # e.g. a CPU quota keeps the loops from filling the cores: the audit checks above ran,
        # but this run did not show they hold under saturation
        pytest.skip(f"the cores were not saturated during the loaded capture (idle "
                    f"{100 * idle_frac:.1f} % > {100 * MAX_IDLE_FRACTION:.0f} %); the audit "
                    "checks passed, the load was not established")
