"""Devices that appeared (or vanished) while recording are said, one line, by verify-emulation,
the report and the cluster view, as inspect lists them (``capture.device_change_texts``)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rdmascope.capture import device_change_texts
from rdmascope.cli import main

APPEARED = ("mlx5_4 (pci 0000:5c:00.0) appeared at 1.0 s, sampled from then on")


def _resize(tmp_path):
    """Four rails, four more coming up 1 s after the start (simulate capture writes their
    device_changes entries and reads them from then on)."""
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, [
        "simulate", "capture", "-o", str(out), "--preset", "deepseek-v2-lite", "--layout", "ep",
        "--tp", "8", "--dp", "4", "--rails", "8", "--rails-before", "4", "--resize-at", "1",
        "--scenario", "prompt=512,concurrency=1,requests=3,output=4,gap=0"])
    assert r.exit_code == 0, r.output
    return out


def test_verify_emulation_and_the_report_say_the_devices_that_appeared(tmp_path):
    cap = _resize(tmp_path)
    r = CliRunner().invoke(main, ["verify-emulation", str(cap), "--expect-rails", "8"])
    lines = [ln for ln in r.output.splitlines() if ln.startswith("devices that came and went")]
    assert len(lines) == 1 and APPEARED in lines[0], r.output
    assert all(f"mlx5_{k} (pci" in lines[0] for k in range(4, 8))
    j = CliRunner().invoke(main, ["verify-emulation", str(cap), "--expect-rails", "8", "--json"])
    assert APPEARED in json.loads(j.output)["meta"]["device_changes"]
    rep = CliRunner().invoke(main, ["report", str(cap), "-o", str(tmp_path / "r")])
    assert (tmp_path / "r" / "report.html").is_file(), rep.output  # exit: the verdict's code
    html = (tmp_path / "r" / "report.html").read_text()
    assert html.count("devices that came and went") == 1 and APPEARED in html


def test_a_capture_without_changes_says_nothing(tmp_path):
    m = {"start": {"monotonic_ns": 10}, "counters": []}
    assert device_change_texts(m) == []
    m["device_changes"] = [{"name": "x", "kind": "appeared", "t_ns": 2_000_000_010}]
    assert device_change_texts(m) == ["x (pci unknown) appeared at 2.0 s: not recorded, its "
                                      "traffic is unknown"]


def test_the_cluster_view_says_a_nodes_device_changes(tmp_path):
    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

    tr = simulate(make_scenario("demo"), TrafficConfig(link=link_config("emulated100")), seed=3)
    truth = simulate_cluster(tmp_path, tr, ClusterSpec(nodes=2, seed=7))
    paths = [tmp_path / n["host"] for n in truth["nodes"]]
    # the second node's recorder saw one of its twins vanish 0.5 s in and return 0.2 s later
    mp = paths[1] / "manifest.json"
    m = json.loads(mp.read_text())
    dev = m["counters"][0]["device"]
    t0 = m["start"]["monotonic_ns"]
    m["device_changes"] = [{"name": dev, "pci": None, "sys_image_guid": None, "kind": k,
                            "t_ns": t0 + t} for k, t in (("vanished", 500_000_000),
                                                         ("returned", 700_000_000))]
    mp.write_text(json.dumps(m))
    r = CliRunner().invoke(main, ["cluster", *map(str, paths)])
    host = truth["nodes"][1]["host"]
    lines = [ln for ln in r.output.splitlines() if ln.startswith("devices that came and went")]
    assert lines == [f"devices that came and went, {host}: {dev} vanished at 0.5 s; {dev} "
                     "returned at 0.7 s, sampled again (the time it was away is unknown)"], \
        r.output
    j = CliRunner().invoke(main, ["cluster", *map(str, paths), "--json"])
    assert list(json.loads(j.output)["meta"]["device_changes"]) == [host]
