"""The local process pool the cluster view's maps run on (``analysis.cluster_reduce.run_maps``).

Light on purpose (the standard library only): the ``cluster`` command starts the pool before it
imports the analysis modules, so each worker imports what a map needs (pandas, pyarrow, the
engine: ~0.5 s of CPU) while the command's own process imports the same, instead of after it.
A worker's initializer sets its allocator (``cluster_map.worker_memory``). Workers are started
once per pool, all at once (``start_pool``), and run one node's map per task.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor


def default_jobs() -> int:
    """The machine's cores this process may use (``os.sched_getaffinity``, else cpu_count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _init_worker() -> None:
    """A worker's first step: the map's modules imported and its allocator set. Without the
    analysis extras it does nothing (the command that started the pool says what is missing)."""
    try:
        from rdmascope.analysis.cluster_map import worker_memory
    except ImportError:
        return
    worker_memory()


def start_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` map workers (forkserver, else spawn: never a fork of a process that
    may hold threads), every one of them started now: a no-op task per worker makes the pool
    spawn them (it otherwise spawns one per task submitted, as tasks come)."""
    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods()
                         else "spawn")
    ex = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker)
    for _ in range(jobs):
        ex.submit(os.getpid)
    return ex
