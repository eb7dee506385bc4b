"""The report's capture pass and configurations: one streaming read of a capture feeding every
accumulator the report needs, and :class:`Configuration` (a capture plus its request logs)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

# ----------------------------------------------------------------------------------------------
# From captures and request logs to figure data (the glue; the analysis does the computing)
# ----------------------------------------------------------------------------------------------

MS_NS = 1_000_000
#: The study's windows for figure 3 and the peak table.
DEFAULT_WINDOWS_NS = (1 * MS_NS, 5 * MS_NS, 100 * MS_NS)


def info_of(capture):
    """A ``stream.CaptureInfo`` of a capture (loaded or not), for the streaming functions."""
    from .stream import CaptureInfo, open_capture

    return capture if isinstance(capture, CaptureInfo) else open_capture(capture.path)


class _FlagCounter:
    """The RDMA intervals' flags with their counts, fed file by file (``flag_counts``)."""

    def __init__(self, ids=None):
        from .series import FLAGS

        self.flags = FLAGS
        self.ids = None if ids is None else set(ids)
        self.counts: dict[int, np.ndarray] = {}
        self.first: dict[tuple[int, int], int] = {}
        self.seen: dict[int, int] = {}

    def feed(self, parts) -> None:
        for c, iv in parts.items():
            if self.ids is not None and c not in self.ids:
                continue
            f = iv["flag"]
            if not len(f):
                continue
            self.counts.setdefault(c, np.zeros(len(self.flags), np.int64))
            n = np.bincount(f, minlength=len(self.flags))
            for code in np.flatnonzero(n):
                if (c, int(code)) not in self.first:
                    self.first[(c, int(code))] = self.seen.get(c, 0) + int(np.argmax(f == code))
            self.counts[c] += n
            self.seen[c] = self.seen.get(c, 0) + len(f)

    def result(self) -> pd.Series:
        total = np.zeros(len(self.flags), np.int64)
        for n in self.counts.values():
            total += n
        first = self.first
        order = sorted({code for (_, code) in first},
                       key=lambda code: min(k for k in first if k[1] == code))
        out = pd.Series({self.flags[k]: int(total[k]) for k in order}, dtype="int64")
        return out.sort_values(ascending=False, kind="stable")


def flag_counts(cfg) -> pd.Series:
    """The RDMA intervals' flags with their counts, as ``intervals["flag"].value_counts()``
    (most frequent first; ties in the order they first occur, counter by counter)."""
    if not cfg.streamed:
        return cfg.intervals["flag"].astype(str).value_counts()
    got = cfg.__dict__.get("_pass")
    if got is not None:
        return got.flags
    from .stream import iter_intervals

    fc = _FlagCounter()
    for parts, _ in iter_intervals(info_of(cfg.capture)):
        fc.feed(parts)
    return fc.result()


@dataclass
class CapturePass:
    """What the report reads from the whole capture, made in one streamed pass (``capture_pass``).

    ``checks``: (single, both) as ``Configuration.emulation_checks``; ``bursts``: the
    ``bursts.BurstResult`` of ``burst_analysis_capture(by="direction")``, its summary only (the
    report shows no per-burst table; a serving day has millions of bursts); ``timeline``: the
    node's tx over its data span, 1 ms Gb/s (a Series), or its min/max envelope (a DataFrame,
    ``node_envelope``) when longer than ``figures.MAX_TIMELINE_POINTS``; ``devices``: tx Gb/s per
    RDMA series at the devices width (``node_gbps(by="series")``); ``flags``: ``flag_counts``.
    """

    checks: tuple
    bursts: Any
    timeline: Any
    devices: pd.DataFrame
    flags: pd.Series


class PassConsumers:
    """Consumers registered on a pass beside its own grids (``capture_pass``'s ``consumers``,
    ``report_figures.run_consumers``, ``verify.measure_stream``'s): each has ``grids``
    (``stream.WindowGrid``, on the report's origin, each carrying its ``by`` and counters if
    not the pass's), ``flaggers`` (``OverLineFlagger`` to register), ``add(k, b, q)`` for the
    blocks of its k-th grid and ``finish(spans)`` once the pass is over (``spans``: the pass's
    ``state["spans"]``, {RDMA series: [first, last] ns}). ``first``: the pass's index of the
    first consumer grid. A consumer whose ``coverage`` is true is given each block's
    ``curve.WindowCoverage`` too (``add(k, b, q, cov)``: the pass then runs
    ``iter_windows(coverage=True)``; ``coverage`` here says whether one asks)."""

    def __init__(self, consumers, first: int = 0):
        self.consumers = [c for c in consumers if c is not None]
        self.coverage = any(getattr(c, "coverage", False) for c in self.consumers)
        self.grids = [g for c in self.consumers for g in c.grids]
        self.owner = [(c, k) for c in self.consumers for k in range(len(c.grids))]
        self.flaggers = [f for c in self.consumers for f in c.flaggers]
        self.first = int(first)

    def on_parts(self, _parts) -> None:
        """(each file's intervals: the figures need none)"""

    def add(self, gi: int, b: pd.DataFrame, q: pd.DataFrame, cov=None) -> None:
        c, k = self.owner[gi - self.first]
        if getattr(c, "coverage", False):
            c.add(k, b, q, cov)
        else:
            c.add(k, b, q)

    def finish(self, spans: dict) -> None:
        for c in self.consumers:
            c.finish(spans)


def capture_pass(cfg: Configuration, *, capacity_gbps: float,
                 devices_width_ns: int = 100 * MS_NS, ranges=None,
                 consumers=()) -> CapturePass | None:
    """Read a streamed configuration's capture once for the report's whole-capture parts.

    One ``stream.iter_windows`` pass over the RDMA counters, per series, on two grids of the
    report's origin (``window_origin``): 1 ms from the first interval (the emulation check's
    ``verify.MeasureStream``; summed per direction for the bursts, ``bursts.BurstStreamAcc``,
    and the timeline) and ``devices_width_ns`` over the tx span (the per-device figure); the
    netdev counters are read in the same pass for the kernel bytes (``cluster.KernelAcc``),
    and the intervals' flags are counted as they pass. ``ranges``: a ``ranges.RangeQueries``
    (``attribute``'s dry run) answered by the same pass (its ``consumer``) when its grid is the
    1 ms grid of the report's origin, else by a pass of its own. ``consumers``: what the figures
    of a range draw (``report_figures.RequestFigures``, ``RangeRates``; see ``PassConsumers``),
    fed by the same pass (not fed when this returns None). A direction's windows are the sum of its
    series' in counter order, NaN when one is, quality bits OR-ed: exactly what ``rebin`` with
    ``by="direction"`` computes (``series.combine_windows``), so every number equals that of the
    separate passes it replaces (tested). Returns None for a capture in memory, or when a
    series has several counters (its sum order would differ): the caller then makes each part
    on its own. Raises what ``iter_windows`` and ``verify_emulation`` raise.
    """
    if not cfg.streamed:
        return None
    from .bursts import BurstStreamAcc
    from .curve import QUALITY_PARTIAL
    from .envelope import MinMaxEnvelope, bucket_windows
    from .figures import MAX_TIMELINE_POINTS
    from .overline_pass import pass_hooks
    from .stream import WindowGrid, iter_windows
    from .verify import MeasureStream, judge_emulation

    info = info_of(cfg.capture)
    cdf = info.counters
    ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")]]
    series = [str(cdf.at[c, "series"]) for c in ids]
    if not ids or len(set(series)) != len(series):
        return None
    dir_of = {s: str(cdf.at[c, "direction"]) for c, s in zip(ids, series, strict=True)}
    directions = list(dict.fromkeys(dir_of[s] for s in series))
    cols_of = {d: [j for j, s in enumerate(series) if dir_of[s] == d] for d in directions}
    tx_series = [s for s in series if dir_of[s] == "tx"]
    origin = window_origin(cfg)
    tx_lo, tx_hi = cfg.data_span("tx")
    n_tx = -(-(tx_hi - tx_lo) // MS_NS) + 1
    env = None
    if n_tx > MAX_TIMELINE_POINTS:
        env = MinMaxEnvelope(start_ns=tx_lo, end_ns=tx_hi, width_ns=MS_NS, origin_ns=origin,
                             k=bucket_windows(n_tx, MAX_TIMELINE_POINTS // 2))
    k_tl0 = origin + ((tx_lo - origin) // MS_NS) * MS_NS  # the first timeline window
    tl_t: list[np.ndarray] = []
    tl_v: list[np.ndarray] = []
    dev_blocks: list[pd.DataFrame] = []
    ms = MeasureStream(info, origin_ns=cfg.origin_ns)
    bursts = BurstStreamAcc(info, capacity_gbps=capacity_gbps, by="direction")
    flags = _FlagCounter(ids)
    kern = None
    if origin == int(info.t_start_ns):  # KernelAcc's windows lie on the capture-start grid
        from .cluster import KernelAcc

        kern = KernelAcc(info)
        if not kern.ids:
            kern = None

    rr = None
    if ranges is not None:
        if int(ranges.width_ns) == MS_NS and int(ranges.origin) == origin \
                and ranges.source == "infiniband":
            rr = ranges.consumer()
        else:
            ranges.run()
    ib = set(ids)

    def on_parts(parts):
        flags.feed(parts)
        ms.on_parts(parts)
        if kern is not None:
            kern.feed(parts)
        if rr is not None:
            rr.on_parts({c: iv for c, iv in parts.items() if c in ib})

    state: dict = {}
    grids = [WindowGrid(MS_NS, origin), WindowGrid(int(devices_width_ns), origin, tx_lo, tx_hi)]
    fed = PassConsumers(consumers, len(grids))
    grids += fed.grids
    hooks = pass_hooks([ms.flagger, bursts.flag, rr.flag if rr is not None else None,
                        *fed.flaggers], on_parts=on_parts)
    # coverage: a window the readings cover in part (the capture's edges) is drawn at the
    # rate of its covered part (curve.WindowCoverage), never its bytes over the whole width
    for gi, b, q, cov in iter_windows(info, grids, by="series", source="infiniband",
                                      state=state, coverage=True,
                                      extra_counters=kern.ids if kern is not None else (),
                                      **hooks):
        if gi == 1:
            dev_blocks.append(cov.gbps(b)[tx_series])
            continue
        if gi > 1:
            fed.add(gi, b, q, cov)
            continue
        ms.add(b, q)
        B = b.to_numpy(np.float64)
        Q = q.to_numpy()
        bd, qd = {}, {}
        for d, cols in cols_of.items():
            v = B[:, cols[0]].copy()
            for j in cols[1:]:
                v += B[:, j]
            bd[d] = v
            qd[d] = np.bitwise_or.reduce(Q[:, cols], axis=1)
        bdf = pd.DataFrame(bd, index=b.index, columns=directions)
        qdf = pd.DataFrame(qd, index=b.index, columns=directions)
        bdf.columns.name = qdf.columns.name = "direction"
        bursts.add(bdf, qdf)
        if rr is not None:
            rr.add(bdf, qdf)
        if "tx" in bd:
            t = b.index.to_numpy(np.int64)
            rate = bd["tx"] * 8.0 / float(MS_NS)
            if cov.partial:  # a partial window: its series' rates over their covered parts
                part = (qd["tx"] & QUALITY_PARTIAL) != 0
                if part.any():
                    # summed as the engine sums a direction's (rebin by="direction")
                    RB = cov.rate_bytes(b)
                    cols = cols_of["tx"]
                    g = RB[:, cols[0]].copy()
                    for j in cols[1:]:
                        g += RB[:, j]
                    rate = np.where(part, g * 8.0 / float(MS_NS), rate)
            if env is not None:
                env.add(t, rate)
            else:
                keep = (t >= k_tl0) & (t < tx_hi)
                tl_t.append(t[keep])
                tl_v.append(rate[keep])
    if rr is not None:
        rr.finish()
    spans = state.get("spans", {})
    fed.finish(spans)
    m = ms.result(spans)
    if kern is not None:
        kern.answer(m)  # the netdev bytes from this pass where it can
    single = judge_emulation(info, m, expect="single")
    both = None if single.ok else judge_emulation(info, m, expect="both")
    dspans: dict[str, list[int]] = {}
    for s, (a, z) in spans.items():
        d = dir_of.get(s)
        if d is None:
            continue
        sp = dspans.setdefault(d, [a, z])
        sp[0], sp[1] = min(sp[0], a), max(sp[1], z)
    bt = bursts.result({d: dspans[d] for d in directions if d in dspans}, table=False)
    if env is not None:
        timeline = env.frame()
        timeline.attrs["bucket_ns"] = env.bucket_ns
    else:
        t = np.concatenate(tl_t) if tl_t else np.zeros(0, np.int64)
        timeline = pd.Series(np.concatenate(tl_v) if tl_v else np.zeros(0),
                             index=pd.Index(t, name="window_start_ns"), name="tx, all devices")
    dev = pd.concat(dev_blocks) if dev_blocks else pd.DataFrame(columns=tx_series)
    dev = dev[[c for c in dev.columns if c in spans]]  # Gb/s (WindowCoverage.gbps)
    return CapturePass(checks=(single, both), bursts=bt, timeline=timeline, devices=dev,
                       flags=flags.result())


@dataclass
class Configuration:
    """One configuration: a capture, its byte intervals, and its request log on the capture clock.

    ``requests`` holds the successful requests (``RequestLog.ok`` after ``align``) with int64
    time columns; ``log`` is None when no log was given.
    """

    label: str
    capture: Any  # rdmascope.analysis.load.Capture or stream.CaptureInfo
    #: the byte intervals; None: made from the segments only if something asks for them (the
    #: report's own tables and figures stream, so a day-long capture is never held)
    intervals: pd.DataFrame | None = field(repr=False, compare=False)
    log: Any = None  # rdmascope.analysis.requestlogs.RequestLog (aligned)
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the window grid's origin (int64 ns); None: the capture start (see ``window_origin``)
    origin_ns: int | None = None
    _checks: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.intervals is None:
            del self.__dict__["intervals"]  # made on first access (__getattr__)

    def __getattr__(self, name: str):
        if name == "intervals":
            from .series import byte_intervals

            iv = byte_intervals(self.capture)
            self.__dict__["intervals"] = iv
            return iv
        raise AttributeError(name)

    @property
    def streamed(self) -> bool:
        """True when the intervals are not in memory (the capture is read segment by segment)."""
        return "intervals" not in self.__dict__

    def data_span(self, direction: str | None = None) -> tuple[int, int]:
        """[first interval start, last interval end] of the RDMA counters (of ``direction``)."""
        if not self.streamed:
            iv = self.intervals
            if direction is not None:
                iv = iv[iv["direction"] == direction]
            if not len(iv):
                raise ValueError(f"{self.capture.path}: no {direction} data counters")
            return int(iv["t0_ns"].min()), int(iv["t1_ns"].max())
        from .stream import edge_spans

        sp = self.__dict__.get("_spans")
        if sp is None:
            sp = self.__dict__["_spans"] = edge_spans(info_of(self.capture), "infiniband")
        cdf = self.capture.counters
        got = [v for c, v in sp.items() if direction is None or cdf.at[c, "direction"] == direction]
        if not got:
            raise ValueError(f"{self.capture.path}: no {direction} data counters")
        return min(v[0] for v in got), max(v[1] for v in got)

    def emulation_checks(self):
        """Return (single, both): ``verify.verify_emulation`` with expect "single", then "both"
        (None when "single" held), computed once per configuration."""
        if self._checks is None:
            from .verify import verify_emulation

            single = verify_emulation(self.capture, origin_ns=self.origin_ns)
            both = None if single.ok else verify_emulation(self.capture, expect="both",
                                                           origin_ns=self.origin_ns)
            self._checks = (single, both)
        return self._checks

    def attribution(self, warmup_rounds: int = 0):
        """``attribute`` of this configuration's capture and request log on the report's grid
        (``window_origin``). A streamed configuration whose emulation checks are not made yet
        gets both from one pass over its capture (``compare.attribute_with_checks``; they are
        kept for ``emulation_checks``). Raises ValueError without a request log, and what
        ``attribute`` raises. Kept: asked again with the same ``warmup_rounds``, the same."""
        got = self.__dict__.get("_attribution")
        if got is not None and got[0] == warmup_rounds:
            return got[1]
        if not len(self.requests):
            raise ValueError(f"{self.label}: no request log given (needed to compare)")
        log = self.log[0] if isinstance(self.log, list) else self.log
        if self.streamed and self._checks is None:
            from .compare import attribute_with_checks

            att, self._checks = attribute_with_checks(self.capture, log,
                                                      origin_ns=window_origin(self),
                                                      warmup_rounds=warmup_rounds)
        else:
            from .attribute import attribute

            att = attribute(self.capture, log, intervals=self.__dict__.get("intervals"),
                            warmup_rounds=warmup_rounds, origin_ns=window_origin(self))
        self.__dict__["_attribution"] = (warmup_rounds, att)
        return att

    @property
    def interfaces(self) -> str | None:
        """"single" or "both" interfaces carried the RDMA traffic, else None (as
        ``compare.interfaces_used``, from the cached checks)."""
        single, both = self.emulation_checks()
        return "single" if single.ok else "both" if both is not None and both.ok else None

    @property
    def port_gbps(self) -> float | None:
        """The port's nominal rate from the manifest's device records (e.g. 200), or None."""
        from .load import port_rates_gbps

        return max(port_rates_gbps(self.capture.meta).values(), default=None)

    @property
    def devices(self) -> list[str]:
        """The RDMA devices with data counters in the capture."""
        c = self.capture.counters
        return list(dict.fromkeys(c.loc[c["data"] & (c["source"] == "infiniband"), "device"]))


#: Labels for the link names the emulator and the demo use (capture directory names).
LINK_LABELS = {"200": "200 Gb/s", "emulated100": "emulated 100 Gb/s"}


def _label_of(capture) -> str:
    """The configuration's label: ``record --label``, else the link of the setup recorded in the
    manifest ("400 Gb/s", "emulated 200 Gb/s"), else the emulator's link name, else the
    directory name."""
    from rdmascope.models import recorded_setup

    extra = capture.meta.get("extra") or {}
    extra = extra if isinstance(extra, dict) else {}
    sim = extra.get("simulated")
    tcp = " (TCP)" if isinstance(sim, dict) and sim.get("tcp_fallback") else ""
    v = extra.get("label")
    if isinstance(v, str) and v:
        return v
    rec = recorded_setup(capture.meta)
    if "link_gbps" in rec:
        return ("emulated " if rec.get("emulated") else "") + f"{rec['link_gbps']:g} Gb/s" + tcp
    if isinstance(sim, dict) and sim.get("link") in LINK_LABELS:
        return LINK_LABELS[sim["link"]] + tcp
    for key in ("config_label", "link"):
        v = extra.get(key)
        if isinstance(v, str) and v:
            return v
        if isinstance(v, dict) and isinstance(v.get("name"), str):
            return v["name"]
    return LINK_LABELS.get(capture.path.name, capture.path.name)


def load_configuration(capture_path: str | os.PathLike, request_logs=(), *,
                       label: str | None = None, offset_s: float | None = None,
                       log_format: str | None = None,
                       origin_s: float | None = None, run: int | None = None) -> Configuration:
    """Load one capture and its request log(s), aligned on the capture's clock.

    ``request_logs``: paths of request logs (any format ``read_request_log`` reads); several
    are concatenated. ``label`` defaults to the capture's manifest ``extra.label`` (the emulator
    writes one) or the directory name. ``origin_s``: the window grid's origin, seconds after the
    capture start (default: the capture start itself). ``run``: keep only run ``run`` (1-based)
    of each log holding several runs (``read_request_log``). Raises what ``load_capture`` /
    ``read_request_log`` / ``align`` raise (errors name the file, row and field).
    """
    from .requestlogs import align, read_request_log
    from .stream import edge_spans, open_capture

    # the manifest only: tables and figures stream the segments (never every reading)
    cap = open_capture(capture_path)
    if not edge_spans(cap, "infiniband"):
        raise ValueError(f"{capture_path}: no RDMA data counter intervals (fewer than two valid "
                         "readings of port_xmit_data/port_rcv_data)")
    logs = [align(read_request_log(p, log_format, run=run), cap, offset_s)
            for p in request_logs]
    reqs = pd.DataFrame()
    if logs:
        reqs = pd.concat([lg.ok for lg in logs], ignore_index=True)
        for c in ("t_send_ns", "t_first_ns", "t_last_ns"):
            reqs[c] = reqs[c].astype("int64")
        reqs = reqs.sort_values("t_send_ns", kind="stable").reset_index(drop=True)
    origin = None if origin_s is None else int(cap.t_start_ns) + int(round(origin_s * 1e9))
    return Configuration(label=label or _label_of(cap), capture=cap, intervals=None,
                         log=logs[0] if len(logs) == 1 else (logs or None), requests=reqs,
                         origin_ns=origin)


#: Said next to every 1 ms peak (method.md, "The sampler").


def window_origin(cfg: Configuration) -> int:
    """Return the one window origin the report uses (int64 ns): the capture start, unless the
    configuration was loaded with another (``origin_s``, the CLI's ``--origin``).

    The project's default origin (``series.default_origin``) and the origin of ``attribute``'s
    per-request and per-test 1 ms peaks, so that the same request shows the same 1 ms peak in
    every table, card and figure (figures still label time since the send).
    """
    return int(cfg.capture.t_start_ns) if cfg.origin_ns is None else int(cfg.origin_ns)
