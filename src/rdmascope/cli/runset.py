"""Run a single-capture command on every capture of a run set (several hosts of one run).

A command taking ``CAPTURE...`` calls ``for_each_node`` when given more than one: the captures are
checked as one run (``analysis.cluster.open_run_set``: one capture per host, overlapping in time,
each named when refused), then the command runs once per node, in the order given, under a
header naming the host. ``--from/--to`` are then seconds after the **reference** capture's start
(the first given) and are moved onto each node's own clock by the offsets refined from the
traffic (``cluster.refined_run_set``; one extra streamed pass per node, only when a range is
given; without one the wall clocks only label the headers). One node's problem is that node's: an
error is printed naming the host and the others still run. Exit code (``rdmascope.exitcodes``):
4 if any node erred, else 1 if any failed, else 3 if any could not judge, else 0 (2 when every
node refused the same command line). ``--json`` prints one object in the shape of one capture's (``merge_node_json``):
``meta.run_set`` (hosts, captures, wall-clock offsets, exit codes), ``meta.nodes`` (host -> that
node's meta) and each table with every node's rows, a ``host`` field first; ``--csv``
prints each node's CSV after a ``# host: NAME`` line; ``--parquet P`` writes ``P``'s stem plus
``.HOST`` per node.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import click

from rdmascope.cli.common import notes_after_success, say_later
from rdmascope.exitcodes import (
    EXIT_CANNOT_JUDGE,
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_PASS,
    EXIT_USAGE,
    OptionValueError,
    usage_error,
    worst,
)


def for_each_node(command: click.Command, captures, params: dict[str, Any], *,
                  arg: str = "capture", run_set=None, node_params=None) -> None:
    """Invoke ``command`` once per capture of the run set ``captures`` (see the module docstring)
    and exit with the combined code. ``params``: the command's own parameters (its ``locals()``
    at entry); ``arg``: the name of its CAPTURE argument. ``run_set``: an already placed
    ``cluster.RunSet`` (e.g. refined), else the wall clocks place them. ``node_params(node,
    run_set)``: parameter overrides per node."""
    from rdmascope.analysis.cluster import RunSetError
    from rdmascope.capture import CaptureError

    moved = [k for k in ("t_from", "t_to") if params.get(k) is not None]
    if len(moved) == 2 and params["t_to"] <= params["t_from"]:  # a usage error, said once
        raise click.BadParameter(f"--to ({params['t_to']:g} s) must be after --from "
                                 f"({params['t_from']:g} s)", param_hint="'--to'")
    try:
        placed, bad = place_nodes(captures)
        rs = run_set if run_set is not None else placed
        if run_set is None and moved:  # a time range must mean the same instants on every node
            from rdmascope.analysis.cluster import refined_run_set

            click.echo("aligning the hosts' clocks from the traffic (for --from/--to) ...",
                       err=True)
            rs = refined_run_set([str(n.path) for n in placed.nodes],
                                 reference=placed.ref.host)
            for w in rs.warnings:
                say_later(f"warning: {w}")
    except (RunSetError, CaptureError) as exc:
        raise click.ClickException(str(exc)) from exc
    ctx = click.get_current_context()
    out = params.get("out")
    ref = rs.ref
    ref_start = ref.t_start_ns + ref.offset_ns
    codes: dict[str, int] = {}
    objs: dict[str, Any] = {}
    by_path = {str(n.path): n for n in rs.nodes}
    for path in captures:
        node = by_path.get(str(Path(path)))
        if node is None:  # set aside: no capture, unreadable, or of another run; named
            host, why = bad.get(str(Path(path)), (Path(path).name, "could not be placed in "
                                                  "the run set"))
            if not (out is not None and (out.json or out.csv)):
                click.echo(f"== {host} ({path}): not read")
            click.echo(f"Error: {host}: {why}", err=True)
            codes[host] = EXIT_ERROR if why.startswith("unreadable") else EXIT_CANNOT_JUDGE
            objs[host] = None
            continue
        p = {k: v for k, v in params.items() if k in {q.name for q in command.params}}
        p[arg] = (path,)
        shift_s = (ref_start - (node.t_start_ns + node.offset_ns)) / 1e9
        for k in moved:
            p[k] = max(0.0, params[k] + shift_s)
        if node_params is not None:
            p.update(node_params(node, rs))
        if out is not None:  # cli.output.output_options: --json/--csv/--parquet -> out
            p.update(as_json=out.json, as_csv=out.csv, parquet=None)
            if out.parquet:
                base = Path(out.parquet)
                p["parquet"] = str(base.with_name(f"{base.stem}.{node.host}{base.suffix}"))
        how = "refined from the traffic" if rs.refined else "wall clocks"
        header = (f"== {node.host} ({path}): clock offset to {ref.host} "
                  f"{node.offset_ns / 1e9:+.6f} s ({how})"
                  + (f"; --from/--to moved by {shift_s:+.3f} s" if moved else ""))
        buf = io.StringIO()
        code = 0
        with contextlib.ExitStack() as stack:
            if out is not None and out.json:
                stack.enter_context(contextlib.redirect_stdout(buf))
            elif out is not None and out.csv:
                click.echo(f"# host: {node.host}")
            else:
                click.echo(header)
            try:
                with notes_after_success():  # this node's notes, unless it errs
                    ctx.invoke(command, **p)
            except click.exceptions.Exit as exc:
                code = exc.exit_code
            except (click.ClickException, OptionValueError) as exc:
                exc = usage_error(exc)  # a value naming nothing (--run 5): exit 2
                click.echo(f"Error: {node.host}: {exc.format_message()}", err=True)
                code = exc.exit_code  # 2 for a usage error, else an error about the data
                if code == EXIT_FAIL and not isinstance(exc, click.UsageError):
                    code = EXIT_ERROR  # 1 is the FAIL verdict's alone
        if out is not None and out.json:
            text = buf.getvalue().strip()
            try:
                objs[node.host] = json.loads(text) if text else None
            except ValueError:
                objs[node.host] = {"output": text}
        elif out is None or out.human:
            click.echo("")
        codes[node.host] = code
    failed = [h for h, c in codes.items() if c == EXIT_FAIL]
    erred = [h for h, c in codes.items() if c not in (EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_JUDGE)]
    unsure = [h for h, c in codes.items() if c == EXIT_CANNOT_JUDGE]
    final = worst(codes.values())
    if out is not None and out.json:
        run_set = {"reference": ref.host,
                   "nodes": [{"host": n.host, "capture": str(n.path), "offset_ns": n.offset_ns}
                             for n in rs.nodes],
                   "not_read": {h: why for h, why in bad.values()},
                   "exit_codes": codes, "failed": failed, "erred": erred,
                   "cannot_judge": unsure}
        click.echo(json.dumps(merge_node_json(objs, run_set), indent=1))
    elif out is None or out.human:
        status = {EXIT_PASS: "every node passed", EXIT_FAIL: f"FAIL: {', '.join(failed)}",
                  EXIT_USAGE: "refused on every node (usage error)",
                  EXIT_CANNOT_JUDGE: f"CANNOT JUDGE: {', '.join(unsure)}",
                  EXIT_ERROR: f"ERROR on {', '.join(erred)}"}[final]
        unread = f" ({len(bad)} not read)" if bad else ""
        click.echo(f"run set: {len(rs.nodes) + len(bad)} hosts{unread}; {status}")
    ctx.exit(final)


def place_nodes(captures):
    """(run set of the captures that can be placed, {path: (host, reason)} of those set aside).

    A path that is no readable capture (missing, empty, no manifest), a capture without clock
    pairs or one of another run (no overlap with the reference's) is set aside and named, as
    ``cluster`` does (``cluster_reduce.open_run_set_lenient``; reasons of unreadable ones start
    with "unreadable"), so that the other nodes still run. Raises ``RunSetError`` for two
    captures of one host or fewer than two that can be placed."""
    from rdmascope.analysis.cluster_reduce import open_run_set_lenient

    return open_run_set_lenient([str(Path(c)) for c in captures])


def merge_node_json(objs: dict[str, Any], run_set: dict[str, Any]) -> dict[str, Any]:
    """Return the run set's ``--json`` object in the shape of one capture's: ``schema_version``,
    ``meta`` (``run_set``, and each node's own meta under ``nodes``: host -> meta), then every
    table of the nodes' objects with each node's rows in order, a ``host`` field first.

    ``objs``: host -> that node's parsed ``--json`` object (None when it printed nothing, e.g.
    after an error; ``{"output": text}`` when it was not JSON: kept as that node's meta)."""
    from rdmascope.cli.common import JSON_SCHEMA_VERSION

    tables: dict[str, list] = {}
    metas: dict[str, Any] = {}
    for host, obj in objs.items():
        if not isinstance(obj, dict):
            metas[host] = None
            continue
        metas[host] = obj.get("meta", {k: v for k, v in obj.items() if k != "schema_version"})
        for name, rows in obj.items():
            if name in ("meta", "schema_version") or not isinstance(rows, list):
                continue
            tables.setdefault(name, []).extend(
                {"host": host, **r} if isinstance(r, dict) else {"host": host, "value": r}
                for r in rows)
    return {"schema_version": JSON_SCHEMA_VERSION, "meta": {"run_set": run_set, "nodes": metas},
            **tables}
