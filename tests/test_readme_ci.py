"""CI must install and test exactly as README.md says: the commands in .ci/run appear verbatim."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _commands(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.lstrip().startswith(("#", "set ", "cd "))]


def test_ci_runs_the_readme_commands():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    cmds = _commands(ci)
    assert len(cmds) >= 2
    head = readme[: readme.find("\n## ", readme.find("\n## ") + 1)]
    for cmd in cmds:
        assert cmd in head, f".ci/run command not at the top of README.md: {cmd}"


def test_readme_is_short_and_tells_users_not_history():
    """The README is for users: under 450 lines, and no issue references ('#21', 'issue 2',
    'issues 13'); development history and dated runs live in docs/ (benchmarks.md)."""
    import re

    readme = (REPO / "README.md").read_text()
    n = len(readme.splitlines())
    assert n < 450, f"README.md has {n} lines (at most ~400 wanted)"
    refs = re.findall(r"(?<![\w/&])#\d+\b|\bissues? \d+|\bPR \d+", readme, re.I)
    assert not refs, f"issue references in README.md: {refs}"
    dated = re.findall(r"\b20\d\d-\d\d-\d\d\b", readme)
    assert not dated, f"dated runs in README.md (move them to docs/benchmarks.md): {dated}"


def _readme_commands() -> list[str]:
    """The command lines of the bash blocks at the top of README.md (before its 2nd section)."""
    import re

    readme = (REPO / "README.md").read_text()
    head = readme[: readme.find("\n## ", readme.find("\n## ") + 1)]
    blocks = re.findall(r"```bash\n(.*?)```", head, re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip()]


def test_the_first_command_installs_only_what_the_demo_needs():
    """The first command pulled the test extra (Ray, DuckDB, polars, Selenium: a 1.2 GB venv)
    just to run the demo. It installs the analysis extra and runs the demo; the test command
    installs the test extra and runs the tests; .ci/run runs exactly these, in this order."""
    cmds = _readme_commands()
    assert cmds[0].endswith("pip install -e '.[analysis]' && rdmascope demo"), cmds[0]
    assert "test" not in cmds[0]
    assert cmds[-1].endswith("pip install -e '.[analysis,test]' && python -m pytest"), cmds[-1]
    assert _commands((REPO / ".ci" / "run").read_text()) == cmds


def test_the_demos_analysis_runs_without_the_test_extra(tmp_path):
    """What the demo runs after recording (simulate, report) imports nothing of the test extra:
    its modules are made unimportable in a subprocess (as tests/test_cli_lean.py does for the
    sampler-only install)."""
    import subprocess
    import sys

    tomllib = __import__("pytest").importorskip("tomllib")
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    name = {"pytest-xdist": "xdist", "prometheus_client": "prometheus_client"}

    def dists(reqs):
        import re

        return {re.split(r"[<>=\[ ]", r)[0].lower() for r in reqs}

    extra = proj["optional-dependencies"]
    test_only = dists(extra["test"]) - dists(extra["analysis"]) - dists(proj["dependencies"])
    blocked = sorted(name.get(d, d.replace("-", "_")) for d in test_only)
    assert {"ray", "duckdb", "polars", "selenium"} <= set(blocked)
    code = ("import sys\n"
            f"for m in {blocked!r}:\n"
            "    sys.modules[m] = None  # import raises ModuleNotFoundError\n"
            "from rdmascope.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    for args in (["simulate", "capture", "-o", str(tmp_path / "cap"), "--scenario", "single4k"],
                 ["report", str(tmp_path / "cap"), "-o", str(tmp_path / "rep")]):
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "rep" / "report.html").stat().st_size > 0
