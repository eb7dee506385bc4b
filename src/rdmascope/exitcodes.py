"""The exit codes of every ``rdmascope`` command: one meaning each.

=====  ===============  ==============================================================================
code   name             meaning
=====  ===============  ==============================================================================
0      PASS             the command did its work; a verdict it shows is PASS
1      FAIL             a verdict the command shows is FAIL (emulation check, cluster, report)
2      USAGE            the command line is wrong: unknown option, bad value, options that contradict,
                        a path that does not exist, an output whose directory does not exist or
                        cannot be written (refused before any work)
3      CANNOT JUDGE     a verdict cannot be given (too little traffic, counters unknown, not one run)
4      ERROR            the data or a file stopped the command: a directory that exists but is no
                        capture, a corrupt or truncated segment, an unreadable capture or request
                        log, an output that exists or fails while being written
=====  ===============  ==============================================================================

Scripts can rely on 1 and 3 coming only from a verdict, never from an error. A command that
runs on several captures of a run set exits with the worst of its nodes' codes in the order
ERROR > FAIL > CANNOT JUDGE > PASS (USAGE when every node refused the same command line).

``DataError`` is the ``click.ClickException`` for code 4; ``rdmascope.cli`` turns any other plain
``ClickException`` (exit 1 in click) into code 4 too, so that 1 stays the verdict's.

A value that names something the data does not hold (``--run 5`` of a log of 3 runs,
``--request-id X`` of no such request, ``--reference HOST`` of no capture, ``--counters bogus``)
is a usage error too, although it can only be found after reading: the library raises
``OptionValueError`` (a ``ValueError`` naming the option and the values there are), and the CLI
shows it as click's ``BadParameter`` ("Invalid value for '--run': ...", exit 2) wherever it was
caught and wrapped (``usage_error``).
This module imports only click: the sampler's ``record`` uses it as well.
"""

from __future__ import annotations

import click

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_CANNOT_JUDGE = 3
EXIT_ERROR = 4

#: verdict word -> exit code (``verify-emulation``, ``cluster``, ``report``)
VERDICT_EXIT = {"PASS": EXIT_PASS, "FAIL": EXIT_FAIL, "CANNOT JUDGE": EXIT_CANNOT_JUDGE}

#: (code, name, meaning) rows of the table above, for ``--help`` and the README test.
TABLE = (
    (EXIT_PASS, "PASS", "done; a verdict shown is PASS"),
    (EXIT_FAIL, "FAIL", "a verdict shown is FAIL (emulation, cluster, report)"),
    (EXIT_USAGE, "USAGE", "wrong command line: unknown option, bad value (also one naming what "
                          "the capture or log does not hold, e.g. `--run 5` of a log of 3 runs "
                          "or `--reference` of no host), contradicting options, an option "
                          "without the one it goes with, a path or an output's directory that "
                          "does not exist or cannot be written"),
    (EXIT_CANNOT_JUDGE, "CANNOT JUDGE", "a verdict cannot be given (too little traffic, unknown "
                                        "counters, not one run)"),
    (EXIT_ERROR, "ERROR", "the data or a file stopped the command (a directory that is no "
                          "capture, corrupt segment, unreadable capture or log, output exists or "
                          "fails while written)"),
)


def help_text() -> str:
    """Return the table as the lines ``rdmascope --help`` prints."""
    return "\n".join(f"{code}  {name:<12}  {meaning}" for code, name, meaning in TABLE)


class DataError(click.ClickException):
    """A one-line error about the data or a file (exit code 4, ``EXIT_ERROR``)."""

    exit_code = EXIT_ERROR


class OptionValueError(ValueError):
    """An option's value names something absent or invalid that only the data shows: a usage
    error (exit 2), never a data error. ``option``: the option as typed (``"--run"``; a caller
    handling two such options, e.g. ``--run-a``/``--run-b``, may set it); the message says what
    was given and the values there are ("run 5 does not exist: LOG holds 3 runs (1..3)")."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


def option_value_error(exc: BaseException | None) -> OptionValueError | None:
    """The ``OptionValueError`` that ``exc`` is or was raised from (its ``__cause__`` /
    ``__context__`` chain), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OptionValueError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def usage_error(exc: click.ClickException | OptionValueError) -> click.ClickException:
    """``exc`` itself, or, when it is or wraps an ``OptionValueError`` (a CLI module caught a
    library error and raised ``ClickException(str(exc)) from exc``), the ``click.BadParameter``
    (exit 2) naming its option."""
    if isinstance(exc, click.UsageError):
        return exc
    found = option_value_error(exc)
    if found is None:
        return exc
    hint = f"'{found.option}'" if found.option else None
    new = click.BadParameter(str(found), param_hint=hint)
    new.__cause__ = found
    return new


def worst(codes) -> int:
    """Combine the exit codes of several nodes: ERROR > FAIL > CANNOT JUDGE > PASS; USAGE only
    when every code is USAGE (the same wrong command line everywhere), else it counts as ERROR.
    An empty ``codes`` is PASS."""
    codes = list(codes)
    if codes and all(c == EXIT_USAGE for c in codes):
        return EXIT_USAGE
    if any(c not in (EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_JUDGE) for c in codes):
        return EXIT_ERROR
    if EXIT_FAIL in codes:
        return EXIT_FAIL
    if EXIT_CANNOT_JUDGE in codes:
        return EXIT_CANNOT_JUDGE
    return EXIT_PASS
