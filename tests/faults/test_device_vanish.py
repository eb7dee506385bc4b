"""A device that disappears mid-run and comes back: the daemon keeps sampling the others, records
the gap, resumes the device.

On a regular file system (the test tree) a removed file stays readable through an open
descriptor, so the reader notices the removal by its once-per-second liveness check (link count
0); in real sysfs a read of a removed kernfs file fails at once with ENODEV. Both paths are
exercised: the real recorder on a tree whose device directory is deleted and rebuilt, and the
counter reader in-process with ``os.pread`` failing (ENODEV, then EIO) as the kernel's would.
"""

from __future__ import annotations

import errno
import os
import shutil
import time

import numpy as np
import pytest
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.series import byte_intervals
from rdmascope.sampler.reader import CounterReader, SweepBuffers

from rdmascope.capture import STATUS_MISSING, STATUS_OK, STATUS_READ_ERROR

from .conftest import Recorder, Ticker, inspect_json, make_tree, run_cli


def inspect_text(path) -> str:
    r = run_cli("inspect", path)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.usefixtures("sweep_impl")
def test_device_vanishes_and_comes_back(tmp_path):
    tree = make_tree(tmp_path / "sys")
    ticker = Ticker(tree, {(d, c): 2 for d, _, _ in tree.devices
                           for c in ("port_xmit_data", "port_rcv_data")})
    rec = Recorder(tmp_path / "cap", tree.root, "--duration", "4s")
    ticker.start()
    try:
        rec.wait_sampling()
        time.sleep(0.3)
        t_gone = time.perf_counter_ns()
        shutil.rmtree(tree.device_dir("mlx5_1"))
        time.sleep(1.6)  # > the 1 s re-open/liveness interval
        t_back = time.perf_counter_ns()
        tree.add_device("mlx5_1", start_value=7)  # a driver reload: counters start again low
        rc = rec.wait()
    finally:
        ticker.stop()
        rec.kill()
    assert rc == 0, rec.stderr

    cap = load_capture(tmp_path / "cap")
    assert cap.clean_end
    r = cap.readings
    c = cap.counters
    gone_ids = set(c.index[c["device"] == "mlx5_1"])
    kept_ids = set(c.index[c["device"] == "mlx5_0"])
    # the others kept going: every sweep has all rows, mlx5_0's all valid, no event for them
    assert (r.groupby("sweep").size() == len(c)).all()
    assert r[r["counter_id"].isin(kept_ids)]["valid"].all()
    assert not [e for e in cap.meta["events"] if e["counter_id"] in kept_ids]

    for cid in gone_ids:
        rows = r[r["counter_id"] == cid]
        missing = rows[rows["status"] == STATUS_MISSING]
        assert len(missing) > 0, f"counter {cid}: the gap is not recorded"
        assert set(rows["status"]) == {STATUS_OK, STATUS_MISSING}
        # the gap lies between the removal and the return, and sampling resumed after it
        assert int(missing["t_before_ns"].min()) > t_gone
        assert int(missing["t_before_ns"].max()) < t_back + 1_500_000_000
        after = rows[(rows["t_before_ns"] > int(missing["t_before_ns"].max()))]
        assert len(after) > 0 and after["valid"].all(), f"counter {cid} was not resumed"
        assert int(after["t_before_ns"].min()) > t_back
        # events: unavailable (naming the file) then recovered
        ev = [e for e in cap.meta["events"] if e["counter_id"] == cid]
        kinds = [e["kind"] for e in ev]
        assert kinds[0] == "unavailable" and "recovered" in kinds, ev
        assert c.at[cid, "name"] in ev[0]["message"] and "missing" in ev[0]["message"]
        rec_ev = next(e for e in ev if e["kind"] == "recovered")
        assert rec_ev["t_ns"] > t_back

    # the analysis: one NaN "unavailable" interval spans the gap; the other device is all ok
    iv = byte_intervals(cap)
    for series in ("mlx5_1/tx", "mlx5_1/rx"):
        s = iv[iv["series"] == series]
        un = s[s["flag"] == "unavailable"]
        assert len(un) == 1 and np.isnan(un["bytes"].iloc[0])
        assert int(un["t0_ns"].iloc[0]) < t_back < int(un["t1_ns"].iloc[0])
        assert (s["flag"].astype(str) != "reset").all()  # the reset hides inside the NaN interval
    s0 = iv[iv["device"] == "mlx5_0"]
    assert set(s0["flag"].astype(str)) <= {"ok", "gap"} and (s0["bytes"] >= 0).all()

    summary = inspect_json(tmp_path / "cap")
    listed = {(e["counter_id"], e["kind"]) for e in summary["unavailable"]}
    assert {(cid, k) for cid in gone_ids for k in ("unavailable", "recovered")} <= listed

    # the recorded device's vanishing and return: one device_changes entry each, said once
    # (the rescan runs about once a second: each is seen within ~1 s of happening)
    ch = [x for x in cap.meta["device_changes"] if x["name"] == "mlx5_1"]
    assert [x["kind"] for x in ch] == ["vanished", "returned"], ch
    assert t_gone < ch[0]["t_ns"] < t_back < ch[1]["t_ns"] < t_back + 1_500_000_000, ch
    assert not [x for x in cap.meta["device_changes"] if x["name"] == "mlx5_0"]
    assert rec.stderr.count("RDMA device mlx5_1 (recorded) vanished") == 1, rec.stderr
    assert rec.stderr.count("RDMA device mlx5_1 returned") == 1, rec.stderr
    text = inspect_text(tmp_path / "cap")
    assert "device mlx5_1 vanished at " in text and "device mlx5_1 returned at " in text, text


def test_reader_keeps_the_others_when_reads_fail(tmp_path, monkeypatch):
    """In-process: pread fails with ENODEV (kernfs file removed) for one counter and EIO for
    another; the third is read normally; then both recover."""
    paths = []
    for i in range(3):
        p = tmp_path / f"c{i}"
        p.write_text(f"{100 + i}\n")
        paths.append(str(p))
    now = [0]

    def clock():
        now[0] += 1000
        return now[0]

    # back-off of the failing read scaled to this fast clock like the re-open interval
    rd = CounterReader(paths, clock=clock, reopen_interval_ns=50_000, backoff_min_ns=2_000,
                       backoff_max_ns=50_000)
    fail = {rd.fds[0]: errno.ENODEV, rd.fds[1]: errno.EIO}
    real = os.pread

    def pread(fd, n, off):
        if fd in fail:
            raise OSError(fail[fd], os.strerror(fail[fd]))
        return real(fd, n, off)

    monkeypatch.setattr(os, "pread", pread)
    buf = SweepBuffers()
    for k in range(40):
        if k == 20:
            fail.clear()
        rd.read_sweep(k, buf)
    st = np.frombuffer(buf.status, np.uint8).reshape(40, 3)
    val = np.frombuffer(buf.value, np.uint64).reshape(40, 3)
    assert (st[:, 2] == STATUS_OK).all() and (val[:, 2] == 102).all()
    assert (st[:20, 0] == STATUS_MISSING).all() and (st[:20, 1] == STATUS_READ_ERROR).all()
    assert (val[:20, :2] == 0).all()
    assert (st[-5:, :2] == STATUS_OK).all() and (val[-5:, :2] == [100, 101]).all()
    ev = rd.drain_events()
    assert [(e[1], e[2]) for e in ev if e[1] == 0] == [(0, "unavailable"), (0, "recovered")]
    assert [(e[1], e[2]) for e in ev if e[1] == 1] == [(1, "unavailable"), (1, "recovered")]
    assert "read failed" in next(e[3] for e in ev if e[1] == 1)
    rd.close()
