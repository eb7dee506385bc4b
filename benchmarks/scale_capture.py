"""Build long synthetic captures fast, for ``bench_scale.py`` and the memory-limit tests.

``build(path, seconds)`` writes a capture of 8 counters (2 RDMA devices, twins of one cable, and
their 2 netdevs, x tx/rx) at 1 kHz directly with ``CaptureWriter`` (one Parquet segment per
minute, as the sampler rolls), with bursty traffic: one request every ~1.2 s whose prefill is a
train of ~3 ms all-reduce bursts near line rate on the first twin, then decode at a few Gb/s;
the netdevs carry a trickle. A native request log (``requests.jsonl``, CLOCK_MONOTONIC seconds)
lists the requests. Deterministic for a seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rdmascope.capture import STATUS_OK, CaptureWriter, make_batch

MS = 1_000_000
T0 = 5_000 * 10**9  # capture start, monotonic ns
RT0 = 1_700_000_000 * 10**9
DEVICES = [
    {"name": "rocep1s0f1", "pci": "0000:01:00.1", "netdevs": ["enp1s0f1np1"],
     "ports": [{"port": 1, "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0,
                "link_layer": "Ethernet", "state": "4: ACTIVE", "netdevs": ["enp1s0f1np1"]}]},
    {"name": "roceP2p1s0f1", "pci": "0002:01:00.1", "netdevs": ["enP2p1s0f1np1"],
     "ports": [{"port": 1, "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0,
                "link_layer": "Ethernet", "state": "4: ACTIVE", "netdevs": ["enP2p1s0f1np1"]}]},
]


def counters() -> list[dict]:
    out = []
    for d in DEVICES:
        for direction, name in (("tx", "port_xmit_data"), ("rx", "port_rcv_data")):
            out.append({"source": "infiniband", "device": d["name"], "port": 1, "name": name,
                        "path": f"/sys/class/infiniband/{d['name']}/ports/1/counters/{name}",
                        "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64,
                        "direction": direction})
    for d in DEVICES:
        nd = d["netdevs"][0]
        for direction in ("tx", "rx"):
            out.append({"source": "netdev", "device": d["name"], "netdev": nd, "port": None,
                        "name": f"{direction}_bytes",
                        "path": f"/sys/class/net/{nd}/statistics/{direction}_bytes",
                        "unit": "bytes", "bytes_per_unit": 1, "width_bits": None,
                        "direction": direction})
    return out


def _traffic(n: int, rng, req_period_ms: int = 1200):
    """Per-ms bytes on the busy twin (tx == rx) and the request times (ms indices)."""
    per = np.full(n, 0.0)
    base = np.arange(50, max(n - 400, 51), req_period_ms)
    sends = base + rng.integers(0, 200, size=len(base))
    reqs = []
    for s in sends:
        n_bursts = int(rng.integers(4, 16))
        k = s + 2
        for _ in range(n_bursts):  # a train of all-reduces at ~180 Gb/s (22.5 MB/ms)
            per[k:k + 3] += 22.5e6 * rng.uniform(0.8, 1.0)
            k += 3 + int(rng.integers(2, 6))
        first = k
        dec = int(rng.integers(150, 350))
        per[first:first + dec] += 0.25e6  # decode: ~2 Gb/s
        reqs.append((int(s), int(first), int(first + dec), n_bursts * 512))
    per += rng.uniform(0, 2_000, n)  # idle chatter
    return per, reqs


def build(path: str | Path, seconds: int, *, seed: int = 1, segment_s: int = 60) -> Path:
    """Write a ``seconds``-long capture (and requests.jsonl) at ``path``; return the path."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    n = int(seconds) * 1000
    per, reqs = _traffic(n, rng)
    cs = counters()
    w = CaptureWriter.create(path, {
        "counters": cs, "interval_ns": MS, "devices": DEVICES, "writer": "simulate",
        "sampler_version": "bench", "host": "bench-node",
        "start": {"monotonic_ns": T0, "realtime_ns": RT0 + T0},
        "clock_pairs": [[RT0 + T0, T0]],
        "discovered_devices": [{"name": d["name"], "pci": d["pci"], "netdevs": d["netdevs"]}
                               for d in DEVICES],
    }, force=True)
    # cumulative values in counter units
    unit_per = np.floor(per / 4).astype(np.int64)
    busy = np.cumsum(unit_per)
    quiet = np.cumsum(rng.integers(0, 3, n))
    nd = np.cumsum(rng.integers(0, 300, n))
    vals = [busy, busy, quiet, quiet, nd, nd // 2, nd // 3, nd // 5]
    nc = len(cs)
    seg = segment_s * 1000
    for s0 in range(0, n, seg):
        s1 = min(n, s0 + seg)
        k = np.arange(s0, s1, dtype=np.int64)
        m = len(k)
        tb = (T0 + 300_000 + k * MS)[None, :] + np.arange(nc, dtype=np.int64)[:, None] * 4_000 \
            + rng.integers(-40_000, 40_000, size=(1, m))
        cid = np.repeat(np.arange(nc, dtype=np.uint16), m)
        sweep = np.tile(k, nc)
        dur = rng.integers(1_200, 3_000, size=nc * m).astype(np.uint32)
        value = np.concatenate([v[s0:s1] for v in vals]).astype(np.uint64)
        status = np.full(nc * m, STATUS_OK, np.uint8)
        w.write_batch(make_batch(cid, sweep, tb.ravel(), dur, value, status))
        w.add_clock_pair((RT0 + T0 + int(s1) * MS, T0 + int(s1) * MS), save=False)
        w.roll()
    end = T0 + n * MS + 400_000
    w.close(stop={"monotonic_ns": end, "realtime_ns": RT0 + end})
    with open(path / "requests.jsonl", "w") as f:
        for i, (s, first, last, ptok) in enumerate(reqs):
            f.write(json.dumps({
                "request_id": f"r{i}", "t_send": (T0 + s * MS) / 1e9,
                "t_first_token": (T0 + first * MS) / 1e9, "t_last_token": (T0 + last * MS) / 1e9,
                "prompt_tokens": ptok, "output_tokens": 64, "test": "P1", "round": 1,
                "clock": "CLOCK_MONOTONIC"}) + "\n")
    return path


if __name__ == "__main__":
    import sys
    import time

    t = time.perf_counter()
    build(sys.argv[1], int(sys.argv[2]))
    print(f"built in {time.perf_counter() - t:.1f} s")
