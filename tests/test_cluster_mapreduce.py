"""The cluster view as map and reduce: each node's summary (one streamed pass) against today's
method holding every node's whole 1 ms series (``method="series"``), the local process pool
against the serial map, Ray against the pool, and captures that cannot be judged."""

import json
import os
import shutil
import time

import numpy as np
import pytest
from click.testing import CliRunner
from rdmascope.analysis import cluster_align
from rdmascope.analysis.cluster_map import SummaryView
from rdmascope.analysis.cluster_reduce import cluster_summary

from rdmascope.cli import main
from rdmascope.emulator.cluster import REALTIME_ZERO_NS, ClusterSpec, simulate_cluster
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate
from rdmascope.emulator.simcapture import simulate_capture

MS = 1_000_000


@pytest.fixture(scope="module")
def cset(tmp_path_factory):
    d = tmp_path_factory.mktemp("mapreduce")
    tr = simulate(make_scenario("demo"), TrafficConfig(link=link_config("emulated100")), seed=3)
    truth = simulate_cluster(d, tr, ClusterSpec(nodes=6, clock_error_ns=50 * MS,
                                                misconfigured=2, straggler=4, seed=7))
    paths = [d / n["host"] for n in truth["nodes"]]
    series = cluster_summary(paths, requests=d / "requests.jsonl", method="series")
    summary = cluster_summary(paths, requests=d / "requests.jsonl", engine="serial")
    return d, truth, paths, series, summary


def assert_same(a, b, *, offset_ns=0.02 * MS, bpr_rel=1e-3):
    """Verdicts, offsets within ``offset_ns``, stragglers and bytes per request equal."""
    assert a.verdict == b.verdict and a.failing == b.failing and a.expect == b.expect
    for x, y in zip(a.run_set.nodes, b.run_set.nodes, strict=True):
        assert x.host == y.host
        assert abs(x.offset_ns - y.offset_ns) <= offset_ns, x.host
    na, nb = a.nodes.set_index("host"), b.nodes.set_index("host")
    assert list(na["verdict"]) == list(nb["verdict"])
    assert np.allclose(na["tx_bytes"], nb["tx_bytes"], rtol=1e-6)
    assert np.allclose(na["rx_bytes"], nb["rx_bytes"], rtol=1e-6)
    for c in ("peak_1ms_gbps", "peak_5ms_gbps", "peak_100ms_gbps", "peak_1s_gbps"):
        assert np.allclose(na[c], nb[c], equal_nan=True), c
    if "bytes_per_request" in na:
        assert list(na["requests"]) == list(nb["requests"])
        assert np.allclose(na["bytes_per_request"], nb["bytes_per_request"], rtol=bpr_rel)
        assert list(na["flag"]) == list(nb["flag"])
    sa, sb = a.stragglers.set_index("host"), b.stragglers.set_index("host")
    assert list(sa["finding"]) == list(sb["finding"])


def test_summaries_give_todays_results(cset):
    _, truth, _, series, summary = cset
    assert_same(series, summary, offset_ns=0)  # one piece: the same numbers
    assert summary.failing == ["spark-03"]
    s = summary.stragglers.set_index("host")
    assert list(s.index[s["finding"] == "compute straggler"]) == ["spark-05"]
    # the straggler's lateness from its own bursts is today's within 0.05 ms
    t = series.stragglers.set_index("host")
    assert abs(s.loc["spark-05", "late_ms"] - t.loc["spark-05", "late_ms"]) < 0.05
    assert series.warnings == summary.warnings


def test_the_summary_is_small_and_does_not_hold_the_series(cset, monkeypatch):
    d, _, paths, series, _ = cset
    # with short pieces and a short head/tail the summary keeps a bounded part of the 1 ms
    # series and the alignment, cross-correlating pieces, still finds today's offsets
    monkeypatch.setattr(cluster_align, "EXCERPT_NS", 6_000 * MS)
    monkeypatch.setattr(cluster_align, "PIECES", 3)
    monkeypatch.setattr(cluster_align, "TIMING_NS", 9_000 * MS)
    monkeypatch.setattr(cluster_align, "SLOTS", 3)
    from rdmascope.analysis import cluster_reduce

    real = cluster_reduce.make_plan

    plans = []

    def short_head(*a, **k):
        plan, grids = real(*a, **k)
        assert plan.edge_ns == 2 * plan.pad_ns + 2 * MS  # the refined span ends fall inside
        assert len(plan.edges_ref) == 2
        plans.append(plan)
        return plan, grids

    monkeypatch.setattr(cluster_reduce, "make_plan", short_head)
    got = cluster_summary(paths, requests=d / "requests.jsonl", engine="serial")
    assert_same(series, got, offset_ns=0.02 * MS)
    for s, ser in zip(got.summaries, series.series, strict=True):
        kept = sum(len(p[1]) for p in s.pieces)
        assert kept < 0.75 * len(ser.cum_tx)  # not the whole series
        held = sum(a.nbytes + b.nbytes for _, a, b in (*s.pieces, *s.edges))
        assert 0 < len(s.bursts["start_ns"]) < 0.75 * series.stragglers["bursts"].max()
        assert held < 0.8 * (ser.cum_tx.nbytes + ser.cum_rx.nbytes)
        # the span's ends: near the capture's ends and within edge_ns of the planned ones
        assert sum(len(e[1]) for e in s.edges) <= 4 * (2 * plans[0].edge_ns // MS + 2)
    # outside its pieces a node's 1 ms bytes are unknown (NaN), never 0
    v = SummaryView(got.summaries[1])
    lo, hi = got.span_ns
    mid = np.arange((lo + hi) // 2, (lo + hi) // 2 + 50 * MS, MS) - got.run_set.nodes[1].offset_ns
    inside = v.cum_at(mid)
    assert np.isnan(inside).any() or np.isfinite(inside).all()


def test_dropping_each_nodes_pieces_once_aligned_changes_nothing(cset):
    """``keep_series=False`` (the ``cluster`` command): each node's 1 ms pieces go once it is
    aligned against the reference's; the answers are the same, and the summaries keep only
    their edges (the span's ends) at 1 ms."""
    d, _, paths, _, summary = cset
    lean = cluster_summary(paths, requests=d / "requests.jsonl", engine="local", jobs=2,
                           keep_series=False)
    assert_same(summary, lean, offset_ns=0, bpr_rel=0)
    assert summary.warnings == lean.warnings
    for a, b in zip(summary.nodes["tx_bytes"], lean.nodes["tx_bytes"], strict=True):
        assert a == b  # from the edges, the same 1 ms values as from the pieces
    assert all(not s.pieces and s.edges for s in lean.summaries)
    assert summary.timing.equals(lean.timing)


def test_a_node_whose_summary_comes_before_the_references_waits_for_it(cset):
    """The reduce's fold aligns each node as its summary comes in; one that comes before the
    reference's is aligned when the reference's does: the same offsets as aligning at the end."""
    import copy

    from rdmascope.analysis import cluster_reduce as R
    from rdmascope.analysis.cluster import open_run_set

    _, _, paths, _, _ = cset
    rs = open_run_set(paths)
    plan, grids = R.make_plan(rs, capacity_gbps=100.0, max_lag_ns=200 * MS)
    sums = R.run_maps(rs, plan, engine="serial")
    fold = R._Fold(rs, grids, refine=True, keep_series=False, max_lag_ns=200 * MS)
    late = copy.deepcopy(sums)
    for k in reversed(range(len(late))):  # the reference (0) last
        fold(k, late[k])
        assert (k == 0) == (not fold.waiting)
    fold.finish()
    a, b = copy.deepcopy(rs), copy.deepcopy(rs)
    cluster_align.align_summaries(a, [SummaryView(s) for s in sums], sums, grids)
    cluster_align.align_summaries(b, None, None, grids, answers=fold.answers)
    assert [n.offset_ns for n in a.nodes] == [n.offset_ns for n in b.nodes]
    assert [n.offset_unc_ns for n in a.nodes] == [n.offset_unc_ns for n in b.nodes]
    assert a.warnings == b.warnings
    assert all(not s.pieces for s in late)


def test_burst_medians_over_nodes_are_pandas_group_medians():
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1e6, size=(7, 300)).round() + 1e12
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:, 5] = np.nan
    import pandas as pd

    df = pd.DataFrame({"burst": np.tile(np.arange(300), 7), "v": x.ravel()})
    want = df.groupby("burst")["v"].median().to_numpy()
    got = cluster_align._median_over_nodes(x)
    assert np.array_equal(got, want, equal_nan=True)


def test_the_process_pool_gives_the_serial_results(cset):
    d, _, paths, _, summary = cset
    pool = cluster_summary(paths, requests=d / "requests.jsonl", engine="local", jobs=2)
    assert_same(summary, pool, offset_ns=0, bpr_rel=0)
    for a, b in zip(summary.summaries, pool.summaries, strict=True):
        assert np.array_equal(a.ends, b.ends) and np.array_equal(a.req_sum, b.req_sum)


def test_the_command_starts_its_pool_first_and_answers_as_serially(cset):
    """``cluster`` starts its pool's workers before it imports the analysis modules
    (``mappool.start_pool``: every worker at once, importing while the command does); its
    answer is the serial one, and each node's map ran in one of the pool's workers."""
    from rdmascope.mappool import start_pool

    with start_pool(2) as ex:  # both workers started at once (not one per task as it comes)
        assert len(ex._processes) == 2
        assert os.getpid() not in {f.result() for f in [ex.submit(os.getpid) for _ in range(4)]}
    d, _, paths, _, _ = cset
    args = ["cluster", *map(str, paths), "--requests", str(d / "requests.jsonl"), "--json"]
    runs = [CliRunner().invoke(main, [*args, "--jobs", j]) for j in ("1", "2")]
    assert all(r.exit_code == 1 for r in runs), runs[1].output  # FAIL: spark-03
    serial, pool = (json.loads(r.stdout) for r in runs)
    maps = [x["meta"].pop("maps") for x in (serial, pool)]
    assert {m["pid"] for m in maps[0].values()} == {os.getpid()}
    # every map ran in a worker, none in the command's own process; which of the two workers
    # took how many is up to the scheduler (on a loaded machine one may take them all)
    pool_pids = {m["pid"] for m in maps[1].values()}
    assert os.getpid() not in pool_pids and 1 <= len(pool_pids) <= 2
    assert serial == pool


def test_a_missing_an_unreadable_and_another_runs_capture_are_named(cset, tmp_path):
    d, truth, paths, _, _ = cset
    gone = tmp_path / "spark-09"  # never recorded
    bad = tmp_path / "spark-10"
    shutil.copytree(paths[1], bad)
    (bad / "manifest.json").write_text("{not json")
    tr = simulate(make_scenario("single4k"))
    later = simulate_capture(tmp_path / "late", tr, host="spark-11",
                             start_realtime_ns=REALTIME_ZERO_NS + 3_600 * 10**9)
    broken = tmp_path / "spark-12"  # a readable manifest, unreadable segments
    shutil.copytree(paths[2], broken)
    m = json.loads((broken / "manifest.json").read_text())
    m["host"] = "spark-12"
    (broken / "manifest.json").write_text(json.dumps(m))
    segs = list(broken.glob("**/*.parquet"))
    assert segs
    for f in segs:
        f.write_bytes(b"garbage")
    caps = [*paths, bad, later, broken]
    res = cluster_summary(caps + [gone], requests=d / "requests.jsonl", engine="serial")
    assert set(res.failed) == {"spark-09", "spark-10", "spark-11", "spark-12"}
    assert "unreadable" in res.failed["spark-10"] and str(bad) in res.failed["spark-10"]
    assert "another run" in res.failed["spark-11"]
    assert res.verdict == "FAIL"  # spark-03 still fails; the rest is judged
    assert "spark-03" in res.failing and "spark-11" in res.failing
    s = res.stragglers.set_index("host")
    assert list(s.index[s["finding"] == "compute straggler"]) == ["spark-05"]
    r = CliRunner().invoke(main, ["cluster", *map(str, caps), "--json", "--jobs", "1"])
    assert r.exit_code == 1, r.output
    meta = json.loads(r.output)["meta"]
    assert {"spark-11", "spark-12"} <= set(meta["failed"]) and "Traceback" not in r.output
    # without the failing node, a set with an unreadable capture cannot be judged: exit 3
    ok = [p for p, t in zip(paths, truth["nodes"], strict=True) if t["host"] != "spark-03"]
    r = CliRunner().invoke(main, ["cluster", *map(str, ok), str(broken), "--jobs", "2"])
    assert r.exit_code == 3, r.output
    assert "not judged: spark-12" in r.output


def test_engine_ray_without_ray_says_how_to_get_it(cset, monkeypatch):
    import importlib.util

    _, _, paths, _, _ = cset
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    r = CliRunner().invoke(main, ["cluster", *map(str, paths[:2]), "--engine", "ray"])
    assert r.exit_code == 2 and "pip install 'rdmascope[ray]'" in r.output
    r = CliRunner().invoke(main, ["cluster", *map(str, paths[:2]), "--address", "auto"])
    assert r.exit_code == 2 and "--engine ray" in r.output


def test_ray_placement_by_host_name():
    from rdmascope.analysis.cluster_ray import placement

    nodes = [{"NodeID": "a", "NodeManagerHostname": "spark-01.lab", "Alive": True},
             {"NodeID": "b", "NodeManagerHostname": "spark-02", "Alive": False},
             {"NodeID": "c", "NodeManagerHostname": "spark-03", "Alive": True}]
    assert placement("spark-01", nodes) == "a"
    assert placement("spark-03", nodes) == "c"
    assert placement("spark-02", nodes) is None  # dead: run anywhere (shared FS)
    assert placement("spark-04", nodes) is None


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install "
                                            "'rdmascope[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_pools_results(cset, local_ray):
    d, _, paths, _, summary = cset
    res = cluster_summary(paths, requests=d / "requests.jsonl", engine="ray")
    assert_same(summary, res, offset_ns=0, bpr_rel=0)
    assert all(getattr(s, "ran_on", None) for s in res.summaries)


def test_a_failing_ray_task_is_retried_once_then_that_nodes_failure(cset, local_ray,
                                                                     tmp_path):
    from rdmascope.analysis.cluster_ray import run_maps_ray

    _, _, paths, _, _ = cset
    log = tmp_path / "attempts"

    class Boom:
        """A plan that makes the map raise (not a capture problem: an exception in the task)
        and counts the attempts: each one appends a line (defined here, so Ray's cloudpickle
        sends the class by value to its workers)."""

        def __init__(self, path):
            self.path = str(path)

        @property
        def capacity_gbps(self):
            with open(self.path, "a") as f:
                f.write(f"{os.getpid()}\n")
            raise RuntimeError("planted failure")

    t = time.monotonic()
    out = run_maps_ray([(str(paths[0]), Boom(log), 0, "spark-01", 0)], timeout_s=300)
    assert time.monotonic() - t < 300  # reported, never a hang
    attempts = log.read_text().splitlines()
    assert len(attempts) == 2, attempts  # the first try and exactly one retry
    assert out[0].error and "planted failure" in out[0].error and "spark-01" in out[0].error


def test_ray_finds_the_captures_on_its_nodes_and_names_a_missing_one(cset, local_ray, tmp_path):
    from rdmascope.analysis.cluster_ray import locate

    _, _, paths, _, _ = cset
    gone = str(tmp_path / "spark-09")
    opened, where = locate([*map(str, paths[:2]), gone])
    assert set(opened) == set(where) == {str(paths[0]), str(paths[1])}
    res = cluster_summary([*paths[:3], gone], engine="ray")
    assert list(res.failed) == ["spark-09"] and "on any Ray node" in res.failed["spark-09"]
    assert res.verdict == "FAIL" and res.failing == ["spark-03", "spark-09"]


def test_a_map_worker_allocates_so_its_memory_follows_what_it_holds():
    """``worker_memory`` (the pool's initializer, the Ray task's first step): Arrow on the
    system allocator (not its own pool, which keeps every segment's pages) and glibc's mmap
    threshold fixed, Arrow decoding on one thread (the other workers have the other cores); in
    a fresh process, as a worker is. The ``cluster`` command's own process keeps Arrow's
    threads (it maps alone with --jobs 1)."""
    import subprocess
    import sys

    for call, threads in (("worker_memory()", "1"),
                          ("worker_memory(arrow_threads=None)", "default")):
        code = ("import pyarrow as pa\n"
                "n = pa.cpu_count()\n"
                "from rdmascope.analysis.cluster_map import worker_memory\n"
                f"{call}\n"
                "print(pa.default_memory_pool().backend_name,\n"
                "      'default' if pa.cpu_count() == n else pa.cpu_count())\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split()[-2:] == ["system", threads]
