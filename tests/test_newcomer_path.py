"""A newcomer's first hour: report -o never reuses a directory silently, the notebook's
dependencies are one extra the README names, a wrong --link-gbps is named as the cause, and a
duration typed with a space ("1 ms") works."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdmascope.cli import main
from rdmascope.exitcodes import EXIT_ERROR

REPO = Path(__file__).resolve().parents[1]
EMU = REPO / "fixtures" / "sim-p2-emulated100"
SIM = REPO / "fixtures" / "sim-p2-200"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def earlier_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "r"
    r = run("report", EMU, "-o", out, "--no-embed")
    assert r.exit_code == 0, r.output
    return out


def test_report_refuses_a_non_empty_directory_unless_force(earlier_report, tmp_path):
    import shutil

    out = tmp_path / "r"
    shutil.copytree(earlier_report, out)
    stale = out / "figures" / "stale-from-an-earlier-report.png"
    stale.write_bytes(b"png")
    before = sorted(p.name for p in out.rglob("*"))
    r = run("report", EMU, "-o", out)
    assert r.exit_code == EXIT_ERROR and "not empty" in r.output and "--force" in r.output
    assert sorted(p.name for p in out.rglob("*")) == before  # nothing touched
    r = run("report", EMU, "-o", out, "--force", "--no-embed")
    assert r.exit_code == 0, r.output
    assert not stale.exists() and (out / "report.html").is_file()
    # a directory holding something else is refused even with --force; nothing removed
    (out / "notes.txt").write_text("mine")
    r = run("report", EMU, "-o", out, "--force")
    assert r.exit_code == EXIT_ERROR and "notes.txt" in r.output and "nothing was removed" in \
        r.output
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.html").is_file()
    # an empty directory is fine without --force
    (tmp_path / "empty").mkdir()
    r = run("report", EMU, "-o", tmp_path / "empty", "--no-embed")
    assert r.exit_code == 0, r.output


def _imports(nb_path: Path) -> set[str]:
    nb = json.loads(nb_path.read_text())
    mods = set()
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"])
        mods.update(re.findall(r"^\s*(?:import|from)\s+(\w+)", src, re.M))
    return mods


def test_the_notebook_extra_installs_what_the_notebook_needs():
    tomllib = pytest.importorskip("tomllib")
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = proj["optional-dependencies"]
    nb = {re.split(r"[<>=\[ ]", d)[0].lower() for d in extras["notebook"]}
    assert "rdmascope" in nb  # the analysis extra comes with it
    assert "rdmascope[analysis]" in extras["notebook"]
    # running it from the command line: nbconvert and a kernel
    assert {"nbconvert", "ipykernel", "nbclient", "nbformat"} <= nb
    # every module the walkthrough imports is in the core, analysis or notebook dependencies
    dist_of = {"IPython": "ipython", "rdmascope": "rdmascope", "pandas": "pandas",
               "matplotlib": "matplotlib", "numpy": "numpy"}
    installed = nb | {re.split(r"[<>= ]", d)[0].lower() for d in proj["dependencies"]} | \
        {re.split(r"[<>= ]", d)[0].lower() for d in extras["analysis"]}
    for mod in _imports(REPO / "notebooks" / "walkthrough.ipynb"):
        if mod in sys.stdlib_module_names:
            continue
        assert dist_of.get(mod, mod).lower() in installed, mod
    readme = (REPO / "README.md").read_text()
    assert "rdmascope[notebook]" in readme


def test_a_stated_link_gbps_below_the_traffic_is_named_as_the_cause():
    """The fixture's 200 Gb/s link told it is a 50 Gb/s one: the over-line windows are blamed on
    --link-gbps, not on late counter updates (the readings are regular)."""
    r = run("peaks", SIM, "--link-gbps", "50", "--windows", "1ms", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["peaks"]
    causes = " ".join(str(row.get("over_line_causes") or "") for row in rows)
    assert "--link-gbps below the traffic" in causes, causes
    assert "late counter update" not in causes
    # without --link-gbps the recorded rates hold: nothing blamed on it
    r = run("peaks", SIM, "--windows", "1ms", "--json")
    assert "--link-gbps" not in " ".join(str(row.get("over_line_causes") or "")
                                         for row in json.loads(r.output)["peaks"])


@pytest.mark.parametrize("spaced, joined", [
    (["--from", "1", "s", "--to", "1500", "ms"], ["--from", "1s", "--to", "1500ms"]),
    (["--windows", "5", "ms"], ["--windows", "5ms"]),
    (["--from", "0.5", "s", "--windows", "1", "ms"], ["--from", "0.5s", "--windows", "1ms"]),
])
def test_a_duration_with_a_space_is_the_same_duration(spaced, joined):
    a = run("peaks", SIM, *spaced, "--json")
    b = run("peaks", SIM, *joined, "--json")
    assert a.exit_code == 0, a.output
    assert json.loads(a.output)["peaks"] == json.loads(b.output)["peaks"]


def test_a_spaced_duration_on_rates_and_record_options():
    a = run("rates", SIM, "--window", "100", "ms", "--from", "1", "s", "--to", "2", "s", "--json")
    b = run("rates", SIM, "--window", "100ms", "--from", "1s", "--to", "2s", "--json")
    assert a.exit_code == 0, a.output
    assert json.loads(a.output)["rates"] == json.loads(b.output)["rates"]
    assert len(json.loads(a.output)["rates"]) == 10
    # `record --interval 1 ms` parses (refused later only for the missing sysfs tree)
    r = run("record", "-o", "/nonexistent-parent/x", "--interval", "1", "ms", "--sysfs-root",
            "/nonexistent-sysfs")
    assert "Directory 'ms'" not in r.output and "unexpected extra argument" not in r.output


def test_a_unit_word_that_is_a_file_is_left_alone(tmp_path, monkeypatch):
    """`--from 1 s` where ./s is a capture directory: the word stays an argument."""
    import shutil

    shutil.copytree(SIM, tmp_path / "s")
    monkeypatch.chdir(tmp_path)
    r = run("peaks", "--from", "1", "s", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["meta"]["start_ns"] - json.loads(r.output)["meta"][
        "t_start_ns"] == 1_000_000_000
