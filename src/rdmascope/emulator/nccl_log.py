"""Write the NCCL witnesses of an emulated node: an ``NCCL_DEBUG=INFO`` log and Inspector records.

The log lines follow NCCL's own ``INFO()`` format strings of the chosen version (NVIDIA/nccl:
``src/debug.cc`` prefix ``host:pid:tid [cudaDev] NCCL INFO``; ``src/transport/net_ib.cc`` /
``net_ib/init.cc`` for ``NET/IB : Using ...``, ``Made virtual device``, the per-port ``NET/IB: [i]``
lines; ``src/transport/net_socket.cc``; ``src/init.cc`` for the version and Init START/COMPLETE;
``src/transport/net.cc`` for the per-channel ``via NET/...`` lines): see docs/nccl.md, which
lists what differs by version. Only the shapes are reproduced, no NCCL code.

The Inspector records follow ``plugins/profiler/inspector/inspector_json.cc`` (format "v4.0"):
one JSON object per line, ``header`` (id, comm_name, rank, n_ranks, nnodes), ``metadata``
(inspector_output_format_version, git_rev, rec_mechanism, dump_timestamp_us, hostname, pid) and
``coll_perf`` (coll, coll_sn, coll_msg_size_bytes, coll_exec_time_us, coll_timing_source,
coll_algobw_gbs, coll_busbw_gbs and, verbose, event_trace_ts with microsecond
``gettimeofday()`` times). The file is ``<dir>/<hostname>-pid<pid>.log`` as the plugin names it.

What is written is the emulator's truth: one HCA when emulated (NCCL_IB_HCA naming the first
twin), both twins (merged into one NET device from 2.24 on) otherwise, NET/Socket for the TCP
fallback; one record per all-reduce the model played, with its real start and duration.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["NodeLog", "format_nccl_log", "write_nccl_log", "collectives_of", "write_inspector",
           "NCCL_VERSIONS"]

#: versions whose formats the writer knows (each a different shape somewhere)
NCCL_VERSIONS = ("2.18.6", "2.19.3", "2.21.5", "2.23.4", "2.25.1", "2.27.7", "2.28.9", "2.30.4")

IB_SPEED_MBPS = 100000  # a ConnectX-7 twin of a DGX Spark reports 100 Gb/s per PCIe function


def _v(version: str) -> tuple[int, int]:
    a, b = version.split(".")[:2]
    return int(a), int(b)


@dataclass
class NodeLog:
    """What one node's NCCL process logs.

    ``hcas``: the HCAs NCCL opened (NCCL_IB_HCA's result), in index order; ``channel_devs``: the
    NET device index each NET channel goes through, cycled over the channels (None: the
    writer's default, the merged device when two HCAs are opened and the version merges, else
    channel c through HCA c % n); ``network``: "IB" or "Socket". ``t_realtime_ns``: when the
    lines are stamped (only with ``timestamps``: NCCL 2.26+'s ``[%F %T]`` prefix, local time).
    ``comms``: (nranks, rank, nnodes) per communicator; the first one carries the channels.
    """

    host: str
    version: str = "2.27.7"
    pid: int = 4242
    hcas: list[str] = field(default_factory=lambda: ["rocep1s0f1", "roceP2p1s0f1"])
    ib_hca_env: str | None = None
    network: str = "IB"
    socket_if: str = "enp1s0f1np1"
    addr: str = "192.168.100.11"
    rank: int = 0
    nranks: int = 2
    nnodes: int | None = None
    n_channels: int = 2
    channel_devs: list[int] | None = None
    gdr: bool = True
    merge: bool = True
    t_realtime_ns: int | None = None
    #: when the process closes its communicators (``- Destroy COMPLETE``), or None (still open)
    t_end_realtime_ns: int | None = None
    timestamps: bool = False
    second_comm: bool = False
    net_subsys: bool = True
    cuda: str = "12.9"


def _prefix(n: NodeLog, tid: int, ts_ns: int | None) -> str:
    ts = ""
    if n.timestamps and ts_ns is not None and _v(n.version) >= (2, 26):
        ts = time.strftime("[%Y-%m-%d %H:%M:%S] ", time.localtime(ts_ns / 1e9))
    return f"{ts}{n.host.split('.')[0]}:{n.pid}:{tid} [0] NCCL INFO "


def format_nccl_log(n: NodeLog) -> list[str]:
    """Return the INFO lines one NCCL process of version ``n.version`` writes for ``n``.

    Raises ``ValueError`` for an unknown network or a version outside 2.18-2.30.
    """
    v = _v(n.version)
    if not (2, 18) <= v <= (2, 30):
        raise ValueError(f"NCCL {n.version}: the writer knows 2.18 to 2.30")
    if n.network not in ("IB", "Socket"):
        raise ValueError(f"network must be IB or Socket, got {n.network!r}")
    tid, t = n.pid, n.t_realtime_ns
    lines: list[str] = []

    def info(msg: str, thread: int | None = None) -> None:
        lines.append(_prefix(n, thread or tid, t) + msg)

    info(f"NCCL version {n.version}+cuda{n.cuda}")
    info(f"Bootstrap : Using {n.socket_if}:{n.addr}<0>")
    if v < (2, 21):
        info("NET/Plugin : No plugin found (libnccl-net.so), using internal implementation")
    else:
        info("NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.")
    hcas = list(n.hcas)
    if n.ib_hca_env:
        info(f"NCCL_IB_HCA set to {n.ib_hca_env}")  # NET|ENV: shown by the default ENV subsystem
    merged = n.merge and len(hcas) > 1 and v >= (2, 20)
    if n.network == "IB" and hcas:
        if n.net_subsys and v >= (2, 27):
            for i, h in enumerate(hcas):
                tail = " oooRqSize=0" if v >= (2, 29) else ""
                info(f"NET/IB: [{i}] {h}:uverbs{i}:1/RoCE provider=Mlx5 speed={IB_SPEED_MBPS} "
                     f"context=0x55d0c0{i}a2b0 pciPath=/sys/devices/pci000{i}:00/000{i}:00:00.0/"
                     f"000{i}:01:00.1 ar=0{tail}")
        if (2, 20) <= v < (2, 24) and merged:  # merged NICs inside the Using line
            inner = ", ".join(f"[{i}] {h}:1/RoCE" for i, h in enumerate(hcas))
            using = f" [0]={{{inner}}}"
        else:
            using = "".join(f" [{i}]{h}:1/RoCE" for i, h in enumerate(hcas))
        if v >= (2, 24) and n.net_subsys:
            for i, h in enumerate(hcas):
                tail = f" rail=-1 plane={-1}" if v >= (2, 29) else ""
                info(f"NET/IB : Made virtual device [{i}] name={h} speed={IB_SPEED_MBPS} ndevs=1{tail}")
        info(f"NET/IB : Using{using} [RO]; OOB {n.socket_if}:{n.addr}<0>")
    elif n.network == "Socket":
        if not hcas:
            info("NET/IB : No device found.")
        info(f"NET/Socket : Using [0]{n.socket_if}:{n.addr}<0>")
    info(f"Using network {n.network}")
    comms = [(0x55d0c0a11000, n.nranks, n.rank, 0x4c5e1d2a9b7f3e01)]
    if n.second_comm:
        comms.append((0x55d0c0b22000, n.nranks, n.rank, 0x7a1b2c3d4e5f6071))
    nnodes = n.nnodes or n.nranks
    for ci, (ptr, nranks, rank, cid) in enumerate(comms):
        ctid = tid + 1 + ci
        base = f"comm 0x{ptr:x} rank {rank} nranks {nranks} cudaDev 0"
        if v < (2, 19):
            start = None
            done = f"{base} busId f000 commId 0x{cid:x} - Init COMPLETE"
        else:
            base_n = f"{base} nvmlDev 0 busId f000 commId 0x{cid:x}"
            fn = "ncclCommInitRank "
            rank_tag = f"[Rank {rank}] " if v >= (2, 29) else ""
            start = f"{rank_tag}{fn}{base_n} - Init START"
            done = f"{fn}{base_n} - Init COMPLETE"
        if start:
            info(start, ctid)
        if v >= (2, 19):
            info(f"comm 0x{ptr:x} rank {rank} nRanks {nranks} nNodes {nnodes} localRanks 1 "
                 f"localRank 0 MNNVL 0", ctid)
        if merged and v >= (2, 24) and n.net_subsys and ci == 0 and n.network == "IB":
            name = "+".join(hcas)
            tail = " rail=-1 plane=3" if v >= (2, 29) else ""
            info(f"NET/IB : Made virtual device [{len(hcas)}] name={name} "
                 f"speed={IB_SPEED_MBPS * len(hcas)} ndevs={len(hcas)}{tail}", ctid)
        nch = n.n_channels
        info(f"Channel 00/{nch:02d} : " + " ".join(str(r) for r in range(nranks)), ctid)
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        devs = n.channel_devs
        if devs is None:
            if n.network == "Socket":
                devs = [0]
            elif merged:
                devs = [len(hcas) if v >= (2, 24) else 0]
            else:
                devs = list(range(max(len(hcas), 1)))
        for c in range(nch):
            dev = devs[c % len(devs)]
            net = f"NET/{n.network}/{dev}"
            flags = "/GDRDMA" if n.gdr and n.network == "IB" else ""
            bus = "f000" if v < (2, 19) else "0"
            for conn in (0,):
                info(f"Channel {c:02d}/{conn} : {prv}[{bus}] -> {rank}[{bus}] [receive] via "
                     f"{net}{flags}", ctid)
                info(f"Channel {c:02d}/{conn} : {rank}[{bus}] -> {nxt}[{bus}] [send] via "
                     f"{net}{flags}", ctid)
        info("Connected all rings", ctid)
        info(done, ctid)
    if n.t_end_realtime_ns is not None and v < (2, 30):  # 2.30+: the DESTROY subsystem only
        t = n.t_end_realtime_ns
        for ptr, nranks, rank, _ in comms:
            info(f"comm 0x{ptr:x} rank {rank} nranks {nranks} cudaDev 0 busId f000 - "
                 "Destroy COMPLETE")
    return lines


def write_nccl_log(path: str | os.PathLike, n: NodeLog) -> Path:
    """Write ``format_nccl_log(n)`` to ``path`` (one line each, newline-terminated)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(format_nccl_log(n)) + "\n")
    return path


def collectives_of(traffic) -> list[dict]:
    """Return the all-reduces (and all-gathers) an emulated ``Traffic`` played, in model time.

    Each: ``coll`` ("AllReduce" or "AllGather"), ``t0_ns`` / ``t1_ns`` (model ns), ``wire_bytes``
    (what the node sent on the wire: the model's bytes), ``msg_bytes`` (NCCL's message size:
    ``wire / (2(N-1)/N)`` for a ring all-reduce, ``wire / (N-1)`` for an all-gather). Prefill
    passes play each all-reduce as its own ramp; a decode pass is one ramp whose bytes grow
    linearly, so its ``2 x layers + 1`` all-reduces get equal consecutive slices of it (and the
    logits gather the remainder). Exactly the bytes of the cumulative curve, nothing added.
    """
    arch = traffic.config.arch
    if arch.layout != "tp" or not arch.networked:
        return []
    n = arch.tp
    rf = arch.ring_factor
    t, b = traffic.t_ns, traffic.cum_bytes
    out: list[dict] = []
    for p in traffic.passes:
        tokens = p.prefill_tokens + p.decode_tokens
        ar = arch.collective_bytes(tokens)
        if ar <= 0:
            continue
        lo = int(np.searchsorted(t, p.t_start_ns, side="left"))
        hi = int(np.searchsorted(t, p.t_end_ns, side="right"))
        seg_t, seg_b = t[lo:hi], b[lo:hi]
        ramps = [(int(seg_t[i]), int(seg_t[i + 1]), float(seg_b[i + 1] - seg_b[i]))
                 for i in range(len(seg_t) - 1) if seg_b[i + 1] > seg_b[i]]
        n_ar = arch.collectives_per_pass
        if len(ramps) == 1 and ramps[0][2] > ar * 1.5:  # a decode pass: one linear ramp
            t0, t1, tot = ramps[0]
            dt = (t1 - t0) / tot
            s = float(t0)
            for _ in range(n_ar):
                out.append({"coll": "AllReduce", "t0_ns": int(round(s)),
                            "t1_ns": int(round(s + ar * dt)), "wire_bytes": ar,
                            "msg_bytes": ar / rf})
                s += ar * dt
            rest = tot - n_ar * ar
            if rest > 1:
                out.append({"coll": "AllGather", "t0_ns": int(round(s)), "t1_ns": t1,
                            "wire_bytes": rest, "msg_bytes": rest / (n - 1)})
            continue
        for t0, t1, nb in ramps:
            kind = "AllReduce" if abs(nb - ar) <= 1e-6 * ar else "AllGather"
            out.append({"coll": kind, "t0_ns": t0, "t1_ns": t1, "wire_bytes": nb,
                        "msg_bytes": nb / (rf if kind == "AllReduce" else n - 1)})
    return out


def write_inspector(dirpath: str | os.PathLike, traffic, t0_realtime_ns: int, *, host: str,
                    pid: int = 4242, rank: int = 0, speed: float = 1.0, verbose: bool = True,
                    dump_interval_us: int = 500, min_size_bytes: int = 8192) -> Path | None:
    """Write Inspector JSON records for the collectives of ``traffic`` into ``dirpath``.

    ``t0_realtime_ns``: the realtime (ns since the epoch) of model time 0; ``speed``: model time
    runs ``speed`` x faster than real time (as ``simulate serve --speed``). Collectives below
    ``min_size_bytes`` are left out, as NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES does. Returns the
    file, or None when the traffic has no collective on the network.
    """
    colls = collectives_of(traffic)
    if not colls:
        return None
    arch = traffic.config.arch
    n = arch.tp
    d = Path(dirpath)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{host}-pid{pid}.log"
    header = {"id": "0x4c5e1d2a9b7f3e", "comm_name": "tp", "rank": rank, "n_ranks": n,
              "nnodes": arch.nodes}
    lines = []
    sn = 0
    for c in colls:
        if c["msg_bytes"] < min_size_bytes:
            continue
        sn += 1
        start_us = (t0_realtime_ns + c["t0_ns"] / speed) / 1000.0
        dur_us = max((c["t1_ns"] - c["t0_ns"]) / speed / 1000.0, 1.0)
        size = int(round(c["msg_bytes"]))
        if c["coll"] == "AllReduce":
            traffic_b, factor = size, 2.0 * (n - 1) / n
        else:
            traffic_b, factor = size * n, (n - 1) / n
        exec_us = int(round(dur_us))
        algobw = traffic_b / 1e9 / (exec_us / 1e6)
        stop_us = start_us + dur_us
        perf = {"coll": c["coll"], "coll_sn": sn, "coll_msg_size_bytes": size,
                "coll_exec_time_us": exec_us, "coll_timing_source": "kernel_gpu",
                "coll_algobw_gbs": round(algobw, 6), "coll_busbw_gbs": round(algobw * factor, 6)}
        if verbose:
            perf["event_trace_sn"] = {"coll_start_sn": 1, "coll_stop_sn": 2, "kernel_events": [
                {"channel_id": 0, "kernel_start_sn": 3, "kernel_stop_sn": 4, "kernel_record_sn": 4}]}
            perf["event_trace_ts"] = {
                "coll_start_ts": int(start_us) - 5, "coll_stop_ts": int(start_us),
                "kernel_events": [{"channel_id": 0, "kernel_start_ts": int(round(start_us)),
                                   "kernel_stop_ts": int(round(stop_us)),
                                   "kernel_record_ts": int(round(stop_us))}]}
        meta = {"inspector_output_format_version": "v4.0", "git_rev": "",
                "rec_mechanism": "nccl_profiler_interface",
                "dump_timestamp_us": int(stop_us) + dump_interval_us, "hostname": host, "pid": pid}
        lines.append(json.dumps({"header": header, "metadata": meta, "coll_perf": perf},
                                separators=(",", ":")))
    path.write_text("\n".join(lines) + "\n")
    return path


#: where the emulator puts the two witnesses beside a capture's files
LOG_DIR, INSPECTOR_DIR = "nccl", "nccl-inspector"


def node_log_for(link: dict, arch: dict, *, host: str, rank: int, t_realtime_ns: int,
                 version: str = "2.27.7", pid: int = 4242, series: list | None = None) -> NodeLog:
    """The ``NodeLog`` of a node whose truth says ``link`` (truth.json ``config.link``) and
    ``arch`` (``config.arch``): one HCA with NCCL_IB_HCA when emulated, both twins otherwise,
    NET/Socket (after "NET/IB : No device found.") for the TCP fallback. ``series`` (truth.json
    ``series``) wins over ``link``: the HCAs whose collective share is > 0 are those NCCL used
    (a cluster node that was not emulated carries both twins whatever the shared link says)."""
    from .model import NETDEVS, TWINS

    twins = list(TWINS[:int(link.get("twins", 2))])
    active = int(link.get("active_twins", len(twins)))
    if series:
        used = [d for d in twins if any(x.get("device") == d and x.get("source") == "infiniband"
                                        and float(x.get("collective_share") or 0) > 0
                                        for x in series)]
        if used:
            twins, active = [d for d in twins if d in used] + [d for d in twins if d not in used], len(used)
    tp = int(arch.get("tp", 2))
    nodes = int(arch.get("nodes") or tp)
    if link.get("tcp_fallback"):
        hcas, env, net = [], None, "Socket"
    elif active < len(twins):
        hcas, env, net = twins[:active], ",".join(twins[:active]), "IB"
    else:
        hcas, env, net = twins, None, "IB"
    return NodeLog(host=host, version=version, pid=pid + rank, hcas=hcas, ib_hca_env=env,
                   network=net, socket_if=NETDEVS[0], addr=f"192.168.100.{11 + rank}",
                   rank=rank, nranks=tp, nnodes=nodes, t_realtime_ns=t_realtime_ns,
                   timestamps=True)


def write_witnesses(capture_dir: str | os.PathLike, traffic=None, *, rank: int = 0,
                    version: str = "2.27.7", speed: float | None = None,
                    out_dir: str | os.PathLike | None = None, host: str | None = None,
                    realtime_offset_ns: int | None = None) -> dict[str, Path]:
    """Write the NCCL witnesses of the emulated node whose capture (or serve output) is
    ``capture_dir``: ``<out>/nccl/<host>.<pid>`` (the INFO log, as ``NCCL_DEBUG_FILE=%h.%p``
    names it) and, given the node's ``traffic``, ``<out>/nccl-inspector/<host>-pid<pid>.log``.

    Reads the node's ``truth.json`` (link, arch, t0_monotonic_ns, speed) and the capture's
    ``manifest.json`` (host and a realtime/monotonic pair) when present; without a manifest
    (``simulate serve``: the recorder writes it), this machine's clocks place model time 0.
    ``out_dir``: where to write (default ``capture_dir``). ``host`` / ``realtime_offset_ns``
    (realtime - monotonic of the node, ns): a live cluster node's emulated name and clocks, in
    place of the manifest's or this machine's. Returns {"log": path[, "inspector": path]}. Raises ``OSError`` / ``ValueError`` (no truth.json) as reading and writing do.
    """
    d = Path(capture_dir)
    truth_path = d / "truth.json"
    if not truth_path.is_file():
        raise ValueError(f"{truth_path}: no truth file to write the NCCL witnesses from")
    truth = json.loads(truth_path.read_text())
    mpath = d / "manifest.json"
    t0_mono = int(truth.get("t0_monotonic_ns", 0))
    speed = float(speed or truth.get("speed") or 1.0)
    if host is not None and realtime_offset_ns is not None:
        off = int(realtime_offset_ns)
    elif mpath.is_file():
        m = json.loads(mpath.read_text())
        host = str(m.get("host") or "emulated-spark")
        off = int(m["start"]["realtime_ns"]) - int(m["start"]["monotonic_ns"])
    else:
        import socket

        host = host or socket.gethostname()
        off = time.time_ns() - time.monotonic_ns()
    t0_real = t0_mono + off
    cfg = truth.get("config", {})
    out = Path(out_dir) if out_dir is not None else d
    pid = 4242 + rank
    node = node_log_for(cfg.get("link", {}), cfg.get("arch", {}), host=host, rank=rank,
                        t_realtime_ns=t0_real, version=version, series=truth.get("series"))
    dur = truth.get("duration_model_ns")
    if dur is not None:  # the run ends with the scenario: NCCL closes its communicators
        node.t_end_realtime_ns = int(t0_real + float(dur) / speed)
    paths = {"log": write_nccl_log(out / LOG_DIR / f"{host.split('.')[0]}.{pid}", node)}
    if traffic is not None:  # NCCL records its collectives whatever the transport
        ins = write_inspector(out / INSPECTOR_DIR, traffic, t0_real, host=host, pid=pid,
                              rank=rank, speed=speed)
        if ins is not None:
            paths["inspector"] = ins
    return paths


_WITNESS_NAMES = {LOG_DIR: r"[\w.\-]+\.\d+", INSPECTOR_DIR: r"[\w.\-]+-pid\d+\.log"}


def is_witness_dir(p: str | os.PathLike) -> bool:
    """True when ``p`` is an emulator's ``nccl/`` or ``nccl-inspector/`` directory: a real
    directory (no symbolic link) holding only regular files named as the writer names them."""
    import re

    p = Path(p)
    pat = _WITNESS_NAMES.get(p.name)
    if pat is None or p.is_symlink() or not p.is_dir():
        return False
    return all(f.is_file() and not f.is_symlink() and re.fullmatch(pat, f.name)
               for f in p.iterdir())


def remove_earlier_witnesses(capture_dir: str | os.PathLike) -> None:
    """With ``--force``: remove the NCCL witnesses an earlier ``simulate`` wrote into
    ``capture_dir``, only when it is a simulated capture (manifest ``writer`` "simulate") and
    they are ``is_witness_dir``; anything else is left for the capture's own check to refuse."""
    import shutil

    d = Path(capture_dir)
    try:
        writer = json.loads((d / "manifest.json").read_text()).get("writer")
    except (OSError, ValueError, AttributeError):
        return
    if writer != "simulate":
        return
    for name in _WITNESS_NAMES:
        if is_witness_dir(d / name):
            shutil.rmtree(d / name)
