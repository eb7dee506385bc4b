"""The report's figure glue: from configurations to the data each figure draws (node rates,
envelopes, capacity lines, the request and window figures, devices, comparison, TP projection);
the computing is done by the analysis modules and the drawing by :mod:`figures`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rdmascope.exitcodes import OptionValueError

from .report_pass import DEFAULT_WINDOWS_NS, MS_NS, Configuration, info_of, window_origin

ONE_MS_UNCERTAINTY = ("A single 1 ms value carries about ±15–25 % timing uncertainty (each "
                      "reading's instant is known only to about ±0.1–0.2 ms, docs/method.md "
                      "'The sampler'), which is why a 1 ms peak can exceed line rate; averages over "
                      "5 ms or longer are accurate to a few percent.")


#: Put where a 1 ms peak is shown instead of repeating ``ONE_MS_UNCERTAINTY``: the report says
#: the note once (id ``one-ms-note``) and renders this as a link to it.
ONE_MS_REF = "(1 ms values: ±15–25 %, see the note on 1 ms values)"
ONE_MS_LINK = '<a class="onems" href="#one-ms-note">1 ms values: ±15–25 %, see the note</a>'
#: What the peak table's columns mean, said under it (``peaks.peak_table``; docs/method.md
#: "Windows, peaks and unknown time in the analysis").
PEAK_COLUMNS_NOTE = ("peak: the highest window consistent with physics; at line rate: "
                     "windows above it by less than their timing uncertainty, so the peak is "
                     "the line rate. p50/p90/p99 are of every whole window's raw rate, not "
                     "capped at the line rate, so p99 can exceed the peak; raw max is the "
                     "highest window of all; windows over the line beyond their uncertainty "
                     "are counted (over line) and kept out of the peak.")
#: The note under the report's peak-vs-window table.
PEAKS_TABLE_NOTE = ("'whole range' is the mean over the whole prefill. Windows are aligned on the "
                    "capture start, as in every table and figure. " + PEAK_COLUMNS_NOTE + " "
                    + ONE_MS_REF)



def node_gbps(cfg: Configuration, width_ns: int, start_ns: int, end_ns: int, *,
              direction: str = "tx", by: str = "direction", whole: bool = False
              ) -> pd.DataFrame:
    """Re-bin one node's traffic of ``direction`` to Gb/s windows over [start_ns, end_ns).

    ``by="direction"`` sums every device (the twins of one port: the node's total), one column
    named after the direction; ``by="series"`` keeps one column per device. Windows are aligned
    on the capture start (``window_origin``), as everywhere in the report; the windows
    overlapping the range are returned, or with ``whole`` only those lying wholly inside it (as
    ``peaks.peak_table`` and ``attribute`` count them). A window the readings cover in part
    (the capture's edges, a window cut by the range) is at the rate of its covered part
    (``windows.Coverage``), never its bytes over the whole width. Uses
    ``series.rebin_with_quality(coverage=True)`` or the streamed engine.
    """
    from .series import coverage_frames, rebin_with_quality

    origin = window_origin(cfg)
    lo, hi = cfg.data_span(direction)
    start_ns = max(int(start_ns), lo)
    end_ns = min(int(end_ns), hi)
    if cfg.streamed:  # only the segments around the range are read
        from .stream import WindowGrid, iter_windows

        cdf = cfg.capture.counters
        ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")
                                         & (cdf["direction"] == direction)]]
        state: dict = {}
        blocks = [coverage_frames(bb, cov).gbps for _, bb, _qq, cov in iter_windows(
            info_of(cfg.capture), [WindowGrid(int(width_ns), origin, start_ns, end_ns)],
            by=by, counters=ids, state=state, coverage=True)]
        out = pd.concat(blocks)
        out = out[[c for c in out.columns if c in state.get("spans", {})]]
    else:
        iv = cfg.intervals[cfg.intervals["direction"] == direction]
        _, _, cov = rebin_with_quality(iv, int(width_ns), origin_ns=origin, start_ns=start_ns,
                                       end_ns=end_ns, by=by, coverage=True)
        out = cov.gbps
    if whole:
        t = out.index.to_numpy()
        out = out[(t >= start_ns) & (t + int(width_ns) <= end_ns)]
    if by == "direction":
        out.columns = [f"{direction}, all devices"]
    return out


def node_envelope(cfg: Configuration, width_ns: int, start_ns: int, end_ns: int, *, k: int,
                  direction: str = "tx") -> pd.DataFrame:
    """Return the min/max envelope of ``node_gbps(cfg, width_ns, start_ns, end_ns)``.

    Per bucket of ``k`` consecutive windows (``envelope.MinMaxEnvelope``): the highest and the
    lowest known rate in Gb/s, columns ``max`` and ``min``, indexed by the bucket's first window
    start (int64 ns); a bucket without a known window is NaN. The windows are those
    ``node_gbps`` returns (same grid, same values: every 1 ms peak is a bucket's max), streamed
    segment by segment and folded in as they pass, so memory holds the buckets only, whatever
    the range's length. ``attrs["bucket_ns"]`` is the time one bucket spans. Raises ValueError
    as ``node_gbps``.
    """
    from .envelope import MinMaxEnvelope

    origin = window_origin(cfg)
    lo, hi = cfg.data_span(direction)
    start_ns = max(int(start_ns), lo)
    end_ns = min(int(end_ns), hi)
    env = MinMaxEnvelope(start_ns=start_ns, end_ns=end_ns, width_ns=int(width_ns),
                         origin_ns=origin, k=int(k))
    if cfg.streamed:
        from .stream import WindowGrid, iter_windows

        cdf = cfg.capture.counters
        ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")
                                         & (cdf["direction"] == direction)]]
        for _, bb, _qq, cov in iter_windows(
                info_of(cfg.capture), [WindowGrid(int(width_ns), origin, start_ns, end_ns)],
                by="direction", counters=ids, coverage=True):
            if direction in bb.columns:  # the rate over each window's covered part
                env.add(bb.index.to_numpy(), cov.gbps(bb)[direction].to_numpy(np.float64))
    else:
        r = node_gbps(cfg, width_ns, start_ns, end_ns, direction=direction)
        env.add(r.index.to_numpy(), r.iloc[:, 0].to_numpy(np.float64))
    out = env.frame()
    out.attrs["bucket_ns"] = env.bucket_ns
    return out


def _direction_ids(cfg: Configuration, direction: str) -> list[int]:
    cdf = cfg.capture.counters
    return [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")
                                      & (cdf["direction"] == direction)]]


def _direction_of(cfg: Configuration) -> dict[str, str]:
    """{RDMA series: its direction}."""
    cdf = cfg.capture.counters
    ib = cdf[cdf["data"] & (cdf["source"] == "infiniband")]
    return dict(zip(ib["series"].astype(str), ib["direction"].astype(str), strict=True))


class RangeRates:
    """``node_gbps`` of one range (with ``k``: ``node_envelope``), made from a pass of the whole
    capture (``report_pass.capture_pass``'s ``consumers``, see ``report_pass.PassConsumers``)
    instead of a pass of its own.

    ``grids``: one grid, the windows ``node_gbps`` re-bins (the direction's counters, summed
    unless ``by="series"``, on the report's origin, over the range cut to the direction's
    data); ``result()`` returns what ``node_gbps(cfg, width_ns, start_ns, end_ns,
    direction=direction, by=by, whole=whole)`` returns (or ``node_envelope(cfg, width_ns,
    start_ns, end_ns, k=k, direction=direction)``), value for value. Holds the range's windows
    only (the envelope: its buckets). Raises ValueError as those functions do on a range
    holding no data. ``coverage``: it takes each block's ``curve.WindowCoverage`` (the rate
    over a window's covered part, as ``node_gbps``).
    """

    coverage = True

    def __init__(self, cfg: Configuration, width_ns: int, start_ns: int, end_ns: int, *,
                 direction: str = "tx", whole: bool = False, k: int | None = None,
                 by: str = "direction"):
        from .envelope import MinMaxEnvelope
        from .stream import WindowGrid

        origin = window_origin(cfg)
        lo, hi = cfg.data_span(direction)
        self.start_ns, self.end_ns = max(int(start_ns), lo), min(int(end_ns), hi)
        if self.end_ns <= self.start_ns:
            raise ValueError(f"empty time range: start {self.start_ns} ns >= end "
                             f"{self.end_ns} ns")
        self.width_ns, self.direction, self.whole, self.by = int(width_ns), direction, whole, by
        if by not in ("direction", "series") or (k is not None and by != "direction"):
            raise ValueError(f"RangeRates: by={by!r} (with k={k!r})")
        ids = _direction_ids(cfg, direction)
        self.grids = [WindowGrid(self.width_ns, origin, self.start_ns, self.end_ns,
                                 counters=tuple(ids), by=by)]
        # what the pass's spans (by series) say of this grid's columns
        self.key_of = {str(s): (direction if by == "direction" else str(s))
                       for s in cfg.capture.counters.loc[ids, "series"]}
        self.flaggers: list = []
        self.blocks: list[pd.DataFrame] = []
        self.env = None if k is None else MinMaxEnvelope(
            start_ns=self.start_ns, end_ns=self.end_ns, width_ns=self.width_ns,
            origin_ns=origin, k=int(k))
        self.present: set | None = None  # the columns with intervals (set by finish)

    def add(self, _k: int, b: pd.DataFrame, _q: pd.DataFrame, cov) -> None:
        d = self.direction
        g = cov.gbps(b)  # Gb/s over each window's covered part
        if self.env is None:
            self.blocks.append(g)
        elif d in g.columns:
            self.env.add(g.index.to_numpy(), g[d].to_numpy(np.float64))

    def finish(self, spans: dict) -> None:
        """The pass is over; ``spans``: its ``state["spans"]`` (by RDMA series)."""
        self.present = {self.key_of[s] for s in spans if s in self.key_of}

    @property
    def done(self) -> bool:
        """Whether a pass has fed it to its end."""
        return self.present is not None

    def result(self) -> pd.DataFrame:
        if self.env is not None:
            out = self.env.frame()
            out.attrs["bucket_ns"] = self.env.bucket_ns
            return out
        out = pd.concat(self.blocks)
        out = out[[c for c in out.columns if c in self.present]]
        w = self.width_ns
        if self.whole:
            t = out.index.to_numpy()
            out = out[(t >= self.start_ns) & (t + w <= self.end_ns)]
        if self.by == "direction":
            out.columns = [f"{self.direction}, all devices"]
        return out


class RequestFigures:
    """What figures 1 and 3 and the peak table draw of one request, from one pass.

    ``zoom``: the 1 ms windows of figure 1 (``figure_request``: the request padded by ``pad_s``);
    ``windows``: {width: windows} of figure 3 (``figure_windows``: whole windows of the prefill);
    ``peaks``: the prefill's peak table (``peaks.PeakTablePass``, as ``peak_table_capture(info,
    start_ns=send, end_ns=first, by="direction", origin_ns=window_origin(cfg))``, or of
    ``peak_windows_ns`` and ``percentiles``). Registered
    on the capture's one pass (``report_pass.PassConsumers``) or on a pass of its own over the
    segments around the request (``run_consumers``). ``done``: fed to the end of a pass.
    Raises ValueError as ``node_gbps``/``peak_table_capture`` on an empty range.
    """

    coverage = True  # its ``RangeRates`` take each block's ``curve.WindowCoverage``

    def __init__(self, cfg: Configuration, req: pd.Series, *, zoom: bool = True,
                 windows_ns=DEFAULT_WINDOWS_NS, peaks: bool = True, pad_s: float = 0.5,
                 peak_windows_ns=None, percentiles=(50, 90, 99)):
        from .peaks import DEFAULT_WINDOWS_NS as PEAK_WINDOWS_NS
        from .peaks import PeakTablePass

        self.request_id = str(req["request_id"])
        send, first, last = int(req["t_send_ns"]), int(req["t_first_ns"]), int(req["t_last_ns"])
        pad = int(pad_s * 1e9)
        self.zoom = RangeRates(cfg, MS_NS, send - pad, last + pad) if zoom else None
        self.windows = {int(w): RangeRates(cfg, int(w), send, first, whole=True)
                        for w in (windows_ns or ())}
        self.peaks = (PeakTablePass(info_of(cfg.capture), start_ns=send, end_ns=first,
                                    by="direction", origin_ns=window_origin(cfg),
                                    windows_ns=peak_windows_ns or PEAK_WINDOWS_NS,
                                    percentiles=percentiles)
                      if peaks else None)
        self.parts = [p for p in (self.zoom, *self.windows.values()) if p is not None]
        self.grids = [g for p in self.parts for g in p.grids]
        if self.peaks is not None:
            self.grids += self.peaks.grids
        self.owner = [(p, k) for p in self.parts for k in range(len(p.grids))]
        self.flaggers = [self.peaks.flag] if self.peaks is not None else []
        self.dir_of = _direction_of(cfg)
        self.spans: dict | None = None

    def add(self, k: int, b: pd.DataFrame, q: pd.DataFrame, cov) -> None:
        if k < len(self.owner):
            p, j = self.owner[k]
            p.add(j, b, q, cov)
        else:  # the peak table's grids (its range is given: it needs no spans while adding)
            self.peaks.add(k - len(self.owner), b, q, {})

    def finish(self, spans: dict) -> None:
        """The pass is over; ``spans``: its ``state["spans"]`` (by RDMA series)."""
        for p in self.parts:
            p.finish(spans)
        self.spans = {}  # by direction, as the peak table's series
        for s, (a, z) in spans.items():
            d = self.dir_of.get(s)
            if d is not None:
                sp = self.spans.setdefault(d, [a, z])
                sp[0], sp[1] = min(sp[0], a), max(sp[1], z)

    @property
    def done(self) -> bool:
        return self.spans is not None

    def window_rates(self) -> dict[int, pd.DataFrame]:
        """{width: Gb/s of figure 3}, as ``node_gbps(..., whole=True)`` per width."""
        return {w: r.result() for w, r in self.windows.items()}

    def peak_table(self) -> pd.DataFrame:
        """The prefill's peak table (``peak_table_capture``'s)."""
        return self.peaks.table(self.spans)


def request_figures(cfg: Configuration, req: pd.Series | None) -> RequestFigures | None:
    """``RequestFigures(cfg, req)`` to register on the report's pass, or None without a request
    or when its range holds no data (the figure, made on its own, then says why)."""
    if req is None:
        return None
    try:
        return RequestFigures(cfg, req)
    except ValueError:
        return None


def fed_request_figures(cfg: Configuration, req: pd.Series,
                        figs: RequestFigures | None = None) -> RequestFigures | None:
    """``figs`` when a pass has fed it; else, for a streamed configuration, ``RequestFigures``
    fed by a pass of its own over the segments around the request (``run_consumers``); None
    for intervals in memory. Raises ValueError as ``RequestFigures``."""
    if figs is not None and figs.done:
        return figs
    if not cfg.streamed:
        return None
    figs = RequestFigures(cfg, req)
    run_consumers(cfg, [figs])
    return figs


def run_consumers(cfg: Configuration, consumers) -> None:
    """Feed ``consumers`` (``RangeRates``, ``RequestFigures``) from one pass of their own over
    the segments around their ranges (for a figure drawn alone, as by ``rdmascope plot``)."""
    from .overline_pass import pass_hooks
    from .report_pass import PassConsumers
    from .stream import iter_windows

    fed = PassConsumers(consumers)
    state: dict = {}
    for gi, b, q, *cov in iter_windows(info_of(cfg.capture), fed.grids, by="series",
                                       source="infiniband", state=state,
                                       coverage=fed.coverage, **pass_hooks(fed.flaggers)):
        fed.add(gi, b, q, *cov)
    fed.finish(state.get("spans", {}))


def pick_request(cfg: Configuration, request_id: str | None = None) -> pd.Series:
    """Return the request to show in figure 1: ``request_id``, else the longest lone prefill.

    "Lone": no other request is in flight between its send and its first token, so its traffic
    is its own; among those the one with the longest TTFT (most bursts). Raises ValueError when
    the configuration has no requests, ``OptionValueError`` (``--request-id``, a usage error)
    when the id is unknown.
    """
    r = cfg.requests
    if not len(r):
        raise ValueError(f"{cfg.label}: no request log given (needed to place the prefill)")
    if request_id is not None:
        hit = r[r["request_id"].astype(str) == str(request_id)]
        if not len(hit):
            ids = [str(x) for x in r["request_id"]]
            raise OptionValueError(f"{cfg.label}: no successful request {request_id!r}; "
                                   f"known ({len(ids)}): {', '.join(ids[:10])}"
                                   f"{', ...' if len(ids) > 10 else ''}", "--request-id")
        return hit.iloc[0]
    send, first, last = (r[c].to_numpy() for c in ("t_send_ns", "t_first_ns", "t_last_ns"))
    lone = np.array([not np.any((send < first[i]) & (last > send[i]) & (np.arange(len(r)) != i))
                     for i in range(len(r))])
    cand = r[lone] if lone.any() else r
    return cand.loc[(cand["t_first_ns"] - cand["t_send_ns"]).idxmax()]


def line_rate_items(cfg: Configuration) -> list[str]:
    """What each device's and link's windows are judged against (the over-line flag and the
    headline peaks) and where that ceiling came from (``series.line_rates``), e.g.
    "rocep1s0f1: 126.0 Gb/s: PCIe link 32 GT/s x4 ..."."""
    from .series import line_rate_lines, line_rates, twin_links

    lines = line_rate_lines(line_rates(cfg.capture, groups=twin_links(cfg.capture) or None))
    return [ln.removeprefix("line rate ") for ln in lines]


def line_rate_note(cfg: Configuration) -> str:
    items = line_rate_items(cfg)
    return ("Line rates (windows above them beyond their timing uncertainty are flagged over "
            "line rate and never a headline): " + "; ".join(items) + ".") if items else ""


def capacity_lines(cfg: Configuration) -> dict[str, float]:
    """Reference lines for a configuration: the port rate and, with twin devices, one twin's rate.

    That rate is what the manifest's recorded setup says one twin carries (``record --emulated
    GBPS``: the line rate every table judges against, labelled "line rate"), else, on a 200 Gb/s
    port (a DGX Spark's), the study's measured ~109 Gb/s (``estimate.LINK_EMULATED_GBPS``),
    labelled as a measurement, not a bound; on other ports without a record, no such line.
    When the manifest records the twins' PCIe link (one bound below the port rate, e.g. 126 Gb/s
    for Gen5 x4: ``plausibility.line_ceilings``), that bound is a line too.
    """
    from rdmascope.models import recorded_setup
    from rdmascope.plausibility import current_link_gbps

    from .estimate import LINK_EMULATED_GBPS

    lines = {}
    port = cfg.port_gbps
    if current_link_gbps() is not None:  # --link-gbps replaces every other ceiling
        return {f"--link-gbps {current_link_gbps():g} Gb/s": current_link_gbps()}
    if port:
        lines[f"port {port:g} Gb/s"] = port
    if len(cfg.devices) >= 2:
        # each line named for what it is: the line rate the tables judge against (record
        # --emulated: what the emulated link carries), or the study's measured throughput of one
        # twin (a reference, not a bound: the tables judge a twin against its PCIe link)
        path = recorded_setup(cfg.capture.meta).get("emulated_real_gbps")
        if path:
            lines[f"line rate {path:g} Gb/s (record --emulated: one twin carries)"] = path
        elif port in (None, 200.0):
            lines[f"one twin measured ~{LINK_EMULATED_GBPS:g} Gb/s (study; not a bound)"] = \
                LINK_EMULATED_GBPS
    from rdmascope.plausibility import line_ceilings

    bounds = {c.pcie_gbps for c in line_ceilings(cfg.capture.meta).values()
              if c.pcie_gbps is not None and (not port or c.pcie_gbps < port)}
    if len(bounds) == 1:  # the recorded PCIe link of the twins: a bound, not a throughput
        b = bounds.pop()
        lines[f"twin PCIe link bound {b:.0f} Gb/s"] = b
    return lines


def figure_request(cfg: Configuration, request_id: str | None = None, *,
                   zoom_ms: float | None = 200.0, zoom_start_s: float | None = None,
                   pad_s: float = 0.5, rates: pd.DataFrame | None = None):
    """Draw figure 1 for one request of a configuration (1 ms windows of the node's tx).

    ``rates``: those windows already made (``RequestFigures.zoom`` fed by the report's pass),
    else they are made here (``node_gbps``, reading the segments around the request)."""
    from . import figures

    req = pick_request(cfg, request_id)
    send, first, last = int(req["t_send_ns"]), int(req["t_first_ns"]), int(req["t_last_ns"])
    pad = int(pad_s * 1e9)
    if rates is None:
        rates = node_gbps(cfg, MS_NS, send - pad, last + pad)
    zoom_start = None if zoom_start_s is None else send + int(zoom_start_s * 1e9)
    title = (f"{cfg.label}: request {req['request_id']}"
             + (f", {int(req['prompt_tokens']):,} prompt tokens"
                if pd.notna(req.get("prompt_tokens")) else ""))
    return figures.plot_request(rates, t_send_ns=send, t_first_ns=first, t_last_ns=last,
                                zoom_ms=zoom_ms, zoom_start_ns=zoom_start,
                                link_gbps=capacity_lines(cfg), title=title)


def figure_windows(cfg: Configuration, request_id: str | None = None, *,
                   windows_ns=DEFAULT_WINDOWS_NS, peaks: Mapping[int, float] | None = None,
                   rates: Mapping[int, pd.DataFrame] | None = None,
                   at_line_rate: Mapping[int, bool] | None = None):
    """Draw figure 3: one request's prefill at several windows, each panel's peak labelled.

    Windows are aligned on the capture start (``window_origin``, as the tables); the windows
    lying wholly inside the prefill [send, first token) are drawn (as ``peaks.peak_table``
    counts them). Each panel's label is the table's headline peak (``peaks`` if given, else
    ``peaks.peak_table`` here): the highest window consistent with physics, so a window over
    line rate or gap-spread is drawn but never labelled as the peak. A width with no whole window
    inside the prefill is left out. The time axis is seconds since the send. ``rates``: {width:
    those windows} already made (``RequestFigures.window_rates``). A streamed configuration
    without ``rates`` or ``peaks`` reads the segments around the prefill once for both
    (``RequestFigures`` on a pass of its own). Raises ValueError when the prefill is shorter
    than every width. ``at_line_rate``: {width: the table's ``at_line_rate``} (a peak given as the
    line rate, labelled so; computed with the peaks when they are).
    """
    from . import figures

    req = pick_request(cfg, request_id)
    at_line = dict(at_line_rate or {})
    send, first = int(req["t_send_ns"]), int(req["t_first_ns"])
    if cfg.streamed and (rates is None or peaks is None):
        need = RequestFigures(cfg, req, zoom=False,
                              windows_ns=windows_ns if rates is None else (),
                              peaks=peaks is None, peak_windows_ns=tuple(windows_ns),
                              percentiles=())
        run_consumers(cfg, [need])
        if rates is None:
            rates = need.window_rates()
        if peaks is None:
            pk = need.peak_table()
            peaks = {int(r.window_ns): float(r.peak_gbps) for r in pk.itertuples()
                     if r.window != "whole range" and r.series == "tx"}
            at_line = at_line_of(pk)
    if rates is None:
        rates = {int(w): node_gbps(cfg, int(w), send, first, whole=True) for w in windows_ns}
    by_w = {int(w): r for w, r in rates.items() if len(r)}
    if not by_w:
        raise ValueError(f"{cfg.label}: request {req['request_id']}'s prefill "
                         f"({(first - send) / 1e6:.3f} ms) holds no whole window of any width")
    if peaks is None:
        from .peaks import peak_table

        pk = peak_table(cfg.intervals[cfg.intervals["direction"] == "tx"], start_ns=send,
                        end_ns=first, by="direction", origin_ns=window_origin(cfg),
                        windows_ns=tuple(by_w), percentiles=())
        peaks = {int(r.window_ns): float(r.peak_gbps) for r in pk.itertuples()
                 if r.window != "whole range" and r.series == "tx"}
        at_line = at_line_of(pk)
    peaks = {w: v for w, v in peaks.items() if w in by_w}
    return figures.plot_windows(by_w, peaks_gbps=peaks, origin_ns=send,
                                at_line_rate={w: v for w, v in at_line.items() if w in by_w},
                                xlabel="time since request sent (s)",
                                link_gbps=capacity_lines(cfg),
                                title=f"{cfg.label}: request {req['request_id']}'s prefill "
                                      "averaged over different windows")


def at_line_of(pk: pd.DataFrame) -> dict[int, bool]:
    """{width: at_line_rate} of a peak table's tx rows (empty without that column)."""
    if "at_line_rate" not in pk.columns:
        return {}
    return {int(r.window_ns): bool(r.at_line_rate) for r in pk.itertuples()
            if r.window != "whole range" and r.series == "tx"}


#: The per-device figure of the whole capture draws at most this many windows (a stacked area of
#: 40,000 steps is already finer than its pixels): 100 ms windows up to about an hour of capture,
#: then the next width of ``DEVICE_WIDTHS_MS`` that fits (1 s at 6 h, 5 s at 24 h), so the
#: figure's memory and time do not grow with the capture.
DEVICE_MAX_WINDOWS = 40_000
DEVICE_WIDTHS_MS = (100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000,
                    120_000, 300_000, 600_000)


def report_window_label(width_ns: int) -> str:
    from .figures import window_label

    return window_label(width_ns)


def devices_width_ns(duration_s: float) -> int:
    """The per-device figure's window (ns) for a capture of ``duration_s`` seconds: the
    narrowest of ``DEVICE_WIDTHS_MS`` giving at most ``DEVICE_MAX_WINDOWS`` windows (the widest
    one beyond). Each window is the mean rate over it, said in the figure's title."""
    for w in DEVICE_WIDTHS_MS:
        if float(duration_s) * 1000.0 / w <= DEVICE_MAX_WINDOWS:
            return w * MS_NS
    return DEVICE_WIDTHS_MS[-1] * MS_NS


def device_rates(cfg: Configuration, width_ns: int, direction: str = "tx") -> pd.DataFrame:
    """The per-device figure's windows, ``node_gbps(cfg, width_ns, *cfg.data_span(),
    direction=direction, by="series")``; for a streamed configuration whose emulation checks
    are not made yet, with them from the same pass (``verify.measure_stream``; kept for
    ``Configuration.emulation_checks``), so that the figure and its verdict read the capture
    once."""
    lo, hi = cfg.data_span()
    if not cfg.streamed or cfg._checks is not None:
        return node_gbps(cfg, width_ns, lo, hi, direction=direction, by="series")
    from .report_pass import PassConsumers
    from .verify import judge_emulation, measure_stream, require_rdma_counters

    info = info_of(cfg.capture)
    require_rdma_counters(info)
    rr = RangeRates(cfg, width_ns, lo, hi, direction=direction, by="series")
    m = measure_stream(info, origin_ns=cfg.origin_ns, consumers=[PassConsumers([rr])])
    single = judge_emulation(info, m, expect="single")
    cfg._checks = (single, None if single.ok else judge_emulation(info, m, expect="both"))
    return rr.result()


def figure_devices(cfg: Configuration, *, width_ns: int = 100 * MS_NS, direction: str = "tx",
                   verdict: str | None = None, rates: pd.DataFrame | None = None):
    """Draw the per-device stacked traffic of a configuration over the whole capture.

    100 ms windows by default: wide enough that the periodic bursts do not alias into moire
    patterns over a whole capture, narrow enough to separate the requests. ``rates``: those
    windows already made (Gb/s per series, as ``node_gbps(by="series")``; the report's
    ``capture_pass``), else they are made here.
    """
    from . import figures

    if rates is None:
        lo, hi = cfg.data_span()
        rates = node_gbps(cfg, width_ns, lo, hi, direction=direction, by="series")
    ax = figures.plot_devices(
        rates, link_gbps=capacity_lines(cfg), verdict=verdict,
        title=f"{cfg.label}: {direction} per RDMA device, stacked "
              f"({figures.window_label(width_ns)} windows)")
    return figures.figure_of(ax)


#: Pixel columns of a figure's time axis (a 10 in figure is 1,100 px at the report's 110 dpi,
#: 1,500 at ``plot``'s 150): a series longer than ``FIGURE_MAX_WINDOWS`` is drawn as its
#: min/max envelope per column.
FIGURE_COLUMNS = 2_000
#: Up to this many windows (a minute of 1 ms) figure 2 draws every window, as the study did.
FIGURE_MAX_WINDOWS = 60_000


def _test_ranges(configs: Sequence[Configuration], test: str | None, pad_s: float,
                 start_s: float | None = None, end_s: float | None = None
                 ) -> dict[str, tuple[pd.DataFrame, int, int]]:
    """Per configuration: (the test's requests, range start, range end) of figure 2; with
    ``start_s``/``end_s`` (seconds since the test's first send) only that stretch."""
    out = {}
    for cfg in configs:
        r = cfg.requests
        if not len(r):
            raise ValueError(f"{cfg.label}: no request log given")
        if test is not None:
            tests = r["test"].dropna().astype(str)
            r = r[r["test"].astype(str) == str(test)]
            if not len(r):
                there = list(dict.fromkeys(tests))
                raise OptionValueError(f"{cfg.label}: no request of test {test!r}; tests: "
                                       f"{', '.join(there[:20]) or 'none (no test names)'}"
                                       f"{', ...' if len(there) > 20 else ''}", "--test")
        pad = int(pad_s * 1e9)
        t0 = int(r["t_send_ns"].min())
        a, b = t0 - pad, int(r["t_last_ns"].max()) + pad
        if start_s is not None:
            a = max(a, t0 + int(round(start_s * 1e9)))
        if end_s is not None:
            b = min(b, t0 + int(round(end_s * 1e9)))
        if b <= a:
            raise ValueError(f"{cfg.label}: nothing of test {test!r} lies in the range "
                             f"{start_s} s to {end_s} s after its first send "
                             f"(it spans {(a - t0) / 1e9:g} to {(b - t0) / 1e9:g} s)")
        out[cfg.label] = (r, a, b)
    return out


def comparison_bucket(configs: Sequence[Configuration], test: str | None = None, *,
                      width_ns: int = MS_NS, pad_s: float = 1.0,
                      columns: int = FIGURE_COLUMNS,
                      max_windows: int = FIGURE_MAX_WINDOWS, start_s: float | None = None,
                      end_s: float | None = None) -> int:
    """Return k, the windows of ``width_ns`` per drawn column of figure 2: 1 (every window
    drawn) when the longest configuration's range holds at most ``max_windows`` windows, else the bucket of ``envelope.bucket_windows`` (each column then
    shows the highest and lowest window of k)."""
    from .envelope import bucket_windows

    spans = [b - a for _, a, b in _test_ranges(configs, test, pad_s, start_s, end_s).values()]
    n = -(-max(spans) // int(width_ns))
    return 1 if n <= max_windows else bucket_windows(n, columns)


def comparison_consumers(configs: Sequence[Configuration], test: str | None = None, *,
                         width_ns: int = MS_NS, pad_s: float = 1.0,
                         columns: int = FIGURE_COLUMNS, max_windows: int = FIGURE_MAX_WINDOWS
                         ) -> dict[str, RangeRates]:
    """{label: ``RangeRates``} of what ``figure_comparison(configs, test)`` draws of each
    configuration (its windows, or their envelope), to register on each capture's pass and
    hand to ``figure_comparison`` as ``fed``. Raises ValueError as ``figure_comparison``."""
    k = comparison_bucket(configs, test, width_ns=width_ns, pad_s=pad_s, columns=columns,
                          max_windows=max_windows)
    return {cfg.label: RangeRates(cfg, width_ns, a, b, k=None if k == 1 else k)
            for cfg, (_r, a, b) in zip(configs, _test_ranges(configs, test, pad_s).values(),
                                       strict=True)}


def comparison_needs(configs: Sequence[Configuration]) -> dict[str, dict]:
    """{test: {label: ``RangeRates``}}: what figure 2 draws of each configuration for every
    test labelled in all the configurations' request logs (``comparison_consumers``), to make
    in the capture passes; empty unless two or more streamed configurations have requests. A
    test the attribution does not keep is made and not drawn; one that cannot be drawn is left
    out here (figure 2 then says why)."""
    compared = [c for c in configs if len(c.requests)]
    if len(compared) < 2 or not all(c.streamed for c in compared):
        return {}
    tests = [str(t) for t in dict.fromkeys(compared[0].requests["test"].astype(str))]
    for cfg in compared[1:]:
        have = set(cfg.requests["test"].astype(str))
        tests = [t for t in tests if t in have]
    out = {}
    for test in tests:
        try:
            out[test] = comparison_consumers(compared, test)
        except ValueError:
            continue
    return out


def figure_comparison(configs: Sequence[Configuration], test: str | None = None, *,
                      width_ns: int = MS_NS, pad_s: float = 1.0,
                      columns: int = FIGURE_COLUMNS, max_windows: int = FIGURE_MAX_WINDOWS,
                      start_s: float | None = None, end_s: float | None = None,
                      fed: Mapping[str, RangeRates] | None = None):
    """Draw figure 2: the configurations of one test stacked on a shared time axis.

    ``test`` selects the requests by their ``test`` column (all requests when None). Rates are the
    node's tx at ``width_ns`` (1 ms by default, as in the study: the bursts' height, ~180 vs
    ~105 Gb/s, is what differs; wider windows average it away and alias with the burst period).
    A test longer than ``max_windows`` windows is drawn as its min/max envelope in ``columns``
    columns (``node_envelope``, k = ``comparison_bucket``): per column the highest window (the
    line: every burst keeps its 1 ms height) and a band down to the lowest; the title says "the
    highest 1 ms window per N ms". That streams the capture: memory holds the columns, not the
    test's windows. ``start_s``/``end_s``: draw only that stretch, in seconds since each test's
    first send (the figure's time axis), e.g. a few seconds of a long test at every 1 ms window.
    ``fed``: {label: ``RangeRates``} of ``comparison_consumers`` (same arguments) fed by each
    capture's pass; a configuration without one is read here.
    Raises ``OptionValueError`` (``--test``) when a configuration has no request of ``test``,
    ValueError when nothing is in the range.
    """
    from . import figures

    k = comparison_bucket(configs, test, width_ns=width_ns, pad_s=pad_s, columns=columns,
                          max_windows=max_windows, start_s=start_s, end_s=end_s)
    rates, lows, reqs, caps = {}, {}, {}, {}
    for cfg in configs:
        r, a, b = _test_ranges([cfg], test, pad_s, start_s, end_s)[cfg.label]
        got = (fed or {}).get(cfg.label)
        got = got.result() if got is not None and got.done else None
        if k == 1:
            rates[cfg.label] = got if got is not None else node_gbps(cfg, width_ns, a, b)
        else:
            env = got if got is not None else node_envelope(cfg, width_ns, a, b, k=k)
            rates[cfg.label] = env["max"].rename("tx, all devices")
            lows[cfg.label] = env["min"]
        reqs[cfg.label] = r
        caps[cfg.label] = capacity_lines(cfg)
    what = (f"{figures.window_label(width_ns)} windows" if k == 1 else
            f"the highest {figures.window_label(width_ns)} window per "
            f"{figures.window_label(width_ns * k)}, band down to the lowest")
    fig = figures.plot_comparison(
        rates, reqs, link_gbps=caps, lows_gbps=lows or None,
        title=(f"Test {test}: " if test else "") + " vs ".join(rates)
        + f" ({what}, tx of one node)")
    if start_s is not None or end_s is not None:
        lo, hi = fig.axes[0].get_xlim()
        fig.axes[0].set_xlim(lo if start_s is None else start_s, hi if end_s is None else end_s)
    return fig

def tp_projection_frame(*, prompt_tokens: float, ttft_s: float, model=None, tp: int = 8,
                        tp_sizes=(2, 4, 8, 16), links_gbps=((200.0, 100.0),)) -> pd.DataFrame:
    """Return the projected TTFT increase (%) by TP size, one column per link change.

    From ``estimate.tp_projection`` (method.md, "Effect of TP size"): one measured TTFT at TP
    ``tp`` for ``prompt_tokens`` (at the old link speed) projected to ``tp_sizes``. ``model``
    defaults to the study's model (``estimate.STUDY_MODEL``). Index: TP size; columns like
    "8,192 prompt tokens, 200 → 100 Gb/s". Raises ``EstimateError`` as the estimate does.
    """
    from . import estimate as E

    model = model or E.STUDY_MODEL
    cols = {}
    for old, new in links_gbps:
        rows = E.tp_projection(model, tp_sizes, prompt_tokens=prompt_tokens, ttft_ref_s=ttft_s,
                               ref_tp=tp, link_old_gbps=old, link_new_gbps=new)
        cols[f"{int(prompt_tokens):,} prompt tokens, {old:g} → {new:g} Gb/s"] = \
            pd.Series({int(r["tp"]): r["increase_pct"] for r in rows})
    out = pd.DataFrame(cols)
    out.index.name = "tp"
    return out


def figure_tp(**kwargs):
    """Draw figure 6 from ``tp_projection_frame(**kwargs)`` (same arguments); return the Figure.

    Like every ``figure_*`` function here it returns a matplotlib Figure (ready for
    ``figures.save_figure``, or to display in a notebook)."""
    from . import estimate as E
    from . import figures

    frame = tp_projection_frame(**kwargs)
    return figures.figure_of(figures.plot_tp_projection(
        frame, title=f"Projected TTFT increase vs TP size, {(kwargs.get('model') or E.STUDY_MODEL).name}"
                     f"\n(upper bound, from a measured TTFT of "
                     f"{kwargs['ttft_s']:.2f} s at TP{kwargs.get('tp', 8)})"))


# ----------------------------------------------------------------------------------------------
# The whole report
# ----------------------------------------------------------------------------------------------


def default_request_logs(capture_path: str | os.PathLike) -> list[Path]:
    """Return the request log stored beside a capture (``requests.jsonl``, as the emulator and
    ``rdmascope demo`` write it; a directory of that name too, which the reader names as one),
    or an empty list."""
    p = Path(capture_path) / "requests.jsonl"
    return [p] if p.exists() else []
