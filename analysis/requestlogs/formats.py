"""The one table of formats: each format's reader and where its output token counts come from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import aiperf, genai_perf, guidellm, inference_perf, llmperf, native, sglang, vllm


@dataclass(frozen=True)
class Format:
    """One input format: ``read(path, text) -> (records, clock, notes[, runs])`` and the default
    source of its output token counts (readers that know better set it per row)."""

    name: str
    read: Callable[[Path, str], tuple]
    token_source: str = ""


#: Every format read, in the order they are listed to users.
TABLE: dict[str, Format] = {f.name: f for f in (
    Format("native", native.read, "log field output_tokens"),
    Format("vllm", vllm.read),
    Format("guidellm", guidellm.read, "tool field output_tokens"),
    Format("genai-perf", genai_perf.read),
    Format("aiperf", aiperf.read, "tool field output_sequence_length"),
    Format("inference-perf", inference_perf.read, "tool field output_tokens"),
    Format("sglang", sglang.read),
    Format("llmperf", llmperf.read),
)}

FORMATS = tuple(TABLE)
