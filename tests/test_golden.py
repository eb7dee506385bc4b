"""Every analysis command prints, byte for byte, what it printed when the golden files were made.

The cases and the capture they run on are in ``tests/golden.py``; after a deliberate change of a
command's output regenerate the files with ``python tests/golden.py`` and commit them. The
outputs were made from the code before the engine was restructured, so a refactoring that
changes one byte of any command's output (a table cell, a JSON number, a note) fails here.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden  # noqa: E402


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return dict(golden.outputs())


def test_every_case_has_a_golden_file():
    have = {f.stem for f in golden.GOLDEN.glob("*.txt")}
    assert have == set(golden.CASES), "regenerate: python tests/golden.py"


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_output_is_unchanged(rendered, case):
    want = (golden.GOLDEN / f"{case}.txt").read_text()
    got = rendered[case]
    if got != want:
        diff = "".join(list(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                 "golden", "now", n=1))[:60])
        pytest.fail(f"{case}: output changed (python tests/golden.py regenerates after a "
                    f"deliberate change):\n{diff}")
