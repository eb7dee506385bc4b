"""vLLM's multi-turn benchmark (``benchmarks/multi_turn/benchmark_serving_multi_turn.py``): its raw
data, one row per request (``RequestStats``), as a CSV.

Columns as the benchmark's ``process_statistics`` writes its raw data (vllm-project/vllm,
commit 70c0965a; the same columns the xlsx "Raw data" sheet holds): ``ttft_ms``, ``tpot_ms``,
``latency_ms``, ``start_time_ms`` (``time.perf_counter_ns() / 1e6``: CLOCK_MONOTONIC, ms),
``input_num_turns``, ``input_num_tokens``, ``output_num_tokens``, ``output_num_chunks``,
``output_num_first_chunk_tokens``, ``approx_cached_percent``, ``conversation_id``,
``client_id`` (and ``end_time_ms``, ``time_between_user_turns_sec`` when written).

Rebuilt: send = ``start_time_ms``; the benchmark moves its TTFT back when the first chunk
carried several tokens (``ttft_ms = max(0.1, first chunk - (first_chunk_tokens - 1) x
tpot_ms)``), so the first chunk's arrival is restored as ``ttft_ms + (first_chunk_tokens - 1) x
tpot_ms``; last = send + ``latency_ms`` (its latency ends at ``[DONE]``, just after the last
chunk). Token counts are the benchmark's own retokenization of the messages and the answer.
Failed requests are not in its raw data (it drops them). Request ids: ``<conversation>-t<turns>``.
"""

from __future__ import annotations

from pathlib import Path

from .common import CLOCK_MONOTONIC, RequestLogError, _csv_rows, _int, _num, _record, _s_to_ns

#: The columns that tell this CSV apart (and that are read).
REQUIRED = ("start_time_ms", "ttft_ms", "latency_ms", "input_num_tokens", "output_num_tokens")


def looks_like(header: list[str]) -> bool:
    return all(c in header for c in REQUIRED)


def read(path: Path, text: str):
    notes: list[str] = []
    head, rows = _csv_rows(path, text, notes)
    missing = [c for c in REQUIRED if c not in head]
    if missing:
        raise RequestLogError(path, f"not the vLLM multi-turn benchmark's raw data: missing "
                                    f"column(s) {', '.join(missing)}", field=missing[0])
    records = []
    for line, d in rows:
        send_ms = _num(path, line, "start_time_ms", d.get("start_time_ms"))
        ttft = _num(path, line, "ttft_ms", d.get("ttft_ms"))
        lat = _num(path, line, "latency_ms", d.get("latency_ms"))
        tpot = _num(path, line, "tpot_ms", d.get("tpot_ms"), allow_none=True) or 0.0
        k = _int(path, line, "output_num_first_chunk_tokens",
                 d.get("output_num_first_chunk_tokens")) or 1
        first_ms = send_ms + ttft + max(k - 1, 0) * tpot
        conv = (d.get("conversation_id") or "").strip() or f"row{line}"
        turns = (d.get("input_num_turns") or "").strip()
        records.append(_record(
            f"{conv}-t{turns}" if turns else conv, _s_to_ns(send_ms / 1e3),
            _s_to_ns(first_ms / 1e3), _s_to_ns((send_ms + lat) / 1e3),
            _int(path, line, "input_num_tokens", d.get("input_num_tokens"), allow_none=False),
            _int(path, line, "output_num_tokens", d.get("output_num_tokens"), allow_none=False),
            row=line, token_source="tool field output_num_tokens (the benchmark retokenizes "
                                   "the answer)"))
    notes[:0] = ["vLLM multi-turn benchmark: first token = start + ttft_ms + (first-chunk tokens - "
             "1) x tpot_ms (its TTFT is moved back for a multi-token first chunk); last = start "
             "+ latency_ms (to [DONE]); failed requests are not in its raw data"]
    return records, CLOCK_MONOTONIC, notes
