"""The PCIe link of each RDMA device bounds its line rate (a DGX Spark twin: Gen5 x4, 126 Gb/s).

Expected values are computed here from the PCIe generations' encodings (lanes x GT/s x
128/130 or 8/10), checked against the kernel's own "available PCIe bandwidth" boot-log numbers
(drivers/pci/pci.h PCIE_SPEED2MBS_ENC: "252.048 Gb/s with 16.0 GT/s PCIe x16", "7.876 Gb/s
with 8.0 GT/s PCIe x1", "4.000 Gb/s ... 5.0 GT/s PCIe x1"; the kernel truncates to whole Mb/s
per lane).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from click.testing import CliRunner
from rdmascope.analysis import (
    QUALITY_OVER_LINE,
    byte_intervals,
    line_gbps_of,
    line_rates,
    load_capture,
    peak_table,
    rebin_with_quality,
)

from rdmascope.cli import main
from rdmascope.pcie import link_bound_gbps, parse_link_speed, parse_link_width, pcie_record
from rdmascope.plausibility import line_ceilings, link_gbps_override

GEN5_X4 = 4 * 32 * 128 / 130  # 126.03 Gb/s


@pytest.mark.parametrize("text,gts", [
    ("32.0 GT/s PCIe", 32.0), ("32.0 GT/s PCIe\n", 32.0), ("2.5 GT/s PCIe", 2.5),
    ("32 GT/s", 32.0), ("8 GT/s", 8.0), ("64.0 GT/s PCIe", 64.0),
    ("Unknown", None), ("Unknown speed", None), ("", None), (None, None), ("33.0 GT/s PCIe", None),
])
def test_parse_link_speed(text, gts):
    assert parse_link_speed(text) == gts


@pytest.mark.parametrize("text,w", [("4", 4), ("16\n", 16), ("0", None), ("x4", None),
                                    (None, None), ("-1", None)])
def test_parse_link_width(text, w):
    assert parse_link_width(text) == w


def test_bounds_match_the_encodings_and_the_kernel():
    assert link_bound_gbps(32.0, 4) == pytest.approx(126.0307692)
    assert link_bound_gbps(16.0, 16) == pytest.approx(252.048, abs=0.02)   # kernel boot log
    assert link_bound_gbps(8.0, 1) == pytest.approx(7.876, abs=0.001)
    assert link_bound_gbps(5.0, 1) == pytest.approx(4.0)
    assert link_bound_gbps(2.5, 8) == pytest.approx(16.0)                  # 8 x 2.5 x 8/10
    assert link_bound_gbps(64.0, 4) == pytest.approx(4 * 64 * 242 / 256)   # FLIT 242/256
    assert link_bound_gbps(None, 4) is None and link_bound_gbps(32.0, None) is None


# ----------------------------------------------------------------------------------------------
# discovery: the emulated Spark tree offers the files; a tree without them gives no bound
# ----------------------------------------------------------------------------------------------


def _tree(tmp_path, **kw):
    from rdmascope.emulator.tree import build_tree

    return build_tree(tmp_path / "sys", seed=3, **kw)


def test_discovery_reads_the_pcie_link(tmp_path):
    from rdmascope.sampler.discovery import discover

    tree = _tree(tmp_path)
    devs = discover(tree.root)
    assert len(devs) == 2
    for d in devs:
        assert d.pcie["current_link_speed"] == "32.0 GT/s PCIe"
        assert d.pcie["current_link_width"] == "4"
        assert d.pcie["bound_gbps"] == pytest.approx(GEN5_X4)
        assert d.pcie["max_bound_gbps"] == pytest.approx(GEN5_X4)
    r = CliRunner().invoke(main, ["devices", "--sysfs-root", str(tree.root)])
    assert r.exit_code == 0, r.output
    assert r.output.count("PCIe link: 32 GT/s x4 (PCIe 5.0, 128b/130b) = 126.0 Gb/s") == 2


def test_discovery_without_or_with_unreadable_pcie_files(tmp_path):
    from rdmascope.sampler.discovery import discover

    from rdmascope.pcie import PCIE_FILES

    tree = _tree(tmp_path)
    d0, d1 = (os.path.realpath(os.path.join(tree.root, "class/infiniband", n, "device"))
              for n in sorted(os.listdir(tree.root / "class/infiniband")))
    for f in PCIE_FILES:  # first device: no PCIe files at all (not a PCIe function)
        os.remove(os.path.join(d0, f))
    with open(os.path.join(d1, "current_link_speed"), "w") as f:  # second: speed unknown
        f.write("Unknown\n")
    os.remove(os.path.join(d1, "current_link_width"))
    os.mkdir(os.path.join(d1, "current_link_width"))  # a read that fails (EISDIR)
    by = {d.name: d for d in discover(tree.root)}
    names = sorted(by)
    first = [n for n in names if by[n].pci and os.path.basename(d0) == by[n].pci][0]
    second = [n for n in names if n != first][0]
    assert by[first].pcie is None
    assert by[second].pcie["bound_gbps"] is None and by[second].pcie["gts"] is None
    assert by[second].pcie["current_link_width"] is None
    assert by[second].pcie["max_bound_gbps"] == pytest.approx(GEN5_X4)
    assert not any("link_width" in w for w in by[second].warnings)
    r = CliRunner().invoke(main, ["devices", "--sysfs-root", str(tree.root)])
    assert "PCIe link: none" in r.output and "PCIe link: unknown" in r.output


def test_pcie_width_for_the_emulated_twin():
    from rdmascope.emulator.tree import pcie_width_for

    assert pcie_width_for(109.0) == 4          # a Spark twin
    assert pcie_width_for(GEN5_X4) == 4
    assert pcie_width_for(200.0) == 8          # a single-function 200 Gb/s NIC
    assert pcie_width_for(300.0) == 16


# ----------------------------------------------------------------------------------------------
# analysis: min(port rate, PCIe bound) is the ceiling, and the source is said
# ----------------------------------------------------------------------------------------------


def _dev(name, pci, width="4", speed="32.0 GT/s PCIe", port=200.0):
    d = {"name": name, "pci": pci, "ports": [{"port": 1, "rate_gbps": port}]}
    if width is not None:
        d["pcie"] = pcie_record({"current_link_speed": speed, "current_link_width": width,
                                 "max_link_speed": speed, "max_link_width": width})
    return d


def _capture(path, devices, mb_per_ms, n=20):
    """Each device's tx carries ``mb_per_ms`` MB in every 1 ms interval (readings on the grid,
    2 us read bracket)."""
    rd, counters = {}, []
    for i, d in enumerate(devices):
        counters.append(ib(d["name"], "tx"))
        units = np.arange(n + 1) * int(mb_per_ms * 1e6 / 4)
        rd[i] = [(T0 + k * MS - 1000, 2000, int(u), STATUS_OK) for k, u in enumerate(units)]
    return load_capture(write_capture(path, counters, rd, devices=devices))


def _n_over(cap, **kw):
    _, q = rebin_with_quality(byte_intervals(cap), MS, line_gbps=kw.get("line_gbps"))
    return int(((q.to_numpy() & QUALITY_OVER_LINE) != 0).sum())


def test_twin_over_its_pcie_link_is_flagged(tmp_path):
    # 20 MB per ms = 160 Gb/s; a 1 ms window holds at least 20 x (1 - 2 x 0.101) = 15.96 MB =
    # 127.7 Gb/s (readings moved by half bracket 1 us + 0.1 ms): above 126.03 (Gen5 x4), below
    # the 200 Gb/s port.
    assert 15.96 * 8 > GEN5_X4 and 15.96 * 8 < 200
    spark = _capture(tmp_path / "a", [_dev("rocep1s0f1", "0000:01:00.1")], 20.0)
    assert line_ceilings(spark.meta)["rocep1s0f1"].gbps == pytest.approx(GEN5_X4)
    assert line_ceilings(spark.meta)["rocep1s0f1"].source == "PCIe link"
    n = _n_over(spark)
    assert n == 20  # every window: readings sit exactly on the 1 ms grid
    row = peak_table(byte_intervals(spark), windows_ns=(MS,)).iloc[0]
    assert row.n_over_line_windows == 20 and np.isnan(row.peak_gbps)
    # the same traffic with no PCIe record, an x8 link, or an unknown speed: never flagged
    for i, dev in enumerate([_dev("rocep1s0f1", "0000:01:00.1", width=None),
                             _dev("rocep1s0f1", "0000:01:00.1", width="8"),
                             _dev("rocep1s0f1", "0000:01:00.1", speed="Unknown")]):
        cap = _capture(tmp_path / f"b{i}", [dev], 20.0)
        assert _n_over(cap) == 0
    # --link-gbps states the rate: no PCIe bound
    with link_gbps_override(300.0):
        assert _n_over(load_capture(tmp_path / "a")) == 0
        assert line_ceilings(spark.meta)["rocep1s0f1"].source == "--link-gbps"


def test_peaks_cli_says_where_the_line_rate_came_from(tmp_path):
    _capture(tmp_path / "a", [_dev("rocep1s0f1", "0000:01:00.1")], 20.0)
    r = CliRunner().invoke(main, ["peaks", str(tmp_path / "a"), "--windows", "1ms"])
    assert r.exit_code == 0, r.output
    assert ("line rate rocep1s0f1: 126.0 Gb/s: PCIe link 32 GT/s x4 (PCIe 5.0, 128b/130b), "
            "below the 200 Gb/s port rate") in r.output
    r = CliRunner().invoke(main, ["peaks", str(tmp_path / "a"), "--windows", "1ms", "--json",
                                  "--link-gbps", "300"])
    assert r.exit_code == 0, r.output
    meta = json.loads(r.stdout)["meta"]
    assert meta["line_rates"]["rocep1s0f1/tx"] == {"gbps": 300.0, "source": "300 Gb/s: --link-gbps"}


def test_link_of_twins_port_rate_or_sum_of_pcie_links(tmp_path):
    twins = [_dev("rocep1s0f1", "0000:01:00.1"), _dev("roceP2p1s0f1", "0002:01:00.1")]
    cap = _capture(tmp_path / "a", twins, 16.0)
    groups = {"link": ["rocep1s0f1/tx", "roceP2p1s0f1/tx"]}
    r = line_rates(cap, groups=groups)
    assert r["rocep1s0f1/tx"]["gbps"] == pytest.approx(GEN5_X4)
    # the cable: min(200 port, 2 x 126.03) = 200
    assert r["link"]["gbps"] == pytest.approx(200.0)
    assert r["link"]["source"].startswith("200 Gb/s: port rate")
    # twins on x2 links: 2 x 63.02 = 126.03 < 200
    narrow = [_dev("rocep1s0f1", "0000:01:00.1", width="2"),
              _dev("roceP2p1s0f1", "0002:01:00.1", width="2")]
    r2 = line_rates(_capture(tmp_path / "b", narrow, 1.0), groups=groups)
    assert r2["link"]["gbps"] == pytest.approx(2 * 2 * 32 * 128 / 130)
    assert "PCIe links" in r2["link"]["source"]
    # two functions of ONE PCIe link (0000:01:00.0 and .1, different cables): the link once
    same = [_dev("mlx5_0", "0000:01:00.0"), _dev("mlx5_1", "0000:01:00.1")]
    cap3 = _capture(tmp_path / "c", same, 1.0)
    lines = line_gbps_of(byte_intervals(cap3), groups={"both": ["mlx5_0/tx", "mlx5_1/tx"]})
    assert lines["both"] == pytest.approx(GEN5_X4)
    # one twin with no PCIe record: the cable's PCIe bound is unknown, the port rate stands
    half = [_dev("rocep1s0f1", "0000:01:00.1", width="2"),
            _dev("roceP2p1s0f1", "0002:01:00.1", width=None)]
    r4 = line_rates(_capture(tmp_path / "d", half, 1.0), groups=groups)
    assert r4["link"]["gbps"] == pytest.approx(200.0)
    assert r4["roceP2p1s0f1/tx"]["gbps"] == pytest.approx(200.0)


def test_emulated_record_and_pcie_take_the_lower(tmp_path):
    from rdmascope.models import MANIFEST_SETUP_KEY

    d = [_dev("rocep1s0f1", "0000:01:00.1")]
    cap = _capture(tmp_path / "a", d, 1.0)
    meta = dict(cap.meta, extra={MANIFEST_SETUP_KEY: {"emulated": True, "link_gbps": 100.0,
                                                      "emulated_real_gbps": 109.0}})
    c = line_ceilings(meta)["rocep1s0f1"]
    assert (c.gbps, c.source) == (109.0, "record --emulated")
    meta["extra"][MANIFEST_SETUP_KEY]["emulated_real_gbps"] = 150.0
    c = line_ceilings(meta)["rocep1s0f1"]
    assert c.gbps == pytest.approx(GEN5_X4) and c.source == "PCIe link"


def test_old_capture_without_pcie_loads_and_uses_the_port_rate():
    cap = load_capture("fixtures/v1-capture")
    assert all(c.pcie_gbps is None for c in line_ceilings(cap.meta).values())


def test_simulated_capture_records_the_twins_pcie_link(tmp_path):
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(tmp_path / "s"),
                                  "--scenario", "single4k"])
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert [d["pcie"]["bound_gbps"] for d in m["devices"]] == [pytest.approx(GEN5_X4)] * 2


def test_rates_bursts_verify_say_the_line_rate(tmp_path):
    _capture(tmp_path / "a", [_dev("rocep1s0f1", "0000:01:00.1")], 20.0)
    want = ("line rate rocep1s0f1: 126.0 Gb/s: PCIe link 32 GT/s x4 (PCIe 5.0, 128b/130b), "
            "below the 200 Gb/s port rate")
    for args in (["rates", "--window", "1ms"], ["bursts"], ["verify-emulation", "--expect-single"]):
        r = CliRunner().invoke(main, [args[0], str(tmp_path / "a"), *args[1:]])
        assert r.exit_code in (0, 1), r.output
        assert want in r.output, args
        js = CliRunner().invoke(main, [args[0], str(tmp_path / "a"), *args[1:], "--json"])
        assert json.loads(js.stdout)["meta"]["line_rates"]["rocep1s0f1/tx"]["gbps"] == \
            pytest.approx(GEN5_X4)
