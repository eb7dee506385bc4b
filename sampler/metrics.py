"""``rdmascope record --metrics ADDR:PORT``: a burst-aware Prometheus endpoint.

A per-second exporter cannot see a 3 ms prefill burst at line rate. This endpoint exposes what
the 1 ms sampler sees, through ``prometheus_client`` (an optional extra, imported only when
``--metrics`` is given; the lean sampler install does not need it):

Names and units follow Prometheus' naming guide (base units: bytes, seconds; ``promtool check
metrics`` passes, ``tests/test_metrics.py``). Labels: an RDMA port's series carry
``device`` (the RDMA device), ``port``, ``direction``, ``source="infiniband"`` and ``counter``; a
netdev's series (``record --netdev-stats``) carry ``netdev`` (e.g. ``enp1s0f1np1``) and the RDMA
device it belongs to in ``rdma_device``, never ``device``, so ``sum by (device)`` over RDMA
ports never mixes in a netdev's bytes.

- ``rdmascope_bytes_total`` (counter): bytes moved since the recording started, the counter's raw
  steps x its ``bytes_per_unit`` (4 for port_xmit_data / port_rcv_data, never x lanes). A step
  that goes backwards (a counter reset) adds nothing and is counted in ``rdmascope_resets_total``;
  unavailable readings add nothing and are counted in ``rdmascope_unavailable_readings_total``.
- ``rdmascope_peak_bytes_per_second{...,window="1ms"|"5ms"}`` (gauge): the highest rate of a
  1 ms (5 ms) window among the windows of the last ``recent_s`` seconds (60 by default, so a
  scrape every minute misses no burst), by the rule of ``rdmascope peaks`` on the same grid
  (``gridpeaks``): windows [start + k x width, start + (k+1) x width) from the recording's
  start, bytes from the piecewise-linear cumulative curve through the readings; a window that
  holds an unknown span (an unreadable reading, a reset), has a gap of missed sweeps across an
  edge, or whose fewest possible bytes (each reading's instant moved by ``INSTANT_UNC_NS`` plus
  half its read bracket) exceed the device's line rate (``plausibility.line_ceilings``: port
  rate, record --emulated, PCIe link) is kept out, the last counted in
  ``rdmascope_over_line_windows_total{...,window}``; a window above the line rate within that
  uncertainty counts at the line rate. So ``max_over_time`` of the gauge and ``rdmascope peaks
  --windows 1ms,5ms`` of the same span agree. In Gb/s (10^9 bit/s) the gauge is x 8 / 10^9 (the
  dashboard's panels; a Gb/s name fails promtool's base-unit lint).
- ``rdmascope_window_rate_bytes_per_second{...}`` (histogram): the rate of every 1 ms window
  counted by that rule since the start, in bytes/s buckets (``RATE_BUCKETS_GBPS`` x 1.25e8):
  how much of the time the link spends near line rate, as ``rates --window 1ms`` would count it.
- Sampler health: ``rdmascope_sweeps_taken_total``, ``rdmascope_sweeps_missed_total`` (deadlines
  passed without a sweep), ``rdmascope_sweep_lateness_seconds`` (histogram of sweep start -
  deadline), ``rdmascope_last_sweep`` (the last sweep index exposed), ``rdmascope_sampler_info``.

State is updated once per flush batch (every 0.25 s, in the writer thread) with numpy over the
whole batch, never per reading; the 1 ms loop is untouched. A scrape reads a consistent copy.

The HTTP server (``MetricsServer``) serves at most ``MAX_CONNECTIONS`` connections at once (one
beyond is closed at once, unanswered) and closes a connection idle for ``IDLE_TIMEOUT_S``, so
idle or half-sent requests cannot pile up threads beside the sampler. It speaks plain HTTP with
no authentication: keep the default loopback address, or put a TLS/auth reverse proxy (nginx,
Caddy, or Prometheus' exporter-toolkit ``--web.config`` style proxy) in front when scraping from
another host (docs/ARCHITECTURE.md, "Durability and file safety").
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np
from rdmascope.sampler.gridpeaks import GridWindows
from rdmascope.sampler.reader import SweepBuffers

#: Bucket upper bounds of the 1 ms rate histogram, Gb/s (a 400 Gb/s port fits).
RATE_BUCKETS_GBPS = (0.1, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 125.0, 150.0, 175.0, 200.0,
                     250.0, 300.0, 400.0)
#: Bucket upper bounds of the sweep lateness histogram, seconds.
LATENESS_BUCKETS_S = (1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 0.05)
#: Default span of the peak gauges, seconds.
RECENT_S = 60.0
#: Bytes/s of 1 Gb/s (10^9 bit/s).
BYTES_PER_S_PER_GBPS = 1e9 / 8
#: The peak gauges' window widths, ns (their ``window`` label: "1ms", "5ms").
WINDOWS_NS = (1_000_000, 5_000_000)
#: Label names of every per-counter series (unused ones are empty, i.e. absent in Prometheus).
LABELS = ["device", "port", "rdma_device", "netdev", "direction", "source", "counter"]


class MetricsError(Exception):
    """The endpoint cannot start (bad address, port in use, prometheus_client missing)."""


def parse_address(text: str) -> tuple[str, int]:
    """Parse ``PORT``, ``HOST:PORT`` or ``[V6]:PORT``; a bare port listens on 127.0.0.1 only.

    Raises ``MetricsError`` for anything else or a port outside 1..65535.
    """
    t = str(text).strip()
    host = "127.0.0.1"
    if t.startswith("["):
        h, sep, p = t[1:].partition("]:")
        if not sep:
            raise MetricsError(f"--metrics {text}: expected PORT, HOST:PORT or [IPv6]:PORT")
        host, t = h, p
    elif ":" in t:
        host, _, t = t.rpartition(":")
        host = host or "127.0.0.1"
    try:
        port = int(t)
    except ValueError:
        raise MetricsError(f"--metrics {text}: expected PORT, HOST:PORT or [IPv6]:PORT") from None
    if not 1 <= port <= 65535:
        raise MetricsError(f"--metrics {text}: port must be 1..65535")
    return host, port


class SamplerMetrics:
    """The exporter's state and its ``prometheus_client`` collector.

    ``counters``: the capture's counter descriptors (manifest order = column order of a sweep);
    ``start_ns``: the schedule start (deadline of sweep 0, CLOCK_MONOTONIC ns); ``interval_ns``.
    ``line_gbps``: device -> its line rate in Gb/s (``plausibility.line_ceilings``); a device
    without one is never judged over line rate. ``update(buf)`` once per flush batch;
    ``collect()`` is called by the HTTP thread.
    """

    def __init__(self, counters: list[dict[str, Any]], interval_ns: int, *,
                 start_ns: int | None = None, recent_s: float = RECENT_S,
                 line_gbps: dict[str, float | None] | None = None):
        self.n = len(counters)
        self.interval_ns = int(interval_ns)
        self.start_ns = start_ns
        self.recent_ns = int(recent_s * 1e9)
        self.recent_s = recent_s
        self.labels = [_labels(c) for c in counters]
        lg = line_gbps or {}
        self.line_gbps = np.array([float(lg.get(str(c.get("device"))) or np.nan)
                                   for c in counters], np.float64)
        self.bpu = np.array([int(c.get("bytes_per_unit") or 0) for c in counters], np.int64)
        self.rated = [i for i, c in enumerate(counters)
                      if c.get("bytes_per_unit") and c.get("direction") in ("tx", "rx")]
        self._lock = threading.Lock()
        self.bytes_total = np.zeros(self.n, np.float64)  # bytes as float: exact below 2^53
        self.resets = np.zeros(self.n, np.int64)
        self.unavailable = np.zeros(self.n, np.int64)
        self.rate_hist = np.zeros((self.n, len(RATE_BUCKETS_GBPS) + 1), np.int64)
        self.rate_sum = np.zeros(self.n, np.float64)
        self.late_hist = np.zeros(len(LATENESS_BUCKETS_S) + 1, np.int64)
        self.late_sum = 0.0
        self.taken = 0
        self.last_sweep = -1
        self.over_line = np.zeros((self.n, 2), np.int64)  # windows kept out: 1 ms, 5 ms
        self._last: list[int | None] = [None] * self.n  # last valid raw value per counter
        self._grids: list[tuple[GridWindows, GridWindows]] | None = None  # 1 ms, 5 ms
        self._peaks: deque = deque()  # (batch end ns, peak1 array, peak5 array)

    def _grid(self, i: int, origin_ns: int) -> tuple[GridWindows, GridWindows]:
        if self._grids is None:
            self._grids = [None] * self.n  # type: ignore[list-item]
        if self._grids[i] is None:
            self._grids[i] = tuple(GridWindows(origin_ns, w, self.interval_ns, int(self.bpu[i]),
                                               self.line_gbps[i]) for w in WINDOWS_NS)
        return self._grids[i]

    # -- the writer thread, once per flush batch ------------------------------------------
    def update(self, buf: SweepBuffers) -> None:
        """Account for one flush batch (all its sweeps) with numpy; O(batch), no per-reading
        Python work beyond a loop over the counters."""
        nsw = len(buf.sweep_start_ns)
        if not nsw or not self.n:
            return
        n = self.n
        w = buf.width(n)  # counters added after the start: not served (the first n are)
        sweeps = np.frombuffer(buf.sweep, dtype=np.int64).reshape(-1, w)[:, 0]
        starts = np.frombuffer(buf.sweep_start_ns, dtype=np.int64)
        vals = np.frombuffer(buf.value, dtype=np.uint64).reshape(-1, w)[:, :n]
        st = np.frombuffer(buf.status, dtype=np.uint8).reshape(-1, w)[:, :n]
        tb = np.frombuffer(buf.t_before_ns, dtype=np.int64).reshape(-1, w)[:, :n]
        dur = np.frombuffer(buf.read_duration_ns, dtype=np.uint32).reshape(-1, w)[:, :n]
        inst = tb + (dur // 2).astype(np.int64)  # each reading's instant (analysis.load)
        half = (dur.astype(np.int64) + 1) // 2  # its half read bracket
        late = None
        if self.start_ns is not None:
            late = (starts - (self.start_ns + sweeps * self.interval_ns)) / 1e9
        origin = int(self.start_ns) if self.start_ns is not None else int(inst.min())
        peak1 = np.full(n, np.nan)
        peak5 = np.full(n, np.nan)
        upd: dict[int, tuple] = {}
        for i in range(n):
            ok = st[:, i] == 0
            unav = int((~ok).sum())
            v = vals[ok, i]
            last = self._last[i]
            if last is not None:
                v = np.concatenate([np.array([last], np.uint64), v])
            new_last = int(v[-1]) if len(v) else last
            up = v[1:] >= v[:-1]  # a step down is a reset: no bytes
            add = float((np.where(up, v[1:], v[:-1]) - v[:-1]).astype(np.float64).sum()
                        * float(self.bpu[i]))
            res = [None, None]
            if i in self.rated:
                for g, grid in enumerate(self._grid(i, origin)):
                    res[g] = grid.feed(inst[:, i], vals[:, i], half[:, i], ok)
            upd[i] = (unav, add, int((~up).sum()), new_last, res)
        with self._lock:
            self.taken += nsw
            self.last_sweep = int(sweeps[-1])
            if late is not None:
                self.late_hist += np.bincount(np.searchsorted(LATENESS_BUCKETS_S, late),
                                              minlength=len(LATENESS_BUCKETS_S) + 1)
                self.late_sum += float(late.sum())
            for i, (unav, add, resets, new_last, res) in upd.items():
                self.unavailable[i] += unav
                self.bytes_total[i] += add
                self.resets[i] += resets
                self._last[i] = new_last
                if res[0] is None:
                    continue
                (r1, over1), (r5, over5) = res
                self.over_line[i, 0] += over1
                self.over_line[i, 1] += over5
                self.rate_hist[i] += np.bincount(np.searchsorted(RATE_BUCKETS_GBPS, r1),
                                                 minlength=len(RATE_BUCKETS_GBPS) + 1)
                self.rate_sum[i] += float(r1.sum()) * BYTES_PER_S_PER_GBPS
                if r1.size:
                    peak1[i] = float(r1.max())
                if r5.size:
                    peak5[i] = float(r5.max())
            now = int(starts[-1])
            self._peaks.append((now, peak1, peak5))
            while self._peaks and self._peaks[0][0] < now - self.recent_ns:
                self._peaks.popleft()

    # -- the HTTP thread ----------------------------------------------------------------
    def collect(self):
        """Yield the metric families (``prometheus_client`` collector protocol)."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        with self._lock:
            bytes_total = self.bytes_total.copy()
            resets, unav = self.resets.copy(), self.unavailable.copy()
            rate_hist, rate_sum = self.rate_hist.copy(), self.rate_sum.copy()
            late_hist, late_sum = self.late_hist.copy(), self.late_sum
            taken, last_sweep = self.taken, self.last_sweep
            peaks = list(self._peaks)
            over_line = self.over_line.copy()
        names = LABELS
        b = CounterMetricFamily("rdmascope_bytes", "Bytes moved since the recording started "
                                "(counter steps x bytes_per_unit; x4 for port_*_data).",
                                labels=names, unit="bytes")
        r = CounterMetricFamily("rdmascope_resets", "Steps of a byte counter that went backwards "
                                "(a reset; they add no bytes).", labels=names)
        u = CounterMetricFamily("rdmascope_unavailable_readings", "Readings that failed or did "
                                "not parse (they add no bytes).", labels=names)
        for i, lab in enumerate(self.labels):
            if i in self.rated:
                b.add_metric(list(lab), float(bytes_total[i]))
                r.add_metric(list(lab), float(resets[i]))
            u.add_metric(list(lab), float(unav[i]))
        yield b
        yield r
        yield u
        rule = ("windows on the capture's grid; unknown, gap-crossed and over-line windows kept "
                "out (the headline rule of rdmascope peaks)")
        pk = GaugeMetricFamily(
            "rdmascope_peak_bytes_per_second", f"Highest rate of a 1 ms or 5 ms window "
            f"among the windows of the last {self.recent_s:g} s, bytes/s; {rule}.",
            labels=[*names, "window"])
        ol = CounterMetricFamily(
            "rdmascope_over_line_windows", "Windows of 1 ms or 5 ms whose rate "
            "exceeds the device's line rate by more than their timing uncertainty allows: kept "
            "out of the peak gauges.", labels=[*names, "window"])
        h = HistogramMetricFamily("rdmascope_window_rate_bytes_per_second", "Rate of each 1 ms "
                                  "window since the start, bytes/s "
                                  f"({rule}).", labels=names)
        for i in self.rated:
            lab = list(self.labels[i])
            for w, col in (("1ms", 1), ("5ms", 2)):
                vals = [p[col][i] for p in peaks if not np.isnan(p[col][i])]
                if vals:
                    pk.add_metric([*lab, w], float(max(vals)) * BYTES_PER_S_PER_GBPS)
                ol.add_metric([*lab, w], float(over_line[i, col - 1]))
            cum = np.cumsum(rate_hist[i])
            bk = [(f"{ub * BYTES_PER_S_PER_GBPS:g}", float(c))
                  for ub, c in zip(RATE_BUCKETS_GBPS, cum, strict=False)]
            bk.append(("+Inf", float(cum[-1])))
            h.add_metric(lab, bk, float(rate_sum[i]))
        yield pk
        yield ol
        yield h
        yield CounterMetricFamily("rdmascope_sweeps_taken", "Sweeps taken.", value=float(taken))
        yield CounterMetricFamily("rdmascope_sweeps_missed", "Deadlines that passed without a "
                                  "sweep (skipped, never made up).",
                                  value=float(max(0, last_sweep + 1 - taken)))
        yield GaugeMetricFamily("rdmascope_last_sweep", "Index of the last sweep accounted for.",
                                value=float(last_sweep))
        cum = np.cumsum(late_hist)
        lh = HistogramMetricFamily("rdmascope_sweep_lateness_seconds", "Sweep start minus its "
                                   "deadline.", labels=[])
        bk = [(f"{ub:g}", float(c)) for ub, c in zip(LATENESS_BUCKETS_S, cum, strict=False)]
        bk.append(("+Inf", float(cum[-1])))
        lh.add_metric([], bk, late_sum)
        yield lh
        info = GaugeMetricFamily("rdmascope_sampler_info", "The sampler's settings.",
                                 labels=["interval_ns", "peak_over_s"])
        info.add_metric([str(self.interval_ns), f"{self.recent_s:g}"], 1.0)
        yield info


def _labels(c: dict[str, Any]) -> tuple[str, ...]:
    """The ``LABELS`` values of one counter descriptor: an RDMA port's in ``device``/``port``, a
    netdev's in ``netdev`` with its RDMA device in ``rdma_device``."""
    direction, source, name = (str(c.get("direction") or ""), str(c.get("source") or ""),
                               str(c.get("name")))
    if source == "netdev":
        return ("", "", str(c.get("device") or ""), str(c.get("netdev") or ""), direction,
                source, name)
    port = str(c.get("port")) if c.get("port") is not None else ""
    return (str(c.get("device")), port, "", "", direction, source, name)


#: connections served at once; one beyond is closed unanswered (a scraper needs one)
MAX_CONNECTIONS = 8
#: a connection that sends nothing for this long is closed (s)
IDLE_TIMEOUT_S = 5.0


def _bounded_server(app, host: str, port: int):
    """A threading WSGI server (wsgiref) with a connection cap and an idle timeout, serving
    ``app``; returns (server, thread) with the thread started."""
    import socket
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class Handler(WSGIRequestHandler):
        timeout = IDLE_TIMEOUT_S  # StreamRequestHandler: socket timeout on every read

        def log_message(self, *args) -> None:  # no access log on the recorder's stderr
            pass

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def __init__(self, *a, **kw):
            self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
            self.refused = 0
            super().__init__(*a, **kw)

        def process_request(self, request, client_address):
            if not self.slots.acquire(blocking=False):
                self.refused += 1
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                self.slots.release()
                raise

        def process_request_thread(self, request, client_address):
            try:
                super().process_request_thread(request, client_address)
            finally:
                self.slots.release()

        def handle_error(self, request, client_address) -> None:
            pass  # a timed-out or dropped client: nothing to print beside the sampler

    httpd = Server((host, port), Handler)
    httpd.set_app(app)
    t = threading.Thread(target=httpd.serve_forever, name="rdmascope-metrics", daemon=True)
    t.start()
    return httpd, t


class MetricsServer:
    """The HTTP endpoint serving one ``SamplerMetrics`` (its own registry, no default
    collectors). ``close()`` stops it."""

    def __init__(self, metrics: SamplerMetrics, host: str, port: int):
        try:
            from prometheus_client import CollectorRegistry, make_wsgi_app
        except ModuleNotFoundError as exc:
            raise MetricsError(f"--metrics needs prometheus_client ({exc.name} is not "
                               "installed): pip install 'rdmascope[metrics]'") from exc
        self.metrics = metrics
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(metrics)
        try:
            self.server, self.thread = _bounded_server(make_wsgi_app(self.registry), host, port)
        except OSError as exc:
            raise MetricsError(f"--metrics {host}:{port}: cannot listen: "
                               f"{exc.strerror or exc}") from exc
        self.address = (host, self.server.server_address[1] if self.server else port)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
