"""SGLang ``bench_serving --output-details`` results: vLLM-style arrays, one JSON line per run
(read by ``vllm._read_runs``); told from a vLLM result by keys vLLM never writes."""

from __future__ import annotations

from pathlib import Path

from .vllm import _read_runs


def _is_sglang(d: dict) -> bool:
    """An SGLang ``bench_serving`` result (keys vLLM never writes), not a vLLM one."""
    return "model_id" not in d and (
        isinstance(d.get("details"), dict) or any(
            k in d for k in ("sharegpt_output_len", "random_range_ratio", "server_info",
                             "total_output_tokens_retokenized", "accept_length")))


def read(path: Path, text: str):
    """The ``sglang`` entry of the format table (the vLLM reader, told it is SGLang)."""
    return _read_runs(path, text, "sglang")
