"""Kind 1 of "unknown is never zero": a twin whose counters cannot be read is unknown, not idle.

A DGX Spark pair records while BOTH twins carry traffic; every read of the second twin's
``counters/port_*`` fails (EINVAL as a kernel whose firmware query fails, EACCES as a restricted
PF), injected by an LD_PRELOAD shim built here with the system compiler. Through record ->
inspect -> rates -> verify-emulation -> attribute, the second twin's bytes must be unknown
everywhere (never 0), and the emulation check must answer CANNOT JUDGE (exit 3) naming the twin
and the reason, where it used to answer PASS ("all traffic on one interface").
"""

from __future__ import annotations

import errno
import json
import os
import time

import numpy as np
import pytest
from rdmascope.analysis.load import load_capture

from .conftest import (
    SPARK_TWINS,
    Recorder,
    Ticker,
    failread_shim,
    inspect_json,
    make_tree,
    run_cli,
    shim_env,
    write_request_log,
)

STEP = 25_000  # units of 4 bytes per 2 ms tick: 100 kB per tick, 0.4 Gb/s


@pytest.mark.parametrize("err", [errno.EINVAL, errno.EACCES], ids=["EINVAL", "EACCES"])
@pytest.mark.usefixtures("sweep_impl")
def test_unreadable_twin_is_unknown_never_zero(tmp_path, err):
    shim = failread_shim(tmp_path)
    tree = make_tree(tmp_path / "sys", devices=SPARK_TWINS)
    both = [(d, c) for d, _, _ in SPARK_TWINS for c in ("port_xmit_data", "port_rcv_data")]
    ticker = Ticker(tree, {k: STEP for k in both})
    cap_dir = tmp_path / "cap"
    env = shim_env(shim, "roceP2p1s0f1/ports/1/counters/port_", err)
    ticker.start()
    try:
        rec = Recorder(cap_dir, tree.root, "--duration", "1.5s", env=env)
        rc = rec.wait()
    finally:
        ticker.stop()
    assert rc == 0, rec.stderr
    reason = os.strerror(err)

    # record: the live log says it once per counter, with the reason
    said = [ln for ln in rec.stderr.splitlines() if "roceP2p1s0f1" in ln and reason in ln]
    assert said, rec.stderr

    # inspect: every reading of the twin is a read error, and the event names file and reason
    s = inspect_json(cap_dir)
    bad = [c for c in s["counters"] if c["device"] == "roceP2p1s0f1"]
    assert bad and all(set(c["by_status"]) == {"read_error"} for c in bad)
    msgs = [u["message"] for u in s["unavailable"] if u["kind"] == "unavailable"]
    assert any("roceP2p1s0f1/ports/1/counters/port_xmit_data" in m and reason in m for m in msgs)
    res = run_cli("inspect", cap_dir)
    assert res.exit_code == 0 and reason in res.output

    # rates: the twin's windows are unknown (null), never 0; the readable twin's sum is exact
    cap = load_capture(cap_dir)
    r, c = cap.readings, cap.counters
    res = run_cli("rates", cap_dir, "--window", "100ms", "--json", "--bytes")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["windows"] if "windows" in json.loads(res.output) else None
    out = json.loads(res.output)
    rows = next(v for k, v in out.items() if isinstance(v, list))
    unknown = [row.get("roceP2p1s0f1/tx_gbps") for row in rows]
    assert unknown and all(v is None for v in unknown), unknown
    cid = int(c.index[(c["device"] == "rocep1s0f1") & (c["name"] == "port_xmit_data")][0])
    v = r.loc[(r["counter_id"] == cid) & r["valid"], "value"].to_numpy()
    expect_bytes = (int(v[-1]) - int(v[0])) * 4  # the counter difference x 4, from the readings
    # each window's bytes of its covered part (a partly covered window, at the capture's
    # edges, has its rate over that part and its whole bytes unknown)
    assert sum(row["rocep1s0f1/tx_covered_bytes"] for row in rows) == \
        pytest.approx(expect_bytes, rel=1e-6)
    got_bits = sum(row["rocep1s0f1/tx_gbps"] * row["rocep1s0f1/tx_covered_s"]
                   for row in rows) * 1e9
    assert got_bits / 8 == pytest.approx(expect_bytes, rel=1e-6)
    assert expect_bytes > 1e6

    # verify-emulation: CANNOT JUDGE (exit 3), naming the twin and the reason; never PASS
    res = run_cli("verify-emulation", cap_dir)
    assert res.exit_code == 3, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("CANNOT JUDGE: roceP2p1s0f1 bytes unknown for 100.0 %")
    assert reason in last and "port_xmit_data" in last
    res = run_cli("verify-emulation", cap_dir, "--json")
    meta = json.loads(res.output)["meta"]
    assert meta["unknown_devices"] == ["roceP2p1s0f1"] and meta["status"] == "cannot judge"
    dev = {d["device"]: d for d in json.loads(res.output)["devices"]}
    assert dev["roceP2p1s0f1"]["unknown_share"] > 0.999
    assert dev["roceP2p1s0f1"]["tx_bytes"] is None  # unknown, not 0
    assert dev["rocep1s0f1"]["unknown_share"] < 0.01

    # attribute: a request inside the run has unknown node bytes (one twin unknown), not the
    # readable twin's alone
    t0 = cap.t_start_ns
    log = tmp_path / "requests.jsonl"
    write_request_log(log, [("a", t0 + 300_000_000, t0 + 700_000_000, t0 + 1_100_000_000)])
    res = run_cli("attribute", cap_dir, "--requests", log, "--json")
    assert res.exit_code == 0, res.output
    req = json.loads(res.output)["requests"][0]
    assert req["prefill_tx_bytes"] is None and req["decode_tx_bytes"] is None
    res = run_cli("attribute", cap_dir, "--requests", log)
    assert "unreadable" in res.output
    assert np.isfinite(cap.t_end_ns)

    # the report's verdict box says CANNOT JUDGE and names the twin (once, EINVAL run only)
    if err == errno.EINVAL:
        res = run_cli("report", cap_dir, "--requests", log, "-o", tmp_path / "report")
        assert res.exit_code == 3, res.output  # the report exits with its verdict
        html = (tmp_path / "report" / "report.html").read_text()
        assert "CANNOT JUDGE the emulation" in html and "roceP2p1s0f1 are unknown" in html


@pytest.mark.usefixtures("sweep_impl")
def test_failing_reads_back_off_and_resume(tmp_path):
    """Kind 3: a counter whose reads keep failing is retried at doubling pauses (to 1 s), not
    every millisecond; once it reads again it is sampled every sweep, and the bytes of the
    failing time are unknown. Live lines and the stop summary name the counter and reason."""
    shim = failread_shim(tmp_path)
    tree = make_tree(tmp_path / "sys", devices=SPARK_TWINS)
    both = [(d, c) for d, _, _ in SPARK_TWINS for c in ("port_xmit_data", "port_rcv_data")]
    ticker = Ticker(tree, {k: STEP for k in both})
    flag = tmp_path / "failing"
    flag.write_text("")
    count = tmp_path / "failed-reads"
    env = shim_env(shim, "roceP2p1s0f1/ports/1/counters/port_xmit_data", errno.EIO,
                   RDMASCOPE_FAIL_WHILE=str(flag), RDMASCOPE_FAIL_COUNT=str(count),
                   COLUMNS="200")
    cap_dir = tmp_path / "cap"
    ticker.start()
    try:
        rec = Recorder(cap_dir, tree.root, "--duration", "3.5s", "--status", env=env)
        rec.wait_sampling()
        # the status line (plain lines: stderr is a file) names the unreadable counter
        rec.wait_for(lambda: "| unreadable roceP2p1s0f1 tx" in rec.stderr, 10,
                     "the status line naming the unreadable counter")
        time.sleep(0.5)
        t_fixed = time.perf_counter_ns()
        flag.unlink()
        rc = rec.wait()
    finally:
        ticker.stop()
    assert rc == 0, rec.stderr
    failed = int(count.read_text().split()[0])
    cap = load_capture(cap_dir)
    c, r = cap.counters, cap.readings
    cid = int(c.index[(c["device"] == "roceP2p1s0f1") & (c["name"] == "port_xmit_data")][0])
    rows = r[r["counter_id"] == cid]
    bad = rows[~rows["valid"]]
    # >= ~1.5 s of failing sweeps (>= 1000 at 1 ms even on a busy machine), but each pause
    # doubles from 2 ms to 1 s: 2+4+...+1024 ms covers 2 s in 10 reads; allow slack for a
    # slow start, never one read per sweep
    assert len(bad) > 500
    assert 3 <= failed <= 20, (failed, len(bad))
    # resumed within the longest pause (1 s) of the fix, then valid in every sweep
    ok_after = rows[(rows["t_before_ns"] > t_fixed) & rows["valid"]]
    assert len(ok_after) and int(ok_after["t_before_ns"].min()) - t_fixed < 1_300_000_000
    first_ok = int(ok_after["t_before_ns"].min())
    assert rows[rows["t_before_ns"] >= first_ok]["valid"].all()
    # the failing time is unknown in the analysis (NaN windows), not 0
    res = run_cli("rates", cap_dir, "--window", "100ms", "--json")
    rows_w = next(v for v in json.loads(res.output).values() if isinstance(v, list))
    t_bad = (int(bad["t_before_ns"].max()) - cap.t_start_ns) / 1e9
    unknown = [w for w in rows_w if w["t_s"] + 0.1 <= t_bad]
    assert unknown and all(w["roceP2p1s0f1/tx_gbps"] is None for w in unknown)
    # said live (once) and in the stop summary, with the reason
    err = rec.stderr
    assert err.count("roceP2p1s0f1/1 port_xmit_data unavailable: read_error:") == 1, err
    assert "Input/output error" in err and "roceP2p1s0f1/1 port_xmit_data readable again" in err
    assert "  unavailable: read_error: " in err.split("sweeps:", 1)[1]
