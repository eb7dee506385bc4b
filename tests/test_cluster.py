"""The cluster view on emulated clusters: clocks, verdicts, symmetry, stragglers, refusals."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from rdmascope.analysis.cluster import RunSetError, open_run_set
from rdmascope.analysis.cluster_reduce import cluster_summary

from rdmascope.cli import main
from rdmascope.emulator.cluster import REALTIME_ZERO_NS, ClusterSpec, simulate_cluster
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate
from rdmascope.emulator.simcapture import simulate_capture

MS = 1_000_000


def _rows(obj, table, host):
    """One node's rows of a run set's --json table (each row carries its host)."""
    return [{k: v for k, v in r.items() if k != "host"} for r in obj[table] if r["host"] == host]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    tr = simulate(make_scenario("demo"), TrafficConfig(link=link_config("emulated100")), seed=3)
    truth = simulate_cluster(d, tr, ClusterSpec(nodes=8, clock_error_ns=50 * MS,
                                                misconfigured=2, straggler=5, seed=7))
    paths = [d / n["host"] for n in truth["nodes"]]
    res = cluster_summary(paths, requests=d / "requests.jsonl")
    return d, truth, paths, res


def test_offsets_recovered_within_0_2_ms_with_wall_clocks_off_by_up_to_50_ms(cluster):
    _, truth, _, res = cluster
    walls = [n["wall_clock_error_ns"] for n in truth["nodes"]]
    # the wall clocks really are far apart (else the test proves nothing)
    assert max(walls) - min(walls) > 40 * MS
    for node, t in zip(res.run_set.nodes, truth["nodes"], strict=True):
        assert node.host == t["host"]
        assert abs(node.offset_ns - t["offset_to_reference_ns"]) < 0.2 * MS, node.host
        # the wall clocks alone are off by their errors' difference
        assert node.wall_offset_ns - t["offset_to_reference_ns"] == \
            t["wall_clock_error_ns"] - walls[0]
        if node.host != "spark-01":
            assert node.offset_unc_ns is not None and 0 < node.offset_unc_ns < 0.1 * MS
    # a warning names every host whose wall clock is more than 1 ms off the reference's
    warned = {w.split("'")[0] for w in res.warnings if "wall clock disagrees" in w}
    expect = {t["host"] for t in truth["nodes"] if abs(t["wall_clock_error_ns"] - walls[0]) > 1.1 * MS}
    assert warned >= expect and expect


def test_the_node_without_emulation_fails_the_set(cluster):
    _, truth, _, res = cluster
    assert res.expect == "single"
    assert res.verdict == "FAIL"
    assert res.failing == truth["culprits"]["emulation_not_applied"] == ["spark-03"]
    row = res.nodes.set_index("host").loc["spark-03"]
    assert "50.0%" in row["share"]


def test_the_straggler_is_named(cluster):
    _, truth, _, res = cluster
    s = res.stragglers.set_index("host")
    named = list(s.index[s["finding"] == "compute straggler"])
    assert named == [truth["culprits"]["straggler"]["host"]] == ["spark-06"]
    # late by a sizeable part of the true 1 ms (1 ms sampling blurs the first ring step)
    assert 0.3 < s.loc["spark-06", "late_ms"] <= 1.2
    assert (s.drop("spark-06")["late_ms"].abs() < 0.3).all()


def test_bytes_per_request_match_each_nodes_truth_within_half_a_percent(cluster):
    d, truth, _, res = cluster
    nodes = res.nodes.set_index("host")
    for t in truth["nodes"]:
        nt = json.loads((d / t["host"] / "truth.json").read_text())
        per = [sum(v for k, v in r["prefill_bytes"].items() if k.startswith("roce")
                   and k.endswith("/tx"))
               + sum(v for k, v in r["decode_bytes"].items() if k.startswith("roce")
                     and k.endswith("/tx")) for r in nt["requests"]]
        got = nodes.loc[t["host"], "bytes_per_request"]
        assert nodes.loc[t["host"], "requests"] == len(per)
        assert got == pytest.approx(np.mean(per), rel=0.005), t["host"]
    assert (nodes["flag"] == "").all()


def test_no_refinement_keeps_the_wall_clocks(cluster):
    _, truth, paths, _ = cluster
    rs = open_run_set(paths[:3])
    for node, t in zip(rs.nodes, truth["nodes"][:3], strict=True):
        assert node.offset_ns == node.wall_offset_ns
        assert node.offset_ns - t["offset_to_reference_ns"] == \
            t["wall_clock_error_ns"] - truth["nodes"][0]["wall_clock_error_ns"]


def test_two_captures_of_one_host_and_non_overlapping_sets_are_refused(cluster, tmp_path):
    _, _, paths, _ = cluster
    with pytest.raises(RunSetError, match="both captures of host 'spark-01'"):
        open_run_set([paths[0], paths[1], paths[0]])
    tr = simulate(make_scenario("single4k"))
    later = simulate_capture(tmp_path / "late", tr, host="spark-09",
                             start_realtime_ns=REALTIME_ZERO_NS + 3_600 * 10**9)
    with pytest.raises(RunSetError, match=r"do not overlap.*late \(spark-09\)"):
        open_run_set([paths[0], paths[1], later])
    r = CliRunner().invoke(main, ["cluster", str(paths[0]), str(later)])
    assert r.exit_code == 4 and "do not overlap" in r.output and "Traceback" not in r.output


def test_cli_names_the_culprits_and_exits_1(cluster):
    d, _, paths, _ = cluster
    r = CliRunner().invoke(main, ["cluster", *map(str, paths)])
    assert r.exit_code == 1, r.output
    assert "emulation: FAIL: spark-03 did not pass" in r.output
    assert "spark-06: compute straggler" in r.output
    assert f"requests: {paths[0] / 'requests.jsonl'}" in r.output
    r = CliRunner().invoke(main, ["cluster", *map(str, paths[:2]), "--json", "--no-refine"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output)
    assert obj["meta"]["verdict"] == "PASS" and not obj["meta"]["refined"]
    assert [n["host"] for n in obj["nodes"]] == ["spark-01", "spark-02"]


def test_figures_show_the_aligned_rates(cluster):
    from rdmascope.analysis.cluster import aligned_rates, zoom_window
    from rdmascope.analysis.figures import plot_cluster_heatmap, plot_cluster_zoom

    _, _, _, res = cluster
    rates = aligned_rates(res)
    assert list(rates.columns) == [f"spark-{i:02d}" for i in range(1, 9)]
    # windows carry each node's tx bytes: the sum over the span equals the table's tx bytes
    lo, hi = res.span_ns
    n_win = (hi - lo) // MS
    tx = rates.sum() * MS / 8
    assert len(rates) == n_win
    table = res.nodes.set_index("host")["tx_bytes"]
    assert np.allclose(tx, table, rtol=1e-3)
    ax = plot_cluster_heatmap(rates, requests=res.requests, max_columns=500)
    img = ax.get_images()[0].get_array()
    k = int(np.ceil(len(rates) / 500))
    n = len(rates) // k * k
    expect = rates.to_numpy().T[:, :n].reshape(8, -1, k).max(axis=2)
    assert img.shape == expect.shape and np.allclose(img, expect)
    zw = zoom_window(res)
    z = aligned_rates(res, start_ns=zw[0], end_ns=zw[1])
    assert len(z) == 60 and z.max().max() > 50  # a burst is in the zoom
    zax = plot_cluster_zoom(z, origin_ns=zw[0])
    assert len(zax.get_lines()) >= 8


def test_report_of_several_hosts_is_the_cluster_view(cluster, tmp_path):
    d, _, paths, _ = cluster
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["report", *map(str, paths[:4]), "-o", str(out)])
    assert r.exit_code == 1, r.output  # the verdict it shows: FAIL
    html = (out / "report.html").read_text()
    assert "Emulation check: FAIL: spark-03" in html
    assert html.count("data:image/png;base64,") == 2
    rows = (out / "tables" / "cluster_nodes.csv").read_text().splitlines()
    assert [x.split(",")[0] for x in rows[1:]] == ["spark-01", "spark-02", "spark-03",
                                                   "spark-04"]


def test_demo_nodes_ends_in_the_cluster_report(tmp_path):
    out = tmp_path / "demo"
    r = CliRunner().invoke(main, ["demo", "--nodes", "4", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "emulation check on every node: FAIL (spark-03 did not pass)" in r.output
    assert "spark-02: compute straggler" in r.output
    assert (out / "report" / "report.html").is_file()
    truth = json.loads((out / "cluster" / "truth.json").read_text())
    assert truth["culprits"]["straggler"]["host"] == "spark-02"
    r = CliRunner().invoke(main, ["demo", "--nodes", "4", "-o", str(out)])
    assert r.exit_code == 4 and "--force" in r.output
    (out / "report" / "report.html").unlink()
    r = CliRunner().invoke(main, ["demo", "--nodes", "4", "-o", str(out), "--force"])
    assert r.exit_code == 4 and "not an earlier demo's report" in r.output
    assert (out / "cluster" / "truth.json").is_file()  # nothing was removed


def test_a_200_gbps_cluster_passes_on_both_twins(tmp_path):
    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("200")))
    truth = simulate_cluster(tmp_path, tr, ClusterSpec(nodes=3, clock_error_ns=5 * MS, seed=2))
    paths = [tmp_path / n["host"] for n in truth["nodes"]]
    res = cluster_summary(paths)
    assert res.expect == "both" and res.verdict == "PASS" and res.failing == []
    assert "0 of 3 nodes sent >= 99 % on one interface" in res.expect_reason
    res = cluster_summary(paths, expect="single")
    assert res.verdict == "FAIL" and res.failing == [n["host"] for n in truth["nodes"]]
    for node, t in zip(res.run_set.nodes, truth["nodes"], strict=True):
        assert abs(node.offset_ns - t["offset_to_reference_ns"]) < 0.2 * MS


def test_single_capture_commands_take_a_run_set(cluster, tmp_path):
    _, truth, paths, _ = cluster
    caps = list(map(str, paths[:4]))
    r = CliRunner().invoke(main, ["verify-emulation", *caps])
    assert r.exit_code == 1, r.output
    assert r.output.count("== spark-") == 4
    assert "run set: 4 hosts; FAIL: spark-03" in r.output
    r = CliRunner().invoke(main, ["verify-emulation", *caps[:2], "--json"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output)
    assert list(obj["meta"]["nodes"]) == ["spark-01", "spark-02"]
    assert obj["meta"]["nodes"]["spark-02"]["status"] == "pass"
    # --from/--to are seconds after the reference's start, moved onto each node's own clock
    r = CliRunner().invoke(main, ["peaks", *caps[:2], "--from", "2", "--to", "3", "--json"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)  # the clock warnings are on stderr, after it
    n0, n1 = truth["nodes"][:2]
    # both captures' true start instants differ by their leads (the refined offsets leave the
    # wall clocks' 50 ms errors out)
    shift = (n1["lead_ns"] - n0["lead_ns"]) / 1e9
    m0 = obj["meta"]["nodes"]["spark-01"]
    m1 = obj["meta"]["nodes"]["spark-02"]
    start = [m["start_ns"] - m["t_start_ns"] for m in (m0, m1)]
    assert start[0] == 2_000_000_000
    assert start[1] / 1e9 == pytest.approx(2 + shift, abs=0.2e-3)
    # the same host twice on the command line: a usage error (exit 2), as every wrong command
    # line is (it was 4, a capture's problem), in the set commands and the per-node ones
    for cmd in (["rates", caps[0], caps[0], "--window", "1s"], ["cluster", caps[0], caps[0]]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 2 and "both captures of host 'spark-01'" in r.output, r.output


def test_streamed_node_pass_matches_peak_table_and_rebin(cluster):
    from rdmascope.analysis.cluster import link_peaks, node_pass
    from rdmascope.analysis.load import load_capture
    from rdmascope.analysis.series import byte_intervals, rebin, twin_links

    _, _, paths, _ = cluster
    for p in (paths[0], paths[2]):  # one twin, and both twins (the node without emulation)
        cap = load_capture(p)
        iv = byte_intervals(cap)
        got = node_pass(p)
        ser, pk = got.series, got.peaks
        assert got.measure is None
        assert got.rereads == 0  # over-line candidates judged from the pass's own intervals
        # the emulation check folded into the same pass changes neither peaks nor series
        with_check = node_pass(p, measure=True)
        assert with_check.peaks == pk and with_check.measure is not None
        assert np.array_equal(with_check.series.cum, ser.cum)
        ref = link_peaks(iv, twin_links(cap), cap.t_start_ns, cap.t_end_ns)
        assert pk.keys() == ref.keys()
        for k in pk:
            assert pk[k] == pytest.approx(ref[k], rel=1e-9), k
        b = rebin(iv, MS, origin_ns=cap.t_start_ns)
        assert np.allclose(np.diff(ser.cum), np.nan_to_num(b.to_numpy()).sum(axis=1))


def test_the_reference_can_be_the_node_without_emulation(tmp_path):
    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("emulated100")))
    truth = simulate_cluster(tmp_path, tr, ClusterSpec(nodes=3, misconfigured=0, seed=5))
    res = cluster_summary([tmp_path / n["host"] for n in truth["nodes"]])
    assert res.expect == "single" and res.failing == ["spark-01"]
    assert res.verdicts["spark-02"].ok and res.verdicts["spark-02"].expect == "single"


def test_plot_cluster_kinds(cluster, tmp_path):
    _, _, paths, _ = cluster
    caps = list(map(str, paths[:3]))
    r = CliRunner().invoke(main, ["plot", "cluster", *caps, "-o", str(tmp_path / "h.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "h.png").stat().st_size > 10_000
    r = CliRunner().invoke(main, ["plot", "cluster-zoom", *caps, "-o", str(tmp_path / "z.svg")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "z.svg").read_text().count("spark-0") >= 3  # one legend entry per node
    r = CliRunner().invoke(main, ["plot", "cluster", caps[0], "-o", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "at least two hosts" in r.output


def test_attribute_on_a_run_set_uses_the_clients_log_on_every_node(cluster):
    d, truth, paths, _ = cluster
    caps = [str(paths[0]), str(paths[5])]  # the client's node and the straggler
    r = CliRunner().invoke(main, ["attribute", *caps, "--json"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output[r.output.index("{"):])
    for host in ("spark-01", "spark-06"):
        nt = json.loads((d / host / "truth.json").read_text())
        got = {q["request_id"]: q for q in _rows(obj, "requests", host)}
        for t in nt["requests"]:
            want = sum(v for k, v in t["prefill_bytes"].items()
                       if k.startswith("roce") and k.endswith("/tx"))
            assert got[t["request_id"]]["prefill_tx_bytes"] == pytest.approx(want, rel=0.005)
    # the straggler's attribution with the client's log moved by the refined offset equals its
    # attribution with a log written on its own clock (the emulator's per-node log)
    own = CliRunner().invoke(main, ["attribute", caps[1], "--requests",
                                    str(paths[5] / "requests.jsonl"), "--json"])
    own = {q["request_id"]: q for q in json.loads(own.output)["requests"]}
    for q in _rows(obj, "requests", "spark-06"):
        for k in ("prefill_tx_bytes", "decode_tx_bytes"):
            assert q[k] == pytest.approx(own[q["request_id"]][k], rel=1e-3), k


def test_cluster_report_clock_verdict_lists_hosts_as_one_sentence():
    """The report's clock verdict listed the per-host warnings run together ('... the refined
    offsets are used spark-03's wall clock ...'); each host is said once, separated by '; '."""
    from rdmascope.analysis.cluster_report import clock_details

    w = [f"{h}'s wall clock disagrees with spark-01's by {d:+.2f} ms (found from the traffic): "
         "NTP/PTP is not keeping the hosts within 1 ms; the refined offsets are used"
         for h, d in (("spark-02", 9.76), ("spark-03", -3.58))]
    assert clock_details(w) == (
        "spark-02's wall clock disagrees with spark-01's by +9.76 ms (found from the traffic); "
        "spark-03's wall clock disagrees with spark-01's by -3.58 ms (found from the traffic).")
    assert clock_details([]) == ""


def test_cluster_report_shows_bytes_per_request_in_mb(cluster):
    """The per-node table's 'tx per request (MB)' column held bytes (16,646,140,031 'MB')."""
    from rdmascope.analysis.cluster_report import build_cluster_report
    from rdmascope.analysis.report import format_table

    _, _, _, res = cluster
    (table,) = next(s for s in build_cluster_report(res).sections if s.title == "Per node").tables
    fmt = format_table(table.frame, table.headers)
    col = [h["text"] for h in fmt["headers"]].index("tx per request (MB)")
    per = res.nodes.set_index("host")["bytes_per_request"]
    for row in fmt["rows"]:
        host = row[0]["text"]
        shown = float(row[col]["text"].replace(",", ""))
        assert shown == pytest.approx(per[host] / 1e6, abs=0.5), (host, shown)



def test_table_prints_no_signed_zero():
    """A value that rounds to zero prints without a sign (vs median (%) showed -0.000)."""
    import pandas as pd

    from rdmascope.cli.output import format_table

    df = pd.DataFrame({"host": ["a", "b", "c", "d"], "vs_median_pct": [-1e-9, 1e-9, -0.5, 0.0],
                       "x": [-0.0004, 0.0004, 1.25, -2.0]})
    lines = format_table(df, formats={"vs_median_pct": "{:+.2f}"}).splitlines()[2:]
    cells = [line.split() for line in lines]
    assert [c[1] for c in cells] == ["0.00", "0.00", "-0.50", "0.00"]
    assert [c[2] for c in cells] == ["0.000", "0.000", "1.250", "-2.000"]


def test_max_clock_error_of_zero_is_a_usage_error(cluster):
    """--max-clock-error is the refinement's search range: 0 searched nothing and silently
    turned refinement off (the warning blaming the traffic). Refused, pointing at --no-refine."""
    _, _, paths, _ = cluster
    r = CliRunner().invoke(main, ["cluster", *map(str, paths[:2]), "--max-clock-error", "0"])
    assert r.exit_code == 2, r.output
    errors = [x for x in r.output.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and "'--max-clock-error'" in errors[0], r.output
    assert "--no-refine" in errors[0] and "does not match" not in r.output



def test_captures_of_unrelated_runs_cannot_be_judged_as_one(tmp_path):
    """Two captures whose traffic does not match (a 200 Gb/s cluster's node and the p2 fixture,
    another run): every node passes its own emulation check, but the set is no run: exit 3."""
    from pathlib import Path

    tr = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("200")))
    truth = simulate_cluster(tmp_path, tr, ClusterSpec(nodes=2, clock_error_ns=5 * MS, seed=2))
    paths = [tmp_path / n["host"] for n in truth["nodes"]]
    other = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"
    r = CliRunner().invoke(main, ["cluster", str(paths[0]), str(other), "--json"])
    assert r.exit_code == 3, r.output
    meta = json.loads(r.output)["meta"]
    assert meta["verdict"] == "CANNOT JUDGE" and meta["unmatched"] == ["emulated-spark"]
    assert meta["emulation_verdict"] in ("PASS", "CANNOT JUDGE")
    r = CliRunner().invoke(main, ["cluster", str(paths[0]), str(other)])
    assert r.exit_code == 3, r.output
    assert "emulation: CANNOT JUDGE the set as one run: the traffic of emulated-spark does " \
           "not match spark-01's" in r.output
    # matching traffic keeps the emulation's verdict (and its exit code)
    r = CliRunner().invoke(main, ["cluster", *map(str, paths[:2]), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["meta"]["unmatched"] == [], r.output


def test_a_failed_node_keeps_the_fail_when_traffic_also_does_not_match(cluster):
    from pathlib import Path

    _, truth, paths, _ = cluster
    other = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"
    r = CliRunner().invoke(main, ["cluster", *map(str, paths[:3]), str(other), "--json"])
    assert r.exit_code == 1, r.output
    meta = json.loads(r.output)["meta"]
    assert meta["verdict"] == meta["emulation_verdict"] == "FAIL"
    assert "emulated-spark" in meta["unmatched"]


def test_rates_and_bursts_take_a_run_set_with_each_nodes_truth(cluster):
    """rates and bursts once per node of a run set: every node's bytes against its own truth."""
    d, _, paths, _ = cluster
    caps = [str(paths[0]), str(paths[2])]  # an emulated node and the one without emulation
    r = CliRunner().invoke(main, ["rates", *caps, "--window", "1s", "--json"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output[r.output.index("{"):])
    assert [n["host"] for n in obj["meta"]["run_set"]["nodes"]] == ["spark-01", "spark-03"]
    b = CliRunner().invoke(main, ["bursts", *caps, "--json"])
    assert b.exit_code == 0, b.output
    bo = json.loads(b.output[b.output.index("{"):])
    for host in ("spark-01", "spark-03"):
        want = json.loads((d / host / "truth.json").read_text())["totals_bytes"]
        rows = _rows(obj, "rates", host)
        summ = {s["series"]: s for s in _rows(bo, "summary", host)}
        for series in ("rocep1s0f1/tx", "roceP2p1s0f1/tx"):
            got = sum(row[f"{series}_gbps"] for row in rows) * 1e9 / 8  # 1 s windows
            assert got == pytest.approx(want[series], rel=0.005, abs=1e3), (host, series)
            assert summ[series]["total_bytes"] == pytest.approx(want[series], rel=0.005,
                                                                abs=1e3), (host, series)
        # the emulated node bursts on its first twin only; the other spreads over both
        n2 = summ["roceP2p1s0f1/tx"]["n_bursts"]
        assert (n2 == 0) if host == "spark-01" else (n2 > 10), (host, n2)


def test_no_straggler_says_the_threshold_and_the_latest_node(two_node_run_set):
    """Without a finding, `cluster` says what it looked for (0.3 ms late in 75 % of the bursts,
    10 % longer) and names the latest node with its numbers when it is late in at least half
    of them, instead of "every node starts and ends its bursts with the others"."""
    import json as _json

    from click.testing import CliRunner

    from rdmascope.cli import main

    args = ["cluster", str(two_node_run_set)]
    human = CliRunner().invoke(main, args)
    data = _json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    st = [r for r in data["stragglers"] if r["late_ms"] is not None]
    assert not any(r["finding"] for r in st)
    assert "no straggler or slow link: no node starts its bursts 0.3 ms or more after the " \
           "median in 75 % of them" in human.output
    top = max(st, key=lambda r: r["late_ms"])
    said = f"the latest, {top['host']}, starts {top['late_ms']:+.2f} ms vs the median"
    assert (said in human.output) == (top["late_ms"] > 0 and top["late_share"] >= 0.5)


def test_cluster_says_how_the_request_log_was_placed(two_node_run_set, tmp_path):
    """A relative log placed by anchoring it to the first prefill burst is an estimate: `cluster`
    says so as `attribute` does (it printed only the request count), in the table and in
    --json's meta, with either engine's method."""
    import json as _json

    from click.testing import CliRunner

    from rdmascope.cli import main

    rows = [_json.loads(x) for x in (two_node_run_set / "requests.jsonl").read_text().split("\n")
            if x.strip()]
    t0 = min(r["t_send"] for r in rows)
    rel = tmp_path / "relative.jsonl"
    rel.write_text("".join(_json.dumps({**r, "clock": "relative", **{
        k: r[k] - t0 + 0.25 for k in ("t_send", "t_first_token", "t_last_token")}}) + "\n"
        for r in rows))
    args = ["cluster", str(two_node_run_set), "--requests", str(rel)]
    human = CliRunner().invoke(main, args)
    assert "note: alignment: anchor (ESTIMATE" in human.output, human.output
    notes = _json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)["meta"][
        "request_log_notes"]
    assert any(n.startswith("alignment: anchor (ESTIMATE") for n in notes), notes
    # the second method (every node's series held) says the same
    from rdmascope.analysis.cluster_reduce import cluster_summary

    caps = sorted(p for p in two_node_run_set.iterdir() if (p / "manifest.json").exists())
    res = cluster_summary(caps, requests=rel, method="series")
    assert res.requests.attrs["notes"] == notes
