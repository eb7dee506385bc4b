"""A --from/--to range that holds none of the readings is a usage error naming the option, in
seconds after the capture start, the same in every command that takes the range (it was
"no bursts" with exit 0 in `bursts`, a raw monotonic-ns "empty time range" with exit 4 in
`peaks` and `verify-emulation`, when --from fell between the last reading and the capture's
stop record)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from rdmascope.analysis.load import load_capture

from rdmascope.cli import main
from rdmascope.exitcodes import EXIT_USAGE

SIM = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"

COMMANDS = [["peaks"], ["bursts"], ["bursts", "--json"], ["verify-emulation"],
            ["rates", "--window", "1ms"], ["rates", "--window", "1ms", "--csv"],
            ["export", "perfetto"]]


def _argv(cmd, tmp_path):
    if cmd[0] == "export":
        return [*cmd, str(SIM), "-o", str(tmp_path / "trace.json")]
    return [cmd[0], str(SIM), *cmd[1:]]


@pytest.fixture(scope="module")
def span_s():
    cap = load_capture(SIM)
    r = cap.readings
    return ((int(r["t_before_ns"].min()) - cap.t_start_ns) / 1e9,
            (int(r["t_before_ns"].max()) - cap.t_start_ns) / 1e9,
            (cap.t_end_ns - cap.t_start_ns) / 1e9)


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_from_after_the_last_reading_names_the_option(cmd, span_s, tmp_path):
    first, last, stop = span_s
    # after the last reading (and its interval), before or at the stop record
    t = last + min(0.0005, (stop - last) / 2) if stop > last else last + 0.001
    r = CliRunner().invoke(main, [*_argv(cmd, tmp_path), "--from", f"{t:.6f}"])
    assert r.exit_code == EXIT_USAGE, r.output
    assert "'--from'" in r.output, r.output
    assert " ns" not in r.output and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_a_range_inside_the_readings_is_taken(cmd, span_s, tmp_path):
    first, last, _ = span_s
    mid = (first + last) / 2
    r = CliRunner().invoke(main, [*_argv(cmd, tmp_path), "--from", f"{mid:.3f}",
                                  "--to", f"{last:.3f}"])
    assert r.exit_code in (0, 1, 3), r.output  # verify-emulation's verdicts exit 1/3
    assert "Invalid value" not in r.output
