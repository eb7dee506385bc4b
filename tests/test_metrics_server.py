"""The --metrics HTTP server caps its connections and closes idle ones: idle or half-sent
requests cannot pile up threads beside the 1 ms sampler."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from rdmascope.sampler import metrics as M

pytest.importorskip("prometheus_client")

C = {"source": "infiniband", "device": "mlx5_0", "port": 1, "name": "port_xmit_data",
     "path": "/x", "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64, "direction": "tx"}


def _closed_by_server(s: socket.socket, within: float) -> bool:
    """True when the server closes ``s`` (recv gives EOF or a reset) within ``within`` s."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_connections_beyond_the_cap_are_closed_and_idle_ones_time_out(monkeypatch):
    monkeypatch.setattr(M, "IDLE_TIMEOUT_S", 1.0)
    srv = M.MetricsServer(M.SamplerMetrics([C], 1_000_000), "127.0.0.1", 0)
    port = srv.address[1]
    n = M.MAX_CONNECTIONS + 6
    idle = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # half-sent, then silent
            idle.append(s)
            time.sleep(0.02)
        # the 6 beyond the cap are closed at once (allow a busy machine 5 s)
        extra = [s for s in idle[M.MAX_CONNECTIONS:] if _closed_by_server(s, 5.0)]
        assert len(extra) == 6
        t0 = time.monotonic()
        # the idle ones within the cap are closed after the idle timeout, not left open
        assert all(_closed_by_server(s, 15.0) for s in idle[:M.MAX_CONNECTIONS])
        assert time.monotonic() - t0 >= 0.5  # not at once: they were served until idle
        assert srv.server.refused >= 6
        # and a scrape works again
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert b"rdmascope_" in body
    finally:
        for s in idle:
            s.close()
        srv.close()
