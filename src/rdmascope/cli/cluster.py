"""``rdmascope cluster``: the captures of several hosts of one run, aligned and compared node by node."""

from __future__ import annotations

import math
from pathlib import Path

import click

from rdmascope.cli.output import (
    DURATION_NS,
    OFFSET,
    POSITIVE,
    cli_errors,
    emit,
    format_table,
    link_gbps_note,
    link_gbps_option,
    output_options,
)
from rdmascope.cli.shared import REQUEST_FORMATS, CaptureDirs, find_request_log, run_set_paths
from rdmascope.exitcodes import VERDICT_EXIT as EXIT


def _progress():
    """One stderr line per node read, on a terminal only (a minute for 8 x 10 min captures)."""
    import sys

    if not sys.stderr.isatty():
        return None
    return lambda k, n, host: click.echo(f"read {k}/{n}: {host}", err=True)


def _device_changes(rs) -> dict[str, list[str]]:
    """{host: what its manifest's device_changes say} for the nodes that have any (devices that
    appeared, vanished or returned while recording; ``capture.device_change_texts``)."""
    from rdmascope.capture import CaptureError, device_change_texts, read_manifest

    out = {}
    for n in rs.nodes:
        try:
            texts = device_change_texts(read_manifest(n.path))
        except (CaptureError, OSError):
            continue
        if texts:
            out[n.host] = texts
    return out


@click.command(help="Summarise the captures of several hosts of one run (one capture per "
                    "host, or the one directory holding them): clock offsets, per-node bytes, "
                    "twin shares and emulation verdicts "
                    "(the set passes only if every node does), peaks, bytes per request against "
                    "the set's median, and stragglers or slow links per all-reduce burst. "
                    "Exit 0 PASS, 1 FAIL, 3 CANNOT JUDGE (also when a node's traffic does not "
                    "match the reference's: not one run), 2 usage, 4 a capture or log error.")
@click.argument("captures", nargs=-1, required=True, type=CaptureDirs(exists=False))
@click.option("--requests", "requests_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="The benchmark client's request log (one serves all nodes) "
              "[default: requests.jsonl in a capture directory (its host becomes the "
              "reference), else in the captures' common parent directory].")
@click.option("--format", "request_format", default=None, type=click.Choice(REQUEST_FORMATS),
              help="Request log format (default: detected from the content).")
@click.option("--offset", "offset_s", type=OFFSET, default=None,
              help="Seconds added to the log's times (placing a relative log on the "
                   "reference's CLOCK_MONOTONIC).")
@click.option("--reference", default=None, metavar="HOST",
              help="The host whose CLOCK_MONOTONIC is the set's time axis [default: the host "
                   "whose capture holds the request log, else the first capture's].")
@click.option("--refine/--no-refine", default=True, show_default=True,
              help="Refine each host's clock offset from the traffic (burst ends line up in a "
                   "ring all-reduce); --no-refine trusts the wall clocks (clock pairs) alone.")
@click.option("--max-clock-error", "max_lag", type=DURATION_NS, default="200ms",
              show_default=True, help="How far the hosts' wall clocks may disagree: the "
                                      "search range of the refinement (> 0; --no-refine "
                                      "trusts the wall clocks alone).")
@click.option("--clock-warn", type=DURATION_NS, default="1ms", show_default=True,
              help="Warn when a host's wall clock disagrees with the reference's by more.")
@click.option("--expect-single/--expect-both", "single", default=None,
              help="What every node must show: one interface (emulated link) or both twins "
                   "[default: what most nodes show, said in the output].")
@click.option("--tolerance", type=POSITIVE, default=1.0, show_default=True,
              help="Flag a node whose bytes per request differ from the set's median by more "
                   "than this many %.")
@click.option("--capacity", type=POSITIVE, default=None,
              help="Link rate in Gb/s for burst detection [default: the reference's port rate].")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Nodes mapped at once by the local process pool [default: this machine's "
                   "cores].")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local",
              show_default=True,
              help="Where each node's map (one streamed pass over its capture) runs: a local "
                   "process pool, or Ray tasks on the nodes that hold the captures (optional "
                   "extra: pip install 'rdmascope[ray]').")
@click.option("--address", default=None, metavar="ADDR",
              help="The Ray cluster to use with --engine ray (e.g. auto, or ray://head:10001) "
                   "[default: a local Ray instance on this machine's cores].")
@link_gbps_option
@click.option("--nccl-log", "nccl_log", multiple=True, type=click.Path(exists=True),
              help="NCCL_DEBUG=INFO log(s) of the run (files or directories, repeatable): each "
                   "node's emulation verdict is set beside the log's processes on that host "
                   "(docs/nccl.md); a disagreement makes the set FAIL, a log that cannot "
                   "witness a node CANNOT JUDGE.")
@output_options
def command(captures, requests_path, request_format, offset_s, reference, refine, max_lag,
            clock_warn, single, tolerance, capacity, jobs, engine, address, out, nccl_log=()):
    from rdmascope.capture import CaptureError

    if address is not None and engine != "ray":
        raise click.UsageError("--address names a Ray cluster: give it with --engine ray")
    if engine != "ray":  # with Ray the captures may be on the nodes only (found there)
        for c in captures:
            if not Path(c).exists():
                raise click.BadParameter(f"Directory {c!r} does not exist.",
                                         param_hint="'CAPTURES...'")
    if engine == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            from rdmascope.analysis.cluster_ray import HOW_TO_GET_RAY

            raise click.UsageError(HOW_TO_GET_RAY)

    # a run set directory (as `simulate capture --nodes` writes): every subdirectory is a node,
    # one that is no capture a node named as unreadable; runs/p2/*: the set's files skipped
    captures = run_set_paths(captures)
    if len(captures) < 2:
        raise click.UsageError("give the captures of at least two hosts of one run (or the "
                               "directory that holds one capture per host)")
    from rdmascope.cli.common import given

    if not refine and given("max_lag"):  # the refinement's own option, never silently ignored
        raise click.UsageError("--max-clock-error is the clock refinement's search range: it "
                               "goes with --refine, not --no-refine")
    if max_lag <= 0:  # a search range of nothing is not "no refinement": say which one is meant
        raise click.BadParameter("the refinement's search range must be longer than 0 (e.g. "
                                 "200ms); to trust the wall clocks alone, give --no-refine",
                                 param_hint="'--max-clock-error'")
    caps = list(captures)
    log_note = ""
    if requests_path is None:
        requests_path, holder = find_request_log(caps, reference)
        if requests_path is not None and holder is not None:
            from rdmascope.capture import read_manifest

            with cli_errors(caps[holder]):
                owner = read_manifest(caps[holder]).get("host")
            if reference is not None and owner != reference:
                raise click.UsageError(
                    f"the request log found in {caps[holder]} is {owner}'s (its times may be on "
                    f"{owner}'s clock), not --reference {reference}'s: give --reference {owner}, "
                    "or --requests LOG to say which log")
            reference = owner
            log_note = f" (found in {caps[holder]}, so {reference}'s clock is the axis)"
    expect = None if single is None else ("single" if single else "both")
    # the local pool's workers start now, each importing what a map needs while this process
    # imports the reduce (rdmascope.mappool)
    from rdmascope.mappool import default_jobs, start_pool

    n_jobs = min(jobs or default_jobs(), len(caps))
    pool = start_pool(n_jobs) if engine == "local" and n_jobs > 1 else None
    try:
        from rdmascope.analysis.cluster import RunSetError
        from rdmascope.analysis.cluster_map import worker_memory
        from rdmascope.analysis.cluster_reduce import cluster_summary
        from rdmascope.analysis.requestlogs import RequestLogError

        # this process is the reduce's driver: its memory follows the summaries it holds
        worker_memory(arrow_threads=None)
        try:
            res = cluster_summary(caps, requests=requests_path, request_format=request_format,
                                  offset_s=offset_s, reference=reference, refine=refine,
                                  max_lag_ns=max_lag, warn_ns=clock_warn, expect=expect,
                                  tolerance=tolerance / 100, capacity_gbps=capacity,
                                  progress=_progress(), engine=engine, jobs=jobs,
                                  address=address, executor=pool,
                                  keep_series=False)  # no figures: each node's pieces go
        except RunSetError as exc:
            raise click.ClickException(str(exc)) from exc
        except RequestLogError as exc:
            raise click.ClickException(str(exc)) from exc
        except CaptureError as exc:
            raise click.ClickException(str(exc)) from exc
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
        except RuntimeError as exc:  # cluster_ray.RayUnavailable: Ray missing or unreachable
            raise click.ClickException(str(exc)) from exc
    finally:
        if pool is not None:
            pool.shutdown()
    rs = res.run_set
    lo, hi = res.span_ns
    nodes = res.nodes
    findings = res.stragglers[res.stragglers["finding"] != ""] if len(res.stragglers) else \
        res.stragglers

    # a set whose traffic does not match (the warning above) is not one run: it cannot be
    # judged as one, unless a node already failed its emulation check
    verdict = res.verdict if res.verdict == "FAIL" or not res.unmatched else "CANNOT JUDGE"
    witnesses = {}
    if nccl_log:  # NCCL's own witness per node (rdmascope.cli.nccl)
        from rdmascope.cli.nccl import cluster_witnesses

        witnesses, verdict = cluster_witnesses(rs, res, nccl_log, verdict)

    changes = _device_changes(rs)

    def human():
        unread = (f" ({len(res.failed)} not read: {', '.join(res.failed)})" if res.failed
                  else "")
        click.echo(f"run set: {len(rs.nodes) + len(res.failed)} hosts{unread}, time axis: "
                   f"{rs.ref.host}'s CLOCK_MONOTONIC; all captures read overlap for "
                   f"{(hi - lo) / 1e9:.3f} s")
        click.echo("clocks: " + ("offsets refined from the traffic (burst ends matched across "
                                 "nodes), +- one standard error" if rs.refined
                                 else "wall clocks only (--no-refine)"))
        click.echo(f"requests: {requests_path}{log_note}, {len(res.requests)} requests"
                   if res.requests is not None else
                   "requests: no request log (give --requests for bytes per request)")
        for n in (res.requests.attrs.get("notes", []) if res.requests is not None else []):
            click.echo(f"  note: {n}")
        if link_gbps_note():
            click.echo(link_gbps_note())
        for w in res.warnings:
            click.echo(f"warning: {w}")
        for h, why in res.failed.items():
            click.echo(f"not judged: {h}: {why}")
        for h, texts in changes.items():
            click.echo(f"devices that came and went, {h}: " + "; ".join(texts))
        t = nodes.copy()
        t["tx_MB"] = t.pop("tx_bytes") / 1e6
        t["rx_MB"] = t.pop("rx_bytes") / 1e6
        cols = ["host", "clock_residual_ms", "offset_unc_ms", "tx_MB", "rx_MB", "share",
                "verdict", "peak_1ms_gbps", "peak_5ms_gbps", "peak_100ms_gbps", "peak_1s_gbps"]
        if any(c in t and (t[c] > 0).any() for c in ("tx_unknown_s", "rx_unknown_s")):
            # a node with unknown windows: its bytes are empty, the readable part beside
            t["tx_known_MB"] = t["tx_known_bytes"] / 1e6
            t["rx_known_MB"] = t["rx_known_bytes"] / 1e6
            cols[5:5] = ["tx_known_MB", "rx_known_MB", "tx_unknown_s", "rx_unknown_s"]
        if "bytes_per_request" in t:
            t["MB_per_request"] = t.pop("bytes_per_request") / 1e6
            cols += ["MB_per_request", "vs_median_pct", "flag"]
        click.echo("")
        click.echo(format_table(t[cols], floatfmt="{:,.2f}",
                                formats={"clock_residual_ms": "{:+.3f}",
                                         "offset_unc_ms": "{:.3f}", "vs_median_pct": "{:+.2f}"}))
        click.echo("")
        if res.unmatched and verdict != "FAIL":  # the set is no run: said before the nodes
            click.echo(f"emulation: CANNOT JUDGE the set as one run: the traffic of "
                       f"{', '.join(res.unmatched)} does not match {rs.ref.host}'s (are these "
                       f"captures of the same run?); per node: {res.verdict}"
                       + (f", {', '.join(res.failing)} did not pass" if res.failing else "")
                       + f" ({res.expect_reason})")
            for h in res.failing:
                click.echo(f"  {h}: {res.verdicts[h].message}")
        elif res.verdict == "PASS":
            click.echo(f"emulation: PASS on every node ({res.expect_reason})")
        else:
            click.echo(f"emulation: {res.verdict}: {', '.join(res.failing)} did not pass "
                       f"({res.expect_reason})")
            for h in res.failing:
                click.echo(f"  {h}: {res.verdicts[h].message}")
        for h, w in witnesses.items():
            click.echo(f"NCCL log, {h}: {w.status.upper()}: {w.message.removeprefix('cannot judge: ')}")
        if "flag" in nodes:
            flagged = nodes[nodes["flag"] != ""]
            if len(flagged):
                for _, r in flagged.iterrows():
                    click.echo(f"symmetry: {r['host']} sends {r['vs_median_pct']:+.2f} % "
                               f"bytes per request vs the set's median; likely: {r['likely']}")
            unknown = [str(h) for h, v in zip(nodes["host"], nodes["bytes_per_request"],
                                              strict=True) if not math.isfinite(float(v))]
            if unknown:  # unknown is not 'within': said apart
                click.echo(f"symmetry: bytes per request unknown for {', '.join(unknown)} "
                           "(requests over unknown windows, or none inside its capture)")
            if not len(flagged):
                click.echo(f"symmetry: every {'other ' if unknown else ''}node within "
                           f"{tolerance:g} % of the set's median bytes per request")
        nb = int(res.timing["burst"].nunique()) if len(res.timing) else 0
        click.echo(f"bursts: {nb} all-reduce bursts compared across nodes")
        if len(findings):
            for _, r in findings.iterrows():
                click.echo(f"  {r['host']}: {r['finding']}: starts {r['late_ms']:+.2f} ms vs the "
                           f"median (late in {100 * r['late_share']:.0f} % of {r['bursts']} "
                           f"bursts), length {r['longer_pct']:+.1f} %")
        elif nb:
            click.echo(f"  no straggler or slow link among the {len(rs.nodes)} nodes read: "
                       f"{', '.join(res.failed)} not compared" if res.failed else
                       "  no straggler or slow link: no node starts its bursts 0.3 ms or more "
                       "after the median in 75 % of them, nor runs them 10 % longer")
            st = res.stragglers.dropna(subset=["late_ms"]) if len(res.stragglers) else None
            if st is not None and len(st):
                top = st.loc[st["late_ms"].idxmax()]
                if top["late_ms"] > 0 and top["late_share"] >= 0.5:  # said, not judged
                    click.echo(f"  the latest, {top['host']}, starts {top['late_ms']:+.2f} ms "
                               f"vs the median in {100 * top['late_share']:.0f} % of "
                               f"{top['bursts']} bursts: below the straggler threshold")

    emit({"nodes": nodes, "stragglers": res.stragglers}, out, human=human,
         meta={"captures": caps, "reference": rs.ref.host, "refined": rs.refined,
               "verdict": verdict, "emulation_verdict": res.verdict,
               "unmatched": res.unmatched, "failing": res.failing, "expect": res.expect,
               "expect_reason": res.expect_reason, "warnings": res.warnings,
               "requests": requests_path, "span_ns": [lo, hi], "line_rate": link_gbps_note(),
               "request_log_notes": (res.requests.attrs.get("notes", [])
                                     if res.requests is not None else []),
               "failed": res.failed, "engine": engine, "device_changes": changes,
               "maps": {s.host: s.cost for s in (res.summaries or []) if s.cost},
               **({"nccl_witness": {h: w.to_dict() for h, w in witnesses.items()}}
                  if witnesses else {})})
    ctx = click.get_current_context()
    ctx.exit(EXIT[verdict])
