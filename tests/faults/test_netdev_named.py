"""``record --netdev NAME`` on a live tree whose truth is exact (tests/livetree.py): an interface
that is no RDMA device's own netdev and not on the default route (there is no proc tree beside the
sysfs root here, so only ``--netdev`` can add it), e.g. the ``eth0`` a cross-Pod collective falls
back to. The capture holds its tx/rx_bytes readings, each one a value the file held while it was
read; ``verify-emulation`` names it and its bytes when TCP moves on it, and says nothing of it when
it is idle.
"""

from __future__ import annotations

import json

from livetree import RateWriter, netdev_stat, port_counter
from rdmascope.analysis import byte_intervals, load_capture
from rdmascope.sampler.faketree import build_device

from .conftest import SPARK_TWINS, Recorder, run_cli

GB = 1e9
IFACE = "eth0"


def _tree(root):
    """The two Spark twins (their own netdevs enp1s0f1np1/enP2p1s0f1np1) and a plain eth0 that
    belongs to no RDMA device: class/net/eth0/statistics only, no PCI function under an HCA."""
    for name, pci, nd in SPARK_TWINS:
        build_device(root, name, pci=pci, netdev=nd, start_value=1000)
    stats = root / "class" / "net" / IFACE / "statistics"
    stats.mkdir(parents=True)
    for s in ("tx_bytes", "rx_bytes"):
        (stats / s).write_text("0\n")
    assert not (root.parent / "proc").exists()  # no default route: only --netdev names eth0


def _record(tmp_path, rates):
    root = tmp_path / "sys"
    w = RateWriter(rates)
    w.start()
    try:
        # --netdev alone (no --netdev-stats): it implies the netdev statistics
        rec = Recorder(tmp_path / "cap", root, "--duration", "1s", "--netdev", IFACE)
        assert rec.wait() == 0, rec.stderr
    finally:
        w.stop()
    return w, rec, load_capture(tmp_path / "cap")


def _eth0_readings(w, cap, root):
    """Check eth0's tx/rx readings against the writer's truth; return ({stat: bytes counted},
    eth0's byte intervals)."""
    nd = cap.counters[cap.counters["source"] == "netdev"]
    mine = nd[nd["netdev"] == IFACE]
    assert sorted(mine["name"]) == ["rx_bytes", "tx_bytes"], nd
    descs = cap.meta["counters"]
    assert {descs[int(i)].get("role") for i in mine.index} == {"--netdev"}
    assert set(mine["width_bits"].astype(int)) == {64}
    iv = byte_intervals(cap, source="netdev")
    out = {}
    for cid, r in mine.iterrows():
        path = netdev_stat(root, IFACE, r["name"])
        rd = cap.readings[(cap.readings["counter_id"] == cid) & cap.readings["valid"]]
        rd = rd.sort_values("sweep")
        assert len(rd) >= 100, rd  # ~1 s of 1 ms sweeps
        # every value read was in the file during its read's bracket (the writer's logged writes)
        bad = w.check_readings(path, rd)
        assert not bad, f"{len(bad)} of {len(rd)} readings of {r['name']} wrong: {bad[:5]}"
        mi = iv[iv["counter_id"] == cid]
        assert not (mi["flag"].astype(str) == "saturated").any()
        # the intervals' bytes are the last reading minus the first (1 byte a unit)
        total = float(mi["bytes"].sum())
        assert total == int(rd["value"].iloc[-1]) - int(rd["value"].iloc[0]), total
        out[r["name"]] = total
    return out, iv[iv["counter_id"].isin(mine.index)]


def _clipped(iv, lo: int, hi: int) -> float:
    """Bytes of ``iv`` inside [lo, hi): an interval straddling an edge counts in proportion to
    its time inside (as the 1 s windows of the verdict's kernel bytes split it)."""
    tot = 0.0
    for t0, t1, b in zip(iv["t0_ns"], iv["t1_ns"], iv["bytes"], strict=True):
        inside = max(0, min(int(t1), hi) - max(int(t0), lo))
        tot += float(b) * inside / (int(t1) - int(t0))
    return tot


def test_tcp_on_a_netdev_named_by_hand_is_recorded_and_named(tmp_path):
    """NCCL falls back to sockets over eth0: 12 Gb/s out, 4 Gb/s in, with 1 MB/s of RDMA
    (control traffic) on one twin. By hand: eth0 moves 1.5e9 + 0.5e9 = 2.0e9 B/s, so ~2 GB over
    the ~1 s recording (>= 10 MB and >= 1x the ~1 MB of RDMA: TCP SUSPECTED), named as eth0 with
    its MB as counted from its own readings."""
    root = tmp_path / "sys"
    _tree(root)
    tx_bps, rx_bps = 12 * GB / 8, 4 * GB / 8  # bytes/s
    a = SPARK_TWINS[0][0]
    w, rec, cap = _record(tmp_path, {
        netdev_stat(root, IFACE, "tx_bytes"): (7_000_000_000, tx_bps),
        netdev_stat(root, IFACE, "rx_bytes"): (3_000_000_000, rx_bps),
        port_counter(root, a): (10_000, 1e6 / 4)})  # 1 MB/s in 4-byte units
    assert f"also sampling {IFACE} tx/rx_bytes (--netdev)" in rec.stderr, rec.stderr
    got, iv = _eth0_readings(w, cap, root)
    # the rates by hand: over the span of its readings, tx counted 3x what rx did (12 vs 4 Gb/s);
    # both ran the whole ~1 s, so each is at least half a second's worth
    assert got["tx_bytes"] >= 0.5 * tx_bps and got["rx_bytes"] >= 0.5 * rx_bps, got
    assert abs(got["tx_bytes"] / got["rx_bytes"] - 3.0) < 0.1, got

    r = run_cli("verify-emulation", tmp_path / "cap", "--json")
    out = json.loads(r.output)
    v = out["meta"]
    assert v["tcp_suspected"] is True and v["status"] == "fail", v["message"]
    assert "TCP SUSPECTED" in v["message"]
    kern = {row["device"]: row for row in out["kernel"]}
    assert IFACE in kern, out["kernel"]
    kb = float(kern[IFACE]["kernel_bytes"])
    # eth0's kernel bytes are its readings' bytes (tx + rx) over the verdict's range: the range
    # is the RDMA counters' span, and eth0 is read a few us later in each sweep, so the part of
    # its last interval past the range's end is not counted (~5 us of 2e9 B/s: ~10 kB)
    want = _clipped(iv, int(v["start_ns"]), int(v["end_ns"]))
    assert abs(kb - want) <= 1e-9 * want, (kb, want, got)
    assert 0.999 * (got["tx_bytes"] + got["rx_bytes"]) < kb, (kb, got)
    assert float(kern[IFACE]["rdma_bytes"]) == 0.0  # no RDMA device of its own
    # named with its bytes, as 'eth0 2,0xx.x MB'
    assert f"{IFACE} {kb / 1e6:,.1f} MB" in v["message"], v["message"]


def test_an_idle_netdev_named_by_hand_is_recorded_and_not_said(tmp_path):
    """eth0 idle (52 GB since boot, no growth) while NCCL runs 40 Gb/s of RDMA on one twin: its
    readings are in the capture (0 bytes), no TCP is suspected and the verdict does not name it.
    By hand: 40 Gb/s = 5e9 B/s = 1.25e9 4-byte units/s on one twin, so ~5 GB on one interface:
    PASS (one interface carries 100 %)."""
    root = tmp_path / "sys"
    _tree(root)
    a = SPARK_TWINS[0][0]
    w, rec, cap = _record(tmp_path, {
        netdev_stat(root, IFACE, "tx_bytes"): (52_000_000_000, 0.0),
        netdev_stat(root, IFACE, "rx_bytes"): (51_000_000_000, 0.0),
        port_counter(root, a): (10_000, 40 * GB / 8 / 4)})
    assert f"also sampling {IFACE} tx/rx_bytes (--netdev)" in rec.stderr, rec.stderr
    got, _ = _eth0_readings(w, cap, root)
    assert got == {"tx_bytes": 0.0, "rx_bytes": 0.0}, got
    r = run_cli("verify-emulation", tmp_path / "cap", "--json")
    out = json.loads(r.output)
    v = out["meta"]
    assert v["tcp_suspected"] is False and v["status"] == "pass", v["message"]
    assert IFACE not in v["message"], v["message"]
