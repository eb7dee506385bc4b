"""Kind 2: the bytes are where the driver keeps them, with the right unit, recorded and shown.

Trees built here after real layouts: a legacy MLNX_OFED mlx4 port (``counters/port_xmit_data``
32-bit and stuck at 2^32-1, the 64-bit copies in ``counters_ext/*_64``, as node_exporter's
``sys.ttar`` fixture has it), bnxt_re-like ports whose bytes are only in ``hw_counters/tx_bytes``
/ ``rx_bytes`` in plain bytes (bnxt_re, mana, efa), and a soft-iWARP (siw) device with no byte
counter at all. Through devices -> record -> inspect -> rates -> verify-emulation -> attribute,
each byte count must equal the counter difference x the source's unit, from the readings.
"""

from __future__ import annotations

import json

import pytest
from rdmascope.analysis.load import load_capture
from rdmascope.sampler.faketree import build_device, write_in_place

from .conftest import PathTicker, Recorder, inspect_json, run_cli, write_request_log

U32_MAX = (1 << 32) - 1


def _port(root, dev, n=1):
    return root / "class" / "infiniband" / dev / "ports" / str(n)


def _rates_total(cap_dir, series):
    res = run_cli("rates", cap_dir, "--window", "100ms", "--bytes", "--json")
    assert res.exit_code == 0, res.output
    rows = next(v for v in json.loads(res.output).values() if isinstance(v, list))
    # every window's covered part (a partly covered window's whole bytes are unknown: null)
    vals = [r.get(f"{series}_covered_bytes") for r in rows]
    assert all(v is not None for v in vals), vals
    return sum(vals)


def _diff(cap, cid):
    r = cap.readings
    v = r.loc[(r["counter_id"] == cid) & r["valid"], "value"].to_numpy()
    return int(v[-1]) - int(v[0])


def test_legacy_mlx4_counters_ext(tmp_path):
    root = tmp_path / "sys"
    build_device(root, "mlx4_0", pci="0000:05:00.0", netdev="ib0", link_layer="InfiniBand",
                 rate="40 Gb/sec (4X QDR)")
    port = _port(root, "mlx4_0")
    for name in ("port_xmit_data", "port_rcv_data"):
        write_in_place(port / "counters" / name, U32_MAX)  # the 32-bit copy, stuck
    (port / "counters_ext").mkdir()
    ext = {port / "counters_ext" / f"{n}_64": 5_000 for n in ("port_xmit_data", "port_rcv_data")}
    for p in ext:
        p.write_text("1000\n")

    res = run_cli("devices", "--sysfs-root", root)
    assert "bytes: counters_ext/port_xmit_data_64 / counters_ext/port_rcv_data_64 (tx / rx; " \
           "unit 4 bytes, 64-bit)" in res.output
    assert "32-bit copy" in res.output and "64-bit (extended)" not in res.output

    # above 2^32: only a 64-bit file holds it
    _, cap = _record_1s(tmp_path, root, PathTicker(ext, start=(1 << 32) + 7))
    c = cap.counters
    tx = int(c.index[c["direction"] == "tx"][0])
    d = cap.meta["counters"][tx]
    assert d["byte_source"] == "counters_ext/port_xmit_data_64" and d["bytes_per_unit"] == 4
    assert d["width_bits"] == 64 and d["path"].endswith("counters_ext/port_xmit_data_64")
    ic = inspect_json(tmp_path / "cap")["counters"][tx]
    assert (ic["unit"], ic["byte_source"]) == ("4 bytes", "counters_ext/port_xmit_data_64")
    expect = _diff(cap, tx) * 4
    assert expect > 1e6  # ~5000 x 4 B per 2 ms: not the stuck 32-bit file's 0
    assert _rates_total(tmp_path / "cap", "mlx4_0/tx") == pytest.approx(expect, rel=1e-9)


def _record_1s(tmp_path, root, ticker):
    """Record ``root`` for 1 s while ``ticker`` moves its counters; return (the recorder, the
    loaded capture)."""
    ticker.start()
    try:
        rec = Recorder(tmp_path / "cap", root, "--duration", "1s")
        assert rec.wait() == 0, rec.stderr
    finally:
        ticker.stop()
    return rec, load_capture(tmp_path / "cap")


def _bnxt(root, name, pci):
    build_device(root, name, pci=pci, netdev=f"{name}np0", counters=())
    port = _port(root, name)
    (port / "counters").rmdir()
    hw = port / "hw_counters"
    hw.mkdir()
    for f in ("tx_pkts", "rx_pkts", "tx_bytes", "rx_bytes", "active_qps"):
        (hw / f).write_text("0\n")
    (hw / "lifespan").write_text("10\n")
    return hw


def test_hw_counters_bytes_and_siw_without_byte_counter(tmp_path):
    root = tmp_path / "sys"
    hw0 = _bnxt(root, "bnxt_re0", "0000:3b:00.0")
    _bnxt(root, "bnxt_re1", "0000:3b:00.1")
    build_device(root, "siw0", pci="0000:00:1f.6", netdev="eno1", counters=())
    (_port(root, "siw0") / "counters").rmdir()

    res = run_cli("devices", "--sysfs-root", root)
    assert "bytes: hw_counters/tx_bytes / hw_counters/rx_bytes (tx / rx; unit bytes, 64-bit)" \
        in res.output
    assert "siw0" in res.output and "bytes: none; no byte counter: no counters/ and no " \
        "hw_counters/" in res.output

    rec, cap = _record_1s(tmp_path, root,
                          PathTicker({hw0 / "tx_bytes": 400_000, hw0 / "rx_bytes": 200_000}))
    assert "siw0/1: no byte counter" in rec.stderr and "cannot be recorded" in rec.stderr
    assert "refreshes only every 10 ms" in rec.stderr

    c = cap.counters
    assert set(c["device"]) == {"bnxt_re0", "bnxt_re1"}  # siw0 has nothing to sample
    tx = int(c.index[(c["device"] == "bnxt_re0") & (c["direction"] == "tx")][0])
    d = cap.meta["counters"][tx]
    assert (d["byte_source"], d["unit"], d["bytes_per_unit"]) == ("hw_counters/tx_bytes",
                                                                  "bytes", 1)
    siw = next(x for x in cap.meta["devices"] if x["name"] == "siw0") \
        if any(x["name"] == "siw0" for x in cap.meta["devices"]) else None
    if siw is not None:
        assert siw["ports"][0]["byte_source"] is None
    expect = _diff(cap, tx)  # plain bytes: x 1, never x 4
    assert expect > 1e7
    assert _rates_total(tmp_path / "cap", "bnxt_re0/tx") == pytest.approx(expect, rel=1e-9)

    res = run_cli("verify-emulation", tmp_path / "cap", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    dev = {r["device"]: r for r in out["devices"]}
    rx = int(c.index[(c["device"] == "bnxt_re0") & (c["direction"] == "rx")][0])
    assert dev["bnxt_re0"]["bytes"] == pytest.approx(expect + _diff(cap, rx), rel=1e-9)
    assert dev["bnxt_re1"]["bytes"] == 0.0 and out["meta"]["status"] == "pass"

    t0 = cap.t_start_ns
    log = tmp_path / "requests.jsonl"
    write_request_log(log, [("a", t0 + 200_000_000, t0 + 500_000_000, t0 + 800_000_000)])
    res = run_cli("attribute", tmp_path / "cap", "--requests", log, "--json")
    assert res.exit_code == 0, res.output
    req = json.loads(res.output)["requests"][0]
    # bounded by the raw readings (plain bytes, x 1): those inside the prefill window and
    # those enclosing it
    r = cap.readings
    r = r[(r["counter_id"] == tx) & r["valid"]]
    t, v = r["t_ns"].to_numpy(), r["value"].to_numpy().astype(float)
    a, b = t0 + 200_000_000, t0 + 500_000_000
    inner = v[t <= b].max() - v[t >= a].min()
    outer = v[t >= b].min() - v[t <= a].max()
    assert 0 < inner <= req["prefill_tx_bytes"] <= outer


def test_hw_counters_cache_steps_are_not_implausible(tmp_path):
    """hw_counters are cached for ``lifespan`` ms (10 here): sampled every 1 ms they jump once
    per 10 ms by 10 ms of bytes. 150 MB per 10 ms is 120 Gb/s on a 200 Gb/s port, but 1,200 Gb/s
    over the 1 ms interval the jump lands in: above 4 x 200 = 800 Gb/s. The cap for such a
    counter scales by lifespan / interval, so no window is emptied and the bytes are exact."""
    root = tmp_path / "sys"
    hw = _bnxt(root, "bnxt_re0", "0000:3b:00.0")
    _, cap = _record_1s(tmp_path, root,
                        PathTicker({hw / "tx_bytes": 150_000_000}, period_s=0.01))
    c = cap.counters
    tx = int(c.index[c["direction"] == "tx"][0])
    res = run_cli("rates", tmp_path / "cap", "--window", "10ms", "--json")
    out = json.loads(res.output)
    assert out["meta"]["implausible"] == []
    assert _rates_total(tmp_path / "cap", "bnxt_re0/tx") == pytest.approx(_diff(cap, tx),
                                                                          rel=1e-9)
    assert inspect_json(tmp_path / "cap")["counters"][tx]["implausible"]["steps"] == 0
