"""Run the whole test suite N times while every core is kept busy, and count failures.

    python benchmarks/suite_under_load.py [--runs 3] [--load-procs 0] [-- PYTEST ARGS...]

A flaky test rejects a whole landing, and CI machines are often busy: this is how the suite is
shown not to flake. Each run starts one CPU-bound load process per core (``--load-procs``, default
``os.cpu_count()``; pure-Python busy loops at normal priority, like a second job on the machine),
runs ``python -m pytest -q -p no:cacheprovider`` with the given arguments, stops the load, and
records the run's exit code, wall time and pytest's closing line. Prints one line per run and a
total; exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _burn(stop) -> None:  # pragma: no cover - runs in a child process
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def run_once(pytest_args: list[str], load_procs: int) -> tuple[int, float, str]:
    """One suite run under load: (pytest exit code, wall seconds, pytest's last line)."""
    stop = mp.Event()
    procs = [mp.Process(target=_burn, args=(stop,), daemon=True) for _ in range(load_procs)]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            *pytest_args], cwd=REPO, capture_output=True, text=True)
    finally:
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    wall = time.monotonic() - t0
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    tail = lines[-1] if lines else r.stderr.strip()[-200:]
    return r.returncode, wall, "\n".join([*failed, tail])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load-procs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    a = ap.parse_args(argv)
    bad = 0
    for i in range(1, a.runs + 1):
        rc, wall, tail = run_once(a.pytest_args, a.load_procs)
        bad += rc != 0
        print(f"run {i}/{a.runs} with {a.load_procs} load process(es): exit {rc}, "
              f"{wall / 60:.1f} min\n  {tail}", flush=True)
    print(f"{a.runs - bad} of {a.runs} runs passed under load")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
