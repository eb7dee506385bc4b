"""The ``rdmascope`` command: a thin click group whose subcommands are imported only when run.

Each subcommand lives in its own module (``rdmascope.cli.<module>``) and exposes a click command
object named ``command``. Lazy loading keeps ``rdmascope record`` free of pandas/matplotlib imports
and makes ``rdmascope --help`` fast.
"""

from __future__ import annotations

import importlib

import click

from rdmascope import __version__
from rdmascope.exitcodes import EXIT_ERROR, TABLE, DataError, OptionValueError, usage_error

# command name -> module under rdmascope.cli holding a click command called `command`
COMMANDS: dict[str, tuple[str, str]] = {
    # sampler half (sampler dependencies only)
    "devices": ("devices", "List RDMA devices, ports and counters under a sysfs root."),
    "record": ("record", "Sample RDMA port counters every 1 ms into a capture directory."),
    "inspect": ("inspect", "Print a capture's metadata, time span, sampling quality and gaps."),
    # emulator
    "simulate": ("simulate", "Serve a live emulated ConnectX-7 sysfs tree, or write a capture directly."),
    "demo": ("demo", "Run the whole pipeline on the embedded emulated default scenario."),
    # analysis core
    "rates": ("rates", "Re-bin a capture to rates at any window width."),
    "peaks": ("peaks", "Peak rate per window width, mean and percentiles over a time range."),
    "bursts": ("bursts", "Detect bursts on the 1 ms series: table, duty cycle, gaps."),
    "cluster": ("cluster", "Captures of several hosts of one run: clocks, verdicts, symmetry, stragglers."),
    "verify-emulation": ("verify_emulation", "Check that an NCCL_IB_HCA emulation used one interface."),
    "collectives": ("collectives", "NCCL Inspector collectives on the capture's clock beside the wire bytes."),
    "nccl": ("nccl", "Summarise NCCL INFO logs: version, network, HCAs opened, channels per HCA."),
    # attribution, comparison, estimate
    "attribute": ("attribute", "Split traffic per request into prefill and decode; TTFT, decode speed."),
    "compare": ("compare", "Compare two runs (e.g. 200 Gb/s vs emulated 100 Gb/s) with the estimate."),
    "estimate": ("estimate", "Architecture-based estimate of prefill traffic and TTFT impact."),
    # figures and report
    "plot": ("plot", "Draw one of the study's figures to PNG/SVG/PDF."),
    "report": ("report", "Write a self-contained HTML report for one or two configurations."),
    # into other tools
    "export": ("export", "Export captures for other tools: a Perfetto timeline, a Parquet dataset."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, short_help = COMMANDS[cmd_name]
        try:
            module = importlib.import_module(f"rdmascope.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if _is_extra(exc):
                return _unavailable(cmd_name, short_help, _needs_extras(exc))
            raise
        return module.command

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            rest = join_spaced_units(cmd, rest)
            refuse_both_ways(cmd, rest)
        return name, cmd, rest

    def invoke(self, ctx: click.Context):
        # Commands import pandas/matplotlib inside their functions (so --help stays fast): a
        # lean, sampler-only install must get a one-line explanation, not a traceback.
        from rdmascope.cli.common import notes_after_success

        try:
            with notes_after_success():  # notes only when no fatal error follows them
                return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            if _is_extra(exc):
                raise DataError(
                    f"`rdmascope {ctx.invoked_subcommand}` {_needs_extras(exc)}") from exc
            raise
        except OptionValueError as exc:  # a value the data shows to name nothing: exit 2
            raise usage_error(exc) from exc
        except click.ClickException as exc:
            usage = usage_error(exc)  # an OptionValueError wrapped by the command: exit 2
            if usage is not exc:
                raise usage from exc
            # click exits 1 on a plain ClickException; 1 is the FAIL verdict's alone
            # (rdmascope.exitcodes), so an error that is not a usage error exits EXIT_ERROR
            if exc.exit_code == 1 and not isinstance(exc, click.UsageError):
                exc.exit_code = EXIT_ERROR
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table, so `rdmascope --help` imports no subcommand module.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # the exit-code table, as rdmascope.exitcodes defines it (one meaning per code)
        with formatter.section("Exit codes (every command)"):
            formatter.write_dl([(str(code), f"{name}: {meaning}") for code, name, meaning in TABLE])


#: Modules of the `analysis` extra (pyproject.toml); the sampler install has none of them.
ANALYSIS_EXTRAS = frozenset({"pandas", "matplotlib", "jinja2"})


def _is_extra(exc: ModuleNotFoundError) -> bool:
    return (exc.name or "").split(".")[0] in ANALYSIS_EXTRAS


def _needs_extras(exc: ModuleNotFoundError) -> str:
    return (f"needs the analysis extras ({exc.name} is not installed): "
            "pip install 'rdmascope[analysis]'")


#: Options holding a comma-separated list of durations (parsed by the command, typed str).
TIME_LISTS = frozenset({"windows", "ttft"})


def _time_options(cmd: click.Command) -> set[str]:
    """The option strings of ``cmd`` (and of its subcommands, for a group) that take a time or
    a duration (``cli.common.DurationType``, ``cli.output.WindowType``, ``FiniteFloat(time=True)``,
    or a list of them: ``TIME_LISTS``)."""
    names: set[str] = set()
    cmds = [cmd]
    if isinstance(cmd, click.Group):
        cmds += [c for c in cmd.commands.values()]
    for c in cmds:
        for p in c.params:
            t = p.type
            if isinstance(p, click.Option) and (getattr(t, "time", False) or p.name in TIME_LISTS
                                               or type(t).__name__ in ("DurationType", "WindowType")):
                names.update(p.opts)
    return names


def join_spaced_units(cmd: click.Command, args: list[str]) -> list[str]:
    """Join a time option's number and a unit given as the next word: ``--from 1 ms`` is
    ``--from 1ms`` (the shell splits "1 ms"; the unit was then taken for a CAPTURE argument:
    "Directory 'ms' does not exist"). Only after an option taking a time or duration, and only
    when the word is a unit and no file of that name exists."""
    import os

    from rdmascope.cli.common import is_unit

    opts = _time_options(cmd)
    if not opts:
        return args
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        out.append(a)
        if (a in opts and i + 2 < len(args) and is_unit(args[i + 2])
                and _is_number(args[i + 1]) and not os.path.exists(args[i + 2])):
            out.append(args[i + 1] + args[i + 2])
            i += 3
            continue
        i += 1
    return out


def refuse_both_ways(cmd: click.Command, args: list[str]) -> None:
    """Refuse (``click.UsageError``, exit 2) both sides of an on/off flag on one command line,
    e.g. ``--expect-single --expect-both`` or ``--refine --no-refine``: click keeps the last one
    silently, and which one the user meant is unknown. For a group (``simulate``), the flags of
    the subcommand named in ``args``. A word that is the value of an option taking one is no
    flag; nothing after ``--`` is looked at."""
    if isinstance(cmd, click.Group):
        sub = next((a for a in args if not a.startswith("-")), None)
        cmd = cmd.commands.get(sub) if sub is not None else None
        if cmd is None:
            return
    takes_value: set[str] = set()
    pairs: list[tuple[list[str], list[str]]] = []
    for p in cmd.params:
        if not isinstance(p, click.Option):
            continue
        if p.is_flag or p.count:
            if p.secondary_opts:
                pairs.append((p.opts, p.secondary_opts))
        else:
            takes_value.update(p.opts)
    if not pairs:
        return
    seen: dict[str, int] = {}  # flag -> where it was first typed
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            break
        if a in takes_value:
            i += 2  # "--label --no-refine": a label, not the flag
            continue
        seen.setdefault(a, i)
        i += 1
    for on, off in pairs:
        a = next((o for o in on if o in seen), None)
        b = next((o for o in off if o in seen), None)
        if a and b:  # named in the order they were typed
            a, b = sorted((a, b), key=seen.__getitem__)
            raise click.UsageError(f"{a} and {b} contradict each other: give one")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _unavailable(name: str, short_help: str, why: str) -> click.Command:
    def run() -> None:
        raise click.ClickException(f"`rdmascope {name}` {why}")

    return click.Command(name, callback=run, short_help=short_help, help=f"{short_help} ({why})")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rdmascope")
def main() -> None:
    """rdmascope: see what your RDMA network really does, millisecond by millisecond."""
    # Free Arrow's readers (and the native threads behind them) when the command ends, while
    # Arrow is still alive: left to the interpreter's final teardown, a Parquet reader thread can
    # abort the process with "terminate called without an active exception" (exit -6) after all
    # the work is done (apache/arrow#34314; seen once in CI after record + inspect).
    import gc

    from rdmascope.textsafe import install

    # every line printed goes through one filter: control characters of outside strings (sysfs,
    # request logs, manifests) are shown escaped, never acted on by the terminal
    install()
    click.get_current_context().call_on_close(gc.collect)
