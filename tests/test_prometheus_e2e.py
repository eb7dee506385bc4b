"""End to end with a real Prometheus server (Debian's ``prometheus``, started here on loopback):
it scrapes ``rdmascope record --metrics`` on a live ticking sysfs tree every second, and the PromQL
results are checked against the capture the recorder wrote and against ``peaks`` / ``rates`` of
the same span. Skips, saying why, where the server or prometheus_client is missing; ``.ci/run``
installs the server so CI runs it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from click.testing import CliRunner
from faults.conftest import Recorder, Ticker, make_tree

from rdmascope.capture import read_capture
from rdmascope.cli import main

pytest.importorskip("prometheus_client")
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus server is not "
                                "installed (apt-get install prometheus)")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def _query(port: int, expr: str) -> list:
    out = json.loads(_get(f"http://127.0.0.1:{port}/api/v1/query?"
                          + urllib.parse.urlencode({"query": expr})))
    assert out["status"] == "success", out
    return out["data"]["result"]


def _one(port: int, expr: str) -> float:
    res = _query(port, expr)
    assert len(res) == 1, (expr, res)
    return float(res[0]["value"][1])


@pytest.mark.slow
def test_promql_agrees_with_the_capture_peaks_and_rates(tmp_path):
    tree = make_tree(tmp_path / "sys")
    # mlx5_0 sends 3,000 units (12 kB) every 2 ms and, every 50 ticks, 80 times that
    ticker = Ticker(tree, {("mlx5_0", "port_xmit_data"): 3_000})
    n = {"k": 0}

    def run():
        while not ticker._halt.wait(ticker.period_s):
            n["k"] += 1
            for k, s in ticker.step.items():
                ticker.value[k] += s * (80 if n["k"] % 50 == 0 else 1)
                try:
                    ticker.tree.set(k[0], k[1], ticker.value[k])
                except OSError:
                    pass
    ticker.run = run
    mport, pport = _free_port(), _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: rdmascope\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{mport}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out = tmp_path / "cap"
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                if "Ready" in _get(f"http://127.0.0.1:{pport}/-/ready"):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("prometheus did not become ready: "
                        + (tmp_path / "prometheus.log").read_text()[-2000:])
        ticker.start()
        try:
            rec = Recorder(out, tree.root, "--duration", "10s", "--metrics", f"127.0.0.1:{mport}")
            assert rec.wait(60) == 0, rec.stderr
        finally:
            ticker.stop()
        time.sleep(1.5)  # the scrape after the end fails: the last good one is kept
        sel = 'device="mlx5_0",direction="tx",source="infiniband"'
        last = _one(pport, "max_over_time(rdmascope_last_sweep[5m])")
        nbytes = _one(pport, f"max_over_time(rdmascope_bytes_total{{{sel}}}[5m])")
        peak1 = _one(pport, f'max_over_time(rdmascope_peak_bytes_per_second{{{sel},'
                            f'window="1ms"}}[5m]) * 8 / 1e9')
        peak5 = _one(pport, f'max_over_time(rdmascope_peak_bytes_per_second{{{sel},'
                            f'window="5ms"}}[5m]) * 8 / 1e9')
        assert _one(pport, "count(up{job=\"rdmascope\"} == 1) or vector(0)") >= 0
        scrapes = _one(pport, "count_over_time(rdmascope_last_sweep[5m])")
    finally:
        prom.terminate()
        try:
            prom.wait(20)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        log.close()
    assert scrapes >= 5  # it really scraped the live recording

    # bytes: to the byte, the capture's counter difference up to the last scraped sweep
    raw = read_capture(out)
    counters = raw.manifest["counters"]
    (cid,) = [i for i, c in enumerate(counters)
              if c["device"] == "mlx5_0" and c["name"] == "port_xmit_data"]
    t = raw.table.to_pydict()
    rows = sorted((sw, tb + dur // 2, val) for c, sw, tb, dur, val, st in
                  zip(t["counter_id"], t["sweep"], t["t_before_ns"], t["read_duration_ns"],
                      t["value"], t["status"], strict=True)
                  if c == cid and st == 0 and sw <= last)
    assert nbytes == (rows[-1][2] - rows[0][2]) * 4 > 1e6
    t_start = raw.manifest["start"]["monotonic_ns"]
    span_to = (rows[-1][1] - t_start) / 1e9
    # rates of the same span (1 ms windows, from the capture start to the last scraped reading)
    r = CliRunner().invoke(main, ["rates", str(out), "--window", "10ms", "--to",
                                  f"{span_to:.6f}", "--json"])
    assert r.exit_code == 0, r.output
    got = sum((w.get("mlx5_0/tx_gbps") or 0.0) for w in json.loads(r.output)["rates"]) * 1e9 \
        * 0.01 / 8
    assert got == pytest.approx(nbytes, rel=0.01)
    # peaks of the same span: the gauge applies peaks' rule on peaks' grid, so its maximum is
    # peaks' 1 ms / 5 ms peak of the windows it had evaluated: those ending by the second-last
    # scraped reading (its last reading's fate waits for the next one). So it lies between
    # peaks up to that reading and peaks up to the last scraped one, both exact.
    def peak(to_ns: int) -> dict:
        p = CliRunner().invoke(main, ["peaks", str(out), "--windows", "1ms,5ms", "--to",
                                      f"{(to_ns - t_start) / 1e9:.9f}", "--json"])
        assert p.exit_code == 0, p.output
        return {(row["series"], row["window"]): row["peak_gbps"]
                for row in json.loads(p.output)["peaks"]}

    lo, hi = peak(rows[-2][1]), peak(rows[-1][1])
    for got, w in ((peak1, "1 ms"), (peak5, "5 ms")):
        k = ("mlx5_0/tx", w)
        assert lo[k] * (1 - 1e-9) <= got <= hi[k] * (1 + 1e-9), (w, got, lo[k], hi[k])
    assert peak1 > peak5 > 0  # the bursts were seen
