"""Read per-request timing from LLM load generators and place it on the capture's clock.

Eight input formats (``docs/request-logs.md`` and the README describe where each comes from):

============== ==================================================== ======================
format         file                                                 clock of its times
============== ==================================================== ======================
native         rdmascope's own JSONL/CSV (``rdmascope.client``):     ``clock`` field, else
               request_id, t_send, t_first_token, t_last_token (s),  CLOCK_MONOTONIC
               prompt_tokens, output_tokens, [test, round, clock,
               error, chunk_times]
vllm           ``vllm bench serve --save-result --save-detailed``     CLOCK_MONOTONIC with
               JSON (parallel arrays; also TensorRT-LLM's ``e2els``)  ``start_times``, else
                                                                      relative
guidellm       ``benchmarks.json`` (v0.4+ ``info.timings`` and the    CLOCK_REALTIME
               older flat ``start_time``/``first_token_time``)
genai-perf     perf_analyzer / genai-perf ``profile_export.json``     CLOCK_REALTIME (ns)
aiperf         AIPerf ``profile_export.jsonl``                        CLOCK_REALTIME (ns)
inference-perf ``per_request_lifecycle_metrics.json``                 CLOCK_MONOTONIC
sglang         SGLang ``bench_serving --output-details`` JSONL (one   relative
               line per run)
llmperf        ray-project/llmperf ``*_individual_responses.json``    relative (no send times)
============== ==================================================== ======================

Keys each format is read from (send / first token / last token; token counts; failures):

- native: ``t_send``, ``t_first_token``, ``t_last_token`` (s; or the same names + ``_ns``, int
  ns); ``prompt_tokens``, ``output_tokens``; optional ``request_id``, ``test``, ``round``,
  ``clock``, ``chunk_times`` (s); failed when ``error`` is set or ``ok`` is false.
- vllm: parallel arrays ``start_times`` (s, optional), ``ttfts`` (s, first = start + TTFT),
  ``latencies`` or ``e2els`` (s, last = start + latency) else the sum of ``itls``;
  ``input_lens``, ``output_lens``; failed where ``errors[i]`` is non-empty.
- guidellm: v0.4+ ``benchmarks[].requests.{successful,incomplete,errored}[]`` with
  ``info.timings.{request_start, first_token_iteration, last_token_iteration}`` (epoch s);
  v0.2-0.3 the same lists with flat ``start_time``, ``first_token_time``, ``last_token_time``;
  v0.1 ``benchmarks[].results[]`` / ``errors[]`` with the flat times; tokens ``prompt_tokens`` /
  ``output_tokens`` (v0.1 ``prompt_token_count`` / ``output_token_count``); only
  ``successful`` / ``results`` count as ok. A flat ``benchmarks[].requests[]`` list is no guidellm
  layout and is refused naming the accepted ones (``GUIDELLM_LAYOUTS``).
- genai-perf: ``experiments[].requests[]``: ``timestamp`` (epoch ns, send),
  ``response_timestamps[]`` (epoch ns; the first and last token-bearing responses, ``[DONE]`` and
  usage-only chunks skipped), tokens from the stream's ``usage.{prompt_tokens,
  completion_tokens}`` (unknown without usage records); failed on ``error`` or no response.
- aiperf: per line ``metadata.request_start_ns`` (epoch ns), ``metrics.time_to_first_token``
  and ``metrics.inter_chunk_latency`` ({value, unit}), else ``metadata.request_end_ns`` for the
  last token; ``metrics.input_sequence_length``, ``metrics.output_sequence_length``; failed on
  ``error`` or ``metadata.was_cancelled``.
- inference-perf: list of ``start_time`` (s, perf_counter), ``info.response_metrics.chunk_times``
  (first and last chunk), ``info.input_tokens``, ``info.response_metrics.output_tokens``;
  failed on ``error`` or when a streamed request has no chunk times.
- sglang: vLLM-style arrays (top level, or under ``details``), one JSON line per run; ITLs are
  per token (SGLang spreads a chunk's gap over its tokens); no latencies (last token = first +
  sum of ITLs). See ``_read_vllm``.
- llmperf: flat dicts; see ``_read_llmperf`` (its ITL includes the TTFT).

Only chunks carrying generated text are tokens (``classify_event``, ``sse_events``); stored
vLLM/SGLang arrays are checked against themselves (``check_itls``) and corrections offered
(``apply_fixes``); a file can hold several runs (``RequestLog.runs``, ``read_request_log(run=)``,
one offset per run in ``align``).

Every reader rebuilds the same timestamps: send, first token, last token (and chunk arrivals when
the tool saved them) as int64 ns on the log's clock; the metrics are then computed by
``rdmascope.analysis.attribute`` with one set of definitions whatever the tool called its fields.

Failed requests (an error recorded by the tool, or a row whose values cannot be a request) stay
in the table with ``ok = False`` and the reason in ``error``; they are kept out of every metric.
Bad input raises ``RequestLogError`` naming the file, the row (1-based line for JSONL/CSV,
position in the file's request list otherwise) and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

CLOCK_MONOTONIC = "CLOCK_MONOTONIC"
CLOCK_REALTIME = "CLOCK_REALTIME"
CLOCK_RELATIVE = "relative"
CLOCKS = (CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_RELATIVE)

FORMATS = ("native", "vllm", "guidellm", "genai-perf", "aiperf", "inference-perf", "sglang",
           "llmperf")

#: Columns of ``RequestLog.requests`` (one row per request, failed ones included).
COLUMNS = ("request_id", "t_send_ns", "t_first_ns", "t_last_ns", "prompt_tokens",
           "output_tokens", "test", "round", "ok", "error", "chunk_times", "row", "run",
           "token_source", "check", "fix", "t_first_reasoning_ns", "t_first_answer_ns", "flag")

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
    "corrected: ..."). Rows are sorted by send time (failed rows without one last). ``runs``:
    one dict per run (``run``, ``label``, ``meta`` = the tool's run metadata).

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


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


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
    except (TypeError, ValueError):
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
            if c in ("error", "token_source", "check", "flag"):
                vals = ["" if v is None else v for v in vals]
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
            cols[c] = arr
    df = pd.DataFrame(cols)
    df = df.sort_values(["t_send_ns", "row"], na_position="last", kind="stable")
    return df.reset_index(drop=True)


def _validate(path, df: pd.DataFrame) -> pd.DataFrame:
    """Check the successful rows; a row that fails a check becomes a failed row with the reason.

    A request_id used twice refuses the file (``RequestLogError``: the rows cannot be told
    apart). Per row (a bad row is that row's problem, never the file's): all three times
    present, the first token strictly after the send (a TTFT of 0 is as impossible as a negative
    one: a first token needs a forward pass), the last token not before the first, chunk times in
    order. Such a row gets ``ok = False`` and ``error = "invalid: <field>: <what>"``; failed rows
    are not checked. Returns the checked frame.
    """
    ids = df["request_id"]
    dup = ids[ids.duplicated(keep=False)]
    if len(dup):
        first = dup.iloc[0]
        rows = df.loc[ids == first, "row"].tolist()
        raise RequestLogError(path, f"request_id {first!r} appears more than once (rows {rows})",
                              row=rows[1], field="request_id")
    df = df.copy()
    for r in df[df["ok"]].itertuples():
        why = _row_problem(r)
        if why:
            df.at[r.Index, "ok"] = False
            df.at[r.Index, "error"] = f"invalid: {why}"
    return df


def _row_problem(r) -> str:
    """Return what makes a successful row unusable ("<field>: <what>"), or "" when it is fine."""
    for fld, v in (("t_send", r.t_send_ns), ("t_first_token", r.t_first_ns),
                   ("t_last_token", r.t_last_ns)):
        if pd.isna(v):
            return f"{fld}: missing value"
    send, first, last = int(r.t_send_ns), int(r.t_first_ns), int(r.t_last_ns)
    if first < send:
        return (f"t_first_token: first token at {first} ns is before the send at {send} ns "
                f"({(first - send) / 1e9:+.6f} s)")
    if first == send:
        return (f"t_first_token: first token at the send instant ({send} ns): a TTFT of 0 s is "
                "impossible (the first token needs at least one forward pass)")
    if last < first:
        return f"t_last_token: last token at {last} ns is before the first token at {first} ns"
    ch = r.chunk_times
    if ch is not None and len(ch) > 1:
        d = np.diff(np.asarray(ch, dtype=np.int64))
        if (d < 0).any():
            k = int(np.argmax(d < 0)) + 1
            return f"chunk_times: chunk {k} arrives before chunk {k - 1} (chunk times out of order)"
    return ""


# ------------------------------------------------------------------------------------------------
# Readers (one per format); each returns (records, clock, notes)
# ------------------------------------------------------------------------------------------------


def _jsonl_objects(path: Path, text: str) -> list[tuple[int, dict]]:
    """Return (line number, object) of each non-blank line of a JSON Lines file.

    Raises ``RequestLogError`` naming the line for malformed JSON or a line that is not an object.
    """
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RequestLogError(path, f"malformed JSON line ({exc.msg})", row=i) from exc
        if not isinstance(d, dict):
            raise RequestLogError(path, f"expected a JSON object, got {type(d).__name__}", row=i)
        rows.append((i, d))
    return rows


def _native_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    """Return (line number, dict) rows of a native JSONL, JSON array or CSV file."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            arr = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RequestLogError(path, f"malformed JSON ({exc.msg})", row=exc.lineno) from exc
        return [(i + 1, d) for i, d in enumerate(arr)]
    if stripped.startswith("{"):
        return _jsonl_objects(path, text)
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise RequestLogError(path, "empty CSV (no header)")
    rows = []
    for d in reader:
        if None in d:
            raise RequestLogError(path, f"has {len(reader.fieldnames) + len(d[None])} values "
                                        f"but the header names {len(reader.fieldnames)}",
                                  row=reader.line_num)
        if not any((v or "").strip() for v in d.values()):
            continue
        rows.append((reader.line_num, d))
    return rows


def _read_native(path: Path, text: str):
    rows = _native_rows(path, text)
    if not rows:
        raise RequestLogError(path, "holds no requests")
    records, clocks = [], set()
    for line, d in rows:
        if not isinstance(d, dict):
            raise RequestLogError(path, "expected a JSON object", row=line)
        err = d.get("error") or ""
        ok = str(err).strip() == "" and str(d.get("ok", "true")).strip().lower() not in (
            "false", "0", "no")
        clocks.add(_clock(path, line, d["clock"]) if d.get("clock") not in (None, "")
                   else CLOCK_MONOTONIC)

        def t(name, line=line, d=d, ok=ok):
            if f"{name}_ns" in d and d[f"{name}_ns"] not in (None, ""):
                return _int(path, line, f"{name}_ns", d[f"{name}_ns"], allow_none=not ok)
            if name not in d and ok:
                raise RequestLogError(path, "missing (required)", row=line, field=name)
            v = _num(path, line, name, d.get(name), allow_none=not ok)
            return None if v is None else _s_to_ns(v)

        rid = d.get("request_id")
        if rid in (None, ""):
            raise RequestLogError(path, "missing (required)", row=line, field="request_id")
        for name in ("prompt_tokens", "output_tokens"):
            if ok and name not in d:
                raise RequestLogError(path, "missing (required)", row=line, field=name)
        chunks = d.get("chunk_times")
        if isinstance(chunks, str):
            chunks = json.loads(chunks) if chunks.strip() else None
        if chunks is not None:
            chunks = [_s_to_ns(_num(path, line, "chunk_times", c)) for c in chunks]
        rnd = d.get("round")
        records.append(_record(
            rid, t("t_send"), t("t_first_token"), t("t_last_token"),
            _int(path, line, "prompt_tokens", d.get("prompt_tokens"), allow_none=not ok),
            _int(path, line, "output_tokens", d.get("output_tokens"), allow_none=not ok),
            test=(str(d["test"]) if d.get("test") not in (None, "") else None),
            rnd=_int(path, line, "round", rnd) if rnd not in (None, "") else None,
            ok=ok, error=str(err) if err else ("failed" if not ok else ""), chunks=chunks,
            row=line))
    if len(clocks) > 1:
        raise RequestLogError(path, f"rows use different clocks ({', '.join(sorted(clocks))}); "
                                    "one file must use one clock", field="clock")
    return records, clocks.pop(), []


#: A first ITL this many times the median of the others, with as many ITLs as output tokens,
#: marks a TTFT taken at a chunk without a token (vLLM issue 15106).
FIRST_ITL_RATIO = 10.0

#: Run metadata shown per run, as the tools name it (vLLM ``bench serve``; SGLang
#: ``bench_serving``); the first present are shown.
_RUN_META_KEYS = ("tag", "date", "backend", "model_id", "dataset_name", "request_rate",
                  "max_concurrency", "num_prompts", "random_input_len", "random_output_len")


def _run_label(k: int, d: dict) -> dict[str, Any]:
    meta = {key: (str(d[key]) if isinstance(d[key], float) and not math.isfinite(d[key])
                  else d[key]) for key in _RUN_META_KEYS if d.get(key) not in (None, "")}
    text = f"run {k}" + (" (" + ", ".join(f"{key}={v}" for key, v in meta.items()) + ")"
                         if meta else "")
    return {"run": k, "label": text, "meta": meta}


def check_itls(ttft_s: float, itls_s: list[float], output_tokens: int | None,
               latency_s: float | None = None):
    """Check a vLLM-style (TTFT, ITL list, output tokens) triple against itself.

    A stream of n output tokens has its first token at TTFT and at most n - 1 later chunks, so
    at most n - 1 ITLs (fewer when a chunk carries several tokens). With n or more ITLs one entry
    is not a gap between two token chunks. Two known causes, told apart by the first ITL:

    - equal to the TTFT (within 1 us): the TTFT was appended to the ITLs too (vLLM issue 7242,
      ``benchmark_serving.py`` 2024; llmperf does it on purpose, "ITL includes TTFT"). Corrected:
      the ITLs without that first entry (the TTFT is right).
    - more than ``FIRST_ITL_RATIO`` x the median of the other ITLs: the TTFT was taken at a chunk
      that carried no token (a role-only delta, vLLM issue 15106), and the first ITL is the real
      wait for the first token. Corrected: TTFT + first ITL, the ITLs without that entry.

    A second check, by sums: with the E2E latency stored (``latency_s``, send to end of stream),
    TTFT + sum(ITLs) is the last chunk's arrival and cannot exceed it (1 ms allowed for float
    sums). A repeated TTFT breaks it by the TTFT; a TTFT at a non-token chunk keeps it.

    Returns ``(note, kind, corrected_ttft_s, corrected_itls_s)``, or ``None`` when the values
    agree (or cannot be checked: fewer than 2 ITLs or the output tokens unknown, and no
    latency). ``kind`` is "ttft-repeated", "ttft-at-non-token-chunk" (both corrected),
    "itl-count" or "itl-sum" (named, not corrected: no known cause matches).
    """
    over = ""
    if latency_s is not None and itls_s:
        total = float(ttft_s) + float(np.sum(itls_s))
        if total > latency_s + 1e-3:
            over = (f"; TTFT + sum of ITLs ({total:.6f} s) exceeds the stored E2E latency "
                    f"({latency_s:.6f} s) by {total - latency_s:.6f} s")
    if output_tokens is None or len(itls_s) < 2 or len(itls_s) < output_tokens:
        if over:
            return (over[2:] + ": the ITLs hold time that is not between two chunks; values "
                    "kept as stored", "itl-sum", None, None)
        return None
    first, rest = float(itls_s[0]), [float(x) for x in itls_s[1:]]
    med = float(np.median(rest))
    head = (f"{len(itls_s)} ITLs for {output_tokens} output tokens (at most "
            f"{max(output_tokens - 1, 0)} expected)")
    if abs(first - ttft_s) <= 1e-6:
        return (f"{head}{over}: the first ITL ({first:.6f} s) repeats the TTFT (the TTFT "
                "stored as an ITL too, vLLM issue 7242 / llmperf); corrected: that entry "
                "dropped", "ttft-repeated", ttft_s, rest)
    if med > 0 and first > FIRST_ITL_RATIO * med:
        return (f"{head}{over}, and the first ITL ({first:.6f} s) is {first / med:.0f}x the "
                f"median of the others ({med:.6f} s): the TTFT ({ttft_s:.6f} s) looks taken at "
                "a chunk without a token (vLLM issue 15106); corrected TTFT = TTFT + first ITL "
                f"= {ttft_s + first:.6f} s", "ttft-at-non-token-chunk", ttft_s + first, rest)
    return (f"{head}{over}: one ITL is not a gap between two token chunks; no known cause "
            "matches, values kept as stored", "itl-count", None, None)


def _read_vllm(path: Path, data: dict, *, run: int = 1, n_runs: int = 1, tool: str = "vllm"):
    """Read one run of vLLM ``bench serve`` (or SGLang ``bench_serving``) parallel arrays."""
    name = "an SGLang bench_serving" if tool == "sglang" else "a vLLM"
    ctx = f"run {run}: " if n_runs > 1 else ""
    n_key = "ttfts"
    lat_key = "latencies" if "latencies" in data else ("e2els" if "e2els" in data else None)
    for k in ("input_lens", "output_lens", "ttfts"):
        if k not in data:
            raise RequestLogError(path, f"{ctx}missing (required for {name} result)", field=k)
    n = len(data[n_key])
    arrays = {k: data[k] for k in ("input_lens", "output_lens", "ttfts", "itls", "errors",
                                   "start_times") if k in data and data[k] is not None}
    if lat_key:
        arrays[lat_key] = data[lat_key]
    for k, v in arrays.items():
        if not isinstance(v, list) or len(v) != n:
            raise RequestLogError(path, f"{ctx}has {len(v) if isinstance(v, list) else 'no'} "
                                        f"entries, expected {n} (one per request, like 'ttfts')",
                                  field=k)
    notes = []
    starts = arrays.get("start_times")
    if starts is not None:
        clock = CLOCK_MONOTONIC
        prev = None
        for i, s in enumerate(starts):
            x = _num(path, i + 1, "start_times", s)
            if prev is not None and x < prev:
                raise RequestLogError(path, f"{ctx}start time {x} is before the previous "
                                            f"request's {prev} (entries are in dispatch order)",
                                      row=i + 1, field="start_times")
            prev = x
    else:
        rate = data.get("request_rate", "inf")
        conc = data.get("max_concurrency")
        if str(rate).lower() not in ("inf", "infinity", "none") or (conc is not None
                                                                   and conc < n):
            how = ("re-run with a vLLM that saves start_times, or use the native format"
                   if tool == "vllm" else "SGLang saves no send times; use the native format "
                   "or request_rate=inf with all requests in flight at once")
            raise RequestLogError(
                path, f"{ctx}has no per-request send times and the requests were not all sent "
                      f"at once (request_rate={rate!r}, max_concurrency={conc!r}); {how}",
                field="start_times")
        clock = CLOCK_RELATIVE
        notes.append(f"{ctx}no start_times: all requests placed as sent together at t=0 "
                     "(request_rate=inf); times are relative")
    errors = arrays.get("errors") or [""] * n
    itls = arrays.get("itls")
    src = ("tool field output_lens (SGLang: the server's completion_tokens, else retokenized)"
           if tool == "sglang" else "tool field output_lens")
    records = []
    prefix = f"run{run}-" if n_runs > 1 else ""
    test = f"run {run}" if n_runs > 1 else None
    for i in range(n):
        row = i + 1
        ok = not errors[i]
        t0 = _s_to_ns(_num(path, row, "start_times", starts[i])) if starts is not None else 0
        common = {"row": row, "run": run, "test": test, "token_source": src}
        if not ok:
            records.append(_record(f"{prefix}{i}", t0, None, None,
                                   _int(path, row, "input_lens", data["input_lens"][i]),
                                   None, ok=False, error=str(errors[i]), **common))
            continue
        ttft = _num(path, row, "ttfts", data["ttfts"][i])
        output = _int(path, row, "output_lens", data["output_lens"][i])
        prompt = _int(path, row, "input_lens", data["input_lens"][i])
        gaps = [_num(path, row, "itls", g) for g in (itls[i] or [])] if itls is not None else None
        if ttft == 0 and not output and not gaps:
            # vLLM before PR 5895 kept failed requests with an empty error: TTFT 0, no output
            records.append(_record(f"{prefix}{i}", t0, None, None, prompt, output, ok=False,
                                   error="failed: TTFT 0 s and 0 output tokens with an empty "
                                         "error (a failed request as vLLM before PR 5895 "
                                         "stored it)", **common))
            continue
        t_first = t0 + _s_to_ns(ttft)
        chunks = None
        if gaps is not None:
            cum = np.cumsum(gaps) if gaps else []
            chunks = [t_first] + [t_first + _s_to_ns(c) for c in cum]
        if lat_key:
            t_last = t0 + _s_to_ns(_num(path, row, lat_key, arrays[lat_key][i]))
        elif chunks is not None:
            t_last = chunks[-1]
        else:
            raise RequestLogError(path, f"{ctx}missing: neither latencies nor itls to place the "
                                        "last token", row=row, field="latencies")
        check, fix = "", None
        lat = _num(path, row, lat_key, arrays[lat_key][i]) if lat_key else None
        found = check_itls(ttft, gaps, output, lat) if gaps is not None else None
        if found is not None:
            check, kind, ttft2, gaps2 = found
            if ttft2 is not None:
                f_first = t0 + _s_to_ns(ttft2)
                f_chunks = [f_first] + [f_first + _s_to_ns(c) for c in np.cumsum(gaps2)]
                fix = {"kind": kind, "t_first_ns": f_first, "chunk_times": f_chunks,
                       "t_last_ns": t_last if lat_key else f_chunks[-1]}
        records.append(_record(f"{prefix}{i}", t0, t_first, t_last, prompt, output,
                               chunks=chunks, check=check, fix=fix, **common))
    return records, clock, notes


def _json_sequence(path: Path, text: str) -> list[tuple[int, Any]]:
    """Return (line, value) of every top-level JSON value in ``text``, one after the other.

    vLLM ``bench serve --append-result`` writes a newline and the next result object after the
    previous one, SGLang ``bench_serving`` appends one line per run: both are a sequence of JSON
    objects. Raises ``RequestLogError`` naming the line of malformed JSON.
    """
    dec = json.JSONDecoder()
    out, pos = [], 0
    line, counted = 1, 0  # lines counted up to ``counted`` (linear: never from the start again)
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            return out
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            v, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            at = line + text.count("\n", pos, exc.pos)
            raise RequestLogError(path, f"malformed JSON ({exc.msg}, line {at}) in the value "
                                        f"starting on line {line}", row=line) from exc
        out.append((line, v))
        pos = end


def _details(d: dict) -> dict:
    """The per-request arrays of one run: top level (vLLM, SGLang <= 0.5) or ``details`` (SGLang
    ``sglang.benchmark``)."""
    det = d.get("details")
    if isinstance(det, dict) and "ttfts" in det:
        return {**{k: v for k, v in d.items() if k != "details"}, **det}
    return d


def _read_runs(path: Path, text: str, tool: str):
    """Read every run of a vLLM / SGLang result file (one JSON object per run)."""
    objs = _json_sequence(path, text)
    if not objs:
        raise RequestLogError(path, "holds no requests")
    records, clocks, notes, runs = [], set(), [], []
    for k, (line, d) in enumerate(objs, start=1):
        if not isinstance(d, dict):
            raise RequestLogError(path, f"expected a JSON object per run, got "
                                        f"{type(d).__name__}", row=line)
        d = _details(d)
        if "ttfts" not in d and _is_bench_summary(d):
            raise RequestLogError(path, f"run {k} (line {line}): {_no_details_message(d, tool)}",
                                  row=line)
        recs, clock, nts = _read_vllm(path, d, run=k, n_runs=len(objs), tool=tool)
        records += recs
        clocks.add(clock)
        notes += nts
        runs.append(_run_label(k, d))
    if len(clocks) > 1:
        raise RequestLogError(path, "runs use different clocks (some have start_times, some do "
                                    "not); split the file, one run per file", field="start_times")
    if len(runs) > 1:
        notes.insert(0, f"{len(runs)} runs in one file: " + "; ".join(r["label"] for r in runs))
    return records, clocks.pop(), notes, runs


def _no_details_message(d: dict, tool: str) -> str:
    if tool == "sglang":
        return ("an SGLang bench_serving result without per-request arrays (ttfts, itls, ...): "
                "re-run bench_serving with --output-details")
    return ("a vLLM bench serve result without per-request arrays (ttfts, itls, ...): it was "
            "saved without --save-detailed; re-run with --save-result --save-detailed")


def _is_sglang(d: dict) -> bool:
    """An SGLang ``bench_serving`` result (keys vLLM never writes), not a vLLM one."""
    return "model_id" not in d and (
        isinstance(d.get("details"), dict) or any(
            k in d for k in ("sharegpt_output_len", "random_range_ratio", "server_info",
                             "total_output_tokens_retokenized", "accept_length")))


def _is_bench_summary(d: dict) -> bool:
    """A vLLM / SGLang result object with aggregates only (``mean_ttft_ms`` ...)."""
    return "ttfts" not in d and "mean_ttft_ms" in d


#: The guidellm ``benchmarks.json`` shapes read (checked against guidellm's own models).
GUIDELLM_LAYOUTS = (
    "benchmarks[].requests.{successful,incomplete,errored}[] (v0.2+; times in "
    "info.timings.{request_start,first_token_iteration,last_token_iteration} from v0.4, flat "
    "start_time/first_token_time/last_token_time in v0.2-0.3) or benchmarks[].results[] with "
    "errors[] (v0.1, flat times, prompt_token_count/output_token_count)")


def _guidellm_requests(path: Path, data: dict):
    """Yield (benchmark index, status, position, request dict) over all schema variants."""
    benches = data.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise RequestLogError(path, "has no benchmarks[] list", field="benchmarks")
    flat: list[tuple[int, dict]] = []
    for bi, b in enumerate(benches):
        if isinstance(b, dict) and isinstance(b.get("benchmarks"), list):  # v0.1 report nesting
            flat.extend((bi, bb) for bb in b["benchmarks"])
        else:
            flat.append((bi, b))
    pos = 0
    for bi, b in flat:
        reqs = b.get("requests") if isinstance(b, dict) else None
        if isinstance(reqs, dict):
            groups = [("successful", reqs.get("successful") or []),
                      ("incomplete", reqs.get("incomplete") or []),
                      ("errored", reqs.get("errored") or [])]
        elif isinstance(b, dict) and ("results" in b or "errors" in b):
            groups = [("successful", b.get("results") or []), ("errored", b.get("errors") or [])]
        else:
            what = ("is a list: no guidellm version writes a flat requests[] list"
                    if isinstance(reqs, list) else "is missing" if reqs is None
                    else f"is a {type(reqs).__name__}")
            raise RequestLogError(path, f"benchmark {bi}: 'requests' {what}; the accepted "
                                        f"layouts are {GUIDELLM_LAYOUTS}",
                                  field=f"benchmarks[{bi}].requests")
        for status, lst in groups:
            for r in lst:
                pos += 1
                yield bi, status, pos, r


def _read_guidellm(path: Path, data: dict):
    records = []
    n_bench = len(data.get("benchmarks") or [])
    for bi, status, pos, r in _guidellm_requests(path, data):
        if not isinstance(r, dict):
            raise RequestLogError(path, "expected a request object", row=pos)
        ok = status == "successful"
        timed = _get(r, "info.timings") is not None
        names = (("info.timings.request_start", "info.timings.first_token_iteration",
                  "info.timings.last_token_iteration") if timed else
                 ("start_time", "first_token_time", "last_token_time"))
        ts = []
        for nm in names:
            v = _get(r, nm)
            if v is None and ok:
                raise RequestLogError(path, "missing (required)", row=pos, field=nm)
            x = _num(path, pos, nm, v, allow_none=True)
            ts.append(None if x is None else _s_to_ns(x))
        prompt = r.get("prompt_tokens", r.get("prompt_token_count"))
        output = r.get("output_tokens", r.get("output_token_count"))
        if ok and prompt is None:
            raise RequestLogError(path, "missing (required)", row=pos, field="prompt_tokens")
        if ok and output is None:
            raise RequestLogError(path, "missing (required)", row=pos, field="output_tokens")
        rid = r.get("request_id") or r.get("id") or f"b{bi}-{pos}"
        err = r.get("error") or r.get("message") or ("" if ok else status)
        records.append(_record(rid, *ts, _int(path, pos, "prompt_tokens", prompt),
                               _int(path, pos, "output_tokens", output),
                               test=f"benchmark{bi}" if n_bench > 1 else None, ok=ok,
                               error=str(err) if not ok else "", row=pos))
    return records, CLOCK_REALTIME, []


#: Kinds of SSE event ``sse_events`` tells apart; only "answer" and "reasoning" carry tokens.
EVENT_KINDS = ("answer", "reasoning", "role", "empty", "usage", "finish", "keep-alive", "done",
               "error", "other")


def classify_event(data: str | None) -> tuple[str, Any]:
    """Classify the data of one server-sent event of an OpenAI-style stream.

    Returns ``(kind, payload)``; kind is one of ``EVENT_KINDS``:

    - "answer": a choice with non-empty ``delta.content`` (chat), ``text`` (completions),
      ``delta.tool_calls`` or Triton's ``text_output``;
    - "reasoning": only ``delta.reasoning_content`` / ``delta.reasoning`` non-empty
      (reasoning models; vLLM and SGLang reasoning parsers);
    - "role": a delta with a role and no content (the first chunk of a chat stream);
    - "usage": ``choices`` empty with a ``usage`` record; "finish": only a ``finish_reason``;
      "empty": a choice whose content is "" or null; "keep-alive": an event without data (an
      SSE comment); "done": ``[DONE]``; "error": an object with ``error`` (an in-band error
      event, payload = its message); "other": data that is not JSON (payload = the text).

    Only "answer" and "reasoning" events carry tokens: every other kind is never a first token
    and never an ITL.
    """
    if data is None:
        return "keep-alive", None
    s = data.strip()
    if s == "[DONE]":
        return "done", None
    try:
        d = json.loads(s)
    except json.JSONDecodeError:
        return "other", s
    if not isinstance(d, dict):
        return "other", d
    if d.get("error") not in (None, "", {}):
        err = d["error"]
        msg = (err.get("message") or err.get("type") or str(err)) if isinstance(err, dict) \
            else str(err)
        return "error", msg
    if "text_output" in d:
        return ("answer" if d.get("text_output") else "empty"), d
    choices = d.get("choices")
    if not isinstance(choices, list) or not choices:
        return ("usage" if isinstance(d.get("usage"), dict) else "empty"), d
    kind = "empty"
    for c in choices:
        if not isinstance(c, dict):
            continue
        delta = c.get("delta") if isinstance(c.get("delta"), dict) else {}
        if delta.get("content") or c.get("text") or delta.get("tool_calls"):
            return "answer", d
        if delta.get("reasoning_content") or delta.get("reasoning"):
            kind = "reasoning"
        elif kind == "empty" and delta.get("role") and not delta.get("content"):
            kind = "role"
        elif kind == "empty" and c.get("finish_reason"):
            kind = "finish"
    return kind, d


def _event_data(block: str) -> str | None:
    """The data of one SSE event block (``data:`` lines joined by newlines), None without."""
    lines = [ln for ln in block.replace("\r\n", "\n").split("\n")]
    data = [ln[5:][1:] if ln[5:].startswith(" ") else ln[5:] for ln in lines
            if ln.startswith("data:")]
    if not data:
        # an unframed JSON object (some tools store the payload without "data:")
        st = block.strip()
        return st if st.startswith("{") or st == "[DONE]" else None
    return "\n".join(data)


def _complete(block: str) -> bool:
    """Whether an unterminated block already holds a whole event (its data parses)."""
    d = _event_data(block)
    if d is None:
        return block.strip().startswith(":")
    if d.strip() == "[DONE]":
        return True
    try:
        json.loads(d)
    except json.JSONDecodeError:
        return False
    return True


def sse_events(reads: list[tuple[int, str]]) -> list[tuple[int, str, Any]]:
    """Split the HTTP reads of one stream into SSE events: ``[(t_ns, kind, payload), ...]``.

    ``reads``: (arrival time ns, text of that read). Events end at a blank line (SSE framing).
    One event split over two reads is one event, at the time of the read that completes it;
    several events merged into one read are several events, all at that read's time. A read
    without the closing blank line still closes an event whose data already parses (tools
    store one event per response without the separator). ``kind`` as in ``classify_event``.
    """
    out: list[tuple[int, str, Any]] = []
    buf = ""
    for t, text in reads:
        buf += text.replace("\r\n", "\n")
        parts = buf.split("\n\n")
        buf = parts.pop()
        for block in parts:
            if block.strip():
                out.append((t, *classify_event(_event_data(block))))
        if buf.strip() and _complete(buf):
            out.append((t, *classify_event(_event_data(buf))))
            buf = ""
    if buf.strip():
        out.append((reads[-1][0], "other", buf.strip()))
    return out


def _genai_request(path: Path, pos: int, r: dict) -> tuple[dict[str, Any], bool]:
    """One genai-perf request (position ``pos`` in the file's request list) as a record, and
    whether it is a successful request without a usage record."""
    ts0 = _int(path, pos, "timestamp", r.get("timestamp"), allow_none=False)
    stamps = [_int(path, pos, "response_timestamps", st, allow_none=False)
              for st in (r.get("response_timestamps") or [])]
    outs = r.get("response_outputs")
    err = str(r.get("error") or "")
    usage = None
    if outs is None:
        # no payloads saved: every response is taken as a token chunk (cannot check)
        events = [(st, "answer", None) for st in stamps]
    else:
        reads = []
        for st, out in zip(stamps, outs, strict=False):
            raw = out.get("response") if isinstance(out, dict) else out
            if isinstance(out, dict) and "response" not in out:
                # a non-SSE backend's output object (Triton: text_output): one event
                raw = {"text_output": out.get("text_output", out.get("output", "?"))}
            if isinstance(raw, dict):
                raw = "data: " + json.dumps(raw) + "\n\n"
            reads.append((st, "" if raw is None else str(raw)))
        events = sse_events(reads)
    tok = [(t, k) for t, k, _ in events if k in ("answer", "reasoning")]
    for _, k, pl in events:
        if k == "usage" or (isinstance(pl, dict) and isinstance(pl.get("usage"), dict)):
            usage = pl["usage"]
        if k == "error" and not err:
            err = f"in-band error event: {pl}"
    ok = not err and bool(tok)
    prompt = _int(path, pos, "usage", usage.get("prompt_tokens")) if usage else None
    output = _int(path, pos, "usage", usage.get("completion_tokens")) if usage else None
    src = ("usage record" if output is not None else
           f"unknown (no usage record; {len(tok)} token-bearing chunks, a chunk may "
           "carry several tokens)")
    t_r = next((t for t, k in tok if k == "reasoning"), None)
    t_a = next((t for t, k in tok if k == "answer"), None)
    chunks = [t for t, _ in tok]
    rec = _record(
        r.get("request_id", pos), ts0, chunks[0] if tok and ok else None,
        chunks[-1] if tok and ok else None, prompt, output, ok=ok,
        error=err if err else ("no token in the response" if not ok else ""),
        chunks=(chunks or None) if ok else None, row=pos, token_source=src,
        t_reasoning=t_r if ok and t_r is not None else None,
        t_answer=t_a if ok and t_r is not None else None)
    return rec, ok and output is None


def _genai_perf_result(records: list, exp_of: list[int], n_exps: int, no_tokens: int):
    if n_exps > 1:
        for rec, ei in zip(records, exp_of, strict=True):
            rec["test"] = f"experiment{ei}"
    notes = []
    if no_tokens:
        notes.append(f"{no_tokens} request(s) have no usage record: prompt and output token "
                     "counts unknown (decode speed and bytes per prompt token left empty); run "
                     "genai-perf with stream usage enabled")
    return records, CLOCK_REALTIME, notes


def _read_genai_perf(path: Path, data: dict):
    exps = data.get("experiments")
    if not isinstance(exps, list) or not exps:
        raise RequestLogError(path, "has no experiments[] list", field="experiments")
    records, exp_of, no_tokens = [], [], 0
    pos = 0
    for ei, e in enumerate(exps):
        for r in (e.get("requests") or []):
            pos += 1
            rec, no_tok = _genai_request(path, pos, r)
            records.append(rec)
            exp_of.append(ei)
            no_tokens += no_tok
    return _genai_perf_result(records, exp_of, len(exps), no_tokens)


#: A JSON text above this many characters is walked request by request where its layout
#: allows (genai-perf): one request's objects at a time instead of the whole file's.
LAZY_JSON_CHARS = 4_000_000
_WS_RE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _NotLazy(Exception):
    """The text is not of the shape the request-by-request walk expects: read it whole."""


def _ws(text: str, pos: int) -> int:
    return _WS_RE.match(text, pos).end()


def _walk(text: str, pos: int, open_: str, on_item) -> int:
    """Walk the JSON object ('{') or array ('[') at ``text[pos]``: ``on_item(key, value_pos)``
    (key None in an array) returns the end of each value. Returns the end of the container.
    Raises ``_NotLazy`` on anything unexpected (the caller then reads the text whole)."""
    close = "}" if open_ == "{" else "]"
    pos = _ws(text, pos)
    if text[pos:pos + 1] != open_:
        raise _NotLazy
    pos = _ws(text, pos + 1)
    if text[pos:pos + 1] == close:
        return pos + 1
    while True:
        key = None
        if open_ == "{":
            if text[pos:pos + 1] != '"':
                raise _NotLazy
            try:
                key, pos = json.decoder.scanstring(text, pos + 1)
            except json.JSONDecodeError as exc:
                raise _NotLazy from exc
            pos = _ws(text, pos)
            if text[pos:pos + 1] != ":":
                raise _NotLazy
            pos = _ws(text, pos + 1)
        pos = _ws(text, on_item(key, pos))
        c = text[pos:pos + 1]
        if c == ",":
            pos = _ws(text, pos + 1)
        elif c == close:
            return pos + 1
        else:
            raise _NotLazy


def _skip(text: str, pos: int, depth: int = 0) -> int:
    """The end of the JSON value at ``text[pos]``; containers down to ``depth`` levels are
    walked, so only values below them are ever built (one at a time)."""
    c = text[pos:pos + 1]
    if depth > 0 and c in "{[" and c:
        return _walk(text, pos, c, lambda _k, p: _skip(text, p, depth - 1))
    try:
        return _DECODER.raw_decode(text, pos)[1]
    except json.JSONDecodeError as exc:
        raise _NotLazy from exc


#: Top-level keys of the result files read whole (vLLM / SGLang, guidellm): the walk stops there.
_WHOLE_KEYS = frozenset({"ttfts", "details", "mean_ttft_ms", "benchmarks"})


def _top_keys(s: str) -> list[str] | None:
    """The keys of the JSON object ``s`` (``experiments`` walked down to one request at a time,
    other values decoded one by one), or None when ``s`` is not one well-formed object or has
    a key of a format read whole (``_WHOLE_KEYS``: the walk stops at once)."""
    keys: list[str] = []

    def member(k, p):
        if k in _WHOLE_KEYS:
            raise _NotLazy
        keys.append(k)
        return _skip(s, p, 3 if k == "experiments" else 0)

    try:
        end = _walk(s, 0, "{", member)
    except (_NotLazy, RecursionError):
        return None
    return keys if _ws(s, end) == len(s) else None


def _read_genai_perf_text(path: Path, text: str):
    """genai-perf from its text: a large file is walked request by request (the same records,
    notes and errors as reading it whole, in a fraction of the memory); anything unexpected in
    its layout is read whole (``_read_genai_perf``)."""
    if len(text) > LAZY_JSON_CHARS:
        try:
            return _read_genai_perf_lazy(path, text)
        except _NotLazy:
            pass
    return _read_genai_perf(path, _load_json(path, text, dict))


def _read_genai_perf_lazy(path: Path, text: str):
    records: list = []
    exp_of: list[int] = []
    state = {"pos": 0, "no_tokens": 0, "exps": 0, "error": None, "seen": False}

    def request(_k, p):
        c = text[p:p + 1]
        if c != "{":
            raise _NotLazy
        try:
            r, end = _DECODER.raw_decode(text, p)
        except json.JSONDecodeError as exc:
            raise _NotLazy from exc
        state["pos"] += 1
        if state["error"] is None:  # after a bad row: only check the rest is well-formed
            try:
                rec, no_tok = _genai_request(path, state["pos"], r)
            except RequestLogError as exc:
                state["error"] = exc
            else:
                records.append(rec)
                exp_of.append(state["exps"] - 1)
                state["no_tokens"] += no_tok
        return end

    def exp_member(k, p):
        if k != "requests":
            return _skip(text, p)
        if text[p:p + 1] != "[":
            raise _NotLazy  # null or another type: as the whole-file reader has it
        return _walk(text, p, "[", request)

    def experiment(_k, p):
        state["exps"] += 1
        keys: list[str] = []

        def member(k, q):
            if k in keys:
                raise _NotLazy  # a repeated key: json keeps the last one
            keys.append(k)
            return exp_member(k, q)

        return _walk(text, p, "{", member)

    def top(k, p):
        if k != "experiments":
            return _skip(text, p)
        if state["seen"] or text[p:p + 1] != "[":
            raise _NotLazy
        state["seen"] = True
        return _walk(text, p, "[", experiment)

    start = _ws(text, 0)
    end = _walk(text, start, "{", top)
    if _ws(text, end) != len(text) or not state["exps"]:
        raise _NotLazy
    if state["error"] is not None:
        raise state["error"]
    return _genai_perf_result(records, exp_of, state["exps"], state["no_tokens"])


_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "sec": 1_000_000_000}


def _metric_ns(path, row, metrics: dict, name: str):
    m = metrics.get(name)
    if m is None:
        return None
    if not isinstance(m, dict) or "value" not in m:
        raise RequestLogError(path, "expected {value, unit}", row=row, field=f"metrics.{name}")
    unit = str(m.get("unit", "ms"))
    if unit not in _UNIT_NS:
        raise RequestLogError(path, f"unknown time unit {unit!r}", row=row,
                              field=f"metrics.{name}.unit")
    v = m["value"]
    if isinstance(v, list):
        return [_num(path, row, f"metrics.{name}", x) * _UNIT_NS[unit] for x in v]
    return _num(path, row, f"metrics.{name}", v) * _UNIT_NS[unit]


def _read_aiperf(path: Path, text: str):
    records = []
    for line, d in _jsonl_objects(path, text):
        md = d.get("metadata")
        if not isinstance(md, dict):
            raise RequestLogError(path, "missing (required)", row=line, field="metadata")
        metrics = d.get("metrics") or {}
        err = d.get("error")
        ok = not err and not md.get("was_cancelled")
        t0 = _int(path, line, "metadata.request_start_ns", md.get("request_start_ns"),
                  allow_none=False)
        rid = md.get("x_request_id") or md.get("session_num") or line

        def tok(*names, line=line, metrics=metrics):
            for nm in names:
                m = metrics.get(nm)
                if isinstance(m, dict) and m.get("value") is not None:
                    return _int(path, line, f"metrics.{nm}", m["value"])
            return None

        prompt = tok("input_sequence_length", "error_isl")
        if not ok:
            msg = err.get("message") or err.get("type") if isinstance(err, dict) else str(err)
            records.append(_record(rid, t0, None, None, prompt, None, ok=False,
                                   error=msg or "cancelled", row=line))
            continue
        ttft = _metric_ns(path, line, metrics, "time_to_first_token")
        if ttft is None:
            raise RequestLogError(path, "missing (required; run AIPerf with --streaming)",
                                  row=line, field="metrics.time_to_first_token")
        t_first = t0 + int(round(ttft))
        icl = _metric_ns(path, line, metrics, "inter_chunk_latency")
        chunks = None
        if isinstance(icl, list):
            chunks = [t_first] + [t_first + int(round(c)) for c in np.cumsum(icl)]
        if chunks is not None and len(chunks) > 1:
            t_last = chunks[-1]
        else:
            t_last = _int(path, line, "metadata.request_end_ns", md.get("request_end_ns"),
                          allow_none=False)
        output = tok("output_sequence_length", "output_token_count")
        if output is None:
            raise RequestLogError(path, "missing (required)", row=line,
                                  field="metrics.output_sequence_length")
        # AIPerf's TTFO = start -> first non-reasoning output token (TimeToFirstOutputTokenMetric)
        ttfo = _metric_ns(path, line, metrics, "time_to_first_output_token")
        n_reason = tok("reasoning_token_count")
        t_r = t_a = None
        if ttfo is not None and (n_reason or int(round(ttfo)) > t_first - t0):
            t_r, t_a = t_first, t0 + int(round(ttfo))
        elif n_reason:
            t_r = t_first
        records.append(_record(rid, t0, t_first, t_last, prompt, output, chunks=chunks, row=line,
                               t_reasoning=t_r, t_answer=t_a))
    return records, CLOCK_REALTIME, []


def _read_inference_perf(path: Path, data: list):
    records = []
    for pos, r in enumerate(data, start=1):
        if not isinstance(r, dict):
            raise RequestLogError(path, "expected a request object", row=pos)
        err = r.get("error")
        ok = not err
        t0 = _num(path, pos, "start_time", r.get("start_time"))
        info = r.get("info") or {}
        rm = info.get("response_metrics") or {}
        chunk_s = rm.get("chunk_times") or rm.get("output_token_times") or \
            info.get("output_token_times")
        # inference-perf since its issue 559: content chunks in chunk_times, reasoning-only
        # chunks in reasoning_chunk_times (TTFT from the first of either)
        reason_s = rm.get("reasoning_chunk_times") or []
        usage = rm.get("server_usage") or info.get("server_usage") or {}
        srv = usage.get("completion_tokens") if isinstance(usage, dict) else None
        prompt = info.get("input_tokens", _get(info, "request_metrics.text.input_tokens"))
        output = rm.get("output_tokens", info.get("output_tokens"))
        if not ok:
            msg = (err.get("error_msg") or err.get("error_type")) if isinstance(err, dict) \
                else str(err)
            records.append(_record(pos, _s_to_ns(t0), None, None,
                                   _int(path, pos, "info.input_tokens", prompt), None, ok=False,
                                   error=msg or "error", row=pos))
            continue
        if not chunk_s and not reason_s:
            if "chunk_times" in rm or "response_chunks" in rm or srv:
                why = ("streamed, but no chunk carried a token inference-perf counted "
                       "(chunk_times empty, output_tokens "
                       f"{output if output is not None else 'missing'}"
                       + (f"; the server's usage says {srv} completion tokens, e.g. reasoning-"
                          "only output" if srv else "") + "): no first token to place")
            else:
                why = ("no chunk_times: per-chunk times exist only for streamed requests "
                       "(enable streaming in inference-perf)")
            records.append(_record(pos, _s_to_ns(t0), None, None,
                                   _int(path, pos, "info.input_tokens", prompt),
                                   _int(path, pos, "info.response_metrics.output_tokens",
                                        output), ok=False, error=why, row=pos,
                                   token_source="tool field output_tokens"))
            continue
        content = [_s_to_ns(_num(path, pos, "info.response_metrics.chunk_times", c))
                   for c in (chunk_s or [])]
        reasoning = [_s_to_ns(_num(path, pos, "info.response_metrics.reasoning_chunk_times", c))
                     for c in reason_s]
        chunks = sorted(content + reasoning)
        src = "tool field output_tokens"
        if reasoning and srv is not None:
            # inference-perf counts content tokens only; the server's count includes reasoning
            output, src = srv, "server usage completion_tokens (reasoning included)"
        if output is None:
            raise RequestLogError(path, "missing (required)", row=pos,
                                  field="info.response_metrics.output_tokens")
        records.append(_record(pos, _s_to_ns(t0), chunks[0], chunks[-1],
                               _int(path, pos, "info.input_tokens", prompt),
                               _int(path, pos, "info.response_metrics.output_tokens", output),
                               chunks=chunks, row=pos, token_source=src,
                               t_reasoning=reasoning[0] if reasoning else None,
                               t_answer=content[0] if reasoning and content else None))
    return records, CLOCK_MONOTONIC, []


def _read_llmperf(path: Path, data: list):
    """ray-project/llmperf ``*_individual_responses.json``: a list of flat per-request dicts.

    Fields (llmperf ``common_metrics.py``, ``openai_chat_completions_client.py``): ``ttft_s``
    (first chunk with non-empty ``delta.content`` - start, ``time.monotonic``),
    ``end_to_end_latency_s`` (end of the stream, after ``[DONE]``), ``inter_token_latency_s`` =
    sum of the gaps between content chunks *including the TTFT* / ``number_output_tokens``
    (llmperf's ITL includes the TTFT, so ``start + inter_token_latency_s x number_output_tokens``
    is the last content chunk), ``number_output_tokens`` (the generated text retokenized by
    ``token_benchmark_ray.py``), ``number_input_tokens``; failed where ``error_code`` is set.
    No send times: one request is placed at t=0; several are placed as sent together at t=0
    (an estimate, noted per request: right when every request was in flight at once).
    """
    records, notes = [], []
    n = sum(1 for r in data if isinstance(r, dict))
    for pos, r in enumerate(data, start=1):
        if not isinstance(r, dict):
            raise RequestLogError(path, "expected a request object", row=pos)
        code = r.get("error_code")
        prompt = _int(path, pos, "number_input_tokens", r.get("number_input_tokens"))
        src = "tool field number_output_tokens (llmperf retokenizes the generated text)"
        if code is not None:
            records.append(_record(pos, 0, None, None, prompt, None, ok=False,
                                   error=f"error_code {code}: {r.get('error_msg') or ''}".strip(),
                                   row=pos, token_source=src))
            continue
        ttft = _num(path, pos, "ttft_s", r.get("ttft_s"))
        e2e = _num(path, pos, "end_to_end_latency_s", r.get("end_to_end_latency_s"))
        output = _int(path, pos, "number_output_tokens", r.get("number_output_tokens"),
                      allow_none=False)
        itl = _num(path, pos, "inter_token_latency_s", r.get("inter_token_latency_s"),
                   allow_none=True)
        t_first = _s_to_ns(ttft)
        if itl is not None and output:
            # llmperf's ITL = (sum of all gaps incl. the TTFT) / tokens: the last content chunk
            t_last = _s_to_ns(itl * output)
        else:
            t_last = _s_to_ns(e2e)  # the end of the stream (after [DONE])
        if t_last < t_first:
            t_last = _s_to_ns(e2e)
        check = ("send time unknown (llmperf saves none): placed at t=0 with the other "
                 f"{n - 1} request(s)" if n > 1 else "")
        if ttft == 0 and not output:
            records.append(_record(pos, 0, None, None, prompt, output, ok=False,
                                   error="failed: ttft_s 0 and no output tokens", row=pos,
                                   token_source=src))
            continue
        records.append(_record(pos, 0, t_first, t_last, prompt, output, row=pos,
                               token_source=src, check=check))
    notes.append("llmperf: last token = start + inter_token_latency_s x number_output_tokens "
                 "(llmperf's ITL includes the TTFT); no chunk times saved")
    if n > 1:
        notes.append(f"ESTIMATE: llmperf saves no send times: all {n} requests placed as sent "
                     "together at t=0 (right only when --num-concurrent-requests >= the number "
                     "of requests; see the run's *_summary.json)")
    return records, CLOCK_RELATIVE, notes


# ------------------------------------------------------------------------------------------------
# Detection and the public reader
# ------------------------------------------------------------------------------------------------


def detect_format(path: str | os.PathLike, text: str | None = None) -> str:
    """Return the format name of a request log by looking at its content (not only its name).

    Raises ``RequestLogError`` ("unknown format") when no known shape matches, naming the file
    and the top-level keys it saw; an empty file is reported as such.
    """
    p = Path(path)
    if text is None:
        text = _read_text(p)
    s = text.lstrip()
    if not s:
        raise RequestLogError(p, "is empty")
    whole: Any = None
    if len(s) > LAZY_JSON_CHARS and s.startswith("{"):
        # a large object: its keys alone, without building the whole file (genai-perf)
        keys = _top_keys(s)
        if keys is not None and "experiments" in keys:
            return "genai-perf"
    try:
        whole = json.loads(s)
    except json.JSONDecodeError:
        whole = None
    if whole is None and s.startswith("{") and _starts_with_run(s):
        try:
            seq = _json_sequence(p, s)
        except RequestLogError:
            seq = []
        if len(seq) > 1 and isinstance(seq[0][1], dict) and (
                "ttfts" in _details(seq[0][1]) or _is_bench_summary(seq[0][1])):
            whole = seq[0][1]  # several runs appended: vLLM --append-result / SGLang
    if isinstance(whole, dict):
        run_fmt = _run_format(p, whole)
        if run_fmt:
            return run_fmt
        if "benchmarks" in whole:
            return "guidellm"
        if "experiments" in whole:
            return "genai-perf"
        if "metadata" in whole and "metrics" in whole:
            return "aiperf"
        if "t_send" in whole or "t_send_ns" in whole:
            return "native"
        raise RequestLogError(p, "unknown format: a JSON object with keys "
                                 f"{', '.join(list(whole)[:8]) or '(none)'}; expected one of "
                                 f"{', '.join(FORMATS)} (or give --format)")
    if isinstance(whole, list):
        first = next((x for x in whole if isinstance(x, dict)), None)
        if first is None:
            raise RequestLogError(p, "holds no requests" if not whole else
                                  "unknown format: a JSON list without request objects; "
                                  "expected a list of request objects (native or "
                                  "inference-perf; or give --format)")
        if "t_send" in first or "t_send_ns" in first:
            return "native"
        if "start_time" in first and "info" in first:
            return "inference-perf"
        if "ttft_s" in first and "end_to_end_latency_s" in first:
            return "llmperf"
        raise RequestLogError(p, "unknown format: a JSON list of objects with keys "
                                 f"{', '.join(list(first)[:8])}; expected one of "
                                 f"{', '.join(FORMATS)} (or give --format)")
    if s.startswith("{"):  # JSONL: look at the first line
        line = s.splitlines()[0]
        try:
            d = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RequestLogError(p, f"malformed JSON line ({exc.msg}); cannot detect the format",
                                  row=1 + text[: len(text) - len(s)].count("\n")) from exc
        if isinstance(d, dict):
            if "metadata" in d and "metrics" in d:
                return "aiperf"
            if "t_send" in d or "t_send_ns" in d:
                return "native"
            run_fmt = _run_format(p, d)
            if run_fmt:
                return run_fmt
            raise RequestLogError(p, "unknown format: JSON lines with keys "
                                     f"{', '.join(list(d)[:8])}; expected one of "
                                     f"{', '.join(FORMATS)} (or give --format)")
    header = s.splitlines()[0]
    cols = [c.strip() for c in header.split(",")]
    if "t_send" in cols or "t_send_ns" in cols:
        return "native"
    raise RequestLogError(p, f"unknown format (first line {header[:80]!r}); expected one of "
                             f"{', '.join(FORMATS)} (or give --format)")


def _starts_with_run(s: str) -> bool:
    """True when the first JSON value of ``s`` is a vLLM / SGLang result object (a file of
    appended runs); only then is the whole file read as a JSON sequence to detect its format (a
    JSONL request log of many rows is not parsed twice)."""
    try:
        first, _ = json.JSONDecoder().raw_decode(s)
    except json.JSONDecodeError:
        return False
    return isinstance(first, dict) and ("ttfts" in _details(first) or _is_bench_summary(first))


def _run_format(p: Path, d: dict) -> str | None:
    """"vllm" / "sglang" for a result object with per-request arrays; raises for one without
    (saved without --save-detailed / --output-details); None for anything else."""
    tool = "sglang" if _is_sglang(d) else "vllm"
    if "ttfts" in _details(d):
        return tool
    if _is_bench_summary(d):
        raise RequestLogError(p, _no_details_message(d, tool))
    return None


def _read_text(p: Path) -> str:
    try:
        data = p.read_bytes()
    except FileNotFoundError as exc:
        raise RequestLogError(p, "no such file") from exc
    except OSError as exc:
        raise RequestLogError(p, f"cannot read ({exc.strerror or exc})") from exc
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


_READERS: dict[str, Callable[[Path, str], tuple]] = {
    "native": _read_native,
    "vllm": lambda p, t: _read_runs(p, t, "vllm"),
    "sglang": lambda p, t: _read_runs(p, t, "sglang"),
    "llmperf": lambda p, t: _read_llmperf(p, _load_json(p, t, list)),
    "guidellm": lambda p, t: _read_guidellm(p, _load_json(p, t, dict)),
    "genai-perf": _read_genai_perf_text,
    "aiperf": _read_aiperf,
    "inference-perf": lambda p, t: _read_inference_perf(p, _load_json(p, t, list)),
}


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
        fmt = detect_format(p, text)
    else:
        fmt = format.lower().replace("_", "-")
        if fmt not in _READERS:
            raise RequestLogError(p, f"unknown format {format!r}; expected one of "
                                     f"{', '.join(FORMATS)}")
    try:
        res = _READERS[fmt](p, text)
    except RequestLogError as exc:
        if format is None:
            raise
        raise _suggest_format(p, text, fmt, exc) from exc
    records, clock, notes = res[:3]
    runs = res[3] if len(res) > 3 else [{"run": 1, "label": "run 1", "meta": {}}]
    df = _validate(p, _frame(p, records))
    if fmt in _TOKEN_SOURCE:
        df["token_source"] = [t or _TOKEN_SOURCE[fmt] for t in df["token_source"]]
    if run is not None:
        if not 1 <= int(run) <= len(runs):
            raise RequestLogError(p, f"holds {len(runs)} run(s); run {run} does not exist "
                                     f"(expected 1..{len(runs)})", field="run")
        df = df[df["run"] == int(run)].reset_index(drop=True)
        runs = [r for r in runs if r["run"] == int(run)]
        notes = [n for n in notes if not n.startswith(f"{len(res[3])} runs in one file")] \
            if len(res) > 3 else notes
        notes.insert(0, f"{runs[0]['label']} chosen")
    log = RequestLog(path=p, format=fmt, clock=clock, requests=df, notes=list(notes),
                     runs=runs)
    if log.n_failed:
        bad = log.requests[~log.requests["ok"]]
        shown = "; ".join(f"row {r.row}: {short_reason(r.error)}"
                          for r in bad.head(3).itertuples())
        log.notes.append(f"{log.n_failed} failed request(s) kept out of the metrics ({shown}"
                         f"{'; ...' if len(bad) > 3 else ''})")
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


def _suggest_format(p: Path, text: str, fmt: str, exc: RequestLogError) -> RequestLogError:
    """``exc`` (reading ``p`` as the given ``fmt`` failed) with the format the content looks
    like when that is another one (``detect_format``), e.g. a vLLM result read as native."""
    try:
        seen = detect_format(p, text)
    except RequestLogError:
        return exc
    if seen == fmt:
        return exc
    return RequestLogError(p, f"the file looks like format {seen!r}, not {fmt!r}: give --format "
                              f"{seen} (or no --format, to detect it); read as {fmt!r}: "
                              f"{exc.message}", row=exc.row, field=exc.field)


def short_reason(text: str, n: int = 200) -> str:
    """One line of at most ``n`` characters (a tool's error can be a whole traceback)."""
    one = " ".join(str(text).split())
    return one if len(one) <= n else one[: n - 3] + "..."


#: Where the output token count comes from, per format (readers that know better set it per row).
_TOKEN_SOURCE = {"native": "log field output_tokens", "guidellm": "tool field output_tokens",
                 "aiperf": "tool field output_sequence_length",
                 "inference-perf": "tool field output_tokens"}

#: Requests whose stored values fail a consistency check named one by one in the notes.
MAX_CHECK_NOTES = 5


def apply_fixes(log: RequestLog) -> RequestLog:
    """Return ``log`` with the corrected values of the requests whose stored values failed a
    consistency check (``check_itls``) used in place of the stored ones.

    Only requests with a derivable correction (column ``fix``) change: their ``t_first_ns``,
    ``t_last_ns`` and ``chunk_times`` become the corrected ones and ``flag`` says so
    ("corrected: <kind>"). A note counts them. Works before or after ``align``.
    """
    df = log.requests.copy()
    n = 0
    for idx, fx in df["fix"].items():
        if not fx or not df.at[idx, "ok"]:
            continue
        df.at[idx, "t_first_ns"] = fx["t_first_ns"]
        df.at[idx, "t_last_ns"] = fx["t_last_ns"]
        df.at[idx, "chunk_times"] = fx["chunk_times"]
        df.at[idx, "flag"] = _join_flag(df.at[idx, "flag"], f"corrected: {fx['kind']}")
        n += 1
    notes = list(log.notes)
    if n:
        notes.append(f"{n} request(s) use CORRECTED values (stored values failed a consistency "
                     "check; see column 'check'), not the values the tool stored")
    return replace(log, requests=df, notes=notes)


def _join_flag(old: str, new: str) -> str:
    return f"{old}; {new}" if old else new


# ------------------------------------------------------------------------------------------------
# Clock alignment
# ------------------------------------------------------------------------------------------------


def _shift(df: pd.DataFrame, offset_ns) -> pd.DataFrame:
    """Add ``offset_ns`` (scalar, or a function of int64 arrays) to every time column."""
    out = df.copy()
    fn = offset_ns if callable(offset_ns) else (lambda t: t + int(offset_ns))
    for c in _TIME_COLUMNS:
        col = out[c]
        mask = col.notna().to_numpy()
        vals = col.to_numpy(dtype="int64", na_value=0)
        new = np.asarray(fn(vals[mask]), dtype=np.int64)
        arr = pd.array([None] * len(col), dtype="Int64")
        arr[mask] = new
        out[c] = arr
    def move(ch):
        return None if ch is None else [int(x) for x in
                                        np.asarray(fn(np.asarray(ch, dtype=np.int64)))]

    out["chunk_times"] = [move(ch) for ch in out["chunk_times"]]
    out["fix"] = [None if not fx else
                  {**fx, "t_first_ns": move([fx["t_first_ns"]])[0],
                   "t_last_ns": move([fx["t_last_ns"]])[0],
                   "chunk_times": move(fx["chunk_times"])} for fx in out["fix"]]
    return out


def first_burst_start_ns(capture, *, threshold_gbps: float | None = None,
                         width_ns: int = 1_000_000, after_ns: int | None = None
                         ) -> tuple[int, float]:
    """Return (start of the first prefill burst in ns, threshold used in Gb/s) of a capture.

    The summed tx rate of all data series is re-binned to ``width_ns`` windows; the first window at
    or above ``threshold_gbps`` (default: 25 % of the capture's highest window, at least 5 Gb/s,
    well above decode traffic of a few Gb/s) starts the burst; with ``after_ns`` the first such
    window starting at or after it (the next run of a file holding several). Raises
    ``ValueError`` when nothing reaches the threshold.
    """
    from rdmascope.analysis import series

    if not hasattr(capture, "readings"):  # a stream.CaptureInfo: one pass over the segments
        return _first_burst_streamed(capture, threshold_gbps, width_ns, after_ns)
    iv = series.byte_intervals(capture)
    iv = iv[iv["direction"] == "tx"]
    if not len(iv):
        raise ValueError(f"{capture.path}: no tx data counters to find a burst in")
    binned = series.rebin(iv, width_ns, origin_ns=int(capture.t_start_ns))
    gbps = series.to_gbps(binned, width_ns).sum(axis=1)
    if threshold_gbps is None:
        threshold_gbps = max(5.0, 0.25 * float(gbps.max()))
    hit = gbps.index[gbps.to_numpy() >= threshold_gbps]
    if after_ns is not None:
        hit = hit[hit >= after_ns]
    if not len(hit):
        after = "" if after_ns is None else f" after {after_ns / 1e9:.6f} s"
        raise ValueError(f"{capture.path}: no {width_ns / 1e6:g} ms window{after} reaches "
                         f"{threshold_gbps:g} Gb/s; cannot anchor the requests to a burst")
    return int(hit[0]), float(threshold_gbps)


def _first_burst_streamed(capture, threshold_gbps, width_ns, after_ns) -> tuple[int, float]:
    """``first_burst_start_ns`` segment by segment: the tx windows stream by, keeping the
    capture's highest window and the windows (from ``after_ns`` on) that beat every earlier
    one; the first of those reaching the threshold is the first window that does."""
    from rdmascope.analysis.series import to_gbps
    from rdmascope.analysis.stream import WindowGrid, iter_windows

    cdf = capture.counters
    ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")
                                     & (cdf["direction"] == "tx")]]
    if not ids:
        raise ValueError(f"{capture.path}: no tx data counters to find a burst in")
    top = -np.inf
    records: list[tuple[int, float]] = []  # prefix maxima from after_ns on: (start, Gb/s)
    first_hit = None
    try:
        for _, b, _q in iter_windows(capture, [WindowGrid(int(width_ns),
                                                          int(capture.t_start_ns))],
                                     counters=ids):
            g = to_gbps(b, width_ns).sum(axis=1)
            v = g.to_numpy(np.float64)
            t = g.index.to_numpy(np.int64)
            if len(v) and np.isfinite(v).any():
                top = max(top, float(np.nanmax(v)))
            if after_ns is not None:
                keep = t >= after_ns
                t, v = t[keep], v[keep]
            if threshold_gbps is not None:
                if first_hit is None:
                    hit = np.flatnonzero(v >= threshold_gbps)
                    if len(hit):
                        first_hit = int(t[hit[0]])
                continue
            best = records[-1][1] if records else -np.inf
            run = np.fmax.accumulate(np.concatenate([[best], v]))[1:]
            new = np.flatnonzero(v > np.concatenate([[best], run[:-1]]))
            records.extend((int(t[i]), float(v[i])) for i in new)
    except ValueError as exc:
        if "no intervals" not in str(exc):
            raise
        raise ValueError(f"{capture.path}: no tx data counters to find a burst in") from exc
    if threshold_gbps is None:
        threshold_gbps = max(5.0, 0.25 * float(top))
        first_hit = next((t for t, v in records if v >= threshold_gbps), None)
    if first_hit is None:
        after = "" if after_ns is None else f" after {after_ns / 1e9:.6f} s"
        raise ValueError(f"{capture.path}: no {width_ns / 1e6:g} ms window{after} reaches "
                         f"{threshold_gbps:g} Gb/s; cannot anchor the requests to a burst")
    return first_hit, float(threshold_gbps)


def _offsets_per_run(log: RequestLog, offset_s) -> list[float | None]:
    runs = [r["run"] for r in log.runs]
    if offset_s is None:
        return [None] * len(runs)
    if isinstance(offset_s, (int, float)):
        return [float(offset_s)] * len(runs)
    offs = [float(x) for x in offset_s]
    if len(offs) == 1:
        return offs * len(runs)
    if len(offs) != len(runs):
        raise RequestLogError(log.path, f"holds {len(runs)} run(s) but {len(offs)} offsets were "
                                        "given; give one offset (for every run) or one per run",
                              field="offset")
    return offs


def _align_one(df: pd.DataFrame, clock: str, capture, offset_s, *, path, label: str,
               anchor_threshold_gbps, after_ns) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Place the requests of one run on the capture's clock (see ``align``)."""
    if offset_s is not None:
        off = _s_to_ns(offset_s)
        return _shift(df, off), {"method": "offset", "offset_ns": off, "uncertainty_ns": 0,
                                 "note": f"{label}times shifted by the given offset "
                                         f"{offset_s:+.6f} s"}
    if clock == CLOCK_MONOTONIC:
        return df.copy(), {"method": "monotonic", "offset_ns": 0, "uncertainty_ns": 0,
                           "note": f"{label}log and capture share CLOCK_MONOTONIC"}
    if clock == CLOCK_REALTIME:
        from rdmascope.analysis.load import realtime_to_monotonic
        pairs = np.asarray(capture.clock_pairs, dtype=np.int64).reshape(-1, 2)
        if not len(pairs):
            start = capture.meta.get("start") or {}
            if start.get("realtime_ns") is None:
                raise RequestLogError(path, "is on CLOCK_REALTIME but the capture "
                                            f"{capture.path} has no clock pairs to convert it")
            pairs = np.array([[start["realtime_ns"], start["monotonic_ns"]]], dtype=np.int64)
        offs = pairs[:, 0] - pairs[:, 1]
        return (_shift(df, lambda t: realtime_to_monotonic(capture, t)),
                {"method": "clock_pairs", "offset_ns": int(np.median(offs)),
                 "uncertainty_ns": int((offs.max() - offs.min()) // 2),
                 "note": f"{label}CLOCK_REALTIME converted through {len(pairs)} clock pair(s)"})
    try:
        t_burst, thr = first_burst_start_ns(capture, threshold_gbps=anchor_threshold_gbps,
                                            after_ns=after_ns)
    except ValueError as exc:
        raise RequestLogError(path, f"{label}has only relative times and cannot be anchored: "
                                    f"{exc}; give --offset") from exc
    sends = df.loc[df["ok"], "t_send_ns"]
    t0 = int(sends.min()) if len(sends) else 0
    off = t_burst - t0
    after = "" if after_ns is None else " after the previous run"
    return _shift(df, off), {
        "method": "anchor", "offset_ns": off, "uncertainty_ns": 1_000_000,
        "note": (f"{label}ESTIMATE: first send anchored to the first prefill burst{after} "
                 f"(first 1 ms window >= {thr:.1f} Gb/s); +-1 ms, and the true send may be "
                 "earlier by the engine's time before its first all-reduce; give --offset to "
                 "override")}


def align(log: RequestLog, capture, offset_s: float | list[float] | None = None, *,
          anchor_threshold_gbps: float | None = None) -> RequestLog:
    """Place a request log on the capture's CLOCK_MONOTONIC and check it against the capture.

    - CLOCK_MONOTONIC logs align directly (same host, same clock; uncertainty 0).
    - CLOCK_REALTIME logs go through the capture's clock pairs (``manifest["clock_pairs"]``,
      [realtime_ns, monotonic_ns]; offset interpolated between pairs, held beyond them). The
      uncertainty reported is half the spread of the pairs' offsets (NTP slewing during the run).
    - ``offset_s`` (any clock) is added to the log's times instead; for relative logs it places
      time 0 of the log at ``offset_s`` seconds on the capture's monotonic clock. A list gives
      one offset per run of a file holding several (``RequestLog.runs``); one value applies to
      every run.
    - Relative logs without an offset are anchored: the earliest send is put at the start of the
      first prefill burst (``first_burst_start_ns``); each further run at the first burst after
      the previous run's last token. This is an *estimate*: the true send precedes the first
      all-reduce by the engine's queueing, tokenisation and first-layer compute, which the trace
      cannot see; the reported uncertainty is one 1 ms window plus that unknown lead.

    Each run is placed on its own (``alignment["runs"]``: one dict per run). Then every
    successful request is checked against the capture's span [t_start_ns, t_end_ns]: one wholly
    outside becomes failed ("outside the capture"); one partly outside stays, flagged
    (column ``flag``: "runs past the capture end" / "starts before the capture start"), and is
    attributed over what was captured. Only when no request lies in the capture is the log
    refused (``RequestLogError`` naming the first request's row and field; times that look like
    Unix epoch seconds on a log read as CLOCK_MONOTONIC get a hint to declare CLOCK_REALTIME).

    Returns a new ``RequestLog`` with ``clock = CLOCK_MONOTONIC`` and ``alignment`` filled in
    (``method``, ``offset_ns``, ``uncertainty_ns``, ``note``; of the first run when several,
    the largest uncertainty). Raises ``RequestLogError`` as above, when a relative log cannot be
    anchored, or when the number of offsets matches neither 1 nor the number of runs.
    """
    if log.alignment is not None:
        return log
    df = log.requests
    offs = _offsets_per_run(log, offset_s)
    parts, als, after = [], [], None
    several = len(log.runs) > 1
    for r, off in zip(log.runs, offs, strict=True):
        sub = df[df["run"] == r["run"]]
        label = f"{r['label']}: " if several else ""
        out, al = _align_one(sub, log.clock, capture, off, path=log.path, label=label,
                             anchor_threshold_gbps=anchor_threshold_gbps, after_ns=after)
        al["run"] = r["run"]
        parts.append(out)
        als.append(al)
        lasts = out.loc[out["ok"], "t_last_ns"].dropna()
        if len(lasts):
            after = int(lasts.max())
    out = pd.concat(parts).sort_values(["t_send_ns", "row"], na_position="last", kind="stable")
    out = out.reset_index(drop=True)
    al = dict(als[0])
    if several:
        al["uncertainty_ns"] = max(a["uncertainty_ns"] for a in als)
        al["note"] = "; ".join(a["note"] for a in als)
        al["runs"] = als
    res = replace(log, requests=out, clock=CLOCK_MONOTONIC, alignment=al, notes=list(log.notes))
    return _check_span(res, capture, log.clock)


#: Seconds since 1970 that look like a Unix epoch time (2001-09 .. 2099): never a CLOCK_MONOTONIC
#: time (seconds since boot) of a machine that has not been up for decades.
EPOCH_RANGE_S = (1.0e9, 4.1e9)


def _epoch_hint(t_ns: int, clock: str) -> str:
    s_ = t_ns / 1e9
    if clock != CLOCK_MONOTONIC or not EPOCH_RANGE_S[0] <= s_ <= EPOCH_RANGE_S[1]:
        return ""
    import datetime as _dt
    day = _dt.datetime.fromtimestamp(s_, tz=_dt.timezone.utc).strftime("%Y-%m-%d")
    return (f"; these times look like Unix epoch seconds ({day}), not CLOCK_MONOTONIC: if the "
            "log is on CLOCK_REALTIME, say so (native format: a column or field clock = "
            "CLOCK_REALTIME)")


def _check_span(log: RequestLog, capture, log_clock: str) -> RequestLog:
    t0, t1 = int(capture.t_start_ns), int(capture.t_end_ns)
    df = log.requests.copy()
    first_bad = None
    n_out = n_part = 0
    ok = df["ok"].to_numpy()
    sends = df["t_send_ns"].to_numpy(dtype="int64", na_value=0)
    lasts = df["t_last_ns"].to_numpy(dtype="int64", na_value=0)
    inside = ok & (sends >= t0) & (lasts <= t1)
    for idx, r in df[ok & ~inside].iterrows():  # only the rows not wholly inside
        send, last = int(r["t_send_ns"]), int(r["t_last_ns"])
        if last < t0 or send > t1:
            fld, v = ("t_send", send) if send > t1 or send < t0 else ("t_last_token", last)
            if first_bad is None:
                first_bad = (r, fld, v)
            df.at[idx, "ok"] = False
            df.at[idx, "error"] = (f"outside the capture: {fld} at {v / 1e9:.6f} s "
                                   f"(CLOCK_MONOTONIC, after alignment) is outside the capture "
                                   f"span {t0 / 1e9:.6f}-{t1 / 1e9:.6f} s")
            n_out += 1
            continue
        flags = []
        if send < t0:
            flags.append(f"starts before the capture start ({(t0 - send) / 1e9:.3f} s before; "
                         "attributed over what was captured)")
        if last > t1:
            flags.append(f"runs past the capture end ({(last - t1) / 1e9:.3f} s after; "
                         "attributed over what was captured)")
        if flags:
            df.at[idx, "flag"] = _join_flag(df.at[idx, "flag"], "; ".join(flags))
            n_part += 1
    notes = list(log.notes)
    if not df["ok"].any():
        if first_bad is None:
            return replace(log, requests=df, notes=notes)
        r, fld, v = first_bad
        raise RequestLogError(
            log.path, f"request {r['request_id']!r} at {v / 1e9:.6f} s (CLOCK_MONOTONIC, after "
                      f"alignment: {log.alignment['method']}) is outside the capture "
                      f"{capture.path} span {t0 / 1e9:.6f}-{t1 / 1e9:.6f} s, and so is every "
                      f"other request{_epoch_hint(int(r['t_send_ns']) - int(log.alignment['offset_ns']), log_clock)}",
            row=int(r["row"]), field=fld)
    if n_out:
        notes.append(f"{n_out} request(s) lie wholly outside the capture: counted as failed")
    if n_part:
        notes.append(f"{n_part} request(s) run past the capture's span: attributed over what "
                     "was captured and flagged (column 'flag')")
    return replace(log, requests=df, notes=notes)
