"""``rdmascope peaks``: peak rate per window width, mean and percentiles over a time range."""

from __future__ import annotations

import click

from rdmascope.cli.common import given, window_fits
from rdmascope.cli.output import (
    DURATION_NS,
    check_window_count,
    cli_errors,
    emit,
    format_table,
    link_gbps_option,
    no_intervals_error,
    open_or_fail,
    output_options,
    parse_windows,
    progress,
    require_readings,
)
from rdmascope.cli.shared import CaptureDirs, run_set_paths
from rdmascope.cli.timerange import grid_origin, time_range, time_range_options


def segment_span(cap) -> int:
    """The longest time one segment of the capture spans (ns; the capture's span if unknown)."""
    from rdmascope.capture import estimate_size

    _, _, span = estimate_size(cap.path)
    whole = max(cap.t_end_ns - cap.t_start_ns, 1)
    return min(span, whole) if span else whole


def _percentiles(text: str) -> tuple[float, ...]:
    import math

    if not all(x.strip() for x in text.split(",")):  # "50,,99": never silently dropped
        raise click.BadParameter(f"{text!r}: an empty percentile between commas (e.g. "
                                 "50,90,99)", param_hint="'--percentiles'")
    try:
        pcts = tuple(float(x) for x in text.split(","))
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: expected numbers like 50,90,99",
                                 param_hint="'--percentiles'") from exc
    bad = [p for p in pcts if not (math.isfinite(p) and 0 <= p <= 100)]
    if bad:
        raise click.BadParameter(f"{bad[0]:g} is not a percentile between 0 and 100",
                                 param_hint="'--percentiles'")
    return pcts


@click.command(help="Peak rate at each window width (1 ms, 5 ms, 100 ms, 1 s, whole range), "
                    "the mean and percentiles over a time range: the study's peak-vs-window "
                    "table.")
@click.argument("capture", nargs=-1, required=True, type=CaptureDirs())
@time_range_options
@click.option("--windows", default="1ms,5ms,100ms,1s", show_default=True,
              help="Comma-separated window widths (each at least 1us).")
@click.option("--percentiles", default="50,90,99", show_default=True,
              help="Comma-separated percentiles of the window rates (0 to 100).")
@click.option("--group", type=click.Choice(["none", "twins"]), default="none",
              show_default=True, help="twins: add per-link rows summing the twin devices.")
@click.option("--uncertainty", is_flag=True,
              help="Bound each peak by moving each reading's instant within its read bracket "
                   "plus --instant-uncertainty.")
@click.option("--instant-uncertainty", "instant_unc", type=DURATION_NS, default="0.1ms",
              show_default=True,
              help="Each reading's timing uncertainty beyond its read bracket (the adapter "
                   "updates its counters every ~0.1-0.2 ms; docs/method.md 'The sampler'), added to "
                   "the bracket's half-width: bounds the peaks with --uncertainty and decides "
                   "which windows are over line rate; at most the capture's sampling interval.")
@click.option("--source", type=click.Choice(["infiniband", "netdev", "all"]),
              default="infiniband", show_default=True)
@link_gbps_option
@output_options
def command(capture, t_from, t_to, origin_s, windows, percentiles, group, uncertainty, instant_unc,
            source, out):
    capture = run_set_paths(capture)  # a run set directory: its nodes (cli.shared)
    if len(capture) > 1:  # several hosts of one run: once per node (cli.runset)
        from rdmascope.cli.runset import for_each_node

        return for_each_node(command, capture, dict(locals()))
    capture = capture[0]

    from rdmascope.analysis import twin_links
    from rdmascope.analysis.peaks import (
        peak_table_capture,
        peak_table_uncertainty,
        window_label,
    )

    widths = parse_windows(windows, "--windows")
    pcts = _percentiles(percentiles)
    cap = open_or_fail(capture)
    require_readings(cap, capture)
    if instant_unc > cap.interval_ns:
        from rdmascope.cli.output import format_duration

        raise click.BadParameter(
            f"{format_duration(instant_unc)} is longer than the capture's sampling interval "
            f"({format_duration(cap.interval_ns)}); a reading's instant is uncertain by about "
            "0.1-0.2 ms (docs/method.md 'The sampler'), give at most the interval",
            param_hint="'--instant-uncertainty'")
    start, end = time_range(cap.t_start_ns, t_from, t_to,
                            t_end_ns=cap.t_end_ns if cap.clean_end else None, readings=cap,
                            source=None if source == "all" else source)
    src = None if source == "all" else source
    with cli_errors(str(capture)):
        # each source grouped apart, as `rdmascope rates` does (netdev links: "(netdev)")
        groups = twin_links(cap, source=src) if group == "twins" else None
        if group == "twins" and not groups:
            raise click.ClickException(f"{capture}: no twin devices found to group")
        c = cap.counters
        sel = c[c["data"] & ((c["source"] == src) if src else c["data"])]
        n_series = sel["series"].nunique() + len(groups or {})
        # the windows held in memory at once: about one segment's (the rest streams)
        span = segment_span(cap)  # every segment's footer: read once, not once per width
        for w in widths:
            check_window_count(w, span, n_series=n_series, option="--windows",
                               what="one segment of the capture",
                               advice="use a wider window")
        with progress(length=max(cap.rows, 1), label="peaks") as bar:
            try:
                tab = peak_table_capture(cap, start_ns=start, end_ns=end, windows_ns=widths,
                                         groups=groups, source=src, percentiles=pcts,
                                         origin_ns=grid_origin(cap.t_start_ns, origin_s),
                                         t_ref_ns=cap.t_start_ns,
                                         progress=lambda n: bar.update(n),
                                         instant_unc_ns=instant_unc)
            except ValueError as exc:
                if "no intervals" in str(exc):
                    raise no_intervals_error(capture, f"byte intervals of source {source}"
                                             ) from exc
                raise
        if uncertainty:
            tab = peak_table_uncertainty(cap, tab, groups=groups, source=src,
                                         instant_unc_ns=instant_unc)
    from rdmascope.analysis.series import line_rate_lines, line_rates

    with cli_errors(str(capture)):
        lrates = line_rates(cap, groups=groups) if src != "netdev" else {}
    whole = tab[tab.window == "whole range"]
    lo = int(whole["peak_t_ns"].iloc[0]) if len(whole) else cap.t_start_ns
    hi = lo + int(whole["window_ns"].iloc[0]) if len(whole) else cap.t_end_ns
    order = {s: i for i, s in enumerate(dict.fromkeys(tab.series))}
    tab = tab.sort_values(["series", "window_ns"], key=lambda s: s.map(order)
                          if s.name == "series" else s, kind="stable").reset_index(drop=True)

    impl_lines, impl = [], []
    if (tab["n_nan_windows"] > 0).any():
        # name the windows left empty by physically impossible steps (a wrong rate string)
        from rdmascope.analysis.quality import implausible_lines, implausible_summary
        with cli_errors(str(capture)):
            summ = implausible_summary(cap, width_ns=min(widths),
                                       origin_ns=grid_origin(cap.t_start_ns, origin_s),
                                       start_ns=start, end_ns=end, source=src)
        impl_lines = implausible_lines(summ, window_label(min(widths)))
        impl = summ.reset_index().to_dict(orient="records")

    def human():
        click.echo(f"{capture}: {(lo - cap.t_start_ns) / 1e9:.3f} s to "
                   f"{(hi - cap.t_start_ns) / 1e9:.3f} s after capture start; rates in Gb/s")
        cols = ["series", "window", "peak_gbps", "bound_gbps", "peak_t_s"]
        if uncertainty:
            cols += ["peak_low_gbps", "peak_high_gbps"]
        cols += [c for c in tab.columns if c.startswith("p") and c.endswith("_gbps")
                 and c not in cols] + ["mean_gbps", "n_windows", "n_nan_windows",
                                       "n_gap_windows", "raw_max_gbps", "n_over_line_windows",
                                       "over_line_causes"]
        shown = tab[cols].copy()
        if "at_line_rate" in tab.columns:  # at the bound within the timing uncertainty
            at = tab["at_line_rate"].fillna(False).astype(bool)
            if at.any():
                shown["peak_gbps"] = [f"at line rate ({v:,.2f})" if a else f"{v:,.2f}"
                                      for v, a in zip(tab["peak_gbps"], at, strict=True)]
        click.echo(format_table(shown, floatfmt="{:,.2f}", formats={"peak_t_s": "{:.4f}"}))
        for line in impl_lines:
            click.echo(line)
        for line in line_rate_lines(lrates):
            click.echo(line)
        n_over = int(tab.loc[tab.window != "whole range", "n_over_line_windows"].sum())
        click.echo("peak_gbps: the highest window consistent with physics (never gap-spread, "
                   "partly covered or over line rate, never above bound_gbps, the lowest "
                   "physical bound of its path: 'at line rate' where the window sits at it "
                   "within its timing uncertainty); raw_max_gbps: the highest of all. "
                   + (f"{n_over} window(s) exceed the line rate by more than their timing "
                      "uncertainty allows (over_line_causes: the likely cause)." if n_over
                      else "No window exceeds the line rate beyond its timing uncertainty."))

    # a width longer than the range has no whole window (its rows say '-'): said, not refused
    # (several widths, the default ones include 1 s: longer than a short capture is no
    # mistake there; rates, bursts, export and plot refuse their one --window)
    for w in widths if given("windows") else ():
        why = window_fits(w, max(cap.t_start_ns, start or cap.t_start_ns),
                          min(cap.t_end_ns, end or cap.t_end_ns), cap.t_start_ns,
                          start is not None or end is not None)
        if why is not None:
            click.echo(f"note: {why}: no whole {window_label(w)} window fits, so its rows have "
                       "no peak ('-'); the 'whole range' row is the rate over all of it",
                       err=True)
    emit({"peaks": tab}, out, human=human,
         meta={"capture": str(capture), "start_ns": start, "end_ns": end,
               "t_start_ns": cap.t_start_ns,
               "origin_ns": grid_origin(cap.t_start_ns, origin_s) or cap.t_start_ns,
               "group": group, "implausible": impl, "line_rates": lrates,
               "instant_unc_ns": instant_unc if uncertainty else None})
