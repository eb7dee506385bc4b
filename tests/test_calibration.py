"""The calibration table (benchmarks/calibration.py): every row within tolerance or explained."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def calibration():
    spec = importlib.util.spec_from_file_location("calibration", ROOT / "benchmarks" /
                                                  "calibration.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("calibration", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_fast_subset_meets_the_study(calibration):
    rows = calibration.measure(fast=True)
    names = [r.name for r in rows]
    # every test's TTFT at both links and its increase are in the subset, and the peak row
    for test in calibration.TESTS:
        assert any(n.startswith(f"{test} ") and n.endswith("at 200") for n in names)
        assert f"{test} increase (emulated - 200)" in names
    assert "8K prefill peak, 5 ms window" in names
    missed = [(r.name, r.value, r.target) for r in rows if r.verdict == "MISS"]
    assert not missed
    # an explained row is one the module names, with its reason printed under the table
    table = calibration.format_table(rows)
    for r in rows:
        if r.verdict == "explained":
            assert calibration.EXPLAINED[r.name] in table


def test_row_verdicts_follow_the_tolerance(calibration):
    Row = calibration.Row
    # relative: 5 % of 10 s; absolute: +-0.01 s
    assert Row("x", 10.0, 10.0, 10.49, 0.05, "s").verdict == "ok"
    assert Row("x", 10.0, 10.0, 10.51, 0.05, "s").verdict == "MISS"
    assert Row("P3 decode speed", 18.7, 18.7, 21.4, 0.05, "tok/s").verdict == "explained"
    assert Row("y", 0.01, 0.01, 0.0199, 0.01, "s", abs_tol=True).verdict == "ok"
    assert Row("y", 0.01, 0.01, 0.0201, 0.01, "s", abs_tol=True).verdict == "MISS"
    # the bound for the emulated link, by hand: 8,192 x 3,376,128 B x 8 x (1/109 - 1/200) per Gb/s
    assert calibration.bound_s(8192) == pytest.approx(8192 * 3_376_128 * 8 * (91 / 21800) / 1e9)


def test_the_kept_output_is_the_whole_table(calibration):
    kept = (ROOT / "benchmarks" / "calibration.txt").read_text()
    assert "whole table" in kept and "0 missed" in kept
    rows = calibration.measure()  # the whole table runs in seconds (deterministic, seeded)
    for r in rows:  # every row is in the kept table, with the same value and verdict
        line = next(ln for ln in kept.splitlines() if ln.startswith(r.name + " "))
        assert f"{r.value:>9.4g}" in line and r.verdict in line
