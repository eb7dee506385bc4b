"""The cluster summary's one pass per node: its emulation verdicts equal ``verify_emulation``'s.

``cluster.node_pass(measure=True)`` folds the emulation check (per twin bytes, shares, 1 ms
peaks, unknown time, netdev bytes) into the node's single streamed pass; the reference is
``verify_emulation`` on the capture loaded into memory (``load_capture``: a different code
path), on captures built to reach every status: PASS, FAIL, CANNOT JUDGE (unreadable readings,
a missing twin, too little traffic) and TCP suspected, with segment edges at many places.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, netdev, write_capture
from rdmascope.analysis.cluster import node_pass
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.verify import CANNOT_JUDGE, FAIL, PASS, judge_emulation, verify_emulation

A, B = "rocep1s0f1", "roceP2p1s0f1"
TWINS = [{"name": A, "pci": "0000:01:00.1"}, {"name": B, "pci": "0002:01:00.1"}]


def _capture(path, *, n, interval_ns=MS, a_units=250_000, b_units=0, kernel=None,
             unreadable=None, reset_at=None, roll_every=None, discovered=None, seed=1):
    """Twins A, B (tx, rx) at ``a_units``/``b_units`` 4-byte units per ms (jittered), plus the
    netdev tx of A at ``kernel`` bytes per ms; ``unreadable``: (counter, first, last) readings
    of B's tx unreadable; ``reset_at``: A's tx counter restarts from 0 there."""
    rng = np.random.default_rng(seed)
    counters = [ib(A, "tx"), ib(A, "rx"), ib(B, "tx"), ib(B, "rx")]
    per = interval_ns / MS
    rd = {}
    for cid, units in enumerate((a_units, a_units // 2, b_units, b_units // 2)):
        steps = rng.integers(0, max(1, int(2 * units * per)) + 1, size=n) if units else \
            np.zeros(n, np.int64)
        v = 10**6 + np.cumsum(steps)
        t = T0 + np.arange(n) * interval_ns + 20_000 * cid + rng.integers(0, 50_000, size=n)
        rows = []
        for k in range(n):
            val, st = int(v[k]), STATUS_OK
            if cid == 0 and reset_at is not None and k >= reset_at:
                val = int(v[k] - v[reset_at - 1] + 7)
            if unreadable and cid == unreadable[0] and unreadable[1] <= k <= unreadable[2]:
                val, st = None, STATUS_READ_ERROR
            rows.append((int(t[k]), 1500, val, st))
        rd[cid] = rows
    if kernel is not None:
        counters.append(netdev(A, "enp1s0f1np1", "tx"))
        counters.append(netdev(A, "enp1s0f1np1", "rx"))
        for cid in (4, 5):
            t = T0 + np.arange(n) * interval_ns + 200_000 + 10_000 * cid
            rd[cid] = [(int(t[k]), 900, int(kernel * per * k * (1 if cid == 4 else 0.3)),
                        STATUS_OK) for k in range(n)]
    p = write_capture(path, counters, rd, interval_ns=interval_ns, roll_every=roll_every,
                      devices=TWINS)
    if discovered is not None:
        m = json.loads((p / "manifest.json").read_text())
        m["discovered_devices"] = discovered
        (p / "manifest.json").write_text(json.dumps(m))
    return p


def _same(p, expect_status: dict[str, str], interval_ns=MS):
    got = node_pass(p, max(interval_ns, MS), measure=True)
    mem = load_capture(p)
    for exp, status in expect_status.items():
        v = judge_emulation(got.info, got.measure, expect=exp)
        ref = verify_emulation(mem, expect=exp)
        assert v.status == ref.status == status, (exp, v.message, ref.message)
        assert v.message == ref.message
        assert v.main_device == ref.main_device and v.tcp_suspected == ref.tcp_suspected
        assert v.missing_devices == ref.missing_devices
        assert v.unknown_devices == ref.unknown_devices
        assert (v.start_ns, v.end_ns) == (ref.start_ns, ref.end_ns)
        d, r = v.devices, ref.devices
        assert list(d.index) == list(r.index)
        for col in ("tx_bytes", "rx_bytes", "share", "peak_1ms_gbps", "unknown_share"):
            np.testing.assert_allclose(d[col].to_numpy(float), r[col].to_numpy(float),
                                       rtol=1e-9, equal_nan=True, err_msg=col)
        for col in ("nan_windows", "over_line_windows"):
            assert d[col].tolist() == r[col].tolist(), col
        if ref.kernel is None:
            assert v.kernel is None
        else:
            np.testing.assert_allclose(v.kernel.to_numpy(float), ref.kernel.to_numpy(float),
                                       rtol=1e-9, equal_nan=True)
        # and the streamed verify_emulation (its own pass) agrees as well
        assert verify_emulation(p, expect=exp).status == status
    return got


@pytest.mark.parametrize("roll_every", [None, 700, 1999])
def test_one_twin_passes_single_fails_both_with_the_kernel_bytes_from_the_same_pass(
        tmp_path, roll_every):
    # 5 s: the netdev bytes' clipped first and last 1 s windows come from the kept files
    p = _capture(tmp_path / "c", n=5000, kernel=2_000, roll_every=roll_every)
    got = _same(p, {"single": PASS, "both": FAIL})
    assert got.measure["kernel"](got.measure["lo"], got.measure["hi"])  # netdev bytes seen
    assert got.measure.get("kernel_in_pass")  # from the node's own pass, not a second one


def test_both_twins_fail_single_pass_both(tmp_path):
    _same(_capture(tmp_path / "c", n=1500, b_units=240_000, roll_every=400),
          {"single": FAIL, "both": PASS})


def test_unreadable_twin_cannot_judge(tmp_path):
    # B's tx unreadable for 300 of 1500 readings (20 % > 1 %), across a segment edge
    p = _capture(tmp_path / "c", n=1500, unreadable=(2, 350, 650), roll_every=500)
    got = _same(p, {"single": CANNOT_JUDGE, "both": CANNOT_JUDGE})
    v = judge_emulation(got.info, got.measure, expect="single")
    assert v.unknown_devices == [B]


def test_missing_twin_and_too_little_traffic_cannot_judge(tmp_path):
    disc = [{"name": A, "pci": "0000:01:00.1"}, {"name": B, "pci": "0002:01:00.1"},
            {"name": "roceX"}]  # its port cannot be told: counts as a twin
    _same(_capture(tmp_path / "m", n=800, roll_every=300, discovered=disc),
          {"single": CANNOT_JUDGE, "both": CANNOT_JUDGE})
    _same(_capture(tmp_path / "idle", n=800, a_units=0), {"single": CANNOT_JUDGE})


def test_tcp_suspected_and_a_reset(tmp_path):
    # little RDMA (~8 MB), 50 kB per ms (210 MB) through the kernel stack; A's tx counter resets
    p = _capture(tmp_path / "c", n=4200, a_units=300, kernel=50_000, reset_at=2100,
                 roll_every=1000)
    _same(p, {"single": FAIL, "both": FAIL})
    v = verify_emulation(load_capture(p))
    assert v.tcp_suspected and v.devices.at[A, "nan_windows"] > 0


def test_a_slower_sampling_interval_adds_the_1_ms_grid(tmp_path):
    p = _capture(tmp_path / "c", n=600, interval_ns=10 * MS, kernel=3_000, roll_every=250)
    got = _same(p, {"single": PASS}, interval_ns=10 * MS)
    assert got.series.width_ns == 10 * MS


def test_over_line_windows_at_segment_edges_judged_from_the_pass(tmp_path):
    """Bursts over line rate in the last readings of segments: the pass takes each block as
    it comes and holds back only one whose over-line candidates reach past the intervals read
    so far, so the candidates are judged from the pass's own intervals (no re-read) with the
    bits, peaks and series of the whole capture in memory."""
    from rdmascope.analysis.cluster import link_peaks, twin_links
    from rdmascope.analysis.series import byte_intervals, rebin

    roll = 400
    p = _capture(tmp_path / "c", n=2000, a_units=600_000, roll_every=roll)
    m = json.loads((p / "manifest.json").read_text())
    for d in m["devices"]:
        d["ports"] = [{"port": 1, "rate_gbps": 100.0}]  # 12.5 MB per ms
    (p / "manifest.json").write_text(json.dumps(m))
    # A's tx jumps by 36 MB (over line in any 1 ms) at readings next to the segment edges
    # (the last and first of a segment, and a few inside)
    import pyarrow as pa
    import pyarrow.parquet as pq

    spikes = {roll - 1, roll, 2 * roll - 2, 3 * roll - 1, 3 * roll + 1, 1234}
    for f in sorted((p / "segments").glob("seg-*.parquet")):
        t = pq.read_table(f)
        cid = t["counter_id"].to_numpy()
        sweep = t["sweep"].to_numpy()
        v = t["value"].to_numpy(zero_copy_only=False).astype(np.uint64)
        add = np.zeros(len(v), np.uint64)
        for k in spikes:
            add += ((cid == 0) & (sweep >= k)).astype(np.uint64) * np.uint64(9_000_000)
        t = t.set_column(t.schema.get_field_index("value"), "value",
                         pa.array(v + add, type=t.schema.field("value").type))
        pq.write_table(t, f)
    from capture_builders import relist_segments

    relist_segments(p)
    got = _same(p, {"single": PASS})
    assert got.rereads == 0  # judged from the pass's own intervals
    assert got.measure is not None
    cap = load_capture(p)
    iv = byte_intervals(cap)
    ref = link_peaks(iv, twin_links(cap), cap.t_start_ns, cap.t_end_ns)
    for k, v in got.peaks.items():
        assert v == pytest.approx(ref[k], rel=1e-9), k
    v = verify_emulation(cap, expect="single")
    assert v.devices.at[A, "over_line_windows"] >= len(spikes)  # every spike was judged
    b = rebin(iv, MS, origin_ns=cap.t_start_ns)
    assert np.allclose(np.diff(got.series.cum), np.nan_to_num(b.to_numpy()).sum(axis=1))
