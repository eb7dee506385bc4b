"""Ground truth files and captures written directly from the traffic model (no real time passes).

A simulated run is one directory: the capture itself (``manifest.json``, ``segments/``, written
through ``rdmascope.capture.CaptureWriter`` with ``writer="simulate"``) plus, beside the capture's
own files, the ground truth that the analysis is tested against:

- ``requests.jsonl``: the request log in the project's native format (request-logs.md, "A native
  format of our own"): one JSON object per request with ``request_id, t_send, t_first_token,
  t_last_token`` (float seconds on CLOCK_MONOTONIC, the capture's clock), ``prompt_tokens,
  output_tokens, test, round, clock`` (``"CLOCK_MONOTONIC"``).
- ``truth.json``: the scenario, the model configuration, the seed, the per-series totals and, per
  request, the exact bytes of every series (``"<device>/<tx|rx>"``, netdevs by their own name) in its
  prefill window [t_send, t_first_token] and decode window [t_first_token, t_last_token], from the
  model's cumulative function, plus the bytes of its own prompt chunks (``prompt_bytes``).

The manifest's ``extra.simulated`` names both files. Devices and counter descriptors come from the
sampler's own discovery (``rdmascope.sampler.discovery``) run on an emulated tree, so a simulated
capture describes its counters exactly as ``rdmascope record --netdev-stats`` would on that tree.

Reading instants: sweep k is due at ``start + k x interval``; it wakes 15 us + Exp(25 us) late
(rarely a sweep is missed, as the real daemon counts); each read's bracket is ~3-6 us; the value is
the model's at the bracket's midpoint plus a normal offset (sd 0.03 ms, clipped at +-0.1 ms), the
uncertainty of a reading's instant on real hardware (method.md, "The sampler").
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from rdmascope import __version__
from rdmascope.capture import (
    MANIFEST_NAME,
    ROLL_INTERVAL_S,
    STATUS_OK,
    CaptureExistsError,
    CaptureWriter,
    check_output,
    foreign_entries,
    make_batch,
)
from rdmascope.emulator.model import Traffic
from rdmascope.emulator.tree import (
    DEFAULT_ROOT,
    EmulatedTree,
    build_tree,
    pcie_width_for,
    remove_tree,
)

REQUEST_LOG_NAME = "requests.jsonl"
TRUTH_NAME = "truth.json"
TRUTH_FORMAT = "rdmascope-emulator-truth"
#: synthetic CLOCK_MONOTONIC origin of simulated captures (1 h after boot) and its realtime pair
SYNTHETIC_MONOTONIC_NS = 3_600_000_000_000
SYNTHETIC_REALTIME_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z

#: the manifest event kind of a device that appears during a capture (one per device, as
#: ``rdmascope record`` writes it, with an entry in the manifest's ``device_changes``)
DEVICE_APPEARED_KIND = "device_appeared"
READ_OFFSET_SD_NS = 30_000
READ_OFFSET_CLIP_NS = 100_000
MISS_PROBABILITY = 1e-4


# ----------------------------------------------------------------------------------------------
# Ground truth
# ----------------------------------------------------------------------------------------------


def _to_clock(t_model_ns, t0_ns: int, speed: float):
    return t0_ns + np.asarray(t_model_ns, dtype=np.float64) / speed


def request_log_records(traffic: Traffic, t0_ns: int, *, speed: float = 1.0
                        ) -> list[dict[str, Any]]:
    """Return the request log (native format) for ``traffic`` played with model time 0 at ``t0_ns``.

    Times are float seconds on CLOCK_MONOTONIC: ``(t0_ns + t_model_ns / speed) / 1e9``.
    Warm-up requests (round 0: a warm-up round's, a closed-loop cell's first ones) carry
    ``"phase": "warmup"`` (kept out of every measured number by the native reader); the others
    carry no ``phase``.
    """
    out = []
    for r in traffic.requests:
        ts = _to_clock([r.t_send_ns, r.t_first_ns, r.t_last_ns], t0_ns, speed) / 1e9
        out.append({"request_id": r.request_id, "t_send": float(ts[0]),
                    "t_first_token": float(ts[1]), "t_last_token": float(ts[2]),
                    "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                    "test": r.test, "round": r.round, "clock": "CLOCK_MONOTONIC",
                    # a warm-up (request-logs.md, "The native format")
                    **({"phase": "warmup"} if r.warmup else {})})
    return out


def truth_dict(traffic: Traffic, t0_ns: int, *, speed: float = 1.0,
               extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return the ground truth of a run (see the module docstring for the contents).

    Window bytes are exact differences of the model's cumulative bytes per series (float bytes).
    Times: ``*_ns`` on CLOCK_MONOTONIC (the capture's clock) and ``*_model_ns`` from the scenario
    start.
    """
    keys = traffic.series_keys
    n = len(traffic.requests)
    ts = np.empty(3 * n, dtype=np.int64)
    for i, r in enumerate(traffic.requests):
        ts[3 * i: 3 * i + 3] = (r.t_send_ns, r.t_first_ns, r.t_last_ns)
    cum = traffic.cumulative_bytes(ts, keys) if n else np.zeros((len(keys), 0))
    end = traffic.cumulative_bytes([traffic.duration_ns], keys)[:, 0]
    reqs = []
    sh = {x.key: x.collective_share for x in traffic.series}
    for i, r in enumerate(traffic.requests):
        s, f, la = cum[:, 3 * i], cum[:, 3 * i + 1], cum[:, 3 * i + 2]
        clk = _to_clock([r.t_send_ns, r.t_first_ns, r.t_last_ns], t0_ns, speed)
        reqs.append({
            "request_id": r.request_id, "test": r.test, "round": r.round,
            **({"phase": "warmup"} if r.warmup else {}),
            "t_send_ns": int(round(clk[0])), "t_first_ns": int(round(clk[1])),
            "t_last_ns": int(round(clk[2])),
            "t_send_model_ns": r.t_send_ns, "t_first_model_ns": r.t_first_ns,
            "t_last_model_ns": r.t_last_ns,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "ttft_s": (r.t_first_ns - r.t_send_ns) / speed / 1e9,
            "decode_speed_tok_s": ((r.output_tokens - 1) * speed * 1e9 / (r.t_last_ns - r.t_first_ns)
                                   if r.t_last_ns > r.t_first_ns else None),
            "prompt_bytes": r.prompt_bytes,
            "prefill_bytes": {k: float(f[j] - s[j]) for j, k in enumerate(keys)},
            "decode_bytes": {k: float(la[j] - f[j]) for j, k in enumerate(keys)},
            # the conserving split (docs/method.md): each step's bytes by its tokens, per series
            "prefill_bytes_split": {k: r.prefill_bytes_split * sh[k] for k in keys},
            "decode_bytes_split": {k: r.decode_bytes_split * sh[k] for k in keys},
        })
    cfg = traffic.config
    return {
        "format": TRUTH_FORMAT, "version": 1,
        "clock": "CLOCK_MONOTONIC",
        "t0_monotonic_ns": int(t0_ns),
        "speed": speed,
        "duration_model_ns": traffic.duration_ns,
        "seed": traffic.seed,
        "scenario": traffic.scenario.to_dict(),
        "config": cfg.to_dict(),
        "link": cfg.link.name, "tcp_fallback": cfg.link.tcp_fallback,
        "link_rate_gbps": cfg.link.rate_gbps,
        "bytes_per_token": cfg.arch.bytes_per_token,
        "series": [{"key": s.key, "source": s.source, "device": s.device,
                    "direction": s.direction, "collective_share": s.collective_share,
                    "idle_bytes_per_s": s.idle_bps} for s in traffic.series],
        "totals_bytes": {k: float(v) for k, v in zip(keys, end, strict=True)},
        "requests": reqs,
        **(extra or {}),
    }


def write_ground_truth(outdir: str | os.PathLike, traffic: Traffic, t0_ns: int, *,
                       speed: float = 1.0, extra: dict[str, Any] | None = None
                       ) -> tuple[Path, Path]:
    """Write ``requests.jsonl`` and ``truth.json`` into ``outdir``; return both paths."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    log = out / REQUEST_LOG_NAME
    with open(log, "w") as f:
        for rec in request_log_records(traffic, t0_ns, speed=speed):
            f.write(json.dumps(rec) + "\n")
    truth = out / TRUTH_NAME
    truth.write_text(json.dumps(truth_dict(traffic, t0_ns, speed=speed, extra=extra), indent=1)
                     + "\n")
    return log, truth


# ----------------------------------------------------------------------------------------------
# Devices and counter descriptors, exactly as the sampler builds them
# ----------------------------------------------------------------------------------------------


def _replace_prefix(obj: Any, old: str, new: str) -> Any:
    if isinstance(obj, str):
        return new + obj[len(old):] if obj.startswith(old) else obj
    if isinstance(obj, list):
        return [_replace_prefix(x, old, new) for x in obj]
    if isinstance(obj, dict):
        return {k: _replace_prefix(v, old, new) for k, v in obj.items()}
    return obj


def sampler_view(tree: EmulatedTree | None = None, *, netdev_stats: bool = True,
                 seed: int = 0, root_name: str = DEFAULT_ROOT, rate: str | None = None,
                 twins: int = 2, pcie_width: int = 4, rails: int = 0
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (devices, counters) as ``rdmascope record`` would put them in its manifest.

    Runs the sampler's ``discover`` and ``counter_descriptors`` (default counters, plus the netdev
    bytes with ``netdev_stats``) on ``tree`` or, when None, on a temporary tree whose paths are
    then written as if it lived at ``root_name`` (so the result is deterministic); ``rails`` > 0
    builds a rail-optimised InfiniBand node instead (``rdmascope.emulator.rails``).
    """
    from rdmascope.sampler.discovery import counter_descriptors, discover

    tmp = None
    if tree is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        tmp = tempfile.mkdtemp(prefix="rdmascope-sim-", dir=base)
        if rails:
            from rdmascope.emulator.rails import build_rail_tree

            tree = build_rail_tree(Path(tmp) / "sys", rails, seed=seed,
                                   **({"rate": rate} if rate is not None else {}))
        else:
            tree = build_tree(Path(tmp) / "sys", seed=seed, twins=twins, pcie_width=pcie_width,
                              **({"rate": rate} if rate is not None else {}))
    try:
        devs = discover(tree.root)
        counters = counter_descriptors(devs, netdev_stats=netdev_stats, sysfs_root=tree.root)
        devices = [d.to_dict() for d in devs]
        if tmp is not None:
            devices = _replace_prefix(devices, str(tree.root), root_name)
            counters = _replace_prefix(counters, str(tree.root), root_name)
        return devices, counters
    finally:
        if tmp is not None:
            remove_tree(tree.root)
            os.rmdir(tmp)


def _series_key(c: dict[str, Any]) -> str:
    dev = c.get("netdev") if c["source"] == "netdev" else c["device"]
    return f"{dev}/{c['direction']}"


# ----------------------------------------------------------------------------------------------
# The capture
# ----------------------------------------------------------------------------------------------


def _replace_earlier_truth(path: Path) -> None:
    """With ``force``: remove the ground truth files of an earlier simulated capture at ``path``.

    This module writes ``requests.jsonl`` and ``truth.json`` beside the capture's files, so they
    are its own to replace; ``CaptureWriter.create(force=True)`` then replaces the capture (it
    accepts only the capture's own files). Nothing is removed unless ``path`` is a capture written
    by the simulator (manifest ``writer`` = ``"simulate"``) that no process is recording and that
    holds nothing else foreign (``rdmascope.capture.foreign_entries``); raises
    ``CaptureExistsError`` naming the first other entry, ``CaptureLockedError`` when a writer holds
    the capture's lock. Anything else (no manifest, another writer) is left for ``create`` to
    refuse.
    """
    if path.is_symlink() or not path.is_dir():
        return
    check_output(path, force=True)  # a live writer is refused before anything is touched
    manifest = path / MANIFEST_NAME
    try:
        writer = json.loads(manifest.read_text()).get("writer")
    except (OSError, ValueError, AttributeError):
        return
    if writer != "simulate" or manifest.is_symlink():
        return
    foreign = foreign_entries(path, allowed=(REQUEST_LOG_NAME, TRUTH_NAME))
    if foreign:
        raise CaptureExistsError(
            path, f"holds entries that are not the simulated capture's own (e.g. {foreign[0]}); "
                  "refusing to overwrite it even with --force: move them or choose another "
                  "directory")
    for name in (REQUEST_LOG_NAME, TRUTH_NAME):
        f = path / name
        if f.is_file() and not f.is_symlink():  # a symbolic link is foreign (refused above)
            f.unlink()


def simulate_capture(path: str | os.PathLike, traffic: Traffic, *, seed: int | None = None,
                     start_monotonic_ns: int = SYNTHETIC_MONOTONIC_NS,
                     start_realtime_ns: int = SYNTHETIC_REALTIME_NS,
                     interval_ns: int = 1_000_000, netdev_stats: bool = True,
                     force: bool = False, command_line: list[str] | None = None,
                     host: str = "emulated-spark", rate: str | None = None,
                     setup: dict[str, Any] | None = None) -> Path:
    """Write ``traffic`` as a capture sampled every ``interval_ns``, plus its ground truth files.

    Model time 0 is ``start_monotonic_ns`` (the capture's first sweep deadline); the capture
    covers the whole scenario. ``host`` is the manifest's host name. ``rate``: the ports' sysfs
    rate text (default the tree's 200 Gb/s); ``setup``: the run's setup record
    (``rdmascope.models.setup_record``), kept as the manifest's ``extra.setup``. Deterministic for (traffic, seed, start): the read jitter uses
    ``seed`` (default ``traffic.seed``). ``force`` replaces an earlier simulated capture at
    ``path`` with its ground truth files (never other files: see ``_replace_earlier_truth``).
    Raises ``rdmascope.capture.CaptureExistsError`` when ``path`` holds files and ``force`` is
    false (or holds foreign files), ``CaptureWriteError`` when it cannot be written.
    """
    seed = traffic.seed if seed is None else seed
    rng = np.random.default_rng([seed, 0x5EED])
    rails = traffic.config.link.rails
    devices, counters = sampler_view(netdev_stats=netdev_stats, seed=traffic.seed, rate=rate,
                                     twins=traffic.config.link.twins,
                                     pcie_width=pcie_width_for(traffic.config.link.twin_gbps),
                                     rails=rails)
    keys = [_series_key(c) for c in counters]
    tree_for_bases = _bases(traffic.seed, rails)
    bpu = np.array([c["bytes_per_unit"] for c in counters], dtype=np.int64)
    base = np.array([tree_for_bases[(c["source"], _series_key(c))] for c in counters],
                    dtype=np.int64)
    n_counters = len(counters)
    n_sweeps = int(traffic.duration_ns // interval_ns) + 1
    # a resize: the devices whose series appear at their change time (``Series.appears``)
    by_key = {sr.key: sr for sr in traffic.series}
    appears = np.array([c["source"] == "infiniband" and bool(by_key[keys[j]].appears)
                        for j, c in enumerate(counters)], dtype=bool)
    appear_ns = np.array([by_key[keys[j]].change_ns if appears[j] else 0
                          for j in range(n_counters)], dtype=np.int64)
    cap_id = uuid.UUID(hashlib.sha256(
        f"{traffic.scenario.name}-{traffic.config.link.name}-{traffic.config.link.tcp_fallback}-"
        f"{seed}-{start_monotonic_ns}{'' if host == 'emulated-spark' else '-' + host}"
        f"{_rails_id(traffic)}".encode()).hexdigest()[:32]).hex
    S = int(start_monotonic_ns)
    R = int(start_realtime_ns)
    pairs = [[R + t, S + t] for t in range(0, traffic.duration_ns, 5_000_000_000)]
    extra = {
        "values": "raw kernel values; multiply by counters[i].bytes_per_unit for bytes",
        "simulated": {
            "scenario": traffic.scenario.name, "link": traffic.config.link.name,
            "tcp_fallback": traffic.config.link.tcp_fallback, "seed": seed,
            "request_log": REQUEST_LOG_NAME, "truth": TRUTH_NAME,
            "model_time_zero_monotonic_ns": S,
            "read_instant_offset_sd_ns": READ_OFFSET_SD_NS,
        },
        **({"setup": setup} if setup else {}),
    }
    fields = {
        "writer": "simulate", "sampler_version": __version__,
        "command_line": list(command_line or ["rdmascope", "simulate", "capture"]),
        "host": host, "kernel": "emulated", "python": None,
        "capture_id": cap_id, "sysfs_root": DEFAULT_ROOT, "interval_ns": int(interval_ns),
        "start": {"monotonic_ns": S, "realtime_ns": R}, "clock_pairs": pairs,
        "devices": devices, "counters": counters, "extra": extra,
        # every device of the emulated tree was sampled, so all of them were discovered too
        # (the recorder's rdmascope.sampler.discovery.discovered_devices, from the same records)
        "discovered_devices": [{"name": d["name"], "pci": d["pci"], "netdevs": list(d["netdevs"])}
                               for d in devices],
    }
    if force:
        _replace_earlier_truth(Path(path))
    writer = CaptureWriter.create(path, fields, force=force)
    # a device that appears: said as ``rdmascope record`` says it (the manifest's
    # ``device_changes`` entry and one ``device_appeared`` event per device); unlike the
    # recorder, which samples a fixed counter set, the simulated sampler reads it from then on
    dev_info = {d["name"]: d for d in devices}
    appeared = sorted({(int(appear_ns[j]), counters[j]["device"]) for j in np.flatnonzero(appears)})
    if appeared:
        changes = writer.manifest.setdefault("device_changes", [])
        for t, name in appeared:
            d = dev_info.get(name, {})
            changes.append({"name": name, "pci": d.get("pci"),
                            "sys_image_guid": d.get("sys_image_guid"), "kind": "appeared",
                            "t_ns": S + t})
            writer.add_event(S + t, None, DEVICE_APPEARED_KIND,
                             f"RDMA device {name} (PCI {d.get('pci') or 'unknown'}) appeared "
                             "after the start; sampled from then on", save=False)

    from rdmascope.sampler.audit import LogHistogram
    interval_hist = LogHistogram()
    read_hists = [LogHistogram() for _ in range(n_counters)]
    taken = missed = 0
    per_roll = max(1, int(ROLL_INTERVAL_S * 1e9 // interval_ns))
    last_instant = np.full(n_counters, -np.inf)
    prev_start = None
    for k0 in range(0, n_sweeps, per_roll):
        k = np.arange(k0, min(k0 + per_roll, n_sweeps), dtype=np.int64)
        keep = rng.random(k.size) >= MISS_PROBABILITY
        keep[0] = keep[0] or k0 == 0
        missed += int((~keep).sum())
        k = k[keep]
        m = k.size
        wake = k * interval_ns + 15_000 + rng.exponential(25_000, m).clip(0, 400_000).astype(
            np.int64)
        dur = (2_500 + rng.lognormal(np.log(1_500), 0.4, (m, n_counters))).astype(np.int64)
        gap = rng.integers(300, 900, (m, n_counters))
        step = dur + gap
        t_before = wake[:, None] + np.concatenate(
            [np.zeros((m, 1), dtype=np.int64), np.cumsum(step, axis=1)[:, :-1]], axis=1)
        offset = rng.normal(0, READ_OFFSET_SD_NS, (m, n_counters)).clip(
            -READ_OFFSET_CLIP_NS, READ_OFFSET_CLIP_NS)
        instant = np.clip(t_before + dur / 2 + offset, 0, traffic.duration_ns)
        instant = np.maximum.accumulate(np.vstack([last_instant[None, :], instant]), axis=0)[1:]
        last_instant = instant[-1]
        values = np.empty((m, n_counters), dtype=np.int64)
        for j in range(n_counters):
            b = traffic.cumulative_bytes(instant[:, j], [keys[j]])[0]
            values[:, j] = base[j] + np.floor(b / bpu[j]).astype(np.int64)
        starts = S + wake
        if prev_start is not None:
            interval_hist.add(np.diff(np.concatenate([[prev_start], starts])))
        elif m > 1:
            interval_hist.add(np.diff(starts))
        prev_start = int(starts[-1])
        for j in range(n_counters):
            read_hists[j].add(dur[:, j])
        taken += m
        cid = np.tile(np.arange(n_counters, dtype=np.uint16), m)
        rows = np.ones(m * n_counters, dtype=bool)
        if appears.any():  # a device that appears later has no readings before it does
            rows = ~(appears[None, :] & (t_before < appear_ns[None, :])).ravel()
        batch = make_batch(cid[rows], np.repeat(k, n_counters)[rows],
                           (S + t_before).ravel()[rows], dur.ravel().astype(np.uint32)[rows],
                           values.ravel().astype(np.uint64)[rows],
                           np.full(int(rows.sum()), STATUS_OK, dtype=np.uint8))
        writer.write_batch(batch)
        writer.roll()
    deadlines = taken + missed
    audit = {
        "sweeps_taken": taken, "sweeps_missed": missed,
        "sweeps_taken_pct": 100.0 * taken / deadlines,
        "interval_ns": interval_hist.summary(),
        "read_duration_ns": [
            {"counter_id": i, "device": c["device"], "port": c["port"], "name": c["name"],
             **read_hists[i].summary(), "bad_rows": 0} for i, c in enumerate(counters)],
        "cpu_s": None, "wall_s": traffic.duration_ns / 1e9, "rows_written": writer.rows_written,
        "stopped_by": "simulated",
    }
    stop = {"monotonic_ns": S + traffic.duration_ns, "realtime_ns": R + traffic.duration_ns}
    writer.manifest["clock_pairs"].append([stop["realtime_ns"], stop["monotonic_ns"]])
    writer.close(audit=audit, stop=stop)
    write_ground_truth(path, traffic, S)
    return Path(path)


def _rails_id(traffic: Traffic) -> str:
    """What tells two rail-optimised runs apart in the capture id ('' for a Spark's link)."""
    link, arch = traffic.config.link, traffic.config.arch
    if not link.rails:
        return ""
    return (f"-rails{link.rails}x{link.rail_gbps:g}-{arch.layout}-dp{arch.dp}-tp{arch.tp}-"
            f"{arch.all2all_backend}-{traffic.config.resize}")


def _bases(seed: int, rails: int = 0) -> dict[tuple[str, str], int]:
    """Return the initial counter values of the emulated tree for ``seed`` by (source, series)
    (``rails`` > 0: the rail-optimised InfiniBand tree's)."""
    if rails:
        from rdmascope.emulator.rails import rail_bases, rail_device

        out = {}
        for i in range(rails):
            tx, rx = rail_bases(seed, i)
            out[("infiniband", f"{rail_device(i)}/tx")] = tx
            out[("infiniband", f"{rail_device(i)}/rx")] = rx
        return out
    tmp = tempfile.mkdtemp(prefix="rdmascope-bases-")
    try:
        tree = build_tree(Path(tmp) / "sys", seed=seed)
        out = {}
        for mf in tree.moving:
            if mf.path.name in ("port_xmit_data", "port_rcv_data"):
                out[("infiniband", mf.series)] = mf.base
            elif mf.path.name in ("tx_bytes", "rx_bytes"):
                out[("netdev", mf.series)] = mf.base
        remove_tree(tree.root)
        return out
    finally:
        if os.path.isdir(tmp):
            os.rmdir(tmp)
