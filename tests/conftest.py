"""Shared test fixtures: paths to the real sysfs trees and the committed captures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
PROCFS_SYS = SHARED / "fixtures" / "sysfs-procfs" / "sys"
FIXTURES = REPO / "fixtures"


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
        pytest.fail(f"shared fixture tree missing: {PROCFS_SYS} (expected ../shared beside the repo)")
    return PROCFS_SYS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
