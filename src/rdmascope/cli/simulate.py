"""``rdmascope simulate``: serve a live emulated ConnectX-7 sysfs tree, or write a capture directly."""

from __future__ import annotations

import sys

import click

from rdmascope.cli.output import DURATION_NS, NONNEG_SECONDS, POSITIVE
from rdmascope.models import ALL2ALL_BACKENDS, PRESETS

#: the most nodes an emulated cluster may have: each writes a capture (or, live, a tree
#: rewritten at ~4 kHz); --nodes 100000 filled the disk instead of being refused
MAX_NODES = 64

SCENARIO_HELP = ("Scenario: P1..P6 (the study's tests: warm-up + 3 rounds, 1,024 output tokens), "
                 "demo (P1 then P2, 64 output tokens), single4k (one 4,096-token prompt, ~4 s), "
                 "or a spec: prompt=TOKENS[+TOKENS...],concurrency=N,output=N,rounds=N"
                 "[,warmup=0|1][,gap=S] (e.g. prompt=2048+16384,concurrency=2,output=128,"
                 "rounds=1); with requests=N a closed-loop cell per concurrency (a client "
                 "keeping that many in flight; concurrency=1+8+64 sweeps them, warmup=K "
                 "warm-up requests per cell), e.g. prompt=1024,concurrency=1+64,requests=256,"
                 "warmup=4.")

#: the engine's scheduling options, named as vLLM's (``vllm serve --<name>``), with their help
ENGINE_OPTIONS = (
    ("max_num_batched_tokens", int, "Token budget of one engine step (vLLM's; default 4096, "
                                    "the study's)."),
    ("long_prefill_token_threshold", int, "Cap on one request's new tokens per step (vLLM's; "
                                          "default 2048, the study's; 0 = no cap)."),
    ("max_num_seqs", int, "Requests running at once (vLLM's; default 8)."),
    ("max_num_partial_prefills", int, "Prompts in prefill at once (vLLM's V0 option; default 0 "
                                      "= not enforced, as vLLM's V1 scheduler)."),
    ("num_speculative_tokens", int, "Draft tokens verified per decode step (MTP; default 4)."),
    ("draft_acceptance_rate", float, "Probability each draft token is accepted (default 0.05: "
                                     "~1 token per step, as the study's traffic implies)."),
)
ENGINE_KEYS = tuple(name for name, _, _ in ENGINE_OPTIONS) + ("enable_chunked_prefill",)


def _scenario_options(f):
    options = [
        click.option("--scenario", default="demo", show_default=True, help=SCENARIO_HELP),
        click.option("--link", type=click.Choice(["200", "emulated100"]), default="200",
                     show_default=True,
                     help="200: NCCL uses both twins; emulated100: only the first twin."),
        click.option("--tcp-fallback", is_flag=True,
                     help="The collective falls back to TCP: netdev bytes move, RDMA counters "
                          "stay flat."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the model's jitter (deterministic output)."),
        click.option("--output-tokens", type=int, default=None,
                     help="Override the output tokens of every request."),
        click.option("--rounds", type=int, default=None,
                     help="Measured rounds of a P1..P6 scenario (drops the warm-up)."),
        click.option("--preset", type=click.Choice(list(PRESETS)), default=None,
                     help="The served model (default: study, the study's 78-layer model); its "
                          "layers, hidden size and bytes shape the all-reduces."),
        click.option("--config", type=click.Path(exists=True), default=None,
                     help="The served model from a Hugging Face config.json."),
        click.option("--tp", type=click.IntRange(min=1), default=None,
                     help="Tensor-parallel size (default 8, the study's; with --dp the TP "
                          "ranks inside each node)."),
        click.option("--port-gbps", type=POSITIVE, default=None,
                     help="The port's rate, Gb/s, as sysfs reports it and the cable carries "
                          "(default 200, a DGX Spark's)."),
        click.option("--twin-gbps", type=POSITIVE, default=None,
                     help="What one of the port's two PCIe twins carries, Gb/s (default 109, "
                          "a Spark's PCIe Gen5 x4 path); --link emulated100 uses one twin."),
        click.option("--twins", type=click.IntRange(1, 2), default=None,
                     help="RDMA devices per port: 2 (default; a Spark's two PCIe twins) or 1 (a "
                          "single-function NIC, which then carries the port's rate unless "
                          "--twin-gbps says less)."),
        click.option("--layout", type=click.Choice(["tp", "ep"]), default=None,
                     help="tp: tensor-parallel all-reduces (default); ep: expert-parallel "
                          "all-to-all dispatch and combine per MoE layer (a MoE --preset or "
                          "--config), attention data-parallel."),
        click.option("--dp", type=click.IntRange(min=1), default=None,
                     help="With --layout ep: DP replicas, one per node, each with --tp ranks "
                          "inside it over NVLink (nothing of TP on the NIC)."),
        click.option("--all2all-backend", "all2all_backend",
                     type=click.Choice(list(ALL2ALL_BACKENDS)), default=None,
                     help="With --layout ep: vLLM's --all2all-backend (default "
                          "allgather_reducescatter, vLLM's)."),
        click.option("--rails", type=click.IntRange(1, 16), default=None,
                     help="Play a rail-optimised InfiniBand node instead of a Spark: this many "
                          "single-port HCAs (mlx5_0 ...; link_layer InfiniBand, no twins), the "
                          "collective spread evenly over them."),
        click.option("--rail-gbps", type=POSITIVE, default=None,
                     help="With --rails: each rail's rate, Gb/s (default 400, NDR)."),
        click.option("--resize-at", type=POSITIVE, default=None, metavar="S",
                     help="A resize under load at model time S seconds: --rails-before rails "
                          "and/or --dp-before DP replicas until then."),
        click.option("--rails-before", type=click.IntRange(min=1), default=None,
                     help="With --resize-at: rails present before it (the others appear then)."),
        click.option("--dp-before", type=click.IntRange(min=1), default=None,
                     help="With --resize-at: DP replicas before it (ranks join then)."),
    ]
    for name, kind, text in ENGINE_OPTIONS:
        options.append(click.option("--" + name.replace("_", "-"), name,
                                    type=click.IntRange(min=0) if kind is int
                                    else click.FloatRange(0.0, 1.0), default=None, help=text))
    options.append(click.option("--enable-chunked-prefill/--no-enable-chunked-prefill",
                                "enable_chunked_prefill", default=None,
                                help="Chunked prefill (vLLM's; default on, the study's)."))
    for opt in reversed(options):  # click lists options in the order they wrap the function
        f = opt(f)
    return f


MODEL_KEYS = ("preset", "config", "tp", "port_gbps", "twin_gbps")


def _cluster_options(*, live: bool):
    """The options of a played cluster shared by ``simulate capture`` and ``simulate serve``
    (with ``--nodes``): clock error, the node without the emulation, the straggler."""
    clock_help = ("With --nodes: each node's wall clock is off by up to this much (uniform, "
                  "either sign)" + ("; each node's CLOCK_MONOTONIC also has its own boot epoch "
                                    "(the recorder on its tree adds both to this machine's "
                                    "clocks)." if live else "."))
    opts = [
        click.option("--clock-error", type=DURATION_NS, default="20ms", show_default=True,
                     help=clock_help),
        click.option("--not-emulated", "not_emulated", type=click.IntRange(min=1), default=None,
                     metavar="N", help="With --nodes and --link emulated100: node N (1-based) "
                                       "did not get NCCL_IB_HCA and spreads its bytes over "
                                       "both twins."),
        click.option("--straggler", type=click.IntRange(min=1), default=None, metavar="N",
                     help="With --nodes: node N (1-based) is late to every prefill all-reduce."),
        click.option("--straggle", type=DURATION_NS, default="1ms", show_default=True,
                     help="How late the --straggler is."),
    ]

    def deco(f):
        for o in reversed(opts):
            f = o(f)
        return f
    return deco


def _traffic(scenario, link, tcp_fallback, seed, output_tokens, rounds, preset=None, config=None,
             tp=None, port_gbps=None, twin_gbps=None, layout=None, twins=None, dp=None,
             all2all_backend=None, rails=None, rail_gbps=None, resize_at=None,
             rails_before=None, dp_before=None, **engine):
    """Return (traffic, setup record or None): the scenario played with the given model, TP size
    and link; the record (``rdmascope.models.setup_record``) only when one of them was given."""
    from dataclasses import replace

    from rdmascope import models
    from rdmascope.emulator.model import (
        EngineConfig,
        ModelArch,
        Resize,
        TrafficConfig,
        link_config,
        make_scenario,
        simulate,
    )

    try:  # a malformed --scenario spec is a bad option value: usage error (exit 2)
        sc = make_scenario(scenario, output_tokens=output_tokens, rounds=rounds)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--scenario'") from exc
    try:
        if preset and config:
            raise click.UsageError("give one model: --preset or --config")
        model = (models.model_from_hf_config(config) if config
                 else models.preset(preset) if preset else models.STUDY_MODEL)
        lc = link_config(link, tcp_fallback=tcp_fallback)
        if twins == 1 and link != "200":
            raise click.UsageError("--link emulated100 restricts NCCL to one of two twins: it "
                                   "needs --twins 2")
        cable = port_gbps or lc.cable_gbps
        lc = replace(lc, cable_gbps=cable, twins=twins or 2, active_twins=min(lc.active_twins,
                                                                               twins or 2),
                     twin_gbps=twin_gbps or (cable if twins == 1 else lc.twin_gbps))
        if rails:
            if link != "200" or twins or twin_gbps or tcp_fallback:
                raise click.UsageError("--rails plays InfiniBand HCAs without twins: it takes no "
                                       "--link emulated100, --twins, --twin-gbps or "
                                       "--tcp-fallback")
            lc = replace(lc, rails=rails, rail_gbps=rail_gbps or 400.0)
        elif rail_gbps or rails_before:
            raise click.UsageError("--rail-gbps and --rails-before go with --rails N")
        if (rails_before or dp_before) and not resize_at:
            raise click.UsageError("--rails-before and --dp-before go with --resize-at S")
        if resize_at and not (rails_before or dp_before):
            raise click.UsageError("--resize-at S needs --rails-before N and/or --dp-before N")
        if (dp or all2all_backend) and (layout or "tp") != "ep":
            raise click.UsageError("--dp and --all2all-backend go with --layout ep")
        arch = ModelArch.from_model(model, tp=tp or 8, layout=layout or "tp", dp=dp,
                                    all2all_backend=all2all_backend
                                    or models.DEFAULT_ALL2ALL_BACKEND)
        eng = replace(EngineConfig(), **{k: v for k, v in engine.items() if v is not None})
        resize = (Resize(resize_at, rails_before=rails_before, dp_before=dp_before)
                  if resize_at else None)
        traffic = simulate(sc, TrafficConfig(arch=arch, engine=eng, link=lc, resize=resize),
                           seed=seed)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    record = None
    if rails:  # a rail's port rate, not a Spark twin's
        port_gbps = port_gbps or lc.rail_gbps
    if any(v is not None for v in (preset, config, tp, port_gbps, twin_gbps, dp, rails)):
        emulated = lc.active_twins == 1
        record = models.setup_record(
            link_gbps=(lc.rate_gbps if lc.rails else
                       lc.cable_gbps / 2 if emulated else lc.cable_gbps), emulated=emulated,
            emulated_real_gbps=lc.twin_gbps if emulated else None, model=model, tp=arch.tp,
            nodes=arch.nodes,
            **({"dp": arch.ep_dp, "all2all_backend": arch.all2all_backend}
               if arch.layout == "ep" else {}))
    return traffic, record


def _rate(port_gbps) -> str | None:
    """The sysfs ``rate`` text for a port speed (None: the tree's default, 200 Gb/s)."""
    return None if port_gbps is None else f"{port_gbps:g} Gb/sec (4X)"


@click.group(name="simulate")
def command() -> None:
    """Emulate a DGX Spark node's ConnectX-7 twins under tensor-parallel inference traffic."""


@command.command(name="serve")
@click.option("--root", default=None, type=click.Path(),
              help="Directory for the emulated sysfs tree, kept at exit unless --cleanup "
                   "[default: a temporary /dev/shm/rdmascope-sim-<pid>, removed at exit unless "
                   "--keep-tree].")
@_scenario_options
@click.option("--speed", type=POSITIVE, default=1.0, show_default=True,
              help="Model time runs this many times faster than real time.")
@click.option("--out", default=None, type=click.Path(),
              help="Where to write requests.jsonl and truth.json [default: the tree root when it "
                   "is kept (--root, --keep-tree), else a new ./rdmascope-sim-<pid>/].")
@click.option("--start-delay", type=NONNEG_SECONDS, default=0.0, show_default=True,
              help="Seconds of idle counters before the scenario's time 0.")
@click.option("--wait-for", default=None, type=click.Path(),
              help="Start only once a recorder writes this capture directory (a live segment "
                   "exists).")
@click.option("--cleanup", is_flag=True, help="Remove a --root tree at exit too.")
@click.option("--keep-tree", is_flag=True,
              help="Leave the default temporary tree in place at exit (it is removed otherwise).")
@click.option("--nodes", type=click.IntRange(1, MAX_NODES), default=1, show_default=True,
              help="Play a cluster live: one emulated tree per node in ROOT/<host>/ (spark-01, "
                   "...), each naming its node, so that `record -o runs/x/{host} --sysfs-root "
                   "ROOT/<host>` on each writes that node's capture; --wait-for may hold {host} "
                   "(wait for every node's recorder).")
@_cluster_options(live=True)
def serve_cmd(root, scenario, link, tcp_fallback, seed, output_tokens, rounds, speed, out,
              start_delay, wait_for, cleanup, keep_tree, nodes, clock_error, not_emulated,
              straggler, straggle, **model_kw) -> None:
    """Play a scenario live into an emulated sysfs tree; prints the tree root, then runs in the
    foreground until the scenario ends or SIGINT/SIGTERM.

    Point the sampler at it: rdmascope record -o CAPTURE --sysfs-root ROOT --netdev-stats

    The tree serve creates by default (no --root) lives in /dev/shm (memory) and is removed when
    serve exits, also after an error or SIGINT/SIGTERM (stop the recorder first, or pass
    --keep-tree); its request log and truth then go to ./rdmascope-sim-<pid>/ unless --out. A
    --root tree is kept unless --cleanup.
    """
    import os
    import signal
    from pathlib import Path

    from rdmascope.emulator.serve import serve
    from rdmascope.emulator.tree import DEFAULT_ROOT, remove_tree

    if speed <= 0:
        raise click.BadParameter(f"must be positive, got {speed:g}", param_hint="'--speed'")
    if cleanup and keep_tree:
        raise click.UsageError("--cleanup and --keep-tree contradict each other; give one")
    from rdmascope.cli.output import require_parent_dir

    for path, option in ((root, "'--root'"), (out, "'--out'")):
        if path is not None:  # a mistyped path is an error, never a new tree (as every command)
            require_parent_dir(path, option)
    check_cluster_options(nodes, straggler)
    traffic, _ = _traffic(scenario, link, tcp_fallback, seed, output_tokens, rounds, **model_kw)
    spec = _spec(nodes, clock_error, not_emulated, straggler, straggle, seed) \
        if nodes > 1 or not_emulated or straggler else None
    temporary = root is None
    root = root or f"{DEFAULT_ROOT}-{os.getpid()}"
    remove_at_exit = cleanup or (temporary and not keep_tree)
    if out is None and remove_at_exit:
        out = f"rdmascope-sim-{os.getpid()}"
    if out is not None:
        clash = [n for n in ("requests.jsonl", "truth.json") if (Path(out) / n).exists()]
        if clash and Path(out).resolve() != Path(root).resolve():
            raise click.ClickException(f"{out}: already holds {' and '.join(clash)}; choose "
                                       "another --out (nothing is overwritten)")
    stop: list[str] = []

    def on_signal(signum, _frame):
        stop.append(signal.Signals(signum).name)

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, on_signal)

    def on_event(kind, value):
        if kind == "root":
            click.echo(f"root: {value}")
        elif kind == "start":
            click.echo(f"start_monotonic_ns: {value}")
            click.echo(f"playing {traffic.scenario.name}, {link_text(traffic.config.link)}: "
                       f"{traffic.duration_ns / 1e9 / speed:.1f} s", err=True)
        sys.stdout.flush()

    played = None  # serve --nodes: {host: the traffic the node played}
    try:
        if spec is not None:
            stats, log, truth, played = _serve_cluster(
                root, traffic, spec, out=out, speed=speed, start_delay=start_delay,
                wait_for=wait_for, stop=stop, on_event=on_event,
                rate=_rate(model_kw.get("port_gbps")))
            raise _Served()
        tree = None
        if model_kw.get("port_gbps") is not None and not model_kw.get("rails"):
            # the tree's ports report the given rate
            from rdmascope.emulator.tree import build_tree, pcie_width_for

            tree = build_tree(root, seed=traffic.seed, rate=_rate(model_kw["port_gbps"]),
                              twins=traffic.config.link.twins,
                              pcie_width=pcie_width_for(traffic.config.link.twin_gbps))
        stats, log, truth = serve(root, traffic, out=out, speed=speed,
                                  start_delay_s=start_delay, wait_for=wait_for,
                                  should_stop=lambda: bool(stop), on_event=on_event, tree=tree)
    except _Served:
        pass
    except (FileExistsError, TimeoutError, InterruptedError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        # remove_tree deletes only a directory carrying the emulator's marker (never a directory
        # build_tree refused to touch)
        if remove_at_exit and os.path.isdir(root):
            try:
                remove_tree(root)
                click.echo(f"removed the emulated tree {root}"
                           f"{' (keep it with --keep-tree)' if temporary else ''}", err=True)
            except (ValueError, OSError):
                pass
    click.echo(f"request log: {log}")
    click.echo(f"truth: {truth}")
    if spec is None and truth is not None:  # one node: its NCCL witnesses beside the truth
        _witnesses(Path(truth).parent, traffic, out_dir=Path(truth).parent)
    elif truth is not None:  # a live cluster: each node's witnesses on its emulated name and clocks
        _live_cluster_logs(Path(truth), played)
    click.echo(f"player: {stats.ticks} ticks at {stats.tick_hz:.0f} Hz, longest gap "
               f"{stats.max_tick_gap_ns / 1e6:.2f} ms, {stats.late_ticks} gaps > 1 ms, "
               f"priority {stats.priority}, "
               f"{'completed' if stats.completed else 'stopped by ' + stop[0]}", err=True)



def link_text(cfg) -> str:
    """The emulated link as played, e.g. ``link 200: a 400 Gb/s port, both twins (220 Gb/s
    each)``: ``--link`` names the setup, ``--port-gbps``/``--twin-gbps`` set its rates."""
    if cfg.rails:
        return (f"{cfg.rails} InfiniBand rail{'s' if cfg.rails != 1 else ''} at "
                f"{cfg.rail_gbps:g} Gb/s each (no twins)")
    if cfg.tcp_fallback:
        return (f"link {cfg.name}: TCP fallback at {cfg.tcp_gbps:g} Gb/s "
                f"(a {cfg.cable_gbps:g} Gb/s port)")
    if cfg.active_twins == 2:
        return (f"link {cfg.name}: a {cfg.cable_gbps:g} Gb/s port, both twins "
                f"({cfg.twin_gbps:g} Gb/s each)")
    return (f"link {cfg.name}: one twin of a {cfg.cable_gbps:g} Gb/s port "
            f"(~{cfg.twin_gbps:g} Gb/s, emulated)")

@command.command(name="capture")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Capture directory to write (refused if not empty, unless --force).")
@_scenario_options
@click.option("--no-netdev-stats", is_flag=True,
              help="Leave out the netdev tx/rx bytes (as `rdmascope record` without "
                   "--netdev-stats).")
@click.option("--force", is_flag=True, help="Overwrite an existing capture.")
@click.option("--nodes", type=click.IntRange(1, MAX_NODES), default=1, show_default=True,
              help="Play a cluster: one capture per node in OUTPUT/<host>/ (spark-01, ...), each "
                   "on its own host's clocks, plus OUTPUT/requests.jsonl (the client's log, on "
                   "the first node's clock) and OUTPUT/truth.json (clock offsets, culprits).")
@_cluster_options(live=False)
def capture_cmd(output, scenario, link, tcp_fallback, seed, output_tokens, rounds,
                no_netdev_stats, force, nodes, clock_error, not_emulated, straggler,
                straggle, **model_kw) -> None:
    """Write a capture as if sampled every 1 ms (with read-timestamp jitter) plus requests.jsonl
    and truth.json, without real time passing; with --nodes N, one capture per node of a cluster."""
    from rdmascope.capture import CaptureError
    from rdmascope.cli.output import require_parent_dir
    from rdmascope.emulator.simcapture import simulate_capture

    require_parent_dir(output)  # a mistyped -o is an error, never a new tree (as every command)
    check_cluster_options(nodes, straggler)
    traffic, record = _traffic(scenario, link, tcp_fallback, seed, output_tokens, rounds,
                               **model_kw)
    argv = ["rdmascope", "simulate", "capture", *sys.argv[3:]] if len(sys.argv) > 2 else None
    if nodes > 1 or not_emulated or straggler:
        _cluster(output, traffic, nodes, clock_error, not_emulated, straggler, straggle, seed,
                 not no_netdev_stats, force, argv)
        return
    if force:  # the NCCL witnesses an earlier simulate wrote there are its own to replace
        from rdmascope.emulator.nccl_log import remove_earlier_witnesses

        remove_earlier_witnesses(output)
    try:
        path = simulate_capture(output, traffic, netdev_stats=not no_netdev_stats, force=force,
                                command_line=argv, rate=_rate(model_kw.get("port_gbps")),
                                setup=record)
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"capture: {path} ({traffic.duration_ns / 1e9:.1f} s, "
               f"{len(traffic.requests)} requests, {link_text(traffic.config.link)})")
    click.echo(f"request log: {path / 'requests.jsonl'}")
    click.echo(f"truth: {path / 'truth.json'}")
    _witnesses(path, traffic)


def _witnesses(path, traffic=None, *, rank: int = 0, out_dir=None) -> None:
    """Write and name the node's NCCL INFO log and Inspector records (emulator.nccl_log)."""
    from rdmascope.emulator.nccl_log import write_witnesses

    try:
        w = write_witnesses(path, traffic, rank=rank, out_dir=out_dir)
    except (OSError, ValueError) as exc:
        click.echo(f"warning: NCCL witnesses not written: {exc}", err=True)
        return
    click.echo(f"NCCL log: {w['log']}" + (f"; Inspector records: {w['inspector']}"
                                           if "inspector" in w else ""))


def _live_cluster_logs(truth_path, played: dict | None = None) -> None:
    """Write each live node's NCCL log, and its Inspector records from the traffic it played
    (``played``: {host: traffic}), into its ``out/<host>/`` (``truth.json`` nodes: host,
    monotonic_offset_ns, wall_clock_error_ns on this machine's clocks)."""
    import json
    import time

    from rdmascope.emulator.nccl_log import write_witnesses

    try:
        nodes = json.loads(truth_path.read_text()).get("nodes") or []
        off = time.time_ns() - time.monotonic_ns()
        ins = False
        for rank, n in enumerate(nodes):
            node_off = off + int(n.get("wall_clock_error_ns") or 0) - int(n.get("monotonic_offset_ns") or 0)
            w = write_witnesses(truth_path.parent / n["host"], (played or {}).get(n["host"]),
                                rank=rank, host=n["host"], realtime_offset_ns=node_off)
            ins = ins or "inspector" in w
    except (OSError, ValueError, KeyError, TypeError) as exc:
        click.echo(f"warning: NCCL witnesses of the live nodes not written: {exc}", err=True)
        return
    click.echo(f"NCCL logs: {truth_path.parent}/<host>/nccl/"
               + (f"; Inspector records: {truth_path.parent}/<host>/nccl-inspector/"
                  if ins else ""))


class _Served(Exception):
    """serve --nodes finished (skips the one-node path)."""


def check_cluster_options(nodes, straggler) -> None:
    """Refuse (exit 2) an option of a played cluster given without what it goes with, instead
    of ignoring it: --clock-error without --nodes N (N >= 2), --straggle without --straggler."""
    from rdmascope.cli.common import given

    if given("clock_error") and nodes < 2:
        raise click.UsageError("--clock-error goes with --nodes N (N >= 2): one node has no "
                               "other clock to be off from")
    if given("straggle") and straggler is None:
        raise click.UsageError("--straggle goes with --straggler N (the node that is late)")


def _spec(nodes, clock_error, not_emulated, straggler, straggle, seed):
    """The ``ClusterSpec`` of --nodes and its options (usage errors name the option)."""
    from rdmascope.emulator.cluster import ClusterSpec

    if nodes < 2:
        raise click.UsageError("--not-emulated and --straggler need a cluster: give --nodes N "
                               "(N >= 2)")
    for opt, v in (("--not-emulated", not_emulated), ("--straggler", straggler)):
        if v is not None and v > nodes:
            raise click.BadParameter(f"node {v} does not exist with --nodes {nodes}",
                                     param_hint=f"'{opt}'")
    return ClusterSpec(nodes=nodes, clock_error_ns=clock_error,
                       misconfigured=None if not_emulated is None else not_emulated - 1,
                       straggler=None if straggler is None else straggler - 1,
                       straggle_ns=straggle, seed=seed)


def _serve_cluster(root, traffic, spec, *, out, speed, start_delay, wait_for, stop, on_event,
                   rate):
    """serve --nodes: one tree per node under ROOT/<host>/, played by one loop; the truth of
    every node and of the cluster into OUT (default: the root). Returns (stats, request log,
    truth path, {host: the traffic the node played})."""
    import time
    from dataclasses import replace
    from pathlib import Path

    from rdmascope.emulator.cluster import build_cluster_trees, write_cluster_truth
    from rdmascope.emulator.serve import wait_for_path
    from rdmascope.emulator.tree import MARKER, play_nodes

    r = Path(root)
    if r.exists() and any(r.iterdir()) and not (r / MARKER).is_file():
        raise click.ClickException(f"{root}: exists and is not an emulated tree (no {MARKER}); "
                                   "refusing to touch it")
    try:
        built = build_cluster_trees(r, traffic, spec, rate=rate)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    (r / MARKER).write_text("built by rdmascope simulate serve --nodes\n")
    on_event("root", r)
    for host, tree, _node, role, _clk in built:
        click.echo(f"node: {host} {tree.root}" + (f" ({', '.join(role)})" if role else ""))
    sys.stdout.flush()
    if wait_for is not None:
        waits = [str(wait_for).replace("{host}", h) for h, *_ in built] \
            if "{host}" in str(wait_for) else [str(wait_for)]
        for w in waits:
            if not wait_for_path(Path(w), "live-*.arrow", 60.0, lambda: bool(stop)):
                if stop:
                    raise InterruptedError("stopped before the recorders started")
                raise TimeoutError(f"{w}: no recorder started writing there within 60 s")
    t0 = time.perf_counter_ns() + int(start_delay * 1e9)
    on_event("start", t0)
    stats = play_nodes([(b[1], b[2]) for b in built], t0_ns=t0, speed=speed,
                       should_stop=lambda: bool(stop))
    played_ns = min((time.perf_counter_ns() - t0) * speed, traffic.duration_ns)
    played = []
    for host, _tree, node, role, clk in built:
        if not stats.completed:
            node = replace(node, requests=[q for q in node.requests if q.t_last_ns <= played_ns])
        played.append((host, node, role, clk))
    dest = Path(out) if out is not None else r
    truth = write_cluster_truth(dest, played, traffic, spec, t0, speed=speed,
                                extra={"live": {"completed": stats.completed,
                                                "sysfs_root": str(r)}})
    on_event("done", stats)
    return stats, dest / "requests.jsonl", truth, {h: node for h, node, _r, _c in played}


def _cluster(output, traffic, nodes, clock_error, not_emulated, straggler, straggle, seed,
             netdev_stats, force, argv) -> None:
    from rdmascope.capture import CaptureError
    from rdmascope.emulator.cluster import simulate_cluster

    spec = _spec(nodes, clock_error, not_emulated, straggler, straggle, seed)
    if force:  # each node's NCCL witnesses of an earlier simulate are its own to replace
        from pathlib import Path as _P

        from rdmascope.emulator.nccl_log import remove_earlier_witnesses

        if _P(output).is_dir() and not _P(output).is_symlink():
            for child in _P(output).iterdir():
                if child.is_dir() and not child.is_symlink():
                    remove_earlier_witnesses(child)
    played: dict = {}  # each node's traffic: its Inspector records
    try:
        truth = simulate_cluster(output, traffic, spec, force=force, netdev_stats=netdev_stats,
                                 command_line=argv, node_traffic=played)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    hosts = [n["host"] for n in truth["nodes"]]
    from pathlib import Path

    from rdmascope.emulator.nccl_log import write_witnesses

    wrote = []
    for rank, h in enumerate(hosts):  # each node's NCCL log (from its own truth: its link) and
        try:                          # Inspector records (from the traffic it played)
            wrote.append(write_witnesses(Path(output) / h, played.get(h), rank=rank))
        except (OSError, ValueError) as exc:
            click.echo(f"warning: {h}: NCCL witnesses not written: {exc}", err=True)
    click.echo(f"cluster: {output}/{{{hosts[0]}..{hosts[-1]}}} ({len(hosts)} captures, "
               f"{traffic.duration_ns / 1e9:.1f} s, {len(traffic.requests)} requests, "
               f"{link_text(traffic.config.link)})")
    click.echo(f"request log: {output}/requests.jsonl (the client's, on {hosts[0]}'s clock)")
    click.echo(f"truth: {output}/truth.json")
    if wrote:
        ins = any("inspector" in w for w in wrote)
        click.echo(f"NCCL logs: {output}/<host>/nccl/"
                   + (f"; Inspector records: {output}/<host>/nccl-inspector/" if ins else ""))
