"""The analysis CLI: rates / peaks / bursts / verify-emulation outputs and exit codes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from click.testing import CliRunner

from rdmascope.cli import main

TWINS = [{"name": "rocep1s0f1", "pci": "0000:01:00.1",
          "ports": [{"port": 1, "rate_gbps": 200.0}]},
         {"name": "roceP2p1s0f1", "pci": "0002:01:00.1",
          "ports": [{"port": 1, "rate_gbps": 200.0}]}]


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r


def _twin_capture(path, units_a, units_b):
    """Twins, tx only; per-ms counter increments (units of 4 B) for each, readings on the ms."""
    rd = {0: [(T0 + k * MS, 0, int(np.sum(units_a[:k])), STATUS_OK)
              for k in range(len(units_a) + 1)],
          1: [(T0 + k * MS, 0, int(np.sum(units_b[:k])), STATUS_OK)
              for k in range(len(units_b) + 1)]}
    return write_capture(path, [ib("rocep1s0f1", "tx"), ib("roceP2p1s0f1", "tx")], rd,
                         devices=TWINS)


@pytest.fixture
def burst_cap(tmp_path):
    # twin A: 0 except 4 ms at 100 Gb/s (12.5 MB = 3,125,000 units per ms) from 10 ms; B idle
    a = np.zeros(40, np.int64)
    a[10:14] = 3_125_000
    return _twin_capture(tmp_path / "c", a, np.zeros(40, np.int64))


def test_rates_json_csv_parquet(burst_cap, tmp_path):
    r = run("rates", burst_cap, "--window", "5ms", "--json")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output[r.output.index("{"):])
    rows = obj["rates"]
    assert obj["meta"]["window_ns"] == 5 * MS
    # [10, 15) ms holds the 4 ms burst: 50 MB in 5 ms = 80 Gb/s
    by_t = {round(x["t_s"], 6): x["rocep1s0f1/tx_gbps"] for x in rows}
    assert by_t[0.010] == pytest.approx(80.0)
    assert by_t[0.005] == 0.0 and by_t[0.015] == 0.0
    r = run("rates", burst_cap, "--csv", "--from", "0.009", "--to", "0.015", "--bytes")
    assert r.exit_code == 0, r.output
    df = pd.read_csv(__import__("io").StringIO(r.output[r.output.index("window_start_ns"):]))
    assert df["rocep1s0f1/tx_bytes"].tolist() == [0.0, 12.5e6, 12.5e6, 12.5e6, 12.5e6, 0.0]
    assert df["t_s"].iloc[0] == pytest.approx(0.009)
    out = tmp_path / "r.parquet"
    r = run("rates", burst_cap, "--parquet", out, "--group", "twins")
    assert r.exit_code == 0, r.output
    p = pd.read_parquet(out)
    link = "link:rocep1s0f1+roceP2p1s0f1/tx_gbps"
    assert p[link].max() == pytest.approx(100.0)
    assert p[link].sum() * 1e6 / 8 == pytest.approx(50e6)  # conserved: 4 x 12.5 MB
    assert "flags" in run("rates", burst_cap).output


def test_peaks_table(burst_cap):
    r = run("peaks", burst_cap, "--json", "--windows", "1ms,5ms", "--uncertainty")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("{"):])["peaks"]
    a = {x["window"]: x for x in rows if x["series"] == "rocep1s0f1/tx"}
    assert a["1 ms"]["peak_gbps"] == pytest.approx(100.0)
    assert a["5 ms"]["peak_gbps"] == pytest.approx(80.0)
    assert a["whole range"]["peak_gbps"] == pytest.approx(50e6 * 8 / 40e6)  # 10 Gb/s
    human = run("peaks", burst_cap).output
    assert "whole range" in human and "100.00" in human


def test_bursts_with_model(burst_cap):
    r = run("bursts", burst_cap, "--json", "--tokens", "1000", "--hidden", "6250",
            "--tp", "2")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output[r.output.index("{"):])
    assert obj["meta"]["capacity_gbps"] == 200.0  # the ports' reported rate
    b = [x for x in obj["bursts"] if x["series"] == "rocep1s0f1/tx"]
    assert len(b) == 1
    assert b[0]["duration_s"] == pytest.approx(0.004)
    assert b[0]["bytes"] == pytest.approx(50e6)
    # one all-reduce at TP2: 1.0 x 1000 x 6250 x 2 B = 12.5 MB -> the burst is 4 of them
    assert b[0]["allreduces"] == pytest.approx(4.0)
    r = run("bursts", burst_cap, "--tokens", "1000")
    assert r.exit_code != 0 and "go together" in r.output


def test_verify_exit_codes(tmp_path):
    one = _twin_capture(tmp_path / "one", np.full(20, 250_000), np.zeros(20, np.int64))
    two = _twin_capture(tmp_path / "two", np.full(20, 250_000), np.full(20, 250_000))
    r = run("verify-emulation", one)
    assert r.exit_code == 0 and "PASS" in r.output and "100.00 %" in r.output
    r = run("verify-emulation", two)
    assert r.exit_code == 1 and "FAIL" in r.output and "50.00 %" in r.output
    assert run("verify-emulation", two, "--expect-both").exit_code == 0
    r = run("verify-emulation", one, "--json")
    obj = json.loads(r.output)
    assert obj["meta"]["ok"] is True
    assert {d["device"]: d["share"] for d in obj["devices"]} == {"rocep1s0f1": 1.0,
                                                                 "roceP2p1s0f1": 0.0}


def test_loader_error_is_a_clean_message(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for cmd in ("rates", "peaks", "bursts", "verify-emulation"):
        r = run(cmd, bad)
        assert r.exit_code == 4, (cmd, r.output)
        assert "no manifest.json" in r.output and str(bad) in r.output
        assert "Traceback" not in r.output


def test_bad_time_range(burst_cap):
    r = run("peaks", burst_cap, "--from", "0.02", "--to", "0.01")
    assert r.exit_code == 2 and "--to" in r.output


@pytest.mark.parametrize("link,ok", [("emulated100", 0), ("200", 1)])
def test_on_the_emulator(tmp_path, link, ok):
    """The emulator's single 4,096-token prompt: verdict per link setting, bursts = all-reduces.

    vLLM's V1 scheduler caps one prompt's tokens per step at long_prefill_token_threshold (2,048
    in the study's setup), so the prompt is prefilled in two 2,048-token passes: each burst is
    one all-reduce of a 2,048-token block (44.0 MB per node)."""
    out = tmp_path / link
    r = run("simulate", "capture", "-o", out, "--scenario", "single4k", "--link", link)
    if r.exit_code != 0:
        pytest.skip(f"emulator unavailable: {r.output[-300:]}")
    assert run("verify-emulation", out).exit_code == ok
    r = run("bursts", out, "--json", "--tokens", "2048", "--hidden", "6144", "--tp", "8",
            "--group", "twins")
    obj = json.loads(r.output[r.output.index("{"):])
    link_rows = [x for x in obj["bursts"] if x["series"].startswith("link:")
                 and x["series"].endswith("/tx")]
    ratios = np.array([x["allreduces"] for x in link_rows])
    # prefill bursts each carry about one 2,048-token all-reduce (method.md's formula)
    assert len(ratios) > 10
    assert np.median(ratios) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("cmd", ["rates", "peaks"])
def test_no_progress_output_when_stderr_is_not_a_terminal(burst_cap, tmp_path, cmd):
    """With stderr redirected (2>log, a pipe) the progress bar writes nothing: click's bar
    printed its bare label ('peaks', 're-binning') as a stray line into the log."""
    import subprocess
    import sys

    log = tmp_path / "err.log"
    with open(log, "w") as err:
        p = subprocess.run([sys.executable, "-m", "rdmascope", cmd, str(burst_cap)],
                           stdout=subprocess.PIPE, stderr=err, text=True, timeout=120)
    assert p.returncode == 0
    assert "Gb/s" in p.stdout  # the table is there
    assert log.read_text() == ""


def test_progress_is_silent_off_a_terminal_and_keeps_the_interface(capsys):
    """``progress`` off a terminal iterates and accepts update() like click's bar."""
    from rdmascope.cli.output import progress

    with progress([1, 2, 3], label="peaks") as bar:
        assert list(bar) == [1, 2, 3]
    with progress(length=10, label="re-binning") as bar:
        bar.update(5)
    assert capsys.readouterr().err == ""
