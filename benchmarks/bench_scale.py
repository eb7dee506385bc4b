"""Benchmark: every analysis command on long captures, time and peak memory, beside DuckDB.

One command (from the repository root, in the venv; ``pip install duckdb`` for the baseline,
a benchmark-only dependency)::

    python benchmarks/bench_scale.py             # 1 h and 6 h captures (~25 min in all)
    python benchmarks/bench_scale.py --quick     # 5 min and 30 min (~3 min)
    python benchmarks/bench_scale.py --hours 1   # one length only
    python benchmarks/bench_scale.py --captures /data/1h /data/6h --only peaks --repeat 3
    python benchmarks/bench_scale.py --captures /data/1h --repeat 3 --rev HEAD --baseline 3ce29cc

Captures are built with ``scale_capture.build`` (8 counters: 2 RDMA devices and their 2
netdevs x tx/rx, 1 kHz, one Parquet segment a minute, bursty traffic, one request every
~1.2 s in ``requests.jsonl``). Each command runs in its own process under a memory limit
(``RLIMIT_AS``, ``--limit-gb``, default 6 GB, so a command that would take the machine down is
stopped and reported as over the limit); its wall time, CPU time (user + system, all threads)
and peak RSS come from ``os.wait4`` (taken by a small launcher process, so a command's RSS
is not the benchmark's own: ``LAUNCHER``). On a shared machine compare CPU times, or wall times
measured side by side in one run; ``--repeat N`` runs every command N times, in rounds (each
command once per round), and keeps each command's run with the least CPU.
Beside them, in the same run and on the same files, DuckDB's naive query: counter deltas per
counter (``lag`` over each counter's sweeps), summed per 1 ms window of the reading instant,
with the peak and p50/p90/p99 per counter (what ``peaks`` answers at 1 ms, without the exact
spreading of an interval over the windows it overlaps).

Beside them too, the floor: reading exactly the columns the commands need (``counter_id, sweep,
t_before_ns, read_duration_ns, value, status``) with pyarrow, segment by segment
(``ParquetFile(path).read(columns=...)``: ``pq.read_table`` goes through the dataset layer and
costs ~0.3 s more CPU per hour of capture for the same columns), plus one numpy pass computing
the kind of result ``peaks`` gives: per counter, its valid readings' instants and
cumulative bytes (counter value x bytes per unit), the exact bytes of every 1 ms window of the
capture's grid as differences of that piecewise-linear curve at the window edges
(``np.interp``), and the peak. Rows are taken in the order they are stored (sorted by
``counter_id, sweep``, as the engine relies on too), with no sort and no copy beyond the per
counter selection: what no analysis of the readings can do much faster. Each command's CPU time
is shown as a multiple of the floor's and of DuckDB's, side by side in the same run.

Targets per hour of capture: peaks / bursts / verify-emulation / attribute within 2x the floor,
report within 4x; memory flat from the short to the long capture; never slower than DuckDB.
"""

from __future__ import annotations

import argparse
import json
import os
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


#: the floor (see the module docstring), run as ``python -c FLOOR_CODE CAPTURE_DIR``
FLOOR_CODE = """
import glob, json, sys
import numpy as np, pyarrow.parquet as pq
cap = sys.argv[1]
man = json.load(open(cap + "/manifest.json"))
t0, ms = int(man["start"]["monotonic_ns"]), 1_000_000
bpu = [float(c.get("bytes_per_unit") or 1) for c in man["counters"]]
cols = ["counter_id", "sweep", "t_before_ns", "read_duration_ns", "value", "status"]
peak = {}
for f in sorted(glob.glob(cap + "/segments/*.parquet")):
    t = pq.ParquetFile(f).read(columns=cols)
    cid = t["counter_id"].to_numpy()
    ts = t["t_before_ns"].to_numpy() + t["read_duration_ns"].to_numpy() // 2
    v = t["value"].to_numpy()
    ok = t["status"].to_numpy() == 0
    cuts = (np.flatnonzero(cid[1:] != cid[:-1]) + 1).tolist()
    for a, b in zip([0, *cuts], [*cuts, len(cid)]):
        m = ok[a:b]
        tt, vv = ts[a:b][m], v[a:b][m]
        if len(tt) < 2:
            continue
        c = int(cid[a])
        cum = (vv - vv[0]).astype(np.float64) * bpu[c]
        e = t0 + np.arange(-((t0 - tt[0]) // ms), (tt[-1] - t0) // ms + 1) * ms
        w = np.diff(np.interp(e, tt, cum))
        if len(w):
            peak[c] = max(peak.get(c, 0.0), float(w.max()) * 8 / ms)
print(len(peak))
"""


FLOOR = "floor: pyarrow columns + numpy"
DUCK = "DuckDB naive 1 ms peaks"


def floor_argv(cap: Path) -> list[str]:
    return [sys.executable, "-c", FLOOR_CODE, str(cap)]


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
        # --force: each run (--repeat, --baseline) writes the report over the last one
        ("report", ["report", c, "-o", str(out / "report"), "--force"]),
    ]


#: Started as a fresh interpreter, it starts the command and reports the command's rusage.
#: On Linux a child's ``ru_maxrss`` starts at the peak of the process that forked it (fork and
#: exec carry the high-water mark over, with or without ``preexec_fn``): started from this
#: benchmark, which may hold a capture's worth of memory, every command read >= its RSS. The
#: launcher holds ~10 MB, so a command's ``ru_maxrss`` is its own.
LAUNCHER = r"""
import json, os, resource, sys, time
fd, limit, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
argv = sys.argv[4:]
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
timed_out = False
while True:
    got, status, ru = os.wait4(pid, os.WNOHANG)
    if got:
        break
    if time.perf_counter() - t > timeout:
        timed_out = True
        os.killpg(pid, 9)
        _, status, ru = os.wait4(pid, 0)
        break
    time.sleep(0.02)
dt = time.perf_counter() - t
os.write(fd, json.dumps({"s": dt, "cpu_s": ru.ru_utime + ru.ru_stime,
                         "rss_mb": ru.ru_maxrss / 1024, "timeout": timed_out,
                         "code": os.waitstatus_to_exitcode(status)}).encode())
"""


def run_child(argv: list[str], limit_bytes: int, timeout_s: float, *,
              stdout=subprocess.DEVNULL, env: dict | None = None
              ) -> tuple[float, float, float, str, str]:
    """Run argv in a child process under RLIMIT_AS; return (wall s, CPU s, peak RSS MB, status,
    stdout text: "" unless ``stdout=subprocess.PIPE``). ``env``: the child's environment.

    The command is started by ``LAUNCHER`` (a fresh interpreter, so the peak RSS is the
    command's, not this benchmark's). CPU is the command's user + system time from
    ``os.wait4`` (all its threads): on a shared machine it moves much less with the load than
    the wall time does. Status: "ok", "over limit" (killed, or a memory error in its stderr),
    "timeout" or "exit N: <last line>"."""
    r, w = os.pipe()
    try:
        p = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(w), str(limit_bytes),
                              str(timeout_s), *argv], stdout=stdout, stderr=subprocess.PIPE,
                             env=env, pass_fds=(w,))
    finally:
        os.close(w)
    out_b, err_b = p.communicate()
    with os.fdopen(r, "rb") as f:
        rep = f.read()
    try:
        got = json.loads(rep)
    except json.JSONDecodeError:
        return (0.0, 0.0, 0.0, f"launcher failed: {err_b.decode(errors='replace')[-200:]}",
                "")
    out = out_b.decode() if stdout == subprocess.PIPE and out_b is not None else ""
    err = err_b.decode(errors="replace") if err_b else ""
    code = got["code"]
    if got["timeout"]:
        state = "timeout"
    elif code == 0:
        state = "ok"
    elif any(m in err.lower() for m in ("memoryerror", "out of memory", "cannot allocate",
                                         "bad_alloc")) or code < 0:
        state = "over limit"
    else:
        state = f"exit {code}: {err.strip().splitlines()[-1:]}"
    return got["s"], got["cpu_s"], got["rss_mb"], state, out


def run(argv: list[str], limit_bytes: int, timeout_s: float
        ) -> tuple[float, float, float, str]:
    """``run_child`` without the stdout text: (wall s, CPU s, peak RSS MB, status)."""
    return run_child(argv, limit_bytes, timeout_s)[:4]


#: The package's source directories in this checkout (what the editable install imports).
SOURCE_DIRS = [Path(__file__).resolve().parents[1] / d for d in ("src", "analysis", "sampler")]


def compile_bytecode(dirs: list[Path]) -> None:
    """Write the bytecode (``__pycache__/*.pyc``) of every module under ``dirs``, as an
    installed package has it: ``pip install`` compiles a wheel's modules, and an editable
    install writes them on first import, except where ``PYTHONDONTWRITEBYTECODE`` is set (as on
    some CI and build machines). Without it every timed command would compile the package's
    sources again (~0.07 s of CPU for ``peaks``), a cost users do not pay and the floor, whose
    numpy and pyarrow come compiled, does not either. Raises ``OSError`` if a directory
    cannot be written."""
    import compileall

    for d in dirs:
        if d.is_dir() and not compileall.compile_dir(str(d), quiet=1):
            raise OSError(f"{d}: could not compile every module (a syntax error?)")


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
    ap.add_argument("--captures", nargs="*", metavar="DIR",
                    help="use these existing captures (read only) instead of building them; "
                         "their length is taken from the manifest")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter whose rdmascope runs the commands (e.g. another "
                         "checkout's venv, for a before/after table in one run)")
    ap.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB baseline")
    ap.add_argument("--minutes", type=float, nargs="*",
                    help="capture lengths in minutes (a short run on a loaded machine)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each command N times and keep the run with the least CPU time")
    ap.add_argument("--rev", metavar="REV",
                    help="run the commands of this git revision instead of the working tree "
                         "(in a shared checkout: others' uncommitted edits left out)")
    ap.add_argument("--baseline", metavar="REV",
                    help="also run every command of this git revision, in the same rounds "
                         "(rows marked 'before')")
    args = ap.parse_args()

    try:
        import duckdb  # noqa: F401
        have_duckdb = True
    except ImportError:
        have_duckdb = False
        print("duckdb is not installed (pip install duckdb): no baseline column", file=sys.stderr)
    rd = [args.python, "-m", "rdmascope"]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.captures:
        caps = []
        for d in args.captures:
            m = json.loads((Path(d) / "manifest.json").read_text())
            secs = (m["stop"]["monotonic_ns"] - m["start"]["monotonic_ns"]) / 1e9
            caps.append((round(secs / 3600, 2), Path(d)))
    else:
        hours = (args.hours or ([m / 60 for m in args.minutes] if args.minutes else None)
                 or ([5 / 60, 0.5] if args.quick else [1.0, 6.0]))
        caps = [(h, root / f"cap-{h:g}h") for h in hours]
    hours = [h for h, _ in caps]
    limit = int(args.limit_gb * 2**30)
    load_before = os.getloadavg()
    results: dict[str, dict[float, tuple]] = {}
    pkgs = Path(tempfile.mkdtemp(prefix="bench-scale-revs-")) if args.rev or args.baseline \
        else None
    try:
        # (row suffix, environment) of each revision run: the working tree, or git revisions
        # unpacked as packages put first on PYTHONPATH (bench_attribute.baseline_package)
        trees: list[tuple[str, dict | None]] = [("", None)]
        compile_bytecode(SOURCE_DIRS)  # the working tree's, as installed (compile_bytecode)
        if args.rev or args.baseline:
            from bench_attribute import baseline_package

            def env_at(rev: str, sub: str) -> dict:
                env = dict(os.environ)
                (pkgs / sub).mkdir(parents=True)
                pkg = baseline_package(rev, pkgs / sub)
                env["PYTHONPATH"] = os.pathsep.join([str(pkg), env.get("PYTHONPATH", "")])
                return env

            if args.rev:
                trees = [("", env_at(args.rev, "after"))]
            if args.baseline:
                trees.append((" (before)", env_at(args.baseline, "before")))
        for h, cap in caps:
            if not (cap / "manifest.json").exists():
                t = time.perf_counter()
                build(cap, int(round(h * 3600)))
                print(f"built {cap} ({h:g} h) in {time.perf_counter() - t:.1f} s",
                      file=sys.stderr)
            out = root / f"out-{h:g}h"
            out.mkdir(exist_ok=True)
            t0 = json.loads((cap / "manifest.json").read_text())["start"]["monotonic_ns"]
            rows = [(name + suffix, rd + argv, env) for name, argv in commands(cap, out)
                    if not args.only or any(name.startswith(o) for o in args.only)
                    for suffix, env in trees]
            rows.append((FLOOR, floor_argv(cap), None))
            if have_duckdb and not args.no_duckdb:
                rows.append((DUCK, duckdb_argv(cap, t0), None))
            # in rounds (every command once per round), so the commands, the floor and DuckDB
            # see the same load however it changes during the run
            runs: dict[str, list] = {name: [] for name, _, _ in rows}
            for k in range(max(1, args.repeat)):
                for name, argv, env in rows:
                    r = run_child(argv, limit, args.timeout, env=env)[:4]
                    runs[name].append(r)
                    print(f"{h:g} h  {name:28s} {r[0]:8.1f} s wall {r[1]:8.1f} s CPU "
                          f"{r[2]:8.0f} MB  {r[3]}  (round {k + 1})", file=sys.stderr)
            for name, _, _ in rows:
                results.setdefault(name, {})[h] = min(runs[name],
                                                      key=lambda r: (r[3] != "ok", r[1]))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        if pkgs is not None:
            shutil.rmtree(pkgs, ignore_errors=True)
    # the table (markdown): wall / CPU / peak RSS per length, per hour of capture, vs DuckDB
    duck = results.get(DUCK, {})
    floor = results.get(FLOOR, {})
    head = " | ".join(f"{h:g} h (wall / CPU / RSS)" for h in hours)
    print(f"\n| command | {head} | wall, CPU s per hour ({hours[-1]:g} h) "
          f"| vs DuckDB, wall ({hours[-1]:g} h) | x floor, CPU ({hours[-1]:g} h) "
          f"| x DuckDB, CPU ({hours[-1]:g} h) |")
    print("|---|" + "---|" * len(hours) + "---|---|---|---|")
    for name, per in results.items():
        cells = []
        for h in hours:
            if h not in per:
                cells.append("not run")
                continue
            dt, cpu, mb, st = per[h]
            cells.append(f"{dt:.1f} s / {cpu:.1f} s / {mb:,.0f} MB"
                         + ("" if st == "ok" else f" ({st})"))
        dt, cpu, _, st = per.get(hours[-1], (float("nan"), float("nan"), 0, "not run"))
        d = duck.get(hours[-1])
        ratio = (f"{dt / d[0]:.2f}x" if d is not None and d[3] == "ok" and st == "ok"
                 and name != DUCK
                 else "DuckDB failed" if d is not None and d[3] != "ok" else "")

        def times(base, st=st, cpu=cpu):
            b = base.get(hours[-1])
            if b is None or b[3] != "ok" or st != "ok" or not b[1] > 0:
                return ""
            return f"{cpu / b[1]:.2f}x"

        print(f"| `{name}` | " + " | ".join(cells)
              + f" | {dt / hours[-1]:.1f}, {cpu / hours[-1]:.1f} | {ratio} | {times(floor)} "
              f"| {times(duck)} |")
    import platform

    load_after = os.getloadavg()
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"memory limit {args.limit_gb:g} GB per command; load average (1/5/15 min) at the "
          f"start {' '.join(f'{x:.2f}' for x in load_before)}, at the end "
          f"{' '.join(f'{x:.2f}' for x in load_after)}")


if __name__ == "__main__":
    main()
