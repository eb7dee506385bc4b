"""A setup other than the study's, end to end: record (live, from an emulated sysfs tree) -> report.

A TP2 run of a Llama-3-70B-style dense model on 2 nodes with 400 Gb/s ports: run A on the full
link (both PCIe twins), run B on an emulated 200 Gb/s link (one twin, which this hypothetical
hardware lets carry 220 Gb/s). The emulator's existing traffic model plays each run with that
model shape, TP size and link (``ModelArch``/``LinkConfig``) into an emulated sysfs tree whose
ports report 400 Gb/s, and ``rdmascope record`` samples it live, keeping the setup given on its
command line (--label/--link/--emulated/--preset/--tp/--nodes) in the manifest. ``report`` is
then run with no model or link option: everything comes from the manifests, and the bounds are
checked against the formula computed here by hand.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROMPT = 2048
#: Llama-3-70B-style: (2 x 80 + 1) all-reduces x 8,192 x 2 B x 2(2-1)/2 = 2,637,824 B per token
PER_TOKEN_TP2 = 161 * 8192 * 2 * 1.0


def _traffic(cable_gbps: float, twin_gbps: float, active_twins: int, name: str):
    from rdmascope.emulator.model import (
        LinkConfig,
        ModelArch,
        RequestGroup,
        Scenario,
        TrafficConfig,
        simulate,
    )

    sc = Scenario("T2K", (RequestGroup("T2K", 1, (PROMPT,), 8, 0.4),), 0.4)
    cfg = TrafficConfig(arch=ModelArch(layers=80, hidden=8192, bytes_per_value=2, tp=2),
                        link=LinkConfig(name=name, active_twins=active_twins,
                                        twin_gbps=twin_gbps, cable_gbps=cable_gbps))
    return simulate(sc, cfg, seed=3)


def _record_run(tmp_path: Path, name: str, traffic, rate: str, record_args: list[str]):
    """Play ``traffic`` into a fresh tree and record it live; return (capture, request log)."""
    from rdmascope.emulator.serve import serve
    from rdmascope.emulator.tree import build_tree

    root = tmp_path / f"rdmascope-sim-{name}"
    tree = build_tree(root, seed=traffic.seed, rate=rate)
    cap, out = tmp_path / f"cap-{name}", tmp_path / f"log-{name}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    rec = subprocess.Popen([sys.executable, "-m", "rdmascope", "record", "-o", str(cap),
                            "--sysfs-root", str(root), "--no-status", *record_args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        result = {}

        def run():
            result["r"] = serve(root, traffic, out=out, wait_for=cap, wait_timeout_s=60,
                                start_delay_s=0.3, tree=tree)

        th = threading.Thread(target=run)
        th.start()
        th.join(timeout=120)
        assert not th.is_alive(), "the emulator did not finish"
        time.sleep(0.3)
    finally:
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err.decode()
    return cap, out / "requests.jsonl"


@pytest.fixture(scope="module")
def tp2_400(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tp2-400")
    full = _record_run(tmp, "400", _traffic(400, 220, 2, "400"), "400 Gb/sec (4X NDR)",
                       ["--label", "400 Gb/s", "--link", "400", "--preset", "llama-3-70b",
                        "--tp", "2", "--nodes", "2"])
    emu = _record_run(tmp, "emu200", _traffic(400, 220, 1, "emulated200"),
                      "400 Gb/sec (4X NDR)",
                      ["--label", "emulated 200 Gb/s", "--note", "NCCL_IB_HCA=rocep1s0f1",
                       "--link", "200", "--emulated", "220"])
    return tmp, full, emu


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _page_text(path) -> str:
    """The report's text as a reader sees it (tags dropped: numbers sit in no-wrap spans)."""
    return re.sub(r"<[^>]+>", "", path.read_text())


def test_tp2_400_record_to_report_uses_that_setup(tp2_400):
    from click.testing import CliRunner

    from rdmascope.cli import main

    tmp, (cap_a, log_a), (cap_b, log_b) = tp2_400
    out = tmp / "report"
    r = CliRunner().invoke(main, ["report", str(cap_a), str(cap_b), "--requests", str(log_a),
                                  "--requests", str(log_b), "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = _page_text(out / "report.html")
    # the labels recorded with record --label, the model and links recorded with the setup
    assert "Comparison: 400 Gb/s → emulated 200 Gb/s" in page
    assert "Setup: llama-3-70b, TP2 on 2 nodes; A 400 Gb/s, B emulated 200 Gb/s (~220 Gb/s)" \
        in page
    assert "Llama 3 70B" in page and "78 layers" not in page
    rows = _csv(out / "tables" / "comparison.csv")
    assert len(rows) == 1
    row = rows[0]
    tokens = float(row["prompt_tokens"])
    assert tokens == PROMPT
    # the bound from the measured bytes: A's prefill bytes x 8 x (1/220 - 1/400), B's real speed
    prefill_a = float(row["per_token_a_bytes"]) * tokens
    assert float(row["estimate_s"]) == pytest.approx(prefill_a * 8 / 1e9 * (1 / 220 - 1 / 400),
                                                     rel=1e-3)
    # from the architecture: 2,048 tokens x 2,637,824 B x 8 x (1/220 - 1/400)
    assert float(row["estimate_arch_s"]) == pytest.approx(
        PROMPT * PER_TOKEN_TP2 * 8 / 1e9 * (1 / 220 - 1 / 400), rel=1e-9)
    # the emulated link corrected to a real 200 Gb/s cable: B's bytes x 8 x (1/200 - 1/220)
    prefill_b = float(row["per_token_b_bytes"]) * tokens
    assert float(row["correction_to_real_s"]) == pytest.approx(
        prefill_b * 8 / 1e9 * (1 / 200 - 1 / 220), rel=1e-3)
    # the emulator sends the formula's bytes, so the measured per-token bytes match it
    assert float(row["per_token_a_bytes"]) == pytest.approx(PER_TOKEN_TP2, rel=0.01)
    # the TP projection starts from TP2 of this model
    assert "at 400 Gb/s, TP2 on 2 node(s)" in page
    assert "correction 220 → 200 Gb/s" in page


def test_compare_reads_the_setup_from_the_manifests(tp2_400):
    import json

    from click.testing import CliRunner

    from rdmascope.cli import main

    tmp, (cap_a, log_a), (cap_b, log_b) = tp2_400
    r = CliRunner().invoke(main, ["compare", str(cap_a), str(cap_b), "--requests-a", str(log_a),
                                  "--requests-b", str(log_b), "--json"])
    assert r.exit_code == 0, r.output
    meta = json.loads(r.stdout)["meta"]
    s = meta["setup"]
    assert (s["model"]["name"], s["tp"], s["nodes"]) == ("llama-3-70b", 2, 2)
    assert (s["link_a_gbps"], s["link_b_gbps"], s["b_emulated"], s["b_real_gbps"]) == \
        (400, 200, True, 220)
    assert (meta["link_a_gbps"], meta["link_b_gbps"], meta["real_gbps"]) == (400, 220, 200)
    # an option beats the manifest
    r2 = CliRunner().invoke(main, ["compare", str(cap_a), str(cap_b), "--requests-a", str(log_a),
                                   "--requests-b", str(log_b), "--b-emulated", "210", "--json"])
    assert json.loads(r2.stdout)["meta"]["link_b_gbps"] == 210


def test_report_takes_port_rates_from_the_manifests(tp2_400, tmp_path):
    """No setup recorded: A on a 400 Gb/s port, B on a real 200 Gb/s port (both twins)."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    _, (cap_a, log_a), _ = tp2_400
    cap_b, log_b = _record_run(tmp_path, "real200", _traffic(200, 109, 2, "200"),
                               "200 Gb/sec (4X HDR)", ["--label", "real 200 Gb/s"])
    out = tmp_path / "report"
    r = CliRunner().invoke(main, ["report", str(cap_a), str(cap_b), "--requests", str(log_a),
                                  "--requests", str(log_b), "-o", str(out), "--tp", "2"])
    assert r.exit_code == 0, r.output
    page = _page_text(out / "report.html")
    assert "A 400 Gb/s, B 200 Gb/s" in page
    assert "port rate in the manifest of B" in page
    row = _csv(out / "tables" / "comparison.csv")[0]
    prefill_a = float(row["per_token_a_bytes"]) * float(row["prompt_tokens"])
    assert float(row["estimate_s"]) == pytest.approx(prefill_a * 8 / 1e9 * (1 / 200 - 1 / 400),
                                                     rel=1e-3)
    assert "correction_to_real_s" not in row       # a real cable: nothing to correct


def test_simulate_capture_passes_the_setup_through(tmp_path):
    """simulate capture --preset/--tp/--port-gbps/--twin-gbps: the emulator plays that model and
    link, the manifest records the setup and the port rate, compare picks both up."""
    import json

    from click.testing import CliRunner

    from rdmascope.cli import main

    common = ["--scenario", "single4k", "--preset", "llama-3-70b", "--tp", "2",
              "--port-gbps", "400", "--twin-gbps", "220"]
    for name, link in (("a", "200"), ("b", "emulated100")):
        r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(tmp_path / name),
                                      "--link", link, *common])
        assert r.exit_code == 0, r.output
        # the first line says the link as played (it used to say 'link 200' for a 400 Gb/s port)
        first = r.output.splitlines()[0]
        assert first.endswith({"200": "link 200: a 400 Gb/s port, both twins (220 Gb/s each))",
                               "emulated100": "link emulated100: one twin of a 400 Gb/s port "
                                              "(~220 Gb/s, emulated))"}[link]), first
    r = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    s = obj["meta"]["setup"]
    assert (s["model"]["name"], s["tp"], s["link_a_gbps"], s["link_b_gbps"], s["b_real_gbps"]) \
        == ("llama-3-70b", 2, 400, 200, 220)
    t = obj["tests"][0]
    # the emulator sends the formula's bytes: 161 x 8,192 x 2 x 1.0 per prompt token
    assert t["per_token_a_bytes"] == pytest.approx(PER_TOKEN_TP2, rel=0.005)
    assert t["estimate_arch_s"] == pytest.approx(4096 * PER_TOKEN_TP2 * 8 / 1e9
                                                 * (1 / 220 - 1 / 400))
    from rdmascope.analysis.load import load_capture, port_rates_gbps

    assert set(port_rates_gbps(load_capture(tmp_path / "a").meta).values()) == {400.0}


def test_report_lays_several_configurations_side_by_side(tmp_path):
    """Three captures: each after the first is compared with the first; one capture: none."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    full, emu = fx / "sim-p2-200", fx / "sim-p2-emulated100"
    out = tmp_path / "three"
    r = CliRunner().invoke(main, ["report", str(full), str(emu), str(emu), "-o", str(out),
                                  "--label", "200 Gb/s", "--label", "emulated 100 Gb/s",
                                  "--label", "emulated again"])
    assert r.exit_code == 0, r.output
    page = _page_text(out / "report.html")
    assert "Comparison: 200 Gb/s → emulated 100 Gb/s" in page
    assert "Comparison: 200 Gb/s → emulated again" in page
    assert "Test P2: 200 Gb/s above emulated 100 Gb/s above emulated again" in page
    tables = sorted(p.name for p in (out / "tables").glob("comparison*.csv"))
    assert tables == ["comparison-emulated-100-gb-s.csv", "comparison-emulated-again.csv"]
    a, b = (_csv(out / "tables" / t)[0] for t in tables)
    assert a["estimate_s"] == b["estimate_s"]          # the same B twice, the same bound
    one = tmp_path / "one"
    r = CliRunner().invoke(main, ["report", str(full), "-o", str(one)])
    assert r.exit_code == 0, r.output
    assert "Comparison:" not in (one / "report.html").read_text()
    assert not list((one / "tables").glob("comparison*.csv"))
