"""``rdmascope collectives CAPTURE --inspector DIR``: NCCL Inspector collectives beside the wire.

Exit codes (rdmascope.exitcodes): 0 done; 4 an error (a file that is not an Inspector record, a future format
version, no record of the capture's host inside the capture: the message names file and line).
"""

from __future__ import annotations

import click

from rdmascope.cli.output import cli_errors, emit, format_table, output_options


@click.command(help="Place each NCCL Inspector collective (NCCL_INSPECTOR_ENABLE=1 JSON records; "
                    "NCCL_INSPECTOR_DUMP_VERBOSE=1 gives each its own start time) on the "
                    "capture's clock: type, size, NCCL's time and bus bandwidth, the RDMA tx "
                    "bytes each HCA carried during it and the measured rate; and per size class "
                    "the ratio of wire bytes to NCCL's expected bytes (ring all-reduce: "
                    "2(n-1)/n x size per rank), exact and over spans widened by the counters' "
                    "timing uncertainty.")
@click.argument("capture", type=click.Path(exists=True, file_okay=False))
@click.option("--inspector", "inspector", multiple=True, required=True,
              type=click.Path(exists=True),
              help="Inspector output: a directory (NCCL_INSPECTOR_DUMP_DIR) or file; repeatable.")
@click.option("--max-rows", type=int, default=20, show_default=True,
              help="Collectives shown in the human view (all in --json/--csv).")
@output_options
def command(capture, inspector, max_rows, out):
    from rdmascope.analysis import load_capture
    from rdmascope.analysis.nccl.collectives import collectives_table, size_class_table
    from rdmascope.analysis.nccl.inspector import InspectorError, read_inspector, read_prometheus
    from rdmascope.cli.shared import require_capture

    require_capture(capture)  # a path that is no capture first, before reading the records
    try:
        recs = read_inspector(inspector)
        prom = read_prometheus(inspector) if recs.empty else None
    except InspectorError as exc:
        raise click.ClickException(str(exc)) from exc
    if prom is not None and not prom.empty:  # NCCL_INSPECTOR_PROM_DUMP=1: aggregates only
        note = ("these are Inspector Prometheus textfiles (NCCL_INSPECTOR_PROM_DUMP=1): per "
                "interval aggregates per collective and size bucket, which cannot be placed on "
                "the capture's clock; for per-collective records run with "
                "NCCL_INSPECTOR_PROM_DUMP=0 NCCL_INSPECTOR_DUMP_VERBOSE=1")

        def human_prom():
            click.echo(format_table(prom.drop(columns=["file", "line"])))
            click.echo(f"note: {note}")

        emit({"prometheus": prom}, out, human=human_prom,
             meta={"capture": str(capture), "inspector": list(inspector), "notes": [note]})
        return
    if recs.empty:  # name what was given, not the capture: the files are what is wrong
        raise click.ClickException(
            f"{', '.join(str(i) for i in inspector)}: no NCCL Inspector record in it (empty, or "
            "no line of it is a collective); expected the JSON lines NCCL's Inspector plugin "
            "writes (one record per collective)")
    with cli_errors(str(capture)):
        cap = load_capture(capture)
    try:
        table, notes = collectives_table(cap, recs)
        notes = [*recs.attrs.get("notes", []), *notes]
    except InspectorError as exc:
        raise click.ClickException(f"{capture}: {exc}") from exc
    classes = size_class_table(table)

    def human():
        click.echo(f"{capture}: {len(table):,} collectives of {cap.meta.get('host')} placed "
                   "on the capture's clock")
        click.echo(format_table(table.drop(columns=["comm"]), max_rows=max_rows,
                                formats={"ratio": "{:.3f}", "t_start_s": "{:.6f}",
                                         "t_end_s": "{:.6f}", "size_bytes": "{:,.0f}"}))
        click.echo("\nper size class: wire bytes / NCCL's expected bytes")
        click.echo(format_table(classes, formats={"ratio": "{:.3f}", "ratio_wide": "{:.3f}"}))
        for n in notes:
            click.echo(f"note: {n}")

    emit({"collectives": table, "size_classes": classes}, out, human=human,
         meta={"capture": str(capture), "inspector": list(inspector), "notes": notes})


def annotate_or_fail(cap, table, inspector, name: str):
    """``bursts --inspector``: the bursts table with the overlapping collectives
    (``analysis.nccl.collectives.annotate_bursts``); Inspector errors -> ClickException."""
    from rdmascope.analysis.nccl.collectives import annotate_bursts, place_records
    from rdmascope.analysis.nccl.inspector import InspectorError, read_inspector

    try:
        placed = place_records(cap, read_inspector(inspector))
    except InspectorError as exc:
        raise click.ClickException(f"{name}: {exc}") from exc
    return annotate_bursts(table, placed)


def add_collective_tracks(tl, caps, inspector, clock: str) -> None:
    """``export perfetto --inspector``: append an "NCCL collectives" slice track to each
    process (capture) of timeline ``tl`` whose host has Inspector records, and name in each of
    its burst slices the collectives that caused it (``label_burst_slices``); a host without
    any is noted. ``clock``: the timeline's ("monotonic", "realtime", or "reference": a run set, each
    host's collectives moved by its offset, ``tl.axis["offsets_ns"]``, as its counters are).
    Inspector errors -> ClickException."""
    from rdmascope.analysis.nccl.inspector import InspectorError, read_inspector
    from rdmascope.analysis.timeline import Track

    try:
        recs = read_inspector(inspector)
    except InspectorError as exc:
        raise click.ClickException(str(exc)) from exc
    for proc, cap in zip(tl.processes, caps, strict=False):
        try:
            placed, slices = collectives_on_axis(cap, recs, clock, tl.axis.get("offsets_ns"))
        except InspectorError as exc:
            tl.notes.append(f"{cap.path}: {exc}")
            continue
        label_burst_slices(proc, placed, slices)
        proc.tracks.append(Track(name="NCCL collectives", kind="slices", slices=slices))


def collectives_on_axis(cap, recs, clock: str, offsets: dict | None = None):
    """(placed, slices): ``place_records`` of ``recs`` for capture ``cap`` and their
    ``collective_slices`` on a timeline's axis: "monotonic", "realtime", or "reference" (the
    host's CLOCK_MONOTONIC plus ``offsets[host]``, as ``build_timeline`` moves its counters).
    Raises ``InspectorError`` when no record is of the capture's host."""
    from rdmascope.analysis.load import capture_host
    from rdmascope.analysis.nccl.collectives import collective_slices, place_records

    placed = place_records(cap, recs)
    if clock != "reference":
        return placed, collective_slices(placed, clock=clock)
    off = int(offsets[capture_host(cap)])
    return placed, [(t0 + off, t1 + off, name, args) for t0, t1, name, args
                    in collective_slices(placed, clock="monotonic")]


def label_burst_slices(proc, placed, slices) -> None:
    """Name in the args of each burst slice of timeline process ``proc`` (its "bursts <series>"
    tracks) the collectives that overlap it, as ``bursts --inspector`` does (``annotate_bursts``):
    ``nccl`` (e.g. "AllReduce x1 sn 12"; "none"), ``collectives`` (count) and
    ``nccl_expected_bytes`` (their expected wire bytes per rank). ``placed``: ``place_records``'s
    frame; ``slices``: its ``collective_slices`` on the timeline's axis (row for row)."""
    import math

    import pandas as pd

    from rdmascope.analysis.nccl.collectives import annotate_bursts

    on_axis = placed.assign(start_ns=[int(x[0]) for x in slices],
                            end_ns=[int(x[1]) for x in slices])
    on_axis = on_axis.sort_values("start_ns", kind="stable").reset_index(drop=True)
    for tr in proc.tracks:
        if tr.kind != "slices" or not tr.name.startswith("bursts ") or not tr.slices:
            continue
        b = annotate_bursts(pd.DataFrame({"start_ns": [x[0] for x in tr.slices],
                                          "end_ns": [x[1] for x in tr.slices]}), on_axis)
        tr.slices = [(t0, t1, name, {**args, "nccl": text or "none", "collectives": int(n),
                                     "nccl_expected_bytes": int(round(e)) if math.isfinite(e)
                                     else None})
                     for (t0, t1, name, args), text, n, e in
                     zip(tr.slices, b["nccl"], b["collectives"], b["nccl_expected_bytes"],
                         strict=True)]
