"""Counter files that return garbage, an empty string, a value out of range, a value that goes
backwards, or a narrow counter stuck at its maximum: recorded and flagged, no crash.

Where each is flagged: content that is not an unsigned 64-bit integer is flagged *in the capture*
(status ``parse_error`` on the row, one ``unavailable`` event naming the file and the content,
then a ``recovered`` event); a value that goes backwards or sticks at 2^32 - 1 is a valid reading,
stored as read, and flagged *by the analysis* (``byte_intervals`` flags ``reset`` / ``saturated``,
bytes NaN, never negative or huge). An interval with unparseable readings inside is
``unavailable`` (bytes NaN: the counter may have been reset while unreadable).
"""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.series import QUALITY_INVALID, byte_intervals, rebin_with_quality

from rdmascope.capture import STATUS_OK, STATUS_PARSE_ERROR

from .conftest import Recorder, Ticker, inspect_json, make_tree

U32_MAX = (1 << 32) - 1
BAD_CONTENTS = ["garbage\n", "", "-5\n", f"{1 << 64}\n", "12abc\n"]
PHASE_S = 0.25
# a good stretch between two bad contents: longer than the longest pause a PHASE_S of failing
# reads builds (the reader doubles it from 2 ms while the error repeats: 2 + 4 + ... + 128 ms
# <= 0.25 s, so the next pause is at most 256 ms), so the counter is read good again, says
# "recovered", and the next bad content is a new problem said again; with a good stretch of
# PHASE_S a late read could sleep through it and never see the next content's error
GOOD_S = 0.6


def _cid(cap, device, name):
    c = cap.counters
    return int(c.index[(c["device"] == device) & (c["name"] == name)][0])


def _expected_ok_bytes(value, valid):
    """Second method: 4 x the increase between consecutive valid readings with nothing invalid
    between them, summed (the bytes the analysis must report as ok/gap)."""
    idx = np.flatnonzero(valid)
    adjacent = np.diff(idx) == 1
    d = value[idx[1:]].astype(np.int64) - value[idx[:-1]].astype(np.int64)
    return 4 * int(d[adjacent & (d >= 0) & (value[idx[1:]] < U32_MAX)].sum())


@pytest.mark.usefixtures("sweep_impl")
def test_garbage_empty_backwards_and_saturated(tmp_path):
    tree = make_tree(tmp_path / "sys", narrow={"mlx5_1"})
    ticker = Ticker(tree, {("mlx5_0", "port_rcv_data"): 3, ("mlx5_1", "port_rcv_data"): 5})
    tree.set("mlx5_0", "port_xmit_data", 10_000)
    tree.set("mlx5_1", "port_xmit_data", U32_MAX - 400)
    # ended by SIGINT once the phases are played (a clean end), however long a loaded machine
    # takes to play them
    rec = Recorder(tmp_path / "cap", tree.root, "--duration", "60s")
    ticker.start()
    try:
        rec.wait_sampling()
        v = 10_000
        narrow = U32_MAX - 400

        def advance(seconds, bad=None):
            nonlocal v, narrow
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if bad is None:
                    v += 7
                    tree.set("mlx5_0", "port_xmit_data", v)
                narrow = min(narrow + 3, U32_MAX)  # climbs to 2^32 - 1 and sticks there
                tree.set("mlx5_1", "port_xmit_data", narrow)
                time.sleep(0.002)

        advance(PHASE_S)
        for content in BAD_CONTENTS:
            tree.set("mlx5_0", "port_xmit_data", content)
            advance(PHASE_S, bad=content)
            advance(GOOD_S)
        v -= 5_000  # goes backwards (a firmware reset, perfquery -R)
        advance(PHASE_S)
        rec.proc.send_signal(signal.SIGINT)
        rc = rec.wait()
    finally:
        ticker.stop()
        rec.kill()
    assert rc == 0, rec.stderr
    assert "Traceback" not in rec.stderr

    cap = load_capture(tmp_path / "cap")
    assert cap.clean_end
    r = cap.readings
    tx0 = _cid(cap, "mlx5_0", "port_xmit_data")
    path0 = str(tree.counter("mlx5_0", "port_xmit_data"))

    # in the capture: parse_error rows, and one event per bad content naming file and content
    rows = r[r["counter_id"] == tx0]
    assert (rows["status"] == STATUS_PARSE_ERROR).sum() > 0
    assert set(rows["status"]) == {STATUS_OK, STATUS_PARSE_ERROR}
    assert (rows.loc[rows["status"] != STATUS_OK, "value"] == 0).all()  # never a made-up value
    ev = [e for e in cap.meta["events"] if e["counter_id"] == tx0]
    unav = [e["message"] for e in ev if e["kind"] == "unavailable"]
    for content in BAD_CONTENTS:
        shown = repr(content.encode()[:40])
        assert any(path0 in m and shown in m and "parse_error" in m for m in unav), (content, unav)
    assert sum(e["kind"] == "recovered" for e in ev) >= len(BAD_CONTENTS)
    # the other counters went on: every sweep has a row for every counter
    assert (r.groupby("sweep").size() == len(cap.counters)).all()
    others = r[(r["counter_id"] != tx0)]
    assert (others["status"] == STATUS_OK).all()

    # by the analysis
    iv = byte_intervals(cap)
    flags0 = iv[iv["counter_id"] == tx0]
    counts = flags0["flag"].astype(str).value_counts()
    assert counts.get("unavailable", 0) >= len(BAD_CONTENTS)
    assert counts.get("reset", 0) == 1
    bad = flags0["flag"].isin(["unavailable", "reset", "saturated"])
    assert flags0.loc[bad, "bytes"].isna().all()
    good = flags0.loc[~bad, "bytes"]
    assert good.notna().all() and (good >= 0).all()
    assert int(good.sum()) == _expected_ok_bytes(rows["value"].to_numpy(), rows["valid"].to_numpy())

    tx1 = _cid(cap, "mlx5_1", "port_xmit_data")
    assert cap.counters.at[tx1, "width_bits"] is None or np.isnan(cap.counters.at[tx1, "width_bits"])
    f1 = iv[iv["counter_id"] == tx1]
    rows1 = r[r["counter_id"] == tx1]
    stuck = rows1["value"].to_numpy() == U32_MAX
    assert stuck.sum() > 10  # it reached the maximum and stayed there
    sat = f1["flag"].astype(str) == "saturated"
    assert sat.sum() == stuck.sum()  # every interval ending at the maximum, and only those
    assert f1.loc[sat, "bytes"].isna().all()
    assert (f1.loc[~sat, "bytes"] >= 0).all()

    # re-binned: the flagged stretches are NaN and marked invalid, nothing negative or huge
    b, q = rebin_with_quality(iv, 10_000_000)
    vals = b.to_numpy()
    assert np.nanmin(vals) >= 0
    assert np.nanmax(vals) < 200e9 / 8 * 0.010 * 10  # far below 10x a 200 Gb/s link per 10 ms
    assert ((q.to_numpy() & QUALITY_INVALID) != 0).any()
    assert np.isnan(vals[(q.to_numpy() & QUALITY_INVALID) != 0]).all()

    # inspect counts the same rows
    s = inspect_json(tmp_path / "cap")
    by = next(c for c in s["counters"] if c["counter_id"] == tx0)["by_status"]
    assert by["parse_error"] == int((rows["status"] == STATUS_PARSE_ERROR).sum())
