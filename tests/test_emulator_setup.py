"""The emulator plays any setup: model, TP size and nodes, EP all-to-all, engine options, and a
scenario from a simple spec; bytes per token hand-computed from the formulas."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from rdmascope import models
from rdmascope.cli import main
from rdmascope.emulator.model import (
    EngineConfig,
    ModelArch,
    TrafficConfig,
    make_scenario,
    scenario_from_spec,
    simulate,
)

QWEN = models.preset("qwen3-30b-a3b")  # 48 layers, all MoE, hidden 2,048, top-8, bf16
LLAMA = models.preset("llama-3.1-8b")  # 32 layers, hidden 4,096, dense, bf16


def _prefill_bytes(tr):
    (r,) = tr.requests
    b = tr.collective_bytes([r.t_send_ns, r.t_first_ns])
    return r, b[1] - b[0]


def test_tp2_dense_bytes_per_token_by_hand():
    arch = ModelArch.from_model(LLAMA, tp=2)
    # (2 x 32 + 1) all-reduces x 4,096 x 2 bytes x 2(2-1)/2 = 65 x 8,192 = 532,480 B per token
    assert arch.bytes_per_token == 532_480 == models.tp_bytes_per_token(LLAMA, 2)
    sc = make_scenario("prompt=3000,output=2,rounds=1,warmup=0")
    tr = simulate(sc, TrafficConfig(arch=arch))
    r, got = _prefill_bytes(tr)
    assert got == 3000 * 532_480 == r.prompt_bytes
    # one node: the all-reduces never reach the network
    one = simulate(sc, TrafficConfig(arch=replace(arch, nodes=1)))
    assert one.total_bytes == 0.0 and one.requests[0].prompt_bytes == 0.0


def test_expert_parallel_all_to_all_bytes_and_bursts():
    arch = ModelArch.from_model(QWEN, tp=4, layout="ep", all2all_backend="deepep_high_throughput")
    # 48 MoE layers x 2 (dispatch + combine) x 2,048 x 2 bytes x 8 experts x (4-1)/4
    want = 48 * 2 * 2048 * 2 * 8 * 3 // 4
    assert want == 2_359_296
    assert arch.bytes_per_token == want == models.ep_bytes_per_token(QWEN, 4)
    assert arch.collectives_per_pass == 96 and arch.collective_steps == 3
    sc = make_scenario("prompt=4096,output=2,rounds=1,warmup=0")
    eng = replace(EngineConfig(), long_prefill_token_threshold=0)  # one 4,096-token pass
    cfg = TrafficConfig(arch=arch, engine=eng, compute=replace(TrafficConfig().compute,
                                                               allreduce_jitter=0.0))
    tr = simulate(sc, cfg)
    r, got = _prefill_bytes(tr)
    assert got == 4096 * want == r.prompt_bytes
    # the pass is 96 bursts (a dispatch and a combine per MoE layer), each 4,096 x 2,048 x 2 x 8 x
    # 3/4 bytes, separated by compute gaps
    p = tr.passes[0]
    assert (p.prefill_tokens, p.decode_tokens) == (4096, 0)
    db = np.diff(tr.cum_bytes)
    t0 = tr.t_ns[:-1]
    bursts = db[(db > 0) & (t0 >= p.t_start_ns) & (t0 < p.t_end_ns)]
    assert len(bursts) == 96 and np.all(bursts == 4096 * 2048 * 2 * 8 * 3 / 4)
    # a dense model cannot be expert-parallel
    with pytest.raises(ValueError, match="mixture-of-experts"):
        ModelArch.from_model(LLAMA, tp=4, layout="ep")


def test_scenario_spec():
    sc = scenario_from_spec("prompt=2048+16384,concurrency=2,output=8,rounds=2,warmup=0,gap=2")
    assert [(g.test, g.round, g.prompt_tokens, g.output_tokens) for g in sc.groups] == [
        ("2048x2", 1, (2048, 2048), 8), ("2048x2", 2, (2048, 2048), 8),
        ("16384x2", 1, (16384, 16384), 8), ("16384x2", 2, (16384, 16384), 8)]
    assert [g.gap_before_s for g in sc.groups] == [1.0, 2.0, 2.0, 2.0]
    # defaults: one request, 1,024 output tokens, a warm-up round 0 and 3 measured rounds
    d = scenario_from_spec("prompt=100")
    assert [g.round for g in d.groups] == [0, 1, 2, 3]
    assert d.groups[0].output_tokens == 1024 and d.groups[0].prompt_tokens == (100,)
    for bad, msg in (("concurrency=2", "prompt=TOKENS is required"),
                     ("prompt=8k", "not a list of integers"),
                     ("prompt=10,rounds=0", "rounds must be >= 1"),
                     ("prompt=10,warmup=2", "warmup must be 0 or 1"),
                     ("prompt=10,speed=3", "'speed=3' is not one of"),
                     ("prompt=10,prompt=20", "prompt given twice"),
                     ("prompt=10,gap=x", "gap=x is not a number")):
        with pytest.raises(ValueError, match=msg):
            scenario_from_spec(bad)


def test_simulate_cli_plays_a_setup_with_vllm_options(tmp_path):
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, [
        "simulate", "capture", "-o", str(out), "--preset", "qwen3-30b-a3b", "--tp", "4",
        "--layout", "ep", "--all2all-backend", "deepep_high_throughput",
        "--scenario", "prompt=4096,output=4,rounds=1,warmup=0",
        "--max-num-batched-tokens", "1024", "--long-prefill-token-threshold", "0",
        "--num-speculative-tokens", "2", "--draft-acceptance-rate", "1"])
    assert r.exit_code == 0, r.output
    truth = json.loads((out / "truth.json").read_text())
    eng = truth["config"]["engine"]
    assert (eng["max_num_batched_tokens"], eng["long_prefill_token_threshold"],
            eng["num_speculative_tokens"], eng["draft_acceptance_rate"]) == (1024, 0, 2, 1.0)
    assert truth["config"]["arch"]["layout"] == "ep"
    (req,) = truth["requests"]
    # both twins at 200 Gb/s, each carrying half of the prompt's all-to-all bytes
    assert req["prefill_bytes"]["rocep1s0f1/tx"] == pytest.approx(4096 * 2_359_296 / 2,
                                                                   rel=1e-12)
    log = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert log[0]["prompt_tokens"] == 4096 and log[0]["test"] == "4096x1"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(tmp_path / "x"), "--preset",
                                  "llama-3.1-8b", "--layout", "ep", "--scenario", "single4k"])
    assert r.exit_code != 0 and "Error:" in r.output and "mixture-of-experts" in r.output
    r = CliRunner().invoke(main, ["simulate", "capture", "--help"])
    for opt in ("--max-num-batched-tokens", "--long-prefill-token-threshold", "--max-num-seqs",
                "--max-num-partial-prefills", "--num-speculative-tokens",
                "--enable-chunked-prefill", "--layout"):
        assert opt in r.output


def test_one_rdma_device_per_port(tmp_path):
    """--twins 1: a single-function NIC (one RDMA device, one netdev) carrying the port's rate."""
    out = tmp_path / "one"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(out), "--twins", "1",
                                  "--port-gbps", "100", "--scenario", "single4k",
                                  "--output-tokens", "2"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert [d["name"] for d in m["devices"]] == ["rocep1s0f1"]
    assert {c.get("netdev") or c["device"] for c in m["counters"]} == {"rocep1s0f1",
                                                                       "enp1s0f1np1"}
    truth = json.loads((out / "truth.json").read_text())
    assert truth["link_rate_gbps"] == 100.0  # the whole port, not a PCIe x4 twin's 109
    (req,) = truth["requests"]
    # the one device carries every byte: 4,096 prompt tokens x 3,376,128 B
    assert req["prefill_bytes"]["rocep1s0f1/tx"] == pytest.approx(4096 * 3_376_128, rel=1e-12)
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(tmp_path / "x"), "--twins",
                                  "1", "--link", "emulated100", "--scenario", "single4k"])
    assert r.exit_code != 0 and "needs --twins 2" in r.output
