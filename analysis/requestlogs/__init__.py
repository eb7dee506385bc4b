"""Read per-request timing from LLM load generators and place it on the capture's clock.

Eight input formats (``docs/request-logs.md`` and the README describe where each comes from):

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
sglang         SGLang ``bench_serving --output-details`` JSONL (one   relative
               line per run)
llmperf        ray-project/llmperf ``*_individual_responses.json``    relative (no send times)
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
  failed on ``error`` or when a streamed request has no chunk times.
- sglang: vLLM-style arrays (top level, or under ``details``), one JSON line per run; ITLs are
  per token (SGLang spreads a chunk's gap over its tokens); no latencies (last token = first +
  sum of ITLs). See ``_read_vllm``.
- llmperf: flat dicts; see ``_read_llmperf`` (its ITL includes the TTFT).

Only chunks carrying generated text are tokens (``classify_event``, ``sse_events``); stored
vLLM/SGLang arrays are checked against themselves (``check_itls``) and corrections offered
(``apply_fixes``); a file can hold several runs (``RequestLog.runs``, ``read_request_log(run=)``,
one offset per run in ``align``).

Every reader rebuilds the same timestamps: send, first token, last token (and chunk arrivals when
the tool saved them) as int64 ns on the log's clock; the metrics are then computed by
``rdmascope.analysis.attribute`` with one set of definitions whatever the tool called its fields.

Failed requests (an error recorded by the tool, or a row whose values cannot be a request) stay
in the table with ``ok = False`` and the reason in ``error``; they are kept out of every metric.
Bad input raises ``RequestLogError`` naming the file, the row (1-based line for JSONL/CSV,
position in the file's request list otherwise) and the field.

Layout of the package: ``formats`` is the one table of formats (name -> reader); one module per
tool (``native``, ``vllm``, ``sglang``, ``guidellm``, ``genai_perf``, ``aiperf``,
``inference_perf``, ``llmperf``), each with ``read(path, text)``; ``detector`` picks the format
from the content, ``reader`` runs it (``read_request_log``), ``checks`` holds the per-row checks
and the stored-value corrections, ``aligner`` places a log on the capture's clock (``align``);
``common`` is the model (``RequestLog``, ``RequestLogError``, the value helpers), ``sse`` the
server-sent-event classification and ``jsonwalk`` the JSON walks. Everything public is imported
here: ``from rdmascope.analysis.requestlogs import read_request_log, align``.
"""

from __future__ import annotations

from .aligner import EPOCH_RANGE_S, align, first_burst_start_ns
from .checks import FIRST_ITL_RATIO, MAX_CHECK_NOTES, apply_fixes, check_itls
from .common import (
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    CLOCK_RELATIVE,
    CLOCKS,
    COLUMNS,
    RequestLog,
    RequestLogError,
    short_reason,
)
from .detector import detect_format
from .formats import FORMATS, TABLE, Format
from .guidellm import GUIDELLM_LAYOUTS
from .jsonwalk import _json_sequence
from .merge import merge_logs
from .reader import read_request_log
from .sse import EVENT_KINDS, classify_event, sse_events

__all__ = [
    "CLOCKS", "CLOCK_MONOTONIC", "CLOCK_REALTIME", "CLOCK_RELATIVE", "COLUMNS", "EPOCH_RANGE_S",
    "EVENT_KINDS", "FIRST_ITL_RATIO", "FORMATS", "GUIDELLM_LAYOUTS", "MAX_CHECK_NOTES", "TABLE",
    "Format", "RequestLog", "RequestLogError", "align", "apply_fixes", "check_itls",
    "classify_event", "detect_format", "first_burst_start_ns", "read_request_log",
    "short_reason", "sse_events", "_json_sequence", "merge_logs",
]
