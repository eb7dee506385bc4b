"""Shared test fixtures: paths to the real sysfs trees and the committed captures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
#: Real sysfs content from prometheus/procfs's test fixtures (Apache-2.0, see its NOTICE).
PROCFS_SYS = FIXTURES / "sysfs-procfs" / "sys"


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", default=False,
                     help="run the long soak tests (minutes; off by default)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def procfs_sys() -> Path:
    """The real sysfs tree (hfi1_0, mlx4_0, mlx5_0) from prometheus/procfs's test fixtures."""
    if not PROCFS_SYS.is_dir():
        pytest.fail(f"fixture tree missing from the repository: {PROCFS_SYS}")
    return PROCFS_SYS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(params=["compiled", "python"])
def sweep_impl(request, monkeypatch) -> str:
    """Run a test under each sweep of ``rdmascope record`` (sampler/csweep.py): the compiled
    extension, then the pure-Python fallback (``RDMASCOPE_NO_CEXT=1``, inherited by recorder
    subprocesses). The compiled case skips, saying why, when the extension is not built here
    (``test_csweep.py::test_extension_is_built_where_a_compiler_is`` fails instead where it
    should have been)."""
    from rdmascope.sampler.csweep import ENV_DISABLE, load

    if request.param == "compiled":
        monkeypatch.delenv(ENV_DISABLE, raising=False)
        module, why = load()
        if module is None:
            pytest.skip(f"compiled sweep unavailable: {why}")
    else:
        monkeypatch.setenv(ENV_DISABLE, "1")
    return request.param
