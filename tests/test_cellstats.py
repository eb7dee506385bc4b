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


def _per_cell_reference(requests, chunk_times, percentiles):
    """The per-population path cellstats had before its cells were computed at once (one
    np.mean / np.std / np.percentile / np.max call per population, rows as dicts): the
    grouped computation must give the same table, bit for bit."""
    import pandas as pd

    ps = tuple(float(p) for p in percentiles)
    keep = ~requests["warmup"].to_numpy(dtype=bool)
    req = requests[keep].reset_index(drop=True)
    ch = chunk_times[keep].reset_index(drop=True)
    send, last = req["t_send_ns"].to_numpy(np.int64), req["t_last_ns"].to_numpy(np.int64)
    pt = req["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
    ot = req["output_tokens"].to_numpy(dtype=float, na_value=np.nan)
    per = {m: req[f"{m}_s"].to_numpy(dtype=float) for m in ("ttft", "tpot", "e2e")}
    gaps = [np.diff(np.asarray(c, dtype=np.int64)) / 1e9 if c is not None and len(c) > 1
            else None for c in ch]

    def stats(x):
        x = x[np.isfinite(x)]
        if not len(x):
            return {"mean": np.nan, "std": np.nan, **{f"p{p:g}": np.nan for p in ps},
                    "max": np.nan}
        q = np.percentile(x, list(ps)) if ps else []
        return {"mean": float(np.mean(x)), "std": float(np.std(x)),
                **{f"p{p:g}": float(v) for p, v in zip(ps, q, strict=True)},
                "max": float(np.max(x))}

    def one(pos):
        dur = (int(last[pos].max()) - int(send[pos].min())) / 1e9
        ok = dur > 0
        out = {"n_requests": len(pos), "duration_s": dur,
               "request_throughput_rps": len(pos) / dur if ok else np.nan,
               "output_throughput_tps": float(ot[pos].sum()) / dur if ok else np.nan,
               "total_token_throughput_tps": float(pt[pos].sum() + ot[pos].sum()) / dur
               if ok else np.nan}
        for m in ("ttft", "tpot", "itl", "e2e"):
            if m == "itl":
                g = [gaps[i] for i in pos if gaps[i] is not None]
                x = np.concatenate(g) if g else np.zeros(0)
            else:
                x = per[m][pos]
            out.update({f"{m}_{k}_s": v for k, v in stats(x).items()})
        return out

    rows = []
    by_round: dict = {}
    for (test, rnd), pos in req.groupby(["test", "round"], sort=True).indices.items():
        by_round.setdefault(test, []).append((rnd, pos))
    for test, pos in req.groupby("test", sort=False).indices.items():
        rows.append({"scope": "test", "test": test, "round": pd.NA, **one(np.asarray(pos))})
        for rnd, rpos in by_round.get(test, []):
            rows.append({"scope": "round", "test": test, "round": int(rnd),
                         **one(np.asarray(rpos))})
    df = pd.DataFrame(rows)
    df["round"] = df["round"].astype("Int64")
    return df


@pytest.mark.parametrize("pcts", [(50.0, 90.0, 95.0, 99.0), (0.0, 12.5, 33.3, 99.9, 100.0), ()])
def test_cells_at_once_equal_one_population_at_a_time_bit_for_bit(pcts):
    """cell_stats computes every cell's populations together (grouped by length, numpy along
    the rows); it must equal one numpy call per population exactly: cells of 1 to ~600
    requests (numpy's pairwise sums change shape at 8 and 128 values), NaN metrics, requests
    without chunks, warm-up rows, token counts unknown, a zero-length cell span."""
    import pandas as pd
    from rdmascope.analysis.cellstats import cell_stats

    rng = np.random.default_rng(11)
    sizes = [1, 1, 2, 3, 7, 8, 9, 15, 16, 17, 127, 128, 129, 130, 257, 600]
    rows, chunks = [], []
    for t, size in enumerate(sizes):
        for rnd in range(3):
            for _ in range(size if rnd else max(size // 3, 1)):
                send = int(T0 + rng.integers(0, 10**10))
                ttft = float(rng.lognormal(-2, 1))
                n_ch = int(rng.integers(0, 40))
                ch = (send + int(ttft * 1e9) + np.cumsum(rng.integers(1, 10**8, n_ch))).tolist()
                last = ch[-1] if ch else send + int(ttft * 1e9)
                rows.append({"test": f"t{t}", "round": rnd, "warmup": rng.random() < 0.05,
                             "t_send_ns": send, "t_last_ns": last,
                             "prompt_tokens": np.nan if rng.random() < 0.02
                             else float(rng.integers(1, 4000)),
                             "output_tokens": float(rng.integers(1, 500)),
                             "ttft_s": np.nan if rng.random() < 0.1 else ttft,
                             "tpot_s": np.nan if rng.random() < 0.3 else float(rng.random()),
                             "e2e_s": float(rng.lognormal())})
                chunks.append(None if rng.random() < 0.1 else ch)
    rows.append({**rows[0], "test": "zero", "t_last_ns": rows[0]["t_send_ns"]})  # dur 0
    chunks.append(None)
    req = pd.DataFrame(rows)
    req.loc[req["test"] == "t3", "tpot_s"] = np.nan  # a metric empty in a whole test
    ch = pd.Series(chunks, dtype=object)
    got = cell_stats(req, ch, pcts)
    ref = _per_cell_reference(req, ch, pcts)
    pd.testing.assert_frame_equal(got, ref, check_exact=True)
    for c in ref.columns:
        if ref[c].dtype.kind == "f":
            assert np.array_equal(got[c].to_numpy().view(np.int64),
                                  ref[c].to_numpy().view(np.int64)), c
