"""``rdmascope verify-emulation``: did all RDMA traffic use one interface?

Exit codes (``rdmascope.exitcodes``): 0 PASS, 1 FAIL, 3 CANNOT JUDGE (too little traffic, a twin
of a recorded device found at record time but not recorded, or a device's bytes unknown for more
than 1 % of the range: unreadable, reset, saturated or implausible counters); 2 a usage error,
4 an unreadable or corrupt capture.

With ``--nccl-log`` the exit code is the agreement of NCCL's log with the counters (docs/nccl.md):
0 confirmed by both, 1 they disagree or NCCL used NET/Socket, 3 the log cannot witness this
capture or the counters cannot judge. The comparison lives in ``rdmascope.analysis.nccl.witness``.
"""

from __future__ import annotations

import click

from rdmascope.cli.output import (
    cli_errors,
    emit,
    format_table,
    link_gbps_option,
    open_or_fail,
    output_options,
)
from rdmascope.cli.shared import CaptureDirs, run_set_paths
from rdmascope.cli.timerange import grid_origin, time_range, time_range_options
from rdmascope.exitcodes import EXIT_CANNOT_JUDGE, EXIT_FAIL, EXIT_PASS


@click.command(help="Check that an NCCL_IB_HCA emulation used one interface: each RDMA "
                    "device's share of the bytes and highest 1 ms rate, and a verdict. Exit "
                    "code 0 PASS (the expectation holds), 1 FAIL, 3 CANNOT JUDGE (too little "
                    "RDMA traffic, a twin of a recorded device was found at record time "
                    "but not recorded, e.g. `record --device rocep1s0f1`, or a recorded "
                    "device's counters were unreadable for more than 1 % of the range: its "
                    "traffic is unknown, never counted as 0). With netdev statistics in the capture, also flags a collective "
                    "that ran over TCP.")
@click.argument("capture", nargs=-1, required=True, type=CaptureDirs())
@time_range_options
@click.option("--expect-single/--expect-both", "single", default=True, show_default=True,
              help="Expect all traffic on one interface (emulated link) or on both twins.")
@click.option("--share", type=float, default=0.99, show_default=True,
              help="--expect-single: the share one device must carry, > 0.5 and <= 1.")
@click.option("--min-share", type=float, default=0.25, show_default=True,
              help="--expect-both: the share each of two devices must carry, > 0 and <= 0.5.")
@click.option("--expect-rails", "expect_rails", type=click.IntRange(min=1), default=None,
              metavar="N",
              help="Expect N independent rails (e.g. 8 HCAs per node), every one carrying "
                   "traffic, each within --rail-balance of 1/N of it (twins of one adapter "
                   "are one rail). Replaces --expect-single/--expect-both.")
@click.option("--rail-balance", type=click.FloatRange(min=0.0, max=1.0, max_open=True),
              default=0.5, show_default=True,
              help="--expect-rails: each rail's share must be within (1 +- this) / N.")
@click.option("--nccl-log", "nccl_log", multiple=True, type=click.Path(exists=True),
              help="NCCL_DEBUG=INFO log(s) of the run (a file or a directory, repeatable): put "
                   "NCCL's own witness beside the counters. The exit code is then the two "
                   "witnesses' agreement: 0 confirmed by both, 1 they disagree (or NCCL used "
                   "NET/Socket), 3 the log cannot witness this capture (another host, times "
                   "outside the capture, no network line) or the counters cannot judge.")
@link_gbps_option
@output_options
def command(capture, t_from, t_to, origin_s, single, share, min_share, out, nccl_log=(),
            expect_rails=None, rail_balance=0.5):
    # the ranges of verify.check_shares, said with the option names
    if not 0.5 < share <= 1.0:
        raise click.BadParameter(f"must be > 0.5 and <= 1 (a share of 0.5 or less passes an "
                                 f"even split over two twins), got {share!r}",
                                 param_hint="--share")
    if not 0.0 < min_share <= 0.5:
        raise click.BadParameter(f"must be > 0 and <= 0.5 (0 passes with one twin idle; two "
                                 f"devices cannot both carry more than half), got {min_share!r}",
                                 param_hint="--min-share")
    # an option of the other expectation is refused, never silently ignored
    given = _given_options()
    if expect_rails and "single" in given:
        raise click.UsageError("--expect-rails N replaces --expect-single/--expect-both: give "
                               "one expectation")
    expectation = ("--expect-rails" if expect_rails else "--expect-single" if single
                   else "--expect-both")
    for opt, applies in (("share", "--expect-single"), ("min_share", "--expect-both"),
                         ("rail_balance", "--expect-rails")):
        if opt in given and applies != expectation:
            raise click.UsageError(f"--{opt.replace('_', '-')} applies to {applies}, not "
                                   f"{expectation}")
    capture = run_set_paths(capture)  # a run set directory: its nodes (cli.shared)
    if len(capture) > 1:  # several hosts of one run: once per node (cli.runset)
        from rdmascope.cli.runset import for_each_node

        return for_each_node(command, capture, dict(locals()))
    capture = capture[0]
    from rdmascope.analysis import verify_emulation

    cap = open_or_fail(capture)  # streamed segment by segment (bounded memory)
    start, end = time_range(cap.t_start_ns, t_from, t_to, readings=cap)
    try:
        with cli_errors(str(capture)):
            v = verify_emulation(cap, start_ns=start, end_ns=end,
                                 origin_ns=grid_origin(cap.t_start_ns, origin_s),
                                 expect=("rails" if expect_rails else
                                         "single" if single else "both"), single_share=share,
                                 both_min_share=min_share, rails=expect_rails,
                                 rail_balance=rail_balance)
    except ValueError as exc:
        raise click.ClickException(f"{capture}: {exc}") from exc
    from rdmascope.analysis.series import line_rate_lines, line_rates

    lrates = line_rates(cap)  # what each device's over_line_windows are judged against
    from rdmascope.capture import device_change_texts

    changes = device_change_texts(cap.meta)  # devices that appeared / vanished while recording
    tables = {"devices": v.devices}
    if v.kernel is not None:
        tables["kernel"] = v.kernel

    def human():
        click.echo(f"{capture}: {(v.start_ns - cap.t_start_ns) / 1e9:.3f} s to "
                   f"{(v.end_ns - cap.t_start_ns) / 1e9:.3f} s after capture start, "
                   "expecting " + (f"{expect_rails} rails" if expect_rails else
                                   'one interface' if single else 'both interfaces'))
        click.echo(format_table(v.devices, floatfmt="{:,.2f}",
                                formats={"share": "{:.2%}", "unknown_share": "{:.2%}",
                                         "tx_bytes": "{:,.0f}",
                                         "rx_bytes": "{:,.0f}", "bytes": "{:,.0f}",
                                         "known_bytes": "{:,.0f}"}))
        for line in line_rate_lines(lrates):
            click.echo(line)
        if changes:
            click.echo("devices that came and went: " + "; ".join(changes))
        if v.kernel is not None:
            click.echo("\nRDMA vs kernel network stack (netdev statistics), bytes:")
            click.echo(format_table(v.kernel, floatfmt="{:,.0f}"))
        # the message of a CANNOT JUDGE verdict starts with 'cannot judge: ' (it stands alone in
        # the report and the cluster view); said once here
        msg = v.message.removeprefix(f"{v.status}: ")
        click.echo(f"\n{v.status.upper()}: {msg}")

    meta = {k: val for k, val in v.to_dict().items() if k not in ("devices", "kernel")}
    meta["device_changes"] = changes
    w = None
    if nccl_log:
        from rdmascope.cli.nccl import witness_or_fail

        w, show = witness_or_fail(cap, v, nccl_log, "single" if single else "both")
        meta["nccl_witness"] = w.to_dict()
        human = show(human)
    emit(tables, out, human=human, meta={"capture": str(capture), **meta, "line_rates": lrates})
    if w is not None:
        click.get_current_context().exit({"pass": EXIT_PASS, "fail": EXIT_FAIL}.get(w.status, EXIT_CANNOT_JUDGE))
    if v.status == "cannot judge":
        click.get_current_context().exit(EXIT_CANNOT_JUDGE)
    if not v.ok:
        click.get_current_context().exit(EXIT_FAIL)


def _given_options() -> set[str]:
    """The parameter names of the running command given on its command line (not defaults)."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    return {p.name for p in ctx.command.params
            if ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE}
