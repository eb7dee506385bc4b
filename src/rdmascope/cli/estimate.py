"""``rdmascope estimate``: the architecture-based estimate of prefill traffic and TTFT impact."""

from __future__ import annotations

import click

from rdmascope.cli.output import POSITIVE, emit, output_options
from rdmascope.cli.setup_options import setup_options


def _numbers(text: str | None, option: str, convert, *, ok, expected: str, bad: str) -> list:
    """Parse a comma/space-separated list with ``convert``; errors name ``option``.

    ``ok(value)`` decides which values are allowed; ``expected`` describes the list (e.g.
    "integers like 2,4,8,16") and ``bad(value)`` words the error for a value that is not ok.
    """
    if not text:
        return []
    try:
        vals = [convert(x) for x in str(text).replace(",", " ").split()]
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: expected {expected}",
                                 param_hint=f"'{option}'") from exc
    wrong = [v for v in vals if not ok(v)]
    if wrong:
        raise click.BadParameter(bad(wrong[0]), param_hint=f"'{option}'")
    return vals


def _ints(text: str | None, option: str, *, minimum: int = 1,
          example: str = "2,4,8,16") -> list[int]:
    """Parse comma/space-separated integers >= ``minimum``; errors name ``option``."""
    return _numbers(text, option, int, ok=lambda v: v >= minimum,
                    expected=f"integers like {example}", bad=lambda v: f"{v}: must be >= {minimum}")


def _seconds(text: str | None, option: str) -> list[float]:
    """Parse comma/space-separated positive finite seconds; errors name ``option``."""
    import math

    return _numbers(text, option, float, ok=lambda v: math.isfinite(v) and v > 0,
                    expected="seconds like 6.36",
                    bad=lambda v: f"{v!r} is not a positive number of seconds")


@click.command("estimate", short_help="Architecture-based estimate of prefill traffic and TTFT.")
@setup_options(link_a_aliases=("--link-old",), link_b_aliases=("--link-new",),
               b_emulated_aliases=("--emulated",))
@click.option("--layers", type=click.IntRange(min=1), default=None,
              help="Transformer layers (a custom model, with --hidden and --bytes).")
@click.option("--hidden", type=click.IntRange(min=1), default=None, help="Hidden size.")
@click.option("--bytes", "nbytes", type=click.IntRange(min=1), default=None,
              help="Bytes per activation value.")
@click.option("--vocab", type=click.IntRange(min=1), default=None,
              help="Vocabulary size: adds the decode output-layer (logits) gather to any model.")
@click.option("--chunk", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Prefill chunk (max_num_batched_tokens).")
@click.option("--prompt-tokens", default="1000", show_default=True,
              help="Prompt lengths, comma-separated.")
@click.option("--ttft", default=None,
              help="Measured TTFT(s) at --link-old, seconds, one per prompt length.")
@click.option("--tp-sizes", default="2,4,8,16", show_default=True,
              help="TP sizes for the projection.")
@click.option("--decode-requests", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--decode-tokens", type=click.IntRange(min=1), default=5, show_default=True,
              help="Tokens per request per decode pass (1 + speculative drafts).")
@click.option("--decode-weights-gb", type=POSITIVE, default=None,
              help="GB of weights one decode pass reads per node (default: the study's 2.8 GB "
                   "for its model at TP8, else no memory-bound line).")
@click.option("--memory-gbps", type=POSITIVE, default=273.0, show_default=True,
              help="Memory bandwidth per node, GB/s (a DGX Spark's 273).")
@output_options
def command(layers, hidden, nbytes, vocab, chunk, prompt_tokens, ttft, tp_sizes,
            decode_requests, decode_tokens, decode_weights_gb, memory_gbps, out, **setup_kw):
    """Estimate the network traffic of a served model and the TTFT cost of a slower link.

    Under tensor parallelism (all-reduce): bytes per prompt token per node = (2 x layers + 1)
    x hidden x bytes x 2(N-1)/N; each all-reduce's size and time at each link speed. For a
    mixture-of-experts model also the expert-parallel layout (all-to-all dispatch + combine:
    MoE layers x 2 x hidden x bytes x experts per token x (nodes-1)/nodes per token); --layout
    picks the one the per-prompt table uses. Then the TTFT increase bound for each prompt
    length from --link-a to --link-b; with --ttft the network share and the bound as % of
    TTFT; the decode traffic per pass; the TP-size projection; and, when B is an emulated link
    (--b-emulated GBPS; by default the study's ~109 Gb/s for 200 -> 100), the correction to a
    real cable. The output names the model and the links.
    """
    import dataclasses

    from rdmascope import models
    from rdmascope.analysis import estimate as E

    given = [x is not None for x in (layers, hidden, nbytes)]
    if any(given) and (setup_kw.get("preset") or setup_kw.get("config")):
        raise click.UsageError("give one of --preset, --config, or --layers/--hidden/--bytes")
    if any(given) and not all(given):
        raise click.UsageError("--layers, --hidden and --bytes go together")
    custom = None
    if all(given):
        custom = models.Model("custom", layers, hidden, nbytes, vocab, experts=None,
                              experts_per_token=None, shared_experts=None, moe_layers=None,
                              title="given as --layers/--hidden/--bytes")
    link_a, link_b = setup_kw.get("link_a"), setup_kw.get("link_b")
    if setup_kw.get("b_emulated") is None and not setup_kw.get("b_real") \
            and link_a in (None, 200.0) and link_b in (None, 100.0):
        # no capture to tell: the study's case, an emulated 100 Gb/s link carrying ~109 Gb/s
        setup_kw["b_emulated"] = models.LINK_EMULATED_GBPS
    try:
        setup = models.resolve_setup(
            preset_name=setup_kw.get("preset"), config=setup_kw.get("config"), model=custom,
            tp=setup_kw.get("tp"), nodes=setup_kw.get("nodes"), link_a_gbps=link_a,
            link_b_gbps=link_b, b_emulated_gbps=setup_kw.get("b_emulated"),
            b_real=bool(setup_kw.get("b_real")), layout=setup_kw.get("layout") or "tp",
            dp=setup_kw.get("dp"), all2all_backend=setup_kw.get("all2all_backend"),
            rails=setup_kw.get("rails"))
    except models.ModelError as exc:
        from rdmascope.cli.setup_options import model_error

        raise model_error(exc, setup_kw.get("config")) from exc
    model, tp = setup.model, setup.tp
    if vocab is not None:  # --vocab adds the decode logits gather to any model
        model = dataclasses.replace(model, vocab_size=vocab)
    link_old, link_new = setup.link_a_gbps, setup.link_b_gbps
    emulated = setup.b_real_gbps if setup.b_emulated and setup.b_real_gbps else link_new
    if link_new >= link_old:
        raise click.BadParameter(
            f"{link_new:g} Gb/s is not slower than --link-a ({link_old:g} Gb/s); the estimate "
            "bounds the TTFT increase of moving prefill traffic to a slower link (swap them?)",
            param_hint="'--link-b'")
    if emulated >= link_old:
        raise click.BadParameter(
            f"{emulated:g} Gb/s is not slower than --link-a ({link_old:g} Gb/s); give the "
            "emulated link's real speed, below --link-a (e.g. 109 for an emulated 100 Gb/s "
            "link below 200)", param_hint="'--b-emulated'")
    desc = model.describe()
    ttfts = _seconds(ttft, "--ttft")
    prompts = _ints(prompt_tokens, "--prompt-tokens", example="1000,8192")
    if not prompts:
        raise click.BadParameter(f"{prompt_tokens!r}: give at least one prompt length, e.g. 1000",
                                 param_hint="'--prompt-tokens'")
    if ttfts and len(ttfts) != len(prompts):
        # an option mismatch is a usage error (exit 2), said before any computing
        raise click.BadParameter(
            f"give one --ttft per --prompt-tokens value ({len(prompts)} prompt length(s), "
            f"{len(ttfts)} TTFT(s))", param_hint="'--ttft'")
    sizes = _ints(tp_sizes, "--tp-sizes")
    try:
        e = E.estimate(model, tp=tp, chunk_tokens=chunk, link_old_gbps=link_old,
                       link_new_gbps=link_new, prompt_tokens=prompts,
                       ttft_s=ttfts, emulated_gbps=emulated, real_gbps=link_new,
                       tp_sizes=sizes, decode_requests=decode_requests,
                       decode_tokens_per_request=decode_tokens, nodes=setup.nodes,
                       layout=setup.layout, dp=setup.dp, all2all_backend=setup.all2all_backend,
                       rails=setup.rails,
                       decode_weight_bytes=None if decode_weights_gb is None
                       else decode_weights_gb * 1e9, memory_gbytes_s=memory_gbps)
    except E.EstimateError as exc:  # values from the options that do not go together: usage
        from rdmascope.cli.setup_options import model_error

        raise model_error(exc, setup_kw.get("config")) from exc
    import pandas as pd

    meta = {k: v for k, v in e.items() if k not in ("prompts", "tp_projection")}
    meta["model_description"] = desc
    setup = dataclasses.replace(setup, model=model)
    meta["setup"] = setup.to_dict()
    emit({"prompts": pd.DataFrame(e["prompts"]), "tp_projection": pd.DataFrame(e["tp_projection"])},
         out, meta=meta, human=lambda: _human(e, desc, tp, chunk, link_old, link_new, emulated,
                                              ttfts, setup))


def _human(e, desc, tp, chunk, link_old, link_new, emulated, ttfts, setup) -> None:
    pt, ar, dec = e["per_token"], e["allreduce"], e["decode"]
    o, n = link_old, link_new
    # B is a real link (--b-real, or an emulated one whose real speed is unknown): no third
    # speed to show (it would repeat B's: "0.7 ms at 200, 0.7 ms at 200")
    emu = emulated != link_new
    click.echo(f"model: {desc}")
    click.echo(f"setup: {setup.describe()}; chunk {chunk} tokens")
    lays = e["layouts"]
    tpb, epb = lays["tp"], lays["ep"]
    if setup.layout == "ep":
        _human_ep(e, epb, setup, chunk, o, n)
    else:
        click.echo("layout used below: tensor parallel (all-reduce)")
        click.echo(f"  TP all-reduce: {tpb['bytes_per_prompt_token'] / 1e6:.3f} MB per prompt "
                   f"token per node; bound {tpb['increase_bound_per_1000_tokens_s']:.3f} s per "
                   f"1,000 tokens ({o:g} -> {n:g} Gb/s)")
        if epb["bytes_per_prompt_token"] is None:
            click.echo(f"  EP all-to-all: not estimated ({epb['reason']})")
        else:
            click.echo(f"  EP ({epb['all2all_backend']}) over {epb['dp']} nodes instead: "
                       f"{epb['bytes_per_prompt_token'] / 1e6:.3f} MB per token per node "
                       f"(--layout ep for its table)")
    if setup.layout == "tp":
        _human_tp(pt, ar, chunk, o, n, emu, emulated)
    click.echo("")
    _prompt_table(e, o, n, emu, emulated)
    click.echo("")
    if setup.layout == "ep":
        click.echo(f"decode ({dec['tokens_per_pass']} token(s) per pass): "
                   f"{dec['pass_bytes'] / 1e6:.3f} MB per node per pass in "
                   f"{dec['collectives_per_pass']} collectives; bandwidth time "
                   f"{dec['pass_time_old_s'] * 1e3:.3f} ms at {o:g} Gb/s, bound on the extra "
                   f"{dec['pass_extra_bound_s'] * 1e3:.3f} ms at {n:g}")
    else:
        _human_decode(dec, o, n)
    mb = dec.get("memory_bound")
    if mb is not None:
        click.echo(f"memory-bound decode: {mb['weight_bytes'] / 1e9:.2f} GB of weights per pass "
                   f"per node at {mb['memory_gbytes_s']:g} GB/s: a pass takes at least "
                   f"{mb['pass_floor_s'] * 1e3:.1f} ms, so the decode traffic stays at or under "
                   f"{mb['rate_bound_gbps']:.1f} Gb/s per node ({dec['pass_bytes'] / 1e6:.1f} MB "
                   "per pass)")
    _human_projection(e, tp, ttfts)
    click.echo("\nAll bounds assume every prefill byte moves at full link rate with no overlap "
               "with compute (method.md, 'The estimate (upper bound)').")


def _human_ep(e, epb, setup, chunk, o, n) -> None:
    """The EP layout's lines: only what reaches the NIC (the TP all-reduces stay in the node)."""
    click.echo(f"layout used below: expert parallel, EP{setup.ep_size} = DP{setup.ep_dp} x "
               f"TP{setup.ep_tp}, vLLM --all2all-backend {setup.all2all_backend}")
    if setup.ep_tp > 1:
        click.echo(f"  TP{setup.ep_tp} all-reduces stay inside each node (NVLink): nothing on "
                   "the NIC")
    if epb["bytes_per_prompt_token"] is None:
        click.echo(f"  EP: not estimated ({epb['reason']})")
        return
    click.echo(f"  EP over {epb['dp']} nodes: {epb['bytes_per_prompt_token'] / 1e6:.3f} MB per "
               f"token per node, {epb['bytes_per_token_per_rail'] / 1e6:.3f} MB per rail "
               f"({epb['rails']} rail{'s' if epb['rails'] != 1 else ''} per node)")
    click.echo(f"  formula: {epb['formula']} = {epb['formula_values']}")
    if epb.get("sequence_parallel_moe"):
        click.echo(f"  sequence-parallel MoE (vLLM with TP > 1 and DP > 1): each of the "
                   f"{epb['tp_inside_node']} TP ranks sends 1/{epb['tp_inside_node']} of the "
                   f"node's tokens, over the EP group of {epb['ep_size']} ranks")
    from rdmascope.models import ALL2ALL_BACKENDS

    mine = ALL2ALL_BACKENDS[setup.all2all_backend]
    others = ", ".join(f"{'deepep/pplx' if ALL2ALL_BACKENDS[b] == 'dispatch_combine' else b} "
                       f"{v / 1e6:.3f} MB" for b, v in epb["by_backend"].items()
                       if ALL2ALL_BACKENDS[b] != mine)
    click.echo(f"  other backends: {others} per token per node")
    click.echo(f"  one MoE layer's collective (dispatch or combine) for a {chunk}-token pass: "
               f"{epb['chunk_collective_bytes_per_node'] / 1e6:.1f} MB per node, "
               f"{epb['chunk_collective_time_old_s'] * 1e3:.2f} ms at {o:g} Gb/s; "
               f"{epb['collectives_per_pass']} per pass")
    click.echo(f"TTFT increase bound per 1,000 prompt tokens: "
               f"{epb['increase_bound_per_1000_tokens_s']:.3f} s ({o:g} -> {n:g} Gb/s per node, "
               f"all {epb['rails']} rail{'s' if epb['rails'] != 1 else ''} together)")


def _human_tp(pt, ar, chunk, o, n, emu, emulated) -> None:
    click.echo(f"all-reduces per forward pass: {pt['allreduces_per_pass']} (2 x layers + 1); "
               f"ring factor 2(N-1)/N = {pt['ring_factor']:.3f}")
    click.echo(f"prefill bytes per prompt token per node: {pt['bytes_per_prompt_token'] / 1e6:.2f}"
               f" MB")
    click.echo(f"one all-reduce of a {chunk}-token chunk: block {ar['block_bytes'] / 1e6:.1f} MB, "
               f"{ar['bytes_per_node'] / 1e6:.1f} MB sent per node in {ar['ring_steps']} steps of "
               f"{ar['step_bytes'] / 1e6:.1f} MB; {ar['time_old_s'] * 1e3:.1f} ms at {o:g} Gb/s, "
               f"{ar['time_new_s'] * 1e3:.1f} ms at {n:g}"
               + (f", {ar['time_emulated_s'] * 1e3:.1f} ms at {emulated:g} (what the emulated "
                  f"{n:g} Gb/s link really carries)" if emu else ""))
    if ar["single_prompt_tokens"] < chunk:
        click.echo(f"  one prompt alone is prefilled {ar['single_prompt_tokens']:,} tokens per "
                   "pass (vLLM's long_prefill_token_threshold, 2,048 in the study): "
                   f"{ar['single_prompt_bytes_per_node'] / 1e6:.1f} MB per node per all-reduce, "
                   f"{ar['single_prompt_time_old_s'] * 1e3:.1f} ms at {o:g} Gb/s; the full chunk "
                   "only when several prompts share a pass")
    click.echo(f"TTFT increase bound per 1,000 prompt tokens: "
               f"{pt['increase_bound_per_1000_tokens_s']:.3f} s ({o:g} -> {n:g} Gb/s)"
               + (f", {pt['increase_bound_emulated_per_1000_tokens_s']:.3f} s ({o:g} -> "
                  f"{emulated:g})" if emu else ""))


def _prompt_table(e, o, n, emu, emulated) -> None:
    emu_head = (f"  {'bound @' + format(emulated, 'g') + ' (s)':>14}  "
                f"{format(emulated, 'g') + '->' + format(n, 'g') + ' (s)':>11}") if emu else ""
    head = (f"{'prompt tokens':>13}  {'prefill (MB)':>12}  {'net @' + format(o, 'g') + ' (s)':>12}"
            f"  {'bound (s)':>9}{emu_head}  {'TTFT (s)':>8}  "
            f"{'net share':>9}  {'bound (%)':>9}")
    click.echo(head)
    for r in e["prompts"]:
        share = f"{100 * r['network_share']:.1f} %" if r["network_share"] is not None else "-"
        pct = f"{r['increase_bound_pct']:.1f}" if r["increase_bound_pct"] is not None else "-"
        t = f"{r['ttft_s']:.2f}" if r["ttft_s"] is not None else "-"
        emu_cols = (f"  {r['increase_bound_emulated_s']:>14.3f}  {r['emulated_to_real_s']:>11.3f}"
                    if emu else "")
        click.echo(f"{r['prompt_tokens']:>13,}  {r['prefill_bytes'] / 1e6:>12,.0f}  "
                   f"{r['network_time_old_s']:>12.3f}  {r['increase_bound_s']:>9.3f}"
                   f"{emu_cols}  {t:>8}  {share:>9}  {pct:>9}")


def _human_decode(dec, o, n) -> None:
    gather = (f" + logits gather {dec['output_gather_bytes'] / 1e6:.2f} MB = "
              f"{dec['pass_bytes'] / 1e6:.1f} MB"
              if dec["output_gather_bytes"] else
              " (all-reduces only: the output-layer logits gather is left out, no vocabulary "
              "size known; give --vocab N to include it)")
    click.echo(f"decode ({dec['tokens_per_pass']} token(s) per pass): block "
               f"{dec['allreduce_block_bytes'] / 1e3:.1f} KB, {dec['allreduce_bytes_per_node'] / 1e3:.1f}"
               f" KB per node per all-reduce, {dec['allreduce_pass_bytes'] / 1e6:.1f} MB per pass"
               f"{gather}; bandwidth time per pass {dec['pass_time_old_s'] * 1e3:.2f} ms at "
               f"{o:g}, bound on the extra {dec['pass_extra_bound_s'] * 1e3:.2f} ms at {n:g} "
               f"(latency-bound in practice: {dec['ring_steps']} sequential ring steps)")


def _human_projection(e, tp, ttfts) -> None:
    if e["tp_projection"]:
        click.echo("")
        rows = e["tp_projection"]
        if "ttft_s" in rows[0]:
            click.echo(f"TP projection from TTFT {ttfts[-1]:g} s at TP{tp} "
                       f"({e['prompts'][-1]['prompt_tokens']:,} prompt tokens):")
            click.echo(f"{'TP':>4}  {'bytes rel':>9}  {'compute rel':>11}  {'TTFT (s)':>8}  "
                       f"{'net share':>9}  {'increase bound (s)':>18}  {'(%)':>6}")
            for r in rows:
                click.echo(f"{r['tp']:>4}  {r['bytes_rel']:>9.2f}  {r['compute_rel']:>11.2f}  "
                           f"{r['ttft_s']:>8.2f}  {100 * r['network_share']:>8.1f}%  "
                           f"{r['increase_bound_s']:>18.3f}  {r['increase_pct']:>6.1f}")
        else:
            click.echo(f"TP size relative to TP{tp} (give --ttft for absolute projections):")
            click.echo(f"{'TP':>4}  {'bytes per node':>14}  {'compute per node':>16}  "
                       f"{'MB per token':>12}")
            for r in rows:
                click.echo(f"{r['tp']:>4}  {r['bytes_rel']:>13.2f}x  {r['compute_rel']:>15.2f}x  "
                           f"{r['bytes_per_token'] / 1e6:>12.2f}")
