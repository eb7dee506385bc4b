"""Live cluster emulation end to end: `simulate serve --nodes 3` plays one emulated tree per node,
the real `rdmascope record -o RUNS/{host}` samples each (a subprocess per node, the host taken from
the node's tree), and the run set they write is analysed as one run: hosts, the node without the
emulation, each node's clock offset (its recorder reads the node's emulated clocks) and bytes per
request against each node's truth (the straggler is played but its 1 ms is not asserted live).
~20 s of real time. Recorders are stopped only after the
player has finished (no fixed durations a busy machine could overrun).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from rdmascope.analysis.cluster_reduce import cluster_summary

from rdmascope.capture import read_manifest

HOSTS = ["spark-01", "spark-02", "spark-03"]


def _wait(pred, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_serve_nodes_record_each_cluster_summary(tmp_path):
    root, runs, out = tmp_path / "root", tmp_path / "runs", tmp_path / "truth"
    runs.mkdir()
    py = [sys.executable, "-m", "rdmascope"]
    serve = subprocess.Popen(
        [*py, "simulate", "serve", "--root", str(root), "--out", str(out), "--nodes", "3",
         "--scenario", "single4k", "--link", "emulated100", "--not-emulated", "2",
         "--straggler", "3", "--clock-error", "50ms", "--wait-for", str(runs / "{host}"),
         "--start-delay", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    recs = []
    try:
        _wait(lambda: all((root / h / ".rdmascope-host").is_file() for h in HOSTS), 60,
              "the emulated trees")
        for h in HOSTS:
            recs.append(subprocess.Popen(
                [*py, "record", "-o", str(runs / "{host}"), "--sysfs-root", str(root / h),
                 "--netdev-stats", "--no-status"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        so, se = serve.communicate(timeout=180)
        assert serve.returncode == 0, se
        assert "node: spark-02" in so and "emulation not applied" in so
    finally:
        for p in recs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in recs:
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        if serve.poll() is None:
            serve.kill()
    assert [p.returncode for p in recs] == [0, 0, 0], [p.stderr for p in recs]
    # {host} resolved per emulated node, and the manifest says the node's name
    assert sorted(os.listdir(runs)) == HOSTS
    for h in HOSTS:
        assert read_manifest(runs / h)["host"] == h
    truth = json.loads((out / "truth.json").read_text())
    assert truth["culprits"]["emulation_not_applied"] == ["spark-02"]

    res = cluster_summary([runs / h for h in HOSTS], requests=out / "requests.jsonl")
    assert res.expect == "single" and res.failing == ["spark-02"] and res.verdict == "FAIL"
    # each node's recorder read its own emulated clocks (boot epochs hours apart, wall clocks
    # up to 50 ms off): the offsets recovered from the traffic match the truth within 0.2 ms
    walls = [n["wall_clock_error_ns"] for n in truth["nodes"]]
    assert max(walls) - min(walls) > 1e6  # the wall clocks alone would be off
    for n, t in zip(res.run_set.nodes, truth["nodes"], strict=True):
        assert n.host == t["host"]
        assert abs(n.offset_ns - t["offset_to_reference_ns"]) < 0.2e6, (n.host, n.offset_ns, t)
        assert n.wall_offset_ns - t["offset_to_reference_ns"] == pytest.approx(
            t["wall_clock_error_ns"] - walls[0], abs=0.1e6)
        m = read_manifest(runs / n.host)
        assert abs(m["start"]["monotonic_ns"] - m["clock_pairs"][0][1]) < 1e9
    # the straggler is played (truth names it), but live its 1 ms is blurred by the player's
    # 0.25 ms ticks and 1 ms sampling on a shared machine (measured 0.0-0.6 ms late): not
    # asserted here; tests/test_cluster.py names it on captures written without real time
    assert truth["culprits"]["straggler"] == {"host": "spark-03", "late_ns": 1_000_000}
    assert set(res.stragglers["host"]) == set(HOSTS)
    nodes = res.nodes.set_index("host")
    for h in HOSTS:
        nt = json.loads((out / h / "truth.json").read_text())
        per = [sum(v for k, v in {**r["prefill_bytes"]}.items()
                   if k.startswith("roce") and k.endswith("/tx"))
               + sum(v for k, v in r["decode_bytes"].items()
                     if k.startswith("roce") and k.endswith("/tx")) for r in nt["requests"]]
        assert nodes.loc[h, "bytes_per_request"] == pytest.approx(np.mean(per), rel=0.005), h
