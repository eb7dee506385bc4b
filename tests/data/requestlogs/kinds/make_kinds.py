"""Write the request logs of this directory from the demo capture's own request log.

Run from the repository root: ``python tests/data/requestlogs/kinds/make_kinds.py``. Every file
is placed on ``tests/data/requestlogs/cases/demo16_capture`` (P1 and P2 of its
``requests.jsonl``), in the layout of the tool named in the README beside it; the tests derive
the right values from the same ``requests.jsonl``, never from these files.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAP = HERE.parent / "cases" / "demo16_capture"
EPOCH = 1_767_222_000  # realtime - monotonic of the capture's clock pairs (s)


def ref():
    rows = [json.loads(x) for x in (CAP / "requests.jsonl").read_text().splitlines() if x.strip()]
    out = {}
    for r in rows:
        n = r["output_tokens"]
        step = (r["t_last_token"] - r["t_first_token"]) / (n - 1)
        r["tokens"] = [r["t_first_token"] + k * step for k in range(n)]
        out[r["test"]] = r
    return out


def ns(t_mono_s: float) -> int:
    """Monotonic seconds -> epoch ns (as perf_analyzer stamps them)."""
    return int(round((t_mono_s + EPOCH) * 1e9))


def chunk(delta: dict | None = None, *, finish=None, choices=True, usage=None) -> str:
    d = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1767225601,
         "model": "org/model-70b"}
    if choices:
        d["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None,
                         "finish_reason": finish}]
    else:
        d["choices"] = []
    if usage:
        d["usage"] = usage
    return "data: " + json.dumps(d, separators=(",", ":")) + "\n\n"


WORDS = [" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", " and",
         " runs", " into", " the", " green", " forest", "."]


def genai_perf_reasoning(R) -> dict:
    p1, p2 = R["P1"], R["P2"]
    # P1: role-only delta 5 ms after the send, a keep-alive comment, 16 content chunks (chunk 3
    # split over two reads; chunks 7 and 8 merged into one read at chunk 8's time), a
    # finish-only chunk, a usage-only chunk, [DONE]
    reads = [(p1["t_send"] + 0.005, chunk({"role": "assistant", "content": ""})),
             (p1["t_send"] + 0.100, ": keep-alive\n\n")]
    for k, t in enumerate(p1["tokens"]):
        c = chunk({"content": WORDS[k]})
        if k == 3:
            reads += [(t - 0.0002, c[:40]), (t, c[40:])]
        elif k == 7:
            continue
        elif k == 8:
            reads.append((t, chunk({"content": WORDS[7]}) + c))
        else:
            reads.append((t, c))
    last = p1["tokens"][-1]
    reads += [(last + 0.0001, chunk({}, finish="stop")),
              (last + 0.0002, chunk(choices=False,
                                    usage={"prompt_tokens": 1024, "completion_tokens": 16})),
              (last + 0.0003, "data: [DONE]\n\n")]
    # P2: a reasoning model: role-only at 3.2 s, 6 reasoning_content chunks, an empty-content
    # and a null-content chunk, 10 answer chunks, usage, [DONE]
    reads2 = [(p2["t_send"] + 3.2, chunk({"role": "assistant", "content": ""}))]
    for k, t in enumerate(p2["tokens"]):
        if k < 6:
            reads2.append((t, chunk({"reasoning_content": f" step{k}"})))
        else:
            if k == 6:
                reads2 += [(t - 0.001, chunk({"content": ""})),
                           (t - 0.0005, chunk({"content": None}))]
            reads2.append((t, chunk({"content": WORDS[k]})))
    last = p2["tokens"][-1]
    reads2 += [(last + 0.0002, chunk(choices=False,
                                     usage={"prompt_tokens": 8192, "completion_tokens": 16})),
               (last + 0.0003, "data: [DONE]\n\n")]
    reqs = []
    for p, rd in ((p1, reads), (p2, reads2)):
        reqs.append({"timestamp": ns(p["t_send"]),
                     "request_inputs": {"payload": "{\"stream\":true}"},
                     "response_timestamps": [ns(t) for t, _ in rd],
                     "response_outputs": [{"response": txt} for _, txt in rd]})
    return {"experiments": [{"experiment": {"mode": "concurrency", "value": 1},
                             "requests": reqs}], "version": "0.0.8"}


def genai_perf_error(R) -> dict:
    """P1 streams fine; P2 gets 5 tokens, then an in-band error event (vLLM EngineCore)."""
    reqs = []
    for name in ("P1", "P2"):
        p = R[name]
        toks = p["tokens"] if name == "P1" else p["tokens"][:5]
        rd = [(t, chunk({"content": WORDS[k]})) for k, t in enumerate(toks)]
        if name == "P1":
            rd.append((toks[-1] + 0.0002, chunk(choices=False, usage={
                "prompt_tokens": 1024, "completion_tokens": 16})))
        else:
            rd.append((toks[-1] + 0.05, "data: " + json.dumps({"error": {
                "message": "EngineCore encountered an issue.", "type": "InternalServerError",
                "code": 500}}) + "\n\n"))
        reqs.append({"timestamp": ns(p["t_send"]), "response_timestamps": [ns(t) for t, _ in rd],
                     "response_outputs": [{"response": x} for _, x in rd]})
    return {"experiments": [{"requests": reqs}]}


def vllm_inconsistent(R) -> dict:
    """vLLM bench serve --save-detailed (start_times, latencies): P1 with the TTFT repeated as
    its first ITL (vLLM issue 7242), P2 with the TTFT taken at a role-only chunk 3.2 s after
    the send (vLLM issue 15106)."""
    p1, p2 = R["P1"], R["P2"]
    g1 = [b - a for a, b in zip(p1["tokens"], p1["tokens"][1:], strict=False)]
    g2 = [b - a for a, b in zip(p2["tokens"], p2["tokens"][1:], strict=False)]
    ttft1 = p1["t_first_token"] - p1["t_send"]
    ttft2_bad = 3.2
    return {"date": "20260101-000000", "backend": "openai-chat", "model_id": "org/model-70b",
            "request_rate": "inf", "max_concurrency": None, "num_prompts": 2,
            "start_times": [p1["t_send"], p2["t_send"]], "input_lens": [1024, 8192],
            "output_lens": [16, 16], "ttfts": [ttft1, ttft2_bad],
            "itls": [[ttft1] + g1, [p2["t_first_token"] - p2["t_send"] - ttft2_bad] + g2],
            "latencies": [p1["t_last_token"] - p1["t_send"], p2["t_last_token"] - p2["t_send"]],
            "errors": ["", ""], "mean_ttft_ms": 0.0}


def native_bad_rows(R, cap_end_s: float) -> str:
    p1, p2 = R["P1"], R["P2"]
    hdr = "request_id,t_send,t_first_token,t_last_token,prompt_tokens,output_tokens,clock\n"
    rows = [("P1", p1["t_send"], p1["t_first_token"], p1["t_last_token"], 1024, 16),
            ("ttft0", 3601.0, 3601.0, 3601.2, 1024, 16),
            ("backwards", 3601.0, 3601.5, 3601.4, 1024, 16),
            ("P2-past-end", p2["t_send"], p2["t_first_token"], cap_end_s + 2.0, 8192, 16)]
    return hdr + "".join(f"{a},{b!r},{c!r},{d!r},{e},{f},CLOCK_MONOTONIC\n"
                         for a, b, c, d, e, f in rows)


def native_epoch(R) -> str:
    p1 = R["P1"]
    d = {"request_id": "P1", "t_send": p1["t_send"] + EPOCH,
         "t_first_token": p1["t_first_token"] + EPOCH, "t_last_token": p1["t_last_token"] + EPOCH,
         "prompt_tokens": 1024, "output_tokens": 16}
    return json.dumps(d) + "\n"


def sglang_runs(R) -> str:
    """Two runs appended by SGLang bench_serving --output-details: run 1 (P1) in the flat layout
    of ``python -m sglang.bench_serving`` (result | details at the top level), run 2 (P2) in the
    ``details`` layout of ``sglang.benchmark``. Relative times (TTFT, per-token ITLs)."""
    lines = []
    for k, name in enumerate(("P1", "P2"), start=1):
        p = R[name]
        gaps = [b - a for a, b in zip(p["tokens"], p["tokens"][1:], strict=False)]
        head = {"tag": None, "backend": "sglang-oai-chat", "dataset_name": "random",
                "request_rate": float("inf"), "max_concurrency": None,
                "sharegpt_output_len": None, "random_input_len": p["prompt_tokens"],
                "random_output_len": 16, "random_range_ratio": 0.0, "server_info": None,
                "duration": p["t_last_token"] - p["t_send"], "completed": 1,
                "mean_ttft_ms": (p["t_first_token"] - p["t_send"]) * 1e3}
        det = {"input_lens": [p["prompt_tokens"]], "output_lens": [16],
               "ttfts": [p["t_first_token"] - p["t_send"]], "itls": [gaps],
               "generated_texts": ["".join(WORDS)], "errors": [""]}
        if k == 1:
            lines.append(json.dumps({**head, **det}))
        else:
            lines.append(json.dumps({**head, "details": {**det, "expected_output_lens": [16]}}))
    return "\n".join(lines) + "\n"


def llmperf(R) -> list:
    """ray-project/llmperf token_benchmark_ray.py *_individual_responses.json: one request (P1),
    relative to its own start."""
    p = R["P1"]
    return [{"error_code": None, "error_msg": "",
             "inter_token_latency_s": (p["t_last_token"] - p["t_send"]) / 16,
             "ttft_s": p["t_first_token"] - p["t_send"],
             "end_to_end_latency_s": p["t_last_token"] - p["t_send"] + 0.0003,
             "request_output_throughput_token_per_s": 16 / (p["t_last_token"] - p["t_send"]),
             "number_total_tokens": 1040, "number_output_tokens": 16,
             "number_input_tokens": 1024}]


def llmperf_two(R) -> list:
    one = llmperf(R)[0]
    bad = {"error_code": 500, "error_msg": "Internal Server Error", "inter_token_latency_s": 0,
           "ttft_s": 0, "end_to_end_latency_s": 0, "request_output_throughput_token_per_s": 0,
           "number_total_tokens": 1024, "number_output_tokens": 0, "number_input_tokens": 1024}
    return [one, dict(one), bad]


def _rows() -> list:
    return [json.loads(x) for x in (CAP / "requests.jsonl").read_text().splitlines() if x]


def vllm_multiturn() -> str:
    """vLLM benchmarks/multi_turn raw data CSV (RequestStats rows, CLOCK_MONOTONIC ms); P1 with a
    3-token first chunk, its TTFT moved back by 2 x tpot_ms as process_statistics does."""
    lines = ["ttft_ms,tpot_ms,latency_ms,start_time_ms,input_num_turns,input_num_tokens,"
             "output_num_tokens,output_num_chunks,output_num_first_chunk_tokens,"
             "approx_cached_percent,conversation_id,client_id,end_time_ms"]
    for k, r in enumerate(_rows()):
        ttft = (r["t_first_token"] - r["t_send"]) * 1e3
        lat = (r["t_last_token"] - r["t_send"]) * 1e3
        tpot = (lat - ttft) / (r["output_tokens"] - 1)
        first_k = 3 if k == 0 else 1
        shown = max(0.1, ttft - (first_k - 1) * tpot)
        lines.append(f"{shown!r},{tpot!r},{lat!r},{r['t_send'] * 1e3!r},1,{r['prompt_tokens']},"
                     f"{r['output_tokens']},{r['output_tokens'] - first_k},{first_k},0.0,"
                     f"conv{k},0,{(r['t_send'] * 1e3 + lat)!r}")
    return "\n".join(lines) + "\n"


def trtllm_bench() -> list:
    """trtllm-bench per-request records (RequestRecord.model_dump + output_tokens, ns on
    perf_counter_ns = CLOCK_MONOTONIC): P1, P2, one not streamed (first token -1), one with
    error tokens."""
    recs = []
    for k, r in enumerate(_rows()):
        s, f, la = (int(round(r[c] * 1e9)) for c in ("t_send", "t_first_token", "t_last_token"))
        recs.append({"id": k, "num_input_tokens": r["prompt_tokens"], "error_tokens": 0,
                     "start_timestamp": s, "first_token_timestamp": f, "end_timestamp": la,
                     "decode_iteration": r["output_tokens"] - 1, "output": "...",
                     "output_tokens": r["output_tokens"], "time_to_first_token": f - s,
                     "end_to_end_latency": la - s})
    recs.append({**recs[0], "id": 7, "first_token_timestamp": -1})
    recs.append({**recs[0], "id": 8, "error_tokens": 2})
    return recs


def fmperf_record(wid, ridx, k, t_s, prev_s, n, *, users=2, ok=True, error=None, text="x",
                  finish=None, exclude=False) -> dict:
    """One fmperf response record as fmperf/loadgen/run.py writes it (vLLM target: ``response``
    is the token's choice dict; ``timestamp`` time.time_ns(); ``duration_ms`` since the previous
    record of the request, the first since the send; ``error`` is str(None) when ok)."""
    return {"response": None if not ok else {"index": 0, "text": text, "logprobs": None,
                                              "finish_reason": finish, "stop_reason": None},
            "ok": ok, "error": str(error), "timestamp": ns(t_s), "exp_num_users": users,
            "exp_duration": 60.0, "duration_ms": (ns(t_s) - ns(prev_s)) / 1000.0 / 1000.0,
            "exclude": exclude, "worker_idx": wid, "request_idx": ridx, "sample_idx": 3 * wid + ridx,
            "response_idx": k, "n_tokens": n, "consistent": ok}


def fmperf_vllm(R) -> dict:
    """fmperf ``run()`` results file ({"results", "energy"}), vLLM target (one record per token, a
    chunk's tokens at its time with duration 0): P1 (worker 0) with a 3-token first chunk, P2
    (worker 1), a request whose stream broke after 2 tokens (worker 0, failed) and one that ran
    past duration + grace (worker 1, its last 2 records exclude)."""
    out = []

    def request(wid, ridx, send, chunks, exclude_from=None):
        prev, k = send, 0
        for t, n in chunks:
            for i in range(n):
                last = (t, n) == chunks[-1] and i == n - 1
                out.append(fmperf_record(wid, ridx, k, t, prev, 1, text="" if i < n - 1 else "w",
                                         finish="length" if last else None,
                                         exclude=exclude_from is not None and k >= exclude_from))
                prev, k = t, k + 1
        return prev, k

    p1, p2 = R["P1"], R["P2"]
    request(0, 0, p1["t_send"], [(p1["tokens"][0], 3)] + [(t, 1) for t in p1["tokens"][3:]])
    request(1, 0, p2["t_send"], [(t, 1) for t in p2["tokens"]])
    end1 = p1["tokens"][-1]
    prev, k = request(0, 1, end1 + 0.001, [(end1 + 0.2, 1), (end1 + 0.25, 1)])
    out.append(fmperf_record(0, 1, k, end1 + 0.3, prev, 0, ok=False,
                             error="('Connection broken: IncompleteRead(0 bytes read)', "
                                   "IncompleteRead(0 bytes read))"))
    end2 = p2["tokens"][-1]
    request(1, 1, end2 + 0.001, [(end2 + 0.3 + 0.02 * i, 1) for i in range(4)], exclude_from=2)
    return {"results": out, "energy": {}}


def main() -> None:
    R = ref()
    man = json.loads((CAP / "manifest.json").read_text())
    cap_end_s = man["stop"]["monotonic_ns"] / 1e9
    out = {
        "genai_perf_reasoning_sse.json": json.dumps(genai_perf_reasoning(R), indent=1),
        "genai_perf_error_event.json": json.dumps(genai_perf_error(R), indent=1),
        "vllm_bench_serve_inconsistent.json": json.dumps(vllm_inconsistent(R)),
        "native_bad_rows.csv": native_bad_rows(R, cap_end_s),
        "vllm_multiturn_raw_data.csv": vllm_multiturn(),
        "trtllm_bench_request_info.json": json.dumps(trtllm_bench(), indent=1),
        "fmperf_results_vllm.json": json.dumps(fmperf_vllm(R)),
        "native_epoch_noclock.jsonl": native_epoch(R),
        "sglang_bench_serving_two_runs.jsonl": sglang_runs(R),
        "llmperf_individual_responses.json": json.dumps(llmperf(R), indent=4),
        "llmperf_two_ok_one_error_individual_responses.json": json.dumps(llmperf_two(R),
                                                                         indent=4),
        "vllm_bench_serve_not_detailed.json": json.dumps({
            "date": "20260101-000000", "backend": "vllm", "model_id": "org/model-70b",
            "request_rate": "inf", "num_prompts": 2, "completed": 2, "duration": 9.0,
            "mean_ttft_ms": 3653.6, "median_ttft_ms": 3653.6, "mean_tpot_ms": 22.4,
            "mean_itl_ms": 22.4}),
        "sglang_bench_serving_no_details.jsonl": json.dumps({
            "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
            "max_concurrency": None, "random_input_len": 1024, "random_output_len": 16,
            "random_range_ratio": 0.0, "server_info": None, "completed": 1,
            "mean_ttft_ms": 962.2, "mean_itl_ms": 22.4}) + "\n",
    }
    for name, text in out.items():
        (HERE / name).write_text(text if text.endswith("\n") else text + "\n")


if __name__ == "__main__":
    main()
