"""``rdmascope demo``: run the whole pipeline on the embedded emulated default scenario."""

from __future__ import annotations

import click


@click.command(name="demo")
@click.option("-o", "--output", default="rdmascope-demo", show_default=True, type=click.Path(),
              help="Directory for the demo's captures, request logs and summary.")
@click.option("--force", is_flag=True,
              help="Replace the outputs of an earlier demo in a non-empty output directory.")
def command(output, force) -> None:
    """Emulated ConnectX-7 twins -> the real `rdmascope record` -> analysis, at 200 Gb/s and at the
    emulated 100 Gb/s (about a minute). Refuses a non-empty output directory unless --force."""
    from rdmascope.emulator.demo import DemoError, run_demo

    try:
        run_demo(output, force=force, log=click.echo)
    except DemoError as exc:
        raise click.ClickException(str(exc)) from exc
