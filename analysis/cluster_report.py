"""The HTML report of a run set (the captures of several hosts of one run).

``write_cluster_report(captures, out_dir, ...)`` runs ``cluster_reduce.cluster_summary`` and renders, with
the single-run report's renderer (``report.render_report``): the set's verdicts (emulation on every
node, symmetry of bytes per request, stragglers/slow links, clock warnings), the nodes x time
heatmap of 1 ms rates with the requests' prefill and decode marked, a zoom where every node's
bursts line up, and the per-node, clock and straggler tables (also as CSV).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
from rdmascope.analysis import cluster as C
from rdmascope.analysis.cluster_reduce import cluster_summary, heatmap_rates, worst_first
from rdmascope.analysis.report import (
    ReportContent,
    ReportFigure,
    ReportSection,
    ReportTable,
    Verdict,
    render_report,
)

MS = 1_000_000


def clock_details(warnings: list[str]) -> str:
    """The per-host clock warnings as one sentence, each host's part once, separated by '; '.

    Each warning ends in the same advice (': NTP/PTP is not keeping the hosts within ...'), which
    the verdict's headline and first sentence already give; joined as they were, the warnings ran
    into each other ('... the refined offsets are used spark-03's wall clock ...').
    """
    parts = [w.split(": NTP/PTP", 1)[0].strip().rstrip(".;") for w in warnings]
    return "; ".join(parts) + "." if parts else ""


def is_run_set(captures: Sequence[str | os.PathLike]) -> bool:
    """True when ``captures`` are two or more captures of distinct hosts that overlap in time
    (one run recorded on several nodes), as opposed to runs of one host to compare. A path
    that is no readable capture, or a capture of another run, beside at least two that are one
    run does not make them runs to compare: it is a node the cluster view names as not read
    (``cluster_reduce.open_run_set_lenient``)."""
    from rdmascope.analysis.cluster_reduce import open_run_set_lenient

    if len(captures) < 2:
        return False
    try:
        open_run_set_lenient(captures)
    except (C.RunSetError, Exception):  # noqa: BLE001 (a bad capture is reported by the caller)
        return False
    return True


def build_cluster_report(res: C.ClusterResult, *, title: str | None = None) -> ReportContent:
    """Turn a ``ClusterResult`` into the report's content (figures drawn, tables formatted)."""
    from rdmascope.analysis.figures import figure_of, plot_cluster_heatmap, plot_cluster_zoom

    rs = res.run_set
    lo, hi = res.span_ns
    content = ReportContent(
        title=title or f"rdmascope cluster report: {len(rs.nodes)} nodes of one run",
        subtitle=f"time axis: {rs.ref.host}'s CLOCK_MONOTONIC; all captures overlap for "
                 f"{(hi - lo) / 1e9:.3f} s")
    if res.verdict == "PASS":
        content.verdicts.append(Verdict(f"Emulation check: PASS on all {len(rs.nodes)} nodes",
                                        "ok", res.expect_reason))
    else:
        content.verdicts.append(Verdict(
            f"Emulation check: {res.verdict}: {', '.join(res.failing)}",
            "fail" if res.verdict == "FAIL" else "warn",
            " ".join(f"{h}: {res.verdicts[h].message}" for h in res.failing)
            + f" ({res.expect_reason})"))
    from rdmascope.analysis.nccl.report import cluster_witness_lines

    for line in cluster_witness_lines(res):  # each node's NCCL log in <capture>/nccl/, if any
        content.verdicts.append(Verdict(*line))
    nodes = res.nodes
    if "flag" in nodes:
        flagged = nodes[nodes["flag"] != ""]
        if len(flagged):
            for _, r in flagged.iterrows():
                content.verdicts.append(Verdict(
                    f"{r['host']} sends {r['vs_median_pct']:+.2f} % bytes per request vs the "
                    "set's median", "warn", f"Likely: {r['likely']}."))
        else:
            content.verdicts.append(Verdict(
                "Every node sends the same bytes per request (within the tolerance)", "ok",
                "As a ring all-reduce must: each node sends 2(N-1)/N of every block."))
    found = res.stragglers[res.stragglers["finding"] != ""] if len(res.stragglers) else \
        res.stragglers
    for _, r in found.iterrows():
        content.verdicts.append(Verdict(
            f"{r['host']}: {r['finding']}", "warn",
            f"Its bursts start {r['late_ms']:+.2f} ms vs the set's median (late in "
            f"{100 * r['late_share']:.0f} % of {r['bursts']} bursts) and last "
            f"{r['longer_pct']:+.1f} % vs the median length."))
    if len(res.stragglers) and not len(found):
        content.verdicts.append(Verdict(
            "No straggler or slow link" + (f" among the {len(rs.nodes)} nodes read"
                                           if res.failed else ""), "ok",
            f"{res.stragglers['bursts'].max()} all-reduce bursts compared node by node"
            + (f"; {', '.join(res.failed)} not read, not compared." if res.failed else ".")))
    clock = [w for w in res.warnings if "wall clock disagrees" in w]
    if clock:
        worst = nodes["clock_residual_ms"].abs().max()
        content.verdicts.append(Verdict(
            f"Clocks: {len(clock)} of {len(rs.nodes) - 1} hosts' wall clocks disagree with "
            f"{rs.ref.host}'s by more than the warning threshold (up to {worst:.2f} ms)", "warn",
            "NTP/PTP is not keeping the hosts together; the offsets found from the traffic are "
            "used. " + clock_details(clock)))
    for w in res.warnings:
        if w not in clock:
            content.verdicts.append(Verdict("Clocks", "warn", w))
    resid = nodes["clock_residual_ms"].abs().max() if "clock_residual_ms" in nodes else None
    content.cards = [
        ("nodes", str(len(rs.nodes) + len(res.failed)), f"reference {rs.ref.host}"
         + (f"; not read: {', '.join(res.failed)}" if res.failed else "")),
        ("emulation", res.verdict, "every node" if res.verdict == "PASS"
         else ", ".join(res.failing)),
        ("wall clocks apart", "n/a" if resid is None or pd.isna(resid) else f"{resid:.2f} ms",
         "largest disagreement with the reference (from the traffic)"
         if rs.refined else "refinement off"),
        ("requests", "none" if res.requests is None else str(len(res.requests)),
         "one log, on the client's clock"),
    ]
    order = worst_first(res)
    many = len(rs.nodes) > 40
    rates, what = heatmap_rates(res)
    if len(rates):
        ax = plot_cluster_heatmap(rates, requests=res.requests, origin_ns=lo, order=order)
        folded = getattr(ax, "rdmascope_folded", 0)
        content.figures.append(ReportFigure(
            "cluster-heatmap", "Every node's tx rate, on one time axis",
            figure_of(ax), f"Rows are nodes; colour is {what} (the highest of each pixel "
            "column when the run is longer than the figure is wide). The strip above marks "
            "each request's prefill (grey) and decode (blue)."
            + (f" Nodes worst first (not passing, stragglers, furthest off the median); the "
               f"last row is the median of the {folded} other nodes." if folded else "")))
    zw = C.zoom_window(res)
    z = None
    if zw is not None:
        z = C.aligned_rates(res, start_ns=zw[0], end_ns=zw[1], width_ns=MS, which="tx")
        if z.isna().any().any() and len(res.timing):  # outside the 1 ms the summaries keep
            med = res.timing.groupby("burst")[["start_ns", "end_ns"]].median()
            for b in (med["end_ns"] - med["start_ns"]).sort_values(ascending=False).index[:200]:
                mid = int((med.loc[b, "start_ns"] + med.loc[b, "end_ns"]) / 2)
                zz = C.aligned_rates(res, start_ns=mid - 30 * MS, end_ns=mid + 30 * MS,
                                     width_ns=MS, which="tx")
                if len(zz) and not zz.isna().any().any():
                    zw, z = (mid - 30 * MS, mid + 30 * MS), zz
                    break
    if z is not None and len(z):
        ax = plot_cluster_zoom(z, origin_ns=zw[0], order=order)
        content.figures.append(ReportFigure(
            "cluster-zoom", "Zoom: the nodes' bursts line up", figure_of(ax),
            "60 ms around one of the longest all-reduce bursts, 1 ms tx rate of every node "
            "after the clock alignment."
            + (f" {len(rs.nodes)} nodes: the grey band spans every node's rate per window "
               "(lowest to highest), the dark line is their median, the coloured lines the "
               "worst nodes (not passing, stragglers, furthest off the median)."
               if many or len(rs.nodes) > 8 else "")))
    t = nodes.copy()
    keep = ["host", "offset_unc_ms", "clock_residual_ms", "tx_bytes", "rx_bytes", "share",
            "verdict", "peak_1ms_gbps", "peak_5ms_gbps", "peak_100ms_gbps", "peak_1s_gbps",
            "requests", "bytes_per_request", "vs_median_pct", "flag"]
    if any(c in t and (t[c] > 0).any() for c in ("tx_unknown_s", "rx_unknown_s")):
        # a node with unknown windows: its bytes are empty, the readable part beside
        keep[5:5] = ["tx_known_bytes", "rx_known_bytes", "tx_unknown_s", "rx_unknown_s"]
    t = t[[c for c in keep if c in t]]
    # named with the _bytes suffix so the table shows MB (and tables/nodes.csv keeps bytes); as
    # 'bytes_per_request' its bytes stood under the header 'tx per request (MB)'
    t = t.rename(columns={"bytes_per_request": "tx_per_request_bytes"})
    content.sections.append(ReportSection(
        "Per node", [ReportTable(t, name="nodes", headers={
            "offset_unc_ms": "clock offset +- (ms)",
            "clock_residual_ms": "wall clock vs reference (ms)",
            "share": "share per twin",
            "tx_per_request_bytes": "tx per request (MB)",
            "vs_median_pct": "vs median (%)"})],
        note="Bytes over the span all captures share; peaks are the node's link (twins summed, "
             "tx or rx) over its capture; bytes per request are tx over [send, last token].",
        name="cluster"))
    if len(res.stragglers):
        content.sections.append(ReportSection(
            "Bursts: stragglers and slow links", [ReportTable(res.stragglers, name="stragglers")],
            note="Per all-reduce burst, each node's start (first 5 % of its bytes) and length "
                 "(5 % to 95 %) against the set's median; 'late_share'/'longer_share': the "
                 "share of bursts in which the node was later/longer than the median.",
            name="cluster"))
    content.captures = [(n.host, [("capture", str(n.path)),
                                  ("offset to reference", f"{n.offset_ns / 1e9:+.6f} s"),
                                  ("matched burst ends", str(n.bursts_matched))])
                        for n in rs.nodes]
    return content


def write_cluster_report(captures: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *,
                         requests: str | os.PathLike | None = None, offset_s: float | None = None,
                         reference: str | None = None, refine: bool = True,
                         title: str | None = None, embed: bool = True,
                         progress: Callable[[str], None] | None = None,
                         run: int | None = None,
                         verdicts_out: list[str] | None = None) -> Path:
    """Summarise a run set and write ``out_dir/report.html`` (+ figures/, tables/).

    ``verdicts_out``: a list that receives the set's verdict word as ``rdmascope cluster`` gives
    it ("PASS", "FAIL", or "CANNOT JUDGE", also when a node's traffic does not match the
    reference's). Raises what ``cluster_reduce.cluster_summary`` raises and OSError.
    """
    say = progress or (lambda _m: None)
    say(f"cluster: {len(captures)} captures")
    res = cluster_summary(list(captures), requests=requests, offset_s=offset_s,
                            reference=reference, refine=refine, run=run,
                            progress=lambda k, n, host: say(f"node {k}/{n}: {host}"))
    content = build_cluster_report(res, title=title)
    if verdicts_out is not None:
        verdicts_out.append(res.verdict if res.verdict == "FAIL" or not res.unmatched
                            else "CANNOT JUDGE")
    return render_report(content, out_dir, embed=embed, progress=say)
