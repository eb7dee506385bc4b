"""The model and setup options every command that estimates takes (same names, same meaning).

``@setup_options`` adds ``--preset``, ``--config``, ``--tp``, ``--nodes``, ``--link-a``,
``--link-b``, ``--b-emulated GBPS`` / ``--b-real`` and ``--layout``; ``resolve(kw, run_a, run_b)``
turns them (and what the captures' manifests say, ``rdmascope.models.resolve_setup``) into a
``rdmascope.models.Setup``. Standard library and click only.
"""

from __future__ import annotations

import functools
from typing import Any

import click

from rdmascope.cli.output import POSITIVE
from rdmascope.models import ALL2ALL_BACKENDS, DEFAULT_ALL2ALL_BACKEND, PRESETS

#: The keyword arguments ``@setup_options`` adds to a command.
SETUP_KEYS = ("preset", "config", "tp", "nodes", "link_a", "link_b", "b_emulated", "b_real",
              "layout", "dp", "all2all_backend", "rails")


def setup_options(func=None, *, link_a_aliases=(), link_b_aliases=(), b_emulated_aliases=(),
                  tp_default: int | None = None):
    """Decorate a click command with the model and setup options (see the module docstring).

    The aliases keep older option names working (e.g. ``--link-old`` for ``--link-a`` on
    ``estimate``). ``tp_default``: a default TP size (None: from the manifests, else 8).
    """
    def deco(f):
        opts = [
            click.option("--preset", type=click.Choice(list(PRESETS)), default=None,
                         help="The served model, a known one (default: recorded in the "
                              "capture, else 'study', the study's 78-layer MoE model). "
                              + "; ".join(f"{k}: {m.title or m.name}" for k, m in PRESETS.items())
                              + "."),
            click.option("--config", type=click.Path(exists=True), default=None,
                         help="The served model from a Hugging Face config.json (dense or "
                              "mixture-of-experts)."),
            click.option("--tp", type=click.IntRange(min=1), default=tp_default,
                         show_default=tp_default is not None,
                         help="Tensor-parallel size (default: recorded in the capture, else 8)."),
            click.option("--nodes", type=click.IntRange(min=1), default=None,
                         help="Nodes the TP ranks span (default: one per rank, as on DGX "
                              "Spark)."),
            click.option("--link-a", *link_a_aliases, "link_a", type=POSITIVE, default=None,
                         help="Run A's link, Gb/s (default: recorded, else A's port rate, "
                              "else 200)."),
            click.option("--link-b", *link_b_aliases, "link_b", type=POSITIVE, default=None,
                         help="Run B's link, or the link an emulated B stands for, Gb/s "
                              "(default: recorded, else B's port rate, halved for an emulated "
                              "link on two twins, else 100)."),
            click.option("--b-emulated", *b_emulated_aliases, "b_emulated", type=POSITIVE,
                         default=None, metavar="GBPS",
                         help="B is an emulated link that really carries GBPS (e.g. 109: one "
                              "PCIe x4 twin of a Spark). Default: from the manifest or the "
                              "emulation check."),
            click.option("--b-real", is_flag=True, default=False,
                         help="B is a real cable (no emulation, no correction)."),
            click.option("--layout", type=click.Choice(["tp", "ep"]), default="tp",
                         show_default=True,
                         help="Parallel layout: tp = tensor parallel (all-reduce); ep = expert "
                              "parallel MoE (the expert collective across nodes, attention "
                              "data-parallel)."),
            click.option("--dp", type=click.IntRange(min=1), default=None,
                         help="With --layout ep: DP replicas, one per node or Pod, each with "
                              "--tp ranks inside it over NVLink (EP size = TP x DP)."),
            click.option("--all2all-backend", "all2all_backend",
                         type=click.Choice(list(ALL2ALL_BACKENDS)), default=None,
                         help="With --layout ep: vLLM's --all2all-backend (default "
                              f"{DEFAULT_ALL2ALL_BACKEND}, vLLM's)."),
            click.option("--rails", type=click.IntRange(min=1), default=None,
                         help="With --layout ep: NICs per node the EP traffic spreads over "
                              "(default one per TP rank). --link-a/--link-b stay per node: all "
                              "its rails together (e.g. 2 x 400 = 800)."),
        ]
        for o in reversed(opts):
            f = o(f)
        return f

    return deco(func) if func is not None else deco


def resolve(kw: dict[str, Any], run_a=None, run_b=None):
    """Return the ``Setup`` from the options in ``kw`` (popped) and the runs' facts.

    ``run_a``/``run_b``: ``rdmascope.models.RunFacts`` of the captures (None without one).
    Raises ``click.ClickException`` with the model/setup error's one line.
    """
    from rdmascope.models import ModelError, resolve_setup

    v = {k: kw.pop(k, None) for k in SETUP_KEYS}
    try:
        return resolve_setup(preset_name=v["preset"], config=v["config"], tp=v["tp"],
                             nodes=v["nodes"], link_a_gbps=v["link_a"], link_b_gbps=v["link_b"],
                             b_emulated_gbps=v["b_emulated"], b_real=bool(v["b_real"]),
                             layout=v["layout"] or "tp", run_a=run_a, run_b=run_b,
                             dp=v["dp"], all2all_backend=v["all2all_backend"], rails=v["rails"])
    except ModelError as exc:
        raise model_error(exc, v["config"]) from exc


def model_error(exc: Exception, config=None) -> click.ClickException:
    """Return the CLI error for a ``models.ModelError``: about the ``--config`` file (its message
    names it) an error of the data (exit 4), else options that do not go together, an unknown
    preset or a bad value: a usage error (exit 2)."""
    from rdmascope.exitcodes import DataError

    if config is not None and str(config) in str(exc):
        return DataError(str(exc))
    return click.UsageError(str(exc))


def resolve_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    """Return ``rdmascope.models.resolve_setup`` keywords from the options in ``kw`` (popped).

    The model (--preset / --config) is read here, so that a bad config is the option's error
    before any capture is read; the rest stays for ``resolve_setup`` to combine with the
    captures. Raises ``click.ClickException`` naming the file and field.
    """
    from rdmascope.models import ModelError, model_from_hf_config, preset

    v = {k: kw.pop(k, None) for k in SETUP_KEYS}
    out: dict[str, Any] = {"tp": v["tp"], "nodes": v["nodes"], "link_a_gbps": v["link_a"],
                           "link_b_gbps": v["link_b"], "b_emulated_gbps": v["b_emulated"],
                           "b_real": bool(v["b_real"]), "layout": v["layout"] or "tp",
                           "dp": v["dp"], "all2all_backend": v["all2all_backend"],
                           "rails": v["rails"]}
    try:
        if v["preset"] and v["config"]:
            raise ModelError("give one model: --preset or --config")
        if v["config"]:
            out["model"] = model_from_hf_config(v["config"])
        elif v["preset"]:
            out["model"] = preset(v["preset"])
    except ModelError as exc:
        raise model_error(exc, v["config"]) from exc
    return out


def with_setup(f):
    """Wrap a command body so that it receives ``setup_kw`` (the raw setup options) as one dict."""
    @functools.wraps(f)
    def wrapper(*args, **kw):
        setup_kw = {k: kw.pop(k) for k in SETUP_KEYS if k in kw}
        return f(*args, setup_kw=setup_kw, **kw)
    return wrapper


def describe_sources(setup) -> list[str]:
    """Lines saying where each setup value came from (for the human output)."""
    return [f"{k}: {v}" for k, v in setup.sources.items()]
