"""A run set directory (one capture directory per host, as ``simulate capture --nodes`` and
``record -o runs/x/{host}`` write): every subdirectory is a node, and one that is no capture
(no manifest, empty, or listed by the set's index and absent) is a node named as not read, on
every command that takes a run set. Before, ``cluster DIR`` dropped such a node silently and
judged the rest as the whole set: "3 hosts", PASS, exit 0. Also: the README's glob form
``runs/p2/*`` (which picks up the set's requests.jsonl and truth.json) and ``compare``'s exit
code with the sets' verdicts."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from click.testing import CliRunner

from rdmascope.cli import main
from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

MS = 1_000_000
HOSTS = ["spark-01", "spark-02", "spark-03"]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """A and C: three nodes, both twins (PASS). B: emulated, spark-02 without NCCL_IB_HCA
    (FAIL)."""
    root = tmp_path_factory.mktemp("sets")
    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("200")), seed=3)
    simulate_cluster(root / "a", tr, ClusterSpec(nodes=3, clock_error_ns=5 * MS, seed=1))
    simulate_cluster(root / "c", tr, ClusterSpec(nodes=3, clock_error_ns=5 * MS, seed=6))
    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("emulated100")),
                  seed=4)
    simulate_cluster(root / "b", tr, ClusterSpec(nodes=3, clock_error_ns=5 * MS, seed=2,
                                                 misconfigured=1))
    return root


def _broken(sets, tmp_path, how: str):
    d = tmp_path / "a"
    shutil.copytree(sets / "a", d)
    node = d / "spark-02"
    if how == "no manifest":
        (node / "manifest.json").unlink()
    elif how == "empty":
        shutil.rmtree(node)
        node.mkdir()
    else:  # absent, but listed in the set's truth.json
        shutil.rmtree(node)
    return d


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("how", ["no manifest", "empty", "absent"])
def test_cluster_dir_names_a_node_that_is_no_capture(sets, tmp_path, how):
    d = _broken(sets, tmp_path, how)
    r = run("cluster", d, "--json")
    assert r.exit_code == 3, r.output  # CANNOT JUDGE: the set lacks a node; before: 0, PASS
    meta = json.loads(r.stdout)["meta"]
    assert meta["verdict"] == "CANNOT JUDGE"
    assert list(meta["failed"]) == ["spark-02"]
    assert "spark-02" in meta["failing"]
    h = run("cluster", d)
    assert h.exit_code == 3
    assert "run set: 3 hosts (1 not read: spark-02)" in h.output
    assert "not judged: spark-02" in h.output
    # the same as giving the node directories one by one
    caps = [d / x for x in HOSTS]
    by_caps = run("cluster", *caps, "--json") if how != "absent" else None
    if by_caps is not None:
        assert by_caps.exit_code == 3
        assert json.loads(by_caps.stdout)["meta"]["failed"].keys() == meta["failed"].keys()


def test_cluster_glob_skips_the_set_files(sets):
    """The README's ``rdmascope cluster runs/p2/*``: requests.jsonl and truth.json are skipped
    with a note; the answer is the directory's."""
    d = sets / "a"
    listed = sorted(d.iterdir())
    assert any(p.is_file() for p in listed)
    r = run("cluster", *listed, "--json")
    assert r.exit_code == 0, r.output
    assert f"note: {d / 'requests.jsonl'}: a file" in r.stderr
    by_dir = run("cluster", d, "--json")
    a, b = json.loads(r.stdout), json.loads(by_dir.stdout)
    for x in (a, b):
        x["meta"].pop("maps", None)
    assert a == b and a["meta"]["verdict"] == "PASS" and len(a["nodes"]) == 3
    # a file on its own is still no capture: a usage error naming it
    lone = run("cluster", d / "spark-01", d / "spark-02", "/etc/hostname")
    assert lone.exit_code == 2 and "'/etc/hostname' is a file" in lone.output


@pytest.mark.parametrize("cmd", [["rates", "--window", "1s"], ["peaks"], ["bursts"],
                                 ["verify-emulation"], ["attribute"]])
def test_per_node_commands_name_the_node_and_run_the_rest(sets, tmp_path, cmd):
    d = _broken(sets, tmp_path, "no manifest")
    r = run(cmd[0], d, *cmd[1:])
    assert r.exit_code == 4, r.output  # an error on that node (before: the set refused whole)
    assert "Error: spark-02: unreadable" in r.stderr
    assert "run set: 3 hosts (1 not read); ERROR on spark-02" in r.stdout
    for h in ("spark-01", "spark-03"):
        assert f"== {h} (" in r.stdout
    j = run(cmd[0], d, *cmd[1:], "--json")
    rs = json.loads(j.stdout)["meta"]["run_set"]
    assert list(rs["not_read"]) == ["spark-02"]
    assert rs["exit_codes"] == {"spark-01": 0, "spark-02": 4, "spark-03": 0} or \
        rs["exit_codes"]["spark-02"] == 4


def test_compare_exits_with_the_sets_verdicts(sets, tmp_path):
    """README: exit 1 whenever a FAIL verdict is shown; the per-node table shows B's set FAIL
    (spark-02 spread over both twins). Before: exit 0."""
    r = run("compare", sets / "a", sets / "b", "--json")
    meta = json.loads(r.stdout)["meta"]["run_sets"]
    assert (meta["A"]["verdict"], meta["B"]["verdict"]) == ("PASS", "FAIL")
    assert r.exit_code == 1
    both = run("compare", sets / "a", sets / "c")
    assert both.exit_code == 0, both.output  # two PASS sets


def test_compare_set_row_is_unknown_when_a_node_is(sets, tmp_path):
    """A node of B not read: its cells and the set's highest peak, total bytes and median bytes
    per request are unknown (null), not those of the other nodes; the set CANNOT JUDGE."""
    b = tmp_path / "b"
    shutil.copytree(sets / "b", b)
    shutil.copytree(sets / "a", tmp_path / "a")
    (tmp_path / "a" / "spark-03" / "manifest.json").unlink()
    r = run("compare", sets / "b", tmp_path / "a", "--json")
    assert r.exit_code == 1, r.output  # A (here sets/b) FAILs: worse than B's CANNOT JUDGE
    out = json.loads(r.stdout)
    nodes = {n["host"]: n for n in out["nodes"]}
    assert nodes["spark-03"]["verdict_b"] == "cannot judge"
    assert out["meta"]["run_sets"]["B"]["verdict"] == "CANNOT JUDGE"
    s = nodes["(set)"]
    for c in ("tx_bytes_b", "peak_1ms_b_gbps", "peak_1s_b_gbps", "bytes_per_request_b"):
        assert s[c] is None or (isinstance(s[c], float) and math.isnan(s[c])), (c, s[c])
    # A's side is whole: its set row is the highest / sum / median of its three nodes
    known = [nodes[h] for h in HOSTS]
    assert s["peak_1ms_a_gbps"] == pytest.approx(max(n["peak_1ms_a_gbps"] for n in known))
    assert s["tx_bytes_a"] == pytest.approx(sum(n["tx_bytes_a"] for n in known))
    c = run("compare", sets / "c", tmp_path / "a")
    assert c.exit_code == 3, c.output  # PASS vs CANNOT JUDGE


def test_report_takes_the_run_set_directory(sets, tmp_path):
    d = _broken(sets, tmp_path, "no manifest")
    r = run("report", d, "-o", tmp_path / "rep")
    assert r.exit_code == 3, r.output  # the cluster view, CANNOT JUDGE with spark-02 named
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "not read: spark-02" in html
    ok = run("report", *sorted((sets / "a").iterdir()), "-o", tmp_path / "rep2")
    assert ok.exit_code == 0, ok.output  # the README's `report runs/p2/* -o report/`
    assert "cluster report" in (tmp_path / "rep2" / "report.html").read_text()


def test_export_names_a_node_that_is_no_capture(sets, tmp_path):
    d = _broken(sets, tmp_path, "no manifest")
    r = run("export", "dataset", d, "-o", tmp_path / "ds")
    assert r.exit_code == 4 and "Traceback" not in r.output
    assert f"{d / 'spark-02'}: has no manifest.json" in r.output


def test_the_readmes_run_set_commands_run_as_written(tmp_path, monkeypatch):
    """README "A cluster": step 3's three lines, as a shell would expand them (runs/p2/* holds
    the client's requests.jsonl and truth.json beside the node directories)."""
    import glob
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme[readme.index("## A cluster"):]
    lines = [ln.split("#")[0].strip() for ln in block[:block.index("```", block.index("```")
                                                                   + 3)].splitlines()]
    cmds = [ln for ln in lines if re.match(r"rdmascope (cluster|report|compare) ", ln)]
    assert len(cmds) == 3, cmds
    runs = tmp_path / "runs"
    sc = make_scenario("single4k")
    simulate_cluster(runs / "p2", simulate(sc, TrafficConfig(link=link_config("emulated100")),
                                           seed=3),
                     ClusterSpec(nodes=2, clock_error_ns=5 * MS, seed=1))
    simulate_cluster(runs / "p2-200", simulate(sc, TrafficConfig(link=link_config("200")),
                                               seed=4),
                     ClusterSpec(nodes=2, clock_error_ns=5 * MS, seed=2))
    monkeypatch.chdir(tmp_path)
    for cmd in cmds:
        argv = []
        for a in shlex.split(cmd)[1:]:
            argv += sorted(glob.glob(a)) if "*" in a else [a]
        r = CliRunner().invoke(main, argv)
        assert r.exit_code == 0, (cmd, r.output)
