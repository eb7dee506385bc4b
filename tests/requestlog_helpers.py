"""Build small synthetic captures (exact bytes per 1 ms interval) for the request-log tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rdmascope.capture import STATUS_OK, STATUS_READ_ERROR, CaptureWriter, make_batch

MS = 1_000_000
DEVICES = ("rocep1s0f1", "roceP2p1s0f1")
PCI = {"rocep1s0f1": "0000:01:00.1", "roceP2p1s0f1": "0002:01:00.1"}


def build_capture(path: Path, t0_ns: int, per_ms_bytes: dict[str, np.ndarray], *,
                  interval_ns: int = MS, clock_pairs: list[list[int]] | None = None,
                  realtime_offset_ns: int = 1_700_000_000_000_000_000,
                  unreadable: dict[str, tuple[int, int]] | None = None) -> Path:
    """Write a capture whose series receive exactly ``per_ms_bytes[series][k]`` bytes in interval k.

    ``per_ms_bytes`` maps "<device>/<tx|rx>" to an array of n bytes (multiples of 4). Readings
    are at ``t0_ns + k * interval_ns`` (k = 0..n), read bracket 2 us centred on that instant.
    ``clock_pairs`` default: [t + realtime_offset_ns, t] at start and stop.
    ``unreadable``: series -> (k0, k1): readings k0..k1-1 of that series are read errors
    (status 1, value 0), so intervals k0-1 .. k1-1 of it have unknown bytes.
    """
    counters, values = [], []
    n = None
    for series, arr in per_ms_bytes.items():
        dev, direction = series.split("/")
        arr = np.asarray(arr, dtype=np.int64)
        assert (arr % 4 == 0).all(), "bytes must be multiples of 4 (port_xmit_data units)"
        n = len(arr) if n is None else n
        assert len(arr) == n
        counters.append({
            "source": "infiniband", "device": dev, "port": 1,
            "name": "port_xmit_data" if direction == "tx" else "port_rcv_data",
            "path": f"/sys/class/infiniband/{dev}/ports/1/counters/"
                    + ("port_xmit_data" if direction == "tx" else "port_rcv_data"),
            "unit": "4 bytes", "bytes_per_unit": 4, "width_bits": 64, "direction": direction})
        values.append(np.concatenate([[1000], 1000 + np.cumsum(arr // 4)]))
    t_end = t0_ns + n * interval_ns
    pairs = clock_pairs if clock_pairs is not None else [
        [t0_ns + realtime_offset_ns, t0_ns], [t_end + realtime_offset_ns, t_end]]
    devices = [{"name": d, "pci": PCI[d], "ports": [{"port": 1, "rate_gbps": 200.0}]}
               for d in dict.fromkeys(s.split("/")[0] for s in per_ms_bytes)]
    w = CaptureWriter.create(path, {
        "writer": "simulate", "counters": counters, "devices": devices,
        "interval_ns": interval_ns, "sysfs_root": "/sys",
        "start": {"realtime_ns": pairs[0][0], "monotonic_ns": t0_ns},
        "clock_pairs": [list(p) for p in pairs[:-1]]})
    cid, sweep, tb, dur, val, st = [], [], [], [], [], []
    bad = {list(per_ms_bytes).index(s): r for s, r in (unreadable or {}).items()}
    for c, v in enumerate(values):
        for k in range(n + 1):
            unread = c in bad and bad[c][0] <= k < bad[c][1]
            cid.append(c)
            sweep.append(k)
            tb.append(t0_ns + k * interval_ns - 1000)
            dur.append(2000)
            val.append(0 if unread else int(v[k]))
            st.append(STATUS_READ_ERROR if unread else STATUS_OK)
    w.write_batch(make_batch(cid, sweep, tb, dur, val, st))
    # every clock pair (the stop pair included) before close, which writes the final manifest;
    # a writer is never used after close (its directory handle is closed)
    w.manifest["clock_pairs"] = [list(p) for p in pairs]
    w.close(stop={"realtime_ns": pairs[-1][0], "monotonic_ns": pairs[-1][1]})
    return path


_RUNS: dict[tuple, Path] = {}


def simulated_run(outdir: Path, link: str, *, tests=("P1", "P4"), rounds: int = 2,
                  output_tokens: int = 32, seed: int = 3) -> Path:
    """Return an emulator run (capture + requests.jsonl + truth.json) of a short test plan.

    Several rounds per test (the committed fixtures have one), written under ``outdir`` the first
    time and reused by later calls with the same arguments in this process.
    """
    key = (link, tuple(tests), rounds, output_tokens, seed)
    if key in _RUNS and _RUNS[key].is_dir():
        return _RUNS[key]
    from rdmascope.emulator.model import TrafficConfig, link_config, simulate, test_plan_scenario
    from rdmascope.emulator.simcapture import simulate_capture

    sc = test_plan_scenario(list(tests), rounds=rounds, warmup=False, output_tokens=output_tokens,
                            idle_gap_s=1.0, lead_in_s=0.5, tail_s=0.5)
    traffic = simulate(sc, TrafficConfig(link=link_config(link)), seed=seed)
    _RUNS[key] = simulate_capture(outdir / f"{link}-{'-'.join(tests)}-{rounds}-{seed}", traffic)
    return _RUNS[key]
