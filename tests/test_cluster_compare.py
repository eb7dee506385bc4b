"""``rdmascope compare`` on run sets: two directories of one capture per host, node by node."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from rdmascope.cli import main
from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    d = tmp_path_factory.mktemp("sets")
    sc = make_scenario("demo")
    ta = simulate(sc, TrafficConfig(link=link_config("200")), seed=3)
    tb = simulate(sc, TrafficConfig(link=link_config("emulated100")), seed=3)
    truth_a = simulate_cluster(d / "a", ta, ClusterSpec(nodes=3, clock_error_ns=30_000_000,
                                                        seed=1))
    truth_b = simulate_cluster(d / "b", tb, ClusterSpec(nodes=3, clock_error_ns=30_000_000,
                                                        misconfigured=1, seed=2))
    return d, truth_a, truth_b


def _truth_tx_per_request(capture_dir) -> float:
    """A node's mean RDMA tx bytes per request (prefill + decode) from its truth.json."""
    t = json.loads((capture_dir / "truth.json").read_text())
    per = [sum(v for k, v in {**r["prefill_bytes"]}.items()
               if k.startswith("roce") and k.endswith("/tx"))
           + sum(v for k, v in r["decode_bytes"].items()
                 if k.startswith("roce") and k.endswith("/tx")) for r in t["requests"]]
    return float(np.mean(per))


def test_compare_two_run_sets_per_node_and_set(two_sets):
    d, ta, tb = two_sets
    r = CliRunner().invoke(main, ["compare", str(d / "a"), str(d / "b"), "--json"])
    # side B's set FAILs its emulation check (spark-02): compare exits with the worse verdict
    assert r.exit_code == 1, r.output
    obj = json.loads(r.output[r.output.index("{"):])
    nodes = {row["host"]: row for row in obj["nodes"]}
    hosts = [n["host"] for n in ta["nodes"]]
    assert list(nodes) == hosts + ["(set)"]
    meta = obj["meta"]["run_sets"]
    assert meta["A"]["verdict"] == "PASS" and meta["A"]["expect"] == "both"
    # B: emulated, but spark-02 did not get the emulation: named as failing
    assert meta["B"]["verdict"] == "FAIL" and meta["B"]["failing"] == ["spark-02"]
    assert nodes["spark-02"]["verdict_b"] == "fail" and nodes["spark-01"]["verdict_b"] == "pass"
    assert nodes["(set)"]["verdict_b"] == "FAIL"
    # the bytes per request do not depend on the link: the same on both sides (a ring)
    for h in hosts + ["(set)"]:
        assert nodes[h]["bytes_per_request_a"] > 1e6
        assert abs(nodes[h]["bytes_per_request_change_pct"]) < 0.5, h
    # the set row: the highest node peak and the median bytes per request
    for side in "ab":
        assert nodes["(set)"][f"peak_1ms_{side}_gbps"] == pytest.approx(
            max(nodes[h][f"peak_1ms_{side}_gbps"] for h in hosts))
        assert nodes["(set)"][f"bytes_per_request_{side}"] == pytest.approx(
            float(np.median([nodes[h][f"bytes_per_request_{side}"] for h in hosts])))
    # a node's 1 ms peak: ~200 Gb/s link (both twins) vs one ~100 Gb/s twin when emulated
    assert nodes["spark-01"]["peak_1ms_b_gbps"] < 0.7 * nodes["spark-01"]["peak_1ms_a_gbps"]
    # timing from the one request log on the client's capture: the tests table is there
    assert obj["tests"] and obj["tests"][0]["ttft_b_s"] > obj["tests"][0]["ttft_a_s"]


def test_bytes_per_request_match_truth(two_sets):
    d, ta, tb = two_sets
    r = CliRunner().invoke(main, ["compare", str(d / "a"), str(d / "b"), "--json"])
    obj = json.loads(r.output[r.output.index("{"):])
    nodes = {row["host"]: row for row in obj["nodes"]}
    for side, truth in (("a", ta), ("b", tb)):
        for n in truth["nodes"]:
            want = _truth_tx_per_request(d / side / n["host"])
            assert nodes[n["host"]][f"bytes_per_request_{side}"] == pytest.approx(
                want, rel=0.005), (side, n["host"])


def test_human_output_has_the_node_table(two_sets):
    d, _, _ = two_sets
    r = CliRunner().invoke(main, ["compare", str(d / "a"), str(d / "b")])
    assert r.exit_code == 1, r.output  # side B's set FAILs (spark-02 not emulated)
    assert "Per node" in r.output and "spark-03" in r.output and "(set)" in r.output


def test_mismatched_sets_are_refused_naming_the_hosts(two_sets, tmp_path):
    d, _, _ = two_sets
    part = tmp_path / "b2"
    part.mkdir()
    for h in ("spark-01", "spark-02"):
        shutil.copytree(d / "b" / h, part / h)
    shutil.copy(d / "b" / "requests.jsonl", part / "requests.jsonl")
    r = CliRunner().invoke(main, ["compare", str(d / "a"), str(part)])
    assert r.exit_code == 4
    assert "do not hold the same hosts" in r.output and "only in A" in r.output
    assert "spark-03" in r.output and "Traceback" not in r.output
    # a run set against one capture
    r = CliRunner().invoke(main, ["compare", str(d / "a"), str(d / "b" / "spark-01")])
    assert r.exit_code == 2 and "is a run set (3 captures" in r.output
    assert str(d / "a") in r.output
    # --reference only for run sets; an unknown host is named
    r = CliRunner().invoke(main, ["compare", str(d / "a" / "spark-01"), str(d / "b" / "spark-01"),
                                  "--reference", "spark-01"])
    assert r.exit_code == 2 and "--reference" in r.output
    r = CliRunner().invoke(main, ["compare", str(d / "a"), str(d / "b"), "--reference", "nope"])
    assert r.exit_code == 2 and "'nope'" in r.output and "spark-01" in r.output  # a usage error
    assert "'--reference'" in r.output
