"""The recorder's writer thread: it owns the ``CaptureWriter`` and does everything but sampling.

It takes the buffers the sampling thread hands over every ``HANDOFF_INTERVAL_S`` (a bounded queue:
a writer more than ``WRITER_BACKLOG_S`` behind stops the recording, nothing taken is dropped),
appends them to the live segment, rolls Parquet segments, saves events and clock pairs, keeps the
audit histograms and the live status line, and on a ~1 s rescan watches the RDMA devices and
netdevs (appeared, vanished, returned, renamed: ``device_changes``), adding the counters of a
device that appears. ``daemon.record`` starts it; the sampler never imports pandas or matplotlib.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
from rdmascope.sampler.audit import LogHistogram
from rdmascope.sampler.discovery import counter_descriptors, discover, infiniband_dir
from rdmascope.sampler.reader import CounterReader, SweepBuffers
from rdmascope.sampler.status import (
    ERASE_EOL,
    StatusMeter,
    format_status,
    status_width,
    status_write,
)

from rdmascope.capture import (
    ROLL_INTERVAL_S,
    CaptureWriteError,
    CaptureWriter,
    clock_pair,
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



def to_batch(buf: SweepBuffers):
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


def warm_up(n_counters: int, status: bool) -> None:
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
    batch = to_batch(buf)
    SAMPLE_SCHEMA.serialize()
    batch.serialize()  # what CaptureWriter.write_batch sends to the live segment
    table = pa.Table.from_batches([batch], schema=SAMPLE_SCHEMA)
    table = table.sort_by([("counter_id", "ascending"), ("sweep", "ascending")])
    write_segment(table, pa.BufferOutputStream())
    WriterThread._audit_into(buf, [LogHistogram() for _ in range(n_counters)],
                              LogHistogram(), [0] * n_counters, None)


class WriterThread(threading.Thread):
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
            if getattr(self, "probing", None) and self.error is None:
                # a new device still probing: looked at again soon, between handoffs
                try:
                    buf, events = self.q.get(timeout=self.PROBE_RECHECK_S)
                except queue.Empty:
                    try:
                        self._watch_devices(time.monotonic())
                    except Exception as exc:  # noqa: BLE001 - any error stops it, said
                        self._fail(exc)
                    continue
            else:
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
        at once; one "renamed" event, one line and a ``device_changes`` entry (kind "renamed",
        ``as`` the new name) say so. The counters restarted there, and the
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
            t = self.clock()
            # recorded in device_changes as a netdev rename is (kind "renamed", ``as`` the new
            # name; ``was`` the name it had when it went, after an earlier rename)
            changes = self.writer.manifest.get("device_changes")
            if changes is None:
                changes = DeviceChanges(self.writer.manifest)
            changes.append({"name": dev, "pci": pci, "sys_image_guid": None, "kind": "renamed",
                            "as": new, "t_ns": int(t), **({"was": old} if old != dev else {})})
            msg = (f"{old} came back as {new} (PCI {pci}); following it: its counters are read "
                   f"from {self.ib_dir / new} and restarted there (a reset, not bytes)")
            self.writer.add_event(t, None, "renamed", msg, save=False)
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
                deferred.add(n)  # looked at again soon (PROBE_RECHECK_S)
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
        for n in list(probing):  # gone or said: no longer probing
            if n not in deferred:
                del probing[n]
        if deferred:  # the next look soon, not at the next 1 s rescan
            self.last_watch = now - 1 + self.PROBE_RECHECK_S
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
    #: is looked at again every ``PROBE_RECHECK_S`` for up to this long (s) before it is said.
    PROBE_WAIT_S = 5.0
    #: How soon a device still probing is looked at again (s): it becomes usable the moment its
    #: counter files exist, so it is added within this of then, not at the next 1 s rescan.
    PROBE_RECHECK_S = 0.02

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
            self.writer.write_batch(to_batch(buf))
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

