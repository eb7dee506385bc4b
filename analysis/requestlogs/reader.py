"""``read_request_log``: detect the format, run its reader, check the rows, and say what was
kept out."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from .checks import MAX_CHECK_NOTES, _validate
from .common import (
    NoSuchRun,
    RequestLog,
    RequestLogError,
    UnexpectedShape,
    _frame,
    _read_text,
    short_reason,
)
from .detector import detect_format
from .formats import FORMATS, TABLE

#: What a reader raises when a value of a type no edge check expected reaches it.
_UNEXPECTED = (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError,
               RecursionError)


def read_request_log(path: str | os.PathLike, format: str | None = None, *,
                     run: int | None = None) -> RequestLog:
    """Read a request log of any supported format into a ``RequestLog`` on the log's own clock.

    ``format`` is one of ``FORMATS`` or None to detect it from the content. Times become int64 ns
    (seconds are multiplied by 1e9 and rounded). Failed requests are kept with ``ok = False``
    and the reason in ``error``; so is a row whose values cannot be a request (TTFT <= 0, last
    token before the first, chunks out of order: "invalid: ..."): a bad row is that row's
    problem. ``run``: keep only run ``run`` (1-based) of a file that holds several runs (vLLM
    ``--append-result``, SGLang); None keeps all, each labelled (column ``run``, test
    "run k", ``RequestLog.runs``).

    Raises ``RequestLogError`` naming file, row and field for: a missing file, an empty file, an
    unknown format (a vLLM / SGLang result without per-request arrays is named as such, with
    the option that saves them), malformed JSON/CSV, a missing required field, a non-numeric
    value, start times out of dispatch order (vLLM), a duplicated request_id, rows on
    different clocks, a ``run`` the file does not hold, or a file with no usable request (the
    reasons of the first failed rows are given).
    """
    p = Path(path)
    text = _read_text(p)
    if not text.strip():
        raise RequestLogError(p, "is empty")
    if format is None:
        try:
            fmt = detect_format(p, text)
        except RequestLogError:
            raise
        except _UNEXPECTED as exc:
            raise UnexpectedShape(p, "a value of an unexpected type or shape where the format "
                                     f"is told ({type(exc).__name__}: "
                                     f"{short_reason(str(exc), 120)}); give --format") from exc
    else:
        fmt = format.lower().replace("_", "-")
        if fmt not in TABLE:
            raise RequestLogError(p, f"unknown format {format!r}; expected one of "
                                     f"{', '.join(FORMATS)}")
    try:
        try:
            res = TABLE[fmt].read(p, text)
            records, clock, notes = res[:3]
            records, warm_note = _drop_warmup(p, records)
            df = _validate(p, _frame(p, records))
        except RequestLogError:
            raise
        except _UNEXPECTED as exc:
            # the last resort: a value no edge check expected; refused, never a traceback
            raise UnexpectedShape(p, f"a value of an unexpected type or shape for a {fmt} file "
                                     f"({type(exc).__name__}: {short_reason(str(exc), 120)})"
                                  ) from exc
    except RequestLogError as exc:
        if format is None:
            raise
        raise _suggest_format(p, text, fmt, exc) from exc
    runs = res[3] if len(res) > 3 else [{"run": 1, "label": "run 1", "meta": {}}]
    if TABLE[fmt].token_source:
        df["token_source"] = [t or TABLE[fmt].token_source for t in df["token_source"]]
    if run is not None:
        if not 1 <= int(run) <= len(runs):
            raise NoSuchRun(p, int(run), len(runs))
        df = df[df["run"] == int(run)].reset_index(drop=True)
        runs = [r for r in runs if r["run"] == int(run)]
        notes = [n for n in notes if not n.startswith(f"{len(res[3])} runs in one file")] \
            if len(res) > 3 else notes
        notes.insert(0, f"{runs[0]['label']} chosen")
    log = RequestLog(path=p, format=fmt, clock=clock, requests=df, notes=list(notes),
                     runs=runs)
    if warm_note:
        log.notes.insert(0, warm_note)
    if TABLE[fmt].names:
        log.notes.append(f"names: {TABLE[fmt].names}; rdmascope reports its own definitions "
                         "(attribute --definitions; docs/request-logs.md)")
    if log.n_failed:
        bad = log.requests[~log.requests["ok"]]
        shown = "; ".join(f"row {r.row}: {short_reason(r.error)}"
                          for r in bad.head(3).itertuples())
        log.notes.append(f"{log.n_failed} failed request(s) kept out of the metrics ({shown}"
                         f"{'; ...' if len(bad) > 3 else ''}); the traffic they caused counts "
                         "as 'idle' in the time classes and idle/other in the split, where no "
                         "successful request is in flight")
    checked = log.requests[log.requests["check"].astype(bool)]
    for r in checked.head(MAX_CHECK_NOTES).itertuples():
        log.notes.append(f"request {r.request_id} (row {r.row}): {r.check}")
    if len(checked) > MAX_CHECK_NOTES:
        log.notes.append(f"... and {len(checked) - MAX_CHECK_NOTES} more request(s) whose "
                         "stored values disagree (column 'check')")
    if not len(log.ok):
        bad = log.requests[~log.requests["ok"]]
        shown = "; ".join(f"row {r.row}: {short_reason(r.error)}"
                          for r in bad.head(3).itertuples())
        first = bad.iloc[0]
        fld = None
        if str(first["error"]).startswith("invalid: "):
            fld = str(first["error"])[9:].split(":", 1)[0]
        raise RequestLogError(p, f"holds no successful request ({log.n_failed} failed: {shown}"
                                 f"{'; ...' if len(bad) > 3 else ''})",
                              row=None if fld is None or pd.isna(first["row"])
                              else int(first["row"]), field=fld)
    return log


def _drop_warmup(p: Path, records: list[dict]) -> tuple[list[dict], str]:
    """The records without the warm-up ones a tool marked (key ``warmup``: why) nor the ones it
    measured outside its run (key ``outside``: why, e.g. fmperf's ``exclude``), and the note
    naming how many were kept out and why ("" when none).

    A whole labelled warm-up round (every request of a (run, test, round) marked, e.g. the
    emulator's round 0 of a closed-loop cell, native ``"phase": "warmup"``) stays in the log,
    marked (column ``warmup``): ``attribute`` keeps it out of every measured number but lets
    the conserving split give its bytes to it, so measured requests running beside it do not
    take them. Other warm-ups (no round label: AIPerf, guidellm) are dropped here."""
    notes = []
    kept = records
    for key, what in (("warmup", "warm-up request(s)"),
                      ("outside", "request(s) outside the tool's measured run")):
        warm = [r for r in kept if r.get(key)]
        if not warm:
            continue
        if key == "warmup":
            whole: dict[tuple, bool] = {}
            for r in kept:
                if r.get("round") is not None:
                    g = (r.get("run", 1), r.get("test"), r["round"])
                    whole[g] = whole.get(g, True) and bool(r.get(key))
            listed = [r for r in warm if whole.get((r.get("run", 1), r.get("test"),
                                                     r.get("round")))]
        else:
            listed = []
        measured = [r for r in kept if not r.get(key)]
        kept = measured + listed
        why = "; ".join(f"{n} {k}" for k, n in
                        {w[key]: sum(1 for x in warm if x[key] == w[key]) for w in warm}.items())
        if not measured:
            raise RequestLogError(p, f"holds only {what.replace('(s)', 's')} ({len(warm)}: "
                                     f"{why}); nothing measured to attribute")
        notes.append(f"{len(warm)} {what} kept out of every number ({why})" + (
            f"; {len(listed)} of them, whole warm-up rounds, stay listed (column warmup) so "
            "the conserving split gives their bytes to them, not to measured requests"
            if listed else ""))
    return kept, "; ".join(notes)


def _suggest_format(p: Path, text: str, fmt: str, exc: RequestLogError) -> RequestLogError:
    """``exc`` (reading ``p`` as the given ``fmt`` failed) with the format the content looks
    like when that is another one (``detect_format``), e.g. a vLLM result read as native."""
    try:
        seen = detect_format(p, text)
    except (RequestLogError, *_UNEXPECTED):
        return exc
    if seen == fmt:
        return exc
    return type(exc)(p, f"the file looks like format {seen!r}, not {fmt!r}: give --format "
                              f"{seen} (or no --format, to detect it); read as {fmt!r}: "
                              f"{exc.message}", row=exc.row, field=exc.field)
