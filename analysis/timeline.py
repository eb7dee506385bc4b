"""Timelines for Perfetto and chrome://tracing: traffic counters, bursts and request phases.

``build_timeline`` turns captures (one per node) and an optional request log into processes
(one per capture) holding tracks:

- counter tracks ``"<series> Gb/s"`` per device and direction (``rocep1s0f1/tx``), and per link
  when twins are found (``link:<dev>+<dev>/tx``, the twins summed): one value per window
  (``width_ns``, 1 ms by default), Gb/s = bytes in the window x 8 / width (10^9 bit/s), the
  window's bytes computed exactly as ``rebin`` does (each sampling interval spread over the
  windows it overlaps in proportion to the overlap); a window the readings cover only in part
  (the capture's first and last) at the rate of its covered part (``windows.Coverage``: the
  time without readings is unknown, never zero traffic). A sample is placed at its window's start
  and holds until the next sample, so consecutive equal values are written once (lossless).
  Windows whose bytes are unknown (reset, saturated, unavailable, implausible, outside the
  readings: NaN) get no value: they are listed as slices ``no valid data`` on the track
  ``"<series> no data"``, never drawn as zeros. ``peaks``' headline rule applies: a window over
  its line rate beyond its timing uncertainty is drawn at the line rate (never its raw rate,
  e.g. 320 Gb/s on a 100 Gb/s port) and marked by a slice ``over line rate (kept out)`` (with
  the raw maximum) on the track ``"<series> kept out"``; a window above the line rate by less
  is at line rate and drawn at it; gap-spread windows (bytes split over missed sweeps by
  assumption) keep their value and get a ``gap: bytes spread (kept out)`` slice there;
- slice tracks ``"bursts <series>"``: each burst ``burst_analysis`` detects on the 1 ms series
  (hysteresis relative to the link capacity, ``analysis.bursts``), with its bytes, peak and mean;
- with a request log (aligned to the first capture), one slice track per request,
  ``"request <id>"``, holding ``prefill`` [send, first token] and ``decode`` [first token, last
  token] slices with the token counts and TTFT.

Times are the capture's CLOCK_MONOTONIC ns (``clock="monotonic"``; one host only: two hosts'
monotonic clocks are unrelated) or CLOCK_REALTIME ns converted through each capture's
(REALTIME, MONOTONIC) clock pairs (``clock="realtime"``, for several hosts or to sit beside a
trace stamped in Unix time such as the PyTorch profiler's).

``write_perfetto`` writes Perfetto's protobuf format through the ``perfetto`` package's
``StreamingTraceProtoBuilder`` (TrackEvent counters and slices; a ClockSnapshot names the trace
clock); ``write_chrome_json`` writes the Chrome JSON trace event format (``ph`` C/X/M events, ``ts``
in microseconds), which chrome://tracing and ui.perfetto.dev both open.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rdmascope.capture import SAMPLE_SCHEMA, STATUS_OK, iter_capture_tables, read_manifest

from .bursts import MS, burst_analysis
from .curve import QUALITY_GAP, QUALITY_OVER_LINE
from .load import (
    Capture,
    capture_host,
    counters_frame,
    monotonic_to_realtime,
    readings_frame,
)
from .overline import line_gbps_of
from .peaks import rebin_view
from .series import byte_intervals, twin_links


class NoIntervalsError(ValueError):
    """A capture has no RDMA byte intervals (fewer than two valid readings per counter): a
    timeline of it would be empty. ``path``: the capture."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: no RDMA byte intervals (fewer than two valid readings per "
                         "counter)")
        self.path = path

#: Perfetto's builtin clock ids (protos/perfetto/common/builtin_clock.proto).
CLOCK_IDS = {"realtime": 1, "monotonic": 3, "reference": 3}


@dataclass
class Track:
    """One track: ``kind`` "counter" (``t_ns``, ``values`` of equal length; ``unit``) or
    "slices" (``slices``: list of (t0_ns, t1_ns, name, args dict))."""

    name: str
    kind: str
    unit: str = ""
    t_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slices: list[tuple[int, int, str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Process:
    """One capture (one node): ``name`` "<host> <capture dir>", a synthetic ``pid`` (1, 2, ...)."""

    name: str
    pid: int
    tracks: list[Track] = field(default_factory=list)


@dataclass
class Timeline:
    processes: list[Process]
    clock: str
    width_ns: int
    clock_pairs: list[tuple[int, int]]  # (realtime_ns, monotonic_ns), single-host traces only
    notes: list[str] = field(default_factory=list)
    #: the time axis said in the trace ("reference": the run set's host and offsets per host)
    axis: dict[str, Any] = field(default_factory=dict)


def load_capture_range(path: str | os.PathLike, start_ns: int | None, end_ns: int | None
                       ) -> Capture:
    """A ``Capture`` holding only the readings of [start_ns, end_ns] (CLOCK_MONOTONIC ns) and,
    per counter, the readings bracketing its edges (``rows_near``: from the ``EDGE_VALID``-th
    valid reading before ``start_ns`` to the ``EDGE_VALID``-th after ``end_ns``, so every
    interval and glitch check touching the range is the whole capture's), with the capture's
    own start and end. Segments wholly outside are skipped by their footer statistics
    (``rdmascope.capture.iter_capture_tables``); each segment read is cut to those rows before
    the next is read: memory of the range, not of the segments around it (a 1-minute range
    holds about one minute, not the ~3 minutes of its bracketing segments). Errors as
    ``load.load_capture``, naming the file."""
    p = os.fspath(path)
    m = read_manifest(p)
    tables = [rows_near(t.cast(SAMPLE_SCHEMA) if t.schema != SAMPLE_SCHEMA else t,
                        start_ns, end_ns)
              for _f, t in iter_capture_tables(p, start_ns=start_ns, end_ns=end_ns, manifest=m)]
    tables = [t for t in tables if t.num_rows] or tables[:1]
    table = pa.concat_tables(tables) if tables else SAMPLE_SCHEMA.empty_table()
    if table.num_rows:
        table = table.sort_by([("counter_id", "ascending"), ("sweep", "ascending")])
    readings = readings_frame(table)
    pairs = np.asarray(m.get("clock_pairs") or [], dtype=np.int64).reshape(-1, 2)
    start = (m.get("start") or {}).get("monotonic_ns")
    first = int(readings["t_before_ns"].min()) if len(readings) else 0
    stop = (m.get("stop") or {}).get("monotonic_ns") if isinstance(m.get("stop"), dict) else None
    last = int((readings["t_before_ns"] + readings["read_duration_ns"].astype(np.int64)).max()) \
        if len(readings) else first
    return Capture(path=Path(p), meta=m, counters=counters_frame(m, Path(p) / "manifest.json"),
                   readings=readings, clean_end=stop is not None, clock_pairs=pairs,
                   t_start_ns=int(start if start is not None else first),
                   t_end_ns=int(max(stop, last) if stop is not None else last))


#: Valid readings kept per counter past each edge of a loaded range (``rows_near``): the
#: interval across the edge and the glitch check of its readings (a reading against its two
#: valid neighbours, ``intervals.counter_intervals``) see what the whole capture gives.
EDGE_VALID = 3


def rows_near(table: pa.Table, start_ns: int | None, end_ns: int | None,
              keep: int = EDGE_VALID) -> pa.Table:
    """The rows of a SAMPLE_SCHEMA ``table`` sorted by (counter_id, sweep) that
    ``load_capture_range`` needs for [start_ns, end_ns]: per counter, those whose
    ``t_before_ns`` lies in the range and, each side, the readings out to the ``keep``-th valid
    one past the edge (invalid readings between them included: they flag the interval across
    them). A counter whose times are not ordered is kept whole. Zero-copy slices."""
    n = table.num_rows
    if n == 0 or (start_ns is None and end_ns is None):
        return table
    cid = table.column("counter_id").to_numpy()
    tb = table.column("t_before_ns").to_numpy()
    st = table.column("status").to_numpy()
    valid = (st == STATUS_OK) & table.column("value").is_valid().to_numpy(zero_copy_only=False)
    lo = np.iinfo(np.int64).min if start_ns is None else int(start_ns)
    hi = np.iinfo(np.int64).max if end_ns is None else int(end_ns)
    bounds = np.flatnonzero(np.diff(cid.astype(np.int64))) + 1
    starts = np.concatenate([[0], bounds]).tolist()
    ends = np.concatenate([bounds, [n]]).tolist()
    parts = []
    for a, b in zip(starts, ends, strict=True):
        t = tb[a:b]
        if len(t) > 1 and (np.diff(t) < 0).any():
            parts.append((a, b))
            continue
        i = int(np.searchsorted(t, lo, "left"))
        j = int(np.searchsorted(t, hi, "right"))
        before = np.flatnonzero(valid[a:a + i])
        s0 = int(before[-keep]) if len(before) >= keep else 0
        after = np.flatnonzero(valid[a + j:b])
        e0 = j + int(after[keep - 1]) + 1 if len(after) >= keep else b - a
        if e0 > s0:
            parts.append((a + s0, a + e0))
    if parts == [(0, n)]:
        return table
    merged: list[list[int]] = []
    for a, b in parts:  # counters next to each other: one slice
        if merged and merged[-1][1] == a:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    if not merged:
        return table.slice(0, 0)
    return pa.concat_tables([table.slice(a, b - a) for a, b in merged])


def _counter_samples(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop NaN windows and values equal to the previous written one (a counter holds its value)."""
    keep = ~np.isnan(v)
    t, v = t[keep], v[keep]
    if len(v) == 0:
        return t, v
    # after a NaN run the next value is written even when equal (it follows a hole)
    idx = np.flatnonzero(keep)
    follows_hole = np.concatenate([[True], np.diff(idx) > 1])
    change = np.concatenate([[True], v[1:] != v[:-1]]) | follows_hole
    return t[change], v[change]


#: Slice names of the windows ``peaks`` keeps out of a headline, on the track "<series> kept out"
OVER_LINE_SLICE = "over line rate (kept out)"
GAP_SLICE = "gap: bytes spread (kept out)"


def _headline_values(raw: np.ndarray, quality: np.ndarray, line_gbps: float | None
                     ) -> tuple[np.ndarray, list[tuple[int, int, str, dict[str, Any]]]]:
    """Apply ``peaks``' rule to one series' windows: (values to draw, kept-out runs).

    A window over its line rate beyond its timing uncertainty (``QUALITY_OVER_LINE``) is drawn
    at the line rate, never at its raw rate (a 320 Gb/s window on a 100 Gb/s port reads 100);
    a window above the line rate by less (at line rate, as ``peaks`` says it) is drawn at the
    line rate too. Unknown windows stay NaN (no value: a "no data" slice, never a zero). A
    gap-spread window (``QUALITY_GAP``: bytes split over a gap by assumption) keeps its value.
    Each run of consecutive over-line or gap-spread windows is returned as (first index, end
    index, slice name, args) with the number of windows, the raw maximum and the line rate.
    """
    v = raw.copy()
    qq = np.asarray(quality, dtype=np.int64)
    over = (qq & QUALITY_OVER_LINE) != 0
    gap = ((qq & QUALITY_GAP) != 0) & ~over & np.isfinite(raw)
    if line_gbps is not None and np.isfinite(line_gbps):
        v = np.where(np.isfinite(v), np.minimum(v, line_gbps), v)
    kind = np.where(over, 2, np.where(gap, 1, 0)).astype(np.int8)
    runs = []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], kind, [0]])) != 0)
    for a, e in zip(edges[:-1], edges[1:], strict=True):
        k = int(kind[a])
        if k == 0:
            continue
        seg = raw[a:e]
        args: dict[str, Any] = {"windows": int(e - a),
                                "raw_max_gbps": _finite_or_none(np.nanmax(seg))
                                if np.isfinite(seg).any() else None,
                                "line_gbps": _finite_or_none(line_gbps)}
        runs.append((int(a), int(e), OVER_LINE_SLICE if k == 2 else GAP_SLICE, args))
    return v, runs


def _nan_runs(t: np.ndarray, v: np.ndarray, width_ns: int) -> list[tuple[int, int, int]]:
    """Runs of NaN windows as (t0_ns, t1_ns, n_windows)."""
    bad = np.isnan(v).astype(np.int8)
    edges = np.diff(np.concatenate([[0], bad, [0]]))
    s, e = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(t[a]), int(t[b - 1]) + width_ns, int(b - a)) for a, b in zip(s, e, strict=True)]


def build_timeline(captures: list[Capture], *, width_ns: int = MS, log=None,
                   clock: str = "monotonic", capacity_gbps: float | None = None,
                   enter_frac: float = 0.25, leave_frac: float = 0.10,
                   from_s: float | None = None, to_s: float | None = None,
                   origin_s: float | None = None, offsets: dict[str, int] | None = None,
                   reference: str | None = None) -> Timeline:
    """Build the tracks of ``captures`` (a list of ``Capture``; one process each).

    ``log``: a ``RequestLog`` already aligned (``requestlogs.align``) to ``captures[0]``'s
    CLOCK_MONOTONIC, or None. ``capacity_gbps``: the link capacity burst detection is relative
    to (default: each capture's highest port rate, else 200). ``from_s``/``to_s``: only this
    range, seconds after each capture's start (windows stay on the capture-start grid; requests
    overlapping the range are kept whole). ``origin_s``: the grid's origin, seconds after each
    capture's start (default: the capture start). ``clock="reference"``: a run set on its
    reference host's CLOCK_MONOTONIC, each host's times plus ``offsets[host]`` (ns; the
    offsets ``rdmascope cluster`` refines from the traffic), said in ``Timeline.axis``.
    Raises ``ValueError`` for an
    unknown clock, for ``clock="monotonic"`` with captures of several hosts (their monotonic
    clocks are unrelated: use "realtime"), for a capture without clock pairs under "realtime",
    and as ``rebin``/``burst_analysis``; ``NoIntervalsError`` (a ``ValueError``) for a capture
    with no RDMA byte intervals (fewer than two valid readings per counter).
    """
    from .load import port_rates_gbps

    if clock not in CLOCK_IDS:
        raise ValueError(f"clock must be 'monotonic' or 'realtime', got {clock!r}")
    hosts = sorted({capture_host(c) for c in captures})
    if clock == "reference" and (offsets is None or any(h not in offsets for h in hosts)):
        raise ValueError("clock='reference' needs every host's offset to the reference")
    if clock == "monotonic" and len(hosts) > 1:
        raise ValueError(f"captures of several hosts ({', '.join(hosts)}): each host's "
                         "CLOCK_MONOTONIC counts from its own boot, so they share no time axis; "
                         "use --clock realtime (converted through each capture's clock pairs)")
    procs: list[Process] = []
    notes: list[str] = []

    for i, cap in enumerate(captures):
        def conv(t, cap=cap):
            t = np.asarray(t, dtype=np.int64)
            if clock == "reference":
                return t + int(offsets[capture_host(cap)])
            return monotonic_to_realtime(cap, t) if clock == "realtime" else t

        proc = Process(name=f"{capture_host(cap)} {os.path.basename(os.path.normpath(str(cap.path)))}",
                       pid=i + 1)
        iv = byte_intervals(cap)
        if len(iv) == 0:  # a trace of nothing would pass for a quiet link: refuse it
            raise NoIntervalsError(str(cap.path))
        groups = twin_links(cap)
        lo = None if from_s is None else cap.t_start_ns + int(round(from_s * 1e9))
        hi = None if to_s is None else cap.t_start_ns + int(round(to_s * 1e9))
        if lo is not None or hi is not None:
            lo = int(iv["t0_ns"].min()) if lo is None else max(lo, int(iv["t0_ns"].min()))
            hi = int(iv["t1_ns"].max()) if hi is None else min(hi, int(iv["t1_ns"].max()))
            if hi <= lo:
                notes.append(f"{cap.path}: no readings in the range; no traffic tracks")
                procs.append(proc)
                continue
        origin = cap.t_start_ns + (0 if origin_s is None else int(round(origin_s * 1e9)))
        # a partly covered window (the capture's edges) at the rate of its covered part
        b, q, cov = rebin_view(iv, width_ns, origin_ns=origin, start_ns=lo, end_ns=hi,
                               groups=groups, coverage=True)
        line = line_gbps_of(iv, "series", groups=groups)
        t = conv(b.index.to_numpy(np.int64))
        for col in b.columns:
            raw = cov.gbps[col].to_numpy(np.float64)
            v, kept_out = _headline_values(raw, q[col].to_numpy(), line.get(col))
            ts, vs = _counter_samples(t, v)
            proc.tracks.append(Track(name=f"{col} Gb/s", kind="counter", unit="Gb/s",
                                     t_ns=ts, values=vs))
            holes = _nan_runs(t, v, width_ns)
            if holes:
                proc.tracks.append(Track(name=f"{col} no data", kind="slices", slices=[
                    (a, e, "no valid data", {"windows": n}) for a, e, n in holes]))
            if kept_out:
                proc.tracks.append(Track(name=f"{col} kept out", kind="slices", slices=[
                    (int(t[a]), int(t[e - 1]) + width_ns, name, args)
                    for a, e, name, args in kept_out]))
        cap_gbps = capacity_gbps or max(port_rates_gbps(cap.meta).values(), default=None) or 200.0
        bursts = burst_analysis(iv, capacity_gbps=cap_gbps, width_ns=MS, origin_ns=origin,
                                start_ns=lo, end_ns=hi, groups=groups, enter_frac=enter_frac,
                                leave_frac=leave_frac)
        if len(bursts.table):
            for series, g in bursts.table.groupby("series", sort=False):
                s0, s1 = conv(g["start_ns"].to_numpy()), conv(g["end_ns"].to_numpy())
                proc.tracks.append(Track(name=f"bursts {series}", kind="slices", slices=[
                    (int(a), int(e), "burst",
                     # a burst of over-line windows alone has no physical peak (NaN): left
                     # out (JSON has no NaN; the raw peak and the count say why)
                     {"MB": _finite_or_none(round(float(r.bytes) / 1e6, 6)),
                      "peak_gbps": _finite_or_none(r.peak_gbps),
                      "raw_peak_gbps": _finite_or_none(getattr(r, "raw_peak_gbps", None)),
                      "over_line_windows": _int_or_none(getattr(r, "over_line_windows", None)),
                      "mean_gbps": _finite_or_none(r.mean_gbps),
                      "capacity_gbps": float(cap_gbps)})
                    for a, e, r in zip(s0, s1, g.itertuples(index=False), strict=True)]))
        if log is not None and i == 0:
            df = log.requests
            failed = int((~df["ok"]).sum())
            if failed:
                notes.append(f"{failed} failed request(s) left out of the request tracks")
            sel = df["ok"]
            if lo is not None:
                sel &= (df["t_last_ns"] >= lo) & (df["t_send_ns"] <= hi)
            for r in df[sel].itertuples(index=False):
                ts = conv([r.t_send_ns, r.t_first_ns, r.t_last_ns])
                args = {"prompt_tokens": _int_or_none(r.prompt_tokens),
                        "output_tokens": _int_or_none(r.output_tokens),
                        "ttft_s": (r.t_first_ns - r.t_send_ns) / 1e9}
                if getattr(r, "test", None) is not None:
                    args["test"] = str(r.test)
                proc.tracks.append(Track(name=f"request {r.request_id}", kind="slices", slices=[
                    (int(ts[0]), int(ts[1]), "prefill", args),
                    (int(ts[1]), int(ts[2]), "decode", {**args, "decode_s":
                                                        (r.t_last_ns - r.t_first_ns) / 1e9})]))
        procs.append(proc)
    pairs = []
    axis: dict[str, Any] = {}
    if clock in ("monotonic", "reference"):
        ref_cap = captures[0] if clock == "monotonic" else next(
            (c for c in captures if capture_host(c) == reference), captures[0])
        cp = np.asarray(ref_cap.clock_pairs, dtype=np.int64).reshape(-1, 2)
        pairs = [(int(a), int(m)) for a, m in cp]
    if clock == "reference":
        axis = {"time_axis": f"CLOCK_MONOTONIC of {reference}",
                "aligned": "every host's times plus its offset to the reference, refined from "
                           "the traffic (rdmascope cluster: burst ends matched across hosts)",
                "reference": reference,
                "offsets_ns": {h: int(offsets[h]) for h in hosts}}
    return Timeline(procs, clock, width_ns, pairs, notes, axis)


def _finite_or_none(v):
    """A float, or None for a missing or non-finite value (omitted from the slice's args)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int_or_none(v):
    try:
        return None if v is None or v != v else int(v)
    except (TypeError, ValueError):
        return None


def write_perfetto(tl: Timeline, path: str | os.PathLike) -> int:
    """Write ``tl`` as a Perfetto protobuf trace; return the number of packets.

    ``ProtoWriter`` over the whole timeline (the one protobuf writer; the streamed export
    writes through it block by block). Every packet is stamped on ``tl.clock`` (builtin clock
    id 3 MONOTONIC or 1 REALTIME); the first packet is a ClockSnapshot naming it the trace's
    primary clock, with the capture's (REALTIME, MONOTONIC) pairs for a monotonic trace.
    Raises ``ModuleNotFoundError`` without the ``perfetto`` package.
    """
    return ProtoWriter(path, clock=tl.clock, clock_pairs=tl.clock_pairs, width_ns=tl.width_ns,
                       axis=tl.axis).write_timeline(tl)


def write_chrome_json(tl: Timeline, path: str | os.PathLike) -> int:
    """Write ``tl`` in the Chrome JSON trace event format; return the number of events.

    ``ChromeJsonWriter`` over the whole timeline (the one JSON writer). ``ts``/``dur`` are
    microseconds (float, ns kept as decimals) on ``tl.clock``; counters are ``ph: "C"`` events
    named after the track with one arg ``"Gb/s"``; slices are ``ph: "X"`` events on a thread
    per track (``tid`` 1, 2, ... named by ``thread_name`` metadata); each capture is a process
    (``process_name`` metadata). Raises ``ValueError`` for a non-finite value (nothing is
    left under ``path``).
    """
    return ChromeJsonWriter(path, clock=tl.clock, clock_pairs=tl.clock_pairs,
                            width_ns=tl.width_ns, axis=tl.axis).write_timeline(tl)


# ----------------------------------------------------------------------------------------------
# Writers: the one Chrome JSON and the one protobuf writer, track by track (the streamed export
# gives them a block's tracks at a time; write_* above a whole timeline's)
# ----------------------------------------------------------------------------------------------


class TraceWriter:
    """Writes a trace track by track (``track`` may be called several times per track: its
    events are appended). ``close`` finishes the file and returns the number of events or
    packets; ``abort`` removes what was written."""

    def __init__(self, path: str | os.PathLike, *, clock: str, clock_pairs=(), width_ns: int = MS,
                 axis: dict[str, Any] | None = None):
        self.path = Path(path)
        self.part = self.path.with_name(self.path.name + ".part")
        self.clock = clock
        self.clock_pairs = [(int(a), int(m)) for a, m in clock_pairs]
        self.width_ns = int(width_ns)
        self.axis = dict(axis or {})
        self.n = 0
        self.t_first: int | None = None  # the earliest counter sample (the time-axis slice's)

    def _first(self, t_ns: np.ndarray) -> None:
        if len(t_ns):
            t0 = int(t_ns[0])
            self.t_first = t0 if self.t_first is None else min(self.t_first, t0)

    def write_timeline(self, tl: Timeline) -> int:
        """Write a whole ``Timeline`` (built in memory) and close; aborted on an error."""
        try:
            for proc in tl.processes:
                self.process(proc.pid, proc.name)
                for tr in proc.tracks:
                    self.track(proc.pid, tr)
            return self.close()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        try:
            self._close_file()
        finally:
            self.part.unlink(missing_ok=True)


class ChromeJsonWriter(TraceWriter):
    """The Chrome JSON trace event format (``timeline.write_chrome_json``'s events and
    ``otherData``), one event at a time."""

    def __init__(self, path, **kw):
        super().__init__(path, **kw)
        self.f = open(self.part, "w")  # noqa: SIM115 (closed in close/abort)
        self.f.write('{"displayTimeUnit": "ns", "traceEvents": [')
        self.procs: set[int] = set()
        self.tids: dict[int, dict[str, int]] = {}

    def _put(self, text: str) -> None:
        self.f.write(text if self.n == 0 else ", " + text)
        self.n += 1

    def _ev(self, ev: dict) -> None:
        self._put(json.dumps(ev, allow_nan=False))

    def process(self, pid: int, name: str) -> None:
        if pid not in self.procs:
            self.procs.add(pid)
            self._ev({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                      "args": {"name": name}})

    def track(self, pid: int, tr: Track) -> None:
        if tr.kind == "counter":
            self._first(tr.t_ns)
            v = np.asarray(tr.values, dtype=np.float64)
            if not np.isfinite(v).all():
                raise ValueError(f"{tr.name}: a non-finite counter value (JSON has none)")
            head = '{"ph": "C", "name": ' + json.dumps(tr.name) + f', "pid": {pid}, "ts": '
            tail = ', "args": {' + json.dumps(tr.unit or "value") + ": "
            for ts, x in zip(tr.t_ns.tolist(), v.tolist(), strict=True):
                self._put(f"{head}{ts / 1e3!r}{tail}{x!r}}}}}")
            return
        tids = self.tids.setdefault(pid, {})
        if tr.name not in tids:
            tids[tr.name] = len(tids) + 1
            self._ev({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[tr.name],
                      "args": {"name": tr.name}})
        tid = tids[tr.name]
        for t0, t1, name, args in tr.slices:
            self._ev({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": t0 / 1e3,
                      "dur": (t1 - t0) / 1e3,
                      "args": {k: v for k, v in args.items() if v is not None}})

    def _close_file(self) -> None:
        if not self.f.closed:
            self.f.close()

    def close(self) -> int:
        clock = (self.axis.get("time_axis") if self.clock == "reference"
                 else f"CLOCK_{self.clock.upper()}")
        other = {"clock": clock, "window_ns": self.width_ns,
                 "writer": "rdmascope export perfetto", **self.axis}
        self.f.write('], "otherData": ' + json.dumps(other, allow_nan=False) + "}")
        self._close_file()
        os.replace(self.part, self.path)
        return self.n


class ProtoWriter(TraceWriter):
    """Perfetto's protobuf format through the ``perfetto`` package's
    ``StreamingTraceProtoBuilder`` (``timeline.write_perfetto``'s packets), packet by packet.
    Raises ``ModuleNotFoundError`` without the ``perfetto`` package."""

    SEQ = 0x5DA  # any constant: one writer, one sequence

    def __init__(self, path, **kw):
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

        super().__init__(path, **kw)
        self.TrackEvent = TrackEvent
        self.cid = CLOCK_IDS[self.clock]
        self.f = open(self.part, "wb")  # noqa: SIM115 (closed in close/abort)
        self.b = StreamingTraceProtoBuilder(self.f)
        self.uuid = 0
        self.procs: dict[int, int] = {}
        self.tracks: dict[tuple[int, str], int] = {}
        snaps = self.clock_pairs if self.clock == "monotonic" and self.clock_pairs else [None]
        for k, pair in enumerate(snaps):
            p = self._packet()
            if k == 0:
                p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
                p.clock_snapshot.primary_trace_clock = self.cid
            if pair is not None:
                for clock_id, ts in ((3, pair[1]), (1, pair[0])):
                    c = p.clock_snapshot.clocks.add()
                    c.clock_id, c.timestamp = clock_id, ts
            else:
                c = p.clock_snapshot.clocks.add()
                c.clock_id, c.timestamp = self.cid, 0
            self._put(p)

    def _packet(self, ts=None):
        p = self.b.create_packet()
        p.trusted_packet_sequence_id = self.SEQ
        if ts is not None:
            p.timestamp = int(ts)
            p.timestamp_clock_id = self.cid
        return p

    def _put(self, p) -> None:
        self.b.write_packet(p)
        self.n += 1

    def process(self, pid: int, name: str) -> None:
        if pid in self.procs:
            return
        self.uuid += 1
        self.procs[pid] = self.uuid
        p = self._packet()
        p.track_descriptor.uuid = self.uuid
        p.track_descriptor.process.pid = pid
        p.track_descriptor.process.process_name = name
        self._put(p)

    def track(self, pid: int, tr: Track) -> None:
        key = (pid, tr.name)
        if key not in self.tracks:
            self.uuid += 1
            self.tracks[key] = self.uuid
            p = self._packet()
            p.track_descriptor.uuid = self.uuid
            p.track_descriptor.parent_uuid = self.procs[pid]
            p.track_descriptor.name = tr.name
            if tr.kind == "counter":
                p.track_descriptor.counter.unit_name = tr.unit
            self._put(p)
        tuuid = self.tracks[key]
        TE = self.TrackEvent
        if tr.kind == "counter":
            self._first(tr.t_ns)
            for ts, v in zip(tr.t_ns.tolist(), tr.values.tolist(), strict=True):
                p = self._packet(ts)
                p.track_event.type = TE.TYPE_COUNTER
                p.track_event.track_uuid = tuuid
                p.track_event.double_counter_value = v
                self._put(p)
            return
        for t0, t1, name, args in sorted(tr.slices, key=lambda s: s[0]):
            p = self._packet(t0)
            p.track_event.type = TE.TYPE_SLICE_BEGIN
            p.track_event.track_uuid = tuuid
            p.track_event.name = name
            for k, v in args.items():
                if v is None:
                    continue
                a = p.track_event.debug_annotations.add()
                a.name = k
                if isinstance(v, bool):
                    a.bool_value = v
                elif isinstance(v, int):
                    a.int_value = v
                elif isinstance(v, float):
                    a.double_value = v
                else:
                    a.string_value = str(v)
            self._put(p)
            p = self._packet(t1)
            p.track_event.type = TE.TYPE_SLICE_END
            p.track_event.track_uuid = tuuid
            self._put(p)

    def _close_file(self) -> None:
        if not self.f.closed:
            self.f.close()

    def close(self) -> int:
        if self.axis:  # the time axis, said in the trace: a slice whose arguments name it
            t0 = self.t_first or 0
            args = {"time_axis": self.axis["time_axis"], "aligned": self.axis["aligned"],
                    **{f"offset_ns {h}": v for h, v in self.axis["offsets_ns"].items()}}
            pid = max(self.procs, default=0) + 1
            self.process(pid, "rdmascope time axis")
            self.track(pid, Track(name="time axis", kind="slices", slices=[
                (t0, t0 + 1, f"time axis: {self.axis['time_axis']}", args)]))
        self._close_file()
        os.replace(self.part, self.path)
        return self.n


def open_writer(path, fmt: str, **kw) -> TraceWriter:
    """A ``ProtoWriter`` (``fmt`` "proto") or a ``ChromeJsonWriter`` ("json")."""
    return ProtoWriter(path, **kw) if fmt == "proto" else ChromeJsonWriter(path, **kw)
