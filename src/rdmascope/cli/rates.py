"""``rdmascope rates``: re-bin a capture's counters to rates at any window width.

Reads the capture segment by segment (``rdmascope.analysis.iter_rebin_capture``), so memory stays
bounded on day-long captures; a progress bar on stderr shows the readings processed.
"""

from __future__ import annotations

import contextlib
import os
import sys

import click

from rdmascope.cli.common import check_window_fits
from rdmascope.cli.output import (
    WINDOW,
    FiniteFloat,
    check_window_count,
    cli_errors,
    emit,
    format_table,
    link_gbps_option,
    output_options,
    progress,
)
from rdmascope.cli.shared import CaptureDirs, run_set_paths
from rdmascope.cli.timerange import no_windows_error, time_range, time_range_options


def _capture_end_ns(m: dict, rows: int) -> int:
    """Return the capture's end (monotonic ns): the stop record, else an estimate from its rows.

    Without a stop record (recorder killed) the span is estimated as rows / counters x interval
    (a lower bound when the capture has gaps); used only to size the window count.
    """
    t0 = int(m["start"]["monotonic_ns"])
    stop = (m.get("stop") or {}).get("monotonic_ns") if isinstance(m.get("stop"), dict) else None
    if isinstance(stop, int) and stop > t0:
        return stop
    n_counters = max(len(m.get("counters") or []), 1)
    return t0 + rows // n_counters * int(m["interval_ns"])


def _in_range(b, q, c, start: int | None, end: int | None, width_ns: int):
    """Keep the windows (rows of ``b``, ``q`` and the ``Coverage`` frames ``c``, indexed by
    window start ns) that overlap [start, end); either bound may be None (open)."""
    import numpy as np

    idx = b.index.to_numpy()
    keep = np.ones(len(idx), bool)
    if start is not None:
        keep &= idx + width_ns > start
    if end is not None:
        keep &= idx < end
    if keep.all():
        return b, q, c
    return b[keep], q[keep], type(c)(*(f[keep] for f in c))


def _sliced(b, q, c, lo: int, hi: int | None = None):
    """Rows [lo, hi) of a block's bytes, quality and ``Coverage`` frames."""
    return b.iloc[lo:hi], q.iloc[lo:hi], type(c)(*(f.iloc[lo:hi] for f in c))


def _table(b, q, cov, t0: int, width_ns: int, with_bytes: bool):
    """The rates table of one block: t_s, <series>_gbps [, <series>_bytes,
    <series>_covered_bytes, <series>_covered_s], <series>_quality
    (``analysis.series.window_columns``: the rate over the covered part; a partly covered
    window's bytes unknown, NaN, its covered part's bytes and length beside them)."""
    import pandas as pd

    from rdmascope.analysis.series import window_columns

    # built in one go: column by column fragments the frame with hundreds of devices
    cols = {"t_s": (b.index.to_numpy() - t0) / 1e9}
    for c in b.columns:
        cols.update(window_columns(b, q, cov, c, with_bytes))
    for c in b.columns:
        cols[f"{c}_quality"] = q[c].to_numpy().astype("int8")
    table = pd.DataFrame(cols, index=b.index)
    return table


def _direction_rates(cap, line_rates) -> dict:
    """The line rate of each ``--by direction`` column ({"tx": {gbps, source}, "rx": ...}):
    what the over-line flag judges it against (``overline.line_gbps_of`` of every device's
    series of that direction: the sum over the distinct cables, each at its port rate bounded
    by its twins' PCIe links), never each device's rate (the columns are no device's)."""
    c = cap.counters
    ib = c[c["data"] & (c["source"] == "infiniband")]
    groups = {str(d): list(dict.fromkeys(ib.loc[ib["direction"] == d, "series"]))
              for d in dict.fromkeys(ib["direction"].dropna())}
    rates = line_rates(cap, groups=groups)
    out = {}
    for d, ms in groups.items():
        devs = ", ".join(dict.fromkeys(str(x).rsplit("/", 1)[0] for x in ms))
        r = dict(rates[d])
        r["source"] = f"{r['source']}; the {d} of every device summed ({devs})"
        out[d] = r
    return out


def _without_netdev_sums(lrates: dict, cdf, by: str) -> dict:
    """``lrates`` of ``--by device|direction --source all`` with a column that sums netdev
    statistics too said unknown, as the over-line flag takes it (a netdev has no line rate)."""
    nd = cdf[cdf["data"] & (cdf["source"] == "netdev")]
    mixed = {str(k) for k in nd[by].dropna()}
    return {k: ({"gbps": None, "source": "unknown (the column adds netdev statistics, which "
                 "have no line rate): never judged"} if k in mixed else v)
            for k, v in lrates.items()}


def _two_direction_rates(lrates: dict) -> dict:
    """``line_rates`` ({"<device>/<dir>": {gbps, source}}) as the bound of a ``--by device``
    column, which holds tx + rx: {device: {gbps: tx's + rx's, source: "400 Gb/s (tx+rx), each
    direction 200 Gb/s: port rate"}}, the sum the over-line flag judges it against
    (``overline.line_gbps_of``), never one direction's rate beside a two-direction column."""
    by_dev: dict[str, dict] = {}
    for col, r in lrates.items():
        dev, _, d = col.rpartition("/")
        by_dev.setdefault(dev or col, {})[d] = r
    out = {}
    for dev, dirs in by_dev.items():
        g = [r.get("gbps") for r in dirs.values()]
        if any(x is None for x in g):
            out[dev] = {"gbps": None, "source": "unknown (a direction's rate is unknown): "
                        "never judged"}
            continue
        total = float(sum(g))
        srcs = [str(r.get("source") or "") for r in dirs.values()]
        if len(dirs) == 2 and len(set(srcs)) == 1:
            what = f"each direction {srcs[0]}"
        else:
            what = "; ".join(f"{d} {s}" for d, s in zip(dirs, srcs, strict=True))
        out[dev] = {"gbps": total,
                    "source": f"{round(total, 1):g} Gb/s ({'+'.join(dirs)}), {what}"}
    return out


def _stream_out(capture, width_ns, origin, start, end, by, src, gap_factor, links, with_bytes,
                t0, total, out, t_from=None, t_to=None) -> None:
    """Write the rates as CSV (stdout) and/or Parquet block by block (pyarrow's writers).

    The same rows as the in-memory table: windows of the range, without the leading and
    trailing windows that no series has readings in (runs of such windows are held back until
    a window with readings follows them). Memory: one segment's windows.
    """
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from rdmascope.analysis import QUALITY_EMPTY, OverLineFlagger, iter_rebin_capture
    from rdmascope.analysis.overline_pass import pass_hooks
    from rdmascope.analysis.peaks import link_view
    from rdmascope.analysis.series import link_coverage

    # windows over line rate: the same rule as every command (series.flag_over_line)
    flag = OverLineFlagger(capture, by=by, groups=links or None, source=src,
                           gap_factor=gap_factor)

    def view(b, q, c):
        b, q = link_view(b, q, links, True)
        c = link_coverage(c, links)
        return b, flag(b, q, width_ns, c.covered_ns), c

    state = {"csv": None, "pq": None, "schema": None, "rows": 0, "held": [], "started": False}
    # the Parquet file is written beside its name and renamed when complete: a capture that
    # fails half-way (a corrupted later segment) must not leave a valid-looking, shorter file
    part = None if not out.parquet else os.path.join(
        os.path.dirname(os.path.abspath(out.parquet)),
        f".{os.path.basename(out.parquet)}.part-{os.getpid()}")
    done = False
    sink = sys.stdout.buffer if out.csv else None

    def pq_error(exc: OSError) -> click.ClickException:
        # the user's path, never the hidden temporary one beside it
        why = str(exc).replace(part, out.parquet) if part else str(exc)
        return click.ClickException(f"{out.parquet}: cannot write Parquet ({why})")
    sys.stdout.flush()

    def write(table: pd.DataFrame) -> None:
        if not len(table):
            return
        t = pa.Table.from_pandas(table, preserve_index=True)
        names = ["window_start_ns"] + [c for c in t.column_names if c != "window_start_ns"]
        t = t.select(names)
        if state["schema"] is None:
            state["schema"] = t.schema
            if out.csv:
                sink.write((",".join(names) + "\n").encode())
                state["csv"] = pacsv.CSVWriter(sink, t.schema.remove_metadata(),
                                               write_options=pacsv.WriteOptions(
                                                   include_header=False, quoting_style="none"))
            if out.parquet:
                try:
                    state["pq"] = pq.ParquetWriter(part, t.schema)
                except OSError as exc:
                    raise pq_error(exc) from exc
        t = t.cast(state["schema"])
        if state["csv"] is not None:
            state["csv"].write_table(t.replace_schema_metadata(None))
        if state["pq"] is not None:
            try:
                state["pq"].write_table(t)
            except OSError as exc:
                raise pq_error(exc) from exc
        state["rows"] += len(table)

    try:
        with cli_errors(str(capture)), progress(length=max(total, 1), label="re-binning") as bar:
            for b, q, c in iter_rebin_capture(capture, width_ns, origin_ns=origin, by=by,
                                              start_ns=start, end_ns=end,
                                              source=src, gap_factor=gap_factor,
                                              progress=lambda n: bar.update(n),
                                              coverage=True, **pass_hooks([flag])):
                b, q, c = _in_range(b, q, c, start, end, width_ns)
                if not len(b):
                    continue
                has = ((q & QUALITY_EMPTY) == 0).any(axis=1).to_numpy()
                if not state["started"]:  # leading windows without readings are left out
                    if not has.any():
                        continue
                    first = int(np.argmax(has))
                    (b, q, c), has = _sliced(b, q, c, first), has[first:]
                    state["started"] = True
                # windows after the last one with readings wait for a window with readings
                last = len(has) - int(np.argmax(has[::-1])) if has.any() else 0
                if last:
                    for held in state["held"]:
                        write(_table(*view(*held), t0, width_ns, with_bytes))
                    state["held"] = []
                    write(_table(*view(*_sliced(b, q, c, 0, last)), t0, width_ns, with_bytes))
                if last < len(b):
                    state["held"].append(_sliced(b, q, c, last))
        done = True
    finally:
        if state["csv"] is not None:
            state["csv"].close()
        if state["pq"] is not None:
            try:
                state["pq"].close()
                if done:
                    os.replace(part, out.parquet)
            except OSError as exc:
                if done:  # else the error that stopped the pass is the one to say
                    raise pq_error(exc) from exc
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(part)  # left only when not renamed
    if state["rows"] == 0:
        raise no_windows_error(capture, t_from, t_to)
    if out.parquet:
        click.echo(f"wrote {out.parquet} ({state['rows']} rows)", err=True)


@click.command(help="Re-bin a capture to rates (Gb/s) at any window width, exactly (each "
                    "interval's bytes spread over the windows it overlaps). Flags: G gap-spread, "
                    "N unknown, P partly covered (the rate of its covered part: time without "
                    "readings is unknown, never zero), E no readings, O over line rate.")
@click.argument("capture", nargs=-1, required=True, type=CaptureDirs())
@click.option("--window", "width_ns", type=WINDOW, default="1ms", show_default=True,
              help="Window width (e.g. 1ms, 5ms, 100ms, 1s; at least 1us).")
@time_range_options
@click.option("--group", type=click.Choice(["none", "twins"]), default="none",
              show_default=True, help="twins: add per-link series summing the twin devices "
                                      "of one cable (the twins stay as well).")
@click.option("--by", type=click.Choice(["series", "device", "direction"]), default="series",
              show_default=True, help="Sum counters by this key.")
@click.option("--source", type=click.Choice(["infiniband", "netdev", "all"]),
              default="infiniband", show_default=True,
              help="RDMA port counters, netdev (kernel stack) statistics, or both.")
@click.option("--bytes", "with_bytes", is_flag=True,
              help="Add bytes per window columns: <col>_bytes (empty for a partly covered "
                   "window, flag P: its uncovered part's bytes are unknown), "
                   "<col>_covered_bytes and <col>_covered_s (the covered part).")
@click.option("--gap-factor", type=FiniteFloat(minimum=1.0), default=1.5, show_default=True,
              help="Readings further apart than this many intervals form a gap.")
@click.option("--limit", type=click.IntRange(min=0), default=40, show_default=True,
              help="Rows shown in the human table.")
@link_gbps_option
@output_options
def command(capture, width_ns, t_from, t_to, origin_s, group, by, source, with_bytes,
            gap_factor, limit, out):
    capture = run_set_paths(capture)  # a run set directory: its nodes (cli.shared)
    if len(capture) > 1:  # several hosts of one run: once per node (cli.runset)
        from rdmascope.cli.runset import for_each_node

        return for_each_node(command, capture, dict(locals()))
    capture = capture[0]
    from rdmascope.cli.output import say_capture_state

    say_capture_state(capture)  # being recorded / unclean end: read to the last flushed reading
    import types

    import numpy as np
    import pandas as pd

    from rdmascope.analysis import (
        QUALITY_EMPTY,
        QUALITY_GAP,
        QUALITY_INVALID,
        QUALITY_OVER_LINE,
        QUALITY_PARTIAL,
        OverLineFlagger,
        iter_rebin_capture,
        twin_links,
    )
    from rdmascope.analysis.load import counters_frame
    from rdmascope.analysis.overline_pass import pass_hooks
    from rdmascope.analysis.peaks import link_view
    from rdmascope.analysis.series import link_coverage
    from rdmascope.capture import estimate_size, read_manifest

    if group == "twins" and by != "series":
        raise click.UsageError("--group twins needs --by series")
    src = None if source == "all" else source
    with cli_errors(str(capture)):
        m = read_manifest(capture)
        cdf = counters_frame(m, capture)
        t0 = int(m["start"]["monotonic_ns"])
        total, n_files, seg_span = estimate_size(capture)
        if n_files == 0:
            from rdmascope.analysis.stream import open_capture

            open_capture(capture)  # names a segment the manifest lists and the disk lacks
            raise click.ClickException(f"capture {capture} has no readings (no segment or live "
                                       "file; were its segments removed?)")
        t_end = _capture_end_ns(m, total)
        # --from past the end is refused only against a stop record, never against an estimate
        stop = m.get("stop") if isinstance(m.get("stop"), dict) else {}
        info = None
        if t_from is not None or t_to is not None:  # a range holding none of the readings
            from rdmascope.analysis.stream import open_capture

            info = open_capture(capture)
        start, end = time_range(t0, t_from, t_to,
                                t_end_ns=t_end if stop.get("monotonic_ns") == t_end else None,
                                readings=info, source=src)
        sel = cdf[cdf["data"] & (cdf["source"] == src if src else cdf["data"])]
        links = (twin_links(types.SimpleNamespace(meta=m, counters=cdf), source=src)
                 if group == "twins" else {})
        n_series = (sel[by].nunique() if by != "series" else sel["series"].nunique()) + len(links)
        lo_ns, hi_ns = (t0 if start is None else start), (t_end if end is None else end)
        # one window longer than all of it would be a diluted rate flagged only P: refused
        check_window_fits(width_ns, max(lo_ns, t0), min(hi_ns, t_end), t0,
                          start is not None or end is not None)
        # --csv and --parquet write block by block: only the human table and --json hold
        # every window in memory
        streamed = (out.csv or out.parquet) and not out.json
        if not streamed:
            check_window_count(width_ns, hi_ns - lo_ns, n_series=n_series,
                               what=f"{(lo_ns - t0) / 1e9:g} s to {(hi_ns - t0) / 1e9:g} s",
                               advice="use a wider window, a shorter --from/--to range, or "
                                      "--csv/--parquet (written as they are computed)")
        # the chunked re-binning holds about one segment's windows per counter, whatever the range
        check_window_count(width_ns, min(seg_span or t_end - t0, t_end - t0),
                           n_series=len(sel), what="one segment of the capture",
                           advice="use a wider window (rates re-bins whole segments)")
        # one grid: the capture start unless --origin; --from/--to only select windows
        origin = t0 + int(round(origin_s * 1e9)) if origin_s is not None else t0
        if streamed:
            if group == "twins" and not links:
                raise click.ClickException(f"{capture}: no twin devices found to group")
            _stream_out(capture, width_ns, origin, start, end, by, src, gap_factor, links,
                        with_bytes, t0, total, out, t_from, t_to)
            return
        if group == "twins" and not links:
            raise click.ClickException(f"{capture}: no twin devices found to group")
        # windows over line rate by more than their timing uncertainty allows (the same rule
        # as every command: series.flag_over_line), judged block by block on the pass
        flag = OverLineFlagger(capture, by=by, groups=links or None, source=src,
                               gap_factor=gap_factor)
        blocks_b, blocks_q, blocks_c = [], [], []
        with progress(length=max(total, 1), label="re-binning") as bar:
            for b, q, c in iter_rebin_capture(capture, width_ns, origin_ns=origin, by=by,
                                              start_ns=start, end_ns=end,
                                              source=src, gap_factor=gap_factor,
                                              progress=lambda n: bar.update(n),
                                              coverage=True, **pass_hooks([flag])):
                b, q, c = _in_range(b, q, c, start, end, width_ns)
                # twin links (each source grouped apart: netdev twins get their own
                # "(netdev)" label) beside their members, their over-line bit their own
                b, q = link_view(b, q, links, True)
                c = link_coverage(c, links)
                blocks_b.append(b)
                # a partly covered window judged over line over its covered part, as shown
                blocks_q.append(flag(b, q, width_ns, c.covered_ns))
                blocks_c.append(c)
    if not blocks_b or sum(len(x) for x in blocks_b) == 0:
        raise no_windows_error(capture, t_from, t_to)
    b = pd.concat(blocks_b)
    q = pd.concat(blocks_q)
    cov = type(blocks_c[0])(*(pd.concat(fs) for fs in zip(*blocks_c, strict=True)))
    # drop leading/trailing windows with no readings at all (before the first reading)
    has = ((q & QUALITY_EMPTY) == 0).any(axis=1).to_numpy()
    lo, hi = int(np.argmax(has)), len(has) - int(np.argmax(has[::-1]))
    b, q, cov = _sliced(b, q, cov, lo, hi)
    table = _table(b, q, cov, t0, width_ns, with_bytes)
    flags = np.bitwise_or.reduce(q.to_numpy(), axis=1) if len(q) else np.zeros(0, int)
    impl_lines, impl = [], []
    if len(flags) and (flags & QUALITY_INVALID).any():
        # name the windows left empty by physically impossible steps (a wrong rate string)
        from rdmascope.analysis.quality import implausible_lines, implausible_summary
        with cli_errors(str(capture)):
            summ = implausible_summary(capture, width_ns=width_ns, origin_ns=origin,
                                       start_ns=start, end_ns=end, source=src)
        impl_lines = implausible_lines(summ, f"{width_ns / 1e6:g} ms")
        impl = summ.reset_index().to_dict(orient="records")

    from rdmascope.analysis.series import line_rate_lines, line_rates

    # what the O flag judges each series and link against, and where it came from
    lrates = (line_rates(types.SimpleNamespace(meta=m, counters=cdf), groups=links or None)
              if src != "netdev" else {})
    if by == "device":  # a device's column is tx + rx: its bound is both directions'
        lrates = _two_direction_rates(lrates)
    elif by == "direction" and lrates:  # a direction's column sums every device's
        lrates = _direction_rates(types.SimpleNamespace(meta=m, counters=cdf), line_rates)
    if by != "series" and src is None:  # a column summing netdev statistics: never judged
        lrates = _without_netdev_sums(lrates, cdf, by)

    def human():
        h = table[[c for c in table.columns if not c.endswith("_quality")]].copy()
        h["flags"] = ["".join(ch for bit, ch in ((QUALITY_GAP, "G"), (QUALITY_INVALID, "N"),
                                                 (QUALITY_PARTIAL, "P"), (QUALITY_EMPTY, "E"),
                                                 (QUALITY_OVER_LINE, "O"))
                              if f & bit) for f in flags]
        h = h.reset_index(drop=True)
        n_over = int(((flags & QUALITY_OVER_LINE) != 0).sum())
        from rdmascope.analysis.peaks import window_label

        part_bytes = (", its bytes unknown: -, the covered part's in *_covered_bytes and "
                      "*_covered_s" if with_bytes else "")
        click.echo(f"{capture}: {len(table)} window(s) of {window_label(width_ns)}, rates in Gb/s "
                   f"(t_s from capture start; flags: G gap-spread, N unknown (reset/saturated/"
                   f"unavailable/implausible), P partly covered (its rate over the covered "
                   f"part{part_bytes}), E no readings, O over line rate beyond the timing "
                   f"uncertainty: {n_over} window(s))")
        click.echo(format_table(h, max_rows=limit, formats={"t_s": "{:.6f}"}))
        for line in impl_lines:
            click.echo(line)
        for line in line_rate_lines(lrates):
            click.echo(line)

    emit({"rates": table}, out, human=human,
         meta={"capture": str(capture), "window_ns": width_ns, "origin_ns": origin,
               "implausible": impl, "line_rates": lrates,
               "t_start_ns": t0, "by": by, "group": group, "source": source,
               "quality_bits": {"gap": QUALITY_GAP, "invalid": QUALITY_INVALID,
                                "partial": QUALITY_PARTIAL, "empty": QUALITY_EMPTY,
                                "over_line": QUALITY_OVER_LINE}})
