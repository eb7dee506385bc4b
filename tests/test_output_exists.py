"""Every single-file output option refuses to replace an existing file (exit 4, "output exists",
naming the path) unless ``--force``, as the output directories of record/report/demo/export
dataset are protected; the file is left byte for byte as it was. With ``--force`` it is
replaced."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdmascope.cli import main

SIM = str(Path(__file__).resolve().parents[1] / "fixtures" / "sim-p4-200")
OLD = b"an earlier result the user keeps\n"

# (command line with {out} for the output, the output's file name)
CASES = [
    (["export", "perfetto", SIM, "-o", "{out}"], "trace.json"),
    (["peaks", SIM, "--parquet", "{out}"], "peaks.parquet"),
    (["rates", SIM, "--window", "100ms", "--parquet", "{out}"], "rates.parquet"),
    (["bursts", SIM, "--parquet", "{out}"], "bursts.parquet"),
    (["attribute", SIM, "--parquet", "{out}"], "attr.parquet"),
    (["plot", "devices", SIM, "-o", "{out}"], "keep.png"),
]


@pytest.mark.parametrize(("args", "name"), CASES, ids=[" ".join(a[:2]) for a, _ in CASES])
def test_an_existing_output_file_is_kept_unless_force(tmp_path, args, name):
    out = tmp_path / name
    out.write_bytes(OLD)
    argv = [str(out) if a == "{out}" else a for a in args]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 4, r.output
    assert "Traceback" not in r.output
    err = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(err) == 1 and str(out) in err[0] and "already exists" in err[0], r.output
    assert "--force" in err[0]
    assert out.read_bytes() == OLD  # nothing lost
    r = CliRunner().invoke(main, [*argv, "--force"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() != OLD and out.stat().st_size > 0


def test_a_new_output_file_needs_no_force(tmp_path):
    out = tmp_path / "p.parquet"
    r = CliRunner().invoke(main, ["peaks", SIM, "--parquet", str(out)])
    assert r.exit_code == 0 and out.stat().st_size > 0, r.output
