"""The emulation check on one-twin and two-twin captures, no traffic, and TCP instead of RDMA."""

from __future__ import annotations

import pytest
from capture_builders import MS, STATUS_OK, T0, ib, netdev, write_capture
from rdmascope.analysis import load_capture, verify_emulation

TWINS = [{"name": "rocep1s0f1", "pci": "0000:01:00.1"},
         {"name": "roceP2p1s0f1", "pci": "0002:01:00.1"}]


def _cap(tmp_path, per_ms_units, *, kernel_per_ms=None, n=11):
    """Twins A, B with tx/rx counters growing by per_ms_units[(dev, dir)] units each ms."""
    counters, rd = [], {}
    for dev in ("rocep1s0f1", "roceP2p1s0f1"):
        for d in ("tx", "rx"):
            cid = len(counters)
            counters.append(ib(dev, d))
            u = per_ms_units.get((dev, d), 0)
            rd[cid] = [(T0 + k * MS + 20 * cid, 0, 10**6 + u * k, STATUS_OK) for k in range(n)]
    if kernel_per_ms is not None:
        cid = len(counters)
        counters.append(netdev("rocep1s0f1", "enp1s0f1np1", "tx"))
        rd[cid] = [(T0 + k * MS + 200, 0, kernel_per_ms * k, STATUS_OK) for k in range(n)]
    return load_capture(write_capture(tmp_path / "c", counters, rd, devices=TWINS))


def test_one_twin_capture_passes_single(tmp_path):
    # A sends 1 MB and receives 0.5 MB per ms (250,000 / 125,000 units of 4 B), B is idle
    cap = _cap(tmp_path, {("rocep1s0f1", "tx"): 250_000, ("rocep1s0f1", "rx"): 125_000})
    v = verify_emulation(cap)
    assert v.ok and v.expect == "single" and v.main_device == "rocep1s0f1"
    d = v.devices
    assert d.at["rocep1s0f1", "tx_bytes"] == pytest.approx(10 * 1e6)
    assert d.at["rocep1s0f1", "rx_bytes"] == pytest.approx(10 * 0.5e6)
    assert d.at["rocep1s0f1", "share"] == 1.0 and d.at["roceP2p1s0f1", "share"] == 0.0
    assert d.at["rocep1s0f1", "peak_1ms_gbps"] == pytest.approx(8.0)  # 1 MB per ms
    assert "rocep1s0f1 carries 100.00 %" in v.message
    assert not verify_emulation(cap, expect="both").ok
    assert v.kernel is None and not v.tcp_suspected


def test_two_twin_capture_fails_single_passes_both(tmp_path):
    cap = _cap(tmp_path, {("rocep1s0f1", "tx"): 250_000, ("roceP2p1s0f1", "tx"): 250_000,
                          ("roceP2p1s0f1", "rx"): 50_000})
    v = verify_emulation(cap)
    assert not v.ok
    assert v.devices.at["roceP2p1s0f1", "share"] == pytest.approx(1.2 / 2.2)
    assert "NOT a single interface" in v.message
    assert verify_emulation(cap, expect="both").ok


def test_range_limits_the_bytes(tmp_path):
    cap = _cap(tmp_path, {("rocep1s0f1", "tx"): 250_000})
    v = verify_emulation(cap, start_ns=T0 + 2 * MS, end_ns=T0 + 5 * MS)
    # 3 ms at 1 MB per ms (readings of counter 0 at exact ms instants)
    assert v.devices.at["rocep1s0f1", "tx_bytes"] == pytest.approx(3e6)
    assert v.total_bytes == pytest.approx(3e6)


def test_no_traffic_cannot_pass(tmp_path):
    v = verify_emulation(_cap(tmp_path, {}))
    assert not v.ok and "cannot judge" in v.message and v.total_bytes == 0


def test_tcp_instead_of_rdma_is_flagged(tmp_path):
    # a little RDMA (only A: "single" would pass) but 5 MB per ms through the kernel stack
    cap = _cap(tmp_path, {("rocep1s0f1", "tx"): 1000}, kernel_per_ms=5_000_000)
    v = verify_emulation(cap)
    assert v.tcp_suspected and not v.ok
    assert "TCP SUSPECTED" in v.message
    # the range is that of the RDMA readings, [T0, T0 + 10 ms + 60 ns); the netdev readings
    # cover [T0 + 200 ns, ...): 5 MB/ms over 10 ms - 140 ns
    assert v.kernel.at["rocep1s0f1", "kernel_bytes"] == pytest.approx(5e6 * (10 - 140e-6))
    assert v.kernel.at["rocep1s0f1", "rdma_bytes"] == pytest.approx(40_000)
    # idle kernel stack beside real RDMA traffic: no flag
    cap2 = _cap(tmp_path / "x", {("rocep1s0f1", "tx"): 250_000}, kernel_per_ms=100)
    v2 = verify_emulation(cap2)
    assert v2.ok and not v2.tcp_suspected and v2.kernel is not None
    assert v2.to_dict()["devices"][0]["device"] == "rocep1s0f1"


@pytest.mark.parametrize("name,ok,tcp", [("sim-p2-emulated100", True, False),
                                         ("sim-p4-emulated100", True, False),
                                         ("sim-p2-200", False, False),
                                         ("sim-p4-200", False, False),
                                         ("sim-p1-tcp-fallback", False, True)])
def test_emulator_fixtures(fixtures_dir, name, ok, tcp):
    """The committed emulator captures: one twin when emulated, both at 200, TCP flagged."""
    path = fixtures_dir / name
    if not (path / "manifest.json").is_file():
        pytest.skip(f"fixture {name} not committed")
    v = verify_emulation(load_capture(path))
    assert v.ok is ok and v.tcp_suspected is tcp
    if name.endswith("emulated100"):
        assert v.main_device == "rocep1s0f1" and v.devices.at["rocep1s0f1", "share"] == 1.0
    elif name.endswith("-200"):
        # NCCL spreads evenly over the twins
        assert v.devices["share"].tolist() == pytest.approx([0.5, 0.5], abs=0.01)
