"""The map of the cluster view: one node's capture reduced, in one streamed pass, to a summary.

``map_node(path, plan)`` runs ``cluster.node_pass`` over a capture (segment by segment) and, as
the 1 ms windows stream by, keeps only what the set view needs (``NodeSummary``, picklable, a
few MB whatever the capture's length):

- the emulation verdicts for both expectations (``verify.judge_emulation``), the link's peaks;
- burst **ends** and **markers** (``cluster.burst_ends``, made chunk by chunk: a chunk is cut
  only at a window below the bursts' leave threshold, where a burst can neither start nor
  continue, so each chunk's bursts are those of the whole series);
- the node's own all-reduce bursts with the instants its cumulative tx crosses 5 % and 95 % of
  each burst's bytes (``cluster.burst_timing``'s rule, per node);
- the 1 ms cumulative series only inside the ranges the alignment cross-correlates
  (``MapPlan.keep_ref``: the reference's clock, mapped by the wall-clock offset and padded by the
  search range; ``pieces``, which the reduce may drop once the node is aligned) and, apart
  (``edges``), within ``edge_ns`` of the set's common span's ends by the wall clocks
  (``MapPlan.edges_ref``: the refined ends are within the search range of them) and of the
  capture's own first and last instants (its bytes over the common span are read there);
- a coarse grid (``coarse_ns``) of cumulative bytes and of the highest 1 ms tx per bin (the
  heatmap of a long run);
- the tx bytes per request as a function of the clock residual: on a lattice of residuals
  (``lattice_step_ns``) over +- the search range, the sum over the requests inside the capture
  and their count, so the reduce takes the node's bytes per request at its refined offset
  without the series (linear between lattice points: an error below the lattice step x the
  rate change at the requests' edges, under 0.1 % on the tests' sets).

Memory of the map: one node's streamed pass plus the kept ranges (the alignment's, at most
``cluster_align.EXCERPT_NS``, and four of 2 x ``edge_ns``) at 16 bytes per 1 ms window, 3 x 8
bytes per coarse bin (a fixed count), 40 bytes per burst (bursts in at most
``cluster_align.TIMING_NS`` of the run) and 3 x 8 bytes x the lattice: bounded whatever the
capture's length.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rdmascope.analysis.bursts import detect_bursts
from rdmascope.analysis.cluster import node_pass, unknown_runs, unknown_windows
from rdmascope.analysis.stream import open_capture
from rdmascope.analysis.verify import judge_emulation

from rdmascope.capture import CaptureError

MS = 1_000_000
#: A chunk of the stream handed to the burst detection (windows); cut at a quiet window.
CHUNK_WINDOWS = 60_000
LOOKAHEAD = 16


@dataclass
class MapPlan:
    """What every node's map must know before it starts (the driver makes it from manifests).

    ``capacity_gbps``: link rate for burst detection. ``keep_ref``: [(start, end)] ns on the
    reference's clock kept at 1 ms (the alignment's pieces). ``pad_ns``: how far around them
    (and around each request edge) the node's own clock may be from the wall-clock mapping
    (the refinement's search range plus its fine search). ``edges_ref``: reference-clock
    instants (the common span's ends by the wall clocks) kept at 1 ms within ``edge_ns``, as
    are the capture's first and last ``edge_ns`` (``make_plan``: twice ``pad_ns``, so the
    refined ends, each node's own clock off by up to ``pad_ns``, fall inside). ``coarse_ns``: the coarse grid's width (a multiple of the node's
    window). ``t_send_ns``/``t_last_ns``: the request log on the reference's clock (or None).
    ``lattice_step_ns``: step of the residual lattice of bytes per request. ``expect``:
    the expectation the emulation verdict is judged for ("single" | "both"; None: both, the
    reduce takes what most nodes show). ``timing_ref``: [(start, end)] ns on the reference's
    clock whose bursts (ends and own bursts) are kept, padded by ``pad_ns`` (empty: every burst;
    a long run keeps the slots ``cluster_align.timing_slots`` spreads over it, so a day's
    summary holds a bounded number of bursts).
    """

    capacity_gbps: float
    keep_ref: list[tuple[int, int]] = field(default_factory=list)
    pad_ns: int = 205 * MS
    edges_ref: list[int] = field(default_factory=list)
    edge_ns: int = 420 * MS
    coarse_ns: int = 100 * MS
    t_send_ns: np.ndarray | None = None
    t_last_ns: np.ndarray | None = None
    lattice_step_ns: int = 25_000
    min_bytes: float = 5e6
    marker_gap_ns: int = 50 * MS
    expect: str | None = None
    timing_ref: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class NodeSummary:
    """One node's summary (own clock). See the module docstring; ``error`` (a sentence naming
    the capture) when the node could not be read: the other fields are then empty."""

    path: str
    host: str
    wall_offset_ns: int = 0
    error: str | None = None
    t_start_ns: int = 0
    t_end_ns: int = 0
    interval_ns: int = MS
    width_ns: int = MS
    series_start_ns: int = 0
    n_windows: int = 0
    n_unknown: int = 0
    #: where the tx / rx windows are unknown: (m, 2) int64 [k0, k1) window indices
    unknown_tx: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    unknown_rx: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    peaks: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, Any] = field(default_factory=dict)
    pieces: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)
    edges: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)
    coarse_k: int = 1
    coarse_cum_tx: np.ndarray = field(default_factory=lambda: np.zeros(0))
    coarse_cum_rx: np.ndarray = field(default_factory=lambda: np.zeros(0))
    coarse_max_tx: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0))
    markers: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bursts: dict[str, np.ndarray] = field(default_factory=dict)
    lattice_ns: np.ndarray | None = None
    req_sum: np.ndarray | None = None
    req_count: np.ndarray | None = None
    req_exact: bool = True
    rereads: int = 0
    cost: dict[str, float] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Bytes held by the summary's arrays (what crosses to the reduce)."""
        n = sum(a.nbytes + b.nbytes for _, a, b in (*self.pieces, *self.edges))
        for a in (self.coarse_cum_tx, self.coarse_cum_rx, self.coarse_max_tx, self.ends,
                  self.markers, self.lattice_ns, self.req_sum, self.req_count,
                  self.unknown_tx, self.unknown_rx,
                  *self.bursts.values()):
            n += 0 if a is None else a.nbytes
        return n


class SummaryView:
    """A node's cumulative bytes where its summary knows them at 1 ms (``pieces`` and
    ``edges``), with the
    interface of ``cluster.NodeSeries`` the alignment and the figures use (``cum_at``,
    ``rate_at``), NaN outside the pieces; ``coarse_cum_at`` on the coarse grid everywhere."""

    def __init__(self, s: NodeSummary):
        self.s = s
        self.width_ns = s.width_ns
        self.start_ns = s.series_start_ns
        self.pieces = _merge(list(s.pieces) + list(s.edges))
        self._k0 = np.array([p[0] for p in self.pieces], dtype=np.int64)
        self._k1 = np.array([p[0] + len(p[1]) - 1 for p in self.pieces], dtype=np.int64)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.s.n_windows * self.width_ns

    def cum_at(self, t_ns, which: str = "all") -> np.ndarray:
        """Cumulative bytes ("all" | "tx" | "rx") at own-clock instants, linear inside 1 ms
        windows, held at the first/last edge outside the series (as ``NodeSeries.cum_at``);
        NaN where no piece covers the instant."""
        t = np.asarray(t_ns)
        pos = (t.astype(np.int64) - self.start_ns).astype(np.float64) / self.width_ns
        pos = np.clip(pos, 0.0, float(self.s.n_windows))
        out = np.full(pos.shape, np.nan)
        for (k0, ctx, crx), k1 in zip(self.pieces, self._k1, strict=True):
            inside = (pos >= k0) & (pos <= k1)
            if not inside.any():
                continue
            p = pos[inside] - k0
            k = np.minimum(p.astype(np.int64), len(ctx) - 2) if len(ctx) > 1 else \
                np.zeros(p.shape, np.int64)
            val = 0.0
            for c, w in ((ctx, which in ("all", "tx")), (crx, which in ("all", "rx"))):
                if w:
                    val = val + (c[k] + (p - k) * (c[k + 1] - c[k]) if len(c) > 1
                                 else np.full(p.shape, c[0]))
            out[inside] = val
        return out

    def rate_at(self, grid_ns: np.ndarray, *, tx: bool = False) -> np.ndarray:
        return np.diff(self.cum_at(grid_ns, "tx" if tx else "all"))

    def unknown_in(self, t0_ns, t1_ns, which: str = "tx") -> np.ndarray:
        """How many unknown windows of ``which`` each span [t0, t1) overlaps (as
        ``cluster.NodeSeries.unknown_in``)."""
        return unknown_windows(self.s.unknown_tx if which == "tx" else self.s.unknown_rx,
                               self.start_ns, self.width_ns, t0_ns, t1_ns)

    def coarse_cum_at(self, t_ns, which: str = "all") -> np.ndarray:
        """Cumulative bytes from the coarse grid (linear between its edges: an estimate)."""
        s = self.s
        cw = s.coarse_k * s.width_ns
        e = self.start_ns + np.arange(len(s.coarse_cum_tx), dtype=np.int64) * cw
        e = np.minimum(e, self.end_ns)
        c = {"tx": s.coarse_cum_tx, "rx": s.coarse_cum_rx,
             "all": s.coarse_cum_tx + s.coarse_cum_rx}[which]
        return np.interp(np.asarray(t_ns, dtype=np.float64), e.astype(np.float64), c)

    def cum_or_coarse(self, t_ns, which: str = "all") -> tuple[np.ndarray, bool]:
        v = self.cum_at(t_ns, which)
        bad = np.isnan(v)
        if bad.any():
            v = np.where(bad, self.coarse_cum_at(t_ns, which), v)
        return v, not bool(bad.any())


class _Sink:
    """Receives the node's 1 ms windows in time order (``node_pass(sink=...)``) and makes the
    summary's parts chunk by chunk (see the module docstring)."""

    def __init__(self, plan: MapPlan, wall_offset_ns: int, width_ns: int, t_end_est: int):
        self.plan = plan
        self.w = int(width_ns)
        self.wall = int(wall_offset_ns)
        self.t_end_est = int(t_end_est)
        self.start: int | None = None
        self.k0 = 0  # global index of the buffer's first window
        self.p = 0  # buffer index of the first window not yet processed
        self.tx = np.zeros(0)
        self.rx = np.zeros(0)
        self.c0_tx = 0.0  # cumulative bytes before the buffer's first window
        self.c0_rx = 0.0
        self.pend: list[tuple[np.ndarray, np.ndarray]] = []
        self.pend_n = 0
        self.n = 0
        self.n_unknown = 0
        self.unk: dict[str, list[np.ndarray]] = {"tx": [], "rx": []}
        self.enter = 0.25 * plan.capacity_gbps * 1e9 / 8 * self.w / 1e9  # bytes per window
        self.leave = 0.10 * plan.capacity_gbps * 1e9 / 8 * self.w / 1e9
        self.last_end_all: int | None = None
        self.first_all = True
        self.last_end_tx: float | None = None
        self.ends: list[np.ndarray] = []
        self.markers: list[np.ndarray] = []
        self.bursts: list[dict] = []
        self.pieces: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.edge_pieces: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.tail: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.keep_own = [(a - self.wall - plan.pad_ns, b - self.wall + plan.pad_ns)
                         for a, b in plan.keep_ref]
        self.edge_own = [(e - self.wall - plan.edge_ns, e - self.wall + plan.edge_ns)
                         for e in plan.edges_ref]
        self.coarse_k = max(1, int(plan.coarse_ns) // self.w)
        self.ccum_tx: list[np.ndarray] = [np.zeros(1)]
        self.ccum_rx: list[np.ndarray] = [np.zeros(1)]
        self.cmax: list[np.ndarray] = []
        self.cmax_carry = -np.inf
        self.hist = int(np.ceil(2 * plan.pad_ns / self.w)) + 8
        self.req = _RequestLattice(plan, self.wall, self.t_end_est, self.w) \
            if plan.t_send_ns is not None and len(plan.t_send_ns) else None

    def _in_slots(self, t_own) -> np.ndarray:
        """Whether own-clock instants fall in the timing slots (padded); all True without."""
        t = np.asarray(t_own, dtype=np.float64)
        if not self.plan.timing_ref:
            return np.ones(t.shape, bool)
        ok = np.zeros(t.shape, bool)
        for a, b in self.plan.timing_ref:
            ok |= (t >= a - self.wall - self.plan.pad_ns) & (t < b - self.wall + self.plan.pad_ns)
        return ok

    # ---- input
    def add(self, t, tx, rx, unknown_tx, unknown_rx) -> None:
        if self.start is None:
            self.start = int(t[0])
        elif int(t[0]) != self.start + self.n * self.w:
            raise ValueError("windows must be consecutive and of the given width")
        self.pend.append((np.asarray(tx, np.float64), np.asarray(rx, np.float64)))
        ut, ur = np.asarray(unknown_tx, bool), np.asarray(unknown_rx, bool)
        for d, u in (("tx", ut), ("rx", ur)):
            if u.any():
                self.unk[d].append(unknown_runs(u, self.n))
        self.pend_n += len(t)
        self.n += len(t)
        self.n_unknown += int((ut | ur).sum())
        if len(self.tx) - self.p + self.pend_n >= CHUNK_WINDOWS + LOOKAHEAD:
            self._absorb()
            self._process(final=False)

    def _absorb(self) -> None:
        if self.pend:
            self.tx = np.concatenate([self.tx, *[x[0] for x in self.pend]])
            self.rx = np.concatenate([self.rx, *[x[1] for x in self.pend]])
            self.pend, self.pend_n = [], 0

    # ---- one chunk
    def _cum(self):
        ctx = np.cumsum(np.concatenate([[self.c0_tx], self.tx]))
        crx = np.cumsum(np.concatenate([[self.c0_rx], self.rx]))
        return ctx, crx

    def _process(self, *, final: bool) -> None:
        n = len(self.tx)
        ctx, crx = self._cum()
        allb = np.diff(ctx + crx)  # as cluster.burst_ends: the windows of the cumulative
        if final:
            cut = n
        else:
            lim = n - LOOKAHEAD
            quiet = np.flatnonzero(allb[self.p:lim] < self.leave)
            # a window below the leave threshold: no burst spans it (hysteresis), so the
            # bursts before it are those of the whole series; a run that never rests is cut
            # where it is (said in the summary's notes: no such run in practice)
            cut = self.p + int(quiet[-1]) if len(quiet) else lim
            if cut <= self.p:
                cut = lim
        e = self.start + (self.k0 + np.arange(n + 1, dtype=np.int64)) * self.w
        self._ends(allb, ctx + crx, e, cut, final)
        self._own_bursts(ctx, e, cut, final)
        self._keep(ctx, crx, self.p, cut)
        self._coarse(ctx, crx, self.p, cut)
        if self.req is not None:
            self.req.evaluate(ctx, self.start + self.k0 * self.w, self.w,
                              self.start, final=final,
                              upto_ns=self.start + (self.k0 + n) * self.w)
        if final:
            return
        # keep the history the request edges and the next chunk's context need
        drop = max(0, cut - self.hist)
        self.c0_tx, self.c0_rx = float(ctx[drop]), float(crx[drop])
        self.tx, self.rx = self.tx[drop:], self.rx[drop:]
        self.k0 += drop
        self.p = cut - drop

    def _ends(self, b_all, c, e, cut, final) -> None:
        """``cluster.burst_ends`` over the chunk [p, cut) (same rule, same numbers)."""
        p, w = self.p, self.w
        if cut <= p:
            return
        bd = detect_bursts(pd.Series(b_all[p:cut], index=e[p:cut]), w,
                           capacity_gbps=self.plan.capacity_gbps)
        bd = bd[bd["bytes"] >= self.plan.min_bytes]
        st = bd["start_ns"].to_numpy(np.int64)
        en = bd["end_ns"].to_numpy(np.int64)
        if len(st):
            if self.last_end_all is None:
                first = [float(st[0])] if st[0] - self.start >= self.plan.marker_gap_ns else []
            else:
                first = [float(st[0])] if st[0] - self.last_end_all >= \
                    self.plan.marker_gap_ns else []
            gap = st[1:] - en[:-1]
            self.markers.append(np.concatenate([np.asarray(first, np.float64),
                                                st[1:][gap >= self.plan.marker_gap_ns]
                                                .astype(np.float64)]))
            self.last_end_all = int(en[-1])
        ka = (st - e[0]) // w
        kz = (en - e[0]) // w
        keep = kz - ka >= 2
        ka, kz = ka[keep], kz[keep]
        if len(ka) == 0:
            return
        bb = b_all
        idx = np.concatenate([np.arange(x, y) for x, y in zip(ka, kz, strict=True)])
        starts = np.concatenate([[0], np.cumsum(kz - ka)[:-1]])
        peak = np.maximum.reduceat(bb[idx], starts)
        owner = np.repeat(np.arange(len(ka)), kz - ka)
        kb = np.maximum.reduceat(np.where(bb[idx] >= 0.5 * peak[owner], idx, -1), starts)
        # the whole series' bound (kb + 4 <= windows): global index of kb + 4 <= total windows
        total = self.n if final else (self.k0 + len(bb) + (1 << 40))
        ok = (kb - 1 >= ka) & (self.k0 + kb + 4 <= total) & (kb + 3 < len(bb) + 1)
        kb = kb[ok]
        rel = (e - self.start).astype(np.float64)
        t1, t2, u1, u2 = rel[kb - 1], rel[kb], rel[kb + 2], rel[kb + 3]
        m1 = (c[kb] - c[kb - 1]) / (t2 - t1)
        m2 = (c[kb + 3] - c[kb + 2]) / (u2 - u1)
        good = (m1 > 0) & (m1 > 4 * np.maximum(m2, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = ((c[kb + 2] - m2 * u1) - (c[kb - 1] - m1 * t1)) / (m1 - m2)
        good &= (t >= t2) & (t <= u1)
        got = np.asarray(self.start + t[good], dtype=np.float64)
        self.ends.append(got[self._in_slots(got)])

    def _own_bursts(self, ctx, e, cut, final) -> None:
        """The node's own all-reduce bursts in [p, cut) (tx, ``detect_bursts``) and the
        instants its cumulative tx crosses 5 % / 95 % of each burst's bytes over the burst
        padded by up to 2 ms (never past half-way to a neighbour), as ``burst_timing``."""
        p, w = self.p, self.w
        if cut <= p:
            return
        hi = len(self.tx) if not final else cut
        bd = detect_bursts(pd.Series(self.tx[p:hi], index=e[p:hi]), w,
                           capacity_gbps=self.plan.capacity_gbps)
        bd = bd[bd["bytes"] >= self.plan.min_bytes / 4]
        st = bd["start_ns"].to_numpy(np.int64)
        en = bd["end_ns"].to_numpy(np.int64)
        mine = st < e[cut]
        nxt = np.concatenate([st[1:], [np.iinfo(np.int64).max // 4]])
        prev = np.concatenate([[self.last_end_tx if self.last_end_tx is not None
                                else float(self.start)], en[:-1]]).astype(np.float64)
        st, en, nxt, prev = st[mine], en[mine], nxt[mine], prev[mine]
        if not len(st):
            return
        self.last_end_tx = float(en[-1])
        a = np.maximum(st - 2 * MS, ((st + prev) // 2)).astype(np.int64)
        z = np.minimum(en + 2 * MS, (en + nxt) // 2).astype(np.int64)

        def cum(t):
            pos = (t - e[0]).astype(np.float64) / w
            pos = np.clip(pos, 0.0, len(ctx) - 1.0)
            k = np.minimum(pos.astype(np.int64), len(ctx) - 2)
            return ctx[k] + (pos - k) * (ctx[k + 1] - ctx[k])

        def cross(th):
            k = np.clip(np.searchsorted(ctx, th, side="left"), 1, len(ctx) - 1)
            c0, c1 = ctx[k - 1], ctx[k]
            f = np.divide(th - c0, c1 - c0, out=np.zeros_like(th), where=c1 > c0)
            return e[k - 1] + f * w

        sel = self._in_slots(st)
        st, en, a, z = st[sel], en[sel], a[sel], z[sel]
        if not len(st):
            return
        ca, cz = cum(a), cum(z)
        self.bursts.append({"start_ns": st, "end_ns": en, "bytes": cz - ca,
                            "t_lo": cross(ca + 0.05 * (cz - ca)),
                            "t_hi": cross(ca + 0.95 * (cz - ca))})

    def _keep(self, ctx, crx, p, cut) -> None:
        """Keep the cumulative series at 1 ms inside the alignment's ranges (``pieces``), around
        the planned span ends and the capture's head and (rolling) tail (``edges``)."""
        if cut <= p:
            return
        w = self.w
        t_a = self.start + (self.k0 + p) * w
        t_z = self.start + (self.k0 + cut) * w
        head = (self.start, self.start + self.plan.edge_ns)
        for out, ranges in ((self.pieces, self.keep_own),
                            (self.edge_pieces, [*self.edge_own, head])):
            for a, z in ranges:
                lo, hi = max(a, t_a), min(z, t_z)
                if hi <= lo:
                    continue
                i0 = (lo - self.start) // w - self.k0
                i1 = -((self.start - hi) // w) - self.k0
                i0, i1 = max(i0, p), min(i1, cut)
                if i1 > i0:
                    out.append((self.k0 + i0, ctx[i0:i1 + 1].copy(), crx[i0:i1 + 1].copy()))
        keep_w = int(self.plan.edge_ns // w) + 1
        t0 = max(p, cut - keep_w)
        self.tail.append((self.k0 + t0, ctx[t0:cut + 1].copy(), crx[t0:cut + 1].copy()))
        while len(self.tail) > 1 and sum(len(x[1]) - 1 for x in self.tail[1:]) >= keep_w:
            self.tail.pop(0)

    def _coarse(self, ctx, crx, p, cut) -> None:
        k = self.coarse_k
        g0 = self.k0 + p
        g1 = self.k0 + cut
        # coarse edges (global window indices that are multiples of k) inside (g0, g1]
        first = (g0 // k + 1) * k
        idx = np.arange(first, g1 + 1, k, dtype=np.int64)
        if len(idx):
            self.ccum_tx.append(ctx[idx - self.k0])
            self.ccum_rx.append(crx[idx - self.k0])
        # the highest 1 ms tx per coarse bin
        tx = self.tx[p:cut]
        if len(tx) == 0:
            return
        gi = np.arange(g0, g1)
        b = gi // k
        starts = np.concatenate([[0], np.flatnonzero(np.diff(b)) + 1])
        mx = np.maximum.reduceat(tx, starts)
        mx[0] = max(mx[0], self.cmax_carry)
        if self.cmax and b[0] == self._last_bin:
            self.cmax[-1] = np.concatenate([self.cmax[-1][:-1], [max(self.cmax[-1][-1], mx[0])]])
            mx = mx[1:]
        if len(mx):
            self.cmax.append(mx)
        self._last_bin = int(b[-1])
        self.cmax_carry = -np.inf

    _last_bin = -1

    def finish(self) -> dict[str, Any]:
        self._absorb()
        if self.start is None:
            return {}
        self._process(final=True)
        ctx, crx = self._cum()
        n = self.n
        # the last coarse edge: the series' end (a partial bin)
        if n % self.coarse_k:
            self.ccum_tx.append(ctx[-1:])
            self.ccum_rx.append(crx[-1:])
        out = {"series_start_ns": self.start, "n_windows": n, "n_unknown": self.n_unknown,
               **{f"unknown_{d}": np.concatenate(r) if r else np.zeros((0, 2), np.int64)
                  for d, r in self.unk.items()},
               "pieces": _merge(self.pieces), "edges": _merge(self.edge_pieces + self.tail),
               "coarse_k": self.coarse_k,
               "coarse_cum_tx": np.concatenate(self.ccum_tx),
               "coarse_cum_rx": np.concatenate(self.ccum_rx),
               "coarse_max_tx": np.concatenate(self.cmax) if self.cmax else np.zeros(0),
               "ends": np.concatenate(self.ends) if self.ends else np.zeros(0),
               "markers": np.concatenate(self.markers) if self.markers else np.zeros(0),
               "bursts": {k: np.concatenate([b[k] for b in self.bursts]) if self.bursts
                          else np.zeros(0) for k in ("start_ns", "end_ns", "bytes", "t_lo",
                                                      "t_hi")}}
        if self.req is not None:
            out.update(self.req.result(self.start, self.start + n * self.w))
        return out


def _merge(pieces):
    """Merge overlapping/adjacent pieces (start window index, cum_tx, cum_rx at its edges)."""
    out: list[tuple[int, np.ndarray, np.ndarray]] = []
    for k0, a, b in sorted(pieces, key=lambda p: p[0]):
        if out and k0 <= out[-1][0] + len(out[-1][1]) - 1:
            j0, x, y = out[-1]
            end_old = j0 + len(x) - 1
            end_new = k0 + len(a) - 1
            if end_new > end_old:
                cut = end_old - k0 + 1
                out[-1] = (j0, np.concatenate([x, a[cut:]]), np.concatenate([y, b[cut:]]))
        else:
            out.append((k0, a, b))
    return out


class _RequestLattice:
    """The tx bytes of every request [send, last token] on the node's clock as a function of
    the residual r (own instant = t_ref - wall offset - r), on a lattice of r over +- pad:
    ``sum[j]`` over the requests inside the series at r_j and their ``count[j]``.

    Each edge is evaluated once the stream has passed its band (the lattice's instants); the
    inside test (send >= series start, last token <= series end) is applied per lattice point:
    the send side as it is known from the start, the end side at the finish (the edges of the
    requests that may end past the series are kept until then)."""

    def __init__(self, plan: MapPlan, wall: int, t_end_est: int, w: int):
        step = int(plan.lattice_step_ns)
        half = int(np.ceil(plan.pad_ns / step)) * step
        self.r = np.arange(-half, half + 1, step, dtype=np.int64)
        self.half = half
        self.u0 = plan.t_send_ns.astype(np.int64) - wall
        self.u1 = plan.t_last_ns.astype(np.int64) - wall
        n = len(self.u0)
        # edges: (own instant, request, side); evaluated in order of their band's end
        u = np.concatenate([self.u0, self.u1])
        self.order = np.argsort(u + half, kind="stable")
        self.u = u
        self.nreq = n
        self.next = 0
        self.sum = np.zeros(len(self.r))
        # requests that may end past the series: their send-side values are kept
        self.late = self.u1 + half + 2 * w > t_end_est - 2_000 * MS
        self.kept0: dict[int, np.ndarray] = {}
        self.kept1: dict[int, np.ndarray] = {}
        self.start: int | None = None
        self.w = w

    def evaluate(self, ctx, e0, w, start, *, final: bool, upto_ns: int) -> None:
        self.start = start
        lim = np.inf if final else upto_ns - 2 * w
        while self.next < len(self.order):
            j = self.order[self.next]
            if self.u[j] + self.half > lim:
                break
            self.next += 1
            i, side = (j, 0) if j < self.nreq else (j - self.nreq, 1)
            t = self.u[j] - self.r  # own instants at every lattice point
            pos = (t - e0).astype(np.float64) / w
            # held at the series' first edge before it (as NodeSeries.cum_at)
            pos = np.clip(pos, (start - e0) / w, len(ctx) - 1.0)
            pos = np.maximum(pos, 0.0)
            k = np.minimum(pos.astype(np.int64), len(ctx) - 2)
            val = ctx[k] + (pos - k) * (ctx[k + 1] - ctx[k])
            a = (self.u0[i] - self.r) >= start  # the send inside the series
            if side == 0:
                self.sum -= np.where(a, val, 0.0)
                if self.late[i]:
                    self.kept0[i] = val
            else:
                self.sum += np.where(a, val, 0.0)
                if self.late[i]:
                    self.kept1[i] = val

    def result(self, start: int, end: int) -> dict[str, Any]:
        r = self.r
        exact = True
        s = self.sum.copy()
        lo = self.u0 - start  # a_ij: r <= u0 - start
        hi = self.u1 - end  # b_ij: r >= u1 - end
        cnt = np.zeros(len(r) + 1, np.int64)
        j_hi = np.searchsorted(r, lo, side="right")  # r_j <= lo  -> j < j_hi
        j_lo = np.searchsorted(r, hi, side="left")  # r_j >= hi -> j >= j_lo
        ok = j_hi > j_lo
        np.add.at(cnt, j_lo[ok], 1)
        np.add.at(cnt, j_hi[ok], -1)
        count = np.cumsum(cnt)[:-1]
        # requests ending past the series at some lattice points: take them back out there
        for i in np.flatnonzero(self.u1 - r[0] > end):
            out = (self.u1[i] - r) > end
            a = (self.u0[i] - r) >= start
            if i in self.kept0 and i in self.kept1:
                s -= np.where(out & a, self.kept1[i] - self.kept0[i], 0.0)
            else:
                exact = False
        return {"lattice_ns": r, "req_sum": s, "req_count": count, "req_exact": exact}


def map_node(path: str | os.PathLike, plan: MapPlan, wall_offset_ns: int = 0,
             host: str | None = None, t_end_est_ns: int | None = None) -> NodeSummary:
    """Reduce one node's capture to its ``NodeSummary`` in one streamed pass (module docstring).

    ``NodeSummary.cost``: what the map took where it ran: wall_s, cpu_s (this process's user +
    system time during the map), max_rss_mb (the process's peak RSS so far, ``peak_rss_mb``),
    summary_mb (``NodeSummary.nbytes``: what it sends back), and pid, started and ended (the
    process and its wall clock, ``time.time()``, at the map's start and end: how a pool's
    workers were kept busy).

    Never raises for a bad capture: the summary's ``error`` names the capture and what was
    wrong (missing, not a capture, unreadable segment, no RDMA counters), so the set is still
    judged without it. Picklable in and out (the process pool and Ray run it as is).
    """
    import resource
    import time

    started = time.time()
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    p = Path(path)
    out = NodeSummary(path=str(p), host=host or p.name, wall_offset_ns=int(wall_offset_ns))
    try:
        cap = open_capture(p)
        c = cap.counters
        if not (c["data"] & (c["source"] == "infiniband")).any():
            raise ValueError("no RDMA data counters (port_xmit_data/port_rcv_data)")
        w = max(int(cap.interval_ns), MS)
        sink = _Sink(plan, wall_offset_ns, w, t_end_est_ns or int(cap.t_end_ns))
        got = node_pass(cap, w, measure=True, sink=sink)
        parts = sink.finish()
        verdicts = {e: judge_emulation(cap, got.measure, expect=e)
                    for e in ((plan.expect,) if plan.expect else ("single", "both"))}
    except (CaptureError, OSError, ValueError, KeyError) as exc:
        out.error = f"{p}: {exc}"
        return out
    out.t_start_ns, out.t_end_ns = int(cap.t_start_ns), int(cap.t_end_ns)
    out.interval_ns, out.width_ns = int(cap.interval_ns), w
    out.peaks, out.verdicts, out.rereads = got.peaks, verdicts, got.rereads
    for k, v in parts.items():
        setattr(out, k, v)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out.cost = {"wall_s": time.perf_counter() - t0,
                "cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                "max_rss_mb": peak_rss_mb(), "summary_mb": out.nbytes() / 2**20,
                "pid": os.getpid(), "started": started, "ended": time.time()}
    return out


#: Arrays at least this large are mapped from the kernel and handed back when freed (glibc's
#: ``M_MMAP_THRESHOLD``; ``worker_memory``).
MMAP_THRESHOLD = 2 << 20


def worker_memory(*, arrow_threads: int | None = 1) -> None:
    """Make a map worker's memory follow what it holds, not what it has passed through: Arrow
    allocates from the system allocator (its default mimalloc pool keeps the pages of every
    segment read), and glibc maps arrays of ``MMAP_THRESHOLD`` or more and unmaps them when
    freed (its default threshold rises to the largest array freed so far, after which a
    segment's arrays stay in the heap when the next segment is read), from at most two heaps
    (``M_ARENA_MAX``; one per reader thread otherwise). Measured on one node of the 8-node
    emulated set (docs/cluster.md): a 15-min map's peak RSS ~250-270 -> ~225 MB, 94 s ~186 ->
    ~175 MB, map CPU within noise to +10 %. Process-wide: called where a process runs maps
    (the local pool's workers, the Ray task) and by the ``cluster`` command for its own
    process, the driver, whose summaries come and go as the reduce folds them in (its unpickled
    summaries and alignment temporaries otherwise stay in a thread's heap: 15 min per node
    ~166 -> ~148 MB, 94 s ~141 -> ~140 MB); not by the library call ``cluster_summary``, which
    leaves its caller's process as it is. ``arrow_threads``: Arrow's CPU threads (decoding a
    segment's columns); one in a map worker, which shares the cores with the other workers
    (Arrow's own threads only add switching, and their buffers: map CPU -2 to -8 %, peak
    -5 MB on a 15-min node, three runs each); None leaves them (the ``cluster`` command's own
    process, which maps alone with ``--jobs 1``). Does nothing where either is unavailable."""
    try:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
        if arrow_threads is not None:
            pa.set_cpu_count(arrow_threads)
    except (ImportError, AttributeError):
        pass
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
        libc.mallopt(-8, 2)  # M_ARENA_MAX: Arrow's reader threads share two heaps
    except (OSError, AttributeError):
        pass


def peak_rss_mb() -> float:
    """This process's peak RSS in MB: ``VmHWM`` of /proc/self/status, the high-water mark of
    its own memory since it started its program; else ``ru_maxrss``, which on Linux also holds
    the peak of the process that started it (fork + exec carry it over: a child of a 400 MB
    parent reads >= 400 MB however little it uses)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
