"""Unknown is never zero, bytes are conserved: sums over spans with unknown parts.

Every quantity covering a span with an unknown part is NaN (never the known part passed off as
the whole), with the known part beside it, and the splits still add up. The captures are built
by hand with unreadable readings (``requestlog_helpers.build_capture``); every expected value is
computed here from the counter values written.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import align, read_request_log
from rdmascope.analysis.verify import FAIL, PASS
from requestlog_helpers import MS, build_capture

T0 = 1000 * 1_000_000_000
A, B = "rocep1s0f1", "roceP2p1s0f1"
N = 100
PER_MS = {f"{A}/tx": 4000, f"{B}/tx": 8000, f"{A}/rx": 400, f"{B}/rx": 800}


def _capture(path, unreadable=None, n=N):
    return load_capture(build_capture(path, T0, {s: np.full(n, v) for s, v in PER_MS.items()},
                                      unreadable=unreadable))


def _log(path, rows):
    with open(path, "w") as f:
        for i, (s, a, b) in enumerate(rows):
            f.write(json.dumps({"request_id": f"r{i}", "t_send": (T0 + s * MS) / 1e9,
                                "t_first_token": (T0 + a * MS) / 1e9,
                                "t_last_token": (T0 + b * MS) / 1e9, "prompt_tokens": 1000,
                                "output_tokens": 11, "test": "t", "round": 1}) + "\n")
    return read_request_log(path)


def test_conserving_split_totals_are_unknown_with_an_unknown_segment_and_known_parts_add_up(
        tmp_path):
    # B's tx readings 40..44 unreadable: its interval [39, 45) ms has unknown bytes
    cap = _capture(tmp_path / "cap", {f"{B}/tx": (40, 45)})
    log = align(_log(tmp_path / "log.jsonl", [(10, 30, 60), (62, 70, 80)]), cap)
    at = attribute(cap, log)
    s = at.summary
    r = at.requests.set_index("request_id")
    tx_ms = PER_MS[f"{A}/tx"] + PER_MS[f"{B}/tx"]  # 12,000 B per ms, both devices
    rx_ms = PER_MS[f"{A}/rx"] + PER_MS[f"{B}/rx"]
    # the span [0, 100] ms is cut at 10, 30, 60, 62, 70, 80; [30, 60) holds the unknown ms
    known_ms = {"idle": 10 + 2 + 20, "r0 prefill": 20, "r1 prefill": 8, "r1 decode": 10}
    # what the counters read in [30, 60): A's 30 ms and B's 30 - 6 ms (its readable part)
    read_30_60 = 30 * PER_MS[f"{A}/tx"] + 24 * PER_MS[f"{B}/tx"]
    assert np.isnan(s["split_total_tx_bytes"])
    assert s["split_total_tx_known_bytes"] == pytest.approx(sum(known_ms.values()) * tx_ms
                                                            + read_30_60)
    assert s["split_unknown_segments"] == 1 and s["split_unknown_s"] == pytest.approx(0.030)
    # every idle segment is known: idle/other is known
    assert s["split_idle_tx_bytes"] == s["split_idle_tx_known_bytes"] == \
        pytest.approx(known_ms["idle"] * tx_ms)
    # r0's decode [30, 60) is unknown, its known part what was read there (r0 alone in it);
    # the others are known
    assert np.isnan(r.at["r0", "decode_tx_split_bytes"])
    assert r.at["r0", "decode_tx_split_known_bytes"] == pytest.approx(read_30_60)
    assert r.at["r0", "prefill_tx_split_bytes"] == pytest.approx(known_ms["r0 prefill"] * tx_ms)
    assert r.at["r1", "prefill_tx_split_bytes"] == pytest.approx(known_ms["r1 prefill"] * tx_ms)
    assert r.at["r1", "decode_tx_split_bytes"] == pytest.approx(known_ms["r1 decode"] * tx_ms)
    # bytes are conserved: per-request known parts + idle/other = the known total
    given = sum(r[f"{w}_tx_split_known_bytes"].sum() for w in ("prefill", "decode"))
    assert given + s["split_idle_tx_known_bytes"] == pytest.approx(s["split_total_tx_known_bytes"])
    # rx was read throughout: known, and the headline split adds up to the counters
    assert s["split_total_rx_bytes"] == pytest.approx(N * rx_ms)
    given_rx = sum(r[f"{w}_rx_split_bytes"].sum() for w in ("prefill", "decode"))
    assert given_rx + s["split_idle_rx_bytes"] == pytest.approx(N * rx_ms)
    # the window view's sum: unknown (r0's decode window), its known part beside it: the known
    # windows' bytes and what was read in r0's decode window
    assert np.isnan(s["window_sum_tx_bytes"])
    assert s["window_sum_tx_known_bytes"] == pytest.approx((20 + 8 + 10) * tx_ms + read_30_60)


def test_conserving_split_totals_without_unknown_equal_the_counters(tmp_path):
    cap = _capture(tmp_path / "cap")
    at = attribute(cap, align(_log(tmp_path / "log.jsonl", [(10, 30, 60), (62, 70, 80)]), cap))
    s = at.summary
    tx_ms = PER_MS[f"{A}/tx"] + PER_MS[f"{B}/tx"]
    assert s["split_total_tx_bytes"] == s["split_total_tx_known_bytes"] == \
        pytest.approx(N * tx_ms)
    assert s["split_unknown_segments"] == 0 and s["split_unknown_s"] == 0.0
    assert s["window_sum_tx_bytes"] == s["window_sum_tx_known_bytes"] == \
        pytest.approx((20 + 30 + 8 + 10) * tx_ms)


# --- verify-emulation's kernel (netdev) bytes: unknown windows are not 0 bytes ---------------

ND_A, ND_B = "enp1s0f1np1", "enP2p1s0f1np1"


def _kernel_capture(path, *, a_rdma_per_ms, kernel_a_per_ms, kernel_b_per_ms, bad=(2000, 2500),
                    n=5000, roll_every=None):
    """Twins A and B (RDMA tx/rx; A at ``a_rdma_per_ms`` bytes per ms, B idle) and one netdev tx
    counter each (``kernel_*_per_ms`` bytes per ms), read every 1 ms at exactly T0 + k ms; A's
    netdev readings ``bad[0] .. bad[1] - 1`` unreadable (its intervals bad[0]-1 .. bad[1]-1)."""
    from capture_builders import MS as CMS
    from capture_builders import STATUS_OK, STATUS_READ_ERROR, ib, netdev, write_capture
    from capture_builders import T0 as CT0

    counters = [ib(A, "tx"), ib(A, "rx"), ib(B, "tx"), ib(B, "rx"),
                netdev(A, ND_A, "tx"), netdev(B, ND_B, "tx")]
    per = [a_rdma_per_ms // 4, a_rdma_per_ms // 8, 0, 0, kernel_a_per_ms, kernel_b_per_ms]
    rd = {}
    for cid, step in enumerate(per):
        rows = []
        for k in range(n):
            unread = cid == 4 and bad[0] <= k < bad[1]
            rows.append((CT0 + k * CMS - 500, 1000, None if unread else 10**6 + step * k,
                         STATUS_READ_ERROR if unread else STATUS_OK))
        rd[cid] = rows
    return write_capture(path, counters, rd, roll_every=roll_every,
                         devices=[{"name": A, "pci": "0000:01:00.1"},
                                  {"name": B, "pci": "0002:01:00.1"}])


def _kernel_verdicts(path):
    """The verdict three ways: in memory, streamed, and from the cluster's one node pass."""
    from rdmascope.analysis.cluster import node_pass
    from rdmascope.analysis.verify import judge_emulation, verify_emulation

    got = node_pass(path, 1_000_000, measure=True)
    return [verify_emulation(load_capture(path)), verify_emulation(path),
            judge_emulation(got.info, got.measure)]


@pytest.mark.parametrize("roll_every", [None, 1700])
def test_kernel_bytes_with_unreadable_netdev_readings_are_unknown_not_zero(tmp_path, roll_every):
    ka, kb = 1000, 300  # netdev bytes per ms
    p = _kernel_capture(tmp_path / "c", a_rdma_per_ms=1_000_000, kernel_a_per_ms=ka,
                        kernel_b_per_ms=kb, roll_every=roll_every)
    # the range is the RDMA readings' span [0, 4999] ms; 1 s windows [0,1) .. [4, 4.999) s.
    # A's netdev intervals 1999 .. 2499 ms are unknown: windows [1, 2) s and [2, 3) s
    known_a = ka * (1000 + 1000 + 999)
    for v in _kernel_verdicts(p):
        k = v.kernel
        assert np.isnan(k.at[A, "kernel_bytes"])
        assert k.at[A, "kernel_known_bytes"] == pytest.approx(known_a)
        assert k.at[A, "kernel_unknown_windows"] == 2
        assert k.at[B, "kernel_bytes"] == k.at[B, "kernel_known_bytes"] == \
            pytest.approx(kb * 4999)
        assert k.at[B, "kernel_unknown_windows"] == 0
        assert v.status == PASS and not v.tcp_suspected
        assert f"{ND_A} (2 of the 1 s windows unknown)" in v.message
        assert ND_B not in v.message.split("TCP check")[-1]


def test_tcp_suspected_on_the_readable_kernel_bytes_says_at_least(tmp_path):
    ka = 2_000_000  # 2 MB per ms over the kernel stack, no RDMA traffic
    p = _kernel_capture(tmp_path / "c", a_rdma_per_ms=0, kernel_a_per_ms=ka, kernel_b_per_ms=0)
    known_mb = ka * (1000 + 1000 + 999) / 1e6
    for v in _kernel_verdicts(p):
        assert v.status == FAIL and v.tcp_suspected
        assert f"moved at least {known_mb:,.1f} MB ({ND_A} {known_mb:,.1f} MB readable)" \
            in v.message


# --- peaks: the bounds past the readings, and a series without intervals in the range --------

def test_peak_bounds_past_the_readings_are_unknown_not_zero(tmp_path):
    from rdmascope.analysis.peaks import INSTANT_UNC_NS, peak_bounds, peak_table
    from rdmascope.analysis.series import byte_intervals

    per_ms = PER_MS[f"{A}/tx"]
    cap = _capture(tmp_path / "cap")
    iv = byte_intervals(cap)
    iv = iv[iv["series"] == f"{A}/tx"]
    u = 1000 + INSTANT_UNC_NS  # half the 2 us read bracket + the adapter's update period
    starts = pd.Series({f"{A}/tx": T0 + 40 * MS})
    got = peak_bounds(iv, starts, MS)
    # inside the readings: F(b + u) - F(a - u) and F(b - u) - F(a + u) at a constant rate
    assert got.at[f"{A}/tx", "high_bytes"] == pytest.approx(per_ms * (MS + 2 * u) / MS)
    assert got.at[f"{A}/tx", "low_bytes"] == pytest.approx(per_ms * (MS - 2 * u) / MS)
    for k in (0, N - 1):  # the first and last windows: their widened edges pass the readings
        got = peak_bounds(iv, pd.Series({f"{A}/tx": T0 + k * MS}), MS)
        assert np.isnan(got.at[f"{A}/tx", "high_bytes"])  # unknown there, never 0
        assert got.at[f"{A}/tx", "low_bytes"] == pytest.approx(per_ms * (MS - 2 * u) / MS)
    # the whole range (the readings' span): it can grow past them only onto unknown bytes
    t = peak_table(iv, windows_ns=(MS,), uncertainty=True, percentiles=())
    whole = t[t["window"] == "whole range"].iloc[0]
    assert np.isnan(whole["peak_high_gbps"])
    assert whole["peak_low_gbps"] == pytest.approx(per_ms * 8 * (N * MS - 2 * u) / (N * MS) / MS)
    # a range inside the readings: both edges can move onto known bytes
    t = peak_table(iv, start_ns=T0 + 10 * MS, end_ns=T0 + 90 * MS, windows_ns=(MS,),
                   uncertainty=True, percentiles=())
    whole = t[t["window"] == "whole range"].iloc[0]
    span = 80 * MS
    assert whole["peak_high_gbps"] == pytest.approx(per_ms * 8 * (span + 2 * u) / span / MS)
    assert whole["peak_low_gbps"] == pytest.approx(per_ms * 8 * (span - 2 * u) / span / MS)


def test_peak_table_capture_keeps_a_series_without_intervals_in_the_range(tmp_path):
    """B's readings stop at 19 ms; the range [60, 90) ms reads only the later segments: B is in
    the table, unknown (no window known), as in the in-memory peak table."""
    from capture_builders import MS as CMS
    from capture_builders import STATUS_OK, ib, write_capture
    from capture_builders import T0 as CT0
    from rdmascope.analysis.peaks import peak_table, peak_table_capture
    from rdmascope.analysis.series import byte_intervals

    rd = {0: [(CT0 + k * CMS - 500, 1000, 10**6 + 1000 * k, STATUS_OK) for k in range(100)],
          1: [(CT0 + k * CMS - 500, 1000, 10**6 + 2000 * k, STATUS_OK) for k in range(20)]}
    p = write_capture(tmp_path / "c", [ib(A, "tx"), ib(B, "tx")], rd, roll_every=10)
    kw = {"start_ns": CT0 + 60 * CMS, "end_ns": CT0 + 90 * CMS, "windows_ns": (CMS, 10 * CMS)}
    disk = peak_table_capture(p, **kw)
    mem = peak_table(byte_intervals(load_capture(p)), **kw)
    assert list(disk["series"]) == list(mem["series"]) == [f"{A}/tx"] * 3 + [f"{B}/tx"] * 3
    b = disk[disk["series"] == f"{B}/tx"]
    assert b["peak_gbps"].isna().all() and b["mean_gbps"].isna().all()
    assert (b["n_windows"] == 0).all()
    # A: 1000 units x 4 B per ms = 32 Mb/s, in both
    a = disk[disk["series"] == f"{A}/tx"]
    assert a["peak_gbps"].to_numpy() == pytest.approx(4000 * 8 / 1e6)
    pd.testing.assert_frame_equal(disk, mem, check_exact=False, rtol=1e-12)


# --- cluster: a node's bytes over the shared span, and its bytes per request -----------------

def _cluster_set(tmp_path):
    """Two nodes, the same traffic (A tx 1,000 B/ms, A rx 500 B/ms, B idle), read every 1 ms
    for 3 s; n2's A tx readings 1000 .. 1499 unreadable (its intervals 999 .. 1499 ms)."""
    from capture_builders import MS as CMS
    from capture_builders import STATUS_OK, STATUS_READ_ERROR, ib, write_capture
    from capture_builders import T0 as CT0

    paths = []
    for host, bad in (("n1", None), ("n2", (1000, 1500))):
        rd = {}
        for cid, units in enumerate((250, 125, 0, 0)):  # 4-byte units per ms
            rows = []
            for k in range(3000):
                unread = bad is not None and cid == 0 and bad[0] <= k < bad[1]
                rows.append((CT0 + k * CMS - 500, 1000, None if unread else 10**6 + units * k,
                             STATUS_READ_ERROR if unread else STATUS_OK))
            rd[cid] = rows
        p = write_capture(tmp_path / host, [ib(A, "tx"), ib(A, "rx"), ib(B, "tx"), ib(B, "rx")],
                          rd, devices=[{"name": A, "pci": "0000:01:00.1"},
                                       {"name": B, "pci": "0002:01:00.1"}])
        m = json.loads((p / "manifest.json").read_text())
        m["host"] = host
        (p / "manifest.json").write_text(json.dumps(m))
        paths.append(p)
    rt = 1_700_000_000 * 10**9  # capture_builders' realtime at monotonic 0
    with open(tmp_path / "req.jsonl", "w") as f:
        for i, (s, a, b) in enumerate([(100, 150, 400), (500, 600, 900), (1200, 1300, 1400),
                                       (2000, 2100, 2500)]):
            f.write(json.dumps({"request_id": f"r{i}", "t_send": (rt + CT0 + s * MS) / 1e9,
                                "t_first_token": (rt + CT0 + a * MS) / 1e9,
                                "t_last_token": (rt + CT0 + b * MS) / 1e9, "prompt_tokens": 100,
                                "output_tokens": 10, "clock": "CLOCK_REALTIME"}) + "\n")
    return paths, tmp_path / "req.jsonl"


@pytest.mark.parametrize("method", ["series", "summary"])
def test_cluster_node_bytes_over_unknown_windows_are_unknown_with_the_readable_part(tmp_path,
                                                                                    method):
    from rdmascope.analysis.cluster_reduce import cluster_summary

    paths, req = _cluster_set(tmp_path)
    kw = {"engine": "serial"} if method == "summary" else {}
    nodes = cluster_summary(paths, method=method, refine=False, requests=req,
                            **kw).nodes.set_index("host")
    # the shared span: the readings' [0, 2999] ms; 2,999 intervals of 1,000 B tx, 500 B rx
    assert np.isnan(nodes.at["n2", "tx_bytes"])  # 501 ms unknown: never the readable part
    assert nodes.at["n2", "tx_known_bytes"] == pytest.approx(1000 * (2999 - 501))
    assert nodes.at["n2", "tx_unknown_s"] == pytest.approx(0.501)
    assert nodes.at["n2", "rx_bytes"] == pytest.approx(500 * 2999)  # rx read throughout
    assert nodes.at["n2", "rx_unknown_s"] == 0
    assert nodes.at["n1", "tx_bytes"] == nodes.at["n1", "tx_known_bytes"] == \
        pytest.approx(1000 * 2999)
    # bytes per request (tx over [send, last token]): r2 [1200, 1400] ms lies in n2's unknown
    # stretch, so n2's mean is unknown; n1's is (300 + 400 + 200 + 500) ms x 1,000 B / 4
    assert nodes.at["n1", "requests"] == nodes.at["n2", "requests"] == 4
    assert nodes.at["n1", "requests_unknown"] == 0 and nodes.at["n2", "requests_unknown"] == 1
    assert nodes.at["n1", "bytes_per_request"] == pytest.approx(1000 * 1400 / 4)
    assert np.isnan(nodes.at["n2", "bytes_per_request"])


def test_nccl_size_class_wire_bytes_with_an_unknown_collective_are_unknown():
    from rdmascope.analysis.nccl.collectives import size_class_table

    # three AllReduce of 1 MiB (one size class); the second's span had no readings
    t = pd.DataFrame({"coll": ["AllReduce"] * 3, "size_bytes": [2**20] * 3,
                      "expected_bytes": [1000.0, 1000.0, 1000.0],
                      "wire_bytes": [900.0, np.nan, 1100.0],
                      "wire_bytes_wide": [950.0, np.nan, 1150.0],
                      "isolated": [True, True, False], "busbw_gbs": [1.0, 1.0, 1.0],
                      "measured_gbps": [1.0, np.nan, 1.0]})
    row = size_class_table(t).iloc[0]
    assert row["n"] == 3 and row["unknown"] == 1
    assert np.isnan(row["wire_bytes"]) and np.isnan(row["wire_bytes_wide"])  # never 2,000
    assert row["expected_bytes"] == 3000.0
    assert row["wire_known_bytes"] == 900.0 + 1100.0
    assert row["wire_known_bytes_wide"] == 950.0 + 1150.0
    assert row["expected_known_bytes"] == 2000.0
    assert row["ratio"] == pytest.approx(2000.0 / 2000.0)  # over the known collectives
    assert row["ratio_low"] == pytest.approx(900.0 / 1000.0)  # the isolated known one


def test_stacked_device_figure_leaves_unknown_windows_out_and_shades_them():
    import matplotlib

    matplotlib.use("Agg")
    from rdmascope.analysis.figures import plot_devices

    w = 100 * MS
    idx = pd.Index(T0 + np.arange(6) * w, dtype="int64")
    rates = pd.DataFrame({f"{A}/tx": [10.0, 20.0, np.nan, np.nan, 30.0, 40.0],
                          f"{B}/tx": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]}, index=idx)
    ax = plot_devices(rates, origin_ns=T0)
    spans = [p for p in ax.patches if p.get_gid() == "unknown"]
    assert len(spans) == 1  # windows 2 and 3: one band [0.2, 0.4) s
    x0, x1 = spans[0].get_x(), spans[0].get_x() + spans[0].get_width()
    assert (x0, x1) == pytest.approx((0.2, 0.4))
    # no stacked area inside the unknown windows (drawn as 0 Gb/s it would be there)
    drawn = set()
    for coll in ax.collections:
        for path in coll.get_paths():
            xs = path.vertices[:, 0]
            assert not ((xs > 0.2 + 1e-9) & (xs < 0.4 - 1e-9)).any()
            drawn.add((round(float(xs.min()), 9), round(float(xs.max()), 9)))
    # the known windows are drawn to their ends: [0, 0.2) and [0.4, 0.6) s
    assert drawn == {(0.0, 0.2), (0.4, 0.6)}


def test_output_throughput_is_unknown_when_a_request_has_no_output_tokens(tmp_path):
    cap = _capture(tmp_path / "cap")
    log = _log(tmp_path / "log.jsonl", [(10, 30, 60), (62, 70, 80)])
    # some tools leave a request's output tokens out (requestlogs: Int64, missing)
    log.requests.loc[log.requests["request_id"] == "r1", "output_tokens"] = pd.NA
    s = attribute(cap, align(log, cap)).summary
    assert s["output_throughput_tps"] is None  # 11 tokens known, r1's unknown: never 11 / run
    # with both known: total output tokens / (last token - first send) = 22 / 0.070 s
    at = attribute(cap, align(_log(tmp_path / "log2.jsonl", [(10, 30, 60), (62, 70, 80)]), cap))
    assert at.summary["output_throughput_tps"] == pytest.approx(22 / 0.070)


def test_an_unknown_whole_range_peak_has_no_instant(tmp_path):
    """`peaks`' "whole range" row of a series with unknown bytes has no peak and no instant
    (peak_t_s was 0.0, the range start, beside an empty peak); a known one keeps its start.
    peak_t_ns stays the row's window start (the range), which --uncertainty reads."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    _capture(tmp_path / "cap", {f"{B}/tx": (40, 45)})
    r = CliRunner().invoke(main, ["peaks", str(tmp_path / "cap"), "--windows", "1ms", "--json"])
    assert r.exit_code == 0, r.output
    whole = {x["series"]: x for x in json.loads(r.stdout)["peaks"] if x["window"] == "whole range"}
    assert whole[f"{B}/tx"]["peak_gbps"] is None and whole[f"{B}/tx"]["peak_t_s"] is None
    assert whole[f"{A}/tx"]["peak_t_s"] == 0.0
    assert whole[f"{A}/tx"]["peak_gbps"] == pytest.approx(PER_MS[f"{A}/tx"] * 8 / 1e6)
