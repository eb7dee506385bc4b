"""Benchmark: the cluster summary of N nodes beside one node's ``peaks``, time and peak memory.

One command (from the repository root, in the venv)::

    python benchmarks/bench_cluster.py            # 8 nodes x ~10.8 min at 1 kHz (P2, P4, P6 x 2)
    python benchmarks/bench_cluster.py --quick    # 8 nodes x ~1 min (P2, one round)

Writes an emulated cluster (``rdmascope.emulator.cluster``: one capture per node, each on its own
clocks, wall clocks up to 20 ms apart) into a temporary directory, then runs, each in its own
fresh Python process so that its peak RSS is its own: ``rdmascope peaks`` on the first node, and
``rdmascope cluster`` on all nodes with the client's request log (per-node verdicts, peaks, bytes
per request, clock refinement, burst timing: one streamed pass per node), and
``verify-emulation`` on the first node for scale. Prints wall time and peak RSS of each, and the
ratios from the same run (CPU time as well as wall time: on a shared machine the wall time
of each step depends on what else runs). Targets (issue 15): the cluster summary takes no more than ~N x one
node's peaks, and its memory stays bounded (one node's readings at a time plus every node's 1 ms
series: about one node's peaks, not N of them). The temporary directory is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from rdmascope.cli import main
t = time.perf_counter()
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit as e:
    pass
dt = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"s": dt, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}),
      file=sys.stderr)
"""


def run(args: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True,
                       timeout=3600)
    last = p.stderr.strip().splitlines()[-1]
    return json.loads(last)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="~1 min captures instead of ~10.8 min")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--dir", default=None, help="where to write the captures [a temporary "
                                                "directory, removed at the end]")
    a = ap.parse_args()

    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import plan_scenario, simulate

    sc = plan_scenario(["P2"], rounds=1, warmup=False) if a.quick else \
        plan_scenario(["P2", "P4", "P6"], rounds=2, warmup=False)
    traffic = simulate(sc)
    tmp = Path(a.dir or tempfile.mkdtemp(prefix="rdmascope-bench-cluster-"))
    try:
        t0 = time.perf_counter()
        truth = simulate_cluster(tmp / "run", traffic,
                                 ClusterSpec(nodes=a.nodes, clock_error_ns=20_000_000),
                                 force=True)
        paths = [str(tmp / "run" / n["host"]) for n in truth["nodes"]]
        print(f"wrote {a.nodes} captures of {traffic.duration_ns / 1e9:.0f} s at 1 kHz in "
              f"{time.perf_counter() - t0:.0f} s")
        one = run(["peaks", paths[0]])
        many = run(["cluster", *paths, "--requests", str(tmp / "run" / "requests.jsonl"),
                    "--json"])
        verify = run(["verify-emulation", paths[0], "--expect-both"])
        print(f"{'step':<44} {'wall (s)':>9} {'CPU (s)':>8} {'peak RSS (MB)':>14}")
        for name, r in (("peaks, one node", one), ("verify-emulation, one node", verify),
                        (f"cluster, {a.nodes} nodes", many)):
            print(f"{name:<44} {r['s']:>9.2f} {r['cpu_s']:>8.2f} {r['rss_mb']:>14.0f}")
        tr = many["cpu_s"] / one["cpu_s"]
        tr2 = many["cpu_s"] / (one["cpu_s"] + verify["cpu_s"])
        mr = many["rss_mb"] / one["rss_mb"]
        print(f"CPU time, cluster / one node's peaks: {tr:.2f}x (target <= ~{a.nodes}x: "
              f"{'ok' if tr <= a.nodes * 1.1 else 'MISSED'}); / one node's peaks + "
              f"verify-emulation (what the summary does per node): {tr2:.2f}x")
        print(f"wall time, cluster / one node's peaks: {many['s'] / one['s']:.2f}x (a shared "
              "machine: CPU time is the fairer ratio)")
        print(f"peak RSS, cluster / one node's peaks: {mr:.2f}x (bounded: "
              f"{'ok' if mr <= 2.0 else 'MISSED'}, target <= 2x)")
    finally:
        if a.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
