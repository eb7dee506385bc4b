"""Regenerate the committed simulated fixtures: ``python -m rdmascope.emulator.fixtures fixtures/``.

Each fixture is a simulated capture directory (``rdmascope.emulator.simcapture``) with its
``requests.jsonl`` and ``truth.json``; all are deterministic (fixed seed and synthetic clock), so a
regeneration with the same pyarrow reproduces the committed files byte for byte (with another
pyarrow, whose version string is in each segment, the segments' decoded readings);
``tests/test_simulate.py`` checks it, and that the segments carry Parquet page checksums.
Output tokens are reduced to keep the whole set at a few MB.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from rdmascope.emulator.model import (
    TrafficConfig,
    link_config,
    plan_scenario,
    simulate,
)
from rdmascope.emulator.simcapture import simulate_capture

REGENERATE = ["python", "-m", "rdmascope.emulator.fixtures", "fixtures/"]


@dataclass(frozen=True)
class FixtureSpec:
    """One committed fixture: a directory name, the test(s), output tokens, link, TCP fallback."""

    name: str
    test: str
    output_tokens: int
    link: str
    tcp_fallback: bool = False
    seed: int = 0

    def traffic(self):
        """Return the model traffic of this fixture."""
        sc = plan_scenario(self.test, rounds=1, warmup=False,
                                output_tokens=self.output_tokens, lead_in_s=1.0, tail_s=1.0,
                                name=f"{self.test}-fixture")
        cfg = TrafficConfig(link=link_config(self.link, tcp_fallback=self.tcp_fallback))
        return simulate(sc, cfg, seed=self.seed)


FIXTURES = (
    FixtureSpec("sim-p2-200", "P2", 64, "200"),
    FixtureSpec("sim-p2-emulated100", "P2", 64, "emulated100"),
    FixtureSpec("sim-p4-200", "P4", 32, "200"),
    FixtureSpec("sim-p4-emulated100", "P4", 32, "emulated100"),
    FixtureSpec("sim-p1-tcp-fallback", "P1", 16, "200", tcp_fallback=True),
)


def generate(outdir: str | Path, names: list[str] | None = None) -> list[Path]:
    """Write the fixtures (all, or ``names``) under ``outdir``, replacing earlier versions.

    Returns the fixture directories. Raises ``ValueError`` for an unknown name.
    """
    out = Path(outdir)
    known = {f.name: f for f in FIXTURES}
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise ValueError(f"unknown fixture(s) {', '.join(unknown)}; known: {', '.join(known)}")
    paths = []
    for spec in FIXTURES:
        if names and spec.name not in names:
            continue
        paths.append(simulate_capture(out / spec.name, spec.traffic(), force=True,
                                      command_line=REGENERATE))
    return paths


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m rdmascope.emulator.fixtures OUTDIR   (e.g. fixtures/)")
        return 2
    for p in generate(args[0]):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
