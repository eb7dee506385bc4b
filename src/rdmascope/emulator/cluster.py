"""The emulator plays a cluster: one capture per node of a TP-N run, each on its own host's clocks.

``simulate_cluster(outdir, traffic, spec)`` writes ``outdir/<host>/`` for every node (each a
capture as ``rdmascope simulate capture`` writes one, with its own ``requests.jsonl`` and
``truth.json`` on that node's clock), plus ``outdir/requests.jsonl`` (the benchmark client's log,
on the first node's CLOCK_MONOTONIC: the client runs there) and ``outdir/truth.json`` (the clock
offsets and the culprits).

It wraps the single-node model (``rdmascope.emulator.model``) without changing it: every node
plays the same :class:`~rdmascope.emulator.model.Traffic` (a ring all-reduce makes every node send
and receive the same bytes at the same moments), transformed per node:

- **Clocks.** True time is the model's time. Node *i*'s CLOCK_MONOTONIC reads ``M_i + T`` (its
  own boot epoch ``M_i``, hours apart between nodes) and its CLOCK_REALTIME ``R0 + T + w_i``, where
  ``w_i`` is the node's wall-clock error (uniform in ``+-clock_error``: NTP off by that much). Each
  recorder starts ``lead_i`` (0.3-0.6 s, sub-millisecond phase random) before the scenario and
  stops 0.2-0.5 s after it, as when a launcher starts eight recorders one after the other.
  The offset that maps node *i*'s monotonic time onto the first node's is ``M_0 - M_i``
  (``truth.json``: ``nodes[i].offset_to_reference_ns``).
- **Emulation not applied** (``misconfigured``): with ``--link emulated100`` every node sends on
  its first twin only, except this one, which spreads the same bytes evenly over both twins
  (its ``NCCL_IB_HCA`` was not set). Its timing is the ring's, like everyone's.
- **A straggler** (``straggler``, ``straggle_ns``): a node whose compute finishes late at every
  prefill all-reduce. The ring cannot run without it, so every all-reduce ends at the same time on
  all nodes; the others, ready ``straggle_ns`` earlier, send their first ring step (``1/(2(N-1))``
  of the bytes) that much earlier and then wait. So the straggler's bursts start ``straggle_ns``
  after the others' and are that much shorter; the straggler plays the model's traffic
  unchanged, the others have that first step moved earlier. Only all-reduces at >= half the link
  rate (prefill) with an idle gap of more than ``straggle_ns`` before them are affected; decode
  traffic is modelled as a steady rate and stays as it is.

What it does not model: a ring that is slowed by one slow link (every node would slow down with
it), NCCL's several channels, per-node compute jitter. Deterministic for (traffic, spec).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

CLUSTER_TRUTH_FORMAT = "rdmascope-emulator-cluster-truth"
#: the synthetic realtime of true time 0 (2026-01-01T00:00:00Z) and the first node's boot epoch
REALTIME_ZERO_NS = 1_767_225_600_000_000_000
MONOTONIC_BASE_NS = 3_600_000_000_000


@dataclass(frozen=True)
class ClusterSpec:
    """How the nodes of an emulated cluster differ (see the module docstring).

    ``nodes``: how many (>= 2). ``clock_error_ns``: each node's wall clock is off by a uniform
    amount in +-this (ns). ``misconfigured`` / ``straggler``: node index (0-based) or None.
    ``straggle_ns``: how much earlier the others are ready at each prefill all-reduce.
    ``host_pattern``: host names, formatted with ``i`` = 1-based node number.
    """

    nodes: int = 8
    clock_error_ns: int = 20_000_000
    misconfigured: int | None = None
    straggler: int | None = None
    straggle_ns: int = 1_000_000
    seed: int = 0
    host_pattern: str = "spark-{i:02d}"

    def __post_init__(self):
        if self.nodes < 2:
            raise ValueError(f"a cluster needs at least 2 nodes, got {self.nodes}")
        for name in ("misconfigured", "straggler"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < self.nodes:
                raise ValueError(f"{name} node must be in 1..{self.nodes}, got {v + 1}")
        if self.clock_error_ns < 0 or self.straggle_ns < 0:
            raise ValueError("clock error and straggle must be >= 0")

    def host(self, i: int) -> str:
        return self.host_pattern.format(i=i + 1)


def early_first_step(traffic, early_ns: int):
    """Return ``traffic`` with the first ring step of each prefill all-reduce sent ``early_ns``
    earlier (the node was ready before the ring's straggler; see the module docstring).

    A prefill all-reduce is a breakpoint segment at >= half the link rate preceded by an idle
    segment longer than ``early_ns``; its first step is ``1/ring_steps`` of its bytes and time.
    Bytes and the all-reduce's end are unchanged. Raises nothing; returns ``traffic`` itself
    when ``early_ns`` is 0.
    """
    if early_ns <= 0:
        return traffic
    t = np.asarray(traffic.t_ns, dtype=np.int64)
    b = np.asarray(traffic.cum_bytes, dtype=np.float64)
    steps = max(int(traffic.config.arch.ring_steps), 1)
    dt = np.diff(t)
    db = np.diff(b)
    rate = np.where(dt > 0, db * 8 / np.maximum(dt, 1), 0.0)  # Gb/s (bits per ns)
    j = np.arange(1, t.size - 1)  # segment j runs from point j to j+1; needs an idle one before
    q = j[(rate[j] >= 0.5 * traffic.config.link.rate_gbps) & (db[j - 1] == 0)
          & (dt[j - 1] > early_ns)]
    if q.size == 0:
        return traffic
    s, e = t[q], t[q + 1]
    first_t = np.maximum((e - s) // steps, 1)
    first_b = (b[q + 1] - b[q]) / steps
    new_t = np.concatenate([s - early_ns, s - early_ns + first_t, s + first_t])
    new_b = np.concatenate([b[q], b[q] + first_b, b[q] + first_b])
    keep = np.ones(t.size, dtype=bool)
    keep[q] = False
    tt = np.concatenate([t[keep], new_t])
    bb = np.concatenate([b[keep], new_b])
    order = np.argsort(tt, kind="stable")
    return replace(traffic, t_ns=tt[order], cum_bytes=bb[order])


def spread_over_twins(traffic):
    """Return ``traffic`` with the RDMA collective spread evenly over every twin (both), as on a
    node whose ``NCCL_IB_HCA`` restriction was not applied. Netdev series are unchanged."""
    ib = [s for s in traffic.series if s.source == "infiniband"]
    devices = sorted({s.device for s in ib})
    total = {d: sum(s.collective_share for s in ib if s.direction == d) for d in ("tx", "rx")}
    series = [replace(s, collective_share=total[s.direction] / len(devices))
              if s.source == "infiniband" else s for s in traffic.series]
    return replace(traffic, series=series)


def shift(traffic, lead_ns: int, tail_ns: int):
    """Return ``traffic`` with model time 0 moved ``lead_ns`` earlier (the recorder started that
    long before the scenario) and ``tail_ns`` more idle time at the end."""
    t = np.asarray(traffic.t_ns, dtype=np.int64) + int(lead_ns)
    t = np.concatenate([[0], t]) if t[0] > 0 else t
    b = np.concatenate([[0.0], traffic.cum_bytes]) if t.size > len(traffic.cum_bytes) \
        else traffic.cum_bytes
    reqs = [replace(r, t_send_ns=r.t_send_ns + lead_ns, t_first_ns=r.t_first_ns + lead_ns,
                    t_last_ns=r.t_last_ns + lead_ns) for r in traffic.requests]
    passes = [replace(p, t_start_ns=p.t_start_ns + lead_ns, t_end_ns=p.t_end_ns + lead_ns)
              for p in traffic.passes]
    return replace(traffic, t_ns=t, cum_bytes=np.asarray(b, dtype=np.float64), requests=reqs,
                   passes=passes, duration_ns=int(traffic.duration_ns + lead_ns + tail_ns))


def simulate_cluster(outdir: str | os.PathLike, traffic, spec: ClusterSpec | None = None, *,
                     force: bool = False, netdev_stats: bool = True,
                     command_line: list[str] | None = None,
                     node_traffic: dict | None = None) -> dict[str, Any]:
    """Write one capture per node of ``spec`` playing ``traffic`` into ``outdir/<host>/``.

    Also writes ``outdir/requests.jsonl`` (the client's log on the first node's CLOCK_MONOTONIC)
    and ``outdir/truth.json``, and returns that truth dict: ``nodes`` (host, capture, lead_ns,
    offset_to_reference_ns = M_0 - M_i, wall_clock_error_ns, role), ``culprits``
    (``emulation_not_applied``: [host], ``straggler``: {host, late_ns}), ``reference``.
    Raises ``ValueError`` for a misconfigured node on a link that is not ``emulated100`` and
    ``rdmascope.capture.CaptureError`` (e.g. ``CaptureExistsError`` without ``force``).
    ``node_traffic``: a dict filled with {host: the traffic its capture played} (on the model
    time of the node's truth.json: what its NCCL Inspector records are written from).
    """
    from rdmascope.emulator.simcapture import REQUEST_LOG_NAME, simulate_capture

    spec = spec or ClusterSpec()
    if spec.misconfigured is not None and traffic.config.link.active_twins != 1:
        raise ValueError("a node where the emulation was not applied needs the emulated link "
                         "(--link emulated100): on the 200 Gb/s setting every node uses both "
                         "twins anyway")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([spec.seed, 0xC1A5])
    nodes = []
    for i in range(spec.nodes):
        host = spec.host(i)
        lead = int(rng.integers(300_000_000, 600_000_000))
        tail = int(rng.integers(200_000_000, 500_000_000))
        boot = MONOTONIC_BASE_NS + i * 7_777_777_777_777 + int(rng.integers(0, 1_000_000_000))
        wall = int(rng.uniform(-spec.clock_error_ns, spec.clock_error_ns)) \
            if spec.clock_error_ns else 0
        node = traffic
        if spec.straggler is not None and i != spec.straggler:
            node = early_first_step(node, spec.straggle_ns)
        if i == spec.misconfigured:
            node = spread_over_twins(node)
        node = shift(node, lead, tail)
        role = []
        if i == spec.misconfigured:
            role.append("emulation not applied")
        if i == spec.straggler:
            role.append("straggler")
        # true time T = -lead at the node's capture start
        start_mono = boot - lead
        start_real = REALTIME_ZERO_NS - lead + wall
        path = out / host
        simulate_capture(path, node, seed=spec.seed * 1000 + i, start_monotonic_ns=start_mono,
                         start_realtime_ns=start_real, netdev_stats=netdev_stats, force=force,
                         host=host, command_line=command_line)
        if node_traffic is not None:
            node_traffic[host] = node
        nodes.append({"host": host, "capture": host, "boot_monotonic_ns": boot,
                      "lead_ns": lead, "wall_clock_error_ns": wall,
                      "start_monotonic_ns": start_mono, "start_realtime_ns": start_real,
                      "role": role})
    m0 = nodes[0]["boot_monotonic_ns"]
    for n in nodes:
        n["offset_to_reference_ns"] = int(m0 - n["boot_monotonic_ns"])
    shutil.copyfile(out / nodes[0]["host"] / REQUEST_LOG_NAME, out / REQUEST_LOG_NAME)
    truth = _cluster_truth(
        traffic, spec, nodes, clock=f"CLOCK_MONOTONIC of {nodes[0]['host']}",
        notes="offset_to_reference_ns maps a node's CLOCK_MONOTONIC onto the reference "
              "node's: t_ref = t_node + offset. Each node's own truth.json holds its exact "
              "bytes per request on its own clock.")
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


#: in each node's emulated tree (``serve_cluster``): the node's name, read by ``rdmascope record``
#: for the manifest's host and ``-o .../{host}`` (``rdmascope.cli.record.EMULATED_HOST_FILE``)
HOST_FILE = ".rdmascope-host"


def _cluster_truth(traffic, spec: ClusterSpec, nodes: list[dict], *, clock: str, notes: str,
                   live: bool = False) -> dict:
    """The cluster's truth.json (``CLUSTER_TRUTH_FORMAT``): the reference node, the request
    log's clock, the culprits (node without the emulation, straggler) and every node's row."""
    from rdmascope.emulator.simcapture import REQUEST_LOG_NAME

    truth = {"format": CLUSTER_TRUTH_FORMAT, "version": 1}
    if live:
        truth["live"] = True
    truth.update({
        "reference": nodes[0]["host"], "request_log": REQUEST_LOG_NAME,
        "request_log_clock": clock,
        "scenario": traffic.scenario.name, "link": traffic.config.link.name,
        "clock_error_ns": spec.clock_error_ns,
        "culprits": {
            "emulation_not_applied": ([spec.host(spec.misconfigured)]
                                      if spec.misconfigured is not None else []),
            "straggler": ({"host": spec.host(spec.straggler), "late_ns": spec.straggle_ns}
                          if spec.straggler is not None else None),
        },
        "nodes": nodes, "notes": notes,
    })
    return truth


def node_traffics(traffic, spec: ClusterSpec) -> list[tuple[str, Any, list[str]]]:
    """Each node's traffic of ``spec`` (host, traffic, roles), as ``simulate_cluster`` plays
    them (straggler and emulation not applied; no clock shift). Raises ``ValueError`` as
    ``simulate_cluster`` for a misconfigured node on a link that is not emulated."""
    if spec.misconfigured is not None and traffic.config.link.active_twins != 1:
        raise ValueError("a node where the emulation was not applied needs the emulated link "
                         "(--link emulated100): on the 200 Gb/s setting every node uses both "
                         "twins anyway")
    out = []
    for i in range(spec.nodes):
        node = traffic
        if spec.straggler is not None and i != spec.straggler:
            node = early_first_step(node, spec.straggle_ns)
        if i == spec.misconfigured:
            node = spread_over_twins(node)
        role = (["emulation not applied"] if i == spec.misconfigured else []) + \
            (["straggler"] if i == spec.straggler else [])
        out.append((spec.host(i), node, role))
    return out


def live_clocks(spec: ClusterSpec) -> list[tuple[int, int]]:
    """Each live node's (monotonic offset, wall-clock error) in ns: what its recorder adds to
    this machine's CLOCK_MONOTONIC and CLOCK_REALTIME (the first node, the client's, reads this
    machine's own monotonic clock). Boot epochs hours apart as in ``simulate_cluster``; wall
    clocks off by a uniform amount in +-``clock_error_ns``. Deterministic for the spec."""
    rng = np.random.default_rng([spec.seed, 0x11FE])
    out = []
    for i in range(spec.nodes):
        mono = 0 if i == 0 else i * 7_777_777_777_777 + int(rng.integers(0, 1_000_000_000))
        wall = int(rng.uniform(-spec.clock_error_ns, spec.clock_error_ns)) \
            if spec.clock_error_ns else 0
        out.append((mono, wall))
    return out


def build_cluster_trees(root: str | os.PathLike, traffic, spec: ClusterSpec, *, rate=None):
    """Build one emulated sysfs tree per node of ``spec`` under ``root/<host>/``, each with its
    ``HOST_FILE`` (JSON: host, and the node's clocks from ``live_clocks``: ``rdmascope record``
    on the tree adds them to its clock readings); return [(host, tree, node traffic, roles,
    (monotonic offset, wall-clock error))]. Raises as ``build_tree``."""
    from rdmascope.emulator.tree import build_tree, pcie_width_for

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    out = []
    clocks = live_clocks(spec)
    for i, (host, node, role) in enumerate(node_traffics(traffic, spec)):
        kw = {} if rate is None else {"rate": rate}
        if traffic.config.link.rails:  # a rail-optimised InfiniBand node
            from rdmascope.emulator.rails import build_rail_tree

            if any(sr.appears for sr in traffic.series):
                raise ValueError("a rails resize is played on one node (simulate serve "
                                 "without --nodes, or simulate capture)")
            tree = build_rail_tree(root / host, traffic.config.link.rails,
                                   seed=traffic.seed * 1000 + i, **kw)
        else:
            tree = build_tree(root / host, seed=traffic.seed * 1000 + i,
                              twins=traffic.config.link.twins,
                              pcie_width=pcie_width_for(traffic.config.link.twin_gbps), **kw)
        mono, wall = clocks[i]
        (Path(tree.root) / HOST_FILE).write_text(json.dumps(
            {"host": host, "monotonic_offset_ns": mono, "realtime_offset_ns": wall}) + "\n")
        out.append((host, tree, node, role, clocks[i]))
    return out


def write_cluster_truth(out: str | os.PathLike, played, traffic, spec: ClusterSpec, t0_ns: int,
                        *, speed: float = 1.0, extra: dict | None = None) -> Path:
    """Write the live cluster's ground truth: ``out/<host>/requests.jsonl`` and ``truth.json``
    per node (on that node's emulated CLOCK_MONOTONIC), the client's log (the first node's) as
    ``out/requests.jsonl`` and ``out/truth.json`` (each node's offset to the first node's
    clock, wall-clock error and role; the culprits). ``played``: [(host, node traffic, roles,
    (monotonic offset, wall-clock error))]; ``t0_ns``: model time 0 on this machine's
    CLOCK_MONOTONIC. Returns the truth path."""
    from rdmascope.emulator.simcapture import REQUEST_LOG_NAME, write_ground_truth

    out = Path(out)
    nodes = []
    mono0 = played[0][3][0]
    for host, node, role, (mono, wall) in played:
        write_ground_truth(out / host, node, t0_ns + mono, speed=speed, extra=extra)
        nodes.append({"host": host, "capture": host, "monotonic_offset_ns": mono,
                      "offset_to_reference_ns": int(mono0 - mono),
                      "wall_clock_error_ns": wall, "role": role})
    shutil.copyfile(out / nodes[0]["host"] / REQUEST_LOG_NAME, out / REQUEST_LOG_NAME)
    truth = _cluster_truth(
        traffic, spec, nodes, live=True,
        clock=f"CLOCK_MONOTONIC of {nodes[0]['host']} (this machine's)",
        notes="live: every emulated node runs on this machine; its recorder adds the node's "
              "monotonic offset and wall-clock error to this machine's clocks. "
              "offset_to_reference_ns maps a node's CLOCK_MONOTONIC onto the first node's: "
              "t_ref = t_node + offset.")
    p = out / "truth.json"
    p.write_text(json.dumps(truth, indent=1) + "\n")
    return p
