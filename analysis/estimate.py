"""The architecture-based estimate of tensor-parallel traffic and its effect on TTFT (pure formulas).

Every formula comes from the study summarised in ``method.md`` ("What tensor parallelism sends",
"Prefill and decode load the network in opposite ways", "The estimate (upper bound)"). Units:
bytes are decimal (MB = 1e6 bytes), link speeds are Gb/s (1e9 bit/s), times are seconds.

The model of one forward pass:

- ``2 x layers + 1`` all-reduces (after each attention and each FFN/MoE block, plus the embedding);
- one all-reduce sums a block of ``tokens_in_pass x hidden_size x bytes_per_value`` bytes;
- NCCL's ring all-reduce makes every node send ``2 (N-1)/N`` times the block (N = TP size).

So ``bytes per prompt token per node = (2 L + 1) x hidden x bytes x 2 (N-1)/N``. For the study's
model (78 layers, hidden 6,144, 2 bytes, TP8) that is 3.38 MB per prompt token.

The estimate is an *upper bound* on the extra prefill time when the link slows from ``B_old`` to
``B_new``: every prefill byte is assumed to move at full link rate with no overlap with compute, so
the extra time is the time to send the same bytes again at the difference,
``prefill_bytes x 8 x (1/B_new - 1/B_old)``.

This module needs only the standard library (no numpy/pandas) so the ``estimate`` command is light.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rdmascope import models as _models
from rdmascope.models import (  # noqa: F401  (re-exported: the estimate's public names)
    DTYPE_BYTES,
    LINK_100_GBPS,
    LINK_200_GBPS,
    LINK_EMULATED_GBPS,
    PRESETS,
    STUDY_MODEL,
    Model,
    ModelError,
    model_from_hf_config,
)

#: The study's prefill chunk (``max_num_batched_tokens``).
STUDY_CHUNK_TOKENS = 4096
#: The study's ``--long-prefill-token-threshold``: one request's tokens per pass, so a single
#: prompt's all-reduces carry 2,048 tokens (method.md, "How large is one prefill burst").
STUDY_LONG_PREFILL_THRESHOLD = 2048
#: Tokens per request per decode pass in the study: the newest token plus 4 speculative drafts.
STUDY_DECODE_TOKENS_PER_REQUEST = 5

#: The study's memory-bound decode: each decode pass reads ~2.8 GB of weights per node (its
#: model at TP8), so a pass takes ~10 ms at least and the decode traffic stays near ~14 Gb/s.
STUDY_DECODE_WEIGHT_BYTES = 2.8e9
#: A DGX Spark's memory bandwidth (GB10, LPDDR5x), GB/s: the published 273 GB/s.
SPARK_MEMORY_GBPS = 273.0

#: An input to the estimate is invalid (names the parameter or the config file and field); the
#: same class as ``rdmascope.models.ModelError``.
EstimateError = ModelError
#: The model shape the estimate uses (``rdmascope.models.Model``: presets and config parsing live
#: there).
ModelShape = Model


# ------------------------------------------------------------------------------------------------
# The formulas
# ------------------------------------------------------------------------------------------------


def _check_tp(tp: int) -> None:
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise EstimateError(f"tp (tensor-parallel size) must be an integer >= 1, got {tp!r}")


def _check_gbps(name: str, gbps: float) -> None:
    if not (isinstance(gbps, (int, float)) and math.isfinite(gbps) and gbps > 0):
        raise EstimateError(f"{name} must be a positive link speed in Gb/s, got {gbps!r}")


#: ``2 x layers + 1`` all-reduces per forward pass and the ring factor ``2(N-1)/N``: one copy, in
#: ``rdmascope.models``.
allreduces_per_pass = _models.allreduces_per_pass
ring_factor = _models.ring_factor


def allreduce_block_bytes(tokens: int, model: ModelShape) -> float:
    """Return the bytes one all-reduce sums: ``tokens x hidden_size x bytes_per_value``.

    Example (method.md): 4,096 tokens x 6,144 x 2 B = 50.3 MB.
    """
    if tokens < 0:
        raise EstimateError(f"tokens must be >= 0, got {tokens!r}")
    return float(tokens) * model.hidden_size * model.bytes_per_value


def allreduce_bytes_per_node(tokens: int, model: ModelShape, tp: int) -> float:
    """Return the bytes one node sends for one all-reduce of ``tokens`` tokens: block x 2(N-1)/N.

    Example (method.md): TP8, 4,096-token chunk -> 1.75 x 50.3 MB = 88.1 MB.
    """
    return allreduce_block_bytes(tokens, model) * ring_factor(tp)


def ring_steps(tp: int) -> int:
    """Return the sequential ring steps of one all-reduce, ``2 (N-1)`` (14 at TP8)."""
    _check_tp(tp)
    return 2 * (tp - 1)


def bytes_per_prompt_token(model: ModelShape, tp: int) -> float:
    """Return prefill bytes sent per node per prompt token: ``(2L+1) x hidden x bytes x 2(N-1)/N``.

    Source: method.md, "What tensor parallelism sends"; ``rdmascope.models.tp_bytes_per_token``.
    Study model at TP8: 3,376,128 B = 3.38 MB.
    """
    return _models.tp_bytes_per_token(model, tp)


def transfer_time_s(nbytes: float, gbps: float) -> float:
    """Return the time to send ``nbytes`` at ``gbps`` Gb/s at full rate: ``bytes x 8 / (gbps x 1e9)``.

    Example (method.md): 88.1 MB takes 3.5 ms at 200 Gb/s and 7.0 ms at 100 Gb/s.
    """
    _check_gbps("link speed", gbps)
    return nbytes * 8.0 / (gbps * 1e9)


def extra_time_bound_s(nbytes: float, link_old_gbps: float, link_new_gbps: float) -> float:
    """Return the upper bound on the extra time to move ``nbytes`` after a link change.

    ``extra <= bytes x 8 x (1/B_new - 1/B_old)`` (method.md, "The estimate (upper bound)"): every
    transfer at full link rate, none overlapping compute. Negative when the link gets faster.
    """
    _check_gbps("link_old_gbps", link_old_gbps)
    _check_gbps("link_new_gbps", link_new_gbps)
    return nbytes * 8.0 / 1e9 * (1.0 / link_new_gbps - 1.0 / link_old_gbps)


def ttft_increase_bound_s(prompt_tokens: float, model: ModelShape, tp: int,
                          link_old_gbps: float, link_new_gbps: float) -> float:
    """Return the bound on the TTFT increase for ``prompt_tokens`` prompt tokens after a link change.

    ``prompt_tokens x bytes_per_prompt_token x 8 x (1/B_new - 1/B_old)``. Study model, TP8,
    200 -> 100 Gb/s: 0.135 s per 1,000 prompt tokens; 200 -> 109 Gb/s (emulated): ~0.11 s.
    """
    return extra_time_bound_s(prompt_tokens * bytes_per_prompt_token(model, tp),
                              link_old_gbps, link_new_gbps)


def network_share(prefill_bytes: float, prefill_time_s: float, link_gbps: float) -> float:
    """Return the share of a measured prefill time (TTFT) spent sending its bytes at full rate.

    ``network_share = (prefill_bytes x 8 / B) / prefill_time`` (method.md). Raises
    ``EstimateError`` for a non-positive prefill time.
    """
    if not (prefill_time_s > 0):
        raise EstimateError(f"measured prefill time / TTFT must be > 0 s, got {prefill_time_s!r}")
    return transfer_time_s(prefill_bytes, link_gbps) / prefill_time_s


def increase_fraction_bound(share: float, link_old_gbps: float, link_new_gbps: float) -> float:
    """Return the bound on the relative TTFT increase: ``network_share x (B_old / B_new - 1)``.

    Source: method.md, "The estimate (upper bound)".
    """
    _check_gbps("link_old_gbps", link_old_gbps)
    _check_gbps("link_new_gbps", link_new_gbps)
    return share * (link_old_gbps / link_new_gbps - 1.0)


def emulated_to_real_correction_s(measured_prefill_bytes: float,
                                  emulated_gbps: float = LINK_EMULATED_GBPS,
                                  real_gbps: float = LINK_100_GBPS) -> float:
    """Return the extra prefill time a real ``real_gbps`` cable would add beyond the emulated link.

    ``additional <= measured_prefill_bytes x 8 x (1/100 - 1/109)`` per Gb/s (method.md, "To correct
    an emulated-link result to a real 100 Gb/s cable"). Bytes in, seconds out.
    """
    return extra_time_bound_s(measured_prefill_bytes, emulated_gbps, real_gbps)


def tp_relative(tp: int, ref_tp: int = 8) -> dict[str, float]:
    """Return bytes per node and compute per node at TP ``tp`` relative to ``ref_tp``.

    Bytes scale with the ring factor (TP2 0.57x, TP4 0.86x, TP8 1x, TP16 1.07x of TP8), compute per
    node with ``ref_tp / tp`` (4x, 2x, 1x, 0.5x) (method.md, "Effect of TP size").
    """
    _check_tp(tp)
    _check_tp(ref_tp)
    if ref_tp == 1:
        raise EstimateError("ref_tp must be >= 2 (TP1 sends nothing to compare with)")
    return {"tp": tp, "bytes_rel": ring_factor(tp) / ring_factor(ref_tp),
            "compute_rel": ref_tp / tp}


def tp_projection(model: ModelShape, tp_sizes: Iterable[int], *, prompt_tokens: float,
                  ttft_ref_s: float, ref_tp: int = 8,
                  link_old_gbps: float = LINK_200_GBPS,
                  link_new_gbps: float = LINK_100_GBPS) -> list[dict[str, float]]:
    """Project the TTFT and its increase bound to other TP sizes from one measured TTFT.

    At ``ref_tp`` the measured ``ttft_ref_s`` is split into network time (the prefill bytes at
    ``link_old_gbps``, the bound's assumption of no overlap) and compute time (the rest). At TP
    ``n`` compute scales by ``ref_tp / n`` and network time by the ring factor ratio; the increase
    bound is the network time x ``(B_old/B_new - 1)`` (method.md, "Effect of TP size"; figure 6).

    Returns one dict per TP size: ``tp, bytes_rel, compute_rel, bytes_per_token, network_s,
    compute_s, ttft_s, network_share, increase_bound_s, increase_pct``. Raises ``EstimateError``
    if the measured TTFT is shorter than the network time alone.
    """
    net_ref = transfer_time_s(prompt_tokens * bytes_per_prompt_token(model, ref_tp), link_old_gbps)
    if not ttft_ref_s > net_ref:
        raise EstimateError(
            f"measured TTFT {ttft_ref_s:.3f} s is not longer than the time to send the prefill "
            f"bytes alone ({net_ref:.3f} s at {link_old_gbps:g} Gb/s); check --ttft/--prompt-tokens")
    compute_ref = ttft_ref_s - net_ref
    rows = []
    for tp in tp_sizes:
        rel = tp_relative(tp, ref_tp)
        net = net_ref * rel["bytes_rel"]
        compute = compute_ref * rel["compute_rel"]
        ttft = net + compute
        inc = extra_time_bound_s(prompt_tokens * bytes_per_prompt_token(model, tp),
                                 link_old_gbps, link_new_gbps)
        rows.append({**rel, "bytes_per_token": bytes_per_prompt_token(model, tp),
                     "network_s": net, "compute_s": compute, "ttft_s": ttft,
                     "network_share": net / ttft, "increase_bound_s": inc,
                     "increase_pct": 100.0 * inc / ttft})
    return rows


def decode_traffic(model: ModelShape, tp: int, *, requests: int = 1,
                   tokens_per_request: int = STUDY_DECODE_TOKENS_PER_REQUEST,
                   link_old_gbps: float = LINK_200_GBPS,
                   link_new_gbps: float = LINK_100_GBPS,
                   decode_speed_tps: float | None = None) -> dict[str, Any]:
    """Return the decode traffic per forward pass and its bound on the link-change cost.

    One decode pass handles ``requests x tokens_per_request`` tokens (5 per request with 4
    speculative drafts): block = tokens x hidden x bytes (61 KB for one request of the study's
    model), per node per all-reduce x 2(N-1)/N (~108 KB), per pass x (2L+1). If the model has a
    ``vocab_size``, the output-layer gather is added as a ring all-gather of the logits:
    ``(N-1)/N x tokens x vocab x bytes`` (an assumption; engines differ). The link-change bound per
    pass is its bytes at the speed difference; these transfers are latency-bound in practice
    (2(N-1) sequential ring steps), so decode speed barely depends on link speed (method.md).

    With ``decode_speed_tps`` (tokens/s per request) the mean decode rate is bounded by
    ``passes/s x bytes per pass`` with at most one pass per output token.
    """
    if requests < 1 or tokens_per_request < 1:
        raise EstimateError("requests and tokens_per_request must be >= 1")
    tokens = requests * tokens_per_request
    block = allreduce_block_bytes(tokens, model)
    per_ar = block * ring_factor(tp)
    ar_total = per_ar * allreduces_per_pass(model.layers)
    gather = 0.0
    if model.vocab_size:
        gather = (tp - 1) / tp * tokens * model.vocab_size * model.bytes_per_value
    per_pass = ar_total + gather
    out: dict[str, Any] = {
        "tokens_per_pass": tokens,
        "allreduce_block_bytes": block,
        "allreduce_bytes_per_node": per_ar,
        "ring_steps": ring_steps(tp),
        "allreduce_pass_bytes": ar_total,
        "output_gather_bytes": gather if model.vocab_size else None,
        "pass_bytes": per_pass,
        "pass_time_old_s": transfer_time_s(per_pass, link_old_gbps),
        "pass_time_new_s": transfer_time_s(per_pass, link_new_gbps),
        "pass_extra_bound_s": extra_time_bound_s(per_pass, link_old_gbps, link_new_gbps),
        "rate_bound_gbps": None,
    }
    if decode_speed_tps is not None:
        if not decode_speed_tps > 0:
            raise EstimateError(f"decode speed must be > 0 tokens/s, got {decode_speed_tps!r}")
        out["rate_bound_gbps"] = decode_speed_tps * per_pass * 8.0 / 1e9
    return out


def memory_bound_decode(pass_bytes: float, weight_bytes: float,
                        memory_gbytes_s: float = SPARK_MEMORY_GBPS) -> dict[str, float]:
    """Return the memory-bound floor of a decode pass and the decode traffic it allows.

    A decode pass reads at least ``weight_bytes`` of weights per node from memory at
    ``memory_gbytes_s`` GB/s, so it lasts at least ``weight_bytes / (memory_gbytes_s x 1e9)``
    seconds, and a node's decode traffic cannot exceed ``pass_bytes x 8 / that`` (Gb/s): the
    study's 2.8 GB per pass at a Spark's 273 GB/s is ~10 ms, and its ~18 MB per pass then stays
    at or under ~14 Gb/s (method.md, "Prefill and decode load the network in opposite ways").
    Returns ``{"weight_bytes", "memory_gbytes_s", "pass_floor_s", "rate_bound_gbps"}``. Raises
    ``EstimateError`` for a non-positive size or bandwidth.
    """
    if not (weight_bytes > 0 and memory_gbytes_s > 0 and pass_bytes >= 0):
        raise EstimateError("weights per pass and memory bandwidth must be > 0 "
                            f"(got {weight_bytes!r} B, {memory_gbytes_s!r} GB/s)")
    floor = weight_bytes / (memory_gbytes_s * 1e9)
    return {"weight_bytes": float(weight_bytes), "memory_gbytes_s": float(memory_gbytes_s),
            "pass_floor_s": floor, "rate_bound_gbps": pass_bytes * 8 / floor / 1e9}


def default_decode_weight_bytes(model: ModelShape, tp: int, layout: str = "tp") -> float | None:
    """The weights one decode pass reads per node when the study says so (its model at TP8:
    2.8 GB), else None (give them: ``estimate --decode-weights-gb``)."""
    if model.name == STUDY_MODEL.name and tp == 8 and layout == "tp":
        return STUDY_DECODE_WEIGHT_BYTES
    return None


# ------------------------------------------------------------------------------------------------
# The whole estimate (what `rdmascope estimate` prints)
# ------------------------------------------------------------------------------------------------


def estimate(model: ModelShape, *, tp: int = 8, chunk_tokens: int = STUDY_CHUNK_TOKENS,
             link_old_gbps: float = LINK_200_GBPS, link_new_gbps: float = LINK_100_GBPS,
             prompt_tokens: Sequence[int] = (1000,), ttft_s: Sequence[float] = (),
             emulated_gbps: float = LINK_EMULATED_GBPS, real_gbps: float = LINK_100_GBPS,
             tp_sizes: Sequence[int] = (2, 4, 8, 16), decode_requests: int = 1,
             decode_tokens_per_request: int = STUDY_DECODE_TOKENS_PER_REQUEST,
             nodes: int | None = None, layout: str = "tp", dp: int | None = None,
             all2all_backend: str = _models.DEFAULT_ALL2ALL_BACKEND,
             rails: int | None = None, decode_weight_bytes: float | None = None,
             memory_gbytes_s: float = SPARK_MEMORY_GBPS) -> dict[str, Any]:
    """Compute every number of the study's estimate for one model and configuration.

    ``ttft_s`` are measured TTFTs at ``link_old_gbps``: either one per prompt length (same order) or
    empty. Returns a JSON-serialisable dict with sections ``model``, ``per_token``, ``allreduce``
    (per chunk, with its duration at the old, new, emulated and real link), ``prompts`` (one row per
    prompt length: bytes, network time, the TTFT increase bound at B_new and at the emulated link,
    the emulated-to-real correction, and with a TTFT the network share and the % bound),
    ``decode`` and ``tp_projection`` (relative table; absolute projection when a TTFT is given;
    empty at TP1, which sends nothing to scale), and ``layouts``: bytes per prompt token per
    node and the bound per 1,000 tokens under tensor parallelism (all-reduce) and, for a
    mixture-of-experts model with known expert fields, expert parallelism over ``nodes``
    (all-to-all dispatch + combine, ``rdmascope.models.ep_bytes_per_token``; otherwise a
    ``reason``). ``layout`` ("tp" or "ep") picks which one the per-prompt rows use; ``nodes``
    (default ``tp``) = 1 means nothing crosses the network. ``dp``, ``all2all_backend`` and
    ``rails`` state the EP layout (``rdmascope.models.Setup``: DP replicas one per node with
    ``tp`` ranks inside over NVLink, vLLM's ``--all2all-backend``, NICs per node); the ``ep``
    entry of ``layouts`` then gives the bytes per token per node and per rail, the backend's
    formula and, per ``chunk_tokens`` pass, one MoE layer's collective. Under ``layout`` "ep" the
    TP-only sections (``allreduce``, ``tp_projection``, the TP ``decode``) are None / empty:
    nothing of them reaches the NIC; ``decode`` is then the EP collective of a decode pass.
    ``decode["memory_bound"]``: ``memory_bound_decode`` of the decode pass with
    ``decode_weight_bytes`` (default ``default_decode_weight_bytes``) at ``memory_gbytes_s``, or
    None when the weights per pass are unknown. Raises ``EstimateError`` on invalid inputs.
    """
    _check_tp(tp)
    if chunk_tokens < 1:
        raise EstimateError(f"chunk_tokens must be >= 1, got {chunk_tokens!r}")
    ttft_list = list(ttft_s)
    prompts = list(prompt_tokens)
    if ttft_list and len(ttft_list) != len(prompts):
        raise EstimateError(f"give one --ttft per --prompt-tokens value ({len(prompts)} prompt "
                            f"length(s), {len(ttft_list)} TTFT(s))")
    setup = _models.Setup(model=model, tp=tp, nodes=nodes, layout=layout,
                          link_a_gbps=link_old_gbps, link_b_gbps=link_new_gbps, b_emulated=False,
                          dp=dp, all2all_backend=all2all_backend, rails=rails)
    tp_bytes = setup.tp_bytes_per_token() if dp is None else 0.0  # TP inside a node: NVLink
    layouts: dict[str, Any] = {"tp": {"bytes_per_prompt_token": tp_bytes}}
    ep = setup.ep_bytes_per_token()
    if ep is not None:
        per_rank = (_models.ep_rank_bytes_per_token(model, setup.ep_dp, all2all_backend,
                                                    tp=setup.ep_tp)
                    if setup.networked else 0.0)
        layouts["ep"] = {
            "bytes_per_prompt_token": ep, "bytes_per_token_per_rail": setup.ep_bytes_per_token_rail(),
            "bytes_per_token_per_gpu": per_rank, "rails": setup.rails_per_node,
            "all2all_backend": all2all_backend, "formula": _models.ep_formula(all2all_backend),
            "dp": setup.ep_dp, "tp_inside_node": setup.ep_tp, "ep_size": setup.ep_size,
            "moe_layers": model.moe_layers, "experts_per_token": model.experts_per_token,
            "off_node_share": _models.off_node_share(setup.ep_dp),
            "collectives_per_pass": 2 * model.moe_layers,
            "chunk_collective_bytes_per_node": chunk_tokens * ep / (2 * model.moe_layers),
        }
        layouts["ep"]["formula_values"] = _models.ep_formula_values(
            model, setup.ep_dp, setup.ep_tp, all2all_backend)
        # vLLM runs the MoE sequence-parallel over the EP group when TP > 1 and DP > 1
        # (ParallelConfig.use_sequence_parallel_moe; rdmascope.models' docstring)
        layouts["ep"]["sequence_parallel_moe"] = (
            all2all_backend in _models.SEQUENCE_PARALLEL_BACKENDS
            and setup.ep_tp > 1 and setup.ep_dp > 1)
        layouts["ep"]["by_backend"] = {
            b: (_models.ep_node_bytes_per_token(model, setup.ep_dp, setup.ep_tp, b)
                if setup.networked else 0.0)
            for b in ("allgather_reducescatter", "naive", "deepep_high_throughput")}
        layouts["ep"]["chunk_collective_time_old_s"] = transfer_time_s(
            layouts["ep"]["chunk_collective_bytes_per_node"], link_old_gbps)
    else:
        layouts["ep"] = {"bytes_per_prompt_token": None, "reason": (
            "dense model: no experts to spread" if model.is_moe is False else
            "expert counts unknown (give a config.json with the mixture-of-experts fields)")}
    for lay in layouts.values():
        b = lay["bytes_per_prompt_token"]
        lay["increase_bound_per_1000_tokens_s"] = (
            None if b is None else extra_time_bound_s(1000 * b, link_old_gbps, link_new_gbps))
    bpt = layouts[layout]["bytes_per_prompt_token"]
    if bpt is None:
        raise EstimateError(f"layout ep: {layouts['ep']['reason']}")
    ar = allreduce_bytes_per_node(chunk_tokens, model, tp)
    links = {"old": link_old_gbps, "new": link_new_gbps, "emulated": emulated_gbps,
             "real": real_gbps}
    for k, v in links.items():
        _check_gbps(f"link_{k}_gbps", v)
    rows = []
    for i, n in enumerate(prompts):
        if n <= 0:
            raise EstimateError(f"prompt tokens must be > 0, got {n!r}")
        nbytes = n * bpt
        passes = math.ceil(n / chunk_tokens)
        row: dict[str, Any] = {
            "prompt_tokens": n,
            "prefill_bytes": nbytes,
            "allreduces": passes * allreduces_per_pass(model.layers) if layout == "tp" else None,
            "collectives": passes * (allreduces_per_pass(model.layers) if layout == "tp"
                                     else 2 * model.moe_layers),
            "network_time_old_s": transfer_time_s(nbytes, link_old_gbps),
            "network_time_new_s": transfer_time_s(nbytes, link_new_gbps),
            "increase_bound_s": extra_time_bound_s(nbytes, link_old_gbps, link_new_gbps),
            "increase_bound_emulated_s": extra_time_bound_s(nbytes, link_old_gbps, emulated_gbps),
            "emulated_to_real_s": extra_time_bound_s(nbytes, emulated_gbps, real_gbps),
            "ttft_s": None, "network_share": None, "increase_bound_pct": None,
        }
        if ttft_list:
            t = ttft_list[i]
            share = network_share(nbytes, t, link_old_gbps)
            row.update(ttft_s=t, network_share=share,
                       increase_bound_pct=100.0 * increase_fraction_bound(
                           share, link_old_gbps, link_new_gbps))
        rows.append(row)
    proj: list[dict[str, Any]]
    if layout == "ep":  # the TP projection scales all-reduces, which the EP layout keeps local
        proj = []
    elif ttft_list and tp >= 2:  # TP1 sends nothing: no network time to project from
        proj = tp_projection(model, tp_sizes, prompt_tokens=prompts[-1], ttft_ref_s=ttft_list[-1],
                             ref_tp=tp, link_old_gbps=link_old_gbps, link_new_gbps=link_new_gbps)
    elif tp >= 2:
        proj = [{**tp_relative(n, tp), "bytes_per_token": bytes_per_prompt_token(model, n)}
                for n in tp_sizes]
    else:
        proj = []
    if layout == "ep":
        dec_tokens = decode_requests * decode_tokens_per_request
        dec_bytes = dec_tokens * bpt
        decode: dict[str, Any] = {
            "tokens_per_pass": dec_tokens, "pass_bytes": dec_bytes,
            "collectives_per_pass": 2 * model.moe_layers,
            "pass_time_old_s": transfer_time_s(dec_bytes, link_old_gbps),
            "pass_time_new_s": transfer_time_s(dec_bytes, link_new_gbps),
            "pass_extra_bound_s": extra_time_bound_s(dec_bytes, link_old_gbps, link_new_gbps)}
    else:
        decode = decode_traffic(model, tp, requests=decode_requests,
                                tokens_per_request=decode_tokens_per_request,
                                link_old_gbps=link_old_gbps, link_new_gbps=link_new_gbps)
    weights = decode_weight_bytes if decode_weight_bytes is not None else \
        default_decode_weight_bytes(model, tp, layout)
    decode["memory_bound"] = (None if weights is None else
                              memory_bound_decode(decode["pass_bytes"], weights, memory_gbytes_s))
    return {
        "model": model.to_dict(),
        "tp": tp,
        "nodes": setup.nodes,
        "dp": setup.ep_dp if layout == "ep" else None,
        "all2all_backend": all2all_backend if layout == "ep" else None,
        "layout": layout,
        "layouts": layouts,
        "chunk_tokens": chunk_tokens,
        "links_gbps": links,
        "per_token": {
            "allreduces_per_pass": allreduces_per_pass(model.layers) if layout == "tp" else None,
            "ring_factor": ring_factor(tp) if layout == "tp" else None,
            "bytes_per_prompt_token": bpt,
            "increase_bound_per_1000_tokens_s": extra_time_bound_s(1000 * bpt, link_old_gbps,
                                                                   link_new_gbps),
            "increase_bound_emulated_per_1000_tokens_s": extra_time_bound_s(
                1000 * bpt, link_old_gbps, emulated_gbps),
        },
        "allreduce": None if layout == "ep" else {
            "block_bytes": allreduce_block_bytes(chunk_tokens, model),
            "bytes_per_node": ar,
            "ring_steps": ring_steps(tp),
            "step_bytes": ar / ring_steps(tp) if tp > 1 else 0.0,
            "time_old_s": transfer_time_s(ar, link_old_gbps),
            "time_new_s": transfer_time_s(ar, link_new_gbps),
            "time_emulated_s": transfer_time_s(ar, emulated_gbps),
            # one prompt alone: vLLM caps a request's tokens per pass at
            # long_prefill_token_threshold (2,048 in the study), so its bursts are that size
            "single_prompt_tokens": min(chunk_tokens, STUDY_LONG_PREFILL_THRESHOLD),
            "single_prompt_bytes_per_node": allreduce_bytes_per_node(
                min(chunk_tokens, STUDY_LONG_PREFILL_THRESHOLD), model, tp),
            "single_prompt_time_old_s": transfer_time_s(allreduce_bytes_per_node(
                min(chunk_tokens, STUDY_LONG_PREFILL_THRESHOLD), model, tp), link_old_gbps),
        },
        "prompts": rows,
        "decode": decode,
        "tp_projection": proj,
    }
