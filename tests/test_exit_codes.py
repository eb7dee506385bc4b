"""Exit codes with one meaning each (rdmascope.exitcodes), and ``--json``'s schema_version and
one shape per command."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdmascope import exitcodes as X
from rdmascope.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIM = FIXTURES / "sim-p2-200"
EMU = FIXTURES / "sim-p2-emulated100"
MS = 1_000_000


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_the_codes_are_distinct_and_help_lists_them():
    codes = [row[0] for row in X.TABLE]
    assert codes == [0, 1, 2, 3, 4] and len(set(codes)) == 5
    assert (X.EXIT_PASS, X.EXIT_FAIL, X.EXIT_USAGE, X.EXIT_CANNOT_JUDGE, X.EXIT_ERROR) == \
        (0, 1, 2, 3, 4)
    r = run("--help")
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for code, name, _ in X.TABLE:
        assert f"{code} {name}:" in text, (code, name, r.output)


def test_worst_combines_nodes():
    assert X.worst([]) == 0
    assert X.worst([0, 3, 0]) == 3
    assert X.worst([3, 1, 0]) == 1
    assert X.worst([1, 4]) == 4
    assert X.worst([2, 2]) == 2
    assert X.worst([2, 0]) == 4  # one node refused: an error, not a usage error of the command


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    d = tmp_path_factory.mktemp("trunc") / "cap"
    shutil.copytree(SIM, d)
    seg = sorted((d / "segments").glob("*.parquet"))[0]
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])
    return d


def test_a_corrupt_segment_is_a_data_error_not_a_fail(truncated):
    for cmd in (["inspect"], ["peaks"], ["rates", "--window", "1s"], ["verify-emulation"]):
        r = run(*cmd, truncated)
        assert r.exit_code == X.EXIT_ERROR, (cmd, r.output)
        assert "seg-000000.parquet" in r.output and "Traceback" not in r.output


def test_an_unreadable_directory_and_request_log_are_data_errors(tmp_path):
    (tmp_path / "x").write_text("hi\n")
    r = run("peaks", tmp_path)
    assert r.exit_code == X.EXIT_ERROR and "manifest.json" in r.output
    bad = tmp_path / "log.jsonl"
    bad.write_text("{not json\n")
    r = run("attribute", SIM, "--requests", bad)
    assert r.exit_code == X.EXIT_ERROR and str(bad) in r.output


def test_fail_verdict_is_1_and_pass_is_0():
    # the full link's capture sent on both twins: expecting one interface FAILs
    r = run("verify-emulation", SIM)
    assert r.exit_code == X.EXIT_FAIL and "FAIL" in r.output, r.output
    r = run("verify-emulation", EMU)
    assert r.exit_code == X.EXIT_PASS and "PASS" in r.output, r.output


@pytest.mark.parametrize("args", [
    ["estimate", "--b-emulated", "109", "--b-real"],
    ["report", SIM, EMU, "--requests", SIM / "requests.jsonl", "-o", "{tmp}/r"],
    ["report", SIM, EMU, "--label", "only one", "-o", "{tmp}/r"],
    ["report", SIM, SIM, "-o", "{tmp}/r"],
    ["compare", SIM, SIM],
    ["simulate", "serve", "--cleanup", "--keep-tree"],
    ["plot", "tp", SIM, "-o", "{tmp}/x.png"],
    ["estimate", "--preset", "llama-3-70b", "--layout", "ep"],
])
def test_usage_errors_exit_2(args, tmp_path):
    r = run(*[str(a).format(tmp=tmp_path) for a in args])
    assert r.exit_code == X.EXIT_USAGE, (args, r.output)
    assert "Traceback" not in r.output
    assert not (tmp_path / "r").exists()  # refused before any analysis


def test_report_exits_with_the_verdict_it_shows(tmp_path):
    """A cluster one of whose nodes did not apply the emulation: the report's verdict is FAIL
    and so is its exit code (it exited 0); the same set through `cluster` agrees."""
    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("emulated100")),
                  seed=3)
    truth = simulate_cluster(tmp_path / "set", tr, ClusterSpec(nodes=2, misconfigured=1, seed=5))
    caps = [tmp_path / "set" / n["host"] for n in truth["nodes"]]
    c = run("cluster", *caps)
    assert c.exit_code == X.EXIT_FAIL, c.output
    r = run("report", *caps, "-o", tmp_path / "rep")
    assert r.exit_code == X.EXIT_FAIL, r.output
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "Emulation check: FAIL" in page
    # a single capture whose emulation check passes exits 0
    r = run("report", EMU, "-o", tmp_path / "one")
    assert r.exit_code == X.EXIT_PASS, r.output


def test_json_carries_schema_version_first():
    for args in (["peaks", SIM], ["rates", SIM, "--window", "1s"], ["verify-emulation", EMU],
                 ["inspect", SIM], ["devices", "--sysfs-root", FIXTURES / "sysfs-procfs" / "sys"],
                 ["estimate"]):
        r = run(*args, "--json")
        assert r.exit_code == 0, (args, r.output)
        obj = json.loads(r.output)
        assert next(iter(obj)) == "schema_version" and obj["schema_version"] == 1, args


def test_a_run_set_json_has_the_shape_of_one_capture(tmp_path):
    """`peaks A B --json` (two hosts of one run) has the keys of `peaks A --json`: the same
    tables, each row tagged with its host; the set under meta.run_set (it had `nodes` instead
    of the tables)."""
    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("200")), seed=1)
    truth = simulate_cluster(tmp_path, tr, ClusterSpec(nodes=2, seed=2))
    caps = [tmp_path / n["host"] for n in truth["nodes"]]
    one = json.loads(run("peaks", caps[0], "--json").output)
    both_r = run("peaks", *caps, "--json")
    assert both_r.exit_code == 0, both_r.output
    both = json.loads(both_r.output)
    assert list(both) == list(one)
    assert both["schema_version"] == one["schema_version"] == 1
    hosts = [n["host"] for n in truth["nodes"]]
    assert [n["host"] for n in both["meta"]["run_set"]["nodes"]] == hosts
    assert set(both["meta"]["nodes"]) == set(hosts)
    for name in one:
        if name in ("schema_version", "meta"):
            continue
        rows = both[name]
        assert len(rows) == 2 * len(one[name])
        first = [{k: v for k, v in r.items() if k != "host"} for r in rows if r["host"] == hosts[0]]
        assert first == one[name]


def test_readme_table_is_the_modules():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = [r for r in readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0].splitlines()
            if r.startswith("| ") and r[2].isdigit()]
    got = [tuple(c.strip() for c in r.strip("|").split("|")) for r in rows]
    assert got == [(str(c), n, m) for c, n, m in X.TABLE]


@pytest.mark.parametrize("args", [["attribute"], ["plot", "windows", "-o", "{tmp}/w.png"],
                                  ["plot", "request", "-o", "{tmp}/r.png"]])
def test_no_request_log_is_a_usage_error_for_attribute_and_plot_alike(args, tmp_path):
    """A capture without a request log, given to a command that needs one: the command line is
    missing --requests (2), not a data error (4), for ``attribute`` and ``plot`` alike."""
    cap = tmp_path / "cap"
    shutil.copytree(SIM, cap, ignore=shutil.ignore_patterns("requests.jsonl"))
    r = run(*[str(a).format(tmp=tmp_path) for a in args], cap)
    assert r.exit_code == X.EXIT_USAGE, (args, r.output)
    assert "--requests" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args, named", [
    (["--expect-both", "--share", "0.7"], "--share applies to --expect-single"),
    (["--expect-single", "--min-share", "0.3"], "--min-share applies to --expect-both"),
    (["--expect-rails", "2", "--share", "0.9"], "--share applies to --expect-single"),
    (["--expect-both", "--rail-balance", "0.2"], "--rail-balance applies to --expect-rails"),
])
def test_an_option_of_another_expectation_is_refused_not_ignored(args, named):
    """`--expect-both --share 0.7` judged with the default --min-share and said nothing: an
    option the chosen expectation does not read is a usage error naming both."""
    cap = str(EMU)
    r = CliRunner().invoke(main, ["verify-emulation", cap, *args])
    assert r.exit_code == X.EXIT_USAGE and named in r.output, r.output
    ok = CliRunner().invoke(main, ["verify-emulation", cap, "--share", "0.9"])
    assert ok.exit_code == X.EXIT_PASS, ok.output
