"""Real-host cases on a live tree whose truth is exact (tests/livetree.py: counters computed from
known rates at each write), with faults injected: counter widths, a hung read, devices that come
and go. The recorder runs as a real subprocess (``rdmascope record``), the verdicts through the CLI.
"""

from __future__ import annotations

import json
import time

import pytest
from livetree import RateWriter, netdev_stat, port_counter
from rdmascope.analysis import byte_intervals, load_capture
from rdmascope.sampler.faketree import build_device

from rdmascope.capture import segment_counters

from .conftest import SPARK_TWINS, Recorder, failread_shim, run_cli

GB = 1e9


def _assert_conserved(w: RateWriter, path, readings, cid: int, iv, *, unit: int) -> None:
    """The recorder's truth for one counter, with no timing band: each value it read was in the
    file during that read's bracket (the writer logs when each of its writes began and returned),
    and the intervals' bytes sum to ``unit`` x (last reading - first reading), hence lie between
    what the file can have gained from the first read to the last."""
    r = readings[(readings["counter_id"] == cid) & readings["valid"]].sort_values("sweep")
    assert len(r) >= 2, r
    bad = w.check_readings(path, r)
    assert not bad, f"{len(bad)} of {len(r)} readings not in the file during their read: {bad[:5]}"
    first, last = r.iloc[0], r.iloc[-1]
    total = float(iv["bytes"].sum())
    assert total == unit * (int(last["value"]) - int(first["value"])), total
    lo0, hi0 = w.possible(path, int(first["t_before_ns"]),
                          int(first["t_before_ns"]) + int(first["read_duration_ns"]))
    lo1, hi1 = w.possible(path, int(last["t_before_ns"]),
                          int(last["t_before_ns"]) + int(last["read_duration_ns"]))
    assert unit * (lo1 - hi0) <= total <= unit * (hi1 - lo0), (total, lo0, hi0, lo1, hi1)


def _spark(root, *, start_value=1000):
    for name, pci, nd in SPARK_TWINS:
        build_device(root, name, pci=pci, netdev=nd, start_value=start_value)


@pytest.mark.usefixtures("sweep_impl")
def test_netdev_52_gb_since_boot_carrying_12_gbps_tcp_is_suspected(tmp_path):
    """Netdev tx/rx_bytes are 64-bit (net/core/net-sysfs.c): a host whose netdev has carried
    52 GB since boot is not "saturated", and NCCL at 12 Gb/s over sockets is TCP SUSPECTED."""
    root = tmp_path / "sys"
    _spark(root)
    a, nd_a = SPARK_TWINS[0][0], SPARK_TWINS[0][2]
    tcp_bps = 12 * GB / 8  # 12 Gb/s over the kernel stack, in bytes/s
    rates = {netdev_stat(root, nd_a, "tx_bytes"): (52_000_000_000, tcp_bps),
             netdev_stat(root, nd_a, "rx_bytes"): (51_000_000_000, tcp_bps),
             port_counter(root, a): (10_000, 1e6 / 4)}  # 1 MB/s of RDMA (control traffic)
    w = RateWriter(rates)
    w.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "1.5s", "--netdev-stats")
        assert rec.wait() == 0, rec.stderr
    finally:
        w.stop()
    cap = load_capture(tmp_path / "cap")
    nd = cap.counters[cap.counters["source"] == "netdev"]
    assert set(nd["width_bits"].astype(int)) == {64}  # the width table, not a guess
    iv = byte_intervals(cap, source="netdev")
    assert not (iv["flag"].astype(str) == "saturated").any()
    cid = int(nd[(nd["netdev"] == nd_a) & (nd["direction"] == "tx")].index[0])
    tx = iv[iv["counter_id"] == cid]
    # exact truth: every value read is one the file held during that read's bracket (the
    # writer's own logged write times), and the bytes are the last reading's minus the first's
    _assert_conserved(w, netdev_stat(root, nd_a, "tx_bytes"), cap.readings, cid, tx, unit=1)
    r = run_cli("verify-emulation", tmp_path / "cap", "--json")
    v = json.loads(r.output)["meta"]
    assert v["tcp_suspected"] is True and v["status"] == "fail", r.output
    assert "TCP SUSPECTED" in v["message"]


@pytest.mark.usefixtures("sweep_impl")
def test_a_read_hanging_past_the_end_on_one_twin_ends_on_time_and_cannot_judge(tmp_path):
    """One read hanging 20 s (an mlx5 firmware command; shim: uninterruptible wait) on one twin:
    ``record --duration 2s`` ends at its duration without waiting for it, names the read and its
    duration, keeps every reading taken, and ``verify-emulation --expect-both`` says CANNOT
    JUDGE (unknown), not FAIL."""
    root = tmp_path / "sys"
    _spark(root)
    (a, _, _), (b, _, _) = SPARK_TWINS
    half = 40 * GB / 8 / 4  # 40 Gb/s on each twin, in 4-byte units per second
    w = RateWriter({port_counter(root, a): (10_000, half), port_counter(root, b): (10_000, half)})
    shim = failread_shim(tmp_path)
    trigger = tmp_path / "hang-now"
    hang_ns = 20 * 10**9  # far past the 2 s duration: waiting for it cannot pass for on time
    env = dict(__import__("os").environ, LD_PRELOAD=str(shim),
               RDMASCOPE_HANG_MATCH=f"/{a}/ports/1/counters/port_xmit_data",
               RDMASCOPE_HANG_MS=str(hang_ns // 10**6), RDMASCOPE_HANG_WHILE=str(trigger),
               RDMASCOPE_HANG_ONCE="1")
    w.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "2s", env=env)
        rec.wait_sampling()
        time.sleep(0.6)
        trigger.touch()  # the next read of that file hangs
        rc = rec.wait(timeout=60)
        t_end = time.monotonic_ns()  # CLOCK_MONOTONIC, the capture's clock
    finally:
        w.stop()
    assert rc == 0, rec.stderr
    cap = load_capture(tmp_path / "cap")
    audit = cap.meta["audit"]
    ab = audit["abandoned_read"]
    assert ab and a in ab["path"] and 0 < ab["running_ns"] < hang_ns, audit
    assert audit["stopped_by"] == "duration", audit
    # ended on time: the process was gone before the hung read could have returned (it began
    # at the reading marked as the read error, by the recorder's own clock)
    hung = cap.readings[(cap.readings["sweep"] == ab["sweep"])
                        & (cap.readings["counter_id"] == ab["counter_id"])]
    assert len(hung) == 1 and not hung["valid"].any(), hung
    assert t_end < int(hung["t_before_ns"].iloc[0]) + hang_ns, rec.stderr
    assert "stopped without a hung read" in rec.stderr and a in rec.stderr
    # the readings taken are kept; the hung one is marked unavailable, never a value
    r = cap.readings
    assert (r.groupby("sweep").size() == len(cap.counters)).all()
    ins = run_cli("inspect", tmp_path / "cap")
    assert ins.exit_code == 0 and "stopped without a hung read" in ins.output, ins.output
    v = run_cli("verify-emulation", tmp_path / "cap", "--expect-both", "--json")
    meta = json.loads(v.output)["meta"]
    assert meta["status"] == "cannot judge", meta["message"]


def _route(root, iface):
    """A proc/net/route beside ``root`` (sys) with the default route on ``iface``."""
    proc = root.parent / "proc" / "net"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        f"{iface}\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        f"{iface}\t0002A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n")


def test_tcp_over_the_default_route_interface_is_seen_and_named(tmp_path):
    """Cross-node collectives that fall back to sockets over eth0 (not the RDMA devices' own
    netdevs): --netdev-stats samples the default-route interface and the verdict names it."""
    root = tmp_path / "sys"
    _spark(root)
    stats = root / "class" / "net" / "eth0" / "statistics"
    stats.mkdir(parents=True)
    for s in ("tx_bytes", "rx_bytes"):
        (stats / s).write_text("0\n")
    _route(root, "eth0")
    tcp_bps = 12 * GB / 8
    w = RateWriter({netdev_stat(root, "eth0", "tx_bytes"): (7_000_000_000, tcp_bps),
                    port_counter(root, SPARK_TWINS[0][0]): (10_000, 1e6 / 4)})
    w.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "1s", "--netdev-stats")
        assert rec.wait() == 0, rec.stderr
    finally:
        w.stop()
    assert "also sampling eth0 tx/rx_bytes (default route)" in rec.stderr
    cap = load_capture(tmp_path / "cap")
    nd = cap.counters[cap.counters["source"] == "netdev"]
    assert "eth0" in set(nd["netdev"])
    v = json.loads(run_cli("verify-emulation", tmp_path / "cap", "--json").output)["meta"]
    assert v["tcp_suspected"] and "eth0 " in v["message"], v["message"]
    # --netdev NAME adds an interface by hand (here the same one, said once)
    bad = run_cli("record", "-o", tmp_path / "cap2", "--sysfs-root", root, "--duration", "0.1s",
                  "--netdev", "nosuch0")
    # an interface that is not there: a usage error naming the option and the interfaces
    assert bad.exit_code == 2 and "Invalid value for '--netdev': nosuch0" in bad.output
    assert "(interfaces: " in bad.output and "eth0" in bad.output


def test_native_ib_tcp_over_ipoib_is_suspected(tmp_path):
    """On native InfiniBand the port counts IPoIB too: with NCCL over sockets on ib0 at 12 Gb/s
    (and a little RDMA), the port's bytes are slightly above ib0's; IPoIB close to the port's
    bytes is TCP, named as IPoIB on ib0."""
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "fixtures" / "hosts" / "ib-ipoib" / "sys"
    root = tmp_path / "sys"
    shutil.copytree(src, root, symlinks=True)
    tcp_bps = 12 * GB / 8
    rdma_bps = 0.2 * GB / 8
    port = root / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
    w = RateWriter({netdev_stat(root, "ib0", "tx_bytes"): (52_000_000_000, tcp_bps),
                    port: (10_000_000_000, (tcp_bps + rdma_bps) / 4)})
    w.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "1s", "--netdev-stats")
        assert rec.wait() == 0, rec.stderr
    finally:
        w.stop()
    v = json.loads(run_cli("verify-emulation", tmp_path / "cap", "--json").output)["meta"]
    assert v["tcp_suspected"] is True, v["message"]
    assert "ib0" in v["message"] and "(IPoIB)" in v["message"]


@pytest.mark.usefixtures("sweep_impl")
def test_twins_appearing_after_the_start_are_sampled_and_judged(tmp_path):
    """A Spark rescans its CX-7 functions (AER error, cable insertion): the twins appear 1 s
    after record starts and NCCL then uses both. The recorder says so once, records when, and
    samples them from then on (both sweeps): their bytes after they appeared match the truth,
    and verify-emulation judges them: FAIL for the emulation, both carried traffic (it said
    PASS "100 % on one interface" when they were not seen, CANNOT JUDGE when seen only)."""
    root = tmp_path / "sys"
    build_device(root, "mlx5_0", pci="0000:03:00.0", netdev="enp3s0f0np0",
                 sys_image_guid="0a7f:bc12:45ef:0300")
    w = RateWriter({port_counter(root, "mlx5_0"): (10_000, 2e6 / 4)})  # 2 MB/s
    # 10 Gb/s on each twin, in 4-byte units per second (far below the 126 Gb/s PCIe bound of a
    # Spark twin, so a late update of the writer thread on a loaded machine stays plausible)
    units = 10 * GB / 8 / 4
    w.start()
    try:
        # segments rolled every 0.4 s: some hold the counters of the start only
        rec = Recorder(tmp_path / "cap", root, "--duration", "3s", fast_roll=0.4)
        rec.wait_sampling()
        time.sleep(1.0)
        _spark(root)  # the two twins appear
        for name, _, _ in SPARK_TWINS:
            w.add(port_counter(root, name), 10_000, units)
        rc = rec.wait()
    finally:
        w.stop()
    assert rc == 0, rec.stderr
    for name, _, _ in SPARK_TWINS:
        assert f"RDMA device {name} (PCI" in rec.stderr and "appeared after the start; " \
            "sampled from now on" in rec.stderr, rec.stderr
        assert rec.stderr.count(f"RDMA device {name} ") == 1  # said once, not per sweep
    cap = load_capture(tmp_path / "cap")
    ch = cap.meta["device_changes"]
    assert sorted(c["name"] for c in ch if c["kind"] == "appeared") == sorted(
        n for n, _, _ in SPARK_TWINS)
    descs = cap.meta["counters"]
    start = cap.t_start_ns
    # the capture format takes counters that begin mid-capture: segments written before they
    # appeared store fewer descriptors than the manifest (a prefix of it) and still read
    stored = [len(segment_counters(f)) for f in sorted((tmp_path / "cap").glob("segments/*"))]
    assert min(stored) < len(descs) == max(stored), stored
    iv = byte_intervals(cap)
    for name, _, _ in SPARK_TWINS:
        ids = [i for i, d in enumerate(descs) if d["device"] == name]
        assert ids and ids[0] > 0 and all("appeared_ns" in descs[i] for i in ids)
        appeared = descs[ids[0]]["appeared_ns"]
        assert appeared - start >= 0.9e9, (appeared - start) / 1e9  # not there before
        r = cap.readings[cap.readings["counter_id"].isin(ids)]
        assert int(r["t_before_ns"].min()) >= appeared
        # sampled from then on: in every sweep from its first to the capture's last
        seen = set(r["sweep"].astype(int))
        later = set(cap.readings["sweep"].astype(int))
        assert seen == {k for k in later if k >= min(seen)}, sorted(later - seen)[:10]
        cid = next(i for i in ids if descs[i]["direction"] == "tx")
        tx = iv[iv["counter_id"] == cid]
        assert len(tx) and not tx["bytes"].isna().any()  # sampled from when it was seen on
        # exact truth: every value read is one the file held during that read's bracket, and
        # the bytes are conserved (4-byte units)
        _assert_conserved(w, port_counter(root, name), cap.readings, cid, tx, unit=4)
    ins = run_cli("inspect", tmp_path / "cap")
    for name, pci, _ in SPARK_TWINS:  # sampled from the moment it appeared: not "unknown"
        at = (next(c["t_ns"] for c in ch if c["name"] == name) - start) / 1e9
        assert f"device {name} (pci {pci}) appeared at {at:.1f} s, sampled from then on" \
            in ins.output, ins.output
    assert "traffic is unknown" not in ins.output
    v = json.loads(run_cli("verify-emulation", tmp_path / "cap", "--json").output)["meta"]
    assert v["status"] == "fail", v["message"]
    assert not v["unknown_devices"], v["message"]
    for name, _, _ in SPARK_TWINS:
        assert name in v["message"]
    both = json.loads(run_cli("verify-emulation", tmp_path / "cap", "--expect-both",
                              "--json").output)["meta"]
    assert both["status"] == "pass", both["message"]


def test_a_device_appearing_under_device_selection_is_said_and_makes_the_verdict_unknown(
        tmp_path):
    """With --device choosing what to record, a device that appears is not added: said once,
    and verify-emulation over the time it was present says CANNOT JUDGE, naming it."""
    root = tmp_path / "sys"
    build_device(root, "mlx5_0", pci="0000:03:00.0", netdev="enp3s0f0np0",
                 sys_image_guid="0a7f:bc12:45ef:0300")
    w = RateWriter({port_counter(root, "mlx5_0"): (10_000, 2e6 / 4)})
    w.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "2.5s", "--device", "mlx5_0")
        rec.wait_sampling()
        time.sleep(0.5)
        _spark(root)
        for name, _, _ in SPARK_TWINS:
            w.add(port_counter(root, name), 10_000, 40 * GB / 8 / 4)
        rc = rec.wait()
    finally:
        w.stop()
    assert rc == 0, rec.stderr
    for name, _, _ in SPARK_TWINS:
        assert f"RDMA device {name} (PCI" in rec.stderr and "it is not sampled" in rec.stderr
        assert rec.stderr.count(f"RDMA device {name} ") == 1
    cap = load_capture(tmp_path / "cap")
    assert {d["device"] for d in cap.meta["counters"]} == {"mlx5_0"}
    ins = run_cli("inspect", tmp_path / "cap").output
    for name, _, _ in SPARK_TWINS:
        assert f"device {name} " in ins and "not recorded, its traffic is unknown" in ins, ins
        assert "sampled from then on" not in ins
    v = json.loads(run_cli("verify-emulation", tmp_path / "cap", "--json").output)["meta"]
    assert v["status"] == "cannot judge", v["message"]
    assert set(v["unknown_devices"]) >= {n for n, _, _ in SPARK_TWINS}


@pytest.mark.usefixtures("sweep_impl")
def test_a_slow_read_is_counted_and_named_with_its_duration(tmp_path):
    """One read taking 0.3 s (> 5 x the 1 ms interval) that then returns: the recording goes on,
    the audit and inspect name the counter and how long it took, said once live."""
    root = tmp_path / "sys"
    _spark(root)
    (a, _, _) = SPARK_TWINS[0]
    shim = failread_shim(tmp_path)
    trigger = tmp_path / "slow-now"
    env = dict(__import__("os").environ, LD_PRELOAD=str(shim),
               RDMASCOPE_HANG_MATCH=f"/{a}/ports/1/counters/port_rcv_data",
               RDMASCOPE_HANG_MS="300", RDMASCOPE_HANG_WHILE=str(trigger),
               RDMASCOPE_HANG_ONCE="1")
    rec = Recorder(tmp_path / "cap", root, "--duration", "1.5s", env=env)
    rec.wait_sampling()
    trigger.touch()
    assert rec.wait() == 0, rec.stderr
    cap = load_capture(tmp_path / "cap")
    # the injected read is counted and named with its duration; under load another read may be
    # slow too (> 5 ms is a few missed time slices), so others are allowed, each named likewise
    slow = cap.meta["audit"]["slow_reads"]
    ours = [s for s in slow if s["device"] == a and s["name"] == "port_rcv_data"]
    assert len(ours) == 1, slow
    span_ns = int(cap.readings["t_before_ns"].max() - cap.readings["t_before_ns"].min())
    # it returned (not abandoned) inside the recording, after at least the injected 0.3 s
    assert ours[0]["count"] >= 1 and 0.3e9 <= ours[0]["max_ns"] <= span_ns, ours
    assert cap.meta["audit"]["abandoned_read"] is None
    said = [ln for ln in rec.stderr.splitlines() if "slow read:" in ln]
    assert any(f"{who} port_rcv_data slow read:" in ln for ln in said
               for who in (f"{a}/1", SPARK_TWINS[0][2])), rec.stderr
    assert len(said) <= len(slow), rec.stderr  # said once per counter, not per slow read
    ins = run_cli("inspect", tmp_path / "cap")
    assert f"slow reads {a}/1 port_rcv_data: {ours[0]['count']} over 5 ms" in ins.output, \
        ins.output


@pytest.mark.usefixtures("sweep_impl")
def test_a_netdev_renamed_while_recording_is_followed_and_named(tmp_path):
    """eth0 (the default-route interface, NCCL over sockets at 12 Gb/s) is renamed ens1 while
    recording (``ip link set eth0 name ens1``: same ifindex). The recorder notices it on its
    ~1 s rescan, says it once, records it in device_changes, reads on under the new name
    (no byte lost), and the TCP verdict names the interface as it is called now."""
    root = tmp_path / "sys"
    _spark(root)
    net = root / "class" / "net"
    (net / "eth0" / "statistics").mkdir(parents=True)
    for s in ("tx_bytes", "rx_bytes"):
        (net / "eth0" / "statistics" / s).write_text("0\n")
    for i, n in enumerate(sorted(p.name for p in net.iterdir())):
        (net / n / "ifindex").write_text(f"{i + 2}\n")
    eth0_ix = int((net / "eth0" / "ifindex").read_text())
    _route(root, "eth0")
    tcp_bps = 12 * GB / 8
    w = RateWriter({netdev_stat(root, "eth0", "tx_bytes"): (7_000_000_000, tcp_bps),
                    port_counter(root, SPARK_TWINS[0][0]): (10_000, 1e6 / 4)})
    w.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "3s", "--netdev-stats")
        rec.wait_sampling()
        time.sleep(0.8)
        w.rename(net / "eth0", net / "ens1")
        assert rec.wait() == 0, rec.stderr
    finally:
        w.stop()
    said = f"netdev eth0 was renamed ens1 (ifindex {eth0_ix})"
    assert rec.stderr.count(said) == 1, rec.stderr
    cap = load_capture(tmp_path / "cap")
    ch = [c for c in cap.meta["device_changes"] if c["kind"] == "renamed"]
    assert len(ch) == 1 and ch[0]["name"] == "eth0" and ch[0]["as"] == "ens1", ch
    descs = [d for d in cap.meta["counters"] if d.get("netdev_was")]
    assert {d["netdev"] for d in descs} == {"ens1"} and len(descs) == 2, descs
    assert all(d["path"].endswith(f"/ens1/statistics/{d['name']}") for d in descs)
    # read on through the rename: every reading valid, the bytes conserved under either name
    cid = next(i for i, d in enumerate(cap.meta["counters"])
               if d.get("netdev") == "ens1" and d["name"] == "tx_bytes")
    r = cap.readings[cap.readings["counter_id"] == cid]
    assert r["valid"].all() and len(r) == cap.readings["sweep"].nunique()
    tx = byte_intervals(cap, source="netdev")
    _assert_conserved(w, netdev_stat(root, "ens1", "tx_bytes"), cap.readings, cid,
                      tx[tx["counter_id"] == cid], unit=1)
    ins = run_cli("inspect", tmp_path / "cap").output
    assert "netdev eth0 renamed ens1 at " in ins, ins
    v = json.loads(run_cli("verify-emulation", tmp_path / "cap", "--json").output)["meta"]
    assert v["tcp_suspected"] and "ens1 (was eth0) " in v["message"], v["message"]
