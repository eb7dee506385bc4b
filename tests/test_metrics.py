"""``rdmascope record --metrics``: the Prometheus endpoint scraped over HTTP on loopback while the
real recorder runs, its values checked against the capture it writes.

The expected values are recomputed here from the capture's readings with plain Python loops (a
second implementation): bytes since the start = (value at the last exposed sweep - first value)
x 4; the 1 ms peak = the highest single-interval rate, the 5 ms peak the highest over five
consecutive intervals, both between reading instants (middle of each read bracket).
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.request

import pytest
from faults.conftest import Recorder, Ticker, make_tree

from rdmascope.capture import read_capture

prom = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items())))
            out[key] = s.value
    return out


def _get(m, name, **labels):
    return m[(name, tuple(sorted(labels.items())))]


def test_scraped_metrics_match_the_capture(tmp_path):
    tree = make_tree(tmp_path / "sys")
    # mlx5_0 sends 3,000 units (12 kB) every 2 ms and, every 50 ticks, a 250,000-unit burst
    ticker = Ticker(tree, {("mlx5_0", "port_xmit_data"): 3_000, ("mlx5_1", "port_rcv_data"): 7})
    burst = {"n": 0}
    orig = ticker.run

    def run():
        while not ticker._halt.wait(ticker.period_s):
            burst["n"] += 1
            for k, s in ticker.step.items():
                ticker.value[k] += s * (80 if k[0] == "mlx5_0" and burst["n"] % 50 == 0 else 1)
                try:
                    ticker.tree.set(k[0], k[1], ticker.value[k])
                except OSError:
                    pass
    ticker.run = run
    del orig
    port = _free_port()
    out = tmp_path / "cap"
    ticker.start()
    try:
        rec = Recorder(out, tree.root, "--duration", "6s", "--metrics", f"127.0.0.1:{port}")
        try:
            rec.wait_sampling()
            deadline = time.monotonic() + 20
            m = None
            while time.monotonic() < deadline:
                try:
                    m = _scrape(port)
                    if _get(m, "rdmascope_sweeps_taken_total") >= 1000:
                        break
                except OSError:
                    pass
                time.sleep(0.2)
            assert m is not None, rec.stderr
            assert rec.wait(30) == 0, rec.stderr
        finally:
            rec.kill()
    finally:
        ticker.stop()
    # the endpoint went away with the recorder
    with pytest.raises(OSError):
        _scrape(port)

    raw = read_capture(out)
    counters = raw.manifest["counters"]
    t = raw.table.to_pydict()
    last = int(_get(m, "rdmascope_last_sweep"))
    sweeps = sorted({s for s in t["sweep"] if s <= last})
    assert _get(m, "rdmascope_sweeps_taken_total") == len(sweeps)
    assert _get(m, "rdmascope_sweeps_missed_total") == last + 1 - len(sweeps)
    by_counter: dict[int, list] = {}
    for cid, sw, tb, dur, val, st in zip(t["counter_id"], t["sweep"], t["t_before_ns"],
                                         t["read_duration_ns"], t["value"], t["status"],
                                         strict=True):
        if sw <= last and st == 0:
            by_counter.setdefault(cid, []).append((sw, tb + dur // 2, val))
    interval = raw.manifest["interval_ns"]
    checked_peak = False
    for cid, c in enumerate(counters):
        lab = {"device": c["device"], "port": str(c["port"]), "direction": c["direction"],
               "source": c["source"], "counter": c["name"]}
        rows = sorted(by_counter[cid])
        exp_bytes = (rows[-1][2] - rows[0][2]) * 4
        assert c["bytes_per_unit"] == 4
        assert _get(m, "rdmascope_bytes_total", **lab) == exp_bytes
        ivs = [(b[1] - a[1], (b[2] - a[2]) * 4) for a, b in zip(rows[:-1], rows[1:], strict=True)]
        r1 = [db * 8 / dt for dt, db in ivs if dt <= 1.5 * interval]
        assert _get(m, "rdmascope_rate_1ms_gbps_count", **lab) == len(r1)
        assert _get(m, "rdmascope_rate_1ms_gbps_sum", **lab) == pytest.approx(sum(r1), rel=1e-9)
        assert _get(m, "rdmascope_rate_1ms_gbps_bucket", **lab, le="0.1") == \
            sum(1 for r in r1 if r <= 0.1)
        if max(r1) > 0:
            assert _get(m, "rdmascope_peak_gbps", **lab, window="1ms") == \
                pytest.approx(max(r1), rel=1e-9)
            r5 = [sum(db for _, db in ivs[k:k + 5]) * 8 / sum(dt for dt, _ in ivs[k:k + 5])
                  for k in range(len(ivs) - 4)
                  if sum(dt for dt, _ in ivs[k:k + 5]) <= 5.5 * interval]
            assert _get(m, "rdmascope_peak_gbps", **lab, window="5ms") == \
                pytest.approx(max(r5), rel=1e-9)
            checked_peak = checked_peak or c["device"] == "mlx5_0"
    assert checked_peak  # the bursty counter was really checked
    lat = _get(m, "rdmascope_sweep_lateness_seconds_count")
    assert lat == len(sweeps)


def test_metrics_without_prometheus_client_is_one_clear_error(tmp_path):
    import subprocess

    tree = make_tree(tmp_path / "sys")
    code = ("import sys; sys.modules['prometheus_client'] = None\n"
            "from rdmascope.cli import main\n"
            f"main(['record', '-o', {str(tmp_path / 'cap')!r}, '--sysfs-root', "
            f"{str(tree.root)!r}, '--duration', '1s', '--no-status', '--metrics', '9'],"
            " prog_name='rdmascope')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 4
    assert r.stderr.strip().splitlines()[-1].startswith("Error: --metrics needs prometheus_client")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "cap").exists()  # refused before anything was written


@pytest.mark.parametrize("addr, msg", [("notaport", "expected PORT"), ("70000", "1..65535"),
                                       ("[::1", "expected PORT")])
def test_bad_metrics_address_is_refused(tmp_path, addr, msg):
    from click.testing import CliRunner

    from rdmascope.cli import main

    tree = make_tree(tmp_path / "sys")
    r = CliRunner().invoke(main, ["record", "-o", str(tmp_path / "cap"), "--sysfs-root",
                                  str(tree.root), "--duration", "1s", "--no-status",
                                  "--metrics", addr])
    assert r.exit_code == 4 and msg in r.output and r.output.startswith("Error:")
    assert not (tmp_path / "cap").exists()


def test_port_in_use_is_refused_before_writing(tmp_path):
    from click.testing import CliRunner

    from rdmascope.cli import main

    tree = make_tree(tmp_path / "sys")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = CliRunner().invoke(main, ["record", "-o", str(tmp_path / "cap"), "--sysfs-root",
                                      str(tree.root), "--duration", "1s", "--no-status",
                                      "--metrics", f"127.0.0.1:{port}"])
    assert r.exit_code == 4 and "cannot listen" in r.output, r.output
    assert not (tmp_path / "cap").exists()


def test_grafana_dashboard_queries_only_exposed_metrics_and_labels():
    """Every series a dashboard query names is one the endpoint exposes, with labels it has."""
    import json
    import re
    from pathlib import Path

    from rdmascope.sampler.metrics import SamplerMetrics
    from rdmascope.sampler.reader import SweepBuffers

    counters = [{"source": "infiniband", "device": "d", "port": 1, "name": "port_xmit_data",
                 "bytes_per_unit": 4, "direction": "tx"}]
    sm = SamplerMetrics(counters, 1_000_000, start_ns=0)
    buf = SweepBuffers()
    for k in range(10):
        buf.sweep_start_ns.append(k * 1_000_000)
        for col, v in ((buf.counter_id, 0), (buf.sweep, k), (buf.t_before_ns, k * 1_000_000),
                       (buf.read_duration_ns, 0), (buf.value, 1000 * k), (buf.status, 0)):
            col.append(v)
    sm.update(buf)
    exposed: dict[str, set] = {}
    for fam in sm.collect():
        for s in fam.samples:
            exposed.setdefault(s.name, set()).update(s.labels)
    dash = json.loads((Path(__file__).resolve().parents[1] / "dashboards" /
                       "grafana-rdmascope.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs.append(dash["templating"]["list"][0]["query"])
    assert len(exprs) >= 7
    for e in exprs:
        for name, sel in re.findall(r"(rdmascope_[a-z0-9_]+)(\{[^}]*\})?", e):
            assert name in exposed, f"{name} is not exposed (query: {e})"
            for label in re.findall(r"([a-z_]+)\s*=~?", sel or ""):
                assert label == "instance" or label in exposed[name], (name, label, e)
        for label in re.findall(r"by \(([^)]*)\)", e):
            for lab in (x.strip() for x in label.split(",")):
                assert lab == "instance" or any(lab in ls for ls in exposed.values()), (lab, e)
