"""Serve a scenario live: build the emulated tree, play the model into it, write the ground truth.

Used by ``rdmascope simulate serve`` (foreground), by ``rdmascope demo`` (which runs it as a separate
process next to the real ``rdmascope record``) and by the end-to-end test.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rdmascope.emulator.model import Traffic
from rdmascope.emulator.simcapture import write_ground_truth
from rdmascope.emulator.tree import EmulatedTree, PlayStats, build_tree, pcie_width_for, play


def wait_for_path(pattern_dir: Path, pattern: str, timeout_s: float,
                  should_stop: Callable[[], bool] | None = None) -> bool:
    """Wait until ``pattern_dir`` holds a file matching ``pattern`` (glob); False on timeout/stop."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pattern_dir.is_dir() and any(pattern_dir.glob(pattern)):
            return True
        if should_stop is not None and should_stop():
            return False
        time.sleep(0.02)
    return False


def serve(root: str | os.PathLike, traffic: Traffic, *, out: str | os.PathLike | None = None,
          speed: float = 1.0, start_delay_s: float = 0.0, wait_for: str | os.PathLike | None = None,
          wait_timeout_s: float = 60.0, should_stop: Callable[[], bool] | None = None,
          on_event: Callable[[str, object], None] | None = None,
          tree: EmulatedTree | None = None) -> tuple[PlayStats | None, Path, Path]:
    """Build the tree at ``root`` (unless ``tree`` is given), play ``traffic`` live, write the truth.

    Order: build the tree -> ``on_event("root", path)`` -> optionally wait until ``wait_for`` (a
    capture directory) holds a live segment, i.e. a recorder is sampling -> model time 0 =
    now + ``start_delay_s`` -> ``on_event("start", t0_ns)`` -> play until the end or
    ``should_stop()`` -> write ``requests.jsonl`` and ``truth.json`` into ``out`` (default: the
    root) with only the requests finished by then. Returns (play stats or None when the wait
    failed, request log path, truth path). Raises ``FileExistsError`` (see ``build_tree``) and
    ``TimeoutError`` when ``wait_for`` never starts.
    """
    emit = on_event or (lambda kind, value: None)
    link = traffic.config.link
    appearing = sorted({(sr.change_ns, sr.device) for sr in traffic.series if sr.appears})
    if tree is None and link.rails:
        from rdmascope.emulator.rails import build_rail_tree

        absent = tuple(int(d.split("_")[-1]) for _, d in appearing)
        tree = build_rail_tree(root, link.rails, seed=traffic.seed, absent=absent)
    elif tree is None:
        tree = build_tree(root, seed=traffic.seed, twins=traffic.config.link.twins,
                          pcie_width=pcie_width_for(traffic.config.link.twin_gbps))
    emit("root", tree.root)
    if wait_for is not None:
        wf = Path(wait_for)
        if not wait_for_path(wf, "live-*.arrow", wait_timeout_s, should_stop):
            if should_stop is not None and should_stop():
                raise InterruptedError("stopped before the recorder started")
            raise TimeoutError(f"{wf}: no recorder started writing there within "
                               f"{wait_timeout_s:g} s")
    t0 = time.perf_counter_ns() + int(start_delay_s * 1e9)
    emit("start", t0)
    if appearing:  # a resize: play until the rails appear, add them, play on
        from rdmascope.emulator.rails import add_rail

        at_ns = appearing[0][0]
        user_stop = should_stop or (lambda: False)
        first = play(tree, traffic, t0_ns=t0, speed=speed, should_stop=lambda: user_stop() or (
            time.perf_counter_ns() - t0) * speed >= at_ns)
        if not user_stop():
            for _, dev in appearing:
                add_rail(tree, int(dev.split("_")[-1]))
            emit("appeared", [d for _, d in appearing])
        stats = play(tree, traffic, t0_ns=t0, speed=speed, should_stop=should_stop) \
            if not user_stop() else first
        stats = replace(stats, t0_ns=first.t0_ns, ticks=first.ticks + stats.ticks,
                        writes=first.writes + stats.writes,
                        max_tick_gap_ns=max(first.max_tick_gap_ns, stats.max_tick_gap_ns),
                        late_ticks=first.late_ticks + stats.late_ticks) \
            if stats is not first else stats
    else:
        stats = play(tree, traffic, t0_ns=t0, speed=speed, should_stop=should_stop)
    played_model_ns = min((time.perf_counter_ns() - t0) * speed, traffic.duration_ns)
    done = [r for r in traffic.requests if r.t_last_ns <= played_model_ns]
    shown = traffic if stats.completed else replace(traffic, requests=done)
    log, truth = write_ground_truth(out if out is not None else tree.root, shown, t0, speed=speed,
                                    extra={"live": {"tick_hz": round(stats.tick_hz, 1),
                                                    "max_tick_gap_ns": stats.max_tick_gap_ns,
                                                    "p99_tick_gap_ns": stats.p99_tick_gap_ns,
                                                    "completed": stats.completed,
                                                    "sysfs_root": str(tree.root)}})
    emit("done", stats)
    return stats, log, truth
