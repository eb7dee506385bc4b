"""Small helpers shared by the CLI commands: duration parsing and JSON output.

- ``parse_duration_ns("1ms") -> 1_000_000``: "100us", "0.5ms", "2s", "1m", "1h", a bare number is
  seconds. ``DURATION`` is the same as a click parameter type (value in ns).
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


def parse_duration_ns(text: str) -> int:
    """Parse a duration like "1ms", "0.5ms", "100us", "2s", "1m" (bare number = seconds) to ns.

    Raises ``ValueError`` naming the text and the accepted units.
    """
    m = _DUR_RE.match(str(text))
    unit = m.group(2) if m else None
    if m is None or (unit and unit not in _UNITS_NS):
        raise ValueError(f"{text!r} is not a duration; expected a number with a unit "
                         f"({', '.join(u for u in _UNITS_NS if u != 'µs')}), e.g. 1ms, 100us, 2s")
    return int(round(float(m.group(1)) * _UNITS_NS[unit or "s"]))


class DurationType(click.ParamType):
    """A click parameter type for durations; the value is int ns."""

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_duration_ns(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()


def echo_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON to stdout."""
    click.echo(json.dumps(obj, indent=2, default=str))
