"""Benchmark: every analysis command on long captures, time and peak memory, beside DuckDB.

One command (from the repository root, in the venv; ``pip install duckdb`` for the baseline,
a benchmark-only dependency)::

    python benchmarks/bench_scale.py             # 1 h and 6 h captures (~25 min in all)
    python benchmarks/bench_scale.py --quick     # 5 min and 30 min (~3 min)
    python benchmarks/bench_scale.py --hours 1   # one length only

Captures are built with ``scale_capture.build`` (8 counters: 2 RDMA devices and their 2
netdevs x tx/rx, 1 kHz, one Parquet segment a minute, bursty traffic, one request every
~1.2 s in ``requests.jsonl``). Each command runs in its own process under a memory limit
(``RLIMIT_AS``, ``--limit-gb``, default 6 GB, so a command that would take the machine down is
stopped and reported as over the limit); its wall time and peak RSS come from ``os.wait4``.
Beside them, in the same run and on the same files, DuckDB's naive query: counter deltas per
counter (``lag`` over each counter's sweeps), summed per 1 ms window of the reading instant,
with the peak and p50/p90/p99 per counter (what ``peaks`` answers at 1 ms, without the exact
spreading of an interval over the windows it overlaps).

Targets (issue 13), per hour of capture: peaks / bursts / verify-emulation / attribute <= 3 s,
report <= 10 s; memory flat from the short to the long capture; never slower than DuckDB.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_capture import build  # noqa: E402

DUCKDB_SQL = """
with r as (select counter_id, sweep, t_before_ns + read_duration_ns // 2 as t, value
           from read_parquet('{seg}/*.parquet') where status = 0),
d as (select counter_id, t,
             value - lag(value) over (partition by counter_id order by sweep) as dv from r),
w as (select counter_id, (t - {t0}) // 1000000 as k, sum(dv) * 4 as b from d group by all)
select counter_id, max(b) * 8 / 1e6 as peak_gbps,
       quantile_cont(b * 8 / 1e6, [0.5, 0.9, 0.99]) as p from w group by counter_id
"""


def commands(cap: Path, out: Path) -> list[tuple[str, list[str]]]:
    c = str(cap)
    return [
        ("inspect", ["inspect", c, "--json"]),
        ("rates --window 100ms", ["rates", c, "--window", "100ms", "--csv"]),
        ("rates --window 1ms --csv", ["rates", c, "--window", "1ms", "--csv"]),
        ("peaks", ["peaks", c, "--json"]),
        ("bursts", ["bursts", c]),  # the table view (--json holds one record per burst)
        ("verify-emulation", ["verify-emulation", c, "--json"]),
        ("attribute", ["attribute", c, "--json"]),
        ("report", ["report", c, "-o", str(out / "report")]),
    ]


def run(argv: list[str], limit_bytes: int, timeout_s: float) -> tuple[float, float, str]:
    """Run argv in a child process under RLIMIT_AS; return (seconds, peak RSS MB, status)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=limit)
    deadline = t + timeout_s
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
            _, status, ru = os.wait4(p.pid, 0)
            return time.perf_counter() - t, ru.ru_maxrss / 1024, "timeout"
        time.sleep(0.02)
    dt = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        state = "ok"
    elif any(m in err.lower() for m in ("memoryerror", "out of memory", "cannot allocate",
                                         "bad_alloc")) or code < 0:
        state = "over limit"
    else:
        state = f"exit {code}"
    return dt, ru.ru_maxrss / 1024, state


def duckdb_argv(cap: Path, t0: int) -> list[str]:
    sql = DUCKDB_SQL.format(seg=cap / "segments", t0=t0)
    code = f"import duckdb; duckdb.connect().sql({sql!r}).fetchall()"
    return [sys.executable, "-c", code]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 min and 30 min captures")
    ap.add_argument("--hours", type=float, nargs="*", help="capture lengths in hours")
    ap.add_argument("--limit-gb", type=float, default=6.0, help="memory limit per command")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    ap.add_argument("--keep", metavar="DIR", help="build the captures in DIR and keep them")
    ap.add_argument("--only", nargs="*", metavar="NAME",
                    help="run only the commands whose name starts with one of these (and DuckDB)")
    args = ap.parse_args()
    hours = args.hours or ([5 / 60, 0.5] if args.quick else [1.0, 6.0])
    try:
        import duckdb  # noqa: F401
        have_duckdb = True
    except ImportError:
        have_duckdb = False
        print("duckdb is not installed (pip install duckdb): no baseline column", file=sys.stderr)
    rd = [sys.executable, "-m", "rdmascope"]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    limit = int(args.limit_gb * 2**30)
    results: dict[str, dict[float, tuple]] = {}
    try:
        for h in hours:
            cap = root / f"cap-{h:g}h"
            if not (cap / "manifest.json").exists():
                t = time.perf_counter()
                build(cap, int(round(h * 3600)))
                print(f"built {cap} ({h:g} h) in {time.perf_counter() - t:.1f} s",
                      file=sys.stderr)
            out = root / f"out-{h:g}h"
            out.mkdir(exist_ok=True)
            import json

            t0 = json.loads((cap / "manifest.json").read_text())["start"]["monotonic_ns"]
            rows = [(name, rd + argv) for name, argv in commands(cap, out)
                    if not args.only or any(name.startswith(o) for o in args.only)]
            if have_duckdb:
                rows.append(("DuckDB naive 1 ms peaks", duckdb_argv(cap, t0)))
            for name, argv in rows:
                dt, mb, st = run(argv, limit, args.timeout)
                results.setdefault(name, {})[h] = (dt, mb, st)
                print(f"{h:g} h  {name:28s} {dt:8.1f} s {mb:8.0f} MB  {st}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    # the table (markdown): time / peak RSS per length, time per hour of capture, vs DuckDB
    duck = results.get("DuckDB naive 1 ms peaks", {})
    head = " | ".join(f"{h:g} h" for h in hours)
    print(f"\n| command | {head} | s per hour ({hours[-1]:g} h) | vs DuckDB ({hours[-1]:g} h) |")
    print("|---|" + "---|" * len(hours) + "---|---|")
    for name, per in results.items():
        cells = []
        for h in hours:
            if h not in per:
                cells.append("not run")
                continue
            dt, mb, st = per[h]
            cells.append(f"{dt:.1f} s / {mb:,.0f} MB" + ("" if st == "ok" else f" ({st})"))
        dt, _, st = per.get(hours[-1], (float("nan"), 0, "not run"))
        d = duck.get(hours[-1])
        ratio = (f"{dt / d[0]:.2f}x" if d is not None and d[2] == "ok" and st == "ok"
                 and name != "DuckDB naive 1 ms peaks"
                 else "DuckDB failed" if d is not None and d[2] != "ok" else "")
        print(f"| `{name}` | " + " | ".join(cells) + f" | {dt / hours[-1]:.1f} | {ratio} |")
    import platform

    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"memory limit {args.limit_gb:g} GB per command")


if __name__ == "__main__":
    main()
