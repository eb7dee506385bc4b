"""The shipped systemd unit (contrib/systemd): starts as shipped, sees the host's netdevs, and is
hardened at least as the Prometheus community's node_exporter unit."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[1] / "contrib" / "systemd" / "rdmascope-record@.service"
#: the hardening of prometheus-community/ansible's node_exporter.service template
NODE_EXPORTER = {"ProtectHome": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
                 "ProtectControlGroups": "yes", "ProtectKernelModules": "yes",
                 "ProtectKernelTunables": "yes"}


def _service() -> configparser.SectionProxy:
    cp = configparser.ConfigParser(interpolation=None, strict=False)
    cp.optionxform = str
    cp.read_string(UNIT.read_text())
    return cp["Service"]


def test_the_capture_parent_is_the_state_directory_systemd_creates():
    """`record -o /var/lib/rdmascope/%i/{host}` needs /var/lib/rdmascope/%i to exist (record
    refuses a missing parent): StateDirectory must create exactly that."""
    s = _service()
    argv = shlex.split(s["ExecStart"])
    out = argv[argv.index("-o") + 1]
    parent = os.path.dirname(out)
    assert parent == "/var/lib/" + s["StateDirectory"], (parent, s["StateDirectory"])
    assert "%i" in s["StateDirectory"]


def test_no_private_network_namespace_hides_the_netdevs():
    s = _service()
    assert s.get("PrivateNetwork", "no").lower() in ("no", "false", "0")
    assert "--netdev-stats" in s["ExecStart"]


def test_hardening_at_least_node_exporters():
    s = _service()
    truthy = {"yes", "true", "1", "on"}
    for key, want in NODE_EXPORTER.items():
        got = s.get(key)
        assert got is not None, f"{key} missing"
        assert got.lower() == want or (want == "yes" and got.lower() in truthy), (key, got)
    assert s.get("CapabilityBoundingSet") == ""  # no capability at all


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    exe = Path(sys.executable).with_name("rdmascope")
    if not exe.exists():
        pytest.skip(f"no rdmascope console script beside {sys.executable}")
    text = UNIT.read_text().replace("/opt/rdmascope/.venv/bin/rdmascope", str(exe))
    unit = tmp_path / "rdmascope-record@run1.service"
    unit.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stderr


def test_netdev_stats_finding_no_netdev_is_said_and_the_tcp_check_cannot_judge(tmp_path):
    """Inside a private network namespace /sys/class/net has none of the host's netdevs:
    record says so (and keeps it in the manifest), and verify-emulation says its TCP check
    could not judge instead of passing in silence."""
    from rdmascope.sampler.faketree import build_device

    from rdmascope.capture import read_manifest

    root = tmp_path / "sys"
    build_device(root, "mlx5_0", pci="0000:01:00.0")  # no netdev under the device
    out = tmp_path / "cap"
    r = subprocess.run([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                        "--sysfs-root", str(root), "--duration", "0.3s", "--netdev-stats",
                        "--no-status"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--netdev-stats: no netdev found for the sampled RDMA device(s) (mlx5_0)" in r.stderr
    nd = read_manifest(out)["extra"]["netdev_stats"]
    assert nd["requested"] is True and nd["found"] == 0
    v = subprocess.run([sys.executable, "-m", "rdmascope", "verify-emulation", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert "the TCP check could not judge" in v.stdout + v.stderr, v.stdout + v.stderr
