"""``--link-gbps`` on report, compare, plot, cluster and export: one meaning everywhere.

It replaces every device's line rate (port rate, PCIe link, ``record --emulated``) for the
over-line flag, the headline peaks, the plausibility cap (4 x G) and the capacity, and the
output says so. The expected effects are computed from the rule: a step above 4 x G Gb/s over
its interval is implausible, so with G = 1 every 1 ms interval of the P2 prefill (tens of Gb/s)
is implausible, and with the recorded rates none is.
"""

from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from rdmascope.cli import main

NOTE = "line rate: 150 Gb/s for every device, from --link-gbps"


def _run(args):
    r = CliRunner().invoke(main, args)
    return r


def test_every_command_takes_link_gbps():
    for cmd in (["report"], ["compare"], ["plot"], ["cluster"], ["export", "perfetto"],
                ["export", "dataset"], ["rates"], ["peaks"], ["bursts"], ["attribute"],
                ["verify-emulation"], ["inspect"]):
        r = _run([*cmd, "--help"])
        assert r.exit_code == 0 and "--link-gbps" in r.output, cmd


def test_bad_link_gbps_is_a_usage_error(fixtures_dir):
    r = _run(["export", "dataset", str(fixtures_dir / "sim-p2-200"), "-o", "/tmp/x",
              "--link-gbps", "-3"])
    assert r.exit_code == 2 and "--link-gbps" in r.output


def test_export_dataset_flags_follow_link_gbps(fixtures_dir, tmp_path):
    def implausible(out, *extra):
        r = _run(["export", "dataset", str(fixtures_dir / "sim-p2-200"), "-o", str(out), *extra])
        assert r.exit_code == 0, r.output
        t = ds.dataset(str(out), format="parquet", partitioning="hive").to_table().to_pandas()
        return int((t["flag"] == "implausible").sum()), r

    n0, _ = implausible(tmp_path / "a")
    n1, r = implausible(tmp_path / "b", "--link-gbps", "1")
    assert n0 == 0 and n1 > 0
    assert "from --link-gbps" in r.stderr


def test_export_perfetto_and_plot_say_it(fixtures_dir, tmp_path):
    r = _run(["export", "perfetto", str(fixtures_dir / "sim-p2-200"), "-o",
              str(tmp_path / "t.json"), "--format", "json", "--link-gbps", "150"])
    assert r.exit_code == 0, r.output
    assert NOTE in r.stderr
    r = _run(["plot", "devices", str(fixtures_dir / "sim-p2-emulated100"), "-o",
              str(tmp_path / "d.png"), "--link-gbps", "150"])
    assert r.exit_code == 0, r.output
    assert NOTE in r.stderr


def test_compare_says_it_and_keeps_the_setup_links(fixtures_dir):
    a, b = str(fixtures_dir / "sim-p2-200"), str(fixtures_dir / "sim-p2-emulated100")
    r = _run(["compare", a, b, "--link-gbps", "150"])
    assert r.exit_code == 0, r.output
    assert NOTE in r.output
    # the estimate's links are not the line rate: A's link still comes from its manifest
    plain = _run(["compare", a, b])
    line = [ln for ln in plain.output.splitlines() if ln.startswith("model:")]
    assert line == [ln for ln in r.output.splitlines() if ln.startswith("model:")]
    js = _run(["compare", a, b, "--link-gbps", "150", "--json"])
    assert json.loads(js.stdout)["meta"]["line_rate"].startswith(NOTE)


def test_report_shows_the_source(fixtures_dir, tmp_path):
    r = _run(["report", str(fixtures_dir / "sim-p2-200"), "-o", str(tmp_path / "rep"),
              "--link-gbps", "150"])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "150 Gb/s: --link-gbps" in html
    assert NOTE in r.stderr


@pytest.fixture(scope="module")
def run_set(tmp_path_factory):
    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

    d = tmp_path_factory.mktemp("cl")
    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("200")), seed=1)
    truth = simulate_cluster(d, tr, ClusterSpec(nodes=2, seed=2))
    return [str(d / n["host"]) for n in truth["nodes"]]


def test_cluster_says_it(run_set):
    r = _run(["cluster", *run_set, "--link-gbps", "150"])
    assert r.exit_code in (0, 1), r.output
    assert NOTE in r.output
    js = _run(["cluster", *run_set, "--link-gbps", "150", "--json"])
    assert json.loads(js.stdout)["meta"]["line_rate"].startswith(NOTE)
