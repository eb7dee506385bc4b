"""The manifest's per-segment digests and type checks: corruption anywhere in a segment, and a
manifest whose values have the wrong types, are refused with the file and key named."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from rdmascope.capture import (
    MANIFEST_NAME,
    CaptureSchemaError,
    CaptureWriter,
    CorruptSegmentError,
    iter_capture_tables,
    make_batch,
    read_capture,
)
from rdmascope.cli import main

COUNTERS = [{"source": "infiniband", "device": d, "port": 1, "name": n, "path": "x",
             "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64, "direction": dr}
            for d in ("a", "b") for n, dr in (("port_xmit_data", "tx"), ("port_rcv_data", "rx"))]


def _capture(path, n_segments=3, sweeps=200):
    """A capture of ``n_segments`` rolled segments of ``sweeps`` sweeps x 4 counters each."""
    w = CaptureWriter.create(path, {"counters": COUNTERS, "interval_ns": 1_000_000,
                                    "start": {"monotonic_ns": 10**9, "realtime_ns": 10**18}})
    rng = np.random.default_rng(1)
    for s in range(n_segments):
        k = np.arange(s * sweeps, (s + 1) * sweeps)
        cid = np.repeat(np.arange(4), sweeps)
        kk = np.tile(k, 4)
        v = 10**9 + kk * 1000 + rng.integers(0, 999, kk.size)
        w.write_batch(make_batch(cid, kk, 10**9 + kk * 10**6, np.full(kk.size, 900), v,
                                 np.zeros(kk.size, np.uint8)))
        w.roll()
    w.close()
    return path


def test_manifest_lists_each_segment_with_rows_and_digest(tmp_path):
    cap = _capture(tmp_path / "c")
    m = json.loads((cap / MANIFEST_NAME).read_text())
    assert [s["name"] for s in m["segments"]] == [f"seg-00000{i}.parquet" for i in range(3)]
    assert [s["rows"] for s in m["segments"]] == [800, 800, 800]
    for s in m["segments"]:
        assert s["bytes"] == (cap / "segments" / s["name"]).stat().st_size
    assert read_capture(cap).table.num_rows == 2400


def test_every_bit_flip_in_a_segment_footer_is_refused(tmp_path):
    """Page checksums do not cover the Parquet footer; a flip there could silently drop rows
    (found by the second fresh-user trial). With the manifest's SHA-256 each one is refused."""
    cap = _capture(tmp_path / "c", n_segments=1)
    seg = cap / "segments" / "seg-000000.parquet"
    good = seg.read_bytes()
    tail = range(max(0, len(good) - 300), len(good))
    for i in tail:
        for bit in (0, 3, 7):
            data = bytearray(good)
            data[i] ^= 1 << bit
            seg.write_bytes(bytes(data))
            with pytest.raises(CorruptSegmentError) as ei:
                read_capture(cap)
            assert ei.value.path == str(seg)
    seg.write_bytes(good)
    assert read_capture(cap).table.num_rows == 800


def test_streamed_reads_check_the_digest_too(tmp_path):
    """``iter_capture_tables`` (every streamed analysis command) computes the SHA-256 in a worker
    thread beside the decode; a footer flip must still be refused before any table is yielded,
    also the flips Parquet itself decodes without complaint (statistics, metadata)."""
    cap = _capture(tmp_path / "c", n_segments=2)
    seg = cap / "segments" / "seg-000001.parquet"
    good = seg.read_bytes()
    for i in range(max(0, len(good) - 300), len(good), 3):
        data = bytearray(good)
        data[i] ^= 1 << 4
        seg.write_bytes(bytes(data))
        got = []
        with pytest.raises(CorruptSegmentError) as ei:
            for f, _t in iter_capture_tables(cap):
                got.append(f.name)
        assert ei.value.path == str(seg)
        assert got == ["seg-000000.parquet"]  # the bad segment's readings never come out
        # the digest mismatch is named even where Parquet fails first
        assert "SHA-256" in str(ei.value)
    seg.write_bytes(good)
    assert sum(t.num_rows for _f, t in iter_capture_tables(cap)) == 1600


def test_a_flipped_page_byte_is_refused_listed_or_not(tmp_path):
    """A listed segment is checked by its SHA-256, which covers its pages (their checksums are
    then not verified again): every flipped byte is refused. A segment the manifest does not
    list yet (the last one, after a crash before the manifest write) has no digest, and its
    page checksums are verified: a flipped byte is refused or (in a page header's statistics,
    which no checksum covers and no reading comes from) loads the same readings. Reader and
    stream alike."""
    cap = _capture(tmp_path / "c", n_segments=2)
    seg = cap / "segments" / "seg-000001.parquet"
    good = seg.read_bytes()
    want = read_capture(cap).table
    listed = json.loads((cap / MANIFEST_NAME).read_text())
    unlisted = dict(listed, segments=listed["segments"][:1])
    for manifest in (listed, unlisted):
        (cap / MANIFEST_NAME).write_text(json.dumps(manifest))
        refused = 0
        for i in range(4, 440, 5):  # the column chunks before the values' (headers and pages)
            data = bytearray(good)
            data[i] ^= 1 << 2
            seg.write_bytes(bytes(data))
            try:
                got = read_capture(cap).table
            except CorruptSegmentError as exc:
                assert exc.path == str(seg)
                assert ("SHA-256" in str(exc)) == (manifest is listed)
                with pytest.raises(CorruptSegmentError):
                    for _f, _t in iter_capture_tables(cap):
                        pass
                refused += 1
                continue
            assert manifest is unlisted and got.equals(want)
        assert refused == len(range(4, 440, 5)) if manifest is listed else refused > 40
        seg.write_bytes(good)
        assert read_capture(cap).table.num_rows == 1600


def test_listed_segment_missing_on_disk_is_refused(tmp_path):
    cap = _capture(tmp_path / "c")
    (cap / "segments" / "seg-000001.parquet").unlink()
    with pytest.raises(CorruptSegmentError, match="listed in the manifest.*missing on disk"):
        read_capture(cap)


def test_trailing_unlisted_segment_is_accepted_but_not_one_in_the_middle(tmp_path):
    cap = _capture(tmp_path / "c")
    m = json.loads((cap / MANIFEST_NAME).read_text())
    # a crash between the last segment's rename and the manifest write: the last one is unlisted
    m["segments"] = m["segments"][:2]
    (cap / MANIFEST_NAME).write_text(json.dumps(m))
    assert read_capture(cap).table.num_rows == 2400
    # a segment missing from the list while later ones are listed does not belong here
    full = json.loads((cap / MANIFEST_NAME).read_text())
    full["segments"] = [s for s in _listing(tmp_path) if s["name"] != "seg-000001.parquet"]
    (cap / MANIFEST_NAME).write_text(json.dumps(full))
    with pytest.raises(CaptureSchemaError, match="seg-000001.parquet.*not listed"):
        read_capture(cap)


def _listing(tmp_path):
    ref = _capture(tmp_path / "ref")
    return json.loads((ref / MANIFEST_NAME).read_text())["segments"]


BAD_VALUES = [
    ("counters", None, "manifest key 'counters' must be a list of objects"),
    ("counters", [1, 2], "manifest key 'counters' must be a list of objects"),
    ("audit", "x", "manifest key 'audit' must be an object or null"),
    ("devices", "x", "manifest key 'devices' must be a list of objects"),
    ("events", {}, "manifest key 'events' must be a list of objects"),
    ("discovered_devices", "x", "manifest key 'discovered_devices' must be a list of objects"),
    ("interval_ns", "abc", "manifest key 'interval_ns' must be a positive integer"),
    ("interval_ns", 0, "manifest key 'interval_ns' must be a positive integer"),
    ("interval_ns", True, "manifest key 'interval_ns' must be a positive integer"),
    ("start", {"monotonic_ns": "1"}, "manifest key 'start' must be an object with integer"),
    ("stop", 5, "manifest key 'stop' must be an object with integer"),
    ("clock_pairs", [[1]], "manifest key 'clock_pairs' must be a list of"),
    ("clock", "CLOCK_REALTIME", "manifest key 'clock' must be \"CLOCK_MONOTONIC\""),
    ("segments", [{"name": "seg-000000.parquet"}], "'segments' entry 0 lacks key(s): rows"),
]


@pytest.mark.parametrize("key,value,message", BAD_VALUES)
def test_manifest_value_of_the_wrong_type_is_refused_naming_the_key(tmp_path, key, value,
                                                                     message):
    cap = _capture(tmp_path / "c", n_segments=1)
    m = json.loads((cap / MANIFEST_NAME).read_text())
    m[key] = value
    (cap / MANIFEST_NAME).write_text(json.dumps(m))
    with pytest.raises(CaptureSchemaError) as ei:
        read_capture(cap)
    assert ei.value.path == str(cap / MANIFEST_NAME)
    assert message in str(ei.value)
    # and the CLI answers with that one line, no traceback (inspect crashed on these before)
    for cmd in (["inspect", str(cap)], ["rates", str(cap)]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code == 4, (cmd, res.output)
        assert message in res.output and "Traceback" not in res.output


def test_a_copied_capture_with_its_manifest_still_loads(tmp_path):
    cap = _capture(tmp_path / "c")
    shutil.copytree(cap, tmp_path / "copy")
    assert read_capture(tmp_path / "copy").table.num_rows == 2400
