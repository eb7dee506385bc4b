"""A headline never exceeds the lowest physical bound of its path (hand-computed)."""

from __future__ import annotations

from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from rdmascope.analysis import byte_intervals, load_capture
from rdmascope.analysis.peaks import peak_table, peak_table_capture

DEV = [{"name": "mlx5_0", "pci": "0000:41:00.0", "sys_image_guid": "a088:c203:00b1:5600",
        "netdevs": [], "ports": [{"port": 1, "rate_gbps": 200.0, "link_layer": "InfiniBand"}]}]


def _cap(tmp_path, burst_gbps, dur_ns=100_000):
    """A 200 Gb/s port at 20 Gb/s, one 1 ms interval at ``burst_gbps``; read brackets of
    ``dur_ns`` (a slow firmware command: the instants are uncertain by half of it)."""
    unit = lambda gbps: int(gbps * 1e9 / 8 * 1e-3 / 4)  # noqa: E731 (4-byte units per 1 ms)
    v, rows = 0, []
    for k in range(60):
        rows.append((T0 + k * MS - dur_ns // 2, dur_ns, v, STATUS_OK))
        v += unit(burst_gbps if k == 30 else 20.0)
    path = write_capture(tmp_path, [ib("mlx5_0", "tx")], {0: rows}, devices=DEV)
    return path


def test_peak_within_timing_uncertainty_above_the_bound_is_at_line_rate(tmp_path):
    # 205 Gb/s in one 1 ms interval whose readings' instants are uncertain by 50 us + 0.1 ms
    # each side: the window can have lasted 1.3 ms, 205 / 1.3 = 158 Gb/s <= 200: possible, so
    # not over line rate; but the headline says "at line rate" (200), never 205
    path = _cap(tmp_path / "a", 205.0)
    for tab in (peak_table(byte_intervals(load_capture(path)), windows_ns=(MS,)),
                peak_table_capture(path, windows_ns=(MS,))):
        row = tab[(tab["series"] == "mlx5_0/tx") & (tab["window_ns"] == MS)].iloc[0]
        assert row["bound_gbps"] == 200.0
        assert row["at_line_rate"] and row["peak_gbps"] == 200.0
        assert row["raw_max_gbps"] > 200.0  # the raw number stays visible beside it


def test_peak_below_the_bound_is_its_number(tmp_path):
    path = _cap(tmp_path / "b", 150.0)
    tab = peak_table(byte_intervals(load_capture(path)), windows_ns=(MS,))
    row = tab[(tab["series"] == "mlx5_0/tx") & (tab["window_ns"] == MS)].iloc[0]
    assert not row["at_line_rate"] and abs(row["peak_gbps"] - 150.0) < 0.01


def test_by_device_is_judged_against_both_directions(tmp_path):
    """tx and rx are two directions of one full-duplex link (and of a full-duplex PCIe link):
    a device's tx + rx is judged against 2 x the line rate, never against one direction's."""
    from rdmascope.analysis.series import line_gbps_of

    dev = [{**DEV[0], "pcie": {"current_link_speed": "32.0 GT/s PCIe",
                               "current_link_width": "4"}}]
    rows = {i: [(T0 + k * MS - 1000, 2000, 1000 * k, STATUS_OK) for k in range(5)]
            for i in range(2)}
    path = write_capture(tmp_path / "c", [ib("mlx5_0", "tx"), ib("mlx5_0", "rx")], rows,
                         devices=dev)
    iv = byte_intervals(load_capture(path))
    per_series = line_gbps_of(iv, "series")
    by_dev = line_gbps_of(iv, "device")
    one = per_series["mlx5_0/tx"]
    assert one == per_series["mlx5_0/rx"] and one < 200.0  # the PCIe Gen5 x4 bound, 126 Gb/s
    assert by_dev["mlx5_0"] == 2 * one
