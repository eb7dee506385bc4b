"""Read per-request timing from LLM load generators and place it on the capture's clock.

Six input formats (``request-logs.md`` describes where each comes from):

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
  failed on ``error``.

Every reader rebuilds the same timestamps: send, first token, last token (and chunk arrivals when
the tool saved them) as int64 ns on the log's clock; the metrics are then computed by
``rdmascope.analysis.attribute`` with one set of definitions whatever the tool called its fields.

Failed requests (an error recorded by the tool) stay in the table with ``ok = False`` and are
counted; they are kept out of every metric. Bad input raises ``RequestLogError`` naming the file,
the row (1-based line for JSONL/CSV, position in the file's request list otherwise) and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
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

FORMATS = ("native", "vllm", "guidellm", "genai-perf", "aiperf", "inference-perf")

#: Columns of ``RequestLog.requests`` (one row per request, failed ones included).
COLUMNS = ("request_id", "t_send_ns", "t_first_ns", "t_last_ns", "prompt_tokens",
           "output_tokens", "test", "round", "ok", "error", "chunk_times", "row")

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
    (list of int ns per streamed chunk, or None), ``row`` (where in the file). Rows are sorted by
    send time (failed rows without one last).

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
    return int(round(float(v) * 1e9))


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
            error="", chunks=None, row=None) -> dict[str, Any]:
    return {"request_id": str(rid), "t_send_ns": t_send, "t_first_ns": t_first, "t_last_ns": t_last,
            "prompt_tokens": prompt, "output_tokens": output, "test": test, "round": rnd,
            "ok": bool(ok), "error": error or "", "chunk_times": chunks, "row": row}


def _frame(path, records: list[dict[str, Any]]) -> pd.DataFrame:
    if not records:
        raise RequestLogError(path, "holds no requests")
    # Built column by column: a column mixing ints and None must never pass through float64
    # (epoch ns would lose their last digits).
    cols: dict[str, Any] = {}
    for c in COLUMNS:
        vals = [r[c] for r in records]
        if c in ("t_send_ns", "t_first_ns", "t_last_ns", "prompt_tokens", "output_tokens",
                 "round", "row"):
            cols[c] = pd.array([None if v is None else int(v) for v in vals], dtype="Int64")
        elif c == "ok":
            cols[c] = np.array(vals, dtype=bool)
        else:
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
            cols[c] = arr
    df = pd.DataFrame(cols)
    df = df.sort_values(["t_send_ns", "row"], na_position="last", kind="stable")
    return df.reset_index(drop=True)


def _validate(path, df: pd.DataFrame) -> None:
    """Check the successful rows: all three times present and in order, chunks in order.

    The first token must come strictly after the send: a TTFT of 0 (first token at the send
    instant) is as impossible as a negative one (a first token needs a forward pass). Failed
    rows are not checked.
    """
    ids = df["request_id"]
    dup = ids[ids.duplicated(keep=False)]
    if len(dup):
        first = dup.iloc[0]
        rows = df.loc[ids == first, "row"].tolist()
        raise RequestLogError(path, f"request_id {first!r} appears more than once (rows {rows})",
                              row=rows[1], field="request_id")
    for r in df[df["ok"]].itertuples(index=False):
        for fld, v in (("t_send", r.t_send_ns), ("t_first_token", r.t_first_ns),
                       ("t_last_token", r.t_last_ns)):
            if pd.isna(v):
                raise RequestLogError(path, "missing value", row=r.row, field=fld)
        if r.t_first_ns < r.t_send_ns:
            raise RequestLogError(
                path, f"first token at {r.t_first_ns} ns is before the send at {r.t_send_ns} ns "
                      f"({(r.t_first_ns - r.t_send_ns) / 1e9:+.6f} s)", row=r.row,
                field="t_first_token")
        if r.t_first_ns == r.t_send_ns:
            raise RequestLogError(
                path, f"first token at the send instant ({r.t_send_ns} ns): a TTFT of 0 s is "
                      "impossible (the first token needs at least one forward pass); expected "
                      "a first token after the send, or the request marked failed", row=r.row,
                field="t_first_token")
        if r.t_last_ns < r.t_first_ns:
            raise RequestLogError(
                path, f"last token at {r.t_last_ns} ns is before the first token at "
                      f"{r.t_first_ns} ns", row=r.row, field="t_last_token")
        if r.chunk_times is not None and len(r.chunk_times) > 1:
            d = np.diff(np.asarray(r.chunk_times, dtype=np.int64))
            if (d < 0).any():
                k = int(np.argmax(d < 0)) + 1
                raise RequestLogError(path, f"chunk {k} arrives before chunk {k - 1} "
                                            "(chunk times out of order)", row=r.row,
                                      field="chunk_times")


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


def _read_vllm(path: Path, data: dict):
    n_key = "ttfts"
    lat_key = "latencies" if "latencies" in data else ("e2els" if "e2els" in data else None)
    for k in ("input_lens", "output_lens", "ttfts"):
        if k not in data:
            raise RequestLogError(path, "missing (required for a vLLM result)", field=k)
    n = len(data[n_key])
    arrays = {k: data[k] for k in ("input_lens", "output_lens", "ttfts", "itls", "errors",
                                   "start_times") if k in data and data[k] is not None}
    if lat_key:
        arrays[lat_key] = data[lat_key]
    for k, v in arrays.items():
        if not isinstance(v, list) or len(v) != n:
            raise RequestLogError(path, f"has {len(v) if isinstance(v, list) else 'no'} entries, "
                                        f"expected {n} (one per request, like 'ttfts')", field=k)
    notes = []
    starts = arrays.get("start_times")
    if starts is not None:
        clock = CLOCK_MONOTONIC
        prev = None
        for i, s in enumerate(starts):
            x = _num(path, i + 1, "start_times", s)
            if prev is not None and x < prev:
                raise RequestLogError(path, f"start time {x} is before the previous request's "
                                            f"{prev} (entries are in dispatch order)",
                                      row=i + 1, field="start_times")
            prev = x
    else:
        rate = data.get("request_rate", "inf")
        conc = data.get("max_concurrency")
        if str(rate).lower() not in ("inf", "infinity", "none") or (conc is not None
                                                                   and conc < n):
            raise RequestLogError(
                path, "has no per-request send times and the requests were not all sent at once "
                      f"(request_rate={rate!r}, max_concurrency={conc!r}); re-run with a vLLM "
                      "that saves start_times, or use the native format", field="start_times")
        clock = CLOCK_RELATIVE
        notes.append("no start_times: all requests placed as sent together at t=0 "
                     "(request_rate=inf); times are relative")
    errors = arrays.get("errors") or [""] * n
    itls = arrays.get("itls")
    records = []
    for i in range(n):
        row = i + 1
        ok = not errors[i]
        t0 = _s_to_ns(_num(path, row, "start_times", starts[i])) if starts is not None else 0
        if not ok:
            records.append(_record(i, t0, None, None,
                                   _int(path, row, "input_lens", data["input_lens"][i]),
                                   None, ok=False, error=str(errors[i]), row=row))
            continue
        ttft = _num(path, row, "ttfts", data["ttfts"][i])
        t_first = t0 + _s_to_ns(ttft)
        chunks = None
        if itls is not None:
            gaps = itls[i] or []
            cum = np.cumsum([_num(path, row, "itls", g) for g in gaps]) if gaps else []
            chunks = [t_first] + [t_first + _s_to_ns(c) for c in cum]
        if lat_key:
            t_last = t0 + _s_to_ns(_num(path, row, lat_key, arrays[lat_key][i]))
        elif chunks is not None:
            t_last = chunks[-1]
        else:
            raise RequestLogError(path, "missing: neither latencies nor itls to place the last "
                                        "token", row=row, field="latencies")
        records.append(_record(i, t0, t_first, t_last,
                               _int(path, row, "input_lens", data["input_lens"][i]),
                               _int(path, row, "output_lens", data["output_lens"][i]),
                               chunks=chunks, row=row))
    return records, clock, notes


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


def _sse_json(text: Any) -> Any:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s.startswith("data:"):
        s = s[5:].strip()
    if s == "[DONE]":
        return "[DONE]"
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return None


def _read_genai_perf(path: Path, data: dict):
    exps = data.get("experiments")
    if not isinstance(exps, list) or not exps:
        raise RequestLogError(path, "has no experiments[] list", field="experiments")
    records, no_tokens = [], 0
    pos = 0
    for ei, e in enumerate(exps):
        for r in (e.get("requests") or []):
            pos += 1
            ts0 = _int(path, pos, "timestamp", r.get("timestamp"), allow_none=False)
            stamps = r.get("response_timestamps") or []
            outs = r.get("response_outputs") or [None] * len(stamps)
            token_stamps, usage = [], None
            for st, out in zip(stamps, outs, strict=False):
                payload = _sse_json(out.get("response") if isinstance(out, dict) else out)
                if payload == "[DONE]":
                    continue
                if isinstance(payload, dict):
                    if isinstance(payload.get("usage"), dict):
                        usage = payload["usage"]
                    if "choices" in payload and not payload["choices"]:
                        continue  # a usage-only chunk carries no token
                token_stamps.append(_int(path, pos, "response_timestamps", st, allow_none=False))
            err = r.get("error") or ""
            ok = not err and bool(token_stamps)
            prompt = usage.get("prompt_tokens") if usage else None
            output = usage.get("completion_tokens") if usage else None
            if ok and output is None:
                no_tokens += 1
            records.append(_record(
                r.get("request_id", pos), ts0, token_stamps[0] if token_stamps else None,
                token_stamps[-1] if token_stamps else None, _int(path, pos, "usage", prompt),
                _int(path, pos, "usage", output), test=f"experiment{ei}" if len(exps) > 1 else None,
                ok=ok, error=str(err) if err else ("no response" if not ok else ""),
                chunks=token_stamps or None, row=pos))
    notes = []
    if no_tokens:
        notes.append(f"{no_tokens} request(s) have no usage record: prompt and output token "
                     "counts unknown (decode speed and bytes per prompt token left empty); run "
                     "genai-perf with stream usage enabled")
    return records, CLOCK_REALTIME, notes


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
        records.append(_record(rid, t0, t_first, t_last, prompt, output, chunks=chunks, row=line))
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
        prompt = info.get("input_tokens", _get(info, "request_metrics.text.input_tokens"))
        output = rm.get("output_tokens", info.get("output_tokens"))
        if not ok:
            msg = (err.get("error_msg") or err.get("error_type")) if isinstance(err, dict) \
                else str(err)
            records.append(_record(pos, _s_to_ns(t0), None, None,
                                   _int(path, pos, "info.input_tokens", prompt), None, ok=False,
                                   error=msg or "error", row=pos))
            continue
        if not chunk_s:
            raise RequestLogError(path, "missing (required: per-chunk times exist only for "
                                        "streamed requests; enable streaming)", row=pos,
                                  field="info.response_metrics.chunk_times")
        chunks = [_s_to_ns(_num(path, pos, "info.response_metrics.chunk_times", c))
                  for c in chunk_s]
        if output is None:
            raise RequestLogError(path, "missing (required)", row=pos,
                                  field="info.response_metrics.output_tokens")
        records.append(_record(pos, _s_to_ns(t0), chunks[0], chunks[-1],
                               _int(path, pos, "info.input_tokens", prompt),
                               _int(path, pos, "info.response_metrics.output_tokens", output),
                               chunks=chunks, row=pos))
    return records, CLOCK_MONOTONIC, []


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
    try:
        whole = json.loads(s)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        if "ttfts" in whole:
            return "vllm"
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
            if "ttfts" in d:
                return "vllm"
            raise RequestLogError(p, "unknown format: JSON lines with keys "
                                     f"{', '.join(list(d)[:8])}; expected one of "
                                     f"{', '.join(FORMATS)} (or give --format)")
    header = s.splitlines()[0]
    cols = [c.strip() for c in header.split(",")]
    if "t_send" in cols or "t_send_ns" in cols:
        return "native"
    raise RequestLogError(p, f"unknown format (first line {header[:80]!r}); expected one of "
                             f"{', '.join(FORMATS)} (or give --format)")


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
    "vllm": lambda p, t: _read_vllm(p, _load_json(p, t, dict)),
    "guidellm": lambda p, t: _read_guidellm(p, _load_json(p, t, dict)),
    "genai-perf": lambda p, t: _read_genai_perf(p, _load_json(p, t, dict)),
    "aiperf": _read_aiperf,
    "inference-perf": lambda p, t: _read_inference_perf(p, _load_json(p, t, list)),
}


def read_request_log(path: str | os.PathLike, format: str | None = None) -> RequestLog:
    """Read a request log of any supported format into a ``RequestLog`` on the log's own clock.

    ``format`` is one of ``FORMATS`` or None to detect it from the content. Times become int64 ns
    (seconds are multiplied by 1e9 and rounded). Failed requests are kept with ``ok = False``.

    Raises ``RequestLogError`` naming file, row and field for: a missing file, an empty file, an
    unknown format, malformed JSON/CSV rows, a missing required field, a non-numeric value, a
    first token before or at the send (TTFT <= 0; failed requests are not checked), a last token
    before the first, chunks out of order, start times
    out of dispatch order (vLLM), a duplicated request_id, or rows on different clocks.
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
    records, clock, notes = _READERS[fmt](p, text)
    df = _frame(p, records)
    _validate(p, df)
    log = RequestLog(path=p, format=fmt, clock=clock, requests=df, notes=list(notes))
    if log.n_failed:
        log.notes.append(f"{log.n_failed} failed request(s) kept out of the metrics")
    if not len(log.ok):
        raise RequestLogError(p, f"holds no successful request ({log.n_failed} failed)")
    return log


# ------------------------------------------------------------------------------------------------
# Clock alignment
# ------------------------------------------------------------------------------------------------


def _shift(df: pd.DataFrame, offset_ns) -> pd.DataFrame:
    """Add ``offset_ns`` (scalar, or a function of int64 arrays) to every time column."""
    out = df.copy()
    fn = offset_ns if callable(offset_ns) else (lambda t: t + int(offset_ns))
    for c in ("t_send_ns", "t_first_ns", "t_last_ns"):
        col = out[c]
        mask = col.notna().to_numpy()
        vals = col.to_numpy(dtype="int64", na_value=0)
        new = np.asarray(fn(vals[mask]), dtype=np.int64)
        arr = pd.array([None] * len(col), dtype="Int64")
        arr[mask] = new
        out[c] = arr
    out["chunk_times"] = [None if ch is None else
                          [int(x) for x in np.asarray(fn(np.asarray(ch, dtype=np.int64)))]
                          for ch in out["chunk_times"]]
    return out


def first_burst_start_ns(capture, *, threshold_gbps: float | None = None,
                         width_ns: int = 1_000_000) -> tuple[int, float]:
    """Return (start of the first prefill burst in ns, threshold used in Gb/s) of a capture.

    The summed tx rate of all data series is re-binned to ``width_ns`` windows; the first window at
    or above ``threshold_gbps`` (default: 25 % of the capture's highest window, at least 5 Gb/s,
    well above decode traffic of a few Gb/s) starts the burst. Raises ``ValueError`` when nothing
    reaches the threshold.
    """
    from rdmascope.analysis import series

    iv = series.byte_intervals(capture)
    iv = iv[iv["direction"] == "tx"]
    if not len(iv):
        raise ValueError(f"{capture.path}: no tx data counters to find a burst in")
    binned = series.rebin(iv, width_ns, origin_ns=int(capture.t_start_ns))
    gbps = series.to_gbps(binned, width_ns).sum(axis=1)
    if threshold_gbps is None:
        threshold_gbps = max(5.0, 0.25 * float(gbps.max()))
    hit = gbps.index[gbps.to_numpy() >= threshold_gbps]
    if not len(hit):
        raise ValueError(f"{capture.path}: no {width_ns / 1e6:g} ms window reaches "
                         f"{threshold_gbps:g} Gb/s; cannot anchor the requests to a burst")
    return int(hit[0]), float(threshold_gbps)


def align(log: RequestLog, capture, offset_s: float | None = None, *,
          anchor_threshold_gbps: float | None = None) -> RequestLog:
    """Place a request log on the capture's CLOCK_MONOTONIC and check it lies inside the capture.

    - CLOCK_MONOTONIC logs align directly (same host, same clock; uncertainty 0).
    - CLOCK_REALTIME logs go through the capture's clock pairs (``manifest["clock_pairs"]``,
      [realtime_ns, monotonic_ns]; offset interpolated between pairs, held beyond them). The
      uncertainty reported is half the spread of the pairs' offsets (NTP slewing during the run).
    - ``offset_s`` (any clock) is added to the log's times instead; for relative logs it places
      time 0 of the log at ``offset_s`` seconds on the capture's monotonic clock.
    - Relative logs without an offset are anchored: the earliest send is put at the start of the
      first prefill burst (``first_burst_start_ns``). This is an *estimate*: the true send precedes
      the first all-reduce by the engine's queueing, tokenisation and first-layer compute, which
      the trace cannot see; the reported uncertainty is one 1 ms window plus that unknown lead.

    Returns a new ``RequestLog`` with ``clock = CLOCK_MONOTONIC`` and ``alignment`` filled in.
    Raises ``RequestLogError`` naming the file, row and field of the first successful request
    whose send or last token falls outside the capture's span [t_start_ns, t_end_ns], and
    ``RequestLogError`` when a relative log cannot be anchored.
    """
    if log.alignment is not None:
        return log
    df = log.requests
    if offset_s is not None:
        off = _s_to_ns(offset_s)
        out = _shift(df, off)
        al = {"method": "offset", "offset_ns": off, "uncertainty_ns": 0,
              "note": f"times shifted by the given offset {offset_s:+.6f} s"}
    elif log.clock == CLOCK_MONOTONIC:
        out = df.copy()
        al = {"method": "monotonic", "offset_ns": 0, "uncertainty_ns": 0,
              "note": "log and capture share CLOCK_MONOTONIC"}
    elif log.clock == CLOCK_REALTIME:
        from rdmascope.analysis.load import realtime_to_monotonic
        pairs = np.asarray(capture.clock_pairs, dtype=np.int64).reshape(-1, 2)
        if not len(pairs):
            start = capture.meta.get("start") or {}
            if start.get("realtime_ns") is None:
                raise RequestLogError(log.path, "is on CLOCK_REALTIME but the capture "
                                                f"{capture.path} has no clock pairs to convert it")
            pairs = np.array([[start["realtime_ns"], start["monotonic_ns"]]], dtype=np.int64)
        offs = pairs[:, 0] - pairs[:, 1]
        out = _shift(df, lambda t: realtime_to_monotonic(capture, t))
        al = {"method": "clock_pairs", "offset_ns": int(np.median(offs)),
              "uncertainty_ns": int((offs.max() - offs.min()) // 2),
              "note": f"CLOCK_REALTIME converted through {len(pairs)} clock pair(s)"}
    else:
        try:
            t_burst, thr = first_burst_start_ns(capture, threshold_gbps=anchor_threshold_gbps)
        except ValueError as exc:
            raise RequestLogError(log.path, f"has only relative times and cannot be anchored: "
                                            f"{exc}; give --offset") from exc
        t0 = int(df.loc[df["ok"], "t_send_ns"].min())
        off = t_burst - t0
        out = _shift(df, off)
        al = {"method": "anchor", "offset_ns": off, "uncertainty_ns": 1_000_000,
              "note": (f"ESTIMATE: first send anchored to the first prefill burst (first 1 ms "
                       f"window >= {thr:.1f} Gb/s); +-1 ms, and the true send may be earlier by "
                       "the engine's time before its first all-reduce; give --offset to override")}
    res = replace(log, requests=out, clock=CLOCK_MONOTONIC, alignment=al, notes=list(log.notes))
    _check_span(res, capture)
    return res


def _check_span(log: RequestLog, capture) -> None:
    t0, t1 = int(capture.t_start_ns), int(capture.t_end_ns)
    for r in log.requests[log.requests["ok"]].itertuples(index=False):
        for fld, v in (("t_send", r.t_send_ns), ("t_last_token", r.t_last_ns)):
            if v < t0 or v > t1:
                raise RequestLogError(
                    log.path, f"request {r.request_id!r} at {v / 1e9:.6f} s (CLOCK_MONOTONIC, "
                              f"after alignment: {log.alignment['method']}) is outside the "
                              f"capture {capture.path} span {t0 / 1e9:.6f}-{t1 / 1e9:.6f} s",
                    row=r.row, field=fld)
