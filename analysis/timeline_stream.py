"""``export perfetto`` in bounded memory: the timeline built and written block by block.

``stream_timeline`` reads each capture a block of time at a time (``timeline.load_capture_range``:
only the block's rows of the segments holding it, plus per counter the readings bracketing its
edges), builds that block's tracks with ``timeline.build_timeline`` (the same rules, so the
same values), drops the readings, writes the tracks one by one through a ``TraceWriter`` and
drops each once written: memory is one block's readings and tracks, whatever the capture's
length (a whole hour or day never held), and a ``--from/--to`` range shorter than a block is
one block, the range's memory (1.3-1.4x ``peaks`` on a 1-minute range, docs/benchmarks.md).

Blocks are joined so the trace is the one the whole capture gives:

- each block is built over [start, planned end + ``lookahead_ns``] and cut at the first window
  edge past its planned end that no burst spans (bursts are detected with hysteresis: the next
  block starts where none is in progress, as the whole series is there); a burst longer than
  the lookahead is cut at the block's edge (said in a note);
- counter samples are kept before the cut; a block's first value equal to the last one written
  (and not after a hole) is not written again (a counter holds its value);
- a window-run slice (``no valid data``, ``over line rate (kept out)``, ``gap: ...``) that
  crosses the cut is joined to its continuation in the next block (one slice, its windows
  counted over both, the highest raw maximum);
- a request's slices (kept whole by every block it overlaps) are written once.

``TraceWriter`` (``ChromeJsonWriter``, ``ProtoWriter``; defined in ``timeline``, whose
``write_chrome_json``/``write_perfetto`` are these writers over a whole timeline: one writer
per format) writes tracks as they come: a process's
and a track's descriptor before its first event, events as they are given. The file is written
as ``<out>.part`` and renamed at the end: never half a trace under the output's name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .load import capture_host
from .timeline import (
    ChromeJsonWriter,
    NoIntervalsError,
    Process,
    ProtoWriter,
    Timeline,
    TraceWriter,
    Track,
    build_timeline,
    load_capture_range,
    open_writer,
)

__all__ = ["ChromeJsonWriter", "ProtoWriter", "TraceWriter", "open_writer", "stream_timeline"]

MS = 1_000_000
#: A block of the streamed export (CLOCK_MONOTONIC ns) and how far past it it is built.
BLOCK_NS = 120 * 10**9
LOOKAHEAD_NS = 15 * 10**9
#: Readings loaded each side of a block (the readings bracketing its edges).
PAD_NS = 2 * 10**9


def _is_window_run(tr: Track) -> bool:
    """A slice track of runs of windows (joined across a block's edge), not bursts/requests."""
    return tr.kind == "slices" and not tr.name.startswith(("bursts ", "request "))


def _join(a: tuple, b: tuple, width_ns: int) -> tuple:
    """One window-run slice from a run cut by a block's edge and its continuation."""
    t0, t1 = a[0], max(a[1], b[1])
    args = dict(a[3])
    for k, v in b[3].items():
        if k == "windows":
            continue
        old = args.get(k)
        if isinstance(v, int | float) and isinstance(old, int | float) and "max" in k:
            args[k] = max(old, v)
        elif old is None:
            args[k] = v
    if "windows" in args:
        args["windows"] = int(round((t1 - t0) / width_ns))
    return (t0, t1, a[2], args)


class _Joiner:
    """Per process: what joins its blocks (see the module docstring)."""

    def __init__(self, width_ns: int):
        self.w = width_ns
        self.last: dict[str, float] = {}  # counter track -> last value written
        self.hole_at_edge: set[str] = set()  # counter series whose window before the edge is NaN
        self.open: dict[str, tuple] = {}  # window-run track -> slice crossing the edge
        self.requests: set[str] = set()

    def take(self, tracks: list[Track], lo: int, cut: int | None) -> Iterator[Track]:
        """The parts of a block's tracks (times already on the trace's axis) in [lo, cut)
        (``cut`` None: the last block, everything), joined to what came before, one at a time;
        each track is taken out of ``tracks`` as it is given (held by the caller alone)."""
        hi = np.iinfo(np.int64).max if cut is None else cut
        holes_now: set[str] = set()
        tracks.reverse()
        while tracks:
            tr = tracks.pop()
            if tr.kind == "counter":
                keep = (tr.t_ns >= lo) & (tr.t_ns < hi)
                t, v = tr.t_ns[keep], tr.values[keep]
                series = tr.name[: -len(" Gb/s")] if tr.name.endswith(" Gb/s") else tr.name
                if len(t) and t[0] == lo and tr.name in self.last and \
                        series not in self.hole_at_edge and v[0] == self.last[tr.name]:
                    t, v = t[1:], v[1:]
                if len(v):
                    self.last[tr.name] = float(v[-1])
                yield Track(name=tr.name, kind="counter", unit=tr.unit, t_ns=t, values=v)
                continue
            if tr.name.startswith("request "):
                if tr.name not in self.requests:
                    self.requests.add(tr.name)
                    yield tr
                continue
            sl = [s for s in tr.slices if lo <= s[0] < hi]
            if _is_window_run(tr):
                prev = self.open.pop(tr.name, None)
                if prev is not None:
                    cont = [s for s in sl if s[0] == lo and s[2] == prev[2]]
                    if cont:
                        sl.remove(cont[0])
                        sl.insert(0, _join(prev, cont[0], self.w))
                    else:
                        sl.insert(0, prev)
                if cut is not None and sl and sl[-1][1] > cut:
                    self.open[tr.name] = sl.pop()
                if cut is not None and tr.name.endswith(" no data") and any(
                        s[0] < cut <= s[1] for s in tr.slices):
                    holes_now.add(tr.name[: -len(" no data")])
            if sl:
                yield Track(name=tr.name, kind="slices", unit=tr.unit, slices=sl)
        self.hole_at_edge = holes_now

    def rest(self) -> list[Track]:
        """Slices still open after the last block (none unless a block failed to continue)."""
        out = [Track(name=k, kind="slices", slices=[s]) for k, s in self.open.items()]
        self.open = {}
        return out


def _cut(spans: list[tuple[int, int]], planned: int, limit: int, grid0: int, w: int,
         conv: Callable) -> tuple[int, bool]:
    """The first window edge at or past ``planned`` (monotonic ns on the grid ``grid0 + k w``)
    that no burst spans (``spans``: bursts on the trace's axis, ``conv``: monotonic -> axis);
    (cut, False) when it would pass ``limit`` (then ``planned``'s edge: a burst longer than
    the lookahead is split)."""
    def edge(t):
        return grid0 + -(-(int(t) - grid0) // w) * w

    c = edge(planned)
    while c < limit:
        x = int(conv([c])[0])
        inside = [b for a, b in spans if a < x < b]
        if not inside:
            return c, True
        c = max(edge(max(inside) - (x - c)), c + w)  # past the burst's end (local offset)
    return edge(planned), False


def stream_timeline(paths, out: str | os.PathLike, fmt: str = "json", *, width_ns: int = MS,
                    log=None, clock: str = "monotonic", capacity_gbps: float | None = None,
                    from_s: float | None = None, to_s: float | None = None,
                    origin_s: float | None = None, offsets: dict[str, int] | None = None,
                    reference: str | None = None, block_ns: int = BLOCK_NS,
                    lookahead_ns: int = LOOKAHEAD_NS,
                    extra: Callable[[Any], Any] | None = None) -> Timeline:
    """Build and write the timeline of the captures at ``paths`` to ``out`` (``fmt`` "json":
    Chrome JSON, "proto": Perfetto protobuf) block by block (module docstring). Parameters as
    ``timeline.build_timeline``; ``log`` aligned to the first capture. ``extra(info)``: called
    per capture (``stream.CaptureInfo``), returns an object whose ``block(proc)`` may change a
    block's tracks (a ``Process`` holding them, on the trace's axis, before the blocks are
    joined) and whose ``end(proc)`` appends tracks once the capture's blocks are written: the
    NCCL collectives (``export perfetto --inspector``).

    Returns the ``Timeline`` without its events: its processes list their tracks by name
    (empty), ``notes`` and ``axis``; ``Timeline.written``: the events or packets written.
    Raises as ``build_timeline`` (``NoIntervalsError`` when a capture has no RDMA byte
    intervals in any block); nothing is left under ``out`` then."""
    from .load import monotonic_to_realtime
    from .stream import open_capture
    infos = [open_capture(p_) for p_ in paths]
    hosts = sorted({capture_host(c) for c in infos})
    if clock == "monotonic" and len(hosts) > 1:
        raise ValueError(f"captures of several hosts ({', '.join(hosts)}): each host's "
                         "CLOCK_MONOTONIC counts from its own boot, so they share no time axis; "
                         "use --clock realtime (converted through each capture's clock pairs)")
    if clock == "reference" and (offsets is None or any(h not in offsets for h in hosts)):
        raise ValueError("clock='reference' needs every host's offset to the reference")
    pairs = []
    if clock in ("monotonic", "reference"):
        ref_cap = infos[0] if clock == "monotonic" else next(
            (c for c in infos if capture_host(c) == reference), infos[0])
        pairs = [(int(a), int(m)) for a, m in
                 np.asarray(ref_cap.clock_pairs, dtype=np.int64).reshape(-1, 2)]
    writer = open_writer(out, fmt, clock=clock, clock_pairs=pairs, width_ns=width_ns)
    procs: list[Process] = []
    notes: list[str] = []
    axis: dict[str, Any] = {}
    try:
        for i, (path, info) in enumerate(zip(paths, infos, strict=True)):
            t0 = int(info.t_start_ns)
            first = t0 + int(round(from_s * 1e9)) if from_s is not None else t0
            end = t0 + int(round(to_s * 1e9)) if to_s is not None else int(info.t_end_ns)
            origin = t0 + (0 if origin_s is None else int(round(origin_s * 1e9)))
            joiner = _Joiner(width_ns)
            hook = extra(info) if extra is not None else None
            proc: Process | None = None
            names: dict[str, Track] = {}
            lo, any_data, split, cap = first, False, False, None
            own_notes: list[str] = []
            while True:
                planned = lo + block_ns
                last = planned + lookahead_ns >= end
                hi = end if last else planned + lookahead_ns
                cap = load_capture_range(path, lo - PAD_NS, hi + PAD_NS)
                f_s = from_s if lo == first else (lo - t0) / 1e9
                t_s = to_s if last else (hi - t0) / 1e9
                try:
                    tl = build_timeline([cap], width_ns=width_ns, log=log if i == 0 else None,
                                        clock=clock, capacity_gbps=capacity_gbps, from_s=f_s,
                                        to_s=t_s, origin_s=origin_s, offsets=offsets,
                                        reference=reference)
                except NoIntervalsError:
                    tl = None
                del cap  # the block's readings: its tracks are built
                if tl is not None:
                    any_data = True
                    if tl.axis:
                        axis = {**tl.axis, "offsets_ns": {h: int(offsets[h]) for h in hosts}}
                    own_notes += [n for n in tl.notes if n not in own_notes]
                    p = tl.processes[0]
                    if hook is not None:
                        hook.block(p)
                    if proc is None:
                        proc = Process(name=p.name, pid=i + 1)
                        writer.process(proc.pid, proc.name)

                    def conv(t, info=info):
                        t = np.asarray(t, dtype=np.int64)
                        if clock == "reference":
                            return t + int(offsets[capture_host(info)])
                        return monotonic_to_realtime(info, t) if clock == "realtime" else t

                    cut = None
                    if not last:
                        spans = [(int(a), int(b)) for tr in p.tracks
                                 if tr.name.startswith("bursts ") for a, b, _n, _g in tr.slices]
                        cut, ok = _cut(spans, planned, hi - width_ns, origin, width_ns, conv)
                        split |= not ok
                    a_ax = int(conv([lo])[0]) if lo != first else np.iinfo(np.int64).min
                    c_ax = None if cut is None else int(conv([cut])[0])
                    tracks, p.tracks = p.tracks, []
                    del tl, p
                    for tr in joiner.take(tracks, a_ax, c_ax):  # each dropped once written
                        names.setdefault(tr.name, Track(name=tr.name, kind=tr.kind,
                                                        unit=tr.unit))
                        writer.track(proc.pid, tr)
                        del tr
                    del tracks
                else:
                    cut = None if last else origin + -(-(planned - origin) // width_ns) * \
                        width_ns
                if last:
                    break
                lo = cut
            if not any_data:
                raise NoIntervalsError(str(path))
            if proc is None:
                proc = Process(name=f"{path}", pid=i + 1)
            for tr in joiner.rest():
                writer.track(proc.pid, tr)
            if from_s is None and to_s is None:  # a block in a pause of the readings
                own_notes = [n for n in own_notes if "no readings in the range" not in n]
            notes += [n for n in own_notes if n not in notes]
            if split:
                notes.append(f"{path}: a burst longer than {lookahead_ns / 1e9:g} s was cut "
                             "where the streamed export's blocks meet")
            if hook is not None:
                ext = Process(name=proc.name, pid=proc.pid)
                hook.end(ext)
                for tr in ext.tracks:
                    names.setdefault(tr.name, Track(name=tr.name, kind=tr.kind, unit=tr.unit))
                    writer.track(proc.pid, tr)
            proc.tracks = list(names.values())
            procs.append(proc)
        writer.axis = axis
        written = writer.close()
    except BaseException:
        writer.abort()
        raise
    tl_out = Timeline(procs, clock, width_ns, pairs, notes, axis)
    tl_out.written = written  # type: ignore[attr-defined]
    return tl_out
