"""irdma: the bytes of a direction are ip4*Octets + ip6*Octets (hw_counters), summed per series.

Names as the kernel's drivers/infiniband/hw/irdma/verbs.c (irdma_hw_stat_names) prints them.
Expected bytes are computed here from the values written, independently of the analysis.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, write_capture
from click.testing import CliRunner
from rdmascope.analysis import byte_intervals, load_capture, rebin
from rdmascope.sampler.discovery import counter_descriptors, discover
from rdmascope.sampler.faketree import build_device

from rdmascope.cli import main

OCTETS = ("ip4InOctets", "ip4OutOctets", "ip6InOctets", "ip6OutOctets")


def _irdma_tree(root):
    dev = build_device(root, "irdma0", pci="0000:51:00.0", counters=())
    port = dev / "ports/1"
    os.rmdir(port / "counters")  # irdma has no PMA: no counters/
    hw = port / "hw_counters"
    hw.mkdir()
    (hw / "lifespan").write_text("10\n")
    for n in (*OCTETS, "ip4InPkts", "ip4OutPkts", "cnpSent", "RxECNMrkd"):
        (hw / n).write_text("1000\n")
    return dev


def test_discovery_picks_the_ip_octets(tmp_path):
    _irdma_tree(tmp_path)
    (d,) = discover(tmp_path)
    p = d.ports[0]
    assert p.byte_source == "irdma"
    assert p.byte_files == ["hw_counters/ip4OutOctets", "hw_counters/ip6OutOctets",
                            "hw_counters/ip4InOctets", "hw_counters/ip6InOctets"]
    descs = counter_descriptors([d])
    assert [(c["name"], c["direction"], c["bytes_per_unit"], c["unit"]) for c in descs] == [
        ("ip4OutOctets", "tx", 1, "bytes"), ("ip6OutOctets", "tx", 1, "bytes"),
        ("ip4InOctets", "rx", 1, "bytes"), ("ip6InOctets", "rx", 1, "bytes")]
    assert all(c["byte_source"] == "hw_counters/" + c["name"] for c in descs)
    r = CliRunner().invoke(main, ["devices", "--sysfs-root", str(tmp_path)])
    assert "bytes: hw_counters/ip4OutOctets / hw_counters/ip6OutOctets / " in r.output


def test_record_on_irdma_writes_a_capture_that_loads(tmp_path):
    _irdma_tree(tmp_path / "sys")
    out = tmp_path / "cap"
    r = subprocess.run([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                        "--sysfs-root", str(tmp_path / "sys"), "--interval", "10ms",
                        "--duration", "50ms", "--no-status"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    cap = load_capture(out)
    c = cap.counters
    assert sorted(c.loc[c["data"], "series"]) == ["irdma0/rx", "irdma0/rx", "irdma0/tx",
                                                  "irdma0/tx"]
    assert "hw_counters/ip6InOctets (plain bytes), which the kernel refreshes only every 10 ms" \
        in r.stderr


def test_series_adds_ipv4_and_ipv6_and_unknown_stays_unknown(tmp_path):
    _irdma_tree(tmp_path / "sys")
    (d,) = discover(tmp_path / "sys")
    descs = [c for c in counter_descriptors([d]) if c["direction"] == "tx"]
    rng = np.random.default_rng(5)
    n = 12
    v4 = np.concatenate([[10**9], 10**9 + np.cumsum(rng.integers(0, 5 * 10**6, n - 1))])
    v6 = np.concatenate([[7 * 10**8], 7 * 10**8 + np.cumsum(rng.integers(0, 10**6, n - 1))])
    rd = {0: [(T0 + k * MS - 1000, 2000, int(v4[k]), STATUS_OK) for k in range(n)],
          1: [(T0 + k * MS - 1000, 2000, int(v6[k]), STATUS_OK) for k in range(n)]}
    rd[1][6] = (T0 + 6 * MS - 1000, 2000, None, STATUS_READ_ERROR)  # one unreadable IPv6 read
    cap = load_capture(write_capture(tmp_path / "c", descs, rd, devices=[d.to_dict()]))
    w = rebin(byte_intervals(cap), MS)["irdma0/tx"]
    # by hand: window k holds the two counters' steps k -> k+1
    want = (np.diff(v4) + np.diff(v6)).astype(float)
    want[5] = want[6] = math.nan  # the unknown IPv6 reading: its two intervals are unknown
    got = w.to_numpy()[: n - 1]
    assert np.allclose(got[~np.isnan(want)], want[~np.isnan(want)])
    assert np.isnan(got[[5, 6]]).all()
