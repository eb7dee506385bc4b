"""NCCL Inspector records against emulated all-reduces whose sizes and times are known, and the
emulator writing both witnesses (`simulate capture`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from rdmascope.analysis.nccl.inspector import (
    InspectorError,
    expected_wire_bytes,
    read_inspector,
    read_prometheus,
)

from rdmascope.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("insp") / "cap"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(out), "--link", "emulated100",
                                  "--scenario", "P1", "--rounds", "1", "--output-tokens", "8",
                                  "--seed", "4"])
    assert r.exit_code == 0, r.output
    assert "NCCL log:" in r.output and "Inspector records:" in r.output
    return out


def test_expected_bytes_formula():
    # ring all-reduce over 8 ranks: 2 x 7/8 = 1.75 x the message per rank (nccl-tests)
    assert expected_wire_bytes("AllReduce", 1_000_000, 8) == pytest.approx(1_750_000)
    assert expected_wire_bytes("AllGather", 1_000, 4) == 3_000
    assert np.isnan(expected_wire_bytes("Mystery", 1, 2))


def test_records_match_the_emulated_allreduces(run):
    from rdmascope.emulator.model import simulate  # noqa: F401  (the model wrote the truth)

    recs = read_inspector([run / "nccl-inspector"])
    truth = json.loads((run / "truth.json").read_text())
    arch = truth["config"]["arch"]
    ar = recs[recs["coll"] == "AllReduce"]
    # every message is tokens x hidden x bytes: a multiple of hidden x bytes per value
    assert (ar["size_bytes"] % (arch["hidden"] * arch["bytes_per_value"]) == 0).all()
    assert (recs["placement"] == "kernel").all()
    r = CliRunner().invoke(main, ["collectives", str(run), "--inspector", str(run / "nccl-inspector"),
                                  "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    rows = doc["collectives"]
    assert len(rows) == len(recs)
    # bytes conserved: all the wire bytes the model played during the collectives are the
    # capture's collective bytes (truth totals), within the counters' timing uncertainty
    total_exp = sum(x["expected_bytes"] for x in rows)
    tx_total = truth["totals_bytes"]["rocep1s0f1/tx"]
    assert total_exp == pytest.approx(tx_total, rel=1e-6)
    bounded = [c for c in doc["size_classes"] if c["isolated"]]
    assert bounded  # the prefill all-reduces stand alone between compute gaps
    for c in bounded:
        # isolated: the exact spans can only lose bytes to idle edges, the widened ones only
        # gain idle time: the truth (wire = expected, ratio 1) lies between
        assert c["ratio_low"] <= 1.0 + 1e-6 and c["ratio_high"] >= 1.0 - 1e-6, c
    # back-to-back (decode) all-reduces tile their pass: their sum is conserved to the edges
    dec = [c for c in doc["size_classes"] if not c["isolated"] and c["coll"] == "AllReduce"]
    for c in dec:
        assert c["ratio"] == pytest.approx(1.0, abs=0.1), c
    # per collective: within one 1 ms reading at each edge of the measured rate
    edge = 2 * 1e-3 * 109e9 / 8  # one 1 ms reading at each edge, at the twin's line rate
    for x in rows:
        assert abs(x["wire_bytes"] - x["expected_bytes"]) <= edge
        assert x["tx_roceP2p1s0f1"] == pytest.approx(0.0, abs=1.0)  # the emulated link


def test_emulator_log_confirms_the_emulation(run):
    r = CliRunner().invoke(main, ["verify-emulation", str(run), "--nccl-log", str(run / "nccl"),
                                  "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["meta"]["nccl_witness"]["status"] == "pass"


def test_bad_inspector_input(tmp_path, run):
    src = next((run / "nccl-inspector").iterdir()).read_text().splitlines()
    future = json.loads(src[0])
    future["metadata"]["inspector_output_format_version"] = "v9.0"
    f = tmp_path / "future.log"
    f.write_text(src[0] + "\n" + json.dumps(future) + "\n")
    with pytest.raises(InspectorError, match=r"future.log: line 2: inspector_output_format_version 'v9.0'"):
        read_inspector([f])
    # a file that ends inside its last record (a rank killed mid-write): that record alone is
    # skipped and said; the records before it are read
    cut = tmp_path / "cut.log"
    cut.write_text(src[0] + "\n" + src[1] + "\n" + src[2][:40])
    recs = read_inspector([cut])
    assert len(recs) == 2 and recs["line"].tolist() == [1, 2]
    assert recs.attrs["notes"] == [f"{cut}: line 3: truncated (the file ends inside it): that "
                                   "record skipped, the 2 lines before it read"]
    r = CliRunner().invoke(main, ["collectives", str(run), "--inspector", str(cut)])
    assert r.exit_code == 0 and "line 3: truncated" in r.output, r.output
    # a record that is not JSON in the middle is an error naming the line
    mid = tmp_path / "mid.log"
    mid.write_text(src[0] + "\n" + src[1][:40] + "\n" + src[2] + "\n")
    with pytest.raises(InspectorError, match=r"mid.log: line 2: not JSON"):
        read_inspector([mid])
    other = tmp_path / "other.log"
    other.write_text('{"level": "info", "msg": "not NCCL"}\n')
    with pytest.raises(InspectorError, match=r"other.log: line 1: no 'header'"):
        read_inspector([other])
    r = CliRunner().invoke(main, ["collectives", str(run), "--inspector", str(f)])
    assert r.exit_code == 4 and "v9.0" in r.output and "Traceback" not in r.output


def test_prometheus_textfile(tmp_path):
    f = tmp_path / "nccl_inspector_metrics_GPU-1234.prom"
    lab = ('version="v5.1",slurm_job_id="unknown",node="spark-01",gpu="GPU0",comm_name="tp",'
           'n_nodes="2",nranks="2",collective="AllReduce",message_size="4-5GB",algo_proto="Ring_ll"')
    f.write_text(f"# HELP x\nnccl_bus_bandwidth_gbs{{{lab}}} 678.263\n"
                 f"nccl_collective_exec_time_microseconds{{{lab}}} 9498.47\n")
    df = read_prometheus([tmp_path])
    assert list(df["metric"]) == ["nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds"]
    assert df["value"].tolist() == [678.263, 9498.47] and set(df["node"]) == {"spark-01"}
    bad = tmp_path / "bad" / "x.prom"
    bad.parent.mkdir()
    bad.write_text("nccl_bus_bandwidth_gbs{node=spark-01} 1\n")
    with pytest.raises(InspectorError, match=r"x.prom: line 1: not a Prometheus sample"):
        read_prometheus([bad])


def test_collectives_on_prometheus_files_says_they_cannot_be_placed(tmp_path, run):
    f = tmp_path / "nccl_inspector_metrics_GPU-1.prom"
    f.write_text('nccl_bus_bandwidth_gbs{node="x",collective="AllReduce",message_size="8-9MB"} 12.5\n')
    r = CliRunner().invoke(main, ["collectives", str(run), "--inspector", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "cannot be placed" in r.output and "12.5" in r.output


def test_records_without_verbose_are_placed_at_their_dump_time(tmp_path, run):
    src = next((run / "nccl-inspector").iterdir()).read_text().splitlines()[:50]
    plain = []
    for line in src:
        rec = json.loads(line)
        del rec["coll_perf"]["event_trace_ts"], rec["coll_perf"]["event_trace_sn"]
        plain.append(json.dumps(rec))
    f = tmp_path / "plain.log"
    f.write_text("\n".join(plain) + "\n")
    verbose = read_inspector([run / "nccl-inspector"]).head(50)
    got = read_inspector([f], dump_slack_us=500)
    assert (got["placement"] == "dump").all() and (got["uncertainty_us"] == 500).all()
    # the dump is 500 us after the end here (the writer's interval): the placement is late by
    # that, never early, and within the stated uncertainty
    late = got["end_us"].to_numpy() - verbose["end_us"].to_numpy()
    assert (late >= 0).all() and (late <= 500 + 1).all()


def test_bursts_get_their_collectives(run):
    r = CliRunner().invoke(main, ["bursts", str(run), "--inspector", str(run / "nccl-inspector"),
                                  "--json"])
    assert r.exit_code == 0, r.output
    bursts = json.loads(r.output)["bursts"]
    assert bursts
    # the emulator sends only inside collectives: every burst overlaps at least one
    assert all(b["collectives"] >= 1 for b in bursts)
    # the first prefill bursts are single all-reduces, in order
    first = [b["nccl"] for b in bursts[:3]]
    assert first == ["AllReduce x1 sn 1", "AllReduce x1 sn 2", "AllReduce x1 sn 3"]


def test_perfetto_gets_a_collectives_track(tmp_path, run):
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(run), "-o", str(out), "--inspector",
                                  str(run / "nccl-inspector")])
    assert r.exit_code == 0, r.output
    ev = json.loads(out.read_text())
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    slices = [e for e in ev if e.get("ph") == "X" and "sn" in (e.get("args") or {})]
    recs = read_inspector([run / "nccl-inspector"])
    assert len(slices) == len(recs)
    # the slice durations are NCCL's exec times (us), on the capture's clock (us)
    assert sorted(s["dur"] for s in slices) == sorted(recs["exec_us"].tolist())


def test_report_shows_the_second_witness(tmp_path, run):
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["report", str(run), "-o", str(out)])
    assert r.exit_code == 0, r.output
    html = (out / "report.html").read_text()
    assert "NCCL&#39;s log and the counters agree" in html
    assert "channels go through rocep1s0f1 only" in html
    assert "NCCL collectives per size class" in html
    assert (out / "tables").is_dir() and any("nccl-collectives" in p.name
                                              for p in (out / "tables").iterdir())


def test_force_replaces_the_emulators_witnesses_but_nothing_else(tmp_path):
    out = tmp_path / "cap"
    args = ["simulate", "capture", "-o", str(out), "--link", "emulated100", "--scenario", "P1",
            "--rounds", "1", "--output-tokens", "4"]
    assert CliRunner().invoke(main, args).exit_code == 0
    r = CliRunner().invoke(main, [*args, "--force"])  # its own nccl/ and nccl-inspector/
    assert r.exit_code == 0, r.output
    (out / "nccl" / "my-notes.txt").write_text("mine")  # not a name the writer gives
    r = CliRunner().invoke(main, [*args, "--force"])
    assert r.exit_code == 4 and "nccl" in r.output
    assert (out / "nccl" / "my-notes.txt").read_text() == "mine"


def test_demo_force_accepts_the_witness_directories(tmp_path):
    from rdmascope.emulator.demo import _demo_run_dir_problem
    from rdmascope.emulator.nccl_log import is_witness_dir

    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(out), "--scenario", "P1",
                                  "--rounds", "1", "--output-tokens", "4"])
    assert r.exit_code == 0, r.output
    assert is_witness_dir(out / "nccl") and is_witness_dir(out / "nccl-inspector")
    assert _demo_run_dir_problem(out) is None
    (out / "nccl-inspector" / "x").mkdir()
    assert not is_witness_dir(out / "nccl-inspector")
    assert "nccl-inspector" in _demo_run_dir_problem(out)


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("insp-cl") / "run"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(out), "--nodes", "2",
                                  "--link", "emulated100", "--clock-error", "30ms",
                                  "--scenario", "P1", "--rounds", "1", "--output-tokens", "8",
                                  "--seed", "4"])
    assert r.exit_code == 0, r.output
    return out


def test_simulate_capture_nodes_writes_both_witnesses_per_node(cluster_run):
    # each node: its NCCL log and its Inspector records (only the log was written), and the
    # records match the traffic that node's counters saw
    for rank, h in enumerate(["spark-01", "spark-02"]):
        node = cluster_run / h
        assert [p.name for p in (node / "nccl").iterdir()] == [f"{h}.{4242 + rank}"]
        assert [p.name for p in (node / "nccl-inspector").iterdir()] == [f"{h}-pid{4242 + rank}.log"]
        recs = read_inspector([node / "nccl-inspector"])
        assert set(recs["host"]) == {h} and (recs["placement"] == "kernel").all()
        r = CliRunner().invoke(main, ["collectives", str(node), "--inspector",
                                      str(node / "nccl-inspector"), "--json"])
        assert r.exit_code == 0, r.output
        rows = json.loads(r.output)["collectives"]
        assert len(rows) == len(recs)
        truth = json.loads((node / "truth.json").read_text())
        # all the node's wire bytes were played inside its collectives, on its own clock
        total_exp = sum(x["expected_bytes"] for x in rows)
        assert total_exp == pytest.approx(truth["totals_bytes"]["rocep1s0f1/tx"], rel=1e-6)
        edge = 2 * 1e-3 * 109e9 / 8  # one 1 ms reading at each edge, at the twin's line rate
        assert all(abs(x["wire_bytes"] - x["expected_bytes"]) <= edge for x in rows)
        r = CliRunner().invoke(main, ["verify-emulation", str(node), "--nccl-log",
                                      str(node / "nccl"), "--json"])
        assert r.exit_code == 0 and json.loads(r.output)["meta"]["nccl_witness"]["status"] == "pass"


def test_simulate_serve_nodes_writes_both_witnesses_per_node(tmp_path):
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    before = time.time_ns()
    res = subprocess.run([sys.executable, "-m", "rdmascope", "simulate", "serve", "--root",
                          str(tmp_path / "root"), "--out", str(out), "--nodes", "2",
                          "--scenario", "single4k", "--output-tokens", "2", "--speed", "10",
                          "--clock-error", "50ms", "--cleanup"],
                         capture_output=True, text=True, timeout=120)
    after = time.time_ns()
    assert res.returncode == 0, res.stderr
    assert f"Inspector records: {out}/<host>/nccl-inspector/" in res.stdout
    truth = json.loads((out / "truth.json").read_text())
    for rank, n in enumerate(truth["nodes"]):
        h = n["host"]
        assert (out / h / "nccl" / f"{h}.{4242 + rank}").is_file()
        recs = read_inspector([out / h / "nccl-inspector"])
        assert len(recs) and set(recs["host"]) == {h}
        # on the node's emulated wall clock: this machine's, off by its wall-clock error
        wall = n["wall_clock_error_ns"] / 1e3
        assert (recs["start_us"] >= before / 1e3 + wall - 1).all()
        assert (recs["start_us"] + recs["exec_us"] <= after / 1e3 + wall + 1).all()


def test_perfetto_run_set_shifts_each_hosts_collectives_by_its_offset(tmp_path, cluster_run):
    # a run set is put on the first host's CLOCK_MONOTONIC, each host's counters plus its
    # refined offset: its collectives must move with them (they stayed on the host's own clock,
    # hours away from its counters)
    hosts = ["spark-01", "spark-02"]
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", *[str(cluster_run / h) for h in hosts],
                                  "-o", str(out),
                                  *[x for h in hosts for x in
                                    ("--inspector", str(cluster_run / h / "nccl-inspector"))]])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    offs = doc["otherData"]["offsets_ns"]
    assert offs["spark-01"] == 0 and abs(offs["spark-02"]) > 3600e9  # boots hours apart
    ev = doc["traceEvents"]
    pid = {e["args"]["name"].split()[0]: e["pid"] for e in ev if e["name"] == "process_name"}
    truth = json.loads((cluster_run / "truth.json").read_text())
    for h in hosts:
        counters = [e["ts"] for e in ev if e["ph"] == "C" and e["pid"] == pid[h]]
        colls = [e for e in ev if e["ph"] == "X" and e["pid"] == pid[h]
                 and "sn" in (e.get("args") or {})]
        assert colls and len(colls) == len(read_inspector([cluster_run / h / "nccl-inspector"]))
        lo, hi = min(counters), max(counters)
        assert all(lo <= c["ts"] and c["ts"] + c["dur"] <= hi for c in colls), h
        # the same place as on the host's own clock, plus its offset (to the emulator's truth
        # within the refinement: well under a 1 ms reading)
        own = json.loads(CliRunner().invoke(main, [
            "collectives", str(cluster_run / h), "--inspector",
            str(cluster_run / h / "nccl-inspector"), "--json"]).output)["collectives"]
        t0 = next(n for n in truth["nodes"] if n["host"] == h)["start_monotonic_ns"]
        first = min(c["ts"] for c in colls) * 1e3
        assert abs(first - (t0 + own[0]["t_start_s"] * 1e9 + offs[h])) < 1e6, h
        # and each of its bursts names the collectives that caused it, on the same axis
        bursts = [e for e in ev if e["ph"] == "X" and e["pid"] == pid[h] and e["name"] == "burst"]
        assert bursts and all(b["args"]["collectives"] >= 1 for b in bursts), h


def test_perfetto_burst_slices_name_their_collectives(tmp_path, run):
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(run), "-o", str(out), "--inspector",
                                  str(run / "nccl-inspector")])
    assert r.exit_code == 0, r.output
    ev = json.loads(out.read_text())
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    tid = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    bursts = [e for e in ev if e.get("ph") == "X" and e["name"] == "burst"
              and tid[e["tid"]] == "bursts rocep1s0f1/tx"]
    assert bursts
    # the emulator sends only inside collectives: each burst names at least one, as
    # `bursts --inspector` does for the same series
    assert all(b["args"]["collectives"] >= 1 and b["args"]["nccl_expected_bytes"] > 0
               for b in bursts)
    r = CliRunner().invoke(main, ["bursts", str(run), "--inspector", str(run / "nccl-inspector"),
                                  "--json"])
    table = [b for b in json.loads(r.output)["bursts"] if b["series"] == "rocep1s0f1/tx"]
    got = sorted(bursts, key=lambda e: e["ts"])
    assert [b["args"]["nccl"] for b in got] == [b["nccl"] for b in table]
    assert [b["args"]["nccl"] for b in got[:3]] == ["AllReduce x1 sn 1", "AllReduce x1 sn 2",
                                                    "AllReduce x1 sn 3"]
    assert [b["args"]["nccl_expected_bytes"] for b in got] == \
        [round(b["nccl_expected_bytes"]) for b in table]


def test_report_bursts_name_their_collectives(tmp_path, run):
    import pandas as pd
    from rdmascope.analysis.load import load_capture
    from rdmascope.analysis.nccl.report import BURST_ROWS, bursts_table

    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["report", str(run), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "Bursts and the NCCL collectives that caused them" in (out / "report.html").read_text()
    (csv,) = [p for p in (out / "tables").iterdir() if p.name.endswith("_nccl-bursts.csv")]
    t = pd.read_csv(csv)
    assert 0 < len(t) <= BURST_ROWS and (t["collectives"] >= 1).all()
    assert t["nccl"].str.fullmatch(r"(AllReduce|AllGather) x\d+ sn \d+(-\d+)?.*").all()
    # a prefill all-reduce alone in its burst: the wire bytes are its expected bytes, to the
    # 1 ms readings at the burst's edges
    one = t[t["collectives"] == 1]
    assert len(one) and ((one["ratio"] - 1).abs() < 0.05).all()
    # a collective NCCL did not record (its record left out): its burst is listed first, with none
    cap = load_capture(run)
    recs = read_inspector([run / "nccl-inspector"])
    sn = int(one["nccl"].iloc[0].split(" sn ")[1])
    got = bursts_table(cap, recs[recs["sn"] != sn])
    lone = got["frame"][got["frame"]["collectives"] == 0]
    assert len(lone) == 1 and lone["nccl"].iloc[0] == "none"
    assert lone["t_start_s"].iloc[0] == pytest.approx(one["t_start_s"].iloc[0], abs=1e-3)
    assert "1 none (traffic NCCL's Inspector did not record" in got["note"]
