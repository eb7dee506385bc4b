"""Output and argument helpers shared by the analysis commands (rates, peaks, bursts, ...).

Every analysis command prints a human table by default and offers the same three script
formats, added with one decorator::

    @click.command()
    @click.argument("capture", type=click.Path())
    @time_range_options            # --from / --to (cli.timerange), seconds after the start
    @output_options                # --json / --csv / --parquet PATH
    def command(capture, t_from, t_to, out):
        cap = load_or_fail(capture)
        start_ns, end_ns = time_range(cap.t_start_ns, t_from, t_to)
        ...
        emit({"peaks": df}, out, human=lambda: click.echo(format_table(df)), meta={...})

``out`` is an ``OutputSpec``. ``emit`` writes:

- ``--json``: one JSON object on stdout: ``{"schema_version": 1, "meta": {...}, "<name>":
  [records...], ...}`` (NaN -> null, int64 ns kept exact). Given several captures of one run,
  the same shape: each table's rows of every node with a ``host`` column first, the nodes'
  own meta under ``meta.nodes`` and the set under ``meta.run_set`` (``cli.runset``).
- ``--csv``: CSV on stdout; with several tables each is preceded by a ``# <name>`` line.
- ``--parquet PATH``: the first table to PATH; further tables to ``<PATH stem>.<name>.parquet``
  beside it. The human output is still printed unless ``--json``/``--csv`` is given too.

``progress(iterable_or_length, label)`` is a click progress bar on stderr (never mixed into
machine output on stdout), shown only when stderr is a terminal.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from rdmascope.cli.common import DURATION, JSON_SCHEMA_VERSION

__all__ = ["OutputSpec", "output_options", "emit", "format_table",
           "load_or_fail", "open_or_fail", "progress", "to_records", "cli_errors", "SECONDS",
           "POSITIVE", "NONNEG_SECONDS", "OFFSET", "FiniteFloat", "MAX_SECONDS",
           "MAX_OFFSET_SECONDS", "DURATION_NS", "parse_ns", "WINDOW", "MIN_WINDOW_NS", "MAX_WINDOW_VALUES", "check_window_count",
           "parse_windows", "require_readings", "no_intervals_error", "format_duration", "require_parent_dir", "refuse_existing_output",
           "link_gbps_option", "link_gbps_note", "param_hint",
           "capture_state_note", "say_capture_state"]

#: The narrowest window the analysis commands accept (1 us; readings are 1 ms apart).
MIN_WINDOW_NS = 1_000
#: The most window values (windows x series) one command computes in one go: 40 million, e.g.
#: 10 million windows of 4 series, which took ~2.5 GB in ``rdmascope rates`` (~60 B per value).
MAX_WINDOW_VALUES = 40_000_000


#: The largest time (s) a seconds or duration option accepts: 1e9 s (~31.7 years). Beyond it a
#: value is a typo (1e300 overflowed the int ns conversion with a traceback).
MAX_SECONDS = 1e9
#: The largest --offset (s): 4e9 s (~127 years), so that the offset of a log written in Unix-epoch
#: seconds (~1.8e9 in 2027) onto CLOCK_MONOTONIC fits, while ns times stay inside int64 (9.2e9 s).
MAX_OFFSET_SECONDS = 4e9


class FiniteFloat(click.ParamType):
    """A click float that must be finite (no inf/nan); ``positive``: > 0; ``minimum``: >= it;
    ``max_abs``: its magnitude at most this (e.g. ``MAX_SECONDS`` for times that become ns).
    ``time``: a time in seconds that may carry a unit ("1.5s", "250ms", "1h30m"; a bare number
    stays seconds; ``cli.common.parse_seconds``)."""

    name = "float"

    def __init__(self, positive: bool = False, minimum: float | None = None,
                 max_abs: float | None = None, unit: str = "", time: bool = False) -> None:
        self.positive = positive
        self.minimum = minimum
        self.max_abs = max_abs
        self.unit = unit
        self.time = time
        if time:
            self.name = "time"

    def convert(self, value, param, ctx):
        raw = value
        if self.time and isinstance(value, str):
            from rdmascope.cli.common import parse_seconds

            try:
                value = parse_seconds(value)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{raw!r} is not a number", param, ctx)
        if not math.isfinite(v):
            self.fail(f"{raw!r} is not a finite number", param, ctx)
        if self.positive and v <= 0:
            self.fail(f"{raw!r}: must be > 0", param, ctx)
        if self.minimum is not None and v < self.minimum:
            self.fail(f"{raw!r}: must be >= {self.minimum:g}", param, ctx)
        if self.max_abs is not None and abs(v) > self.max_abs:
            years = self.max_abs / (365.25 * 86400)
            self.fail(f"{raw!r}: beyond the limit of {self.max_abs:g}{self.unit} "
                      f"(~{years:,.0f} years); a typo?", param, ctx)
        return v


#: Seconds (finite; any sign, |s| <= 1e9) for --from/--to/--origin; a unit may be given
#: ("1.5s", "250ms", "1h30m"), a bare number is seconds.
SECONDS = FiniteFloat(max_abs=MAX_SECONDS, unit=" s", time=True)
#: Seconds >= 0 (<= 1e9), e.g. --arrival-window; a unit may be given.
NONNEG_SECONDS = FiniteFloat(minimum=0.0, max_abs=MAX_SECONDS, unit=" s", time=True)
#: An --offset in seconds added to a log's times (any sign, |s| <= 4e9: see MAX_OFFSET_SECONDS);
#: a unit may be given ("2ms", "-1.5s").
OFFSET = FiniteFloat(max_abs=MAX_OFFSET_SECONDS, unit=" s", time=True)
#: A finite number > 0 (link speeds, capacities, TTFTs, ...).
POSITIVE = FiniteFloat(positive=True)


def parse_ns(text, guess_unit: str | None = "ms") -> int:
    """Parse a duration with a unit ("1ms", "2s") to int ns: ``cli.common.parse_duration_ns``.

    Raises ``ValueError`` for a bad duration or one longer than 1e9 s (``MAX_DURATION_NS``); a
    bare number's error offers ``guess_unit`` (default "ms": a window, "5ms?").
    """
    from rdmascope.cli.common import parse_duration_ns  # noqa: PLC0415 (kept local like before)

    return parse_duration_ns(text, guess_unit)


#: The duration option type (value int ns, at most 1e9 s), shared with ``rdmascope record``.
DURATION_NS = DURATION


def format_duration(ns: int) -> str:
    """Return a window width in its natural unit: 1s, 100ms, 1us, 500ns."""
    for unit, k in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if ns >= k:
            return f"{ns / k:g}{unit}"
    return f"{ns}ns"


def param_hint(option: str | None) -> str | None:
    """click's ``param_hint`` for an option name: ``'--from'`` (None stays None)."""
    return None if option is None else f"'{option}'"


def _check_width(width_ns: int, param=None, ctx=None, option: str | None = None) -> int:
    if width_ns < MIN_WINDOW_NS:
        msg = (f"window {format_duration(width_ns)} is narrower than the minimum of 1us "
               f"(readings are ~1 ms apart); e.g. 1ms")
        raise click.BadParameter(msg, ctx=ctx, param=param, param_hint=param_hint(option))
    return width_ns


class WindowType(click.ParamType):
    """A window width: a duration with a unit (see ``cli.common.parse_duration_ns``), >= 1 us
    and <= 1e9 s."""

    name = "window"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            ns = value
        else:
            try:
                ns = parse_ns(value)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        return _check_width(ns, param, ctx)


WINDOW = WindowType()


def parse_windows(text: str, option: str = "--windows") -> list[int]:
    """Parse comma-separated window widths (e.g. "1ms,5ms,100ms") to ns, each >= 1 us.

    Returns the distinct widths in the order given (a repeated width is kept once).
    Raises ``click.BadParameter`` naming ``option`` for a bad width (< 1 us, > 1e9 s) or an
    empty list.
    """
    parts = [x.strip() for x in str(text).split(",")]
    if not any(parts):
        raise click.BadParameter(f"{text!r}: give at least one window width, e.g. 1ms,5ms,100ms",
                                 param_hint=param_hint(option))
    if not all(parts):  # "1ms,,5ms": a width lost to a typo, never silently dropped
        raise click.BadParameter(f"{text!r}: an empty width between commas (e.g. 1ms,5ms,100ms)",
                                 param_hint=param_hint(option))
    out = []
    for x in parts:
        try:
            out.append(parse_ns(x))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=param_hint(option)) from exc
        _check_width(out[-1], option=option)
    return list(dict.fromkeys(out))  # "1ms,1ms" (or "1ms,1000us") is one window, one row


def check_window_count(width_ns: int, span_ns: int, *, n_series: int = 1,
                       option: str = "--window", what: str = "the range",
                       advice: str = "use a wider window or a shorter --from/--to range") -> None:
    """Refuse a window width that cuts ``span_ns`` into too many windows to hold in memory.

    The limit is ``MAX_WINDOW_VALUES`` windows x ``n_series`` (a 1 ns window over 10 s would
    need ~75 GiB). Raises ``click.BadParameter`` naming ``option``, the window count and
    ``advice`` (default: a wider window or a shorter --from/--to range).
    """
    n = max(int(span_ns), 0) // max(int(width_ns), 1) + 1
    k = max(int(n_series), 1)
    if n * k > MAX_WINDOW_VALUES:
        per = f" for {k} series" if k > 1 else ""
        raise click.BadParameter(
            f"{format_duration(width_ns)} windows over {what} ({span_ns / 1e9:,.3f} s) make "
            f"{n:,} windows{per}, more than the limit of {MAX_WINDOW_VALUES // k:,} held in "
            f"memory (at this width, {format_duration(MAX_WINDOW_VALUES // k * int(width_ns))} "
            f"of windows); {advice}",
            param_hint=param_hint(option))


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
    """Add ``--json``, ``--csv``, ``--parquet PATH`` and ``--force`` (replace an existing
    ``--parquet`` file); pass them as one ``out`` argument."""

    @click.option("--force", "force_output", is_flag=True,
                  help="Replace an existing --parquet file (refused otherwise, exit 4).")
    @click.option("--parquet", "parquet", type=click.Path(dir_okay=False), default=None,
                  help="Also write the table(s) as Parquet to PATH (a new file, or --force).",
                  callback=lambda _c, _p, v: _parent_checked(v, "'--parquet'"))
    @click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    @functools.wraps(f)
    def wrapper(*args, as_json: bool, as_csv: bool, parquet: str | None, force_output: bool,
                **kwargs):
        if as_json and as_csv:
            raise click.UsageError("--json and --csv are mutually exclusive")
        refuse_existing_output(parquet, force_output, "--parquet")
        return f(*args, out=OutputSpec(json=as_json, csv=as_csv, parquet=parquet), **kwargs)

    return wrapper


def _set_link_gbps(ctx, param, value):
    """Put ``--link-gbps`` in effect for this command (``rdmascope.plausibility``)."""
    if value is None:
        return None
    if not (math.isfinite(value) and 0 < value <= 100_000):
        raise click.BadParameter(f"must be a link rate in Gb/s, > 0 and <= 100000, got {value!r}",
                                 ctx=ctx, param=param)
    from rdmascope.plausibility import reset_link_gbps, set_link_gbps
    token = set_link_gbps(value)
    ctx.call_on_close(lambda: reset_link_gbps(token))
    return value


def link_gbps_option(f: Callable) -> Callable:
    """Add ``--link-gbps G``: the link rate (Gb/s) of every device, instead of the recorded
    ``rate`` strings, netdev speeds, PCIe links and ``record --emulated``: the line rate of the
    over-line flag and the headline peaks, the plausibility cap (4 x G) and the capacity. The
    same meaning on every command that takes it; ``link_gbps_note`` says it in the output."""
    return click.option(
        "--link-gbps", type=float, default=None, expose_value=False, is_eager=True,
        callback=_set_link_gbps,
        help="Line rate of every device in Gb/s, instead of the recorded port rate (the "
             "'rate' string, which can be a driver's fallback, e.g. 40 on a 400G port), netdev "
             "speed, PCIe link and record --emulated: windows above it (beyond their timing "
             "uncertainty) are over line rate and never a headline, steps above 4 x it are "
             "implausible, and it is the capacity.")(f)


def link_gbps_note() -> str | None:
    """One line saying that ``--link-gbps`` is in effect (None when it is not)."""
    from rdmascope.plausibility import current_link_gbps

    g = current_link_gbps()
    if g is None:
        return None
    return (f"line rate: {g:g} Gb/s for every device, from --link-gbps (instead of the port "
            "rates, PCIe links and record --emulated)")


@contextlib.contextmanager
def cli_errors(prefix: str | None = None):
    """Turn expected failures inside the block into a one-line ``click.ClickException``.

    ``rdmascope.capture.CaptureError`` (bad or missing manifest, truncated segment, ...) keeps
    its message (it names the file); ``ValueError`` (including ``RequestLogError`` and
    ``EstimateError``) and ``OSError`` get ``prefix: `` (e.g. the capture path) in front;
    ``MemoryError`` says to narrow the range. ``click`` exceptions pass through.
    """
    from rdmascope.capture import CaptureError

    def msg(exc):
        return f"{prefix}: {exc}" if prefix and not str(exc).startswith(str(prefix)) else str(exc)

    try:
        yield
    except click.ClickException:
        raise
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    except (ValueError, OSError) as exc:
        raise click.ClickException(msg(exc)) from exc
    except MemoryError as exc:
        raise click.ClickException(msg("out of memory; use a wider window or a shorter "
                                       "--from/--to range")) from exc


def require_parent_dir(path: str, option: str = "'-o' / '--output'") -> None:
    """Refuse an output path whose parent directory does not exist (or is not a directory).

    The commands never create a missing parent (``-o /nonexistent/dir/x.png`` made
    ``/nonexistent/dir`` and exited 0): a mistyped path should be an error, not a new tree.
    Raises ``click.BadParameter`` naming ``option`` and the parent.
    """
    parent = Path(path).expanduser().absolute().parent
    if not parent.exists():
        raise click.BadParameter(f"{path}: the directory {parent} does not exist (it is not "
                                 "created; make it first or choose another path)",
                                 param_hint=option)
    if not parent.is_dir():
        raise click.BadParameter(f"{path}: {parent} is not a directory", param_hint=option)
    # refuse an unwritable target now, not after minutes of analysis (access(2): EACCES, EROFS)
    target = Path(path).expanduser().absolute()
    target = target if target.exists() else parent
    if not os.access(target, os.W_OK | (os.X_OK if target.is_dir() else 0)):
        raise click.BadParameter(f"{path}: cannot write in {target} (permission denied or a "
                                 "read-only file system); choose another path", param_hint=option)


def refuse_existing_output(path: str | None, force: bool, option: str) -> None:
    """Refuse to replace an existing output file unless ``--force`` (as the output directories
    of ``record``, ``report``, ``demo`` and ``export dataset`` are protected): an existing
    ``path`` raises ``DataError`` (exit 4, "output exists") naming ``option`` and the path.
    Called before any work; None (no such output asked for) passes."""
    if path is None or force:
        return
    target = Path(path).expanduser()
    if target.exists() or target.is_symlink():
        from rdmascope.exitcodes import DataError

        raise DataError(f"{path}: the {option} output already exists; refusing to overwrite it "
                        "(add --force to replace it, or choose another path)")


def _parent_checked(path: str | None, option: str) -> str | None:
    """``path`` (None stays None) once ``require_parent_dir`` accepts it: an output option's
    callback, so every command refuses a missing or unwritable directory as ``-o`` does."""
    if path is not None:
        require_parent_dir(path, option)
    return path


def capture_state_note(path, meta: dict | None = None) -> str | None:
    """The note ``inspect`` gives for a capture without a stop record: "being recorded by pid N"
    while a recorder holds its lock, else "unclean end" (killed, or the host went down); None for
    a cleanly stopped capture. Either way the results cover the readings flushed to disk (every
    reader reads to the last flushed reading, the live files included)."""
    from rdmascope.capture import read_manifest, recording_pid

    try:
        m = meta if meta is not None else read_manifest(path)
    except Exception:  # noqa: BLE001 (the command's own read names a bad capture)
        return None
    if isinstance(m.get("stop"), dict):
        return None
    pid = recording_pid(Path(path))
    if pid is not None:
        who = f"pid {pid}" if pid > 0 else "a running process"
        return (f"note: {path} is being recorded by {who} (no stop record yet): the results "
                "cover the readings flushed to disk so far")
    return (f"note: {path} had an unclean end (no stop record: the recorder was killed or the "
            "host went down): read to its last flushed reading")


def say_capture_state(path, meta: dict | None = None, cap=None) -> None:
    """Print on stderr (never into machine output on stdout) ``capture_state_note`` (being
    recorded, unclean end) and ``say_audit_shortfall`` (fewer readings than the audit says were
    written). ``cap``: the whole capture as the command opened it (a loaded ``Capture`` or a
    ``stream.CaptureInfo``), else its manifest and footers are opened here to count the rows."""
    from rdmascope.cli.common import say_later

    note = capture_state_note(path, meta)
    if note:
        say_later(note)
    if cap is None:
        from rdmascope.analysis.stream import open_capture

        try:
            cap = open_capture(path)
        except Exception:  # noqa: BLE001 - the command itself reports an unreadable capture
            return
    say_audit_shortfall(cap, path)


def load_or_fail(path: str):
    """Load a capture with ``rdmascope.analysis.load_capture``; loader errors -> ClickException.
    A capture being recorded or killed is said on stderr (``say_capture_state``)."""
    from rdmascope.analysis import load_capture

    with cli_errors(str(path)):
        cap = load_capture(path)
    say_capture_state(path, cap.meta, cap)
    return cap


def open_or_fail(path: str):
    """Open a capture for streaming (``rdmascope.analysis.stream.open_capture``: manifest and
    segment footers, no readings); loader errors -> ClickException."""
    from rdmascope.analysis.stream import open_capture

    with cli_errors(str(path)):
        info = open_capture(path)
    say_capture_state(path, info.meta, info)
    return info


def say_audit_shortfall(cap, path) -> None:
    """Say on stderr when a cleanly ended capture holds fewer readings than its audit says were
    written (a segment or live file lost, a directory replaced while recording): the audit is
    never taken over the rows. ``cap``: a loaded ``Capture`` or a ``stream.CaptureInfo``."""
    meta = getattr(cap, "meta", None) or {}
    audit = meta.get("audit") if isinstance(meta, dict) else None
    said = audit.get("rows_written") if isinstance(audit, dict) else None
    if not isinstance(said, int) or isinstance(said, bool) or meta.get("stop") is None:
        return
    segs = meta.get("segments") if isinstance(meta.get("segments"), list) else []
    if any(not isinstance(s, dict) or not isinstance(s.get("rows"), int) or s["rows"] < 0
           for s in segs):
        return  # a segment list the reader refuses (said then): its counts mean nothing
    rows = cap.rows if hasattr(cap, "rows") else len(cap.readings)
    if rows < said:
        from rdmascope.cli.common import say_later

        say_later(f"rdmascope: warning: {path}: the audit says {said} readings were written but "
                  f"the capture holds {rows}: {said - rows} readings are missing; these results "
                  "cover only the readings present")


def require_readings(cap, path) -> None:
    """Raise ``click.ClickException`` when a capture has no readings at all.

    (Its segments are missing or empty: every analysis would be of nothing.) ``cap``: a loaded
    ``Capture`` or a ``stream.CaptureInfo`` (rows counted from the manifest and files).
    """
    rows = cap.rows if hasattr(cap, "rows") else len(cap.readings)
    if rows == 0:
        raise click.ClickException(f"capture {path} has no readings (no segment or live file "
                                   "with rows; were its segments removed?)")


def no_intervals_error(capture, what: str = "RDMA byte intervals") -> click.ClickException:
    """Return the one-line error for a capture with nothing to difference: fewer than two valid
    readings per counter (a capture stopped within its first interval). ``what``: the
    intervals missing (e.g. "byte intervals of source ethtool"). Exit 1: bad content."""
    return click.ClickException(f"capture {capture} has no {what} (fewer than two valid "
                                "readings per counter)")


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


#: Rows turned into records / CSV text at a time by ``emit`` (the output is written block by
#: block: never one string or one list of records for a whole table).
ROWS_PER_BLOCK = 5000


def write_json(tables: dict[str, Any], meta: dict[str, Any], write=None) -> None:
    """Write ``{"schema_version": JSON_SCHEMA_VERSION, "meta": meta, <name>: [records], ...}``
    as ``json.dumps(..., indent=1)`` of
    ``to_records`` would, byte for byte, but table by table and ``ROWS_PER_BLOCK`` rows at a
    time, each column encoded at once (memory bounded by one block's text, not the whole
    output; and without the pure-Python indenting encoder per value). NaN/NA -> null, numpy
    scalars -> Python. ``write``: the text sink (default: click.echo without newline to stdout).
    """
    if write is None:
        def write(text: str) -> None:
            click.echo(text, nl=False)

    def dumps(o, level: int) -> str:
        text = json.dumps(_nan_to_none(o), indent=1, default=_json_default)
        return text.replace("\n", "\n" + " " * level)

    write('{\n "schema_version": ' + str(JSON_SCHEMA_VERSION) + ',\n "meta": ' + dumps(meta, 1))
    for name, df in tables.items():
        d = df.reset_index() if df.index.name is not None else df
        write(",\n " + json.dumps(str(name)) + ": ")
        if not len(d):
            write("[]")
            continue
        keys = [json.dumps(str(k)) + ": " for k in d.columns]
        # one record's text with its values as %s (a key's own % doubled): one formatting
        # per row instead of joining its key-value pairs
        record = ("{\n   " + ",\n   ".join(k.replace("%", "%%") + "%s" for k in keys)
                  + "\n  }") if keys else "{}"
        write("[")
        sep = "\n  "
        for i in range(0, len(d), ROWS_PER_BLOCK):
            block = d.iloc[i:i + ROWS_PER_BLOCK]
            cols = [_json_column(block.iloc[:, j]) for j in range(block.shape[1])]
            rows = zip(*cols, strict=True) if cols else [()] * len(block)
            write(sep + ",\n  ".join([record % row for row in rows]))
            sep = ",\n  "
        write("\n ]")
    write("\n}\n")


def _json_column(col) -> list[str]:
    """``_json_value`` of every cell of one column (a pandas Series), by its dtype at once
    where it is a plain float, int or bool column (the same text, without the per-value type
    tests), else value by value."""
    import numpy as np

    kind = getattr(col.dtype, "kind", "O") if isinstance(col.dtype, np.dtype) else "O"
    if kind in "fiu" and len(col):
        # json's C encoder writes a list of numbers as float.__repr__ / int.__repr__ joined by
        # ", " (which no number contains); NaN becomes null as _json_value writes it
        vals = col.to_numpy(np.float64 if kind == "f" else None).tolist()
        text = json.dumps(vals)[1:-1].split(", ")
        if kind == "f":
            return ["null" if t == "NaN" else t for t in text]
        return text
    if kind == "b":
        return ["true" if x else "false" for x in col.tolist()]
    import pandas as pd

    if isinstance(col.dtype, pd.StringDtype) and len(col):
        # text: each distinct string encoded once (json's encoder, as _json_value), NA null
        codes, uniques = pd.factorize(col, use_na_sentinel=True)
        enc = [json.encoder.encode_basestring_ascii(u) for u in uniques] + ["null"]
        return np.array(enc, dtype=object)[codes].tolist()
    if isinstance(col.dtype, pd.Int64Dtype) and len(col):
        # nullable int64: int.__repr__ of each value (json's C encoder, as above), NA null
        na = col.isna().to_numpy()
        text = json.dumps(col.to_numpy(np.int64, na_value=0).tolist())[1:-1].split(", ")
        return [t if not m else "null" for t, m in zip(text, na.tolist(), strict=True)]
    return [_json_value(v) for v in col.tolist()]


def _json_value(v) -> str:
    """One cell as ``json.dumps`` writes it inside a ``to_records`` record at depth 3."""
    import numpy as np

    if isinstance(v, np.generic):
        v = v.item()
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is float:
        if v != v:
            return "null"
        return float.__repr__(v) if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
    if type(v) is int:
        return int.__repr__(v)
    if type(v) is str:
        return json.encoder.encode_basestring_ascii(v)
    if not isinstance(v, (int, float, str, bool, list, dict)):
        try:
            import pandas as pd
            v = None if pd.isna(v) else str(v)
        except (TypeError, ValueError):
            v = str(v)
        if v is None:
            return "null"
    return json.dumps(_nan_to_none(v), indent=1, default=_json_default).replace("\n", "\n   ")


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
        write_json(tables, meta or {})
    elif out.csv:
        many = len(tables) > 1
        for name, df in tables.items():
            if many:
                click.echo(f"# {name}")
            index = df.index.name is not None
            for i in range(0, max(len(df), 1), ROWS_PER_BLOCK):  # bounded: block by block
                click.echo(df.iloc[i:i + ROWS_PER_BLOCK].to_csv(index=index, header=i == 0),
                           nl=False)
    elif human is not None:
        human()


def _unsigned_zero(text: str) -> str:
    """A number that rounds to zero has no sign: "-0.000" and "+0.00" print as "0.000", "0.00"
    (a tiny negative was shown as -0.000, as if it were a finding)."""
    if text[:1] in "+-" and text[1:] and set(text[1:]) <= set("0.,%") and "0" in text:
        return text[1:]
    return text


def format_table(df, *, floatfmt: str = "{:,.3f}", max_rows: int | None = None,
                 formats: dict[str, str] | None = None) -> str:
    """Format a DataFrame as an aligned plain-text table (NaN shown as "-").

    ``formats`` maps a column to a format string (e.g. {"share": "{:.2%}"}); other floats use
    ``floatfmt``; a value that rounds to zero is shown without a sign ("0.000", never "-0.000"). ``max_rows`` truncates with a last line saying how many rows were left out.
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
                line.append(_unsigned_zero(formats[str(c)].format(v)))
            elif isinstance(v, float):
                line.append(_unsigned_zero(floatfmt.format(v)))
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


class _NoProgress:
    """The progress bar's interface (context manager, iteration, ``update``) printing nothing."""

    def __init__(self, it):
        self._it = it

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def __iter__(self):
        return iter(self._it if self._it is not None else ())

    def update(self, n_steps: int, current_item=None) -> None:
        return None


def progress(it=None, *, length: int | None = None, label: str = ""):
    """Return a click progress bar on stderr (context manager) when stderr is a terminal.

    When stderr is not a terminal (``2>log``, a pipe, a test runner) nothing is written: click's
    bar would still print its bare label (e.g. ``peaks``) as a stray line. The returned object
    then iterates ``it`` and accepts ``update`` the same way.
    """
    stream = sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced stream
        tty = False
    if not tty:
        return _NoProgress(it)
    return click.progressbar(it, length=length, label=label, file=stream,
                             show_eta=True, show_pos=False)
