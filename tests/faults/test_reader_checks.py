"""Readers check what they read against what they were told: rows against the audit, each
segment's capture id, counter descriptors and interval against the manifest, manifest types."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rdmascope.capture import (
    FORMAT_VERSION,
    STATUS_OK,
    CaptureSchemaError,
    CaptureWriter,
    make_batch,
    read_capture,
    read_manifest,
)
from rdmascope.cli import main

C0 = {"source": "infiniband", "device": "mlx5_0", "port": 1, "name": "port_xmit_data",
      "path": "/sys/x0", "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64,
      "direction": "tx"}
C1 = {**C0, "name": "port_rcv_data", "path": "/sys/x1", "direction": "rx"}
FIELDS = {"interval_ns": 1_000_000, "counters": [C0, C1],
          "start": {"monotonic_ns": 0, "realtime_ns": 1_700_000_000 * 10**9}}  # the readings start at 0 ns


def _batch(k0, n):
    ks = [k for k in range(k0, k0 + n) for _ in (0, 1)]
    return make_batch([0, 1] * n, ks, [1_000 + k * 1_000_000 for k in ks], [5] * (2 * n),
                      [10 * k for k in ks], [STATUS_OK] * (2 * n))


def _capture(path, segments=2, per=100):
    w = CaptureWriter.create(path, FIELDS)
    for i in range(segments):
        w.write_batch(_batch(i * per, per))
        w.roll()
    w.close(audit={"rows_written": w.rows_written, "sweeps_taken": segments * per})
    return path


def _edit(path, fn):
    m = json.loads((path / "manifest.json").read_text())
    fn(m)
    (path / "manifest.json").write_text(json.dumps(m))


def _inspect(path):
    return CliRunner().invoke(main, ["inspect", str(path)])


def test_new_captures_are_version_2_and_every_file_carries_the_capture_id(tmp_path):
    cap = _capture(tmp_path / "a")
    m = read_manifest(cap)
    assert FORMAT_VERSION == 2 and m["format_version"] == 2
    for s in sorted((cap / "segments").glob("seg-*.parquet")):
        meta = pq.read_schema(s).metadata
        assert meta[b"rdmascope.capture_id"].decode() == m["capture_id"]
        assert int(meta[b"rdmascope.interval_ns"]) == 1_000_000


def test_foreign_trailing_segment_of_the_same_host_is_refused_naming_it(tmp_path):
    """Another capture's segment copied in after the last listed one (where a crash can leave
    an unlisted segment): refused by its capture id, never read as ours."""
    a, b = _capture(tmp_path / "a"), _capture(tmp_path / "b")
    shutil.copy(b / "segments" / "seg-000001.parquet", a / "segments" / "seg-000002.parquet")
    with pytest.raises(CaptureSchemaError, match="seg-000002.parquet: belongs to another "
                                                 "capture"):
        read_capture(a)
    r = _inspect(a)
    assert r.exit_code == 4 and "belongs to another capture" in r.output
    assert "Traceback" not in r.output


def test_segment_without_an_id_in_a_version_2_capture_is_refused(tmp_path):
    a = _capture(tmp_path / "a")
    s = a / "segments" / "seg-000002.parquet"
    t = read_capture(a).table.slice(0, 10)
    pq.write_table(t.replace_schema_metadata({}), s)
    with pytest.raises(CaptureSchemaError, match="seg-000002.parquet: carries no capture id"):
        read_capture(a)


@pytest.mark.parametrize("edit, key", [
    (lambda m: m["counters"].__setitem__(0, {**m["counters"][0], "direction": "rx"}), "direction"),
    (lambda m: m["counters"][0].__setitem__("bytes_per_unit", 1), "bytes_per_unit"),
    (lambda m: m["counters"][1].__setitem__("name", "port_xmit_data"), "name"),
])
def test_manifest_descriptors_edited_are_refused_naming_counter_and_key(tmp_path, edit, key):
    cap = _capture(tmp_path / "a")
    _edit(cap, edit)
    with pytest.raises(CaptureSchemaError, match=rf"seg-000000.parquet: counter \d .*'{key}' is"):
        read_capture(cap)
    r = _inspect(cap)
    assert r.exit_code == 4 and f"'{key}' is" in r.output


def test_doubled_interval_in_the_manifest_is_refused(tmp_path):
    cap = _capture(tmp_path / "a")
    _edit(cap, lambda m: m.__setitem__("interval_ns", 2_000_000))
    with pytest.raises(CaptureSchemaError, match="written at interval_ns 1000000 but the "
                                                 "manifest says 2000000"):
        read_capture(cap)


def test_live_file_is_checked_too(tmp_path):
    w = CaptureWriter.create(tmp_path / "a", FIELDS)
    w.write_batch(_batch(0, 50))  # a live file, as a crash leaves it
    cap = tmp_path / "a"
    _edit(cap, lambda m: m["counters"][0].__setitem__("direction", "rx"))
    with pytest.raises(CaptureSchemaError, match=r"live-000000.arrow: counter 0 .*'direction'"):
        read_capture(cap)


@pytest.mark.parametrize("edit, named", [
    (lambda m: m["counters"][0].__setitem__("name", 7), "'name' must be a string, got 7"),
    (lambda m: m["devices"].append({"name": "mlx5_0", "ports": "x"}),
     "'devices[0].ports' must be a list of objects"),
    (lambda m: m.__setitem__("format_version", "x"), "format_version 'x'"),
    (lambda m: m["counters"][0].__setitem__("port", "1"), "'port' must be an integer"),
])
def test_wrong_typed_manifest_values_are_refused_naming_the_key(tmp_path, edit, named):
    cap = _capture(tmp_path / "a")
    _edit(cap, edit)
    r = _inspect(cap)
    assert r.exit_code == 4 and named in r.output, r.output  # bad content: a data error
    assert "Traceback" not in r.output
    r = CliRunner().invoke(main, ["rates", str(cap)])
    assert r.exit_code == 4 and named in r.output and "Traceback" not in r.output, r.output


def test_inspect_says_when_fewer_readings_exist_than_the_audit_says(tmp_path):
    """A segment lost (removed from disk and from the list): the audit's 'written' is not
    taken on trust; inspect says how many readings are missing."""
    cap = _capture(tmp_path / "a")
    (cap / "segments" / "seg-000001.parquet").unlink()
    _edit(cap, lambda m: m.__setitem__("segments", m["segments"][:1]))
    r = _inspect(cap)
    assert r.exit_code == 0, r.output
    assert ("the audit says 400 readings were written but the capture holds 200: 200 readings "
            "are missing") in r.output
    r = CliRunner().invoke(main, ["inspect", str(cap), "--json"])
    doc = json.loads(r.output)
    assert doc["audit_mismatch"] == {"rows_written": 400, "rows_present": 200, "missing": 200}


def test_version_1_captures_still_read(fixtures_dir):
    cap = read_capture(fixtures_dir / "v1-capture")
    assert cap.manifest["format_version"] == 1 and cap.table.num_rows > 0


def test_analysis_commands_say_the_shortfall_too(tmp_path):
    cap = _capture(tmp_path / "a")
    (cap / "segments" / "seg-000001.parquet").unlink()
    _edit(cap, lambda m: m.__setitem__("segments", m["segments"][:1]))
    out = tmp_path / "out"
    out.mkdir()
    # (rates with its 1 s windows: its default 1 ms would be too many over this capture's span,
    # an error, which no warning precedes)
    for cmd in (["peaks"], ["verify-emulation"], ["bursts"], ["rates", "--window", "1s"],
                ["export", "dataset", "-o", str(out / "ds")],
                ["export", "perfetto", "-o", str(out / "t.json")],
                ["report", "-o", str(out / "rep")]):
        r = CliRunner().invoke(main, [*cmd, str(cap)])
        assert r.exit_code in (0, 1, 3), (cmd, r.output)  # done (a verdict), not an error
        assert ("the audit says 400 readings were written but the capture holds 200: 200 "
                "readings are missing") in r.output, (cmd, r.output)


def test_a_negative_row_count_is_refused_without_a_shortfall_warning(tmp_path):
    """A manifest whose segment says -1 rows: the manifest check refuses it naming the manifest
    and the key (exit 4),
    and no 'the capture holds -1: N readings are missing' line comes before."""
    cap = _capture(tmp_path / "a")
    _edit(cap, lambda m: m["segments"][0].__setitem__("rows", -1))
    r = CliRunner().invoke(main, ["peaks", str(cap)])
    assert r.exit_code == 4 and "'segments[0].rows' must be an integer 0.." in r.output, r.output
    assert "manifest.json" in r.output and "got -1" in r.output
    assert "readings are missing" not in r.output
