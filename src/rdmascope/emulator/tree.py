"""An emulated DGX Spark sysfs tree (two ConnectX-7 twins) and the live player that moves its counters.

Layout (real sysfs, sysfs.md "Layout"): the class entries are symlinks into the PCI device tree::

    class/infiniband/rocep1s0f1 -> ../../devices/pci0000:00/0000:00:00.0/0000:01:00.1/infiniband/rocep1s0f1
    class/net/enp1s0f1np1       -> ../../devices/pci0000:00/0000:00:00.0/0000:01:00.1/net/enp1s0f1np1
    devices/.../0000:01:00.1/   vendor, device, current_link_speed "32.0 GT/s PCIe", current_link_width "4"
      infiniband/rocep1s0f1/    node_guid, sys_image_guid, fw_ver, hca_type, board_id, node_type,
                                device -> ../../../0000:01:00.1,
                                ports/1/{state, phys_state, rate, link_layer, gid_attrs/, counters/ (the
                                full 64-bit extended set), hw_counters/ (mlx5 set + lifespan)}
      net/enp1s0f1np1/          address, mtu, operstate, speed, device -> ../../../0000:01:00.1,
                                statistics/{tx_bytes, rx_bytes, tx_packets, rx_packets, ...}

and the same for ``roceP2p1s0f1`` / ``enP2p1s0f1np1`` at ``0002:01:00.1``.

Live mechanism (why an in-place writer): the sampler keeps every counter file open and re-reads it
with ``pread(fd, 64, 0)``, as on real sysfs. Replacing files (write + rename) would leave its open
descriptors on the old inodes, and a FUSE filesystem needs ``fusermount`` privileges and a FUSE
library that is not among the project's dependencies. So the player keeps one ``O_WRONLY``
descriptor per moving file and ``pwrite``s the new decimal value at offset 0 (same inode) at
``tick_hz`` (default 4 kHz, period 0.25 ms). Each write carries the model's value for the middle of
the coming tick period, so a read at time t returns the model at a time within half a period
(+ scheduling delay) of t. Values only grow, so the text never gets shorter and no stale digits
remain (no truncate needed). Unchanged values are not rewritten (idle counters cost nothing).
The tree belongs on tmpfs (``/dev/shm``, the default root): no disk I/O, page-cache-only writes.

Residual risk, measured: tmpfs does not serialise a ``read`` against a concurrent ``pwrite`` of the
same bytes, so a read overlapping a write by nanoseconds can return a mix of two consecutive values'
digits (not monotonic). Its chance grows with the write rate: with a writer rewriting a file ~1.1
million times/s and a reader re-reading it flat out, 58 reads in 875,000 were such a mix
(``tests/test_emulator_tree.py``, run with ``--soak``); scaled to the player's 4 kHz that is
~2.5e-7 per read, about one torn reading per quarter hour when four files are sampled at 1 kHz. No
write ordering avoids it (a carry must change a digit downwards), and a FUSE filesystem is not
available. The analysis drops such a reading as a glitch (it breaks monotonicity while its
neighbours agree: ``analysis/series.py``), so the bytes across it stay exact and only that 2 ms
of timing is coarser. Real sysfs has no such race; this is a limit of the emulator only.

Which files move: ``port_xmit_data``/``port_rcv_data`` (bytes / 4) and the netdev ``tx_bytes``/
``rx_bytes`` every tick; the packet counters (bytes / mean packet size, approximate) every 10 ms.
Everything else is static. The 10 ms ``hw_counters/lifespan`` cache of the real kernel is moot
because the emulated hw_counters do not move.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rdmascope.emulator.model import NETDEVS, TWINS, Traffic

MARKER = ".rdmascope-emulated-tree"
DEFAULT_ROOT = "/dev/shm/rdmascope-sim"

MLX5_COUNTERS = (
    "VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
    "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_packets",
    "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets",
)
MLX5_HW_COUNTERS = (
    "duplicate_request", "implied_nak_seq_err", "local_ack_timeout_err", "np_cnp_sent",
    "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence", "packet_seq_err",
    "req_cqe_error", "req_cqe_flush_error", "req_remote_access_errors",
    "req_remote_invalid_request", "resp_cqe_error", "resp_cqe_flush_error",
    "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
    "roce_slow_restart_trans", "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests",
    "rx_dct_connect", "rx_read_requests", "rx_write_requests",
)
NETDEV_STATS = (
    "collisions", "multicast", "rx_bytes", "rx_compressed", "rx_crc_errors", "rx_dropped",
    "rx_errors", "rx_fifo_errors", "rx_frame_errors", "rx_length_errors", "rx_missed_errors",
    "rx_over_errors", "rx_packets", "tx_aborted_errors", "tx_bytes", "tx_carrier_errors",
    "tx_compressed", "tx_dropped", "tx_errors", "tx_fifo_errors", "tx_heartbeat_errors",
    "tx_packets", "tx_window_errors",
)
#: mean bytes per packet used to derive the (approximate) packet counters from the byte counters
RDMA_PACKET_BYTES = 4150  # 4096-byte RoCE payload + headers
NETDEV_PACKET_BYTES = 1500


@dataclass(frozen=True)
class TwinSpec:
    """One PCI function of the ConnectX-7: its RDMA device, netdev and PCI location."""

    device: str
    netdev: str
    domain: str  # "0000"
    pci: str  # "0000:01:00.1"

    @property
    def pci_rel(self) -> str:
        """The function's directory relative to the root, as in real sysfs."""
        return f"devices/pci{self.domain}:00/{self.domain}:00:00.0/{self.pci}"


SPARK_TWINS = (
    TwinSpec(TWINS[0], NETDEVS[0], "0000", "0000:01:00.1"),
    TwinSpec(TWINS[1], NETDEVS[1], "0002", "0002:01:00.1"),
)


@dataclass
class MovingFile:
    """A counter file whose value follows a traffic series: base + floor(bytes / divisor)."""

    path: Path
    series: str  # "<device or netdev>/<tx|rx>"
    divisor: int
    base: int
    fast: bool  # updated every tick (data/byte counters) or every slow tick (packets)


@dataclass
class EmulatedTree:
    """A built tree: its root and the files that move with the traffic."""

    root: Path
    seed: int
    twins: tuple[TwinSpec, ...]
    moving: list[MovingFile] = field(default_factory=list)

    def value_at(self, traffic: Traffic, t_ns) -> dict[Path, np.ndarray]:
        """Return each moving file's value (int64 array) at model times ``t_ns``."""
        t = np.atleast_1d(np.asarray(t_ns))
        keys = sorted({m.series for m in self.moving})
        cum = dict(zip(keys, traffic.cumulative_bytes(t, keys), strict=True))
        return {m.path: m.base + np.floor(cum[m.series] / m.divisor).astype(np.int64)
                for m in self.moving}

    def write_at(self, traffic: Traffic, t_ns: int) -> None:
        """Write every moving file's value at model time ``t_ns`` (in place)."""
        for path, v in self.value_at(traffic, [t_ns]).items():
            _write_in_place(path, int(v[0]))

    def file_of(self, device: str, name: str) -> Path:
        """Return the path (under the PCI tree) of a port-1 counter or netdev statistics file."""
        for tw in self.twins:
            if device == tw.device:
                return self.root / tw.pci_rel / "infiniband" / tw.device / "ports/1/counters" / name
            if device == tw.netdev:
                return self.root / tw.pci_rel / "net" / tw.netdev / "statistics" / name
        raise KeyError(f"no device or netdev {device!r} in the emulated tree")


def _write_in_place(path: Path, value: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, f"{value}\n".encode(), 0)
    finally:
        os.close(fd)


def guid_of(seed: int, i: int) -> str:
    h = hashlib.sha256(f"rdmascope-emulated-{seed}-{i}".encode()).hexdigest()
    return f"{h[0:4]}:{h[4:6]}ff:fe{h[6:8]}:{h[8:12]}"


def write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pcie_width_for(twin_gbps: float | None) -> int:
    """Lanes of the emulated PCIe Gen5 link of a twin that carries ``twin_gbps``: 4 (a DGX
    Spark twin: 126 Gb/s, ``rdmascope.pcie``) unless the twin is set to carry more, then the
    narrowest of x8 / x16 whose bound holds it (16 at most)."""
    from rdmascope.pcie import link_bound_gbps

    for lanes in (4, 8, 16):
        if twin_gbps is None or twin_gbps <= link_bound_gbps(32.0, lanes):
            return lanes
    return 16


def build_tree(root: str | os.PathLike = DEFAULT_ROOT, *, seed: int = 0,
               rate: str = "200 Gb/sec (4X HDR)", force: bool = True,
               twins: int = 2, pcie_width: int = 4) -> EmulatedTree:
    """Create the emulated Spark sysfs tree under ``root`` and return it.

    ``twins``: RDMA devices of the port, 2 (a Spark's two PCIe twins) or 1 (only the first, as a
    single-function NIC shows). Raises ``ValueError`` for another count. ``pcie_width``: the
    lanes of each twin's PCIe Gen5 link (its ``current_link_width``/``max_link_width``; 4 on a
    Spark, see ``pcie_width_for``).

    Counters start at seed-dependent values (a node that has been up for a while). ``root`` must
    be absent, empty, or a tree this function built before (it carries a marker file and is
    rebuilt when ``force``). Raises ``FileExistsError`` for any other non-empty directory (it is
    never deleted) and ``OSError`` when the directory cannot be written.
    """
    if twins not in (1, 2):
        raise ValueError(f"twins must be 1 or 2, got {twins}")
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        if not (root / MARKER).is_file():
            raise FileExistsError(f"{root}: exists, is not empty and is not an emulated tree "
                                  f"(no {MARKER}); refusing to touch it")
        if not force:
            raise FileExistsError(f"{root}: already holds an emulated tree")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    write_file(root / MARKER, "built by rdmascope.emulator.tree.build_tree\n")
    rng = np.random.default_rng(seed + 7919)
    tree = EmulatedTree(root=root, seed=seed, twins=SPARK_TWINS[:twins])
    for i, tw in enumerate(SPARK_TWINS[:twins]):
        fn = root / tw.pci_rel
        for name, text in (("vendor", "0x15b3"), ("device", "0x1021"), ("class", "0x020000"),
                           ("current_link_speed", "32.0 GT/s PCIe"),
                           ("current_link_width", str(int(pcie_width))),
                           ("max_link_speed", "32.0 GT/s PCIe"),
                           ("max_link_width", str(int(pcie_width))),
                           ("numa_node", "-1")):
            write_file(fn / name, text + "\n")
        dev = fn / "infiniband" / tw.device
        guid = guid_of(seed, i)
        write_file(dev / "node_guid", guid)  # real kernels may omit the trailing newline (sysfs.md)
        write_file(dev / "sys_image_guid", guid_of(seed, 0) + "\n")
        write_file(dev / "fw_ver", "28.45.1020\n")
        write_file(dev / "hca_type", "MT4129\n")
        write_file(dev / "board_id", "NVD0000000087\n")
        write_file(dev / "node_type", "1: CA\n")
        os.symlink(f"../../../{tw.pci}", dev / "device")
        port = dev / "ports" / "1"
        write_file(port / "state", "4: ACTIVE\n")
        write_file(port / "phys_state", "5: LinkUp\n")
        write_file(port / "rate", f"{rate}\n")
        write_file(port / "link_layer", "Ethernet\n")
        write_file(port / "lid", "0x0\n")
        write_file(port / "sm_lid", "0x0\n")
        write_file(port / "cap_mask", "0x00010000\n")
        for g, gtype in enumerate(("IB/RoCE v1", "RoCE v2")):
            write_file(port / "gid_attrs" / "ndevs" / str(g), tw.netdev + "\n")
            write_file(port / "gid_attrs" / "types" / str(g), gtype + "\n")
        data_base = int(rng.integers(10**9, 5 * 10**9))
        for c in MLX5_COUNTERS:
            if c in ("port_xmit_data", "port_rcv_data"):
                base = data_base + int(rng.integers(0, 10**6))
                d = "tx" if "xmit" in c else "rx"
                tree.moving.append(MovingFile(port / "counters" / c, f"{tw.device}/{d}", 4,
                                              base, True))
            elif c in ("port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
                       "unicast_rcv_packets"):
                base = data_base * 4 // RDMA_PACKET_BYTES
                d = "tx" if "xmit" in c else "rx"
                tree.moving.append(MovingFile(port / "counters" / c, f"{tw.device}/{d}",
                                              RDMA_PACKET_BYTES, base, False))
            elif c.startswith("multicast"):
                base = int(rng.integers(0, 500))
            else:
                base = 0
            write_file(port / "counters" / c, f"{base}\n")
        write_file(port / "hw_counters" / "lifespan", "10\n")
        for c in MLX5_HW_COUNTERS:
            write_file(port / "hw_counters" / c, "0\n")
        nd = fn / "net" / tw.netdev
        mac = ":".join(guid.replace(":", "")[k:k + 2] for k in (0, 2, 4, 10, 12, 14))
        for name, text in (("address", mac), ("mtu", "9000"), ("operstate", "up"),
                           ("speed", "200000"), ("carrier", "1"), ("type", "1")):
            write_file(nd / name, text + "\n")
        os.symlink(f"../../../{tw.pci}", nd / "device")
        nbase = int(rng.integers(10**8, 10**9))
        for s in NETDEV_STATS:
            if s in ("tx_bytes", "rx_bytes"):
                d = s[:2]
                tree.moving.append(MovingFile(nd / "statistics" / s, f"{tw.netdev}/{d}", 1,
                                              nbase, True))
                base = nbase
            elif s in ("tx_packets", "rx_packets"):
                base = nbase // NETDEV_PACKET_BYTES
                tree.moving.append(MovingFile(nd / "statistics" / s, f"{tw.netdev}/{s[:2]}",
                                              NETDEV_PACKET_BYTES, base, False))
            else:
                base = 0
            write_file(nd / "statistics" / s, f"{base}\n")
        ci = root / "class" / "infiniband"
        cn = root / "class" / "net"
        ci.mkdir(parents=True, exist_ok=True)
        cn.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../{tw.pci_rel}/infiniband/{tw.device}", ci / tw.device)
        os.symlink(f"../../{tw.pci_rel}/net/{tw.netdev}", cn / tw.netdev)
    return tree


def remove_tree(root: str | os.PathLike) -> None:
    """Delete an emulated tree (only a directory carrying the marker; others raise ValueError)."""
    root = Path(root)
    if not root.exists():
        return
    if not (root / MARKER).is_file():
        raise ValueError(f"{root}: not an emulated tree (no {MARKER}); not deleting it")
    shutil.rmtree(root)


# ----------------------------------------------------------------------------------------------
# Live player
# ----------------------------------------------------------------------------------------------


@dataclass
class PlayStats:
    """What the player achieved: ticks, writes and the largest gap between ticks (real ns)."""

    t0_ns: int
    t_end_ns: int
    ticks: int
    writes: int
    max_tick_gap_ns: int
    p99_tick_gap_ns: int
    completed: bool
    priority: str = "normal"  # "fifo" | "nice" | "normal" (see raise_priority)
    late_ticks: int = 0  # gaps between ticks longer than 1 ms

    @property
    def tick_hz(self) -> float:
        return self.ticks / max((self.t_end_ns - self.t0_ns) / 1e9, 1e-9)


class _Cursor:
    """Evaluate the piecewise-linear collective at increasing times in O(1) amortised."""

    def __init__(self, t_ns: np.ndarray, cum: np.ndarray):
        self.t = t_ns.tolist()
        self.b = cum.tolist()
        self.i = 0

    def __call__(self, t: float) -> float:
        tt, n = self.t, len(self.t) - 1
        i = self.i
        while i < n and tt[i + 1] <= t:
            i += 1
        self.i = i
        if i >= n:
            return self.b[n]
        if t <= tt[i]:
            return self.b[i]
        return self.b[i] + (self.b[i + 1] - self.b[i]) * (t - tt[i]) / (tt[i + 1] - tt[i])


def play(tree: EmulatedTree, traffic: Traffic, *, t0_ns: int | None = None, speed: float = 1.0,
         tick_hz: float = 4000.0, slow_every: int = 40,
         should_stop: Callable[[], bool] | None = None,
         clock: Callable[[], int] = time.perf_counter_ns) -> PlayStats:
    """Play ``traffic`` into the tree's counter files in real time; return what was achieved.

    Model time 0 is real time ``t0_ns`` (CLOCK_MONOTONIC ns, default now); model time advances
    ``speed`` times faster than real time. Every tick (``tick_hz``) the data/byte counters are
    rewritten in place with the model value for the middle of the coming period (values at or
    before the end of the scenario, never decreasing); the packet counters every ``slow_every``
    ticks. Returns at the end of the scenario (after writing the final values) or as soon as
    ``should_stop()`` is true. Raises ``OSError`` if a counter file cannot be opened.
    """
    return play_nodes([(tree, traffic)], t0_ns=t0_ns, speed=speed, tick_hz=tick_hz,
                      slow_every=slow_every, should_stop=should_stop, clock=clock)


def play_nodes(nodes: list[tuple[EmulatedTree, Traffic]], *, t0_ns: int | None = None,
               speed: float = 1.0, tick_hz: float = 4000.0, slow_every: int = 40,
               should_stop: Callable[[], bool] | None = None,
               clock: Callable[[], int] = time.perf_counter_ns) -> PlayStats:
    """``play`` for several trees at once (an emulated cluster: one tree per node, each with its
    own traffic), every tree written at every tick by one loop. Ends when every node's scenario
    has ended (the longest) or ``should_stop()``. Raises as ``play``."""
    if speed <= 0 or tick_hz <= 0:
        raise ValueError("speed and tick_hz must be positive")
    try:  # finer sleeps: the default 50 us timer slack would stretch every tick
        from rdmascope.sampler.loop import reduce_timer_slack
        reduce_timer_slack(1)
    except Exception:  # noqa: BLE001 - best effort only
        pass
    priority = raise_priority()
    period = int(1e9 / tick_hz)
    t0 = clock() if t0_ns is None else int(t0_ns)
    players = []  # (cursor, all files, fast files, duration)
    files_all = []
    for tree, traffic in nodes:
        cursor = _Cursor(traffic.t_ns, traffic.cum_bytes)
        smap = {s.key: s for s in traffic.series}
        files = []
        for m in tree.moving:
            s = smap[m.series]
            # a resize (Series.change_ns): the share before it, and the collective at it
            change = (None if s.change_ns is None else
                      (s.share_before, float(traffic.collective_bytes([s.change_ns])[0])))
            files.append([os.open(m.path, os.O_WRONLY), s.collective_share, s.idle_bps * 1e-9,
                          m.divisor, m.base, m.fast, -1, change])
        files_all.extend(files)
        players.append((cursor, files, [f for f in files if f[5]], traffic.duration_ns))
    duration = max(p[3] for p in players)
    ticks = writes = 0
    gaps: list[int] = []
    last = None
    completed = False
    pwrite = os.pwrite
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection pause would freeze the counters (the loop allocates little)
    try:
        k = 0
        while True:
            now = clock()
            if last is not None:
                gaps.append(now - last)
            last = now
            tm_all = (now - t0 + period / 2) * speed
            if tm_all < 0:
                tm_all = 0.0
            for cursor, files, fast, dur in players:
                tm = min(tm_all, dur)
                c = cursor(tm)
                group = files if k % slow_every == 0 or tm >= dur else fast
                for f in group:
                    if f[7] is None:
                        v = f[4] + int((f[1] * c + f[2] * tm) // f[3])
                    else:
                        cc = f[7][1]
                        v = f[4] + int((f[7][0] * min(c, cc) + f[1] * max(c - cc, 0.0)
                                        + f[2] * tm) // f[3])
                    if v != f[6]:
                        pwrite(f[0], b"%d\n" % v, 0)
                        f[6] = v
                        writes += 1
            ticks += 1
            k += 1
            if tm_all >= duration:
                completed = True
                break
            if should_stop is not None and should_stop():
                break
            nxt = t0 + (int((now - t0) // period) + 1) * period
            delay = nxt - clock()
            if delay > 0:
                time.sleep(delay / 1e9)
    finally:
        if gc_was_enabled:
            gc.enable()
        for f in files_all:
            os.close(f[0])
    g = np.asarray(gaps, dtype=np.int64) if gaps else np.zeros(1, dtype=np.int64)
    return PlayStats(t0_ns=t0, t_end_ns=clock(), ticks=ticks, writes=writes,
                     max_tick_gap_ns=int(g.max()), p99_tick_gap_ns=int(np.percentile(g, 99)),
                     completed=completed, priority=priority,
                     late_ticks=int((g > 1_000_000).sum()))


def raise_priority() -> str:
    """Best effort: run the calling process at a real-time or raised priority; say which.

    A player that is descheduled for a few ms freezes the counters and then jumps (a reader sees
    an idle ms followed by several ms of bytes at once); on a busy machine a higher priority makes
    that rarer. Tries SCHED_FIFO priority 10 (needs CAP_SYS_NICE), then nice -10, else keeps the
    normal priority. The player sleeps between ticks (~20 us of work per 0.25 ms), so it cannot
    starve the recorder. Returns "fifo", "nice" or "normal".
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "fifo"
    except (OSError, AttributeError):
        pass
    try:
        os.nice(-10)
        return "nice"
    except OSError:
        return "normal"
