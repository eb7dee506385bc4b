"""``rdmascope plot KIND CAPTURE... -o FILE``: draw one of the study's figures to PNG/SVG/PDF."""

from __future__ import annotations

import click

from rdmascope.cli.common import check_window_fits, say_later
from rdmascope.cli.output import (
    DURATION_NS,
    OFFSET,
    POSITIVE,
    SECONDS,
    WINDOW,
    check_window_count,
    cli_errors,
    link_gbps_note,
    link_gbps_option,
    parse_windows,
    refuse_existing_output,
    require_parent_dir,
)
from rdmascope.cli.setup_options import resolve_kwargs, setup_options
from rdmascope.cli.shared import CaptureDirs, require_capture
from rdmascope.cli.timerange import origin_option

KINDS = {
    "request": "figure 1: one request at 1 ms, prefill shaded, first token, zoom inside the prefill",
    "compare": "figure 2: two configurations of one test on a shared time axis",
    "windows": "figure 3: one request's prefill at 1/5/100 ms windows, peaks labelled",
    "extra-prefill": "figure 4: extra prefill time per test, measured vs estimate (two captures)",
    "tokens": "figure 5: prefill-time increase vs prompt tokens, measured and estimated",
    "tp": "figure 6: projected TTFT increase vs TP size (from the estimate; no capture)",
    "devices": "per-device stacked traffic (the emulation check at a glance; exits with its "
               "verdict: 1 FAIL, 3 CANNOT JUDGE)",
    "cluster": "several hosts of one run: nodes x time heatmap of 1 ms rates, prefill/decode",
    "cluster-zoom": "several hosts of one run: every node's bursts, aligned (60 ms, --zoom)",
}

#: parameter -> (its options, the kinds it applies to): given for another kind it is refused
#: (exit 2), never silently ignored.
APPLIES = {
    "request_id": ("--request-id", ("request", "windows")),
    "test_name": ("--test", ("compare",)),
    "zoom_ns": ("--zoom", ("request", "cluster-zoom")),
    "zoom_start_ns": ("--zoom-start", ("request",)),
    "windows_text": ("--windows", ("windows",)),
    "from_s": ("--from/--to", ("compare",)),
    "to_s": ("--from/--to", ("compare",)),
    "window_ns": ("--window", ("compare", "devices")),
    "prompt_tokens": ("--prompt-tokens", ("tp",)),
    "ttft_s": ("--ttft", ("tp",)),
}


def refuse_other_kinds(kind: str) -> None:
    """Refuse (``click.UsageError``, exit 2) an option given on the command line that another
    KIND takes (``APPLIES``): ``plot compare --request-id X`` would draw without it."""
    from rdmascope.cli.common import given

    for param, (opt, kinds) in APPLIES.items():
        if kind not in kinds and given(param):
            what = (f"`plot {kinds[0]}` only" if len(kinds) == 1 else
                    "`plot " + "` and `plot ".join(kinds) + "`")
            extra = " (a stretch of a test)" if param in ("from_s", "to_s") else ""
            raise click.UsageError(f"{opt} apply to {what}{extra}, not `plot {kind}`"
                                   if "/" in opt else
                                   f"{opt} applies to {what}{extra}, not `plot {kind}`")


_HELP = "KIND is one of:\n\n" + "\n\n".join(f"\b\n  {k:14s} {v}" for k, v in KINDS.items())


@click.command("plot", help="Draw one of the study's figures to PNG/SVG/PDF.\n\n" + _HELP)
@click.argument("kind", type=click.Choice(list(KINDS)))
@click.argument("captures", nargs=-1, type=CaptureDirs())
@click.option("--requests", "request_logs", multiple=True, type=click.Path(exists=True,
              dir_okay=False), help="Request log, one per capture in the same order "
              "(default: the capture's own requests.jsonl when it has one).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Output file; the suffix picks the format: .png, .svg or .pdf.")
@click.option("--force", is_flag=True, help="Replace an existing -o file (refused otherwise).")
@click.option("--label", "labels", multiple=True, help="Label per capture (default: from the "
              "capture's manifest, else its directory name).")
@click.option("--request-id", help="request/windows: the request to draw (default: the longest "
              "prefill with no other request in flight).")
@click.option("--test", "test_name", help="compare: the test whose rounds to draw (default: all "
              "requests).")
@click.option("--zoom", "zoom_ns", type=DURATION_NS, default="200ms", show_default=True,
              help="request: width of the zoom window inside the prefill (0 for none).")
@click.option("--zoom-start", "zoom_start_ns", type=DURATION_NS, default=None,
              help="request: zoom start, as time since the send (default: centred in the prefill).")
@click.option("--windows", "windows_text", default="1ms,5ms,100ms", show_default=True,
              help="windows: comma-separated window widths.")
@click.option("--from", "from_s", type=SECONDS, default=None, metavar="S",
              help="compare: draw from S seconds after the test's first send (with --to: "
                   "a stretch of a long test at every 1 ms window).")
@click.option("--to", "to_s", type=SECONDS, default=None, metavar="S",
              help="compare: draw up to S seconds after the test's first send.")
@click.option("--window", "window_ns", type=WINDOW, default=None,
              help="compare (default 1ms) / devices (default 100ms): window width.")
@click.option("--offset", "offset_s", type=OFFSET, default=None,
              help="Seconds added to the request log's times (logs without a shared clock).")
@click.option("--prompt-tokens", type=click.IntRange(min=1),
              help="tp: prompt tokens of the measured request.")
@click.option("--ttft", "ttft_s", type=POSITIVE, help="tp: its measured TTFT at the old link, s.")
@click.option("--dpi", type=click.IntRange(50, 1200), default=150, show_default=True,
              help="PNG resolution, 50 to 1200.")
@origin_option
@setup_options
@link_gbps_option
def command(kind, captures, request_logs, output, labels, request_id, test_name, zoom_ns,
            zoom_start_ns, windows_text, from_s, to_s, window_ns, offset_s, prompt_tokens, ttft_s,
            dpi, origin_s, force=False, **setup_kw):
    from pathlib import Path

    from rdmascope.analysis import figures
    from rdmascope.analysis import report as R

    given = resolve_kwargs(setup_kw)
    refuse_other_kinds(kind)
    if from_s is not None and to_s is not None and not to_s > from_s:
        raise click.BadParameter(f"--to {to_s:g} s must be after --from {from_s:g} s",
                                 param_hint="'--to'")
    if link_gbps_note():
        say_later(f"note: {link_gbps_note()}")
    suffix = Path(output).suffix.lower().lstrip(".")
    if suffix not in figures.FIGURE_FORMATS:
        raise click.BadParameter(f"{output}: the output must end in .png, .svg or .pdf",
                                 param_hint="'-o' / '--output'")
    require_parent_dir(output)
    refuse_existing_output(output, force, "-o")

    from rdmascope.cli.shared import run_set_paths

    if kind in ("cluster", "cluster-zoom"):  # a run set directory: its nodes; runs/p2/*
        captures = tuple(run_set_paths(captures))
    else:
        for c in captures:
            if Path(c).is_file():
                raise click.BadParameter(f"{c!r} is a file, not a capture directory.",
                                         param_hint="'CAPTURES...'")
    if kind == "tp":
        if captures:
            raise click.UsageError("`plot tp` draws from the estimate and takes no capture; "
                                       "give --prompt-tokens and --ttft")
        if prompt_tokens is None or ttft_s is None:
            raise click.UsageError("`plot tp` needs --prompt-tokens and --ttft (a measured "
                                       "TTFT at the old link speed)")
        from rdmascope import models

        if given["b_emulated_gbps"] is None and not given["b_real"] \
                and given["link_a_gbps"] in (None, 200.0) and given["link_b_gbps"] in (None, 100.0):
            given["b_emulated_gbps"] = models.LINK_EMULATED_GBPS  # the study's emulated link
        with cli_errors():
            setup = models.resolve_setup(**given)
            if setup.tp < 2:
                raise click.BadParameter("the projection needs a measured TP size >= 2",
                                         param_hint="'--tp'")
            links = [(setup.link_a_gbps, setup.link_b_gbps)]
            if setup.b_bound_gbps != setup.link_b_gbps:
                links.append((setup.link_a_gbps, setup.b_bound_gbps))
            fig = R.figure_tp(prompt_tokens=prompt_tokens, ttft_s=ttft_s, tp=setup.tp,
                              model=setup.model, links_gbps=tuple(links))
            click.echo(f"model: {setup.model.describe()}; {setup.describe()}", err=True)
        _save(figures, fig, output, dpi)
        return

    if kind in ("cluster", "cluster-zoom"):
        _plot_cluster(kind, captures, request_logs, output, offset_s, zoom_ns, dpi, figures)
        return
    need = 2 if kind in ("compare", "extra-prefill", "tokens") else 1
    if len(captures) < need:
        raise click.UsageError(f"`plot {kind}` needs {need} capture(s), got {len(captures)}")
    if kind not in ("compare", "extra-prefill", "tokens") and len(captures) > 1:
        raise click.UsageError(f"`plot {kind}` draws one capture, got {len(captures)}")
    if request_logs and len(request_logs) != len(captures):
        raise click.UsageError(f"give one --requests per capture ({len(captures)} "
                                   f"capture(s), {len(request_logs)} log(s))")
    if labels and len(labels) != len(captures):
        raise click.UsageError(f"give one --label per capture ({len(captures)} capture(s), "
                                   f"{len(labels)} label(s))")
    widths = parse_windows(windows_text, "--windows") if kind == "windows" else None
    needs_log = kind != "devices"
    with cli_errors():
        configs = []
        for i, cap in enumerate(captures):
            logs = [request_logs[i]] if request_logs else R.default_request_logs(cap)
            if needs_log and not logs:
                # the command line lacks --requests: a usage error (2), as in `attribute`,
                # once CAP is a capture at all (else that is the error, exit 4)
                require_capture(cap)
                raise click.UsageError(f"{cap}: `plot {kind}` needs a request log; give "
                                       "--requests LOG")
            click.echo(f"loading {cap} ...", err=True)
            configs.append(R.load_configuration(cap, logs, label=labels[i] if labels else None,
                                                offset_s=offset_s, origin_s=origin_s))
        cfg = configs[0]
        if window_ns is not None:  # as rates/bursts/export: longer than a capture is refused
            for c in configs:
                check_window_fits(window_ns, c.capture.t_start_ns, c.capture.t_end_ns,
                                  c.capture.t_start_ns, False, param="window_ns")
        # compare streams a long test into its min/max envelope (bounded memory); devices holds
        # every window of the capture
        if kind == "devices":
            w = window_ns or 100 * R.MS_NS
            for c in configs:
                check_window_count(w, c.capture.t_end_ns - c.capture.t_start_ns,
                                   n_series=max(int((c.capture.counters["data"]
                                                     & (c.capture.counters["source"]
                                                        == "infiniband")).sum()), 1),
                                   what=f"the capture {c.label}",
                                   advice="use a wider window")
        if kind == "request":
            zoom_start_s = None if zoom_start_ns is None else zoom_start_ns / 1e9
            if zoom_start_s is not None and zoom_ns:
                req = R.pick_request(cfg, request_id)
                prefill_s = (int(req["t_first_ns"]) - int(req["t_send_ns"])) / 1e9
                if not zoom_start_s < prefill_s:
                    raise click.BadParameter(
                        f"{zoom_start_s:g} s is outside the prefill of request "
                        f"{req['request_id']} (0 to {prefill_s:.3f} s after its send)",
                        param_hint="'--zoom-start'")
            fig = R.figure_request(cfg, request_id, zoom_ms=(zoom_ns / 1e6) or None,
                                   zoom_start_s=zoom_start_s)
        elif kind == "windows":
            fig = R.figure_windows(cfg, request_id, windows_ns=widths)
        elif kind == "devices":
            w = window_ns or 100 * R.MS_NS
            rates = R.device_rates(cfg, w)  # the emulation check from the same pass
            fig = R.figure_devices(cfg, width_ns=w, verdict=R.emulation_verdict_text(cfg),
                                   rates=rates)
            # the figure shows the emulation check: the exit code is its verdict (0 PASS,
            # 1 FAIL, 3 CANNOT JUDGE), as every command that shows one
            shown_exit = {"ok": 0, "fail": 1}.get(R.emulation_verdict(cfg)[1], 3)
        elif kind == "compare":
            fig = R.figure_comparison(configs, test_name, width_ns=window_ns or R.MS_NS,
                                      start_s=from_s, end_s=to_s)
        else:  # extra-prefill, tokens: the comparison with the setup's links and model
            for c in configs[:2]:  # its attribution and emulation check from one pass
                c.attribution()
            setup = R.setup_for(configs[0], configs[1], given)
            click.echo(f"model: {setup.model.describe()}; {setup.describe()}", err=True)
            cmp = R.comparison(configs[:2], setup=setup)
            fig = (R.figure_extra_prefill(cmp) if kind == "extra-prefill"
                   else R.figure_tokens(cmp))
    _save(figures, fig, output, dpi)
    if kind == "devices" and shown_exit:
        click.get_current_context().exit(shown_exit)


def _plot_cluster(kind, captures, request_logs, output, offset_s, zoom_ns, dpi, figures) -> None:
    """The run set's figures: the heatmap or the zoom (``analysis.cluster``, refined clocks)."""
    from rdmascope.analysis.cluster import RunSetError, aligned_rates, zoom_window
    from rdmascope.analysis.cluster_reduce import cluster_summary
    from rdmascope.analysis.requestlogs import RequestLogError
    from rdmascope.capture import CaptureError
    from rdmascope.cli.shared import find_request_log

    if len(captures) < 2:
        raise click.UsageError(f"`plot {kind}` needs the captures of at least two hosts of "
                                   f"one run, got {len(captures)}")
    if len(request_logs) > 1:
        raise click.UsageError("one request log (the benchmark client's) serves every node; "
                                   "give --requests once")
    log = request_logs[0] if request_logs else find_request_log(list(captures), None)[0]
    click.echo(f"aligning {len(captures)} captures ...", err=True)
    try:
        res = cluster_summary(list(captures), requests=log, offset_s=offset_s)
    except (RunSetError, RequestLogError, CaptureError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    for h, why in (res.failed or {}).items():  # the figure holds the nodes read only
        click.echo(f"note: {h} is not in the figure: {why}", err=True)
    if kind == "cluster":
        ax = figures.plot_cluster_heatmap(aligned_rates(res), requests=res.requests,
                                          origin_ns=res.span_ns[0])
    else:
        zw = zoom_window(res, span_ns=zoom_ns or 60 * 1_000_000)
        if zw is None:
            raise click.ClickException("no all-reduce burst to zoom on in these captures")
        ax = figures.plot_cluster_zoom(aligned_rates(res, start_ns=zw[0], end_ns=zw[1]),
                                       origin_ns=zw[0])
    _save(figures, figures.figure_of(ax), output, dpi)


def _save(figures, fig, output, dpi) -> None:
    try:
        path = figures.save_figure(fig, output, dpi=dpi)
    except (ValueError, OSError, MemoryError) as exc:
        raise click.ClickException(f"cannot write {output}: {exc!s} ({type(exc).__name__})"
                                   ) from exc
    click.echo(str(path))
