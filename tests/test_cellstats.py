"""Per-cell statistics checked against vLLM's own formula on the same events.

``vllm_calculate_metrics`` below restates, for the fields it uses, ``calculate_metrics`` of
``vllm/benchmarks/serve.py`` (vllm-project/vllm, commit 009e6d4a): TTFT and E2E per request,
TPOT = (latency - ttft) / (output_len - 1) for output_len > 1, ITL = every chunk gap pooled,
``np.mean`` / ``np.std`` / ``np.median`` / ``np.percentile`` over those lists, throughputs over
the duration. The same requests go through a native log, ``attribute`` and ``cellstats``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.cellstats import parse_percentiles
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import align, read_request_log
from requestlog_helpers import build_capture

T0 = 5_000 * 10**9


def vllm_calculate_metrics(outputs, dur_s, selected_percentiles):
    """vLLM's calculate_metrics, the fields rdmascope reports (seconds, not ms)."""
    ttfts, tpots, itls, e2els, total_input, total_output = [], [], [], [], 0, 0
    for o in outputs:
        output_len = o["output_tokens"]
        total_input += o["prompt_len"]
        total_output += output_len
        if output_len > 1:
            tpots.append((o["latency"] - o["ttft"]) / (output_len - 1))
        itls += o["itl"]
        ttfts.append(o["ttft"])
        e2els.append(o["latency"])
    m = {"request_throughput": len(outputs) / dur_s, "output_throughput": total_output / dur_s,
         "total_token_throughput": (total_input + total_output) / dur_s}
    for name, x in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2e", e2els)):
        m[f"mean_{name}"] = np.mean(x or 0)
        m[f"std_{name}"] = np.std(x or 0)
        m[f"median_{name}"] = np.median(x or 0)
        m[f"percentiles_{name}"] = [(p, np.percentile(x or 0, p)) for p in selected_percentiles]
    return m


def _events(rng, n, t_start):
    """n overlapping streamed requests: send, TTFT, uneven chunk gaps, token counts."""
    out = []
    for i in range(n):
        send = t_start + 0.05 * i
        ttft = float(rng.uniform(0.05, 0.4))
        n_chunks = int(rng.integers(2, 12))
        gaps = rng.uniform(0.005, 0.06, n_chunks - 1).round(6)
        chunks = send + ttft + np.concatenate([[0.0], np.cumsum(gaps)])
        out.append({"send": send, "ttft": ttft, "itl": [float(g) for g in gaps],
                    "chunks": [float(c) for c in chunks], "latency": float(chunks[-1] - send),
                    "output_tokens": int(n_chunks + rng.integers(0, 3)),
                    "prompt_len": int(rng.integers(16, 900))})
    return out


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    p = tmp_path_factory.mktemp("cap") / "cap"
    build_capture(p, T0, {"rocep1s0f1/tx": np.full(4000, 4000),
                          "rocep1s0f1/rx": np.full(4000, 4000)})
    return load_capture(p)


@pytest.mark.parametrize("pcts", ["50,90,95,99", "50,95,99", "25,99.9"])
def test_cells_equal_vllm_calculate_metrics_on_the_same_events(tmp_path, capture, pcts):
    rng = np.random.default_rng(7)
    ev = {1: _events(rng, 12, 5000.1), 2: _events(rng, 9, 5002.0)}  # two rounds of one test
    warm = _events(rng, 2, 5001.5)  # a warm-up round in between: kept out
    rows = []
    for rnd, evs in [(0, warm), *ev.items()]:
        for i, e in enumerate(evs):
            rows.append({"request_id": f"r{rnd}-{i}", "t_send": e["send"],
                         "t_first_token": e["chunks"][0], "t_last_token": e["chunks"][-1],
                         "chunk_times": e["chunks"], "prompt_tokens": e["prompt_len"],
                         "output_tokens": e["output_tokens"], "test": "c12", "round": rnd})
    p = tmp_path / "log.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ps = parse_percentiles(pcts)
    at = attribute(capture, align(read_request_log(p), capture), warmup_rounds=1, percentiles=ps)
    cells = at.cells.set_index(["scope", "round"], drop=False)

    def check(row, evs):
        dur = max(e["send"] + e["latency"] for e in evs) - min(e["send"] for e in evs)
        ref = vllm_calculate_metrics(evs, dur, ps)
        assert row["n_requests"] == len(evs)
        for ours, theirs in (("request_throughput_rps", "request_throughput"),
                             ("output_throughput_tps", "output_throughput"),
                             ("total_token_throughput_tps", "total_token_throughput")):
            assert row[ours] == pytest.approx(ref[theirs], rel=1e-6)
        for m in ("ttft", "tpot", "itl", "e2e"):
            assert row[f"{m}_mean_s"] == pytest.approx(ref[f"mean_{m}"], rel=1e-6, abs=1e-9)
            assert row[f"{m}_std_s"] == pytest.approx(ref[f"std_{m}"], rel=1e-5, abs=1e-9)
            for q, v in ref[f"percentiles_{m}"]:
                assert row[f"{m}_p{q:g}_s"] == pytest.approx(v, rel=1e-6, abs=1e-9), (m, q)
            if 50.0 in ps:
                assert row[f"{m}_p50_s"] == pytest.approx(ref[f"median_{m}"], rel=1e-6)

    for rnd, evs in ev.items():
        check(cells.loc[("round", rnd)], evs)
    check(cells[cells["scope"] == "test"].iloc[0], ev[1] + ev[2])
    assert 0 not in set(cells["round"].dropna())  # the warm-up round has no cell


def test_percentiles_option_is_checked():
    assert parse_percentiles("50, 95,99,95") == (50.0, 95.0, 99.0)
    for bad in ("", "x", "101", "-1"):
        with pytest.raises(ValueError):
            parse_percentiles(bad)
