"""Models and setups: what is served, on how many nodes, over which links (standard library only).

One module owns the served model's shape (presets and Hugging Face ``config.json`` parsing, dense
and mixture-of-experts) and the setup around it (TP size, nodes, the links of run A and run B,
whether B is an emulated link and what it really carries), with the per-token network bytes
under the two parallel layouts the estimate knows. The emulator, the estimate, ``compare`` and
the report all read it; it imports nothing outside the standard library (no numpy, no pandas),
so the sampler side can use it too.

Units: bytes are decimal (MB = 1e6 bytes), link speeds are Gb/s (1e9 bit/s).

**Tensor parallelism (layout "tp")**, all-reduce after every attention block and every FFN/MoE
block plus one at the embedding, NCCL ring: each node sends ``2(N-1)/N`` times the block, so

    bytes per prompt token per node = (2 x layers + 1) x hidden x bytes x 2(N-1)/N

(the study's model, 78 layers, hidden 6,144, 2 bytes, TP8: 3,376,128 B = 3.38 MB). Sources: the
ring all-reduce's cost, Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
of workstations", J. Parallel Distrib. Comput. 69(2), 2009; the two all-reduces per layer,
Shoeybi et al., "Megatron-LM", arXiv:1909.08053, section 3. A mixture-of-experts model under pure
tensor parallelism sends exactly this too: every expert is split N ways and its FFN block ends in
the same all-reduce.

**Expert parallelism (layout "ep")**, attention data-parallel (each node runs the attention of its
own requests, no all-reduce) and the routed experts spread evenly over the nodes; in every MoE
layer each token's hidden vector goes to its ``k`` routed experts (*dispatch*) and their outputs
come back (*combine*), both as all-to-all. With routing spread uniformly over the experts, a
share ``(nodes-1)/nodes`` of the ``k`` copies leaves the node, so per token held by a node

    bytes sent per node per token = moe_layers x 2 x hidden x bytes x k x (nodes-1)/nodes

(dispatch of its own tokens out, plus combine of the other nodes' tokens back, which equals it on
average; the node receives as much). Shared experts are replicated on every node and send
nothing; dense (non-MoE) layers run data-parallel and send nothing. Sources: the dispatch/combine
all-to-all of expert parallelism, Lepikhin et al., "GShard", arXiv:2006.16668, section 2.2, and
Rajbhandari et al., "DeepSpeed-MoE", ICML 2022 (arXiv:2201.05596), section 5; the per-layer
dispatch and combine of a served MoE model over RDMA, DeepSeek-AI, "DeepSeek-V3 Technical Report",
arXiv:2412.19437, section 3.4, and the DeepEP library. This is an upper bound for engines that
send one copy per destination node rather than per expert (DeepEP's inter-node kernels, DeepSeek-V3's
node-limited routing), and it assumes balanced routing.

**Which all-to-all: vLLM's ``--all2all-backend``.** Read in vLLM's source, pinned: release
v0.34.0 (``vllm/_version.py`` commit ``62d4bc3c7``; PyPI sdist sha256 ``fcad848b...0113``) for
``allgather_reducescatter`` and the DeepEP backends, and release v0.13.0 (commit ``72506c983``)
for ``naive`` and ``pplx``, which v0.34.0 has removed (``ParallelConfig._validate_parallel_config``
in ``vllm/config/parallel.py`` warns and falls back to ``allgather_reducescatter``). With expert
parallelism the MoE layer has no tensor parallelism and the EP size is ``DP x TP``
(``FusedMoEParallelConfig.make``, ``vllm/model_executor/layers/fused_moe/config.py``). With TP > 1,
DP > 1 and EP, vLLM runs the MoE *sequence-parallel* (``ParallelConfig.use_sequence_parallel_moe``:
``allgather_reducescatter`` and the DeepEP backends in v0.34.0, also ``naive`` in v0.13.0): the
attention output is reduce-scattered over the TP group (``DeepseekV2DecoderLayer.forward``,
``vllm/model_executor/models/deepseek_v2.py``; ``sequence_parallel_chunk`` elsewhere), each TP rank
holds ``ceil(n/T)`` of the replica's ``n`` tokens, the expert collective runs over the whole *EP
group* (``D x T`` ranks; ``AgRsAll2AllManager._get_comm_group``), and the output is all-gathered
over TP again (NVLink, nothing on the NIC). Without TP (T = 1) the group is the DP group. NCCL's
ring collectives (Patarasuk & Yuan 2009; vLLM's ``all_gatherv``/``reduce_scatterv`` with uneven
sizes are grouped ``ncclBroadcast``/``ncclReduce`` chains, ``pynccl.py``, the same bytes): over a
ring of ``D x T`` ranks on ``D`` nodes a slice crosses all ``D`` node boundaries but the one into
its own rank, if the ring enters the node there (one rank per node), so a node sends
``(D T - 1)`` slices of ``n/T`` tokens, i.e. per token it holds

    S = (D x T - 1) / T        (D - 1 at T = 1; 3.5 at DP4 x TP2; 7 at DP8 x TP1)

times the per-token payload, per MoE layer (the node receives as much):

- ``allgather_reducescatter`` (``AgRsAll2AllManager``, vLLM's default,
  ``vllm/distributed/device_communicators/all2all.py``): ``dispatch`` all-gathers
  ``[hidden_states, topk_weights, topk_ids]`` (the modular kernel's prepare,
  ``MoEPrepareAndFinalizeNaiveDPEPModular``, ``fused_moe/prepare_finalize/naive_dp_ep.py``; hidden
  states in the activation dtype for an unquantised model, ``topk_weights`` fp32 and ``topk_ids``
  int32 from the router, ``fused_moe/router/grouped_topk_router.py``), ``combine`` reduce-scatters
  the hidden states: ``moe_layers x S x (2 x hidden x bytes + 8 x k)`` per node per token;
- ``naive`` (``NaiveAll2AllManager`` in v0.13.0): ``dispatch`` broadcasts every rank's slice of
  ``[hidden_states, router_logits]`` over the group (``naive_multicast``; the router logits are
  the gate's output, ``experts`` values in the activation dtype), ``combine`` all-reduces the whole
  gathered buffer (two ring halves): ``moe_layers x S x (3 x hidden x bytes + experts x bytes)``;
- ``deepep_high_throughput``, ``deepep_low_latency``, ``pplx`` (DeepEP/pplx kernels): the top-k
  dispatch/combine above, with ``nodes = D``: sequence parallelism (DeepEP) or pplx's own
  de-duplication makes each token leave its node once per routed copy, not once per TP rank.
  DeepEP's per-copy metadata (source meta 8 B, top-k ids int32 and weights fp32, 16-byte
  aligned: ``get_num_bytes_per_token`` in DeepEP's ``csrc/kernels/internode.cu``) is left out:
  1.4 % of a 2,048-wide bf16 copy at k = 6; DeepEP's inter-node kernels send one copy per
  destination node rather than per expert, so this stays an upper bound.

(vLLM releases before sequence-parallel MoE ran the DP-group collective on every TP rank's full
copy of the tokens, ``T x (D - 1)`` instead of ``S``: 6 against 3.5 at DP4 x TP2.) The
``ceil(n/T)`` padding of sequence parallelism is left out (under one token per TP rank per pass).
The rest of the pass (attention, dense layers, the TP reduce-scatter and all-gather around the
MoE) stays inside the node. Per rail: the node's bytes spread evenly over its ``rails`` NICs
(default one per TP rank: NCCL gives each GPU its nearest NIC on a rail-optimised node). Every
per-node figure assumes the replicas are equally loaded (each node then sends what its own
tokens cost).

Size: one module (over 800 lines) because it is the one standard-library-only source of a served
model's shape, the setup around it and the bytes-per-token formulas (TP and EP) that the sampler
side, the emulator and the analysis all import, and its parts check one another's fields (``Setup``
and ``resolve_setup`` validate against ``Model`` and the formulas).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

#: Bytes per value for the dtype names found in Hugging Face ``config.json`` files.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "fp32": 4, "float": 4,
    "float16": 2, "fp16": 2, "half": 2,
    "bfloat16": 2, "bf16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1, "float8": 1,
}

#: The study's links, Gb/s: the real 200 Gb/s link; the emulated 100 Gb/s link (NCCL_IB_HCA naming
#: one of the port's two PCIe x4 twins), which really carries ~109 Gb/s (ib_write_bw); and the real
#: 100 Gb/s cable the emulation stands for.
LINK_200_GBPS = 200.0
LINK_EMULATED_GBPS = 109.0
LINK_100_GBPS = 100.0

#: The parallel layouts the estimate knows (see the module docstring).
LAYOUTS = ("tp", "ep")

#: vLLM's ``--all2all-backend`` names (``vllm/config/parallel.py``, ``All2AllBackend``) and the
#: traffic formula each follows (module docstring): all-gather + reduce-scatter over the EP group
#: (the DP group at TP1), broadcasts + all-reduce over it, or the top-k dispatch/combine of
#: DeepEP/pplx.
ALL2ALL_BACKENDS: dict[str, str] = {
    "allgather_reducescatter": "allgather_reducescatter",
    "naive": "naive",
    "deepep_high_throughput": "dispatch_combine",
    "deepep_low_latency": "dispatch_combine",
    "pplx": "dispatch_combine",
}
#: The backends vLLM runs sequence-parallel MoE with when TP > 1 and DP > 1
#: (``ParallelConfig.use_sequence_parallel_moe``: v0.34.0's list, plus ``naive`` from v0.13.0's).
SEQUENCE_PARALLEL_BACKENDS = ("allgather_reducescatter", "naive", "deepep_high_throughput",
                              "deepep_low_latency")
#: vLLM's default backend (``ParallelConfig.all2all_backend``).
DEFAULT_ALL2ALL_BACKEND = "allgather_reducescatter"

#: Bytes per token per routed expert of the router's outputs that ``allgather_reducescatter``'s
#: dispatch gathers with the hidden states: ``topk_weights`` fp32 + ``topk_ids`` int32
#: (``grouped_topk`` returns ``topk_weights.to(torch.float32), topk_ids.to(torch.int32)``,
#: vLLM v0.34.0 ``fused_moe/router/grouped_topk_router.py``).
TOPK_BYTES_PER_EXPERT = 4 + 4

#: The ring backends (module docstring): per MoE layer, the hidden states each of dispatch and
#: combine carry, in multiples of ``hidden x bytes`` (all-gather 1 + reduce-scatter 1; broadcast
#: 1 + all-reduce 2), besides the routing metadata of the dispatch.
RING_HIDDEN_COPIES = {"allgather_reducescatter": (1, 1), "naive": (1, 2)}


class ModelError(ValueError):
    """A model, config file or setup is invalid (the message names the file, field or option)."""


def _positive_int(name: str, v: Any, *, zero_ok: bool = False) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < (0 if zero_ok else 1):
        raise ModelError(f"{name} must be a {'non-negative' if zero_ok else 'positive'} integer, "
                         f"got {v!r}")


@dataclass(frozen=True)
class Model:
    """The numbers of a served model that decide its network traffic.

    ``layers`` = decoder layers (``num_hidden_layers``); ``hidden_size`` = width of the residual
    stream (values per token per all-reduce or per expert dispatch); ``bytes_per_value`` =
    activation dtype size (2 for bf16/fp16); ``vocab_size`` (optional) sizes the decode
    output-layer gather. Mixture-of-experts fields (all 0 for a dense model): ``experts`` = routed
    experts per MoE layer, ``experts_per_token`` = routed experts each token goes to (top-k),
    ``shared_experts`` = experts every token uses (replicated, no routing), ``moe_layers`` = how
    many of the ``layers`` have a MoE block (the rest are dense). ``title`` names the model in
    full; ``source`` says where the numbers come from. ``None`` in a MoE field means unknown.

    Raises ``ModelError`` for a non-positive size or inconsistent MoE fields.
    """

    name: str
    layers: int
    hidden_size: int
    bytes_per_value: int
    vocab_size: int | None = None
    experts: int | None = 0
    experts_per_token: int | None = 0
    shared_experts: int | None = 0
    moe_layers: int | None = 0
    title: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden_size", "bytes_per_value"):
            _positive_int(f, getattr(self, f))
        if self.vocab_size is not None:
            _positive_int("vocab_size", self.vocab_size)
        for f in ("experts", "experts_per_token", "shared_experts", "moe_layers"):
            v = getattr(self, f)
            if v is not None:
                _positive_int(f, v, zero_ok=True)
        if self.experts and self.experts_per_token and self.experts_per_token > self.experts:
            raise ModelError(f"experts_per_token ({self.experts_per_token}) is more than the "
                             f"routed experts ({self.experts})")
        if self.moe_layers and self.moe_layers > self.layers:
            raise ModelError(f"moe_layers ({self.moe_layers}) is more than the layers "
                             f"({self.layers})")

    @property
    def is_moe(self) -> bool | None:
        """True for a mixture-of-experts model, False for dense, None when unknown."""
        if self.experts is None:
            return None
        return self.experts > 0

    @property
    def moe_known(self) -> bool:
        """True when every field the expert-parallel estimate needs is known."""
        return bool(self.experts) and bool(self.experts_per_token) and bool(self.moe_layers)

    @property
    def dense_layers(self) -> int | None:
        """Layers without a MoE block (``layers - moe_layers``); None when unknown."""
        return None if self.moe_layers is None else self.layers - self.moe_layers

    def describe(self) -> str:
        """One line naming the model in full with the numbers the estimates use."""
        parts = [f"{self.layers} layers", f"hidden {self.hidden_size:,}",
                 f"{self.bytes_per_value} B per value"]
        if self.is_moe:
            moe = f"MoE {self.experts} experts, top-{self.experts_per_token}"
            if self.shared_experts:
                moe += f" + {self.shared_experts} shared"
            if self.moe_layers is not None:
                moe += f", {self.moe_layers} MoE layers"
            parts.append(moe)
        elif self.is_moe is None:
            parts.append("mixture-of-experts fields unknown")
        else:
            parts.append("dense")
        head = self.name + (f" ({self.title})" if self.title and self.title != self.name else "")
        return f"{head}: {', '.join(parts)}"

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-serialisable dict, plus ``description``."""
        return {**asdict(self), "description": self.describe()}


# ------------------------------------------------------------------------------------------------
# Presets
# ------------------------------------------------------------------------------------------------

#: The study's model: one large mixture-of-experts model served with TP8 on 8 DGX Sparks, of
#: which the study gives 78 layers, hidden size 6,144 and 2-byte activations; its expert counts
#: are not part of the study, so they are unknown here (the glm-5 preset has the same shape and
#: its published expert counts).
STUDY_MODEL = Model(
    name="study", layers=78, hidden_size=6144, bytes_per_value=2,
    experts=None, experts_per_token=None, shared_experts=None, moe_layers=None,
    title="the measured study's model: a 78-layer mixture-of-experts model, hidden 6,144, bf16, "
          "served TP8 on 8 DGX Sparks",
    source="the study's architecture estimate (78 layers, hidden 6,144, 2 bytes)")

PRESETS: dict[str, Model] = {
    "study": STUDY_MODEL,
    "glm-5": Model(
        name="glm-5", layers=78, hidden_size=6144, bytes_per_value=2, vocab_size=154880,
        experts=256, experts_per_token=8, shared_experts=1, moe_layers=75,
        title="GLM-5 (zai-org/GLM-5), mixture-of-experts, first 3 layers dense",
        source="config.json of zai-org/GLM-5: num_hidden_layers 78, hidden_size 6144, "
               "n_routed_experts 256, num_experts_per_tok 8, n_shared_experts 1, "
               "first_k_dense_replace 3, vocab_size 154880, bfloat16"),
    "llama-3-70b": Model(
        name="llama-3-70b", layers=80, hidden_size=8192, bytes_per_value=2, vocab_size=128256,
        title="Llama 3 70B (meta-llama/Meta-Llama-3-70B), dense",
        source="config.json of meta-llama/Meta-Llama-3-70B: num_hidden_layers 80, "
               "hidden_size 8192, vocab_size 128256, bfloat16"),
    "llama-3.1-8b": Model(
        name="llama-3.1-8b", layers=32, hidden_size=4096, bytes_per_value=2, vocab_size=128256,
        title="Llama 3.1 8B (meta-llama/Llama-3.1-8B), dense",
        source="config.json of meta-llama/Llama-3.1-8B: num_hidden_layers 32, hidden_size 4096, "
               "vocab_size 128256, bfloat16"),
    "qwen3-30b-a3b": Model(
        name="qwen3-30b-a3b", layers=48, hidden_size=2048, bytes_per_value=2, vocab_size=151936,
        experts=128, experts_per_token=8, shared_experts=0, moe_layers=48,
        title="Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B), mixture-of-experts",
        source="config.json of Qwen/Qwen3-30B-A3B: num_hidden_layers 48, hidden_size 2048, "
               "num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1, "
               "mlp_only_layers [], vocab_size 151936, bfloat16"),
    "qwen3-235b-a22b": Model(
        name="qwen3-235b-a22b", layers=94, hidden_size=4096, bytes_per_value=2,
        vocab_size=151936, experts=128, experts_per_token=8, shared_experts=0, moe_layers=94,
        title="Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B), mixture-of-experts",
        source="config.json of Qwen/Qwen3-235B-A22B: num_hidden_layers 94, hidden_size 4096, "
               "num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1, "
               "mlp_only_layers [], vocab_size 151936, bfloat16"),
    "deepseek-v2-lite": Model(
        name="deepseek-v2-lite", layers=27, hidden_size=2048, bytes_per_value=2,
        vocab_size=102400, experts=64, experts_per_token=6, shared_experts=2, moe_layers=26,
        title="DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite), mixture-of-experts, first layer "
              "dense",
        source="config.json of deepseek-ai/DeepSeek-V2-Lite: num_hidden_layers 27, hidden_size "
               "2048, n_routed_experts 64, num_experts_per_tok 6, n_shared_experts 2, "
               "first_k_dense_replace 1, moe_layer_freq 1, vocab_size 102400, torch_dtype "
               "bfloat16"),
    "deepseek-v3": Model(
        name="deepseek-v3", layers=61, hidden_size=7168, bytes_per_value=2, vocab_size=129280,
        experts=256, experts_per_token=8, shared_experts=1, moe_layers=58,
        title="DeepSeek-V3 (deepseek-ai/DeepSeek-V3), mixture-of-experts, first 3 layers dense",
        source="config.json of deepseek-ai/DeepSeek-V3: num_hidden_layers 61, hidden_size 7168, "
               "n_routed_experts 256, num_experts_per_tok 8, n_shared_experts 1, "
               "first_k_dense_replace 3, moe_layer_freq 1, vocab_size 129280 (activations bf16)"),
}


def preset(name: str) -> Model:
    """Return the preset ``name``; raises ``ModelError`` listing the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ModelError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})") from None


# ------------------------------------------------------------------------------------------------
# Hugging Face config.json
# ------------------------------------------------------------------------------------------------


def _int_field(p: Path, src: dict, key: str) -> int:
    v = src[key]
    if not isinstance(v, int) or isinstance(v, bool):
        raise ModelError(f"{p}: field {key} = {v!r} is not an integer")
    return v


def _moe_layer_count(p: Path, src: dict, layers: int, experts: int) -> int:
    """Count the layers with a MoE block from the config's layer-placement fields.

    Layer ``i`` (0-based) is MoE when all the fields present agree: not in ``mlp_only_layers``
    (Qwen2/3-MoE), ``(i + 1) % decoder_sparse_step == 0`` (Qwen2/3-MoE), ``i >=
    first_k_dense_replace`` and ``i % moe_layer_freq == 0`` (DeepSeek-V2/V3, GLM-4.5/5, Kimi),
    ``(i + 1) % interleave_moe_layer_step == 0`` (Llama 4), and, where a per-layer list
    ``mlp_layer_types`` gives "sparse"/"dense", that list wins. Fields absent mean every layer.
    """
    if experts == 0:
        return 0
    types = src.get("mlp_layer_types")
    if isinstance(types, list) and len(types) == layers:
        return sum(1 for t in types if str(t).lower() in ("sparse", "moe"))
    only = src.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise ModelError(f"{p}: field mlp_only_layers = {only!r} is not a list of layer numbers")
    only_set = set(only)
    step = src.get("decoder_sparse_step", 1) or 1
    first_dense = src.get("first_k_dense_replace", 0) or 0
    freq = src.get("moe_layer_freq", 1) or 1
    interleave = src.get("interleave_moe_layer_step", 1) or 1
    for key, v in (("decoder_sparse_step", step), ("first_k_dense_replace", first_dense),
                   ("moe_layer_freq", freq), ("interleave_moe_layer_step", interleave)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ModelError(f"{p}: field {key} = {v!r} is not a non-negative integer")
    return sum(1 for i in range(layers)
               if i not in only_set and (i + 1) % step == 0 and i >= first_dense
               and i % freq == 0 and (i + 1) % interleave == 0)


def model_from_hf_config(path: str | os.PathLike, name: str | None = None) -> Model:
    """Read a model from a Hugging Face ``config.json`` (a directory is taken to contain one).

    Dense fields: ``num_hidden_layers``, ``hidden_size``, ``torch_dtype`` (or the newer ``dtype``;
    bfloat16 when neither is present, as serving engines run activations in bf16), ``vocab_size``.
    Mixture-of-experts fields: routed experts from ``num_experts`` (Qwen-MoE), ``n_routed_experts``
    (DeepSeek, GLM), ``num_local_experts`` (Mixtral, Llama 4) or ``moe_num_experts``; experts per
    token from ``num_experts_per_tok`` (or ``moe_top_k``/``top_k_experts``); shared experts from
    ``n_shared_experts``/``num_shared_experts`` (or 1 when ``shared_expert_intermediate_size`` > 0);
    which layers are MoE from ``mlp_only_layers``, ``decoder_sparse_step``,
    ``first_k_dense_replace``, ``moe_layer_freq``, ``interleave_moe_layer_step`` or
    ``mlp_layer_types``. Configs that nest the language model under ``text_config``,
    ``language_config`` or ``llm_config`` are read from there. ``name`` (default: the config's
    ``_name_or_path``, else ``model_type``, else the directory name) names the model.

    Raises ``ModelError`` naming the file and the missing or invalid field.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        cfg = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise ModelError(f"{p}: no such file") from exc
    except IsADirectoryError as exc:
        raise ModelError(f"{p}: is a directory without config.json") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{p}: not valid JSON ({exc})") from exc
    if not isinstance(cfg, dict):
        raise ModelError(f"{p}: expected a JSON object, got {type(cfg).__name__}")
    src = cfg
    for nested in ("text_config", "language_config", "llm_config"):
        if "num_hidden_layers" not in cfg and isinstance(cfg.get(nested), dict):
            src = cfg[nested]
            break
    missing = [k for k in ("num_hidden_layers", "hidden_size") if k not in src]
    if missing:
        raise ModelError(f"{p}: field(s) {', '.join(missing)} missing (expected a Hugging Face "
                         "config.json with num_hidden_layers and hidden_size)")
    dtype = src.get("torch_dtype", src.get("dtype", cfg.get("torch_dtype", cfg.get("dtype"))))
    if dtype is None:
        nbytes = 2
    else:
        key = str(dtype).replace("torch.", "").lower()
        if key not in DTYPE_BYTES:
            raise ModelError(f"{p}: field torch_dtype = {dtype!r} is not a known dtype "
                             f"(known: {', '.join(sorted(DTYPE_BYTES))})")
        nbytes = DTYPE_BYTES[key]
    layers = _int_field(p, src, "num_hidden_layers")
    hidden = _int_field(p, src, "hidden_size")
    vocab = src.get("vocab_size")
    if vocab is not None and vocab != 0:
        vocab = _int_field(p, src, "vocab_size")
    else:
        vocab = None
    experts = 0
    for k in ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"):
        if src.get(k):
            experts = _int_field(p, src, k)
            break
    topk = 0
    shared = 0
    moe_layers = 0
    if experts:
        for k in ("num_experts_per_tok", "moe_top_k", "top_k_experts", "num_experts_per_token"):
            if src.get(k):
                topk = _int_field(p, src, k)
                break
        else:
            raise ModelError(f"{p}: a mixture-of-experts config ({experts} experts) without "
                             "num_experts_per_tok (experts per token)")
        for k in ("n_shared_experts", "num_shared_experts"):
            if src.get(k):
                shared = _int_field(p, src, k)
                break
        else:
            if src.get("shared_expert_intermediate_size"):
                shared = 1
        moe_layers = _moe_layer_count(p, src, layers, experts)
    label = name or str(cfg.get("_name_or_path") or src.get("model_type")
                        or cfg.get("model_type") or p.parent.name)
    try:
        return Model(name=label, layers=layers, hidden_size=hidden, bytes_per_value=nbytes,
                     vocab_size=vocab, experts=experts, experts_per_token=topk,
                     shared_experts=shared, moe_layers=moe_layers,
                     title=f"from {p}", source=f"{p}")
    except ModelError as exc:
        raise ModelError(f"{p}: {exc}") from exc


def model_from_dict(d: dict[str, Any]) -> Model:
    """Rebuild a ``Model`` from ``Model.to_dict()`` (e.g. a manifest's record). Raises ModelError."""
    keys = {f for f in Model.__dataclass_fields__}
    try:
        return Model(**{k: v for k, v in d.items() if k in keys})
    except TypeError as exc:
        raise ModelError(f"not a model record: {exc}") from exc


# ------------------------------------------------------------------------------------------------
# Per-token traffic
# ------------------------------------------------------------------------------------------------


def _check_n(name: str, n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ModelError(f"{name} must be an integer >= 1, got {n!r}")


def ring_factor(tp: int) -> float:
    """Return the bytes each node sends per all-reduce, as a multiple of the block: ``2(N-1)/N``.

    NCCL ring all-reduce = reduce-scatter + all-gather, ``2(N-1)`` steps of ``block/N`` each
    (Patarasuk & Yuan 2009): 1.0 at TP2, 1.5 at TP4, 1.75 at TP8, 1.875 at TP16; 0 at TP1.
    """
    _check_n("tp (tensor-parallel size)", tp)
    return 2.0 * (tp - 1) / tp


def allreduces_per_pass(layers: int) -> int:
    """Return the all-reduces per forward pass under TP, ``2 x layers + 1``."""
    return 2 * layers + 1


def tp_bytes_per_token(model: Model, tp: int) -> float:
    """Return bytes sent per node per prompt token under tensor parallelism.

    ``(2 x layers + 1) x hidden x bytes x 2(N-1)/N``; the study's model at TP8: 3,376,128 B.
    MoE models too (each expert split N ways ends in the same all-reduce).
    """
    return allreduces_per_pass(model.layers) * model.hidden_size * model.bytes_per_value \
        * ring_factor(tp)


def off_node_share(nodes: int) -> float:
    """Return the share of uniformly routed expert copies that leave a node: ``(nodes-1)/nodes``."""
    _check_n("nodes", nodes)
    return (nodes - 1) / nodes


def ep_bytes_per_token(model: Model, nodes: int) -> float:
    """Return bytes sent per node per token it holds under expert parallelism (all-to-all).

    ``moe_layers x 2 x hidden x bytes x experts_per_token x (nodes-1)/nodes``: dispatch of the
    node's tokens to off-node experts plus combine of the other nodes' tokens back (equal on
    average), per MoE layer; the node receives as much. Sources in the module docstring
    (GShard, DeepSpeed-MoE, DeepSeek-V3/DeepEP). Raises ``ModelError`` for a dense model or one
    whose MoE fields are unknown.
    """
    if model.is_moe is False:
        raise ModelError(f"{model.name} is a dense model: expert parallelism does not apply")
    if not model.moe_known:
        raise ModelError(f"{model.name}: experts, experts per token or MoE layers unknown; give "
                         "a config.json with the mixture-of-experts fields")
    return (model.moe_layers * 2 * model.hidden_size * model.bytes_per_value
            * model.experts_per_token * off_node_share(nodes))


def check_backend(backend: str) -> str:
    """Return the formula family of vLLM's ``--all2all-backend`` ``backend`` (see
    ``ALL2ALL_BACKENDS``); raises ``ModelError`` naming the known backends."""
    if backend not in ALL2ALL_BACKENDS:
        raise ModelError(f"unknown all2all backend {backend!r} (known: "
                         f"{', '.join(ALL2ALL_BACKENDS)})")
    return ALL2ALL_BACKENDS[backend]


def ep_ring_share(dp: int, tp: int = 1) -> float:
    """Return the slices a node sends per token it holds in one ring collective over the EP group.

    ``S = (D x T - 1) / T`` (module docstring: a ring of ``D x T`` ranks on ``D`` nodes, each
    TP rank holding ``1/T`` of the node's tokens under vLLM's sequence-parallel MoE): ``D - 1`` at
    T = 1, 3.5 at DP4 x TP2, 7 at DP8 x TP1; 0 with every rank on one node (D = 1).
    """
    _check_n("dp", dp)
    _check_n("tp", tp)
    return 0.0 if dp == 1 else (dp * tp - 1) / tp


def ep_layer_bytes_per_token(hidden: int, bytes_per_value: int, experts_per_token: int,
                             experts: int | None, dp: int, tp: int = 1,
                             backend: str = DEFAULT_ALL2ALL_BACKEND) -> tuple[float, float]:
    """Return ``(dispatch, combine)``: the bytes one node sends per token it holds in one MoE layer.

    Module docstring, from vLLM v0.34.0 / v0.13.0 (pinned there). With ``S = ep_ring_share(dp,
    tp)`` and ``H = hidden x bytes_per_value``:

    - ``allgather_reducescatter``: dispatch ``S x (H + 8 k)`` (hidden states, ``topk_weights``
      fp32, ``topk_ids`` int32), combine ``S x H`` (reduce-scatter of the hidden states);
    - ``naive``: dispatch ``S x (H + experts x bytes_per_value)`` (broadcasts of the hidden states
      and the router logits), combine ``2 S x H`` (all-reduce of the gathered buffer);
    - dispatch/combine backends: ``H x k x (D-1)/D`` each.

    DeepSeek-V2-Lite (hidden 2,048, bf16, k = 6, 64 experts) at DP4 x TP2 (S = 3.5):
    allgather_reducescatter (14,504, 14,336); naive (14,784, 28,672); DeepEP (18,432, 18,432).
    Raises ``ModelError`` for an unknown backend, a bad size or ``naive`` without ``experts``.
    """
    kind = check_backend(backend)
    for name, v in (("hidden", hidden), ("bytes_per_value", bytes_per_value),
                    ("experts_per_token", experts_per_token)):
        _check_n(name, v)
    h = hidden * bytes_per_value
    if kind == "dispatch_combine":
        _check_n("tp", tp)
        one = float(h * experts_per_token * off_node_share(dp))
        return one, one
    s = ep_ring_share(dp, tp)
    disp, comb = RING_HIDDEN_COPIES[kind]
    if kind == "allgather_reducescatter":
        meta = TOPK_BYTES_PER_EXPERT * experts_per_token
    else:
        if not experts:
            raise ModelError("the naive backend broadcasts the router logits: the routed "
                             "experts' count is needed")
        meta = experts * bytes_per_value
    return s * (disp * h + meta), s * comb * h


def ep_node_bytes_per_token(model: Model, dp: int, tp: int = 1,
                            backend: str = DEFAULT_ALL2ALL_BACKEND) -> float:
    """Return the bytes one node sends on its NICs per token of the DP replica it holds.

    ``dp`` = DP replicas, one per node (or Pod); ``tp`` = TP ranks inside each node (NVLink: their
    collectives put nothing on the NIC). ``moe_layers x (dispatch + combine)`` of
    ``ep_layer_bytes_per_token``. DeepSeek-V2-Lite (26 MoE layers), DP4 x TP2:
    allgather_reducescatter 26 x 3.5 x (2 x 4,096 + 48) = 749,840 B; naive 26 x 3.5 x (3 x 4,096 +
    128) = 1,129,856 B; DeepEP 26 x 2 x 4,096 x 6 x 3/4 = 958,464 B. EP8 (DP8 x TP1):
    1,499,680 B, 2,259,712 B and 1,118,208 B. The node receives as much. Raises ``ModelError``
    for a dense model, unknown MoE fields or an unknown backend.
    """
    _require_moe(model)
    d, c = ep_layer_bytes_per_token(model.hidden_size, model.bytes_per_value,
                                    model.experts_per_token, model.experts, dp, tp, backend)
    return model.moe_layers * (d + c)


def ep_rank_bytes_per_token(model: Model, dp: int, backend: str = DEFAULT_ALL2ALL_BACKEND,
                            *, tp: int = 1) -> float | None:
    """Return the NIC bytes one GPU sends per token of its DP replica under a ring backend.

    ``ep_node_bytes_per_token / tp``: the ``tp`` ranks of a node share the ring's node crossings
    evenly (each holds ``1/tp`` of the tokens under sequence-parallel MoE). DeepSeek-V2-Lite at
    DP4 x TP2 with allgather_reducescatter: 749,840 / 2 = 374,920 B. None for the
    dispatch/combine backends (their bytes are counted per node, not per rank). Raises
    ``ModelError`` as ``ep_node_bytes_per_token``.
    """
    if check_backend(backend) == "dispatch_combine":
        _require_moe(model)
        return None
    return ep_node_bytes_per_token(model, dp, tp, backend) / tp


def ep_formula(backend: str) -> str:
    """Return the per-node formula of ``backend`` as one line of text (for the outputs)."""
    kind = check_backend(backend)
    if kind == "dispatch_combine":
        return "MoE layers x 2 x hidden x bytes x experts per token x (D-1)/D"
    if kind == "allgather_reducescatter":
        return ("MoE layers x (D x TP - 1)/TP x (2 x hidden x bytes + 8 x experts per token) "
                "(all-gather of hidden states + top-k weights fp32 and ids int32, reduce-scatter "
                "of hidden states, over the EP group: sequence-parallel MoE)")
    return ("MoE layers x (D x TP - 1)/TP x (3 x hidden x bytes + experts x bytes) (broadcasts "
            "of hidden states + router logits, all-reduce of the gathered hidden states, over "
            "the EP group; vLLM v0.13.0)")


def ep_formula_values(model: Model, dp: int, tp: int = 1,
                      backend: str = DEFAULT_ALL2ALL_BACKEND) -> str:
    """Return ``ep_formula`` with this model's and layout's numbers put in (for the outputs)."""
    kind = check_backend(backend)
    h, b, L, k = (model.hidden_size, model.bytes_per_value, model.moe_layers,
                  model.experts_per_token)
    if kind == "dispatch_combine":
        return f"{L} x 2 x {h:,} x {b} x {k} x {dp - 1}/{dp}"
    s = f"({dp} x {tp} - 1)/{tp}" if dp > 1 else "0"
    if kind == "allgather_reducescatter":
        return f"{L} x {s} x (2 x {h:,} x {b} + 8 x {k})"
    return f"{L} x {s} x (3 x {h:,} x {b} + {model.experts} x {b})"


def _require_moe(model: Model) -> None:
    if model.is_moe is False:
        raise ModelError(f"{model.name} is a dense model: expert parallelism does not apply")
    if not model.moe_known:
        raise ModelError(f"{model.name}: experts, experts per token or MoE layers unknown; give "
                         "a config.json with the mixture-of-experts fields")


def ep_dispatch_bytes_per_token_layer(model: Model, nodes: int) -> float:
    """Return one direction of one MoE layer's all-to-all per token: ``hidden x bytes x k x share``."""
    return ep_bytes_per_token(model, nodes) / (2 * model.moe_layers)


# ------------------------------------------------------------------------------------------------
# Setup
# ------------------------------------------------------------------------------------------------


def _check_gbps(name: str, v: Any, *, none_ok: bool = True) -> None:
    if v is None and none_ok:
        return
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
        raise ModelError(f"{name} must be a positive link speed in Gb/s, got {v!r}")


@dataclass(frozen=True)
class Setup:
    """A served model on a cluster, with the links of two runs A and B.

    ``tp`` = tensor-parallel size (ranks); ``nodes`` = machines the ranks span (one GPU per DGX
    Spark, so ``nodes = tp`` there; ``nodes = 1`` sends nothing over the network). ``link_a_gbps``
    = run A's link; ``link_b_gbps`` = the link run B has or stands for (e.g. 100); when
    ``b_emulated`` B is an emulated link that really carries ``b_real_gbps`` (the study: an
    emulated 100 Gb/s link carrying ~109 Gb/s over one PCIe x4 twin), else a real cable
    (``b_real_gbps`` is then ``link_b_gbps``). ``twins`` = RDMA devices per port (2 on a Spark).
    ``layout``: "tp" (all-reduce) or "ep" (expert-parallel all-to-all; MoE models only).

    Expert parallelism: ``dp`` = DP replicas (vLLM ``--data-parallel-size``), each on its own node
    or Pod, with ``tp`` TP ranks inside it over NVLink (the hybrid layout ``--tp T --dp D``: EP
    size ``T x D``); ``nodes`` is then ``dp`` (or 1: everything on one node, nothing on the
    NIC). Without ``dp`` the older reading holds: ``tp`` ranks over ``nodes`` nodes, one DP
    replica per node (``ep_dp = nodes``, ``ep_tp = tp / nodes``). ``all2all_backend``: vLLM's
    ``--all2all-backend`` (``ALL2ALL_BACKENDS``); ``rails``: NICs per node the EP traffic spreads
    over (default one per TP rank).

    Raises ``ModelError`` for an invalid value (naming the field).
    """

    model: Model = STUDY_MODEL
    tp: int = 8
    nodes: int | None = None
    link_a_gbps: float = LINK_200_GBPS
    link_b_gbps: float | None = LINK_100_GBPS
    b_emulated: bool = True
    b_real_gbps: float | None = LINK_EMULATED_GBPS
    twins: int | None = 2
    layout: str = "tp"
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    dp: int | None = None
    all2all_backend: str = DEFAULT_ALL2ALL_BACKEND
    rails: int | None = None

    def __post_init__(self) -> None:
        _check_n("tp", self.tp)
        if self.dp is not None:
            _check_n("dp", self.dp)
            if self.layout != "ep":
                raise ModelError("--dp (DP replicas) goes with --layout ep: under --layout tp "
                                 "the replicas exchange nothing (give each replica's TP and "
                                 "nodes)")
            if self.nodes is None:
                object.__setattr__(self, "nodes", self.dp)
            _check_n("nodes", self.nodes)
            if self.nodes not in (1, self.dp):
                raise ModelError(f"{self.nodes} nodes for DP{self.dp}: each DP replica runs on "
                                 f"its own node or Pod (--nodes {self.dp}), or all on one (1)")
        else:
            if self.nodes is None:
                object.__setattr__(self, "nodes", self.tp)
            _check_n("nodes", self.nodes)
            if self.nodes > self.tp or self.tp % self.nodes:
                hint = (f"; for TP{self.tp} inside each node with EP across them give --dp "
                        f"{self.nodes}" if self.layout == "ep" else "")
                raise ModelError(f"TP size {self.tp} does not split evenly over {self.nodes} "
                                 f"nodes{hint}")
        check_backend(self.all2all_backend)
        if self.rails is not None:
            _check_n("rails", self.rails)
        _check_gbps("link_a_gbps", self.link_a_gbps, none_ok=False)
        _check_gbps("link_b_gbps", self.link_b_gbps)
        _check_gbps("b_real_gbps", self.b_real_gbps)
        if not self.b_emulated and self.b_real_gbps is None:
            object.__setattr__(self, "b_real_gbps", self.link_b_gbps)
        if self.twins is not None:
            _check_n("twins", self.twins)
        if self.layout not in LAYOUTS:
            raise ModelError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")

    # -- the links ------------------------------------------------------------------------------

    @property
    def b_effective_gbps(self) -> float | None:
        """The speed run B's traffic really moves at: the emulated link's real speed, else the cable."""
        return self.b_real_gbps if self.b_emulated else self.link_b_gbps

    @property
    def b_bound_gbps(self) -> float:
        """The speed the bound uses for B: its real speed when known, else the nominal link."""
        return self.b_effective_gbps or self.link_b_gbps

    @property
    def real_cable_gbps(self) -> float | None:
        """The real cable an emulated B is corrected to (``link_b_gbps``), else None."""
        return self.link_b_gbps if self.corrects_emulation else None

    @property
    def corrects_emulation(self) -> bool:
        """True when B is emulated and its real speed differs from the cable it stands for."""
        return bool(self.b_emulated and self.b_real_gbps and self.link_b_gbps
                    and self.b_real_gbps != self.link_b_gbps)

    def link_label(self, side: str) -> str:
        """A label like "200 Gb/s" (A) or "emulated 100 Gb/s (~109 Gb/s)" (B)."""
        if side.upper() == "A":
            return f"{self.link_a_gbps:g} Gb/s"
        if self.link_b_gbps is None:
            return "unknown link"
        if self.b_emulated:
            real = f" (~{self.b_real_gbps:g} Gb/s)" if self.b_real_gbps else " (real speed unknown)"
            return f"emulated {self.link_b_gbps:g} Gb/s{real}"
        return f"{self.link_b_gbps:g} Gb/s"

    # -- the traffic ----------------------------------------------------------------------------

    @property
    def networked(self) -> bool:
        """False when every rank is on one node (nothing crosses the network)."""
        return self.nodes > 1

    def tp_bytes_per_token(self) -> float:
        """Bytes per node per prompt token under TP (0 on one node). See ``tp_bytes_per_token``."""
        return tp_bytes_per_token(self.model, self.tp) if self.networked else 0.0

    @property
    def ep_dp(self) -> int:
        """DP replicas of the EP layout (``dp``, else one per node)."""
        return self.dp if self.dp is not None else self.nodes

    @property
    def ep_tp(self) -> int:
        """TP ranks inside each DP replica (``tp`` with ``dp``, else ``tp / nodes``)."""
        return self.tp if self.dp is not None else self.tp // self.nodes

    @property
    def ep_size(self) -> int:
        """Ranks the experts spread over: ``ep_dp x ep_tp``."""
        return self.ep_dp * self.ep_tp

    @property
    def rails_per_node(self) -> int:
        """NICs per node the EP traffic spreads over (``rails``, else one per TP rank)."""
        return self.rails or self.ep_tp

    def ep_bytes_per_token(self) -> float | None:
        """Bytes per node per token it holds under EP (``ep_node_bytes_per_token`` with this
        setup's backend, DP and TP; 0 on one node); None for a dense model or unknown MoE fields."""
        if not self.model.moe_known:
            return None
        if not self.networked:
            return 0.0
        return ep_node_bytes_per_token(self.model, self.ep_dp, self.ep_tp, self.all2all_backend)

    def ep_bytes_per_token_rail(self) -> float | None:
        """``ep_bytes_per_token`` spread evenly over ``rails_per_node`` NICs; None as it."""
        b = self.ep_bytes_per_token()
        return None if b is None else b / self.rails_per_node

    def bytes_per_token(self) -> float | None:
        """Bytes per node per prompt token under this setup's ``layout``."""
        return self.tp_bytes_per_token() if self.layout == "tp" else self.ep_bytes_per_token()

    def describe(self) -> str:
        """One line naming the model, the parallel layout and both links."""
        lay = (f"TP{self.tp}" if self.layout == "tp"
               else f"EP{self.ep_size} = DP{self.ep_dp} x TP{self.ep_tp} "
                    f"({self.all2all_backend}; TP inside each node, EP across nodes)")
        nodes = f" on {self.nodes} node{'s' if self.nodes != 1 else ''}"
        return (f"{self.model.name}, {lay}{nodes}; A {self.link_label('A')}, "
                f"B {self.link_label('B')}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable record of the setup (model as ``Model.to_dict``), with ``description``."""
        d = {k: getattr(self, k) for k in ("tp", "nodes", "link_a_gbps", "link_b_gbps",
                                           "b_emulated", "b_real_gbps", "twins", "layout",
                                           "dp", "all2all_backend", "rails")}
        return {"model": self.model.to_dict(), **d, "sources": dict(self.sources),
                "description": self.describe()}

    def with_(self, **changes: Any) -> Setup:
        """Return a copy with ``changes`` (validated again)."""
        return replace(self, **changes)


#: The study's setup: its model at TP8 on 8 Sparks, 200 Gb/s against an emulated 100 Gb/s link
#: that really carries ~109 Gb/s.
STUDY_SETUP = Setup()


# ------------------------------------------------------------------------------------------------
# Setup from options and the captures' manifests
# ------------------------------------------------------------------------------------------------

#: The manifest key (under ``extra``) where ``record`` keeps the setup given at record time.
MANIFEST_SETUP_KEY = "setup"


def setup_record(*, link_gbps: float | None = None, emulated: bool | None = None,
                 emulated_real_gbps: float | None = None, model: Model | None = None,
                 tp: int | None = None, nodes: int | None = None, dp: int | None = None,
                 all2all_backend: str | None = None) -> dict[str, Any]:
    """Return the setup of one run as ``record`` stores it in the manifest's ``extra.setup``.

    ``link_gbps``: the link this run has or stands for (e.g. 100 for an emulated 100 Gb/s link);
    ``emulated``: the link is an emulation (e.g. NCCL_IB_HCA naming one PCIe twin) that really
    carries ``emulated_real_gbps``. Only the values given are stored (unknown stays absent).
    """
    _check_gbps("link_gbps", link_gbps)
    _check_gbps("emulated_real_gbps", emulated_real_gbps)
    rec: dict[str, Any] = {}
    if link_gbps is not None:
        rec["link_gbps"] = float(link_gbps)
    if emulated is not None:
        rec["emulated"] = bool(emulated)
    if emulated_real_gbps is not None:
        rec["emulated_real_gbps"] = float(emulated_real_gbps)
    if model is not None:
        rec["model"] = model.to_dict()
    if tp is not None:
        _check_n("tp", tp)
        rec["tp"] = tp
    if nodes is not None:
        _check_n("nodes", nodes)
        rec["nodes"] = nodes
    if dp is not None:  # an expert-parallel run: DP replicas (one per node) and vLLM's backend
        _check_n("dp", dp)
        rec["dp"] = dp
    if all2all_backend is not None:
        check_backend(all2all_backend)
        rec["all2all_backend"] = all2all_backend
    return rec


def recorded_setup(meta: dict[str, Any] | None) -> dict[str, Any]:
    """Return a manifest's ``extra.setup`` (as ``setup_record`` wrote it) with its model rebuilt.

    Values of the wrong type are left out (an unknown stays unknown); ``{}`` when absent.
    """
    extra = (meta or {}).get("extra") if isinstance(meta, dict) else None
    rec = extra.get(MANIFEST_SETUP_KEY) if isinstance(extra, dict) else None
    if not isinstance(rec, dict):
        return {}
    out: dict[str, Any] = {}
    for k in ("link_gbps", "emulated_real_gbps"):
        v = rec.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out[k] = float(v)
    if isinstance(rec.get("emulated"), bool):
        out["emulated"] = rec["emulated"]
    for k in ("tp", "nodes", "dp"):
        v = rec.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            out[k] = v
    if rec.get("all2all_backend") in ALL2ALL_BACKENDS:
        out["all2all_backend"] = rec["all2all_backend"]
    if isinstance(rec.get("model"), dict):
        try:
            out["model"] = model_from_dict(rec["model"])
        except ModelError:
            pass
    return out


def _says_emulated(meta: dict[str, Any] | None) -> bool:
    """True when the manifest's ``extra.label`` or ``extra.note`` (``record --label/--note``)
    says the run's link is emulated ("emulated", or names ``NCCL_IB_HCA``)."""
    extra = (meta or {}).get("extra") if isinstance(meta, dict) else None
    if not isinstance(extra, dict):
        return False
    text = " ".join(str(extra.get(k) or "") for k in ("label", "note")).lower()
    return "emulat" in text or "nccl_ib_hca" in text


@dataclass
class RunFacts:
    """What one capture tells about its run: the manifest's recorded setup, the port rate the
    kernel reported (Gb/s, None when unknown), the RDMA twin devices, and which interfaces the
    emulation check found carrying the traffic ("single", "both" or None)."""

    meta: dict[str, Any] = field(default_factory=dict)
    port_gbps: float | None = None
    twins: int | None = None
    interfaces: str | None = None

    @property
    def recorded(self) -> dict[str, Any]:
        return recorded_setup(self.meta)


def resolve_setup(*, preset_name: str | None = None, config: str | os.PathLike | None = None,
                  model: Model | None = None, tp: int | None = None, nodes: int | None = None,
                  link_a_gbps: float | None = None, link_b_gbps: float | None = None,
                  b_emulated_gbps: float | None = None, b_real: bool = False,
                  layout: str = "tp", run_a: RunFacts | None = None,
                  run_b: RunFacts | None = None, dp: int | None = None,
                  all2all_backend: str | None = None, rails: int | None = None) -> Setup:
    """Build the ``Setup`` from the options given, then the captures' manifests, then defaults.

    Order for each value (the first known wins), recorded in ``Setup.sources``:

    - model: ``model`` / ``config`` / ``preset_name``; a manifest's recorded model (A, then B);
      else the study's model;
    - tp, nodes: the options; a manifest's recorded value; else TP8 (the study) and nodes = tp;
    - link A: ``link_a_gbps``; A's recorded ``link_gbps``; A's port rate; else 200;
    - B emulated: ``b_emulated_gbps`` given -> yes (its real speed); ``b_real`` -> no; B's
      recorded ``emulated``; B's ``record --label/--note`` saying "emulated" or naming
      NCCL_IB_HCA; the emulation check (one interface of two or more twins carried
      everything) -> yes; else no;
    - link B: ``link_b_gbps``; B's recorded ``link_gbps``; when emulated, B's port rate divided
      by its twins (an emulated 100 Gb/s link on a 200 Gb/s port of two twins); else B's port
      rate; else 100;
    - B's real speed (emulated only): ``b_emulated_gbps``; B's recorded ``emulated_real_gbps``;
      for one of two twins of a 200 Gb/s port, the ~109 Gb/s measured on a DGX Spark (one PCIe
      Gen5 x4 path, ib_write_bw); else unknown (no correction to a real cable).

    Raises ``ModelError`` for conflicting or invalid values.
    """
    run_a = run_a or RunFacts()
    run_b = run_b or RunFacts()
    rec_a, rec_b = run_a.recorded, run_b.recorded
    src: dict[str, str] = {}
    ep_only = [o for o, v in (("--all2all-backend", all2all_backend), ("--rails", rails))
               if v is not None]
    if ep_only and layout != "ep":  # never silently ignored under --layout tp
        raise ModelError(f"{' and '.join(ep_only)} go{'es' if len(ep_only) == 1 else ''} with "
                         "--layout ep (the expert collective's traffic); under --layout tp "
                         f"{'it changes' if len(ep_only) == 1 else 'they change'} nothing")
    if sum(x is not None for x in (model, config, preset_name)) > 1:
        raise ModelError("give one model: --preset or --config")
    if model is not None:
        src["model"] = "given"
    elif config is not None:
        model = model_from_hf_config(config)
        src["model"] = f"--config {config}"
    elif preset_name is not None:
        model = preset(preset_name)
        src["model"] = f"--preset {preset_name}"
    elif "model" in rec_a or "model" in rec_b:
        model = rec_a.get("model") or rec_b.get("model")
        src["model"] = "the capture's manifest (record --preset/--config)"
    else:
        model = STUDY_MODEL
        src["model"] = "default: the study's model (give --preset or --config)"

    def pick(name, given, default, default_src):
        if given is not None:
            src[name] = f"--{name}"
            return given
        for rec, side in ((rec_a, "A"), (rec_b, "B")):
            if name in rec:
                src[name] = f"manifest of {side}"
                return rec[name]
        src[name] = default_src
        return default

    tp = pick("tp", tp, 8, "default: TP8, the study's (give --tp)")
    given_nodes = nodes
    if dp is None and layout == "ep":  # an EP run recorded its DP replicas and backend
        for rec, side in ((rec_a, "A"), (rec_b, "B")):
            if "dp" in rec:
                dp = rec["dp"]
                src["dp"] = f"manifest of {side}"
                if all2all_backend is None and rec.get("all2all_backend"):
                    all2all_backend = rec["all2all_backend"]
                    src["all2all_backend"] = f"manifest of {side}"
                break
    if dp is not None:
        src.setdefault("dp", "--dp")
        src["nodes"] = "--nodes" if nodes is not None else "one node (or Pod) per DP replica"
    nodes = nodes if dp is not None else pick("nodes", nodes, None,
                                              "default: one node per TP rank (DGX Spark)")
    if nodes is None:
        nodes = dp if dp is not None else tp
    elif dp is None and given_nodes is None and (nodes > tp or tp % nodes):
        nodes = tp  # the recorded node count belongs to another TP size than the one given
        src["nodes"] = f"one node per TP rank (the recorded nodes do not fit TP{tp})"

    # link A
    if link_a_gbps is not None:
        src["link_a"] = "--link-a"
    elif "link_gbps" in rec_a:
        link_a_gbps, src["link_a"] = rec_a["link_gbps"], "manifest of A (record --link)"
    elif run_a.port_gbps:
        link_a_gbps, src["link_a"] = run_a.port_gbps, "port rate in the manifest of A"
    else:
        link_a_gbps, src["link_a"] = LINK_200_GBPS, "default: 200 Gb/s (no port rate recorded)"

    # is B emulated?
    if b_emulated_gbps is not None and b_real:
        raise ModelError("give either --b-emulated GBPS or --b-real, not both")
    twins_b = run_b.twins
    if b_emulated_gbps is not None:
        emulated, src["b_emulated"] = True, "--b-emulated"
    elif b_real:
        emulated, src["b_emulated"] = False, "--b-real"
    elif "emulated" in rec_b:
        emulated, src["b_emulated"] = rec_b["emulated"], "manifest of B (record --emulated)"
    elif _says_emulated(run_b.meta):
        emulated = True
        src["b_emulated"] = "manifest of B (record --label/--note says emulated / NCCL_IB_HCA)"
    elif run_b.interfaces == "single" and (twins_b or 0) >= 2:
        emulated = True
        src["b_emulated"] = "emulation check: one RDMA interface of B carried all traffic"
    else:
        emulated, src["b_emulated"] = False, "default: a real link"

    # link B
    if link_b_gbps is not None:
        src["link_b"] = "--link-b"
    elif "link_gbps" in rec_b:
        link_b_gbps, src["link_b"] = rec_b["link_gbps"], "manifest of B (record --link)"
    elif run_b.port_gbps and emulated and (twins_b or 0) >= 2:
        link_b_gbps = run_b.port_gbps / twins_b
        src["link_b"] = (f"port rate of B ({run_b.port_gbps:g} Gb/s) / its {twins_b} twins "
                         "(an emulated link)")
    elif run_b.port_gbps:
        link_b_gbps, src["link_b"] = run_b.port_gbps, "port rate in the manifest of B"
    else:
        link_b_gbps, src["link_b"] = LINK_100_GBPS, "default: 100 Gb/s (no port rate recorded)"

    # B's real speed
    real = None
    if emulated:
        if b_emulated_gbps is not None:
            real, src["b_real"] = b_emulated_gbps, "--b-emulated"
        elif "emulated_real_gbps" in rec_b:
            real, src["b_real"] = rec_b["emulated_real_gbps"], "manifest of B"
        elif run_b.port_gbps in (None, LINK_200_GBPS) and twins_b in (None, 2) \
                and link_b_gbps == LINK_100_GBPS:
            real = LINK_EMULATED_GBPS
            src["b_real"] = ("~109 Gb/s, one PCIe Gen5 x4 twin of a DGX Spark (ib_write_bw); "
                             "give --b-emulated GBPS for other hardware")
        else:
            src["b_real"] = "unknown (give --b-emulated GBPS): no correction to a real cable"
    twins = run_b.twins or run_a.twins
    src["twins"] = "RDMA devices in the manifests" if twins else "unknown"
    src.setdefault("all2all_backend", "--all2all-backend" if all2all_backend else
                   f"default: {DEFAULT_ALL2ALL_BACKEND} (vLLM's default)")
    return Setup(model=model, tp=tp, nodes=nodes, link_a_gbps=float(link_a_gbps),
                 link_b_gbps=float(link_b_gbps), b_emulated=emulated,
                 b_real_gbps=None if real is None else float(real), twins=twins,
                 layout=layout, sources=src, dp=dp,
                 all2all_backend=all2all_backend or DEFAULT_ALL2ALL_BACKEND, rails=rails)
