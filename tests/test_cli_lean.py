"""A sampler-only install (no pandas/matplotlib/jinja2) gets one-line errors from analysis commands.

The lean install is emulated in a subprocess by making the analysis extras unimportable.
"""

import subprocess
import sys

import pytest

_BLOCK = (
    "import sys\n"
    "for m in ('pandas', 'matplotlib', 'jinja2'):\n"
    "    sys.modules[m] = None  # import raises ModuleNotFoundError\n"
    "from rdmascope.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _run(*args):
    return subprocess.run([sys.executable, "-c", _BLOCK, *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("args", [
    ["estimate", "--preset", "study"],
    ["rates", "{cap}"],
    ["report", "{cap}", "-o", "{out}"],
    ["demo", "-o", "{out}"],
])
def test_analysis_command_on_lean_install_explains_the_extra(args, fixtures_dir, tmp_path):
    cap = fixtures_dir / "v1-capture"
    args = [a.format(cap=cap, out=tmp_path / "r") for a in args]
    res = _run(*args)
    assert res.returncode == 4, res.stderr
    assert "Traceback" not in res.stderr
    assert "needs the analysis extras" in res.stderr
    assert "pip install 'rdmascope[analysis]'" in res.stderr


def test_sampler_commands_work_on_lean_install(fixtures_dir):
    res = _run("inspect", str(fixtures_dir / "v1-capture"))
    assert res.returncode == 0, res.stderr
    assert "sweeps" in res.stdout


def test_top_level_help_imports_no_subcommand_module():
    """`rdmascope --help` lists every command from the command table: no subcommand module
    (nor pandas) is imported to print it, so it is fast and works on a lean install."""
    code = ("import sys\n"
            "from rdmascope.cli import main, COMMANDS\n"
            "try:\n"
            "    main(['--help'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "mods = sorted(m for m in sys.modules if m.startswith('rdmascope.cli.')\n"
            "              and m.split('.')[2] in {v[0] for v in COMMANDS.values()})\n"
            "print('IMPORTED', mods, 'pandas' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("IMPORTED")]
    assert line == ["IMPORTED [] False"], r.stdout[-2000:] + r.stderr[-2000:]
    assert "Commands:" in r.stdout and "record" in r.stdout
