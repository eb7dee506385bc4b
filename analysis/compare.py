"""Compare two runs of the same test plan (e.g. 200 Gb/s vs emulated 100 Gb/s) with the estimate.

Inputs are two ``attribute.Attribution`` results. Tests are matched by their label (``test``
column; unlabelled logs are labelled "<n>x<prompt tokens>" by ``attribute.assign_rounds`` so the
same plan matches). Per test the comparison gives, side A -> side B:

- TTFT (mean over rounds of the per-round mean TTFT) and the time to the LAST first token, each
  with the change in seconds and in %;
- decode speed ``(output_tokens - 1) / (t_last - t_first)`` and its change in %;
- measured prefill bytes per prompt token on both sides (should agree: the bytes do not depend
  on the link);
- the estimate (upper bound, method.md "The estimate"): the measured prefill bytes of side A sent
  again at the speed difference, ``bytes x 8 x (1/B_b - 1/B_a)``, beside the measured increase of
  the time to the last first token, and the share of the bound it used; with a model shape, also
  the architecture estimate from the prompt tokens;
- the correction from an emulated ``B_b`` link (109 Gb/s) to a real cable (100 Gb/s):
  ``bytes x 8 x (1/100 - 1/109)``, added to side B's time to the last first token.

Checks on the inputs: the same capture with the same request log on both sides (same
``capture_id`` and log file) is an error (one capture spanning both runs, with a request log
per run, is allowed, with a note); when
the emulation check (``interfaces_used``) finds A on a single interface and B on both, a warning
says the arguments look swapped; a measured increase above the upper bound by more than the
timing noise (``bound_tolerance``, 2 %) is flagged (``exceeds_bound``) and explained in the notes.

Rounds are paired by round number for the per-round increase and its min-max spread. Warm-up
rounds (``attribute(..., warmup_rounds=N)``: column ``warmup`` of the rounds) are left out: the
per-test means come from the attributions' ``tests`` (measured rounds only) and the per-round
pairs skip rounds marked warm-up on either side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import estimate as E
from . import metrics as M


@dataclass
class Comparison:
    """Result of ``compare``: per-test table, per-round increases, and the settings used.

    ``warnings``: problems with the inputs to show prominently (e.g. A and B look swapped);
    ``notes``: caveats and the formulas used.
    """

    label_a: str
    label_b: str
    link_a_gbps: float
    link_b_gbps: float
    real_gbps: float | None
    tests: pd.DataFrame
    rounds: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    setup: Any = None  # rdmascope.models.Setup, when compare() was given one

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (tables as lists of records, NaN as None)."""
        def recs(df):
            return json_records(df)
        return {"label_a": self.label_a, "label_b": self.label_b,
                "link_a_gbps": self.link_a_gbps, "link_b_gbps": self.link_b_gbps,
                "real_gbps": self.real_gbps, "tests": recs(self.tests),
                "rounds": recs(self.rounds), "notes": self.notes, "warnings": self.warnings,
                "setup": self.setup.to_dict() if self.setup is not None else None}


def json_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Return DataFrame rows as plain-Python dicts (NaN/NA -> None, numpy scalars -> Python)."""
    out = []
    for rec in df.to_dict(orient="records"):
        clean = {}
        for k, v in rec.items():
            if isinstance(v, (list, tuple)):
                clean[k] = [x.item() if hasattr(x, "item") else x for x in v]
            elif v is None or v is pd.NA or (isinstance(v, float) and not np.isfinite(v)):
                clean[k] = None
            elif hasattr(v, "item"):
                x = v.item()
                clean[k] = None if isinstance(x, float) and not np.isfinite(x) else x
            else:
                clean[k] = v
        out.append(clean)
    return out


def _pct(new, old):
    with np.errstate(divide="ignore", invalid="ignore"):
        return 100.0 * (np.asarray(new, dtype=float) - np.asarray(old, dtype=float)) / \
            np.asarray(old, dtype=float)


def _measured(rounds: pd.DataFrame) -> pd.DataFrame:
    """Drop warm-up rounds (column ``warmup``, absent when no warm-up was set)."""
    if "warmup" in rounds.columns and len(rounds):
        return rounds[~rounds["warmup"].astype(bool)]
    return rounds


#: A measured increase above the bound by more than this share is flagged: the bound is exact
#: when nothing overlaps, so beyond the timing noise of TTFTs and counter instants (a few %)
#: the inputs are suspect (wrong link speeds, runs differing in more than the link, swapped).
BOUND_TOLERANCE = 0.02


def interfaces_used(capture) -> str | None:
    """Return "single" when one RDMA interface carried the traffic, "both" when two did, else None.

    From ``verify.verify_emulation`` (expect "single", then "both", default thresholds); None
    when it cannot judge or neither holds. ``capture``: a ``load.Capture``.
    """
    from .verify import verify_emulation

    if verify_emulation(capture, expect="single").ok:
        return "single"
    if verify_emulation(capture, expect="both").ok:
        return "both"
    return None


def interfaces_of(checks) -> str | None:
    """``interfaces_used``'s answer from the (single, both) verdicts of ``attribute_with_checks``
    (or ``report.Configuration.emulation_checks``)."""
    single, both = checks
    return "single" if single.ok else "both" if both is not None and both.ok else None


class _RangesOnPass:
    """An attribution's ranges (``ranges.RangeQueries``' consumer) as a consumer of
    ``verify.measure_stream``'s pass."""

    def __init__(self, ranges, ib: set[int]):
        from .stream import WindowGrid

        self.rr = ranges.consumer()
        self.ib = ib
        self.grids = [WindowGrid(int(ranges.width_ns), int(ranges.origin), by="direction")]
        self.flaggers = [self.rr.flag]

    def on_parts(self, parts) -> None:
        self.rr.on_parts({c: iv for c, iv in parts.items() if c in self.ib})

    def add(self, _k: int, b: pd.DataFrame, q: pd.DataFrame) -> None:
        self.rr.add(b, q)

    def finish(self, _spans) -> None:
        self.rr.finish()


def attribute_with_checks(capture, log, *, origin_ns: int | None = None, **kwargs):
    """Return (``attribute(capture, log, origin_ns=origin_ns, **kwargs)``, (single, both)): the
    attribution and the emulation check's verdicts (``verify_emulation`` with expect "single",
    then "both", None when "single" held; default thresholds) of a capture on disk, from one
    pass over its segments (``verify.measure_stream`` answering the attribution's ranges, which
    ``attribute`` records in a dry run; besides the capture's two ends, each segment is read
    once). A loaded ``Capture`` is attributed and checked as before (the intervals in memory).
    Raises what ``attribute`` and ``verify_emulation`` raise."""
    from .attribute import attribute
    from .load import Capture
    from .verify import judge_emulation, measure_stream, verify_emulation

    if isinstance(capture, Capture):
        single = verify_emulation(capture, origin_ns=origin_ns)
        both = None if single.ok else verify_emulation(capture, expect="both",
                                                       origin_ns=origin_ns)
        return attribute(capture, log, origin_ns=origin_ns, **kwargs), (single, both)
    from .stream import capture_info
    from .verify import require_rdma_counters

    info = capture_info(capture)
    require_rdma_counters(info)
    cdf = info.counters
    ib = {int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")]}
    got: dict = {}

    def one_pass(ranges):
        on_pass = ranges.source == "infiniband"
        if not on_pass:
            ranges.run()
        got["m"] = measure_stream(info, origin_ns=origin_ns,
                                  consumers=[_RangesOnPass(ranges, ib)] if on_pass else ())

    att = attribute(info, log, origin_ns=origin_ns, _run=one_pass, **kwargs)
    if "m" not in got:  # the attribution asked nothing of the capture
        got["m"] = measure_stream(info, origin_ns=origin_ns)
    single = judge_emulation(info, got["m"], expect="single")
    both = None if single.ok else judge_emulation(info, got["m"], expect="both")
    return att, (single, both)


def run_facts(capture, interfaces: str | None = None):
    """Return ``rdmascope.models.RunFacts`` of a loaded capture: its manifest, the highest port
    rate it records (Gb/s), the RDMA devices with data counters (the twins), and ``interfaces``
    ("single"/"both"/None, e.g. from ``interfaces_used``)."""
    from rdmascope.models import RunFacts

    from .load import port_rates_gbps

    c = capture.counters
    devs = list(dict.fromkeys(c.loc[c["data"] & (c["source"] == "infiniband"), "device"]))
    # the recorded port rate, never --link-gbps (that is the line rate of the over-line flag;
    # the estimate's links have --link-a / --link-b)
    return RunFacts(meta=capture.meta,
                    port_gbps=max(port_rates_gbps(capture.meta, override=False).values(),
                                  default=None),
                    twins=len(devs) or None, interfaces=interfaces)




def _request_corrections(att, test: str, emulated_gbps: float, real_gbps: float) -> float:
    """Mean over ``att``'s measured requests of ``test`` of the emulated-to-real correction of
    each one's prefill-window bytes (``prefill_tx_bytes``): what a real ``real_gbps`` cable adds
    at most to the mean TTFT (method.md, "To correct an emulated-link result"). NaN when a
    request's window bytes are unknown or there is no measured request."""
    r = getattr(att, "requests", None)
    if r is None or not len(r) or "prefill_tx_bytes" not in r or "test" not in r:
        return float("nan")
    m = (r["test"] == test) & ~r.get("warmup", pd.Series(False, index=r.index)).astype(bool)
    b = r.loc[m, "prefill_tx_bytes"].to_numpy(dtype=float)
    if not b.size or not np.isfinite(b).all():
        return float("nan")
    return float(np.mean([E.emulated_to_real_correction_s(x, emulated_gbps=emulated_gbps,
                                                           real_gbps=real_gbps) for x in b]))

def compare(att_a, att_b, *, label_a: str = "A", label_b: str = "B",
            link_a_gbps: float = E.LINK_200_GBPS, link_b_gbps: float = E.LINK_EMULATED_GBPS,
            real_gbps: float | None = E.LINK_100_GBPS, model: E.ModelShape | None = None,
            tp: int = 8, interfaces_a: str | None = None, interfaces_b: str | None = None,
            bound_tolerance: float = BOUND_TOLERANCE, setup=None) -> Comparison:
    """Compare two attributions test by test (see the module docstring for every column).

    ``link_a_gbps``/``link_b_gbps``: the effective link speeds of the two runs (defaults: the
    study's 200 Gb/s and the emulated ~109 Gb/s). ``real_gbps``: the real cable the emulated side
    stands for (None to skip the correction). ``model``/``tp``: add the architecture estimate.
    ``interfaces_a``/``interfaces_b``: "single", "both" or None, from ``interfaces_used`` of each
    capture; A on "single" with B on "both" adds the warning "A looks like the emulated link;
    arguments swapped?". ``bound_tolerance``: a measured increase of the time to the last first
    token above ``estimate_s`` by more than this share (0.02) sets ``exceeds_bound`` and a note.
    ``setup``: a ``rdmascope.models.Setup``; when given it replaces ``link_a_gbps`` (its link A),
    ``link_b_gbps`` (B's real speed, else its nominal link), ``real_gbps`` (the cable an
    emulated B stands for), ``model`` and ``tp``, and the architecture estimate uses its
    layout's bytes per token (TP all-reduce or EP all-to-all); ``Comparison.setup`` keeps it.

    Returns a ``Comparison``; ``tests`` has one row per test present on both sides:
    ``test, rounds_a, rounds_b, n_requests, prompt_tokens, ttft_a_s, ttft_b_s, ttft_change_s,
    ttft_change_pct, ttlft_a_s, ttlft_b_s, ttlft_change_s, ttlft_change_pct (time to last first
    token), decode_speed_a_tps, decode_speed_b_tps, decode_speed_change_pct, per_token_a_bytes,
    per_token_b_bytes, per_token_diff_pct, prefill_a_bytes, network_share_a, estimate_s,
    extra_prefill_s, extra_prefill_min_s, extra_prefill_max_s, bound_used_pct, exceeds_bound,
    [estimate_arch_s], correction_to_real_s, ttlft_b_real_s, ttft_b_real_s,
    ttft_change_real_pct`` (the last two: B's mean TTFT corrected request by request to the real
    cable, and its change against A's, the per-request real-cable percentage). Raises ``ValueError`` when the two
    runs share no test, when both come from the same capture (same ``capture_id``) with the same
    request log (``log_path``; different logs of one capture get a note), and on a
    non-positive link speed or a negative ``bound_tolerance`` (named by parameter).
    """
    arch_per_token = None
    if setup is not None:
        link_a_gbps, link_b_gbps = setup.link_a_gbps, setup.b_bound_gbps
        real_gbps, model, tp = setup.real_cable_gbps, setup.model, setup.tp
        arch_per_token = setup.bytes_per_token()
    elif model is not None:
        arch_per_token = E.bytes_per_prompt_token(model, tp)
    for name, v in (("link_a_gbps", link_a_gbps), ("link_b_gbps", link_b_gbps)) + (
            (("real_gbps", real_gbps),) if real_gbps is not None else ()):
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive link speed in Gb/s, got {v!r}")
    if not bound_tolerance >= 0:
        raise ValueError(f"bound_tolerance must be >= 0, got {bound_tolerance!r}")
    id_a, id_b = getattr(att_a, "capture_id", None), getattr(att_b, "capture_id", None)
    notes = []
    if id_a is not None and id_a == id_b:
        logs = [getattr(x, "log_path", None) for x in (att_a, att_b)]
        if None in logs or os.path.realpath(logs[0]) == os.path.realpath(logs[1]):
            raise ValueError(f"A ({getattr(att_a, 'capture_path', label_a)}) and B "
                             f"({getattr(att_b, 'capture_path', label_b)}) are the same capture "
                             f"(capture_id {id_a}) with the same request log; compare two "
                             "different runs")
        notes.append(f"A and B come from the same capture (capture_id {id_a}), with different "
                     f"request logs ({logs[0]}, {logs[1]})")
    warnings = []
    if interfaces_a == "single" and interfaces_b == "both":
        warnings.append(f"A looks like the emulated link; arguments swapped? A ({label_a}) "
                        f"carried its RDMA traffic on a single interface, B ({label_b}) on both; "
                        f"the comparison assumes A at {link_a_gbps:g} Gb/s and B at "
                        f"{link_b_gbps:g} Gb/s")
    if link_b_gbps >= link_a_gbps:
        what = ("" if setup is None else
                f" (A from {setup.sources.get('link_a', '?')}; B from "
                f"{setup.sources.get('b_real' if setup.b_emulated else 'link_b', '?')})")
        warnings.append(f"B's link ({link_b_gbps:g} Gb/s) is not slower than A's "
                        f"({link_a_gbps:g} Gb/s){what}: the bound is zero or negative; give "
                        "--link-a/--link-b (or --b-emulated GBPS) if the captures do not say")
    ta, tb = att_a.tests, att_b.tests
    common = [t for t in ta["test"] if t in set(tb["test"])] if len(ta) and len(tb) else []
    if not common:
        raise ValueError(f"the two runs share no test (A: {', '.join(map(str, ta.get('test', [])))}"
                         f"; B: {', '.join(map(str, tb.get('test', [])))}); label the requests "
                         "with test/round or use the same plan")
    only = sorted(set(ta["test"]) ^ set(tb["test"]))
    if only:
        notes.append(f"tests on one side only (left out): {', '.join(map(str, only))}")
    ra, rb = _measured(att_a.rounds), _measured(att_b.rounds)
    rows, round_rows = [], []
    for test in common:
        a = ta[ta["test"] == test].iloc[0]
        b = tb[tb["test"] == test].iloc[0]
        pa_tok, pb_tok = a["prompt_tokens"], b["prompt_tokens"]
        if not (pd.isna(pa_tok) or pd.isna(pb_tok)) and pa_tok != pb_tok:
            notes.append(f"test {test}: prompt tokens differ ({a['prompt_tokens']} vs "
                         f"{b['prompt_tokens']}); compared anyway")
        prefill_a = float(a["prefill_tx_bytes"])
        est = E.extra_time_bound_s(prefill_a, link_a_gbps, link_b_gbps)
        # per-round increases, rounds paired by number
        pa = ra[ra["test"] == test].set_index("round")
        pb = rb[rb["test"] == test].set_index("round")
        paired = sorted(set(pa.index) & set(pb.index))
        incs = []
        for rnd in paired:
            inc = float(pb.loc[rnd, "time_to_last_first_token_s"]
                        - pa.loc[rnd, "time_to_last_first_token_s"])
            incs.append(inc)
            round_rows.append({
                "test": test, "round": int(rnd), "tokens": pa.loc[rnd, "prompt_tokens"],
                "ttlft_a_s": float(pa.loc[rnd, "time_to_last_first_token_s"]),
                "ttlft_b_s": float(pb.loc[rnd, "time_to_last_first_token_s"]),
                "increase": inc,
                "estimate_s": E.extra_time_bound_s(float(pa.loc[rnd, "prefill_tx_bytes"]),
                                                   link_a_gbps, link_b_gbps)})
        extra = float(b["time_to_last_first_token_s"] - a["time_to_last_first_token_s"])
        _, lo, hi = M.spread(incs)
        row = {
            "test": test, "rounds_a": int(a["rounds"]), "rounds_b": int(b["rounds"]),
            "n_requests": int(a["n_requests"]), "prompt_tokens": a["prompt_tokens"],
            "ttft_a_s": a["mean_ttft_s"], "ttft_b_s": b["mean_ttft_s"],
            "ttft_change_s": b["mean_ttft_s"] - a["mean_ttft_s"],
            "ttft_change_pct": float(_pct(b["mean_ttft_s"], a["mean_ttft_s"])),
            "ttlft_a_s": a["time_to_last_first_token_s"],
            "ttlft_b_s": b["time_to_last_first_token_s"],
            "ttlft_change_s": extra,
            "ttlft_change_pct": float(_pct(b["time_to_last_first_token_s"],
                                           a["time_to_last_first_token_s"])),
            "decode_speed_a_tps": a["decode_speed_tps"], "decode_speed_b_tps": b["decode_speed_tps"],
            "decode_speed_change_pct": float(_pct(b["decode_speed_tps"], a["decode_speed_tps"])),
            "per_token_a_bytes": a["prefill_per_token_bytes"],
            "per_token_b_bytes": b["prefill_per_token_bytes"],
            "per_token_diff_pct": float(_pct(b["prefill_per_token_bytes"],
                                             a["prefill_per_token_bytes"])),
            "prefill_a_bytes": prefill_a,
            "network_share_a": (E.transfer_time_s(prefill_a, link_a_gbps)
                                / a["time_to_last_first_token_s"]
                                if a["time_to_last_first_token_s"] > 0 else np.nan),
            "estimate_s": est,
            "extra_prefill_s": extra,
            "extra_prefill_min_s": lo, "extra_prefill_max_s": hi,
            "bound_used_pct": 100.0 * extra / est if est > 0 else np.nan,
            "exceeds_bound": bool(extra > est + bound_tolerance * abs(est)),
        }
        if row["exceeds_bound"]:
            notes.append(f"test {test}: the measured increase exceeds the bound: "
                         f"{extra:+.3f} s measured against at most {est:+.3f} s "
                         + (f"({row['bound_used_pct']:.0f} % of the bound, tolerance "
                            f"{bound_tolerance * 100:g} %)" if est > 0 else
                            "(a bound of zero or less: B's link is not slower than A's)")
                         + "; the bound holds for the link speeds "
                         f"given ({link_a_gbps:g} -> {link_b_gbps:g} Gb/s), so check them, "
                         "whether the runs differ in more than the link, and the order of A "
                         "and B")
        if arch_per_token is not None:
            row["estimate_arch_s"] = E.extra_time_bound_s(
                float(a["prompt_tokens"]) * arch_per_token, link_a_gbps, link_b_gbps)
        if real_gbps is not None:
            corr = E.emulated_to_real_correction_s(float(b["prefill_tx_bytes"]),
                                                   emulated_gbps=link_b_gbps, real_gbps=real_gbps)
            row["correction_to_real_s"] = corr
            row["ttlft_b_real_s"] = b["time_to_last_first_token_s"] + corr
            # per request (mean TTFT): each measured request of B corrected by the bytes of its
            # own prefill window, then averaged as the mean TTFT is
            req_corr = _request_corrections(att_b, test, link_b_gbps, real_gbps)
            row["ttft_b_real_s"] = (b["mean_ttft_s"] + req_corr if np.isfinite(req_corr)
                                    else np.nan)
            row["ttft_change_real_pct"] = float(_pct(row["ttft_b_real_s"], a["mean_ttft_s"]))
        rows.append(row)
    if real_gbps is not None:
        notes.append(f"correction to a real {real_gbps:g} Gb/s cable: side B's prefill bytes x 8 "
                     f"x (1/{real_gbps:g} - 1/{link_b_gbps:g}) per Gb/s (an upper bound)")
    notes.append(f"estimate = side A's measured prefill bytes x 8 x (1/{link_b_gbps:g} - "
                 f"1/{link_a_gbps:g}) per Gb/s: an upper bound (full link rate, no overlap)")
    if setup is not None:
        notes.append(f"setup: {setup.describe()}; model {setup.model.describe()}")
        if setup.b_emulated and setup.b_real_gbps is None:
            notes.append(f"B is an emulated {setup.link_b_gbps:g} Gb/s link whose real speed is "
                         "unknown: the bound uses the nominal speed and no correction to a real "
                         "cable is made (give --b-emulated GBPS)")
        weights = E.default_decode_weight_bytes(setup.model, setup.tp, setup.layout)
        if weights is not None:
            dec = E.decode_traffic(setup.model, setup.tp)
            mbd = E.memory_bound_decode(dec["pass_bytes"], weights)
            notes.append(f"memory-bound decode: {weights / 1e9:.2f} GB of weights per pass per "
                         f"node at {mbd['memory_gbytes_s']:g} GB/s take at least "
                         f"{mbd['pass_floor_s'] * 1e3:.1f} ms, so with "
                         f"{dec['pass_bytes'] / 1e6:.1f} MB per pass the decode traffic stays at "
                         f"or under {mbd['rate_bound_gbps']:.1f} Gb/s per node, whatever the link")
        if arch_per_token is None:
            notes.append(f"no architecture estimate for the {setup.layout} layout: "
                         + ("a dense model has no experts to spread" if setup.model.is_moe is False
                            else f"the expert counts of {setup.model.name} are unknown (give "
                                 "--config with the mixture-of-experts fields)"))
        else:
            notes.append(f"architecture estimate: {arch_per_token / 1e6:.3f} MB per prompt token "
                         f"per node ({'TP all-reduce' if setup.layout == 'tp' else 'EP all-to-all'}"
                         f") x prompt tokens x 8 x (1/{link_b_gbps:g} - 1/{link_a_gbps:g})")
    return Comparison(label_a=label_a, label_b=label_b, link_a_gbps=link_a_gbps,
                      link_b_gbps=link_b_gbps, real_gbps=real_gbps, tests=pd.DataFrame(rows),
                      rounds=pd.DataFrame(round_rows), notes=notes, warnings=warnings,
                      setup=setup)
