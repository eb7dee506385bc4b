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


def _systemd_runs_here() -> str | None:
    """Why the unit cannot be started here, or None where it can (systemd is PID 1, root)."""
    try:
        comm = Path("/proc/1/comm").read_text().strip()
    except OSError:
        comm = "?"
    if comm != "systemd":
        return f"PID 1 is {comm!r}, not systemd: the unit cannot be started here"
    if os.geteuid() != 0:
        return "starting a system unit needs root"
    if shutil.which("systemctl") is None:
        return "systemctl not installed"
    return None


@pytest.mark.skipif(_systemd_runs_here() is not None, reason=str(_systemd_runs_here()))
def test_the_unit_starts_records_and_stops_cleanly(tmp_path):
    """The shipped unit, with only the executable's path, a test sysfs tree and a duration
    added, started by systemd: StateDirectory creates the parent, the DynamicUser writes the
    capture there, and it ends clean (stopped by its duration)."""
    import json
    import socket
    import time
    import uuid

    from rdmascope.sampler.faketree import build_device

    exe = Path(sys.executable).with_name("rdmascope")
    if not exe.exists():
        pytest.skip(f"no rdmascope console script beside {sys.executable}")
    tag = uuid.uuid4().hex[:8]
    run = Path("/run") / f"rdmascope-test-{tag}"  # outside PrivateTmp, readable by any user
    build_device(run / "sys", "mlx5_0", pci="0000:01:00.0")
    subprocess.run(["chmod", "-R", "a+rX", str(run)], check=True)
    name = f"rdmascope-record-test-{tag}@"
    text = UNIT.read_text().replace(
        "/opt/rdmascope/.venv/bin/rdmascope record",
        f"{exe} record --sysfs-root {run / 'sys'} --duration 1s")
    unit = Path("/run/systemd/system") / f"{name}.service"
    unit.write_text(text)
    inst = f"{name}t1.service"
    state = Path("/var/lib/rdmascope") / "t1"
    try:
        subprocess.run(["systemctl", "daemon-reload"], check=True, timeout=60)
        subprocess.run(["systemctl", "start", inst], check=True, timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = subprocess.run(["systemctl", "is-active", inst], capture_output=True, text=True)
            if r.stdout.strip() in ("inactive", "failed"):
                break
            time.sleep(0.5)
        shown = subprocess.run(["systemctl", "show", inst, "-p", "Result", "-p",
                                "ExecMainStatus"], capture_output=True, text=True).stdout
        assert "Result=success" in shown and "ExecMainStatus=0" in shown, shown
        cap = state / socket.gethostname()
        m = json.loads((cap / "manifest.json").read_text())
        assert m["audit"]["stopped_by"] == "duration", m.get("audit")
    finally:
        subprocess.run(["systemctl", "stop", inst], timeout=60)
        unit.unlink(missing_ok=True)
        subprocess.run(["systemctl", "daemon-reload"], timeout=60)
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
