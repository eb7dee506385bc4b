"""``rdmascope compare``: two runs of one test plan side by side, with the estimate."""

from __future__ import annotations

from pathlib import Path

import click

from rdmascope.cli.output import (
    NONNEG_SECONDS,
    OFFSET,
    emit,
    link_gbps_note,
    link_gbps_option,
    output_options,
    say_capture_state,
)
from rdmascope.cli.setup_options import describe_sources, resolve, setup_options
from rdmascope.cli.shared import (
    REQUEST_FORMATS,
    default_log,
    echo_table,
    find_request_log,
    run_set_dir,
)
from rdmascope.exitcodes import OptionValueError

TABLE_COLS = ["test", "n_requests", "prompt_tokens", "ttft_a_s", "ttft_b_s", "ttft_change_s",
              "ttft_change_pct", "ttlft_a_s", "ttlft_b_s", "ttlft_change_s", "ttlft_change_pct",
              "decode_speed_a_tps", "decode_speed_b_tps", "decode_speed_change_pct"]
EST_COLS = ["test", "per_token_a_bytes", "per_token_b_bytes", "per_token_diff_pct",
            "network_share_a", "extra_prefill_s", "extra_prefill_min_s", "extra_prefill_max_s",
            "estimate_s", "estimate_arch_s", "bound_used_pct", "exceeds_bound",
            "correction_to_real_s", "ttlft_b_real_s", "ttft_b_real_s", "ttft_change_real_pct"]


def _same_file(a, b) -> bool:
    """True when two request logs are one file or have the same content."""
    import filecmp
    import os

    try:
        return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


NODE_COLS = ["host", "verdict_a", "verdict_b", "peak_1ms_a_gbps", "peak_1ms_b_gbps",
             "peak_1ms_change_pct", "peak_1s_a_gbps", "peak_1s_b_gbps", "bytes_per_request_a",
             "bytes_per_request_b", "bytes_per_request_change_pct"]


def _open_set(name: str, path, caps, reference):
    """(run set, reference host, the request log found, the reference's capture, every node
    directory, every host) of one side. A node that cannot be read (no capture, unreadable, of
    another run) is set aside (``cli.runset.place_nodes``) and named: its host is one of the
    set's, and ``cluster_summary`` counts it as CANNOT JUDGE."""
    from rdmascope.analysis.cluster import RunSetError
    from rdmascope.capture import CaptureError
    from rdmascope.cli.runset import place_nodes

    try:
        log, idx = find_request_log(caps, reference)
        rs, bad = place_nodes(caps)
        if reference is not None and reference not in rs.hosts:
            raise RunSetError(f"--reference {reference!r}: no capture of that host read "
                              f"(hosts: {', '.join(rs.hosts)})")
    except (RunSetError, CaptureError) as exc:
        raise click.ClickException(f"{name} ({path}): {exc}") from exc
    host = reference
    if host is None:
        holder = str(Path(caps[idx])) if idx is not None else None
        host = next((n.host for n in rs.nodes if str(n.path) == holder), rs.nodes[0].host)
    ref_cap = str(next(n.path for n in rs.nodes if n.host == host))
    hosts = rs.hosts + [h for h, _ in bad.values()]
    return rs, host, log, ref_cap, list(caps), hosts


@click.command("compare", short_help="Compare two runs (captures or run sets) with the "
                                     "estimate beside the measurement.")
@click.argument("capture_a", type=click.Path(exists=True, file_okay=False))
@click.argument("capture_b", type=click.Path(exists=True, file_okay=False))
@click.option("--reference", default=None, metavar="HOST",
              help="Run sets: the benchmark client's host (its capture carries the timing; "
                   "the set's time axis) [default: the host whose capture holds the request "
                   "log, else the first capture's].")
@click.option("--requests-a", type=click.Path(exists=True, dir_okay=False),
              help="Request log of A (default: CAPTURE_A/requests.jsonl).")
@click.option("--requests-b", type=click.Path(exists=True, dir_okay=False),
              help="Request log of B (default: CAPTURE_B/requests.jsonl).")
@click.option("--format-a", type=click.Choice(REQUEST_FORMATS), default=None)
@click.option("--format-b", type=click.Choice(REQUEST_FORMATS), default=None)
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
            run_a, run_b, label_a, label_b, arrival_window, warmup_rounds, out, reference=None,
            **setup_kw):
    """Compare run A (e.g. 200 Gb/s) with run B (e.g. emulated 100 Gb/s), test by test.

    Each run is a capture plus its request log, or a run set: a directory holding one capture
    per host of the run (as `simulate capture --nodes` or `record -o runs/x/{host}` write) and
    the benchmark client's request log (in the client's capture or beside the captures). For
    run sets the timing (TTFT, decode speed, estimate) comes from the one request log on the
    client's capture, and a per-node table (and the set's row) compares each host's emulation
    verdict, link peaks and bytes per request (`rdmascope cluster` on each set); the two sets
    must hold the same hosts (refused, naming them, otherwise).

    Per test: TTFT and time to the last first token (change in s and %), decode speed change, prefill bytes per prompt token on both sides, and
    the estimate (A's prefill bytes sent again at the speed difference) beside the measured
    increase, plus the correction of B from the emulated link to a real cable.

    The model and links come from the options, else from the captures' manifests (the setup
    given to `record`, the port rate, the twins and the emulation check), else the study's;
    the output names each and where it came from.

    The same capture twice with the same request log is an error (one capture holding both runs
    needs a request log per run). When A carried its traffic on a single RDMA interface
    and B on both, a warning says the arguments look swapped (A should be the faster link). A
    measured increase above the bound by more than 2 % is flagged (exceeds_bound) with a note.

    Exit code: with run sets, the worst of the two sets' verdicts shown in the per-node table
    (1 when either is FAIL, else 3 when either CANNOT JUDGE, e.g. a node of a set that could
    not be read; 0 when both PASS); two captures show no verdict (0). 2 usage, 4 a capture or
    request-log error.
    """
    from rdmascope.analysis import estimate as E
    from rdmascope.analysis.compare import (
        attribute_with_checks,
        compare,
        interfaces_of,
        run_facts,
    )
    from rdmascope.analysis.requestlogs import RequestLogError, align, read_request_log
    from rdmascope.analysis.stream import open_capture
    from rdmascope.analysis.verify import require_rdma_counters
    from rdmascope.capture import CaptureError

    sets = [run_set_dir(capture_a), run_set_dir(capture_b)]
    if (sets[0] is None) != (sets[1] is None):
        one, many = (capture_a, capture_b) if sets[0] is None else (capture_b, capture_a)
        k = len([s for s in sets if s][0])
        if not (Path(one) / "manifest.json").is_file():
            raise click.ClickException(
                f"{one}: has no manifest.json and holds no capture directory; not an rdmascope "
                f"capture or run set ({many} is a run set of {k} captures, one per host)")
        raise click.UsageError(
            f"{many} is a run set ({k} captures, one per host) but {one} is one capture; give "
            "two run set directories or two captures")
    if reference is not None and sets[0] is None:
        raise click.UsageError("--reference applies to run sets (directories of captures)",
                               ctx=click.get_current_context())
    set_info = None
    if sets[0] is not None:
        set_info = [_open_set("A", capture_a, sets[0], reference),
                    _open_set("B", capture_b, sets[1], reference)]
        ha, hb = (x[5] for x in set_info)
        only_a = [h for h in ha if h not in hb]
        only_b = [h for h in hb if h not in ha]
        if only_a or only_b:
            what = "; ".join(x for x in (
                f"only in A ({capture_a}): {', '.join(only_a)}" if only_a else "",
                f"only in B ({capture_b}): {', '.join(only_b)}" if only_b else "") if x)
            raise click.ClickException(f"the run sets do not hold the same hosts: {what}")
        if requests_a is None:
            requests_a = set_info[0][2] or str(Path(capture_a) / "requests.jsonl")
        if requests_b is None:
            requests_b = set_info[1][2] or str(Path(capture_b) / "requests.jsonl")
        label_a = label_a or Path(capture_a).name
        label_b = label_b or Path(capture_b).name
        dir_a, dir_b = capture_a, capture_b
        capture_a, capture_b = set_info[0][3], set_info[1][3]

    atts, caps, ifaces = [], [], []
    logs = [default_log(capture_a, requests_a, "--requests-a"),
            default_log(capture_b, requests_b, "--requests-b")]
    for cap_path in (capture_a, capture_b):
        try:
            caps.append(open_capture(cap_path))  # intervals made segment by segment
            say_capture_state(cap_path, caps[-1].meta, caps[-1])
        except (CaptureError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
    id_a, id_b = (c.meta.get("capture_id") for c in caps)
    if id_a is not None and id_a == id_b and _same_file(*logs):
        raise click.UsageError(f"CAPTURE_A ({capture_a}) and CAPTURE_B ({capture_b}) are "
                                   f"the same capture (capture_id {id_a}) with the same request "
                                   f"log ({logs[0]}); compare two different runs")
    for side, cap, log_path, fmt, off, run in (("a", caps[0], logs[0], format_a, offset_a, run_a),
                                               ("b", caps[1], logs[1], format_b, offset_b, run_b)):
        try:
            require_rdma_counters(cap)  # said before anything about the log, as ever
            log = align(read_request_log(log_path, fmt, run=run), cap, off)
            # the attribution and the emulation check from one pass over the capture
            att, checks = attribute_with_checks(cap, log, arrival_window_s=arrival_window,
                                                warmup_rounds=warmup_rounds)
            atts.append(att)
            ifaces.append(interfaces_of(checks))
        except (RequestLogError, CaptureError, ValueError) as exc:
            if isinstance(exc, OptionValueError) and exc.option == "--run":
                exc.option = f"--run-{side}"  # the side's own option (exit 2, cli.__init__)
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
    tables = {"tests": c.tests, "rounds": c.rounds}
    nodes = None
    if set_info is not None:
        nodes, set_meta = _compare_sets(set_info, (logs[0], logs[1]), (format_a, format_b),
                                        (offset_a, offset_b), (run_a, run_b), (dir_a, dir_b))
        tables["nodes"] = nodes
        meta["run_sets"] = set_meta
    emit(tables, out, meta=meta,
         human=lambda: _human(c, la, lb, setup, capture_a, capture_b, nodes))
    if set_info is not None:  # the sets' verdicts are shown: the exit code is theirs
        from rdmascope.exitcodes import VERDICT_EXIT, worst

        click.get_current_context().exit(
            worst(VERDICT_EXIT[m["verdict"]] for m in meta["run_sets"].values()))


def _compare_sets(set_info, logs, formats, offsets, runs, dirs):
    """Per-node comparison of two run sets (``cluster.compare_run_sets``) and its meta."""
    from rdmascope.analysis.cluster import RunSetError, compare_run_sets
    from rdmascope.analysis.cluster_reduce import cluster_summary
    from rdmascope.analysis.requestlogs import RequestLogError
    from rdmascope.capture import CaptureError

    res = []
    for name, (_rs, host, _log, _cap, caps, _hosts), log, fmt, off, run, d in zip(
            "AB", set_info, logs, formats, offsets, runs, dirs, strict=True):
        try:
            res.append(cluster_summary(caps, requests=log,
                                       request_format=fmt, offset_s=off, reference=host,
                                       run=run))
        except (RunSetError, RequestLogError, CaptureError, ValueError) as exc:
            raise click.ClickException(f"{name} ({d}): {exc}") from exc
    for name, r in zip("AB", res, strict=True):
        for w in r.warnings:
            click.echo(f"warning: {name}: {w}", err=True)
        if r.verdict != "PASS":  # the timing above treats the set as one run on one link
            who = f" (failing: {', '.join(r.failing)})" if r.failing else ""
            click.secho(f"WARNING: {name}: the run set's emulation check is {r.verdict}{who}: "
                        "its nodes did not all run the same link setting, so its timing is not "
                        "one link's; see the per-node table", err=True, fg="red", bold=True)
    try:
        nodes = compare_run_sets(res[0], res[1])
    except RunSetError as exc:
        raise click.ClickException(str(exc)) from exc
    meta = {side: {"dir": str(d), "reference": r.run_set.ref.host, "hosts": r.run_set.hosts,
                   "verdict": r.verdict, "failing": r.failing, "expect": r.expect,
                   "stragglers": [h for h, f in zip(r.stragglers.get("host", []),
                                                    r.stragglers.get("finding", []),
                                                    strict=True) if f]}
            for side, d, r in zip("AB", dirs, res, strict=True)}
    return nodes, meta


def _human(c, la, lb, setup, capture_a, capture_b, nodes=None) -> None:

    click.echo(f"A = {la} ({setup.link_label('A')}): {capture_a}\n"
               f"B = {lb} ({setup.link_label('B')}): {capture_b}")
    click.echo(f"model: {setup.model.describe()}; {setup.describe()}")
    for line in describe_sources(setup):
        click.echo(f"  from {line}")
    if link_gbps_note():
        click.echo(link_gbps_note())
    echo_table(c.tests, TABLE_COLS, "Timing per test (means of rounds; ttlft = time to the last "
                                    "first token)",
               headers={"n_requests": "requests per round"})  # not the test's total
    echo_table(c.tests, EST_COLS, "Measured increase vs the estimate (upper bound)")
    for n in c.notes:
        click.echo(f"note: {n}")
    if nodes is not None:
        echo_table(nodes, NODE_COLS, "Per node (each host's capture; the last row: the set, "
                                     "highest peak and median bytes per request)")
