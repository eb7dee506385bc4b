"""The emulation check: did all RDMA traffic use one interface (NCCL_IB_HCA naming one twin)?

method.md, "Hardware": restricting NCCL to the first of the two RDMA devices of a DGX Spark port
emulates a ~100 Gb/s link; the study confirmed from the adapter counters, in every emulated run,
that all traffic used the one remaining interface. ``verify_emulation`` makes that check from a
capture: each RDMA device's share of the bytes (tx + rx) over the range and its highest 1 ms
rate, and a verdict. When netdev statistics were sampled (counters with source "netdev"), it also
compares RDMA bytes with kernel-stack bytes and flags a collective that ran over TCP instead of
RDMA (RDMA bypasses the kernel stack, so during inference the netdev counters stay almost idle).

A capture can only speak for the devices it recorded. ``record --device rocep1s0f1`` records one
twin: that twin then carries 100 % of the *recorded* bytes whatever the other twin did. When the
manifest lists every RDMA device found at record time (``discovered_devices``), a discovered twin
of a recorded device that is missing from the capture makes the verdict "cannot judge" (status
``CANNOT_JUDGE``, exit code 3 in ``rdmascope verify-emulation``), naming the device. Older
captures without that key and with one recorded device say that the verdict rests on the
recorded devices only.

Size: one module (over 800 lines) because the emulation verdict (``judge_emulation``) and the
measurement it judges (``MeasureStream``, one streamed pass) are one rule stated once, with the
device, rail and coverage checks they both use; the seam if it grows is measurement apart from
judgement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .intervals import FLAG_GAP, default_origin
from .links import cable_key
from .load import Capture
from .overline_pass import OverLineFlagger, pass_hooks
from .peaks import PeakAcc, peak_table
from .series import byte_intervals
from .stream import WindowGrid, capture_info, edge_spans, iter_windows
from .windows import integrate

__all__ = ["Verdict", "verify_emulation", "judge_emulation", "MeasureStream", "measure_stream",
           "require_rdma_counters", "missing_twins", "check_shares", "counter_problems",
           "unknown_time", "gap_across_edges_ns", "PASS", "FAIL", "CANNOT_JUDGE"]

#: ``Verdict.status`` values (``rdmascope verify-emulation`` exits 0, 1, 2 respectively).
PASS, FAIL, CANNOT_JUDGE = "pass", "fail", "cannot judge"

MS = 1_000_000


@dataclass
class Verdict:
    """Result of ``verify_emulation``.

    ``ok``: the expectation holds. ``status``: ``PASS`` ("pass", ok), ``FAIL`` ("fail") or
    ``CANNOT_JUDGE`` ("cannot judge": too little RDMA traffic, or a twin of a recorded device
    was found at record time but not recorded: ``missing_devices``; or a recorded device's bytes
    were unknown for more than a small share of the range: ``unknown_devices``). ``expect``: "single" or
    "both". ``message``: one sentence with the numbers. ``devices``: DataFrame indexed by RDMA
    device: tx_bytes, rx_bytes, bytes (bytes; NaN, never the readable part, for a direction with
    any unknown 1 ms window), known_bytes (the readable bytes, tx + rx: a lower bound), share
    (of all readable RDMA bytes: what the verdict judges, with the coverage rule below),
    peak_1ms_gbps (highest 1 ms rate consistent with physics, tx or
    rx: ``peaks.peak_table``'s headline, the line rate for a window above it by less than its
    timing uncertainty), raw_max_1ms_gbps (the highest 1 ms window of all, over line rate
    included: ``peak_table``'s raw_max_gbps), nan_windows (1 ms windows with unknown bytes inside
    the device's readings: reset/saturated/unavailable/implausible), over_line_windows (1 ms
    windows over line rate beyond their timing uncertainty, tx and rx: kept out of the peak),
    unknown_share (the largest share of the range, tx or rx, whose bytes are
    unknown). ``kernel``: the same bytes from netdev statistics per RDMA device
    (kernel_bytes and rdma_bytes: NaN where any of the device's windows is unknown;
    kernel_known_bytes and rdma_known_bytes: the readable parts; kernel_unknown_windows: the
    netdev 1 s windows with unknown bytes) or None when not sampled; the TCP check weighs the
    readable parts, and the message says when kernel bytes are unknown. ``tcp_suspected``: kernel-stack bytes reached the TCP threshold.
    ``main_device``: the device with the largest share. ``total_bytes``: all RDMA bytes, NaN
    when any device's are unknown; ``known_bytes``: the readable RDMA bytes the shares are of.
    """

    ok: bool
    expect: str
    message: str
    devices: pd.DataFrame
    total_bytes: float
    main_device: str | None
    tcp_suspected: bool = False
    kernel: pd.DataFrame | None = None
    start_ns: int = 0
    end_ns: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    status: str = ""
    missing_devices: list[str] = field(default_factory=list)
    unknown_devices: list[str] = field(default_factory=list)
    known_bytes: float = float("nan")

    def __post_init__(self) -> None:
        if not self.status:
            self.status = PASS if self.ok else FAIL

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict of the verdict (devices as a list of records)."""
        return {
            "ok": self.ok, "status": self.status, "expect": self.expect,
            "message": self.message, "missing_devices": list(self.missing_devices),
            "unknown_devices": list(self.unknown_devices),
            "total_bytes": self.total_bytes, "known_bytes": self.known_bytes,
            "main_device": self.main_device,
            "tcp_suspected": self.tcp_suspected, "start_ns": self.start_ns,
            "end_ns": self.end_ns, "params": self.params,
            "devices": self.devices.reset_index().to_dict(orient="records"),
            "kernel": None if self.kernel is None
            else self.kernel.reset_index().to_dict(orient="records"),
        }


def check_shares(single_share: float, both_min_share: float) -> None:
    """Raise ``ValueError`` unless 0.5 < ``single_share`` <= 1 and 0 < ``both_min_share`` <= 0.5.

    A "single interface" share of 0.5 or less would pass an even split over two twins; a
    "both" minimum of 0 would pass with one twin idle, and above 0.5 two devices cannot both
    reach it. NaN fails both checks.
    """
    if not 0.5 < float(single_share) <= 1.0:
        raise ValueError(f"single_share must be > 0.5 and <= 1 (the share one device must "
                         f"carry), got {single_share!r}")
    if not 0.0 < float(both_min_share) <= 0.5:
        raise ValueError(f"both_min_share must be > 0 and <= 0.5 (the share each of two "
                         f"devices must carry), got {both_min_share!r}")


def _bdf(pci: str) -> str:
    """PCI address without its domain: "0002:01:00.1" -> "01:00.1" (sysfs.md, twin devices)."""
    return pci.split(":", 1)[1] if pci.count(":") == 2 else pci


def missing_twins(capture: Capture) -> tuple[list[dict[str, Any]], list[str]] | None:
    """Return the discovered RDMA devices that the capture did not record, or None.

    Reads the manifest key ``discovered_devices`` (every RDMA device found at record time, as
    {name, pci, netdevs}); None when the capture has no such key (older captures). Returns
    (twins, others): ``twins`` are the unrecorded devices that may share a port with a recorded
    one, as dicts {name, pci, twin_of}: the same cable (``links.cable_key``: the same
    ``sys_image_guid`` and bus:device.function in another PCI domain, DGX Spark 0000:01:00.1
    and 0002:01:00.1; captures without sys_image_guid: the address without its domain);
    a device whose kinship cannot be told (no PCI address or guid on either side) counts as a
    twin (``twin_of`` None), since its traffic could belong to the link. ``others``: names of
    unrecorded devices that are clearly on another port. Raises ``ValueError`` naming the
    manifest key when it is not a list of objects with a ``name``.
    """
    disc = capture.meta.get("discovered_devices")
    if disc is None:
        return None
    if not isinstance(disc, list) or not all(isinstance(d, dict) and d.get("name")
                                             for d in disc):
        raise ValueError(f"{capture.path}: manifest key 'discovered_devices' must be a list of "
                         "objects {name, pci, netdevs}, got " + repr(disc)[:200])
    c = capture.counters
    recorded = list(dict.fromkeys(c.loc[c["data"] & (c["source"] == "infiniband"), "device"]))
    info = {d.get("name"): d for d in (capture.meta.get("devices") or [])
            if isinstance(d, dict)}
    for d in disc:  # the discovery record also knows the recorded devices' addresses
        info.setdefault(d["name"], d)
    # a discovered device is a twin of a recorded one when its port 1 sits on the same cable
    # (links.cable_key: one adapter by sys_image_guid and the same function on its PCIe links;
    # captures without sys_image_guid: the PCI address without its domain)
    def key(d):
        return cable_key({"name": d.get("name"), **d}, 1)

    by_cable = {key(info.get(r, {"name": r})): r for r in recorded}
    twins, others = [], []
    for d in disc:
        name = str(d["name"])
        if name in recorded:
            continue
        pci = d.get("pci") if isinstance(d.get("pci"), str) else None
        k = key(d)
        known = k[0] != "all" and bool(by_cable)
        twin_of = by_cable.get(k) if known else None
        if twin_of is not None or not known:
            twins.append({"name": name, "pci": pci, "twin_of": twin_of})
        else:
            others.append(name)
    return twins, others


def _check_expect(expect: str, rails: int | None, rail_balance: float) -> None:
    if expect not in ("single", "both", "rails"):
        raise ValueError(f"expect must be 'single', 'both' or 'rails', got {expect!r}")
    if expect == "rails":
        if not isinstance(rails, int) or rails < 1:
            raise ValueError(f"expect='rails' needs rails >= 1, got {rails!r}")
        if not 0.0 <= rail_balance < 1.0:
            raise ValueError(f"rail_balance must be >= 0 and < 1, got {rail_balance!r}")


def rail_groups(capture, devices: list[str]) -> dict[str, list[str]]:
    """The rails among recorded ``devices``: {rail name: its devices}. A rail is one cable
    (``links.cable_key`` of port 1: twins of one adapter form one rail, separate adapters are
    separate rails); its name joins its devices' names with "+"."""
    info = {d.get("name"): d for d in capture.meta.get("devices") or [] if isinstance(d, dict)}
    by: dict[tuple, list[str]] = {}
    for d in devices:
        by.setdefault(cable_key(info.get(d, {"name": d}), 1), []).append(d)
    return {"+".join(ds): ds for ds in by.values()}


def appeared_devices(capture, before_ns: int | None = None) -> list[dict[str, Any]]:
    """The RDMA devices the recorder saw appear after the start (manifest ``device_changes``,
    kind "appeared"), before ``before_ns`` when given: {name, pci, sys_image_guid, t_ns}.
    Empty for captures without the key."""
    out = []
    for ch in capture.meta.get("device_changes") or []:
        if isinstance(ch, dict) and ch.get("kind") == "appeared" and ch.get("name") and \
                isinstance(ch.get("t_ns"), int) and (before_ns is None or ch["t_ns"] < before_ns):
            out.append(ch)
    return out


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def series_begins(capture, ser: pd.DataFrame) -> dict[str, int]:
    """{series: the time its device appeared} for the counters in ``ser`` (rows of
    ``capture.counters``, index counter_id) of a device that was absent at the start and
    appeared while recording. Before that time the device was absent (no traffic possible), so
    the span is neither bytes nor unknown for it; from then until its first reading it was
    present but unread: unknown (``not_covered_ns``'s ``present_from``).

    The time it appeared is the manifest's ``device_changes`` entry (kind "appeared": the
    rescan that found its counter files; a ``seen_ns`` before it, when the recorder first saw
    the device still probing, is absent time too: the kernel makes an RDMA device usable by
    verbs clients only after its port attributes exist (``ib_register_device`` in
    drivers/infiniband/core/device.c: ``device_add``, then ``ib_setup_port_attrs``, then
    ``enable_device_and_get``, which adds the clients, uverbs among them)), the
    latest one at or before the series' first reading (descriptor key ``appeared_ns``) when the
    recorder added it; a capture whose entries say nothing of a device before it appeared
    (``simulate capture``) takes its first entry. Without an entry (older captures) it is the
    descriptor's ``appeared_ns`` (the first reading). Empty when neither is there."""
    meta = getattr(capture, "meta", None)
    meta = meta if isinstance(meta, dict) else {}
    descs = meta.get("counters") or []
    seen: dict[str, list[tuple[int, str]]] = {}  # device -> [(t, kind)] in time order
    for ch in meta.get("device_changes") or []:
        if not isinstance(ch, dict) or not isinstance(ch.get("name"), str):
            continue
        t = _int(ch.get("t_ns"))
        if t is None:
            continue
        seen.setdefault(ch["name"], []).append((t, str(ch.get("kind"))))
    out: dict[str, int] = {}
    for cid, dev, s in zip(ser.index, ser["device"], ser["series"], strict=True):
        d = descs[int(cid)] if 0 <= int(cid) < len(descs) else None
        first = _int(d.get("appeared_ns")) if isinstance(d, dict) else None
        ev = sorted(seen.get(str(dev), []))
        b = None
        if ev and ev[0][1] == "appeared":  # absent until its first change, which is appearing
            b = ev[0][0] if first is None else max(
                (t for t, k in ev if k == "appeared" and t <= first), default=first)
        elif first is not None:
            b = first
        if b is not None:
            out[str(s)] = max(out.get(str(s), b), b)
    return out


def _ib_link_layer_devices(meta: dict) -> set[str]:
    """The recorded devices whose ports are all native InfiniBand (their netdevs are IPoIB)."""
    out = set()
    for d in meta.get("devices") or []:
        if not isinstance(d, dict):
            continue
        lls = {str(p.get("link_layer") or "") for p in d.get("ports") or []
               if isinstance(p, dict)}
        if lls == {"InfiniBand"}:
            out.add(str(d.get("name")))
    return out


def counter_problems(capture: Capture, counter_ids) -> list[str]:
    """Return the distinct reasons the sampler gave for ``counter_ids`` being unreadable.

    From the manifest's ``events`` of kind "unavailable" (each says the file and the error, e.g.
    "read_error: .../port_xmit_data: read failed (Invalid argument)"), in time order, each once.
    """
    ids = {int(c) for c in counter_ids}
    out: list[str] = []
    for e in capture.meta.get("events") or []:
        if not isinstance(e, dict) or e.get("kind") != "unavailable":
            continue
        cid = e.get("counter_id")
        if isinstance(cid, int) and cid in ids:
            msg = str(e.get("message", ""))
            if msg not in out:
                out.append(msg)
    return out


def unknown_time(intervals: pd.DataFrame, lo: int, hi: int,
                 present_from: dict[str, int] | None = None) -> pd.DataFrame:
    """Return, per series, the ns of [lo, hi) whose bytes are unknown, by flag.

    Shape: one row per series of ``intervals`` (index ``series``), one int64 column per NaN flag
    (reset, saturated, unavailable, implausible), ``gap``, ``not_covered`` plus ``total``. An
    interval counts for the part of it inside [lo, hi). ``gap``: the part inside the range of a
    gap interval (missed sweeps, a hung read: no reading for a while) that one of the range's
    edges falls inside (``gap_across_edges_ns``): how much of its exact bytes fell on this side
    of the edge is known only by assumption (spread uniformly); a gap wholly inside the range
    keeps its exact bytes and is not counted. ``present_from``: {series: when its device
    appeared} (``series_begins``): before then it was absent, not unread (``not_covered_ns``).
    Unknown is never zero: these spans are what a verdict cannot see.
    """
    flags = ["reset", "saturated", "unavailable", "implausible"]
    cols = flags + ["gap", "not_covered"]
    rows = {}
    if len(intervals):
        t0r = intervals["t0_ns"].to_numpy(np.int64)
        t1r = intervals["t1_ns"].to_numpy(np.int64)
        t0 = np.clip(t0r, lo, hi)
        t1 = np.clip(t1r, lo, hi)
        dur = t1 - t0
        fl = intervals["flag"].astype(str).to_numpy()
        ser = intervals["series"].astype(str).to_numpy()
        for s in dict.fromkeys(ser):
            m = ser == s
            rows[s] = {f: int(dur[m & (fl == f)].sum()) for f in flags}
            g = m & (fl == "gap")
            rows[s]["gap"] = gap_across_edges_ns(t0r[g], t1r[g], lo, hi)
            rows[s]["not_covered"] = not_covered_ns(int(t0r[m].min()), int(t1r[m].max()),
                                                    lo, hi, (present_from or {}).get(s))
    df = pd.DataFrame.from_dict(rows, orient="index", columns=cols, dtype="int64")
    df.index.name = "series"
    df["total"] = df[cols].sum(axis=1)
    return df


def gap_across_edges_ns(t0: np.ndarray, t1: np.ndarray, lo: int, hi: int) -> int:
    """The ns of [lo, hi) inside the gap intervals [t0, t1) that ``lo`` or ``hi`` falls strictly
    inside (both, for a range wholly inside one gap). No reading was taken there, so the share of
    the gap's exact bytes on the range's side of the edge is an assumption (spread uniformly):
    unknown time, as the window GAP flag marks a window that a gap crosses an edge of. Gaps
    wholly inside the range count nothing (their bytes are exact)."""
    if hi <= lo or not len(t0):
        return 0
    t0 = np.asarray(t0, np.int64)
    t1 = np.asarray(t1, np.int64)
    across = ((t0 < lo) & (t1 > lo)) | ((t0 < hi) & (t1 > hi))
    if not across.any():
        return 0
    return int((np.minimum(t1[across], hi) - np.maximum(t0[across], lo)).sum())


#: A series' readings may start and end this far (ns) inside the range without that edge
#: counting as not covered (sweep 0 reads its counters one after another, the last sweep is at
#: most one interval before the stop record).
EDGE_SLACK_NS = 2 * MS


def not_covered_ns(first_ns: int, last_ns: int, lo: int, hi: int,
                   present_from: int | None = None) -> int:
    """The ns of [lo, hi) outside a series' readings [first_ns, last_ns] (before its first
    reading, after its last one): no reading says what it carried then, so its bytes there are
    unknown (a read that hung to the end of the recording, a device that appeared and was not
    read at once), never zero. ``present_from``: when the series' device appeared (absent
    before: no traffic possible, so that time is not counted). Edges shorter than
    ``EDGE_SLACK_NS`` are the sweep's own spread, not counted."""
    if hi <= lo:
        return 0
    from_ = lo if present_from is None else min(max(int(present_from), lo), hi)
    before = max(min(max(first_ns, lo), hi) - from_, 0)
    after = hi - max(min(last_ns, hi), lo)
    return sum(x for x in (before, after) if x > EDGE_SLACK_NS)


def _bytes_by(capture: Capture, source: str, by: str, start_ns, end_ns, width_ns,
              origin_ns=None):
    """Bytes per ``width_ns`` window of the one grid (``origin_ns``, default the capture start)
    over [start, end), the first and last windows clipped to the range; also the intervals."""
    iv = byte_intervals(capture, source=source)
    if len(iv) == 0:
        return None, start_ns, end_ns, None, iv
    lo = int(iv["t0_ns"].min()) if start_ns is None else int(start_ns)
    hi = int(iv["t1_ns"].max()) if end_ns is None else int(end_ns)
    if hi <= lo:
        raise ValueError(f"empty time range: {lo} ns to {hi} ns")
    origin = default_origin(iv) if origin_ns is None else int(origin_ns)
    k0 = (lo - origin) // width_ns
    grid = origin + np.arange(k0, -((origin - hi) // width_ns), dtype=np.int64) * width_ns
    a = np.maximum(grid, lo)
    e = np.minimum(grid + width_ns, hi)
    out = integrate(iv, a, e, by=by, allow_partial=True)
    out.index = pd.Index(a, name="window_start_ns")
    # windows outside a series' own readings (capture edges) are NaN but not "unknown bytes"
    first = iv.groupby(by, observed=True)["t0_ns"].min()
    last = iv.groupby(by, observed=True)["t1_ns"].max()
    outside = pd.DataFrame({c: (e <= first[c]) | (a >= last[c]) for c in out.columns},
                           index=out.index)
    return out, lo, hi, outside, iv


def _measure(capture: Capture, start_ns, end_ns, origin_ns) -> dict[str, Any]:
    """What the verdict needs from a loaded capture: the range, per RDMA series (bytes, NaN
    windows) and 1 ms peak, unknown time (a function of the range) and kernel bytes per device
    (a function of the range)."""
    b, lo, hi, outside, iv = _bytes_by(capture, "infiniband", "series", start_ns, end_ns, MS,
                                       origin_ns)
    # each device's 1 ms peak: the highest window of the one grid (``origin_ns``, default the
    # capture start) lying wholly inside the range, exactly as ``peaks.peak_table`` finds it
    peak_of, series, over_of, raw_of = {}, {}, {}, {}
    if b is not None:
        pk = peak_table(iv, start_ns=lo, end_ns=hi, windows_ns=(MS,), origin_ns=origin_ns,
                        percentiles=())
        pk = pk[pk["window_ns"] == MS]
        peak_of = dict(zip(pk["series"], pk["peak_gbps"], strict=True))
        raw_of = dict(zip(pk["series"], pk["raw_max_gbps"], strict=True))
        over_of.update(zip(pk["series"], pk["n_over_line_windows"], strict=True))
        for s in b.columns:
            v = b[s].to_numpy()
            series[s] = (float(np.nansum(v)) if np.isfinite(v).any() else np.nan,
                         int((np.isnan(v) & ~outside[s].to_numpy()).sum()))

    def kernel(lo_, hi_):
        kb, _, _, _, _ = _bytes_by(capture, "netdev", "device", lo_, hi_, 1000 * MS, origin_ns)
        return {} if kb is None else add_kernel_bytes({}, kb)

    return {"lo": lo, "hi": hi, "peak_of": peak_of, "raw_of": raw_of, "series": series,
            "over_of": over_of,
            "unknown": lambda lo_, hi_, begins=None: unknown_time(iv, lo_, hi_, begins),
            "kernel": kernel}


_UNKNOWN_FLAGS = {1: "reset", 2: "saturated", 4: "unavailable", 5: "implausible"}


class MeasureStream:
    """What the verdict needs (as ``_measure``), accumulated block by block from one streamed
    pass, so that a caller's own pass (``cluster.node_pass``) can feed it instead of a pass of
    its own.

    ``info``: a ``stream.CaptureInfo``. Feed ``on_parts`` with each file's intervals (counters
    of other sources are ignored) and ``add`` with the 1 ms windows (by series, RDMA counters)
    of ``grid()``; ``result(spans)`` returns the measurement (``spans``: the ``state["spans"]``
    of ``stream.iter_windows``). The same 1 ms grid clipped to the range, peaks of the windows
    lying wholly inside it, NaN windows outside a series' own readings not counted (by
    arithmetic on the grid), unknown time summed from the intervals as they pass; kernel bytes
    (netdev) in a second pass over the netdev counters unless ``result`` is given them.
    """

    def __init__(self, info, start_ns=None, end_ns=None, origin_ns=None):
        self.info = info
        self.origin = int(info.t_start_ns) if origin_ns is None else int(origin_ns)
        if start_ns is not None and end_ns is not None and int(end_ns) <= int(start_ns):
            raise ValueError(f"empty time range: {int(start_ns)} ns to {int(end_ns)} ns")
        self.start_ns, self.end_ns = start_ns, end_ns
        self._flag = None
        self._flag_cls = OverLineFlagger
        cdf = info.counters
        self.ib = {int(c): str(cdf.at[c, "series"]) for c in cdf.index[
            cdf["data"] & (cdf["source"] == "infiniband")]}
        self.unk: dict[str, dict[str, int]] = {}
        self.acc: dict[str, list] = {}  # series -> [nansum, any finite, NaN windows, PeakAcc]
        self.clip = (-(1 << 62) if start_ns is None else int(start_ns),
                     (1 << 62) if end_ns is None else int(end_ns))

    @property
    def flagger(self):
        """The ``OverLineFlagger`` of the 1 ms windows (made when first asked for): register it
        on the pass (``overline_pass.pass_hooks``) so it judges windows without reading again."""
        if self._flag is None:
            self._flag = self._flag_cls(self.info, source="infiniband")
        return self._flag

    def grid(self):
        """The ``stream.WindowGrid`` the caller's pass must sum for ``add``: 1 ms windows on
        this measurement's origin, clipped to its range."""
        return WindowGrid(MS, self.origin, self.start_ns, self.end_ns, clip=True)

    def on_parts(self, parts) -> None:
        """One file's intervals ({counter_id: interval arrays}): sums each RDMA series' unknown
        time (reset, saturated, unavailable, implausible, and gaps across an edge of the range:
        ``gap_across_edges_ns``) inside the range, in ns."""
        for cid, iv in parts.items():
            if not len(iv["t0_ns"]) or cid not in self.ib:
                continue
            row = self.unk.setdefault(self.ib[cid], dict.fromkeys(
                [*_UNKNOWN_FLAGS.values(), "gap"], 0))
            dur = np.clip(iv["t1_ns"], *self.clip) - np.clip(iv["t0_ns"], *self.clip)
            for code, name in _UNKNOWN_FLAGS.items():
                row[name] += int(dur[iv["flag"] == code].sum())
            # a gap interval across an edge of the range (without a range: none can be, the
            # range is then the readings' own span)
            g = iv["flag"] == FLAG_GAP
            if g.any():
                row["gap"] += gap_across_edges_ns(iv["t0_ns"][g], iv["t1_ns"][g], *self.clip)

    def add(self, b: pd.DataFrame, q: pd.DataFrame, *, flagged: bool = False) -> None:
        """One block of 1 ms windows of ``grid()`` (columns: RDMA series). ``flagged``: the
        over-line bit is already set on the whole windows (``series.OverLineFlagger``)."""
        a = b.index.to_numpy()
        # consecutive 1 ms windows of one grid: only the first and the last can be cut (a
        # clipped grid), the others are all on this origin's grid or all off it
        on_grid = np.empty(len(a), bool)
        if len(a):
            on_grid[1:-1] = len(a) > 2 and (int(a[1]) - self.origin) % MS == 0
            on_grid[[0, -1]] = (a[[0, -1]] - self.origin) % MS == 0
        if self.end_ns is not None:
            on_grid = on_grid & (a + MS <= int(self.end_ns))
        qa = q.to_numpy()
        if not flagged:
            # whole 1 ms windows only: over line rate judged as everywhere (flag_over_line)
            whole = on_grid.all()
            got = self.flagger(b if whole else b.iloc[on_grid], q if whole else q.iloc[on_grid],
                             MS).to_numpy()
            if whole:
                qa = got
            else:
                qa = qa.copy()
                qa[on_grid] = got
        ba = b.to_numpy(np.float64)
        nan = np.isnan(ba)
        finite = np.isfinite(ba).any(axis=0)
        n_nan = nan.sum(axis=0)
        a_on = a if on_grid.all() else a[on_grid]
        for j, s in enumerate(b.columns):
            v = ba[:, j]
            x = self.acc.setdefault(s, [0.0, False, 0, PeakAcc(None)])
            # np.nansum sums a copy with NaN as 0: without NaN, the same sum of the column itself
            x[0] += float(np.nansum(v) if n_nan[j] or not v.flags.c_contiguous
                          else np.add.reduce(v))
            x[1] = x[1] or bool(finite[j])
            x[2] += int(n_nan[j])
            x[3].add(a_on, (v if a_on is a else v[on_grid]) * 8.0 / MS,
                     qa[:, j] if a_on is a else qa[on_grid, j])

    def result(self, spans: dict, kernel=None) -> dict[str, Any]:
        """The measurement dict of ``_measure``. ``kernel``: a function (lo, hi) -> {device:
        (known kernel bytes, unknown windows)} (``add_kernel_bytes``) to use instead of a second
        pass over the netdev counters."""
        start_ns, end_ns, origin = self.start_ns, self.end_ns, self.origin
        info = self.info
        over_of: dict[str, int] = {}
        raw_of: dict[str, float] = {}
        if not spans:
            lo, hi = start_ns, end_ns
            series, peak_of = {}, {}
        else:
            lo = int(start_ns) if start_ns is not None else min(s[0] for s in spans.values())
            hi = int(end_ns) if end_ns is not None else max(s[1] for s in spans.values())
            if hi <= lo:
                raise ValueError(f"empty time range: {lo} ns to {hi} ns")
            k0 = (lo - origin) // MS
            k1 = -((origin - hi) // MS)
            series, peak_of = {}, {}
            for s, (tot, finite, n_nan, pk) in self.acc.items():
                over_of[s] = pk.n_over
                if s not in spans:
                    continue
                first, last = spans[s]
                before = min(max((first - origin) // MS - k0, 0), k1 - k0)
                after = min(max(k1 - -((origin - last) // MS), 0), k1 - k0)
                series[s] = (tot if finite else np.nan, n_nan - min(before + after, k1 - k0))
                # the headline of ``peaks``: a window above the line rate by less than its
                # timing uncertainty is at line rate and says the line rate (peak_table)
                bound = self.flagger.lines.get(s)
                peak_of[s] = (np.nan if pk.t_peak is None else
                              min(pk.peak, bound) if bound is not None else pk.peak)
                raw_of[s] = pk.raw if pk.t_raw is not None else np.nan
        unk = self.unk

        def unknown(lo_, hi_, begins=None):
            flags = [*_UNKNOWN_FLAGS.values(), "gap"]
            rows = {}
            for s in spans:
                if s in unk:
                    rows[s] = {**unk[s], "not_covered": not_covered_ns(
                        int(spans[s][0]), int(spans[s][1]), int(lo_), int(hi_),
                        (begins or {}).get(s))}
            cols = flags + ["not_covered"]
            df = pd.DataFrame.from_dict(rows, orient="index", columns=cols, dtype="int64")
            df.index.name = "series"
            df["total"] = df[cols].sum(axis=1)
            return df

        return {"lo": lo, "hi": hi, "peak_of": peak_of, "raw_of": raw_of, "series": series,
                "unknown": unknown, "kernel": kernel or kernel_bytes_reread(info, origin),
                "over_of": over_of}


def add_kernel_bytes(acc: dict[str, tuple[float, int]], b: pd.DataFrame
                     ) -> dict[str, tuple[float, int]]:
    """Add a block of netdev windows ``b`` (bytes, one column per device, NaN where unknown) to
    ``acc`` ({device: (known bytes, unknown windows)}) and return it. The unknown windows are
    counted, never added as 0 bytes: a device's kernel bytes are unknown when any is."""
    for d in b.columns:
        v = b[d].to_numpy(dtype=float)
        nan = np.isnan(v)
        k, u = acc.get(d, (0.0, 0))
        acc[d] = (k + float(v[~nan].sum()), u + int(nan.sum()))
    return acc


def kernel_bytes_reread(info, origin: int):
    """A function (lo, hi) -> {device: (known netdev bytes over [lo, hi), unknown windows)}
    (``add_kernel_bytes``): 1 s windows of the grid of ``origin`` clipped to the range; one
    pass over the netdev counters."""
    def kernel(lo_, hi_):
        out: dict[str, tuple[float, int]] = {}
        try:
            for _, b, _q in iter_windows(info, [WindowGrid(1000 * MS, origin, int(lo_), int(hi_),
                                                           clip=True)],
                                         by="device", source="netdev"):
                add_kernel_bytes(out, b)
        except ValueError as exc:
            if "no intervals" not in str(exc):
                raise
        return out

    return kernel


def measure_stream(capture, start_ns=None, end_ns=None, origin_ns=None, *,
                   consumers=()) -> dict[str, Any]:
    """``_measure`` of a capture on disk, segment by segment (``stream.iter_windows``, see
    ``MeasureStream``): what ``judge_emulation`` judges. ``consumers``: others fed by the same
    pass (e.g. the attribution's ranges: ``compare.attribute_with_checks``), each with
    ``grids`` (``stream.WindowGrid``s carrying their ``by``), ``flaggers`` (to register),
    ``on_parts(parts)`` (each file's intervals, netdev counters included), ``add(k, b, q)``
    (the blocks of its k-th grid) and ``finish(spans)`` (the pass is over; ``spans``: its
    ``state["spans"]``, by RDMA series)."""
    info = capture_info(capture)
    ms = MeasureStream(info, start_ns, end_ns, origin_ns)
    # the kernel bytes (netdev counters, 1 s windows clipped to the range) on a second grid of
    # the same pass: the range is taken beforehand from the first and last segments (as
    # RangeQueries does) and checked against the pass's; if it differs, a pass of their own
    cdf = info.counters
    netdev = tuple(int(x) for x in cdf.index[cdf["data"] & (cdf["source"] == "netdev")])
    k_range: tuple[int, int] | None = None
    if netdev:
        if start_ns is not None and end_ns is not None:
            k_range = (int(start_ns), int(end_ns))
        else:
            sp = edge_spans(info, "infiniband")
            if sp:
                k_range = (int(start_ns) if start_ns is not None
                           else min(v[0] for v in sp.values()),
                           int(end_ns) if end_ns is not None
                           else max(v[1] for v in sp.values()))
        if k_range is not None and k_range[1] <= k_range[0]:
            k_range = None
    grids = [ms.grid()]
    if k_range is not None:
        grids.append(WindowGrid(1000 * MS, ms.origin, *k_range, clip=True, counters=netdev,
                                by="device"))
    owner = [(c, k) for c in consumers for k in range(len(c.grids))]
    first = len(grids)
    grids += [g for c in consumers for g in c.grids]

    def on_parts(parts):
        ms.on_parts(parts)
        for c in consumers:
            c.on_parts(parts)

    k_acc: dict[str, tuple[float, int]] = {}
    state: dict = {}
    # a consumer with ``coverage`` gets each block's ``curve.WindowCoverage`` too
    coverage = any(getattr(c, "coverage", False) for c in consumers)
    try:
        for gi, b, q, *cov in iter_windows(info, grids, source="infiniband", state=state,
                                           coverage=coverage,
                                           **pass_hooks([ms.flagger, *(f for c in consumers
                                                                       for f in c.flaggers)],
                                                        on_parts=on_parts)):
            if gi >= first:
                c, k = owner[gi - first]
                if getattr(c, "coverage", False):
                    c.add(k, b, q, *cov)
                else:
                    c.add(k, b, q)
            elif gi == 1:  # kernel bytes, summed block by block as kernel_bytes_reread does
                add_kernel_bytes(k_acc, b)
            else:
                ms.add(b, q)
    except ValueError as exc:
        if "no intervals" not in str(exc):
            raise
    for c in consumers:
        c.finish(state.get("spans", {}))
    spans = state.get("spans", {})
    reread = kernel_bytes_reread(info, ms.origin)

    def kernel(lo_, hi_):
        if spans and k_range is not None and (int(lo_), int(hi_)) == k_range:
            return dict(k_acc)
        return reread(lo_, hi_)

    return ms.result(spans, kernel=kernel)


def verify_emulation(capture, *, start_ns: int | None = None, end_ns: int | None = None,
                     origin_ns: int | None = None,
                     expect: str = "single", single_share: float = 0.99,
                     both_min_share: float = 0.25, min_bytes: float = 1e6,
                     tcp_min_bytes: float = 10e6, tcp_ratio: float = 1.0,
                     max_unknown_share: float = 0.01, rails: int | None = None,
                     rail_balance: float = 0.5) -> Verdict:
    """Check which RDMA interfaces carried the traffic of a capture over [start_ns, end_ns).

    ``capture``: a loaded ``Capture``, or a capture directory / ``stream.CaptureInfo``, which is
    then read segment by segment in bounded memory with the same result.

    ``expect="single"`` (emulated link): OK when one device carries >= ``single_share`` (99 %)
    of all RDMA bytes. ``expect="both"`` (normal 200 Gb/s setting): OK when at least two devices
    each carry >= ``both_min_share`` (25 %). Never OK with fewer than ``min_bytes`` (1 MB) of
    RDMA traffic (nothing to judge) or when TCP is suspected: netdev (kernel-stack) bytes of at
    least ``tcp_min_bytes`` (10 MB) and >= ``tcp_ratio`` x the RDMA bytes. Bytes are decimal;
    bytes of windows touching a reset/saturated/unavailable/implausible interval are unknown and
    left out (counted in ``nan_windows``). Raises ``ValueError`` on an unknown ``expect`` or a
    capture without RDMA data counters, and (``check_shares``) when ``single_share`` is not in
    (0.5, 1] or ``both_min_share`` not in (0, 0.5]. Windows (1 ms for the peaks, 1 s for the
    kernel bytes) lie on the one grid of ``origin_ns`` (default: the capture start,
    ``series.default_origin``), as every command's; the range only selects windows.

    ``status`` is also ``CANNOT_JUDGE`` when the bytes of any recorded device are unknown
    (unreadable, reset, saturated or implausible intervals, no reading for part of the range, or
    the part of a gap in the readings that an edge of the range falls inside:
    ``unknown_time``) for more than ``max_unknown_share``
    (1 %) of the range, in either direction: the message names the device, the share and the
    sampler's reason (``counter_problems``), and the device is listed in ``missing_devices``.
    ``devices["unknown_share"]`` holds that share per device.

    ``status`` is ``CANNOT_JUDGE`` (never OK) with too little traffic, or when the manifest's
    ``discovered_devices`` holds a twin of a recorded device that the capture did not record
    (``missing_twins``; named in the message and ``missing_devices``), unless TCP is suspected
    (``FAIL``). Without that manifest key and with one recorded device, the message says the
    verdict rests on the recorded devices only.
    """
    _check_expect(expect, rails, rail_balance)
    check_shares(single_share, both_min_share)
    if not isinstance(capture, Capture):
        capture = capture_info(capture)  # a path: read segment by segment (bounded memory)
    require_rdma_counters(capture)
    m = (_measure(capture, start_ns, end_ns, origin_ns) if isinstance(capture, Capture)
         else measure_stream(capture, start_ns, end_ns, origin_ns))
    return judge_emulation(capture, m, expect=expect, single_share=single_share,
                           both_min_share=both_min_share, min_bytes=min_bytes,
                           tcp_min_bytes=tcp_min_bytes, tcp_ratio=tcp_ratio,
                           max_unknown_share=max_unknown_share, rails=rails,
                           rail_balance=rail_balance)


def require_rdma_counters(capture) -> None:
    """Raise ValueError (as ``verify_emulation``) when ``capture`` (a loaded ``Capture`` or
    ``stream.CaptureInfo``) has no RDMA data counters."""
    c = capture.counters
    if not (c["data"] & (c["source"] == "infiniband")).any():
        raise ValueError(f"{capture.path}: no RDMA data counters (port_xmit_data/port_rcv_data)")


def judge_emulation(capture, m: dict[str, Any], *, expect: str = "single",
                    single_share: float = 0.99, both_min_share: float = 0.25,
                    min_bytes: float = 1e6, tcp_min_bytes: float = 10e6, tcp_ratio: float = 1.0,
                    max_unknown_share: float = 0.01, rails: int | None = None,
                    rail_balance: float = 0.5) -> Verdict:
    """The verdict of ``verify_emulation`` from a measurement already made (``_measure`` or
    ``MeasureStream.result``), so that both expectations can be judged from one pass.
    ``capture``: the loaded ``Capture`` or ``stream.CaptureInfo`` measured. Parameters and
    errors as ``verify_emulation``."""
    _check_expect(expect, rails, rail_balance)
    check_shares(single_share, both_min_share)
    c = capture.counters
    lo, hi = m["lo"], m["hi"]
    peak_of = m["peak_of"]
    lo = capture.t_start_ns if lo is None else lo
    hi = capture.t_end_ns if hi is None else hi
    ser = c[c["data"] & (c["source"] == "infiniband")]
    # a device that appeared while recording was absent before (not unknown), present but
    # unread from then to its first reading (unknown)
    begins = series_begins(capture, ser)
    unk = m["unknown"](int(lo), int(hi), begins) if begins else m["unknown"](int(lo), int(hi))
    dev_of = dict(zip(ser["series"], ser["device"], strict=True))
    dir_of = dict(zip(ser["series"], ser["direction"], strict=True))
    devices = list(dict.fromkeys(ser["device"]))
    rows = {}
    for dev in devices:
        row = {"tx_bytes": 0.0, "rx_bytes": 0.0, "peak_1ms_gbps": np.nan,
               "raw_max_1ms_gbps": np.nan, "nan_windows": 0, "over_line_windows": 0,
               "unknown_share": 0.0, "tx_unknown": False, "rx_unknown": False}
        for s in ser.loc[ser["device"] == dev, "series"]:
            span = hi - max(lo, begins.get(s, lo))  # the part of the range it was present
            if s in unk.index and span > 0:
                row["unknown_share"] = max(row["unknown_share"],
                                           unk.at[s, "total"] / float(span))
            elif span > 0:  # no interval at all: fewer than two readings, nothing known
                row["unknown_share"] = 1.0
        for s, (byt, nan_w) in m["series"].items():
            if dev_of.get(s) != dev:
                continue
            # a direction with no known window has unknown bytes (NaN), never 0
            row[f"{dir_of[s]}_bytes"] += byt
            row[f"{dir_of[s]}_unknown"] |= bool(nan_w) or not np.isfinite(byt)
            row["over_line_windows"] += int(m["over_of"].get(s, 0))
            pk = peak_of.get(s, np.nan)
            if np.isfinite(pk):
                row["peak_1ms_gbps"] = np.nanmax([row["peak_1ms_gbps"], pk])
            raw = m.get("raw_of", {}).get(s, np.nan)
            if np.isfinite(raw):
                row["raw_max_1ms_gbps"] = np.nanmax([row["raw_max_1ms_gbps"], raw])
            row["nan_windows"] += nan_w
        rows[dev] = row
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "device"
    # the shares are judged on the readable bytes (the coverage rule below says when that is
    # too little); a device's totals are unknown (NaN), never its readable part, when any
    # 1 ms window of it is unknown: the readable part is known_bytes (a lower bound)
    df["known_bytes"] = df["tx_bytes"] + df["rx_bytes"]
    total = float(df["known_bytes"].sum())
    df["share"] = df["known_bytes"] / total if total > 0 else np.nan
    main = str(df["known_bytes"].idxmax()) if total > 0 else None
    partial = df["tx_unknown"] | df["rx_unknown"]
    for d in ("tx", "rx"):
        df.loc[df[f"{d}_unknown"], f"{d}_bytes"] = np.nan
    df["bytes"] = df["tx_bytes"] + df["rx_bytes"]
    df = df[["tx_bytes", "rx_bytes", "bytes", "known_bytes", "share", "peak_1ms_gbps",
             "raw_max_1ms_gbps", "nan_windows", "over_line_windows", "unknown_share"]]

    # kernel-stack bytes from netdev statistics, per RDMA device
    kernel = None
    tcp = False
    k_blind: list[str] = []  # devices whose kernel bytes are (partly) unknown
    if (c["data"] & (c["source"] == "netdev")).any():
        kb = m["kernel"](lo, hi)
        # a device without a netdev window in the range has unknown kernel bytes, never 0
        kern = {dev: kb.get(dev, (0.0, -1))
                for dev in dict.fromkeys(c[c["source"] == "netdev"]["device"])}
        # kernel_bytes and rdma_bytes unknown (NaN) where any of their windows is (the readable
        # parts beside them); the TCP check below weighs the readable kernel bytes (a lower
        # bound) against the readable RDMA bytes (rdma_known_bytes)
        devs = list(kern)
        kernel = pd.DataFrame({
            "kernel_bytes": [k if u == 0 else np.nan for k, u in kern.values()],
            "kernel_known_bytes": [k for k, _ in kern.values()],
            "kernel_unknown_windows": [max(u, 0) for _, u in kern.values()],
            "rdma_bytes": df["bytes"].reindex(devs).to_numpy(),
            "rdma_known_bytes": df["known_bytes"].reindex(devs).fillna(0.0).to_numpy()},
            index=pd.Index(devs, name="device"))
        kernel.loc[~kernel.index.isin(df.index), "rdma_bytes"] = 0.0
        k_blind = [d for d, (_, u) in kern.items() if u != 0]
        k_total = float(kernel["kernel_known_bytes"].sum())
        # On native InfiniBand the port counters include IPoIB (sockets over ib0), so the
        # port's bytes are always a little above its IPoIB netdev's: there the kernel bytes are
        # judged against the port's bytes *without* them (IPoIB close to the port = TCP)
        ib_devs = _ib_link_layer_devices(capture.meta)
        rdma_only = float(sum(
            max(float(kernel.at[d, "rdma_known_bytes"])
                - float(kernel.at[d, "kernel_known_bytes"]),
                0.0)
            if d in ib_devs else float(kernel.at[d, "rdma_known_bytes"]) for d in kernel.index))
        rdma_only += float(df["known_bytes"].drop(list(kernel.index), errors="ignore").sum())
        tcp = k_total >= tcp_min_bytes and k_total >= tcp_ratio * rdma_only
        nd_of = {}
        descs = capture.meta.get("counters") or []
        for cid, r in c[c["source"] == "netdev"].iterrows():
            nd_of.setdefault(r["device"], [])
            name = r.get("netdev")
            if not isinstance(name, str):
                continue
            # a netdev renamed while recording (record follows it): its name now, and then
            was = descs[int(cid)].get("netdev_was") if 0 <= int(cid) < len(descs) and \
                isinstance(descs[int(cid)], dict) else None
            if isinstance(was, list) and was:
                name += f" (was {', '.join(str(w) for w in was)})"
            if name not in nd_of[r["device"]]:
                nd_of[r["device"]].append(name)
        where = [f"{'+'.join(nd_of.get(d) or [d])} "
                 f"{kernel.at[d, 'kernel_known_bytes'] / 1e6:,.1f} MB"
                 + (" readable" if d in k_blind else "") + (" (IPoIB)" if d in ib_devs else "")
                 for d in kernel.sort_values("kernel_known_bytes", ascending=False).index
                 if kernel.at[d, "kernel_known_bytes"] >= 1e6]

    def share_text(d):
        if not np.isfinite(df.at[d, "known_bytes"]):
            return f"{d} unknown (no readable window)"
        if total <= 0:
            return f"{d} 0 MB"
        pk, raw = df.at[d, "peak_1ms_gbps"], df.at[d, "raw_max_1ms_gbps"]
        # the raw 1 ms maximum (over line rate, or above it within the timing uncertainty)
        # is said as such beside the headline peak, never as the peak (as peaks does)
        beside = f", raw max {raw:.1f} Gb/s" if np.isfinite(raw) and (
            not np.isfinite(pk) or round(raw, 1) > round(pk, 1)) else ""
        mb = (f"{df.at[d, 'bytes'] / 1e6:,.1f} MB" if np.isfinite(df.at[d, "bytes"]) else
              f"{df.at[d, 'known_bytes'] / 1e6:,.1f} MB readable, "
              f"{int(df.at[d, 'nan_windows'])} ms unknown")
        return (f"{d} {df.at[d, 'share'] * 100:.2f} % ({mb}, "
                f"peak {pk:.1f} Gb/s at 1 ms{beside})")

    shares = ", ".join(share_text(d) for d in df.index)
    if total < min_bytes:
        ok = False
        msg = (f"cannot judge: only {total / 1e6:.3f} MB of RDMA traffic in the range "
               f"(need >= {min_bytes / 1e6:g} MB)")
    elif expect == "single":
        ok = bool(df["share"].max() >= single_share)
        msg = (f"all traffic on one interface: {main} carries {df['share'].max() * 100:.2f} % "
               f"of {total / 1e6:,.1f} MB" if ok else
               f"NOT a single interface: traffic is spread over {(df['share'] > 0.001).sum()} "
               f"devices (largest {main} {df['share'].max() * 100:.2f} %, needs >= "
               f"{single_share * 100:g} %)") + f"; {shares}"
    elif expect == "rails":
        groups = rail_groups(capture, list(df.index))
        sh = {r: float(df.loc[ds, "share"].sum()) for r, ds in groups.items()}
        lo_s, hi_s = (1 - rail_balance) / rails, (1 + rail_balance) / rails
        off = [r for r, v in sh.items() if not lo_s <= v <= hi_s]
        ok = len(groups) == rails and not off
        rail_text = ", ".join(f"{r} {v * 100:.1f} %" for r, v in sh.items())
        want = (f"{rails} rails each carrying {lo_s * 100:.1f} .. {hi_s * 100:.1f} % "
                f"(1/{rails} within a balance of {rail_balance:g})")
        if ok:
            msg = f"traffic on all {rails} rails, balanced: {rail_text}"
        elif len(groups) != rails:
            msg = (f"NOT {rails} rails: the capture has {len(groups)} ({rail_text}); expected "
                   + want)
        else:
            msg = (f"rails NOT balanced: {', '.join(off)} outside the expected share "
                   f"({rail_text}); expected " + want)
        msg += f"; {shares}"
    else:
        n_big = int((df["share"] >= both_min_share).sum())
        ok = n_big >= 2
        msg = (f"traffic on both interfaces: {n_big} devices carry >= "
               f"{both_min_share * 100:g} % each" if ok else
               f"NOT spread over both interfaces: {main} carries "
               f"{df['share'].max() * 100:.2f} %") + f"; {shares}"
    status = (PASS if ok else FAIL) if total >= min_bytes else CANNOT_JUDGE
    missing: list[str] = []
    mt = missing_twins(capture)
    if mt is not None and mt[0]:
        missing = [d["name"] for d in mt[0]]
        def said(d):
            bits = ([f"PCI {d['pci']}"] if d["pci"] else []) + \
                [f"twin of {d['twin_of']}" if d["twin_of"] else "its port unknown"]
            return f"{d['name']} ({', '.join(bits)})"
        what = ", ".join(said(d) for d in mt[0])
        ok, status = False, CANNOT_JUDGE
        msg = (f"cannot judge: {what} found at record time but NOT recorded; its traffic is "
               f"unknown, so the shares of the recorded device(s) ({', '.join(devices)}) say "
               "nothing about which interfaces NCCL used (record every twin: "
               f"`rdmascope record` without --device, or --device for each); recorded devices "
               "only: " + msg.removeprefix("cannot judge: "))
    elif mt is None and len(devices) == 1:
        msg += (f"; the verdict rests on the recorded devices only ({devices[0]}): the capture "
                "does not list the RDMA devices found at record time, so an unrecorded twin "
                "cannot be ruled out")
    if mt is not None and mt[1]:
        msg += (f"; also found at record time but not recorded, on another port (not counted): "
                f"{', '.join(mt[1])}")
    # Unknown is never zero: a device whose bytes are unknown for more than max_unknown_share
    # of the range could have carried the traffic the verdict is about.
    blind: list[str] = []
    unknown_devs: list[str] = []
    for dev in devices:
        share_u = float(df.at[dev, "unknown_share"])
        if share_u > max_unknown_share:
            ids = list(ser.index[ser["device"] == dev])
            kinds = [f for f in ("unavailable", "reset", "saturated", "implausible", "gap",
                                 "not_covered")
                     if any(s in unk.index and unk.at[s, f] > 0
                            for s in ser.loc[ser["device"] == dev, "series"])]
            why = counter_problems(capture, ids)
            reason = "; ".join(why[:2]) + (f" (+{len(why) - 2} more)" if len(why) > 2 else "")
            what = {"unavailable": "unreadable", "reset": "reset", "saturated": "saturated",
                    "implausible": "implausible steps",
                    "gap": "no reading across an edge of the range (missed sweeps or a hung "
                           "read: its bytes on either side are spread by assumption)",
                    "not_covered": "no reading for part of the range"}
            detail = ", ".join(what[k] for k in kinds) + (f": {reason}" if reason else "")
            # no interval flagged at all: the range holds fewer than two readings to difference
            blind.append(f"{dev} bytes unknown for {share_u * 100:.1f} % of the range ("
                         + (detail or "no byte interval: fewer than two readings") + ")")
    # devices that appeared while recording (a PCI rescan after an AER error, a cable
    # inserted) were present but not recorded: whatever they carried is unknown
    for ch in appeared_devices(capture, hi):
        if ch["name"] not in devices:
            at = (ch["t_ns"] - capture.t_start_ns) / 1e9
            blind.append(f"{ch['name']} bytes unknown (it appeared {at:.1f} s after the start, "
                         f"PCI {ch.get('pci') or 'unknown'}, and was not recorded)")
    if blind:
        ok, status = False, CANNOT_JUDGE
        unknown_devs = [b.split(" ", 1)[0] for b in blind]
        msg = (f"cannot judge: {'; '.join(blind)}; unknown is not zero, so the shares say "
               "nothing about which interfaces NCCL used; readable bytes only: "
               + msg.removeprefix("cannot judge: "))
    nd = ((capture.meta.get("extra") or {}).get("netdev_stats")
          if isinstance(getattr(capture, "meta", None), dict) else None)
    if kernel is None and isinstance(nd, dict) and nd.get("requested"):
        msg += ("; the TCP check could not judge: the recorder was asked for netdev "
                "statistics (--netdev-stats) but found no netdev (a private network namespace?), "
                "so kernel-stack traffic is unknown")
    if kernel is not None and k_blind and not tcp:
        # unknown is not zero: the TCP check saw only the readable kernel-stack bytes
        msg += ("; the TCP check saw only the readable kernel-stack bytes: those of "
                + ", ".join(f"{'+'.join(nd_of.get(d) or [d])} ("
                            + (f"{kern[d][1]} of the 1 s windows unknown" if kern[d][1] > 0
                               else "no reading in the range") + ")" for d in k_blind)
                + " are unknown")
    if tcp:
        ok, status = False, FAIL
        # the finding leads; what RDMA alone showed follows (without its own 'cannot judge: ',
        # which under a FAIL read as 'FAIL: cannot judge: ...')
        msg = ("TCP SUSPECTED: the kernel network stack moved "
               + ("at least " if k_blind else "")
               + f"{k_total / 1e6:,.1f} MB ({', '.join(where)}) against "
               f"{rdma_only / 1e6:,.1f} MB over RDMA (did NCCL fall back to sockets?); "
               "RDMA alone: "
               + msg.removeprefix("cannot judge: "))
    return Verdict(ok=bool(ok), status=status, missing_devices=missing,
                   unknown_devices=unknown_devs,
                   expect=expect, message=msg, devices=df,
                   total_bytes=float("nan") if partial.any() else total, known_bytes=total,
                   main_device=main, tcp_suspected=bool(tcp), kernel=kernel, start_ns=lo,
                   end_ns=hi,
                   params={"single_share": single_share, "both_min_share": both_min_share,
                           "min_bytes": min_bytes, "tcp_min_bytes": tcp_min_bytes,
                           "tcp_ratio": tcp_ratio, "max_unknown_share": max_unknown_share})
