"""`rdmascope demo`: output directory rules and the analysis step (on simulated captures).

The full demo (two live scenarios with the real recorder, ~30 s) is what `.ci/run` runs from the
README; `tests/test_e2e_emulated.py` covers its play-and-record step with a short scenario.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from conftest import shadowing_folder

from rdmascope.cli import main
from rdmascope.emulator.demo import (
    DemoError,
    DemoRun,
    _check_outdir,
    card_line,
    fresh_outdir,
    run_analysis,
)
from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate
from rdmascope.emulator.simcapture import simulate_capture


def _earlier_demo(out, tmp_path):
    """Lay out what an earlier demo leaves: two captures with truth, report/, summary.txt."""
    tr = simulate(make_scenario("single4k", output_tokens=2), TrafficConfig(), seed=0)
    for link in ("200", "emulated100"):
        simulate_capture(out / link, tr)
    (out / "report" / "figures").mkdir(parents=True)
    (out / "report" / "report.html").write_text("<html></html>")
    (out / "report" / "figures" / "rates.png").write_bytes(b"png")
    (out / "summary.txt").write_text("== 200: ...\n")


def _tree(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_refuses_a_non_empty_directory_unless_force(tmp_path):
    out = tmp_path / "demo"
    _earlier_demo(out, tmp_path)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DemoError, match="not empty; use --force"):
        _check_outdir(out, force=False)
    res = CliRunner().invoke(main, ["demo", "-o", str(out)])
    assert res.exit_code == 4 and "use --force" in res.output
    _check_outdir(out, force=True)  # replaces only the demo's own outputs
    assert _tree(out) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DemoError, match="not a directory"):
        _check_outdir(f, force=True)


@pytest.mark.parametrize("intruder, named", [
    # the new user's case: a user's file inside a directory named like a demo run
    ("200/notes.txt", "200/notes.txt"),
    ("emulated100/segments/my.parquet", "emulated100/segments/my.parquet"),
    ("200/.notes", "200/.notes"),
    ("200/extra/", "200/extra"),
    ("report/", "report"),  # a report/ directory without report.html
    ("summary.txt/", "summary.txt"),  # a directory where the summary file goes
])
def test_force_refuses_anything_but_the_demos_outputs(tmp_path, intruder, named):
    out = tmp_path / "demo"
    _earlier_demo(out, tmp_path)
    path = out / intruder.rstrip("/")
    if intruder.endswith("/"):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        path.mkdir()
        (path / "keep.txt").write_text("mine")
    else:
        path.write_text("mine")
    before = _tree(out)
    with pytest.raises(DemoError) as exc:
        _check_outdir(out, force=True)
    assert f"{out / named}:" in str(exc.value) and "nothing was removed" in str(exc.value)
    assert _tree(out) == before  # checked before anything is removed
    res = CliRunner().invoke(main, ["demo", "-o", str(out), "--force"])
    assert res.exit_code == 4 and str(out / named) in res.output
    assert _tree(out) == before


@pytest.mark.parametrize("manifest", [None, "{}", '{"format": "something-else"}', "not json"])
def test_force_refuses_a_run_directory_that_is_not_a_capture(tmp_path, manifest):
    out = tmp_path / "demo"
    (out / "200").mkdir(parents=True)
    (out / "200" / "truth.json").write_text("{}")
    if manifest is not None:
        (out / "200" / "manifest.json").write_text(manifest)
    with pytest.raises(DemoError, match="is not an rdmascope capture"):
        _check_outdir(out, force=True)
    assert (out / "200" / "truth.json").read_text() == "{}"


def test_force_refuses_symlinks_in_the_demos_place(tmp_path):
    out = tmp_path / "demo"
    _earlier_demo(out, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    _earlier_demo(elsewhere, tmp_path)
    shutil.rmtree(out / "200")
    (out / "200").symlink_to(elsewhere / "200")
    with pytest.raises(DemoError, match="is not a directory of an earlier demo run"):
        _check_outdir(out, force=True)
    assert (elsewhere / "200" / "manifest.json").is_file()


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
    # the headline TTFT change of P2 equals the emulator's own TTFTs (truth.json): 5.272 % of its
    # all-reduces hidden (ComputeModel.overlap_fraction), so 94.7 % of the estimate's bound
    # (method.md), like the study's +0.88 s of 0.92 s
    b, e = ttft["200"]["P2-r1-0"], ttft["emulated100"]["P2-r1-0"]
    bound = 8192 * 3_376_128 * 8 * (1 / 109e9 - 1 / 200e9)
    assert e - b == pytest.approx((1 - 0.05272) * bound, rel=1e-3)
    assert "the emulator hides 5.3 % of each prefill all-reduce" in text
    # one headline line per test (P1 too), the change as compare computes it, to the ms, with
    # its share of the estimate's bound (prompt tokens x 3,376,128 B x 8 x (1/109 - 1/200) ns)
    for test, tokens in (("P1", 1024), ("P2", 8192)):
        b, e = ttft["200"][f"{test}-r1-0"], ttft["emulated100"][f"{test}-r1-0"]
        bound = tokens * 3_376_128 * 8 * (1 / 109e9 - 1 / 200e9)
        line = next(x for x in printed if x.startswith(f"  test {test}: time to last first "))
        assert line.startswith(f"  test {test}: time to last first token: {e - b:+.3f} s "
                               f"({100 * (e - b) / b:+.1f} %)  (200 Gb/s → emulated 100 Gb/s; "
                               f"{100 * (e - b) / bound:.0f} % of the estimate's "), line
        est = float(re.search(r"estimate's (\d+\.\d{3}) s bound\)$", line).group(1))
        assert est == pytest.approx(bound, abs=6e-4), line
    assert sum(x.startswith("  test P") for x in printed) == 2
    figures = sorted(p.name for p in (tmp_path / "report" / "figures").glob("*.png"))
    assert len(figures) >= 8, figures


def test_card_line_says_the_1ms_note_in_place_without_double_parentheses():
    """The report card's reference to its 1 ms note (in parentheses, pointing at a note only the
    HTML has) used to print as '((1 ms values: ..., see the note on 1 ms values); 100 ms: ...)'."""
    from rdmascope.analysis.report import ONE_MS_REF

    line = card_line("200 Gb/s: 1 ms peak", "202 Gb/s", f"{ONE_MS_REF}; 100 ms: 35 Gb/s")
    assert line == ("  200 Gb/s: 1 ms peak: 202 Gb/s  (1 ms values carry ±15–25 % timing "
                    "uncertainty; 100 ms: 35 Gb/s)")
    assert card_line("P1 TTFT", "0.96 s", "") == "  P1 TTFT: 0.96 s"
    assert card_line("a", "b", "c") == "  a: b  (c)"


def test_the_emulated_run_is_recorded_as_emulated_at_the_twins_real_rate(tmp_path):
    from rdmascope.emulator.demo import record_args

    emu = record_args("emulated100", tmp_path / "e", tmp_path / "sys")
    assert emu[emu.index("--emulated") + 1] == "109"
    assert "--emulated" not in record_args("200", tmp_path / "f", tmp_path / "sys")


def test_children_run_the_parents_package_from_any_folder(tmp_path):
    """`demo` started its server and recorder as `python -m rdmascope`, which imported a
    `rdmascope` folder of the working directory (ImportError); rdmascope.child.command() runs
    the parent's interpreter and package wherever it is started."""
    import subprocess
    import sys

    from rdmascope import __version__, child

    here = shadowing_folder(tmp_path)
    bare = subprocess.run([sys.executable, "-m", "rdmascope", "--version"], cwd=here,
                          capture_output=True, text=True, timeout=60)
    assert bare.returncode != 0 and "was imported" in bare.stderr  # the setup shadows -m
    r = subprocess.run([*child.command(), "--version"], cwd=here, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and __version__ in r.stdout, r.stderr


@pytest.mark.slow
def test_demo_records_from_a_folder_holding_rdmascope(live_single4k):
    """The demo's live step (server + real recorder, both children) from such a folder: the
    session's live recording (conftest.live_single4k) is started from one."""
    from rdmascope.capture import read_capture

    for run in live_single4k.values():
        raw = read_capture(run.capture)
        assert raw.manifest["writer"] == "sampler" and raw.clean_end and len(raw.table) > 1000
