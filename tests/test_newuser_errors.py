"""What a new user ran into (s3 new-user trial): usage errors with the right exit code, the run
set directory accepted by ``cluster`` as ``compare`` accepts it, and a path that is no capture
named as such."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from rdmascope.sampler.faketree import build_device

from rdmascope.cli import main
from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate


@pytest.fixture(scope="module")
def run_set(two_node_run_set):
    return two_node_run_set  # conftest: two emulated hosts and the client's log


@pytest.mark.parametrize("args, option", [
    (["--duration", "0s"], "--duration"),
    (["--duration", "0ms", "--interval", "1ms"], "--duration"),
    (["--rt-priority", "1000"], "--rt-priority"),
    (["--rt-priority", "0"], "--rt-priority"),
])
def test_record_bad_option_values_are_usage_errors_and_write_nothing(tmp_path, args, option):
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, ["record", "-o", str(out), "--sysfs-root", str(root),
                                  "--no-status", *args])
    assert r.exit_code == 2, r.output
    assert f"'{option}'" in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_cluster_takes_the_run_set_directory(run_set):
    """``cluster DIR`` gives what ``cluster DIR/spark-*`` gives (the glob ``DIR/*`` would also
    pick up the requests.jsonl and truth.json that ``simulate capture --nodes`` writes there)."""
    caps = sorted(str(p) for p in run_set.iterdir() if p.is_dir())
    assert len(caps) == 2 and (run_set / "requests.jsonl").is_file()
    by_dir = CliRunner().invoke(main, ["cluster", str(run_set), "--json"])
    by_caps = CliRunner().invoke(main, ["cluster", *caps, "--json"])
    assert by_caps.exit_code == 0, by_caps.output
    assert by_dir.exit_code == by_caps.exit_code, by_dir.output
    a, b = json.loads(by_dir.stdout), json.loads(by_caps.stdout)
    assert a["meta"]["verdict"] == b["meta"]["verdict"] == "PASS"
    assert len(a["nodes"]) == 2
    # what each node's map cost (CPU, wall, RSS of this run) is a measurement, not a result
    costs = [set(x["meta"].pop("maps", {})) for x in (a, b)]
    assert costs[0] == costs[1]
    assert a == b
    # one capture alone is still refused, saying what to give
    r = CliRunner().invoke(main, ["cluster", caps[0]])
    assert r.exit_code == 2 and "at least two hosts" in r.output


def test_compare_names_a_path_that_is_no_capture(run_set, tmp_path):
    notcap = tmp_path / "notcap"
    notcap.mkdir()
    (notcap / "x").write_text("hi\n")
    r = CliRunner().invoke(main, ["compare", str(run_set), str(notcap)])
    assert r.exit_code == 4, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and f"{notcap}: has no manifest.json" in line[0]
    assert "is one capture" not in r.output


SIM = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"


def _unwritable_cases(d: Path) -> list[list[str]]:
    return [["report", str(SIM), "-o", str(d / "rep")],
            ["plot", "windows", str(SIM), "-o", str(d / "f.png")],
            ["export", "perfetto", str(SIM), "-o", str(d / "t.json")],
            ["export", "dataset", str(SIM), "-o", str(d / "ds")]]


def _assert_refused_up_front(r, d: Path) -> None:
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and "cannot write in" in line[0] and str(d) in line[0]
    assert "loading" not in r.output and "reading" not in r.output  # no analysis ran
    assert list(d.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a mode-555 directory")
def test_unwritable_output_directory_is_refused_before_the_analysis(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        for args in _unwritable_cases(d):
            _assert_refused_up_front(CliRunner().invoke(main, args), d)
    finally:
        d.chmod(0o755)


def test_unwritable_output_directory_is_refused_before_the_analysis_as_root(tmp_path,
                                                                            monkeypatch):
    """The same as root, where only a read-only file system refuses: access(2) is made to
    answer EACCES for that one directory (the check is what the commands call)."""
    import rdmascope.cli.output as out_mod

    d = tmp_path / "ro"
    d.mkdir()
    real = os.access
    monkeypatch.setattr(out_mod.os, "access",
                        lambda p, mode, **kw: False if Path(p) == d else real(p, mode, **kw))
    for args in _unwritable_cases(d):
        _assert_refused_up_front(CliRunner().invoke(main, args), d)


def test_failed_dataset_export_leaves_no_empty_directories(tmp_path):
    """A capture whose segment is cut short fails the export (exit 4, the file named) and
    leaves neither an empty dataset directory nor an empty host= partition behind; a partition
    written earlier into the same dataset stays."""
    import shutil

    trunc = tmp_path / "trunc"
    shutil.copytree(SIM, trunc)
    seg = sorted((trunc / "segments").glob("*.parquet"))[0]
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])
    ds = tmp_path / "ds"
    r = CliRunner().invoke(main, ["export", "dataset", str(trunc), "-o", str(ds)])
    assert r.exit_code == 4, r.output
    assert "seg-000000.parquet" in r.output and "Traceback" not in r.output
    assert not ds.exists()
    # into a dataset that already holds the good capture: that partition is kept untouched
    r = CliRunner().invoke(main, ["export", "dataset", str(SIM), "-o", str(ds)])
    assert r.exit_code == 0, r.output
    before = sorted(str(p.relative_to(ds)) for p in ds.rglob("*"))
    r = CliRunner().invoke(main, ["export", "dataset", str(trunc), "-o", str(ds)])
    assert r.exit_code == 4, r.output
    assert sorted(str(p.relative_to(ds)) for p in ds.rglob("*")) == before


def test_report_refuses_the_same_capture_twice_before_the_analysis(tmp_path):
    r = CliRunner().invoke(main, ["report", str(SIM), str(SIM), "-o", str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and "same capture" in line[0] and str(SIM) in line[0]
    assert "loading" not in r.output and not (tmp_path / "r").exists()


def test_compare_warns_when_a_run_set_failed_its_emulation_check(tmp_path):
    """B's set has a node that missed NCCL_IB_HCA: the timing table still compares the sets,
    but a warning near the top says B's set FAILed and names the node (it was only in the
    per-node table at the end)."""
    sc = make_scenario("single4k")
    ta = simulate(sc, TrafficConfig(link=link_config("200")), seed=3)
    tb = simulate(sc, TrafficConfig(link=link_config("emulated100")), seed=3)
    simulate_cluster(tmp_path / "a", ta, ClusterSpec(nodes=3, clock_error_ns=5_000_000, seed=1))
    truth = simulate_cluster(tmp_path / "b", tb, ClusterSpec(nodes=3, clock_error_ns=5_000_000,
                                                             misconfigured=1, seed=2))
    bad = [n["host"] for n in truth["nodes"] if n["role"]]
    assert bad == ["spark-02"], truth["nodes"]
    r = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert r.exit_code == 1, r.output  # a FAIL verdict is shown (README's exit codes)
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("WARNING: B:")]
    assert len(warn) == 1 and "FAIL" in warn[0] and "spark-02" in warn[0], r.stderr
    assert not any(ln.startswith("WARNING: A:") for ln in r.stderr.splitlines())


def test_cluster_heatmap_labels_fit_in_the_figure():
    """With pooled columns the colour bar's label ran past the figure's edge (cut off in the
    report); every label must lie inside the figure, and the pooling is still said."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    import pandas as pd
    from rdmascope.analysis.figures import plot_cluster_heatmap

    idx = pd.Index(np.arange(6000) * 1_000_000, name="window_start_ns")
    rng = np.random.default_rng(0)
    rates = pd.DataFrame(rng.uniform(0, 120, (6000, 3)), index=idx,
                         columns=["spark-01", "spark-02", "spark-03"])
    ax = plot_cluster_heatmap(rates, max_columns=1600)  # 6000 / 1600 -> 4 ms per column
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.bbox
    texts = [a.xaxis.label for a in fig.axes] + [a.yaxis.label for a in fig.axes]
    for t in texts:
        if t.get_text():
            e = t.get_window_extent(r)
            assert e.x0 >= box.x0 - 1 and e.x1 <= box.x1 + 1, t.get_text()
            assert e.y0 >= box.y0 - 1 and e.y1 <= box.y1 + 1, t.get_text()
    assert "highest 1 ms rate of 4 ms" in ax.get_xlabel()


@pytest.mark.parametrize("cmd", [["simulate", "capture", "-o"], ["simulate", "serve", "--root"],
                                 ["demo", "-o"]])
def test_emulated_cluster_size_is_bounded(tmp_path, cmd):
    """--nodes 100000 wrote node after node until killed; it is a usage error now, with the
    limit said, and nothing is written."""
    from rdmascope.cli.simulate import MAX_NODES

    out = tmp_path / "x"
    r = CliRunner().invoke(main, [*cmd, str(out), "--nodes", "100000"])
    assert r.exit_code == 2, r.output
    # demo: 1 (one node) or 3..MAX_NODES (the cluster demo), both said
    low = 3 if cmd[0] == "demo" else 1
    assert "'--nodes'" in r.output and f"{low}<=x<={MAX_NODES}" in r.output
    assert not out.exists()


@pytest.mark.parametrize("spec, says", [("prompt=abc", "not a list of integers"),
                                        ("prompt=0,concurrency=1,output=1", ">= 1 token"),
                                        ("P9", "P9")])
def test_bad_scenario_spec_is_a_usage_error(tmp_path, spec, says):
    out = tmp_path / "x"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(out), "--scenario", spec])
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and "'--scenario'" in line[0] and says in line[0]
    assert not out.exists()


@pytest.mark.parametrize("top", [220, 400])
def test_close_capacity_labels_do_not_overlap(top):
    """The report's 'twin PCIe link bound 126 Gb/s' and 'one PCIe x4 path ~109 Gb/s' labels
    printed over each other on every rate figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rdmascope.analysis.figures import _draw_capacities

    fig, ax = plt.subplots(figsize=(8, 3))
    _draw_capacities(ax, {"port 200 Gb/s": 200, "twin PCIe link bound 126 Gb/s": 126,
                          "one PCIe x4 path ~109 Gb/s": 109})
    ax.set_ylim(0, top)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    # only the bounds that matter are drawn: the port rate and the lowest bound of the path
    # (the twin PCIe bound between them is left out), each labelled once
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 2 and any("200" in t for t in texts) and any("109" in t for t in texts), \
        texts
    boxes = [t.get_window_extent(r) for t in ax.texts]
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (ax.texts[i].get_text(),
                                                     ax.texts[j].get_text())
    plt.close(fig)


def test_unclean_end_does_not_claim_a_kill(tmp_path):
    """A recorder stopped by a full disk cannot write its stop record either; inspect said
    'the recorder was killed' for it."""
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(SIM, cap)
    m = json.loads((cap / "manifest.json").read_text())
    m["stop"] = None  # what the recorder leaves until its clean stop
    (cap / "manifest.json").write_text(json.dumps(m))
    r = CliRunner().invoke(main, ["inspect", str(cap)])
    assert r.exit_code == 0, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("UNCLEAN END")]
    assert len(line) == 1 and "full disk" in line[0], r.output


@pytest.mark.parametrize("args, option", [(["rates", str(SIM), "--window", "-1ms"], "--window"),
                                          (["peaks", str(SIM), "--windows", "1ms,-5ms"],
                                           "--windows")])
def test_negative_duration_is_called_negative(args, option):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and f"'{option}'" in line[0] and "cannot be negative" in line[0]


def test_chrome_json_export_with_bursts_that_have_no_physical_peak(tmp_path):
    """A burst made only of over-line windows has no physical peak (NaN): the Chrome JSON export
    failed with 'Out of range float values are not JSON compliant: nan' (the demo's own capture
    hit it) and left half a file. --link-gbps 50 makes such bursts on the fixture."""
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(SIM), "--link-gbps", "50",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())  # strict JSON: no NaN
    bursts = [e for e in doc["traceEvents"] if e.get("name") == "burst"]
    assert bursts
    no_peak = [e for e in bursts if "peak_gbps" not in e["args"]]
    assert no_peak, "expected bursts of over-line windows alone at 50 Gb/s"
    for e in no_peak:  # what is known instead: the raw peak above the line, and how many
        assert e["args"]["raw_peak_gbps"] > 50 and e["args"]["over_line_windows"] >= 1


def test_run_set_from_after_to_is_one_usage_error(run_set):
    """peaks on two hosts with --from 3 --to 2.5 aligned the clocks, then printed an Error per
    node and 'run set: FAIL: spark-01, spark-02' with exit 1, as if the nodes had failed."""
    caps = sorted(str(p) for p in run_set.iterdir() if p.is_dir())
    r = CliRunner().invoke(main, ["peaks", *caps, "--from", "3", "--to", "2.5"])
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and "'--to'" in line[0] and "must be after --from" in line[0]
    assert "aligning" not in r.output and "FAIL" not in r.output


def test_export_perfetto_refuses_a_range_after_the_capture(tmp_path):
    """`export perfetto cap --from 100` (a 10 s capture) wrote an empty trace and exited 0;
    rates and peaks refuse the same range."""
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(SIM), "--from", "100", "-o", str(out)])
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and "'--from'" in line[0] and "after the capture's end" in line[0]
    assert not out.exists()
    r = CliRunner().invoke(main, ["export", "perfetto", str(SIM), "--from", "2", "--to", "3",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["traceEvents"]


def test_demo_stopped_by_sigterm_leaves_no_tree_and_no_process(tmp_path):
    """`timeout 30 rdmascope demo` left /dev/shm/rdmascope-demo-<pid>-<link> behind (SIGTERM
    skipped the cleanup). The demo is stopped once its first emulated tree exists."""
    import contextlib
    import shutil
    import signal
    import subprocess
    import sys
    import time

    psutil = pytest.importorskip("psutil")
    from rdmascope.emulator.demo import _tmpfs_dir

    p = subprocess.Popen([sys.executable, "-m", "rdmascope", "demo", "-o", str(tmp_path / "d")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pattern = f"rdmascope-demo-{p.pid}-*"
    try:
        deadline = time.monotonic() + 120
        while not list(_tmpfs_dir().glob(pattern)):
            assert p.poll() is None and time.monotonic() < deadline, "the demo did not start"
            time.sleep(0.1)
        children = psutil.Process(p.pid).children(recursive=True)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 128 + signal.SIGTERM
        assert list(_tmpfs_dir().glob(pattern)) == []
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert alive == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for c in locals().get("children", []):  # a failing run must not leave a recorder
            with contextlib.suppress(psutil.NoSuchProcess):
                c.kill()
        for d in _tmpfs_dir().glob(pattern):
            shutil.rmtree(d, ignore_errors=True)


def test_rates_parquet_is_not_left_short_when_a_later_segment_is_corrupt(tmp_path):
    """`rates --parquet OUT` on a capture whose third segment has a flipped bit exited 1 but left
    OUT as a valid Parquet file holding the first two minutes: a shorter result that reads as
    complete. Now OUT is written only when complete; an earlier OUT is left as it was."""
    cap = tmp_path / "cap"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(cap), "--scenario",
                                  "prompt=1024,concurrency=1,output=4,rounds=2,gap=70"])
    assert r.exit_code == 0, r.output
    segs = sorted((cap / "segments").glob("seg-*.parquet"))
    assert len(segs) >= 3
    out = tmp_path / "r.parquet"
    r = CliRunner().invoke(main, ["rates", str(cap), "--window", "1s", "--parquet", str(out)])
    assert r.exit_code == 0, r.output
    good = out.read_bytes()
    b = bytearray(segs[2].read_bytes())
    b[len(b) // 2] ^= 0x10
    segs[2].write_bytes(bytes(b))
    out2 = tmp_path / "r2.parquet"
    for target in (out2, out):
        r = CliRunner().invoke(main, ["rates", str(cap), "--window", "1s", "--parquet",
                                      str(target), "--force"])  # replacing OUT is asked for
        assert r.exit_code == 4, r.output
        assert segs[2].name in r.output and "SHA-256" in r.output
    assert not out2.exists()
    assert out.read_bytes() == good  # the earlier, complete result is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "r.parquet"]  # no .part left


def _killed_capture(path, roll_every=None):
    """A capture as a recorder leaves it while still writing or after kill -9: no stop record,
    the newest readings only in the live Arrow IPC segment. 40 ms of a 4 MB/ms link."""
    from capture_builders import MS, STATUS_OK, T0, ib, write_capture

    counters = [ib("rocep1s0f1", "tx"), ib("rocep1s0f1", "rx")]
    readings = {c: [(T0 + k * MS, 2000, 1_000_000 * k, STATUS_OK) for k in range(41)]
                for c in (0, 1)}
    return write_capture(path, counters, readings, close=False, roll_every=roll_every)


@pytest.mark.parametrize("roll_every", [None, 10])
def test_a_live_or_killed_capture_spans_its_live_segment(tmp_path, roll_every):
    """Before, a capture without a stop record ended at its last closed segment (or at its
    start): attribute refused every request in the live tail as 'outside the capture'."""
    from capture_builders import MS, T0
    from rdmascope.analysis import load_capture, stream

    cap = _killed_capture(tmp_path / "c", roll_every)
    assert list(cap.glob("live-*.arrow"))
    info = stream.open_capture(cap)
    assert not info.clean_end
    assert info.t_end_ns == T0 + 40 * MS  # the last reading's t_before
    assert load_capture(cap).t_end_ns >= info.t_end_ns
    log = tmp_path / "requests.jsonl"
    log.write_text(json.dumps({"request_id": "r0", "t_send": (T0 + 30 * MS) / 1e9,
                               "t_first_token": (T0 + 35 * MS) / 1e9,
                               "t_last_token": (T0 + 38 * MS) / 1e9,
                               "prompt_tokens": 100, "output_tokens": 4}) + "\n")
    r = CliRunner().invoke(main, ["attribute", str(cap), "--requests", str(log), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # the capture's note is on stderr, after it
    (row,) = out["requests"]
    # 4 MB per ms (1e6 units x 4 bytes), readings mid-bracket: prefill 5 ms = 20 MB
    assert row["prefill_tx_bytes"] == pytest.approx(20e6, rel=1e-6)


@pytest.mark.parametrize("cmd", [["attribute", "{a}", "--requests", "{log}"],
                                 ["compare", "{a}", "{b}", "--requests-a", "{log}"],
                                 ["compare", "{a}", "{b}", "--requests-b", "{log}"],
                                 ["report", "{a}", "--requests", "{log}", "-o", "{out}"],
                                 ["export", "perfetto", "{a}", "--requests", "{log}",
                                  "-o", "{out}/t.json"]])
def test_a_missing_request_log_is_a_usage_error_everywhere(tmp_path, cmd):
    """The README: a missing path is a usage error (exit 2). attribute and compare said exit 4
    for a --requests file that does not exist, report/export/plot exit 2."""
    log = tmp_path / "nope.jsonl"
    args = [c.format(a=SIM, b=SIM, log=log, out=tmp_path) for c in cmd]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert str(log) in r.output and "does not exist" in r.output


def test_collectives_names_an_empty_inspector_file(tmp_path):
    """An empty --inspector file was refused naming the capture ('CAPTURE: no collective record
    in the Inspector files'), not the file that held nothing."""
    empty = tmp_path / "rank0.log"
    empty.write_text("")
    r = CliRunner().invoke(main, ["collectives", str(SIM), "--inspector", str(empty)])
    assert r.exit_code == 4, r.output
    assert f"{empty}: no NCCL Inspector record" in r.output and "Traceback" not in r.output


def test_inspect_of_a_capture_being_recorded_does_not_call_it_an_unclean_end(tmp_path):
    """inspect said 'BEING RECORDED by pid N' and, lines below, 'sampling quality (computed from
    readings (no audit: unclean end))' for the same capture."""
    from capture_builders import MS, STATUS_OK, T0, ib, write_capture

    from rdmascope.capture import recording_pid

    rd = {0: [(T0 + k * MS, 1000, 250 * k, STATUS_OK) for k in range(50)]}
    cap = write_capture(tmp_path / "live", [ib("rocep1s0f1", "tx")], rd, close=False)
    if recording_pid(cap) is None:
        pytest.skip("the test writer released the capture's lock")
    r = CliRunner().invoke(main, ["inspect", str(cap)])
    assert r.exit_code == 0, r.output
    assert "BEING RECORDED" in r.output and "unclean end" not in r.output.lower(), r.output
    assert "still being recorded" in r.output


REQLOGS = Path(__file__).resolve().parent / "data" / "requestlogs"


def _line_logs() -> dict[str, str]:
    """Request logs written line by line (JSON Lines, CSV, appended runs), each as its tool
    leaves it when done."""
    trt = json.loads((REQLOGS / "kinds" / "trtllm_bench_request_info.json").read_text())
    run = json.dumps(json.loads((REQLOGS / "vllm_serve_result.json").read_text()))
    return {"native.jsonl": (REQLOGS / "native.jsonl").read_text(),
            "native.csv": (REQLOGS / "native.csv").read_text(),
            "aiperf.jsonl": (REQLOGS / "aiperf_profile_export.jsonl").read_text(),
            "trtllm.jsonl": "".join(json.dumps(r) + "\n" for r in trt),
            "multiturn.csv": (REQLOGS / "kinds" / "vllm_multiturn_raw_data.csv").read_text(),
            "sglang.jsonl": (REQLOGS / "kinds" / "sglang_bench_serving_two_runs.jsonl")
            .read_text(),
            "vllm-append.json": run + "\n" + run}  # vLLM --append-result: no newline at the end


@pytest.mark.parametrize("name", list(_line_logs()))
def test_a_request_log_whose_last_line_was_cut_mid_write_loses_only_that_line(tmp_path, name):
    """A benchmark killed while writing its last line left a log attribute refused (exit 4):
    that line alone is skipped now, with a note naming it; the same cut line anywhere else, or
    followed by a newline (a complete line), is still an error naming it."""
    from rdmascope.analysis.requestlogs import RequestLogError, read_request_log

    lines = _line_logs()[name].rstrip("\n").split("\n")
    head = "\n".join(lines[:-1]) + "\n"
    cut = lines[-1][: len(lines[-1]) // 2]
    whole = tmp_path / f"whole-{name}"
    whole.write_text(head)
    p = tmp_path / name
    p.write_text(head + cut)
    log = read_request_log(p)
    want = read_request_log(whole)
    assert len(log.requests) == len(want.requests) > 0
    note = [n for n in log.notes if "truncated" in n]
    assert len(note) == 1 and f"{p}: line {len(lines)}: truncated" in note[0], log.notes
    for bad in (head + cut + "\n",                          # the cut line is complete
                head + cut + "\n" + lines[-1] + "\n"):      # a line after it
        p.write_text(bad)
        with pytest.raises(RequestLogError) as e:
            read_request_log(p)
        assert e.value.row == len(lines), str(e.value)


def test_attribute_says_it_skipped_a_cut_last_request(tmp_path):
    log = tmp_path / "requests.jsonl"
    lines = (SIM.parent / "sim-p4-200" / "requests.jsonl").read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])
    r = CliRunner().invoke(main, ["attribute", str(SIM.parent / "sim-p4-200"),
                                  "--requests", str(log)])
    assert r.exit_code == 0, r.output
    assert f"{log}: line {len(lines)}: truncated (the file ends inside it" in r.output


#: every command that takes captures, with what else it needs ({cap}: the path under test)
_CAPTURE_COMMANDS = {
    "rates": ["rates", "{cap}", "--window", "1s"],
    "peaks": ["peaks", "{cap}"],
    "bursts": ["bursts", "{cap}"],
    "verify-emulation": ["verify-emulation", "{cap}", "--expect-single"],
    "attribute": ["attribute", "{cap}"],
    "inspect": ["inspect", "{cap}"],
    "cluster": ["cluster", "{cap}", str(SIM)],
    "collectives": ["collectives", "{cap}", "--inspector", str(SIM / "requests.jsonl")],
    "compare": ["compare", "{cap}", str(SIM)],
    "report": ["report", "{cap}", "-o", "{tmp}/rep"],
    "plot": ["plot", "windows", "{cap}", "-o", "{tmp}/f.png"],
    "export perfetto": ["export", "perfetto", "{cap}", "-o", "{tmp}/t.json"],
    "export dataset": ["export", "dataset", "{cap}", "-o", "{tmp}/ds"],
}


@pytest.mark.parametrize("kind", ["missing", "a file", "no capture"])
@pytest.mark.parametrize("name", list(_CAPTURE_COMMANDS))
def test_a_capture_path_gets_the_same_exit_code_in_every_command(tmp_path, name, kind):
    """`peaks /nonexistent` exited 2, a directory that is no capture 4; compare and plot said
    'no request log' (2) for a directory that is no capture, inspect 4 for a file. Now: a path
    that does not exist or is a file is a usage error (2) in every command; a directory that
    exists but is no capture is a data error (4) naming it (exitcodes.py)."""
    if kind == "missing":
        cap = tmp_path / "nope"
    elif kind == "a file":
        cap = tmp_path / "f.txt"
        cap.write_text("hi\n")
    else:
        cap = tmp_path / "notcap"
        cap.mkdir()
        (cap / "x").write_text("hi\n")
    args = [a.format(cap=cap, tmp=tmp_path) for a in _CAPTURE_COMMANDS[name]]
    r = CliRunner().invoke(main, args)
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and str(cap) in line[0] and "Traceback" not in r.output, r.output
    if kind == "no capture":
        assert r.exit_code == 4, r.output
        assert "has no manifest.json; not an rdmascope capture" in line[0]
    else:
        assert r.exit_code == 2, r.output
        assert ("does not exist" if kind == "missing" else "is a file") in line[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({cap.name} - {"nope"})


#: every option naming an output, with the command around it ({out}: the path under test)
_OUTPUT_OPTIONS = [
    ["rates", str(SIM), "--window", "1s", "--parquet", "{out}"],
    ["peaks", str(SIM), "--parquet", "{out}"],
    ["bursts", str(SIM), "--parquet", "{out}"],
    ["attribute", str(SIM), "--parquet", "{out}"],
    ["verify-emulation", str(SIM), "--parquet", "{out}"],
    ["estimate", "--parquet", "{out}"],
    ["plot", "windows", str(SIM), "-o", "{out}.png"],
    ["report", str(SIM), "-o", "{out}"],
    ["export", "perfetto", str(SIM), "-o", "{out}.json"],
    ["export", "dataset", str(SIM), "-o", "{out}"],
    ["record", "-o", "{out}", "--duration", "1s"],
    ["simulate", "capture", "-o", "{out}"],
    ["simulate", "serve", "--root", "{out}"],
    ["simulate", "serve", "--out", "{out}"],
    ["demo", "-o", "{out}"],
]


@pytest.mark.parametrize("args", _OUTPUT_OPTIONS, ids=lambda a: " ".join(
    x for x in a if not x.startswith(("/", "{"))))
def test_an_output_in_a_missing_directory_is_one_usage_error_everywhere(tmp_path, args):
    """plot/report/export/record refused -o in a missing directory (exit 2); rates --parquet
    exited 4 naming its hidden '.r.parquet.part-PID', peaks/bursts/attribute 4 after the whole
    analysis, simulate capture and demo created the missing directories. Now every output
    option is refused before any work, naming the option and the user's path."""
    out = tmp_path / "nodir" / "out"
    r = CliRunner().invoke(main, [a.format(out=out) for a in args])
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and f"{tmp_path / 'nodir'} does not exist" in line[0], r.output
    assert ".part" not in r.output and "Traceback" not in r.output
    assert not (tmp_path / "nodir").exists()


def test_rates_parquet_write_error_names_the_users_path(tmp_path, monkeypatch):
    """A Parquet write that fails (a full disk) named the hidden temporary file; it names the
    path the user gave, and nothing is left beside it."""
    import pyarrow.parquet as pq

    def refuse(where, *a, **kw):
        raise OSError(f"Failed to open local file '{where}'. Detail: [errno 28] No space left")

    monkeypatch.setattr(pq, "ParquetWriter", refuse)
    out = tmp_path / "r.parquet"
    r = CliRunner().invoke(main, ["rates", str(SIM), "--window", "1s", "--parquet", str(out)])
    assert r.exit_code == 4, r.output
    assert f"{out}: cannot write Parquet (Failed to open local file '{out}'" in r.output
    assert ".part" not in r.output and list(tmp_path.iterdir()) == []


def _required_manifest_keys():
    from rdmascope.capture import REQUIRED_MANIFEST_KEYS

    return REQUIRED_MANIFEST_KEYS


@pytest.mark.parametrize("key", [k for k in _required_manifest_keys()
                                 if k not in ("format", "format_version")])
def test_a_manifest_without_a_required_key_is_refused_naming_it(tmp_path, key):
    """A manifest without 'devices' was read as a capture of no known device (every line rate
    unknown, exit 0); every required key (capture.MANIFEST_FIELDS) is refused alike: exit 4,
    naming the manifest, the key and what it must hold. (format and format_version missing
    make it no capture or an unsupported one, said before.)"""
    import shutil

    from rdmascope.capture import MANIFEST_FIELDS

    assert "devices" in _required_manifest_keys()
    cap = tmp_path / "cap"
    shutil.copytree(SIM, cap)
    m = json.loads((cap / "manifest.json").read_text())
    del m[key]
    (cap / "manifest.json").write_text(json.dumps(m))
    for cmd in (["inspect", str(cap)], ["peaks", str(cap)]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 4, (cmd, r.output)
        line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
        assert len(line) == 1 and f"{cap / 'manifest.json'}: manifest lacks required key(s): " \
            f"'{key}' ({MANIFEST_FIELDS[key][1]})" in line[0], r.output


def test_device_changes_of_the_wrong_type_are_refused_naming_the_key(tmp_path):
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(SIM, cap)
    m = json.loads((cap / "manifest.json").read_text())
    m["device_changes"] = "mlx5_0 renamed"
    (cap / "manifest.json").write_text(json.dumps(m))
    r = CliRunner().invoke(main, ["inspect", str(cap)])
    assert r.exit_code == 4, r.output
    assert "manifest key 'device_changes' must be a list of objects" in r.output


def test_verify_emulation_quotes_the_headline_peak_and_labels_the_raw_max(tmp_path):
    """The report's verdict line (verify-emulation's message) quoted the raw 1 ms maximum
    ('peak 118.2 Gb/s at 1 ms') beside the report's capped headline ('1 ms peak 100 Gb/s'):
    the streamed measurement did not cap a window above the line rate within its timing
    uncertainty as peaks does. Now its peak is peaks' headline and the raw max is labelled."""
    emu = SIM.parent / "sim-p2-emulated100"
    pk = json.loads(CliRunner().invoke(main, ["peaks", str(emu), "--link-gbps", "100",
                                              "--windows", "1ms", "--json"]).stdout)["peaks"]
    mine = [p for p in pk if p["series"].startswith("rocep1s0f1/") and p["window"] == "1 ms"]
    head, raw = max(p["peak_gbps"] for p in mine), max(p["raw_max_gbps"] for p in mine)
    assert head == 100.0 and raw > 110, mine
    r = CliRunner().invoke(main, ["verify-emulation", str(emu), "--link-gbps", "100", "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)
    dev = {d["device"]: d for d in v["devices"]}["rocep1s0f1"]
    assert dev["peak_1ms_gbps"] == head and dev["raw_max_1ms_gbps"] == pytest.approx(raw)
    said = f"peak {head:.1f} Gb/s at 1 ms, raw max {raw:.1f} Gb/s"
    assert said in v["meta"]["message"], v["meta"]["message"]
    r = CliRunner().invoke(main, ["report", str(emu), "--link-gbps", "100", "-o",
                                  str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "rep" / "report.html").read_text()
    assert said in page and f"peak {raw:.1f} Gb/s" not in page


_WINDOW_COMMANDS = [["rates", str(SIM)], ["bursts", str(SIM)],
                    ["export", "perfetto", str(SIM), "-o", "{tmp}/t.json"]]
_RANGE = (["--from", "2", "--to", "4"], "the range 2 s to 4 s (2.0 s)")


@pytest.mark.parametrize("args, extra, what", [
    *[(a, [], "the capture (10.8 s)") for a in _WINDOW_COMMANDS],
    *[(a, *_RANGE) for a in _WINDOW_COMMANDS],
    (["plot", "devices", str(SIM), "-o", "{tmp}/d.png"], [], "the capture (10.8 s)"),
], ids=lambda a: " ".join(x for x in a[:2] if "/" not in x) if isinstance(a, list) else None)
def test_a_window_longer_than_the_capture_is_a_usage_error(tmp_path, args, extra, what):
    """`rates --window 1000s` on a 10.8 s capture printed one diluted window flagged only P
    (partly covered). A --window longer than what it re-bins is refused (exit 2) naming it, in
    every command taking one --window; nothing is written."""
    a = [x.format(tmp=tmp_path) for x in args] + extra + ["--window", "1000s"]
    r = CliRunner().invoke(main, a)
    assert r.exit_code == 2, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(line) == 1 and "'--window'" in line[0], r.output
    assert f"window 1000 s is longer than {what}" in line[0], line[0]
    assert list(tmp_path.iterdir()) == []
    # the longest window that fits is accepted
    fits = "10.8s" if not extra else "2s"
    assert f"give at most {fits}" in line[0]
    if args[0] != "plot":
        r = CliRunner().invoke(main, a[:-1] + [fits])
        assert r.exit_code == 0, r.output


def test_peaks_says_a_width_longer_than_the_capture_has_no_window(run_set):
    """peaks takes several widths (its default 1 s is longer than a short capture): a width
    given that no whole window fits is said in a note, its rows stay '-'; on a run set too."""
    r = CliRunner().invoke(main, ["peaks", str(SIM), "--windows", "1ms,1000s"])
    assert r.exit_code == 0, r.output
    assert ("note: window 1000 s is longer than the capture (10.8 s): no whole 1000 s window "
            "fits") in r.stderr
    caps = sorted(str(p) for p in run_set.iterdir() if p.is_dir())
    r = CliRunner().invoke(main, ["rates", *caps, "--window", "1000s"])
    assert r.exit_code == 2 and "window 1000 s is longer than the capture" in r.output, r.output


@pytest.mark.parametrize("by, source", [("direction", "infiniband"), ("direction", "all"),
                                        ("device", "infiniband"), ("device", "all")])
def test_rates_by_a_key_states_the_line_rate_of_what_each_column_sums(by, source):
    """`rates --by direction` listed each device's line rate under columns tx and rx, which are
    no device's: the footer gives the rate each column is judged against (the over-line flag's
    own, overline_pass.OverLineFlagger.lines), named by its column; a column that adds netdev
    statistics (--source all) has none, and says so."""
    from rdmascope.analysis import OverLineFlagger

    cap = SIM.parent / "sim-p1-tcp-fallback"
    r = CliRunner().invoke(main, ["rates", str(cap), "--window", "1s", "--by", by,
                                  "--source", source, "--json"])
    assert r.exit_code == 0, r.output
    meta = json.loads(r.stdout)["meta"]
    cols = [c[:-5] for c in json.loads(r.stdout)["rates"][0] if c.endswith("_gbps")]
    assert sorted(meta["line_rates"]) == sorted(cols), (meta["line_rates"], cols)
    flag = OverLineFlagger(cap, by=by, source=None if source == "all" else source)
    for col, rate in meta["line_rates"].items():
        assert rate["gbps"] == flag.lines[col], (col, rate, flag.lines)
    human = CliRunner().invoke(main, ["rates", str(cap), "--window", "1s", "--by", by,
                                      "--source", source]).output
    said = [ln for ln in human.splitlines() if ln.startswith("line rate ")]
    assert sorted(ln.split(":")[0][len("line rate "):] for ln in said) == sorted(cols), said
    if by == "direction" and source == "infiniband":
        assert all("of every device summed (roceP2p1s0f1, rocep1s0f1)" in ln for ln in said)
        assert all(": 200 Gb/s: port rate" in ln for ln in said), said
    if source == "all":
        assert all("never judged" in ln for ln in said), said
