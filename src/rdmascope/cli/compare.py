"""``rdmascope compare``: two runs of one test plan side by side, with the estimate."""

from __future__ import annotations

import click

from rdmascope.cli.output import (
    NONNEG_SECONDS,
    OFFSET,
    emit,
    link_gbps_note,
    link_gbps_option,
    output_options,
)
from rdmascope.cli.setup_options import describe_sources, resolve, setup_options

FORMATS = ["native", "vllm", "guidellm", "genai-perf", "aiperf", "inference-perf", "sglang",
           "llmperf"]

TABLE_COLS = ["test", "n_requests", "prompt_tokens", "ttft_a_s", "ttft_b_s", "ttft_change_s",
              "ttft_change_pct", "ttlft_a_s", "ttlft_b_s", "ttlft_change_s", "ttlft_change_pct",
              "decode_speed_a_tps", "decode_speed_b_tps", "decode_speed_change_pct"]
EST_COLS = ["test", "per_token_a_bytes", "per_token_b_bytes", "per_token_diff_pct",
            "network_share_a", "extra_prefill_s", "extra_prefill_min_s", "extra_prefill_max_s",
            "estimate_s", "estimate_arch_s", "bound_used_pct", "exceeds_bound",
            "correction_to_real_s", "ttlft_b_real_s"]


def _same_file(a, b) -> bool:
    """True when two request logs are one file or have the same content."""
    import filecmp
    import os

    try:
        return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


@click.command("compare", short_help="Compare two runs with the estimate beside the measurement.")
@click.argument("capture_a", type=click.Path(exists=True, file_okay=False))
@click.argument("capture_b", type=click.Path(exists=True, file_okay=False))
@click.option("--requests-a", type=click.Path(dir_okay=False),
              help="Request log of A (default: CAPTURE_A/requests.jsonl).")
@click.option("--requests-b", type=click.Path(dir_okay=False),
              help="Request log of B (default: CAPTURE_B/requests.jsonl).")
@click.option("--format-a", type=click.Choice(FORMATS), default=None)
@click.option("--format-b", type=click.Choice(FORMATS), default=None)
@click.option("--offset-a", type=OFFSET, default=None,
              help="Seconds added to A's log times.")
@click.option("--offset-b", type=OFFSET, default=None,
              help="Seconds added to B's log times.")
@click.option("--run-a", type=click.IntRange(min=1), default=None, metavar="K",
              help="Keep only run K of A's log when it holds several (vLLM --append-result, "
                   "SGLang); default: all.")
@click.option("--run-b", type=click.IntRange(min=1), default=None, metavar="K",
              help="Keep only run K of B's log when it holds several.")
@click.option("--label-a", default=None, help="Name of run A (default: its directory name).")
@click.option("--label-b", default=None, help="Name of run B.")
@setup_options
@click.option("--arrival-window", type=NONNEG_SECONDS, default=1.0, show_default=True,
              help="Unlabelled requests sent within this many seconds form one round.")
@click.option("--warmup-rounds", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="The first N rounds of each test (both runs) are warm-up: left "
                                "out of the comparison (method.md: 1).")
@link_gbps_option
@output_options
def command(capture_a, capture_b, requests_a, requests_b, format_a, format_b, offset_a, offset_b,
            run_a, run_b, label_a, label_b, arrival_window, warmup_rounds, out, **setup_kw):
    """Compare run A (e.g. 200 Gb/s) with run B (e.g. emulated 100 Gb/s), test by test.

    Each run is a capture plus its request log. Per test: TTFT and time to the last first token
    (change in s and %), decode speed change, prefill bytes per prompt token on both sides, and
    the estimate (A's prefill bytes sent again at the speed difference) beside the measured
    increase, plus the correction of B from the emulated link to a real cable.

    The model and links come from the options, else from the captures' manifests (the setup
    given to `record`, the port rate, the twins and the emulation check), else the study's;
    the output names each and where it came from.

    The same capture twice with the same request log is an error (one capture holding both runs
    needs a request log per run). When A carried its traffic on a single RDMA interface
    and B on both, a warning says the arguments look swapped (A should be the faster link). A
    measured increase above the bound by more than 2 % is flagged (exceeds_bound) with a note.
    """
    from pathlib import Path

    from rdmascope.analysis import estimate as E
    from rdmascope.analysis.attribute import attribute
    from rdmascope.analysis.compare import compare, interfaces_used, run_facts
    from rdmascope.analysis.requestlogs import RequestLogError, align, read_request_log
    from rdmascope.analysis.stream import open_capture
    from rdmascope.capture import CaptureError
    from rdmascope.cli.attribute import default_log

    atts, caps, ifaces = [], [], []
    logs = [default_log(capture_a, requests_a, "--requests-a"),
            default_log(capture_b, requests_b, "--requests-b")]
    for cap_path in (capture_a, capture_b):
        try:
            caps.append(open_capture(cap_path))  # intervals made segment by segment
        except (CaptureError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
    id_a, id_b = (c.meta.get("capture_id") for c in caps)
    if id_a is not None and id_a == id_b and _same_file(*logs):
        raise click.ClickException(f"CAPTURE_A ({capture_a}) and CAPTURE_B ({capture_b}) are "
                                   f"the same capture (capture_id {id_a}) with the same request "
                                   f"log ({logs[0]}); compare two different runs")
    for cap, log_path, fmt, off, run in ((caps[0], logs[0], format_a, offset_a, run_a),
                                         (caps[1], logs[1], format_b, offset_b, run_b)):
        try:
            ifaces.append(interfaces_used(cap))
            log = align(read_request_log(log_path, fmt, run=run), cap, off)
            atts.append(attribute(cap, log, arrival_window_s=arrival_window,
                                  warmup_rounds=warmup_rounds))
        except (RequestLogError, CaptureError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
    setup = resolve(setup_kw, run_facts(caps[0], ifaces[0]), run_facts(caps[1], ifaces[1]))
    la = label_a or Path(capture_a).name
    lb = label_b or Path(capture_b).name
    try:
        c = compare(atts[0], atts[1], label_a=la, label_b=lb, setup=setup,
                    interfaces_a=ifaces[0], interfaces_b=ifaces[1])
    except (ValueError, E.EstimateError) as exc:
        raise click.ClickException(str(exc)) from exc
    for w in c.warnings:  # on stderr, so that --json/--csv output stays clean but it is seen
        click.secho(f"WARNING: {w}", err=True, fg="red", bold=True)
    meta = {k: v for k, v in c.to_dict().items() if k not in ("tests", "rounds")}
    meta["warmup_rounds"] = warmup_rounds
    meta["line_rate"] = link_gbps_note()
    emit({"tests": c.tests, "rounds": c.rounds}, out, meta=meta,
         human=lambda: _human(c, la, lb, setup, capture_a, capture_b))


def _human(c, la, lb, setup, capture_a, capture_b) -> None:
    from rdmascope.cli.attribute import echo_table

    click.echo(f"A = {la} ({setup.link_label('A')}): {capture_a}\n"
               f"B = {lb} ({setup.link_label('B')}): {capture_b}")
    click.echo(f"model: {setup.model.describe()}; {setup.describe()}")
    for line in describe_sources(setup):
        click.echo(f"  from {line}")
    if link_gbps_note():
        click.echo(link_gbps_note())
    echo_table(c.tests, TABLE_COLS, "Timing per test (means of rounds; ttlft = time to the last "
                                    "first token)")
    echo_table(c.tests, EST_COLS, "Measured increase vs the estimate (upper bound)")
    for n in c.notes:
        click.echo(f"note: {n}")
