"""Errors that say what is wrong and what was likely meant: a segment copied into a capture
is named, a bare number offers its likely unit, a request log far from the capture says where
it lies and on which clock, a request log path that is a directory is said to be one, and no
note or warning comes just before a fatal ``Error:`` line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rdmascope.cli import main
from rdmascope.cli.common import notes_after_success, say_later
from rdmascope.exitcodes import EXIT_ERROR, EXIT_USAGE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIM = FIXTURES / "sim-p2-200"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def copy(tmp_path, name="cap") -> Path:
    d = tmp_path / name
    shutil.copytree(SIM, d)
    return d


def first_request() -> dict:
    return json.loads((SIM / "requests.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize("cmd", [["peaks"], ["bursts"], ["verify-emulation"],
                                 ["rates", "--window", "1s"], ["attribute"]])
def test_a_segment_copied_in_twice_is_named(tmp_path, cmd):
    d = copy(tmp_path)
    seg = sorted((d / "segments").glob("*.parquet"))
    assert len(seg) == 1
    shutil.copy(seg[0], d / "segments" / "seg-000099.parquet")  # not in the manifest
    r = run(*cmd[:1], d, *cmd[1:])
    assert r.exit_code == EXIT_ERROR, r.output
    assert "segments/seg-000099.parquet (not listed in the manifest)" in r.output, r.output
    assert "is not after sweep" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args, option, guess", [
    (["record", "-o", "{tmp}/c", "--interval", "5"], "--interval", "5ms?"),
    (["record", "-o", "{tmp}/c", "--duration", "30"], "--duration", "30s?"),
    (["rates", SIM, "--window", "10"], "--window", "10ms?"),
    (["peaks", SIM, "--windows", "1ms,5"], "--windows", "5ms?"),
    (["cluster", SIM, SIM, "--max-clock-error", "50"], "--max-clock-error", "50ms?"),
])
def test_a_bare_number_offers_its_likely_unit(tmp_path, args, option, guess):
    r = run(*[str(a).format(tmp=tmp_path) for a in args])
    assert r.exit_code == EXIT_USAGE, r.output
    assert f"Invalid value for '{option}'" in r.output and "has no unit" in r.output
    assert r.output.rstrip().endswith(guess), r.output


@pytest.mark.parametrize("shift_s, clock, says", [
    (-500.0, "CLOCK_MONOTONIC", "every request ends before the capture starts (the last "
                                "{gap} before it); CLOCK_MONOTONIC counts from each host's boot"),
    (+500.0, "CLOCK_MONOTONIC", "every request starts after the capture ends (the first "
                                "{gap} after it); CLOCK_MONOTONIC counts from each host's boot"),
])
def test_a_log_outside_the_capture_says_where_and_which_clock(tmp_path, shift_s, clock, says):
    row = first_request()
    man = json.loads((SIM / "manifest.json").read_text())
    for k in ("t_send", "t_first_token", "t_last_token"):
        row[k] += shift_s
    row["clock"] = clock
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(row) + "\n")
    # the gap, from the manifest's own start/stop and the shifted row (seconds)
    t0, t1 = man["start"]["monotonic_ns"] / 1e9, man["stop"]["monotonic_ns"] / 1e9
    r = run("attribute", SIM, "--requests", log)
    assert r.exit_code == EXIT_ERROR, r.output
    # the capture's span as the command reads it: the readings', within the manifest's
    m = r.output.split("span ", 1)[1].split(" s", 1)[0]
    start, end = (float(x) for x in m.split("-"))
    assert t0 - 1e-3 <= start < end <= t1 + 1e-3
    gap = start - row["t_last_token"] if shift_s < 0 else row["t_send"] - end
    assert says.format(gap=f"{gap:.3f} s") in " ".join(r.output.split()), r.output
    assert "--offset S moves the log's times" in r.output


def test_a_request_log_that_is_a_directory_is_said_to_be_one(tmp_path):
    d = copy(tmp_path)
    (d / "requests.jsonl").unlink()
    (d / "requests.jsonl").mkdir()  # where the log is looked for by default
    (d / "requests.jsonl" / "run1.jsonl").write_text(json.dumps(first_request()) + "\n")
    says = "requests.jsonl: is a directory, not a request log file: give the log file itself; " \
           "JSON/CSV files in it: run1.jsonl"
    for cmd in (["attribute", d], ["report", d, "-o", tmp_path / "rep"],
                ["plot", "request", d, "-o", tmp_path / "p.png"],
                ["compare", d, SIM]):
        r = run(*cmd)
        assert r.exit_code == EXIT_ERROR, (cmd, r.output)
        assert says in " ".join(r.output.split()), (cmd, r.output)
    assert not (tmp_path / "rep").exists() and not (tmp_path / "p.png").exists()
    # given on the command line: click names it a directory (exit 2)
    r = run("attribute", SIM, "--requests", d / "requests.jsonl")
    assert r.exit_code == EXIT_USAGE and "is a directory" in r.output


@pytest.fixture
def unclean(tmp_path) -> Path:
    """A capture whose recorder was killed (no stop record): every command notes it."""
    d = copy(tmp_path, "killed")
    man = json.loads((d / "manifest.json").read_text())
    man["stop"] = None
    (d / "manifest.json").write_text(json.dumps(man))
    return d


def test_no_note_comes_before_a_fatal_error(unclean, tmp_path):
    ok = run("peaks", unclean)
    assert ok.exit_code == 0 and "unclean end" in ok.output  # noted when the command succeeds
    for cmd in (["attribute", unclean, "--run", "5"],
                ["report", unclean, "--run", "5", "-o", tmp_path / "r"],
                ["attribute", unclean, "--requests", tmp_path / "nolog.jsonl"]):
        if cmd[-1] == tmp_path / "nolog.jsonl":
            (tmp_path / "nolog.jsonl").write_text("{not json\n")
        r = run(*cmd)
        assert r.exit_code in (EXIT_USAGE, EXIT_ERROR), (cmd, r.output)
        assert "Error:" in r.output and "unclean end" not in r.output, (cmd, r.output)


def test_a_verdict_keeps_its_notes(unclean):
    r = run("verify-emulation", unclean)  # FAIL (not emulated): a verdict, not an error
    assert r.exit_code == 1 and "unclean end" in r.output, r.output


def test_notes_after_success_prints_on_success_and_exit_and_drops_on_error():
    @click.command()
    @click.argument("how")
    def cmd(how):
        with notes_after_success():
            say_later("note: A")
            say_later("note: A")  # held once
            if how == "fail":
                raise click.ClickException("boom")
            if how == "exit":
                click.get_current_context().exit(3)

    for how, code, note in (("ok", 0, True), ("exit", 3, True), ("fail", 1, False)):
        r = CliRunner().invoke(cmd, [how])
        assert r.exit_code == code, r.output
        assert r.output.count("note: A") == (1 if note else 0), (how, r.output)
