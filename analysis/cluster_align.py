"""The reduce's alignment and burst timing: from the nodes' summaries alone (``cluster_map``).

``align_summaries`` is ``cluster.align_run_set`` on summaries: the burst ends and markers come
from each node's map, and the cross-correlation runs on the pieces of the reference's clock the
maps kept at 1 ms (``MapPlan.keep_ref``; one piece, the whole span ``align_run_set`` uses, for a
run up to ``EXCERPT_NS``; else ``PIECES`` pieces spread over the span). With one piece it makes
the same numbers as ``align_run_set``; ``align_node`` is its step per node (the reduce runs it
as each node's summary comes in) and ``apply_alignment`` sets the offsets and warnings in node
order. ``timing_from_summaries`` is ``cluster.burst_timing``
from each node's own bursts: the set's bursts are the nodes' bursts that overlap on the
reference's clock, each node's start/end its 5 % / 95 % crossing of its own bytes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from rdmascope.analysis.cluster import (
    DEFAULT_MAX_LAG_NS,
    DEFAULT_WARN_NS,
    FINE_HALF_NS,
    FINE_STEP_NS,
    MIN_CORRELATION,
    MS,
    RunSet,
    marker_lag,
    match_residual,
    parabola_peak,
)

#: Longest common span cross-correlated whole; longer runs use PIECES pieces of it.
EXCERPT_NS = 180_000 * MS
PIECES = 12


def alignment_grids(rs: RunSet, *, max_lag_ns: int = DEFAULT_MAX_LAG_NS) -> list[np.ndarray]:
    """The 1 ms grids (reference clock, from the wall-clock offsets) the alignment
    cross-correlates: the grid of ``align_run_set`` when it is at most ``EXCERPT_NS`` long, else
    ``PIECES`` equal pieces spread evenly over it, ``EXCERPT_NS`` in all."""
    lo, hi = rs.common_span_ns()
    w = max(rs.ref.interval_ns if rs.ref.interval_ns > 0 else MS, MS)
    margin = max_lag_ns + FINE_HALF_NS + w
    g0, g1 = lo + margin, hi - margin
    if g1 - g0 < 100 * w:
        g0, g1 = lo, hi
    if g1 - g0 <= EXCERPT_NS:
        return [np.arange(g0, g1 + 1, w, dtype=np.int64)]
    piece = (EXCERPT_NS // PIECES) // w * w
    step = (g1 - g0 - piece) // (PIECES - 1)
    return [np.arange(g0 + k * step, g0 + k * step + piece + 1, w, dtype=np.int64)
            for k in range(PIECES)]


#: Longest common span whose every burst is kept; longer runs keep SLOTS slots of it.
TIMING_NS = 20 * 60_000 * MS
SLOTS = 20


def timing_slots(rs: RunSet) -> list[tuple[int, int]]:
    """The reference-clock ranges whose bursts the summaries keep (``MapPlan.timing_ref``):
    none (every burst) for a common span up to ``TIMING_NS``, else ``SLOTS`` equal slots,
    ``TIMING_NS`` in all, spread evenly over the span (the straggler statistics are medians
    and shares over bursts: a sample of tens of thousands spread over the run)."""
    lo, hi = rs.common_span_ns()
    if hi - lo <= TIMING_NS:
        return []
    slot = TIMING_NS // SLOTS
    step = (hi - lo - slot) // (SLOTS - 1)
    return [(int(lo + k * step), int(lo + k * step + slot)) for k in range(SLOTS)]


def _rates(view, grids, shift) -> np.ndarray:
    return np.concatenate([view.rate_at(g - shift) for g in grids])


def _xcorr_pieces(a_list, b_list, max_lag: int) -> tuple[int, float]:
    """``cluster._xcorr_lag`` over pieces: the correlations of the pieces summed (means taken
    over all pieces together); the same as ``_xcorr_lag`` for one piece."""
    a_all, b_all = np.concatenate(a_list), np.concatenate(b_list)
    ma, mb = a_all.mean(), b_all.mean()
    vals = None
    for a, b in zip(a_list, b_list, strict=True):
        a = a - ma
        b = b - mb
        n = 1 << int(np.ceil(np.log2(len(a) + len(b) + 1)))
        c = np.fft.irfft(np.fft.rfft(a, n) * np.conj(np.fft.rfft(b, n)), n)
        m = min(max_lag, n // 2 - 1)
        v = np.concatenate([c[: m + 1], np.zeros(max_lag - m), np.zeros(max_lag - m),
                            c[n - m:]]) if m < max_lag else \
            np.concatenate([c[: max_lag + 1], c[n - max_lag:]])
        vals = v if vals is None else vals + v
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    i = int(np.argmax(vals))
    a0, b0 = a_all - ma, b_all - mb
    norm = float(np.sqrt((a0 * a0).sum() * (b0 * b0).sum()))
    return int(lags[i]), float(vals[i] / norm) if norm > 0 else 0.0


def _refine_pieces(ref, node, grids, wall_offset_ns: int, *, max_lag_ns: int, blocks: int = 10):
    """``cluster.refine_offset`` over the pieces (identical for one piece)."""
    r = _rates(ref, grids, 0)
    x0 = _rates(node, grids, wall_offset_ns)
    step = int(np.median(np.diff(grids[0])))
    lag, corr = _xcorr_pieces([ref.rate_at(g) for g in grids],
                              [node.rate_at(g - wall_offset_ns) for g in grids],
                              max(1, max_lag_ns // step))
    del x0
    lags = lag * step + np.arange(-FINE_HALF_NS, FINE_HALF_NS + 1, FINE_STEP_NS)
    rc = r - r.mean()
    e = np.cumsum(rc * rc)
    cuts = np.searchsorted(e, e[-1] * np.arange(1, blocks) / blocks) if e[-1] > 0 else []
    bounds = np.concatenate([[0], cuts, [len(r)]]).astype(int)
    per_block = np.empty((len(lags), blocks))
    for j, lg in enumerate(lags):
        x = _rates(node, grids, wall_offset_ns + lg)
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


def align_node(ref_v, ref_s, view, s, wall_offset_ns: int, grids, *, w: int,
               max_lag_ns: int = DEFAULT_MAX_LAG_NS) -> dict:
    """One node's clock offset against the reference's, from the two summaries (the step of
    ``align_summaries`` per node; it needs nothing of the other nodes, so the reduce runs it as
    each node's summary arrives): {"correlation", "residual_ns", "unc_ns", "matched"} (matched:
    the bursts whose ends were matched, None when the cross-correlation decided)."""
    r_list = [ref_v.rate_at(g) for g in grids]
    ml = marker_lag(ref_s.markers, s.markers, wall_offset_ns, max_lag_ns)
    if ml is None:
        lag, corr = _xcorr_pieces(r_list, [view.rate_at(g - wall_offset_ns) for g in grids],
                                  max(1, max_lag_ns // w))
        coarse = float(lag * w)
    else:
        coarse = ml
        r0 = np.concatenate(r_list)
        x = _rates(view, grids, wall_offset_ns + int(round(ml)))
        a0, x0 = r0 - r0.mean(), x - x.mean()
        den = float(np.sqrt((a0 * a0).sum() * (x0 * x0).sum()))
        corr = float((a0 * x0).sum() / den) if den > 0 else 0.0
    del r_list
    matched = None
    m = match_residual(ref_s.ends, s.ends, wall_offset_ns + coarse)
    if m is not None:
        res, se, matched = coarse + m[0], m[1], m[2]
    else:
        res, se, corr = _refine_pieces(ref_v, view, grids, wall_offset_ns,
                                       max_lag_ns=max_lag_ns)
    if not np.isfinite(corr):
        corr = 0.0
    return {"correlation": corr, "residual_ns": res, "unc_ns": se, "matched": matched}


def apply_alignment(rs: RunSet, got: dict[int, dict | None], *, n_grid: int,
                    warn_ns: int = DEFAULT_WARN_NS) -> RunSet:
    """Set each node's refined offset from ``align_node``'s answers ({node index: answer}),
    with the warnings in node order (in place; returns ``rs``)."""
    rs.refined = True
    for i, n in enumerate(rs.nodes):
        if i == rs.reference:
            n.residual_ns, n.offset_unc_ns, n.correlation = 0.0, 0.0, 1.0
            continue
        if n_grid < 10:
            rs.warnings.append(f"{n.host}: the captures overlap too briefly to refine the clock "
                               "offset; kept the wall-clock offset")
            continue
        a = got[i]
        if a["matched"] is not None:
            n.bursts_matched = a["matched"]
        corr, res = a["correlation"], a["residual_ns"]
        n.correlation = corr
        if corr < MIN_CORRELATION:
            rs.warnings.append(
                f"{n.host}: its traffic does not match {rs.ref.host}'s (correlation {corr:.2f} "
                f"< {MIN_CORRELATION}); kept its wall-clock offset, so its timing is only as "
                "good as the wall clocks")
            continue
        n.residual_ns, n.offset_unc_ns = res, a["unc_ns"]
        n.offset_ns = int(round(n.wall_offset_ns + res))
        if abs(res) > warn_ns:
            rs.warnings.append(
                f"{n.host}'s wall clock disagrees with {rs.ref.host}'s by {res / MS:+.2f} ms "
                f"(found from the traffic): NTP/PTP is not keeping the hosts within "
                f"{warn_ns / MS:g} ms; the refined offsets are used")
    return rs


def align_summaries(rs: RunSet, views, summaries, grids, *, refine: bool = True,
                    max_lag_ns: int = DEFAULT_MAX_LAG_NS, warn_ns: int = DEFAULT_WARN_NS,
                    answers: dict[int, dict] | None = None) -> RunSet:
    """``cluster.align_run_set`` from the nodes' summaries (in place; returns ``rs``).

    ``views``: each node's ``cluster_map.SummaryView``; ``summaries``: its ``NodeSummary``
    (burst ends and markers); ``grids``: ``alignment_grids(rs)`` (the pieces the maps kept).
    ``answers``: {node index: ``align_node``'s answer} made already (as the summaries came in);
    then ``views`` and ``summaries`` are not read.
    """
    rs.refined = refine
    if not refine:
        rs.warnings.append("clock refinement is off: the hosts are placed by their wall clocks "
                           "only (as good as NTP/PTP keeps them)")
        return rs
    w = max(rs.ref.interval_ns if rs.ref.interval_ns > 0 else MS, MS)
    n_grid = sum(len(g) for g in grids)
    if answers is None:
        answers = {i: align_node(views[rs.reference], summaries[rs.reference], views[i],
                                 summaries[i], n.wall_offset_ns, grids, w=w,
                                 max_lag_ns=max_lag_ns)
                   for i, n in enumerate(rs.nodes) if i != rs.reference and n_grid >= 10}
    return apply_alignment(rs, answers, n_grid=n_grid, warn_ns=warn_ns)


def align_width(rs: RunSet) -> int:
    """The alignment's window (the reference's sampling interval, at least 1 ms)."""
    return max(rs.ref.interval_ns if rs.ref.interval_ns > 0 else MS, MS)


TIMING_COLUMNS = ["burst", "host", "start_ns", "end_ns", "length_ns", "late_ns", "longer_pct"]


def timing_from_summaries(rs: RunSet, summaries, *, min_bytes: float = 5e6,
                          start_ns: int | None = None, end_ns: int | None = None,
                          slots: list[tuple[int, int]] | None = None) -> pd.DataFrame:
    """Each node's start and length of every all-reduce burst on the reference's clock, from
    the nodes' own bursts (the columns of ``cluster.burst_timing``).

    The set's bursts: the nodes' bursts (reference clock) that overlap, chained; kept when they
    carry at least ``min_bytes`` per node on average and start inside the common span. A node
    with several bursts in one set burst: its first start and last end; a node with none: NaN.
    ``slots``: the ``timing_slots`` the summaries kept bursts in (a set burst counts when its
    first start lies inside one). In numpy over the bursts' arrays (the frame is made once, for
    the answer): a day's set holds tens of thousands of bursts per node.
    """
    lo, hi = rs.common_span_ns()
    lo = lo if start_ns is None else max(lo, start_ns)
    hi = hi if end_ns is None else min(hi, end_ns)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("node", "s", "e", "t_lo", "t_hi",
                                                          "bytes")}
    for k, (n, s) in enumerate(zip(rs.nodes, summaries, strict=True)):
        b = s.bursts
        m = len(b.get("start_ns", ()))
        if not m:
            continue
        off = int(n.offset_ns)
        cols["node"].append(np.full(m, k, np.int64))
        cols["s"].append(np.asarray(b["start_ns"], np.int64) + off)
        cols["e"].append(np.asarray(b["end_ns"], np.int64) + off)
        cols["t_lo"].append(np.asarray(b["t_lo"], np.float64) + off)
        cols["t_hi"].append(np.asarray(b["t_hi"], np.float64) + off)
        cols["bytes"].append(np.asarray(b["bytes"], np.float64))
    if not cols["node"]:
        return pd.DataFrame(columns=TIMING_COLUMNS)
    o = np.argsort(np.concatenate(cols["s"]), kind="stable")
    node, s_, e_, t_lo, t_hi, byt = (np.concatenate(cols.pop(c))[o] for c in
                                     ("node", "s", "e", "t_lo", "t_hi", "bytes"))
    del o
    # chained overlaps: a burst starting before every earlier one has ended joins their group
    reach = np.maximum.accumulate(e_)
    group = np.cumsum(np.concatenate([[True], s_[1:] >= reach[:-1]])) - 1
    del reach, e_
    n_nodes = len(rs.nodes)
    n_groups = int(group[-1]) + 1
    # per (group, node), in that order: first start, last end, bytes
    key, inv = np.unique(group * n_nodes + node, return_inverse=True)
    first = np.full(len(key), np.nan)
    last = np.full(len(key), np.nan)
    nbyt = np.zeros(len(key))
    np.fmin.at(first, inv, t_lo)
    np.fmax.at(last, inv, t_hi)
    np.add.at(nbyt, inv, byt)
    g_of, n_of = key // n_nodes, key % n_nodes
    # per group: bytes over its nodes, first start
    g_byt = np.zeros(n_groups)
    np.add.at(g_byt, g_of, nbyt)
    g_s = np.full(n_groups, np.iinfo(np.int64).max)
    np.minimum.at(g_s, group, s_)
    del node, s_, t_lo, t_hi, byt, group, inv
    inside = (g_s >= lo) & (g_s < hi)
    if slots:
        in_slot = np.zeros(n_groups, bool)
        for a, b in slots:
            in_slot |= (g_s >= a) & (g_s < b)
        inside &= in_slot
    kept = np.flatnonzero((g_byt / n_nodes >= min_bytes) & inside)
    if not len(kept):
        return pd.DataFrame(columns=TIMING_COLUMNS)
    pos = np.full(n_groups, -1, np.int64)
    pos[kept] = np.arange(len(kept))
    st = np.full((n_nodes, len(kept)), np.nan)
    en = np.full((n_nodes, len(kept)), np.nan)
    j = pos[g_of]
    ok = j >= 0
    st[n_of[ok], j[ok]] = first[ok]
    en[n_of[ok], j[ok]] = last[ok]
    length = en - st
    late = st - _median_over_nodes(st)
    with np.errstate(divide="ignore", invalid="ignore"):
        longer = (length / _median_over_nodes(length) - 1) * 100
    return pd.DataFrame({
        "burst": np.tile(np.arange(len(kept), dtype=np.int64), n_nodes),
        "host": np.repeat(np.array([n.host for n in rs.nodes], dtype=object), len(kept)),
        "start_ns": st.ravel(), "end_ns": en.ravel(), "length_ns": length.ravel(),
        "late_ns": late.ravel(), "longer_pct": longer.ravel()})


def _median_over_nodes(x: np.ndarray) -> np.ndarray:
    """Per column (burst), the median of the rows (nodes) that are not NaN, NaN if none: the
    middle value, or the mean of the two middle ones as (a + b) / 2 (pandas' group median)."""
    srt = np.sort(x, axis=0)  # NaN last
    n = (~np.isnan(x)).sum(axis=0)
    cols = np.arange(x.shape[1])
    hi = srt[np.minimum(n // 2, len(x) - 1), cols]
    lo = srt[np.maximum(n // 2 - 1, 0), cols]
    out = np.where(n % 2 == 1, hi, (lo + hi) / 2)
    return np.where(n > 0, out, np.nan)
