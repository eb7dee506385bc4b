"""Discovery against the real procfs sysfs trees and against odd trees built in tmp_path."""

from __future__ import annotations

import json
import os

import pytest
from rdmascope.sampler.discovery import (
    available_counters,
    counter_descriptors,
    counter_exists,
    discover,
    discovered_devices,
    parse_rate,
    parse_state,
)
from rdmascope.sampler.faketree import build_device
from rdmascope.sampler.reader import CounterReader, SweepBuffers


@pytest.fixture(scope="module")
def real(procfs_sys):
    return {d.name: d for d in discover(procfs_sys)}


@pytest.mark.parametrize("text,gbps", [
    ("200 Gb/sec (4X HDR)", 200.0),
    ("2.5 Gb/sec (1X SDR)", 2.5),
    ("10 Gb/sec (4X)", 10.0),
    ("25 Gb/sec (1X EDR)", 25.0),
    ("40 Gb/sec", 40.0),
    ("fast", None),
    ("Gb/sec 200", None),
    ("", None),
    (None, None),
])
def test_parse_rate(text, gbps):
    assert parse_rate(text) == gbps


@pytest.mark.parametrize("text,parsed", [
    ("4: ACTIVE", (4, "ACTIVE")),
    ("5: LinkUp", (5, "LinkUp")),
    ("1: DOWN", (1, "DOWN")),
    ("3: Disabled by something", (3, "Disabled by something")),
    ("ACTIVE", None),
    ("x: ACTIVE", None),
    (None, None),
])
def test_parse_state(text, parsed):
    assert parse_state(text) == parsed


def test_real_tree_devices(real):
    assert sorted(real) == ["hfi1_0", "mlx4_0", "mlx5_0"]


def test_real_mlx5_port1(real, procfs_sys):
    d = real["mlx5_0"]
    assert d.node_guid == "0a7f:bc12:45ef:d23b"  # file has no trailing newline
    assert d.fw_ver == "14.28.2006" and d.hca_type == "MT4118"
    (p,) = d.ports
    assert (p.port, p.state, p.state_id) == (1, "ACTIVE", 4)
    assert (p.phys_state, p.phys_state_id) == ("ACTIVE", 4)
    assert p.link_layer == "InfiniBand"
    assert p.rate == "25 Gb/sec (1X EDR)" and p.rate_gbps == 25.0
    assert p.extended_counters is True  # unicast_xmit_packets exists
    assert p.hw_counters_lifespan_ms == 10
    hw_dir = procfs_sys / "class/infiniband/mlx5_0/ports/1/hw_counters"
    assert sorted(p.hw_counters) == sorted(set(os.listdir(hw_dir)) - {"lifespan"})
    assert "port_xmit_data" in p.counters and "unicast_xmit_packets" in p.counters


def test_real_mlx5_port_xmit_data_bytes(real):
    """mlx5_0 port 1 port_xmit_data 2880761508848 -> 11523046035392 bytes (procfs's tests)."""
    descs = counter_descriptors([real["mlx5_0"]])
    assert [(c["name"], c["direction"]) for c in descs] == [("port_xmit_data", "tx"),
                                                            ("port_rcv_data", "rx")]
    r = CounterReader([c["path"] for c in descs])
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    r.close()
    assert buf.value[0] == 2880761508848
    assert buf.value[0] * descs[0]["bytes_per_unit"] == 11523046035392
    assert descs[0]["unit"] == "4 bytes" and descs[0]["width_bits"] == 64


def test_real_mlx4_two_ports_and_blank_line(real, procfs_sys):
    d = real["mlx4_0"]
    assert [p.port for p in d.ports] == [1, 2]
    raw = (procfs_sys / "class/infiniband/mlx4_0/ports/2/link_layer").read_bytes()
    assert raw == b"InfiniBand\n\n"  # the odd file is still there
    assert [p.link_layer for p in d.ports] == ["InfiniBand", "InfiniBand"]
    assert [p.rate_gbps for p in d.ports] == [40.0, 40.0]
    # no unicast files, but port_xmit_data = 26509113295 > 2^32-1 proves 64-bit counters
    assert d.ports[0].extended_counters is True
    assert "2^32-1" in d.ports[0].extended_evidence


def test_real_hfi1_without_hca_type(real):
    d = real["hfi1_0"]
    assert d.hca_type is None
    assert not any("hca_type" in w for w in d.warnings)  # driver-specific: absent is normal
    assert d.fw_ver == "1.27.0"
    assert d.ports[0].rate_gbps == 100.0
    assert d.node_guid is None and any("node_guid" in w for w in d.warnings)
    assert d.pci is None and any("PCI address unavailable" in w for w in d.warnings)


def test_to_dict_is_json(real):
    s = json.dumps([d.to_dict() for d in real.values()])
    back = json.loads(s)
    assert back[0]["ports"][0]["port"] == 1


def test_widths_of_narrow_counters(real):
    descs = counter_descriptors([real["mlx5_0"]], ["port_xmit_wait", "link_downed",
                                                   "symbol_error", "port_xmit_packets",
                                                   "unicast_rcv_packets", "out_of_sequence"])
    got = {c["name"]: (c["width_bits"], c["unit"], c["bytes_per_unit"]) for c in descs}
    assert got == {
        "port_xmit_wait": (32, "count", None),
        "link_downed": (8, "count", None),
        "symbol_error": (16, "count", None),
        "port_xmit_packets": (64, "packets", None),
        "unicast_rcv_packets": (64, "packets", None),
        "out_of_sequence": (None, "count", None),  # from hw_counters/
    }
    hw = [c for c in descs if c["name"] == "out_of_sequence"][0]
    assert hw["path"].endswith("/ports/1/hw_counters/out_of_sequence")


def test_tmp_tree_pci_netdevs_and_netdev_descriptors(tmp_path):
    build_device(tmp_path, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    build_device(tmp_path, "roceP2p1s0f1", pci="0002:01:00.1", netdev="enP2p1s0f1np1")
    devs = discover(tmp_path)
    assert [(d.name, d.pci, d.netdevs) for d in devs] == [
        ("roceP2p1s0f1", "0002:01:00.1", ["enP2p1s0f1np1"]),
        ("rocep1s0f1", "0000:01:00.1", ["enp1s0f1np1"]),
    ]
    assert all(not d.warnings for d in devs)
    descs = counter_descriptors(devs, netdev_stats=True)
    net = [c for c in descs if c["source"] == "netdev"]
    assert [(c["netdev"], c["name"], c["bytes_per_unit"], c["unit"], c["direction"], c["port"])
            for c in net] == [
        ("enP2p1s0f1np1", "tx_bytes", 1, "bytes", "tx", None),
        ("enP2p1s0f1np1", "rx_bytes", 1, "bytes", "rx", None),
        ("enp1s0f1np1", "tx_bytes", 1, "bytes", "tx", None),
        ("enp1s0f1np1", "rx_bytes", 1, "bytes", "rx", None),
    ]
    assert net[0]["path"] == str(tmp_path / "class/net/enP2p1s0f1np1/statistics/tx_bytes")
    assert os.path.isfile(net[0]["path"])


def test_emulate_missing_infiniband_dir(tmp_path):
    assert discover(tmp_path) == []


def test_emulate_odd_files_degrade_to_unavailable(tmp_path):
    dev = build_device(tmp_path, "mlx5_0", pci="0000:01:00.0", netdev="eth0")
    p1 = dev / "ports/1"
    (p1 / "rate").write_text("unknown speed\n")
    (p1 / "state").write_text("ACTIVE\n")
    (dev / "fw_ver").unlink()
    (dev / "fw_ver").mkdir()  # a directory where a file is expected: read fails (EISDIR)
    (p1 / "link_layer").write_bytes(b"\xff\xfe\n")  # not UTF-8
    (dev / "node_guid").write_text("")
    (d,) = discover(tmp_path)
    assert d.fw_ver is None and d.node_guid is None
    p = d.ports[0]
    assert p.rate == "unknown speed" and p.rate_gbps is None
    assert p.state is None and p.state_id is None
    assert p.link_layer is None
    assert p.phys_state == "LinkUp"  # the rest of the port is still read
    joined = "\n".join(d.warnings)
    for item in ("fw_ver", "node_guid", "rate_gbps", "'<id>: <name>'", "link_layer"):
        assert item in joined
    assert len(d.warnings) == 5  # one message per odd item


def test_emulate_missing_counters_folder_and_unknown_width(tmp_path):
    dev = build_device(tmp_path, "irdma0", pci="0000:02:00.0",
                       counters=("port_xmit_data", "port_rcv_data"))
    build_device(tmp_path, "bnxt_re0", pci="0000:03:00.0", counters=())
    os.rmdir(tmp_path / "class/infiniband/bnxt_re0/ports/1/counters")
    devs = {d.name: d for d in discover(tmp_path)}
    # small values and no unicast files: the width cannot be known
    assert devs["irdma0"].ports[0].extended_counters is None
    descs = counter_descriptors([devs["irdma0"]])
    assert [c["width_bits"] for c in descs] == [None, None]
    assert [c["bytes_per_unit"] for c in descs] == [4, 4]  # never the lane count
    b = devs["bnxt_re0"]
    assert b.ports[0].counters == [] and b.ports[0].counters_dir is None
    assert any("counters unavailable" in w for w in b.warnings)
    # a value above 2^32-1 proves the 64-bit set
    (dev / "ports/1/counters/port_rcv_data").write_text(f"{1 << 33}\n")
    (d,) = discover(tmp_path, devices=["irdma0"])
    assert d.ports[0].extended_counters is True
    assert [c["width_bits"] for c in counter_descriptors([d])] == [64, 64]


def test_emulate_old_kernel_counters_ext(tmp_path):
    dev = build_device(tmp_path, "mlx4_0", pci="0000:04:00.0", counters=())
    p1 = dev / "ports/1"
    os.rmdir(p1 / "counters")
    (p1 / "counters_ext").mkdir()
    for n, v in (("port_xmit_data_64", 123), ("port_rcv_data_64", 456)):
        (p1 / "counters_ext" / n).write_text(f"{v}\n")
    (d,) = discover(tmp_path)
    p = d.ports[0]
    assert p.counters_dir == "counters_ext" and p.extended_counters is True
    descs = counter_descriptors([d])
    assert [c["name"] for c in descs] == ["port_xmit_data", "port_rcv_data"]
    assert descs[0]["path"].endswith("counters_ext/port_xmit_data_64")
    assert [c["width_bits"] for c in descs] == [64, 64]
    r = CounterReader([c["path"] for c in descs])
    buf = SweepBuffers()
    r.read_sweep(0, buf)
    assert list(buf.value) == [123, 456]


def test_unknown_device_requested(tmp_path):
    build_device(tmp_path, "mlx5_0", pci="0000:01:00.0")
    (d,) = discover(tmp_path, devices=["mlx5_9"])
    assert d.ports == [] and "no such RDMA device" in d.warnings[0]


def test_missing_counter_is_still_described(tmp_path):
    build_device(tmp_path, "mlx5_0", pci="0000:01:00.0", counters=("port_xmit_data",))
    descs = counter_descriptors(discover(tmp_path))
    assert [c["name"] for c in descs] == ["port_xmit_data", "port_rcv_data"]
    assert not os.path.exists(descs[1]["path"])


def test_available_counters_and_counter_exists_on_the_real_mlx5(real, procfs_sys):
    d = real["mlx5_0"]
    (p,) = d.ports
    port_dir = procfs_sys / "class/infiniband/mlx5_0/ports/1"
    files = set(os.listdir(port_dir / "counters"))
    hw = set(os.listdir(port_dir / "hw_counters")) - {"lifespan"}
    assert available_counters([d]) == sorted(files | {f"hw_counters/{c}" for c in hw})
    some_hw = sorted(hw)[0]
    assert counter_exists(d, p, "port_xmit_wait") is ("port_xmit_wait" in files)
    assert counter_exists(d, p, f"hw_counters/{some_hw}")
    assert counter_exists(d, p, some_hw)  # found in hw_counters/ when not in counters/
    assert not counter_exists(d, p, "nosuch_counter")
    assert not counter_exists(d, p, "hw_counters/port_xmit_data")


def test_discovered_devices_names_pci_and_netdevs(tmp_path):
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    build_device(root, "roceP2p1s0f1", pci="0002:01:00.1", netdev="enP2p1s0f1np1")
    assert discovered_devices(discover(root)) == [
        {"name": "roceP2p1s0f1", "pci": "0002:01:00.1", "netdevs": ["enP2p1s0f1np1"],
         "sys_image_guid": "0a7f:bc12:45ef:d200"},
        {"name": "rocep1s0f1", "pci": "0000:01:00.1", "netdevs": ["enp1s0f1np1"],
         "sys_image_guid": "0a7f:bc12:45ef:d200"},
    ]


def test_width_table_netdev_and_mlx5_driver(tmp_path):
    """The width of a source the kernel fixes comes from the width table, not from the values:
    netdev statistics are u64 (net/core/net-sysfs.c); counters/ of an mlx5_core function are the
    64-bit extended set (mlx5 mad.c ClassPortInfo) even without the unicast files."""
    from rdmascope.sampler.discovery import COUNTER_WIDTHS

    narrow = ("port_xmit_data", "port_rcv_data")
    build_device(tmp_path, "mlx5_0", pci="0000:01:00.0", netdev="enp1s0f0np0", counters=narrow)
    build_device(tmp_path, "qib0", pci="0000:02:00.0", counters=narrow)
    drv = tmp_path / "bus/pci/drivers/mlx5_core"
    drv.mkdir(parents=True)
    pci_dir = tmp_path / "devices/pci0000:00/0000:01:00.0"
    os.symlink(os.path.relpath(drv, pci_dir), pci_dir / "driver")
    (tmp_path / "class/infiniband/mlx5_0/sys_image_guid").write_text("0a7f:bc12:45ef:d23a\n")
    devs = {d.name: d for d in discover(tmp_path)}
    m = devs["mlx5_0"]
    assert m.driver == "mlx5_core" and m.sys_image_guid == "0a7f:bc12:45ef:d23a"
    assert m.ports[0].extended_counters is True and "mlx5_core" in m.ports[0].extended_evidence
    assert devs["qib0"].driver is None and devs["qib0"].ports[0].extended_counters is None
    descs = counter_descriptors(list(devs.values()), netdev_stats=True)
    widths = {(c["device"], c["source"], c["name"]): c["width_bits"] for c in descs}
    assert widths[("mlx5_0", "infiniband", "port_xmit_data")] == 64
    assert widths[("qib0", "infiniband", "port_xmit_data")] is None  # unknown: from the values
    assert widths[("mlx5_0", "netdev", "tx_bytes")] == 64
    assert COUNTER_WIDTHS[("netdev", "*")][0] == 64
