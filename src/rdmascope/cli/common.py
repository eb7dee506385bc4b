"""Small helpers shared by the CLI commands: duration parsing and JSON output.

- ``parse_duration_ns("1ms") -> 1_000_000``: "100us", "0.5ms", "2s", "1m", "1h", and compound
  durations such as "1h30m" or "2m30s"; the unit is required (a bare "1" is refused: it read as
  1 s where 1 ms was meant), only a zero may omit it.
- ``parse_seconds("1.5s") -> 1.5``: a time in seconds for ``--from/--to/--origin/--offset``: a
  bare number is seconds, a unit may be given ("2ms", "1h30m", "-0.5s").
  ``DURATION`` is the same as a click parameter type (value in ns).
- ``check_window_fits(width_ns, lo, hi, t0, ranged)``: refuse a window longer than the range.
- ``echo_json(obj)``: print ``obj`` as indented JSON on stdout (non-JSON values via ``str``),
  ``schema_version`` (``JSON_SCHEMA_VERSION``) first.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
_DUR_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")
#: One "<number><unit>" part of a compound duration ("1h30m" = "1h" + "30m").
_PART_RE = re.compile(r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]+)\s*")


#: Longest duration accepted (1e9 s, ~32 years): int ns stays far inside int64.
MAX_DURATION_NS = 10**18


def parse_duration_ns(text: str, guess_unit: str | None = None) -> int:
    """Parse a duration like "1ms", "0.5ms", "100us", "2s", "1m", "1h" to int ns.

    Compound durations, largest unit first, are the sum of their parts ("1h30m" = 5,400 s).
    The unit (ns, us/µs, ms, s, m/min, h) is required; a bare number is refused unless it is zero
    (the same in every unit, e.g. ``--zoom 0``). Raises ``ValueError`` naming the text and the
    accepted units, or for a duration above ``MAX_DURATION_NS`` (1e9 s). ``guess_unit``: the
    unit a bare number most likely meant (``guess_unit_of``), offered in that error ("5ms?").
    """
    m = _DUR_RE.match(str(text))
    unit = m.group(2) if m else None
    units = ", ".join(u for u in _UNITS_NS if u != "µs")
    if m is None:
        parts = _compound(str(text))
        if parts is not None:
            return _limit(text, sum(float(n) * _UNITS_NS[u] for n, u in parts))
    if m is None and _DUR_RE.match(str(text).strip().removeprefix("-")):
        raise ValueError(f"{text!r}: a duration cannot be negative; expected e.g. 1ms, 2s")
    if m is None or (unit and unit not in _UNITS_NS):
        raise ValueError(f"{text!r} is not a duration; expected a number with a unit "
                         f"({units}), e.g. 1ms, 100us, 2s")
    number = float(m.group(1))
    if not unit:
        if number == 0:
            return 0
        guess = f"; {str(text).strip()}{guess_unit}?" if guess_unit else ""
        raise ValueError(f"{str(text).strip()!r} has no unit; expected e.g. 1ms, 500us, 2s "
                         f"(units: {units}){guess}")
    return _limit(text, number * _UNITS_NS[unit])


def is_unit(text: str) -> bool:
    """True when ``text`` is one of the duration units alone ("ms", "s", "us", ...)."""
    return str(text).strip() in _UNITS_NS


def _compound(text: str) -> list[tuple[str, str]] | None:
    """Split "1h30m" / "2m 30s" into (number, unit) parts, largest unit first; None if not one."""
    t = text.strip()
    parts, pos = [], 0
    while pos < len(t):
        m = _PART_RE.match(t, pos)
        if m is None or m.group(2) not in _UNITS_NS:
            return None
        parts.append((m.group(1), m.group(2)))
        pos = m.end()
    sizes = [_UNITS_NS[u] for _, u in parts]
    if len(parts) < 2 or any(a <= b for a, b in zip(sizes, sizes[1:], strict=False)):
        return None  # "30m1h" or "1s1s": not a duration anyone writes
    return parts


def _limit(text, ns: float) -> int:
    if not ns <= MAX_DURATION_NS:  # also catches inf/nan ("1e999s" parses as inf)
        raise ValueError(f"{str(text).strip()!r} is longer than the limit of "
                         f"{MAX_DURATION_NS / 1e9:g} s "
                         f"(~{MAX_DURATION_NS / 1e9 / (365.25 * 86400):,.0f} years); a typo?")
    return int(round(ns))


def parse_seconds(text) -> float:
    """Parse a time in seconds: a bare number is seconds ("1.5", "-2"), or a signed duration
    with a unit ("1.5s", "2ms", "-0.5s", "1h30m"; see ``parse_duration_ns``).

    Returns float seconds. Raises ``ValueError`` naming the text for anything else, or a value
    beyond ``MAX_DURATION_NS`` (1e9 s).
    """
    t = str(text).strip()
    try:
        return float(t)  # a bare number: seconds (inf/nan are left to the caller to refuse)
    except ValueError:
        pass
    sign = -1.0 if t.startswith("-") else 1.0
    body = t[1:].lstrip() if t[:1] in "+-" else t
    try:
        return sign * parse_duration_ns(body) / 1e9
    except ValueError as exc:
        raise ValueError(f"{t!r} is not a time; expected seconds (1.5) or a number with a "
                         "unit (1.5s, 250ms, 1h30m)") from exc


def guess_unit_of(param) -> str:
    """The unit a bare number given to the duration option ``param`` most likely meant: its
    default's unit ("1ms" -> "ms"), else "s" for a --duration, else "ms" (an interval, window
    or clock error: readings are ~1 ms apart)."""
    default = getattr(param, "default", None)
    m = _DUR_RE.match(default) if isinstance(default, str) else None
    if m and m.group(2) in _UNITS_NS:
        return m.group(2)
    return "s" if "duration" in (getattr(param, "name", None) or "") else "ms"


class DurationType(click.ParamType):
    """A click parameter type for durations; the value is int ns."""

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_duration_ns(value, guess_unit_of(param))
        except ValueError as exc:
            # click prefixes "Invalid value for '--interval':", so the option is named
            self.fail(str(exc), param, ctx)


DURATION = DurationType()


def window_fits(width_ns: int, lo_ns: int, hi_ns: int, t0_ns: int, ranged: bool) -> str | None:
    """None when a window of ``width_ns`` fits in the time [lo_ns, hi_ns) it re-bins, else the
    sentence saying it does not ("window 1000 s is longer than the capture (55.0 s)"; with
    ``ranged``, "the range 2 s to 4 s" with ``t0_ns`` the capture start). One such window
    would hold the whole range and time without readings: a diluted, partly covered rate."""
    span = int(hi_ns) - int(lo_ns)
    if span <= 0 or int(width_ns) <= span:
        return None
    what = (f"the range {(lo_ns - t0_ns) / 1e9:g} s to {(hi_ns - t0_ns) / 1e9:g} s" if ranged
            else "the capture")
    width = f"{width_ns / 1e9:g} s" if width_ns >= 10**9 else f"{width_ns / 1e6:g} ms"
    return f"window {width} is longer than {what} ({span / 1e9:.1f} s)"


def given(param: str) -> bool:
    """True when the current command's parameter ``param`` came from the command line (or
    the environment), not from its default: a default window is no user's choice to refuse."""
    from click.core import ParameterSource

    ctx, src = click.get_current_context(silent=True), None
    while ctx is not None and src is None:  # a run set's node: the command line's context
        src, ctx = ctx.get_parameter_source(param), ctx.parent
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def check_window_fits(width_ns: int, lo_ns: int, hi_ns: int, t0_ns: int, ranged: bool, *,
                      option: str = "--window", param: str = "width_ns") -> None:
    """Refuse (usage error, exit 2, naming ``option``) a window given on the command line
    (``param``, see ``given``) that is longer than the time it re-bins (``window_fits``):
    what every command taking one ``--window`` does."""
    if not given(param):
        return
    why = window_fits(width_ns, lo_ns, hi_ns, t0_ns, ranged)
    if why is not None:
        raise click.BadParameter(
            f"{why}: its one window would spread those bytes over time without readings (a "
            f"diluted rate); give at most {_at_most(int(hi_ns) - int(lo_ns))}",
            param_hint=f"'{option}'")


def _at_most(ns: int) -> str:
    """``ns`` rounded down to what a user types (0.1 s, else 1 ms, else 1 us): a window of
    that width fits."""
    if ns >= 10**9:
        return f"{ns // 10**8 / 10:g}s"
    return f"{ns // 10**6}ms" if ns >= 10**6 else f"{max(ns // 1000, 1)}us"


#: The version of every ``--json`` object's layout, its first key ``schema_version``: raised
#: when a key is renamed or removed, or a value changes meaning (new keys do not raise it).
JSON_SCHEMA_VERSION = 1


def echo_json(obj: Any) -> None:
    """Print the dict ``obj`` as indented JSON to stdout, ``"schema_version"`` first."""
    click.echo(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **obj}, indent=2,
                          default=str))


#: ``click.Context.meta`` key of the stderr notes held back until the command has ended
_NOTES_KEY = "rdmascope.notes_after_success"


def say_later(text: str) -> None:
    """Print ``text`` on stderr when the running command ends without an error (a verdict's
    exit included), so that a note or warning never comes just before a fatal ``Error:``
    line, which alone is then what the user reads. Outside ``notes_after_success`` (library
    use, tests calling a helper) it is printed at once. The same text is held once."""
    ctx = click.get_current_context(silent=True)
    notes = ctx.meta.get(_NOTES_KEY) if ctx is not None else None
    if notes is None:
        click.echo(text, err=True)
    elif text not in notes:
        notes.append(text)


class notes_after_success:  # noqa: N801 (used as a context manager, like contextlib's)
    """Hold ``say_later`` notes while the block runs; print them on stderr when it ends
    normally or by ``click.exceptions.Exit`` (a verdict's exit code), drop them when it raises
    anything else (the error is what the user needs). Nested blocks (a run set's nodes) hold
    their own."""

    def __enter__(self):
        self.ctx = click.get_current_context()
        self.outer = self.ctx.meta.get(_NOTES_KEY)
        self.notes: list[str] = []
        self.ctx.meta[_NOTES_KEY] = self.notes
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.ctx.meta[_NOTES_KEY] = self.outer
        if exc_type is None or issubclass(exc_type, click.exceptions.Exit):
            for n in self.notes:
                click.echo(n, err=True)
        return False
