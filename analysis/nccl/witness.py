"""Two witnesses side by side: what NCCL's log says it opened, what the counters say carried bytes.

Neither is enough alone: the log names the HCAs NCCL opened and the NET device each channel
uses, the counters say where the bytes went. ``compare_witnesses`` takes a parsed ``NcclLog``
and the counters' ``Verdict`` (``rdmascope.analysis.verify.verify_emulation``) and returns a
``WitnessVerdict``:

- PASS: single: the log's channels go through one HCA and that HCA carried the bytes ("confirmed
  by both"); both: the channels go through both twins and both carried their share;
- FAIL: they disagree (NCCL's channels use both twins but one carried all, or NCCL used one
  but the other carried bytes: e.g. the log is of another run; or NCCL opened both twins and
  used one: an HCA opened but unused, NCCL_IB_HCA not applied), or NCCL
  used NET/Socket (TCP, named from the log whatever the counters say), or the counters' own
  verdict failed;
- CANNOT JUDGE: the log cannot witness this capture (no process on the capture's host, times
  that do not overlap the capture, no network line understood) or the counters could not judge.

"The HCAs NCCL used" are those its NET/IB channels go through (``Process.hcas_carrying``);
without channel lines (a log cut before the connections), those of ``NET/IB : Using``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from .log import NcclLog, Process, is_ib, short_host

__all__ = ["WitnessVerdict", "compare_witnesses", "summary_table", "CARRY_SHARE"]

PASS, FAIL, CANNOT_JUDGE = "pass", "fail", "cannot judge"

#: a device "carried bytes" when it has at least this share of all RDMA bytes of the range
CARRY_SHARE = 0.01
#: slack when comparing the log's and the capture's time spans (NCCL stamps whole seconds)
TIME_SLACK_S = 2.0


@dataclass
class WitnessVerdict:
    """The agreement of the log and the counters.

    ``status``: "pass", "fail" or "cannot judge"; ``message``: one sentence naming devices;
    ``log_hcas``: HCAs NCCL's channels used on the capture's host; ``log_opened``: HCAs it
    opened; ``counter_hcas``: devices with >= ``CARRY_SHARE`` of the bytes; ``network``: "IB",
    "Socket", a plugin's name or None; ``processes``: host:pid of the log's processes used.
    """

    status: str
    message: str
    log_hcas: list[str] = field(default_factory=list)
    log_opened: list[str] = field(default_factory=list)
    counter_hcas: list[str] = field(default_factory=list)
    network: str | None = None
    processes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == PASS

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "log_hcas": self.log_hcas,
                "log_opened": self.log_opened, "counter_hcas": self.counter_hcas,
                "network": self.network, "processes": self.processes, "notes": self.notes}


def _aware(t: datetime) -> datetime:
    # NCCL's own "[%F %T]" stamps are local time without a zone: read them in this machine's zone
    return t if t.tzinfo is not None else t.astimezone()


def compare_witnesses(log: NcclLog, verdict, *, host: str, span_realtime_ns: tuple[int, int] | None,
                      expect: str = "single") -> WitnessVerdict:
    """Compare ``log`` with the counters' ``verdict`` for the capture of ``host``.

    ``span_realtime_ns``: the capture's (start, end) in realtime ns since the epoch, or None.
    ``expect``: "single" or "both". Never raises for what the log says; see the module docstring
    for the verdicts.
    """
    notes = [f"{f}:{ln}: {why}" for f, ln, why in log.notes]
    procs = log.on_host(host)
    counters = _carrying(verdict)
    if not procs:
        return WitnessVerdict(CANNOT_JUDGE, (
            f"cannot judge: the NCCL log is of host(s) {', '.join(log.hosts()) or '(none)'}, not "
            f"of the capture's host {short_host(host)}: it cannot witness this capture"),
            counter_hcas=counters, notes=notes)
    if span_realtime_ns is not None:
        procs, gone, before = _same_run(procs, span_realtime_ns)
        if not procs:
            return WitnessVerdict(CANNOT_JUDGE, f"cannot judge: {gone[0]}", processes=[],
                                  counter_hcas=counters, notes=notes)
        notes += before
    keys = [p.key for p in procs]
    if not any(p.times for p in procs):
        notes.append("the log's lines carry no timestamps: that it is of the same run as the "
                     "capture is not checked (NCCL_DEBUG_TIMESTAMP_LEVELS=INFO stamps them)")
    understood = [p for p in procs if p.understood_network()]
    if not understood:
        return WitnessVerdict(CANNOT_JUDGE, (
            "cannot judge: the NCCL log of this host says nothing this reader understood about "
            "the network (no 'Using network', 'NET/IB : Using', 'NET/Socket : Using' or "
            "'Channel ... via NET' line; run with NCCL_DEBUG=INFO)"), processes=keys,
            counter_hcas=counters, notes=notes)
    networks = {p.network for p in understood if p.network}
    used: dict[str, int] = {}
    opened: list[str] = []
    for p in understood:
        for h, n in p.hcas_carrying().items():
            used[h] = used.get(h, 0) + n
        opened += [h for h in p.opened_hcas if h not in opened]
    base = dict(log_opened=opened, counter_hcas=counters, processes=keys, notes=notes)
    sock = sorted({f"{ifn}:{addr}" for p in understood for ifn, addr in p.sockets.values()})
    if "Socket" in networks or any(c.net == "Socket" for p in understood for c in p.net_channels()):
        via = f" over {', '.join(sock)}" if sock else ""
        no_ib = " after 'NET/IB : No device found.'" if any(p.ib_no_device for p in understood) else ""
        return WitnessVerdict(FAIL, (
            f"NCCL used NET/Socket (TCP{via}){no_ib}: the collectives did not use RDMA, whatever "
            f"the RDMA counters say"), network="Socket", **base)
    others = {n for n in networks if not is_ib(n)}
    if others:
        return WitnessVerdict(CANNOT_JUDGE, (
            f"cannot judge: NCCL used network plugin {', '.join(sorted(others))}; this reader "
            f"maps only NCCL's own NET/IB devices to HCAs"), network=sorted(others)[0], **base)
    unmapped = sorted({f"{p.key} NET/{c.net}/{c.dev}" for p in understood for c in p.net_channels()
                       if is_ib(c.net) and c.dev is not None and not p.net_dev_hcas(c.dev)})
    if unmapped:
        return WitnessVerdict(CANNOT_JUDGE, (
            f"cannot judge: channels go through NET devices the log does not map to HCAs "
            f"({', '.join(unmapped[:3])}{' ...' if len(unmapped) > 3 else ''}; "
            f"NCCL_DEBUG_SUBSYS=INIT,NET logs the virtual devices)"), network="IB", **base)
    log_hcas = sorted(used) if used else sorted(opened)
    from_what = "'s channels go through" if used else " opened (no channel line was logged)"
    if not log_hcas:
        return WitnessVerdict(CANNOT_JUDGE, (
            "cannot judge: the NCCL log does not say which HCAs NCCL used (a channel's NET "
            "device is not among the logged devices; NCCL_DEBUG_SUBSYS=INIT,NET logs them)"),
            network="IB", **base)
    status = getattr(verdict, "status", None)
    if status == CANNOT_JUDGE:
        return WitnessVerdict(CANNOT_JUDGE, (
            f"cannot judge: the counters cannot judge ({verdict.message.removeprefix('cannot judge: ')}); "
            f"NCCL's log names {', '.join(log_hcas)}"), log_hcas=log_hcas, network="IB", **base)
    recorded = set(map(str, verdict.devices.index)) if verdict.devices is not None else set()
    unrecorded = [h for h in log_hcas if h not in recorded]
    if unrecorded:
        return WitnessVerdict(CANNOT_JUDGE, (
            f"cannot judge: NCCL used {', '.join(unrecorded)}, which the capture did not record "
            f"(recorded: {', '.join(sorted(recorded)) or 'none'})"), log_hcas=log_hcas,
            network="IB", **base)
    L, C = set(log_hcas), set(counters)
    share = _shares(verdict)

    def said(hs):
        return ", ".join(f"{h} ({share.get(h, 0.0):.1%})" for h in sorted(hs))

    if not C:
        return WitnessVerdict(CANNOT_JUDGE, "cannot judge: the counters saw no RDMA bytes",
                              log_hcas=log_hcas, network="IB", **base)
    unused = [h for h in opened if h not in L]
    if expect == "single":
        if len(L) == 1 and L == C and unused:
            return WitnessVerdict(FAIL, (
                f"disagreement: NCCL opened {', '.join(opened)} (NET/IB : Using) but its channels "
                f"and the RDMA bytes used only {log_hcas[0]}: {', '.join(unused)} was opened but "
                f"unused, so NCCL_IB_HCA did not restrict NCCL to one HCA "
                f"(NCCL_IB_HCA={_env(understood) or 'unset'})"), log_hcas=log_hcas,
                network="IB", **base)
        if len(L) == 1 and L == C:
            msg = (f"confirmed by both: NCCL's channels go through {log_hcas[0]} only and "
                   f"{log_hcas[0]} carried the RDMA bytes ({share.get(log_hcas[0], 0):.1%})")
            ok = getattr(verdict, "ok", True)
            return WitnessVerdict(PASS if ok else FAIL, msg if ok else (
                f"the log agrees with the counters ({log_hcas[0]}) but the counters' verdict "
                f"failed: {verdict.message}"), log_hcas=log_hcas, network="IB", **base)
        if len(L) > 1 and len(C) == 1:
            msg = (f"disagreement: NCCL{from_what} {', '.join(log_hcas)} (not restricted by "
                   f"NCCL_IB_HCA) but only {said(C)} carried bytes: the log may be of another "
                   f"run, or an HCA was opened but unused")
        elif len(L) == 1 and L != C:
            msg = (f"disagreement: NCCL{from_what} {log_hcas[0]} only, but the counters saw "
                   f"{said(C)} carry bytes: the log is of another run, or another process used "
                   f"{', '.join(sorted(C - L))}")
        elif L == C:
            msg = (f"both witnesses say this node is not emulated: NCCL{from_what} "
                   f"{', '.join(log_hcas)} and the counters saw {said(C)} carry bytes "
                   f"(NCCL_IB_HCA={_env(understood) or 'unset'} in this log)")
        else:
            msg = (f"disagreement: NCCL{from_what} {', '.join(log_hcas)}; the counters saw "
                   f"{said(C)} carry bytes: not a one-interface emulation")
        return WitnessVerdict(FAIL, msg, log_hcas=log_hcas, network="IB", **base)
    # expect both
    if len(L) >= 2 and C >= L and getattr(verdict, "ok", True):
        return WitnessVerdict(PASS, (
            f"confirmed by both: NCCL's channels go through {', '.join(log_hcas)} and each carried "
            f"bytes ({said(L)})"), log_hcas=log_hcas, network="IB", **base)
    if len(L) < 2:
        msg = (f"disagreement: expected both twins, but NCCL{from_what} {', '.join(log_hcas)} only"
               f" (NCCL_IB_HCA={_env(understood) or 'unset'}); the counters saw {said(C)}")
    elif not C >= L:
        msg = (f"disagreement: NCCL{from_what} {', '.join(log_hcas)}, but only {said(C)} "
               f"carried bytes")
    else:
        msg = f"the log agrees ({', '.join(log_hcas)}) but the counters' verdict failed: {verdict.message}"
    return WitnessVerdict(FAIL, msg, log_hcas=log_hcas, network="IB", **base)


def _env(procs: list[Process]) -> str | None:
    return next((p.ib_hca_env for p in procs if p.ib_hca_env), None)


def _shares(verdict) -> dict[str, float]:
    d = getattr(verdict, "devices", None)
    if d is None or "share" not in d:
        return {}
    return {str(k): float(v) for k, v in d["share"].items() if v == v}


def _carrying(verdict) -> list[str]:
    return sorted(h for h, s in _shares(verdict).items() if s >= CARRY_SHARE)


def _iso(t: datetime) -> str:
    return _aware(t).isoformat(timespec="seconds")


def _same_run(procs: list[Process], span_ns: tuple[int, int]):
    """Split ``procs`` by their stamps against the capture's realtime span: (kept, reasons the
    others are of another run, notes). A process is of another run when its first line comes
    after the capture ended, or when it closed all its communicators (``Destroy|Abort COMPLETE``)
    before the capture started. Lines that all come before the capture are kept with a note: a
    server sets NCCL up long before anyone records it."""
    lo, hi = span_ns[0] / 1e9, span_ns[1] / 1e9
    cap = (f"{datetime.fromtimestamp(lo, timezone.utc).isoformat(timespec='seconds')} to "
           f"{datetime.fromtimestamp(hi, timezone.utc).isoformat(timespec='seconds')}")
    zone = ("; NCCL stamps local time without a zone, read here in this machine's zone: if the "
            "nodes run in another one, run rdmascope with TZ set to it")
    kept, gone, notes = [], [], []
    for p in procs:
        if not p.times:
            kept.append(p)
            continue
        ts = sorted(p.times, key=lambda t: _aware(t).timestamp())
        first, last = ts[0], ts[-1]
        naive = first.tzinfo is None
        ends = [c.t_end for c in p.comms.values() if c.ended and c.t_end is not None]
        all_ended = bool(p.comms) and all(c.ended for c in p.comms.values()) and ends
        if _aware(first).timestamp() > hi + TIME_SLACK_S:
            gone.append(f"NCCL's log of {p.key} starts at {_iso(first)}, after the capture "
                        f"({cap}) ended: it is of another run" + (zone if naive else ""))
        elif all_ended and max(_aware(t).timestamp() for t in ends) < lo - TIME_SLACK_S:
            gone.append(f"NCCL closed every communicator of {p.key} by "
                        f"{_iso(max(ends, key=lambda t: _aware(t).timestamp()))}, before the "
                        f"capture ({cap}) started: the log is of another run"
                        + (zone if naive else ""))
        else:
            kept.append(p)
            if _aware(last).timestamp() < lo - TIME_SLACK_S:
                notes.append(f"NCCL's lines of {p.key} end at {_iso(last)}, before the capture "
                             f"({cap}) starts: a process that set NCCL up before the recording, "
                             "or an earlier run (the log cannot tell; NCCL logs 'Destroy "
                             "COMPLETE' when a communicator closes)")
    return kept, gone, notes


def log_span(procs: list[Process]) -> tuple[datetime, datetime] | None:
    ts = [t for p in procs for t in p.times]
    if not ts:
        return None
    ts = sorted(ts, key=lambda t: _aware(t).timestamp())
    return ts[0], ts[-1]


def summary_table(log: NcclLog) -> pd.DataFrame:
    """Return one row per (host, pid): version, network, plugin, NCCL_IB_HCA, HCAs opened (with
    port and link layer), GDRDMA, NET channels per HCA, socket fallback, communicators.

    Columns: host, pid, version, network, plugin, ib_hca_env, hcas_opened, channels_per_hca
    (distinct channels per communicator through each HCA), connections_per_hca (send and
    receive lines), gdrdma ("on", "off", "mixed" or None), socket (interfaces or ""), comms ("rank R/N" per
    communicator, with "incomplete" when its Init COMPLETE is missing), files.
    """
    rows = []
    for p in sorted(log.processes, key=lambda q: (q.host, q.pid)):
        ib = [c for c in p.net_channels() if c.net == "IB"]
        gdr = {c.gdr for c in ib}
        comms = []
        for c in p.comms.values():
            s = f"rank {c.rank}/{c.nranks}"
            if c.nnodes:
                s += f" on {c.nnodes} nodes"
            if not c.complete:
                s += " (incomplete)"
            comms.append(s)
        opened = [f"{h}:{port}/{link}" for _, (h, port, link) in sorted(p.ib_hcas.items())]
        rows.append({
            "host": p.host, "pid": p.pid, "version": p.version, "network": p.network,
            "plugin": p.plugin, "ib_hca_env": p.ib_hca_env,
            "hcas_opened": " ".join(opened) or ("none (NET/IB : No device found)" if p.ib_no_device else ""),
            "channels_per_hca": " ".join(f"{h}={n}" for h, n in sorted(p.channels_per_hca().items())),
            "connections_per_hca": " ".join(f"{h}={n}" for h, n in sorted(p.hcas_carrying().items())),
            "gdrdma": None if not gdr else ("on" if gdr == {True} else "off" if gdr == {False} else "mixed"),
            "socket": " ".join(f"{i}:{a}" for i, a in p.sockets.values()),
            "comms": "; ".join(comms), "files": " ".join(p.files)})
    return pd.DataFrame(rows)


def capture_realtime_span(capture, start_ns: int, end_ns: int) -> tuple[int, int] | None:
    """Return (start, end) of a capture range in realtime ns via its clock pairs, or None."""
    from ..load import monotonic_to_realtime

    try:
        rt = monotonic_to_realtime(capture, [int(start_ns), int(end_ns)])
    except (ValueError, AttributeError, TypeError):
        return None
    return int(rt[0]), int(rt[1])


def witness_capture(capture, verdict, log_paths, *, expect: str = "single") -> WitnessVerdict:
    """Read ``log_paths`` and compare them with ``verdict`` of ``capture`` (a loaded or opened
    capture: ``meta['host']``, ``clock_pairs``). Raises ``NcclLogError`` for a file that is not an
    NCCL log."""
    from .log import read_logs

    log = read_logs(log_paths)
    host = str(capture.meta.get("host") or "")
    span = capture_realtime_span(capture, verdict.start_ns or capture.t_start_ns,
                                 verdict.end_ns or capture.t_end_ns)
    return compare_witnesses(log, verdict, host=host, span_realtime_ns=span, expect=expect)
