"""Kind 4: a wrong ``rate`` string must not silently blank every window.

A 400G port whose driver reports the fallback "40 Gb/sec (4X QDR)" (sysfs.md) carries ~250 Gb/s.
With the netdev's ``speed`` (400000 Mb/s) the cross-check says so and the analysis takes 400 Gb/s;
without it (or with ``--link-gbps 40``) the steps are above 4 x 40 Gb/s: rates, peaks and inspect
must count and name those windows and point at ``--link-gbps``, which fixes them.
"""

from __future__ import annotations

import json

from rdmascope.analysis.load import load_capture
from rdmascope.sampler.faketree import build_device

from .conftest import Recorder, Ticker, Tree, inspect_json, run_cli

# 62.5 MB per 2 ms tick (15.625 M units of 4 bytes): 250 Gb/s; one step implies >= 500 Gb/s over
# 1 ms and stays above 4 x 40 = 160 Gb/s unless the readings are > 3.1 ms apart
STEP = 15_625_000


def _tree(root, speed_mbps):
    build_device(root, "mlx5_0", pci="0000:01:00.0", netdev="enp1s0f0np0",
                 rate="40 Gb/sec (4X QDR)")
    if speed_mbps is not None:
        net = root / "devices" / "pci0000:00" / "0000:01:00.0" / "net" / "enp1s0f0np0"
        (net / "speed").write_text(f"{speed_mbps}\n")
    return Tree(root, (("mlx5_0", "0000:01:00.0", "enp1s0f0np0"),))


def _record(tmp_path, tree, name):
    ticker = Ticker(tree, {("mlx5_0", "port_xmit_data"): STEP})
    ticker.start()
    try:
        rec = Recorder(tmp_path / name, tree.root, "--duration", "1s")
        assert rec.wait() == 0, rec.stderr
    finally:
        ticker.stop()
    return tmp_path / name, rec


def _rates(cap, *extra):
    res = run_cli("rates", cap, "--window", "1ms", "--json", *extra)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    return out["rates"], out["meta"]["implausible"]


def test_netdev_speed_cross_check_keeps_the_windows(tmp_path):
    tree = _tree(tmp_path / "sys", 400000)
    res = run_cli("devices", "--sysfs-root", tree.root)
    assert "rate '40 Gb/sec (4X QDR)' says 40 Gb/s but netdev enp1s0f0np0 speed says 400 " \
           "Gb/s" in res.output
    cap_dir, rec = _record(tmp_path, tree, "cap")
    assert "speed says 400 Gb/s" in rec.stderr  # said at record start too
    cap = load_capture(cap_dir)
    port = cap.meta["devices"][0]["ports"][0]
    assert (port["rate_gbps"], port["speed_gbps"]) == (40.0, 400.0)
    rows, impl = _rates(cap_dir, "--bytes")
    assert impl == []
    # every window inside the readings is known; the covered parts' bytes add up to the counter
    # difference x 4 (an edge window is partly covered: its rate is over its covered part, its
    # whole bytes unknown, so rate x width is not its bytes)
    r = cap.readings
    v = r.loc[(r["counter_id"] == 0) & r["valid"], "value"].to_numpy()
    vals = [w["mlx5_0/tx_gbps"] for w in rows]
    assert sum(x is None for x in vals) <= 2  # at most the edge windows
    whole = [w["mlx5_0/tx_bytes"] for w in rows]
    assert sum(x is None for x in whole) <= 2  # an edge window's whole bytes are unknown
    total = sum(w["mlx5_0/tx_covered_bytes"] for w in rows)
    assert abs(total - (int(v[-1]) - int(v[0])) * 4) <= 1  # whole units, exact in float64


def test_fallback_rate_is_named_and_link_gbps_fixes_it(tmp_path):
    tree = _tree(tmp_path / "sys", None)  # no speed file: the rate string is all there is
    cap_dir, _ = _record(tmp_path, tree, "cap")
    cap = load_capture(cap_dir)
    r = cap.readings
    rows_c = r[(r["counter_id"] == 0) & r["valid"]]
    v = rows_c["value"].to_numpy().astype(int)
    t = rows_c["t_ns"].to_numpy()
    moved = v[1:] > v[:-1]
    # independent of the analysis' formula: every step of a tick is >= 62.5 MB, which is above
    # 160 Gb/s unless the two readings are more than 3.1 ms apart
    surely = int((moved & (t[1:] - t[:-1] < 3_000_000)).sum())
    assert surely > 50

    rows, impl = _rates(cap_dir)
    (s,) = impl
    assert s["series"] == "mlx5_0/tx" and surely <= s["steps"] <= int(moved.sum())
    assert s["cap_gbps"] == 160.0
    nan_windows = sum(w["mlx5_0/tx_gbps"] is None for w in rows)
    assert s["windows"] <= nan_windows and s["windows"] >= s["steps"]
    res = run_cli("rates", cap_dir, "--window", "1ms")
    line = next(ln for ln in res.output.splitlines() if ln.startswith("implausible:"))
    assert f"mlx5_0/tx {s['steps']} step(s) in {s['windows']} window(s) of 1 ms" in line
    assert "160 Gb/s = 4 x 40 Gb/s" in line and "--link-gbps" in line
    res = run_cli("peaks", cap_dir, "--json")
    assert json.loads(res.output)["meta"]["implausible"][0]["steps"] == s["steps"]
    ins = inspect_json(cap_dir)["counters"][0]["implausible"]
    assert ins["cap_gbps"] == 160.0 and surely <= ins["steps"] <= int(moved.sum())
    assert "implausible:" in run_cli("inspect", cap_dir).output

    # the user states the capacity: nothing is implausible, the windows are back
    rows, impl = _rates(cap_dir, "--link-gbps", "400")
    assert impl == [] and sum(w["mlx5_0/tx_gbps"] is None for w in rows) <= 2
    ins = json.loads(run_cli("inspect", cap_dir, "--json", "--link-gbps", "400").output)
    assert ins["counters"][0]["implausible"] == {"steps": 0, "cap_gbps": 1600.0}
    res = run_cli("verify-emulation", cap_dir, "--link-gbps", "400", "--json")
    assert json.loads(res.output)["devices"][0]["unknown_share"] < 0.01
    res = run_cli("verify-emulation", cap_dir, "--json")  # with the 40 Gb/s fallback: blind
    assert json.loads(res.output)["meta"]["status"] == "cannot judge"
    res = run_cli("rates", cap_dir, "--link-gbps", "-3")
    assert res.exit_code == 2 and "--link-gbps" in res.output
