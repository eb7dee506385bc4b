"""Kind 6: a device that comes back under another name at the same PCI address is followed.

mlx5_1 (PCI 0000:01:00.1) vanishes mid-run and returns as mlx5_7 (a reset or re-probe, or a
udev/rdma-core rename) with its counters restarted at a value ABOVE the old one, so a naive
difference would count terabytes. The recorder must find it within about a second, say
"mlx5_1 came back as mlx5_7" (live, as an event and in device_changes), read the new files under the recorded
series, and the analysis must treat the gap as unknown: never bytes.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from rdmascope.analysis.load import load_capture
from rdmascope.sampler.faketree import build_device

from .conftest import Recorder, Ticker, make_tree, run_cli


@pytest.mark.usefixtures("sweep_impl")
def test_device_renamed_at_the_same_pci_address_is_followed(tmp_path):
    tree = make_tree(tmp_path / "sys")
    step = 2500  # units of 4 bytes per 2 ms tick
    ticker = Ticker(tree, {("mlx5_0", "port_xmit_data"): step,
                           ("mlx5_1", "port_xmit_data"): step})
    rec = Recorder(tmp_path / "cap", tree.root, "--duration", "4s")
    ticker.start()
    try:
        rec.wait_sampling()
        time.sleep(0.5)
        ticker.hold.add(("mlx5_1", "port_xmit_data"))
        shutil.rmtree(tree.device_dir("mlx5_1"))
        time.sleep(1.2)
        t_back = time.perf_counter_ns()
        restart = 10**12  # far above the old value: a naive difference would be ~4 TB
        build_device(tree.root, "mlx5_7", pci="0000:01:00.1", netdev="enp1s0f1np1",
                     start_value=restart)
        rc = rec.wait()
    finally:
        ticker.stop()
    assert rc == 0, rec.stderr
    assert rec.stderr.count("mlx5_1 came back as mlx5_7 (PCI 0000:01:00.1)") == 1, rec.stderr
    cap = load_capture(tmp_path / "cap")
    ev = [e for e in cap.meta["events"] if e["kind"] == "renamed"]
    assert len(ev) == 1 and "mlx5_1 came back as mlx5_7" in ev[0]["message"]
    assert ev[0]["t_ns"] - t_back < 2_500_000_000  # found within ~1 s of its return
    # recorded in device_changes as a renamed netdev is (it had only the event), and said by
    # inspect: mlx5_1 -> mlx5_7 at its PCI address, at the event's time
    ch = [c for c in cap.meta["device_changes"] if c["kind"] == "renamed"]
    assert len(ch) == 1, cap.meta["device_changes"]
    assert (ch[0]["name"], ch[0]["as"], ch[0]["pci"]) == ("mlx5_1", "mlx5_7", "0000:01:00.1")
    assert ch[0]["t_ns"] == ev[0]["t_ns"] and "netdev" not in ch[0]
    ins = run_cli("inspect", tmp_path / "cap").output
    assert "device mlx5_1 came back as mlx5_7 (pci 0000:01:00.1) at " in ins, ins

    c, r = cap.counters, cap.readings
    cid = int(c.index[(c["device"] == "mlx5_1") & (c["name"] == "port_xmit_data")][0])
    rows = r[r["counter_id"] == cid]
    after = rows[rows["t_before_ns"] > ev[0]["t_ns"]]
    assert len(after) > 500 and after["valid"].all()
    assert (after["value"].to_numpy() == restart + 1).all()  # mlx5_7's port 1 file
    assert (~rows["valid"]).sum() > 0  # the gap is recorded as unreadable readings

    # the analysis: the gap is unknown (NaN), the restart is no bytes; known bytes are exact
    res = run_cli("rates", tmp_path / "cap", "--window", "100ms", "--bytes", "--json")
    assert res.exit_code == 0, res.output
    win = json.loads(res.output)["rates"]
    tx = [w["mlx5_1/tx_bytes"] for w in win]
    assert any(v is None for v in tx)
    assert max(v for v in tx if v is not None) < 1e9  # never the 4 TB restart jump
    v_ok = rows.loc[rows["valid"], "value"].to_numpy().astype(int)
    before = v_ok[v_ok < restart]
    assert sum(v for v in tx if v is not None) <= (before[-1] - before[0]) * 4 + 1
    res = run_cli("verify-emulation", tmp_path / "cap", "--expect-both")
    assert res.exit_code == 3 and "mlx5_1 bytes unknown" in res.output
