"""A capture being recorded, or left by ``kill -9``: every command reads it to its last flushed
reading (the live files included) and says what ``inspect`` says: "being recorded" while a
recorder holds the lock, "unclean end" after a kill. ``report`` said duration 0.000 s."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdmascope.cli import main

TESTS = Path(__file__).resolve().parent

#: writes a 2 s capture (2,000 readings of one counter, nothing rolled) and dies without
#: closing it: as kill -9 leaves it (live file, no stop record, lock released with the process)
_KILLED = """
import os, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from capture_builders import write_capture, ib, T0, MS
from rdmascope.capture import STATUS_OK
rd = {{0: [(T0 + k * MS, 1000, 250 * k, STATUS_OK) for k in range(2000)]}}
write_capture(Path({out!r}), [ib("rocep1s0f1", "tx")], rd, close=False)
os._exit(0)
"""


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    out = tmp_path_factory.mktemp("killed") / "cap"
    subprocess.run([sys.executable, "-c", _KILLED.format(tests=str(TESTS), out=str(out))],
                   check=True, timeout=120)
    return out


def run(*args):
    return CliRunner(mix_stderr=False).invoke(main, [str(a) for a in args]) \
        if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else \
        CliRunner().invoke(main, [str(a) for a in args])


def _stderr(r) -> str:
    try:
        return r.stderr
    except (ValueError, AttributeError):
        return r.output


def test_inspect_and_every_command_read_to_the_last_flushed_reading(killed, tmp_path):
    s = json.loads(run("inspect", killed, "--json").output)
    assert s["clean_end"] is False and s["recording_pid"] is None
    # the readings span 1.999 s (2,000 readings 1 ms apart, each bracket 1 us)
    r = run("report", killed, "-o", tmp_path / "rep", "--no-embed")
    assert r.exit_code in (0, 3), r.output
    page = (tmp_path / "rep" / "report.html").read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "duration 1.999 s" in text, re.findall(r"duration [0-9.]+ s", text)
    assert "unclean end" in text and "last flushed reading" in text
    # rates: 100 ms windows to the end (20 of them, all from the live file)
    r = run("rates", killed, "--window", "100ms", "--json")
    assert r.exit_code == 0, r.output
    assert "unclean end" in _stderr(r)
    obj = json.loads(r.stdout if hasattr(r, "stdout") and r.stdout.lstrip().startswith("{")
                     else r.output[r.output.index("{"):])
    assert len(obj["rates"]) == 20
    # 1,000 bytes per ms = 8 Mb/s in every full window
    assert all(w["rocep1s0f1/tx_gbps"] == pytest.approx(0.008, rel=1e-3) for w in obj["rates"][:-1])
    for cmd in (["peaks"], ["bursts"], ["verify-emulation"]):
        r = run(*cmd, killed)
        assert "unclean end" in _stderr(r), (cmd, r.output)
        assert r.exit_code in (0, 1, 3), (cmd, r.output)


def test_a_capture_being_recorded_says_so(tmp_path):
    """While the writer holds the capture's lock (this process), the note says "being
    recorded by pid <ours>" and the report's clean-end field says the same."""
    import os

    sys.path.insert(0, str(TESTS))
    from capture_builders import MS, T0, ib, write_capture

    from rdmascope.capture import STATUS_OK, recording_pid

    rd = {0: [(T0 + k * MS, 1000, 250 * k, STATUS_OK) for k in range(1500)]}
    cap = write_capture(tmp_path / "live", [ib("rocep1s0f1", "tx")], rd, close=False)
    if recording_pid(cap) is None:
        pytest.skip("the test writer released the capture's lock")
    r = run("peaks", cap)
    assert f"being recorded by pid {os.getpid()}" in _stderr(r), r.output
    r = run("report", cap, "-o", tmp_path / "rep", "--no-embed")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (tmp_path / "rep" / "report.html")
                                      .read_text()))
    assert "being recorded by pid" in text and "duration 1.499 s" in text
