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
    (EXIT_USAGE, "USAGE", "wrong command line: unknown option, bad value, contradicting options, "
                          "a path or an output's directory that does not exist or cannot be "
                          "written"),
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
