"""The one table of formats: each format's reader and where its output token counts come from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import (
    aiperf,
    fmperf,
    genai_perf,
    guidellm,
    inference_perf,
    llmperf,
    native,
    sglang,
    trtllm_bench,
    vllm,
    vllm_multiturn,
)


@dataclass(frozen=True)
class Format:
    """One input format: ``read(path, text) -> (records, clock, notes[, runs])`` and the default
    source of its output token counts (readers that know better set it per row)."""

    name: str
    read: Callable[[Path, str], tuple]
    token_source: str = ""
    #: one line when the tool's own report uses a metric name differently (docs/request-logs.md)
    names: str = ""


#: Every format read, in the order they are listed to users.
TABLE: dict[str, Format] = {f.name: f for f in (
    Format("native", native.read, "log field output_tokens"),
    Format("vllm", vllm.read),
    Format("guidellm", guidellm.read, "tool field output_tokens",
           "guidellm's 'inter token latency' is rdmascope's TPOT, its 'time per output token' "
           "includes the TTFT"),
    Format("genai-perf", genai_perf.read, "",
           "genai-perf's 'inter token latency' is rdmascope's TPOT"),
    Format("aiperf", aiperf.read, "tool field output_sequence_length",
           "AIPerf's 'Inter Token Latency' is rdmascope's TPOT and its 'Inter Chunk Latency' "
           "rdmascope's ITL"),
    Format("inference-perf", inference_perf.read, "tool field output_tokens",
           "inference-perf's 'inter token latency' is pooled per token (0 inside a multi-token "
           "chunk); rdmascope's ITL is per chunk"),
    Format("sglang", sglang.read, "",
           "SGLang's ITL spreads a chunk's gap over its tokens and its E2E ends at [DONE]"),
    Format("vllm-multiturn", vllm_multiturn.read, "",
           "the multi-turn benchmark's 'tpot_ms' is per token after the first chunk and its "
           "TTFT is moved back for a multi-token first chunk"),
    Format("trtllm-bench", trtllm_bench.read, "",
           "trtllm-bench's 'intertoken_latency' is rdmascope's TPOT"),
    Format("fmperf", fmperf.read, "",
           "fmperf's 'latency_prefill_ms' is rdmascope's TTFT; its 'latency_nexttoken_ms' is "
           "pooled over response records (vLLM: per token, 0 inside a chunk, a token-weighted "
           "TPOT; TGIS: per message)"),
    Format("llmperf", llmperf.read, "",
           "llmperf's 'inter_token_latency_s' includes the TTFT (it is no TPOT or ITL)"),
)}

FORMATS = tuple(TABLE)
