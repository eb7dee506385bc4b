"""Links from evidence (analysis/links.py): twins are one adapter's same function on its PCIe
links (same sys_image_guid), each port its own link, separate adapters never summed. Checked on
the real-host layouts of fixtures/hosts/ (recorded for a moment by the real recorder)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rdmascope.analysis import load_capture, twin_links
from rdmascope.analysis.links import cable_key
from rdmascope.analysis.verify import missing_twins
from rdmascope.sampler.daemon import RecordOptions, record

HOSTS = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"


def _record(tmp_path, layout, devices=None, seconds=0.2):
    out = tmp_path / f"cap-{layout}-{len(devices or [])}"
    res = record(RecordOptions(output=out, sysfs_root=HOSTS / layout / "sys", duration_s=seconds,
                               status=False, devices=devices, netdev_stats=True),
                 log=open("/dev/null", "w"))
    assert res.error is None
    return load_capture(out)


def test_cable_key_rule_by_hand():
    sig = "4cbb:4703:00e1:8a10"
    spark = [{"name": n, "pci": p, "sys_image_guid": sig} for n, p in
             (("a0", "0000:01:00.0"), ("a1", "0000:01:00.1"), ("b0", "0002:01:00.0"),
              ("b1", "0002:01:00.1"))]
    k = [cable_key(d, 1) for d in spark]
    assert k[0] == k[2] and k[1] == k[3] and k[0] != k[1]  # .0 twins, .1 twins, two cables
    azure = [{"name": f"mlx5_ib{i}", "pci": f"01{i + 1:02d}:00:00.0",
              "sys_image_guid": f"0015:5dff:fe33:ee{i:02x}"} for i in range(8)]
    assert len({cable_key(d, 1) for d in azure}) == 8  # eight HCAs, eight cables
    cx3 = {"name": "mlx4_0", "pci": "0000:04:00.0", "sys_image_guid": "0002:c903:00fa:3cd3"}
    assert cable_key(cx3, 1) != cable_key(cx3, 2)  # two ports, two cables
    zero = [{"name": n, "pci": p, "sys_image_guid": "0000:0000:0000:0000"}
            for n, p in (("x", "0000:01:00.1"), ("y", "0002:01:00.1"))]
    assert cable_key(zero[0], 1) != cable_key(zero[1], 1)  # no adapter identity: own device
    old = [{"name": n, "pci": p} for n, p in (("x", "0000:01:00.1"), ("y", "0002:01:00.1"))]
    assert cable_key(old[0], 1) == cable_key(old[1], 1)  # older captures: what they can tell


def test_spark_gb10_four_functions_are_two_cables(tmp_path):
    cap = _record(tmp_path, "spark-gb10")
    links = twin_links(cap)
    got = {k.rsplit("/", 1)[1]: set() for k in links}
    groups = sorted(tuple(sorted(s.split("/")[0] for s in v)) for k, v in links.items()
                    if k.endswith("/tx"))
    assert groups == [("roceP2p1s0f0", "rocep1s0f0"), ("roceP2p1s0f1", "rocep1s0f1")]
    assert set(got) == {"tx", "rx"}


def test_azure_nd_eight_vf_domains_are_eight_links(tmp_path):
    cap = _record(tmp_path, "azure-nd")
    assert twin_links(cap) == {}  # was one invented 2,880 Gb/s link of all eight
    one = _record(tmp_path, "azure-nd", devices=["mlx5_ib0"])
    twins, others = missing_twins(one)
    assert twins == []  # the other seven are separate rails, not "twin of mlx5_ib0"
    assert sorted(others) == [f"mlx5_ib{i}" for i in range(1, 8)]


def test_spark_one_twin_recorded_names_its_twin_only(tmp_path):
    one = _record(tmp_path, "spark-gb10", devices=["rocep1s0f1"])
    twins, others = missing_twins(one)
    assert [(t["name"], t["twin_of"]) for t in twins] == [("roceP2p1s0f1", "rocep1s0f1")]
    assert sorted(others) == ["roceP2p1s0f0", "rocep1s0f0"]


def test_connectx3_vpi_two_ports_are_two_links(tmp_path):
    cap = _record(tmp_path, "cx3-vpi")
    assert twin_links(cap) == {}  # two cables (IB FDR 56 and RoCE 40), never summed
    from rdmascope.analysis.series import line_rates

    c = cap.counters
    ib = c[c["data"] & (c["source"] == "infiniband")]
    by_port = {int(r.port): r.series for r in ib.itertuples() if r.direction == "tx"}
    rates = line_rates(cap)
    # each port judged at its own rate (port 2 was judged at port 1's 56 Gb/s); the PCIe
    # Gen3 x8 bound (63.0 Gb/s) is above both
    assert rates[by_port[1]]["gbps"] == 56.0
    assert rates[by_port[2]]["gbps"] == 40.0


@pytest.mark.parametrize("layout", ["cx8-xdr", "ib-ipoib"])
def test_other_layouts_record(tmp_path, layout):
    cap = _record(tmp_path, layout)
    assert len(cap.counters) > 0 and twin_links(cap) == {}


def test_connectx8_xdr_rates_and_pcie_bound(tmp_path):
    """ConnectX-8 XDR: "800 Gb/sec (4X XDR)" and "200 Gb/sec (1X XDR)" parse to 800 and 200 Gb/s,
    each port judged at its own rate; its PCIe Gen6 x16 link (64 GT/s, FLIT 242/256) bounds a
    direction at 968 Gb/s, above both ports, so the port rate is the line rate."""
    from rdmascope.analysis.series import line_rates

    from rdmascope.pcie import record_bound

    cap = _record(tmp_path, "cx8-xdr")
    got = {d["name"]: d for d in cap.meta["devices"]}
    assert [p["rate_gbps"] for p in got["mlx5_0"]["ports"]] == [800.0]
    assert [p["rate_gbps"] for p in got["mlx5_1"]["ports"]] == [200.0]
    for d in got.values():
        bound, why = record_bound(d["pcie"])
        assert bound == pytest.approx(968.0, abs=0.05) and "64 GT/s x16" in why, why
    rates = line_rates(cap)
    assert {k: v["gbps"] for k, v in rates.items()} == {
        "mlx5_0/tx": 800.0, "mlx5_0/rx": 800.0, "mlx5_1/tx": 200.0, "mlx5_1/rx": 200.0}
    assert all(v["source"].endswith("port rate") for v in rates.values())
