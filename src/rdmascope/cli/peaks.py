"""``rdmascope peaks``: peak rate per window width, mean and percentiles over a time range."""

from __future__ import annotations

import click

from rdmascope.cli.output import (
    emit,
    format_table,
    load_or_fail,
    output_options,
    progress,
    time_range,
    time_range_options,
)


def _widths(text: str) -> list[int]:
    from rdmascope.cli.common import parse_duration_ns

    try:
        return [parse_duration_ns(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--windows") from exc


@click.command(help="Peak rate at each window width (1 ms, 5 ms, 100 ms, 1 s, whole range), "
                    "the mean and percentiles over a time range: the study's peak-vs-window "
                    "table.")
@click.argument("capture", type=click.Path(exists=True, file_okay=False))
@time_range_options
@click.option("--windows", default="1ms,5ms,100ms,1s", show_default=True,
              help="Comma-separated window widths.")
@click.option("--percentiles", default="50,90,99", show_default=True,
              help="Comma-separated percentiles of the window rates.")
@click.option("--group", type=click.Choice(["none", "twins"]), default="none",
              show_default=True, help="twins: add per-link rows summing the twin devices.")
@click.option("--uncertainty", is_flag=True,
              help="Bound each peak by moving the readings within their timing brackets.")
@click.option("--source", type=click.Choice(["infiniband", "netdev", "all"]),
              default="infiniband", show_default=True)
@output_options
def command(capture, t_from, t_to, windows, percentiles, group, uncertainty, source, out):
    import pandas as pd

    from rdmascope.analysis import byte_intervals, peak_table, twin_links

    widths = _widths(windows)
    try:
        pcts = tuple(float(x) for x in percentiles.split(",") if x.strip())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--percentiles") from exc
    cap = load_or_fail(capture)
    start, end = time_range(cap.t_start_ns, t_from, t_to)
    src = None if source == "all" else source
    try:
        iv = byte_intervals(cap, source=src)
        groups = twin_links(cap) if group == "twins" else None
        if group == "twins" and not groups:
            raise click.ClickException(f"{capture}: no twin devices found to group")
        parts = []
        with progress(widths, label="peaks") as bar:
            for i, w in enumerate(bar):
                t = peak_table(iv, start_ns=start, end_ns=end, windows_ns=(w,), groups=groups,
                               percentiles=pcts, uncertainty=uncertainty,
                               t_ref_ns=cap.t_start_ns)
                parts.append(t if i == len(widths) - 1 else t[t.window != "whole range"])
    except ValueError as exc:
        raise click.ClickException(f"{capture}: {exc}") from exc
    tab = pd.concat(parts, ignore_index=True)
    order = {s: i for i, s in enumerate(dict.fromkeys(tab.series))}
    tab = tab.sort_values(["series", "window_ns"], key=lambda s: s.map(order)
                          if s.name == "series" else s, kind="stable").reset_index(drop=True)

    def human():
        lo = (start if start is not None else int(iv.t0_ns.min()) if len(iv) else 0)
        hi = (end if end is not None else int(iv.t1_ns.max()) if len(iv) else 0)
        click.echo(f"{capture}: {(lo - cap.t_start_ns) / 1e9:.3f} s to "
                   f"{(hi - cap.t_start_ns) / 1e9:.3f} s after capture start; rates in Gb/s")
        cols = ["series", "window", "peak_gbps", "peak_t_s"]
        if uncertainty:
            cols += ["peak_low_gbps", "peak_high_gbps"]
        cols += [c for c in tab.columns if c.startswith("p") and c.endswith("_gbps")
                 and c not in cols] + ["mean_gbps", "n_windows", "n_nan_windows",
                                       "n_gap_windows"]
        click.echo(format_table(tab[cols], floatfmt="{:,.2f}", formats={"peak_t_s": "{:.4f}"}))

    emit({"peaks": tab}, out, human=human,
         meta={"capture": str(capture), "start_ns": start, "end_ns": end,
               "t_start_ns": cap.t_start_ns, "group": group})
