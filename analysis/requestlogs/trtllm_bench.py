"""TensorRT-LLM ``trtllm-bench`` per-request records (``ReportUtility.get_request_info``): a JSON list
(or JSON lines) of ``RequestRecord.model_dump()`` dicts.

Fields (NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/dataclasses/statistics.py`` at 77d7fe1e and
``reporting.py`` at 2787769c): ``id``, ``num_input_tokens``, ``error_tokens``,
``start_timestamp``, ``first_token_timestamp`` (-1 when not streamed), ``end_timestamp``,
``decode_iteration``, ``output_tokens`` (= len(tokens)), ``output`` (text) and the computed
``time_to_first_token``, ``intertoken_latency``, ``end_to_end_latency``, ... The times are
``time.perf_counter_ns()`` (``bench/benchmark/utils/asynchronous.py`` at 89fd9b74):
CLOCK_MONOTONIC ns. ``end_timestamp`` is taken when the final response returns (the last token).
A record with ``error_tokens`` > 0 failed; one without a first token (not streamed) cannot be
split into prefill and decode and is failed with that reason.
"""

from __future__ import annotations

from pathlib import Path

from .common import CLOCK_MONOTONIC, RequestLogError, _int, _jsonl_objects, _load_json, _record

#: Keys that tell a trtllm-bench request record apart.
KEYS = ("start_timestamp", "first_token_timestamp", "end_timestamp", "num_input_tokens")


def looks_like(d) -> bool:
    return isinstance(d, dict) and all(k in d for k in KEYS)


def read(path: Path, text: str):
    notes: list[str] = []
    if text.lstrip().startswith("["):
        rows = list(enumerate(_load_json(path, text, list), start=1))
    else:
        rows = _jsonl_objects(path, text, notes)
    records = []
    for pos, r in rows:
        if not isinstance(r, dict):
            raise RequestLogError(path, "expected a request object", row=pos)
        rid = r.get("id", pos)
        t0 = _int(path, pos, "start_timestamp", r.get("start_timestamp"), allow_none=False)
        end = _int(path, pos, "end_timestamp", r.get("end_timestamp"), allow_none=False)
        ft = r.get("first_token_timestamp")
        prompt = _int(path, pos, "num_input_tokens", r.get("num_input_tokens"))
        output = _int(path, pos, "output_tokens", r.get("output_tokens"))
        errs = _int(path, pos, "error_tokens", r.get("error_tokens")) or 0
        src = "tool field output_tokens (trtllm-bench: the response's token ids)"
        if errs:
            records.append(_record(rid, t0, None, None, prompt, output, ok=False, row=pos,
                                   error=f"{errs} error response(s) (error_tokens)",
                                   token_source=src))
            continue
        if ft in (None, -1):
            records.append(_record(rid, t0, None, None, prompt, output, ok=False, row=pos,
                                   error="no first-token time (first_token_timestamp -1: run "
                                         "trtllm-bench with --streaming)", token_source=src))
            continue
        first = _int(path, pos, "first_token_timestamp", ft, allow_none=False)
        records.append(_record(rid, t0, first, end, prompt, output, row=pos, token_source=src))
    return records, CLOCK_MONOTONIC, notes
