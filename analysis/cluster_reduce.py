"""The cluster view as map and reduce: plan, run every node's map, judge the set.

``summarize(paths, ...)`` (what ``cluster_summary`` runs by default):

1. **Plan** (driver, manifests only): the run set on its wall clocks (``open_run_set``; a
   capture that is missing, unreadable or of another run is set aside and named), the request
   log aligned on the reference, the pieces the alignment will cross-correlate
   (``cluster_align.alignment_grids``) and the link rate: a ``cluster_map.MapPlan``.
2. **Map**: ``cluster_map.map_node`` per node (one streamed pass each), serially, in a local
   process pool (``engine="local"``, ``jobs`` processes, default the machine's cores) or as Ray
   tasks (``engine="ray"``, ``cluster_ray``). Only summaries come back.
3. **Reduce** (driver): offsets refined from the summaries (``cluster_align``; each node's as
   its summary comes in, ``_Fold``), each node's bytes over the common span and per request at
   its refined offset, verdicts, symmetry, burst timing and stragglers: the
   ``cluster.ClusterResult`` of ``cluster_summary``.

Memory of the driver: the reference's 1 ms pieces (at most ``cluster_align.EXCERPT_NS``), every
node's small parts (burst ends and bursts, request lattice, coarse grid, the 1 ms series near
the span's ends: under 1 MB) and one table row per node; with ``keep_series`` (figures of the
aligned 1 ms rates) every node's pieces too (a few MB per node).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rdmascope.analysis import cluster as C
from rdmascope.analysis.cluster_align import (
    align_node,
    align_summaries,
    align_width,
    alignment_grids,
    timing_from_summaries,
    timing_slots,
)
from rdmascope.analysis.cluster_map import (
    MapPlan,
    NodeSummary,
    SummaryView,
    map_node,
)
from rdmascope.analysis.cluster_ray import connect, locate, run_maps_ray
from rdmascope.analysis.load import port_rates_gbps
from rdmascope.analysis.requestlogs import align, read_request_log
from rdmascope.analysis.stream import open_capture
from rdmascope.analysis.verify import CANNOT_JUDGE, FAIL, PASS, Verdict

from rdmascope.capture import CaptureError, read_manifest
from rdmascope.mappool import default_jobs, start_pool

MS = C.MS


def open_run_set_lenient(paths, *, reference: str | None = None, opened: dict | None = None
                         ) -> tuple[C.RunSet, dict[str, tuple[str, str]]]:
    """``open_run_set`` that sets aside the captures it cannot place instead of refusing the
    set: returns (run set of the rest, {path: (host or path name, reason)}).

    Set aside: a path that is not a readable capture (missing, no/malformed manifest), a
    capture without clock pairs, and a capture that does not overlap the reference's (by the
    wall clocks: of another run). ``opened``: {path: ``CaptureInfo`` or an error string} found
    elsewhere (``cluster_ray.locate``), read instead of the local files. Still raises ``RunSetError`` for two captures of one host, an
    unknown ``reference`` or fewer than two usable captures (naming the set-aside ones).
    """
    bad: dict[str, tuple[str, str]] = {}
    good = []
    manifests: dict[str, dict] = {}

    def manifest(p):
        if opened is None:
            return read_manifest(p)
        got = opened.get(os.fspath(p))
        if got is None:
            raise CaptureError(p, "no such capture on any Ray node")
        if isinstance(got, str):
            raise CaptureError(p, got)
        return got.meta

    for p in paths:
        try:
            m = manifests[os.fspath(p)] = manifest(p)
        except (CaptureError, OSError, ValueError) as exc:
            bad[os.fspath(p)] = (Path(p).name, f"unreadable: {exc}")
            continue
        if not (m.get("clock_pairs") or (m.get("start") or {}).get("realtime_ns") is not None):
            bad[os.fspath(p)] = (str(m.get("host") or Path(p).name),
                                 f"{p}: no (REALTIME, MONOTONIC) clock pairs; cannot place it "
                                 "beside other hosts")
            continue
        good.append(p)

    def too_few():
        said = "; ".join(f"{h}: {r}" for h, r in bad.values())
        return C.RunSetError("a run set needs the captures of at least two hosts"
                             + (f" (set aside: {said})" if said else ""))

    if len(good) < 2:
        raise too_few()
    try:
        return C.open_run_set(good, reference=reference, manifests=manifests), bad
    except C.RunSetError as exc:
        if "do not overlap" not in str(exc):
            raise
    # some captures are of another run: keep those overlapping the reference's
    probe = []
    for p in good:
        m = manifests[os.fspath(p)]
        pairs = m.get("clock_pairs") or [[m["start"]["realtime_ns"], m["start"]["monotonic_ns"]]]
        diffs = sorted(int(r) - int(mo) for r, mo in pairs)
        rm = diffs[len(diffs) // 2]
        start = int((m.get("start") or {}).get("monotonic_ns") or min(x[1] for x in pairs))
        end = C.manifest_end_ns(m) or start
        probe.append((p, str(m.get("host") or Path(p).name), start + rm, end + rm))
    ref_i = 0
    if reference is not None:
        ref_i = next((i for i, x in enumerate(probe) if x[1] == reference), 0)
    _, ref_host, a0, z0 = probe[ref_i]
    keep = []
    for p, host, a, z in probe:
        if min(z, z0) > max(a, a0):
            keep.append(p)
        else:
            bad[os.fspath(p)] = (host, f"{p}: of another run: it and {ref_host}'s "
                                       "capture do not overlap in wall-clock time")
    if len(keep) < 2:
        raise too_few()
    return C.open_run_set(keep, reference=reference, manifests=manifests), bad


def make_plan(rs: C.RunSet, *, capacity_gbps: float, max_lag_ns: int, log_df=None
              ) -> tuple[MapPlan, list[np.ndarray]]:
    """The ``MapPlan`` of a run set and the alignment's grids (see the module docstring)."""
    grids = alignment_grids(rs, max_lag_ns=max_lag_ns)
    w = max(rs.ref.interval_ns, MS)
    lo, hi = rs.common_span_ns()
    # the coarse grid: ~4,000 bins over the longest capture, at least 10 windows
    longest = max(n.t_end_ns - n.t_start_ns for n in rs.nodes)
    coarse = max(10 * w, -(-longest // 4000) // w * w)
    pad = int(max_lag_ns + C.FINE_HALF_NS + 3 * w)
    plan = MapPlan(capacity_gbps=float(capacity_gbps),
                   keep_ref=[(int(g[0]), int(g[-1])) for g in grids],
                   pad_ns=pad, coarse_ns=int(coarse), timing_ref=timing_slots(rs),
                   # the refined span ends move by up to the search range, and each node's
                   # own clock is off its wall-clock mapping by as much again
                   edges_ref=[int(lo), int(hi)], edge_ns=2 * pad + 2 * w)
    if log_df is not None and len(log_df):
        plan.t_send_ns = log_df["t_send_ns"].to_numpy(np.int64)
        plan.t_last_ns = log_df["t_last_ns"].to_numpy(np.int64)
    return plan, grids


def _map_args(rs, plan):
    return [(os.fspath(n.path), plan, int(n.wall_offset_ns), n.host, int(n.t_end_ns))
            for n in rs.nodes]


def _map_star(args):
    return map_node(*args)


def run_maps(rs: C.RunSet, plan: MapPlan, *, engine: str = "local", jobs: int | None = None,
             address: str | None = None, progress: Callable | None = None,
             where: dict | None = None, on_summary: Callable | None = None,
             executor=None) -> list[NodeSummary]:
    """Every node's ``map_node``, in ``rs.nodes`` order. ``engine``: "serial" (this process),
    "local" (a process pool of ``jobs``: ``mappool.start_pool``, or ``executor``, one started
    already, which is left running) or "ray" (``cluster_ray``; ``where``: {path: Ray node id}
    holding each capture, from ``cluster_ray.locate``). ``on_summary(k, summary)``: called as
    each node's summary comes in (node index k), before the next is waited for (the reduce's
    fold: ``_Fold``). The reference's map is submitted first, then the longest captures first
    (so the pool's last task is a short one); one task per node."""
    args = _map_args(rs, plan)
    n = len(args)
    order = [rs.reference, *sorted((k for k in range(n) if k != rs.reference),
                                   key=lambda k: -(rs.nodes[k].t_end_ns
                                                   - rs.nodes[k].t_start_ns))]
    if engine == "ray":
        return run_maps_ray(args, address=address, progress=progress, where=where,
                            on_summary=on_summary, order=order)
    jobs = default_jobs() if jobs is None else int(jobs)
    if executor is None and (engine == "serial" or jobs <= 1 or n <= 1):
        out: list[NodeSummary | None] = [None] * n
        for done, k in enumerate(order):
            out[k] = s = map_node(*args[k])
            if on_summary:
                on_summary(k, s)
            del s
            if progress:
                progress(done + 1, n, args[k][3])
        return out  # type: ignore[return-value]
    out: list[NodeSummary | None] = [None] * n
    with contextlib.nullcontext(executor) if executor is not None else \
            start_pool(min(jobs, n)) as ex:
        futs = {ex.submit(_map_star, args[k]): k for k in order}
        done = 0
        for f in as_completed(futs):
            k = futs.pop(f)
            try:
                out[k] = f.result()
            except Exception as exc:  # noqa: BLE001 (a worker that died: that node's failure)
                out[k] = NodeSummary(path=args[k][0], host=args[k][3],
                                     error=f"{args[k][0]}: its map failed ({exc})")
            del f  # the future holds the summary as it came: only ``out`` keeps it
            if on_summary:
                on_summary(k, out[k])
            done += 1
            if progress:
                progress(done, n, args[k][3])
    return out  # type: ignore[return-value]


class _Fold:
    """The reduce's step per node as its summary comes in (``run_maps(on_summary=...)``): its
    clock offset against the reference's (``cluster_align.align_node``; the reference's map is
    submitted first, a node whose summary comes before it waits for it), then, unless
    ``keep_series``, the summary's alignment pieces are dropped. The driver so holds the
    reference's pieces and every node's small parts (edges, bursts, request lattice, coarse
    grid), not every node's pieces at once; with ``keep_series`` (figures of the aligned 1 ms
    rates) it keeps them all."""

    def __init__(self, rs: C.RunSet, grids, *, refine: bool, keep_series: bool,
                 max_lag_ns: int):
        self.grids, self.ref, self.refine = grids, rs.reference, refine
        self.keep_series, self.max_lag_ns = keep_series, max_lag_ns
        self.w = align_width(rs)
        self.wall = [int(n.wall_offset_ns) for n in rs.nodes]
        self.align = refine and sum(len(g) for g in grids) >= 10
        self.answers: dict[int, dict] = {}
        self.waiting: dict[int, NodeSummary] = {}
        self.ref_s: NodeSummary | None = None
        self.ref_v: SummaryView | None = None

    def __call__(self, k: int, s: NodeSummary) -> None:
        if s.error is not None:
            return
        if not self.align:
            self._shrink(s)
        elif k == self.ref:
            self.ref_s, self.ref_v = s, SummaryView(s)
            for j in sorted(self.waiting):
                self._align(j, self.waiting[j])
            self.waiting.clear()
        elif self.ref_s is None:
            self.waiting[k] = s
        else:
            self._align(k, s)

    def _align(self, k: int, s: NodeSummary) -> None:
        self.answers[k] = align_node(self.ref_v, self.ref_s, SummaryView(s), s, self.wall[k],
                                     self.grids, w=self.w, max_lag_ns=self.max_lag_ns)
        self._shrink(s)

    def _shrink(self, s: NodeSummary) -> None:
        if not self.keep_series:
            s.pieces = []

    def finish(self) -> None:
        """Every summary is in: the reference's pieces are no longer needed either."""
        if self.ref_s is not None:
            self._shrink(self.ref_s)
        self.ref_s = self.ref_v = None


def _failed_verdict(reason: str) -> Verdict:
    return Verdict(ok=False, expect="", message=f"not judged: {reason}",
                   devices=pd.DataFrame(), total_bytes=float("nan"), main_device=None,
                   status=CANNOT_JUDGE)


def bytes_per_request(s: NodeSummary, residual_ns: float) -> tuple[int, float]:
    """(requests inside the node's series, mean tx bytes per request) at a residual, from the
    summary's lattice (linear between lattice points)."""
    if s.lattice_ns is None:
        return 0, float("nan")
    r = s.lattice_ns.astype(np.float64)
    cnt = s.req_count
    ok = cnt > 0
    j = int(np.clip(np.round((residual_ns - r[0]) / (r[1] - r[0])), 0, len(r) - 1)) \
        if len(r) > 1 else 0
    if not ok.any() or cnt[j] == 0:
        return int(cnt[j]) if len(cnt) else 0, float("nan")
    mean = np.where(ok, s.req_sum / np.where(ok, cnt, 1), np.nan)
    k = int(np.clip(np.searchsorted(r, residual_ns) - 1, 0, len(r) - 2))
    if ok[k] and ok[k + 1]:
        f = (residual_ns - r[k]) / (r[k + 1] - r[k])
        val = mean[k] + f * (mean[k + 1] - mean[k])
    else:
        val = mean[j]
    return int(cnt[j]), float(val)


def summarize(paths, *, engine: str = "local", address: str | None = None, **kw
              ) -> C.ClusterResult:
    """``cluster.cluster_summary`` as map and reduce (module docstring; same parameters and
    result, plus ``engine``/``jobs``/``address``). A node that cannot be read is named in
    ``ClusterResult.failed`` (host -> reason), counted as CANNOT JUDGE, and the rest is judged.
    With ``engine="ray"`` the Ray connection made here is closed at the end.
    """
    started = False
    if engine == "ray":
        started = connect(address)
    try:
        return _summarize(paths, engine=engine, address=address, **kw)
    finally:
        if started:
            import ray

            ray.shutdown()


def _summarize(paths, *, requests=None, request_format: str | None = None,
              offset_s: float | None = None, reference: str | None = None, refine: bool = True,
              max_lag_ns: int = C.DEFAULT_MAX_LAG_NS, warn_ns: int = C.DEFAULT_WARN_NS,
              expect: str | None = None, tolerance: float = 0.01,
              capacity_gbps: float | None = None, progress=None, run: int | None = None,
              engine: str = "local", jobs: int | None = None, address: str | None = None,
              keep_series: bool = True, executor=None) -> C.ClusterResult:
    """``cluster_summary`` as map and reduce (module docstring; same parameters and
    result, plus ``engine``/``jobs``/``address``). A node that cannot be read is named in
    ``ClusterResult.failed`` (host -> reason), counted as CANNOT JUDGE, and the rest is judged.
    ``keep_series`` False: each node's 1 ms pieces are dropped once it is aligned (``_Fold``;
    ``ClusterResult.series`` then knows the 1 ms bytes only near the span's ends: for a
    caller that draws no aligned rates, as the ``cluster`` command). ``executor``: a pool of map
    workers started already (``mappool.start_pool``) for ``engine="local"``.
    """

    opened = where = None
    if engine == "ray":  # the captures may be on the Ray nodes only: read their manifests there
        opened, where = locate([os.fspath(p) for p in paths], address=address)
    rs, bad = open_run_set_lenient(paths, reference=reference, opened=opened)
    failed: dict[str, str] = {h: r for h, r in bad.values()}
    ref_cap = opened[os.fspath(rs.ref.path)] if opened else open_capture(rs.ref.path)
    cap_rate = capacity_gbps
    if cap_rate is None:
        rates = port_rates_gbps(ref_cap.meta)
        cap_rate = max(rates.values()) if rates else 200.0
    log_df = None
    if requests is not None:
        log = align(read_request_log(requests, format=request_format, run=run), ref_cap,
                    offset_s=offset_s)
        log_df = log.ok.copy()
        # what the log's reading and placing said (failed rows, an anchored estimate), for the CLI
        log_df.attrs["notes"] = [*log.notes, *filter(None, [log.alignment_note()])]
    for n in rs.nodes:  # the captures' own ends (a live capture's last segment)
        if n is rs.ref:
            n.t_end_ns = int(ref_cap.t_end_ns)
    plan, grids = make_plan(rs, capacity_gbps=cap_rate, max_lag_ns=max_lag_ns, log_df=log_df)
    plan.expect = expect
    fold = _Fold(rs, grids, refine=refine, keep_series=keep_series, max_lag_ns=max_lag_ns)
    sums = run_maps(rs, plan, engine=engine, jobs=jobs, address=address, progress=progress,
                    where=where, on_summary=fold,
                    executor=executor if engine == "local" else None)
    fold.finish()
    if sums[rs.reference].error:
        raise C.RunSetError(f"the reference capture could not be read: "
                            f"{sums[rs.reference].error}")
    keep = [i for i, s in enumerate(sums) if s.error is None]
    for i, s in enumerate(sums):
        if s.error is not None:
            failed[rs.nodes[i].host] = s.error
    if len(keep) < 2:
        raise C.RunSetError("fewer than two captures could be read: "
                            + "; ".join(f"{h}: {r}" for h, r in failed.items()))
    ref_host = rs.ref.host
    rs.nodes = [rs.nodes[i] for i in keep]
    sums = [sums[i] for i in keep]
    rs.reference = [n.host for n in rs.nodes].index(ref_host)
    for n, s in zip(rs.nodes, sums, strict=True):
        n.t_end_ns = s.t_end_ns
    views = [SummaryView(s) for s in sums]
    align_summaries(rs, views, sums, grids, refine=refine, max_lag_ns=max_lag_ns,
                    warn_ns=warn_ns, answers={new: fold.answers[old] for new, old in
                                              enumerate(keep) if old in fold.answers})
    lo, hi = rs.common_span_ns()
    by_host = {n.host: s for n, s in zip(rs.nodes, sums, strict=True)}
    reason = f"expecting {'one interface' if expect == 'single' else 'both twins'} (given)"
    if expect is None:
        def looks_single(v) -> bool:
            sh = v.devices["share"] if len(v.devices) else pd.Series(dtype=float)
            return bool((sh >= 0.99).any())

        singles = sum(looks_single(s.verdicts["single"]) for s in sums)
        expect = "single" if singles * 2 > len(sums) else "both"
        what = "emulated (one twin)" if expect == "single" else "using both twins"
        reason = (f"{singles} of {len(sums)} nodes sent >= 99 % on one interface, so the "
                  f"run is taken as {what}; give --expect-single or --expect-both to say what "
                  "was intended")
    rows = []
    approx: list[str] = []
    for n, s, v_ in zip(rs.nodes, sums, views, strict=True):
        v = s.verdicts[expect]
        devs = v.devices
        share = " / ".join(f"{d} {100 * x:.1f}%" if np.isfinite(x) else f"{d} n/a"
                           for d, x in devs["share"].items()) if len(devs) else ""
        span = n.from_ref(np.array([lo, hi], dtype=np.int64))
        ctx, ex_tx = v_.cum_or_coarse(span, "tx")
        crx, ex_rx = v_.cum_or_coarse(span, "rx")
        if not (ex_tx and ex_rx):
            approx.append(n.host)
        row = {"host": n.host, "offset_ms": n.offset_ns / MS,
               "offset_unc_ms": None if n.offset_unc_ns is None else n.offset_unc_ns / MS,
               "clock_residual_ms": None if n.residual_ns is None else n.residual_ns / MS,
               "correlation": n.correlation,
               **C.node_bytes(float(ctx[1] - ctx[0]), float(crx[1] - crx[0]),
                              v_.unknown_in(span[0], span[1], "tx"),
                              v_.unknown_in(span[0], span[1], "rx"), v_.width_ns),
               "share": share, "main_device": v.main_device, "verdict": v.status,
               **{f"peak_{k.replace(' ', '')}_gbps": val for k, val in s.peaks.items()}}
        if log_df is not None and len(log_df):
            cnt, mean = bytes_per_request(s, n.offset_ns - n.wall_offset_ns)
            row["requests"], row["bytes_per_request"] = cnt, mean
            # the requests counted: inside the node's series (as the lattice counts them)
            t0 = n.from_ref(log_df["t_send_ns"].to_numpy(np.int64))
            t1 = n.from_ref(log_df["t_last_ns"].to_numpy(np.int64))
            inside = (t0 >= v_.start_ns) & (t1 <= v_.end_ns)
            row.update(C.requests_unknown(row, v_.unknown_in(t0, t1, "tx")[inside]))
        rows.append(row)
    if approx:
        rs.warnings.append(
            f"bytes over the common span of {', '.join(approx)}: the span's edges fall outside "
            "the 1 ms parts the summary keeps; taken from its coarse grid (linear inside a "
            f"{sums[0].coarse_k * sums[0].width_ns / MS:g} ms bin)")
    nodes = pd.DataFrame(rows)
    if "bytes_per_request" in nodes:
        nodes = C.symmetry(nodes.set_index("host"), tolerance).reset_index()
    verdicts = {n.host: by_host[n.host].verdicts[expect] for n in rs.nodes}
    statuses = {h: v.status for h, v in verdicts.items()}
    for h, r in failed.items():
        verdicts[h] = _failed_verdict(r)
        statuses[h] = CANNOT_JUDGE
        row = {"host": h, "verdict": CANNOT_JUDGE}
        if "flag" in nodes:
            row.update(flag="", likely="")
        nodes = pd.concat([nodes, pd.DataFrame([row])], ignore_index=True)
    failing = [h for h, st in statuses.items() if st != PASS]
    if not failing:
        verdict = "PASS"
    elif any(statuses[h] == FAIL for h in failing):
        verdict = "FAIL"
    else:
        verdict = "CANNOT JUDGE"
    timing = timing_from_summaries(rs, sums, slots=plan.timing_ref)
    strag = C.stragglers(timing)
    res = C.ClusterResult(run_set=rs, nodes=nodes, verdict=verdict, failing=failing,
                          expect=expect, expect_reason=reason, timing=timing, stragglers=strag,
                          requests=log_df, series=views, span_ns=(lo, hi), verdicts=verdicts,
                          unmatched=[n.host for n in rs.nodes if n.correlation is not None
                                     and n.correlation < C.MIN_CORRELATION])
    res.summaries = sums
    res.failed = failed
    return res


def refined_offsets(paths, *, reference: str | None = None, jobs: int | None = None,
                    max_lag_ns: int = C.DEFAULT_MAX_LAG_NS) -> C.RunSet:
    """The run set of ``paths`` with its offsets refined from the nodes' summaries (one
    streamed map per node, on the local pool; no request log): for exports placing every node
    on the reference's clock. Raises ``RunSetError`` as ``open_run_set`` (captures that cannot
    be placed are named, not set aside: an export must hold every capture asked for)."""
    rs = C.open_run_set(paths, reference=reference)
    ref = open_capture(rs.ref.path)
    rates = port_rates_gbps(ref.meta)
    plan, grids = make_plan(rs, capacity_gbps=max(rates.values()) if rates else 200.0,
                            max_lag_ns=max_lag_ns)
    plan.expect = "single"
    sums = run_maps(rs, plan, jobs=jobs)
    bad = [s.error for s in sums if s.error]
    if bad:
        raise C.RunSetError("; ".join(bad))
    for n, s in zip(rs.nodes, sums, strict=True):
        n.t_end_ns = s.t_end_ns
    return align_summaries(rs, [SummaryView(s) for s in sums], sums, grids,
                           max_lag_ns=max_lag_ns)


def worst_first(res: C.ClusterResult) -> list[str]:
    """The hosts of ``res`` worst first: not passing the emulation check, then stragglers or
    slow paths, then by how far their bytes per request and burst starts are off the set's
    median (the order the fleet-size figures keep when they fold or band nodes)."""
    nodes = res.nodes.set_index("host")
    strag = res.stragglers.set_index("host") if len(res.stragglers) else pd.DataFrame()

    def key(h):
        bad = h in res.failing
        found = bool(len(strag) and h in strag.index and strag.at[h, "finding"])
        off = abs(float(nodes.at[h, "vs_median_pct"])) if "vs_median_pct" in nodes and \
            pd.notna(nodes.at[h, "vs_median_pct"]) else 0.0
        late = abs(float(strag.at[h, "late_ms"])) if len(strag) and h in strag.index and \
            pd.notna(strag.at[h, "late_ms"]) else 0.0
        return (not bad, not found, -off, -late)

    return sorted(nodes.index.astype(str), key=key)


def heatmap_rates(res: C.ClusterResult, *, bins: int = 4000) -> tuple[pd.DataFrame, str]:
    """Every node's tx rate on the reference's clock for the nodes x time heatmap, and a
    sentence saying what a value is. 1 ms windows (``cluster.aligned_rates``) when every
    node's summary holds the common span at 1 ms (or the whole-series method ran); else each
    node's coarse grid: the highest 1 ms tx rate of each bin (the bin's start moved by the
    node's offset, rounded to the bin), on up to ``bins`` bins."""
    rates = C.aligned_rates(res, width_ns=MS, which="tx")
    if not res.summaries or not rates.isna().any().any():
        return rates, "the 1 ms tx rate"
    lo, hi = res.span_ns
    s0 = res.summaries[0]
    cw = s0.coarse_k * s0.width_ns
    grid = np.arange(lo - lo % cw, hi, cw, dtype=np.int64)
    out = {}
    for n, s in zip(res.run_set.nodes, res.summaries, strict=True):
        t = s.series_start_ns + np.arange(len(s.coarse_max_tx), dtype=np.int64) * (
            s.coarse_k * s.width_ns) + n.offset_ns
        k = np.round((t - grid[0]) / cw).astype(np.int64)
        v = np.full(len(grid), np.nan)
        ok = (k >= 0) & (k < len(grid))
        v[k[ok]] = s.coarse_max_tx[ok] * 8 / s.width_ns
        out[n.host] = v
    return (pd.DataFrame(out, index=pd.Index(grid, name="t_ns")),
            f"the highest 1 ms tx rate of each {cw / MS:g} ms bin (the run is longer than "
            "the summaries keep at 1 ms)")


def summary_info(res) -> dict[str, Any]:
    """Sizes of what the maps sent back (for benchmarks): nodes, bytes per summary."""
    sums = getattr(res, "summaries", None) or []
    return {"nodes": len(sums), "summary_bytes": [s.nbytes() for s in sums]}


def cluster_summary(paths, *, method: str = "summary", engine: str = "local",
                    jobs: int | None = None, address: str | None = None,
                    **kw) -> C.ClusterResult:
    """Summarise the captures of one run, node by node (see the module docstring).

    ``method``: "summary" (default: ``summarize``, each node mapped to a
    compact summary in one streamed pass, on ``engine`` "local" (a process pool of ``jobs``,
    default the machine's cores), "serial" or "ray" (``address``); memory bounded by the
    summaries) or "series" (``cluster.cluster_summary_series``: every node's whole 1 ms series held,
    the reference the map and reduce is tested against). Other parameters, result and errors:
    ``cluster_summary_series``.
    """
    if method == "series":
        return C.cluster_summary_series(paths, **kw)
    if method != "summary":
        raise ValueError(f"method must be 'summary' or 'series', got {method!r}")
    return summarize(paths, engine=engine, jobs=jobs, address=address, **kw)
