"""Golden outputs of the analysis commands: what every command prints on the repository's captures.

Each case runs one ``rdmascope`` command in-process (click's runner) on one of the committed
simulated runs (``fixtures/sim-*``) or on a small multi-segment capture built deterministically
by ``benchmarks/scale_capture.py`` (12 s in four 3 s segments, so the segment-by-segment engine
carries state across segment edges), and its exit code, stdout and stderr are compared byte for
byte with ``tests/data/golden/<case>.txt`` (``tests/test_golden.py``).

A deliberate change of some command's output regenerates them (review the diff, then commit it
and say why in the commit message)::

    python tests/golden.py

``python tests/golden.py --check`` only compares and prints the cases that differ.

A long capture (an hour: too slow for the suite) is compared the same way between two
checkouts: ``python tests/golden.py --capture CAP --save DIR`` (each checkout with its own venv)
writes every command's output on CAP into DIR, and ``diff -r DIR_BEFORE DIR_AFTER`` must be
empty (``benchmarks/scale_capture.py`` builds such a capture: ``python -c "import sys;
sys.path.insert(0, 'benchmarks'); from scale_capture import build; build('/tmp/cap1h', 3600)"``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
GOLDEN = REPO / "tests" / "data" / "golden"
#: the built multi-segment capture's directory name (relative to its temporary cwd)
BUILT = "seg4"

_P2, _P2E, _P4, _P4E, _TCP = ("sim-p2-200", "sim-p2-emulated100", "sim-p4-200",
                              "sim-p4-emulated100", "sim-p1-tcp-fallback")


def _cases() -> dict[str, list[str]]:
    """case name -> rdmascope argv (capture paths relative to the fixtures dir or the built
    capture's dir; a path under ``BUILT`` runs there)."""
    c: dict[str, list[str]] = {}
    runs = (_P2, _P2E, _P4, _P4E, _TCP, BUILT)
    for r in runs:
        c[f"peaks-{r}"] = ["peaks", r]
        c[f"bursts-{r}"] = ["bursts", r]
        c[f"verify-{r}"] = ["verify-emulation", r]
        c[f"rates-{r}-100ms"] = ["rates", r, "--window", "100ms"]
    for r in (_P2, _P4E, _TCP, BUILT):
        c[f"attribute-{r}"] = ["attribute", r]
    for r in (_P2E, _P4, BUILT):
        c[f"attribute-{r}-json"] = ["attribute", r, "--json"]
    for r in (_P2, BUILT):
        c[f"peaks-{r}-json"] = ["peaks", r, "--json"]
        c[f"rates-{r}-1s-json"] = ["rates", r, "--window", "1s", "--json"]
    for r in (_P2E, BUILT):
        c[f"peaks-{r}-uncertainty"] = ["peaks", r, "--uncertainty"]
        c[f"rates-{r}-10ms-bytes"] = ["rates", r, "--window", "10ms", "--bytes", "--csv"]
    for r in (_P2E, _TCP):
        c[f"verify-{r}-json"] = ["verify-emulation", r, "--json"]
    c[f"bursts-{BUILT}-json"] = ["bursts", BUILT, "--json"]
    c[f"bursts-{_P2E}-all"] = ["bursts", _P2E, "--limit", "0"]
    c[f"inspect-{_P2}"] = ["inspect", _P2]
    c[f"inspect-{_TCP}"] = ["inspect", _TCP]
    c[f"inspect-{_P4E}-json"] = ["inspect", _P4E, "--json"]
    c[f"rates-{_TCP}-1ms"] = ["rates", _TCP, "--window", "1ms", "--csv"]
    c[f"rates-{_P2E}-device"] = ["rates", _P2E, "--window", "50ms", "--by", "device"]
    c[f"rates-{_P2}-twins"] = ["rates", _P2, "--window", "100ms", "--group", "twins"]
    c[f"rates-{_TCP}-netdev"] = ["rates", _TCP, "--window", "100ms", "--source", "netdev"]
    c[f"rates-{BUILT}-range"] = ["rates", BUILT, "--window", "1ms", "--from", "2.5",
                                 "--to", "3.75", "--csv"]
    c[f"peaks-{_P2}-twins"] = ["peaks", _P2, "--group", "twins"]
    c[f"peaks-{BUILT}-range"] = ["peaks", BUILT, "--from", "2.5", "--to", "9"]
    c[f"peaks-{_TCP}-netdev"] = ["peaks", _TCP, "--source", "netdev"]
    c[f"bursts-{_P4}-window"] = ["bursts", _P4, "--window", "5ms", "--group", "twins"]
    c[f"bursts-{BUILT}-range"] = ["bursts", BUILT, "--from", "1", "--to", "8", "--json"]
    c[f"verify-{_P2E}-share"] = ["verify-emulation", _P2E, "--expect-both", "--min-share", "0.45"]
    c[f"verify-{BUILT}-range"] = ["verify-emulation", BUILT, "--from", "3", "--to", "10"]
    c[f"attribute-{_P4}-warmup"] = ["attribute", _P4, "--warmup-rounds", "0",
                                    "--arrival-window", "0.5"]
    # a line rate below the bursts' rate: windows over line rate, their causes, the flagger
    # judging them from the intervals around them
    low = ["--link-gbps", "100"]
    c[f"peaks-{BUILT}-overline"] = ["peaks", BUILT, *low]
    c[f"bursts-{BUILT}-overline"] = ["bursts", BUILT, "--json", *low]
    c[f"rates-{BUILT}-overline"] = ["rates", BUILT, "--window", "5ms", "--csv", *low]
    c[f"rates-{BUILT}-overline-twins"] = ["rates", BUILT, "--window", "2ms", "--group", "twins",
                                          "--from", "1", "--to", "4", *low]
    c[f"verify-{BUILT}-overline"] = ["verify-emulation", BUILT, "--json", *low]
    c[f"attribute-{BUILT}-overline"] = ["attribute", BUILT, "--json", *low]
    c[f"compare-{_P2}"] = ["compare", _P2, _P2E]
    c[f"compare-{_P4}-json"] = ["compare", _P4, _P4E, "--json"]
    return c


CASES = _cases()


@contextmanager
def _built_capture() -> Iterator[Path]:
    """A temporary dir holding ``BUILT``: 12 s of the benchmark's capture in four segments."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from scale_capture import build
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    with tempfile.TemporaryDirectory(prefix="rdmascope-golden-") as d:
        build(Path(d) / BUILT, 12, segment_s=3)
        yield Path(d)


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def render(argv: list[str], built_dir: Path) -> str:
    """One case's exit code, stdout and stderr, as stored in its golden file."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    where = built_dir if argv[1] == BUILT else FIXTURES
    with _cwd(where):
        r = CliRunner().invoke(main, argv, prog_name="rdmascope", catch_exceptions=False)
    return (f"$ rdmascope {' '.join(argv)}\nexit {r.exit_code}\n--- stdout\n{r.stdout}"
            f"--- stderr\n{r.stderr}")


def outputs(names=None) -> Iterator[tuple[str, str]]:
    """(case, rendered output) for every case (or those of ``names``)."""
    with _built_capture() as built:
        for name, argv in CASES.items():
            if names is None or name in names:
                yield name, render(argv, built)


#: the commands of ``--capture`` (a capture of any length; ``CAP`` is replaced by its path)
LONG_CASES = {
    "rates-100ms": ["rates", "CAP", "--window", "100ms", "--csv"],
    "peaks": ["peaks", "CAP", "--json"],
    "peaks-overline": ["peaks", "CAP", "--json", "--link-gbps", "100"],
    "bursts": ["bursts", "CAP"],
    "verify": ["verify-emulation", "CAP", "--json"],
    "attribute": ["attribute", "CAP", "--json"],
    "inspect": ["inspect", "CAP", "--json"],
}


def save_long(cap: Path, out: Path) -> None:
    """Every ``LONG_CASES`` command's output on ``cap`` into ``out/<case>.txt``."""
    from click.testing import CliRunner

    from rdmascope.cli import main as cli

    out.mkdir(parents=True, exist_ok=True)
    cap = Path(cap).resolve()
    with _cwd(cap.parent):
        for name, argv in LONG_CASES.items():
            argv = [cap.name if a == "CAP" else a for a in argv]
            r = CliRunner().invoke(cli, argv, prog_name="rdmascope", catch_exceptions=False)
            (out / f"{name}.txt").write_text(f"exit {r.exit_code}\n{r.stdout}")
            print(f"{name}: exit {r.exit_code}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if "--capture" in argv:
        save_long(Path(argv[argv.index("--capture") + 1]), Path(argv[argv.index("--save") + 1]))
        return 0
    check = "--check" in argv
    GOLDEN.mkdir(parents=True, exist_ok=True)
    bad = 0
    for name, text in outputs():
        f = GOLDEN / f"{name}.txt"
        if check:
            if not f.exists() or f.read_text() != text:
                print(f"differs: {name}")
                bad += 1
        else:
            f.write_text(text)
    if not check:
        for f in GOLDEN.glob("*.txt"):
            if f.stem not in CASES:
                f.unlink()
        print(f"wrote {len(CASES)} golden files to {GOLDEN.relative_to(REPO)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
