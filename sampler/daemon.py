"""The recorder: discovery -> counter reader -> 1 ms schedule -> capture writer, with a self-audit.

Threads: the calling (main) thread only samples: it reads every counter per sweep into typed
buffers and hands a full buffer to the writer thread every ``HANDOFF_INTERVAL_S``. The writer thread
owns the ``CaptureWriter``: it appends each buffer to the live Arrow IPC segment (flushed to the
OS, so a ``kill -9`` loses at most ~HANDOFF_INTERVAL_S + one write, well under 1 s), rolls it into
a Parquet segment every ``capture.ROLL_INTERVAL_S`` (tens of ms of CPU that must not delay a
sweep), saves events and a clock pair every <= 10 s, updates the audit histograms and prints the
optional live status line.

Stop: SIGINT/SIGTERM/SIGHUP, ``duration_s`` or a write error (disk full, unwritable directory,
any failure of the writer thread, or a writer more than ``WRITER_BACKLOG_S`` behind): the loop
ends, everything taken is written (when the writer still can), the last segment rolled, the error
kept as a ``write_error`` event, the stop clock pair and the audit saved. A status line that
cannot be written (a closed pipe) turns the status off, said once as a ``status_off`` event. Public API: ``RecordOptions``, ``record(options) -> RecordResult``, ``RecordError``.
"""

from __future__ import annotations

import gc
import os
import queue
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import psutil
import pyarrow as pa
from rdmascope.sampler.audit import LogHistogram
from rdmascope.sampler.csweep import POLL_NS, CompiledSweeper
from rdmascope.sampler.csweep import load as load_csweep
from rdmascope.sampler.discovery import (
    DEFAULT_COUNTERS,
    available_counters,
    counter_descriptors,
    counter_exists,
    default_route_netdevs,
    discover,
    discovered_devices,
    extra_netdev_descriptors,
    infiniband_dir,
    netdev_exists,
    sysfs_root_hint,
)
from rdmascope.sampler.loop import (
    ScheduleStats,
    reduce_timer_slack,
    run_schedule,
    set_cpu_affinity,
    set_rt_priority,
)
from rdmascope.sampler.reader import CounterReader, SweepBuffers
from rdmascope.sampler.status import (
    ERASE_EOL,
    StatusMeter,
    format_status,
    status_width,
    status_write,
)

from rdmascope import __version__
from rdmascope.capture import (
    ROLL_INTERVAL_S,
    CaptureError,
    CaptureWriteError,
    CaptureWriter,
    check_output,
    clock_pair,
    is_enospc,
    make_batch,
)
from rdmascope.textsafe import unfiltered

#: Buffers go to the writer thread this often (s); with the write itself this bounds the loss
#: after kill -9 well below the 1 s guarantee (issue 2, "Crash safety").
HANDOFF_INTERVAL_S = 0.25
#: A clock pair is recorded at least this often (s); method: "at least every 10 s".
CLOCK_PAIR_INTERVAL_S = 5.0
#: At most this many seconds of readings wait for the writer thread (a bounded queue of
#: handoffs). A writer further behind (a hung or very slow disk) stops the recording with an
#: error that says so; the buffers already taken are still written before the capture closes.
WRITER_BACKLOG_S = 10.0
#: A read slower than this many sampling intervals is a slow read (counted, named: audit,
#: inspect, status line); on mlx5 each read is a firmware command (command timeout 60 s).
SLOW_READ_FACTOR = 5
#: A read still running this long (s) is said live, while it lasts.
HUNG_SAY_S = 1.0
#: How long (ns) past the end (the last deadline of --duration, or a stop request) the recorder
#: waits for the sampling thread before it stops without it (a read that hangs): the rows taken
#: are kept, the read in progress is marked unavailable.
STOP_GRACE_NS = 60_000_000
#: ... and at most this long (ns) for a sampling thread that is late but still reading.
STOP_WAIT_MAX_NS = 2_000_000_000
MIN_INTERVAL_NS = 100_000
MAX_INTERVAL_NS = 1_000_000_000


def _read_ifindex(d: Path) -> int | None:
    """A netdev's ``ifindex`` (``class/net/<name>/ifindex``), or None when unreadable."""
    try:
        return int((d / "ifindex").read_text().strip())
    except (OSError, ValueError):
        return None


class DeviceChanges(list):
    """The manifest's ``device_changes`` list, put into the manifest at its first entry."""

    def __init__(self, manifest: dict):
        super().__init__()
        self._manifest = manifest

    def append(self, item) -> None:
        if not self:
            self._manifest["device_changes"] = self
        super().append(item)


class RecordError(Exception):
    """An expected failure that stops (or prevents) a recording; the message says what to do."""


class RecordUsageError(RecordError):
    """A ``RecordError`` caused by an option value that names nothing (a ``--sysfs-root`` that
    does not exist, a ``--device`` that is not there): the CLI exits 2, as for a usage error."""


@dataclass
class RecordOptions:
    """Options of ``rdmascope record`` (see ``record``)."""

    output: str | os.PathLike
    interval_ns: int = 1_000_000
    devices: list[str] | None = None
    counters: tuple[str, ...] | list[str] = DEFAULT_COUNTERS
    netdev_stats: bool = False
    #: with ``netdev_stats``: more interfaces to sample (``--netdev NAME``), beside the RDMA
    #: devices' own netdevs and the default-route interface(s)
    netdevs: list[str] = field(default_factory=list)
    sysfs_root: str | os.PathLike = "/sys"
    duration_s: float | None = None
    cpu: int | None = None
    rt_priority: int | None = None
    force: bool = False
    #: owner-only modes (0700 directories, 0600 files) instead of 0755/0644
    private: bool = False
    status: bool | None = None  # None: only when stderr is a TTY
    spin_ns: int = 0
    metrics: str | None = None  # --metrics [HOST:]PORT: serve Prometheus metrics (metrics.py)
    command_line: list[str] = field(default_factory=lambda: list(sys.argv))
    #: added to the manifest's ``extra`` (e.g. ``label``, ``note``, ``setup`` from ``record``)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the manifest's ``host`` (None: this machine's name; an emulated cluster node's own name)
    host: str | None = None
    #: an emulated cluster node's own clocks (``simulate serve --nodes``): added to every
    #: CLOCK_MONOTONIC / CLOCK_REALTIME reading of the recorder; 0 on a real host
    monotonic_offset_ns: int = 0
    realtime_offset_ns: int = 0


@dataclass
class RecordResult:
    """Outcome of ``record``: the capture path, the audit dict, and the error that stopped it.

    ``audit["sweeps_not_written"]`` counts the sweeps taken after a write error (kept only in
    the audit); ``disk_full`` says the error was ENOSPC.
    """

    path: Path
    audit: dict[str, Any]
    error: str | None = None
    stopped_by: str = "duration"
    disk_full: bool = False  # the write error was ENOSPC
    #: where the capture is now: ``path``; another directory when it was moved while recording
    #: (the writer kept writing by handle into it); None when it was deleted
    location: Path | None = None


def _to_batch(buf: SweepBuffers):
    """Build a SAMPLE_SCHEMA record batch from a buffer's typed arrays (zero-copy buffers).

    Arrays are made with ``pa.Array.from_buffers`` over the ``array.array`` memory: unlike
    ``pa.array(numpy or list)``, that path never makes pyarrow import pandas (it probes for
    pandas on any sequence/ndarray input when pandas is installed).
    """
    n = len(buf.sweep)

    def col(typ, data, validity=None):
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(data)])

    validity = None
    if buf.n_bad:
        ok = np.frombuffer(buf.status, dtype=np.uint8) == 0
        validity = pa.py_buffer(np.packbits(ok, bitorder="little").tobytes())
    return make_batch(
        col(pa.uint16(), buf.counter_id),
        col(pa.int64(), buf.sweep),
        col(pa.int64(), buf.t_before_ns),
        col(pa.uint32(), buf.read_duration_ns),
        col(pa.uint64(), buf.value, validity),
        col(pa.uint8(), buf.status),
    )


def _warm_up(n_counters: int, status: bool) -> None:
    """Exercise every pyarrow/numpy code path the writer thread uses, on throw-away data.

    The first use of a pyarrow kernel or writer loads code and allocates pools (tens of ms,
    holding the GIL); done here, before sweep 0, it cannot delay a sweep.
    """
    from rdmascope.capture import SAMPLE_SCHEMA, write_segment

    buf = SweepBuffers()
    for k in range(4):
        buf.sweep_start_ns.append(k)
        for i in range(n_counters):
            for col, v in ((buf.counter_id, i), (buf.sweep, k), (buf.t_before_ns, k),
                           (buf.read_duration_ns, 1), (buf.value, k), (buf.status, k % 2)):
                col.append(v)
    buf.n_bad = 1
    batch = _to_batch(buf)
    SAMPLE_SCHEMA.serialize()
    batch.serialize()  # what CaptureWriter.write_batch sends to the live segment
    table = pa.Table.from_batches([batch], schema=SAMPLE_SCHEMA)
    table = table.sort_by([("counter_id", "ascending"), ("sweep", "ascending")])
    write_segment(table, pa.BufferOutputStream())
    _WriterThread._audit_into(buf, [LogHistogram() for _ in range(n_counters)],
                              LogHistogram(), [0] * n_counters, None)


class _WriterThread(threading.Thread):
    """Own the CaptureWriter: write handed-off buffers, roll, events, clock pairs, audit, status."""

    def __init__(self, writer: CaptureWriter, counters: list[dict[str, Any]],
                 status_out: TextIO | None, log: TextIO | None = None, *,
                 max_queued: int | None = None):
        super().__init__(name="rdmascope-writer", daemon=True)
        self.writer = writer
        self.counters = counters
        if max_queued is None:
            max_queued = max(2, int(WRITER_BACKLOG_S / HANDOFF_INTERVAL_S))
        #: bounded: a writer that falls behind is an error (``behind``), never unbounded memory
        self.q: queue.Queue = queue.Queue(maxsize=max_queued)
        self.max_queued = max_queued
        #: handoffs the full queue could not take (kept, in order, and written before the end)
        self.held: list[tuple[SweepBuffers | None, list]] = []
        #: set by the sampling thread when the queue was full: the message that stops the run
        self.behind: str | None = None
        #: set by this thread: the error that stopped the writing (any error, never silent)
        self.error: CaptureWriteError | None = None
        self.interval_hist = LogHistogram()
        self.read_hist = [LogHistogram() for _ in counters]
        self.bad_rows = [0] * len(counters)
        self.last_sweep_start: int | None = None
        self.last_roll = time.monotonic()
        self.last_pair = time.monotonic()
        self.status_out = status_out
        self.status_tty = status_out is not None and status_out.isatty()
        #: set by ``record`` (the capture start) before the first buffer is handed over
        self.status_meter: StatusMeter | None = None
        #: where counter problems and recoveries are said, once each, as they happen
        self.log = log
        #: per counter: the distinct problems reported (the stop summary names them)
        self.problems: list[list[str]] = [[] for _ in counters]
        self.counter_state: list[str] = ["ok"] * len(counters)
        #: per counter: the last slow read said (status line: "slow read <who> <dir>")
        self.slow: dict[int, str] = {}
        #: ``metrics.SamplerMetrics`` with --metrics: updated once per flush batch, here
        self.metrics = None
        self.clock = time.perf_counter_ns  # an emulated node's clocks replace these (record)
        self.pair = clock_pair
        #: sweeps written to the capture (the counter set may grow, so not rows // counters)
        self.sweeps_written = 0
        #: set by ``record``: how to build the counters of a device that appears (``grow``)
        self.grow: dict[str, Any] | None = None

    def put(self, buf: SweepBuffers | None, events: list) -> None:
        """Hand a buffer to the writer from the sampling thread, never blocking it.

        When the bounded queue is full (the writer is ``max_queued`` handoffs behind), the
        buffer is kept in ``held`` and ``behind`` says so: the sampler stops, and ``finish``
        writes what is held. Nothing taken is dropped.
        """
        if not self.held:
            try:
                self.q.put_nowait((buf, events))
                return
            except queue.Full:
                if self.behind is None:
                    s = self.max_queued * HANDOFF_INTERVAL_S
                    self.behind = (f"the capture writer fell {s:g} s behind the sampler "
                                   f"({self.max_queued} handoffs queued: the disk is too slow "
                                   "or hung); stopped the recording rather than grow memory "
                                   "without bound")
        self.held.append((buf, events))

    def finish(self, buf: SweepBuffers | None, events: list, *, timeout: float | None = None
               ) -> None:
        """Hand over the held buffers, the last one and the end marker, then wait for the
        writer to write them (blocking: called once sampling has stopped)."""
        for item in self.held:
            self.q.put(item)
        self.held = []
        self.q.put((buf, events))
        self.q.put((None, []))
        self.join(timeout)

    def run(self) -> None:
        # SIGINT/SIGTERM/SIGHUP go to the sampling (main) thread, where they interrupt the
        # compiled sweep's wait at once (Python runs handlers in the main thread anyway)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM,
                                                      signal.SIGHUP})
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - the thread must never die silently
            self._fail(exc)
            while True:  # keep taking handoffs so the sampler's last puts never block
                buf, _events = self.q.get()
                self._take_growth(_events)
                if buf is None:
                    return

    def _fail(self, exc: BaseException) -> None:
        """Keep an unexpected error of this thread as the one that stops the recording."""
        if self.error is not None:
            return
        if isinstance(exc, CaptureWriteError):
            self.error = exc
            return
        err = CaptureWriteError(self.writer.path, f"the capture writer failed "
                                                  f"({type(exc).__name__}: {exc})")
        err.__cause__ = exc
        self.error = err

    def _run(self) -> None:
        first = True
        while True:
            buf, events = self.q.get()
            events = self._take_growth(events)
            if self.error is None:
                try:
                    if first:  # the real start record (taken just before sweep 0)
                        self.writer.write_manifest()
                        first = False
                    self._handle(buf, events)
                except Exception as exc:  # noqa: BLE001 - any error stops it, said (_fail)
                    self._fail(exc)
            elif buf is not None:
                self.note_events(events)
                self._audit(buf)  # keep the audit honest even when nothing more can be written
            if buf is None:
                return

    def say(self, text: str) -> None:
        """Print one message line to the log (clearing a status line redrawn in place)."""
        if self.log is None:
            return
        try:
            if self.status_tty and self.log is self.status_out:
                unfiltered(self.log).write("\r" + ERASE_EOL)
            self.log.write(text + "\n")
            self.log.flush()
        except (OSError, ValueError):
            pass

    def follow_renames(self, reader: CounterReader, root: Path, pci_of: dict[str, str | None]
                       ) -> None:
        """Enable following a device that comes back under another name (see ``_rescan``).

        ``reader``: the counter reader whose paths are re-pointed; ``root``: the sysfs root;
        ``pci_of``: the PCI address of each sampled RDMA device (None: cannot be followed).
        """
        self.reader = reader
        self.ib_dir = infiniband_dir(root)
        self.net_dir = Path(root) / "class" / "net"
        self.pci_of = dict(pci_of)
        self.current = {d: d for d in pci_of}  # recorded device -> its name now
        self.known_at_start: set[str] = set(pci_of)  # + every discovered one (record sets it)
        self.missing: set[str] = set()          # recorded devices with a missing counter
        self.last_scan = 0.0

    def _rescan(self, now: float) -> None:
        """While a recorded device is missing, look about once a second for a device at its PCI
        address under another name (a reset or re-probe returns mlx5_0 as mlx5_2; udev/rdma-core
        rename rules rename at any time). Found: its counters are read from the new name's files
        at once; one "renamed" event and one line say so. The counters restarted there, and the
        unreadable readings in between make the analysis treat the gap as unknown (never bytes).
        Only names and ``device`` links are read (cheap), in this thread, never the sampler's.
        """
        if not self.missing or getattr(self, "reader", None) is None or now - self.last_scan < 1:
            return
        self.last_scan = now
        try:
            names = os.listdir(self.ib_dir)
        except OSError:
            return
        in_use = set(self.current.values())
        by_pci = {}
        for n in names:
            if n in in_use:
                continue
            try:
                by_pci[os.path.basename(os.readlink(self.ib_dir / n / "device").rstrip("/"))] = n
            except OSError:
                continue
        for dev in sorted(self.missing):
            pci = self.pci_of.get(dev)
            new = by_pci.get(pci) if pci else None
            if new is None:
                continue
            old = self.current[dev]
            a, b = f"/{self.ib_dir.name}/{old}/", f"/{self.ib_dir.name}/{new}/"
            for i, c in enumerate(self.counters):
                if c.get("source") == "infiniband" and c["device"] == dev:
                    self.reader.paths[i] = self.reader.paths[i].replace(a, b)
                    self.reader.request_check(i)  # the sampler re-opens it next sweep
            self.current[dev] = new
            self.missing.discard(dev)
            msg = (f"{old} came back as {new} (PCI {pci}); following it: its counters are read "
                   f"from {self.ib_dir / new} and restarted there (a reset, not bytes)")
            self.writer.add_event(self.clock(), None, "renamed", msg, save=False)
            self.say(f"rdmascope record: {msg}")

    def _take_growth(self, events: list) -> list:
        """Apply the counters the sampling thread added (a device that appeared; ``record``'s
        ``add_pending``), handed over in order before the first buffer that reads them: the
        manifest's counter list (shared with ``self.counters``), its ``devices`` and this
        thread's per-counter bookkeeping grow, so those readings are never written before
        their descriptors. Returns the other events."""
        if not any(e[2] == "_counters_added" for e in events):
            return events
        rest = []
        for e in events:
            if e[2] != "_counters_added":
                rest.append(e)
                continue
            item = e[3]
            for c in item["counters"]:
                self.counters.append(c)
                self.read_hist.append(LogHistogram())
                self.bad_rows.append(0)
                self.problems.append([])
                self.counter_state.append("ok")
            if item.get("device") is not None:
                self.writer.manifest.setdefault("devices", []).append(item["device"])
            self.grew = True  # _handle saves the manifest before the next buffer is written
        return rest

    def _watch_devices(self, now: float) -> None:
        """About once a second, list ``class/infiniband`` (names and ``device`` links only, in
        this thread, never the sampler's) and record each RDMA device that appeared or vanished
        since the start: one event and one line each, and an entry in the manifest's
        ``device_changes`` ({name, pci, sys_image_guid, kind "appeared" | "vanished" |
        "returned" (a recorded device back; ``as``: its name now when followed), t_ns;
        ``seen_ns`` when it was first seen still probing, earlier than ``t_ns``). The analysis
        takes it as absent before it appeared and unknown from then to its first reading.
        A device that appears after the start is sampled from then on: its counters are built
        by the same discovery as at the start (``discover``, ``counter_descriptors``) and handed
        to the sampling thread (``grow["add"]``), which adds them at its next sweep; each
        descriptor gets ``appeared_ns``, the time of its first reading. Where none can be built
        (no byte counter, discovery failed, ``--device`` chose devices) it is not sampled, and
        the verdicts over a range it was present in say CANNOT JUDGE, naming it."""
        if getattr(self, "ib_dir", None) is None or now - getattr(self, "last_watch", 0.0) < 1:
            return
        self.last_watch = now
        try:
            names = set(os.listdir(self.ib_dir))
        except OSError:
            return
        if not hasattr(self, "present"):
            self.present = set(self.known_at_start)
        followed = set(getattr(self, "current", {}).values())
        # the manifest gets device_changes with its first change (as ``simulate capture`` writes
        # it), so a capture without one has the same keys whatever its length
        changes = self.writer.manifest.get("device_changes")
        if changes is None:
            changes = DeviceChanges(self.writer.manifest)
        t = self.clock()
        probing = getattr(self, "probing", None)
        if probing is None:
            probing = self.probing = {}
        deferred = set()
        first_seen = getattr(self, "first_seen", None)
        if first_seen is None:
            first_seen = self.first_seen = {}
        for n in sorted(names - self.present - followed):
            seen = first_seen.setdefault(n, int(t))  # present from this rescan on
            if self._still_probing(n, now, probing):
                deferred.add(n)  # looked at again at the next rescan
                continue
            del first_seen[n]
            d = self.ib_dir / n
            try:
                pci = os.path.basename(os.readlink(d / "device").rstrip("/")) or None
            except OSError:
                pci = None
            try:
                guid = (d / "sys_image_guid").read_text().strip() or None
            except (OSError, UnicodeDecodeError):
                guid = None
            changes.append({"name": n, "pci": pci, "sys_image_guid": guid, "kind": "appeared",
                            "t_ns": int(t)})
            if seen < t:  # first seen still probing: present (and unread) since then
                changes[-1]["seen_ns"] = seen
            added, why = self._counters_of_new(n)
            if added < 0:  # it was recorded before it vanished: its files are re-opened
                msg = (f"RDMA device {n} (PCI {pci or 'unknown'}) appeared again; its counters "
                       "are read again from its files (the time it was away is unknown)")
            elif added:
                changes[-1]["counters"] = added
                msg = (f"RDMA device {n} (PCI {pci or 'unknown'}) appeared after the start; "
                       f"sampled from now on ({added} counters; before, it was absent)")
            else:
                msg = (f"RDMA device {n} (PCI {pci or 'unknown'}) appeared after the start; it "
                       f"is not sampled ({why}; restart record to include it): verdicts over "
                       "this time cannot judge it")
            self.writer.add_event(t, None, "device_appeared", msg, save=False)
            self.say(f"rdmascope record: {msg}")
        for n in sorted(self.present - names - set(getattr(self, "current", {}))):
            changes.append({"name": n, "pci": None, "sys_image_guid": None, "kind": "vanished",
                            "t_ns": int(t)})
            msg = f"RDMA device {n} vanished from {self.ib_dir}"
            self.writer.add_event(t, None, "device_vanished", msg, save=False)
            self.say(f"rdmascope record: {msg}")
        # recorded devices (followed through renames): said once when they vanish and once when
        # they return, each with a device_changes entry; the time away is unknown (their
        # counters read as missing then)
        away = getattr(self, "away", None)
        if away is None:
            away = self.away = set()
        for dev, now_as in sorted(getattr(self, "current", {}).items()):
            as_ = {} if now_as == dev else {"as": now_as}
            if now_as not in names and dev not in away:
                away.add(dev)
                changes.append({"name": dev, "pci": self.pci_of.get(dev), "sys_image_guid": None,
                                "kind": "vanished", "t_ns": int(t), **as_})
                msg = (f"RDMA device {dev} (recorded) vanished from {self.ib_dir}"
                       + (f" (as {now_as})" if as_ else "") + "; its counters read as missing "
                       "until it returns: that time is unknown, never zero")
                self.writer.add_event(t, None, "device_vanished", msg, save=False)
                self.say(f"rdmascope record: {msg}")
            elif now_as in names and dev in away:
                away.discard(dev)
                changes.append({"name": dev, "pci": self.pci_of.get(dev), "sys_image_guid": None,
                                "kind": "returned", "t_ns": int(t), **as_})
                msg = (f"RDMA device {dev} returned" + (f" as {now_as}" if as_ else "")
                       + "; read again from its files")
                self.writer.add_event(t, None, "device_returned", msg, save=False)
                self.say(f"rdmascope record: {msg}")
        self.present = (names - followed - deferred) | (
            self.present & set(getattr(self, "current", {})))

    def _watch_netdevs(self, now: float) -> None:
        """About once a second, check that each sampled netdev still has its name: its
        ``ifindex`` (``class/net/<name>/ifindex``, read at the first check) is still under that
        name. A netdev renamed while recording (``ip link set eth0 name ens1``, a udev rule)
        keeps its ifindex: found under the new name, it is followed (the counters' paths and
        ``netdev`` in the manifest take the new name, ``netdev_was`` keeps the old ones), said
        once, and recorded in ``device_changes`` (kind "renamed", ``as`` the new name,
        ``netdev`` true). The reader was still reading the same statistics through its open
        descriptor, so no byte is lost; the verdicts name the interface as it is called now.
        One small file per sampled netdev a second, in this thread, never the sampler's."""
        net = getattr(self, "net_dir", None)
        if net is None or now - getattr(self, "last_netdev_watch", 0.0) < 1:
            return
        self.last_netdev_watch = now
        idx = getattr(self, "nd_ifindex", None)
        if idx is None:
            idx = self.nd_ifindex = {}
            for nd in dict.fromkeys(c.get("netdev") for c in self.counters
                                    if c.get("source") == "netdev" and c.get("netdev")):
                ix = _read_ifindex(net / nd)
                if ix is not None:  # without one the name cannot be followed
                    idx[nd] = ix
            return
        by_ix = None
        for nd, ix in list(idx.items()):
            if _read_ifindex(net / nd) == ix:
                continue
            if by_ix is None:
                try:
                    by_ix = {_read_ifindex(net / n): n for n in sorted(os.listdir(net))}
                except OSError:
                    return
            new = by_ix.get(ix)
            if new is None or new == nd:
                continue  # gone (its counters read as missing, said by the reader) or back
            for i, c in enumerate(self.counters):
                if c.get("source") == "netdev" and c.get("netdev") == nd:
                    self.reader.paths[i] = self.reader.paths[i].replace(f"/{nd}/", f"/{new}/")
                    c["path"] = str(c.get("path", "")).replace(f"/{nd}/", f"/{new}/")
                    c["netdev_was"] = [*c.get("netdev_was", []), nd]
                    c["netdev"] = new
                    self.reader.request_check(i)
            del idx[nd]
            idx[new] = ix
            t = self.clock()
            changes = self.writer.manifest.get("device_changes")
            if changes is None:
                changes = DeviceChanges(self.writer.manifest)
            changes.append({"name": nd, "pci": None, "sys_image_guid": None, "kind": "renamed",
                            "as": new, "netdev": True, "ifindex": ix, "t_ns": int(t)})
            msg = (f"netdev {nd} was renamed {new} (ifindex {ix}); following it: its statistics "
                   f"are read from {net / new} (no byte lost: the same interface)")
            self.writer.add_event(t, None, "netdev_renamed", msg, save=False)
            self.say(f"rdmascope record: {msg}")

    #: A device seen without its ports or counter files yet (the driver is still probing it)
    #: is looked at again at each rescan for up to this long (s) before it is said.
    PROBE_WAIT_S = 5.0

    def _still_probing(self, name: str, now: float, probing: dict[str, float]) -> bool:
        """True while a new device's counter files are not all there yet (sysfs fills in while
        the driver probes it), for up to ``PROBE_WAIT_S``: it is then said and added whole,
        instead of with counters that read as missing for a second."""
        g = self.grow
        if g is None or g.get("selected"):
            return False
        first = probing.setdefault(name, now)
        if now - first >= self.PROBE_WAIT_S:
            return False
        try:
            devs = discover(g["root"], devices=[name])
            descs = counter_descriptors(devs, list(g["counters"]),
                                        netdev_stats=g["netdev_stats"], sysfs_root=g["root"])
        except Exception:  # noqa: BLE001 - half-probed: try again next time
            return True
        return not descs or not all(os.path.exists(c["path"]) for c in descs)

    def _counters_of_new(self, name: str) -> tuple[int, str]:
        """Build the counter descriptors of device ``name`` that appeared (the discovery of the
        start) and hand them to the sampling thread; return (how many, why none)."""
        g = self.grow
        if g is None:
            return 0, "the counter set of this recording is fixed"
        if g.get("selected"):
            return 0, "--device chose the devices to record"
        if any(c.get("device") == name and c.get("source") != "netdev" for c in self.counters):
            return -1, ""
        try:
            devs = discover(g["root"], devices=[name])
            descs = counter_descriptors(devs, list(g["counters"]),
                                        netdev_stats=g["netdev_stats"], sysfs_root=g["root"])
        except Exception as exc:  # noqa: BLE001 - a device half-probed: said, never fatal
            return 0, f"its counters could not be listed ({type(exc).__name__}: {exc})"
        sampled = {c.get("netdev") for c in self.counters if c.get("source") == "netdev"}
        descs = [c for c in descs if c.get("source") != "netdev" or c.get("netdev") not in sampled]
        if not descs:
            return 0, "no counter file to read"
        if len(self.counters) + len(descs) > 65535:
            return 0, "at most 65535 counters"
        for w in devs[0].warnings if devs else ():
            self.say(f"rdmascope record: warning: {w}")
        g["add"](descs, devs[0].to_dict() if devs else None)
        return len(descs), ""

    def note_events(self, events: list) -> None:
        """Keep each counter's problems for the stop summary and say each one once, live."""
        for _t, cid, kind, msg in events:
            if cid is None or not 0 <= cid < len(self.counters):
                continue
            c = self.counters[cid]
            who = c.get("netdev") or f"{c['device']}/{c.get('port')}"
            if hasattr(self, "missing") and c.get("source") == "infiniband":
                if kind == "unavailable" and msg.startswith("missing"):
                    self.missing.add(c["device"])
                elif kind == "recovered":
                    self.missing.discard(c["device"])
            if kind == "unavailable":
                self.counter_state[cid] = "unavailable"
                if msg not in self.problems[cid] and len(self.problems[cid]) < 8:
                    self.problems[cid].append(msg)
                self.say(f"rdmascope record: {who} {c['name']} unavailable: {msg}")
            elif kind == "recovered":
                self.counter_state[cid] = "ok"
                self.say(f"rdmascope record: {who} {c['name']} readable again")
            elif kind == "slow_read":
                self.slow[cid] = msg
                self.say(f"rdmascope record: {who} {c['name']} slow read: {msg}")

    def _handle(self, buf: SweepBuffers | None, events: list) -> None:
        self.note_events(events)
        for t_ns, cid, kind, msg in events:
            self.writer.add_event(t_ns, cid, kind, msg, save=False)
        n_ev = len(self.writer.manifest.get("events") or [])
        self._rescan(time.monotonic())
        self._watch_devices(time.monotonic())
        self._watch_netdevs(time.monotonic())
        dirty = bool(events) or len(self.writer.manifest.get("events") or []) != n_ev or \
            getattr(self, "grew", False)
        self.grew = False
        if buf is not None and len(buf):
            self.writer.write_batch(_to_batch(buf))
            self.sweeps_written += len(buf.sweep_start_ns)
            self._audit(buf)
            if self.metrics is not None:
                self.metrics.update(buf)
            if self.status_out is not None:
                try:
                    self._status(buf)
                except (OSError, ValueError) as exc:  # a closed pipe (| head), a closed file
                    self._status_off(exc)
        now = time.monotonic()
        if buf is not None and now - self.last_roll >= ROLL_INTERVAL_S:
            self.writer.roll()
            self.last_roll = now
            # give the roll's temporary buffers (sort, Parquet encoding) back to the OS so the
            # RSS of a days-long capture stays flat (pyarrow's pool otherwise keeps them)
            pa.default_memory_pool().release_unused()
        if now - self.last_pair >= CLOCK_PAIR_INTERVAL_S:
            self.writer.add_clock_pair(self.pair(), save=False)
            self.last_pair = now
            dirty = True
        if dirty:
            self.writer.write_manifest()

    def _status_off(self, exc: BaseException) -> None:
        """A status line that cannot be written is dropped and the status turned off; said
        once, as an event in the capture (and on the log, if that can still be written)."""
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        msg = (f"the status line could not be written ({why}); status turned off, the "
               "recording goes on")
        if self.log is self.status_out:
            self.log = None  # the same broken stream: nothing more is said there
        self.status_out = None
        self.status_tty = False
        self.writer.add_event(self.clock(), None, "status_off", msg, save=False)
        self.say(f"rdmascope record: {msg}")

    def _audit(self, buf: SweepBuffers) -> None:
        self.last_sweep_start = self._audit_into(buf, self.read_hist, self.interval_hist,
                                                 self.bad_rows, self.last_sweep_start)

    @staticmethod
    def _audit_into(buf: SweepBuffers, read_hist: list[LogHistogram],
                    interval_hist: LogHistogram, bad_rows: list[int],
                    last_start: int | None) -> int | None:
        """Add a buffer's sweep intervals and read brackets to the histograms."""
        starts = np.frombuffer(buf.sweep_start_ns, dtype=np.int64)
        if starts.size:
            if last_start is not None:
                interval_hist.add(np.diff(starts, prepend=last_start))
            else:
                interval_hist.add(np.diff(starts))
            last_start = int(starts[-1])
        w = buf.width(len(read_hist))  # counters added after the start: see _take_growth
        dur = np.frombuffer(buf.read_duration_ns, dtype=np.uint32).reshape(-1, w)
        st = np.frombuffer(buf.status, dtype=np.uint8).reshape(-1, w)
        for i in range(min(w, len(read_hist))):
            ok = st[:, i] == 0
            read_hist[i].add(dur[ok, i])
            bad_rows[i] += int((~ok).sum())
        return last_start

    def _status(self, buf: SweepBuffers) -> None:
        """Once a second, print the status line (elapsed, sweeps, per-link Gb/s), fitted to
        the terminal width: redrawn in place on a terminal, else one plain line (status.py)."""
        if self.status_meter is None:
            return
        got = self.status_meter.update(buf)
        if got is None:
            return
        elapsed_s, taken, missed, links = got
        width = status_width(self.status_out)
        line = format_status(elapsed_s, taken, missed, links, width)
        # name the counters unreadable right now, when the line has room (the reasons were
        # said once, live, on their own lines)
        bad: dict[str, list[str]] = {}
        for i, st in enumerate(self.counter_state):
            if st != "ok":
                c = self.counters[i]
                who = c.get("netdev") or c["device"]
                bad.setdefault(who, []).append(c.get("direction") or c["name"])
        if self.slow:
            slow: dict[str, list[str]] = {}
            for i in self.slow:
                c = self.counters[i]
                slow.setdefault(c.get("netdev") or c["device"], []).append(
                    c.get("direction") or c["name"])
            note = " | slow read " + " ".join(f"{k} {','.join(v)}" for k, v in slow.items())
            if len(line) + len(note) <= width - 1:
                line += note
        if bad:
            note = " | unreadable " + " ".join(f"{k} {','.join(v)}" for k, v in bad.items())
            if len(line) + len(note) <= width - 1:
                line += note
            elif len(line) + len(f" | {len(bad)} unreadable") <= width - 1:
                line += f" | {len(bad)} unreadable"
        status_write(self.status_out, line, self.status_tty)


def _start_metrics(address: str | None, counters, interval_ns: int, meta=None):
    """Start the --metrics endpoint (metrics.py) or return None; ``RecordError`` if it cannot.
    ``meta``: the manifest's fields (its devices give each device's line rate, the peak gauges'
    over-line rule: ``plausibility.line_ceilings``)."""
    if not address:
        return None
    from rdmascope.sampler.metrics import MetricsError, MetricsServer, SamplerMetrics, parse_address

    from rdmascope.plausibility import line_ceilings

    try:
        host, port = parse_address(address)
        line = {d: c.gbps for d, c in line_ceilings(meta).items()} if meta else None
        return MetricsServer(SamplerMetrics(counters, interval_ns, line_gbps=line), host, port)
    except MetricsError as exc:
        raise RecordError(str(exc)) from exc


def _validate(opts: RecordOptions) -> None:
    if not MIN_INTERVAL_NS <= opts.interval_ns <= MAX_INTERVAL_NS:
        raise RecordError(f"--interval {opts.interval_ns / 1e6:g} ms is outside the allowed range "
                          "0.1 ms .. 1 s")
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise RecordError(f"--duration must be positive, got {opts.duration_s:g} s")


def _check_requested_counters(devices, names) -> None:
    """Refuse a requested counter that exists on none of the selected ports (a typo, or the wrong
    device); one that exists on some is sampled, and marked unavailable where it is missing.

    The default counters are not checked: a port without them is recorded as unavailable (the
    file may appear later, e.g. a device that is being reset).
    """
    ports = [(d, p) for d in devices for p in d.ports]
    if not ports:
        return
    absent = [n for n in dict.fromkeys(names) if n not in DEFAULT_COUNTERS
              and not any(counter_exists(d, p, n) for d, p in ports)]
    if absent:
        where = ", ".join(f"{d.name}/{p.port}" for d, p in ports)
        have = available_counters(devices)
        raise RecordError(
            f"--counters: {', '.join(absent)} exist(s) on none of the selected ports ({where}); "
            f"counters there: {', '.join(have) or 'none'}")


#: Descriptors the recorder needs beside one per counter: stdio, the lock, the manifest, the
#: live and Parquet segments being written, pyarrow's and psutil's own files.
FD_MARGIN = 64


def _ensure_open_files(n_counters: int, log: TextIO) -> None:
    """Make room for one open descriptor per counter (a host with hundreds of SR-IOV VFs needs
    more than the usual soft limit of 1,024): raise RLIMIT_NOFILE's soft limit toward the hard
    one when needed, or raise ``RecordError`` saying how many are needed and how to allow them.
    """
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 16
    need = in_use + n_counters + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    if soft == inf or need <= soft:
        return
    if hard == inf or need <= hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        except (ValueError, OSError) as exc:
            raise RecordError(f"{n_counters} counters need about {need} open files but the "
                              f"soft limit is {soft} and raising it failed ({exc}); raise it "
                              f"before starting (`ulimit -n {need}`)") from exc
        print(f"rdmascope record: raised the open-files soft limit from {soft} to {need} "
              f"({n_counters} counter files held open)", file=log)
        return
    raise RecordError(
        f"{n_counters} counters need about {need} open files (one per counter file, kept open "
        f"to re-read it every sweep, plus {in_use + FD_MARGIN} for the recorder), but the "
        f"limit is {soft} (hard limit {hard}); raise it, e.g. `ulimit -Hn {need}; ulimit -n "
        f"{need}` as root, `LimitNOFILE={need}` in the systemd unit, or `prlimit --nofile="
        f"{need}:{need} -- rdmascope record ...`; or record fewer devices with --device")


def _run_compiled(module, reader: CounterReader, state: dict, wt: _WriterThread,
                  stats: ScheduleStats, *, interval_ns: int, start_ns: int, spin_ns: int,
                  n_deadlines: int | None, handoff_ns: int, should_stop, grow=None) -> None:
    """The schedule of ``loop.run_schedule`` with the compiled sweep (``csweep``): the same
    deadlines, missed-deadline rule and ``n_deadlines`` end, but many sweeps per call into C.

    ``should_stop`` is polled between calls, at least every ``csweep.POLL_NS`` (and after a
    signal); buffers are handed to ``wt`` every ``handoff_ns`` as with the Python sweep.
    ``grow`` (optional, returns True when it added counters: a device appeared) is called
    between calls when ``state["pending"]`` holds counters; the compiled sweep is then rebuilt
    for the new counter set (its buffers are a few rows per counter: cheap) and goes on at the
    next deadline.
    """
    sweeper = CompiledSweeper(reader, module, handoff_ns // interval_ns + 8)
    sweeper.lock = state["lock"]  # one lock with the recorder's stop (_Sampling.abandon)
    state["sweeper"] = sweeper
    clock = time.perf_counter_ns
    stats.start_ns = start_ns
    stats.next_k = 0
    while not should_stop():
        now = clock()
        until = min(state["next_handoff"], now + POLL_NS)
        reason = sweeper.run(stats.next_k, state["buf"], start_ns=start_ns,
                             interval_ns=interval_ns, n_deadlines=n_deadlines, until_ns=until,
                             spin_ns=spin_ns, stats=stats)
        now = clock()
        if now >= state["next_handoff"] or reason == module.R_FULL:
            with state["lock"]:
                if state["abandoned"]:
                    break
                wt.put(state["buf"], reader.drain_events())
                state["buf"] = SweepBuffers()
                state["next_handoff"] = now + handoff_ns
        if reason == module.R_END:
            break
        if grow is not None and state["pending"] and grow():
            sweeper = CompiledSweeper(reader, module, handoff_ns // interval_ns + 8)
            sweeper.lock = state["lock"]
            state["sweeper"] = sweeper


class _Sampling:
    """Run the sampling schedule in its own thread and stop on time even when a read hangs.

    The calling thread supervises: it waits for the sampling thread, runs the signal handlers
    (SIGINT/SIGTERM are blocked in the sampling thread), says a read that has lasted more than
    ``HUNG_SAY_S`` while it lasts, and at the end (``end_ns``, the last deadline of
    ``--duration``, or ``stop_requested()``) gives the sampling thread ``STOP_GRACE_NS`` (at
    least one interval) to finish. If it has not (a read hangs: an mlx5 firmware command can
    take up to its 60 s timeout), the recorder stops without it (``abandon``): every reading
    taken so far is kept, the read in progress and the rest of its sweep become rows marked
    unavailable (so that time is unknown, never zero), and the hung read's thread is left to
    finish on its own (its result is dropped).
    """

    def __init__(self, target, state: dict, reader: CounterReader, wt: _WriterThread,
                 stats: ScheduleStats, *, clock, interval_ns: int, end_ns: int | None,
                 stop_requested, n_deadlines: int | None = None):
        self.target, self.state, self.reader, self.wt, self.stats = target, state, reader, wt, stats
        self.clock, self.interval_ns, self.end_ns = clock, int(interval_ns), end_ns
        self.stop_requested = stop_requested
        self.n_deadlines = n_deadlines
        self.grace_ns = max(int(interval_ns), STOP_GRACE_NS)
        self.error: BaseException | None = None
        self.abandoned = False
        self.abandoned_read: dict[str, Any] | None = None
        self.events: list = []
        self.thread = threading.Thread(target=self._run_target, name="rdmascope-sampler",
                                       daemon=True)

    def _run_target(self) -> None:
        if hasattr(signal, "pthread_sigmask"):  # the stop signals go to the calling thread
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM,
                                                      signal.SIGHUP})
        try:
            self.target()
        except BaseException as exc:  # re-raised in the calling thread
            self.error = exc

    def _progress(self) -> tuple[int, int]:
        """(sweeps taken, rows stored by a running compiled call): changes with every reading
        of the compiled sweep, with every sweep of the Python one."""
        sw = self.state.get("sweeper")
        return self.stats.taken, (int(sw.progress[0]) if sw is not None and sw.in_call else -1) \
            + len(self.state["buf"].sweep)

    def run(self) -> dict | None:
        """Sample until the end; return None, or the buffer to write when stopped without the
        sampling thread (``abandon``). Re-raises the sampling thread's exception."""
        self.thread.start()
        stop_at = None
        last, since, said = self._progress(), self.clock(), False
        while True:
            # wake rarely (a signal interrupts the wait at once: handlers run in this thread),
            # but on time for the end and its grace
            wait = 0.25
            now = self.clock()
            if stop_at is not None:
                wait = min(wait, max(stop_at + self.grace_ns - now, 0) / 1e9 + 0.005, 0.02)
            elif self.end_ns is not None:
                wait = min(wait, max(self.end_ns - now, 0) / 1e9 + 0.005)
            self.thread.join(wait)
            if not self.thread.is_alive():
                break
            now = self.clock()
            p = self._progress()
            if p != last:
                last, since, said = p, now, False
            elif not said and now - since > HUNG_SAY_S * 1e9:
                said = True
                self._say_hung(now - since)
            if stop_at is None:
                if self.end_ns is not None and now >= self.end_ns:
                    stop_at = self.end_ns
                elif self.stop_requested():
                    stop_at = now
            # stop without the sampling thread only when it is stuck (no reading for the
            # grace): one that is merely late (a loaded machine) is waited for, up to 2 s
            if stop_at is not None and now >= stop_at + self.grace_ns and (
                    now - since >= self.grace_ns or now >= stop_at + STOP_WAIT_MAX_NS):
                buf = self.abandon_if_running(now)
                if buf is not None:
                    return buf
        if self.error is not None:
            raise self.error
        return None

    def _counter_in_progress(self, rows: int) -> int:
        return rows % len(self.reader.paths)

    def _say_hung(self, d_ns: int) -> None:
        rows = self._rows_of_running_sweep()
        i = self._counter_in_progress(rows)
        msg = (f"{self.reader.paths[i]}: no counter read for {d_ns / 1e9:.1f} s, waiting on this "
               "read (a slow firmware command?); the readings of that time are unknown")
        self.wt.put(SweepBuffers(), [(self.clock(), i, "slow_read", msg)])

    def _rows_of_running_sweep(self) -> int:
        sw = self.state.get("sweeper")
        if sw is not None and sw.in_call:
            return int(sw.progress[0])
        return len(self.state["buf"].sweep)

    def drain_events(self) -> list:
        ev, self.events = self.events, []
        return ev

    def abandon_if_running(self, now: int) -> SweepBuffers | None:
        """Stop without the sampling thread if it is still running; return the buffer of the
        readings it took that are not handed off yet (a sweep cut short completed with rows
        marked unavailable), or None when it has finished."""
        if not self.thread.is_alive() or self.abandoned:
            return None
        st = self.state
        with st["lock"]:
            st["abandoned"] = True
            self.abandoned = True
            old = st["buf"]
            sw = st.get("sweeper")
            extra = sw.abandon() if sw is not None else None
        n = len(self.reader.paths)
        buf = SweepBuffers()
        cols = (old.counter_id, old.sweep, old.t_before_ns, old.read_duration_ns, old.value,
                old.status)
        copies = [type(c)(c.typecode, c) for c in cols]  # the thread may still append: copy
        m = min(len(c) for c in copies)
        for dst, src in zip((buf.counter_id, buf.sweep, buf.t_before_ns, buf.read_duration_ns,
                             buf.value, buf.status), copies, strict=True):
            dst.extend(src[:m])
        buf.sweep_start_ns.extend(old.sweep_start_ns[:-(-m // n)] if m else [])
        if extra is not None:
            *xcols, xstarts = extra
            for dst, src in zip((buf.counter_id, buf.sweep, buf.t_before_ns,
                                 buf.read_duration_ns, buf.value, buf.status), xcols,
                                strict=True):
                dst.extend(src)
            buf.sweep_start_ns.extend(xstarts)
        buf.n_bad = sum(1 for x in buf.status if x)
        rows = len(buf.sweep)
        cut = rows % n
        # the sweeps of the running call (never returned) were taken; a sweep cut short too
        self.stats.taken += len(extra[-1]) if extra is not None else (1 if cut else 0)
        if self.n_deadlines is not None:  # the deadlines left were missed (the read hung)
            self.stats.missed = max(0, self.n_deadlines - self.stats.taken)
            self.stats.next_k = self.n_deadlines
        if cut:  # a sweep cut short by the read in progress: complete it, unknown
            from rdmascope.capture import STATUS_MISSING, STATUS_READ_ERROR

            k = buf.sweep[-1]
            hung = cut
            t0 = buf.t_before_ns[-1] + buf.read_duration_ns[-1]
            for i in range(cut, n):
                buf.counter_id.append(i)
                buf.sweep.append(k)
                buf.t_before_ns.append(now if i != hung else t0)
                buf.read_duration_ns.append(min(now - t0, 4294967295) if i == hung else 0)
                buf.value.append(0)
                buf.status.append(STATUS_READ_ERROR if i == hung else STATUS_MISSING)
                buf.n_bad += 1
            c = self.wt.counters[hung] if hung < len(self.wt.counters) else {
                "device": None, "port": None, "name": self.reader.paths[hung]}
            self.abandoned_read = {"counter_id": hung, "device": c["device"], "port": c["port"],
                                   "netdev": c.get("netdev"), "name": c["name"],
                                   "path": self.reader.paths[hung], "sweep": int(k),
                                   "running_ns": int(now - t0)}
            self.events.append((now, hung, "unavailable",
                                f"read_error: {self.reader.paths[hung]}: read still running "
                                f"after {(now - t0) / 1e9:.3f} s when the recording ended; "
                                "stopped without it (the rest of its sweep is unknown too)"))
        else:
            self.abandoned_read = {"counter_id": None, "sweep": None,
                                   "running_ns": None, "path": None,
                                   "note": "the sampling thread had not finished; no read of "
                                           "a sweep was in progress"}
        return buf


def record(opts: RecordOptions, *, should_stop=None, log: TextIO | None = None) -> RecordResult:
    """Record a capture until SIGINT/SIGTERM/SIGHUP, ``opts.duration_s`` or a write error.

    Discovers the devices under ``opts.sysfs_root`` (all, or ``opts.devices``), samples
    ``opts.counters`` of every port (+ netdev tx/rx bytes with ``netdev_stats``) every
    ``opts.interval_ns`` and writes ``opts.output``. ``should_stop`` (optional callable) is
    polled once per sweep with the Python sweep, at least every ``csweep.POLL_NS`` (0.05 s) with
    the compiled one (``csweep.load`` says which runs). Messages go to ``log`` (default stderr).

    Returns a ``RecordResult`` (``error`` set when a write error stopped it; what was written is
    kept). Raises ``RecordError`` before sampling starts: no devices, unknown device, a counter of
    ``opts.counters`` (beyond the defaults) on none of the selected ports, interval
    outside 0.1 ms..1 s, an existing capture without ``force``, an unwritable output, a refused
    ``--cpu``/``--rt-priority``.
    """
    log = log if log is not None else sys.stderr
    _validate(opts)
    try:  # the output first: an existing capture is the problem to report, RDMA or not
        check_output(opts.output, force=opts.force)
    except CaptureError as exc:
        raise RecordError(str(exc)) from exc
    root = Path(opts.sysfs_root)
    if not root.is_dir():
        raise RecordUsageError(f"--sysfs-root {root}: no such directory")
    ib = infiniband_dir(root)
    if not ib.is_dir():
        hint = sysfs_root_hint(root)
        if hint is not None:
            raise RecordError(f"{ib}: no such directory; {hint}")
        raise RecordError(f"{ib}: no such directory; no RDMA devices to sample (is rdma-core "
                          "loaded? wrong --sysfs-root? inside a container without /sys/class?)")
    found = discover(root)  # every device, selected or not (the manifest's discovered_devices)
    available = [d.name for d in found]
    if opts.devices:
        unknown = [d for d in opts.devices if d not in available]
        if unknown:
            raise RecordUsageError(f"--device: unknown device(s) {', '.join(unknown)} under {ib} "
                              f"(available: {', '.join(available) or 'none'})")
    devices = discover(root, devices=opts.devices or None)
    if not devices:
        raise RecordError(f"{ib}: no RDMA devices found")
    for d in devices:
        for w in d.warnings:
            print(f"rdmascope record: warning: {w}", file=log)
    _check_requested_counters(devices, opts.counters)
    counters = counter_descriptors(devices, list(opts.counters), netdev_stats=opts.netdev_stats,
                                   sysfs_root=root)
    if opts.netdevs or opts.netdev_stats:
        # TCP can go elsewhere than the RDMA devices' own netdevs: the default route's
        # interface (sampled with --netdev-stats) and any named with --netdev
        own = {c.get("netdev") for c in counters if c.get("source") == "netdev"}
        own |= {nd for d in devices for nd in d.netdevs}
        extra: dict[str, str] = {}
        for nd in opts.netdevs:
            if not netdev_exists(root, nd):
                have = sorted(os.listdir(root / "class" / "net")) if (
                    root / "class" / "net").is_dir() else []
                raise RecordError(f"--netdev {nd}: no {root / 'class' / 'net' / nd / 'statistics'}"
                                  f" (interfaces: {', '.join(have) or 'none'})")
            if nd not in own:
                extra[nd] = "--netdev"
        if opts.netdev_stats:
            for nd in default_route_netdevs(root):
                if nd not in own and nd not in extra and netdev_exists(root, nd):
                    extra[nd] = "default route"
        counters += extra_netdev_descriptors(root, extra)
        for nd, role in extra.items():
            print(f"rdmascope record: note: also sampling {nd} tx/rx_bytes ({role}): a "
                  "collective that falls back to sockets may use it", file=log)
    no_bytes = [f"{d.name}/{p.port}: {p.byte_note}" for d in devices for p in d.ports
                if p.byte_source is None]
    for line in no_bytes:
        print(f"rdmascope record: warning: {line}; its traffic cannot be recorded", file=log)
    for d in devices:
        for p in d.ports:
            if p.byte_files and p.byte_files[0].startswith("hw_counters/"):
                life = (f"{p.hw_counters_lifespan_ms} ms" if p.hw_counters_lifespan_ms
                        is not None else "hw_counters/lifespan ms (default 10)")
                print(f"rdmascope record: note: {d.name}/{p.port}: bytes from "
                      f"{', '.join(p.byte_files)} (plain bytes), which the kernel refreshes "
                      f"only every {life}: finer windows repeat values", file=log)
    hw_asked = [c for c in counters if "/hw_counters/" in c["path"]
                and c.get("byte_source") is None]
    if hw_asked and opts.interval_ns < 10_000_000:
        names = ", ".join(dict.fromkeys(c["name"] for c in hw_asked))
        print(f"rdmascope record: note: hw_counters ({names}) are cached by the kernel for "
              f"hw_counters/lifespan ms (default 10); sampled every "
              f"{opts.interval_ns / 1e6:g} ms they repeat values", file=log)
    netdev_note = None
    if opts.netdev_stats and not any(c.get("source") == "netdev" for c in counters):
        netdev_note = ("--netdev-stats: no netdev found for the sampled RDMA device(s) "
                       f"({', '.join(d.name for d in devices)}) under {root / 'class' / 'net'}; "
                       "kernel-stack (TCP) traffic cannot be recorded, so the TCP check cannot "
                       "judge (a private network namespace, e.g. systemd PrivateNetwork=yes or "
                       "a container, hides the host's netdevs)")
        print(f"rdmascope record: warning: {netdev_note}", file=log)
    if not counters:
        if no_bytes:
            raise RecordError("nothing to sample: " + "; ".join(no_bytes))
        raise RecordError(f"nothing to sample: the devices {', '.join(available)} have no ports")
    if len(counters) > 65535:
        raise RecordError(f"too many counters ({len(counters)}); at most 65535")
    _ensure_open_files(len(counters), log)
    try:
        if opts.cpu is not None:
            set_cpu_affinity(opts.cpu)
        if opts.rt_priority is not None:
            set_rt_priority(opts.rt_priority)
    except (ValueError, PermissionError) as exc:
        raise RecordError(str(exc)) from exc
    slack = reduce_timer_slack(1)
    csweep_mod, sweep_impl = load_csweep()
    if opts.monotonic_offset_ns or opts.realtime_offset_ns:
        # an emulated node's clocks are added in Python; the compiled sweep reads the machine's
        csweep_mod, sweep_impl = None, "python (an emulated cluster node's clocks)"
    interval_ns = int(opts.interval_ns)
    fields = {
        "writer": "sampler",
        "sampler_version": __version__,
        "command_line": [str(a) for a in opts.command_line],
        "sysfs_root": str(root),
        "interval_ns": interval_ns,
        "devices": [d.to_dict() for d in devices],
        "discovered_devices": discovered_devices(found),
        "counters": counters,
        "extra": {
            "values": "raw kernel values; multiply by counters[i].bytes_per_unit for bytes",
            "timer_slack_reduced": slack,
            "cpu_affinity": opts.cpu,
            "rt_priority": opts.rt_priority,
            "spin_ns": opts.spin_ns,
            # which sweep implementation ran: compiled (_csweep) or python (csweep.py)
            "sweep": sweep_impl,
            # --netdev-stats asked for but no netdev found: said, so the TCP check says it
            # could not judge instead of passing in silence
            **({"netdev_stats": {"requested": True, "found": 0, "note": netdev_note}}
               if netdev_note else {}),
            **(opts.extra or {}),
        },
    }
    if opts.host:
        fields["host"] = str(opts.host)
    server = _start_metrics(opts.metrics, counters, interval_ns, fields)
    try:
        writer = CaptureWriter.create(opts.output, fields, force=opts.force,
                                      private=opts.private)
    except CaptureError as exc:
        if server is not None:
            server.close()
        raise RecordError(str(exc)) from exc
    status_out = None
    if opts.status or (opts.status is None and log.isatty()):
        status_out = log
        print(f"rdmascope record: sweep: {sweep_impl}", file=log)

    mono_off, rt_off = int(opts.monotonic_offset_ns), int(opts.realtime_offset_ns)
    if mono_off or rt_off:  # an emulated node's clocks (never on a real host: both 0)
        def clock() -> int:
            return time.perf_counter_ns() + mono_off

        def pair_now() -> tuple[int, int]:
            rt, mo = clock_pair()
            return rt + rt_off, mo + mono_off
    else:
        clock, pair_now = time.perf_counter_ns, clock_pair
    reader = CounterReader([c["path"] for c in counters], clock=clock,
                           slow_ns=SLOW_READ_FACTOR * int(opts.interval_ns))

    stop_reason: list[str] = []

    def on_signal(signum, _frame):
        if not stop_reason:
            stop_reason.append(signal.Signals(signum).name)

    old_handlers = {}
    if threading.current_thread() is threading.main_thread():
        # SIGHUP (a dropped ssh session, a closed terminal) ends the capture as cleanly as
        # SIGINT/SIGTERM: everything taken is written and the audit saved
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old_handlers[s] = signal.signal(s, on_signal)

    _warm_up(len(counters), status_out is not None)
    proc = psutil.Process()
    cpu0 = proc.cpu_times()
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the sampler thread gets the GIL back within 0.5 ms
    gc.collect()
    gc.freeze()

    wt = _WriterThread(writer, counters, status_out, log)
    wt.clock, wt.pair = clock, pair_now
    wt.follow_renames(reader, root, {d.name: d.pci for d in devices})
    wt.known_at_start |= {d.name for d in found}  # devices present at the start
    wt.note_events(reader.events)  # problems found when opening: said now, stored with the rest
    wt.start()  # waits for the first buffer before touching the manifest
    pair = pair_now()
    if server is not None:  # the queue hands it over before any buffer
        server.metrics.start_ns = pair[1]
        wt.metrics = server.metrics
    if status_out is not None:  # the queue hands it over before any buffer
        wt.status_meter = StatusMeter(counters, pair[1], clock=clock)
    writer.manifest["start"] = {"realtime_ns": pair[0], "monotonic_ns": pair[1]}
    writer.manifest["clock_pairs"] = [list(pair)]
    # Save the real start record now (the writer thread does it on its first message), not at the
    # first handoff: a kill -9 before that handoff must not leave the create-time start, which
    # precedes the warm-up and would make the capture claim sweeps it never took.
    wt.put(SweepBuffers(), [])

    n_sweeps = None
    if opts.duration_s is not None:
        # deadlines at start, start + interval, ..., start + duration: the capture spans the
        # whole duration (`--interval 1s --duration 3s` reads at 0, 1, 2 and 3 s)
        n_sweeps = int(round(opts.duration_s * 1e9 / interval_ns)) + 1
    stats = ScheduleStats()
    handoff_ns = int(HANDOFF_INTERVAL_S * 1e9)
    state = {"buf": SweepBuffers(), "next_handoff": pair[1] + handoff_ns,
             "lock": threading.Lock(), "abandoned": False, "sweeper": None,
             # counters of devices that appeared, from the writer thread (_watch_devices)
             "pending": []}
    read_sweep = reader.read_sweep

    def add_pending(descs: list[dict[str, Any]], device: dict[str, Any] | None) -> None:
        with state["lock"]:  # the writer thread: taken by the sampling thread between sweeps
            state["pending"].append((descs, device))
        reader.wake()  # a compiled sweep comes back to add them at its next sweep

    wt.grow = {"root": root, "counters": list(opts.counters), "netdev_stats": opts.netdev_stats,
               "selected": bool(opts.devices), "add": add_pending}

    def grow() -> bool:
        """In the sampling thread, between sweeps: hand over the buffer so far (every buffer
        has one counter set), then add the pending counters to the reader; they are read from
        the next sweep on, and their descriptors (``appeared_ns``: now) reach the writer
        thread before any buffer that reads them."""
        with state["lock"]:
            if state["abandoned"] or not state["pending"]:
                return False
            items, state["pending"] = state["pending"], []
            now = clock()
            grown = []
            for descs, dev in items:
                for d in descs:
                    d["appeared_ns"] = int(now)
                grown.append((now, None, "_counters_added", {"counters": descs, "device": dev}))
            wt.put(state["buf"], reader.drain_events() + grown)
            state["buf"] = SweepBuffers()
            state["next_handoff"] = now + handoff_ns
            for descs, _dev in items:
                reader.add([d["path"] for d in descs])
        return True

    def sweep(k: int) -> None:
        if state["pending"]:
            grow()
        buf = state["buf"]
        read_sweep(k, buf)
        now = clock()
        if now >= state["next_handoff"]:
            with state["lock"]:
                if state["abandoned"]:
                    return
                wt.put(buf, reader.drain_events())
                state["buf"] = SweepBuffers()
                state["next_handoff"] = now + handoff_ns

    def stop_now() -> bool:
        if stop_reason or wt.error is not None or wt.behind is not None or \
                state["abandoned"]:
            return True
        if n_sweeps is not None and stats.next_k >= n_sweeps:
            return True
        return should_stop is not None and should_stop()

    def sample() -> None:
        if csweep_mod is None:
            run_schedule(sweep, interval_ns, should_stop=stop_now, start_ns=pair[1],
                         clock=clock, spin_ns=opts.spin_ns, n_deadlines=n_sweeps, stats=stats)
        else:
            _run_compiled(csweep_mod, reader, state, wt, stats, interval_ns=interval_ns,
                          start_ns=pair[1], spin_ns=opts.spin_ns, n_deadlines=n_sweeps,
                          handoff_ns=handoff_ns, should_stop=stop_now, grow=grow)

    sampling = _Sampling(sample, state, reader, wt, stats, clock=clock, interval_ns=interval_ns,
                         end_ns=(pair[1] + (n_sweeps - 1) * interval_ns
                                 if n_sweeps is not None else None),
                         stop_requested=lambda: bool(stop_reason) or wt.error is not None or (
                             wt.behind is not None) or (
                             should_stop is not None and should_stop()), n_deadlines=n_sweeps)
    abandoned = None
    try:
        abandoned = sampling.run()
    finally:
        t_stop = clock()
        if abandoned is None:
            abandoned = sampling.abandon_if_running(t_stop)
        if abandoned is None:
            wt.finish(state["buf"], reader.drain_events())
        else:  # the readings taken, the read in progress marked unavailable (never zero)
            wt.finish(abandoned, reader.drain_events() + sampling.drain_events())
        if not sampling.abandoned:
            reader.close()  # (a hung read still holds its descriptor: left to the exit)
        if server is not None:
            server.close()
        cpu1 = proc.cpu_times()
        sys.setswitchinterval(old_switch)
        gc.unfreeze()
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if wt.status_tty and wt.status_meter is not None and wt.status_meter.lines:
            try:
                status_out.write("\n")  # keep the last status line; the summary starts below
            except (OSError, ValueError):
                pass

    if stop_reason:
        stopped_by = stop_reason[0]
    elif wt.error is not None or wt.behind is not None:
        stopped_by = "write_error"
    elif n_sweeps is not None and stats.next_k >= n_sweeps:
        stopped_by = "duration"
    else:
        stopped_by = "request"
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    wall_s = (t_stop - pair[1]) / 1e9
    deadlines = stats.taken + stats.missed
    audit = {
        "sweeps_taken": stats.taken,
        "sweeps_missed": stats.missed,
        "sweeps_taken_pct": (100.0 * stats.taken / deadlines) if deadlines else None,
        "interval_ns": wt.interval_hist.summary(),
        "read_duration_ns": [
            {"counter_id": i, "device": c["device"], "port": c["port"],
             "netdev": c.get("netdev"), "name": c["name"],
             **wt.read_hist[i].summary(), "bad_rows": wt.bad_rows[i],
             "problems": list(wt.problems[i])}
            for i, c in enumerate(counters)
        ],
        "cpu_s": round(cpu_s, 4),
        "cpu_user_s": round(cpu1.user - cpu0.user, 4),
        "cpu_system_s": round(cpu1.system - cpu0.system, 4),
        "wall_s": round(wall_s, 4),
        "cpu_pct_one_core": round(100.0 * cpu_s / wall_s, 3) if wall_s > 0 else None,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rows_written": writer.rows_written,
        # every sweep reads every counter, so rows come in whole sweeps; after a write error the
        # sweeps still taken are audited but not stored: say both numbers
        "sweeps_written": wt.sweeps_written,
        "sweeps_not_written": stats.taken - wt.sweeps_written,
        "stopped_by": stopped_by,
        "sweep": sweep_impl,
        # reads slower than the slow-read bound (5 x the interval), per counter, and a read the
        # recorder stopped without (it hung past the end): coverage, said with names
        "slow_read_bound_ns": reader.slow_ns,
        "slow_reads": [
            {"counter_id": i, "device": c["device"], "port": c["port"], "netdev": c.get("netdev"),
             "name": c["name"], "path": reader.paths[i], "count": reader.slow_reads[i],
             "max_ns": reader.slow_max_ns[i]}
            for i, c in enumerate(counters) if reader.slow_reads[i]],
        "abandoned_read": sampling.abandoned_read,
    }
    error = wt.error.message if wt.error is not None else wt.behind
    disk_full = wt.error is not None and is_enospc(wt.error)
    if error is not None:  # the capture itself says what stopped the writing
        writer.add_event(t_stop, None, "write_error", error, save=False)
    try:
        if mono_off or rt_off:  # the stop record on the emulated node's clocks
            rt, mo = pair_now()
            writer.add_clock_pair((rt, mo), save=False)
            writer.close(audit=audit, stop={"realtime_ns": rt, "monotonic_ns": mo})
        else:
            writer.close(audit=audit)
    except CaptureWriteError as exc:
        if error is None:
            error, disk_full = exc.message, is_enospc(exc)
    if error is not None and not error.startswith(str(opts.output)):
        error = f"{opts.output}: {error}"
    return RecordResult(path=Path(opts.output), audit=audit, error=error, stopped_by=stopped_by,
                        disk_full=disk_full, location=writer.location())


def format_audit(audit: dict[str, Any]) -> str:
    """Render an audit dict as a few human-readable lines (printed on stop and by inspect)."""
    def us(v):
        return "n/a" if v is None else f"{v / 1e3:.1f} us"

    lines = []
    pct = audit.get("sweeps_taken_pct")
    lines.append(f"sweeps: {audit.get('sweeps_taken')} taken, {audit.get('sweeps_missed')} missed"
                 + (f" ({pct:.3f} % taken)" if pct is not None else ""))
    if audit.get("sweeps_written") is not None:  # audits before this key: not known
        lost = audit.get("sweeps_not_written") or 0
        lines.append(f"written: {audit['sweeps_written']} sweeps ({audit.get('rows_written')} "
                     "readings) in the capture"
                     + (f"; {lost} sweeps taken after the write error were not written"
                        if lost else ""))
    iv = audit.get("interval_ns") or {}
    lines.append(f"interval: p50 {us(iv.get('p50'))}, p99 {us(iv.get('p99'))}, "
                 f"max {us(iv.get('max'))}")
    if audit.get("sweep"):  # audits before this key: not recorded
        lines.append(f"sweep: {audit['sweep']}")
    for r in audit.get("read_duration_ns") or []:
        # a netdev statistic is named by its netdev (enP2p1s0f1np1), not its RDMA device
        where = r.get("netdev") or (
            f"{r['device']}" + (f"/{r['port']}" if r.get("port") is not None else ""))
        bad = f", {r['bad_rows']} unavailable" if r.get("bad_rows") else ""
        lines.append(f"read bracket {where} {r['name']}: p50 {us(r.get('p50'))}, "
                     f"p99 {us(r.get('p99'))}{bad}")
        for why in r.get("problems") or []:  # audits before this key: no reasons stored
            lines.append(f"  unavailable: {why}")
    bound = audit.get("slow_read_bound_ns")
    for r in audit.get("slow_reads") or []:  # audits before this key: not counted
        where = r.get("netdev") or (
            f"{r['device']}" + (f"/{r['port']}" if r.get("port") is not None else ""))
        lines.append(f"slow reads {where} {r['name']}: {r['count']} over "
                     f"{(bound or 0) / 1e6:g} ms, longest {r['max_ns'] / 1e9:.3f} s "
                     f"({r.get('path')}); no counter was read meanwhile: unknown, not zero")
    ab = audit.get("abandoned_read")
    if ab and ab.get("path"):
        lines.append(f"stopped without a hung read: {ab['path']} (running "
                     f"{ab['running_ns'] / 1e9:.3f} s at the end, sweep {ab['sweep']}); that "
                     "reading and the rest of its sweep are marked unavailable")
    elif ab:
        lines.append(f"stopped without the sampling thread: {ab.get('note')}")
    if audit.get("cpu_s") is not None:
        lines.append(f"cpu: {audit['cpu_s']:.2f} s over {audit.get('wall_s', 0):.1f} s "
                     f"({audit.get('cpu_pct_one_core')} % of one core), "
                     f"peak RSS {audit.get('max_rss_bytes', 0) / 1e6:.1f} MB")
    return "\n".join(lines)
