"""The emulator's cluster: per-node clocks, the node without emulation, the straggler."""

import json

import numpy as np
import pytest

from rdmascope.emulator.cluster import (
    ClusterSpec,
    early_first_step,
    simulate_cluster,
    spread_over_twins,
)
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate


@pytest.fixture(scope="module")
def traffic():
    return simulate(make_scenario("single4k"), TrafficConfig(link=link_config("emulated100")))


def test_early_first_step_moves_one_ring_step_and_keeps_bytes_and_ends(traffic):
    d = 1_000_000
    e = early_first_step(traffic, d)
    steps = traffic.config.arch.ring_steps
    assert np.all(np.diff(e.t_ns) >= 0)
    assert e.cum_bytes[-1] == traffic.cum_bytes[-1]
    # the end of every prefill all-reduce is unchanged: sample just after each ramp's end
    t, b = traffic.t_ns, traffic.cum_bytes
    dt, db = np.diff(t), np.diff(b)
    ramps = np.flatnonzero((db > 0) & (db * 8 / np.maximum(dt, 1) >= 50))
    assert ramps.size > 100
    ends = t[ramps + 1]
    assert np.allclose(e.collective_bytes(ends), traffic.collective_bytes(ends))
    # d before a ramp's start, the modified node has sent half of its first step (1/steps)
    j = ramps[5]
    s = t[j]
    half = s - d + (t[j + 1] - s) // steps // 2
    got = e.collective_bytes([half])[0] - traffic.collective_bytes([half])[0]
    assert got == pytest.approx((b[j + 1] - b[j]) / steps / 2, rel=0.01)


def test_spread_over_twins_halves_the_first_twin(traffic):
    s = {x.key: x.collective_share for x in spread_over_twins(traffic).series}
    assert s["rocep1s0f1/tx"] == s["roceP2p1s0f1/tx"] == 0.5
    orig = {x.key: x.collective_share for x in traffic.series}
    assert orig["rocep1s0f1/tx"] == 1.0 and orig["roceP2p1s0f1/tx"] == 0.0


def test_cluster_captures_carry_each_hosts_clocks(tmp_path, traffic):
    spec = ClusterSpec(nodes=3, clock_error_ns=50_000_000, misconfigured=1, straggler=2, seed=4)
    truth = simulate_cluster(tmp_path, traffic, spec)
    assert json.loads((tmp_path / "truth.json").read_text()) == truth
    assert truth["culprits"]["emulation_not_applied"] == ["spark-02"]
    assert truth["culprits"]["straggler"] == {"host": "spark-03", "late_ns": 1_000_000}
    mans = [json.loads((tmp_path / n["host"] / "manifest.json").read_text())
            for n in truth["nodes"]]
    assert [m["host"] for m in mans] == ["spark-01", "spark-02", "spark-03"]
    assert len({m["capture_id"] for m in mans}) == 3
    rm = [int(man["clock_pairs"][0][0]) - int(man["clock_pairs"][0][1]) for man in mans]
    assert all(len({r - m for r, m in man["clock_pairs"]}) == 1 for man in mans)
    for n, x in zip(truth["nodes"], rm, strict=True):
        # realtime - monotonic differs from the reference's by the true offset plus the
        # wall-clock errors
        wall = n["wall_clock_error_ns"] - truth["nodes"][0]["wall_clock_error_ns"]
        assert x - rm[0] == n["offset_to_reference_ns"] + wall
    errs = [abs(n["wall_clock_error_ns"]) for n in truth["nodes"]]
    assert max(errs) <= 50_000_000 and max(errs) > 1_000_000
    # the client's log is the first node's
    assert (tmp_path / "requests.jsonl").read_text() == \
        (tmp_path / "spark-01" / "requests.jsonl").read_text()
    # every node's request sits at the same true instant: node clock + offset agrees
    sends = [json.loads((tmp_path / n["host"] / "requests.jsonl").read_text().splitlines()[0])
             ["t_send"] * 1e9 + n["offset_to_reference_ns"] for n in truth["nodes"]]
    assert max(sends) - min(sends) < 1e3  # float seconds of a ~1e13 ns clock: < 1 us


def test_cluster_refuses_not_emulated_on_200(tmp_path):
    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("200")))
    with pytest.raises(ValueError, match="emulated100"):
        simulate_cluster(tmp_path, tr, ClusterSpec(nodes=2, misconfigured=0))
