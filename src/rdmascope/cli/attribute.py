"""``rdmascope attribute``: split a capture's traffic per request into prefill and decode."""

from __future__ import annotations

import click

from rdmascope.cli.output import (
    NONNEG_SECONDS,
    OFFSET,
    POSITIVE,
    emit,
    link_gbps_option,
    output_options,
    say_capture_state,
)
from rdmascope.cli.shared import (
    REQUEST_FORMATS,
    CaptureDirs,
    default_log,
    echo_table,
    find_request_log,
    run_set_paths,
)
from rdmascope.cli.timerange import grid_origin, origin_option

#: The conserving split (each byte to one request's prefill or decode, or to idle/other) is
#: the main view; the window view (all traffic inside a request's window, shared with the
#: requests overlapping it) follows it, labelled "in window, shared" (report_tables._HEADERS).
REQ_COLS = ["request_id", "test", "round", "prompt_tokens", "output_tokens", "ttft_s",
            "decode_speed_tps", "tpot_s", "itl_mean_s", "prefill_tx_split_bytes",
            "prefill_per_token_split_bytes", "decode_tx_split_bytes", "prefill_tx_bytes",
            "prefill_tx_gbps", "prefill_peak_tx_gbps", "prefill_over_line_windows",
            "prefill_bursts", "decode_tx_bytes", "decode_tx_gbps"]
ROUND_COLS = ["test", "round", "n_requests", "prompt_tokens", "time_to_last_first_token_s",
              "mean_ttft_s", "decode_speed_tps", "prefill_tx_split_bytes",
              "prefill_per_token_split_bytes", "decode_tx_split_bytes", "prefill_tx_bytes",
              "decode_tx_bytes", "prefill_peak_tx_gbps", "prefill_over_line_windows",
              "prefill_bursts"]
TEST_COLS = ["test", "rounds", "n_requests", "time_to_last_first_token_s",
             "time_to_last_first_token_min_s", "time_to_last_first_token_max_s", "mean_ttft_s",
             "mean_ttft_min_s", "mean_ttft_max_s", "decode_speed_tps", "decode_speed_min_tps",
             "decode_speed_max_tps", "prefill_per_token_split_bytes"]
TIME_COLS = ["state", "seconds_s", "share", "tx_bytes", "rx_bytes", "mean_tx_gbps",
             "tx_known_bytes", "rx_known_bytes", "unknown_s"]


def attribution_tables(att) -> dict:
    """Return the Attribution's tables (name -> DataFrame) and its metadata for ``emit``."""
    from rdmascope.analysis.metrics import DEFINITIONS

    tables = {"requests": att.requests.drop(columns=["chunk_times"], errors="ignore"),
              "failed": att.failed,
              "rounds": att.rounds, "tests": att.tests, "by_series": att.by_series,
              "time_classes": att.time_classes, "timeline": att.timeline, "cells": att.cells}
    meta = {"capture": att.capture_path, "request_log": att.log_path, "format": att.log_format,
            "alignment": att.alignment, "summary": att.summary, "definitions": DEFINITIONS,
            "runs": att.runs,
            "notes": att.notes}
    return tables, meta


def _percentiles(ctx, param, value):
    from rdmascope.analysis.cellstats import parse_percentiles

    try:
        return parse_percentiles(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


#: Per-cell columns printed (the JSON/CSV table "cells" holds every statistic).
def cell_cols(percentiles) -> list[str]:
    from rdmascope.analysis.cellstats import pct_name

    cols = ["scope", "source", "test", "round", "n_requests"]
    for m in ("ttft", "tpot", "itl", "e2e"):
        cols += [f"{m}_mean_s"] + [f"{m}_{pct_name(p)}_s" for p in percentiles] + [f"{m}_max_s"]
    return cols + ["output_throughput_tps", "total_token_throughput_tps",
                   "request_throughput_rps"]


@click.command("attribute", short_help="Split traffic per request into prefill and decode.")
@click.argument("capture", nargs=-1, type=CaptureDirs())
@click.option("--requests", "requests_log", type=click.Path(exists=True, dir_okay=False),
              multiple=True,
              help="Request log (default: CAPTURE/requests.jsonl; for several hosts' captures "
                   "of one run: the one in a capture directory, whose host's clock it is). "
                   "Give it several times for several logs of one run (one per rank API "
                   "server or client): each is aligned on its own, requests are merged with "
                   "their source named, statistics per log and merged.")
@click.option("--format", "fmt", type=click.Choice(REQUEST_FORMATS),
              help="Request log format (default: detected from the content).")
@click.option("--offset", type=OFFSET, multiple=True,
              help="Seconds added to the log's times (places a relative log on the capture). "
                   "For a file holding several runs: once for every run, or once per run in "
                   "order.")
@click.option("--run", "run", type=click.IntRange(min=1), default=None, metavar="K",
              help="Keep only run K of a file holding several runs (vLLM --append-result, "
                   "SGLang bench_serving); default: every run, each labelled 'run k'.")
@click.option("--use-corrected", is_flag=True,
              help="Where a tool's stored values fail a consistency check with a derivable "
                   "correction (column 'check'), use the corrected values for the windows "
                   "(flagged 'corrected: ...'); default: the stored values, corrections shown "
                   "in the *_corrected_* columns.")
@click.option("--arrival-window", type=NONNEG_SECONDS, default=1.0, show_default=True,
              help="Unlabelled requests sent within this many seconds form one round.")
@click.option("--capacity", type=POSITIVE, default=None,
              help="Link capacity for burst detection, Gb/s (default: the manifest's port rate).")
@click.option("--warmup-rounds", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="The first N rounds of each test are warm-up: listed, but left "
                                "out of the per-test means and spreads (method.md: 1).")
@click.option("--definitions", is_flag=True,
              help="Also print the metric definitions (alone, without a capture: only them).")
@click.option("--percentiles", "percentiles", default="50,90,95,99", show_default=True,
              metavar="P,P,...", callback=_percentiles,
              help="Percentiles of the per-cell TTFT, TPOT, ITL and E2E statistics.")
@origin_option
@link_gbps_option
@output_options
def command(capture, requests_log, fmt, offset, run, use_corrected, arrival_window, capacity,
            warmup_rounds, definitions, percentiles, origin_s, out):
    """Attribute CAPTURE's RDMA traffic to the requests of a request log.

    Per request: prefill [send, first token] and decode [first token, last token] bytes (node
    total; per device and per link in the by_series table of --json/--csv/--parquet), mean and
    1 ms peak rates, bursts,
    bytes per prompt token, TTFT, TPOT, decode speed, ITL. Per round and test: time to the last
    first token, mean TTFT, prefill and decode bytes (means with min-max over rounds), and the
    capture's time split into prefill / decode-only / idle.
    """
    from rdmascope.analysis.attribute import attribute
    from rdmascope.analysis.requestlogs import (
        RequestLogError,
        align,
        merge_logs,
        read_request_log,
    )
    from rdmascope.analysis.stream import open_capture
    from rdmascope.capture import CaptureError

    logs = (requests_log,) if isinstance(requests_log, str) else tuple(requests_log or ())
    capture = run_set_paths(capture)  # a run set directory: its nodes (cli.shared)
    if len(capture) > 1:  # several hosts of one run: the client's log on every node
        if len(logs) > 1:
            raise click.UsageError("several --requests logs work with one capture; with "
                                   "several hosts' captures give the client's one log")
        params = dict(locals())
        params["requests_log"] = logs[0] if logs else None
        return _run_set(command, capture, params)
    requests_log = logs[0] if len(logs) == 1 else None
    capture = capture[0] if capture else None
    if capture is None:
        if definitions:
            _definitions()
            return
        raise click.UsageError("Missing argument 'CAPTURE' (only --definitions works without "
                               "one).")
    paths = list(logs) if len(logs) > 1 else [default_log(capture, requests_log, "--requests")]
    try:
        cap = open_capture(capture)  # intervals made segment by segment
        say_capture_state(capture, cap.meta, cap)
        aligned = []
        for log_path in paths:
            log = read_request_log(log_path, fmt, run=run)
            if len(offset) > 1 and len(offset) != len(log.runs):
                raise click.UsageError(f"--offset given {len(offset)} times but {log_path} "
                                       f"holds {len(log.runs)} run(s): give it once (every "
                                       "run) or once per run")
            aligned.append(align(log, cap, list(offset) or None))
        log = merge_logs(aligned)
        att = attribute(cap, log, arrival_window_s=arrival_window, link_capacity_gbps=capacity,
                        warmup_rounds=warmup_rounds, use_corrected=use_corrected,
                        origin_ns=grid_origin(cap.t_start_ns, origin_s), percentiles=percentiles)
    except (RequestLogError, CaptureError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    tables, meta = attribution_tables(att)
    emit(tables, out, human=lambda: _human(att, definitions), meta=meta)


def _run_set(command, captures, params) -> None:
    """Attribute the one request log (the client's, on its host's clock) on every node: the
    offsets refined from the traffic (``analysis.cluster.refined_run_set``) move the log onto
    each node's CLOCK_MONOTONIC through ``--offset`` (``cli.runset.for_each_node``)."""
    from rdmascope.analysis.cluster import RunSetError, refined_run_set
    from rdmascope.analysis.requestlogs import RequestLogError, read_request_log
    from rdmascope.capture import CaptureError, read_manifest
    from rdmascope.cli.runset import for_each_node, place_nodes

    log_path, holder = params["requests_log"], None
    if log_path is None:
        log_path, holder = find_request_log(list(captures), None)
        if log_path is None:
            raise click.UsageError("no requests.jsonl in the captures' directories or their "
                                   "common parent: give --requests LOG (the client's)")
    try:
        ref = read_manifest(captures[holder]).get("host") if holder is not None else None
        click.echo("aligning the hosts' clocks from the traffic ...", err=True)
        # the nodes that cannot be read are set aside here and named by for_each_node
        placed, _bad = place_nodes(captures)
        rs = refined_run_set([str(n.path) for n in placed.nodes],
                             reference=ref if ref in placed.hosts else None)
        log = read_request_log(log_path, params["fmt"], run=params["run"])
    except (RunSetError, RequestLogError, CaptureError) as exc:
        raise click.ClickException(str(exc)) from exc
    given = list(params["offset"]) or [0.0]
    rm = rs.ref.realtime_minus_monotonic_ns

    def node_params(node, _rs):
        if log.clock == "CLOCK_MONOTONIC":  # the reference host's clock
            offs = [o - node.offset_ns / 1e9 for o in given]
        elif log.clock == "CLOCK_REALTIME":  # through the reference's clock pairs
            offs = [o - (rm + node.offset_ns) / 1e9 for o in given]
        elif params["offset"]:  # relative, placed on the reference's clock by --offset
            offs = [o - node.offset_ns / 1e9 for o in given]
        else:  # relative without --offset: each node anchors it to its first prefill burst
            offs = []
        return {"requests_log": log_path, "offset": tuple(offs)}

    for_each_node(command, captures, params, run_set=rs, node_params=node_params)


def _human(att, definitions: bool) -> None:

    s = att.summary
    click.echo(f"capture {att.capture_path}; requests {att.log_path} ({att.log_format}): "
               f"{s['n_ok']} ok, {s['n_failed']} failed (kept out); {s['n_tests']} test(s), "
               f"{s['n_rounds']} round(s) in all (one per test and round)")
    warm = ["warmup"] if att.warmup_rounds else []
    # a request flagged (runs past the capture, corrected values) says so in its row
    flag = ["flag"] if "flag" in att.requests and att.requests["flag"].astype(bool).any() else []
    # a split unknown somewhere: its known part (what was read) beside it, as in --json
    known = [f"{w}_tx_split_known_bytes" for w in ("prefill", "decode")
             if f"{w}_tx_split_known_bytes" in att.requests
             and att.requests[f"{w}_tx_split_bytes"].isna().any()]
    echo_table(att.requests, REQ_COLS + known + warm + flag,
               "Per request (node tx, all RDMA devices)")
    echo_table(att.rounds, ROUND_COLS + warm, "Per round")
    echo_table(att.tests, TEST_COLS[:2] + (["warmup_rounds"] if warm else []) + TEST_COLS[2:],
               "Per test (mean of rounds, min and max" + (", warm-up left out)" if warm
                                                          else ")"),
               headers={"n_requests": "requests per round"})  # not the test's total
    echo_table(att.time_classes, TIME_COLS, "Time classes of the capture")
    if len(att.cells):
        echo_table(att.cells, cell_cols(att.percentiles),
                   "Per cell (test, and each round): TTFT, TPOT, ITL, E2E as vLLM's "
                   "calculate_metrics; warm-up left out")
    r = att.requests
    if r["ttft_reasoning_s"].notna().any():
        echo_table(r[r["ttft_reasoning_s"].notna()], ["request_id", "ttft_s", "ttft_reasoning_s",
                                                       "ttft_answer_s"],
                   "Reasoning requests: time to the first reasoning and first answer token")
    fixed = r[r["ttft_corrected_s"].notna()]
    if len(fixed):
        echo_table(fixed, ["request_id", "ttft_s", "ttft_corrected_s", "tpot_s",
                           "tpot_corrected_s", "itl_mean_s", "itl_mean_corrected_s", "corrected"],
                   "Stored values that failed a consistency check, and the CORRECTED values"
                   + (" (used: --use-corrected)" if r["corrected"].any() else
                      " (not used; --use-corrected uses them)"))
    if len(att.failed):
        from rdmascope.analysis.requestlogs import short_reason

        failed = att.failed.assign(error=[short_reason(e, 160) for e in att.failed["error"]])
        echo_table(failed, ["request_id", "run", "row", "error"],
                   "Failed requests (kept out of every metric; full reasons in --json/--csv)")
    if s.get("itl_pooled_mean_s") is not None:
        click.echo(f"\npooled ITL: mean {s['itl_pooled_mean_s'] * 1e3:.2f} ms, p50 "
                   f"{s['itl_pooled_p50_s'] * 1e3:.2f} ms, p99 {s['itl_pooled_p99_s'] * 1e3:.2f} ms")
    for n in att.notes:
        click.echo(f"note: {n}")
    if definitions:
        click.echo("")
        _definitions()


def _definitions() -> None:
    from rdmascope.analysis.metrics import DEFINITIONS

    click.echo("Definitions:")
    for k, v in DEFINITIONS.items():
        click.echo(f"  {k}: {v}")
