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
