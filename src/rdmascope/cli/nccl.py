"""``rdmascope nccl LOG...``: what NCCL's INFO log says, per host and process.

Exit codes (rdmascope.exitcodes): 0 the log(s) were read; 4 a file is not an NCCL log (binary, another tool's log,
unreadable: the message names the file and line).
"""

from __future__ import annotations

import click

from rdmascope.cli.output import emit, output_options


@click.command(help="Summarise NCCL_DEBUG=INFO logs (files, or directories of NCCL_DEBUG_FILE=%h.%p "
                    "files) per host and process: NCCL version, network and plugin, the HCAs "
                    "NCCL opened (port, link layer), GDRDMA, NET channels per HCA, socket "
                    "fallback, communicators. Lines it does not know are skipped; lines that "
                    "start like a known one but do not parse are listed.")
@click.argument("log", nargs=-1, required=True, type=click.Path(exists=True))
@output_options
def command(log, out):
    from rdmascope.analysis.nccl import NcclLogError, read_logs
    from rdmascope.analysis.nccl.witness import summary_table

    try:
        parsed = read_logs(log)
    except NcclLogError as exc:
        raise click.ClickException(str(exc)) from exc
    table = summary_table(parsed)
    notes = [f"{f}:{ln}: {why}" for f, ln, why in parsed.notes]

    def human():
        for host in parsed.hosts():
            click.echo(f"host {host}:")
            sub = table[table["host"] == host].drop(columns=["host", "files"])
            for _, r in sub.iterrows():
                click.echo(f"  pid {r['pid']}: NCCL {r['version'] or '(version not logged)'}, "
                           f"network {r['network'] or '(not logged)'}"
                           + (f", plugin {r['plugin']}" if r["plugin"] else ""))
                if r["ib_hca_env"]:
                    click.echo(f"    NCCL_IB_HCA={r['ib_hca_env']}")
                if r["hcas_opened"]:
                    click.echo(f"    HCAs opened: {r['hcas_opened']}")
                if r["channels_per_hca"]:
                    click.echo(f"    NET/IB channels per HCA: {r['channels_per_hca']} "
                               f"(connections {r['connections_per_hca']}; GDRDMA {r['gdrdma']})")
                if r["socket"]:
                    click.echo(f"    NET/Socket (TCP, no RDMA): {r['socket']}")
                if r["comms"]:
                    click.echo(f"    communicators: {r['comms']}")
        click.echo(f"\n{parsed.nccl_lines:,} NCCL lines read, {parsed.unknown_lines:,} other lines "
                   "skipped")
        for n in notes:
            click.echo(f"note: {n}")

    emit({"processes": table}, out, human=human,
         meta={"files": parsed.files, "notes": notes, "nccl_lines": parsed.nccl_lines,
               "skipped_lines": parsed.unknown_lines})


def witness_or_fail(cap, verdict, logs, expect: str):
    """Compare NCCL log(s) with a counters' verdict for ``verify-emulation --nccl-log``.

    Returns (WitnessVerdict, wrap) where ``wrap(human)`` returns a human view that prints the
    counters' view, then the log's witness and the agreement. A file that is not an NCCL log ->
    ``click.ClickException`` naming it (never a verdict from a log that was not understood).
    """
    from rdmascope.analysis.nccl import NcclLogError
    from rdmascope.analysis.nccl.witness import witness_capture

    try:
        w = witness_capture(cap, verdict, logs, expect=expect)
    except NcclLogError as exc:
        raise click.ClickException(str(exc)) from exc

    def wrap(human):
        def show():
            human()
            click.echo("\nNCCL's log (second witness):")
            click.echo(f"  processes on this host: {', '.join(w.processes) or 'none'}")
            click.echo(f"  network: {w.network or '-'}; HCAs opened: "
                       f"{', '.join(w.log_opened) or '-'}; channels through: "
                       f"{', '.join(w.log_hcas) or '-'}")
            click.echo(f"  counters: bytes on {', '.join(w.counter_hcas) or 'no device'}")
            for n in w.notes:
                click.echo(f"  note: {n}")
            msg = w.message.removeprefix("cannot judge: ")
            click.echo(f"BOTH WITNESSES {w.status.upper()}: {msg}")
        return show
    return w, wrap


def cluster_witnesses(rs, res, logs, verdict: str):
    """NCCL's witness for every node of a ``cluster`` run set: (host -> WitnessVerdict, the
    set's verdict made worse by them: a node's disagreement -> "FAIL", a node the log cannot
    witness -> "CANNOT JUDGE" unless already FAIL). A file that is not an NCCL log ->
    ``click.ClickException`` naming it."""
    from rdmascope.analysis.nccl import NcclLogError, read_logs
    from rdmascope.analysis.nccl.witness import capture_realtime_span, compare_witnesses
    from rdmascope.analysis.stream import open_capture

    try:
        log = read_logs(logs)
    except NcclLogError as exc:
        raise click.ClickException(str(exc)) from exc
    out = {}
    for n in rs.nodes:
        v = res.verdicts.get(n.host)
        if v is None:
            continue
        cap = open_capture(n.path)
        lo = v.start_ns or cap.t_start_ns
        hi = v.end_ns or cap.t_end_ns
        out[n.host] = compare_witnesses(log, v, host=n.host, expect=res.expect or "single",
                                        span_realtime_ns=capture_realtime_span(cap, lo, hi))
    statuses = {w.status for w in out.values()}
    if "fail" in statuses:
        verdict = "FAIL"
    elif "cannot judge" in statuses and verdict != "FAIL":
        verdict = "CANNOT JUDGE"
    return out, verdict
