"""The emulation check on one-twin and two-twin captures, no traffic, and TCP instead of RDMA."""

from __future__ import annotations

import json

import pytest
from capture_builders import MS, STATUS_OK, T0, ib, netdev, write_capture
from click.testing import CliRunner
from rdmascope.analysis import load_capture, verify_emulation
from rdmascope.analysis.verify import CANNOT_JUDGE, FAIL, PASS

from rdmascope.capture import CaptureSchemaError
from rdmascope.cli import main

TWINS = [{"name": "rocep1s0f1", "pci": "0000:01:00.1"},
         {"name": "roceP2p1s0f1", "pci": "0002:01:00.1"}]


def _cap(tmp_path, per_ms_units, *, kernel_per_ms=None, n=11, devs=None, discovered=None):
    """Twins A, B with tx/rx counters growing by per_ms_units[(dev, dir)] units each ms.

    ``devs``: the recorded devices (default both twins); ``discovered``: the manifest's
    ``discovered_devices`` (absent when None, as in captures written before the key existed).
    """
    devs = devs or ("rocep1s0f1", "roceP2p1s0f1")
    counters, rd = [], {}
    for dev in devs:
        for d in ("tx", "rx"):
            cid = len(counters)
            counters.append(ib(dev, d))
            u = per_ms_units.get((dev, d), 0)
            rd[cid] = [(T0 + k * MS + 20 * cid, 0, 10**6 + u * k, STATUS_OK) for k in range(n)]
    if kernel_per_ms is not None:
        cid = len(counters)
        counters.append(netdev("rocep1s0f1", "enp1s0f1np1", "tx"))
        rd[cid] = [(T0 + k * MS + 200, 0, kernel_per_ms * k, STATUS_OK) for k in range(n)]
    path = write_capture(tmp_path / "c", counters, rd,
                         devices=[d for d in TWINS if d["name"] in devs])
    if discovered is not None:
        m = json.loads((path / "manifest.json").read_text())
        m["discovered_devices"] = discovered
        (path / "manifest.json").write_text(json.dumps(m))
    return load_capture(path)


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
    assert v.message.startswith("TCP SUSPECTED: the kernel network stack moved "), v.message
    # no RDMA bytes at all: the verdict is FAIL and leads with TCP, never 'FAIL: cannot judge: ...'
    cap0 = _cap(tmp_path / "none", {}, kernel_per_ms=5_000_000)
    v0 = verify_emulation(cap0)
    assert v0.status == "fail" and v0.tcp_suspected
    assert v0.message.startswith("TCP SUSPECTED: ") and "cannot judge" not in v0.message
    assert "RDMA alone: only 0.000 MB of RDMA traffic" in v0.message, v0.message
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


DISCOVERED = [{"name": "rocep1s0f1", "pci": "0000:01:00.1", "netdevs": ["enp1s0f1np1"]},
              {"name": "roceP2p1s0f1", "pci": "0002:01:00.1", "netdevs": ["enP2p1s0f1np1"]}]
ONLY_A = {("rocep1s0f1", "tx"): 250_000, ("rocep1s0f1", "rx"): 125_000}


def test_one_twin_recorded_of_two_discovered_cannot_judge(tmp_path):
    # `record --device rocep1s0f1`: the recorded twin carries 100 % of what was recorded, but
    # the other twin's traffic is unknown; neither "single" nor "both" can be judged
    cap = _cap(tmp_path, ONLY_A, devs=("rocep1s0f1",), discovered=DISCOVERED)
    for expect in ("single", "both"):
        v = verify_emulation(cap, expect=expect)
        assert v.status == CANNOT_JUDGE and not v.ok
        assert v.missing_devices == ["roceP2p1s0f1"]
        assert v.message.startswith("cannot judge: roceP2p1s0f1 (PCI 0002:01:00.1, twin of "
                                    "rocep1s0f1) found at record time but NOT recorded")
    assert v.to_dict()["status"] == "cannot judge"
    assert v.to_dict()["missing_devices"] == ["roceP2p1s0f1"]
    # the CLI: its own exit code (3) and status word, naming the missing device
    r = CliRunner().invoke(main, ["verify-emulation", str(tmp_path / "c")])
    assert r.exit_code == 3, r.output
    assert "CANNOT JUDGE: roceP2p1s0f1" in r.output
    assert "PASS" not in r.output


def test_both_twins_recorded_with_the_discovery_list_judges_as_before(tmp_path):
    # an unrecorded device on the other port (01:00.0, not a twin) does not block the verdict
    other = {"name": "rocep1s0f0", "pci": "0000:01:00.0", "netdevs": ["enp1s0f0np0"]}
    cap = _cap(tmp_path, ONLY_A, discovered=DISCOVERED + [other])
    v = verify_emulation(cap)
    assert v.ok and v.status == PASS and v.missing_devices == []
    assert "on another port (not counted): rocep1s0f0" in v.message
    assert "rests on the recorded devices only" not in v.message
    r = CliRunner().invoke(main, ["verify-emulation", str(tmp_path / "c")])
    assert r.exit_code == 0 and "PASS: all traffic on one interface" in r.output
    v2 = verify_emulation(cap, expect="both")
    assert v2.status == FAIL and not v2.ok
    r = CliRunner().invoke(main, ["verify-emulation", "--expect-both", str(tmp_path / "c")])
    assert r.exit_code == 1 and "FAIL: NOT spread" in r.output


def test_unrecorded_device_of_unknown_port_counts_as_missing(tmp_path):
    # no PCI address to tell whether it is a twin: its traffic could belong to the link
    disc = [DISCOVERED[0], {"name": "roceX", "netdevs": []}]
    cap = _cap(tmp_path, ONLY_A, devs=("rocep1s0f1",), discovered=disc)
    v = verify_emulation(cap)
    assert v.status == CANNOT_JUDGE and v.missing_devices == ["roceX"]
    assert "roceX (, its port unknown)" not in v.message and "roceX (its port unknown)" in \
        v.message


def test_old_capture_with_one_device_says_the_verdict_rests_on_it(tmp_path):
    cap = _cap(tmp_path, ONLY_A, devs=("rocep1s0f1",))
    assert "discovered_devices" not in cap.meta
    v = verify_emulation(cap)
    assert v.ok and v.status == PASS
    assert ("the verdict rests on the recorded devices only (rocep1s0f1)") in v.message
    # two recorded devices and no list: nothing to add
    v2 = verify_emulation(_cap(tmp_path / "two", ONLY_A))
    assert v2.ok and "rests on the recorded devices only" not in v2.message


def test_bad_discovered_devices_key_is_named(tmp_path):
    with pytest.raises(CaptureSchemaError,
                       match="manifest key 'discovered_devices' must be a list"):
        verify_emulation(_cap(tmp_path, ONLY_A, discovered={"rocep1s0f1": {}}))


def test_too_little_traffic_is_cannot_judge_not_fail(tmp_path):
    v = verify_emulation(_cap(tmp_path, {}))
    assert v.status == CANNOT_JUDGE
    r = CliRunner().invoke(main, ["verify-emulation", str(tmp_path / "c")])
    assert r.exit_code == 3 and "CANNOT JUDGE: only 0.000 MB" in r.output


@pytest.mark.parametrize("kw,match", [
    ({"single_share": 0.5}, "single_share must be > 0.5 and <= 1"),
    ({"single_share": 1.5}, "single_share must be > 0.5 and <= 1"),
    ({"single_share": float("nan")}, "single_share"),
    ({"expect": "both", "both_min_share": 0.0}, "both_min_share must be > 0 and <= 0.5"),
    ({"expect": "both", "both_min_share": 0.6}, "both_min_share must be > 0 and <= 0.5"),
])
def test_thresholds_out_of_range_are_refused(tmp_path, kw, match):
    # an even split: with single_share 0.5 it would "pass" as all on one interface
    cap = _cap(tmp_path, {("rocep1s0f1", "tx"): 250_000, ("roceP2p1s0f1", "tx"): 250_000})
    with pytest.raises(ValueError, match=match):
        verify_emulation(cap, **kw)
    # the edges of the ranges are accepted
    assert not verify_emulation(cap, single_share=1.0).ok
    assert verify_emulation(cap, expect="both", both_min_share=0.5).ok


@pytest.mark.parametrize("args,option", [(["--share", "0.5"], "--share"),
                                         (["--share", "1.5"], "--share"),
                                         (["--expect-both", "--min-share", "0"], "--min-share"),
                                         (["--min-share", "-0.1"], "--min-share")])
def test_cli_thresholds_out_of_range_name_the_option(tmp_path, args, option):
    _cap(tmp_path, {("rocep1s0f1", "tx"): 250_000, ("roceP2p1s0f1", "tx"): 250_000})
    r = CliRunner().invoke(main, ["verify-emulation", str(tmp_path / "c"), *args])
    assert r.exit_code == 2, r.output  # click's usage error
    assert f"Invalid value for {option}: must be" in r.output and "PASS" not in r.output


def test_a_capture_with_one_reading_per_counter_says_why_its_bytes_are_unknown(tmp_path):
    """With fewer than two readings there is no interval to flag: the reason said is that, never
    an empty '()', and 'cannot judge:' is not repeated inside the message."""
    v = verify_emulation(_cap(tmp_path, {}, n=1))
    assert v.status == CANNOT_JUDGE
    assert v.message.startswith("cannot judge: ") and v.message.count("cannot judge") == 1
    assert "()" not in v.message
    assert ("rocep1s0f1 bytes unknown for 100.0 % of the range (no byte interval: fewer than "
            "two readings)") in v.message, v.message
    assert v.message.endswith("readable bytes only: only 0.000 MB of RDMA traffic in the range "
                              "(need >= 1 MB)"), v.message


def test_a_series_without_readings_for_part_of_the_range_is_unknown_not_zero(tmp_path):
    """Coverage: twin B has no reading after 500 ms (a read that hung to the end of the
    recording): its bytes there are unknown, so --expect-both cannot judge (it said FAIL with
    0 % unknown, as if B had carried nothing). Same verdict loaded and streamed."""
    unit = 2_500_000  # units per ms on each twin: 10 MB/ms = 80 Gb/s
    rd = {0: [(T0 + k * MS - 1000, 2000, unit * k, STATUS_OK) for k in range(1001)],
          1: [(T0 + k * MS - 1000, 2000, unit * k, STATUS_OK) for k in range(501)]}
    path = write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx"), ib("roceP2p1s0f1", "tx")], rd)
    for cap in (load_capture(path), path):
        v = verify_emulation(cap, expect="both")
        assert v.status == CANNOT_JUDGE, v.message
        assert "roceP2p1s0f1 bytes unknown for 50.0 %" in v.message
        assert "no reading for part of the range" in v.message
        assert v.unknown_devices == ["roceP2p1s0f1"]


def _rails_cap(tmp_path, units_per_ms):
    """Eight separate HCAs (Azure ND: own PCI domain, own sys_image_guid), tx counters whose
    units per ms are ``units_per_ms[i]``."""
    devs = [{"name": f"mlx5_ib{i}", "pci": f"01{i + 1:02d}:00:00.0",
             "sys_image_guid": f"0015:5dff:fe33:ee{i:02x}", "netdevs": [],
             "ports": [{"port": 1, "rate_gbps": 400.0, "link_layer": "InfiniBand"}]}
            for i in range(len(units_per_ms))]
    counters = [ib(d["name"], "tx") for d in devs]
    rd = {i: [(T0 + k * MS - 1000, 2000, u * k, STATUS_OK) for k in range(201)]
          for i, u in enumerate(units_per_ms)}
    return load_capture(write_capture(tmp_path, counters, rd, devices=devs))


def test_expect_rails_every_rail_balanced(tmp_path):
    even = _rails_cap(tmp_path / "even", [100_000] * 8)
    v = verify_emulation(even, expect="rails", rails=8)
    assert v.status == PASS, v.message
    assert "traffic on all 8 rails, balanced" in v.message
    # one idle rail: the traffic did not use every rail (12.5 % expected each, 6.2 .. 18.8 %)
    idle = _rails_cap(tmp_path / "idle", [100_000] * 7 + [0])
    v = verify_emulation(idle, expect="rails", rails=8)
    assert v.status == FAIL and "mlx5_ib7 0.0 %" in v.message, v.message
    # the eight are never one link: --expect-both would be judged device by device
    r = CliRunner().invoke(main, ["verify-emulation", str(tmp_path / "even"),
                                  "--expect-rails", "8", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["meta"]["status"] == PASS


def _gap_cap(tmp_path):
    """Twins A and B, tx, read every 1 ms from 0 to 1000 ms and from 4000 to 5000 ms, none in
    between (a hung read stalled every sweep for 3 s). A carries 2,500,000 units/ms (10 MB/ms)
    while read; across the gap A's counter rose by 3,000 x 2,500,000 units, B's by 3,000 x
    2,500,000 too: the gap's bytes are exact, their timing inside it is not."""
    unit = 2_500_000
    ks = [*range(0, 1001), *range(4000, 5001)]
    rd = {i: [(T0 + k * MS - 1000, 2000, unit * k, STATUS_OK) for k in ks] for i in (0, 1)}
    return write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx"), ib("roceP2p1s0f1", "tx")], rd)


def test_a_range_inside_a_gap_of_readings_cannot_judge(tmp_path):
    """No reading of either twin from 1000 to 4000 ms: a range wholly inside that gap has bytes
    only by spreading (it said PASS 50/50): both twins are unknown for 100 % of it, CANNOT
    JUDGE naming each with the reason. A range with one edge in the gap: the part of the gap
    inside it (1000 of 1500 ms = 66.7 %) is unknown. A range holding the gap whole keeps its
    exact bytes: PASS. Same verdicts loaded and streamed."""
    path = _gap_cap(tmp_path)
    for cap in (load_capture(path), path):
        v = verify_emulation(cap, expect="both", start_ns=T0 + 1500 * MS, end_ns=T0 + 3500 * MS)
        assert v.status == CANNOT_JUDGE, v.message
        assert v.unknown_devices == ["rocep1s0f1", "roceP2p1s0f1"], v.message
        for d in ("rocep1s0f1", "roceP2p1s0f1"):
            assert f"{d} bytes unknown for 100.0 % of the range (no reading across an edge " \
                "of the range" in v.message, v.message
            assert v.devices.at[d, "unknown_share"] == pytest.approx(1.0)
        # one edge in the gap: [500, 2000) ms holds 1000 ms of it
        v = verify_emulation(cap, expect="both", start_ns=T0 + 500 * MS, end_ns=T0 + 2000 * MS)
        assert v.status == CANNOT_JUDGE, v.message
        assert v.devices.at["rocep1s0f1", "unknown_share"] == pytest.approx(1000 / 1500)
        assert "rocep1s0f1 bytes unknown for 66.7 % of the range" in v.message, v.message
        # the gap wholly inside [500, 4500) ms: exact bytes, 4000 ms x 10 MB each, not unknown
        v = verify_emulation(cap, expect="both", start_ns=T0 + 500 * MS, end_ns=T0 + 4500 * MS)
        assert v.status == PASS, v.message
        assert v.devices.at["rocep1s0f1", "unknown_share"] == 0.0
        assert v.devices.at["rocep1s0f1", "bytes"] == pytest.approx(4000 * 10e6)
    # the unknown time by flag, by hand: 2000 ms of the gap across both edges of the first range
    from rdmascope.analysis.series import byte_intervals
    from rdmascope.analysis.verify import unknown_time
    u = unknown_time(byte_intervals(load_capture(path)), T0 + 1500 * MS, T0 + 3500 * MS)
    assert len(u) == 2 and (u["gap"] == 2000 * MS).all() and (u["total"] == 2000 * MS).all()


def _late_twin_cap(tmp_path, *, appeared_ms=300, first_ms=500, seen_ms=None,
                   descriptor=True):
    """Twin A read every 1 ms from 0 to 1000 ms at 2,500,000 units/ms; twin B absent at the
    start, seen by the recorder's rescan at ``appeared_ms`` (``device_changes``; ``seen_ms``:
    first seen still probing), read from ``first_ms`` on (``appeared_ns`` of its descriptor,
    as ``record`` writes it; ``descriptor=False``: as ``simulate capture`` writes it), idle."""
    unit = 2_500_000
    b = ib("roceP2p1s0f1", "tx")
    if descriptor:
        b["appeared_ns"] = T0 + first_ms * MS
    rd = {0: [(T0 + k * MS - 1000, 2000, unit * k, STATUS_OK) for k in range(1001)],
          1: [(T0 + k * MS - 1000, 2000, 7, STATUS_OK) for k in range(first_ms, 1001)]}
    path = write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx"), b], rd)
    m = json.loads((path / "manifest.json").read_text())
    ch = {"name": "roceP2p1s0f1", "pci": "0002:01:00.1", "sys_image_guid": None,
          "kind": "appeared", "t_ns": T0 + appeared_ms * MS}
    if seen_ms is not None:
        ch["seen_ns"] = T0 + seen_ms * MS
    m["device_changes"] = [ch]
    (path / "manifest.json").write_text(json.dumps(m))
    return path


def test_a_device_is_absent_before_it_appeared_and_unknown_until_its_first_reading(tmp_path):
    """Twin B appeared (the recorder's rescan saw it) at 300 ms and was first read at 500 ms:
    before 300 ms it was absent (no traffic possible: not unknown), from 300 to 500 ms it was
    present but unread (unknown, never 0: the verdict said PASS 'A 100 %' over it)."""
    path = _late_twin_cap(tmp_path)
    for cap in (load_capture(path), path):
        # [0, 1000) ms: B unknown for 200 of the 700 ms it was present (28.6 %)
        v = verify_emulation(cap, end_ns=T0 + 1000 * MS)
        assert v.status == CANNOT_JUDGE and v.unknown_devices == ["roceP2p1s0f1"], v.message
        assert "roceP2p1s0f1 bytes unknown for 28.6 % of the range (no reading for part of " \
            "the range)" in v.message, v.message
        assert v.devices.at["roceP2p1s0f1", "unknown_share"] == pytest.approx(200 / 700)
        # [0, 300) ms: B was absent all along: A carried everything, PASS
        v = verify_emulation(cap, end_ns=T0 + 300 * MS)
        assert v.status == PASS and v.devices.at["roceP2p1s0f1", "unknown_share"] == 0.0, \
            v.message
        # [100, 400) ms: absent 100-300 ms, unknown 300-400: 100 % of its 100 ms present
        v = verify_emulation(cap, start_ns=T0 + 100 * MS, end_ns=T0 + 400 * MS)
        assert v.status == CANNOT_JUDGE, v.message
        assert v.devices.at["roceP2p1s0f1", "unknown_share"] == pytest.approx(1.0)
        # [600, 1000) ms: both read: A 100 %
        v = verify_emulation(cap, start_ns=T0 + 600 * MS, end_ns=T0 + 1000 * MS)
        assert v.status == PASS, v.message


def test_device_appearance_seen_while_probing_and_without_a_descriptor_time(tmp_path):
    """First seen still probing at 100 ms (``seen_ns``), its counter files found at 300 ms:
    absent until 300 ms (the kernel lets no verbs client use a device before its port
    attributes exist), unknown from 300 to its first reading at 500 ms (200 of 700 ms). A capture whose descriptor has no ``appeared_ns`` (simulate
    capture): absent until its ``device_changes`` entry, unknown from then to its first
    reading; a first reading at the appearance itself (within the sweep's spread) is PASS."""
    v = verify_emulation(load_capture(_late_twin_cap(tmp_path / "a", seen_ms=100)),
                         end_ns=T0 + 1000 * MS)
    assert v.devices.at["roceP2p1s0f1", "unknown_share"] == pytest.approx(200 / 700)
    v = verify_emulation(load_capture(_late_twin_cap(tmp_path / "b", descriptor=False)),
                         end_ns=T0 + 1000 * MS)
    assert v.devices.at["roceP2p1s0f1", "unknown_share"] == pytest.approx(200 / 700)
    v = verify_emulation(load_capture(_late_twin_cap(tmp_path / "c", appeared_ms=500,
                                                     descriptor=False)), end_ns=T0 + 1000 * MS)
    assert v.status == PASS and v.devices.at["roceP2p1s0f1", "unknown_share"] == 0.0, v.message


def test_device_bytes_with_an_unknown_window_are_unknown_and_the_shares_say_readable(tmp_path):
    """Unknown is never zero: a direction with unknown 1 ms windows has unknown bytes (NaN) in
    the device table and the verdict's total, never its readable part passed off as a total;
    the readable bytes are known_bytes, and the shares (of readable bytes) are judged with the
    coverage rule: within max_unknown_share the verdict stands and the message says so, past
    it CANNOT JUDGE."""
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).parent))
    from requestlog_helpers import build_capture

    A, B = "rocep1s0f1", "roceP2p1s0f1"
    n = 1000
    per_ms = {f"{A}/tx": np.full(n, 400_000), f"{A}/rx": np.full(n, 400_000),
              f"{B}/tx": np.full(n, 400), f"{B}/rx": np.full(n, 400)}
    # B's tx readings 500..504 unreadable: its 1 ms intervals 499..504 unknown (0.6 %)
    cap = load_capture(build_capture(tmp_path / "cap", T0, per_ms,
                                     unreadable={f"{B}/tx": (500, 505)}))
    v = verify_emulation(cap, expect="single")
    d = v.devices
    assert np.isnan(d.at[B, "tx_bytes"]) and np.isnan(d.at[B, "bytes"])
    assert np.isnan(v.total_bytes)
    # by hand: B's readable tx is 994 of its 1000 ms x 400 B, its rx all 1000 ms
    assert d.at[B, "rx_bytes"] == pytest.approx(400 * n)
    assert d.at[B, "known_bytes"] == pytest.approx(400 * 994 + 400 * n)
    assert d.at[A, "bytes"] == d.at[A, "known_bytes"] == pytest.approx(800_000 * n)
    known = 800_000 * n + 400 * 994 + 400 * n
    assert v.known_bytes == pytest.approx(known)
    assert d.at[A, "share"] == pytest.approx(800_000 * n / known)
    assert v.status == PASS and "readable, 6 ms unknown" in v.message
    # past the coverage rule's 1 %: CANNOT JUDGE, naming the device
    cap2 = load_capture(build_capture(tmp_path / "cap2", T0, per_ms,
                                      unreadable={f"{B}/tx": (500, 600)}))
    v2 = verify_emulation(cap2, expect="single")
    assert v2.status == CANNOT_JUDGE and B in v2.unknown_devices
    assert np.isnan(v2.devices.at[B, "tx_bytes"])
