"""``rdmascope export perfetto|dataset``: captures into the tools people already use.

``perfetto``: a timeline (Perfetto protobuf, or Chrome JSON for a ``.json`` output) with Gb/s
counter tracks, burst slices and request prefill/decode slices (``rdmascope.analysis.timeline``).
``dataset``: a Hive-partitioned Parquet dataset for DuckDB, polars or Spark
(``rdmascope.analysis.dataset``).
"""

from __future__ import annotations

from pathlib import Path

import click

from rdmascope.cli.common import check_window_fits, say_later
from rdmascope.cli.output import (
    NONNEG_SECONDS,
    OFFSET,
    POSITIVE,
    WINDOW,
    cli_errors,
    link_gbps_note,
    link_gbps_option,
    no_intervals_error,
    refuse_existing_output,
    require_parent_dir,
    say_capture_state,
)
from rdmascope.cli.shared import CaptureDirs, run_set_paths
from rdmascope.cli.timerange import origin_option, time_range


@click.group("export", short_help="Export captures for other tools.")
def command() -> None:
    """Export captures for other tools: a Perfetto timeline, a Parquet dataset."""


def run_set_offsets(captures) -> tuple[dict[str, int] | None, str | None, str]:
    """For captures of several hosts of one run: ({host: refined offset ns to the reference},
    reference host, a note saying so); else (None, None, ""). The offsets are those of
    ``rdmascope cluster`` (one streamed pass per node; ``cluster_reduce.refined_offsets``)."""
    from rdmascope.analysis.cluster import RunSetError
    from rdmascope.analysis.cluster_reduce import refined_offsets
    from rdmascope.analysis.cluster_report import is_run_set

    if len(captures) < 2 or not is_run_set(list(captures)):
        return None, None, ""
    from rdmascope.capture import CaptureError

    try:  # an export holds every capture asked for: a node that cannot be read stops it, named
        rs = refined_offsets(list(captures))
    except (RunSetError, CaptureError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    offs = {n.host: int(n.offset_ns) for n in rs.nodes}
    return offs, rs.ref.host, (
        f"a run set of {len(rs.nodes)} hosts: every host placed on {rs.ref.host}'s "
        "CLOCK_MONOTONIC with the offsets refined from the traffic (as rdmascope cluster)"
        + (f"; {'; '.join(rs.warnings)}" if rs.warnings else ""))


@command.command("perfetto")
@click.argument("captures", nargs=-1, required=True, type=CaptureDirs())
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="Trace file: .json writes the Chrome JSON trace format, anything else "
                   "(e.g. .pftrace) Perfetto's protobuf format.")
@click.option("--force", is_flag=True, help="Replace an existing -o file (refused otherwise).")
@click.option("--requests", "requests_log", type=click.Path(exists=True, dir_okay=False),
              help="Request log of the first capture's host (default: its requests.jsonl, if "
                   "any): prefill and decode slices per request.")
@click.option("--offset", type=OFFSET, default=None,
              help="Seconds added to the request log's times (logs without a shared clock).")
@click.option("--window", "width_ns", type=WINDOW, default="1ms", show_default=True,
              help="Window of the Gb/s counter tracks.")
@click.option("--clock", type=click.Choice(["monotonic", "realtime", "reference"]),
              default=None,
              help="Time axis: the capture's CLOCK_MONOTONIC; CLOCK_REALTIME through its clock "
                   "pairs (as good as the hosts' wall clocks agree); or, for captures of "
                   "several hosts of one run, the first host's CLOCK_MONOTONIC with every "
                   "host's offset refined from the traffic as rdmascope cluster does "
                   "('reference', said in the trace's metadata) [default: reference for a run "
                   "set, else monotonic].")
@click.option("--capacity", type=POSITIVE, default=None,
              help="Link capacity for burst detection, Gb/s (default: the port rate).")
@click.option("--format", "fmt", type=click.Choice(["auto", "proto", "json"]), default="auto",
              show_default=True, help="Output format (auto: by the file name).")
@click.option("--from", "t_from", type=NONNEG_SECONDS, default=None, metavar="TIME",
              help="Start of the range after each capture's start (1.5, 250ms, 2m).")
@click.option("--to", "t_to", type=NONNEG_SECONDS, default=None, metavar="TIME",
              help="End of the range after each capture's start.")
@origin_option
@link_gbps_option
@click.option("--inspector", "inspector", multiple=True, type=click.Path(exists=True),
              help="NCCL Inspector records (a directory or file, repeatable): an 'NCCL "
                   "collectives' track per host with each collective as a slice (docs/nccl.md).")
def perfetto(captures, out, requests_log, offset, width_ns, clock, capacity, fmt, t_from, t_to,
             origin_s, inspector=(), force=False):
    """Write a timeline of CAPTURES (one process per capture) for ui.perfetto.dev or
    chrome://tracing.

    Counter tracks "<device>/<tx|rx> Gb/s" (and "link:<twins>/<dir> Gb/s") hold one value per
    --window, bytes x 8 / window; windows with unknown bytes are left out and marked on a
    "no data" track. "bursts <series>" tracks hold each burst detected on the 1 ms series.
    With a request log: a "request <id>" track per request with its prefill and decode slices.
    """
    # a run set directory: its nodes (each named if no capture); runs/p2/*: files skipped
    captures = tuple(run_set_paths(captures))
    from rdmascope.analysis.timeline import NoIntervalsError

    require_parent_dir(out)
    if t_from is not None and t_to is not None and t_to <= t_from:
        raise click.BadParameter(f"--to ({t_to:g} s) must be after --from ({t_from:g} s)",
                                 param_hint="'--to'")
    refuse_existing_output(out, force, "-o")  # exit 4 before any work, as the directories
    if fmt == "auto":
        fmt = "json" if out.lower().endswith(".json") else "proto"
    if fmt == "proto":
        try:
            import perfetto.trace_builder.proto_builder  # noqa: F401
        except ModuleNotFoundError as exc:
            raise click.ClickException(
                f"Perfetto's protobuf format needs the perfetto package ({exc.name} is not "
                "installed): pip install 'rdmascope[perfetto]', or write a .json trace") from exc
    from rdmascope.analysis.requestlogs import align, read_request_log
    from rdmascope.analysis.stream import open_capture
    from rdmascope.analysis.timeline_stream import stream_timeline

    offsets = ref = None
    if clock in (None, "reference"):
        offsets, ref, note = run_set_offsets(captures)
        if offsets is None and clock == "reference":
            raise click.UsageError("--clock reference needs the captures of several hosts of "
                                   "one run (a run set)")
        clock = "reference" if offsets is not None else "monotonic"
        if note:
            say_later(f"note: {note}")
    # streamed (analysis.timeline_stream): each capture is read and its trace written a block
    # of time at a time, so neither the capture nor its trace is ever held whole
    infos = []
    for c in captures:
        with cli_errors(str(c)):
            infos.append(open_capture(c))
            say_capture_state(c, infos[-1].meta, infos[-1])
    if (t_from is not None or t_to is not None) and len(infos) == 1:
        # as rates/peaks: a range after the end, or holding none of the readings, is refused
        time_range(infos[0].t_start_ns, t_from, t_to, t_end_ns=infos[0].t_end_ns,
                   readings=infos[0], source=None)
    # as rates and bursts: a window longer than the (longest) capture's range is refused
    longest = max(infos, key=lambda i: i.t_end_ns - i.t_start_ns)
    t0, t1 = longest.t_start_ns, longest.t_end_ns
    check_window_fits(width_ns, max(t0, t0 + int(round((t_from or 0) * 1e9))),
                      t1 if t_to is None else min(t1, t0 + int(round(t_to * 1e9))), t0,
                      t_from is not None or t_to is not None)
    log = None
    log_path = requests_log
    if log_path is None and (Path(captures[0]) / "requests.jsonl").exists():
        log_path = str(Path(captures[0]) / "requests.jsonl")
    if log_path is not None:
        with cli_errors(str(log_path)):
            log = align(read_request_log(log_path), infos[0], offset)
    extra = None
    extra_notes: list[str] = []
    if inspector:  # the collectives beside the counters (rdmascope.analysis.nccl)
        extra = _collectives_hook(inspector, clock, offsets, extra_notes)
    with cli_errors():
        try:
            tl = stream_timeline(list(captures), out, fmt, width_ns=width_ns, log=log,
                                 clock=clock, offsets=offsets, reference=ref,
                                 capacity_gbps=capacity, from_s=t_from, to_s=t_to,
                                 origin_s=origin_s, extra=extra)
        except NoIntervalsError as exc:  # as peaks/rates/bursts: nothing to trace is an error
            raise no_intervals_error(exc.path) from exc
        n = tl.written
    for note in tl.notes + extra_notes + ([link_gbps_note()] if link_gbps_note() else []):
        click.echo(f"note: {note}", err=True)
    tracks = sum(len(p.tracks) for p in tl.processes)
    click.echo(f"{out}: {'Perfetto protobuf' if fmt == 'proto' else 'Chrome JSON'} trace, "
               f"{len(tl.processes)} process(es), {tracks} tracks, {n:,} "
               f"{'packets' if fmt == 'proto' else 'events'}; times on "
               f"{tl.axis['time_axis'] if clock == 'reference' else 'CLOCK_' + clock.upper()} "
               f"(ns); counters in Gb/s per {width_ns / 1e6:g} ms window"
               + (f"; {log_path}: {int(log.requests['ok'].sum())} requests" if log else ""))


def _collectives_hook(inspector, clock: str, offsets: dict | None, notes: list[str]):
    """``export perfetto --inspector`` for the streamed export: per capture (``cli.collectives``'
    rules, as ``add_collective_tracks``), its records placed once on the trace's axis; each
    block's burst slices named with the collectives that caused them (``label_burst_slices``),
    and the "NCCL collectives" track once its blocks are written. A capture whose host has no
    records is noted."""
    from rdmascope.analysis.load import capture_host
    from rdmascope.analysis.nccl.collectives import collective_slices, place_records
    from rdmascope.analysis.nccl.inspector import InspectorError, read_inspector
    from rdmascope.analysis.timeline import Track
    from rdmascope.cli.collectives import label_burst_slices

    try:
        recs = read_inspector(inspector)
    except InspectorError as exc:
        raise click.ClickException(str(exc)) from exc

    class Hook:
        def __init__(self, info):
            try:
                self.placed = place_records(info, recs)
            except InspectorError as exc:
                notes.append(f"{info.path}: {exc}")
                self.placed = None
                return
            if clock == "reference":  # the host's CLOCK_MONOTONIC plus its offset
                off = int(offsets[capture_host(info)])
                self.slices = [(t0 + off, t1 + off, name, args) for t0, t1, name, args
                               in collective_slices(self.placed, clock="monotonic")]
            else:
                self.slices = collective_slices(self.placed, clock=clock)

        def block(self, proc):
            if self.placed is not None:
                label_burst_slices(proc, self.placed, self.slices)

        def end(self, proc):
            if self.placed is not None:
                proc.tracks.append(Track(name="NCCL collectives", kind="slices",
                                         slices=self.slices))

    return Hook


@command.command("dataset")
@click.argument("captures", nargs=-1, required=True, type=CaptureDirs())
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False),
              help="Dataset directory (created; an existing dataset gets new partitions).")
@click.option("--force", is_flag=True, help="Replace partitions that already exist.")
@link_gbps_option
def dataset(captures, out, force):
    """Write CAPTURES as one Hive-partitioned Parquet dataset (host=/capture=) for DuckDB,
    polars or Spark.

    One row per sampling interval of each byte counter: time (interval start, UTC), t0_ns/t1_ns
    (CLOCK_MONOTONIC), capture_start_ns, series, device, port, direction, source, counter,
    bytes_per_unit, bytes (null when unknown) and flag.
    """
    # a run set directory: its nodes (each named if no capture); runs/p2/*: files skipped
    captures = tuple(run_set_paths(captures))
    from rdmascope.analysis.dataset import write_dataset

    require_parent_dir(out)
    for c in captures:  # being recorded / unclean end / readings missing against the audit
        say_capture_state(c)
    offsets, ref, note = run_set_offsets(captures)
    with cli_errors(str(out)):
        written, notes = write_dataset(list(captures), out, force=force, offsets=offsets,
                                       reference=ref)
    if note:
        click.echo(f"note: {note}", err=True)
    for note in list(notes) + ([link_gbps_note()] if link_gbps_note() else []):
        click.echo(f"note: {note}", err=True)
    for path, rows in written:
        click.echo(f"{path}: {rows:,} rows")
    click.echo(f"{out}: {len(written)} partition(s); read it with "
               f"duckdb \"SELECT * FROM read_parquet('{str(out).rstrip('/') or '/'}/**/*.parquet', "
               "hive_partitioning = true)\"")
