"""vLLM ``bench serve --save-result --save-detailed`` results (parallel per-request arrays, one
JSON object per run; ``--append-result`` appends runs). TensorRT-LLM's ``benchmark_serving.py``
writes the same arrays with ``e2els``; SGLang's (``sglang.py``) is read by the same code."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .checks import check_itls
from .common import (
    CLOCK_MONOTONIC,
    CLOCK_RELATIVE,
    RequestLogError,
    _arr,
    _int,
    _num,
    _record,
    _s_to_ns,
)
from .jsonwalk import _json_sequence

#: Run metadata shown per run, as the tools name it (vLLM ``bench serve``; SGLang
#: ``bench_serving``); the first present are shown.
_RUN_META_KEYS = ("tag", "date", "backend", "model_id", "dataset_name", "request_rate",
                  "max_concurrency", "num_prompts", "random_input_len", "random_output_len")


def _run_label(k: int, d: dict) -> dict[str, Any]:
    meta = {key: (str(d[key]) if isinstance(d[key], float) and not math.isfinite(d[key])
                  else d[key]) for key in _RUN_META_KEYS if d.get(key) not in (None, "")}
    text = f"run {k}" + (" (" + ", ".join(f"{key}={v}" for key, v in meta.items()) + ")"
                         if meta else "")
    return {"run": k, "label": text, "meta": meta}


def _read_vllm(path: Path, data: dict, *, run: int = 1, n_runs: int = 1, tool: str = "vllm"):
    """Read one run of vLLM ``bench serve`` (or SGLang ``bench_serving``) parallel arrays."""
    name = "an SGLang bench_serving" if tool == "sglang" else "a vLLM"
    ctx = f"run {run}: " if n_runs > 1 else ""
    n_key = "ttfts"
    lat_key = "latencies" if "latencies" in data else ("e2els" if "e2els" in data else None)
    for k in ("input_lens", "output_lens", "ttfts"):
        if k not in data:
            raise RequestLogError(path, f"{ctx}missing (required for {name} result)", field=k)
        _arr(path, None, k, data[k])
    n = len(data[n_key])
    arrays = {k: data[k] for k in ("input_lens", "output_lens", "ttfts", "itls", "errors",
                                   "start_times") if k in data and data[k] is not None}
    if lat_key:
        arrays[lat_key] = data[lat_key]
    for k, v in arrays.items():
        if not isinstance(v, list) or len(v) != n:
            raise RequestLogError(path, f"{ctx}has {len(v) if isinstance(v, list) else 'no'} "
                                        f"entries, expected {n} (one per request, like 'ttfts')",
                                  field=k)
    notes = []
    starts = arrays.get("start_times")
    if starts is not None:
        clock = CLOCK_MONOTONIC
        prev = None
        for i, s in enumerate(starts):
            x = _num(path, i + 1, "start_times", s)
            if prev is not None and x < prev:
                raise RequestLogError(path, f"{ctx}start time {x} is before the previous "
                                            f"request's {prev} (entries are in dispatch order)",
                                      row=i + 1, field="start_times")
            prev = x
    else:
        rate = data.get("request_rate", "inf")
        conc = data.get("max_concurrency")
        if conc is not None:
            conc = _num(path, None, "max_concurrency", conc)
        if str(rate).lower() not in ("inf", "infinity", "none") or (conc is not None
                                                                   and conc < n):
            how = ("re-run with a vLLM that saves start_times, or use the native format"
                   if tool == "vllm" else "SGLang saves no send times; use the native format "
                   "or request_rate=inf with all requests in flight at once")
            raise RequestLogError(
                path, f"{ctx}has no per-request send times and the requests were not all sent "
                      f"at once (request_rate={rate!r}, max_concurrency={conc!r}); {how}",
                field="start_times")
        clock = CLOCK_RELATIVE
        notes.append(f"{ctx}no start_times: all requests placed as sent together at t=0 "
                     "(request_rate=inf); times are relative")
    errors = arrays.get("errors") or [""] * n
    itls = arrays.get("itls")
    src = ("tool field output_lens (SGLang: the server's completion_tokens, else retokenized)"
           if tool == "sglang" else "tool field output_lens")
    records = []
    prefix = f"run{run}-" if n_runs > 1 else ""
    test = f"run {run}" if n_runs > 1 else None
    for i in range(n):
        row = i + 1
        ok = not errors[i]
        t0 = _s_to_ns(_num(path, row, "start_times", starts[i])) if starts is not None else 0
        common = {"row": row, "run": run, "test": test, "token_source": src}
        if not ok:
            records.append(_record(f"{prefix}{i}", t0, None, None,
                                   _int(path, row, "input_lens", data["input_lens"][i]),
                                   None, ok=False, error=str(errors[i]), **common))
            continue
        ttft = _num(path, row, "ttfts", data["ttfts"][i])
        output = _int(path, row, "output_lens", data["output_lens"][i])
        prompt = _int(path, row, "input_lens", data["input_lens"][i])
        gaps = [_num(path, row, "itls", g) for g in (_arr(path, row, "itls", itls[i],
                                                          allow_none=True) or [])] \
            if itls is not None else None
        if ttft == 0 and not output and not gaps:
            # vLLM before PR 5895 kept failed requests with an empty error: TTFT 0, no output
            records.append(_record(f"{prefix}{i}", t0, None, None, prompt, output, ok=False,
                                   error="failed: TTFT 0 s and 0 output tokens with an empty "
                                         "error (a failed request as vLLM before PR 5895 "
                                         "stored it)", **common))
            continue
        t_first = t0 + _s_to_ns(ttft)
        chunks = None
        if gaps is not None:
            cum = np.cumsum(gaps) if gaps else []
            chunks = [t_first] + [t_first + _s_to_ns(c) for c in cum]
        if lat_key:
            t_last = t0 + _s_to_ns(_num(path, row, lat_key, arrays[lat_key][i]))
        elif chunks is not None:
            t_last = chunks[-1]
        else:
            raise RequestLogError(path, f"{ctx}missing: neither latencies nor itls to place the "
                                        "last token", row=row, field="latencies")
        check, fix = "", None
        lat = _num(path, row, lat_key, arrays[lat_key][i]) if lat_key else None
        found = check_itls(ttft, gaps, output, lat) if gaps is not None else None
        if found is not None:
            check, kind, ttft2, gaps2 = found
            if ttft2 is not None:
                f_first = t0 + _s_to_ns(ttft2)
                f_chunks = [f_first] + [f_first + _s_to_ns(c) for c in np.cumsum(gaps2)]
                fix = {"kind": kind, "t_first_ns": f_first, "chunk_times": f_chunks,
                       "t_last_ns": t_last if lat_key else f_chunks[-1]}
        records.append(_record(f"{prefix}{i}", t0, t_first, t_last, prompt, output,
                               chunks=chunks, check=check, fix=fix, **common))
    return records, clock, notes


def _details(d: dict) -> dict:
    """The per-request arrays of one run: top level (vLLM, SGLang <= 0.5) or ``details`` (SGLang
    ``sglang.benchmark``)."""
    det = d.get("details")
    if isinstance(det, dict) and "ttfts" in det:
        return {**{k: v for k, v in d.items() if k != "details"}, **det}
    return d


def _read_runs(path: Path, text: str, tool: str):
    """Read every run of a vLLM / SGLang result file (one JSON object per run)."""
    cut: list[str] = []  # a last run the file ends inside (killed while appending it)
    objs = _json_sequence(path, text, cut)
    if not objs:
        raise RequestLogError(path, "holds no requests")
    records, clocks, notes, runs = [], set(), [], []
    for k, (line, d) in enumerate(objs, start=1):
        if not isinstance(d, dict):
            raise RequestLogError(path, f"expected a JSON object per run, got "
                                        f"{type(d).__name__}", row=line)
        d = _details(d)
        if "ttfts" not in d and _is_bench_summary(d):
            raise RequestLogError(path, f"run {k} (line {line}): {_no_details_message(d, tool)}",
                                  row=line)
        recs, clock, nts = _read_vllm(path, d, run=k, n_runs=len(objs), tool=tool)
        records += recs
        clocks.add(clock)
        notes += nts
        runs.append(_run_label(k, d))
    if len(clocks) > 1:
        raise RequestLogError(path, "runs use different clocks (some have start_times, some do "
                                    "not); split the file, one run per file", field="start_times")
    if len(runs) > 1:
        notes.insert(0, f"{len(runs)} runs in one file: " + "; ".join(r["label"] for r in runs))
    return records, clocks.pop(), cut + notes, runs


def _no_details_message(d: dict, tool: str) -> str:
    if tool == "sglang":
        return ("an SGLang bench_serving result without per-request arrays (ttfts, itls, ...): "
                "re-run bench_serving with --output-details")
    return ("a vLLM bench serve result without per-request arrays (ttfts, itls, ...): it was "
            "saved without --save-detailed; re-run with --save-result --save-detailed")


def _is_bench_summary(d: dict) -> bool:
    """A vLLM / SGLang result object with aggregates only (``mean_ttft_ms`` ...)."""
    return "ttfts" not in d and "mean_ttft_ms" in d


def read(path: Path, text: str):
    """The ``vllm`` entry of the format table."""
    return _read_runs(path, text, "vllm")
