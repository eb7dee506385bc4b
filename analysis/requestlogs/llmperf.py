"""ray-project/llmperf ``*_individual_responses.json`` (flat dicts, no send times)."""

from __future__ import annotations

from pathlib import Path

from .common import CLOCK_RELATIVE, RequestLogError, _int, _load_json, _num, _record, _s_to_ns


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


def read(path: Path, text: str):
    return _read_llmperf(path, _load_json(path, text, list))
