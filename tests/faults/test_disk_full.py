"""Disk full and an output directory that becomes unwritable: clear error, clean stop, all earlier
data intact.

Disk full: the capture goes to a small tmpfs mounted by the test (root only; skipped otherwise)
that the readings fill within a second or two. Unwritable: the output directory (and its
``segments/``) loses its write permission mid-run; the recorder runs as ``nobody`` when the test
is root (root ignores permissions), and the next write that needs the directory (a Parquet roll,
or a manifest rewrite after an event) fails.

"Intact": the capture loads; the sweeps on disk are complete (a row for every counter); every
reading is valid and each counter's values never go down (the tree's counters only rise), so no
torn or half-written row was taken for data; and no more than one handoff of readings is missing
before the failure, when the manifest's audit could be saved.
"""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np
import pytest
from rdmascope.analysis.load import load_capture

from .conftest import (
    Recorder,
    Ticker,
    drop_privileges_prefix,
    inspect_json,
    make_tree,
    make_world_readable,
)


def _assert_intact(out, n_counters, removed=None):
    cap = load_capture(out)
    r = cap.readings
    assert len(r) > 0
    assert (r.groupby("sweep").size() == n_counters).all()
    c = cap.counters
    gone = c.index[(c["device"] + "/" + c["name"]) == removed] if removed else []
    assert r.loc[~r["counter_id"].isin(gone), "valid"].all()
    r = r[r["valid"]]
    for _cid, g in r.groupby("counter_id"):
        assert (np.diff(g["value"].to_numpy().astype(np.int64)) >= 0).all()
    return cap


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("fast_roll", [None, 0.3], ids=["live-only", "with-rolls"])
def test_disk_full(tmp_path, small_tmpfs, fast_roll):
    tree = make_tree(tmp_path / "sys")
    ticker = Ticker(tree, {(d, c): 3 for d, _, _ in tree.devices
                           for c in ("port_xmit_data", "port_rcv_data")})
    out = small_tmpfs / "cap"
    ticker.start()
    try:
        rec = Recorder(out, tree.root, "--duration", "30s", "--netdev-stats", fast_roll=fast_roll,
                       logdir=tmp_path)  # the logs live outside the full tmpfs
        t0 = time.monotonic()
        rc = rec.wait(60)
        took = time.monotonic() - t0
    finally:
        ticker.stop()
    err = rec.stderr
    assert rc == 4, err
    assert took < 25, "the recorder did not stop when the disk filled"
    assert "No space left on device" in err, err
    assert str(out) in err
    assert "everything written before it is kept and loads" in err
    assert "Traceback" not in err
    cap = _assert_intact(out, 8)
    m = cap.meta
    on_disk = len(cap.readings) // 8  # whole sweeps (checked by _assert_intact)
    # the printed summary says what is stored and what was lost, exactly
    assert f"is kept and loads: {on_disk} sweeps); " in err, err
    assert "sweeps taken after the disk filled were not written" in err
    if m.get("audit"):  # the final manifest fitted: the audit matches what is stored
        a = m["audit"]
        assert a["stopped_by"] == "write_error"
        assert len(cap.readings) == a["rows_written"] == 8 * a["sweeps_written"]
        assert a["sweeps_written"] + a["sweeps_not_written"] == a["sweeps_taken"]
        assert f"; {a['sweeps_not_written']} sweeps taken after the disk filled" in err
    else:  # no room for the final manifest: the capture honestly reads as unclean
        assert not cap.clean_end
    # a manifest rewrite that failed left no temporary file behind
    assert not (out / ".manifest.json.tmp").exists()
    s = inspect_json(out)
    assert s["rows"] == len(cap.readings)


@pytest.mark.parametrize("trigger", ["roll", "event"])
def test_output_dir_becomes_unwritable(tmp_path, world_dir, trigger):
    prefix, uid = drop_privileges_prefix()
    base = world_dir
    tree = make_tree(base / "sys")
    make_world_readable(base / "sys")
    (base / "out").mkdir()
    os.chown(base / "out", uid, -1)
    out = base / "out" / "cap"
    ticker = Ticker(tree, {(d, "port_xmit_data"): 3 for d, _, _ in tree.devices})
    ticker.start()
    try:
        rec = Recorder(out, tree.root, "--duration", "20s",
                       fast_roll=0.5 if trigger == "roll" else None, prefix=prefix,
                       logdir=tmp_path)
        rec.wait_sampling()
        time.sleep(0.6)
        for d in (out / "segments", out):
            d.chmod(0o555)
        if trigger == "event":  # an unavailable counter is an event: the manifest is rewritten
            os.unlink(tree.counter("mlx5_1", "port_rcv_data"))
        rc = rec.wait(30)
    finally:
        ticker.stop()
        for d in (out, out / "segments"):
            if d.exists():
                d.chmod(0o755)
    err = rec.stderr
    assert rc == 4, err
    assert "Permission denied" in err and str(out) in err, err
    assert "everything written before it is kept and loads" in err
    assert "Traceback" not in err
    cap = _assert_intact(out, 4, "mlx5_1/port_rcv_data" if trigger == "event" else None)
    assert cap.readings["t_before_ns"].max() > 0
    s = inspect_json(out)
    assert s["clean_end"] is cap.clean_end
