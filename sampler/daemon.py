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
cannot be written (a closed pipe) turns the status off, said once as a ``status_off`` event.
Public API: ``RecordOptions``, ``record(options) -> RecordResult``, ``RecordError``.

This module holds the options, the checks before sampling and ``record`` itself (discovery, the
counters, the manifest, the threads started and stopped); the writer thread (with its device
rescan) is ``writer_thread.WriterThread``, the sampling thread and its stop supervisor
``sampling.Sampling`` (and the compiled sweep's schedule ``sampling.run_compiled``).
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psutil
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
from rdmascope.sampler.sampling import (  # noqa: F401  (re-exported)
    HUNG_SAY_S,
    STOP_GRACE_NS,
    STOP_WAIT_MAX_NS,
    Sampling,
    run_compiled,
)
from rdmascope.sampler.status import StatusMeter
from rdmascope.sampler.writer_thread import (  # noqa: F401  (re-exported)
    CLOCK_PAIR_INTERVAL_S,
    HANDOFF_INTERVAL_S,
    WRITER_BACKLOG_S,
    WriterThread,
    warm_up,
)

from rdmascope import __version__
from rdmascope.capture import (
    CaptureError,
    CaptureWriteError,
    CaptureWriter,
    check_output,
    clock_pair,
    is_enospc,
)

#: A read slower than this many sampling intervals is a slow read (counted, named: audit,
#: inspect, status line); on mlx5 each read is a firmware command (command timeout 60 s).
SLOW_READ_FACTOR = 5
#: The first sweep's deadline (the capture's start) is this far after the recorder takes its
#: clocks, so the sampling thread is waiting for it when it comes (``record``).
START_LEAD_NS = 5_000_000
MIN_INTERVAL_NS = 100_000
MAX_INTERVAL_NS = 1_000_000_000


class RecordError(Exception):
    """An expected failure that stops (or prevents) a recording; the message says what to do."""


class RecordUsageError(RecordError):
    """A ``RecordError`` caused by an option value that names nothing or is out of range (a
    ``--sysfs-root`` that does not exist, a ``--device``, ``--counters`` name or ``--netdev``
    that is not there, an ``--interval`` or ``--duration`` outside its range): the CLI exits 2,
    as for a usage error. The message starts with the option."""


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
        raise RecordUsageError(f"--interval {opts.interval_ns / 1e6:g} ms is outside the allowed "
                               "range 0.1 ms .. 1 s")
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise RecordUsageError(f"--duration must be positive, got {opts.duration_s:g} s")


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
        raise RecordUsageError(
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
                raise RecordUsageError(f"--netdev {nd}: no "
                                       f"{root / 'class' / 'net' / nd / 'statistics'}"
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

    warm_up(len(counters), status_out is not None)
    proc = psutil.Process()
    cpu0 = proc.cpu_times()
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the sampler thread gets the GIL back within 0.5 ms
    gc.collect()
    gc.freeze()

    wt = WriterThread(writer, counters, status_out, log)
    wt.clock, wt.pair = clock, pair_now
    wt.follow_renames(reader, root, {d.name: d.pci for d in devices})
    wt.known_at_start |= {d.name for d in found}  # devices present at the start
    wt.note_events(reader.events)  # problems found when opening: said now, stored with the rest
    wt.start()  # waits for the first buffer before touching the manifest
    # The capture starts at its first sweep's deadline, which the windows' grids take as their
    # origin: set a little ahead of now (both clocks alike, so the pair still maps one onto the
    # other), the sampling thread is at it when it comes and the first reading is within the
    # windows' cover tolerance of the start; a deadline of now was already ~1 ms past when the
    # first sweep ran (the thread's start and the manifest's first save), leaving every
    # width's first window partly covered.
    pair = tuple(x + START_LEAD_NS for x in pair_now())
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
            run_compiled(csweep_mod, reader, state, wt, stats, interval_ns=interval_ns,
                          start_ns=pair[1], spin_ns=opts.spin_ns, n_deadlines=n_sweeps,
                          handoff_ns=handoff_ns, should_stop=stop_now, grow=grow)

    sampling = Sampling(sample, state, reader, wt, stats, clock=clock, interval_ns=interval_ns,
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
