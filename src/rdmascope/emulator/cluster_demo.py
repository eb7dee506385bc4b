"""``rdmascope demo --nodes N``: the cluster view on an emulated N-node run, ending in the report.

Writes ``<outdir>/cluster/<host>/`` for every node with the emulator's cluster
(``rdmascope.emulator.cluster``: captures as if sampled at 1 ms, written directly, each on its own
host's clocks, wall clocks up to 20 ms apart), on the emulated 100 Gb/s link, with one node whose
``NCCL_IB_HCA`` was not applied and one straggler; the client's request log and the truth go to
``<outdir>/cluster/``. Then the cluster summary (``analysis.cluster``) and the HTML report
(``<outdir>/report/``). The live recorder is shown by the single-node demo (``rdmascope demo``);
recording eight nodes live would need eight nodes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rdmascope.emulator.demo import REPORT_DIR, DemoError, fresh_outdir

CLUSTER_DIR = "cluster"


def _check_outdir(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise DemoError(f"{out}: exists and is not a directory")
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not force:
        raise DemoError(f"{out}: already exists and is not empty; use --force to replace the "
                        "demo's outputs there, or -o to choose another directory")
    remove, problems = [], []
    cl = out / CLUSTER_DIR
    if cl.exists() or cl.is_symlink():
        truth = cl / "truth.json"
        try:
            ok = not cl.is_symlink() and json.loads(truth.read_text()).get("format") == \
                "rdmascope-emulator-cluster-truth"
        except (OSError, ValueError):
            ok = False
        (remove if ok else problems).append(cl if ok else f"{cl}: is not an earlier cluster "
                                                          "demo's output (no cluster truth.json)")
    rep = out / REPORT_DIR
    if rep.exists() or rep.is_symlink():
        ok = not rep.is_symlink() and rep.is_dir() and (rep / "report.html").is_file()
        (remove if ok else problems).append(rep if ok else f"{rep}: is not an earlier demo's "
                                                           "report directory (no report.html)")
    if problems:
        raise DemoError("--force replaces only an earlier demo's outputs, and these are in the "
                        "way; nothing was removed:\n  " + "\n  ".join(problems))
    for p in remove:
        shutil.rmtree(p)


def run_cluster_demo(outdir: str | os.PathLike | None = None, *, nodes: int = 8,
                     force: bool = False, scenario: str = "demo",
                     log: Callable[[str], None] = print) -> Path:
    """Run the cluster demo into ``outdir`` (default a fresh ``./rdmascope-demo/<date-time>``);
    return the report's path. Raises ``DemoError`` for a non-empty ``outdir`` without
    ``force`` or fewer than 3 nodes (a median needs them)."""
    from rdmascope.analysis.cluster_reduce import cluster_summary
    from rdmascope.analysis.cluster_report import build_cluster_report
    from rdmascope.analysis.report import render_report
    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

    if nodes < 3:
        raise DemoError(f"--nodes {nodes}: the cluster demo needs at least 3 nodes")
    out = Path(outdir) if outdir is not None else fresh_outdir()
    _check_outdir(out, force)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    spec = ClusterSpec(nodes=nodes, clock_error_ns=20_000_000, misconfigured=2,
                       straggler=nodes - 3, seed=1)
    log(f"emulating a {nodes}-node run of scenario {scenario!r} on the emulated 100 Gb/s link: "
        f"{spec.host(spec.misconfigured)} without NCCL_IB_HCA, {spec.host(spec.straggler)} a "
        "straggler, wall clocks up to 20 ms apart ...")
    traffic = simulate(make_scenario(scenario), TrafficConfig(link=link_config("emulated100")))
    truth = simulate_cluster(out / CLUSTER_DIR, traffic, spec)
    paths = [out / CLUSTER_DIR / n["host"] for n in truth["nodes"]]
    log(f"wrote {nodes} captures in {time.monotonic() - t0:.0f} s; analysing them as one run ...")
    res = cluster_summary(paths, requests=out / CLUSTER_DIR / "requests.jsonl",
                          progress=lambda k, n, host: log(f"  node {k}/{n}: {host}"))
    log(f"emulation check on every node: {res.verdict}"
        + (f" ({', '.join(res.failing)} did not pass)" if res.failing else ""))
    worst = max(abs(n.offset_ns - t["offset_to_reference_ns"])
                for n, t in zip(res.run_set.nodes, truth["nodes"], strict=True))
    log(f"clock offsets found from the traffic: within {worst / 1e3:.0f} us of the truth "
        f"(the wall clocks were up to {max(abs(t['wall_clock_error_ns']) for t in truth['nodes']) / 1e6:.1f} ms off)")
    found = res.stragglers[res.stragglers["finding"] != ""]
    for _, r in found.iterrows():
        log(f"{r['host']}: {r['finding']} (bursts start {r['late_ms']:+.2f} ms vs the median)")
    html = render_report(build_cluster_report(res), out / REPORT_DIR,
                         progress=lambda m: log(f"  {m}"))
    log("outputs:")
    log(f"  captures: {out / CLUSTER_DIR}/{{{paths[0].name}..{paths[-1].name}}}  truth "
        f"{out / CLUSTER_DIR / 'truth.json'}")
    log(f"  again:    rdmascope cluster {out / CLUSTER_DIR}/spark-*")
    log(f"  report:   {html}")
    return html
