"""``rdmascope export perfetto``: the trace read back (protobuf through the perfetto package's own
message classes, JSON with the json module) against rates computed by hand from the readings.

The hand-made capture reads two twin devices exactly every 1 ms (zero read bracket), so each
1 ms window holds exactly one sampling interval: its Gb/s is the counter step x 4 bytes x 8 /
1 ms, computed here from the raw values without rdmascope's re-binning.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from click.testing import CliRunner

from rdmascope.cli import main

N = 300
TWINS = [{"name": "rocep1s0f1", "pci": "0000:01:00.1"},
         {"name": "roceP2p1s0f1", "pci": "0002:01:00.1"}]
RESET_AT = 200  # device B's counter goes back at reading 200: window 199 is unknown


def _steps():
    a = np.full(N - 1, 25_000, np.int64)  # 100 kB per ms = 0.8 Gb/s
    a[100:110] = 2_500_000                # 10 MB per ms = 80 Gb/s for 10 ms: one burst
    b = np.full(N - 1, 12_500, np.int64)  # 0.4 Gb/s
    return a, b


@pytest.fixture
def capture(tmp_path):
    a, b = _steps()
    va = np.concatenate([[1_000], 1_000 + np.cumsum(a)])
    vb = np.concatenate([[5_000_000], 5_000_000 + np.cumsum(b)])
    vb[RESET_AT:] -= 5_000_000  # a reset: the value goes down
    readings = {
        0: [(T0 + k * MS, 0, int(va[k]), STATUS_OK) for k in range(N)],
        1: [(T0 + k * MS, 0, int(vb[k]), STATUS_OK) for k in range(N)],
    }
    path = write_capture(tmp_path / "cap", [ib("rocep1s0f1", "tx"), ib("roceP2p1s0f1", "tx")],
                         readings, devices=TWINS)
    log = tmp_path / "requests.jsonl"
    log.write_text(json.dumps({
        "request_id": "r1", "t_send": (T0 + 90 * MS) / 1e9, "t_first_token": (T0 + 112 * MS) / 1e9,
        "t_last_token": (T0 + 250 * MS) / 1e9, "prompt_tokens": 4096, "output_tokens": 64,
        "clock": "CLOCK_MONOTONIC"}) + "\n")
    return path, log


def _expected():
    """Gb/s per 1 ms window k (readings k and k+1), by hand; NaN where unknown."""
    a, b = _steps()
    ga = a * 4 * 8 / 1e6          # bytes x 8 bit / 1e-3 s / 1e9 = Gb/s
    gb = (b * 4 * 8 / 1e6).astype(float)
    gb[RESET_AT - 1] = np.nan
    return {"rocep1s0f1/tx": ga.astype(float), "roceP2p1s0f1/tx": gb,
            "link:rocep1s0f1+roceP2p1s0f1/tx": ga + gb}


def _step_values(ts: np.ndarray, vs: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Value a counter track shows at instants ``at`` (the last sample at or before; NaN before)."""
    i = np.searchsorted(ts, at, side="right") - 1
    out = np.where(i >= 0, vs[np.maximum(i, 0)], np.nan)
    return out


def _check(counters: dict, slices: dict, t0: int):
    exp = _expected()
    starts = t0 + np.arange(N - 1) * MS
    for series, e in exp.items():
        ts, vs = counters[f"{series} Gb/s"]
        assert np.all(np.diff(ts) > 0)
        ok = ~np.isnan(e)
        got = _step_values(np.asarray(ts), np.asarray(vs), starts)
        np.testing.assert_allclose(got[ok], e[ok], rtol=1e-9)
        # the unknown window is never given a value: no sample inside it, and it is marked
        bad = starts[~ok]
        assert not np.isin(ts, bad).any()
        if len(bad):
            holes = slices[f"{series} no data"]
            assert [(h[0], h[1]) for h in holes] == [(int(bad[0]), int(bad[0]) + MS)]
        # equal consecutive values are written once: B's 0.4 Gb/s is 2 samples, not 298
    assert len(counters["roceP2p1s0f1/tx Gb/s"][0]) == 2
    # one burst on A and on the link: the 10 ms at 80 Gb/s (capacity 100: enter at 25 Gb/s)
    for s in ("rocep1s0f1/tx", "link:rocep1s0f1+roceP2p1s0f1/tx"):
        (b0, b1, name, args), = slices[f"bursts {s}"]
        assert (b0, b1, name) == (t0 + 100 * MS, t0 + 110 * MS, "burst")
        assert args["peak_gbps"] == pytest.approx(exp[s][100:110].max())
        assert args["MB"] == pytest.approx(exp[s][100:110].sum() * 1e-3 / 8 * 1e3)
    assert "bursts roceP2p1s0f1/tx" not in slices
    req = slices["request r1"]
    assert [(s[0], s[1], s[2]) for s in req] == [(t0 + 90 * MS, t0 + 112 * MS, "prefill"),
                                                  (t0 + 112 * MS, t0 + 250 * MS, "decode")]
    assert req[0][3]["prompt_tokens"] == 4096 and req[0][3]["ttft_s"] == pytest.approx(0.022)


def _read_proto(path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    names, counters, slices, open_ = {}, {}, {}, {}
    snap = None
    for p in trace.packet:
        if p.HasField("clock_snapshot"):
            snap = snap or p.clock_snapshot
        if p.HasField("track_descriptor") and p.track_descriptor.name:
            names[p.track_descriptor.uuid] = p.track_descriptor.name
        if not p.HasField("track_event"):
            continue
        assert p.timestamp_clock_id == 3  # BUILTIN_CLOCK_MONOTONIC
        te = p.track_event
        name = names[te.track_uuid]
        if te.type == TrackEvent.TYPE_COUNTER:
            c = counters.setdefault(name, ([], []))
            c[0].append(p.timestamp)
            c[1].append(te.double_counter_value)
        elif te.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = {}
            for a in te.debug_annotations:
                args[a.name] = getattr(a, a.WhichOneof("value"))
            open_[te.track_uuid] = (p.timestamp, te.name, args)
        elif te.type == TrackEvent.TYPE_SLICE_END:
            t0, n, args = open_.pop(te.track_uuid)
            slices.setdefault(name, []).append((t0, p.timestamp, n, args))
    assert snap is not None and snap.primary_trace_clock == 3
    return counters, slices


def test_perfetto_protobuf_tracks_match_hand_computed_rates(capture, tmp_path):
    pytest.importorskip("perfetto.trace_builder.proto_builder")
    cap, log = capture
    out = tmp_path / "t.pftrace"
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), "--requests", str(log),
                                  "--capacity", "100", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "CLOCK_MONOTONIC" in r.output
    counters, slices = _read_proto(out)
    _check(counters, slices, T0)


def test_chrome_json_tracks_match_hand_computed_rates(capture, tmp_path):
    cap, log = capture
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), "--requests", str(log),
                                  "--capacity", "100", "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())  # strict JSON: no NaN
    assert doc["otherData"]["clock"] == "CLOCK_MONOTONIC"
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    counters, slices = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            c = counters.setdefault(e["name"], ([], []))
            c[0].append(round(e["ts"] * 1e3))
            c[1].append(e["args"]["Gb/s"])
        elif e["ph"] == "X":
            slices.setdefault(threads[(e["pid"], e["tid"])], []).append(
                (round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3), e["name"], e["args"]))
    _check(counters, slices, T0)


def test_realtime_clock_shifts_every_track_by_the_clock_pair(capture, tmp_path):
    cap, log = capture
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), "--requests", str(log),
                                  "--capacity", "100", "--clock", "realtime", "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    off = 1_700_000_000 * 10**9  # the builder's clock pair: realtime = monotonic + this
    first = min(e["ts"] for e in doc["traceEvents"] if e["ph"] == "C")
    # float microseconds near 1.7e15 keep ~0.25 us: compare to 1 us
    assert first == pytest.approx((T0 + off) / 1e3, abs=1.0)


def test_several_hosts_need_the_realtime_clock_unless_they_are_one_run(tmp_path, capture):
    import shutil

    from rdmascope.emulator.cluster import REALTIME_ZERO_NS
    from rdmascope.emulator.model import make_scenario, simulate
    from rdmascope.emulator.simcapture import simulate_capture

    cap, _ = capture
    other = simulate_capture(tmp_path / "other", simulate(make_scenario("single4k")),
                             host="node-b", start_realtime_ns=REALTIME_ZERO_NS + 7200 * 10**9)
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), str(other), "-o",
                                  str(tmp_path / "t.json")])
    assert r.exit_code == 4  # not one run (no overlap): no shared axis but the wall clock
    assert r.output.startswith("Error:") and "--clock realtime" in r.output
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), str(other), "--clock",
                                  "realtime", "-o", str(tmp_path / "t.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "t.json").read_text())
    procs = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert len(procs) == 2 and any(p.startswith("node-b ") for p in procs)
    del shutil


def test_missing_output_directory_is_a_usage_error(capture, tmp_path):
    cap, _ = capture
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), "-o",
                                  str(tmp_path / "nope" / "t.json")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_from_to_keeps_the_range_on_the_capture_start_grid(capture, tmp_path):
    cap, log = capture
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), "--requests", str(log),
                                  "--capacity", "100", "--from", "95ms", "--to", "0.15",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    ts = [round(e["ts"] * 1e3) for e in doc["traceEvents"] if e["ph"] == "C"
          and e["name"] == "rocep1s0f1/tx Gb/s"]
    assert ts[0] == T0 + 95 * MS and max(ts) < T0 + 150 * MS
    assert all((t - T0) % MS == 0 for t in ts)  # windows stay on the capture-start grid
    vals = {round(e["ts"] * 1e3): e["args"]["Gb/s"] for e in doc["traceEvents"]
            if e["ph"] == "C" and e["name"] == "rocep1s0f1/tx Gb/s"}
    assert vals[T0 + 100 * MS] == pytest.approx(_expected()["rocep1s0f1/tx"][100])
    bursts = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "burst"]
    assert len(bursts) == 2  # the device's and the link's, both inside the range
    assert {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"} >= {"prefill", "decode"}


@pytest.mark.parametrize("name", ["x.json", "x.pftrace"])
def test_capture_with_one_reading_is_refused_as_peaks_refuses_it(tmp_path, name):
    """One reading per counter (a record stopped within its first interval): nothing to
    difference. peaks refuses it; export perfetto did write an empty trace and exit 0. Now the
    same one-line error (exit 4, bad content) and no trace file."""
    if name.endswith(".pftrace"):
        pytest.importorskip("perfetto.trace_builder.proto_builder")
    path = write_capture(tmp_path / "one", [ib("rocep1s0f1", "tx")],
                         {0: [(T0, 0, 1_000, STATUS_OK)]}, devices=TWINS[:1])
    peaks = CliRunner().invoke(main, ["peaks", str(path)])
    assert peaks.exit_code == 4, peaks.output
    r = CliRunner().invoke(main, ["export", "perfetto", str(path), "-o", str(tmp_path / name)])
    assert r.exit_code == 4, r.output
    errors = [x for x in r.output.splitlines() if x.startswith("Error:")]
    assert errors == [f"Error: capture {path} has no RDMA byte intervals (fewer than two valid "
                      "readings per counter)"], r.output
    assert "Traceback" not in r.output and not (tmp_path / name).exists()


def test_a_run_set_is_placed_on_the_references_clock_with_the_refined_offsets(tmp_path):
    """Three hosts of one run, wall clocks 30 ms apart: the trace puts every host on the first
    host's CLOCK_MONOTONIC with the offsets cluster refines (said in the metadata), and the
    dataset carries each host's offset as a column; both match the emulator's truth."""
    import pyarrow.dataset as ds

    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

    tr = simulate(make_scenario("demo"), TrafficConfig(link=link_config("emulated100")), seed=3)
    truth = simulate_cluster(tmp_path / "run", tr, ClusterSpec(nodes=3, clock_error_ns=30 * MS,
                                                               seed=5))
    paths = [str(tmp_path / "run" / n["host"]) for n in truth["nodes"]]
    want = {n["host"]: n["offset_to_reference_ns"] for n in truth["nodes"]}
    walls = [n["wall_clock_error_ns"] for n in truth["nodes"]]
    assert max(walls) - min(walls) > 5 * MS  # the wall clocks alone would be visibly off
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", *paths, "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    meta = doc["otherData"]
    assert meta["clock"] == "CLOCK_MONOTONIC of spark-01" and meta["reference"] == "spark-01"
    for h, off in meta["offsets_ns"].items():
        assert abs(off - want[h]) < 0.2 * MS, h
    # each host's counter samples sit at its own window starts plus its offset
    pid = {e["args"]["name"].split()[0]: e["pid"] for e in doc["traceEvents"]
           if e["name"] == "process_name"}
    from rdmascope.analysis.load import load_capture

    for k, h in enumerate(["spark-01", "spark-02", "spark-03"]):
        first = min(e["ts"] for e in doc["traceEvents"] if e["ph"] == "C"
                    and e["pid"] == pid[h])
        t0 = load_capture(paths[k]).t_start_ns
        assert abs(first * 1e3 - (t0 + meta["offsets_ns"][h])) < 2 * MS, h
    d = tmp_path / "ds"
    r = CliRunner().invoke(main, ["export", "dataset", *paths, "-o", str(d)])
    assert r.exit_code == 0, r.output
    t = ds.dataset(d, format="parquet", partitioning="hive").to_table(
        columns=["host", "ref_offset_ns"]).to_pandas()
    got = t.groupby("host")["ref_offset_ns"].agg(["min", "max"])
    for h in want:
        assert got.loc[h, "min"] == got.loc[h, "max"] == meta["offsets_ns"][h]
    # a capture exported alone has no reference: the column is null
    r = CliRunner().invoke(main, ["export", "dataset", paths[1], "-o", str(tmp_path / "one")])
    assert r.exit_code == 0, r.output
    one = ds.dataset(tmp_path / "one", format="parquet", partitioning="hive").to_table()
    assert one.column("ref_offset_ns").null_count == one.num_rows


def test_a_range_reads_only_its_segments_and_gives_the_whole_loads_trace(tmp_path, monkeypatch):
    from rdmascope.analysis.load import load_capture
    from rdmascope.analysis.timeline import build_timeline, load_capture_range, write_chrome_json

    from rdmascope.emulator import simcapture
    from rdmascope.emulator.model import TrafficConfig, link_config, plan_scenario, simulate
    from rdmascope.emulator.simcapture import simulate_capture

    tr = simulate(plan_scenario(["P2"], rounds=3, warmup=False),
                  TrafficConfig(link=link_config("emulated100")))
    monkeypatch.setattr(simcapture, "ROLL_INTERVAL_S", 20)  # 10 segments of 20 s
    cap = simulate_capture(tmp_path / "long", tr, host="spark-01")
    whole = load_capture(cap)
    t0 = whole.t_start_ns
    part = load_capture_range(cap, t0 + 60 * 10**9 - 2 * 10**9, t0 + 70 * 10**9 + 2 * 10**9)
    assert 0 < len(part.readings) <= 0.45 * len(whole.readings)  # 4 of 10 segments  # segments skipped unread
    assert part.t_start_ns == whole.t_start_ns  # the grid's origin: the capture's start
    assert abs(part.t_end_ns - whole.t_end_ns) < 10 * MS  # the manifest's stop
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), "--from", "60", "--to", "70",
                                  "-o", str(tmp_path / "range.json")])
    assert r.exit_code == 0, r.output
    write_chrome_json(build_timeline([whole], from_s=60, to_s=70), tmp_path / "whole.json")
    write_chrome_json(build_timeline([part], from_s=60, to_s=70), tmp_path / "part.json")
    got = json.loads((tmp_path / "part.json").read_text())["traceEvents"]
    want = json.loads((tmp_path / "whole.json").read_text())["traceEvents"]
    assert got == want


def test_counter_tracks_apply_peaks_rule_over_line_at_line_gap_and_unknown(tmp_path):
    """A 320 Gb/s window on a 100 Gb/s port read 319.8 on the counter track with no flag. Now,
    as ``peaks``: the over-line window is drawn at the line rate (100) and marked by an
    "over line rate (kept out)" slice naming its raw rate; a window above the line rate by less
    than its timing uncertainty (100.8 Gb/s) is at line rate, 100; gap-spread windows keep their
    value and are marked; an unknown window (reset) has no value (a "no data" slice), never 0."""
    n = 200
    units = np.full(n - 1, 250_000, np.int64)   # 1 MB per ms = 8 Gb/s
    units[50] = 10_000_000                      # 40 MB in 1 ms = 320 Gb/s: over line
    units[60] = 3_150_000                       # 12.6 MB = 100.8 Gb/s: at line rate
    vals = np.concatenate([[0], np.cumsum(units)])
    vals[150:] = vals[150:] - vals[150] + 1     # a reset at reading 150: window 149 unknown
    skip = {80, 81, 82}                         # missed sweeps: a 4 ms interval (gap)
    rd = {0: [(T0 + k * MS, 0, int(vals[k]), STATUS_OK) for k in range(n) if k not in skip]}
    dev = [{"name": "rocep1s0f1", "pci": "0000:01:00.1",
            "ports": [{"port": 1, "rate": "100 Gb/sec (4X EDR)", "rate_gbps": 100.0}]}]
    cap = write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx")], rd, devices=dev)
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["export", "perfetto", str(cap), "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    ts, vs, slices = [], [], {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C" and e["name"] == "rocep1s0f1/tx Gb/s":
            ts.append(round(e["ts"] * 1e3))
            vs.append(e["args"]["Gb/s"])
        elif e["ph"] == "X":
            slices.setdefault(threads[(e["pid"], e["tid"])], []).append(
                (round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3), e["name"], e["args"]))
    ts, vs = np.asarray(ts), np.asarray(vs)
    at = _step_values(ts, vs, T0 + np.arange(n - 1) * MS)
    assert max(vs) == 100.0, max(vs)                 # nothing drawn above the line rate
    assert at[50] == 100.0 and at[60] == 100.0       # over line, and at line rate
    assert at[10] == pytest.approx(8.0) and at[100] == pytest.approx(8.0)
    kept = slices["rocep1s0f1/tx kept out"]
    over = [s for s in kept if s[2] == "over line rate (kept out)"]
    assert [(s[0], s[1]) for s in over] == [(T0 + 50 * MS, T0 + 51 * MS)], kept
    assert over[0][3]["raw_max_gbps"] == pytest.approx(320.0) and over[0][3]["line_gbps"] == 100
    gaps = [s for s in kept if s[2] == "gap: bytes spread (kept out)"]
    assert gaps and all(T0 + 78 * MS <= s[0] and s[1] <= T0 + 84 * MS for s in gaps), kept
    assert not any(s[0] <= T0 + 60 * MS < s[1] for s in kept)  # at line rate: not kept out
    # the unknown window: no sample in it, a "no data" slice, never a zero
    assert not np.isin(ts, [T0 + 149 * MS]).any() and 0.0 not in vs
    assert [(h[0], h[1]) for h in slices["rocep1s0f1/tx no data"]] == \
        [(T0 + 149 * MS, T0 + 150 * MS)]
