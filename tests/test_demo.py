"""`rdmascope demo`: output directory rules and the analysis step (on simulated captures).

The full demo (two live scenarios with the real recorder, ~30 s) is what `.ci/run` runs from the
README; `tests/test_e2e_emulated.py` covers its play-and-record step with a short scenario.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from rdmascope.cli import main
from rdmascope.emulator.demo import (
    DemoError,
    DemoRun,
    _check_outdir,
    fresh_outdir,
    run_analysis,
)
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate
from rdmascope.emulator.simcapture import simulate_capture


def test_refuses_a_non_empty_directory_unless_force(tmp_path):
    out = tmp_path / "demo"
    (out / "200").mkdir(parents=True)
    (out / "200" / "manifest.json").write_text("{}")
    (out / "summary.txt").write_text("old")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DemoError, match="not empty; use --force"):
        _check_outdir(out, force=False)
    res = CliRunner().invoke(main, ["demo", "-o", str(out)])
    assert res.exit_code == 1 and "use --force" in res.output
    _check_outdir(out, force=True)  # replaces only the demo's own outputs
    assert not (out / "200").exists() and not (out / "summary.txt").exists()
    assert (out / "notes.txt").read_text() == "mine"
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DemoError, match="not a directory"):
        _check_outdir(f, force=True)


def test_default_output_is_a_fresh_directory_per_run(tmp_path):
    a = fresh_outdir(tmp_path)
    a.mkdir()
    b = fresh_outdir(tmp_path)
    assert a != b and not b.exists() and a.parent == b.parent == tmp_path
    assert re.fullmatch(r"\d{8}-\d{6}(-\d+)?", b.name)


def test_run_analysis_writes_summary_and_report(tmp_path):
    runs, ttft = [], {}
    for link in ("200", "emulated100"):
        tr = simulate(make_scenario("demo", output_tokens=8),
                      TrafficConfig(link=link_config(link)), seed=1)
        cap = simulate_capture(tmp_path / link, tr)
        runs.append(DemoRun(name=link, capture=cap, request_log=cap / "requests.jsonl",
                            truth=cap / "truth.json"))
        truth = json.loads((cap / "truth.json").read_text())
        ttft[link] = {r["request_id"]: r["ttft_s"] for r in truth["requests"]}
    printed = []
    html = run_analysis(tmp_path, runs, log=printed.append)
    assert html == tmp_path / "report" / "report.html"
    assert html.stat().st_size > 10_000 and "data:image/png;base64," in html.read_text()
    summary = (tmp_path / "summary.txt").read_text()
    for link in ("200", "emulated100"):
        assert f"== {link}: {tmp_path / link}" in summary
    assert "sweeps:" in summary  # from rdmascope inspect
    # the printed verdicts: both twins at 200 Gb/s, one interface on the emulated link
    text = "\n".join(printed)
    assert "200 Gb/s: both interfaces carried traffic" in text
    assert "emulated 100 Gb/s: one interface carried all RDMA traffic (rocep1s0f1)" in text
    # the headline TTFT change of P2 equals the emulator's own TTFTs (truth.json), ~ the estimate
    b, e = ttft["200"]["P2-r1-0"], ttft["emulated100"]["P2-r1-0"]
    assert 0.85 < e - b < 1.0
    assert f"test P2: time to last first token: {e - b:+.2f} s" in text
    figures = sorted(p.name for p in (tmp_path / "report" / "figures").glob("*.png"))
    assert len(figures) >= 8, figures
