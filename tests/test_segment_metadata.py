"""Each Parquet segment carries its counter descriptors in its key-value metadata, so the file
alone (pyarrow, pandas) says which counter_id is which; older segments without them still load."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from capture_builders import MS, STATUS_OK, T0, ib, write_capture

from rdmascope.capture import SEGMENT_COUNTERS_KEY, read_capture, segment_counters

REPO = Path(__file__).resolve().parents[1]


def test_a_segment_names_its_counters(tmp_path):
    counters = [ib("rocep1s0f1", "tx"), ib("roceP2p1s0f1", "rx", port=2)]
    readings = {cid: [(T0 + k * MS, 100, 1000 + k * (cid + 1), STATUS_OK) for k in range(20)]
                for cid in range(2)}
    cap = write_capture(tmp_path / "c", counters, readings, roll_every=10)
    segs = sorted((cap / "segments").glob("seg-*.parquet"))
    assert len(segs) == 2
    manifest = json.loads((cap / "manifest.json").read_text())
    for seg in segs:
        meta = pq.read_schema(seg).metadata
        stored = json.loads(meta[SEGMENT_COUNTERS_KEY])
        assert stored == [{"counter_id": i, **c} for i, c in enumerate(manifest["counters"])]
        assert segment_counters(seg) == stored
        # pandas alone: DataFrame.attrs maps counter_id to its descriptor
        import pandas as pd
        df = pd.read_parquet(seg)
        desc = df.attrs["rdmascope.counters"]
        named = {d["counter_id"]: (d["device"], d["port"], d["name"], d["bytes_per_unit"])
                 for d in desc}
        assert named[1] == ("roceP2p1s0f1", 2, "port_rcv_data", 4)
        assert set(df["counter_id"]) == {0, 1}
    assert read_capture(cap).table.num_rows == 40


def test_older_segments_without_descriptors_stay_readable():
    v1 = REPO / "fixtures" / "v1-capture"
    seg = sorted((v1 / "segments").glob("seg-*.parquet"))[0]
    assert segment_counters(seg) is None
    assert read_capture(v1).table.num_rows > 0
