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
