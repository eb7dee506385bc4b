"""The estimate reproduces the study's numbers (method.md) and rejects bad inputs clearly."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from rdmascope.analysis import estimate as est

M = est.STUDY_MODEL


def test_study_bytes_per_prompt_token():
    # method.md: 157 x 6,144 x 2 x 1.75 = 3.38 MB per token
    assert est.allreduces_per_pass(78) == 157
    assert est.bytes_per_prompt_token(M, 8) == 157 * 6144 * 2 * 1.75 == 3_376_128
    assert round(est.bytes_per_prompt_token(M, 8) / 1e6, 2) == 3.38


def test_study_allreduce_size_and_duration():
    # 4,096-token chunk: 50.3 MB block, 88.1 MB per node in 14 steps of ~6.3 MB,
    # 3.5 ms at 200 Gb/s and 7.0 ms at 100 Gb/s
    block = est.allreduce_block_bytes(4096, M)
    assert round(block / 1e6, 1) == 50.3
    per_node = est.allreduce_bytes_per_node(4096, M, 8)
    assert round(per_node / 1e6, 1) == 88.1
    assert est.ring_steps(8) == 14
    assert round(per_node / 14 / 1e6, 1) == 6.3
    assert round(est.transfer_time_s(per_node, 200) * 1e3, 1) == 3.5
    assert round(est.transfer_time_s(per_node, 100) * 1e3, 1) == 7.0


def test_ttft_bound_per_1000_tokens():
    # 0.135 s per 1,000 prompt tokens at 200 -> 100; ~0.11 s with the emulated 109 Gb/s
    assert est.ttft_increase_bound_s(1000, M, 8, 200, 100) == pytest.approx(0.135, abs=5e-4)
    b109 = est.ttft_increase_bound_s(1000, M, 8, 200, 109)
    # by hand: 3.376128e9 B x 8 = 27.009 Gbit; x (1/109 - 1/200) = 0.11274 s
    assert b109 == pytest.approx(27.009024 * (1 / 109 - 1 / 200), rel=1e-9)
    assert round(b109, 2) == 0.11


def test_ring_factor_table_and_tp_relative():
    # per node per all-reduce: TP2 1.0x, TP4 1.5x, TP8 1.75x, TP16 1.875x of the block
    assert [est.ring_factor(n) for n in (2, 4, 8, 16)] == [1.0, 1.5, 1.75, 1.875]
    rel = [est.tp_relative(n, 8) for n in (2, 4, 8, 16)]
    assert [round(r["bytes_rel"], 2) for r in rel] == [0.57, 0.86, 1.0, 1.07]
    assert [r["compute_rel"] for r in rel] == [4.0, 2.0, 1.0, 0.5]
    assert est.ring_factor(1) == 0.0


def test_network_share_and_percent_bound_p2():
    # P2: 8,192 prompt tokens, TTFT 6.36 s at 200 Gb/s
    nbytes = 8192 * 3_376_128
    t_net = nbytes * 8 / 200e9  # 1.1065 s
    share = est.network_share(nbytes, 6.36, 200)
    assert share == pytest.approx(t_net / 6.36)
    assert est.increase_fraction_bound(share, 200, 100) == pytest.approx(share)  # x (2 - 1)
    assert est.increase_fraction_bound(share, 200, 109) == pytest.approx(share * (200 / 109 - 1))
    # the bound in seconds equals share x TTFT x (B_old/B_new - 1)
    assert est.ttft_increase_bound_s(8192, M, 8, 200, 109) == pytest.approx(
        share * 6.36 * (200 / 109 - 1))


def test_emulated_to_real_correction():
    # measured prefill bytes of a 8K prompt at 3.57 MB/token: bytes x 8 x (1/100 - 1/109) / 1e9
    nbytes = 8192 * 3.57e6
    expected = nbytes * 8 * (1 / 100 - 1 / 109) / 1e9
    assert est.emulated_to_real_correction_s(nbytes) == pytest.approx(expected)
    assert 0.19 < expected < 0.20


def test_decode_traffic_study():
    # one request, 5 tokens per pass: 61 KB block, ~108 KB per node per all-reduce
    d = est.decode_traffic(M, 8, requests=1, tokens_per_request=5)
    assert d["allreduce_block_bytes"] == 5 * 6144 * 2 == 61_440
    assert round(d["allreduce_bytes_per_node"] / 1e3) == 108
    assert d["allreduce_pass_bytes"] == pytest.approx(157 * 61_440 * 1.75)
    assert d["output_gather_bytes"] is None
    # with a vocabulary the gather is (N-1)/N x tokens x vocab x bytes
    mv = est.ModelShape("v", 78, 6144, 2, vocab_size=100_000)
    dv = est.decode_traffic(mv, 8, decode_speed_tps=20.0)
    assert dv["output_gather_bytes"] == pytest.approx(7 / 8 * 5 * 100_000 * 2)
    assert dv["rate_bound_gbps"] == pytest.approx(20 * dv["pass_bytes"] * 8 / 1e9)


def test_tp_projection_from_one_ttft():
    rows = est.tp_projection(M, [2, 8, 16], prompt_tokens=8192, ttft_ref_s=6.36, ref_tp=8,
                             link_old_gbps=200, link_new_gbps=100)
    net8 = 8192 * 3_376_128 * 8 / 200e9
    comp8 = 6.36 - net8
    r2, r8, r16 = rows
    assert r8["ttft_s"] == pytest.approx(6.36)
    assert r2["compute_s"] == pytest.approx(4 * comp8)
    assert r16["network_s"] == pytest.approx(net8 * 1.875 / 1.75)
    assert r16["increase_bound_s"] == pytest.approx(net8 * 1.875 / 1.75)  # 200->100: x 1
    # the network share, and the delay, grow with TP size
    assert r2["network_share"] < r8["network_share"] < r16["network_share"]
    with pytest.raises(est.EstimateError, match="not longer than"):
        est.tp_projection(M, [8], prompt_tokens=8192, ttft_ref_s=0.5)


def test_estimate_summary_consistent():
    e = est.estimate(M, prompt_tokens=[1024, 8192], ttft_s=[0.96, 6.36])
    assert e["per_token"]["bytes_per_prompt_token"] == 3_376_128
    assert e["allreduce"]["bytes_per_node"] == pytest.approx(88_080_384)
    p2 = e["prompts"][1]
    assert p2["increase_bound_pct"] == pytest.approx(100 * p2["network_time_old_s"] / 6.36)
    assert p2["allreduces"] == 2 * 157
    json.dumps(e)  # serialisable
    with pytest.raises(est.EstimateError, match="one --ttft per"):
        est.estimate(M, prompt_tokens=[1024, 2048], ttft_s=[1.0])


def test_hf_config(tmp_path):
    cfg = {"num_hidden_layers": 78, "hidden_size": 6144, "torch_dtype": "bfloat16",
           "vocab_size": 151552, "model_type": "x"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = est.model_from_hf_config(tmp_path)
    assert (m.layers, m.hidden_size, m.bytes_per_value, m.vocab_size) == (78, 6144, 2, 151552)
    assert est.bytes_per_prompt_token(m, 8) == 3_376_128
    nested = {"text_config": {"num_hidden_layers": 4, "hidden_size": 8, "dtype": "float32"}}
    (tmp_path / "n.json").write_text(json.dumps(nested))
    m2 = est.model_from_hf_config(tmp_path / "n.json")
    assert (m2.layers, m2.hidden_size, m2.bytes_per_value) == (4, 8, 4)


@pytest.mark.parametrize("content, match", [
    ("{}", "num_hidden_layers, hidden_size missing"),
    ('{"num_hidden_layers": 2, "hidden_size": 4, "torch_dtype": "int3"}', "torch_dtype"),
    ("not json", "not valid JSON"),
    ("[1]", "expected a JSON object"),
    ('{"num_hidden_layers": 0, "hidden_size": 4}', "layers must be a positive"),
])
def test_hf_config_errors(tmp_path, content, match):
    p = tmp_path / "config.json"
    p.write_text(content)
    with pytest.raises(est.EstimateError, match=match) as ei:
        est.model_from_hf_config(p)
    if "layers must" not in match:
        assert str(p) in str(ei.value)


def test_bad_parameters():
    with pytest.raises(est.EstimateError, match="tp"):
        est.ring_factor(0)
    with pytest.raises(est.EstimateError, match="link"):
        est.transfer_time_s(1, 0)
    with pytest.raises(est.EstimateError, match="TTFT"):
        est.network_share(1, 0, 200)
    with pytest.raises(est.EstimateError, match="no such file"):
        est.model_from_hf_config("/nonexistent/config.json")


def test_cli_estimate_study_numbers():
    from click.testing import CliRunner

    from rdmascope.cli import main

    r = CliRunner().invoke(main, ["estimate", "--prompt-tokens", "1000,8192", "--ttft",
                                  "0.96,6.36"])
    assert r.exit_code == 0, r.output
    assert "3.38 MB" in r.output
    assert "88.1 MB sent per node in 14 steps of 6.3 MB; 3.5 ms at 200 Gb/s, 7.0 ms at 100" \
        in r.output
    assert "0.135 s (200 -> 100 Gb/s), 0.113 s (200 -> 109)" in r.output
    r = CliRunner().invoke(main, ["estimate", "--json", "--tp-sizes", "2,4,8,16"])
    e = json.loads(r.output)
    assert [round(x["bytes_rel"], 2) for x in e["tp_projection"]] == [0.57, 0.86, 1.0, 1.07]
    assert [x["compute_rel"] for x in e["tp_projection"]] == [4.0, 2.0, 1.0, 0.5]


def test_cli_estimate_errors(tmp_path):
    from click.testing import CliRunner

    from rdmascope.cli import main

    r = CliRunner().invoke(main, ["estimate", "--layers", "4"])
    # option combinations are usage errors: exit 2 (bad content, e.g. a config.json, exits 4)
    assert r.exit_code == 2 and "go together" in r.output
    r = CliRunner().invoke(main, ["estimate", "--prompt-tokens", "1000,2000", "--ttft", "1"])
    assert r.exit_code == 2 and "one --ttft per" in r.output and "'--ttft'" in r.output
    r = CliRunner().invoke(main, ["estimate", "--preset", "study", "--layers", "4"])
    assert r.exit_code == 2 and "give one of --preset, --config" in r.output
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": 8}')
    r = CliRunner().invoke(main, ["estimate", "--config", str(p)])
    assert r.exit_code == 4 and "num_hidden_layers" in r.output and str(p) in r.output


def test_cli_estimate_decode_says_when_the_logits_gather_is_left_out():
    from click.testing import CliRunner

    from rdmascope.cli import main

    # study model, TP8, 5 tokens: 157 all-reduces x 5 x 6,144 x 2 B x 1.75 = 16,880,640 B
    r = CliRunner().invoke(main, ["estimate"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("decode"))
    assert "16.9 MB per pass (all-reduces only: the output-layer logits gather is left out" in line
    assert "give --vocab N" in line
    # --vocab applies to the preset: gather = 7/8 x 5 tokens x 128,000 x 2 B = 1,120,000 B
    r = CliRunner().invoke(main, ["estimate", "--vocab", "128000"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("decode"))
    assert "16.9 MB per pass + logits gather 1.12 MB = 18.0 MB" in line
    r = CliRunner().invoke(main, ["estimate", "--vocab", "128000", "--json"])
    dec = json.loads(r.output)["meta"]["decode"]
    assert dec["allreduce_pass_bytes"] == pytest.approx(157 * 5 * 6144 * 2 * 1.75)
    assert dec["output_gather_bytes"] == pytest.approx(7 / 8 * 5 * 128_000 * 2)
    assert dec["pass_bytes"] == pytest.approx(16_880_640 + 1_120_000)


def test_cli_estimate_vocab_overrides_the_config(tmp_path):
    from click.testing import CliRunner

    from rdmascope.cli import main

    p = tmp_path / "config.json"
    p.write_text('{"num_hidden_layers": 2, "hidden_size": 8, "vocab_size": 100}')
    r = CliRunner().invoke(main, ["estimate", "--config", str(p), "--tp", "2", "--json"])
    # TP2, 5 tokens x 100 x 2 B x 1/2 = 500 B
    assert json.loads(r.output)["meta"]["decode"]["output_gather_bytes"] == 500
    r = CliRunner().invoke(main, ["estimate", "--config", str(p), "--tp", "2", "--vocab", "300",
                                  "--json"])
    assert json.loads(r.output)["meta"]["decode"]["output_gather_bytes"] == 1500


def test_tp1_with_a_ttft_has_no_projection_instead_of_an_internal_error():
    e = est.estimate(est.STUDY_MODEL, tp=1, ttft_s=[5.0], prompt_tokens=[1000])
    assert e["tp_projection"] == []
    assert e["prompts"][0]["network_share"] == 0.0  # TP1 sends nothing


def test_cli_estimate_ep_layout_shows_only_what_reaches_the_nic():
    """DeepSeek-V2-Lite, DP4 x TP2 over 4 Pods, vLLM's allgather_reducescatter, by hand."""
    from rdmascope.cli import main

    args = ["estimate", "--preset", "deepseek-v2-lite", "--layout", "ep", "--tp", "2", "--dp",
            "4", "--link-a", "400", "--link-b", "200", "--b-real", "--prompt-tokens", "1000"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    # per node (sequence-parallel MoE over the EP group of 8: (4 x 2 - 1)/2 = 3.5 slices per
    # token): 26 MoE layers x 3.5 x (2 x 2,048 x 2 B + 6 x (4 + 4) B) = 26 x 3.5 x 8,240 =
    # 749,840 B; per rail half: 374,920 B
    assert "EP8 = DP4 x TP2" in r.output
    assert "0.750 MB per token per node, 0.375 MB per rail (2 rails per node)" in r.output
    assert "= 26 x (4 x 2 - 1)/2 x (2 x 2,048 x 2 + 8 x 6)" in r.output
    assert "sequence-parallel MoE" in r.output and "EP group of 8 ranks" in r.output
    assert "nothing on the NIC" in r.output
    # none of the TP all-reduce lines, no TP projection
    for tp_only in ("all-reduces per forward pass", "ring factor", "one all-reduce of",
                    "TP size relative", "TP projection", "logits gather"):
        assert tp_only not in r.output, tp_only
    j = json.loads(CliRunner().invoke(main, args + ["--json"]).stdout)
    ep = j["meta"]["layouts"]["ep"]
    assert ep["bytes_per_prompt_token"] == 749_840 and ep["bytes_per_token_per_rail"] == 374_920
    assert ep["bytes_per_token_per_gpu"] == 374_920 and ep["sequence_parallel_moe"] is True
    assert j["prompts"][0]["prefill_bytes"] == 1000 * 749_840
    # 1,000 tokens x 749,840 B x 8 x (1/200 - 1/400) per Gb/s
    assert j["prompts"][0]["increase_bound_s"] == pytest.approx(
        1000 * 749_840 * 8 / 1e9 * (1 / 200 - 1 / 400))
    assert j["meta"]["allreduce"] is None and j["tp_projection"] == []
    # EP8 over 8 nodes (TP1: the DP group): allgather_reducescatter 26 x 7 x 8,240 = 1,499,680 B,
    # dispatch/combine 26 x 2 x 4,096 x 6 x 7/8 = 1,118,208 B
    ep8 = CliRunner().invoke(main, ["estimate", "--preset", "deepseek-v2-lite", "--layout", "ep",
                                    "--tp", "8", "--nodes", "8", "--json"])
    e8 = json.loads(ep8.stdout)["meta"]["layouts"]["ep"]
    assert e8["bytes_per_prompt_token"] == 1_499_680 and e8["sequence_parallel_moe"] is False
    assert e8["by_backend"]["deepep_high_throughput"] == 1_118_208
    assert e8["by_backend"]["naive"] == 2_259_712
    refused = CliRunner().invoke(main, ["estimate", "--preset", "deepseek-v2-lite", "--layout",
                                        "ep", "--tp", "2", "--nodes", "4"])
    assert refused.exit_code == 2 and "give --dp 4" in refused.output


def test_memory_bound_decode_by_hand():
    """The study: 2.8 GB of weights per pass per node at a Spark's 273 GB/s."""
    mb = est.memory_bound_decode(18.2e6, 2.8e9, 273.0)
    assert mb["pass_floor_s"] == pytest.approx(2.8e9 / 273e9)          # 10.26 ms
    assert mb["rate_bound_gbps"] == pytest.approx(18.2e6 * 8 / (2.8e9 / 273e9) / 1e9)  # 14.2
    e = est.estimate(M, tp=8)
    # the study's model at TP8 gets the study's 2.8 GB; its pass: 157 x 5 x 6,144 x 2 x 1.75 B
    pass_bytes = 157 * 5 * 6144 * 2 * 1.75
    assert e["decode"]["pass_bytes"] == pytest.approx(pass_bytes)
    assert e["decode"]["memory_bound"]["rate_bound_gbps"] == pytest.approx(
        pass_bytes * 8 / (2.8e9 / 273e9) / 1e9)
    # another model or TP size: the weights per pass are not known, so no bound (never a guess)
    assert est.estimate(M, tp=4)["decode"]["memory_bound"] is None
    assert est.estimate(M, tp=4, decode_weight_bytes=5.6e9)["decode"]["memory_bound"][
        "pass_floor_s"] == pytest.approx(5.6e9 / 273e9)
    from rdmascope.cli import main

    r = CliRunner().invoke(main, ["estimate", "--vocab", "154880"])
    assert "memory-bound decode: 2.80 GB of weights per pass per node at 273 GB/s" in r.output
    assert "at least 10.3 ms" in r.output and "14.2 Gb/s per node" in r.output
    with pytest.raises(est.EstimateError):
        est.memory_bound_decode(1e6, 0.0)


def test_one_prompt_alone_bursts_at_the_long_prefill_threshold():
    """--long-prefill-token-threshold 2048: one prompt's all-reduces carry 2,048 tokens."""
    ar = est.estimate(M, tp=8)["allreduce"]
    # 2,048 x 6,144 x 2 B x 1.75 = 44,040,192 B; at 200 Gb/s 1.76 ms
    assert ar["single_prompt_tokens"] == 2048
    assert ar["single_prompt_bytes_per_node"] == 2048 * 6144 * 2 * 1.75 == 44_040_192
    assert ar["single_prompt_time_old_s"] == pytest.approx(44_040_192 * 8 / 200e9)
    from rdmascope.cli import main

    out = CliRunner().invoke(main, ["estimate"]).output
    assert "one prompt alone is prefilled 2,048 tokens per pass" in out
    assert "44.0 MB per node per all-reduce, 1.8 ms at 200 Gb/s" in out
    # a chunk no larger than the threshold: nothing more to say
    assert "one prompt alone" not in CliRunner().invoke(main, ["estimate", "--chunk",
                                                               "2048"]).output
