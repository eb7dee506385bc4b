"""The sampler side never imports pandas or matplotlib (lean install on an inference node), nor
prometheus_client unless ``--metrics`` asks for it."""

from __future__ import annotations

import json
import subprocess
import sys

from rdmascope.sampler.faketree import build_device

CHECK = """
import sys
{body}
bad = sorted(m for m in ("pandas", "matplotlib", "prometheus_client") if m in sys.modules)
assert not bad, f"imported: {{bad}}"
print("CLEAN")
"""


def run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHECK.format(body=body)], capture_output=True,
                          text=True, timeout=120)


def test_importing_the_sampler_is_clean():
    r = run("import rdmascope.sampler, rdmascope.sampler.daemon, rdmascope.sampler.discovery,"
            " rdmascope.sampler.reader, rdmascope.sampler.loop, rdmascope.capture")
    assert r.returncode == 0 and "CLEAN" in r.stdout, r.stderr


def test_record_help_is_clean():
    r = run("from rdmascope.cli import main\n"
            "try:\n    main(['record', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0")
    assert r.returncode == 0 and "CLEAN" in r.stdout and "--interval" in r.stdout, r.stderr


def test_short_record_is_clean(tmp_path):
    build_device(tmp_path / "sys", "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    body = (
        "from rdmascope.cli import main\n"
        f"for args in (['devices', '--sysfs-root', {str(tmp_path / 'sys')!r}],\n"
        f"             ['record', '-o', {str(tmp_path / 'cap')!r}, '--sysfs-root',\n"
        f"              {str(tmp_path / 'sys')!r}, '--duration', '0.6s', '--netdev-stats']):\n"
        "    try:\n        main(args)\n    except SystemExit as e:\n        assert e.code == 0, e\n"
    )
    r = run(body)
    assert r.returncode == 0 and "CLEAN" in r.stdout, r.stderr
    assert "sweeps:" in r.stderr


def test_lean_install_record_and_inspect_work_without_pandas(tmp_path):
    """Simulate an install with only the sampler's dependencies: pandas/matplotlib unimportable.

    (pyarrow.parquet probes for pandas by itself when it is installed, so ``inspect`` in a full
    install may load it; the point is that nothing of ours needs it.)
    """
    build_device(tmp_path / "sys", "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    body = (
        "sys.modules['pandas'] = None\nsys.modules['matplotlib'] = None\n"
        "from rdmascope.cli import main\n"
        f"for args in (['record', '-o', {str(tmp_path / 'cap')!r}, '--sysfs-root',\n"
        f"              {str(tmp_path / 'sys')!r}, '--duration', '0.6s'],\n"
        f"             ['inspect', {str(tmp_path / 'cap')!r}],\n"
        f"             ['inspect', {str(tmp_path / 'cap')!r}, '--json']):\n"
        "    try:\n        main(args)\n    except SystemExit as e:\n        assert e.code == 0, e\n"
        "del sys.modules['pandas'], sys.modules['matplotlib']\n"
    )
    r = run(body)
    assert r.returncode == 0 and "CLEAN" in r.stdout, r.stderr
    assert "sampling quality (audit)" in r.stdout
    summary = json.loads(r.stdout[r.stdout.index("\n{") + 1:r.stdout.rindex("}") + 1])
    assert summary["rows"] == 2 * summary["quality"]["sweeps_taken"] > 0
