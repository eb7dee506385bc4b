"""perf_analyzer / genai-perf ``profile_export.json`` (epoch ns; streamed responses as stored SSE
text, so only token-bearing events count)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import jsonwalk
from .common import CLOCK_REALTIME, RequestLogError, _arr, _int, _load_json, _obj, _record
from .jsonwalk import _DECODER, _NotLazy, _skip, _walk, _ws
from .sse import sse_events


def _genai_request(path: Path, pos: int, r: dict) -> tuple[dict[str, Any], bool]:
    """One genai-perf request (position ``pos`` in the file's request list) as a record, and
    whether it is a successful request without a usage record."""
    ts0 = _int(path, pos, "timestamp", r.get("timestamp"), allow_none=False)
    stamps = [_int(path, pos, "response_timestamps", st, allow_none=False)
              for st in (_arr(path, pos, "response_timestamps", r.get("response_timestamps"),
                              allow_none=True) or [])]
    outs = _arr(path, pos, "response_outputs", r.get("response_outputs"), allow_none=True)
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
        e = _obj(path, None, f"experiments[{ei}]", e)
        for r in (_arr(path, None, f"experiments[{ei}].requests", e.get("requests"),
                       allow_none=True) or []):
            pos += 1
            rec, no_tok = _genai_request(path, pos, _obj(path, pos, "requests[]", r))
            records.append(rec)
            exp_of.append(ei)
            no_tokens += no_tok
    return _genai_perf_result(records, exp_of, len(exps), no_tokens)


def _read_genai_perf_text(path: Path, text: str):
    """genai-perf from its text: a large file is walked request by request (the same records,
    notes and errors as reading it whole, in a fraction of the memory); anything unexpected in
    its layout is read whole (``_read_genai_perf``)."""
    if len(text) > jsonwalk.LAZY_JSON_CHARS:
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


read = _read_genai_perf_text
