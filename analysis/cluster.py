"""The cluster view: the captures of several hosts of one run, on one time axis, node by node.

A **run set** is one capture per host of one run (``open_run_set``). Each host's CLOCK_MONOTONIC
is its own, so the set is placed on one axis, the **reference** host's CLOCK_MONOTONIC (the first
capture unless named), in two steps (``align_run_set``):

1. **Wall clocks.** Each capture's (REALTIME, MONOTONIC) clock pairs give ``realtime - monotonic``
   on its host (the median over its pairs); the difference to the reference's maps the host's
   monotonic time onto the reference's: ``t_ref = t_node + offset``. This is as good as the hosts'
   wall clocks agree (NTP: often a few ms; PTP: microseconds).
2. **Traffic.** In a ring all-reduce every node sends and receives at the same moments (each ring
   step needs every node), so the nodes' 1 ms series line up when the offsets are right. Each
   node's series (all RDMA bytes, tx + rx) is cross-correlated with the reference's: first over
   +-``max_lag`` at 1 ms steps (FFT), then within +-1.5 ms of that at 0.05 ms steps, evaluating
   the node's cumulative bytes (linear between window edges) at the shifted instants, with a
   parabola through the best three lags. The residual offset found is the wall clocks' disagreement.
   Its **uncertainty** is the standard error of the same estimate made on ``blocks`` (10) parts of
   the run holding equal shares of the reference's traffic. A node whose normalised correlation
   peak is below 0.5 (too little or unrelated traffic) keeps its wall-clock offset and is named
   in a warning. A residual above ``warn_ns`` (1 ms) is warned about: the hosts' clocks are not
   kept together (NTP/PTP not working), and anything matched on wall clocks across hosts is off
   by that much.

A compute straggler shifts its own bursts' starts but not their ends (the ring ends together), and
its share of the correlation is small, so it biases its own offset by a small part of its delay;
``burst_timing`` then measures each node's bursts against the set's median.

Per node (``cluster_summary``), all from **one** streamed pass over the node's capture
(``node_pass``): RDMA bytes tx/rx, each twin's share and the emulation verdict (what
``verify_emulation`` finds, measured in the same pass and judged by ``verify.judge_emulation``),
the 1 ms / 5 ms / 100 ms / 1 s peaks of the node's link over its capture (``peak_table``,
twins summed), and the tx bytes per request over each request's [send, last token] (mapped onto
the node's clock; cumulative 1 ms series, linear inside a window) against the set's median. Times of the whole view are on the
reference's monotonic clock; the request log (one, the benchmark client's) is placed on the
reference capture with ``requestlogs.align``.

Size: one module (over 800 lines) while the fleet map/reduce work reshapes it: the run set, its
alignment, the node pass and the fleet verdicts share ``RunSet``, ``Node`` and ``NodeSeries``, and
the split along those seams (run set and alignment, node pass, verdicts) waits for that work to
land.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rdmascope.capture import read_manifest
from rdmascope.exitcodes import OptionValueError

from .bursts import detect_bursts
from .curve import HEADLINE_EXCLUDE, QUALITY_OVER_LINE, CounterCurve, combine_windows
from .links import twin_links as _twin_links
from .load import port_rates_gbps
from .overline import line_gbps_of
from .overline_pass import OverLineFlagger
from .peaks import peak_table, window_label
from .requestlogs import align, read_request_log
from .stream import WindowGrid, iter_windows, open_capture
from .verify import FAIL, PASS, MeasureStream, add_kernel_bytes, judge_emulation

MS = 1_000_000
DEFAULT_MAX_LAG_NS = 200 * MS
DEFAULT_WARN_NS = 1 * MS
FINE_STEP_NS = 50_000
FINE_HALF_NS = 1_500_000
MIN_CORRELATION = 0.5


class RunSetError(ValueError):
    """A set of captures that cannot be one run's (two of one host, no overlap, no clocks)."""


class SameHostTwice(RunSetError, OptionValueError):
    """Two captures of one host given as captures of one run: a usage error (exit 2), the
    command line names them."""

    def __init__(self, message: str):
        OptionValueError.__init__(self, message, None)


class NoSuchHost(RunSetError, OptionValueError):
    """``--reference HOST`` names no capture of the set: a usage error (exit 2) naming the
    hosts there are."""

    def __init__(self, message: str):
        OptionValueError.__init__(self, message, "--reference")


@dataclass
class Node:
    """One host's capture in a run set.

    ``offset_ns``: add to the host's CLOCK_MONOTONIC ns to get the reference's (``t_ref =
    t_node + offset_ns``). ``wall_offset_ns``: the same from the wall clocks alone.
    ``residual_ns`` = offset - wall offset (the wall clocks' disagreement, found from the
    traffic; None before refinement or when it could not be refined). ``offset_unc_ns``: its
    standard error (None without refinement). ``correlation``: normalised correlation peak.
    """

    path: Path
    host: str
    t_start_ns: int
    t_end_ns: int
    realtime_minus_monotonic_ns: int
    interval_ns: int
    wall_offset_ns: int = 0
    offset_ns: int = 0
    residual_ns: float | None = None
    offset_unc_ns: float | None = None
    correlation: float | None = None
    bursts_matched: int = 0

    def to_ref(self, t_ns):
        return np.asarray(t_ns) + self.offset_ns

    def from_ref(self, t_ns):
        return np.asarray(t_ns) - self.offset_ns


@dataclass
class RunSet:
    """Captures of one run, one per host; ``reference`` indexes ``nodes``. ``warnings``: lines."""

    nodes: list[Node]
    reference: int = 0
    refined: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def ref(self) -> Node:
        return self.nodes[self.reference]

    @property
    def hosts(self) -> list[str]:
        return [n.host for n in self.nodes]

    def common_span_ns(self) -> tuple[int, int]:
        """Return [lo, hi) on the reference's clock where every capture has readings."""
        lo = max(int(n.to_ref(n.t_start_ns)) for n in self.nodes)
        hi = min(int(n.to_ref(n.t_end_ns)) for n in self.nodes)
        return lo, hi


def manifest_end_ns(m: dict[str, Any]) -> int | None:
    """A capture's end on its monotonic clock from its manifest ``m`` alone: the stop record,
    else the latest clock pair (a capture still recording or killed), else None."""
    stop = m.get("stop") or {}
    if isinstance(stop, dict) and stop.get("monotonic_ns") is not None:
        return int(stop["monotonic_ns"])
    pairs = m.get("clock_pairs") or []
    return int(max(p[1] for p in pairs)) if pairs else None


def open_run_set(paths, *, reference: str | None = None, t_end_ns: dict | None = None,
                 manifests: dict | None = None) -> RunSet:
    """Open the captures of one run (manifests only) and place them by their wall clocks.

    ``paths``: capture directories, one per host. ``reference``: the host whose clock is the
    set's axis (default: the first capture's). ``t_end_ns``: optional {path: end ns} for captures
    without a stop record (else the last clock pair's instant is used). ``manifests``:
    optional {path: manifest dict} already read (elsewhere: ``cluster_ray.locate``).

    Raises ``RunSetError`` for fewer than two captures, two captures of one host (naming both),
    a capture without clock pairs, an unknown ``reference``, or captures that do not overlap in
    wall-clock time (naming the capture that starts last and the one that ends first), and the
    loader errors of ``rdmascope.capture.read_manifest`` (naming the file).
    """
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise RunSetError("a run set needs the captures of at least two hosts")
    nodes: list[Node] = []
    seen: dict[str, Path] = {}
    for p in paths:
        m = (manifests or {}).get(os.fspath(p)) or read_manifest(p)
        host = str(m.get("host") or p.name)
        if host in seen:
            raise SameHostTwice(f"{seen[host]} and {p} are both captures of host {host!r}: "
                                "give one capture per host of the run")
        seen[host] = p
        pairs = m.get("clock_pairs") or []
        if not pairs:
            st = m.get("start") or {}
            if st.get("realtime_ns") is None:
                raise RunSetError(f"{p}: no (REALTIME, MONOTONIC) clock pairs; cannot place it "
                                  "beside other hosts")
            pairs = [[st["realtime_ns"], st["monotonic_ns"]]]
        diffs = sorted(int(r) - int(mo) for r, mo in pairs)
        rm = diffs[len(diffs) // 2]  # exact integer median (float64 loses ~256 ns here)
        start = int((m.get("start") or {}).get("monotonic_ns") or min(pp[1] for pp in pairs))
        end = (t_end_ns or {}).get(os.fspath(p)) or manifest_end_ns(m) or start
        nodes.append(Node(path=p, host=host, t_start_ns=start, t_end_ns=int(end),
                          realtime_minus_monotonic_ns=rm, interval_ns=int(m["interval_ns"])))
    ref = 0
    if reference is not None:
        if reference not in seen:
            raise NoSuchHost(f"{reference!r}: no capture of that host (hosts: "
                             f"{', '.join(seen)})")
        ref = [n.host for n in nodes].index(reference)
    r0 = nodes[ref].realtime_minus_monotonic_ns
    for n in nodes:
        n.wall_offset_ns = n.offset_ns = n.realtime_minus_monotonic_ns - r0
    rs = RunSet(nodes=nodes, reference=ref)
    lo, hi = rs.common_span_ns()
    if hi <= lo:
        late = max(nodes, key=lambda n: n.to_ref(n.t_start_ns))
        early = min(nodes, key=lambda n: n.to_ref(n.t_end_ns))
        raise RunSetError(
            f"the captures do not overlap in time: {late.path} ({late.host}) starts "
            f"{(late.to_ref(late.t_start_ns) - early.to_ref(early.t_end_ns)) / 1e9:.3f} s after "
            f"{early.path} ({early.host}) ends (by their wall clocks); give the captures of one "
            "run")
    return rs


# ----------------------------------------------------------------------------------------------
# Each node's 1 ms series (cumulative bytes at window edges on its own clock)
# ----------------------------------------------------------------------------------------------


@dataclass
class NodeSeries:
    """A node's RDMA bytes per window on its own clock (all devices; tx and rx).

    Windows are regular: edge k at ``start_ns + k x width_ns`` (k = 0..n, ``edges_ns``).
    ``cum_tx``/``cum_rx``: cumulative bytes at the edges (float64, n + 1; unknown windows count
    0 in them (the readable bytes) and are counted in ``n_unknown``, tx or rx); ``cum`` = both.
    ``unknown_tx``/``unknown_rx``: where that direction's windows are unknown (``unknown_runs``:
    (m, 2) int64 window indices [k0, k1)), so a span over them is unknown (``unknown_in``).
    Memory: 16 bytes per window.
    """

    start_ns: int
    cum_tx: np.ndarray
    cum_rx: np.ndarray
    n_unknown: int
    width_ns: int
    unknown_tx: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    unknown_rx: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))

    def unknown_in(self, t0_ns, t1_ns, which: str = "tx") -> np.ndarray:
        """How many unknown windows of ``which`` ("tx" | "rx") each span [t0, t1) (own clock,
        ns; scalars or arrays) overlaps (``unknown_windows``)."""
        return unknown_windows(self.unknown_tx if which == "tx" else self.unknown_rx,
                               self.start_ns, self.width_ns, t0_ns, t1_ns)

    @property
    def edges_ns(self) -> np.ndarray:
        return self.start_ns + np.arange(len(self.cum_tx), dtype=np.int64) * self.width_ns

    @property
    def cum(self) -> np.ndarray:
        return self.cum_tx + self.cum_rx

    def _interp(self, c: np.ndarray, t_ns) -> np.ndarray:
        pos = (np.asarray(t_ns, dtype=np.int64) - self.start_ns).astype(np.float64) / self.width_ns
        pos = np.clip(pos, 0.0, len(c) - 1.0)
        k = np.minimum(pos.astype(np.int64), len(c) - 2) if len(c) > 1 else np.zeros(
            pos.shape, np.int64)
        if len(c) < 2:
            return np.full(pos.shape, c[0] if len(c) else 0.0)
        return c[k] + (pos - k) * (c[k + 1] - c[k])

    def cum_at(self, t_ns, which: str = "all") -> np.ndarray:
        """Cumulative bytes ("all" | "tx" | "rx") at own-clock instants, linear in windows
        (held at the first/last edge outside)."""
        if which == "all":
            return self._interp(self.cum_tx, t_ns) + self._interp(self.cum_rx, t_ns)
        return self._interp(self.cum_tx if which == "tx" else self.cum_rx, t_ns)

    def rate_at(self, grid_ns: np.ndarray, *, tx: bool = False) -> np.ndarray:
        """Bytes between consecutive instants of ``grid_ns`` (own clock), linear inside windows."""
        return np.diff(self.cum_at(grid_ns, "tx" if tx else "all"))


def unknown_runs(mask, offset: int = 0) -> np.ndarray:
    """The runs of True in a boolean array of windows: (m, 2) int64 [k0, k1) window indices,
    shifted by ``offset`` (the first window's index)."""
    m = np.asarray(mask, bool)
    if not m.any():
        return np.zeros((0, 2), np.int64)
    d = np.diff(np.concatenate([[0], m.astype(np.int8), [0]]))
    return np.stack([np.flatnonzero(d == 1), np.flatnonzero(d == -1)], axis=1).astype(
        np.int64) + int(offset)


def node_bytes(tx: float, rx: float, unknown_tx: int, unknown_rx: int, width_ns: int
               ) -> dict[str, float]:
    """A node's row bytes over the common span: ``tx_bytes``/``rx_bytes`` (NaN when any of that
    direction's windows in the span is unknown, never the readable part passed off as the
    total), ``tx_known_bytes``/``rx_known_bytes`` (the readable part, a lower bound) and
    ``tx_unknown_s``/``rx_unknown_s`` (the unknown windows' time, s). ``tx``/``rx``: the
    readable bytes (the cumulative series, unknown windows as 0); ``unknown_*``: the unknown
    windows in the span."""
    out: dict[str, float] = {}
    for d, v, u in (("tx", tx, int(unknown_tx)), ("rx", rx, int(unknown_rx))):
        out[f"{d}_bytes"] = v if u == 0 else float("nan")
    for d, v, u in (("tx", tx, int(unknown_tx)), ("rx", rx, int(unknown_rx))):
        out[f"{d}_known_bytes"] = v
        out[f"{d}_unknown_s"] = u * width_ns / 1e9
    return out


def requests_unknown(row: dict, unknown: np.ndarray) -> dict[str, Any]:
    """``requests_unknown`` (the requests counted in ``row["requests"]`` whose [send, last
    token] overlaps an unknown tx window) and, when there is one, ``bytes_per_request`` NaN:
    the mean counts their unknown bytes as 0, so it is unknown, never a low number."""
    k = int((np.asarray(unknown) > 0).sum())
    out: dict[str, Any] = {"requests_unknown": k}
    if k:
        out["bytes_per_request"] = float("nan")
    return out


def unknown_windows(runs: np.ndarray, start_ns: int, width_ns: int, t0_ns, t1_ns) -> np.ndarray:
    """How many windows of ``runs`` (sorted, disjoint [k0, k1) window indices of a series whose
    window k is [start + k w, start + (k + 1) w)) each span [t0, t1) (ns) overlaps (int64, the
    shape of ``t0_ns``)."""
    t0 = np.asarray(t0_ns, np.int64)
    t1 = np.asarray(t1_ns, np.int64)
    if not len(runs):
        return np.zeros(np.broadcast(t0, t1).shape, np.int64)
    k0, k1 = runs[:, 0], runs[:, 1]
    cum = np.concatenate([[0], np.cumsum(k1 - k0)])

    def below(x):  # unknown windows with an index < x
        j = np.searchsorted(k0, x, side="left")  # runs starting before x
        jj = np.maximum(j - 1, 0)
        part = np.clip(x - k0[jj], 0, k1[jj] - k0[jj])
        return np.where(j > 0, cum[jj] + part, 0)

    first = (t0 - int(start_ns)) // int(width_ns)  # the first window touched
    past = -((int(start_ns) - t1) // int(width_ns))  # one past the last touched
    return np.maximum(below(np.maximum(past, first)) - below(first), 0).astype(np.int64)


def node_series(bytes_df: pd.DataFrame, width_ns: int) -> NodeSeries:
    """Build a ``NodeSeries`` from ``rebin`` output (index: consecutive window starts, columns
    "<dev>/<dir>")."""
    t = bytes_df.index.to_numpy(np.int64)
    b = bytes_df.to_numpy(np.float64)
    nan = np.isnan(b)
    unknown = nan.any(axis=1)
    b = np.nan_to_num(b)
    tx_cols = [i for i, c in enumerate(bytes_df.columns) if str(c).endswith("/tx")]
    rx_cols = [i for i, c in enumerate(bytes_df.columns) if str(c).endswith("/rx")]
    tx = b[:, tx_cols].sum(axis=1) if tx_cols else np.zeros(len(t))
    rx = b[:, rx_cols].sum(axis=1) if rx_cols else np.zeros(len(t))
    if len(t) > 1 and (np.diff(t) != width_ns).any():
        raise ValueError("windows must be consecutive and of the given width")
    return NodeSeries(start_ns=int(t[0]) if len(t) else 0,
                      cum_tx=np.concatenate([[0.0], np.cumsum(tx)]),
                      cum_rx=np.concatenate([[0.0], np.cumsum(rx)]),
                      n_unknown=int(unknown.sum()), width_ns=int(width_ns),
                      unknown_tx=unknown_runs(nan[:, tx_cols].any(axis=1)) if tx_cols
                      else unknown_runs([]),
                      unknown_rx=unknown_runs(nan[:, rx_cols].any(axis=1)) if rx_cols
                      else unknown_runs([]))


# ----------------------------------------------------------------------------------------------
# Clock refinement
# ----------------------------------------------------------------------------------------------


def _xcorr_lag(a: np.ndarray, b: np.ndarray, max_lag: int) -> tuple[int, float]:
    """Integer lag L in [-max_lag, max_lag] maximising sum_k a[k+L] b[k]; and its normalised
    value."""
    a = a - a.mean()
    b = b - b.mean()
    n = 1 << int(np.ceil(np.log2(len(a) + len(b) + 1)))
    c = np.fft.irfft(np.fft.rfft(a, n) * np.conj(np.fft.rfft(b, n)), n)
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    vals = np.concatenate([c[: max_lag + 1], c[n - max_lag:]])
    i = int(np.argmax(vals))
    norm = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return int(lags[i]), float(vals[i] / norm) if norm > 0 else 0.0


def parabola_peak(y: np.ndarray, i: int) -> float:
    if 0 < i < len(y) - 1:
        d = y[i - 1] - 2 * y[i] + y[i + 1]
        if d < 0:
            return i + 0.5 * (y[i - 1] - y[i + 1]) / d
    return float(i)


def refine_offset(ref: NodeSeries, node: NodeSeries, grid_ns: np.ndarray, wall_offset_ns: int,
                  *, max_lag_ns: int = DEFAULT_MAX_LAG_NS, blocks: int = 10
                  ) -> tuple[float, float | None, float]:
    """Return (residual_ns, standard error ns or None, normalised correlation) of ``node``
    against ``ref`` on ``grid_ns`` (1 ms grid on the reference's clock, inside both captures).

    The node's own-clock instants of the grid are ``grid - wall_offset - residual``; see the
    module docstring for the method.
    """
    r = ref.rate_at(grid_ns)
    x0 = node.rate_at(grid_ns - wall_offset_ns)
    step = int(np.median(np.diff(grid_ns)))
    lag, corr = _xcorr_lag(r, x0, max(1, max_lag_ns // step))
    lags = lag * step + np.arange(-FINE_HALF_NS, FINE_HALF_NS + 1, FINE_STEP_NS)
    rc = r - r.mean()
    # blocks holding equal shares of the reference's traffic energy
    e = np.cumsum(rc * rc)
    cuts = np.searchsorted(e, e[-1] * np.arange(1, blocks) / blocks) if e[-1] > 0 else []
    bounds = np.concatenate([[0], cuts, [len(r)]]).astype(int)
    per_block = np.empty((len(lags), blocks))
    for j, lg in enumerate(lags):
        x = node.rate_at(grid_ns - wall_offset_ns - lg)
        p = rc * (x - x.mean())
        cs = np.concatenate([[0.0], np.cumsum(p)])
        per_block[j] = cs[bounds[1:]] - cs[bounds[:-1]]
    total = per_block.sum(axis=1)
    best = parabola_peak(total, int(np.argmax(total)))
    residual = float(lags[0] + best * FINE_STEP_NS)
    ests = np.array([lags[0] + parabola_peak(per_block[:, k], int(np.argmax(per_block[:, k])))
                     * FINE_STEP_NS for k in range(blocks)])
    ok = bounds[1:] > bounds[:-1]
    se = float(np.std(ests[ok], ddof=1) / np.sqrt(ok.sum())) if ok.sum() > 2 else None
    return residual, se, corr


def burst_ends(s: NodeSeries, *, capacity_gbps: float, min_bytes: float = 5e6,
               marker_gap_ns: int = 50 * MS) -> tuple[np.ndarray, np.ndarray]:
    """Return the end instants (own clock, float ns) of the node's large bursts, sub-window.

    A burst (``bursts.detect_bursts`` on the node's tx + rx per window, at least ``min_bytes``)
    ends where the line of its cumulative bytes on the plateau (through the edges of the last
    two windows above half its peak) meets the line after it (the next two windows' edges
    after the window holding the end): the kink of a piecewise-linear cumulative, found
    whatever the sampling phase. Bursts without two such windows, or whose lines do not meet
    in the end window, are left out.

    Returns (ends, markers): the ends, and the starts (own clock, window resolution) of the
    bursts that follow at least ``marker_gap_ns`` without one: the first all-reduce of a
    prefill after idle or decode, an event that happens once, where a train of equal, equally
    spaced all-reduces looks the same shifted by one period.
    """
    e, c = s.edges_ns, s.cum
    if len(e) < 8:
        return np.zeros(0), np.zeros(0)
    w = s.width_ns
    b = np.diff(c)
    bd = detect_bursts(pd.Series(b, index=e[:-1]), w, capacity_gbps=capacity_gbps)
    bd = bd[bd["bytes"] >= min_bytes]
    gap = bd["start_ns"].to_numpy(np.int64)[1:] - bd["end_ns"].to_numpy(np.int64)[:-1]
    markers = bd["start_ns"].to_numpy(np.int64)[1:][gap >= marker_gap_ns].astype(np.float64)
    if len(bd) and bd["start_ns"].iloc[0] - e[0] >= marker_gap_ns:
        markers = np.concatenate([[float(bd["start_ns"].iloc[0])], markers])
    ka = ((bd["start_ns"].to_numpy(np.int64) - e[0]) // w).astype(np.int64)
    kz = ((bd["end_ns"].to_numpy(np.int64) - e[0]) // w).astype(np.int64)  # exclusive
    keep = kz - ka >= 2
    ka, kz = ka[keep], kz[keep]
    if len(ka) == 0:
        return np.zeros(0), markers
    # per burst: its highest window, then the last window at >= half of it (vectorised over
    # the bursts' windows, which do not overlap)
    idx = np.concatenate([np.arange(x, y) for x, y in zip(ka, kz, strict=True)])
    starts = np.concatenate([[0], np.cumsum(kz - ka)[:-1]])
    peak = np.maximum.reduceat(b[idx], starts)
    owner = np.repeat(np.arange(len(ka)), kz - ka)
    kb = np.maximum.reduceat(np.where(b[idx] >= 0.5 * peak[owner], idx, -1), starts)
    ok = (kb - 1 >= ka) & (kb + 4 <= len(e) - 1)
    kb = kb[ok]
    rel = (e - e[0]).astype(np.float64)
    t1, t2, u1, u2 = rel[kb - 1], rel[kb], rel[kb + 2], rel[kb + 3]
    m1 = (c[kb] - c[kb - 1]) / (t2 - t1)
    m2 = (c[kb + 3] - c[kb + 2]) / (u2 - u1)
    good = (m1 > 0) & (m1 > 4 * np.maximum(m2, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = ((c[kb + 2] - m2 * u1) - (c[kb - 1] - m1 * t1)) / (m1 - m2)
    good &= (t >= t2) & (t <= u1)
    out = e[0] + t[good]
    return np.asarray(out, dtype=np.float64), markers


def marker_lag(ref_m: np.ndarray, node_m: np.ndarray, shift_ns: float, max_lag_ns: int,
                tol_ns: float = 3 * MS) -> float | None:
    """The lag (ns) within +-``max_lag_ns`` that lines up the most markers (within ``tol_ns``),
    ties to the smallest lag; None without markers on both sides."""
    if len(ref_m) == 0 or len(node_m) == 0:
        return None
    cand = (ref_m[:, None] - (node_m[None, :] + shift_ns)).ravel()
    cand = cand[np.abs(cand) <= max_lag_ns]
    if len(cand) == 0:
        return None
    moved = np.sort(node_m)
    best, best_score = None, -1
    for c in cand[np.argsort(np.abs(cand), kind="stable")]:
        x = ref_m - c - shift_ns
        k = np.clip(np.searchsorted(moved, x), 1, max(len(moved) - 1, 1))
        d = np.minimum(np.abs(moved[k - 1] - x), np.abs(moved[np.minimum(k, len(moved) - 1)] - x))
        score = int((d <= tol_ns).sum())
        if score > best_score:
            best, best_score = float(c), score
    return best


def match_residual(ref_ends: np.ndarray, node_ends: np.ndarray, shift_ns: float,
                    tol_ns: float = 2 * MS) -> tuple[float, float, int] | None:
    """Median of ref_end - (node_end + shift) over ends matched within ``tol_ns``; its standard
    error (1.2533 x sd / sqrt(n), the median's for normal errors) and the count."""
    if len(ref_ends) == 0 or len(node_ends) == 0:
        return None
    moved = np.sort(node_ends + shift_ns)
    k = np.clip(np.searchsorted(moved, ref_ends), 1, len(moved) - 1)
    near = np.where(np.abs(moved[k - 1] - ref_ends) < np.abs(moved[k] - ref_ends),
                    moved[k - 1], moved[k])
    d = ref_ends - near
    d = d[np.abs(d) < tol_ns]
    if len(d) < 10:
        return None
    med = float(np.median(d))
    return med, float(1.2533 * np.std(d, ddof=1) / np.sqrt(len(d))), len(d)


def align_run_set(rs: RunSet, series: list[NodeSeries], *, refine: bool = True,
                  max_lag_ns: int = DEFAULT_MAX_LAG_NS, warn_ns: int = DEFAULT_WARN_NS,
                  capacity_gbps: float | None = None) -> RunSet:
    """Refine the wall-clock offsets of ``rs`` from the nodes' traffic (in place; returns it).

    ``series``: each node's ``NodeSeries`` (same order as ``rs.nodes``). With ``refine`` False
    the wall-clock offsets stay and a note says so. Appends warnings to ``rs.warnings``.
    """
    rs.refined = refine
    if not refine:
        rs.warnings.append("clock refinement is off: the hosts are placed by their wall clocks "
                           "only (as good as NTP/PTP keeps them)")
        return rs
    lo, hi = rs.common_span_ns()
    w = rs.ref.interval_ns if rs.ref.interval_ns > 0 else MS
    w = max(w, MS)
    # leave room for the search at both ends
    margin = max_lag_ns + FINE_HALF_NS + w
    g0, g1 = lo + margin, hi - margin
    if g1 - g0 < 100 * w:
        g0, g1 = lo, hi
    grid = np.arange(g0, g1 + 1, w, dtype=np.int64)
    ref_s = series[rs.reference]
    ref_ends = ref_markers = None
    for i, n in enumerate(rs.nodes):
        if i == rs.reference:
            n.residual_ns, n.offset_unc_ns, n.correlation = 0.0, 0.0, 1.0
            continue
        if len(grid) < 10:
            rs.warnings.append(f"{n.host}: the captures overlap too briefly to refine the clock "
                               "offset; kept the wall-clock offset")
            continue
        r0 = ref_s.rate_at(grid)
        m = ml = None
        if capacity_gbps is not None:
            if ref_ends is None:
                ref_ends, ref_markers = burst_ends(ref_s, capacity_gbps=capacity_gbps)
            ends, markers = burst_ends(series[i], capacity_gbps=capacity_gbps)
            # a train of equal all-reduces correlates almost as well one period off: the
            # once-only events (a burst after a pause) decide, the correlation only without them
            ml = marker_lag(ref_markers, markers, n.wall_offset_ns, max_lag_ns)
        if ml is None:
            lag, corr = _xcorr_lag(r0, series[i].rate_at(grid - n.wall_offset_ns),
                                   max(1, max_lag_ns // w))
            coarse = float(lag * w)
        else:
            coarse = ml
            x = series[i].rate_at(grid - n.wall_offset_ns - int(round(ml)))
            a0, x0 = r0 - r0.mean(), x - x.mean()
            den = float(np.sqrt((a0 * a0).sum() * (x0 * x0).sum()))
            corr = float((a0 * x0).sum() / den) if den > 0 else 0.0
        if capacity_gbps is not None:
            m = match_residual(ref_ends, ends, n.wall_offset_ns + coarse)
        if m is not None:
            res, se, n.bursts_matched = coarse + m[0], m[1], m[2]
        else:
            res, se, corr = refine_offset(ref_s, series[i], grid, n.wall_offset_ns,
                                          max_lag_ns=max_lag_ns)
        n.correlation = corr
        if corr < MIN_CORRELATION:
            rs.warnings.append(
                f"{n.host}: its traffic does not match {rs.ref.host}'s (correlation {corr:.2f} "
                f"< {MIN_CORRELATION}); kept its wall-clock offset, so its timing is only as "
                "good as the wall clocks")
            continue
        n.residual_ns, n.offset_unc_ns = res, se
        n.offset_ns = int(round(n.wall_offset_ns + res))
        if abs(res) > warn_ns:
            rs.warnings.append(
                f"{n.host}'s wall clock disagrees with {rs.ref.host}'s by {res / MS:+.2f} ms "
                f"(found from the traffic): NTP/PTP is not keeping the hosts within "
                f"{warn_ns / MS:g} ms; the refined offsets are used")
    return rs


# ----------------------------------------------------------------------------------------------
# Per-node summary
# ----------------------------------------------------------------------------------------------

PEAK_WINDOWS_NS = (MS, 5 * MS, 100 * MS, 1000 * MS)


def link_peaks(iv: pd.DataFrame, groups: dict[str, list[str]], start_ns: int, end_ns: int
               ) -> dict[str, float]:
    """Return {window label: highest rate (Gb/s) of the node's link, tx or rx} over the range,
    from ``peak_table`` with twins summed (a single device counts as the link)."""
    tab = peak_table(iv, start_ns=start_ns, end_ns=end_ns, windows_ns=PEAK_WINDOWS_NS,
                     groups=groups or None, percentiles=())
    links = set(groups) if groups else set(tab.series)
    tab = tab[tab.series.isin(links) & (tab.window != "whole range")]
    return {window_label(w): float(tab.loc[tab.window_ns == w, "peak_gbps"].max())
            for w in PEAK_WINDOWS_NS}


LIKELY_MORE = ("traffic besides the ring on this node (another job, a second process, "
               "retransmissions), or a capture covering more of the run")
LIKELY_LESS = ("bytes that went over a device that was not recorded (record every twin), "
               "a collective that fell back to TCP, unknown (NaN) windows, or a node that is not "
               "in this ring")


class _PassFlagger:
    """``series.OverLineFlagger`` that judges a block's few over-line candidates from the
    intervals the pass itself has read (``feed``, the last files' ``on_parts``) instead of
    re-reading the segments around them; it falls back to the re-read when the kept intervals
    do not cover a candidate's neighbourhood. Same rule, same intervals, so the same bits.
    ``node_pass`` takes each block as it comes and holds back only one whose candidates reach
    past the intervals fed so far, so the flagger keeps the last ~1 s of intervals (the
    widest grid's window and the readings' reach), not a whole file's.
    """

    def __init__(self, cap, groups):
        class Flagger(OverLineFlagger):
            def _parts(inner, t0, t1):  # noqa: N805 (the flagger's self)
                pad = 2 * int(inner.info.interval_ns) + inner.extra
                if self.covers(t0 - pad, t1 + pad):
                    yield from ({c: iv for c, iv in p.items() if c in inner.ids}
                                for _, p in self.kept)
                else:
                    self.rereads += 1
                    yield from OverLineFlagger._parts(inner, t0, t1)

        self.flag = Flagger(cap, groups=groups)
        self.ids = set(self.flag.ids)
        self.kept: list[tuple[int, dict]] = []  # (file number, parts)
        self.first_dropped: dict[int, int] = {}  # counter -> latest t1 dropped from kept
        self.last_t1: dict[int, int] = {}
        self.done = False
        self.files = 0
        self.rereads = 0

    def feed(self, parts: dict, *, final: bool = False) -> None:
        mine = {c: iv for c, iv in parts.items() if c in self.ids and len(iv["t0_ns"])}
        for c, iv in mine.items():
            self.last_t1[c] = int(iv["t1_ns"][-1])
        self.kept.append((self.files, mine))
        self.files += 1
        self.done = final

    def prune(self, before_ns: int) -> None:
        """Drop the kept intervals ending at or before ``before_ns`` (no block left to judge
        reaches back there)."""
        out = []
        for n, parts in self.kept:
            sliced = {}
            for c, iv in parts.items():
                keep = iv["t1_ns"] > before_ns
                if not keep.all():
                    self.first_dropped[c] = max(self.first_dropped.get(c, -(1 << 62)),
                                                int(iv["t1_ns"][~keep].max()))
                    iv = {k: a[keep] for k, a in iv.items()}
                if len(iv["t0_ns"]):
                    sliced[c] = iv
            out.append((n, sliced))
        self.kept = [(n, p) for n, p in out if p]

    def covers(self, t0: int, t1: int) -> bool:
        """Whether the kept intervals hold every interval of every counter touching [t0, t1]."""
        for c in self.ids:
            if self.first_dropped.get(c, -(1 << 62)) > t0:
                return False
            if not self.done and self.last_t1.get(c, -(1 << 62)) < t1:
                return False
        return True

    def __call__(self, b, q, width_ns):
        return self.flag(b, q, width_ns)


class KernelAcc:
    """The netdev (kernel-stack) bytes per device of ``verify``'s kernel check, made from the
    intervals of the node's one pass: 1 s windows of the capture-start grid clipped to [lo, hi)
    (the RDMA readings' span, known only at the end), unknown windows counted apart
    (``verify.add_kernel_bytes``), as ``verify.kernel_bytes_reread``. Interior windows
    accumulate as the intervals stream by; the two clipped end windows are made at the end from
    the intervals kept (those starting in the first 3 s, and those ending in the last 2 s seen); ``kernel`` returns None when those do not
    cover them (then the caller re-reads).
    """

    W = 1000 * MS

    def __init__(self, cap):
        cdf = cap.counters
        self.ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "netdev")]]
        self.dev = {c: str(cdf.at[c, "device"]) for c in self.ids}
        self.o = int(cap.t_start_ns)
        self.acc: dict[int, list[np.ndarray]] = {}
        self.k_lo: dict[int, int] = {}
        self.head_ns = self.o + 3 * self.W
        self.kept: dict[int, dict] = {}  # file number -> the intervals kept of it
        self.latest = -(1 << 62)
        self.dropped_t1 = -(1 << 62)  # latest end of an interval not kept
        self.files = 0
        self.seen = False

    def feed(self, parts: dict) -> None:
        mine = {c: iv for c, iv in parts.items() if c in self.dev and len(iv["t0_ns"])}
        n = self.files
        self.files += 1
        if not mine:
            return
        self.seen = True
        for c, iv in mine.items():
            cnt = CounterCurve(iv["t0_ns"], iv["t1_ns"], iv["bytes"], iv["flag"])
            ka = (int(cnt.t0[0]) - self.o) // self.W
            kb = -((self.o - int(cnt.t1[-1])) // self.W)
            parts4 = cnt.edges(self.o + np.arange(ka, kb + 1, dtype=np.int64) * self.W)
            if c not in self.acc:
                self.k_lo[c] = ka
                self.acc[c] = [np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64),
                               np.zeros(0, np.int64)]
            k0 = self.k_lo[c]
            if ka < k0:  # intervals of one counter come in time order; guard anyway
                self.acc[c] = [np.concatenate([np.zeros(k0 - ka, x.dtype), x])
                               for x in self.acc[c]]
                self.k_lo[c] = k0 = ka
            need = kb - k0
            for j, (x, p) in enumerate(zip(self.acc[c], parts4, strict=True)):
                if len(x) < need:
                    x = self.acc[c][j] = np.concatenate([x, np.zeros(need - len(x), x.dtype)])
                x[ka - k0:kb - k0] += p
        # keep only what the two clipped end windows can need: the intervals starting in the
        # first seconds, and those ending in the last two windows seen so far
        self.latest = max(self.latest, max(int(iv["t1_ns"][-1]) for iv in mine.values()))
        self.kept[n] = mine
        cut = self.latest - 2 * self.W
        for k in list(self.kept):
            sliced = {}
            for c, iv in self.kept[k].items():
                keep = (iv["t0_ns"] < self.head_ns) | (iv["t1_ns"] > cut)
                if not keep.all():
                    gone = iv["t1_ns"][~keep]
                    self.dropped_t1 = max(self.dropped_t1, int(gone.max()))
                    iv = {key: a[keep] for key, a in iv.items()}
                if len(iv["t0_ns"]):
                    sliced[c] = iv
            if sliced:
                self.kept[k] = sliced
            else:
                del self.kept[k]

    def answer(self, m: dict) -> bool:
        """Let the emulation measurement ``m`` (``verify.MeasureStream.result``) take its
        netdev bytes over the range it judges from this pass (``kernel``) instead of reading the
        segments again; any other range still goes to ``m``'s own re-read. Returns True when
        the pass could answer (``m`` is then changed), False when ``m`` keeps its re-read."""
        if m["lo"] is None or m["hi"] is None:
            return False
        lo, hi = int(m["lo"]), int(m["hi"])
        got = self.kernel(lo, hi)
        if got is None:
            return False
        reread = m["kernel"]
        m["kernel"] = lambda a, z: got if (int(a), int(z)) == (lo, hi) else reread(a, z)
        return True

    def kernel(self, lo: int, hi: int) -> dict[str, tuple[float, int]] | None:
        """{device: (known bytes, unknown windows)} over [lo, hi), or None when the kept
        intervals cannot make the two clipped end windows."""
        if not self.seen:
            return {}
        lo, hi = int(lo), int(hi)
        k0 = (lo - self.o) // self.W
        k1 = -((self.o - hi) // self.W)
        if k1 - k0 < 3:
            return None
        e = np.clip(self.o + np.arange(k0, k1 + 1, dtype=np.int64) * self.W, lo, hi)
        if e[1] > self.head_ns or self.dropped_t1 > e[-2]:
            return None
        files = [self.kept[k] for k in sorted(self.kept)]

        def parts(c):
            out = [np.zeros(k1 - k0), np.zeros(k1 - k0, np.int64), np.zeros(k1 - k0, np.int64),
                   np.zeros(k1 - k0, np.int64)]
            if c in self.acc:
                a0 = self.k_lo[c]
                for x, y in zip(out, self.acc[c], strict=True):
                    lo_k, hi_k = max(k0 + 1, a0), min(k1 - 1, a0 + len(y))
                    if hi_k > lo_k:
                        x[lo_k - k0:hi_k - k0] = y[lo_k - a0:hi_k - a0]
            for f in files:
                iv = f.get(c)
                if iv is None:
                    continue
                cnt = CounterCurve(iv["t0_ns"], iv["t1_ns"], iv["bytes"], iv["flag"])
                for j, (a, b) in enumerate(((e[0], e[1]), (e[-2], e[-1]))):
                    if iv["t1_ns"][-1] <= a or iv["t0_ns"][0] >= b:
                        continue
                    got = cnt.windows(np.array([a]), np.array([b]))
                    pos = 0 if j == 0 else k1 - k0 - 1
                    for x, g in zip(out, got, strict=True):
                        x[pos] += g[0]
            return out

        b, _q = combine_windows(((self.dev[c], parts(c)) for c in self.ids), np.diff(e),
                         pd.RangeIndex(k1 - k0))
        return add_kernel_bytes({}, b)


@dataclass
class NodePass:
    """What ``node_pass`` found: ``series`` (``NodeSeries``), ``peaks`` ({window label: Gb/s}),
    ``measure`` (the emulation check's measurement, ``verify.judge_emulation``'s input, or None)
    and ``info`` (the ``stream.CaptureInfo``). ``rereads``: how often the over-line check had
    to re-read segments (0 when the pass's own intervals covered every candidate window)."""

    series: NodeSeries
    peaks: dict[str, float]
    measure: dict[str, Any] | None
    info: Any
    rereads: int = 0


def node_pass(cap, width_ns: int = MS, windows_ns=PEAK_WINDOWS_NS, *, peaks: bool = True,
              measure: bool = False, sink=None) -> NodePass:
    """One streamed pass over a capture (``stream.iter_windows``, windows from the capture start):
    its ``NodeSeries`` at ``width_ns``, the highest rate (Gb/s) of its link, tx or rx, per
    width of ``windows_ns`` ({window label: Gb/s}) and, with ``measure``, what the emulation
    check needs (``verify.MeasureStream``: per RDMA series bytes, 1 ms peak, NaN windows and
    unknown time; the netdev bytes read in the same pass), judged by ``verify.judge_emulation``
    exactly as ``verify_emulation`` on the whole capture.

    The link is the twins summed (``twin_links``; a lone device is its own link). As
    ``peak_table``: the highest window consistent with physics (no unknown, partly covered,
    empty, gap-spread or over-line window; ``peaks.headline_peak``); the few windows over line
    rate are judged from the intervals the pass holds (``_PassFlagger``). ``cap``: a
    ``stream.CaptureInfo`` or a path. ``peaks`` False: only the series (the peaks dict is
    empty). ``sink``: an object whose ``add(t_ns, tx, rx, unknown_tx, unknown_rx)`` takes each block of the
    series' windows in time order instead (``cluster_map``: the summary is made as the pass
    goes, no whole series is held; ``NodePass.series`` is then None). Raises ``ValueError``
    when the capture has no RDMA byte intervals.
    """
    if not hasattr(cap, "counters"):
        cap = open_capture(cap)
    groups = twin_links(cap)
    widths = list(dict.fromkeys([int(width_ns), *([int(x) for x in windows_ns] if peaks else []),
                                 *([MS] if measure else [])]))
    grids = [WindowGrid(x, cap.t_start_ns) for x in widths]
    g_series = widths.index(int(width_ns))
    g_peak = {widths.index(int(x)): x for x in windows_ns} if peaks else {}
    g_ms = widths.index(MS) if measure else None
    flag = _PassFlagger(cap, groups or None)
    ms = MeasureStream(cap) if measure else None
    kern = KernelAcc(cap) if measure else None
    if kern is not None and not kern.ids:
        kern = None

    def on_parts(p):
        flag.feed(p)
        if ms is not None:
            ms.on_parts(p)
        if kern is not None:
            kern.feed(p)

    best = {gi: 0.0 for gi in g_peak}
    seen = dict.fromkeys(g_peak, False)
    sums: list[tuple[np.ndarray, ...]] = []
    pending: list[tuple[int, pd.DataFrame, pd.DataFrame]] = []

    lines = line_gbps_of(flag.flag.stub, "series", groups=groups or None)
    tx_cols = rx_cols = None

    def settle(gi, b, q) -> bool:
        """Take one block; False (nothing taken) when an over-line candidate's neighbourhood
        is not among the kept intervals yet (the next file's are needed)."""
        nonlocal tx_cols, rx_cols
        cols = list(b.columns)
        B = b.to_numpy(np.float64)
        if gi not in g_peak and gi != g_ms:
            LB = None
        else:
            # the link view (``peaks.link_view``/``series.group_links``, in numpy): each link
            # the sum of its twins (NaN if one is), its quality their bits without the
            # over-line bit, which is judged against the link's own rate
            Q = q.to_numpy()
            keep = gi == g_ms or not groups
            names = list(cols) if keep else []
            bs = [B[:, j] for j in range(len(cols))] if keep else []
            qs = [Q[:, j] for j in range(len(cols))] if keep else []
            pos = {c: j for j, c in enumerate(cols)}
            for link, members in (groups or {}).items():
                mi = [pos[m] for m in members]
                x = B[:, mi[0]].copy()
                for j in mi[1:]:
                    x += B[:, j]
                names.append(link)
                bs.append(x)
                qs.append(np.bitwise_or.reduce(Q[:, mi], axis=1) & ~np.int8(QUALITY_OVER_LINE))
            LB = np.column_stack(bs) if bs else np.zeros((len(B), 0))
            LQ = np.column_stack(qs).astype(Q.dtype) if qs else np.zeros((len(B), 0), Q.dtype)
            # the over-line check only where a window's rate exceeds its line rate (else it
            # changes nothing): most blocks have no such window
            lim = np.array([lines.get(c) if lines.get(c) is not None else np.inf for c in names])
            with np.errstate(invalid="ignore"):
                over = (LB * 8.0 / widths[gi] > lim).any(axis=1) if len(names) else \
                    np.zeros(len(LB), bool)
            if over.any():
                at = b.index.to_numpy(np.int64)[over]
                pad = flag.flag.pad
                if not flag.done and not flag.covers(int(at[0]) - pad,
                                                     int(at[-1]) + widths[gi] + pad):
                    return False
                lb = pd.DataFrame(LB, index=b.index, columns=names)
                lq = pd.DataFrame(LQ, index=b.index, columns=names)
                LQ = flag(lb, lq, widths[gi]).to_numpy()
        if gi == g_series:
            # the node's series: tx and rx summed over its devices (as ``node_series``)
            if tx_cols is None:
                tx_cols = [i for i, c in enumerate(cols) if str(c).endswith("/tx")]
                rx_cols = [i for i, c in enumerate(cols) if str(c).endswith("/rx")]
            nan = np.isnan(B)
            z = np.where(nan, 0.0, B)
            blk = (b.index.to_numpy(np.int64), z[:, tx_cols].sum(axis=1),
                   z[:, rx_cols].sum(axis=1), nan[:, tx_cols].any(axis=1),
                   nan[:, rx_cols].any(axis=1))
            if sink is not None:
                sink.add(*blk)
                sums.append(None)
            else:
                sums.append(blk)
        if LB is None:
            return True
        if gi == g_ms:
            ms.add(pd.DataFrame(LB[:, :len(cols)], index=b.index, columns=cols),
                   pd.DataFrame(LQ[:, :len(cols)], index=b.index, columns=cols), flagged=True)
        if gi in g_peak:
            first = len(cols) if (groups and keep) else 0
            for j in range(first, len(names)):
                x = LB[:, j]
                ok = ~np.isnan(x) & ((LQ[:, j] & HEADLINE_EXCLUDE) == 0)
                if ok.any():
                    best[gi] = max(best[gi], float(x[ok].max()) * 8 / widths[gi])
                    seen[gi] = True
        return True

    # how far before a window the over-line check looks: its readings' brackets (padded)
    reach = 2 * int(cap.interval_ns) + int(flag.flag.extra) + 2 * MS
    state: dict = {}
    nxt: dict[int, int] = {}  # grid -> start of its first window not yet yielded
    it = iter_windows(cap, grids, state=state, on_parts=on_parts,
                      extra_counters=kern.ids if kern is not None else ())
    for gi, b, q in it:
        # each block is taken as it comes, in order per grid; one whose over-line candidates
        # reach past the intervals read so far waits for the next file's
        pending.append((gi, b, q))
        if len(b):
            nxt[gi] = int(b.index[-1]) + widths[gi]
        waiting: set[int] = set()
        rest = []
        for g, bb, qq in pending:
            if g in waiting or not settle(g, bb, qq):
                waiting.add(g)
                rest.append((g, bb, qq))
        pending = rest
        # the intervals before the earliest window still to judge (less its reach) can go
        if len(nxt) == len(grids):
            flag.prune(min([*nxt.values(), *(int(x[1].index[0]) for x in pending if len(x[1]))])
                       - reach)
    flag.done = True  # every interval has been read
    for g, bb, qq in pending:
        settle(g, bb, qq)
    if not sums:
        raise ValueError("no RDMA byte intervals (fewer than two valid readings per counter)")
    if sink is not None:
        ser = None
    else:
        ser = _series_of(sums, width_ns)
    sums.clear()
    pk = ({window_label(x): (best[gi] if seen[gi] else float("nan"))
           for gi, x in g_peak.items()} if peaks else {})
    m = None
    if ms is not None:
        m = ms.result(state.get("spans", {}))
        # the range the verdict asks for: made now, so the kept intervals can go
        if kern is not None and kern.answer(m):
            m["kernel_in_pass"] = True
        del kern
    return NodePass(series=ser, peaks=pk, measure=m, info=cap, rereads=flag.rereads)


def _series_of(sums, width_ns) -> NodeSeries:
    t = np.concatenate([x[0] for x in sums])
    if len(t) > 1 and (np.diff(t) != int(width_ns)).any():
        raise ValueError("windows must be consecutive and of the given width")
    ser = NodeSeries(start_ns=int(t[0]) if len(t) else 0,
                     cum_tx=np.concatenate([[0.0], np.cumsum(np.concatenate(
                         [x[1] for x in sums]))]),
                     cum_rx=np.concatenate([[0.0], np.cumsum(np.concatenate(
                         [x[2] for x in sums]))]),
                     n_unknown=int(sum(int((x[3] | x[4]).sum()) for x in sums)),
                     width_ns=int(width_ns),
                     unknown_tx=unknown_runs(np.concatenate([x[3] for x in sums])),
                     unknown_rx=unknown_runs(np.concatenate([x[4] for x in sums])))
    return ser


def twin_links(cap):
    return _twin_links(cap)


def symmetry(per_request: pd.DataFrame, tolerance: float = 0.01) -> pd.DataFrame:
    """Compare each node's bytes per request with the set's median.

    ``per_request``: index host, column ``bytes_per_request``. Returns the frame with
    ``vs_median_pct`` and ``flag`` ("" | "more" | "less" beyond ``tolerance``) and ``likely``.
    """
    out = per_request.copy()
    med = float(np.nanmedian(out["bytes_per_request"])) if out["bytes_per_request"].notna().any() \
        else np.nan
    out["vs_median_pct"] = (out["bytes_per_request"] / med - 1) * 100 if med > 0 else np.nan
    dev = out["vs_median_pct"] / 100
    out["flag"] = np.where(dev > tolerance, "more", np.where(dev < -tolerance, "less", ""))
    out["likely"] = np.where(out["flag"] == "more", LIKELY_MORE,
                             np.where(out["flag"] == "less", LIKELY_LESS, ""))
    return out


# ----------------------------------------------------------------------------------------------
# Burst timing: stragglers and slow links
# ----------------------------------------------------------------------------------------------


def _cross(s: NodeSeries, th: np.ndarray) -> np.ndarray:
    """Own-clock instants where the (non-decreasing) cumulative tx bytes first reach ``th``."""
    k = np.clip(np.searchsorted(s.cum_tx, th, side="left"), 1, len(s.cum_tx) - 1)
    c0, c1 = s.cum_tx[k - 1], s.cum_tx[k]
    e0 = s.start_ns + (k - 1) * s.width_ns
    f = np.divide(th - c0, c1 - c0, out=np.zeros_like(th), where=c1 > c0)
    return e0 + f * s.width_ns


def refined_run_set(paths, *, reference: str | None = None, refine: bool = True,
                    max_lag_ns: int = DEFAULT_MAX_LAG_NS, warn_ns: int = DEFAULT_WARN_NS
                    ) -> RunSet:
    """Open a run set and refine its offsets from the traffic (one streamed ``node_pass`` per
    node, then ``align_run_set``), without the per-node verdicts of ``cluster_summary``.
    Raises as ``open_run_set`` and ``RunSetError`` for a capture without RDMA intervals."""
    rs = open_run_set(paths, reference=reference)
    series = []
    for n in rs.nodes:
        try:
            series.append(node_pass(n.path, max(n.interval_ns, MS), peaks=False).series)
        except ValueError as exc:
            raise RunSetError(f"{n.path} ({n.host}): {exc}") from exc
    rates = port_rates_gbps(read_manifest(rs.ref.path))
    return align_run_set(rs, series, refine=refine, max_lag_ns=max_lag_ns, warn_ns=warn_ns,
                         capacity_gbps=max(rates.values()) if rates else 200.0)


def burst_timing(rs: RunSet, series: list[NodeSeries], *, capacity_gbps: float,
                 min_bytes: float = 5e6, lo_frac: float = 0.05, hi_frac: float = 0.95,
                 start_ns: int | None = None, end_ns: int | None = None) -> pd.DataFrame:
    """Each node's start and length of every all-reduce burst, on the reference's clock.

    Bursts are found (``bursts.detect_bursts``) in the nodes' mean tx per 1 ms window on the
    reference's grid; those carrying at least ``min_bytes`` per node are kept. For each burst and
    node, the start and end are the instants its cumulative tx bytes (linear between window
    edges) cross ``lo_frac`` and ``hi_frac`` of its bytes in the burst's range (padded by up to
    2 ms, never into a neighbour). Returns a long frame: burst, host, start_ns, end_ns,
    length_ns, late_ns (start - the set's median start), longer_pct (length vs the set's median
    length, %).
    """
    lo, hi = rs.common_span_ns()
    lo = lo if start_ns is None else max(lo, start_ns)
    hi = hi if end_ns is None else min(hi, end_ns)
    w = max(rs.ref.interval_ns, MS)
    grid = np.arange(lo, hi + 1, w, dtype=np.int64)
    if len(grid) < 3:
        return pd.DataFrame(columns=["burst", "host", "start_ns", "end_ns", "length_ns",
                                     "late_ns", "longer_pct"])
    mean = np.zeros(len(grid) - 1)
    for n, s in zip(rs.nodes, series, strict=True):
        mean += s.rate_at(n.from_ref(grid), tx=True)
    mean /= len(rs.nodes)
    b = detect_bursts(pd.Series(mean, index=grid[:-1]), w, capacity_gbps=capacity_gbps)
    b = b[b["bytes"] >= min_bytes].reset_index(drop=True)
    if len(b) == 0:
        return pd.DataFrame(columns=["burst", "host", "start_ns", "end_ns", "length_ns",
                                     "late_ns", "longer_pct"])
    s0 = b["start_ns"].to_numpy(np.int64)
    e0 = b["end_ns"].to_numpy(np.int64)
    prev_end = np.concatenate([[lo], e0[:-1]])
    next_start = np.concatenate([s0[1:], [hi]])
    a = np.maximum(s0 - 2 * MS, (s0 + prev_end) // 2)
    z = np.minimum(e0 + 2 * MS, (e0 + next_start) // 2)
    rows = []
    for n, s in zip(rs.nodes, series, strict=True):
        ca = s.cum_at(n.from_ref(a), "tx")
        cz = s.cum_at(n.from_ref(z), "tx")
        t_lo = _cross(s, ca + lo_frac * (cz - ca)) + n.offset_ns
        t_hi = _cross(s, ca + hi_frac * (cz - ca)) + n.offset_ns
        ok = cz - ca > 0
        rows.append(pd.DataFrame({"burst": np.arange(len(b)), "host": n.host,
                                  "start_ns": np.where(ok, t_lo, np.nan),
                                  "end_ns": np.where(ok, t_hi, np.nan)}))
    df = pd.concat(rows, ignore_index=True)
    df["length_ns"] = df["end_ns"] - df["start_ns"]
    med = df.groupby("burst")[["start_ns", "length_ns"]].median()
    df["late_ns"] = df["start_ns"] - df["burst"].map(med["start_ns"])
    df["longer_pct"] = (df["length_ns"] / df["burst"].map(med["length_ns"]) - 1) * 100
    return df


def stragglers(timing: pd.DataFrame, *, late_ns: float = 0.3 * MS, longer_pct: float = 10.0,
               consistency: float = 0.75) -> pd.DataFrame:
    """Summarise ``burst_timing`` per node and name stragglers and slow links.

    Per host: bursts, median ``late_ms`` and ``longer_pct``, the share of bursts in which it was
    later / longer than the median, and ``finding``: "compute straggler" when its median lateness
    is >= ``late_ns`` and it was late in >= ``consistency`` of the bursts; "slower path" when its
    bursts are >= ``longer_pct`` % longer in >= ``consistency`` of them; else "".
    """
    if len(timing) == 0:
        return pd.DataFrame(columns=["host", "bursts", "late_ms", "late_share", "longer_pct",
                                     "longer_share", "finding"])
    g = timing.dropna(subset=["start_ns"]).groupby("host", sort=False)
    out = pd.DataFrame({
        "bursts": g.size(),
        "late_ms": g["late_ns"].median() / MS,
        "late_share": g["late_ns"].apply(lambda x: float((x > 0).mean())),
        "longer_pct": g["longer_pct"].median(),
        "longer_share": g["longer_pct"].apply(lambda x: float((x > 0).mean())),
    })
    late = (out["late_ms"] * MS >= late_ns) & (out["late_share"] >= consistency)
    slow = (out["longer_pct"] >= longer_pct) & (out["longer_share"] >= consistency)
    out["finding"] = np.where(late & slow, "compute straggler and slower path",
                              np.where(late, "compute straggler",
                                       np.where(slow, "slower path", "")))
    return out.reset_index().rename(columns={"index": "host"})


# ----------------------------------------------------------------------------------------------
# Everything at once
# ----------------------------------------------------------------------------------------------


@dataclass
class ClusterResult:
    """What ``cluster_summary`` found; every time on the reference host's CLOCK_MONOTONIC.

    ``nodes``: per-node table (one row per host, see ``cluster_summary``). ``verdict``: "PASS"
    only if every node passed its emulation check, else "FAIL" (or "CANNOT JUDGE").
    ``failing``: hosts that did not pass. ``unmatched``: hosts whose traffic does not match the
    reference's (refinement's correlation below ``MIN_CORRELATION``: likely not the same run,
    so the set cannot be judged as one). ``expect``: "single" | "both". ``timing``:
    ``burst_timing`` rows; ``stragglers``: its per-node summary. ``requests``: the aligned log's
    requests (reference clock) or None. ``series``: each node's ``NodeSeries`` (the series
    method) or ``cluster_map.SummaryView`` (map and reduce: 1 ms only where the summary kept
    it, NaN elsewhere). ``span_ns``: the common span (reference clock). ``summaries``: the
    nodes' ``cluster_map.NodeSummary`` (map and reduce). ``failed``: {host: reason} of the
    captures that could not be read or placed (counted CANNOT JUDGE; the rest is judged).
    """

    run_set: RunSet
    nodes: pd.DataFrame
    verdict: str
    failing: list[str]
    expect: str
    expect_reason: str
    timing: pd.DataFrame
    stragglers: pd.DataFrame
    requests: pd.DataFrame | None
    series: list[NodeSeries]
    span_ns: tuple[int, int]
    verdicts: dict[str, Any] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)
    summaries: list | None = None
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        return self.run_set.warnings


def cluster_summary_series(paths, *, requests: str | os.PathLike | None = None,
                           request_format: str | None = None, offset_s: float | None = None,
                           reference: str | None = None, refine: bool = True,
                           max_lag_ns: int = DEFAULT_MAX_LAG_NS, warn_ns: int = DEFAULT_WARN_NS,
                           expect: str | None = None, tolerance: float = 0.01,
                           capacity_gbps: float | None = None, progress=None,
                           run: int | None = None) -> ClusterResult:
    """Summarise the captures of one run, node by node, holding every node's 1 ms series.

    Loads one capture at a time (memory: one node's readings plus every node's 1 ms series).
    ``expect``: "single" | "both" | None (the verdict each node is held to; None: what most
    nodes show, said in ``expect_reason``). ``capacity_gbps``: the link rate for burst
    detection (default: the reference's highest port rate, else 200).

    Per-node table columns: host, offset_ms, offset_unc_ms, clock_residual_ms, correlation,
    tx_bytes, rx_bytes, twin shares (``share``: "dev 100.0% / dev 0.0%"), main_device,
    verdict, peak_1ms/5ms/100ms/1s_gbps (the link, tx or rx), requests, bytes_per_request (tx,
    over [send, last token]), vs_median_pct, flag, likely.

    Raises ``RunSetError`` (see ``open_run_set``), the loaders' errors naming the file, and
    ``requestlogs.RequestLogError`` for a bad or misplaced request log.
    """
    rs = open_run_set(paths, reference=reference)
    order = [rs.reference] + [i for i in range(len(rs.nodes)) if i != rs.reference]
    series: list[NodeSeries | None] = [None] * len(rs.nodes)
    peaks: dict[str, dict[str, float]] = {}
    log_df = None
    cap_rate = capacity_gbps
    measured: dict[str, tuple[Any, dict]] = {}
    verdicts: dict[str, dict[str, Any]] = {}

    def verdict(host: str, exp: str):
        # both expectations are judged from the one measurement of the node's pass
        if exp not in verdicts.setdefault(host, {}):
            cap_, m_ = measured[host]
            verdicts[host][exp] = judge_emulation(cap_, m_, expect=exp)
        return verdicts[host][exp]

    for step, i in enumerate(order):
        n = rs.nodes[i]
        cap = open_capture(n.path)  # streamed segment by segment (bounded memory)
        n.t_end_ns = cap.t_end_ns
        w = max(cap.interval_ns, MS)
        c = cap.counters
        if not (c["data"] & (c["source"] == "infiniband")).any():
            raise RunSetError(f"{n.path} ({n.host}): no RDMA data counters "
                              "(port_xmit_data/port_rcv_data)")
        try:
            got = node_pass(cap, w, measure=True)
        except ValueError as exc:
            raise RunSetError(f"{n.path} ({n.host}): {exc}") from exc
        series[i], peaks[n.host] = got.series, got.peaks
        measured[n.host] = (cap, got.measure)
        if i == rs.reference:
            if cap_rate is None:
                rates = port_rates_gbps(cap.meta)
                cap_rate = max(rates.values()) if rates else 200.0
            if requests is not None:
                log = align(read_request_log(requests, format=request_format, run=run), cap,
                            offset_s=offset_s)
                log_df = log.ok.copy()
                # what the log's reading and placing said (failed rows, an anchored estimate), for the CLI
                log_df.attrs["notes"] = [*log.notes, *filter(None, [log.alignment_note()])]
        del cap, got
        if progress:
            progress(step + 1, len(order), n.host)
    align_run_set(rs, series, refine=refine, max_lag_ns=max_lag_ns, warn_ns=warn_ns,
                  capacity_gbps=cap_rate)
    lo, hi = rs.common_span_ns()
    # expectation: the user's, else what most nodes show
    reason = f"expecting {'one interface' if expect == 'single' else 'both twins'} (given)"
    if expect is None:
        def looks_single(v) -> bool:  # >= 99 % of the RDMA bytes on one device
            sh = v.devices["share"] if len(v.devices) else pd.Series(dtype=float)
            return bool((sh >= 0.99).any())

        singles = sum(looks_single(verdict(h, "single")) for h in measured)
        expect = "single" if singles * 2 > len(measured) else "both"
        what = "emulated (one twin)" if expect == "single" else "using both twins"
        reason = (f"{singles} of {len(measured)} nodes sent >= 99 % on one interface, so the "
                  f"run is taken as {what}; give --expect-single or --expect-both to say what "
                  "was intended")
    rows = []
    for i, n in enumerate(rs.nodes):
        s = series[i]
        v = verdict(n.host, expect)
        devs = v.devices
        share = " / ".join(f"{d} {100 * x:.1f}%" if np.isfinite(x) else f"{d} n/a"
                           for d, x in devs["share"].items()) if len(devs) else ""
        span = n.from_ref(np.array([lo, hi], dtype=np.int64))
        tx = float(np.diff(s.cum_at(span, "tx"))[0])
        rx = float(np.diff(s.cum_at(span, "rx"))[0])
        row = {"host": n.host, "offset_ms": n.offset_ns / MS,
               "offset_unc_ms": None if n.offset_unc_ns is None else n.offset_unc_ns / MS,
               "clock_residual_ms": None if n.residual_ns is None else n.residual_ns / MS,
               "correlation": n.correlation,
               **node_bytes(tx, rx, s.unknown_in(span[0], span[1], "tx"),
                            s.unknown_in(span[0], span[1], "rx"), s.width_ns),
               "share": share, "main_device": v.main_device, "verdict": v.status,
               **{f"peak_{k.replace(' ', '')}_gbps": val for k, val in peaks[n.host].items()}}
        if log_df is not None and len(log_df):
            t0 = n.from_ref(log_df["t_send_ns"].to_numpy(np.int64))
            t1 = n.from_ref(log_df["t_last_ns"].to_numpy(np.int64))
            by = s.cum_at(t1, "tx") - s.cum_at(t0, "tx")
            inside = (t0 >= s.start_ns) & (t1 <= s.start_ns + (len(s.cum_tx) - 1) * s.width_ns)
            by = np.where(inside, by, np.nan)
            row["requests"] = int(np.isfinite(by).sum())
            row["bytes_per_request"] = float(np.nanmean(by)) if np.isfinite(by).any() else np.nan
            row.update(requests_unknown(row, s.unknown_in(t0, t1, "tx")[inside]))
        rows.append(row)
    nodes = pd.DataFrame(rows)
    if "bytes_per_request" in nodes:
        nodes = symmetry(nodes.set_index("host"), tolerance).reset_index()
    statuses = {n.host: verdict(n.host, expect).status for n in rs.nodes}
    failing = [h for h, st in statuses.items() if st != PASS]
    if not failing:
        verdict = "PASS"
    elif any(statuses[h] == FAIL for h in failing):
        verdict = "FAIL"
    else:
        verdict = "CANNOT JUDGE"
    timing = burst_timing(rs, series, capacity_gbps=cap_rate)
    strag = stragglers(timing)
    return ClusterResult(run_set=rs, nodes=nodes, verdict=verdict, failing=failing,
                         expect=expect, expect_reason=reason, timing=timing, stragglers=strag,
                         requests=log_df, series=series, span_ns=(lo, hi),
                         verdicts={h: verdicts[h][expect] for h in statuses},
                         unmatched=[n.host for n in rs.nodes if n.correlation is not None
                                    and n.correlation < MIN_CORRELATION])


# ----------------------------------------------------------------------------------------------
# Figures' data
# ----------------------------------------------------------------------------------------------


def aligned_rates(res: ClusterResult, *, start_ns: int | None = None, end_ns: int | None = None,
                  width_ns: int = MS, which: str = "tx") -> pd.DataFrame:
    """Return every node's rate (Gb/s) per window on the reference's clock: index window start
    (int64 ns), one column per host. ``which``: "tx" | "rx" | "all". Windows of the common span
    by default; inside a window a node's bytes are taken linear between its own 1 ms edges (the
    node's windows do not fall on the reference's)."""
    lo, hi = res.span_ns
    a = lo if start_ns is None else max(lo, int(start_ns))
    z = hi if end_ns is None else min(hi, int(end_ns))
    grid = np.arange(a, z + 1, width_ns, dtype=np.int64)
    if len(grid) < 2:
        return pd.DataFrame(index=pd.Index([], dtype=np.int64))
    out = {}
    for n, s in zip(res.run_set.nodes, res.series, strict=True):
        out[n.host] = np.diff(s.cum_at(n.from_ref(grid), which)) * 8 / width_ns
    return pd.DataFrame(out, index=pd.Index(grid[:-1], name="t_ns"))


def zoom_window(res: ClusterResult, span_ns: int = 60 * MS) -> tuple[int, int] | None:
    """Return a [start, end) of ``span_ns`` on the reference's clock centred on the burst with
    the most bytes (where all nodes' bursts can be seen to line up), or None without bursts."""
    t = res.timing
    if t is None or len(t) == 0:
        return None
    med = t.groupby("burst")[["start_ns", "end_ns"]].median()
    length = med["end_ns"] - med["start_ns"]
    b = int(length.idxmax())
    mid = int((med.loc[b, "start_ns"] + med.loc[b, "end_ns"]) / 2)
    return mid - span_ns // 2, mid + span_ns // 2


# ----------------------------------------------------------------------------------------------
# Two run sets side by side
# ----------------------------------------------------------------------------------------------

NODE_COMPARE_PEAKS = ("1ms", "100ms", "1s")


def compare_run_sets(a: ClusterResult, b: ClusterResult) -> pd.DataFrame:
    """Compare two run sets' ``cluster_summary`` results node by node, and the set.

    Nodes are matched by host (the sets must hold the same hosts: ``RunSetError`` naming the
    hosts only one side has). Returns one row per host plus a last row ``host`` = "(set)":
    verdict_a/_b (emulation check), tx_bytes_a/_b, peak_<w>_a_gbps/_b_gbps and
    peak_<w>_change_pct for w in 1 ms, 100 ms, 1 s (the set row: the highest node),
    bytes_per_request_a/_b (tx over [send, last token] of the one request log; the set row:
    the median over nodes) and bytes_per_request_change_pct (B vs A, %). Bytes in B, peaks
    in Gb/s. A set row's value is NaN (unknown) when any node's is (a node not read).
    """
    ha, hb = list(a.nodes["host"]), list(b.nodes["host"])
    only_a = [h for h in ha if h not in hb]
    only_b = [h for h in hb if h not in ha]
    if only_a or only_b:
        raise RunSetError("the run sets do not hold the same hosts: "
                          + "; ".join(x for x in (
                              f"only in A: {', '.join(only_a)}" if only_a else "",
                              f"only in B: {', '.join(only_b)}" if only_b else "") if x))
    na, nb = a.nodes.set_index("host"), b.nodes.set_index("host").reindex(ha)
    out = pd.DataFrame(index=pd.Index(ha, name="host"))
    out["verdict_a"], out["verdict_b"] = na["verdict"], nb["verdict"]
    out["tx_bytes_a"], out["tx_bytes_b"] = na["tx_bytes"], nb["tx_bytes"]
    for w in NODE_COMPARE_PEAKS:
        col = f"peak_{w}_gbps"
        out[f"peak_{w}_a_gbps"] = na.get(col, np.nan)
        out[f"peak_{w}_b_gbps"] = nb.get(col, np.nan)
    for side, n in (("a", na), ("b", nb)):
        out[f"bytes_per_request_{side}"] = n["bytes_per_request"] if "bytes_per_request" in n \
            else np.nan
    # the set's value is unknown (NaN) when any node's is: a node that could not be read
    # leaves its bytes, peak and bytes per request unknown, and the sum, highest or median of
    # the rest is not the set's
    set_row = {"verdict_a": a.verdict, "verdict_b": b.verdict,
               "tx_bytes_a": float(out["tx_bytes_a"].sum(skipna=False)),
               "tx_bytes_b": float(out["tx_bytes_b"].sum(skipna=False))}
    for w in NODE_COMPARE_PEAKS:
        for side in ("a", "b"):
            c = f"peak_{w}_{side}_gbps"
            set_row[c] = float(out[c].max(skipna=False))
    for side in ("a", "b"):
        c = f"bytes_per_request_{side}"
        set_row[c] = float(out[c].median(skipna=False))
    out.loc["(set)"] = pd.Series(set_row)
    for w in NODE_COMPARE_PEAKS:
        out[f"peak_{w}_change_pct"] = (out[f"peak_{w}_b_gbps"] / out[f"peak_{w}_a_gbps"] - 1) * 100
    out["bytes_per_request_change_pct"] = (out["bytes_per_request_b"]
                                           / out["bytes_per_request_a"] - 1) * 100
    return out.reset_index()
