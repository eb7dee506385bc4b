"""The capture format as the sampler uses it: round trip, the frozen v1 capture, refusals."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from rdmascope.sampler.daemon import _to_batch
from rdmascope.sampler.reader import SweepBuffers

from rdmascope.capture import (
    FORMAT_VERSION,
    CaptureWriter,
    NotACaptureError,
    UnsupportedVersionError,
    read_capture,
)

COUNTER = {"source": "infiniband", "device": "mlx5_0", "port": 1, "name": "port_xmit_data",
           "path": "/sys/x", "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64,
           "direction": "tx"}


def buffer_rows(rows):
    buf = SweepBuffers()
    for cid, k, tb, d, v, st in rows:
        if cid == 0:
            buf.sweep_start_ns.append(tb)
        buf.counter_id.append(cid)
        buf.sweep.append(k)
        buf.t_before_ns.append(tb)
        buf.read_duration_ns.append(d)
        buf.value.append(0 if st else v)
        buf.status.append(st)
        buf.n_bad += bool(st)
    return buf


def test_round_trip_through_sampler_buffers(tmp_path):
    rows = [(c, k, 1_000_000 * k + 10 * c, 700 + c, (1 << 63) + 5 * k + c, 0)
            for k in range(300) for c in range(2)]
    rows[7] = (1, 3, rows[7][2], 0, 0, 3)  # one missing reading -> null value
    w = CaptureWriter.create(tmp_path / "cap", {"interval_ns": 1_000_000,
                                                "counters": [COUNTER, {**COUNTER, "port": 2}]})
    w.write_batch(_to_batch(buffer_rows(rows[:200])))
    w.roll()
    w.write_batch(_to_batch(buffer_rows(rows[200:])))
    w.add_event(5, 1, "unavailable", "missing: test")
    w.close(audit={"sweeps_taken": 300})
    cap = read_capture(tmp_path / "cap")
    assert cap.clean_end and cap.manifest["audit"] == {"sweeps_taken": 300}
    got = sorted(tuple(r.values()) for r in cap.table.to_pylist())
    want = sorted((c, k, tb, d, None if st else v, st) for c, k, tb, d, v, st in rows)
    assert got == want
    assert cap.manifest["events"][0]["message"] == "missing: test"


def test_committed_v1_capture_loads(fixtures_dir):
    cap = read_capture(fixtures_dir / "v1-capture")
    m = cap.manifest
    assert m["format_version"] == 1 and m["writer"] == "sampler" and cap.clean_end
    assert m["interval_ns"] == 1_000_000
    names = [(c["device"], c["name"]) for c in m["counters"]]
    assert names[:4] == [("roceP2p1s0f1", "port_xmit_data"), ("roceP2p1s0f1", "port_rcv_data"),
                         ("rocep1s0f1", "port_xmit_data"), ("rocep1s0f1", "port_rcv_data")]
    t = cap.table
    assert t.num_rows == 8 * m["audit"]["sweeps_taken"] == 16000
    assert set(np.asarray(t["status"]).tolist()) == {0}
    cid = np.asarray(t["counter_id"])
    # the twin left alone kept its start value (1000 + port 1) for the whole capture
    assert set(np.asarray(t["value"])[cid == 0].tolist()) == {1001}
    # the busy twin: starts at 2,880,761,508,849+, moves in steps of 1,250 units (5,000 bytes)
    tx = np.asarray(t["value"])[cid == 2].astype(np.int64)
    assert tx[0] >= 2880761508849 and np.all(np.diff(tx) >= 0)
    steps = np.diff(tx)
    assert np.all(steps % 1250 == 0) and steps.sum() > 0
    assert m["counters"][2]["bytes_per_unit"] == 4


def test_corrupt_manifest_is_refused_with_the_file_named(tmp_path, fixtures_dir):
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(fixtures_dir / "v1-capture", cap)
    (cap / "manifest.json").write_bytes(b"\x00\x01garbage{")
    with pytest.raises(NotACaptureError, match="manifest.json.*not valid JSON"):
        read_capture(cap)
    (cap / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(NotACaptureError, match="expected 'rdmascope-capture'"):
        read_capture(cap)


def test_newer_version_refused_naming_both_versions(tmp_path, fixtures_dir):
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(fixtures_dir / "v1-capture", cap)
    m = json.loads((cap / "manifest.json").read_text())
    m["format_version"] = FORMAT_VERSION + 1
    (cap / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UnsupportedVersionError) as ei:
        read_capture(cap)
    msg = str(ei.value)
    assert f"version {FORMAT_VERSION + 1}" in msg and f"version {FORMAT_VERSION}" in msg


def test_to_batch_masks_bad_rows():
    buf = buffer_rows([(0, 0, 5, 1, 42, 0), (1, 0, 6, 1, 0, 2)])
    b = _to_batch(buf)
    assert b.column("value").to_pylist() == [42, None]
    assert b.column("status").type == pa.uint8()


def test_truncated_segment_is_refused_with_the_file_named(tmp_path, fixtures_dir):
    import shutil

    from rdmascope.capture import CorruptSegmentError

    cap = tmp_path / "cap"
    shutil.copytree(fixtures_dir / "v1-capture", cap)
    seg = cap / "segments" / "seg-000000.parquet"
    data = seg.read_bytes()
    seg.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptSegmentError, match="seg-000000.parquet"):
        read_capture(cap)
