"""--from, --to and --origin: the time range and window grid options of the analysis commands.

Times are seconds after the capture start (a unit allowed: 1.5s, 250ms); ``time_range`` turns
them into the capture's ns and refuses, naming the option (exit 2), a range that is not one:
--to not after --from, past the capture's end or start, or holding none of its readings.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import click

from rdmascope.cli.output import NONNEG_SECONDS, SECONDS, param_hint

__all__ = ["time_range_options", "origin_option", "grid_origin", "time_range",
           "no_windows_error"]


def time_range_options(f: Callable) -> Callable:
    """Add ``--from`` / ``--to`` (seconds relative to the capture start) as t_from / t_to, and
    ``--origin`` (the window grid's origin, ``origin_option``) as origin_s."""
    f = origin_option(f)
    f = click.option("--to", "t_to", type=NONNEG_SECONDS, default=None, metavar="TIME",
                     help="End of the range after the capture start: seconds (12.5) or with a "
                          "unit (12.5s, 800ms, 1h30m); not negative.")(f)
    f = click.option("--from", "t_from", type=NONNEG_SECONDS, default=None, metavar="TIME",
                     help="Start of the range after the capture start: seconds (1.5) or with "
                          "a unit (1.5s, 250ms); not negative (a time before the capture has no "
                          "readings). Selects windows; never moves the grid.")(f)
    return f


def origin_option(f: Callable) -> Callable:
    """Add ``--origin`` (seconds after the capture start, a unit allowed) as origin_s."""
    return click.option("--origin", "origin_s", type=SECONDS, default=None, metavar="TIME",
                        help="Align windows to this instant after the capture start (seconds "
                             "or with a unit) [default: the capture start, the one grid every "
                             "command and figure uses].")(f)


def grid_origin(t_start_ns: int, origin_s: float | None) -> int | None:
    """Return the window origin (int ns) for ``--origin`` seconds, None when not given.

    None means the default: the capture start (``rdmascope.analysis.series.default_origin``).
    """
    return None if origin_s is None else int(t_start_ns) + int(round(origin_s * 1e9))


def time_range(t_start_ns: int, t_from: float | None, t_to: float | None, *,
               t_end_ns: int | None = None, readings=None,
               source: str | None = "infiniband") -> tuple[int | None, int | None]:
    """Turn --from/--to seconds (relative to ``t_start_ns``) into absolute ns (None = open).

    Raises ``click.BadParameter`` naming the option when a time is not finite, --to is not
    after --from, (given the capture's end ``t_end_ns``) --from is at or after that end or
    --to at or before the start, or (given ``readings``, the command's ``stream.CaptureInfo``,
    and its counters' ``source``) the range holds none of the readings: --from at or after
    the last reading, --to at or before the first (the capture's stop record can come tens of
    ms after its last reading). Times in the messages are seconds after the capture start.
    """
    start, end = _time_range(t_start_ns, t_from, t_to, t_end_ns)
    if readings is not None and (start is not None or end is not None):
        from rdmascope.analysis.stream import edge_spans

        spans = edge_spans(readings, source)
        if spans:
            lo = min(s[0] for s in spans.values())
            hi = max(s[1] for s in spans.values())
            first, last = _sec((lo - t_start_ns) / 1e9), _sec((hi - t_start_ns) / 1e9)
            if start is not None and start >= hi:
                raise click.BadParameter(
                    f"{t_from:g} s is at or after the capture's last reading ({last} s "
                    f"after its start; the readings span {first} to {last} s)",
                    param_hint="'--from'")
            if end is not None and end <= lo:
                raise click.BadParameter(
                    f"{t_to:g} s is at or before the capture's first reading ({first} s "
                    f"after its start; the readings span {first} to {last} s)",
                    param_hint="'--to'")
    return start, end


def no_windows_error(capture, t_from: float | None, t_to: float | None) -> click.ClickException:
    """The error for a range that holds no window: a usage error naming --from/--to (exit 2)
    when one was given, else the capture's own problem (exit 4)."""
    if t_from is None and t_to is None:
        return click.ClickException(f"{capture}: no windows in the requested range")
    given = " and ".join(f"{o} {v:g} s" for o, v in (("--from", t_from), ("--to", t_to))
                         if v is not None)
    return click.BadParameter(f"{capture}: no windows in the range {given} (seconds after the "
                              "capture start): it holds none of the readings",
                              param_hint="'--from' / '--to'")


def _time_range(t_start_ns: int, t_from: float | None, t_to: float | None,
                t_end_ns: int | None) -> tuple[int | None, int | None]:
    """``time_range`` against the capture's start and end records only."""
    for opt, v in (("--from", t_from), ("--to", t_to)):
        if v is not None and not math.isfinite(v):
            raise click.BadParameter(f"{v!r} is not a finite number of seconds",
                                     param_hint=param_hint(opt))
    start = None if t_from is None else t_start_ns + int(round(t_from * 1e9))
    end = None if t_to is None else t_start_ns + int(round(t_to * 1e9))
    if start is not None and end is not None and end <= start:
        raise click.BadParameter(f"--to ({t_to:g} s) must be after --from ({t_from:g} s)",
                                 param_hint="'--to'")
    if t_end_ns is not None:
        span = (t_end_ns - t_start_ns) / 1e9
        if start is not None and start >= t_end_ns:
            raise click.BadParameter(f"{t_from:g} s is at or after the capture's end ({span:.3f} "
                                     "s after its start)", param_hint="'--from'")
        if end is not None and end <= t_start_ns:
            raise click.BadParameter(f"{t_to:g} s is at or before the capture's start (0 s; it "
                                     f"ends at {span:.3f} s)", param_hint="'--to'")
    return start, end


def _sec(x: float) -> str:
    """Seconds for a message: 3 decimals, or 6 for a time within 10 ms of 0 that 3 would show
    as 0.000 next to a smaller value given (a first reading 41 us after the start)."""
    return f"{x:.6f}" if 0 < abs(x) < 0.01 else f"{x:.3f}"
