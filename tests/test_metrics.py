"""``rdmascope record --metrics``: the Prometheus endpoint scraped over HTTP on loopback while the
real recorder runs, its values checked against the capture it writes.

The expected values are recomputed here from the capture's readings: bytes since the start =
(value at the last exposed sweep - first value) x 4 with plain Python; the 1 ms / 5 ms peaks and
the 1 ms window histogram from the analysis' own windows of the same readings (``rebin_view``
on the capture's grid, the windows ``peaks`` headlines), a second implementation of the rule
the gauges apply as the readings arrive.
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.request

import pytest
from faults.conftest import Recorder, Ticker, make_tree
from rdmascope.analysis.curve import HEADLINE_EXCLUDE
from rdmascope.analysis.intervals import byte_intervals
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.peaks import rebin_view

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
            by_counter.setdefault(cid, []).append((sw, tb + dur // 2, val, dur))
    t_start = raw.manifest["start"]["monotonic_ns"]
    iv = byte_intervals(load_capture(out))
    checked_peak = False
    for cid, c in enumerate(counters):
        lab = {"device": c["device"], "port": str(c["port"]), "direction": c["direction"],
               "source": c["source"], "counter": c["name"], "netdev": "", "rdma_device": ""}
        rows = sorted(by_counter[cid])
        exp_bytes = (rows[-1][2] - rows[0][2]) * 4
        assert c["bytes_per_unit"] == 4
        assert _get(m, "rdmascope_bytes_total", **lab) == exp_bytes
        # the analysis' windows of the same readings (a second implementation of the rule):
        # the gauge has evaluated the windows ending by the second-last reading it was given
        end = rows[-2][1]
        cut = iv[(iv["counter_id"] == cid) & (iv["t1_ns"] <= rows[-1][1])]
        for w, label in ((1_000_000, "1ms"), (5_000_000, "5ms")):
            b, q = rebin_view(cut, w, origin_ns=t_start, start_ns=t_start, end_ns=end)
            col = f"{c['device']}/{c['direction']}"
            inside = (b.index.to_numpy() + w <= end)
            counted = inside & ((q[col].to_numpy() & HEADLINE_EXCLUDE) == 0)
            gbps = b[col].to_numpy()[counted] * 8 / w
            assert _get(m, "rdmascope_over_line_windows_total", **lab, window=label) == 0
            if w == 1_000_000:
                assert _get(m, "rdmascope_window_rate_bytes_per_second_count", **lab) == \
                    len(gbps)
                assert _get(m, "rdmascope_window_rate_bytes_per_second_sum", **lab) == \
                    pytest.approx(gbps.sum() * 1.25e8, rel=1e-9)
                assert _get(m, "rdmascope_window_rate_bytes_per_second_bucket", **lab,
                            le="1.25e+07") == int((gbps <= 0.1).sum())
            if gbps.max() > 0:
                assert _get(m, "rdmascope_peak_bytes_per_second", **lab, window=label) == \
                    pytest.approx(gbps.max() * 1.25e8, rel=1e-9)
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


def _sm(counters, readings, interval=1_000_000, **kw):
    """A SamplerMetrics fed one batch: ``readings`` = per sweep, per counter (t_before_ns,
    read_duration_ns, value)."""
    from rdmascope.sampler.metrics import SamplerMetrics
    from rdmascope.sampler.reader import SweepBuffers

    sm = SamplerMetrics(counters, interval, start_ns=0, **kw)
    buf = SweepBuffers()
    for k, sweep in enumerate(readings):
        buf.sweep_start_ns.append(sweep[0][0])
        for i, (tb, dur, val) in enumerate(sweep):
            for col, v in ((buf.counter_id, i), (buf.sweep, k), (buf.t_before_ns, tb),
                           (buf.read_duration_ns, dur), (buf.value, val), (buf.status, 0)):
                col.append(v)
    sm.update(buf)
    return sm


def _samples(sm):
    out = {}
    for fam in sm.collect():
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v)))] = s.value
    return out


TX = {"source": "infiniband", "device": "rocep1s0f1", "port": 1, "name": "port_xmit_data",
      "bytes_per_unit": 4, "direction": "tx"}


def test_peak_gauges_apply_the_headline_rule():
    """The gauges re-bin onto peaks' fixed grid from the start (origin 0 here): a 59.9 us
    interval holding 4.43 MB read 592 Gb/s on the old per-interval 1 ms gauge; on the grid its
    bytes sit in one 1 ms window with their neighbours' (35.7 Gb/s). A 15 MB interval inside one
    window is over the 100 Gb/s line rate beyond its timing uncertainty: kept out and counted.
    Readings' instants are t_before + 500 ns (a 1 us read bracket)."""
    ms = 1_000_000
    t, v, rows = 0, 0, []
    for units in [12_500] * 20:  # 50 kB per ms: 0.4 Gb/s
        rows.append([(t, 1_000, v)])
        t += ms
        v += units
    # a late sweep, then one 59.9 us later holding 4.43 MB (1,107,500 units)
    t += 500_000
    rows.append([(t, 1_000, v)])
    t += 59_900
    v += 1_107_500
    rows.append([(t, 1_000, v)])
    # back on schedule; one regular 1 ms interval holds 18.75 MB (4,687,500 units)
    for units in [12_500] * 10 + [4_687_500] + [12_500] * 10:
        t += ms
        v += units
        rows.append([(t, 1_000, v)])
    # two late sweeps: 15 MB (3,750,000 units) between instants 42.2005 and 42.8005 ms
    for tb, units in [(42_200_000, 12_500), (42_800_000, 3_750_000)] + \
            [(43_559_900 + k * ms, 12_500) for k in range(8)]:
        v += units
        rows.append([(tb, 1_000, v)])
    sm = _sm([TX], rows, line_gbps={"rocep1s0f1": 100.0})
    m = _samples(sm)
    lab = (("counter", "port_xmit_data"), ("device", "rocep1s0f1"), ("direction", "tx"),
           ("port", "1"), ("source", "infiniband"))

    def gauge(m, name, w):
        return m[(name, tuple(sorted(lab + (("window", w),))))]

    # window [31, 32) ms: the 18.75 MB interval runs 30.5604 -> 31.5604 ms, so 0.5604 of it,
    # plus 0.4396 of the next 50 kB
    peak1 = (0.5604 * 18_750_000 + 0.4396 * 50_000) * 8 / 1e6  # Gb/s
    assert gauge(m, "rdmascope_peak_bytes_per_second", "1ms") * 8 / 1e9 == \
        pytest.approx(peak1, rel=1e-9)
    # window [42, 43) ms: the whole 15 MB plus 0.2005/0.6401 and 0.1995/0.7599 of the 50 kB
    # intervals either side = 120.23 Gb/s; its fewest bytes (edges moved in by 0.1 ms + 500 ns)
    # still hold the 15 MB: 120 Gb/s > 100, kept out
    assert gauge(m, "rdmascope_over_line_windows_total", "1ms") == 1
    # 5 ms: [30, 35) holds the 18.75 MB and 0.4396 + 3 + 0.5604 of 50 kB intervals -> 30.32 Gb/s
    # ([40, 45) holds 15.25 MB: 24.4 Gb/s)
    assert gauge(m, "rdmascope_peak_bytes_per_second", "5ms") * 8 / 1e9 == \
        pytest.approx((18_750_000 + 4 * 50_000) * 8 / 5e6, rel=1e-9)
    assert gauge(m, "rdmascope_over_line_windows_total", "5ms") == 0
    # without a line rate nothing is judged over it: the 15 MB window is the 1 ms peak
    m = _samples(_sm([TX], rows))
    over = (15_000_000 + 50_000 * (200_500 / 640_100 + 199_500 / 759_900)) * 8 / 1e6
    assert gauge(m, "rdmascope_peak_bytes_per_second", "1ms") * 8 / 1e9 == \
        pytest.approx(over, rel=1e-9)
    # the 59.9 us interval's window [20, 21) ms: 1/3 of the 1.5 ms interval before it (50 kB),
    # the 4.43 MB, and 0.4396 of the next 50 kB: 35.7 Gb/s, counted in the 25-50 Gb/s bucket
    hist = {dict(k[1]).get("le"): val for k, val in m.items()
            if k[0] == "rdmascope_window_rate_bytes_per_second_bucket"}
    assert hist["6.25e+09"] - hist["3.125e+09"] == 1  # (25, 50] Gb/s: the 35.7 Gb/s window alone


def test_netdev_series_are_labelled_as_netdevs():
    nd = {"source": "netdev", "device": "rocep1s0f1", "netdev": "enp1s0f1np1", "port": None,
          "name": "tx_bytes", "bytes_per_unit": 1, "direction": "tx"}
    rows = [[(k * 1_000_000, 1_000, 1000 * k), (k * 1_000_000, 1_000, 10 * k)]
            for k in range(10)]
    m = _samples(_sm([TX, nd], rows))
    series = [dict(k[1]) for k in m if k[0] == "rdmascope_bytes_total"]
    rdma = [s for s in series if s["source"] == "infiniband"]
    net = [s for s in series if s["source"] == "netdev"]
    assert rdma == [{"counter": "port_xmit_data", "device": "rocep1s0f1", "direction": "tx",
                     "port": "1", "source": "infiniband"}]
    assert net == [{"counter": "tx_bytes", "netdev": "enp1s0f1np1", "rdma_device": "rocep1s0f1",
                    "direction": "tx", "source": "netdev"}]


def _exposition():
    from prometheus_client import CollectorRegistry, generate_latest

    nd = {"source": "netdev", "device": "rocep1s0f1", "netdev": "enp1s0f1np1", "port": None,
          "name": "tx_bytes", "bytes_per_unit": 1, "direction": "tx"}
    rows = [[(k * 1_000_000, 1_000, 1000 * k), (k * 1_000_000, 1_000, 10 * k)]
            for k in range(10)]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_sm([TX, nd], rows, line_gbps={"rocep1s0f1": 200.0}))
    return generate_latest(reg).decode()


def test_promtool_check_metrics_passes():
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=_exposition(), text=True,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboard_bucket_bound_matches_prometheus_2_and_3():
    """The share-above-100-Gb/s panel matched le="100", which Prometheus 3 writes "100.0"; its
    bound (1.25e10 bytes/s) must match as the exporter writes it and as either server stores it."""
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[1] / "dashboards" /
                       "grafana-rdmascope.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"] if "le=" in t["expr"]]
    assert exprs
    written = set(re.findall(r'le="([^"]+)"', _exposition()))
    assert "1.25e+10" in written
    for e in exprs:
        (rx,) = re.findall(r'le=~"([^"]+)"', e)
        for stored in ("1.25e+10", "12500000000", "12500000000.0"):  # Prometheus 2 / 3 forms
            assert re.fullmatch(rx, stored), (rx, stored)
        assert not re.fullmatch(rx, "1.5e+10") and not re.fullmatch(rx, "1.25e+09")
