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
    not a number in [0, 100], for an empty item between commas and for an empty list."""
    out = []
    items = str(text).split(",")
    if any(items) and not all(x.strip() for x in items):
        raise ValueError(f"{text!r}: an empty percentile between commas (expected e.g. 50,95,99)")
    for part in items:
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


def _same_length(lengths: np.ndarray):
    """Populations laid end to end (population i: the next ``lengths[i]`` values), grouped by
    length: yields (the populations of length L, the (m, L) positions of their values)."""
    starts = np.cumsum(lengths) - lengths
    for L in np.unique(lengths[lengths > 0]):
        sel = np.flatnonzero(lengths == L)
        yield sel, starts[sel, None] + np.arange(L)


def _grouped_sum(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``values[...].sum()`` of each population (``_same_length``), 0 where empty."""
    out = np.zeros(len(lengths))
    for sel, at in _same_length(lengths):
        out[sel] = np.sum(values[at], axis=1)
    return out


def _grouped_stats(values: np.ndarray, lengths: np.ndarray, percentiles) -> dict[str, np.ndarray]:
    """mean, std, each percentile and max of many populations at once (``_same_length``: the
    populations of one length are stacked as rows, and numpy reduces along the rows:
    ``np.mean``, ``np.std``, ``np.percentile``, ``np.max`` with ``axis=1``, the same pairwise
    sums and the same interpolation as one call per population, bit for bit; the calls are per
    distinct length). Returns {stat: array (len(lengths),)}, NaN where a population is
    empty."""
    k = len(lengths)
    out = {s: np.full(k, np.nan) for s in ("mean", "std", *map(pct_name, percentiles), "max")}
    for sel, at in _same_length(lengths):
        x = values[at]
        out["mean"][sel] = np.mean(x, axis=1)
        out["std"][sel] = np.std(x, axis=1)
        if len(percentiles):
            for p, v in zip(percentiles, np.percentile(x, list(percentiles), axis=1),
                            strict=True):
                out[pct_name(p)][sel] = v
        out["max"][sel] = np.max(x, axis=1)
    return out


class _Columns:
    """The requests' columns as arrays, read once (a cell is a set of row positions)."""

    def __init__(self, requests: pd.DataFrame, chunk_times: pd.Series):
        self.send = requests["t_send_ns"].to_numpy(np.int64)
        self.last = requests["t_last_ns"].to_numpy(np.int64)
        self.pt = requests["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
        self.ot = requests["output_tokens"].to_numpy(dtype=float, na_value=np.nan)
        self.per = {name: requests[col].to_numpy(dtype=float)
                    for name, col in METRICS.items() if col is not None}
        # every request's chunk gaps laid end to end (request i: gap_len[i] from gap_start[i])
        gaps = [np.diff(np.asarray(ch, dtype=np.int64)) / 1e9
                if ch is not None and len(ch) > 1 else None for ch in chunk_times]
        self.gap_len = np.array([0 if g is None else len(g) for g in gaps], dtype=np.int64)
        self.gap_start = np.cumsum(self.gap_len) - self.gap_len
        self.gap_values = np.concatenate([g for g in gaps if g is not None] or [np.zeros(0)])


def _cells_table(c: _Columns, keys: list[tuple], cells: list[np.ndarray],
                 percentiles) -> pd.DataFrame:
    """The table of ``cell_stats``: one row per cell (``keys``: its scope, test, round;
    ``cells``: its row positions, at least one), every cell's populations at once
    (``_grouped_stats``)."""
    n = np.array([len(p) for p in cells], dtype=np.int64)
    K = len(cells)
    idx = np.concatenate(cells)  # the cells' rows, cell after cell
    cell = np.repeat(np.arange(K), n)
    first = np.cumsum(n) - n
    dur = (np.maximum.reduceat(c.last[idx], first) - np.minimum.reduceat(c.send[idx], first)) / 1e9
    ok = dur > 0
    pt, ot = _grouped_sum(c.pt[idx], n), _grouped_sum(c.ot[idx], n)
    with np.errstate(divide="ignore", invalid="ignore"):
        data = {"scope": [k[0] for k in keys], "test": [k[1] for k in keys],
                "round": [k[2] for k in keys], "n_requests": n, "duration_s": dur,
                "request_throughput_rps": np.where(ok, n / dur, np.nan),
                # unknown token counts make the throughput unknown, never a smaller number
                "output_throughput_tps": np.where(ok, ot / dur, np.nan),
                "total_token_throughput_tps": np.where(ok, (pt + ot) / dur, np.nan)}
    for name, col in METRICS.items():
        if col is None:  # the chunk gaps of the cell's requests, request after request
            ln = c.gap_len[idx]
            at = np.repeat(c.gap_start[idx] - (np.cumsum(ln) - ln), ln) + np.arange(int(ln.sum()))
            x, owner = c.gap_values[at], np.repeat(cell, ln)
        else:
            x, owner = c.per[name][idx], cell
        fin = np.isfinite(x)
        stats = _grouped_stats(x[fin], np.bincount(owner[fin], minlength=K), percentiles)
        for k, v in stats.items():
            data[f"{name}_{k}_s"] = v
    df = pd.DataFrame(data)
    df["round"] = df["round"].astype("Int64")
    return df


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
    by_test = req.groupby("test", sort=False).indices
    by_round = req.groupby(["test", "round"], sort=True).indices
    rounds_of: dict = {}
    for (test, rnd), pos in by_round.items():
        rounds_of.setdefault(test, []).append((rnd, pos))
    keys, cells = [], []
    for test, pos in by_test.items():
        keys.append(("test", test, pd.NA))
        cells.append(np.asarray(pos))
        for rnd, rpos in rounds_of.get(test, []):
            keys.append(("round", test, int(rnd)))
            cells.append(np.asarray(rpos))
    if not cells:
        return pd.DataFrame([])
    return _cells_table(cols, keys, cells, ps)
