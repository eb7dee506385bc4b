"""The README's worked example (TP2, two 400 Gb/s nodes, emulated 200 Gb/s) prints what it quotes.

Runs the example's three console lines in a temporary directory and finds the quoted P2 row of
``compare`` (per-token MB, extra prefill, bounds, share of the bound, correction) in the README,
so an emulator change that moves them cannot leave the README stale.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from click.testing import CliRunner

from rdmascope.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> tuple[list[list[str]], str]:
    text = README.read_text()
    start = text.index("**Worked example: two 400 Gb/s nodes")
    block = text[start:].split("```console", 1)[1].split("```", 1)[0]
    cmds = [shlex.split(line[2:]) for line in block.splitlines() if line.startswith("$ ")]
    row = next(line for line in block.splitlines() if line.strip().startswith("P2 "))
    return cmds, row


def test_the_worked_example_prints_the_numbers_it_quotes(tmp_path, monkeypatch):
    cmds, quoted = _example()
    assert [c[:2] for c in cmds] == [["rdmascope", "simulate"], ["rdmascope", "simulate"],
                                     ["rdmascope", "compare"]]
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for cmd in cmds[:2]:
        r = runner.invoke(main, cmd[1:])
        assert r.exit_code == 0, r.output
    r = runner.invoke(main, cmds[2][1:])
    assert r.exit_code == 0, r.output
    printed = next(line for line in r.stdout.splitlines()
                   if line.strip().startswith("P2 ") and "no" in line.split())
    want = [x for x in quoted.split() if x not in ("...",)]
    got = printed.split()
    # the quoted row elides columns with '...'; every quoted value must appear, in order
    it = iter(got)
    missing = [w for w in want if not any(w == g for g in it)]
    assert not missing, (quoted, printed)
