"""Kind 5: a host with many RDMA devices (SR-IOV VFs) needs one descriptor per counter file.

With 60 devices (120 counter files) under a soft limit of 100 open files, ``record`` raises the
soft limit toward the hard one and records every device; under a hard limit of 100 it refuses
at start, before writing anything, with the number of files needed and how to allow them:
never a ``Too many open files`` traceback.
"""

from __future__ import annotations

import json
import sys

from rdmascope.analysis.load import load_capture
from rdmascope.sampler.faketree import build_device

from .conftest import Recorder, inspect_json, run_cli

N = 60


def _limit(soft: int, hard: int) -> list[str]:
    """A command prefix that runs the recorder under RLIMIT_NOFILE (soft, hard)."""
    code = ("import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
            "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", code]


def _tree(root):
    for i in range(N):
        build_device(root, f"mlx5_{i}", pci=f"0000:{0x10 + i:02x}:00.1",
                     netdev=f"enp{i}s0f1", counters=("port_xmit_data", "port_rcv_data"))


def test_soft_limit_is_raised_toward_the_hard_one(tmp_path):
    _tree(tmp_path / "sys")
    rec = Recorder(tmp_path / "cap", tmp_path / "sys", "--duration", "0.3s",
                   prefix=_limit(100, 4096))
    assert rec.wait() == 0, rec.stderr
    assert "raised the open-files soft limit from 100 to" in rec.stderr
    assert "Traceback" not in rec.stderr
    cap = load_capture(tmp_path / "cap")
    assert cap.counters["device"].nunique() == N
    assert cap.readings["valid"].all()
    # the analysis sees every device, each known (idle: 0, not unknown)
    ins = inspect_json(tmp_path / "cap")
    assert len(ins["counters"]) == 2 * N
    assert all(set(c["by_status"]) == {"ok"} for c in ins["counters"])
    res = run_cli("rates", tmp_path / "cap", "--window", "100ms", "--json")
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)["rates"][1]
    assert [row[f"mlx5_{i}/tx_gbps"] for i in range(N)] == [0.0] * N
    res = run_cli("verify-emulation", tmp_path / "cap", "--json")
    assert res.exit_code == 3  # nothing moved: too little traffic to judge, said as such
    assert json.loads(res.output)["meta"]["message"].startswith("cannot judge: only 0.000 MB")


def test_refused_at_start_with_the_number_needed(tmp_path):
    _tree(tmp_path / "sys")
    rec = Recorder(tmp_path / "cap", tmp_path / "sys", "--duration", "0.3s",
                   prefix=_limit(100, 100))
    assert rec.wait() == 4
    err = rec.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: 120 counters need about "), rec.stderr
    need = int(err[0].split("need about ")[1].split()[0])
    assert need >= 120 + 64
    assert "the limit is 100 (hard limit 100)" in err[0] and f"LimitNOFILE={need}" in err[0]
    assert not (tmp_path / "cap").exists()
