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
