"""Rooms sized to one job: no module over ``MAX_LINES`` lines without a stated reason.

Every ``.py`` file under ``sampler/``, ``analysis/`` and ``src/rdmascope/`` longer than
``MAX_LINES`` lines must say why it is one module: a paragraph of its module docstring starting
``Size:``, or a row of the table "Modules over 800 lines" in docs/ARCHITECTURE.md naming its path
with a reason. A row naming a file that no longer exists fails too (the table stays true).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("sampler", "analysis", "src/rdmascope")
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
MAX_LINES = 800
TABLE_HEADING = "## Modules over 800 lines"


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def states_size(path: Path) -> bool:
    """Does the module docstring hold a line starting ``Size:`` followed by a reason?"""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)), clean=True) or ""
    return any(re.match(r"Size:\s*\S", line.strip()) for line in doc.splitlines())


def table_reasons(text: str) -> dict[str, str]:
    """{path: reason} of the rows of the table under ``TABLE_HEADING`` (first column the path in
    backticks, last column the reason)."""
    if TABLE_HEADING not in text:
        return {}
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        out[cells[0].strip("`")] = cells[-1]
    return out


def oversized(repo: Path, roots=ROOTS) -> list[tuple[str, int]]:
    """(path relative to ``repo``, lines) of every module over ``MAX_LINES`` lines."""
    out = []
    for r in roots:
        for f in sorted((repo / r).rglob("*.py")):
            n = line_count(f)
            if n > MAX_LINES:
                out.append((f.relative_to(repo).as_posix(), n))
    return out


def unexplained(repo: Path, doc_text: str, roots=ROOTS) -> list[str]:
    reasons = table_reasons(doc_text)
    return [f"{p} ({n} lines)" for p, n in oversized(repo, roots)
            if not states_size(repo / p) and not reasons.get(p)]


def test_every_module_over_the_limit_states_why():
    bad = unexplained(REPO, ARCHITECTURE.read_text())
    assert not bad, (
        f"modules over {MAX_LINES} lines without a stated reason (split them, or add a 'Size:' "
        f"paragraph to the module docstring, or a row to '{TABLE_HEADING}' in "
        "docs/ARCHITECTURE.md):\n" + "\n".join(bad))


def test_the_table_names_existing_modules():
    gone = [p for p in table_reasons(ARCHITECTURE.read_text()) if not (REPO / p).is_file()]
    assert not gone, f"'{TABLE_HEADING}' in docs/ARCHITECTURE.md names missing files: {gone}"


def test_the_check_finds_what_it_looks_for(tmp_path):
    """A planted long module fails; a 'Size:' paragraph or a table row with a reason passes it."""
    pkg = tmp_path / "analysis"
    pkg.mkdir()
    body = "x = 1\n" * (MAX_LINES + 1)
    (pkg / "long.py").write_text('"""A long module."""\n' + body)
    (pkg / "said.py").write_text('"""A long module.\n\nSize: one job, said here.\n"""\n' + body)
    (pkg / "listed.py").write_text(body)
    (pkg / "short.py").write_text("x = 1\n")
    doc = (f"# A\n\n{TABLE_HEADING}\n\n| module | why one module |\n|---|---|\n"
           "| `analysis/listed.py` | one job, said in the table |\n| `analysis/long.py` | |\n\n"
           "## Next\n\n| `analysis/short.py` | not this table |\n")
    assert table_reasons(doc) == {"analysis/listed.py": "one job, said in the table",
                                  "analysis/long.py": ""}
    assert unexplained(tmp_path, doc, roots=("analysis",)) == [
        f"analysis/long.py ({MAX_LINES + 2} lines)"]
