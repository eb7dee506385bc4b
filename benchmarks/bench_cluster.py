"""Benchmark: ``rdmascope cluster`` over a node-hour sweep, map and reduce on a local process pool
and on Ray side by side, beside the whole-series method; per node-hour cost and the
extrapolation to 64 nodes x 24 h.

One command (from the repository root, in the venv)::

    python benchmarks/bench_cluster.py              # 8 nodes x ~1, 4 and 15 min (P2 rounds)
    python benchmarks/bench_cluster.py --quick      # 8 nodes x ~1 and 4 min
    python benchmarks/bench_cluster.py --rounds 1,14,53,160   # the issue's 94 s .. 2.8 h sweep

Each set is an emulated cluster (``rdmascope.emulator.cluster``: one capture per node on its own
clocks, wall clocks up to 20 ms apart, a node without the emulation and a straggler) written to a
temporary directory. Each measured step runs in its own fresh Python process: wall time, CPU time
of every process of the step (the driver's own, plus the pool's workers and forkserver, which
are reaped children of it, whole lives included; for Ray each node's map as the maps report it:
``--json`` meta "maps"; the maps' own CPU is shown beside) and peak RSS (the driver's, and the
largest map worker's; the pool holds ``jobs`` workers at once, so its memory is the driver's
plus ``jobs`` x the largest worker's). Each row starts with the 1-minute load average at the
step's start (other processes on a shared machine lower CPU/wall); a set run both serially and
on the pool gets the ratio of their walls. Steps: ``cluster --jobs 1`` (map and reduce, serial), ``cluster`` (the pool,
default jobs = cores), ``cluster --engine ray`` (a local Ray instance with the same cores; its
workers are not children: their RSS is read with psutil while it runs) and, up to
``--series-max`` minutes, the whole-series method (``method="series"``, every node's 1 ms series
held: today's path). Prints a table per set, CPU/wall of the pool (target >= 1.6 on 2 cores for 8
nodes), the memory ratio of the longest set to the shortest (target <= 1.25x), a least-squares fit
``RSS = a + b x node-hours`` and ``CPU = c x node-hours`` through the two longest sets (the
marginal cost once the summaries have filled up: give three or more sets, the longest ones at
least 15 min) and their value at 64 x 24 h (target: fits in 4 GB). The temporary directory is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CHILD = r"""
import contextlib, io, json, resource, sys, time
args = json.loads(sys.argv[1])
t, t_wall = time.perf_counter(), time.time()
maps = {}
if args["how"] == "cli":
    from rdmascope.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main(args["argv"], standalone_mode=False)
        except SystemExit:
            pass
    try:
        meta = json.loads(buf.getvalue())["meta"]
        maps = meta.get("maps") or {}
        verdict = meta.get("verdict")
    except (ValueError, KeyError):
        verdict = None
else:
    from rdmascope.analysis.cluster_reduce import cluster_summary
    verdict = cluster_summary(args["paths"], requests=args["requests"], method="series").verdict
dt, t_end = time.perf_counter() - t, time.time()
# the pool's processes: its workers are the forkserver's children, reaped by it; stop it and
# reap it, so this process's children's CPU holds every worker's whole life (imports included)
try:
    import multiprocessing.forkserver as fs
    fs._forkserver._stop()
except (ImportError, AttributeError, OSError):
    pass
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
# VmHWM, not ru_maxrss: ru_maxrss of an exec'd child starts at its parent's peak (this
# benchmark holds the simulated traffic, which grows with the run's length)
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"s": dt, "cpu_self_s": me.ru_utime + me.ru_stime,
                  "cpu_children_s": kids.ru_utime + kids.ru_stime,
                  "map_cpu_s": sum(m["cpu_s"] for m in maps.values()),
                  "map_rss_mb": max((m["max_rss_mb"] for m in maps.values()), default=0.0),
                  "summary_mb": max((m.get("summary_mb", 0.0) for m in maps.values()),
                                    default=0.0),
                  "rss_mb": hwm / 1024, "verdict": verdict, "t_start": t_wall, "t_end": t_end,
                  "timeline": [[m.get("pid"), m.get("started"), m.get("ended")]
                               for m in maps.values()]}), file=sys.stderr)
"""


def _ray_rss_mb(stop: threading.Event, out: dict) -> None:
    """Sum of the RSS of Ray's processes (raylet, workers, GCS), sampled every 0.2 s."""
    import psutil

    best = 0.0
    while not stop.is_set():
        tot = 0
        for p in psutil.process_iter(["name", "cmdline"]):
            try:
                cmd = " ".join(p.info["cmdline"] or [])
                if "ray" in (p.info["name"] or "") or "ray::" in cmd or "/ray/" in cmd:
                    tot += p.memory_info().rss
            except (psutil.Error, OSError):
                continue
        best = max(best, tot / 2**20)
        stop.wait(0.2)
    out["ray_rss_mb"] = best


def run(spec: dict, *, watch_ray: bool = False) -> dict:
    stop, extra = threading.Event(), {}
    th = None
    if watch_ray:
        th = threading.Thread(target=_ray_rss_mb, args=(stop, extra), daemon=True)
        th.start()
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True,
                       text=True, timeout=6 * 3600)
    stop.set()
    if th is not None:
        th.join()
    try:
        got = json.loads(p.stderr.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]}
    got.update(extra)
    return got


def pool_timeline(got: dict, jobs: int) -> str | None:
    """How the pool's workers were kept busy, from each map's process and wall-clock start and
    end: when the first map started (the driver's imports and plan, the workers' start), the
    longest and summed idle time of a worker between two of its maps (the driver stalling the
    pool: pickling, work between tasks), how long the run went on after the last map (the
    reduce's tail) and the maps' wall summed over jobs x the run's wall."""
    tl = [x for x in got.get("timeline") or [] if None not in x]
    if not tl or "t_start" not in got:
        return None
    by_pid: dict = {}
    for pid, a, b in tl:
        by_pid.setdefault(pid, []).append((a, b))
    gaps = [b[k + 1][0] - b[k][1] for b in map(sorted, by_pid.values()) for k in range(len(b) - 1)]
    first = min(a for _, a, _ in tl) - got["t_start"]
    tail = got["t_end"] - max(b for _, _, b in tl)
    busy = sum(b - a for _, a, b in tl) / (jobs * (got["t_end"] - got["t_start"]))
    return (f"first map at {first:.2f} s, workers idle between maps max "
            f"{1e3 * max(gaps, default=0.0):.0f} ms (sum {1e3 * sum(gaps):.0f} ms over "
            f"{len(by_pid)} workers), {tail:.2f} s after the last map, maps' wall / (jobs x "
            f"wall) {busy:.2f}")


def _fit(x: list[float], y: list[float]) -> tuple[float, float]:
    """(a, b) of y = a + b x through the two largest x: the marginal cost where the summaries
    have filled up (their 1 ms pieces and burst slots are bounded: a fit through the short sets
    would extrapolate their filling-up). A slope below zero (flat within a loaded machine's
    noise) is taken as flat."""
    if not x:
        return 0.0, 0.0
    if len(set(x)) < 2:
        return float(max(y)), 0.0
    pts = sorted(zip(x, y, strict=True))
    (x1, y1), (x2, y2) = pts[-2], pts[-1]
    if x2 == x1:
        return float(max(y1, y2)), 0.0
    b = max((y2 - y1) / (x2 - x1), 0.0)
    return float(y2 - b * x2), float(b)


def model(sel: list[dict], jobs: int, nodes: int = 64, hours: float = 24.0) -> dict:
    """Memory of one step at ``nodes`` x ``hours``, from what it grows with (not node-hours):

    - the driver: its peak at the longest set with the fewest nodes, plus the per-node cost
      (driver peak per node between the sets of the shortest length, scaled by how much a
      long run's summary outweighs a short one's: the summaries are what it holds per node),
      plus its growth per hour of run (slope between the two longest sets of that node count);
    - the map workers: ``min(jobs, nodes)`` x the largest worker's peak, extrapolated in hours
      by its slope between the two longest sets (a worker streams one capture at a time).

    Without two node counts, the per-node cost is taken from the summary bytes alone."""
    n0 = min(x["nodes"] for x in sel)
    few = [x for x in sel if x["nodes"] == n0]
    drv_a, drv_b = _fit([x["hours"] for x in few], [x["rss_mb"] for x in few])
    longest = max(few, key=lambda x: x["hours"])
    h_short = min(x["hours"] for x in sel)
    short = [x for x in sel if x["hours"] == h_short]
    per_node_short = None
    if len({x["nodes"] for x in short}) > 1:
        a, b = min(short, key=lambda x: x["nodes"]), max(short, key=lambda x: x["nodes"])
        per_node_short = max((b["rss_mb"] - a["rss_mb"]) / (b["nodes"] - a["nodes"]), 0.0)
    s_short = max(min(x["summary_mb"] for x in short), 1e-3)
    s_long = max(x["summary_mb"] for x in sel)
    if per_node_short is not None:
        per_node = per_node_short * max(1.0, s_long / s_short)
        how = (f"{per_node_short:.2f} MB per node measured at {h_short * 60:.1f} min, x "
               f"{max(1.0, s_long / s_short):.2f} (summary {s_long:.2f} / {s_short:.2f} MB)")
    else:
        per_node = 3 * s_long
        how = f"3 x the summary ({s_long:.2f} MB): no second node count measured"
    driver = longest["rss_mb"] + per_node * (nodes - n0) + drv_b * max(0.0, hours -
                                                                       longest["hours"])
    wk_a, wk_b = _fit([x["hours"] for x in sel], [x["map_rss_mb"] for x in sel])
    workers = (min(jobs, nodes) * (wk_a + wk_b * hours)) if sel[0]["remote"] else 0.0
    return {"driver_mb": driver, "per_node_mb": per_node, "per_node_how": how,
            "driver_per_hour_mb": drv_b, "worker_mb": wk_a + wk_b * hours,
            "worker_per_hour_mb": wk_b, "total_mb": driver + workers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="sets 8x1 and 8x4 (~1 and 4 min)")
    ap.add_argument("--sets", default=None,
                    help="comma-separated NODESxROUNDS (P2 rounds of ~64 s each) "
                         "[8x1,8x4,8x14]; e.g. 8x1,8x14,8x53,64x1")
    ap.add_argument("--rounds", default=None,
                    help="comma-separated P2 rounds per set, with --nodes (old form)")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--steps", default="serial,pool,ray,series",
                    help="which steps to run [serial,pool,ray,series]")
    ap.add_argument("--jobs", type=int, default=None, help="pool size [the machine's cores]")
    ap.add_argument("--no-ray", action="store_true", help="leave Ray out")
    ap.add_argument("--series-max", type=float, default=20.0,
                    help="run the whole-series method up to this many minutes per node [20]")
    ap.add_argument("--dir", default=None, help="where to write the captures [a temporary "
                                                "directory, removed at the end]")
    a = ap.parse_args()
    if a.sets:
        sets = [tuple(int(v) for v in x.lower().split("x")) for x in a.sets.split(",")]
    else:
        rounds = [int(x) for x in (a.rounds or ("1,4" if a.quick else "1,4,14")).split(",")]
        sets = [(a.nodes, r) for r in rounds]
    want = set(a.steps.split(","))

    from rdmascope.analysis.cluster_reduce import default_jobs

    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, plan_scenario, simulate

    jobs = a.jobs or default_jobs()
    try:
        import ray  # noqa: F401

        have_ray = not a.no_ray and "ray" in want
    except ImportError:
        have_ray = False
        print("Ray is not installed (pip install 'rdmascope[ray]'): its column is left out")
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / "
          f"{load[2]:.1f} (1/5/15 min) at the start; pool jobs = {jobs}")
    tmp = Path(a.dir or tempfile.mkdtemp(prefix="rdmascope-bench-cluster-"))
    rows = []
    try:
        for nodes, r in sets:
            traffic = simulate(plan_scenario(["P2"], rounds=r, warmup=False),
                               TrafficConfig(link=link_config("emulated100")))
            d = tmp / f"set-{nodes}x{r}"
            t0 = time.perf_counter()
            truth = simulate_cluster(d, traffic, ClusterSpec(nodes=nodes,
                                                             clock_error_ns=20_000_000,
                                                             misconfigured=3, straggler=6),
                                     force=True)
            paths = [str(d / n["host"]) for n in truth["nodes"]]
            minutes = traffic.duration_ns / 60e9
            del traffic, truth
            nh = nodes * minutes / 60
            print(f"\nset: {nodes} nodes x {minutes:.1f} min = {nh:.2f} node-hours "
                  f"(written in {time.perf_counter() - t0:.0f} s)")
            req = str(d / "requests.jsonl")
            base = ["cluster", *paths, "--requests", req, "--json"]
            steps = []
            if "serial" in want:
                steps.append(("map+reduce, serial (--jobs 1)",
                              {"how": "cli", "argv": base + ["--jobs", "1"]}, False))
            if "pool" in want:
                steps.append((f"map+reduce, pool (--jobs {jobs})",
                              {"how": "cli", "argv": base + ["--jobs", str(jobs)]}, False))
            if have_ray:
                steps.append(("map+reduce, Ray (local, --engine ray)",
                              {"how": "cli", "argv": base + ["--engine", "ray"]}, True))
            if "series" in want and minutes <= a.series_max:
                steps.append(("whole series (method='series')",
                              {"how": "series", "paths": paths, "requests": req}, False))
            print(f"{'step':<40} {'load':>5} {'wall (s)':>9} {'CPU (s)':>8} {'CPU/wall':>9} "
                  f"{'maps CPU':>9} {'driver RSS':>11} {'worker RSS':>11} {'summary':>8} "
                  f"{'memory (MB)':>12}  verdict")
            for name, spec, watch in steps:
                load1 = os.getloadavg()[0]
                got = run(spec, watch_ray=watch)
                if "error" in got:
                    print(f"{name:<40} failed: {got['error']}")
                    continue
                pool, ray_ = "pool" in name, "Ray" in name
                # CPU of every process of the step: the pool's workers (and the forkserver) are
                # reaped children; Ray's workers are not, their maps' own CPU is added
                got["cpu_s"] = got["cpu_self_s"] + (got["map_cpu_s"] if ray_ else
                                                    got.get("cpu_children_s", 0.0))
                got["load"] = load1
                worker = got["map_rss_mb"] if pool or ray_ else float("nan")
                mem = got["rss_mb"] + (min(jobs, nodes) * worker if pool or ray_ else 0.0)
                print(f"{name:<40} {load1:>5.1f} {got['s']:>9.2f} {got['cpu_s']:>8.2f} "
                      f"{got['cpu_s'] / got['s']:>9.2f} {got['map_cpu_s']:>9.2f} "
                      f"{got['rss_mb']:>11.0f} {worker:>11.0f} {got['summary_mb']:>8.2f} "
                      f"{mem:>12.0f}  {got['verdict']}"
                      + (f" (Ray's processes: {got['ray_rss_mb']:.0f} MB)" if ray_ else ""))
                rows.append({"nodes": nodes, "hours": minutes / 60, "node_hours": nh,
                             "step": name, "mem_mb": mem, "remote": pool or ray_, **got})
                how = pool_timeline(got, min(jobs, nodes)) if pool else None
                if how:
                    print(f"  {how}")
            wall = {x["step"]: x["s"] for x in rows if x["nodes"] == nodes
                    and x["hours"] == minutes / 60}
            ser = next((v for k, v in wall.items() if "serial" in k), None)
            for k, v in wall.items():
                if ser is not None and ("pool" in k or "Ray" in k):
                    print(f"  wall of --jobs 1 / wall of the {k.split(',')[1].strip()} "
                          f"(same set, one after the other): {ser / v:.2f}x")
            shutil.rmtree(d, ignore_errors=True)
        print("\nper step over the sweep (memory grows with nodes and with hours apart; "
              "extrapolated to 64 nodes x 24 h):")
        for name in dict.fromkeys(x["step"] for x in rows):
            sel = [x for x in rows if x["step"] == name]
            cpu_a, cpu_b = _fit([x["node_hours"] for x in sel], [x["cpu_s"] for x in sel])
            m = model(sel, jobs)
            few = [x for x in sel if x["nodes"] == min(y["nodes"] for y in sel)]
            ratio = (max(few, key=lambda x: x["hours"])["mem_mb"]
                     / min(few, key=lambda x: x["hours"])["mem_mb"])
            big = 64 * 24
            print(f"  {name}: CPU {cpu_b:.1f} s per node-hour (~{(cpu_a + cpu_b * big) / 3600:.1f}"
                  f" CPU-hours at 64 x 24 h); memory longest / shortest set "
                  f"({few[0]['nodes']} nodes): {ratio:.2f}x")
            print(f"    driver: per node {m['per_node_how']} -> {m['per_node_mb']:.2f} MB; "
                  f"{m['driver_per_hour_mb']:.1f} MB per hour of run; at 64 x 24 h "
                  f"{m['driver_mb']:.0f} MB")
            if sel[0]["remote"]:
                print(f"    each map worker: {m['worker_mb']:.0f} MB at 24 h "
                      f"({m['worker_per_hour_mb']:.1f} MB per hour), x {min(jobs, 64)} at once")
            print(f"    total at 64 x 24 h: ~{m['total_mb'] / 1024:.2f} GB "
                  f"({'fits' if m['total_mb'] <= 4096 else 'does NOT fit'} in 4 GB)")
            if "pool" in name:
                eff = [f"{x['cpu_s'] / x['s']:.2f} [{(x['cpu_self_s'] + x['map_cpu_s']) / x['s']:.2f}]"
                       f" (load {x['load']:.1f})" for x in sel]
                print(f"    CPU/wall of the pool, every process of it [the driver and the maps "
                      f"only: no worker start]: {', '.join(eff)} (target >= 1.6 with 2 cores "
                      "and 8 nodes; other processes on the machine lower it: the load average "
                      "is the 1-minute one at the step's start)")
        load = os.getloadavg()
        print(f"\nload average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    finally:
        if a.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
