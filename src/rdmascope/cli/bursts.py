"""``rdmascope bursts``: detect bursts on the 1 ms series: table, duty cycle, gaps."""

from __future__ import annotations

import click

from rdmascope.cli.common import check_window_fits
from rdmascope.cli.output import (
    POSITIVE,
    WINDOW,
    check_window_count,
    cli_errors,
    emit,
    format_table,
    link_gbps_option,
    no_intervals_error,
    open_or_fail,
    output_options,
    progress,
    require_readings,
)
from rdmascope.cli.shared import CaptureDirs, run_set_paths
from rdmascope.cli.timerange import grid_origin, time_range, time_range_options


def default_capacity(meta: dict) -> float | None:
    """Return the highest port rate (Gb/s) the devices of a manifest report, or None."""
    from rdmascope.analysis.load import port_rates_gbps

    return max(port_rates_gbps(meta).values(), default=None)


@click.command(help="Detect bursts on the 1 ms series with hysteresis relative to the link "
                    "capacity: burst table (start, end, duration, bytes, peak, mean), duty "
                    "cycle and inter-burst gaps; with --tokens/--hidden/--tp each burst's "
                    "bytes beside one all-reduce's.")
@click.argument("capture", nargs=-1, required=True, type=CaptureDirs())
@time_range_options
@click.option("--capacity", "capacity_gbps", type=POSITIVE, default=None,
              help="Link capacity in Gb/s, the base of --enter and --leave [default: "
                   "--link-gbps, else the highest port rate in the capture (not a lower line "
                   "rate such as an emulated link's or a PCIe-bound twin's), else 200].")
@click.option("--enter", "enter_frac", type=POSITIVE, default=0.25, show_default=True,
              help="A burst starts at this fraction of the capacity.")
@click.option("--leave", "leave_frac", type=POSITIVE, default=0.10, show_default=True,
              help="A burst ends below this fraction of the capacity.")
@click.option("--window", "width_ns", type=WINDOW, default="1ms", show_default=True,
              help="Window width (at least 1us).")
@click.option("--group", type=click.Choice(["none", "twins"]), default="none",
              show_default=True, help="twins: also detect bursts on the summed link.")
@click.option("--tokens", type=click.IntRange(min=1), default=None,
              help="Tokens per forward pass (all-reduce).")
@click.option("--hidden", "hidden_size", type=click.IntRange(min=1), default=None,
              help="Model hidden size.")
@click.option("--bytes-per-value", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--tp", type=click.IntRange(min=1), default=None, help="Tensor-parallel size N.")
@click.option("--limit", type=click.IntRange(min=0), default=40, show_default=True,
              help="Burst rows shown in the human table.")
@click.option("--inspector", "inspector", multiple=True, type=click.Path(exists=True),
              help="NCCL Inspector records (a directory or file, repeatable): each burst gets "
                   "the collectives that overlap it and their expected wire bytes "
                   "(docs/nccl.md).")
@link_gbps_option
@output_options
def command(capture, t_from, t_to, origin_s, capacity_gbps, enter_frac, leave_frac, width_ns, group,
            tokens, hidden_size, bytes_per_value, tp, limit, out, inspector=()):
    capture = run_set_paths(capture)  # a run set directory: its nodes (cli.shared)
    if len(capture) > 1:  # several hosts of one run: once per node (cli.runset)
        from rdmascope.cli.runset import for_each_node

        return for_each_node(command, capture, dict(locals()))
    capture = capture[0]
    from rdmascope.analysis import allreduce_bytes, twin_links
    from rdmascope.analysis.bursts import burst_analysis_capture
    from rdmascope.cli.peaks import segment_span

    for opt, v in (("--enter", enter_frac), ("--leave", leave_frac)):
        if not 0 < v <= 1:  # fractions of the capacity: 50 meant 50 % (0.5)?
            raise click.BadParameter(f"{v:g} is not a fraction of the capacity in (0, 1] "
                                     f"(e.g. 0.25 for 25 %)", param_hint=f"'{opt}'")
    if not leave_frac <= enter_frac:
        raise click.BadParameter(f"{leave_frac:g} must not exceed --enter "
                                 f"({enter_frac:g})", param_hint="'--leave'")
    model = [tokens, hidden_size, tp]
    if any(v is not None for v in model) and not all(v is not None for v in model):
        raise click.UsageError("--tokens, --hidden and --tp go together")
    cap = open_or_fail(capture)
    require_readings(cap, capture)
    start, end = time_range(cap.t_start_ns, t_from, t_to,
                            t_end_ns=cap.t_end_ns if cap.clean_end else None, readings=cap)
    check_window_fits(width_ns, max(cap.t_start_ns, start or cap.t_start_ns),
                      min(cap.t_end_ns, end or cap.t_end_ns), cap.t_start_ns,
                      start is not None or end is not None)
    cap_note = ""
    if capacity_gbps is None:
        from rdmascope.plausibility import current_link_gbps

        capacity_gbps = default_capacity(cap.meta)
        # the thresholds' base: the port rate, not a lower line rate the windows are judged
        # against (an emulated link, a PCIe-bound twin), unless --link-gbps sets every rate
        cap_note = (" (--link-gbps)" if current_link_gbps() is not None else
                    " (the ports' reported rate; --capacity to set it)")
        if capacity_gbps is None:
            capacity_gbps, cap_note = 200.0, " (default; the capture reports no port rate)"
    with cli_errors(str(capture)):
        expected = (allreduce_bytes(tokens, hidden_size, bytes_per_value, tp)
                    if tokens is not None else None)
        groups = twin_links(cap) if group == "twins" else None
        c = cap.counters
        n_series = c[c["data"] & (c["source"] == "infiniband")]["series"].nunique()
        # the windows held in memory at once: about one segment's (the rest streams)
        check_window_count(width_ns, segment_span(cap), n_series=n_series + len(groups or {}),
                           what="one segment of the capture", advice="use a wider window")
        with progress(length=max(cap.rows, 1), label="bursts") as bar:
            try:
                res = burst_analysis_capture(
                    cap, capacity_gbps=capacity_gbps, start_ns=start, end_ns=end,
                    width_ns=width_ns, groups=groups,
                    origin_ns=grid_origin(cap.t_start_ns, origin_s), enter_frac=enter_frac,
                    leave_frac=leave_frac, expected_allreduce=expected,
                    t_ref_ns=cap.t_start_ns, progress=lambda n: bar.update(n),
                    # the table view shows the first bursts: hold no more (flat memory)
                    keep_rows=(limit if out.human and not out.parquet and not inspector
                               else None))
            except ValueError as exc:
                if "no intervals" in str(exc):
                    raise no_intervals_error(capture) from exc
                raise

    from rdmascope.analysis.series import line_rate_lines, line_rates

    lrates = line_rates(cap, groups=groups)  # what over_line_windows are judged against
    if inspector:  # the collective that caused each burst (rdmascope.analysis.nccl)
        from rdmascope.cli.collectives import annotate_or_fail

        res.table = annotate_or_fail(cap, res.table, inspector, str(capture))

    def human():
        click.echo(f"{capture}: capacity {capacity_gbps:g} Gb/s{cap_note}; a burst enters at "
                   f">= {enter_frac * capacity_gbps:g} Gb/s and ends below "
                   f"{leave_frac * capacity_gbps:g} Gb/s ({width_ns / 1e6:g} ms windows)")
        if expected:
            click.echo(f"one all-reduce per node: {expected / 1e6:,.1f} MB "
                       f"(2(N-1)/N x {tokens} tokens x {hidden_size} x {bytes_per_value} B, "
                       f"N={tp})")
        click.echo(format_table(res.summary, floatfmt="{:,.4f}",
                                formats={"duty_cycle": "{:.2%}", "burst_share": "{:.2%}",
                                         "burst_bytes": "{:,.0f}", "total_bytes": "{:,.0f}",
                                         "known_bytes": "{:,.0f}", "unknown_s": "{:,.3f}"}))
        click.echo("")
        t = res.table.drop(columns=["start_ns", "end_ns"], errors="ignore")
        n_all = int(res.summary["n_bursts"].sum()) if len(res.summary) else len(t)
        if n_all:
            more = n_all - min(len(t), limit)
            text = format_table(t.head(limit), floatfmt="{:,.3f}",
                                formats={"bytes": "{:,.0f}", "t_start_s": "{:.4f}",
                                         "duration_s": "{:.4f}", "gap_before_s": "{:.4f}",
                                         "expected_allreduce_bytes": "{:,.0f}"})
            if more > 0:  # as format_table(max_rows=limit) says it, of every burst
                text += (f"\n... {more} more rows (use --csv, --json or --parquet "
                         "for all)")
            click.echo(text)
        else:
            click.echo("no bursts")
        for line in line_rate_lines(lrates):
            click.echo(line)

    emit({"bursts": res.table, "summary": res.summary}, out, human=human,
         meta={"capture": str(capture), **res.params, "t_start_ns": cap.t_start_ns,
               "line_rates": lrates})
