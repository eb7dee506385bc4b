"""Windows over line rate: flagged with their likely cause, counted everywhere, never headlined.

Each capture: one 200 Gb/s port, readings every 1 ms on the capture start's grid with a 2 us
read bracket, so a window's fewest possible bytes are by hand F(b - u) - F(a + u) with
u = 1 us (half bracket) + 0.1 ms (the counter's update uncertainty) = 0.101 ms.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from click.testing import CliRunner
from rdmascope.analysis import (
    QUALITY_OVER_LINE,
    burst_analysis,
    byte_intervals,
    load_capture,
    peak_table,
    rebin_with_quality,
    verify_emulation,
)

from rdmascope.cli import main

DEV = [{"name": "rocep1s0f1", "ports": [{"port": 1, "rate_gbps": 200.0}]}]
U = 0.101  # ms, per edge


def _capture(path, times_ms, mb_per_interval):
    """Readings at ``times_ms`` (ms after T0), interval k holding ``mb_per_interval[k]`` MB."""
    units = np.concatenate([[0], np.cumsum(np.asarray(mb_per_interval) * 1e6 / 4)])
    rd = {0: [(T0 + round(t * MS) - 1000, 2000, int(u), STATUS_OK)
              for t, u in zip(times_ms, units.astype(np.int64), strict=True)]}
    return load_capture(write_capture(path, [ib("rocep1s0f1", "tx")], rd, devices=DEV))


def _gbps(mb):
    return mb * 8e6 / 1e6


def _one_ms(cap):
    t = peak_table(byte_intervals(cap), windows_ns=(MS,))
    return t[t["window"] == "1 ms"].iloc[0]


def _rates_json(path):
    r = CliRunner().invoke(main, ["rates", str(path), "--window", "1ms", "--json"])
    assert r.exit_code == 0, r.output
    return {row["window_start_ns"]: row for row in json.loads(r.stdout)["rates"]}


def test_late_counter_update(tmp_path):
    # 20 MB per ms (160 Gb/s); the counter stands still for [10, 12) ms and releases 60 MB in
    # [12, 13): 480 Gb/s, at least 60 x (1 - 2 x 0.101) = 47.88 MB = 383 Gb/s > 200: impossible.
    # [16, 17) holds 23 MB (184 Gb/s): the highest window consistent with physics.
    mb = [20.0] * 10 + [0.0, 0.0, 60.0] + [20.0] * 3 + [23.0] + [20.0] * 3
    cap = _capture(tmp_path / "c", range(len(mb) + 1), mb)
    row = _one_ms(cap)
    assert row.peak_gbps == pytest.approx(_gbps(23.0)) and row.peak_t_ns == T0 + 16 * MS
    assert row.raw_max_gbps == pytest.approx(_gbps(60.0)) and row.raw_max_t_ns == T0 + 12 * MS
    assert row.n_over_line_windows == 1
    assert row.over_line_causes == "late counter update x1"
    # the flag in the quality bits (in memory and through the chunked `rates`)
    _, q = rebin_with_quality(byte_intervals(cap), MS)
    assert list(q.index[(q["rocep1s0f1/tx"] & QUALITY_OVER_LINE) != 0]) == [T0 + 12 * MS]
    rates = _rates_json(tmp_path / "c")
    assert [t for t, r in rates.items() if r["rocep1s0f1/tx_quality"] & QUALITY_OVER_LINE] \
        == [T0 + 12 * MS]
    # counted in bursts and verify-emulation; never their headline
    bt = burst_analysis(byte_intervals(cap), capacity_gbps=200.0)
    assert bt.summary["over_line_windows"].tolist() == [1]
    assert bt.table["peak_gbps"].max() == pytest.approx(_gbps(23.0))
    assert bt.table["raw_peak_gbps"].max() == pytest.approx(_gbps(60.0))
    v = verify_emulation(cap)
    assert v.devices.at["rocep1s0f1", "peak_1ms_gbps"] == pytest.approx(_gbps(23.0))
    assert v.devices.at["rocep1s0f1", "over_line_windows"] == 1


def test_a_late_update_within_the_uncertainty_is_not_flagged(tmp_path):
    # 30 MB in [12, 13) = 240 Gb/s, but it may hold as little as 30 x 0.798 = 23.94 MB
    # (191.5 Gb/s <= 200): the timing uncertainty allows it, so it stays the headline, said
    # "at line rate" (the 200 Gb/s bound), never as the 240 above it
    mb = [20.0] * 12 + [30.0] + [20.0] * 5
    row = _one_ms(_capture(tmp_path / "c", range(len(mb) + 1), mb))
    assert row.n_over_line_windows == 0 and row.over_line_causes == ""
    assert row.raw_max_gbps == pytest.approx(_gbps(30.0))
    assert row.at_line_rate and row.peak_gbps == row.bound_gbps == 200.0


def test_gap_spread(tmp_path):
    # sweeps 5 and 6 missed: one 3 ms interval [4, 7) of 105 MB spread evenly, 280 Gb/s in each
    # of its windows; [5, 6) holds at least 35 x 0.798 = 27.93 MB (223 Gb/s > 200)
    times = [0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12]
    mb = [20.0, 20.0, 22.0, 20.0, 105.0, 20.0, 20.0, 20.0, 20.0, 20.0]
    cap = _capture(tmp_path / "c", times, mb)
    row = _one_ms(cap)
    assert row.n_over_line_windows == 3
    assert row.over_line_causes == "gap spread x3"
    assert row.raw_max_gbps == pytest.approx(_gbps(35.0))
    assert row.peak_gbps == pytest.approx(_gbps(22.0)) and row.peak_t_ns == T0 + 2 * MS


def test_gap_spread_windows_under_line_rate_never_headline(tmp_path):
    # the gap [4, 7) spreads 66 MB: 22 MB (176 Gb/s) per window, more than any measured window
    # (20 MB), under the line rate: not flagged over line, but still no headline
    times = [0, 1, 2, 3, 4, 7, 8, 9, 10]
    mb = [20.0] * 4 + [66.0] + [20.0] * 3
    row = _one_ms(_capture(tmp_path / "c", times, mb))
    assert row.n_over_line_windows == 0 and row.n_gap_windows == 3
    assert row.raw_max_gbps == pytest.approx(_gbps(22.0))
    assert row.peak_gbps == pytest.approx(_gbps(20.0))


def test_stalled_sampler(tmp_path):
    # the sampler stalled: the reading due at 6 ms came at 6.45 ms holding the value of ~5.5 ms
    # (10 MB in [5, 6.45)), the next at 7 ms caught up (30 MB in [6.45, 7)). Window [6, 7)
    # holds 0.45/1.45 x 10 + 30 = 33.1 MB (265 Gb/s); at least
    # (6.45 - 6.101)/1.45 x 10 + (6.899 - 6.45)/0.55 x 30 = 26.90 MB (215 Gb/s > 200)
    times = [0, 1, 2, 3, 4, 5, 6.45, 7, 8, 9, 10]
    mb = [20.0] * 5 + [10.0, 30.0] + [20.0] * 3
    cap = _capture(tmp_path / "c", times, mb)
    row = _one_ms(cap)
    want = 0.45 / 1.45 * 10 + 30
    assert row.raw_max_gbps == pytest.approx(_gbps(want)) and row.raw_max_t_ns == T0 + 6 * MS
    assert row.n_over_line_windows == 1
    assert row.over_line_causes == "stalled sampler x1"
    assert row.peak_gbps == pytest.approx(_gbps(20.0))
    low = (6.45 - 6.101) / 1.45 * 10 + (6.899 - 6.45) / 0.55 * 30
    assert _gbps(low) > 200 > _gbps(low) * 0.9  # the rule's margin, by hand


def test_peaks_cli_shows_headline_raw_max_and_the_count(tmp_path):
    mb = [20.0] * 10 + [0.0, 0.0, 60.0] + [20.0] * 3 + [23.0] + [20.0] * 3
    _capture(tmp_path / "c", range(len(mb) + 1), mb)
    r = CliRunner().invoke(main, ["peaks", str(tmp_path / "c"), "--windows", "1ms"])
    assert r.exit_code == 0, r.output
    line = [ln for ln in r.output.splitlines() if " 1 ms " in ln][0]
    assert "184.00" in line and "480.00" in line and "late counter update x1" in line


def test_attribute_keeps_the_over_line_window_out_of_the_prefill_peak(tmp_path):
    from rdmascope.analysis.attribute import attribute
    from rdmascope.analysis.requestlogs import align, read_request_log

    mb = [20.0] * 10 + [0.0, 0.0, 60.0] + [20.0] * 3 + [23.0] + [20.0] * 3
    cap = _capture(tmp_path / "c", range(len(mb) + 1), mb)
    log = tmp_path / "requests.jsonl"
    s = T0 / 1e9
    log.write_text(json.dumps({"request_id": "r1", "t_send": s + 0.005, "t_first_token": s + 0.018,
                               "t_last_token": s + 0.019, "prompt_tokens": 100,
                               "output_tokens": 2, "clock": "CLOCK_MONOTONIC"}) + "\n")
    att = attribute(cap, align(read_request_log(log), cap))
    row = att.requests.iloc[0]
    assert row["prefill_peak_tx_gbps"] == pytest.approx(_gbps(23.0))
    assert row["prefill_over_line_windows"] == 1
    assert att.rounds["prefill_over_line_windows"].tolist() == [1]


@pytest.mark.parametrize("kind", ["late", "gap", "stall"])
def test_the_chunked_paths_flag_the_same_windows(tmp_path, kind):
    """peaks, bursts and verify-emulation read captures segment by segment; the flags, counts
    and headlines are the in-memory ones."""
    from rdmascope.analysis.bursts import burst_analysis_capture
    from rdmascope.analysis.peaks import peak_table_capture

    times, mb = {
        "late": (range(21), [20.0] * 10 + [0.0, 0.0, 60.0] + [20.0] * 3 + [23.0] + [20.0] * 3),
        "gap": ([0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12],
                [20.0, 20.0, 22.0, 20.0, 105.0, 20.0, 20.0, 20.0, 20.0, 20.0]),
        "stall": ([0, 1, 2, 3, 4, 5, 6.45, 7, 8, 9, 10], [20.0] * 5 + [10.0, 30.0] + [20.0] * 3),
    }[kind]
    cap = _capture(tmp_path / "c", times, mb)
    iv = byte_intervals(cap)
    mem = peak_table(iv, windows_ns=(MS,)).iloc[0]
    disk = peak_table_capture(tmp_path / "c", windows_ns=(MS,)).iloc[0]
    for k in ("peak_gbps", "peak_t_ns", "raw_max_gbps", "raw_max_t_ns", "n_over_line_windows",
              "over_line_causes"):
        assert disk[k] == pytest.approx(mem[k]) if isinstance(mem[k], float) else \
            disk[k] == mem[k], k
    assert mem["n_over_line_windows"] >= 1
    bm = burst_analysis(iv, capacity_gbps=200.0)
    bd = burst_analysis_capture(tmp_path / "c", capacity_gbps=200.0)
    assert bd.summary["over_line_windows"].tolist() == bm.summary["over_line_windows"].tolist()
    np.testing.assert_allclose(bd.table["peak_gbps"], bm.table["peak_gbps"])
    np.testing.assert_allclose(bd.table["raw_peak_gbps"], bm.table["raw_peak_gbps"])
    vm, vd = verify_emulation(cap), verify_emulation(tmp_path / "c")
    assert vd.devices.at["rocep1s0f1", "over_line_windows"] \
        == vm.devices.at["rocep1s0f1", "over_line_windows"] == mem["n_over_line_windows"]
    assert vd.devices.at["rocep1s0f1", "peak_1ms_gbps"] == pytest.approx(mem["peak_gbps"])


def test_an_emulated_link_is_judged_against_what_it_really_carries(tmp_path):
    """`record --emulated 109` says the link really carries ~109 Gb/s (one PCIe twin): a 1 ms
    window of 150 Gb/s (at least 150 x 0.798 = 119.7 > 109) is over line rate there, not on
    the 200 Gb/s port."""
    from rdmascope.models import MANIFEST_SETUP_KEY

    mb = [12.0] * 8 + [18.75] + [12.0] * 6  # 96 Gb/s, one window of 150 Gb/s at 8 ms
    _capture(tmp_path / "c", range(len(mb) + 1), mb)
    assert _one_ms(load_capture(tmp_path / "c")).n_over_line_windows == 0
    man = tmp_path / "c" / "manifest.json"
    m = json.loads(man.read_text())
    m.setdefault("extra", {})[MANIFEST_SETUP_KEY] = {"emulated": True,
                                                     "emulated_real_gbps": 109.0}
    man.write_text(json.dumps(m))
    row = _one_ms(load_capture(tmp_path / "c"))
    assert row.n_over_line_windows == 1 and row.raw_max_t_ns == T0 + 8 * MS
    assert row.peak_gbps == pytest.approx(_gbps(12.0))


def test_rates_by_device_states_the_two_direction_bound(tmp_path):
    """A --by device column is tx + rx, judged against both directions' bounds: its footer says
    so ("400 Gb/s (tx+rx), each direction 200 Gb/s: port rate"), never one direction's 200 Gb/s
    beside a two-direction column; by series it stays the one direction's."""
    devs = [{"name": "mlx5_0", "pci": "0000:03:00.0", "netdevs": [],
             "ports": [{"port": 1, "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0,
                        "link_layer": "Ethernet"}]}]
    rd = {i: [(T0 + k * MS - 1000, 2000, 100_000 * k, STATUS_OK) for k in range(101)]
          for i in (0, 1)}
    path = write_capture(tmp_path / "c", [ib("mlx5_0", "tx"), ib("mlx5_0", "rx")], rd,
                         devices=devs)
    r = CliRunner().invoke(main, ["rates", str(path), "--by", "device", "--window", "10ms"])
    assert r.exit_code == 0, r.output
    foot = [ln for ln in r.output.splitlines() if ln.startswith("line rate")]
    assert foot == ["line rate mlx5_0: 400 Gb/s (tx+rx), each direction 200 Gb/s: port rate"], \
        r.output
    j = CliRunner().invoke(main, ["rates", str(path), "--by", "device", "--window", "10ms",
                                  "--json"])
    assert json.loads(j.output)["meta"]["line_rates"]["mlx5_0"]["gbps"] == 400.0
    s = CliRunner().invoke(main, ["rates", str(path), "--window", "10ms"])
    assert "line rate mlx5_0: 200 Gb/s: port rate" in s.output, s.output
