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

from .conftest import SPARK_TWINS, Recorder, failread_shim, run_cli

GB = 1e9


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
    tx = iv[iv["counter_id"] == int(nd[(nd["netdev"] == nd_a) & (nd["direction"] == "tx")].index[0])]
    t0, t1 = int(tx["t0_ns"].min()), int(tx["t1_ns"].max())
    # exact truth: the bytes the writer put there between the first and last reading (to the
    # writer's 1 ms update step, 12 Gb/s x 1 ms = 1.5 MB)
    truth = w.units_between(netdev_stat(root, nd_a, "tx_bytes"), t0, t1)
    assert abs(tx["bytes"].sum() - truth) <= 2 * tcp_bps * 0.001 + 4 * tcp_bps * 0.002
    r = run_cli("verify-emulation", tmp_path / "cap", "--json")
    v = json.loads(r.output)["meta"]
    assert v["tcp_suspected"] is True and v["status"] == "fail", r.output
    assert "TCP SUSPECTED" in v["message"]


@pytest.mark.usefixtures("sweep_impl")
def test_a_read_hanging_3s_on_one_twin_ends_on_time_and_cannot_judge(tmp_path):
    """One read hanging 3 s (an mlx5 firmware command; shim: uninterruptible wait) on one twin:
    ``record --duration 2s`` ends near 2 s, names the read and its duration, keeps every reading
    taken, and ``verify-emulation --expect-both`` says CANNOT JUDGE (unknown), not FAIL."""
    root = tmp_path / "sys"
    _spark(root)
    (a, _, _), (b, _, _) = SPARK_TWINS
    half = 40 * GB / 8 / 4  # 40 Gb/s on each twin, in 4-byte units per second
    w = RateWriter({port_counter(root, a): (10_000, half), port_counter(root, b): (10_000, half)})
    shim = failread_shim(tmp_path)
    trigger = tmp_path / "hang-now"
    env = dict(__import__("os").environ, LD_PRELOAD=str(shim),
               RDMASCOPE_HANG_MATCH=f"/{a}/ports/1/counters/port_xmit_data",
               RDMASCOPE_HANG_MS="3000", RDMASCOPE_HANG_WHILE=str(trigger),
               RDMASCOPE_HANG_ONCE="1")
    w.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "2s", env=env)
        rec.wait_sampling()
        time.sleep(0.6)
        trigger.touch()  # the next read of that file hangs for 3 s
        t_hang = time.monotonic()
        rc = rec.wait(timeout=30)
        t_end = time.monotonic()
    finally:
        w.stop()
    assert rc == 0, rec.stderr
    # ended on time: the 3 s read was not waited for (it would end >= 3 s after the hang)
    assert t_end - t_hang < 2.9, rec.stderr
    cap = load_capture(tmp_path / "cap")
    audit = cap.meta["audit"]
    ab = audit["abandoned_read"]
    assert ab and a in ab["path"] and ab["running_ns"] > 0, audit
    assert "stopped without a hung read" in rec.stderr and a in rec.stderr
    # the readings taken are kept; the hung one is marked unavailable, never a value
    r = cap.readings
    assert (r.groupby("sweep").size() == len(cap.counters)).all()
    ins = run_cli("inspect", tmp_path / "cap")
    assert ins.exit_code == 0 and "stopped without a hung read" in ins.output, ins.output
    v = run_cli("verify-emulation", tmp_path / "cap", "--expect-both", "--json")
    meta = json.loads(v.output)["meta"]
    assert meta["status"] == "cannot judge", meta["message"]
