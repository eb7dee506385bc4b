"""Small helpers shared by the CLI commands: duration parsing and JSON output.

- ``parse_duration_ns("1ms") -> 1_000_000``: "100us", "0.5ms", "2s", "1m", "1h"; the unit is
  required (a bare "1" is refused: it read as 1 s where 1 ms was meant), only a zero may omit it.
  ``DURATION`` is the same as a click parameter type (value in ns).
- ``echo_json(obj)``: print ``obj`` as indented JSON on stdout (non-JSON values via ``str``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
_DUR_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


#: Longest duration accepted (1e9 s, ~32 years): int ns stays far inside int64.
MAX_DURATION_NS = 10**18


def parse_duration_ns(text: str) -> int:
    """Parse a duration like "1ms", "0.5ms", "100us", "2s", "1m", "1h" to int ns.

    The unit (ns, us/µs, ms, s, m/min, h) is required; a bare number is refused unless it is zero
    (the same in every unit, e.g. ``--zoom 0``). Raises ``ValueError`` naming the text and the
    accepted units, or for a duration above ``MAX_DURATION_NS`` (1e9 s).
    """
    m = _DUR_RE.match(str(text))
    unit = m.group(2) if m else None
    units = ", ".join(u for u in _UNITS_NS if u != "µs")
    if m is None or (unit and unit not in _UNITS_NS):
        raise ValueError(f"{text!r} is not a duration; expected a number with a unit "
                         f"({units}), e.g. 1ms, 100us, 2s")
    number = float(m.group(1))
    if not unit:
        if number == 0:
            return 0
        raise ValueError(f"{str(text).strip()!r} has no unit; expected e.g. 1ms, 500us, 2s "
                         f"(units: {units})")
    ns = number * _UNITS_NS[unit]
    if not ns <= MAX_DURATION_NS:  # also catches inf/nan ("1e999s" parses as inf)
        raise ValueError(f"{str(text).strip()!r} is longer than the limit of "
                         f"{MAX_DURATION_NS / 1e9:g} s "
                         f"(~{MAX_DURATION_NS / 1e9 / (365.25 * 86400):,.0f} years); a typo?")
    return int(round(ns))


class DurationType(click.ParamType):
    """A click parameter type for durations; the value is int ns."""

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_duration_ns(value)
        except ValueError as exc:
            # click prefixes "Invalid value for '--interval':", so the option is named
            self.fail(str(exc), param, ctx)


DURATION = DurationType()


def echo_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON to stdout."""
    click.echo(json.dumps(obj, indent=2, default=str))
