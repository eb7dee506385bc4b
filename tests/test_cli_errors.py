"""Bad input to the analysis commands: a one-line error naming the option or file, the right exit
code (2 = usage: bad option value or missing path; 1 = bad file content), never a traceback.

Each row is (command line, expected exit code, fragment of the "Error:" line). Paths in braces
are filled from the ``paths`` fixture: the committed simulated captures and broken copies of one
(a truncated Parquet segment, an empty directory, a garbage manifest, segments removed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdmascope.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIM = FIXTURES / "sim-p2-200"  # 10 s, twin devices, 4 RDMA + 4 netdev byte counters, requests
TCP = FIXTURES / "sim-p1-tcp-fallback"


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad-captures")
    trunc = root / "trunc"
    shutil.copytree(SIM, trunc)
    seg = sorted((trunc / "segments").glob("*.parquet"))[0]
    seg.write_bytes(seg.read_bytes()[:100])  # a copy cut short, as a full disk or crash leaves
    empty = root / "empty"
    empty.mkdir()
    garbage = root / "garbage"
    garbage.mkdir()
    (garbage / "manifest.json").write_text("garbage\n")
    noseg = root / "noseg"
    shutil.copytree(SIM, noseg)
    for f in (noseg / "segments").iterdir():
        f.unlink()
    badlog = root / "bad.jsonl"
    badlog.write_text("not a request log\n")
    out = root / "out"
    out.mkdir()
    # numbers the messages must carry, read straight from the fixture's manifest and log
    m = json.loads((SIM / "manifest.json").read_text())
    span_ns = m["stop"]["monotonic_ns"] - m["start"]["monotonic_ns"]
    req = json.loads((SIM / "requests.jsonl").read_text().splitlines()[0])
    return {"sim": str(SIM), "tcp": str(TCP), "trunc": str(trunc), "empty": str(empty),
            "garbage": str(garbage), "noseg": str(noseg), "missing": str(root / "nope"),
            "badlog": str(badlog), "out": str(out),
            "end_s": f"{span_ns / 1e9:.3f}", "n_1us": f"{span_ns // 1000 + 1:,}",
            "req": req["request_id"], "prefill_s": f"{req['t_first_token'] - req['t_send']:.3f}"}


CASES = [
    # 1. broken captures: one line naming the file, exit 4 (report/plot printed tracebacks)
    ("report {trunc} -o {out}/r1", 4, "seg-000000.parquet: is 100 bytes but the manifest recorded"),
    ("report {empty} -o {out}/r2", 4, "has no manifest.json; not an rdmascope capture"),
    ("report {garbage} -o {out}/r3", 4, "manifest.json: is not valid JSON"),
    ("report {sim} --requests {badlog} -o {out}/r4", 4, "bad.jsonl: unknown format"),
    ("plot devices {trunc} -o {out}/p.png", 4, "seg-000000.parquet: is 100 bytes but the manifest recorded"),
    ("plot devices {empty} -o {out}/p.png", 4, "has no manifest.json"),
    ("plot devices {garbage} -o {out}/p.png", 4, "is not valid JSON"),
    ("rates {trunc}", 4, "seg-000000.parquet: is 100 bytes but the manifest recorded"),
    ("rates {garbage}", 4, "is not valid JSON"),
    ("peaks {trunc}", 4, "seg-000000.parquet: is 100 bytes but the manifest recorded"),
    ("peaks {empty}", 4, "has no manifest.json"),
    ("bursts {garbage}", 4, "is not valid JSON"),
    # segments removed: "has no readings", not "cannot convert float NaN to integer"
    ("peaks {noseg}", 4, "seg-000000.parquet: is listed in the manifest but missing on disk "
                         "(1 of its 1 listed segment(s) are)"),
    ("bursts {noseg}", 4, "seg-000000.parquet: is listed in the manifest but missing on disk"),
    ("rates {noseg}", 4, "seg-000000.parquet: is listed in the manifest but missing on disk"),
    # 2. bad option values: exit 2 naming the option
    ("rates {sim} --window 1ns", 2, "'--window': window 1ns is narrower than the minimum of 1us"),
    ("rates {sim} --window 999ns", 2, "narrower than the minimum of 1us"),
    # a list with an empty item is a typo, never a silently shorter list
    ("peaks {sim} --windows 1ms,,5ms", 2, "'--windows': '1ms,,5ms': an empty width between commas"),
    ("peaks {sim} --percentiles 50,,99", 2, "'--percentiles': '50,,99': an empty percentile"),
    ("attribute {sim} --percentiles 50,99,", 2, "'--percentiles': '50,99,': an empty percentile"),
    # 10 s / 1 us = 10 M windows x 8 series (RDMA + netdev) > 40 M values
    ("rates {sim} --window 1us --source all", 2,
     "s) make {n_1us} windows for 8 series, more than the limit of 5,000,000 held in memory "
     "(at this width, 5s of windows); use a wider window, a shorter --from/--to range, or "
     "--csv/--parquet (written as they are computed)"),
    ("peaks {sim} --windows 1ms,1us --source all", 2, "'--windows': 1us windows over"),
    ("bursts {sim} --window 1ns", 2, "'--window': window 1ns is narrower"),
    ("rates {sim} --from inf", 2, "'--from': 'inf' is not a finite number"),
    ("rates {sim} --from nan", 2, "'--from': 'nan' is not a finite number"),
    ("rates {sim} --to -inf", 2, "'--to': '-inf' is not a finite number"),
    ("rates {sim} --origin nan", 2, "'--origin': 'nan' is not a finite number"),
    ("rates {sim} --from 10 --to 5", 2, "'--to': --to (5 s) must be after --from (10 s)"),
    ("rates {sim} --from 100", 2,
     "'--from': 100 s is at or after the capture's end ({end_s} s after its start)"),
    ("rates {sim} --gap-factor nan", 2, "'--gap-factor': 'nan' is not a finite number"),
    ("rates {sim} --gap-factor 0.5", 2, "'--gap-factor': '0.5': must be >= 1"),
    ("rates {sim} --limit -1", 2, "'--limit'"),
    ("peaks {sim} --from 10 --to 5", 2, "must be after --from"),
    ("peaks {sim} --from 100", 2, "'--from': 100 s is at or after the capture's end"),
    ("peaks {sim} --to -1", 2, "Invalid value for '--to': '-1': must be >= 0"),
    ("bursts {sim} --from nan", 2, "'--from': 'nan' is not a finite number"),
    ("peaks {sim} --windows ''", 2, "'--windows': '': give at least one window width"),
    ("peaks {sim} --windows ' , '", 2, "give at least one window width"),
    ("peaks {sim} --windows 1ms,soon", 2, "'--windows': 'soon' is not a duration"),
    ("peaks {sim} --percentiles 150", 2, "'--percentiles': 150 is not a percentile between 0"),
    ("peaks {sim} --percentiles nan", 2, "'--percentiles': nan is not a percentile"),
    ("peaks {sim} --percentiles x", 2, "'--percentiles': 'x': expected numbers"),
    ("bursts {sim} --capacity 0", 2, "'--capacity': '0': must be > 0"),
    ("bursts {sim} --capacity inf", 2, "'--capacity': 'inf' is not a finite number"),
    ("bursts {sim} --leave 0.5", 2, "'--leave': 0.5 must not exceed --enter (0.25)"),
    ("plot tp --prompt-tokens 1000 --ttft 6 --dpi 100000 -o {out}/tp.png", 2,
     "'--dpi': 100000 is not in the range 50<=x<=1200"),
    ("plot tp --prompt-tokens 1000 --ttft 6 --dpi 10 -o {out}/tp.png", 2, "'--dpi'"),
    ("plot tp --prompt-tokens 0 --ttft 6 -o {out}/tp.png", 2, "'--prompt-tokens': 0 is not in"),
    ("plot tp --prompt-tokens 1000 --ttft nan -o {out}/tp.png", 2, "'--ttft': 'nan' is not a"),
    ("plot tp --prompt-tokens 1000 --ttft 0 -o {out}/tp.png", 2, "'--ttft': '0': must be > 0"),
    ("plot tp --prompt-tokens 1000 --ttft 6 --tp 1 -o {out}/tp.png", 2, "'--tp': the projection needs a measured TP size >= 2"),
    # the fixture's one request: prefill = t_first_token - t_send of its log line
    ("plot request {sim} --zoom-start 100s -o {out}/req.png", 2,
     "'--zoom-start': 100 s is outside the prefill of request {req} (0 to {prefill_s} s after "
     "its send)"),
    ("plot windows {sim} --windows '' -o {out}/w.png", 2, "'--windows': '': give at least one"),
    ("plot devices {sim} --window 1ns -o {out}/d.png", 2, "'--window': window 1ns is narrower"),
    ("plot request {sim} --offset inf -o {out}/req.png", 2, "'--offset': 'inf' is not a finite"),
    ("report {sim} --offset nan -o {out}/r5", 2, "'--offset': 'nan' is not a finite number"),
    # every float or duration option that becomes ns: non-finite and absurd values refused by
    # click (1e300 overflowed the int ns conversion with a traceback; nan said "cannot convert
    # float NaN to integer" without naming the option)
    ("rates {sim} --origin 1e300", 2, "'--origin': '1e300': beyond the limit of 1e+09 s"),
    ("rates {sim} --from 1e300", 2, "'--from': '1e300': beyond the limit of 1e+09 s"),
    ("rates {sim} --to -2e9", 2, "'--to': '-2e9': must be >= 0"),
    ("rates {sim} --window 1e300s", 2, "'--window': '1e300s' is longer than the limit of 1e+09"),
    ("peaks {sim} --windows 1ms,1e300s", 2, "'--windows': '1e300s' is longer than the limit"),
    ("peaks {sim} --from 1e300", 2, "'--from': '1e300': beyond the limit"),
    ("bursts {sim} --window 1e300s", 2, "'--window': '1e300s' is longer than the limit"),
    ("attribute {sim} --offset inf", 2, "'--offset': 'inf' is not a finite number"),
    ("attribute {sim} --offset nan", 2, "'--offset': 'nan' is not a finite number"),
    ("attribute {sim} --offset 1e300", 2, "'--offset': '1e300': beyond the limit of 4e+09 s"),
    ("attribute {sim} --arrival-window nan", 2, "'--arrival-window': 'nan' is not a finite"),
    ("attribute {sim} --arrival-window 1e300", 2, "'--arrival-window': '1e300': beyond"),
    ("attribute {sim} --arrival-window -1", 2, "'--arrival-window': '-1': must be >= 0"),
    ("attribute {sim} --capacity inf", 2, "'--capacity': 'inf' is not a finite number"),
    ("compare {sim} {tcp} --offset-a 1e300", 2, "'--offset-a': '1e300': beyond the limit"),
    ("compare {sim} {tcp} --offset-b nan", 2, "'--offset-b': 'nan' is not a finite number"),
    ("compare {sim} {tcp} --arrival-window inf", 2, "'--arrival-window': 'inf' is not a"),
    ("plot request {sim} --offset 1e300 -o {out}/req.png", 2, "'--offset': '1e300': beyond"),
    ("plot request {sim} --zoom-start 1e300s -o {out}/req.png", 2,
     "'--zoom-start': '1e300s' is longer than the limit of 1e+09 s"),
    ("plot request {sim} --zoom 1e300s -o {out}/req.png", 2, "'--zoom': '1e300s' is longer"),
    ("report {sim} --offset -1e300 -o {out}/r6", 2, "'--offset': '-1e300': beyond the limit"),
    ("simulate serve --start-delay nan", 2, "'--start-delay': 'nan' is not a finite number"),
    ("simulate serve --start-delay 1e300", 2, "'--start-delay': '1e300': beyond the limit"),
    ("simulate serve --speed inf", 2, "'--speed': 'inf' is not a finite number"),
    # an output whose parent directory is missing: refused, not created
    ("plot tp --prompt-tokens 1000 --ttft 6 -o {missing}/dir/x.png", 2,
     "'-o' / '--output': {missing}/dir/x.png: the directory {missing}/dir does not exist"),
    ("plot devices {sim} -o {missing}/x.png", 2, "the directory {missing} does not exist"),
    ("plot tp --prompt-tokens 1000 --ttft 6 -o {badlog}/x.png", 2, "bad.jsonl is not a direct"),
    ("report {sim} -o {missing}/report", 2,
     "'-o' / '--output': {missing}/report: the directory {missing} does not exist"),
    # the fixture is sampled every 1 ms: a reading's instant is not uncertain by 10 s (the
    # bounds went to 0..113,077 Gb/s)
    ("peaks {sim} --uncertainty --instant-uncertainty 10s", 2,
     "'--instant-uncertainty': 10s is longer than the capture's sampling interval (1ms)"),
    ("peaks {sim} --instant-uncertainty 1.5ms", 2, "1.5ms is longer than the capture's"),
    # the estimate is for a slower new link: a faster one printed negative bounds
    ("estimate --link-a 100 --link-b 200", 2,
     "'--link-b': 200 Gb/s is not slower than --link-a (100 Gb/s)"),
    ("estimate --link-old 100 --link-new 100", 2, "'--link-b': 100 Gb/s is not slower"),
    ("estimate --link-a 100 --link-b 50 --b-emulated 109", 2,
     "'--b-emulated': 109 Gb/s is not slower than --link-a (100 Gb/s)"),
    # 6. estimate: option names, not the library's parameter names (link_new_gbps, ...)
    ("estimate --link-b 0", 2, "'--link-b' / '--link-new': '0': must be > 0"),
    ("estimate --link-a -200", 2, "'--link-a' / '--link-old': '-200': must be > 0"),
    ("estimate --b-emulated nan", 2, "'--b-emulated' / '--emulated': 'nan' is not a finite number"),
    ("estimate --tp 0", 2, "'--tp': 0 is not in the range x>=1"),
    ("estimate --chunk 0", 2, "'--chunk': 0 is not in the range x>=1"),
    ("estimate --prompt-tokens 0", 2, "'--prompt-tokens': 0: must be >= 1"),
    ("estimate --prompt-tokens ''", 2, "'--prompt-tokens': '': give at least one prompt length"),
    ("estimate --prompt-tokens many", 2, "'--prompt-tokens': 'many': expected integers"),
    ("estimate --ttft -1", 2, "'--ttft': -1.0 is not a positive number of seconds"),
    ("estimate --ttft inf", 2, "'--ttft': inf is not a positive number of seconds"),
    ("estimate --tp-sizes 0,2", 2, "'--tp-sizes': 0: must be >= 1"),
    ("estimate --decode-tokens 0", 2, "'--decode-tokens': 0 is not in the range x>=1"),
    ("estimate --decode-requests 0", 2, "'--decode-requests'"),
    ("estimate --vocab 0", 2, "'--vocab': 0 is not in the range x>=1"),
    ("estimate --layers 0 --hidden 8 --bytes 2", 2, "'--layers': 0 is not in the range"),
    # 3. a missing capture/log path is a usage error (exit 2) in every command of this area
    ("rates {missing}", 2, "'CAPTURE...': Directory '{missing}' does not exist"),
    ("peaks {missing}", 2, "'CAPTURE...': Directory '{missing}' does not exist"),
    ("bursts {missing}", 2, "'CAPTURE...': Directory '{missing}' does not exist"),
    ("plot devices {missing} -o {out}/p.png", 2, "CAPTURES]...': Directory '{missing}' does not"),
    ("report {missing}", 2, "'CAPTURES...': Directory '{missing}' does not exist"),
    ("plot request {sim} --requests {missing} -o {out}/p.png", 2,
     "'--requests': File '{missing}' does not exist"),
    ("report {sim} --requests {missing}", 2, "'--requests': File '{missing}' does not exist"),
    ("estimate --config {missing}", 2, "'--config': Path '{missing}' does not exist"),
]


def _argv(cmd: str, paths: dict[str, str]) -> list[str]:
    import shlex

    return [a.format(**paths) for a in shlex.split(cmd)]


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Error:")]


@pytest.mark.parametrize("cmd,code,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_error(paths, cmd, code, fragment):
    r = CliRunner().invoke(main, _argv(cmd, paths))
    out = r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), \
        f"uncaught {type(r.exception).__name__}: {r.exception}\n{out}"
    assert "Traceback" not in out, out
    assert r.exit_code == code, out
    errors = _error_lines(out)
    assert len(errors) == 1, out
    assert fragment.format(**paths) in errors[0], out


@pytest.mark.parametrize("cmd", ["report {trunc} -o {out}/sub", "plot devices {empty} -o "
                                 "{out}/sp.png", "rates {sim} --from inf",
                                 "rates {sim} --origin 1e300", "attribute {sim} --offset inf"])
def test_no_traceback_in_a_real_process(paths, cmd):
    """The installed entry point (a real process, stderr apart): exit code and one line."""
    p = subprocess.run([sys.executable, "-m", "rdmascope", *_argv(cmd, paths)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (2, 4), p.stderr
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert len(_error_lines(p.stderr)) == 1, p.stderr


def test_window_count_limit_scales_with_series():
    """The limit is on windows x series (measured ~60 B per value in rates)."""
    import click

    from rdmascope.cli.output import MAX_WINDOW_VALUES, check_window_count

    # one hour at 100 us = 36,000,001 windows: fine for one series, refused for four
    check_window_count(100_000, 3600 * 10**9, n_series=1)
    with pytest.raises(click.BadParameter, match="36,000,001 windows for 4 series, more than "
                                                 "the limit of 10,000,000"):
        check_window_count(100_000, 3600 * 10**9, n_series=4)
    # exactly at the limit is allowed, one window more is not
    check_window_count(1, MAX_WINDOW_VALUES - 1)
    with pytest.raises(click.BadParameter):
        check_window_count(1, MAX_WINDOW_VALUES)


def test_twin_grouping_same_in_rates_and_peaks_on_tcp_fallback(paths):
    """Netdev twins get their own "(netdev)" link in both commands; no RDMA link label."""
    import io
    import json

    import pandas as pd

    nd_link = "link:enP2p1s0f1np1+enp1s0f1np1 (netdev)"
    r = CliRunner().invoke(main, ["rates", paths["tcp"], "--source", "netdev", "--group",
                                  "twins", "--window", "1s", "--csv", "--bytes"])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(io.StringIO(r.output[r.output.index("window_start_ns"):]))
    assert not [c for c in df.columns if c.startswith("link:roce")]
    for d in ("tx", "rx"):
        # the covered parts' bytes (a partly covered window's whole bytes are unknown)
        members = (df[f"netdev:enP2p1s0f1np1/{d}_covered_bytes"]
                   + df[f"netdev:enp1s0f1np1/{d}_covered_bytes"])
        assert (df[f"{nd_link}/{d}_covered_bytes"] == members).all()
        assert df[f"{nd_link}/{d}_covered_bytes"].sum() > 0  # the kernel traffic is there
    p = CliRunner().invoke(main, ["peaks", paths["tcp"], "--source", "netdev", "--group",
                                  "twins", "--windows", "1s", "--json"])
    assert p.exit_code == 0, p.output
    rows = json.loads(p.output[p.output.index("{"):])["peaks"]
    links = sorted({x["series"] for x in rows if x["series"].startswith("link:")})
    assert links == [f"{nd_link}/rx", f"{nd_link}/tx"]
    # same link, same 1 s peak in both commands
    for d in ("tx", "rx"):
        peak = next(x["peak_gbps"] for x in rows
                    if x["series"] == f"{nd_link}/{d}" and x["window"] == "1 s")
        assert peak == pytest.approx(df[f"{nd_link}/{d}_gbps"].max())
    # with both sources the RDMA link (idle: TCP fallback) and the netdev link stay apart
    p = CliRunner().invoke(main, ["peaks", paths["tcp"], "--source", "all", "--group",
                                  "twins", "--windows", "1s", "--json"])
    rows = json.loads(p.output[p.output.index("{"):])["peaks"]
    rdma = [x for x in rows if x["series"].startswith("link:roce") and x["window"] == "1 s"]
    assert len(rdma) == 2 and all(x["peak_gbps"] == 0.0 for x in rdma)


def test_rates_on_a_killed_capture_judges_from_against_its_readings(tmp_path):
    """No stop record (kill -9): the end is unknown, so --from is never refused against an
    estimate; a range past the readings is a usage error naming --from with the readings'
    span in seconds (49 readings 1 ms apart: 0.000 to 0.049 s), one inside them works."""
    from capture_builders import MS, STATUS_OK, T0, ib, write_capture

    rd = {0: [(T0 + k * MS, 0, 250 * k, STATUS_OK) for k in range(50)]}  # 1,000 B per ms
    cap = str(write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx")], rd, close=False))
    r = CliRunner().invoke(main, ["rates", cap, "--from", "1"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert _error_lines(r.output) == [
        "Error: Invalid value for '--from': 1 s is at or after the capture's last reading "
        "(0.049 s after its start; the readings span 0.000 to 0.049 s)"]
    r = CliRunner().invoke(main, ["rates", cap, "--from", "0.040", "--window", "5ms", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rates"]  # the note on stderr comes after it
    # [40, 45) ms: 5,000 B in 5 ms = 0.008 Gb/s
    assert rows[0]["t_s"] == pytest.approx(0.040)
    assert rows[0]["rocep1s0f1/tx_gbps"] == pytest.approx(5000 * 8 / 5e-3 / 1e9)


def test_missing_output_parent_is_not_created(paths, tmp_path):
    """plot -o /nonexistent/dir/x.png made /nonexistent/dir and exited 0; report -o DIR may
    create DIR itself (its parent exists) but not a missing parent."""
    missing = tmp_path / "nope"
    r = CliRunner().invoke(main, ["plot", "tp", "--prompt-tokens", "1000", "--ttft", "6",
                                  "-o", str(missing / "dir" / "x.png")])
    assert r.exit_code == 2 and not missing.exists(), r.output
    r = CliRunner().invoke(main, ["report", paths["sim"], "-o", str(missing / "r")])
    assert r.exit_code == 2 and not missing.exists(), r.output
    # an existing parent: the figure is written
    r = CliRunner().invoke(main, ["plot", "tp", "--prompt-tokens", "1000", "--ttft", "6",
                                  "-o", str(tmp_path / "x.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "x.png").stat().st_size > 0


def test_repeated_windows_give_one_row_each(paths):
    """peaks --windows 1ms,1ms printed the 1 ms rows twice; 1000us is the same width too."""
    from rdmascope.cli.output import parse_windows

    assert parse_windows("1ms,1ms,1000us,5ms,1ms") == [1_000_000, 5_000_000]
    runs = {}
    for w in ("1ms,1ms,1000us", "1ms"):
        r = CliRunner().invoke(main, ["peaks", paths["sim"], "--windows", w, "--json"])
        assert r.exit_code == 0, r.output
        runs[w] = json.loads(r.output[r.output.index("{"):])["peaks"]
    rows = runs["1ms,1ms,1000us"]
    keys = [(x["series"], x["window"]) for x in rows]
    assert len(keys) == len(set(keys))
    assert rows == runs["1ms"]


def test_estimate_accepts_a_slower_new_link_and_emulated_between():
    r = CliRunner().invoke(main, ["estimate", "--link-old", "100", "--link-new", "50",
                                  "--emulated", "55", "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)["prompts"][0]
    assert row["increase_bound_s"] > 0 and row["increase_bound_emulated_s"] > 0


@pytest.mark.parametrize("args, option", [
    (["record", "-o", "{tmp}/r", "--interval", "10us", "--duration", "1s"], "'--interval'"),
    (["inspect", "/nonexistent/capture"], "CAPTURE"),
    (["plot", "windows", "{sim}", "-o", "{tmp}/x.jpg"], "'-o' / '--output'"),
    (["bursts", "{sim}", "--enter", "50"], "'--enter'"),
    (["bursts", "{sim}", "--leave", "1.5"], "'--leave'"),
    (["peaks", "{sim}", "--from", "1.5parsecs"], "'--from'"),
    (["attribute"], "CAPTURE"),
])
def test_usage_errors_exit_2_naming_the_option(args, option, tmp_path):
    from pathlib import Path

    from click.testing import CliRunner

    from rdmascope.cli import main

    sim = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"
    r = CliRunner().invoke(main, [a.format(tmp=tmp_path, sim=sim) for a in args])
    assert r.exit_code == 2, r.output
    assert option in r.output and "Traceback" not in r.output


def test_time_options_take_units_and_durations_compose(tmp_path):
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from rdmascope.cli import main
    from rdmascope.cli.common import parse_duration_ns, parse_seconds

    assert parse_duration_ns("1h30m") == 5400 * 10**9
    assert parse_duration_ns("2m30s") == 150 * 10**9
    assert parse_seconds("1.5") == parse_seconds("1.5s") == parse_seconds("1500ms") == 1.5
    assert parse_seconds("-2ms") == -0.002
    sim = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"

    def meta(*a):
        r = CliRunner().invoke(main, ["peaks", str(sim), "--windows", "1ms", "--json", *a])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["meta"]

    bare, unit = meta("--from", "1.5", "--to", "2"), meta("--from", "1500ms", "--to", "2s")
    assert bare["start_ns"] == unit["start_ns"] and bare["end_ns"] == unit["end_ns"]
    assert unit["start_ns"] - unit["t_start_ns"] == 1_500_000_000


def test_record_cpu_not_available_is_a_usage_error_before_discovery(tmp_path):
    """--cpu naming a CPU this process cannot run on: exit 2, one Error: line naming --cpu and
    the available CPUs, and no discovery warnings first (the check precedes discovery)."""
    import os
    from pathlib import Path

    from click.testing import CliRunner

    from rdmascope.cli import main

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no os.sched_getaffinity on this platform")
    allowed = sorted(os.sched_getaffinity(0))
    bad = max(allowed) + 1
    root = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs-procfs" / "sys"
    r = CliRunner().invoke(main, ["record", "-o", str(tmp_path / "x"), "--sysfs-root", str(root),
                                  "--duration", "1s", "--cpu", str(bad)])
    assert r.exit_code == 2, r.output
    errors = _error_lines(r.output)
    assert len(errors) == 1, r.output
    assert "'--cpu'" in errors[0] and str(bad) in errors[0], r.output
    assert ", ".join(map(str, allowed)) in errors[0], r.output
    assert "Warning" not in r.output and not (tmp_path / "x").exists(), r.output
