"""``rdmascope report CAPTURE... --requests LOG... -o DIR``: the self-contained HTML report."""

from __future__ import annotations

import click

from rdmascope.cli.output import (
    OFFSET,
    cli_errors,
    link_gbps_note,
    link_gbps_option,
    require_parent_dir,
    say_capture_state,
)
from rdmascope.cli.setup_options import resolve_kwargs, setup_options
from rdmascope.cli.shared import CaptureDirs
from rdmascope.cli.timerange import origin_option


@click.command("report")
@click.argument("captures", nargs=-1, required=True, type=CaptureDirs())
@click.option("--requests", "request_logs", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="Request log, one per capture in the same order (default: the capture's own "
                   "requests.jsonl when it has one).")
@click.option("-o", "--output", "out_dir", default="rdmascope-report", show_default=True,
              type=click.Path(file_okay=False), help="Directory for report.html, figures/ and "
                                                     "tables/.")
@click.option("--label", "labels", multiple=True,
              help="Label per capture, e.g. --label '200 Gb/s' --label 'emulated 100 Gb/s'.")
@click.option("--title", help="Report title.")
@click.option("--offset", "offset_s", type=OFFSET, default=None,
              help="Seconds added to the request logs' times (logs without a shared clock).")
@click.option("--no-embed", is_flag=True,
              help="Link the figures (figures/*.png) instead of embedding them in the HTML.")
@click.option("--warmup-rounds", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="The first N rounds of each test are warm-up: listed, but left "
                                "out of the per-test means and the comparison (method.md: 1).")
@click.option("--run", "runs", type=click.IntRange(min=1), multiple=True, metavar="K",
              help="Keep only run K of a request log holding several runs (vLLM "
                   "--append-result, SGLang bench_serving), as attribute --run: once for every "
                   "capture, or once per capture in order; default: every run, each labelled "
                   "'run k'.")
@click.option("--force", is_flag=True,
              help="Replace an earlier report in a non-empty -o directory (its report.html, "
                   "figures/ and tables/); anything else there is refused, nothing removed.")
@origin_option
@setup_options
@link_gbps_option
def command(captures, request_logs, out_dir, labels, title, offset_s, no_embed, warmup_rounds,
            runs, origin_s, force, **setup_kw):
    """Write a self-contained HTML report for one or more configurations.

    Captures of distinct hosts that overlap in time are one run recorded on several nodes:
    the report is then the cluster view (per-node table, verdicts on every node, stragglers,
    nodes x time heatmap; see `rdmascope cluster`), with one request log for all nodes. One
    run set directory (runs/p2: one capture directory per host) is the same: every
    subdirectory is a node, one that is no readable capture named in the report, which then
    CANNOT JUDGE the set.
    Otherwise, with several captures, each after the first is compared with the first (the baseline,
    e.g. 200 Gb/s; then e.g. the emulated 100 Gb/s); one capture has no comparison. The model,
    TP size and links of the comparison come from the options, else from the captures'
    manifests (the setup given to `record`, the port rate, the twins, the emulation check),
    else the study's; the report names each and where it came from. --link-b and --b-emulated
    apply to every capture after the first. Progress goes to stderr; the report's path to
    stdout. The output directory is created if needed, but its parent must exist; a non-empty
    one is refused unless --force (then only an earlier report's files are replaced).
    Exit code: the verdict the report shows (0 PASS, 1 FAIL, 3 CANNOT JUDGE), 2 usage,
    4 a capture or request-log error.
    """
    import time

    from rdmascope.analysis.report import write_report
    from rdmascope.cli.shared import run_set_paths

    given_dirs = captures
    # a run set directory (one capture per host, as `simulate capture --nodes` writes): its
    # nodes, each named if it is no capture; runs/p2/*: the set's own files skipped
    captures = tuple(run_set_paths(captures))
    from_set_dir = len(given_dirs) == 1 and captures != tuple(given_dirs)
    require_parent_dir(out_dir)  # DIR itself may be new, its parent must exist
    _check_counts(captures, request_logs, labels, runs)
    check_report_dir(out_dir, force)
    for c in captures:  # being recorded / unclean end / readings missing against the audit
        say_capture_state(c)
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        click.echo(f"[{time.monotonic() - t0:6.1f} s] {msg}", err=True)

    # capture errors (truncated segment, bad manifest, empty directory) and request-log errors
    # become one line naming the file, never a traceback
    given = resolve_kwargs(setup_kw)
    if link_gbps_note():
        progress(link_gbps_note())
    from rdmascope.analysis.cluster_report import is_run_set

    if from_set_dir or is_run_set(captures):
        # one run recorded on several hosts (distinct hosts, overlapping in time): the cluster
        # view; one request log (the client's) serves every node
        if len(request_logs) > 1:
            raise click.UsageError("captures of several hosts of one run take one request log "
                                   "(the benchmark client's); give --requests once")
        if len(runs) > 1:
            raise click.UsageError("captures of several hosts of one run share one request "
                                   "log: give --run once")
        from rdmascope.analysis.cluster import RunSetError
        from rdmascope.analysis.cluster_report import write_cluster_report
        from rdmascope.cli.shared import find_request_log

        log = request_logs[0] if request_logs else find_request_log(list(captures), None)[0]
        progress(f"{len(captures)} captures of distinct hosts overlapping in time: one run "
                 f"recorded on {len(captures)} nodes (the cluster view)")
        shown: list = []
        try:
            with cli_errors():
                path = write_cluster_report(list(captures), out_dir, requests=log,
                                            offset_s=offset_s, title=title,
                                            embed=not no_embed, progress=progress,
                                            run=runs[0] if runs else None, verdicts_out=shown)
        except RunSetError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(str(path))
        _exit_with(shown)
        return
    _refuse_same_run_twice(captures, request_logs, runs)
    shown: list = []
    with cli_errors():
        path = write_report(list(captures), list(request_logs) or None, out_dir,
                            labels=list(labels) or None, offset_s=offset_s,
                            embed=not no_embed, title=title, progress=progress,
                            warmup_rounds=warmup_rounds, origin_s=origin_s,
                            setup_options=given, runs=list(runs), verdicts_out=shown)
    click.echo(str(path))
    _exit_with(shown)


#: What a report writes into its directory (``analysis.report.render_report``).
REPORT_FILES = ("report.html", "figures", "tables")


def check_report_dir(out_dir, force: bool) -> None:
    """Refuse a non-empty report directory unless ``force`` (exit 4, as ``demo -o``): a reused
    directory kept the figures of an earlier report that the new one did not draw. With
    ``force``, remove an earlier report's ``report.html``, ``figures/`` and ``tables/`` after
    checking that nothing else is there (otherwise nothing is removed)."""
    import shutil
    from pathlib import Path

    from rdmascope.exitcodes import DataError

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not force:
        raise DataError(f"{out}: already exists and is not empty; use --force to replace an "
                        "earlier report there, or -o to choose another directory")
    other = sorted(p.name for p in out.iterdir() if p.name not in REPORT_FILES)
    wrong = [n for n in REPORT_FILES[1:] if (out / n).exists() and
             ((out / n).is_symlink() or not (out / n).is_dir())]
    if other or wrong or not (out / "report.html").is_file():
        what = other + wrong or ["no report.html"]
        raise DataError(f"{out}: --force replaces only an earlier report (report.html, figures/, "
                        f"tables/), and this directory holds {', '.join(what)}; nothing was "
                        "removed (choose another directory with -o)")
    for n in REPORT_FILES:
        p = out / n
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _check_counts(captures, request_logs, labels, runs) -> None:
    """Refuse, as usage errors (exit 2) before any analysis, a number of --requests, --label or
    --run that fits neither one per capture nor (--run) one for all. A run set (captures of one
    run on several hosts) takes one request log: checked where it is recognised."""
    from rdmascope.analysis.cluster_report import is_run_set

    n = len(captures)
    if n > 1 and is_run_set(captures):
        return
    if request_logs and len(request_logs) != n:
        raise click.UsageError(f"give one request log (--requests) per capture ({n} capture(s), "
                               f"{len(request_logs)} log(s))")
    if labels and len(labels) != n:
        raise click.UsageError(f"give one label per capture (--label; {n} capture(s), "
                               f"{len(labels)} label(s))")
    if len(runs) not in (0, 1, n):
        raise click.UsageError(f"give one --run for every capture or one per capture "
                               f"({n} capture(s), {len(runs)} run(s))")


def _exit_with(verdicts: list[str]) -> None:
    """Exit with the verdict the report shows (``rdmascope.exitcodes``): ``verdicts`` holds the
    verdict words ("PASS", "FAIL", "CANNOT JUDGE") of its emulation checks (or the cluster's)."""
    from rdmascope.exitcodes import VERDICT_EXIT, worst

    code = worst(VERDICT_EXIT[v] for v in verdicts)
    if code:
        click.get_current_context().exit(code)


def _refuse_same_run_twice(captures, request_logs, runs) -> None:
    """Refuse, before any analysis, a later capture that is the first one again with the same
    request log (the comparison refuses it too, but only after analysing both: minutes on long
    captures). Only the plain cases are judged here: no --run, and the capture's own log or one
    --requests per capture; anything else is left to the comparison's own check."""
    import os

    if runs or request_logs and len(request_logs) != len(captures):
        return
    from rdmascope.capture import read_manifest

    def key(i):
        try:
            cid = read_manifest(captures[i]).get("capture_id")
        except Exception:  # noqa: BLE001 (the analysis names a bad capture)
            return None
        log = request_logs[i] if request_logs else os.path.join(captures[i], "requests.jsonl")
        return (cid, os.path.realpath(log)) if cid else None

    first = key(0)
    for i in range(1, len(captures)):
        if first is not None and key(i) == first:
            raise click.UsageError(
                f"{captures[i]} is the same capture as {captures[0]} (capture_id {first[0]}) "
                "with the same request log; compare two different runs")
