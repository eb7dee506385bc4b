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
