"""Write large request logs in the tools' own layouts, for ``bench_attribute.py`` and tests.

``write(path, fmt, n, t0_s, t1_s)`` writes ``n`` requests sent evenly over [t0_s, t1_s)
(CLOCK_MONOTONIC seconds; a busy server: requests overlap) in one of the formats
``rdmascope.analysis.requestlogs`` reads: ``native`` (JSONL), ``native-csv``, ``vllm``
(``bench serve --save-detailed``: start_times, ttfts, itls, latencies), ``sglang`` (one JSON line,
relative), ``genai-perf`` (SSE responses with usage, epoch ns: ``realtime_minus_mono_ns`` is
added), ``inference-perf`` (``chunk_times`` on perf_counter). Every 500th request failed (the
tool's error), every 700th request has no output/invalid values of its format so that per-row
validation runs on every path. Deterministic for a seed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

FORMATS = ("native", "native-csv", "vllm", "sglang", "genai-perf", "inference-perf")


def requests(n: int, t0_s: float, t1_s: float, *, seed: int = 7, tokens: int = 16):
    """Per request: send (s), TTFT (s), ITLs (s, ``tokens`` - 1 of them), prompt tokens."""
    rng = np.random.default_rng(seed)
    send = t0_s + (t1_s - t0_s) * np.arange(n) / n + rng.uniform(0, 0.01, n)
    ttft = rng.uniform(0.02, 0.12, n)
    itl = rng.uniform(0.005, 0.03, (n, tokens - 1))
    prompt = rng.integers(1, 16, n) * 512
    return send, ttft, itl, prompt


def closed_loop(n: int, t0_s: float, t1_s: float, concurrency: int, *, seed: int = 7,
                tokens: int = 16):
    """``requests`` of a closed-loop benchmark: ``concurrency`` clients each send their next
    request when the previous one ends, ``n`` requests in all over [t0_s, t1_s) (each lasts
    about concurrency x (t1_s - t0_s) / n: heavy overlap, every instant ``concurrency`` in
    flight). TTFT a third of a request, the decode the rest (``tokens`` - 1 gaps)."""
    rng = np.random.default_rng(seed)
    per = n // concurrency + (np.arange(concurrency) < n % concurrency)
    mean = concurrency * (t1_s - t0_s) / n
    send, ttft, itl = [], [], []
    for c in range(concurrency):
        dur = mean * rng.uniform(0.8, 1.0, per[c])
        dur *= (t1_s - t0_s) / max(dur.sum(), 1e-9) * 0.995  # the client's requests fit
        start = t0_s + rng.uniform(0, 0.005) + np.concatenate([[0.0], np.cumsum(dur)[:-1]])
        f = rng.uniform(0.2, 0.4, per[c])
        send.append(start)
        ttft.append(dur * f)
        gaps = rng.uniform(0.5, 1.5, (per[c], tokens - 1))
        itl.append(gaps / gaps.sum(axis=1, keepdims=True) * (dur * (1 - f) * 0.999)[:, None])
    order = np.argsort(np.concatenate(send), kind="stable")
    prompt = rng.integers(1, 16, n) * 512
    return (np.concatenate(send)[order], np.concatenate(ttft)[order],
            np.concatenate(itl)[order], prompt)


def write(path: str | Path, fmt: str, n: int, t0_s: float, t1_s: float, *, seed: int = 7,
          tokens: int = 16, realtime_minus_mono_ns: int = 0,
          concurrency: int | None = None) -> Path:
    """Write ``n`` requests as ``fmt`` to ``path``; return the path. ``concurrency``: a
    closed loop of that many clients (``closed_loop``) instead of sends spread evenly."""
    path = Path(path)
    if concurrency:
        send, ttft, itl, prompt = closed_loop(n, t0_s, t1_s, concurrency, seed=seed,
                                              tokens=tokens)
    else:
        send, ttft, itl, prompt = requests(n, t0_s, t1_s, seed=seed, tokens=tokens)
    lat = ttft + itl.sum(axis=1)
    failed = (np.arange(n) % 500) == 499
    if fmt in ("native", "native-csv"):
        rows = []
        for i in range(n):
            r = {"request_id": f"r{i}", "t_send": round(float(send[i]), 6),
                 "t_first_token": round(float(send[i] + ttft[i]), 6),
                 "t_last_token": round(float(send[i] + lat[i]), 6),
                 "prompt_tokens": int(prompt[i]), "output_tokens": tokens,
                 "clock": "CLOCK_MONOTONIC"}
            if failed[i]:
                r["error"] = "HTTP 500"
            elif i % 700 == 3:  # last token before the first: fails alone, invalid
                r["t_last_token"] = r["t_send"]
            rows.append(r)
        if fmt == "native":
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, ["request_id", "t_send", "t_first_token", "t_last_token",
                                       "prompt_tokens", "output_tokens", "clock", "error"])
                w.writeheader()
                w.writerows(rows)
        return path
    if fmt in ("vllm", "sglang"):
        d = {"backend": fmt, "request_rate": "inf", "max_concurrency": None,
             "input_lens": prompt.tolist(), "output_lens": [tokens] * n,
             "ttfts": ttft.round(6).tolist(), "itls": itl.round(6).tolist(),
             "errors": ["HTTP 500" if f else "" for f in failed]}
        for i in np.flatnonzero(failed):
            d["ttfts"][i], d["itls"][i], d["output_lens"][i] = 0.0, [], 0
        if fmt == "vllm":
            d["start_times"] = send.round(6).tolist()
            d["latencies"] = lat.round(6).tolist()
            for i in range(3, n, 700):  # TTFT repeated as the first ITL (vLLM 7242): a check
                d["itls"][i] = [d["ttfts"][i]] + d["itls"][i][1:]
                d["latencies"][i] = round(d["ttfts"][i] + sum(d["itls"][i]), 6)
            path.write_text(json.dumps(d))
        else:
            path.write_text(json.dumps(d) + "\n")
        return path
    if fmt == "genai-perf":
        reqs = []
        for i in range(n):
            ts = int(round(send[i] * 1e9)) + realtime_minus_mono_ns
            r: dict = {"timestamp": ts, "request_inputs": {"payload": "{}"}}
            if failed[i]:
                r.update(response_timestamps=[], response_outputs=[], error="HTTP 500")
                reqs.append(r)
                continue
            t_tok = ts + np.concatenate([[0], np.cumsum(itl[i])]) * 1e9 + ttft[i] * 1e9
            stamps = [int(round(ts + 0.005e9))] + [int(round(x)) for x in t_tok]
            outs = [{"response": 'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}'
                                 "\n\n"}]
            outs += [{"response": "data: " + json.dumps(
                {"choices": [{"index": 0, "delta": {"content": f"t{k}"}}]}) + "\n\n"}
                for k in range(tokens)]
            stamps.append(stamps[-1] + 100_000)
            outs.append({"response": "data: " + json.dumps(
                {"choices": [], "usage": {"prompt_tokens": int(prompt[i]),
                                          "completion_tokens": tokens}}) + "\n\n"})
            stamps.append(stamps[-1] + 100_000)
            outs.append({"response": "data: [DONE]\n\n"})
            r.update(response_timestamps=stamps, response_outputs=outs)
            reqs.append(r)
        path.write_text(json.dumps({"experiments": [{"experiment": {"mode": "concurrency",
                                                                    "value": 64},
                                                     "requests": reqs}],
                                    "version": "0.0.8", "service_kind": "openai"}))
        return path
    if fmt == "inference-perf":
        out = []
        for i in range(n):
            chunks = (send[i] + ttft[i] + np.concatenate([[0], np.cumsum(itl[i])])).round(6)
            r = {"start_time": round(float(send[i]), 6), "end_time": float(chunks[-1]),
                 "request": "{}", "response": "...",
                 "info": {"input_tokens": int(prompt[i]),
                          "response_metrics": {"output_tokens": tokens,
                                               "chunk_times": chunks.tolist()}},
                 "error": None}
            if failed[i]:
                r["error"] = {"error_type": "HTTP 500", "error_msg": "HTTP 500"}
            elif i % 700 == 3:  # streamed, no chunk times: fails alone
                r["info"]["response_metrics"]["chunk_times"] = []
            out.append(r)
        path.write_text(json.dumps(out))
        return path
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


if __name__ == "__main__":
    import sys

    write(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
