"""Every manifest field, given bad values (wrong type, empty, huge, negative, a list for an object
or an object for a list), makes every command that reads a capture exit 4 with one ``Error:``
line naming the manifest (or the file it contradicts) and the field, never a traceback. The one
validation is ``rdmascope.capture.reader.read_manifest`` (``MANIFEST_FIELDS`` and
``_check_manifest_files``), run by every reader before any analysis."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdmascope.cli import main

SIM = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p4-200"
BASE = json.loads((SIM / "manifest.json").read_text())
HUGE = 10**30
START = BASE["start"]


def _set(path: str, value):
    """A manifest edit: ``path`` is 'key' or 'key[i].sub' / 'key.sub'."""
    def edit(m):
        node, parts = m, path.replace("[", ".").replace("]", "").split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        last = parts[-1]
        node[int(last) if last.isdigit() else last] = value
        return m
    return edit


# (edited field, value): each a manifest no reader may take
BAD = {
    "format": ["x", "", HUGE, ["rdmascope-capture"]],
    "format_version": ["2", 0, -1, HUGE, [2]],
    "capture_id": [5, "", None, {"a": 1}],
    "host": [5, "", None, ["h"]],
    "clock": ["CLOCK_REALTIME", "", 5, ["CLOCK_MONOTONIC"]],
    "interval_ns": ["1ms", 0, -1_000_000, HUGE, [1_000_000], 1.5],
    "start": ["x", {}, None, [START], {"monotonic_ns": HUGE, "realtime_ns": 1},
              {"monotonic_ns": -1, "realtime_ns": START["realtime_ns"]}],
    "start.monotonic_ns": [START["monotonic_ns"] + 1000 * 10**9, -5, HUGE, "0"],
    "start.realtime_ns": [-5, HUGE, 1.5],
    "stop": ["x", {}, [START], {"monotonic_ns": 0, "realtime_ns": 0}],
    "stop.monotonic_ns": [HUGE, -1, START["monotonic_ns"] - 1],
    "clock_pairs": ["x", {"a": 1}, [[HUGE, 5]], [[-1, 5]], [[1, 2, 3]], [5]],
    "devices": ["x", {"name": "a"}, [5], [{"name": 5}], [{}]],
    "devices[0].ports": ["x", {"port": 1}, [{"port": HUGE}], [{"port": -1}]],
    "counters": ["x", [], {"a": 1}, [5], [{}], None],
    "counters[0].bytes_per_unit": [HUGE, 0, -4, "4"],
    "counters[0].width_bits": [HUGE, 0, -1, 65],
    "counters[0].port": [HUGE, -1, "1"],
    "counters[0].name": ["port_rcv_data", 5, ""],
    "events": ["x", {"a": 1}, [5], HUGE],
    "segments": ["x", {"a": 1}, [5], [{}]],
    "segments[0].rows": [HUGE, -1, "5"],
    "segments[0].bytes": [HUGE, -1, None],
    "segments[0].sha256": [5, None],
    "audit": ["x", [1], HUGE],
    "extra": ["x", [1]],
    "discovered_devices": ["x", {"a": 1}, [5]],
    "device_changes": ["x", {"a": 1}, [5]],
}
CASES = [(f, v) for f, vals in BAD.items() for v in vals]
CASES.append(("(whole manifest)", "list"))

COMMANDS = [["peaks"], ["rates", "--window", "1ms"], ["bursts"], ["attribute"], ["inspect"],
            ["verify-emulation", "--expect-single"], ["export", "perfetto", "-o", "{out}"]]


@pytest.fixture(scope="module")
def cap(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(SIM, root / "cap")
    return root / "cap"


def _named(field: str, err: str) -> bool:
    if field == "(whole manifest)":
        return "holds a list" in err
    top = field.split("[")[0].split(".")[0]
    leaf = field.replace("[", ".").replace("]", "").split(".")[-1]
    return any(n in err for n in {field, top, leaf, top.replace("_", " ")})


@pytest.mark.parametrize(("field", "value"), CASES, ids=[f"{f}={v!r}"[:60] for f, v in CASES])
def test_bad_manifest_field_is_one_error_line_exit_4(cap, tmp_path, field, value):
    m = copy.deepcopy(BASE)
    m = [m] if field == "(whole manifest)" else _set(field, value)(m)
    (cap / "manifest.json").write_text(json.dumps(m))
    runner = CliRunner()
    for cmd in COMMANDS:
        args = [a.replace("{out}", str(tmp_path / "o.json")) for a in cmd]
        args[len(cmd) - (2 if "-o" in cmd else 0):len(cmd) - (2 if "-o" in cmd else 0)] = [str(cap)]
        r = runner.invoke(main, args)
        out = r.output  # stdout and stderr
        assert "Traceback" not in out and not (r.exception and not isinstance(
            r.exception, SystemExit)), (args, field, value, repr(r.exception), out)
        assert r.exit_code == 4, (args, field, value, r.exit_code, out)
        errors = [ln for ln in out.splitlines() if ln.startswith("Error:")]
        assert len(errors) == 1, (args, out)
        assert "manifest.json" in errors[0] or "seg-000000.parquet" in errors[0], errors[0]
        assert _named(field, errors[0]), (field, errors[0])
    assert not (tmp_path / "o.json").exists()


def test_the_unedited_fixture_still_reads(cap):
    (cap / "manifest.json").write_text(json.dumps(BASE))
    r = CliRunner().invoke(main, ["peaks", str(cap)])
    assert r.exit_code == 0, r.output
