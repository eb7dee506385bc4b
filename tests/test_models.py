"""Models, presets, config.json parsing and the per-token bytes under TP and EP (hand-computed)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rdmascope import models as M

DATA = Path(__file__).parent / "data" / "models"


def test_study_preset_keeps_the_verified_numbers():
    m = M.PRESETS["study"]
    # 157 all-reduces x 6,144 x 2 B x 1.75 = 3,376,128 B (3.38 MB per token at TP8)
    assert M.tp_bytes_per_token(m, 8) == 157 * 6144 * 2 * 1.75 == 3_376_128
    # its expert counts are not part of the study: unknown, never zero
    assert m.is_moe is None and not m.moe_known
    assert M.Setup(model=m).ep_bytes_per_token() is None
    assert "78-layer mixture-of-experts" in m.describe() and "unknown" in m.describe()
    # glm-5 has the same shape as the study's model, so the same TP bytes
    assert M.tp_bytes_per_token(M.PRESETS["glm-5"], 8) == 3_376_128


def test_llama_style_dense_config_tp_bytes():
    m = M.model_from_hf_config(DATA / "llama-style-dense.json")
    assert (m.layers, m.hidden_size, m.bytes_per_value, m.vocab_size) == (80, 8192, 2, 128256)
    assert m.is_moe is False and m.moe_layers == 0
    # by hand: (2 x 80 + 1) = 161 all-reduces; 161 x 8192 x 2 = 2,637,824 B per token block sum
    assert M.tp_bytes_per_token(m, 2) == 2_637_824          # ring factor 1.0
    assert M.tp_bytes_per_token(m, 8) == 4_616_192          # x 1.75
    assert M.tp_bytes_per_token(m, 4) == 3_956_736          # x 1.5
    with pytest.raises(M.ModelError, match="dense model"):
        M.ep_bytes_per_token(m, 2)
    assert M.Setup(model=m, tp=2).ep_bytes_per_token() is None


def test_qwen3_moe_style_config_tp_and_ep_bytes():
    m = M.model_from_hf_config(DATA / "qwen3-moe-style.json")
    assert (m.experts, m.experts_per_token, m.shared_experts, m.moe_layers) == (128, 8, 0, 48)
    # TP2: (2 x 48 + 1) x 2048 x 2 x 1.0 = 397,312 B
    assert M.tp_bytes_per_token(m, 2) == 97 * 2048 * 2 == 397_312
    # EP over 2 nodes: 48 MoE layers x 2 directions x 2048 x 2 B x 8 experts x 1/2 off-node
    assert M.ep_bytes_per_token(m, 2) == 1_572_864
    # over 4 nodes: x 3/4 off-node
    assert M.ep_bytes_per_token(m, 4) == 2_359_296
    # one node: nothing leaves it
    assert M.ep_bytes_per_token(m, 1) == 0
    # one direction of one layer: 2048 x 2 x 8 x 1/2 = 16,384 B
    assert M.ep_dispatch_bytes_per_token_layer(m, 2) == 16_384
    s = M.Setup(model=m, tp=2, nodes=2, layout="ep", all2all_backend="deepep_high_throughput")
    assert s.bytes_per_token() == 1_572_864
    # vLLM's default, all-gather + reduce-scatter over the DP group of 2 (1 slice each way):
    # 48 x 1 x (4,096 + 8 x 8 top-k weights fp32 + ids int32 + 4,096) = 48 x 8,256
    assert s.with_(all2all_backend="allgather_reducescatter").bytes_per_token() == 396_288
    assert s.with_(layout="tp").bytes_per_token() == 397_312


def test_deepseek_style_dense_lead_in_and_shared_experts():
    m = M.model_from_hf_config(DATA / "deepseek-style-moe.json")
    # first_k_dense_replace 3 of 61 layers: 58 MoE layers; 1 shared expert (sends nothing)
    assert (m.experts, m.experts_per_token, m.shared_experts, m.moe_layers) == (256, 8, 1, 58)
    assert m.dense_layers == 3
    # EP over 8 nodes: 58 x 2 x 7168 x 2 x 8 x 7/8
    assert M.ep_bytes_per_token(m, 8) == 58 * 2 * 7168 * 2 * 8 * 7 / 8 == 11_640_832
    assert M.ep_bytes_per_token(M.PRESETS["deepseek-v3"], 8) == 11_640_832


@pytest.mark.parametrize("fields, moe_layers", [
    ({"decoder_sparse_step": 2}, 4),                               # layers 1, 3, 5, 7
    ({"decoder_sparse_step": 2, "mlp_only_layers": [5]}, 3),       # 1, 3, 7
    ({"mlp_only_layers": [0, 1]}, 6),
    ({"first_k_dense_replace": 1, "moe_layer_freq": 2}, 3),        # 2, 4, 6
    ({"interleave_moe_layer_step": 2}, 4),                         # Llama 4: 1, 3, 5, 7
    ({"mlp_layer_types": ["dense"] * 2 + ["sparse"] * 6}, 6),
])
def test_moe_layer_placement(tmp_path, fields, moe_layers):
    cfg = {"num_hidden_layers": 8, "hidden_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
           **fields}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert M.model_from_hf_config(tmp_path).moe_layers == moe_layers


def test_nested_text_config_and_shared_expert_size(tmp_path):
    cfg = {"model_type": "llama4", "text_config": {
        "num_hidden_layers": 4, "hidden_size": 8, "num_local_experts": 16,
        "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "shared_expert_intermediate_size": 64}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = M.model_from_hf_config(tmp_path)
    assert (m.experts, m.experts_per_token, m.shared_experts, m.moe_layers) == (16, 1, 1, 4)


@pytest.mark.parametrize("cfg, match", [
    ({"num_hidden_layers": 2, "hidden_size": 4, "num_experts": 8}, "without num_experts_per_tok"),
    ({"num_hidden_layers": 2, "hidden_size": 4, "num_experts": 2, "num_experts_per_tok": 4},
     "more than the routed experts"),
    ({"num_hidden_layers": 2, "hidden_size": "4"}, "hidden_size = '4' is not an integer"),
    ({"num_hidden_layers": 2, "hidden_size": 4, "num_experts": 2, "num_experts_per_tok": 1,
      "mlp_only_layers": "0"}, "mlp_only_layers"),
])
def test_config_errors_name_file_and_field(tmp_path, cfg, match):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(M.ModelError, match=match) as ei:
        M.model_from_hf_config(p)
    assert str(p) in str(ei.value)


def test_setup_links_and_labels():
    s = M.STUDY_SETUP
    assert (s.tp, s.nodes, s.link_a_gbps, s.link_b_gbps, s.b_real_gbps) == (8, 8, 200, 100, 109)
    assert s.b_effective_gbps == 109 and s.corrects_emulation
    assert s.link_label("B") == "emulated 100 Gb/s (~109 Gb/s)"
    real = M.Setup(model=M.PRESETS["llama-3-70b"], tp=2, link_a_gbps=400, link_b_gbps=200,
                   b_emulated=False, b_real_gbps=None)
    assert real.b_real_gbps == 200 and real.b_effective_gbps == 200 and not real.corrects_emulation
    assert real.describe() == "llama-3-70b, TP2 on 2 nodes; A 400 Gb/s, B 200 Gb/s"
    assert M.Setup(tp=8, nodes=1).tp_bytes_per_token() == 0   # one node: nothing on the network
    for bad, match in (({"tp": 0}, "tp"), ({"tp": 4, "nodes": 3}, "split evenly"),
                       ({"link_a_gbps": 0}, "link_a_gbps"), ({"layout": "pp"}, "layout"),
                       ({"twins": 0}, "twins")):
        with pytest.raises(M.ModelError, match=match):
            M.Setup(**bad)
    json.dumps(s.to_dict())
    assert M.model_from_dict(s.model.to_dict()) == s.model


def test_models_module_needs_only_the_standard_library():
    code = ("import sys; import rdmascope.models; "
            "bad = [m for m in ('numpy', 'pandas', 'matplotlib') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_cli_estimate_names_the_model_and_shows_tp_and_ep():
    from click.testing import CliRunner

    from rdmascope.cli import main

    cfg = str(DATA / "qwen3-moe-style.json")
    r = CliRunner().invoke(main, ["estimate", "--config", cfg, "--tp", "2", "--link-a", "400",
                                  "--link-b", "200", "--b-real", "--json"])
    assert r.exit_code == 0, r.output
    meta = json.loads(r.stdout)["meta"]
    assert meta["layouts"]["tp"]["bytes_per_prompt_token"] == 397_312
    assert meta["layouts"]["ep"]["bytes_per_prompt_token"] == 396_288   # allgather_reducescatter
    assert meta["layouts"]["ep"]["by_backend"]["deepep_high_throughput"] == 1_572_864
    # 1,000 tokens x 397,312 B x 8 x (1/200 - 1/400) per Gb/s
    assert meta["layouts"]["tp"]["increase_bound_per_1000_tokens_s"] == pytest.approx(
        1000 * 397_312 * 8 / 1e9 * (1 / 200 - 1 / 400))
    assert meta["setup"]["description"] == "qwen3_moe, TP2 on 2 nodes; A 400 Gb/s, B 200 Gb/s"
    ep = CliRunner().invoke(main, ["estimate", "--config", cfg, "--tp", "2", "--link-a", "400",
                                   "--link-b", "200", "--b-real", "--layout", "ep",
                                   "--all2all-backend", "pplx", "--json"])
    assert json.loads(ep.stdout)["prompts"][0]["prefill_bytes"] == 1000 * 1_572_864
    human = CliRunner().invoke(main, ["estimate", "--preset", "llama-3-70b", "--tp", "2"])
    assert "Llama 3 70B" in human.output and "dense model" in human.output
    assert "2.638 MB per prompt token" in human.output      # 161 x 8192 x 2 x 1.0
    bad = CliRunner().invoke(main, ["estimate", "--preset", "llama-3-70b", "--layout", "ep"])
    assert bad.exit_code == 2 and "dense model" in bad.output


def test_resolve_setup_order_options_manifest_port_rates():
    port200 = M.RunFacts(meta={}, port_gbps=200.0, twins=2, interfaces="both")
    single = M.RunFacts(meta={}, port_gbps=200.0, twins=2, interfaces="single")
    s = M.resolve_setup(run_a=port200, run_b=single)
    # the emulation check: one twin of a 200 Gb/s Spark port -> emulated 100, really ~109
    assert (s.link_a_gbps, s.link_b_gbps, s.b_emulated, s.b_real_gbps) == (200, 100, True, 109)
    # a label saying so is enough, even before any traffic decides the emulation check
    noted = M.RunFacts(meta={"extra": {"note": "NCCL_IB_HCA=rocep1s0f1"}}, port_gbps=200.0,
                       twins=2)
    assert M.resolve_setup(run_a=port200, run_b=noted).b_emulated
    # 400 Gb/s ports, nothing recorded: one twin -> emulated 200, real speed unknown (no guess)
    s4 = M.resolve_setup(run_a=M.RunFacts(port_gbps=400.0, twins=2),
                         run_b=M.RunFacts(port_gbps=400.0, twins=2, interfaces="single"))
    assert (s4.link_b_gbps, s4.b_real_gbps, s4.b_bound_gbps) == (200, None, 200)
    assert "unknown" in s4.sources["b_real"]
    # recorded setup beats port rates; options beat both
    rec = {"extra": {"setup": M.setup_record(link_gbps=100, emulated=True, emulated_real_gbps=105,
                                             model=M.PRESETS["deepseek-v3"], tp=16, nodes=16)}}
    s5 = M.resolve_setup(run_a=port200, run_b=M.RunFacts(meta=rec, port_gbps=200.0, twins=2))
    assert (s5.model.name, s5.tp, s5.link_b_gbps, s5.b_real_gbps) == ("deepseek-v3", 16, 100, 105)
    s6 = M.resolve_setup(tp=8, link_b_gbps=50, b_real=True, run_a=port200,
                         run_b=M.RunFacts(meta=rec, port_gbps=200.0, twins=2))
    assert (s6.tp, s6.nodes, s6.link_b_gbps, s6.b_emulated) == (8, 8, 50, False)
    assert "do not fit TP8" in s6.sources["nodes"]
    with pytest.raises(M.ModelError, match="either --b-emulated"):
        M.resolve_setup(b_emulated_gbps=109, b_real=True)


# ------------------------------------------------------------------------------------------------
# EP backends (vLLM's all2all managers) and the hybrid layout, by hand for DeepSeek-V2-Lite
# ------------------------------------------------------------------------------------------------

V2L = DATA / "deepseek-v2-lite-style.json"


def test_deepseek_v2_lite_config_and_preset_agree():
    m = M.model_from_hf_config(V2L)
    # 27 layers, first_k_dense_replace 1: 26 MoE layers; 64 routed, top-6, 2 shared
    assert (m.layers, m.hidden_size, m.bytes_per_value) == (27, 2048, 2)
    assert (m.experts, m.experts_per_token, m.shared_experts, m.moe_layers) == (64, 6, 2, 26)
    p = M.PRESETS["deepseek-v2-lite"]
    assert (p.layers, p.hidden_size, p.experts, p.experts_per_token, p.shared_experts,
            p.moe_layers, p.vocab_size) == (27, 2048, 64, 6, 2, 26, 102400)
    assert "first_k_dense_replace 1" in p.source
    v3 = M.PRESETS["deepseek-v3"]
    assert (v3.layers, v3.hidden_size, v3.experts_per_token, v3.moe_layers) == (61, 7168, 8, 58)


def test_ep8_backends_by_hand():
    """EP8 = DP8 x TP1: the ring collectives run over the DP group of 8 (vLLM v0.34.0's
    AgRsAll2AllManager, v0.13.0's NaiveAll2AllManager; rdmascope.models' docstring)."""
    m = M.model_from_hf_config(V2L)
    h2 = 2048 * 2  # one token's hidden state, bf16
    # dispatch/combine top-k (DeepEP, pplx): 26 x 2 x 4,096 x 6 x 7/8 = 1,118,208 B
    topk = 26 * 2 * h2 * 6 * 7 // 8
    assert topk == 1_118_208
    # allgather_reducescatter, ring of 8 ranks on 8 nodes: a node sends 7 slices per collective.
    # dispatch all-gathers hidden (4,096 B) + topk_weights fp32 (6 x 4 = 24 B) + topk_ids int32
    # (6 x 4 = 24 B) = 4,144 B per token; combine reduce-scatters the hidden state, 4,096 B:
    # 26 x 7 x (4,144 + 4,096) = 26 x 7 x 8,240 = 1,499,680 B
    agrs = 26 * 7 * (h2 + 24 + 24 + h2)
    assert agrs == 1_499_680
    # naive (v0.13.0): broadcasts of hidden (4,096 B) + router logits (64 experts x 2 B = 128 B)
    # = 7 x 4,224; all-reduce of the 8-slice buffer (ring: 2 x 7/8 x 8 = 14 slices of 4,096 B):
    # 26 x (7 x 4,224 + 14 x 4,096) = 26 x 86,912 = 2,259,712 B
    naive = 26 * (7 * (h2 + 128) + 14 * h2)
    assert naive == 2_259_712
    for backend, want in (("deepep_high_throughput", topk), ("deepep_low_latency", topk),
                          ("pplx", topk), ("allgather_reducescatter", agrs), ("naive", naive)):
        s = M.Setup(model=m, tp=1, dp=8, layout="ep", all2all_backend=backend)
        assert (s.ep_size, s.nodes, s.rails_per_node) == (8, 8, 1)
        assert s.ep_bytes_per_token() == want, backend
        assert s.ep_bytes_per_token_rail() == want
        # the older reading (--tp 8 --nodes 8: one rank per node) is the same layout
        assert M.Setup(model=m, tp=8, nodes=8, layout="ep",
                       all2all_backend=backend).ep_bytes_per_token() == want
    # the "+33 %" (D / k = 8 / 6) holds for the hidden states alone; with the top-k
    # weights and ids: 1,499,680 / 1,118,208 = 1.341
    assert agrs / topk == pytest.approx(1_499_680 / 1_118_208)
    assert 26 * 2 * 7 * h2 / topk == pytest.approx(8 / 6)
    # the top-k metadata is 48 / 8,240 = 0.58 % of allgather_reducescatter's bytes
    assert (agrs - 26 * 2 * 7 * h2) / agrs == pytest.approx(48 / 8240)


def test_dp4_tp2_hybrid_layout_by_hand():
    """DP4 x TP2 (EP8) over 4 Pods: vLLM runs the MoE sequence-parallel (TP > 1, DP > 1, EP;
    ParallelConfig.use_sequence_parallel_moe): each TP rank holds half the Pod's n tokens and the
    collective runs over the EP group of 8 ranks, 2 per Pod, NVLink inside."""
    m = M.PRESETS["deepseek-v2-lite"]
    h2 = 2048 * 2
    s = M.Setup(model=m, tp=2, dp=4, layout="ep")
    assert s.all2all_backend == "allgather_reducescatter"      # vLLM's default
    assert (s.ep_dp, s.ep_tp, s.ep_size, s.nodes, s.rails_per_node) == (4, 2, 8, 4, 2)
    # ring of 8 ranks over 4 Pods (4 Pod boundaries): a slice (n/2 tokens) travels 7 hops, all
    # but the hop into its own rank; that hop crosses a boundary for the Pod's first rank (its
    # slice crosses 3), not for the second (its slice crosses 4): per Pod 3 + 4 = 7 slices of
    # n/2 tokens = 3.5 n
    assert M.ep_ring_share(4, 2) == (4 * 2 - 1) / 2 == 3.5
    assert M.ep_ring_share(8, 1) == 7 and M.ep_ring_share(1, 2) == 0
    # allgather_reducescatter: 26 x 3.5 x (4,096 + 48 + 4,096) = 26 x 28,840 = 749,840 B
    agrs = 26 * 3.5 * (h2 + 6 * 8 + h2)
    assert agrs == 749_840
    assert s.ep_bytes_per_token() == agrs
    assert M.ep_layer_bytes_per_token(2048, 2, 6, 64, 4, 2) == (3.5 * 4144, 3.5 * 4096)
    # the pre-sequence-parallel reading (every TP rank in its own DP group of 4, all n tokens:
    # 2 x 26 x 2 x 3 x 4,096 = 1,277,952 B) sent 1.70 x more
    assert 2 * 26 * 2 * 3 * h2 / agrs == pytest.approx(1.7043, abs=1e-4)
    # per GPU / per rail: half the Pod's bytes each
    assert M.ep_rank_bytes_per_token(m, 4, tp=2) == 374_920
    assert s.ep_bytes_per_token_rail() == 374_920               # one rail per GPU
    assert s.with_(rails=8).ep_bytes_per_token_rail() == 749_840 / 8
    # naive (v0.13.0, also sequence-parallel there): 26 x 3.5 x (4,096 + 128 + 2 x 4,096)
    # = 26 x 3.5 x 12,416 = 1,129,856 B
    assert s.with_(all2all_backend="naive").ep_bytes_per_token() == 26 * 3.5 * 12_416 \
        == 1_129_856
    # top-k: 26 x 2 x 4,096 x 6 x 3/4, once per routed copy per Pod (sequence parallel: no
    # TP duplicates)
    assert s.with_(all2all_backend="pplx").ep_bytes_per_token() == 26 * 2 * h2 * 6 * 3 / 4 \
        == 958_464
    assert M.ep_rank_bytes_per_token(m, 4, "pplx", tp=2) is None
    # TP inside the node: nothing of the all-reduces on the NIC; all on one node: nothing at all
    assert M.Setup(model=m, tp=2, dp=4, nodes=1, layout="ep").ep_bytes_per_token() == 0
    assert M.ep_node_bytes_per_token(m, 1, 2) == 0
    with pytest.raises(M.ModelError, match="router logits"):
        M.ep_layer_bytes_per_token(2048, 2, 6, None, 4, 2, "naive")
    assert M.ep_formula_values(m, 4, 2) == "26 x (4 x 2 - 1)/2 x (2 x 2,048 x 2 + 8 x 6)"
    assert "EP8 = DP4 x TP2" in s.describe()
    with pytest.raises(M.ModelError, match="own node or Pod"):
        M.Setup(model=m, tp=2, dp=4, nodes=2, layout="ep")
    with pytest.raises(M.ModelError, match="goes with --layout ep"):
        M.Setup(model=m, tp=2, dp=4)
    with pytest.raises(M.ModelError, match="unknown all2all backend"):
        M.Setup(model=m, tp=2, dp=4, layout="ep", all2all_backend="mpi")
    with pytest.raises(M.ModelError, match="give --dp 4"):
        M.Setup(model=m, tp=2, nodes=4, layout="ep")
