"""rdmascope's own request log (JSONL, JSON array or CSV; written by ``rdmascope.client``).

An optional ``phase`` field: ``"warmup"`` (also "warm-up", "warm_up", any case) marks a warm-up
request (the emulator's closed-loop cells write it for their first ``warmup=N`` requests), kept
out of every measured number and named (``reader._drop_warmup``); any other value, or none, is
measured."""

from __future__ import annotations

import json
from pathlib import Path

from .common import (
    CLOCK_MONOTONIC,
    RequestLogError,
    _arr,
    _clock,
    _csv_rows,
    _int,
    _jsonl_objects,
    _num,
    _record,
    _s_to_ns,
)

#: ``phase`` values that mark a warm-up request
WARMUP_PHASES = ("warmup", "warm-up", "warm_up")


def _native_rows(path: Path, text: str, notes: list[str]) -> list[tuple[int, dict]]:
    """Return (line number, dict) rows of a native JSONL, JSON array or CSV file (a last
    JSONL/CSV line cut mid-write is skipped, said in ``notes``)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            arr = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RequestLogError(path, f"malformed JSON ({exc.msg})", row=exc.lineno) from exc
        return [(i + 1, d) for i, d in enumerate(arr)]
    if stripped.startswith("{"):
        return _jsonl_objects(path, text, notes)
    return _csv_rows(path, text, notes)[1]


def _read_native(path: Path, text: str):
    notes: list[str] = []
    rows = _native_rows(path, text, notes)
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
            try:
                chunks = json.loads(chunks) if chunks.strip() else None
            except json.JSONDecodeError as exc:
                raise RequestLogError(path, f"expected a JSON list of times in seconds, got "
                                            f"{chunks[:40]!r} ({exc.msg})", row=line,
                                      field="chunk_times") from exc
        chunks = _arr(path, line, "chunk_times", chunks, allow_none=True)
        if chunks is not None:
            chunks = [_s_to_ns(_num(path, line, "chunk_times", c)) for c in chunks]
        rnd = d.get("round")
        phase = str(d.get("phase") or "").strip().lower()
        records.append(_record(
            rid, t("t_send"), t("t_first_token"), t("t_last_token"),
            _int(path, line, "prompt_tokens", d.get("prompt_tokens"), allow_none=not ok),
            _int(path, line, "output_tokens", d.get("output_tokens"), allow_none=not ok),
            test=(str(d["test"]) if d.get("test") not in (None, "") else None),
            rnd=_int(path, line, "round", rnd) if rnd not in (None, "") else None,
            ok=ok, error=str(err) if err else ("failed" if not ok else ""), chunks=chunks,
            row=line))
        if phase in WARMUP_PHASES:
            records[-1]["warmup"] = f"field phase {phase!r}"
    if len(clocks) > 1:
        raise RequestLogError(path, f"rows use different clocks ({', '.join(sorted(clocks))}); "
                                    "one file must use one clock", field="clock")
    return records, clocks.pop(), notes


read = _read_native
