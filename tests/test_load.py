"""Loading captures: readings placed mid-bracket, strict errors naming the file, kill -9 captures."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from capture_builders import (
    MS,
    STATUS_OK,
    STATUS_READ_ERROR,
    T0,
    ib,
    netdev,
    relist_segments,
    write_capture,
)
from rdmascope.analysis import (
    load_capture,
    load_captures,
    monotonic_to_realtime,
    realtime_to_monotonic,
)

from rdmascope.capture import (
    CaptureSchemaError,
    CorruptSegmentError,
    NotACaptureError,
    UnsupportedVersionError,
)


def _simple(path, close=True, roll_every=None):
    counters = [ib("rocep1s0f1", "tx"), ib("rocep1s0f1", "rx"),
                netdev("rocep1s0f1", "enp1s0f1np1", "tx")]
    readings = {
        0: [(T0 + k * MS, 2000, 100 * k, STATUS_OK) for k in range(6)],
        1: [(T0 + k * MS + 3000, 1001, 7 * k, STATUS_OK) for k in range(6)],
        2: [(T0 + k * MS + 6000, 500, None if k == 3 else 10 * k,
             STATUS_READ_ERROR if k == 3 else STATUS_OK) for k in range(6)],
    }
    return write_capture(path, counters, readings, close=close, roll_every=roll_every)


def test_load_places_readings_mid_bracket(tmp_path):
    cap = load_capture(_simple(tmp_path / "c"))
    r = cap.readings
    assert len(r) == 18
    assert cap.clean_end
    c0 = r[r.counter_id == 0]
    # t_ns = t_before + duration/2; uncertainty = half the bracket
    assert c0.t_ns.tolist() == [T0 + k * MS + 1000 for k in range(6)]
    assert (c0.t_unc_ns == 1000).all()
    c1 = r[r.counter_id == 1]
    assert c1.t_ns.iloc[0] == T0 + 3000 + 500  # 1001 // 2
    assert c1.t_unc_ns.iloc[0] == 501  # ceil(1001 / 2): the reading may be anywhere inside
    assert r.value.dtype == np.uint64
    bad = r[(r.counter_id == 2) & (r.sweep == 3)]
    assert not bad.valid.iloc[0] and bad.status.iloc[0] == STATUS_READ_ERROR
    assert r.valid.sum() == 17


def test_counters_frame_and_series(tmp_path):
    cap = load_capture(_simple(tmp_path / "c"))
    c = cap.counters
    assert c.index.name == "counter_id"
    assert c.loc[0, "series"] == "rocep1s0f1/tx"
    assert c.loc[1, "series"] == "rocep1s0f1/rx"
    assert c.loc[2, "series"] == "netdev:enp1s0f1np1/tx"
    assert c.loc[0, "bytes_per_unit"] == 4 and c.loc[2, "bytes_per_unit"] == 1
    assert cap.t_start_ns == T0
    assert cap.t_end_ns == T0 + 5 * MS + 6000 + 500 + 1000  # stop record = last end + 1 us


def test_multi_port_series_names(tmp_path):
    counters = [ib("mlx5_0", "tx", port=1), ib("mlx5_0", "tx", port=2), ib("mlx5_1", "tx")]
    rd = {i: [(T0 + k * MS, 100, k, STATUS_OK) for k in range(3)] for i in range(3)}
    cap = load_capture(write_capture(tmp_path / "c", counters, rd))
    assert cap.counters.series.tolist() == ["mlx5_0:1/tx", "mlx5_0:2/tx", "mlx5_1/tx"]


def test_kill9_capture_loads_with_unclean_end(tmp_path):
    path = _simple(tmp_path / "c", close=False, roll_every=4)
    # 4 sweeps rolled into a Parquet segment, 2 left in the live IPC segment, no stop record
    assert len(list((path / "segments").glob("seg-*.parquet"))) == 1
    assert len(list(path.glob("live-*.arrow"))) == 1
    cap = load_capture(path)
    assert not cap.clean_end
    assert len(cap.readings) == 18
    assert cap.live_rows == 6
    # no stop record: the end is the end of the last read bracket
    assert cap.t_end_ns == T0 + 5 * MS + 6000 + 500
    # rows sorted by counter then sweep across the segment and the live file
    r = cap.readings
    assert r.sweep[r.counter_id == 0].tolist() == list(range(6))


def test_kill9_with_cut_off_live_tail(tmp_path):
    path = _simple(tmp_path / "c", close=False)
    live = next(path.glob("live-*.arrow"))
    data = live.read_bytes()
    live.write_bytes(data[:-40])  # the last batch was cut mid-write
    cap = load_capture(path)
    assert not cap.clean_end
    assert cap.truncated_live == [live]
    assert 0 < len(cap.readings) < 18  # earlier batches kept


def test_several_captures_side_by_side(tmp_path):
    a = _simple(tmp_path / "node1")
    b = _simple(tmp_path / "node2", close=False)
    caps = load_captures([a, b])
    assert [c.path for c in caps] == [a, b]
    assert [c.clean_end for c in caps] == [True, False]
    assert caps[0].meta["capture_id"] != caps[1].meta["capture_id"]


def test_clock_conversion_round_trip(tmp_path):
    cap = load_capture(_simple(tmp_path / "c"))
    # the builder's pair: realtime = 1.7e18 + T0 at monotonic T0; stop pair at t_end
    off = 1_700_000_000 * 10**9
    t = np.array([T0, T0 + 3 * MS], dtype=np.int64)
    rt = monotonic_to_realtime(cap, t)
    assert rt.tolist() == (t + off).tolist()
    assert realtime_to_monotonic(cap, rt).tolist() == t.tolist()


# --- bad files: each loader error names the file ---------------------------------------------


def test_not_a_capture(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(NotACaptureError, match="manifest.json.*something-else"):
        load_capture(tmp_path / "x")
    with pytest.raises(NotACaptureError, match="no manifest.json"):
        load_capture(tmp_path)


def test_newer_format_version(tmp_path):
    path = _simple(tmp_path / "c")
    m = json.loads((path / "manifest.json").read_text())
    m["format_version"] = 99
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UnsupportedVersionError) as e:
        load_capture(path)
    assert "99" in str(e.value) and "manifest.json" in str(e.value)


def test_truncated_parquet_segment(tmp_path):
    path = _simple(tmp_path / "c")
    seg = next((path / "segments").glob("*.parquet"))
    seg.write_bytes(seg.read_bytes()[:100])
    with pytest.raises(CorruptSegmentError) as e:
        load_capture(path)
    assert seg.name in str(e.value)


def test_corrupted_parquet_segment(tmp_path):
    path = _simple(tmp_path / "c")
    seg = next((path / "segments").glob("*.parquet"))
    data = bytearray(seg.read_bytes())
    data[4:60] = b"\xff" * 56  # garbage in the first column chunk
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptSegmentError, match=seg.name):
        load_capture(path)


def test_wrong_schema_segment(tmp_path):
    path = _simple(tmp_path / "c")
    seg = next((path / "segments").glob("*.parquet"))
    t = pq.read_table(seg)
    t = t.set_column(t.schema.get_field_index("value"), "value",
                     t["value"].cast(pa.float64()))
    pq.write_table(t, seg)
    relist_segments(path)  # a self-consistent capture: the schema check must refuse it
    with pytest.raises(CaptureSchemaError, match=r"value.*double.*expected uint64"):
        load_capture(path)


def test_counter_id_beyond_manifest(tmp_path):
    path = _simple(tmp_path / "c")
    m = json.loads((path / "manifest.json").read_text())
    m["counters"] = m["counters"][:2]
    (path / "manifest.json").write_text(json.dumps(m))
    # the segments store 3 descriptors (format version 2): the edited manifest is refused there
    with pytest.raises(CaptureSchemaError, match="stores 3 counter descriptors but the manifest "
                                                 "lists 2"):
        load_capture(path)


def test_bad_counter_descriptor(tmp_path):
    path = _simple(tmp_path / "c")
    m = json.loads((path / "manifest.json").read_text())
    m["counters"][1]["bytes_per_unit"] = -4
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CaptureSchemaError, match=r"manifest.json.*counter 1.*bytes_per_unit"):
        load_capture(path)
    del m["counters"][0]["width_bits"]
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CaptureSchemaError, match="descriptor 0 lacks key.*width_bits"):
        load_capture(path)


def test_port_rates_from_device_records():
    from rdmascope.analysis.load import port_rates_gbps

    meta = {"devices": [
        {"name": "mlx4_0", "ports": [{"rate_gbps": 40.0}, {"rate_gbps": 56}]},  # highest port
        {"name": "hfi1_0", "ports": [{"rate_gbps": None}]},                      # unknown: left out
        {"name": "x", "ports": [{"rate_gbps": float("nan")}, {"rate_gbps": True}, "junk"]},
        "not a record",
        {"name": "rocep1s0f1", "ports": [{"rate_gbps": 200.0}]},
    ]}
    assert port_rates_gbps(meta) == {"mlx4_0": 56.0, "rocep1s0f1": 200.0}
    assert port_rates_gbps({}) == {}
