"""Output and argument helpers shared by the analysis commands (rates, peaks, bursts, ...).

Every analysis command prints a human table by default and offers the same three script
formats, added with one decorator::

    @click.command()
    @click.argument("capture", type=click.Path())
    @time_range_options            # --from / --to, seconds relative to the capture start
    @output_options                # --json / --csv / --parquet PATH
    def command(capture, t_from, t_to, out):
        cap = load_or_fail(capture)
        start_ns, end_ns = time_range(cap.t_start_ns, t_from, t_to)
        ...
        emit({"peaks": df}, out, human=lambda: click.echo(format_table(df)), meta={...})

``out`` is an ``OutputSpec``. ``emit`` writes:

- ``--json``: one JSON object on stdout: ``{"meta": {...}, "<name>": [records...], ...}``
  (NaN -> null, int64 ns kept exact).
- ``--csv``: CSV on stdout; with several tables each is preceded by a ``# <name>`` line.
- ``--parquet PATH``: the first table to PATH; further tables to ``<PATH stem>.<name>.parquet``
  beside it. The human output is still printed unless ``--json``/``--csv`` is given too.

``progress(iterable_or_length, label)`` is a click progress bar on stderr (never mixed into
machine output on stdout).
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

__all__ = ["OutputSpec", "output_options", "time_range_options", "emit", "format_table",
           "load_or_fail", "time_range", "progress", "to_records"]


@dataclass
class OutputSpec:
    """The chosen output: ``json`` / ``csv`` flags and a ``parquet`` path (or None)."""

    json: bool = False
    csv: bool = False
    parquet: str | None = None

    @property
    def human(self) -> bool:
        """True when the human table goes to stdout (no --json/--csv)."""
        return not (self.json or self.csv)


def output_options(f: Callable) -> Callable:
    """Add ``--json``, ``--csv`` and ``--parquet PATH``; pass them as one ``out`` argument."""

    @click.option("--parquet", "parquet", type=click.Path(dir_okay=False), default=None,
                  help="Also write the table(s) as Parquet to PATH.")
    @click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    @functools.wraps(f)
    def wrapper(*args, as_json: bool, as_csv: bool, parquet: str | None, **kwargs):
        if as_json and as_csv:
            raise click.UsageError("--json and --csv are mutually exclusive")
        return f(*args, out=OutputSpec(json=as_json, csv=as_csv, parquet=parquet), **kwargs)

    return wrapper


def time_range_options(f: Callable) -> Callable:
    """Add ``--from`` / ``--to`` (seconds relative to the capture start) as t_from / t_to."""
    f = click.option("--to", "t_to", type=float, default=None, metavar="S",
                     help="End of the range, seconds after the capture start.")(f)
    f = click.option("--from", "t_from", type=float, default=None, metavar="S",
                     help="Start of the range, seconds after the capture start.")(f)
    return f


def time_range(t_start_ns: int, t_from: float | None, t_to: float | None
               ) -> tuple[int | None, int | None]:
    """Turn --from/--to seconds (relative to ``t_start_ns``) into absolute ns (None = open).

    Raises ``click.BadParameter`` when --to is not after --from.
    """
    start = None if t_from is None else t_start_ns + int(round(t_from * 1e9))
    end = None if t_to is None else t_start_ns + int(round(t_to * 1e9))
    if start is not None and end is not None and end <= start:
        raise click.BadParameter(f"--to ({t_to} s) must be after --from ({t_from} s)")
    return start, end


def load_or_fail(path: str):
    """Load a capture with ``rdmascope.analysis.load_capture``; loader errors -> ClickException."""
    from rdmascope.analysis import load_capture
    from rdmascope.capture import CaptureError

    try:
        return load_capture(path)
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc


def to_records(df) -> list[dict[str, Any]]:
    """Return a DataFrame's rows as JSON-able dicts (NaN/NA -> None, numpy scalars -> Python)."""
    import numpy as np

    recs = []
    for rec in df.to_dict(orient="records"):
        clean = {}
        for k, v in rec.items():
            if isinstance(v, np.generic):
                v = v.item()
            if v is None or (isinstance(v, float) and math.isnan(v)):
                v = None
            elif not isinstance(v, (int, float, str, bool, list, dict)):
                try:
                    import pandas as pd
                    v = None if pd.isna(v) else str(v)
                except (TypeError, ValueError):
                    v = str(v)
            clean[str(k)] = v
        recs.append(clean)
    return recs


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def _nan_to_none(o):
    if isinstance(o, float) and math.isnan(o):
        return None
    if isinstance(o, dict):
        return {k: _nan_to_none(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_nan_to_none(v) for v in o]
    return o


def emit(tables: dict[str, Any], out: OutputSpec, *, human: Callable[[], None] | None = None,
         meta: dict[str, Any] | None = None) -> None:
    """Write ``tables`` (name -> DataFrame, first = main) in the format chosen by ``out``.

    ``human`` prints the human view (called when neither --json nor --csv is set); ``meta``
    goes into the JSON object. Raises ``click.ClickException`` when the Parquet file cannot be
    written (naming it).
    """
    if out.parquet:
        base = Path(out.parquet)
        for i, (name, df) in enumerate(tables.items()):
            p = base if i == 0 else base.with_name(f"{base.stem}.{name}.parquet")
            try:
                df.to_parquet(p, index=df.index.name is not None)
            except OSError as exc:
                raise click.ClickException(f"{p}: cannot write Parquet ({exc})") from exc
            click.echo(f"wrote {p} ({len(df)} rows)", err=True)
    if out.json:
        obj: dict[str, Any] = {"meta": meta or {}}
        for name, df in tables.items():
            d = df.reset_index() if df.index.name is not None else df
            obj[name] = to_records(d)
        click.echo(json.dumps(_nan_to_none(obj), indent=1, default=_json_default))
    elif out.csv:
        many = len(tables) > 1
        for name, df in tables.items():
            if many:
                click.echo(f"# {name}")
            click.echo(df.to_csv(index=df.index.name is not None), nl=False)
    elif human is not None:
        human()


def format_table(df, *, floatfmt: str = "{:,.3f}", max_rows: int | None = None,
                 formats: dict[str, str] | None = None) -> str:
    """Format a DataFrame as an aligned plain-text table (NaN shown as "-").

    ``formats`` maps a column to a format string (e.g. {"share": "{:.2%}"}); other floats use
    ``floatfmt``. ``max_rows`` truncates with a last line saying how many rows were left out.
    """
    import pandas as pd

    formats = formats or {}
    d = df.reset_index() if df.index.name is not None else df
    shown = d if max_rows is None or len(d) <= max_rows else d.head(max_rows)
    cols = [str(c) for c in shown.columns]
    cells = []
    for _, row in shown.iterrows():
        line = []
        for c, v in zip(shown.columns, row, strict=True):
            if v is None or (not isinstance(v, str) and pd.isna(v)):
                line.append("-")
            elif str(c) in formats:
                line.append(formats[str(c)].format(v))
            elif isinstance(v, float):
                line.append(floatfmt.format(v))
            else:
                line.append(str(v))
        cells.append(line)
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    numeric = [pd.api.types.is_numeric_dtype(shown[c]) for c in shown.columns]

    def fmt(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(vals, widths, numeric, strict=True)).rstrip()

    lines = [fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in cells]
    if len(shown) < len(d):
        lines.append(f"... {len(d) - len(shown)} more rows (use --csv, --json or --parquet "
                     "for all)")
    return "\n".join(lines)


def progress(it=None, *, length: int | None = None, label: str = ""):
    """Return a click progress bar on stderr (context manager), hidden when stderr is no TTY."""
    return click.progressbar(it, length=length, label=label, file=sys.stderr,
                             show_eta=True, show_pos=False)
