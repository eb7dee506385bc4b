"""Tensor-parallel traffic model of one DGX Spark node's ConnectX-7 twins (the emulator's physics).

What one node of a TP-N inference server sends and receives, as an exact function of time:

- **Prefill** (bandwidth-bound): each forward pass runs ``2 x layers + 1`` ring all-reduces of a block
  of ``tokens_in_pass x hidden x bytes_per_value``; each node sends ``2(N-1)/N`` times the block
  (method.md, "What tensor parallelism sends"). Each all-reduce moves at the available link rate
  plus a per-step latency, never faster than the ring's floor, so it appears as a burst of a few
  ms at close to line rate. The compute between them follows the layers: a short gap before each
  attention block's all-reduce, a long one before each MoE block's, each jittered (seeded), so
  windows of any width see realistic variation (no 5 ms moire against a perfectly even period).
- **Overlap**: ``ComputeModel.overlap_fraction`` (~5 %) of each prefill all-reduce is hidden
  behind the compute before it (the burst starts that much earlier, still at the link rate). A
  fit, not derived: with the floor it puts the emulated-link TTFT increases at ~93-96 % of the
  estimate's bound for P2-P6 and near zero for P1, as the study measured; without it every byte
  would be on the critical path and the increase would equal the bound by construction
  (method.md, "The estimate (upper bound)").
- **Decode** (latency-bound): a step carries ``1 + num_speculative_tokens`` tokens per running
  request; its all-reduces (plus the output-layer gather) are small and are modelled as a steady
  rate over the pass, independent of the link speed (method.md, "Prefill and decode load the
  network in opposite ways"). The draft acceptance is low (~1.05 tokens per step), as the study's
  traffic and decode speed together imply.
- **Scheduling**: vLLM V1's scheduler (``EngineConfig``): chunked prefill under
  ``max_num_batched_tokens``, each request's tokens per step capped by
  ``long_prefill_token_threshold``, running requests (decodes) first, ``max_num_seqs``; so one long
  prompt is prefilled 2,048 tokens per pass and four prompts arriving together in pairs, the first
  pair decoding in the passes that prefill the second, as the study saw.
- **Link**: two twins of one 200 Gb/s port, each limited to ~109 Gb/s by its PCIe x4 link; NCCL spreads
  traffic evenly over the active twins; "emulated 100 Gb/s" = only the first twin (method.md,
  "Hardware"). The rate of a transfer is ``min(cable_gbps, active_twins x twin_gbps)``, so a twin never
  carries more than ``twin_gbps``. tx and rx move the same amounts (every ring node sends what it
  receives).
- **Compute**: see ``ComputeModel``; calibrated on the study (TTFT and time to the last first token
  of P1-P6 at both links, decode speed per test, decode traffic, the peak-vs-window row of the 8K
  prefill). ``benchmarks/calibration.py`` prints every number beside the study's.

The output (:class:`Traffic`) holds the cumulative bytes one node sends on its collective as
piecewise-linear breakpoints (``t_ns``, ``cum_bytes``), the per-series split (per twin and direction,
plus the netdevs), and the ground-truth request timeline. Everything is deterministic for a seed.
Times are int64 ns from the start of the scenario (model time); bytes are decimal.

Size: one module (over 800 lines) because it is one model of the physics: the configurations
(``ModelArch``, ``EngineConfig``, ``ComputeModel``, ``LinkConfig``), the scenarios and ``simulate``
state each constant once beside the code that uses it; the seam if it grows is the configurations
and scenarios apart from ``simulate``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

TWINS = ("rocep1s0f1", "roceP2p1s0f1")
NETDEVS = ("enp1s0f1np1", "enP2p1s0f1np1")


@dataclass(frozen=True)
class ModelArch:
    """The served model's shape and parallel layout as the network sees it (defaults: the study's
    model, TP8 on 8 nodes).

    ``layout`` "tp": every pass runs ``2 x layers + 1`` ring all-reduces of ``tokens x hidden x
    bytes``, each node sending ``2(N-1)/N`` times the block (N = ``tp``) in ``2(N-1)`` steps.
    ``layout`` "ep" (mixture-of-experts models): attention data-parallel, routed experts spread
    over ``nodes``; every MoE layer of a pass runs a dispatch and a combine all-to-all, each moving
    ``tokens x hidden x bytes x experts_per_token x (nodes-1)/nodes`` out of the node (and as much
    in), in ``nodes - 1`` exchanges (``rdmascope.models.ep_bytes_per_token``, cited there).
    ``nodes`` (default ``tp``): machines the ranks span; on one node nothing crosses the network.
    EP with ``dp`` (the hybrid layout of ``rdmascope.models.Setup``): ``dp`` DP replicas, one per
    node (``nodes`` defaults to ``dp``), ``tp`` TP ranks inside each over NVLink (nothing on the
    NIC); ``all2all_backend`` (vLLM's ``--all2all-backend``) picks the formula
    (``rdmascope.models.ep_node_bytes_per_token``, cited there); the pass's dispatch and combine
    collectives share its bytes equally. Without ``dp`` the EP layout has one DP replica per node.
    ``experts`` = routed experts per MoE layer (the ``naive`` backend broadcasts the router logits,
    one value per expert).
    Raises ``ValueError`` for a bad size, an unknown layout or EP without MoE fields.
    """

    layers: int = 78
    hidden: int = 6144
    bytes_per_value: int = 2
    tp: int = 8
    nodes: int | None = None
    layout: str = "tp"
    moe_layers: int = 0
    experts_per_token: int = 0
    dp: int | None = None
    all2all_backend: str = "allgather_reducescatter"
    experts: int = 0

    def __post_init__(self):
        from rdmascope.models import check_backend

        for name in ("layers", "hidden", "bytes_per_value", "tp"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dp is not None and (self.dp < 1 or self.layout != "ep"):
            raise ValueError(f"dp must be >= 1 and goes with layout ep, got dp={self.dp} "
                             f"layout={self.layout}")
        check_backend(self.all2all_backend)
        if self.nodes is None:
            object.__setattr__(self, "nodes", self.tp if self.dp is None else self.dp)
        if self.dp is not None and self.nodes not in (1, self.dp):
            raise ValueError(f"{self.nodes} nodes for DP{self.dp}: one node per DP replica, or 1")
        if self.nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {self.nodes}")
        if self.layout not in ("tp", "ep"):
            raise ValueError(f"layout must be tp or ep, got {self.layout!r}")
        if self.layout == "ep" and not (self.moe_layers >= 1 and self.experts_per_token >= 1):
            raise ValueError("layout ep needs a mixture-of-experts model (moe_layers and "
                             "experts_per_token >= 1)")

    @classmethod
    def from_model(cls, model, *, tp: int = 8, nodes: int | None = None,
                   layout: str = "tp", dp: int | None = None,
                   all2all_backend: str = "allgather_reducescatter") -> ModelArch:
        """Return the arch of a ``rdmascope.models.Model`` at TP size ``tp`` over ``nodes``
        (EP: ``dp`` replicas and vLLM's ``all2all_backend``, see the class docstring).

        Raises ``ValueError`` (``rdmascope.models.ModelError`` is one) for EP on a dense model or
        one whose MoE fields are unknown.
        """
        moe = bool(model.moe_layers and model.experts_per_token)
        if layout == "ep" and not moe:
            raise ValueError(f"{model.name}: expert parallelism needs a mixture-of-experts model "
                             "with known experts per token and MoE layers")
        return cls(layers=model.layers, hidden=model.hidden_size,
                   bytes_per_value=model.bytes_per_value, tp=tp, nodes=nodes, layout=layout,
                   moe_layers=(model.moe_layers or 0) if moe else 0,
                   experts_per_token=(model.experts_per_token or 0) if moe else 0,
                   dp=dp, all2all_backend=all2all_backend,
                   experts=(model.experts or 0) if moe else 0)

    @property
    def ep_dp(self) -> int:
        """DP replicas of the EP layout: ``dp``, else one per node."""
        return self.dp if self.dp is not None else self.nodes

    @property
    def ep_tp(self) -> int:
        """TP ranks inside each replica: ``tp`` with ``dp``, else ``tp / nodes`` (at least 1)."""
        return self.tp if self.dp is not None else max(self.tp // self.nodes, 1)

    @property
    def networked(self) -> bool:
        """False when every rank is on one node (the collectives never reach the network)."""
        return self.nodes > 1

    @property
    def allreduces_per_pass(self) -> int:
        """All-reduces per forward pass under TP: ``2 x layers + 1`` (method.md)."""
        return 2 * self.layers + 1

    @property
    def ring_factor(self) -> float:
        """Bytes each node sends per byte of all-reduce block in a ring: ``2(N-1)/N``."""
        return 2.0 * (self.tp - 1) / self.tp

    @property
    def ring_steps(self) -> int:
        """Sequential ring steps of one all-reduce: ``2(N-1)``."""
        return 2 * (self.tp - 1)

    def allreduce_bytes(self, tokens: int) -> float:
        """Return the bytes one node sends in one all-reduce of ``tokens`` tokens.

        ``2(N-1)/N x tokens x hidden x bytes_per_value`` (method.md, "What tensor parallelism sends";
        4,096 tokens at the defaults: 88,080,384 bytes = 88.1 MB).
        """
        return self.ring_factor * tokens * self.hidden * self.bytes_per_value

    @property
    def collectives_per_pass(self) -> int:
        """Collectives per pass: ``2 x layers + 1`` all-reduces (tp) or ``2 x moe_layers``
        all-to-alls (ep: a dispatch and a combine per MoE layer)."""
        return self.allreduces_per_pass if self.layout == "tp" else 2 * self.moe_layers

    @property
    def collective_steps(self) -> int:
        """Sequential exchanges of one collective: ``2(N-1)`` ring steps (tp), ``nodes - 1``
        peer exchanges (ep)."""
        return self.ring_steps if self.layout == "tp" else max(self.ep_dp - 1, 1)

    def collective_bytes(self, tokens: int) -> float:
        """Return the bytes one node sends in one collective of a pass with ``tokens`` tokens.

        tp: ``allreduce_bytes``; ep: ``tokens x (dispatch + combine) / 2`` of
        ``rdmascope.models.ep_layer_bytes_per_token`` (the pass's dispatch and combine share the
        MoE layer's bytes equally): the top-k backends ``hidden x bytes x experts_per_token x
        (D-1)/D``; the ring backends over the EP group (vLLM's sequence-parallel MoE) ``(D x TP -
        1)/TP x`` their payload (hidden states, top-k weights and ids or router logits) halved;
        0 on one node.
        """
        from rdmascope.models import ep_layer_bytes_per_token

        if not self.networked:
            return 0.0
        if self.layout == "tp":
            return self.allreduce_bytes(tokens)
        d, c = ep_layer_bytes_per_token(self.hidden, self.bytes_per_value,
                                        self.experts_per_token, self.experts, self.ep_dp,
                                        self.ep_tp, self.all2all_backend)
        return tokens * (d + c) / 2

    @property
    def bytes_per_token(self) -> float:
        """Bytes per prompt token per node: ``collectives_per_pass x collective_bytes(1)``.

        tp: ``(2 x layers + 1) x hidden x bytes x 2(N-1)/N``, method.md: 157 x 6,144 x 2 x 1.75 =
        3,376,128 bytes (3.38 MB) at the defaults; ep: ``rdmascope.models.
        ep_node_bytes_per_token`` of the layout and backend.
        """
        return self.collectives_per_pass * self.collective_bytes(1)


@dataclass(frozen=True)
class EngineConfig:
    """The inference engine's scheduling, named as vLLM names it (``vllm serve --<name>``).

    The scheduler is vLLM V1's (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``): every
    step has a budget of ``max_num_batched_tokens``; the running requests are served first, in
    order (a decoding request asks for ``1 + num_speculative_tokens`` tokens, a request still in
    prefill for the rest of its prompt), then waiting requests are admitted in arrival order while
    fewer than ``max_num_seqs`` run; every request's new tokens in one step are capped at
    ``long_prefill_token_threshold`` (0: no cap) and at the budget left. So one long prompt gets
    2,048 tokens per step in the study's setup, two prompts share a 4,096-token step, and four
    prompts arriving together are prefilled in pairs, the first pair decoding in the passes that
    prefill the second. ``max_num_partial_prefills`` (0 = not enforced, as in vLLM's V1 scheduler,
    which leaves it to the V0 engine) limits how many prompts may be in prefill at once;
    ``enable_chunked_prefill=False`` admits a prompt only when all of it fits in the step.

    Speculative decoding (MTP): each decoding step verifies ``num_speculative_tokens`` draft
    tokens; each is accepted with probability ``draft_acceptance_rate`` until the first rejection,
    and the step emits the accepted ones plus one. The study's decode traffic and speed together
    imply about one token per step (~18 MB per step at ~3 Gb/s and ~21 tokens/s), so the default
    rate is low (mean 1.05 tokens per step).
    """

    max_num_batched_tokens: int = 4096
    long_prefill_token_threshold: int = 2048
    max_num_seqs: int = 8
    max_num_partial_prefills: int = 0
    enable_chunked_prefill: bool = True
    num_speculative_tokens: int = 4
    draft_acceptance_rate: float = 0.05
    #: output-layer (logits) gather bytes per sampled token, so a one-request decode pass moves
    #: ~18 MB per node as in method.md
    gather_bytes_per_token: float = 224_000.0
    #: time from t_send until the engine schedules the request (HTTP, tokenisation)
    request_overhead_s: float = 0.02

    def __post_init__(self):
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("long_prefill_token_threshold", "max_num_partial_prefills",
                     "num_speculative_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.draft_acceptance_rate <= 1.0:
            raise ValueError(f"draft_acceptance_rate must be in [0, 1], "
                             f"got {self.draft_acceptance_rate}")
        if self.gather_bytes_per_token < 0 or self.request_overhead_s < 0:
            raise ValueError("gather_bytes_per_token and request_overhead_s must be >= 0")

    @property
    def tokens_per_decode(self) -> int:
        """Tokens one decoding request asks for in every step: ``1 + num_speculative_tokens``."""
        return 1 + self.num_speculative_tokens

    @property
    def mean_tokens_per_step(self) -> float:
        """Expected tokens a decoding request emits per step: ``sum_{k=0..n} a^k`` (a = rate)."""
        a = self.draft_acceptance_rate
        return sum(a ** k for k in range(self.num_speculative_tokens + 1))


@dataclass(frozen=True)
class ComputeModel:
    """Forward-pass compute and the collective's timing (seconds), calibrated on the study.

    Compute of a pass with ``T`` scheduled tokens::

        min(decode_base_s + decode_per_token_s x T,
            pass_overhead_s + batch_2048_s x (T / 2048) ** batch_exponent)
          + attention_s x sum_i t_i (ctx_i + t_i / 2) + decode_context_s x sum_d ctx_d

    (``t_i`` new tokens of request i after ``ctx_i`` already computed; ``ctx_d`` the context of
    each decoding request), times a seeded log-normal jitter (relative sd ``jitter``). The min()
    is concave: a few tokens cost ~3 ms each (a small, memory-bound batch), a big batch well under
    1 ms each, and the exponent below 1 makes a 4,096-token pass cheaper per token than two of
    2,048 (the study: 4 x 8K prompts prefilled in pairs took 23.0 s where one 32K prompt, in
    2,048-token passes, took 27.0 s).

    A pass runs ``2 x layers + 1`` all-reduces: one after the embedding, then per layer one after
    the attention block and one after the MoE/FFN block. The compute before them is split so the
    attention blocks get ``attention_share`` of the token-linear part plus all of the context
    part, the MoE blocks the rest, the embedding's all-reduce as long as one attention block's
    token-linear part (the step's input preparation); each gap gets a seeded log-normal jitter (sd
    ``allreduce_jitter``), renormalised so the pass keeps its compute time. An all-reduce lasts
    ``max(bytes / rate + 2(N-1) x ring_step_latency_s, 2(N-1) x ring_step_floor_s)`` (each ring
    step's latency jittered by ``allreduce_jitter``): bandwidth-bound for big blocks, never
    shorter than the ring's floor for small ones (a 1,024-token block, 22 MB, takes ~1.5 ms: the
    study saw a 1K prompt's bursts reach only ~100 Gb/s). A fraction ``overlap_fraction`` of each
    prefill all-reduce is hidden behind the compute before it (its burst starts that much before
    the gap ends, still at the link rate). The defaults are the calibration printed by
    ``benchmarks/calibration.py`` (fits, not derivations).
    """

    pass_overhead_s: float = 0.06696
    batch_2048_s: float = 1.1672
    batch_exponent: float = 0.8363
    attention_s: float = 3.426e-09
    decode_base_s: float = 0.02518
    decode_per_token_s: float = 0.004802
    decode_context_s: float = 0.0
    #: relative standard deviation of the per-pass log-normal jitter
    jitter: float = 0.02
    #: relative standard deviation of the per-all-reduce jitter (compute gap and ring latency)
    allreduce_jitter: float = 0.15
    attention_share: float = 0.2254
    ring_step_latency_s: float = 10e-6
    ring_step_floor_s: float = 0.0001193
    overlap_fraction: float = 0.05272

    def __post_init__(self):
        for name in ("overlap_fraction", "attention_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.batch_exponent <= 2.0:
            raise ValueError(f"batch_exponent must be in (0, 2], got {self.batch_exponent}")
        for name in ("pass_overhead_s", "batch_2048_s", "attention_s", "decode_base_s",
                     "decode_per_token_s", "decode_context_s", "jitter", "allreduce_jitter",
                     "ring_step_latency_s", "ring_step_floor_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def compute_s(self, tokens: int, attention: float, decode_context: float) -> float:
        """Return a pass's compute time (s) before jitter: see the class docstring.

        ``tokens`` = T; ``attention`` = ``sum_i t_i (ctx_i + t_i / 2)`` (token pairs);
        ``decode_context`` = ``sum_d ctx_d`` (tokens).
        """
        linear = min(self.decode_base_s + self.decode_per_token_s * tokens,
                     self.pass_overhead_s
                     + self.batch_2048_s * (tokens / 2048) ** self.batch_exponent)
        return linear + self.attention_s * attention + self.decode_context_s * decode_context

    def allreduce_s(self, nbytes: float, rate_gbps: float, ring_steps: int) -> float:
        """Return one all-reduce's duration (s) before jitter: ``max(bytes x 8 / rate + steps x
        ring_step_latency_s, steps x ring_step_floor_s)``; ``rate_gbps`` in Gb/s."""
        return max(nbytes * 8 / (rate_gbps * 1e9) + ring_steps * self.ring_step_latency_s,
                   ring_steps * self.ring_step_floor_s)


@dataclass(frozen=True)
class LinkConfig:
    """The node's link: two twins of one port, which of them NCCL uses, or a TCP fallback.

    ``active_twins`` = 2 is the 200 Gb/s setup, 1 the emulated 100 Gb/s one (first twin only).
    ``tcp_fallback``: the collective runs over the first twin's netdev (kernel TCP) at
    ``tcp_gbps`` instead of RDMA, so the RDMA counters stay flat and the netdev bytes move.
    """

    name: str = "200"
    active_twins: int = 2
    #: RDMA devices per port: 2 on a DGX Spark (the two PCIe twins), 1 on a single-function NIC
    twins: int = 2
    twin_gbps: float = 109.0
    cable_gbps: float = 200.0
    tcp_fallback: bool = False
    tcp_gbps: float = 40.0
    #: background (management, ssh, monitoring) traffic on each netdev, bytes/s
    netdev_idle_tx_bps: float = 12_000.0
    netdev_idle_rx_bps: float = 20_000.0
    #: > 0: a rail-optimised InfiniBand node instead of a Spark port: this many single-port HCAs
    #: (``rdmascope.emulator.rails``, no twins, no netdevs), each carrying ``rail_gbps``; NCCL
    #: spreads the collective evenly over them (one NIC per GPU)
    rails: int = 0
    rail_gbps: float = 400.0

    def __post_init__(self):
        if self.rails < 0 or self.rail_gbps <= 0:
            raise ValueError(f"rails must be >= 0 and rail_gbps positive, got {self.rails}, "
                             f"{self.rail_gbps}")
        if self.rails and self.tcp_fallback:
            raise ValueError("the InfiniBand rails have no TCP fallback in the emulator")
        if self.twins not in (1, 2):
            raise ValueError(f"twins must be 1 or 2, got {self.twins}")
        if self.active_twins not in (1, 2) or self.active_twins > self.twins:
            raise ValueError(f"active_twins must be 1..{self.twins} (the port's twins), "
                             f"got {self.active_twins}")
        if self.twin_gbps <= 0 or self.cable_gbps <= 0 or self.tcp_gbps <= 0:
            raise ValueError("link rates must be positive")

    @property
    def rate_gbps(self) -> float:
        """Rate of a bandwidth-bound transfer (Gb/s): ``min(cable, active x twin)`` or the TCP rate."""
        if self.rails:
            return self.rails * self.rail_gbps
        if self.tcp_fallback:
            return self.tcp_gbps
        return min(self.cable_gbps, self.active_twins * self.twin_gbps)


LINKS = {
    "200": LinkConfig(name="200", active_twins=2),
    "emulated100": LinkConfig(name="emulated100", active_twins=1),
}


def rail_device(i: int) -> str:
    """The RDMA device name of rail ``i`` (0-based): ``mlx5_<i>`` (``emulator.rails``)."""
    return f"mlx5_{i}"


def link_config(name: str, *, tcp_fallback: bool = False) -> LinkConfig:
    """Return the named link setup ("200" or "emulated100"), optionally as a TCP fallback.

    Raises ``ValueError`` for an unknown name.
    """
    if name not in LINKS:
        raise ValueError(f"unknown link {name!r}; expected one of {', '.join(LINKS)}")
    return replace(LINKS[name], tcp_fallback=tcp_fallback)


@dataclass(frozen=True)
class Resize:
    """A resize under load at model time ``at_s``: before it the node had ``rails_before`` of
    the link's rails (the others join at ``at_s``, their counters starting then) and/or the EP
    layout had ``dp_before`` DP replicas (ranks on other nodes join at ``at_s``: every pass
    from then on runs the collective over the larger DP group). None = unchanged."""

    at_s: float
    rails_before: int | None = None
    dp_before: int | None = None

    def __post_init__(self):
        if not self.at_s > 0:
            raise ValueError(f"a resize needs a time > 0 s, got {self.at_s}")
        for name in ("rails_before", "dp_before"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")

    @property
    def at_ns(self) -> int:
        return int(round(self.at_s * 1e9))


@dataclass(frozen=True)
class TrafficConfig:
    """Everything the model needs besides the scenario (``resize``: see ``Resize``)."""

    arch: ModelArch = field(default_factory=ModelArch)
    engine: EngineConfig = field(default_factory=EngineConfig)
    compute: ComputeModel = field(default_factory=ComputeModel)
    link: LinkConfig = field(default_factory=LinkConfig)
    resize: Resize | None = None

    def __post_init__(self):
        r = self.resize
        if r is None:
            return
        if r.rails_before is not None and not (self.link.rails and r.rails_before
                                               < self.link.rails):
            raise ValueError(f"rails_before {r.rails_before} must be below the link's rails "
                             f"({self.link.rails})")
        if r.dp_before is not None and not (self.arch.layout == "ep" and self.arch.dp
                                            and r.dp_before < self.arch.dp):
            raise ValueError(f"dp_before {r.dp_before} needs an EP layout with more DP "
                             f"replicas ({self.arch.dp})")

    def arch_at(self, t_ns: int) -> ModelArch:
        """The layout in force at model time ``t_ns`` (before a resize: ``dp_before``)."""
        r = self.resize
        if r is not None and r.dp_before is not None and t_ns < r.at_ns:
            return replace(self.arch, dp=r.dp_before,
                           nodes=r.dp_before if self.arch.nodes == self.arch.dp else 1)
        return self.arch

    def rate_at(self, t_ns: int) -> float:
        """The link rate (Gb/s) at model time ``t_ns`` (before a resize: ``rails_before``)."""
        r = self.resize
        if r is not None and r.rails_before is not None and t_ns < r.at_ns:
            return r.rails_before * self.link.rail_gbps
        return self.link.rate_gbps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------------------------
# Scenarios
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestGroup:
    """Requests sent together (one round of one test); sent ``gap_before_s`` after the previous
    group's last token (or after the scenario start for the first group).

    ``concurrency`` > 0 makes the group a closed-loop cell (a benchmark client's
    ``--max-concurrency``, e.g. ``vllm bench serve``): ``concurrency`` requests are sent at
    once, and every time one finishes (its last token) the next is sent, so at most
    ``concurrency`` are in flight; ``prompt_tokens`` has one entry per request, in sending order.
    The first ``warmup_requests`` of the cell are warm-ups (round 0), the rest belong to
    ``round``."""

    test: str
    round: int
    prompt_tokens: tuple[int, ...]
    output_tokens: int
    gap_before_s: float
    concurrency: int = 0
    warmup_requests: int = 0


@dataclass(frozen=True)
class Scenario:
    """A sequence of request groups plus an idle tail."""

    name: str
    groups: tuple[RequestGroup, ...]
    tail_s: float = 1.0
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The study's test plan (method.md, "The test plan"): test -> prompt tokens of the requests
TEST_PLAN: dict[str, tuple[int, ...]] = {
    "P1": (1024,),
    "P2": (8192,),
    "P3": (32768,),
    "P4": (8192,) * 4,
    "P5": (65536,),
    "P6": (16384,) * 4,
}


def plan_scenario(tests: str | list[str], *, rounds: int = 3, warmup: bool = True,
                       output_tokens: int = 1024, idle_gap_s: float = 10.0, lead_in_s: float = 1.0,
                       tail_s: float = 1.0, name: str | None = None) -> Scenario:
    """Build a scenario running the study's tests (P1..P6) in order, each for its rounds.

    Round 0 is the warm-up (not counted by the study) when ``warmup``; measured rounds are 1..rounds.
    Each group is sent ``idle_gap_s`` after the previous one finished (the study waited 10 s of no
    traffic). Raises ``ValueError`` for an unknown test name or non-positive counts.
    """
    tests = [tests] if isinstance(tests, str) else list(tests)
    if rounds < 1 or output_tokens < 1:
        raise ValueError("rounds and output_tokens must be >= 1")
    groups = []
    for test in tests:
        if test not in TEST_PLAN:
            raise ValueError(f"unknown test {test!r}; expected one of {', '.join(TEST_PLAN)}")
        for r in range(0 if warmup else 1, rounds + 1):
            gap = lead_in_s if not groups else idle_gap_s
            groups.append(RequestGroup(test, r, TEST_PLAN[test], output_tokens, gap))
    return Scenario(name or "+".join(tests), tuple(groups), tail_s,
                    f"tests {', '.join(tests)}; {rounds} round(s)"
                    f"{' + warm-up' if warmup else ''}; output {output_tokens} tokens")


def named_scenario(name: str) -> Scenario:
    """Return a named scenario: ``P1``..``P6`` (the study's plan: warm-up + 3 rounds, output 1,024
    tokens, 10 s idle gaps), ``demo`` (P1 then P2, one round, 64 output tokens, 1 s gaps) or
    ``single4k`` (one 4,096-token prompt, prefilled in two 2,048-token passes under the
    long-prefill threshold, 16 output tokens: ~4 s).

    Raises ``ValueError`` for an unknown name.
    """
    if name in TEST_PLAN:
        return plan_scenario(name)
    if name == "demo":
        return plan_scenario(["P1", "P2"], rounds=1, warmup=False, output_tokens=64,
                                  idle_gap_s=1.0, lead_in_s=0.5, tail_s=0.5, name="demo")
    if name == "single4k":
        return Scenario("single4k", (RequestGroup("single4k", 1, (4096,), 16, 0.5),), 0.3,
                        "one 4,096-token prompt (two 2,048-token passes), 16 output tokens")
    raise ValueError(f"unknown scenario {name!r}; expected one of {', '.join(SCENARIO_NAMES)}")


SCENARIO_NAMES = (*TEST_PLAN, "demo", "single4k")

#: the keys of a scenario spec (``scenario_from_spec``) and their defaults
SPEC_KEYS = {"prompt": None, "concurrency": 1, "output": 1024, "rounds": 3, "warmup": 1,
             "gap": 10.0, "requests": None}


def scenario_from_spec(spec: str) -> Scenario:
    """Build a scenario from a spec like ``prompt=8192+1024,concurrency=4,output=256,rounds=3``.

    Keys (comma-separated ``key=value``): ``prompt`` (required; prompt tokens, several joined by
    ``+`` run one after the other as separate tests), ``concurrency`` (requests sent together in
    each round, default 1), ``output`` (output tokens per request, 1,024), ``rounds`` (measured
    rounds, 3), ``warmup`` (1: one warm-up round first, round 0, as the study; 0: none),
    ``gap`` (idle seconds between rounds, 10). Each test is named ``<prompt>x<concurrency>``.

    Closed loop (``requests=N`` given, e.g. ``prompt=1024,concurrency=1+8+64,requests=256,
    warmup=4``): every (prompt, concurrency) pair is one cell, a test named
    ``<prompt>xc<concurrency>``, in which a client keeps ``concurrency`` requests in flight
    until ``N`` have been sent (``RequestGroup.concurrency``); ``concurrency`` may list several
    values joined by ``+`` (a sweep, one capture); ``warmup`` is then the number of warm-up
    requests at the start of each cell (default 0); ``rounds`` does not apply; ``gap`` separates
    the cells. Raises ``ValueError`` naming the key and what was expected.
    """
    vals: dict[str, str] = {}
    for part in spec.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in SPEC_KEYS:
            raise ValueError(f"scenario spec {spec!r}: {part.strip()!r} is not one of "
                             f"{', '.join(k + '=...' for k in SPEC_KEYS)}")
        if key in vals:
            raise ValueError(f"scenario spec {spec!r}: {key} given twice")
        vals[key] = value.strip()
    if "prompt" not in vals:
        raise ValueError(f"scenario spec {spec!r}: prompt=TOKENS is required "
                         "(e.g. prompt=8192 or prompt=1024+8192)")

    def number(key, kind, low):
        raw = vals.get(key, SPEC_KEYS[key])
        try:
            v = kind(raw)
        except (TypeError, ValueError):
            what = "an integer" if kind is int else "a number"
            raise ValueError(f"scenario spec: {key}={raw} is not {what}") from None
        if not v >= low:
            raise ValueError(f"scenario spec: {key} must be >= {low}, got {raw}")
        return v

    try:
        prompts = [int(x) for x in vals["prompt"].split("+")]
    except ValueError:
        raise ValueError(f"scenario spec: prompt={vals['prompt']} is not a list of integers "
                         "joined by +") from None
    if any(p < 1 for p in prompts):
        raise ValueError(f"scenario spec: every prompt must be >= 1 token, got {vals['prompt']}")
    if "requests" in vals:
        return _closed_loop_scenario(spec, vals, prompts, number)
    conc = number("concurrency", int, 1)
    output = number("output", int, 1)
    rounds = number("rounds", int, 1)
    warmup = number("warmup", int, 0)
    if warmup not in (0, 1):
        raise ValueError(f"scenario spec: warmup must be 0 or 1, got {vals['warmup']}")
    gap = number("gap", float, 0.0)
    groups = []
    for p in prompts:
        for r in range(0 if warmup else 1, rounds + 1):
            groups.append(RequestGroup(f"{p}x{conc}", r, (p,) * conc, output,
                                       1.0 if not groups else gap))
    return Scenario(spec, tuple(groups), 1.0,
                    f"prompts {'+'.join(map(str, prompts))} x {conc} concurrent; {rounds} "
                    f"round(s){' + warm-up' if warmup else ''}; output {output} tokens")


def _closed_loop_scenario(spec: str, vals: dict[str, str], prompts: list[int], number
                          ) -> Scenario:
    """The closed-loop cells of ``scenario_from_spec`` (``requests=N`` given)."""
    if "rounds" in vals:
        raise ValueError(f"scenario spec {spec!r}: rounds does not apply to closed-loop cells "
                         "(requests=N): each cell sends N requests once")
    try:
        concs = [int(x) for x in vals.get("concurrency", "1").split("+")]
    except ValueError:
        raise ValueError(f"scenario spec: concurrency={vals['concurrency']} is not a list of "
                         "integers joined by +") from None
    if any(c < 1 for c in concs):
        raise ValueError(f"scenario spec: every concurrency must be >= 1, got "
                         f"{vals['concurrency']}")
    n = number("requests", int, 1)
    output = number("output", int, 1)
    warm = int(vals.get("warmup", "0")) if vals.get("warmup", "0").isdigit() else None
    if warm is None:
        raise ValueError(f"scenario spec: warmup={vals['warmup']} is not a number of warm-up "
                         "requests (an integer >= 0)")
    if warm >= n:
        raise ValueError(f"scenario spec: warmup ({warm}) must be fewer than requests ({n})")
    gap = number("gap", float, 0.0)
    groups = []
    for p in prompts:
        for c in concs:
            groups.append(RequestGroup(f"{p}xc{c}", 1, (p,) * n, output,
                                       1.0 if not groups else gap, concurrency=c,
                                       warmup_requests=warm))
    return Scenario(spec, tuple(groups), 1.0,
                    f"closed loop: prompts {'+'.join(map(str, prompts))}, concurrency "
                    f"{'+'.join(map(str, concs))}; {n} requests per cell ({warm} warm-up); "
                    f"output {output} tokens")


def make_scenario(name: str, *, output_tokens: int | None = None, rounds: int | None = None,
                  idle_gap_s: float | None = None) -> Scenario:
    """Return the named scenario (see ``named_scenario``) with optional overrides.

    ``output_tokens`` replaces every group's output size, ``rounds`` the number of measured rounds
    of a P1..P6 scenario (the warm-up is then dropped), ``idle_gap_s`` the gap between groups.
    A name containing ``=`` is a spec (``scenario_from_spec``). Raises ``ValueError`` for an
    unknown name, a bad spec or a non-positive override.
    """
    sc = scenario_from_spec(name) if "=" in name else named_scenario(name)
    if rounds is not None and rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if rounds is not None:
        if name not in TEST_PLAN:
            raise ValueError(f"--rounds applies to the test plan scenarios P1..P6, not {name!r}")
        sc = plan_scenario(name, rounds=rounds, warmup=False)
    if output_tokens is not None and output_tokens < 1:
        raise ValueError(f"output_tokens must be >= 1, got {output_tokens}")
    if idle_gap_s is not None and idle_gap_s < 0:
        raise ValueError(f"idle_gap_s must be >= 0, got {idle_gap_s}")
    groups = tuple(replace(g, output_tokens=output_tokens or g.output_tokens,
                           gap_before_s=(g.gap_before_s if i == 0 or idle_gap_s is None
                                         else idle_gap_s))
                   for i, g in enumerate(sc.groups))
    return replace(sc, groups=groups)


# ----------------------------------------------------------------------------------------------
# Result
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestTiming:
    """Ground truth of one request (model time, int64 ns from the scenario start)."""

    request_id: str
    test: str
    round: int
    t_send_ns: int
    t_first_ns: int
    t_last_ns: int
    prompt_tokens: int
    output_tokens: int
    #: bytes per node of the all-reduces carrying this request's prompt tokens (its share of each
    #: chunk): prompt_tokens x bytes_per_token exactly
    prompt_bytes: float
    #: the conserving split (docs/method.md): per engine step, the step's bytes per node times
    #: this request's share of the tokens scheduled in it, summed over its prefill steps and
    #: over its decode steps (every step's bytes go to exactly one request phase)
    prefill_bytes_split: float = 0.0
    decode_bytes_split: float = 0.0
    #: a warm-up request (round 0: a warm-up round's, or a closed-loop cell's first
    #: ``warmup_requests``): the request log marks it ``"phase": "warmup"`` so rdmascope keeps it
    #: out of every measured number
    warmup: bool = False


@dataclass(frozen=True)
class Series:
    """One emulated counter series: a device's tx or rx bytes.

    bytes(t) = ``collective_share`` x collective(t) + ``idle_bps`` x t (model time, seconds).
    """

    key: str  # "<device>/<direction>"
    source: str  # "infiniband" | "netdev"
    device: str
    direction: str  # "tx" | "rx"
    collective_share: float
    idle_bps: float
    #: a resize: until ``change_ns`` the series carried ``share_before`` of the collective (0 for
    #: a device that appears then: ``appears`` is true and it has no counters before)
    change_ns: int | None = None
    share_before: float = 0.0
    appears: bool = False


@dataclass
class Pass:
    """One forward pass (for inspection and the truth file)."""

    t_start_ns: int
    t_end_ns: int
    prefill_tokens: int
    decode_tokens: int
    bytes: float


@dataclass
class Traffic:
    """The model's output for one scenario, link and seed.

    ``t_ns`` (int64, shape (m,)) and ``cum_bytes`` (float64, (m,)) are the breakpoints of the
    cumulative bytes one node sends on its collective (equal to what it receives); between them the
    bytes grow linearly. ``series`` says how that splits over the twins and netdevs.
    """

    scenario: Scenario
    config: TrafficConfig
    seed: int
    t_ns: np.ndarray
    cum_bytes: np.ndarray
    requests: list[RequestTiming]
    passes: list[Pass]
    duration_ns: int
    series: list[Series]

    @property
    def series_keys(self) -> list[str]:
        return [s.key for s in self.series]

    def collective_bytes(self, t_ns) -> np.ndarray:
        """Return the collective's cumulative bytes per node at model times ``t_ns`` (array-like ns).

        Shape follows ``t_ns``; 0 before the start, the total after the end.
        """
        t = np.asarray(t_ns, dtype=np.float64)
        return np.interp(t, self.t_ns.astype(np.float64), self.cum_bytes, left=0.0,
                         right=float(self.cum_bytes[-1]))

    def cumulative_bytes(self, t_ns, keys: list[str] | None = None) -> np.ndarray:
        """Return cumulative bytes per series at model times ``t_ns``: shape (n_series, len(t_ns)).

        Series order is ``keys`` (default ``series_keys``). Raises ``KeyError`` for an unknown key.
        """
        t = np.atleast_1d(np.asarray(t_ns, dtype=np.float64))
        c = self.collective_bytes(t)
        by_key = {s.key: s for s in self.series}
        out = np.empty((len(keys or self.series), t.size), dtype=np.float64)
        for i, k in enumerate(keys or self.series_keys):
            s = by_key[k]
            if s.change_ns is None:
                out[i] = s.collective_share * c + s.idle_bps * np.clip(t, 0, None) * 1e-9
            else:  # bytes = integral of the share: before the change, then after it
                c_at = self.collective_bytes(np.minimum(t, s.change_ns))
                out[i] = (s.share_before * c_at + s.collective_share * (c - c_at)
                          + s.idle_bps * np.clip(t, 0, None) * 1e-9)
        return out

    def max_rate_gbps(self) -> float:
        """Return the highest rate of any collective segment, Gb/s per node (all twins together)."""
        dt = np.diff(self.t_ns).astype(np.float64)
        db = np.diff(self.cum_bytes)
        ok = dt > 0
        return float((db[ok] * 8 / dt[ok]).max()) if ok.any() else 0.0

    @property
    def total_bytes(self) -> float:
        return float(self.cum_bytes[-1])


# ----------------------------------------------------------------------------------------------
# The simulation
# ----------------------------------------------------------------------------------------------


class _Builder:
    """Accumulates collective breakpoints (int ns, cumulative bytes) in chunks."""

    def __init__(self):
        self._t: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
        self._b: list[np.ndarray] = [np.zeros(1, dtype=np.float64)]
        self.now = 0
        self.total = 0.0

    def idle_until(self, t_ns: int) -> None:
        if t_ns > self.now:
            self._append(np.array([t_ns], dtype=np.int64), np.array([self.total]))

    def ramp(self, dt_ns: int, nbytes: float) -> None:
        t = self.now + max(int(dt_ns), 1)
        self._append(np.array([t], dtype=np.int64), np.array([self.total + nbytes]))

    def segments(self, idle_ns: np.ndarray, ramp_ns: np.ndarray, nbytes: np.ndarray) -> None:
        """Append, for each i, ``idle_ns[i]`` without bytes then a ramp of ``ramp_ns[i]`` (>= 1)
        moving ``nbytes[i]``."""
        n = len(idle_ns)
        d = np.empty(2 * n, dtype=np.int64)
        d[0::2] = idle_ns
        d[1::2] = np.maximum(ramp_ns, 1)
        b = np.zeros(2 * n, dtype=np.float64)
        b[1::2] = nbytes
        self._append(self.now + np.cumsum(d), self.total + np.cumsum(b))

    def _append(self, t: np.ndarray, b: np.ndarray) -> None:
        self._t.append(t)
        self._b.append(b)
        self.now = int(t[-1])
        self.total = float(b[-1])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self._t), np.concatenate(self._b)


def _lognormal(rng: np.random.Generator, rel: float, size=None):
    """Mean-one log-normal factors with relative sd ~``rel`` (1.0 when ``rel`` is 0)."""
    if rel <= 0:
        return 1.0 if size is None else np.ones(size)
    s = math.sqrt(math.log1p(rel * rel))
    return np.exp(rng.normal(-s * s / 2, s, size))


@dataclass
class _Req:
    """One request's state in the engine (vLLM's ``Request``: computed vs. wanted tokens)."""

    index: int
    prompt: int
    output: int
    computed: int = 0  # prompt tokens computed (num_computed_tokens while in prefill)
    generated: int = 0
    t_first: int | None = None
    t_last: int | None = None
    prompt_bytes: float = 0.0  # per node, of the passes that carried its prompt tokens
    t_send: int = 0  # when the client sent it (closed loop: when a slot freed)
    t_arrive: int = 0  # when the engine can schedule it (t_send + request overhead)
    split_prefill: float = 0.0  # its share of its steps' bytes while prefilling (RequestTiming)
    split_decode: float = 0.0  # ... and while decoding

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt


def schedule_step(running: list[_Req], waiting: list[_Req], eng: EngineConfig
                  ) -> list[tuple[_Req, int]]:
    """One step of vLLM V1's scheduler (``Scheduler.schedule``), without KV-cache limits.

    Running requests first, in order, then waiting requests (moved to ``running`` when admitted);
    returns ``(request, new_tokens)`` pairs. See ``EngineConfig`` for the rules.
    """
    budget = eng.max_num_batched_tokens
    thr = eng.long_prefill_token_threshold
    out: list[tuple[_Req, int]] = []
    for r in running:
        if budget <= 0:
            break
        n = r.prompt - r.computed if r.prefilling else eng.tokens_per_decode
        if 0 < thr < n:
            n = thr
        n = min(n, budget)
        if n > 0:
            out.append((r, n))
            budget -= n
    while waiting and budget > 0 and len(running) < eng.max_num_seqs:
        if eng.max_num_partial_prefills and \
                sum(1 for r in running if r.prefilling) >= eng.max_num_partial_prefills:
            break
        r = waiting[0]
        n = r.prompt - r.computed
        if 0 < thr < n:
            n = thr
        if not eng.enable_chunked_prefill and n > budget:
            break
        n = min(n, budget)
        waiting.pop(0)
        running.append(r)
        out.append((r, n))
        budget -= n
    return out


def simulate(scenario: Scenario, config: TrafficConfig | None = None, *, seed: int = 0) -> Traffic:
    """Run the scenario through the engine and link model; return the node's traffic and timeline.

    Deterministic for (scenario, config, seed). Raises ``ValueError`` on an empty scenario or a
    non-positive prompt/output size, or a prompt the engine could never schedule.
    """
    cfg = config or TrafficConfig()
    arch, eng, comp, link = cfg.arch, cfg.engine, cfg.compute, cfg.link
    if not scenario.groups:
        raise ValueError(f"scenario {scenario.name!r} has no requests")
    rng = np.random.default_rng(seed)
    rate = link.rate_gbps
    n_ar = arch.collectives_per_pass
    steps = arch.collective_steps
    base_arch = arch
    # compute-gap weights: tp [embedding, (attention, MoE) x layers]; ep [(attention, experts) x
    # MoE layers] (a dispatch after the attention, a combine after the experts)
    blocks = arch.layers if arch.layout == "tp" else arch.moe_layers
    layer_w = np.tile([comp.attention_share, 1.0 - comp.attention_share], blocks)
    gather_per_token = eng.gather_bytes_per_token if arch.layout == "tp" and arch.networked \
        else 0.0
    build = _Builder()
    requests: list[RequestTiming] = []
    passes: list[Pass] = []

    for group in scenario.groups:
        if any(p < 1 for p in group.prompt_tokens) or group.output_tokens < 1:
            raise ValueError(f"group {group.test} round {group.round}: prompt and output tokens "
                             "must be >= 1")
        if not eng.enable_chunked_prefill and max(group.prompt_tokens) > min(
                eng.max_num_batched_tokens, eng.long_prefill_token_threshold or 1 << 62):
            raise ValueError(f"group {group.test} round {group.round}: a prompt longer than "
                             "max_num_batched_tokens needs enable_chunked_prefill")
        t_send = build.now + int(round(group.gap_before_s * 1e9))
        overhead = int(round(eng.request_overhead_s * 1e9))
        build.idle_until(t_send)
        reqs = [_Req(i, p, group.output_tokens) for i, p in enumerate(group.prompt_tokens)]
        slots = group.concurrency if group.concurrency > 0 else len(reqs)
        unsent = list(reqs)
        sent: list[_Req] = []  # sent, not yet schedulable (in arrival order)

        def send(t: int, n: int, unsent=unsent, sent=sent, overhead=overhead) -> None:
            for r in unsent[:n]:
                r.t_send, r.t_arrive = t, t + overhead
                sent.append(r)
            del unsent[:n]

        send(t_send, slots)
        waiting: list[_Req] = []
        running: list[_Req] = []
        while running or waiting or sent:
            while sent and sent[0].t_arrive <= build.now:
                waiting.append(sent.pop(0))
            if not running and not waiting:
                build.idle_until(sent[0].t_arrive)
                continue
            sched = schedule_step(running, waiting, eng)
            if not sched:  # cannot happen with a positive budget; guard against a silent hang
                raise ValueError("the engine scheduled nothing (check max_num_seqs and the budget)")
            prefill = sum(n for r, n in sched if r.prefilling)
            decoding = [r for r, _ in sched if not r.prefilling]
            dec_tokens = sum(n for r, n in sched if not r.prefilling)
            tokens = prefill + dec_tokens
            attention = sum(n * (r.computed + n / 2) for r, n in sched if r.prefilling)
            dec_ctx = sum(r.prompt + r.generated for r in decoding)
            compute_s = comp.compute_s(tokens, attention, dec_ctx) * _lognormal(rng, comp.jitter)
            gather = gather_per_token * dec_tokens
            t0 = build.now
            if cfg.resize is not None:  # the layout and link in force when the pass starts
                arch, rate = cfg.arch_at(t0), cfg.rate_at(t0)
                steps = arch.collective_steps
            ar_bytes = arch.collective_bytes(tokens)
            if prefill > 0:
                # compute gaps before each all-reduce: the attention blocks carry the context work
                ctx_s = comp.attention_s * attention * _lognormal(rng, comp.jitter)
                lin_s = max(compute_s - ctx_s, 0.0)
                # the embedding's all-reduce waits for the step's input preparation, as long as
                # one attention block's token-linear part
                if arch.layout == "tp":
                    w = np.concatenate(([comp.attention_share], layer_w)) \
                        * (lin_s / (arch.layers + 1))
                    w[1::2] += ctx_s / arch.layers
                else:
                    w = layer_w * (lin_s / blocks)
                    w[0::2] += ctx_s / blocks
                w *= _lognormal(rng, comp.allreduce_jitter, n_ar)
                gaps = np.floor(w * (compute_s * 1e9 / w.sum())).astype(np.int64)
                bw_s = ar_bytes * 8 / (rate * 1e9)
                lat = steps * comp.ring_step_latency_s * _lognormal(rng, comp.allreduce_jitter,
                                                                     n_ar)
                xfer_s = np.maximum(bw_s + lat, steps * comp.ring_step_floor_s)
                if not arch.networked:  # on one node the collectives stay off the network
                    xfer_s = np.zeros(n_ar)
                xfer = np.ceil(xfer_s * 1e9).astype(np.int64)
                hidden = np.minimum((comp.overlap_fraction * xfer).astype(np.int64), gaps)
                build.segments(gaps - hidden, xfer, np.full(n_ar, ar_bytes))
                if gather:
                    build.ramp(int(round(steps * comp.ring_step_latency_s * 1e9)), gather)
            else:
                build.ramp(int(round(compute_s * 1e9)), n_ar * ar_bytes + gather)
            t1 = build.now
            passes.append(Pass(t0, t1, prefill, dec_tokens, n_ar * ar_bytes + gather))
            step_bytes = n_ar * ar_bytes + gather
            for r, n in sched:  # the conserving split: the step's bytes by its tokens
                if r.prefilling:
                    r.split_prefill += step_bytes * n / tokens
                else:
                    r.split_decode += step_bytes * n / tokens
            for r, n in sched:
                if r.prefilling:
                    r.computed += n
                    r.prompt_bytes += n * arch.bytes_per_token
                    if not r.prefilling:
                        r.t_first = t1
                        r.generated = 1
                else:
                    accepted = 1
                    while accepted < n and rng.random() < eng.draft_acceptance_rate:
                        accepted += 1
                    r.generated = min(r.generated + accepted, r.output)
                if r.t_first is not None and r.generated >= r.output:
                    r.t_last = t1
            done = sum(1 for r in running if r.t_last is not None)
            running = [r for r in running if r.t_last is None]
            if done and unsent:  # closed loop: a finished request frees its slot at once
                send(t1, done)
        for r in reqs:
            # warm-ups: a closed-loop cell's first warmup_requests, and every request of a
            # round 0 (the warm-up round of the study's plan and of a spec's warmup=1)
            warm = r.index < group.warmup_requests or group.round == 0
            rnd = 0 if warm else group.round
            requests.append(RequestTiming(
                request_id=f"{group.test}-r{rnd}-{r.index}", test=group.test,
                round=rnd, t_send_ns=r.t_send, t_first_ns=r.t_first, t_last_ns=r.t_last,
                prompt_tokens=r.prompt, output_tokens=r.output,
                prompt_bytes=r.prompt * base_arch.bytes_per_token if cfg.resize is None
                else r.prompt_bytes,
                prefill_bytes_split=r.split_prefill, decode_bytes_split=r.split_decode,
                warmup=warm))
    duration = build.now + int(round(scenario.tail_s * 1e9))
    build.idle_until(duration)
    t_ns, cum = build.arrays()
    return Traffic(scenario=scenario, config=cfg, seed=seed, t_ns=t_ns, cum_bytes=cum,
                   requests=requests, passes=passes, duration_ns=duration,
                   series=_series(link, cfg.resize))


def _series(link: LinkConfig, resize: Resize | None = None) -> list[Series]:
    if link.rails:
        before = resize.rails_before if resize is not None else None
        out = []
        for i in range(link.rails):
            for d in ("tx", "rx"):
                if before is None:
                    out.append(Series(f"{rail_device(i)}/{d}", "infiniband", rail_device(i), d,
                                      1.0 / link.rails, 0.0))
                else:
                    out.append(Series(f"{rail_device(i)}/{d}", "infiniband", rail_device(i), d,
                                      1.0 / link.rails, 0.0, change_ns=resize.at_ns,
                                      share_before=1.0 / before if i < before else 0.0,
                                      appears=i >= before))
        return out
    out = []
    for i, dev in enumerate(TWINS[:link.twins]):
        share = 0.0 if link.tcp_fallback or i >= link.active_twins else 1.0 / link.active_twins
        for d in ("tx", "rx"):
            out.append(Series(f"{dev}/{d}", "infiniband", dev, d, share, 0.0))
    for i, nd in enumerate(NETDEVS[:link.twins]):
        share = 1.0 if link.tcp_fallback and i == 0 else 0.0
        out.append(Series(f"{nd}/tx", "netdev", nd, "tx", share, link.netdev_idle_tx_bps))
        out.append(Series(f"{nd}/rx", "netdev", nd, "rx", share, link.netdev_idle_rx_bps))
    return out


# The name other modules started with; kept as an alias. ``__test__`` stops pytest from collecting
# it as a test when a test module imports it.
test_plan_scenario = plan_scenario
plan_scenario.__test__ = False
