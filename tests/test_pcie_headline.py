"""``peaks`` on a twin whose PCIe link is below its port rate (a DGX Spark twin: port 200 Gb/s,
PCIe Gen5 x4 read from current_link_speed "32.0 GT/s PCIe" and current_link_width "4").

By hand (rdmascope.pcie, PCI Express Base Spec 5.0: 128b/130b):
    bound = 4 lanes x 32 GT/s x 128/130 = 126.0308 Gb/s, below the 200 Gb/s port.
The readings sit on the 1 ms grid with a 100 us read bracket, so each instant is uncertain by
u = 50 us (half the bracket) + 0.1 ms (the adapter's update period, overline.INSTANT_UNC_NS) =
150 us. The fewest bytes the 1 ms window over one interval can hold are the bytes of
[a + u, b - u], i.e. (1 - 2 x 0.15) = 0.7 of that interval's bytes, so the window is ruled out by
physics only when 0.7 x rate > 126.0308, i.e. rate > 126.0308 / 0.7 = 180.04 Gb/s.

- 150 Gb/s in one interval: above 126.03, but 0.7 x 150 = 105 <= 126.03: possible within the
  timing uncertainty, so headlined at the bound, 126.03, "at line rate" with bound_gbps 126.03.
  Against the 200 Gb/s port it would have been headlined as 150 (not at line rate).
- 190 Gb/s in one interval: 0.7 x 190 = 133 > 126.03: over line rate, kept out of the headline
  (the peak is then the 20 Gb/s of the other intervals). Against the port (0.7 x 190 = 133 <= 200,
  and 190 < 200 anyway) it would have been the headline, 190.
"""

from __future__ import annotations

import json

import pytest
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from click.testing import CliRunner
from rdmascope.analysis import byte_intervals, load_capture
from rdmascope.analysis.peaks import peak_table, peak_table_capture

from rdmascope.cli import main
from rdmascope.pcie import pcie_record
from rdmascope.plausibility import line_ceilings

GEN5_X4 = 4 * 32 * 128 / 130  # 126.0308 Gb/s
TWIN = "rocep1s0f1"
DEV = [{"name": TWIN, "pci": "0000:01:00.1", "sys_image_guid": "4cbb:4703:00f6:ac80",
        "netdevs": ["enp1s0f1np1"],
        "ports": [{"port": 1, "rate_gbps": 200.0, "link_layer": "Ethernet"}],
        "pcie": pcie_record({"current_link_speed": "32.0 GT/s PCIe", "current_link_width": "4",
                             "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "4"})}]


def _cap(path, burst_gbps, dur_ns=100_000):
    """The twin's tx at 20 Gb/s for 60 intervals of 1 ms, interval 30 at ``burst_gbps``; the
    readings' brackets of ``dur_ns`` are centred on the 1 ms grid."""
    unit = lambda gbps: int(gbps * 1e9 / 8 * 1e-3 / 4)  # noqa: E731 (4-byte units per 1 ms)
    # exact: 150 Gb/s = 4,687,500 units, 190 Gb/s = 5,937,500, 20 Gb/s = 625,000 per 1 ms
    assert (unit(150.0), unit(190.0), unit(20.0)) == (4_687_500, 5_937_500, 625_000)
    v, rows = 0, []
    for k in range(60):
        rows.append((T0 + k * MS - dur_ns // 2, dur_ns, v, STATUS_OK))
        v += unit(burst_gbps if k == 30 else 20.0)
    return write_capture(path, [ib(TWIN, "tx")], {0: rows}, devices=DEV)


def _rows(path):
    """The 1 ms row of the twin's tx from each peaks path: in memory, streamed, and the CLI."""
    out = []
    for tab in (peak_table(byte_intervals(load_capture(path)), windows_ns=(MS,)),
                peak_table_capture(path, windows_ns=(MS,))):
        out.append(tab[(tab["series"] == f"{TWIN}/tx") & (tab["window_ns"] == MS)].iloc[0]
                   .to_dict())
    r = CliRunner().invoke(main, ["peaks", str(path), "--windows", "1ms", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    table = next(v for k, v in doc.items() if k not in ("meta", "schema_version"))
    out.append(next(x for x in table if x["series"] == f"{TWIN}/tx" and x["window_ns"] == MS))
    assert doc["meta"]["line_rates"][f"{TWIN}/tx"]["gbps"] == pytest.approx(GEN5_X4)
    return out


def test_the_bound_is_the_pcie_link_not_the_port(tmp_path):
    meta = load_capture(_cap(tmp_path / "a", 20.0)).meta
    c = line_ceilings(meta)[TWIN]
    assert c.gbps == pytest.approx(GEN5_X4) and c.source == "PCIe link" and c.port_gbps == 200.0


def test_peak_above_the_pcie_bound_within_the_uncertainty_is_at_line_rate(tmp_path):
    # 150 Gb/s: 0.7 x 150 = 105 <= 126.03 (possible), 150 > 126.03: at line rate, 126.03
    for row in _rows(_cap(tmp_path / "a", 150.0)):
        assert row["bound_gbps"] == pytest.approx(GEN5_X4), row  # not 200
        assert row["at_line_rate"] is True or row["at_line_rate"] == 1, row
        assert row["peak_gbps"] == pytest.approx(GEN5_X4), row  # never 150
        assert row["n_over_line_windows"] == 0, row
        assert row["raw_max_gbps"] == pytest.approx(150.0), row  # the raw number beside it


def test_peak_above_the_pcie_bound_beyond_the_uncertainty_is_kept_out(tmp_path):
    # 190 Gb/s: 0.7 x 190 = 133 > 126.03: over line rate, out of the headline; the peak is the
    # 20 Gb/s of the other windows, not at line rate
    for row in _rows(_cap(tmp_path / "b", 190.0)):
        assert row["bound_gbps"] == pytest.approx(GEN5_X4), row
        assert row["n_over_line_windows"] == 1, row
        assert not row["at_line_rate"], row
        assert row["peak_gbps"] == pytest.approx(20.0), row
        assert row["raw_max_gbps"] == pytest.approx(190.0), row


@pytest.mark.parametrize("burst,over", [(178.0, False), (182.0, True)])
def test_the_edge_of_the_uncertainty_is_126_03_over_0_7(tmp_path, burst, over):
    # either side of 126.0308 / 0.7 = 180.04 Gb/s: 0.7 x 178 = 124.6 <= 126.03 (at line rate),
    # 0.7 x 182 = 127.4 > 126.03 (over line rate, kept out)
    assert (0.7 * burst > GEN5_X4) is over
    row = _rows(_cap(tmp_path / "e", burst))[0]
    assert row["n_over_line_windows"] == int(over), row
    assert bool(row["at_line_rate"]) is not over, row
    assert row["peak_gbps"] == pytest.approx(20.0 if over else GEN5_X4), row
