"""Live cluster emulation end to end: `simulate serve --nodes 3` plays one emulated tree per node,
the real `rdmascope record -o RUNS/{host}` samples each (a subprocess per node, the host taken from
the node's tree), and the run set they write is analysed as one run: hosts, the node without the
emulation, each node's clock offset (its recorder reads the node's emulated clocks) and bytes per
request against each node's truth (the straggler is played but its 1 ms is not asserted live).
Bands come from the run itself: the recorders' audited sweep intervals, the estimate's standard
error, the clock pairs' spread, the player's longest tick gap and the capture's bytes near each
request's edges; the precision of the offsets on even sampling is tests/test_cluster.py's.
~20 s of real time. Recorders are stopped only after the
player has finished (no fixed durations a busy machine could overrun).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from rdmascope.analysis import byte_intervals, load_capture
from rdmascope.analysis.cluster_reduce import cluster_summary

from rdmascope.capture import read_manifest

HOSTS = ["spark-01", "spark-02", "spark-03"]


#: what one (REALTIME, MONOTONIC) clock pair read can be off by on an idle machine: the bracket
#: of the two CLOCK_MONOTONIC reads around the REALTIME one (schema.clock_pair; ~0.1 us here)
PAIR_READ_NS = 1_000


def _pair_spread(cap) -> int:
    """Spread of a capture's REALTIME - MONOTONIC over its clock pairs (constant in truth)."""
    d = [int(rt) - int(mo) for rt, mo in read_manifest(cap)["clock_pairs"]]
    return max(d) - min(d)


def _offset_band(runs, node, ref) -> float:
    """How far the traffic-recovered offset can be off: half the sweep interval each recorder
    held (its audited p99: bytes are placed within their reading window) on both sides, plus
    three standard errors of the estimate (its spread over parts of the run)."""
    def p99(host):
        return read_manifest(runs / host)["audit"]["interval_ns"]["p99"]
    return (p99(node.host) + p99(ref.host)) / 2 + 3 * (node.offset_unc_ns or 0)


def _edge_bytes(cap, requests, slack_ns: int) -> float:
    """Mean over requests of the tx bytes (roce devices) the capture's reading intervals hold
    within ``slack_ns`` of each request's send and last token (node clock)."""
    c = load_capture(cap)
    iv = byte_intervals(c)
    tx = c.counters[(c.counters["direction"] == "tx")
                    & c.counters["device"].astype(str).str.startswith("roce")].index
    iv = iv[iv["counter_id"].isin(tx)]
    t0, t1, b = (iv[k].to_numpy() for k in ("t0_ns", "t1_ns", "bytes"))
    out = []
    for r in requests:
        edge = 0.0
        for e in (round(r["t_send_ns"]), round(r["t_last_ns"])):
            near = (t1 > e - slack_ns) & (t0 < e + slack_ns)
            edge += float(np.nansum(b[near]))
        out.append(edge)
    return float(np.mean(out))


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
    # the player's own record of its largest gap between ticks (its lateness), 0.01 ms steps
    gap = re.search(r"player: .* longest gap ([0-9.]+) ms", se)
    assert gap, se
    max_gap_ns = round((float(gap.group(1)) + 0.01) * 1e6)

    res = cluster_summary([runs / h for h in HOSTS], requests=out / "requests.jsonl")
    assert res.expect == "single" and res.failing == ["spark-02"] and res.verdict == "FAIL"
    # each node's recorder read its own emulated clocks (boot epochs hours apart, wall clocks
    # up to 50 ms off): the offsets recovered from the traffic match the truth to within the
    # sampling the recorders achieved (no fixed band: a loaded machine samples less evenly)
    walls = [n["wall_clock_error_ns"] for n in truth["nodes"]]
    assert max(walls) - min(walls) > 1e6  # the wall clocks alone would be off
    ref = res.run_set.nodes[0]
    for n, t in zip(res.run_set.nodes, truth["nodes"], strict=True):
        assert n.host == t["host"]
        assert abs(n.offset_ns - t["offset_to_reference_ns"]) <= _offset_band(runs, n, ref), \
            (n.host, n.offset_ns, n.offset_unc_ns, t)
        # the wall clocks' offset: each capture's median (REALTIME - MONOTONIC) over its clock
        # pairs, as good as those pairs (their own spread; a pair taken across a preemption
        # stands out from the others)
        assert abs(n.wall_offset_ns - t["offset_to_reference_ns"]
                   - (t["wall_clock_error_ns"] - walls[0])) <= \
            _pair_spread(runs / n.host) + _pair_spread(runs / ref.host) + PAIR_READ_NS, n.host
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
        # the windows [send, last token] placed with the recovered offset: off by at most the
        # bytes the capture holds in the readings around each edge, within the offset's error
        # and the player's largest tick gap (bytes written that late) of it
        node = next(n for n in res.run_set.nodes if n.host == h)
        t = next(t for t in truth["nodes"] if t["host"] == h)
        slack = abs(node.offset_ns - t["offset_to_reference_ns"]) + max_gap_ns
        band = _edge_bytes(runs / h, nt["requests"], slack)
        assert abs(nodes.loc[h, "bytes_per_request"] - np.mean(per)) <= band + 1, \
            (h, nodes.loc[h, "bytes_per_request"], np.mean(per), band)
