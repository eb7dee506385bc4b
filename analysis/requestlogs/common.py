"""The shared model of a request log: clocks, columns, ``RequestLog``, ``RequestLogError`` and the
value helpers every reader uses to turn a tool's fields into int64 ns and token counts (each one
raising ``RequestLogError`` naming file, row and field)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rdmascope.exitcodes import OptionValueError

CLOCK_MONOTONIC = "CLOCK_MONOTONIC"


CLOCK_REALTIME = "CLOCK_REALTIME"


CLOCK_RELATIVE = "relative"


CLOCKS = (CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_RELATIVE)


#: Columns of ``RequestLog.requests`` (one row per request, failed ones included).
COLUMNS = ("request_id", "t_send_ns", "t_first_ns", "t_last_ns", "prompt_tokens",
           "output_tokens", "test", "round", "ok", "error", "chunk_times", "row", "run",
           "token_source", "check", "fix", "t_first_reasoning_ns", "t_first_answer_ns", "flag",
           "warmup")


_INT_COLUMNS = ("t_send_ns", "t_first_ns", "t_last_ns", "prompt_tokens", "output_tokens", "round",
                "row", "run", "t_first_reasoning_ns", "t_first_answer_ns")


_TIME_COLUMNS = ("t_send_ns", "t_first_ns", "t_last_ns", "t_first_reasoning_ns",
                 "t_first_answer_ns")


_CLOCK_ALIASES = {
    "clock_monotonic": CLOCK_MONOTONIC, "monotonic": CLOCK_MONOTONIC,
    "perf_counter": CLOCK_MONOTONIC,
    "clock_realtime": CLOCK_REALTIME, "realtime": CLOCK_REALTIME, "epoch": CLOCK_REALTIME,
    "time": CLOCK_REALTIME, "unix": CLOCK_REALTIME,
    "relative": CLOCK_RELATIVE, "clock_relative": CLOCK_RELATIVE,
}


class RequestLogError(ValueError):
    """A request log cannot be used. The message names the file, and where known row and field."""

    def __init__(self, path: str | os.PathLike, message: str, *, row: int | None = None,
                 field: str | None = None):
        self.path = str(path)
        self.row = row
        self.field = field
        self.message = message
        where = self.path
        if row is not None:
            where += f": row {row}"
        if field is not None:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")


class NoSuchRun(RequestLogError, OptionValueError):
    """``--run K`` names a run the log does not hold: a usage error (exit 2) naming the runs
    there are, found only once the log is read. ``option`` is ``--run`` (``compare`` sets
    ``--run-a``/``--run-b``)."""

    def __init__(self, path: str | os.PathLike, run: int, n_runs: int):
        self.path, self.row, self.field, self.option = str(path), None, "run", "--run"
        self.message = (f"run {run} does not exist: {path} holds {n_runs} run"
                        f"{'s' if n_runs != 1 else ''} (expected "
                        f"{'1' if n_runs == 1 else f'1..{n_runs}'})")
        ValueError.__init__(self, self.message)


class RepeatedLog(RequestLogError, OptionValueError):
    """The same request log given twice with ``--requests``: a usage error (exit 2)."""

    def __init__(self, path: str | os.PathLike):
        self.path, self.row, self.field, self.option = str(path), None, None, "--requests"
        self.message = f"{path}: given more than once (each log once)"
        ValueError.__init__(self, self.message)


@dataclass
class RequestLog:
    """One request log: a table of requests plus where its times come from.

    ``requests`` columns: ``request_id`` (str), ``t_send_ns``, ``t_first_ns``, ``t_last_ns``
    (Int64 ns on ``clock``; may be missing only on failed rows), ``prompt_tokens``,
    ``output_tokens`` (Int64, missing where the tool did not record them), ``test`` (str or None),
    ``round`` (Int64 or missing), ``ok`` (bool), ``error`` (str, "" when ok), ``chunk_times``
    (list of int ns per streamed chunk, or None), ``row`` (where in the file; within its run),
    ``run`` (1..N, the run of a file holding several), ``token_source`` (where the output token
    count comes from), ``check`` (a consistency check the stored values failed, "" if none),
    ``fix`` (dict of corrected ``t_first_ns``, ``t_last_ns``, ``chunk_times`` and ``kind``, or
    None; ``apply_fixes``), ``t_first_reasoning_ns`` / ``t_first_answer_ns`` (Int64, only for
    requests that streamed reasoning tokens), ``flag`` (e.g. "runs past the capture end",
    "corrected: ..."), ``warmup`` (why the tool marked the request a warm-up, "" if measured;
    only whole warm-up rounds stay in the log: ``reader._drop_warmup``). Rows are sorted by
    send time (failed rows without one last). ``runs``: one dict per run (``run``, ``label``,
    ``meta`` = the tool's run metadata).

    ``alignment`` is None on the log's own clock; after ``align`` it holds ``method``
    ("monotonic" | "clock_pairs" | "offset" | "anchor"), ``offset_ns`` (added to the log's times),
    ``uncertainty_ns`` and ``note``; ``clock`` is then CLOCK_MONOTONIC.
    """

    path: Path
    format: str
    clock: str
    requests: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    alignment: dict[str, Any] | None = None
    runs: list[dict[str, Any]] = field(default_factory=lambda: [{"run": 1, "label": "run 1",
                                                                  "meta": {}}])

    @property
    def n_failed(self) -> int:
        """Number of failed requests (kept out of every metric)."""
        return int((~self.requests["ok"]).sum())

    @property
    def ok(self) -> pd.DataFrame:
        """The successful requests only."""
        return self.requests[self.requests["ok"]].reset_index(drop=True)

    def alignment_note(self) -> str | None:
        """One line saying how the log was placed on the capture's clock (its method, why, and
        the uncertainty; an anchored relative log says it is an estimate), None before
        ``align``."""
        a = self.alignment
        if not a:
            return None
        return (f"alignment: {a['method']} ({a['note']}; uncertainty "
                f"{a['uncertainty_ns'] / 1e6:g} ms)")


def _s_to_ns(v: float) -> int:
    x = float(v) * 1e9
    if not math.isfinite(x):
        # a finite time too large for float ns (above ~1.8e299 s): kept exact as a Python int,
        # so ``_frame`` refuses it with its row and field instead of an OverflowError here
        return int(float(v)) * 1_000_000_000
    return int(round(x))


_INT64_MAX = 2**63 - 1


def _int64_or_raise(path, rec: dict[str, Any], col: str, v: int) -> int:
    """Return v if it fits the int64 columns of a ``RequestLog``; else raise naming row and field.

    A time beyond int64 nanoseconds (~292 years) is no clock reading: most likely a time in
    ns (or us) written into a field in seconds.
    """
    if -_INT64_MAX - 1 <= v <= _INT64_MAX:
        return v
    try:
        shown = f"{v / 1e9:.4g} s" if col in _TIME_COLUMNS or col == "chunk_times" else f"{v:.4g}"
    except OverflowError:  # beyond a float
        shown = (f"~1e{len(str(abs(v))) - 10} s" if col in _TIME_COLUMNS or col == "chunk_times"
                 else f"~1e{len(str(abs(v))) - 1}")
    if col in _TIME_COLUMNS or col == "chunk_times":
        name = _TIME_NAMES.get(col, col)
        raise RequestLogError(path, f"{name}: a time of {shown}, beyond what a clock holds in int64 "
                              "nanoseconds (~292 years); a time in ns or us written as seconds?",
                              row=rec.get("row"))
    raise RequestLogError(path, f"{shown} is too large (at most 2^63-1)", row=rec.get("row"),
                          field=col)


_TIME_NAMES = {"t_send_ns": "send time", "t_first_ns": "first-token time",
               "t_last_ns": "last-token time", "chunk_times": "a chunk time",
               "t_first_reasoning_ns": "first reasoning-token time",
               "t_first_answer_ns": "first answer-token time"}


def _num(path, row, fld, v, *, allow_none=False) -> float | None:
    """Return v as a finite float or raise naming file/row/field."""
    if v is None or (isinstance(v, str) and v.strip() == ""):
        if allow_none:
            return None
        raise RequestLogError(path, "missing value", row=row, field=fld)
    if isinstance(v, bool):
        raise RequestLogError(path, f"expected a number, got {v!r}", row=row, field=fld)
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise RequestLogError(path, f"expected a number, got {v!r}", row=row, field=fld) from None
    if not math.isfinite(x):
        raise RequestLogError(path, f"expected a finite number, got {v!r}", row=row, field=fld)
    return x


def _int(path, row, fld, v, *, allow_none=True) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        # exact: epoch ns (~1.8e18) would lose their last ~8 bits through float64
        if v < 0:
            raise RequestLogError(path, f"expected a non-negative integer, got {v!r}", row=row,
                                  field=fld)
        return v
    x = _num(path, row, fld, v, allow_none=allow_none)
    if x is None:
        return None
    if x != int(x) or x < 0:
        raise RequestLogError(path, f"expected a non-negative integer, got {v!r}", row=row,
                              field=fld)
    return int(x)


_JSON_TYPES = {dict: "a JSON object", list: "a JSON list", str: "a string", bool: "a boolean",
               int: "a number", float: "a number", type(None): "null"}


def _type_name(v: Any) -> str:
    return _JSON_TYPES.get(type(v), type(v).__name__)


def _obj(path, row, fld, v, *, allow_none: bool = False) -> dict | None:
    """Return v if it is a JSON object (None too with ``allow_none``), else raise naming
    file/row/field and the type found: the edge where a wrong JSON type stops."""
    if isinstance(v, dict) or (allow_none and v is None):
        return v
    raise RequestLogError(path, f"expected a JSON object, got {_type_name(v)}", row=row,
                          field=fld)


def _arr(path, row, fld, v, *, allow_none: bool = False) -> list | None:
    """Return v if it is a JSON list (None too with ``allow_none``), else raise naming
    file/row/field and the type found."""
    if isinstance(v, list) or (allow_none and v is None):
        return v
    raise RequestLogError(path, f"expected a JSON list, got {_type_name(v)}", row=row, field=fld)


class UnexpectedShape(RequestLogError):
    """A value of a type no check expected reached a reader (the last-resort refusal of
    ``read_request_log``: never a traceback). The edge checks should have named it first."""


def _get(d: dict, dotted: str) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _need(path, row, d: dict, *names: str) -> Any:
    """Return the first present of the dotted ``names`` or raise a missing-field error."""
    for n in names:
        v = _get(d, n)
        if v is not None:
            return v
    raise RequestLogError(path, "missing (required)", row=row, field=names[0])


def _clock(path, row, v) -> str:
    key = str(v).strip().lower()
    if key not in _CLOCK_ALIASES:
        raise RequestLogError(path, f"unknown clock {v!r}; expected one of {', '.join(CLOCKS)}",
                              row=row, field="clock")
    return _CLOCK_ALIASES[key]


def _record(rid, t_send, t_first, t_last, prompt, output, *, test=None, rnd=None, ok=True,
            error="", chunks=None, row=None, run=1, token_source="", check="", fix=None,
            t_reasoning=None, t_answer=None) -> dict[str, Any]:
    """One request as the readers hand it over (see ``RequestLog`` for the columns)."""
    return {"request_id": str(rid), "t_send_ns": t_send, "t_first_ns": t_first, "t_last_ns": t_last,
            "prompt_tokens": prompt, "output_tokens": output, "test": test, "round": rnd,
            "ok": bool(ok), "error": error or "", "chunk_times": chunks, "row": row, "run": run,
            "token_source": token_source, "check": check, "fix": fix,
            "t_first_reasoning_ns": t_reasoning, "t_first_answer_ns": t_answer, "flag": ""}


def _frame(path, records: list[dict[str, Any]]) -> pd.DataFrame:
    if not records:
        raise RequestLogError(path, "holds no requests")
    # Built column by column: a column mixing ints and None must never pass through float64
    # (epoch ns would lose their last digits).
    cols: dict[str, Any] = {}
    for c in COLUMNS:
        vals = [r.get(c) for r in records]
        if c in _INT_COLUMNS:
            cols[c] = pd.array([None if v is None else _int64_or_raise(path, r, c, int(v))
                                for r, v in zip(records, vals, strict=True)], dtype="Int64")
        elif c == "ok":
            cols[c] = np.array(vals, dtype=bool)
        else:
            if c == "chunk_times":
                for r, v in zip(records, vals, strict=True):
                    for t in v if v is not None else ():
                        _int64_or_raise(path, r, c, int(t))
            if c in ("error", "token_source", "check", "flag", "warmup"):
                vals = ["" if v is None else v for v in vals]
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
            cols[c] = arr
    df = pd.DataFrame(cols)
    df = df.sort_values(["t_send_ns", "row"], na_position="last", kind="stable")
    return df.reset_index(drop=True)


def _jsonl_objects(path: Path, text: str, notes: list[str]) -> list[tuple[int, dict]]:
    """Return (line number, object) of each non-blank line of a JSON Lines file.

    A last line the file ends inside (no newline after it, lines read before it: a benchmark
    killed mid-write) is skipped, with a note appended to ``notes`` (``cut_last_line``). Raises
    ``RequestLogError`` naming the line for any other malformed JSON or a line that is not an
    object.
    """
    rows = []
    lines = text.split("\n")  # JSON Lines: only \n ends a line (U+2028 may sit in a string)
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines) and rows:  # text.split: the last piece has no \n after it
                notes.append(cut_last_line(path, i, "request", len(rows)))
                continue
            raise RequestLogError(path, f"malformed JSON line ({exc.msg})", row=i) from exc
        if not isinstance(d, dict):
            raise RequestLogError(path, f"expected a JSON object, got {type(d).__name__}", row=i)
        rows.append((i, d))
    return rows


def cut_last_line(path, line: int, what: str, n_before: int) -> str:
    """The note for a file whose last line was cut mid-write and skipped: that ``what`` (one
    request, one run) is lost, the ``n_before`` read before it are kept (the NCCL Inspector
    reader says it the same way)."""
    return (f"{path}: line {line}: truncated (the file ends inside it: a benchmark killed "
            f"mid-write?): that {what} skipped, the {n_before:,} {what}(s) before it read")


def _csv_rows(path: Path, text: str, notes: list[str]) -> tuple[list[str], list[tuple[int, dict]]]:
    """Return the header and (line number, {column: value}) of each non-blank row of a CSV file.

    A row with more or fewer values than the header names is refused naming its line, except a
    short last row the file ends inside (no newline after it, rows read before it: a benchmark
    killed mid-write), which is skipped with a note appended to ``notes``.
    """
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        header = []
    if not header:
        raise RequestLogError(path, "empty CSV (no header)")
    rows: list[tuple[int, list[str]]] = []
    for vals in reader:
        if any(v.strip() for v in vals):
            rows.append((reader.line_num, vals))
    if rows and len(rows[-1][1]) < len(header) and len(rows) > 1 \
            and not text.endswith(("\n", "\r")):
        notes.append(cut_last_line(path, rows[-1][0], "request", len(rows) - 1))
        rows.pop()
    for line, vals in rows:
        if len(vals) != len(header):
            raise RequestLogError(path, f"has {len(vals)} values but the header names "
                                        f"{len(header)}", row=line)
    return header, [(line, dict(zip(header, vals, strict=True))) for line, vals in rows]


def _directory_message(p: Path) -> str:
    """What to say of a request log path that is a directory: so, and the files in it that
    could be the log (at most 5)."""
    try:
        files = sorted(f.name for f in Path(p).iterdir() if f.is_file()
                       and f.suffix.lower() in (".json", ".jsonl", ".csv"))
    except OSError:
        files = []
    more = f", ... ({len(files)} in all)" if len(files) > 5 else ""
    inside = (f"; JSON/CSV files in it: {', '.join(files[:5])}{more}" if files
              else "; it holds no JSON/CSV file")
    return f"is a directory, not a request log file: give the log file itself{inside}"


def _read_text(p: Path) -> str:
    try:
        data = p.read_bytes()
    except FileNotFoundError as exc:
        raise RequestLogError(p, "no such file") from exc
    except IsADirectoryError as exc:
        raise RequestLogError(p, _directory_message(p)) from exc
    except OSError as exc:
        raise RequestLogError(p, f"cannot read ({exc.strerror or exc})") from exc
    if data[:4] == b"PK\x03\x04":
        raise RequestLogError(p, "is a zip/Excel file (the vLLM multi-turn benchmark's xlsx?): "
                                 "no xlsx reader is a dependency; export its 'Raw data' sheet "
                                 "as CSV (columns start_time_ms, ttft_ms, latency_ms, "
                                 "input_num_tokens, output_num_tokens, ...) and read that")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RequestLogError(p, f"is not UTF-8 text (byte {exc.start})") from exc


def _load_json(p: Path, text: str, want: type) -> Any:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestLogError(p, f"malformed JSON ({exc.msg})", row=exc.lineno) from exc
    if not isinstance(d, want):
        raise RequestLogError(p, f"expected a JSON {want.__name__}, got {type(d).__name__}")
    return d


def short_reason(text: str, n: int = 200) -> str:
    """One line of at most ``n`` characters (a tool's error can be a whole traceback)."""
    one = " ".join(str(text).split())
    return one if len(one) <= n else one[: n - 3] + "..."


def _join_flag(old: str, new: str) -> str:
    return f"{old}; {new}" if old else new
