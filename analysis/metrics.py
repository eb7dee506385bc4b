"""Per-request timing metrics with one set of definitions, whatever tool wrote the log.

Definitions (``request-logs.md``, "Metric definitions"; method.md, "Metrics, as the study defines
them"). All are computed from the rebuilt timestamps of ``rdmascope.analysis.requestlogs``, never
copied from a tool's own summary (tools disagree: guidellm's "TPOT" includes TTFT, llmperf's ITL
includes TTFT, SGLang's E2E ends at ``[DONE]``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Column -> the definition it uses. Printed by ``rdmascope attribute --definitions`` and stored in
#: JSON output, so every number says which definition it follows.
DEFINITIONS: dict[str, str] = {
    "ttft_s": "TTFT = first token - send (s); the prefill window is [send, first token]",
    "e2e_s": "E2E latency = last token - send (s)",
    "decode_s": "decode window = last token - first token (s)",
    "tpot_s": "TPOT (vLLM's 'excl. 1st token') = (last - first) / (output_tokens - 1) (s); "
              "only when output_tokens > 1",
    "decode_speed_tps": "decode speed = (output_tokens - 1) / (last token - first token), "
                        "tokens/s (the study's definition; inverse of TPOT); TTFT not included",
    "itl_mean_s": "ITL = mean gap between consecutive streamed chunks of one request (s); a "
                  "chunk may carry several tokens (speculative decoding); only where chunk "
                  "times exist",
    "itl_pooled": "pooled ITL = all chunk gaps of all successful requests together (vLLM)",
    "time_to_last_first_token_s": "time to the LAST first token of a round = max(first token) "
                                  "- min(send) over its requests (s): covers all prompts' bytes",
    "mean_ttft_s": "mean TTFT over the round's requests, each weighted equally (s)",
    "output_throughput_tps": "output throughput = total output tokens / (last token - first "
                             "send) of the run (tokens/s)",
    "prefill_tx_bytes": "bytes sent by the node (all RDMA devices, port_xmit_data x 4) inside "
                        "the request's prefill window [send, first token]; intervals spread "
                        "by overlap. Concurrent windows overlap: each includes all traffic in it",
    "decode_tx_bytes": "bytes sent inside the decode window [first token, last token]",
    "prefill_tx_split_bytes": "the conserving split: every byte given to exactly one request's "
                              "prefill or decode or to idle/other, each engine step's bytes in "
                              "proportion to its scheduled tokens (docs/method.md); the "
                              "requests' split bytes plus idle/other add up to the counters",
    "decode_tx_split_bytes": "the decode part of the conserving split (see prefill_tx_split_bytes)",
    "prefill_tx_split_known_bytes": "the split bytes from the pieces of known bytes (equal to "
                                    "prefill_tx_split_bytes where that is known, which is "
                                    "empty when the request touches unknown bytes); with "
                                    "idle/other's they add up to the known total",
    "prefill_per_token_split_bytes": "prefill tx split bytes / prompt tokens (per round: the "
                                     "round's requests' split bytes / their prompt tokens)",
    "cells": "per test and round: TTFT, TPOT, E2E per request and ITL every chunk gap pooled; "
             "mean, std, percentiles (np.percentile, linear) and max, as vLLM's "
             "calculate_metrics; throughputs over first send to last token; warm-up left out",
    "prefill_per_token_bytes": "prefill tx bytes (in window, shared) / prompt tokens",
    "prefill_peak_tx_gbps": "highest 1 ms window (aligned on the capture start) fully inside "
                            "the window and consistent with physics (never gap-spread, "
                            "partly covered or over line rate), node tx (Gb/s); single 1 ms "
                            "values carry +-15-25 %",
    "prefill_over_line_windows": "1 ms windows of the prefill over line rate by more than "
                                 "their timing uncertainty allows (a late counter update, a "
                                 "gap spread, a stalled sampler), kept out of the peak",
    "prefill_bursts": "number of bursts (bursts.detect_bursts on the 1 ms windows inside the "
                      "window: enter at 25 %, leave at 10 % of the link capacity)",
    "round_prefill_tx_bytes": "bytes sent in [first send, last first token] of the round",
    "round_decode_tx_bytes": "bytes sent in [last first token, last token] of the round "
                             "(decode-only time)",
    "time classes": "every instant of the capture is 'prefill' (inside any request's prefill "
                    "window), else 'decode-only' (inside a decode window), else 'idle' (no "
                    "successful request in flight: its bytes are those of failed requests, "
                    "other work or keep-alives)",
}


def request_timing(requests: pd.DataFrame) -> pd.DataFrame:
    """Compute TTFT, E2E, TPOT, decode speed and ITL for each request (definitions above).

    ``requests``: the successful rows of a ``RequestLog`` (int ns columns ``t_send_ns``,
    ``t_first_ns``, ``t_last_ns``; ``output_tokens``; ``chunk_times``). Returns a DataFrame with
    the same index: ``ttft_s, e2e_s, decode_s, tpot_s, decode_speed_tps, itl_mean_s, n_chunks``.
    TPOT and decode speed are NaN when output_tokens <= 1 or unknown, or the decode window is 0;
    ITL is NaN without chunk times.
    """
    send = requests["t_send_ns"].to_numpy(dtype="int64")
    first = requests["t_first_ns"].to_numpy(dtype="int64")
    last = requests["t_last_ns"].to_numpy(dtype="int64")
    out_tok = requests["output_tokens"].to_numpy(dtype="float64", na_value=np.nan)
    decode_s = (last - first) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        valid = (out_tok > 1) & (decode_s > 0)
        tpot = np.where(valid, decode_s / (out_tok - 1), np.nan)
        speed = np.where(valid, (out_tok - 1) / decode_s, np.nan)
    itl, n_chunks = [], []
    for ch in requests["chunk_times"]:
        if ch is None or len(ch) < 2:
            itl.append(np.nan)
            n_chunks.append(len(ch) if ch is not None else 0)
        else:
            itl.append(float(np.mean(np.diff(np.asarray(ch, dtype=np.int64)))) / 1e9)
            n_chunks.append(len(ch))
    return pd.DataFrame({
        "ttft_s": (first - send) / 1e9,
        "e2e_s": (last - send) / 1e9,
        "decode_s": decode_s,
        "tpot_s": tpot,
        "decode_speed_tps": speed,
        "itl_mean_s": itl,
        "n_chunks": n_chunks,
    }, index=requests.index)


def pooled_itl(requests: pd.DataFrame) -> np.ndarray:
    """Return every chunk gap (s) of every request pooled together (vLLM's ITL population)."""
    gaps = [np.diff(np.asarray(ch, dtype=np.int64)) / 1e9
            for ch in requests["chunk_times"] if ch is not None and len(ch) > 1]
    return np.concatenate(gaps) if gaps else np.array([], dtype=float)


def spread(values: pd.Series | np.ndarray) -> tuple[float, float, float]:
    """Return (mean, min, max) of the finite values (NaN, NaN, NaN when none): the study's form."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return (np.nan, np.nan, np.nan)
    return (float(v.mean()), float(v.min()), float(v.max()))


def spread_name(column: str, which: str) -> str:
    """Name the min/max twin of a metric column, keeping its unit suffix last.

    ``spread_name("ttft_s", "min") == "ttft_min_s"``; units recognised: _s, _tps, _bytes, _gbps.
    """
    for unit in ("_bytes", "_gbps", "_tps", "_s"):
        if column.endswith(unit):
            return f"{column[: -len(unit)]}_{which}{unit}"
    return f"{column}_{which}"
