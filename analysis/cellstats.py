"""Per-cell statistics of a benchmark: TTFT, TPOT, ITL and E2E latency mean, percentiles and
max, token and request throughput, per test (cell) and per round.

Computed as vLLM computes them (``calculate_metrics`` in ``vllm/benchmarks/serve.py`` of
vllm-project/vllm, read at commit 009e6d4a): over the successful requests of a cell,

- TTFT and E2E latency: one value per request;
- TPOT: ``(latency - ttft) / (output_tokens - 1)`` per request with more than one output token
  (here ``(last token - first token) / (output_tokens - 1)``, ``metrics.request_timing``);
- ITL: every gap between consecutive streamed chunks of every request, pooled;
- mean = ``np.mean``, std = ``np.std`` (population), percentiles = ``np.percentile`` (linear
  interpolation), for each of ``selected_percentiles``; an empty population gives 0 there
  (``np.mean(x or 0)``), here NaN (unknown is never zero);
- request throughput = completed requests / duration; output throughput = output tokens /
  duration; total token throughput = (prompt + output tokens) / duration, where vLLM's duration
  is its benchmark's wall time and here the cell's span, first send to last token.

Warm-up requests (``warmup``) are kept out of every number.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: The percentiles reported unless chosen otherwise (``--percentiles``).
DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)

#: Metric -> (per-request column of the attribution's requests table, or None for the pooled
#: chunk gaps).
METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": None, "e2e": "e2e_s"}


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``"50,95,99"`` -> ``(50.0, 95.0, 99.0)``. Raises ``ValueError`` naming a value that is
    not a number in [0, 100], and for an empty list."""
    out = []
    for part in str(text).split(","):
        p = part.strip()
        if not p:
            continue
        try:
            v = float(p)
        except ValueError:
            raise ValueError(f"percentile {p!r} is not a number (expected e.g. 50,95,99)") \
                from None
        if not 0 <= v <= 100:
            raise ValueError(f"percentile {p} is outside 0..100")
        out.append(v)
    if not out:
        raise ValueError("no percentile given (expected e.g. 50,95,99)")
    return tuple(dict.fromkeys(out))


def pct_name(p: float) -> str:
    """Column infix of a percentile: 50 -> "p50", 99.9 -> "p99.9"."""
    return f"p{p:g}"


def _population_stats(x: np.ndarray, percentiles) -> dict[str, float]:
    x = x[np.isfinite(x)]
    if not len(x):
        return {"mean": np.nan, "std": np.nan, **{pct_name(p): np.nan for p in percentiles},
                "max": np.nan}
    q = np.percentile(x, list(percentiles)) if len(percentiles) else []
    return {"mean": float(np.mean(x)), "std": float(np.std(x)),
            **{pct_name(p): float(v) for p, v in zip(percentiles, q, strict=True)},
            "max": float(np.max(x))}


class _Columns:
    """The requests' columns as arrays, read once (a cell is a set of row positions)."""

    def __init__(self, requests: pd.DataFrame, chunk_times: pd.Series):
        self.send = requests["t_send_ns"].to_numpy(np.int64)
        self.last = requests["t_last_ns"].to_numpy(np.int64)
        self.pt = requests["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
        self.ot = requests["output_tokens"].to_numpy(dtype=float, na_value=np.nan)
        self.per = {name: requests[col].to_numpy(dtype=float)
                    for name, col in METRICS.items() if col is not None}
        self.gaps = [np.diff(np.asarray(ch, dtype=np.int64)) / 1e9
                     if ch is not None and len(ch) > 1 else None for ch in chunk_times]


def _one_cell(c: _Columns, pos: np.ndarray, percentiles) -> dict[str, float]:
    dur = (int(c.last[pos].max()) - int(c.send[pos].min())) / 1e9 if len(pos) else np.nan
    pt, ot = c.pt[pos], c.ot[pos]
    out: dict[str, float] = {"n_requests": len(pos), "duration_s": dur}
    ok = dur > 0
    out["request_throughput_rps"] = len(pos) / dur if ok else np.nan
    # unknown token counts make the throughput unknown, never a smaller number
    out["output_throughput_tps"] = float(ot.sum()) / dur if ok else np.nan
    out["total_token_throughput_tps"] = float(pt.sum() + ot.sum()) / dur if ok else np.nan
    for name, col in METRICS.items():
        if col is None:
            gaps = [c.gaps[i] for i in pos if c.gaps[i] is not None]
            x = np.concatenate(gaps) if gaps else np.zeros(0)
        else:
            x = c.per[name][pos]
        for k, v in _population_stats(x, percentiles).items():
            out[f"{name}_{k}_s"] = v
    return out


def cell_stats(requests: pd.DataFrame, chunk_times: pd.Series,
               percentiles=DEFAULT_PERCENTILES) -> pd.DataFrame:
    """Statistics per test over its measured rounds (``round`` NA, ``scope`` "test") and per
    (test, round) (``scope`` "round"), as vLLM's ``calculate_metrics`` (module docstring).

    ``requests``: the attribution's per-request table (``test, round, warmup, t_send_ns,
    t_last_ns, prompt_tokens, output_tokens, ttft_s, tpot_s, e2e_s``); ``chunk_times``: the
    requests' chunk arrival times (int ns lists or None), same index. Returns one row per cell:
    ``scope, test, round, n_requests, duration_s, request_throughput_rps,
    output_throughput_tps, total_token_throughput_tps`` and for each metric m of ttft, tpot,
    itl, e2e: ``m_mean_s, m_std_s, m_p<P>_s`` for each percentile, ``m_max_s`` (seconds; NaN
    where the population is empty). Warm-up requests are left out; a round of warm-up only has
    no row. Cost: one pass over the requests plus the cells' populations.
    """
    ps = tuple(float(p) for p in percentiles)
    keep = ~requests["warmup"].to_numpy(dtype=bool) if "warmup" in requests.columns else \
        np.ones(len(requests), bool)
    req = requests[keep].reset_index(drop=True)
    cols = _Columns(req, chunk_times[keep].reset_index(drop=True))
    rows = []
    by_test = req.groupby("test", sort=False).indices
    by_round = req.groupby(["test", "round"], sort=True).indices
    rounds_of: dict = {}
    for (test, rnd), pos in by_round.items():
        rounds_of.setdefault(test, []).append((rnd, pos))
    for test, pos in by_test.items():
        rows.append({"scope": "test", "test": test, "round": pd.NA,
                     **_one_cell(cols, np.asarray(pos), ps)})
        for rnd, rpos in rounds_of.get(test, []):
            rows.append({"scope": "round", "test": test, "round": int(rnd),
                         **_one_cell(cols, np.asarray(rpos), ps)})
    df = pd.DataFrame(rows)
    if len(df):
        df["round"] = df["round"].astype("Int64")
    return df
