"""``rdmascope demo``: run the whole pipeline on the embedded emulated default scenario."""

from __future__ import annotations

import click

from rdmascope.cli.simulate import MAX_NODES


def _nodes(ctx, param, value):
    """1 (the one-node demo) or 3..MAX_NODES (the cluster demo): 2 is refused as the range
    is (exit 2), naming the values there are."""
    if value is not None and value != 1 and not 3 <= value <= MAX_NODES:
        raise click.BadParameter(f"{value} is not 1 (the one-node demo) or in the range "
                                 f"3<=x<={MAX_NODES} (the cluster demo: one node without "
                                 "NCCL_IB_HCA and one straggler need a third to compare with)",
                                 ctx=ctx, param=param)
    return value


@click.command(name="demo")
@click.option("-o", "--output", default=None, type=click.Path(),
              help="Directory for the demo's captures, request logs and summary "
                   "[default: a new ./rdmascope-demo/<date-time>/ per run].")
@click.option("--force", is_flag=True,
              help="With -o: replace an earlier demo's outputs in a non-empty directory (its "
                   "captures, report/ and summary.txt); anything else in their place is refused.")
@click.option("--nodes", type=int, default=1, show_default=True, callback=_nodes,
              help=f"1: the one-node demo. N from 3 to {MAX_NODES}: the cluster demo instead: "
                   "an emulated N-node run (one node without NCCL_IB_HCA, one straggler, wall "
                   "clocks apart), captures written by the emulator, then `rdmascope cluster` "
                   "and the cluster report (seconds).")
def command(output, force, nodes) -> None:
    """Emulated ConnectX-7 twins -> the real `rdmascope record` -> analysis, at 200 Gb/s and at the
    emulated 100 Gb/s (about a minute). Without -o each run gets a fresh directory; with -o a
    non-empty directory is refused unless --force."""
    import importlib

    if output is not None:  # a mistyped -o is an error, never a new tree (as every command)
        from rdmascope.cli.output import require_parent_dir

        require_parent_dir(output)
    # the analysis half runs at the end: say at once, not after a minute of recording
    for mod in ("pandas", "matplotlib", "jinja2"):
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            raise click.ClickException(
                f"demo needs the analysis extras ({mod} is not installed): "
                "pip install 'rdmascope[analysis]'") from exc
    import signal
    import sys

    from rdmascope.emulator.demo import DemoError, run_demo

    # SIGTERM (kill, timeout, a closed CI job) ends the demo like Ctrl-C: the cleanup in
    # run_live runs (its server and recorder stopped, its /dev/shm tree removed) instead of
    # the process dying with them left behind
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        if nodes > 1:
            from rdmascope.emulator.cluster_demo import run_cluster_demo

            run_cluster_demo(output, nodes=nodes, force=force, log=click.echo)
            return
        run_demo(output, force=force, log=click.echo)
    except DemoError as exc:
        raise click.ClickException(str(exc)) from exc
