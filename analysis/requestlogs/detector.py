"""Which format a request log is, from its content (``detect_format``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import fmperf, jsonwalk, trtllm_bench, vllm_multiturn
from .common import RequestLogError, _read_text
from .formats import FORMATS
from .jsonwalk import _json_sequence, _top_keys
from .sglang import _is_sglang
from .vllm import _details, _is_bench_summary, _no_details_message


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
    if len(s) > jsonwalk.LAZY_JSON_CHARS and s.startswith("{"):
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
            seq = _json_sequence(p, s, [])  # a last run cut mid-write: still detected
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
        if fmperf.looks_like_file(whole):
            return "fmperf"
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
        if trtllm_bench.looks_like(first):
            return "trtllm-bench"
        if fmperf.looks_like(first):
            return "fmperf"
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
            if trtllm_bench.looks_like(d):
                return "trtllm-bench"
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
    if vllm_multiturn.looks_like(cols):
        return "vllm-multiturn"
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
    if "ttfts" not in d and ("total_input_sequences" in d or "input_sequence_throughput" in d):
        raise RequestLogError(p, POOLING_MESSAGE)
    return None


#: vLLM ``bench serve`` of a pooling (embeddings, scoring) model saves ``duration``,
#: ``total_input_sequences``, ``input_sequence_throughput``, ``input_lens``, ``latencies``,
#: ``queue_times``, ``errors`` (vllm/benchmarks/serve.py, ``EmbedBenchmarkMetrics`` result):
#: what attribution needs is not there.
POOLING_MESSAGE = (
    "a vLLM pooling (embeddings) benchmark result: it has per-request latencies and input "
    "lengths but no send times (start_times) and no TTFT (ttfts), and a pooling request has no "
    "first token or decode: no prefill/decode windows can be placed. Record the requests with "
    "the native format (send and response times on the capture's clock) to attribute them")
