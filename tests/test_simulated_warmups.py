"""The emulator's warm-up requests are marked ``"phase": "warmup"`` in every scenario kind, so
that ``attribute`` keeps them out of the measured rounds. Before, only a closed-loop cell's
warm-ups were: a spec's ``rounds=1`` (+ warm-up) and the study's P1..P6 plan wrote round 0
unmarked, and ``attribute`` averaged it in ("rounds 2" for "1 round(s) + warm-up")."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rdmascope.cli import main
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate
from rdmascope.emulator.simcapture import request_log_records


@pytest.mark.parametrize("scenario, warm, measured", [
    # the study's plan: warm-up round 0 + 1 measured round of one prompt
    ("P1", 1, 1),
    # a spec with concurrency: round 0 (warmup=1 by default) of 2 x 4 requests, then 1 round
    ("prompt=1024+2048,concurrency=4,output=8,rounds=1", 8, 8),
    # a spec without warm-up: nothing marked
    ("prompt=1024,concurrency=2,output=8,rounds=2,warmup=0", 0, 4),
    # a closed-loop cell: its first 2 of 6 requests
    ("prompt=1024,concurrency=2,requests=6,warmup=2,output=8", 2, 4),
    # no warm-up in single4k
    ("single4k", 0, 1),
])
def test_every_warmup_is_marked(scenario, warm, measured):
    sc = make_scenario(scenario, rounds=1) if scenario == "P1" else make_scenario(scenario)
    if scenario == "P1":  # make_scenario(rounds=) drops the plan's warm-up: the plan itself
        from rdmascope.emulator.model import plan_scenario

        sc = plan_scenario("P1", rounds=1, output_tokens=8)
    tr = simulate(sc, TrafficConfig(link=link_config("200")), seed=1)
    recs = request_log_records(tr, 10**12)
    marked = [r for r in recs if r.get("phase") == "warmup"]
    assert len(marked) == warm and len(recs) - len(marked) == measured
    assert all(r["round"] == 0 for r in marked)  # a warm-up is round 0, and round 0 a warm-up
    assert all(r.get("phase") == "warmup" for r in recs if r["round"] == 0)


def test_attribute_counts_only_the_measured_round(tmp_path):
    cap = tmp_path / "c"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(cap), "--scenario",
                                  "prompt=1024+2048,concurrency=4,output=8,rounds=1"])
    assert r.exit_code == 0, r.output
    a = CliRunner().invoke(main, ["attribute", str(cap), "--json"])
    assert a.exit_code == 0, a.output
    tests = {t["test"]: t for t in json.loads(a.stdout)["tests"]}
    assert set(tests) == {"1024x4", "2048x4"}
    assert all(t["rounds"] == 1 and t["n_requests"] == 4 for t in tests.values())  # was 2
    h = CliRunner().invoke(main, ["attribute", str(cap)])
    assert "requests per round" in h.output  # n_requests is per round, not the test's total
