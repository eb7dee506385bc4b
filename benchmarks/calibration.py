"""Calibration: the emulator beside the study, number by number, with a tolerance per row.

One command (from the repository root, in the venv)::

    python benchmarks/calibration.py            # the whole table (3 rounds per test, ~2 s)
    python benchmarks/calibration.py --fast     # 64 output tokens: no decode rows (~1 s)
    python benchmarks/calibration.py --fit      # refit the ComputeModel defaults (minutes)

The output of the whole table is kept in ``benchmarks/calibration.txt``; ``tests/test_calibration.py``
runs the fast subset and requires every row within its tolerance or explained.

The study (the project's reference measurement: 8 DGX Sparks, TP8, 200 Gb/s against an emulated
100 Gb/s link that really carries ~109 Gb/s; its serve settings ``--max-num-batched-tokens 4096
--long-prefill-token-threshold 2048 --max-num-seqs 8 --enable-chunked-prefill``, MTP with 4 draft
tokens) measured the numbers in ``STUDY`` below: TTFT (time to the last first token for the
4-request tests P4 and P6) at both links, decode speed ``(output_tokens - 1) / (t_last - t_first)``,
the decode traffic, and the peak rate of one 8K prefill in 1 ms / 5 ms / 100 ms / 1 s windows.

Rates: the study's counters saw 3.54-3.60 MB per prompt token (packet headers and a little
per-request traffic on top of the all-reduces); the emulator moves exactly the formula's 3.376 MB
per token. Rate rows therefore compare against the study's rate scaled by 3.376 / 3.57 (the
"target" column); the unscaled value is printed beside it.

Each row: quantity, study, target, emulator, deviation from the target, tolerance, and "ok",
"explained" (with the one-line reason below the table) or "MISS".
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace

import numpy as np

from rdmascope.emulator.model import (
    ComputeModel,
    ModelArch,
    TrafficConfig,
    link_config,
    plan_scenario,
    simulate,
)

#: the study's measured bytes per prompt token (3.54-3.60 MB, mid-range) and the formula's
STUDY_MB_PER_TOKEN = 3.57
FORMULA_MB_PER_TOKEN = ModelArch().bytes_per_token / 1e6
RATE_SCALE = FORMULA_MB_PER_TOKEN / STUDY_MB_PER_TOKEN

TESTS = ("P1", "P2", "P3", "P4", "P5", "P6")
#: TTFT (s) at 200 Gb/s and emulated 100 Gb/s; P4/P6: time to the last first token
STUDY_TTFT = {
    "P1": (0.96, 0.97), "P2": (6.36, 7.24), "P3": (27.02, 30.57),
    "P4": (23.00, 26.44), "P5": (55.47, 62.47), "P6": (45.82, 54.26),
}
#: the mean TTFT's increase (each request's TTFT, emulated against 200 Gb/s), %, of the
#: tests with several requests
STUDY_PER_REQUEST_PCT = {"P4": 22.5, "P6": 17.9}
#: decode speed per request at 200 Gb/s, tokens/s
STUDY_DECODE = {"P1": 22.4, "P2": 21.1, "P3": 18.7, "P4": 10.8, "P5": 21.1, "P6": 10.5}
#: the 8K prefill (P2 at 200 Gb/s): peak Gb/s per window width (ms), and over the whole prefill
STUDY_PEAKS = {1: 181.0, 5: 96.0, 100: 44.0, 1000: 40.0}
STUDY_PREFILL_MEAN = 37.0
#: weights of the TTFTs at 200 Gb/s in the fit (1 unless given). Weighting P2 (whose TTFT also
#: decides the whole-prefill mean) pushes P1 above 5 %: the compute model cannot make a single
#: 1,024-token pass as cheap as the study's P1 while keeping P3 - P4 (7 passes more) at 4 s
TTFT_WEIGHT: dict[str, float] = {}

#: rows the model is known not to meet, with the one-line reason printed under the table. The
#: numbers in braces are computed from the emulator's runs and the study's figures by
#: ``explanation_numbers`` (nothing typed in: a regression of the model changes the text, and
#: ``tests/test_calibration.py`` checks them); ``explained_texts`` fills them in.
EXPLAINED = {
    "P6 increase (emulated - 200)": (
        "the study's P6 rose {p6_above_bound_s:.2f} s above the byte bound; the model's increase "
        "comes from bytes (plus the first pair's decode tokens), so it stays below the bound as "
        "P4's does ({p4_last_pct_of_bound:.0f} %)"),
    "P6 increase, % of bound": (
        "same as the row above"),
    "P4 mean TTFT increase (per request)": (
        "no link model reaches it: the 4 prompts are prefilled in pairs (the time to the last "
        "first token and P6's first tokens at ~22/~45 s say so), so the bytes in the requests' "
        "prefill windows allow at most {p4_window_pct:.1f} % ({p4_window_pct_study:.1f} % at the "
        "study's measured 3.57 MB per token) of the mean TTFT; with its first pair at "
        "~{p4_study_first_s:.1f} s (half of {p4_study_last_s:.1f} s, as P6's 22 of 45.8 s), the "
        "study's +22.5 % needs ~{p4_study_first_increase_s:.1f} s more for that pair, "
        "{p4_first_over_bound:.1f} x its {p4_first_bound_study_s:.2f} s byte bound, while its last "
        "first token rose only {p4_last_pct_of_bound:.0f} % of its bound"),
    "P6 mean TTFT increase (per request)": (
        "the byte bound of the prefill windows is {p6_window_pct:.1f} % "
        "({p6_window_pct_study:.1f} % at 3.57 MB per token); the study's 17.9 % is its second "
        "pair's {p6_above_bound_s:.2f} s above the bound (the P6 rows above): its first pair's "
        "implied increase, 2 x 17.9 % x {p6_study_mean_s:.1f} s - {p6_study_last_increase_s:.2f} s "
        "= {p6_study_first_increase_s:.1f} s, is {p6_study_first_pct_of_bound:.0f} % of its "
        "{p6_first_bound_study_s:.1f} s byte bound, as the model's first pair "
        "({p6_model_first_increase_s:.2f} s, {p6_model_first_pct_of_bound:.1f} % of "
        "{p6_first_bound_s:.2f} s at the formula's bytes); the model cannot add the second pair's "
        "excess without breaking P4, whose second pair (the same schedule) stayed at "
        "{p4_last_pct_of_bound:.0f} %"),
    "8K prefill, whole-prefill mean": (
        "prefill bytes / TTFT: the formula's bytes over P2's TTFT at 200, which the fit leaves "
        "a few % short of the study's (the compute model's compromise with P1, see TTFT_WEIGHT)"),
    "P3 decode speed": (
        "the study's P3 (32K, 18.7 tok/s) is slower than its P5 (64K, 21.1): no cost that grows "
        "with the context meets both; the model follows P1/P2/P5"),
}


@dataclass
class Row:
    name: str
    study: float
    target: float
    value: float
    tol: float  # relative, or absolute when abs_tol
    unit: str
    abs_tol: bool = False

    @property
    def dev(self) -> float:
        return self.value - self.target if self.abs_tol else self.value / self.target - 1.0

    @property
    def ok(self) -> bool:
        return abs(self.dev) <= self.tol + 1e-12

    @property
    def verdict(self) -> str:
        if self.ok:
            return "ok"
        return "explained" if self.name in EXPLAINED else "MISS"


def _config(link: str, compute: ComputeModel | None = None) -> TrafficConfig:
    cfg = TrafficConfig(link=link_config(link))
    return replace(cfg, compute=compute) if compute is not None else cfg


def run_test(test: str, link: str, *, rounds: int, output_tokens: int, seed: int = 0,
             compute: ComputeModel | None = None):
    """Simulate ``rounds`` measured rounds of ``test`` (no warm-up) on ``link``."""
    sc = plan_scenario(test, rounds=rounds, warmup=False, output_tokens=output_tokens)
    return simulate(sc, _config(link, compute), seed=seed)


def _by_round(tr):
    out: dict[int, list] = {}
    for r in tr.requests:
        out.setdefault(r.round, []).append(r)
    return out


def ttft_last(tr) -> float:
    """Mean over rounds of the time to the last first token (s)."""
    return float(np.mean([max(r.t_first_ns - r.t_send_ns for r in rs) / 1e9
                          for rs in _by_round(tr).values()]))


def ttft_first(tr) -> float:
    """Mean over rounds of the time to the first first token (s)."""
    return float(np.mean([min(r.t_first_ns - r.t_send_ns for r in rs) / 1e9
                          for rs in _by_round(tr).values()]))


def ttft_mean(tr) -> float:
    """Mean TTFT over every request of every round (s): the per-request figure."""
    return float(np.mean([(r.t_first_ns - r.t_send_ns) / 1e9 for r in tr.requests]))


def decode_speed(tr) -> float:
    """Mean decode speed per request, ``(output - 1) / (t_last - t_first)`` tokens/s."""
    return float(np.mean([(r.output_tokens - 1) / ((r.t_last_ns - r.t_first_ns) / 1e9)
                          for r in tr.requests]))


def decode_gbps(tr, all_decoding: bool) -> float:
    """Mean collective rate (Gb/s) while decoding: the one request's [first, last] token, or
    (``all_decoding``) the span where every request of the round decodes."""
    vals = []
    for rs in _by_round(tr).values():
        t0 = max(r.t_first_ns for r in rs)
        t1 = min(r.t_last_ns for r in rs)
        if t1 > t0:
            b = tr.collective_bytes([t0, t1])
            vals.append((b[1] - b[0]) * 8 / (t1 - t0))
    return float(np.mean(vals))


def peak_table(tr, widths_ms=(1, 5, 100, 1000)) -> tuple[dict[int, float], float]:
    """Peak Gb/s per window width over the first request's prefill [t_send, t_first], windows on
    a grid from the capture start (model time 0) as the analysis lays them; and the prefill mean.

    Computed from the model's exact cumulative bytes (no read-time jitter)."""
    r = tr.requests[0]
    out = {}
    for w in widths_ms:
        wn = w * 1_000_000
        lo = (r.t_send_ns // wn) * wn
        edges = np.arange(lo, r.t_first_ns + wn, wn)
        b = tr.collective_bytes(edges)
        out[w] = float((np.diff(b) * 8 / wn).max())
    b = tr.collective_bytes([r.t_send_ns, r.t_first_ns])
    return out, float((b[1] - b[0]) * 8 / (r.t_first_ns - r.t_send_ns))


def bound_s(prompt_tokens: int) -> float:
    """The estimate's bound (s) for the emulated link: bytes x 8 x (1/109 - 1/200) per Gb/s."""
    return prompt_tokens * ModelArch().bytes_per_token * 8 * (1 / 109e9 - 1 / 200e9)


#: the emulated link's extra seconds per byte moved (the bound's factor): 8 x (1/109 - 1/200) per Gb/s
_EXTRA_S_PER_BYTE = 8 * (1 / 109e9 - 1 / 200e9)


def explanation_numbers(runs) -> dict[str, float]:
    """The numbers of ``EXPLAINED``'s reasons, from the runs of ``measure`` (test, link) -> trace
    and the study's figures.

    Per test P4/P6 at 200 Gb/s: ``*_window_pct`` = the mean over requests of the byte bound of
    each request's prefill window ``[t_send, t_first]`` (the model's bytes in it x 8 x (1/109 -
    1/200) per Gb/s) over the mean TTFT, in % (``*_study``: at the study's 3.57 MB per token);
    ``*_first_bound_s`` = that bound for the first pair (the round's earliest first token); the
    model's first-pair increase (emulated - 200) and its % of that bound; from the study: its
    last first token's increase as % of ``bound_s`` and its excess over it, and the first pair's
    increase the study's per-request % implies, ``2 x pct x mean TTFT - last pair's increase``
    (mean TTFT of a pair at the first and one at the last first token; P4's first pair taken at
    half its last, as P6's measured 22 of 45.8 s), over the first pair's bound at the study's
    bytes.
    """
    scale = STUDY_MB_PER_TOKEN / FORMULA_MB_PER_TOKEN
    out: dict[str, float] = {}
    for test in ("P4", "P6"):
        a, b = runs[test, "200"], runs[test, "emulated100"]
        k = test.lower()
        bounds, ttfts, first = [], [], []
        for rs in _by_round(a).values():
            for r in rs:
                w = a.collective_bytes([r.t_send_ns, r.t_first_ns])
                bounds.append((w[1] - w[0]) * _EXTRA_S_PER_BYTE)
                ttfts.append((r.t_first_ns - r.t_send_ns) / 1e9)
            f = min(rs, key=lambda r: r.t_first_ns)
            w = a.collective_bytes([f.t_send_ns, f.t_first_ns])
            first.append((w[1] - w[0]) * _EXTRA_S_PER_BYTE)
        out[f"{k}_window_pct"] = 100 * float(np.mean(bounds)) / float(np.mean(ttfts))
        out[f"{k}_window_pct_study"] = out[f"{k}_window_pct"] * scale
        fb = float(np.mean(first))
        out[f"{k}_first_bound_s"] = fb
        out[f"{k}_first_bound_study_s"] = fb * scale
        inc = ttft_first(b) - ttft_first(a)
        out[f"{k}_model_first_increase_s"] = inc
        out[f"{k}_model_first_pct_of_bound"] = 100 * inc / fb
        sa, sb = STUDY_TTFT[test]
        bd = bound_s(sum(a.scenario.groups[0].prompt_tokens))
        out[f"{k}_last_pct_of_bound"] = 100 * (sb - sa) / bd
        out[f"{k}_above_bound_s"] = (sb - sa) - bd
        first_s = 22.0 if test == "P6" else sa / 2
        mean_s = (first_s + sa) / 2
        first_inc = 2 * STUDY_PER_REQUEST_PCT[test] / 100 * mean_s - (sb - sa)
        out[f"{k}_study_first_s"] = first_s
        out[f"{k}_study_last_s"] = sa
        out[f"{k}_study_mean_s"] = mean_s
        out[f"{k}_study_last_increase_s"] = sb - sa
        out[f"{k}_study_first_increase_s"] = first_inc
        out[f"{k}_study_first_pct_of_bound"] = 100 * first_inc / (fb * scale)
        out[f"{k}_first_over_bound"] = first_inc / (fb * scale)
    return out


def explained_texts(numbers: dict[str, float]) -> dict[str, str]:
    """``EXPLAINED`` with ``explanation_numbers`` filled in."""
    return {name: text.format(**numbers) for name, text in EXPLAINED.items()}


def measure(*, fast: bool = False, compute: ComputeModel | None = None) -> list[Row]:
    """Run the study's tests through the emulator and return the calibration rows."""
    return measure_with_notes(fast=fast, compute=compute)[0]


def measure_with_notes(*, fast: bool = False, compute: ComputeModel | None = None
                       ) -> tuple[list[Row], dict[str, str]]:
    """``measure``'s rows and the reasons of the explained ones, their numbers computed from the
    same runs (``explained_texts(explanation_numbers(runs))``)."""
    rounds = 3
    out_tokens = 64 if fast else 1024
    rows: list[Row] = []
    runs = {}
    for test in TESTS:
        for link in ("200", "emulated100"):
            # the same seed and output at both links: each round's compute jitter is paired
            runs[test, link] = run_test(test, link, rounds=rounds, output_tokens=out_tokens,
                                        compute=compute)
    for test in TESTS:
        a, b = STUDY_TTFT[test]
        label = "time to last first token" if test in ("P4", "P6") else "TTFT"
        ea, eb = ttft_last(runs[test, "200"]), ttft_last(runs[test, "emulated100"])
        rows.append(Row(f"{test} {label} at 200", a, a, ea, 0.05, "s"))
        rows.append(Row(f"{test} {label} emulated", b, b, eb, 0.05, "s"))
        if test == "P1":  # 0.96 -> 0.97: the study's two decimals leave +-0.01 s
            rows.append(Row(f"{test} increase (emulated - 200)", b - a, b - a, eb - ea, 0.01, "s",
                            abs_tol=True))
        else:
            rows.append(Row(f"{test} increase (emulated - 200)", b - a, b - a, eb - ea, 0.05, "s"))
            tokens = sum(runs[test, "200"].scenario.groups[0].prompt_tokens)
            bd = bound_s(tokens)
            rows.append(Row(f"{test} increase, % of bound", 100 * (b - a) / bd,
                            100 * (b - a) / bd, 100 * (eb - ea) / bd, 5.0, "%", abs_tol=True))
    p6 = runs["P6", "200"]
    rows.append(Row("P6 first pair's first token at 200", 22.0, 22.0, ttft_first(p6), 0.05, "s"))
    for test, study in STUDY_PER_REQUEST_PCT.items():
        ma, mb = ttft_mean(runs[test, "200"]), ttft_mean(runs[test, "emulated100"])
        rows.append(Row(f"{test} mean TTFT increase (per request)", study, study,
                        100 * (mb - ma) / ma, 0.05, "%"))
    if not fast:
        for test in TESTS:
            v = STUDY_DECODE[test]
            rows.append(Row(f"{test} decode speed", v, v, decode_speed(runs[test, "200"]), 0.05,
                            "tok/s"))
        for test, n, study in (("P2", 1, 3.0), ("P4", 4, 6.0)):
            rows.append(Row(f"decode traffic, {n} request{'s' if n > 1 else ''} ({test})", study,
                            study * RATE_SCALE, decode_gbps(runs[test, "200"], n > 1), 0.15,
                            "Gb/s"))
    peaks, mean = peak_table(runs["P2", "200"])
    for w, v in STUDY_PEAKS.items():
        tol = 0.25 if w == 1 else 0.05
        rows.append(Row(f"8K prefill peak, {w} ms window" if w < 1000 else
                        "8K prefill peak, 1 s window", v, v * RATE_SCALE, peaks[w], tol, "Gb/s"))
    rows.append(Row("8K prefill, whole-prefill mean", STUDY_PREFILL_MEAN,
                    STUDY_PREFILL_MEAN * RATE_SCALE, mean, 0.05, "Gb/s"))
    return rows, explained_texts(explanation_numbers(runs))


def format_table(rows: list[Row], notes: dict[str, str] | None = None) -> str:
    """The side-by-side table, then the one-line reasons of the explained rows (``notes``, from
    ``measure_with_notes``; without them the reasons' templates)."""
    notes = notes if notes is not None else EXPLAINED
    head = (f"{'quantity':<42} {'study':>8} {'target':>8} {'emulator':>9} {'dev':>8} "
            f"{'tol':>6}  verdict")
    lines = [head, "-" * len(head)]
    for r in rows:
        dev = f"{r.dev:+.2f}" if r.abs_tol else f"{100 * r.dev:+.1f}%"
        tol = f"{r.tol:g}" if r.abs_tol else f"{100 * r.tol:g}%"
        lines.append(f"{r.name:<42} {r.study:>8.3g} {r.target:>8.4g} {r.value:>9.4g} {dev:>8} "
                     f"{tol:>6}  {r.verdict} ({r.unit})")
    explained = [r for r in rows if r.verdict == "explained"]
    if explained:
        lines.append("")
        for r in explained:
            lines.append(f"{r.name}: {notes[r.name]}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Refit (Nelder-Mead on log parameters; deterministic)
# ----------------------------------------------------------------------------------------------


def _nelder_mead(f, x0, *, step=0.1, iters=200):
    n = len(x0)
    pts = [np.asarray(x0, float)] + [np.asarray(x0, float) + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = int(np.argmin(vals))
    return pts[i], vals[i]


def fit(compute: ComputeModel | None = None, *, iters: int = 150) -> ComputeModel:
    """Refit the ComputeModel on the study: decode speeds, then the TTFT rows, then decode again,
    then the attention blocks' share on the 5 ms peak. Returns the fitted model."""
    comp = compute or ComputeModel()
    pre = ("pass_overhead_s", "batch_2048_s", "batch_exponent", "attention_s",
           "overlap_fraction", "ring_step_floor_s")
    dec = ("decode_base_s", "decode_per_token_s")

    def with_(c, names, x):
        return replace(c, **{k: float(math.exp(v)) for k, v in zip(names, x, strict=True)})

    def dec_loss(c):
        return sum(math.log(decode_speed(run_test(t, "200", rounds=1, output_tokens=1024,
                                                  compute=c)) / STUDY_DECODE[t]) ** 2
                   for t in ("P1", "P2", "P4", "P5", "P6"))

    def pre_loss(c):
        loss = 0.0
        for test in TESTS:
            a, b = STUDY_TTFT[test]
            ra = run_test(test, "200", rounds=1, output_tokens=2, compute=c)
            ea = ttft_last(ra)
            eb = ttft_last(run_test(test, "emulated100", rounds=1, output_tokens=2, compute=c))
            loss += TTFT_WEIGHT.get(test, 1.0) * math.log(ea / a) ** 2
            if test != "P6":  # explained: no byte-driven model rises above the bound
                loss += ((eb - ea) - (b - a)) ** 2 / max(b - a, 0.3) ** 2
            else:
                loss += 4 * math.log(ttft_first(ra) / 22.0) ** 2
        # the prefill line must not undercut the decode line at the study's decode batches
        # (4 requests x 5 tokens), or decode passes would take the prefill line's time
        under = c.compute_s(20, 0, 0) - (c.decode_base_s + 20 * c.decode_per_token_s)
        return loss + 100 * (under / 0.01) ** 2 * (under < 0)

    for names, loss in ((dec, dec_loss), (pre, pre_loss), (dec, dec_loss)):
        x, _ = _nelder_mead(lambda x, n=names, f=loss, c=comp: f(with_(c, n, x)),
                            [math.log(getattr(comp, k)) for k in names], iters=iters)
        comp = with_(comp, names, x)
    # the attention blocks' share of the compute spaces each layer's two all-reduces: bisect it
    # on the 8K prefill's 5 ms peak (closer pairs -> a higher peak)
    lo, hi = 0.05, 0.5
    target = STUDY_PEAKS[5] * RATE_SCALE
    for _ in range(12):
        mid = (lo + hi) / 2
        c = replace(comp, attention_share=mid)
        peak = peak_table(run_test("P2", "200", rounds=1, output_tokens=2, compute=c))[0][5]
        lo, hi = (mid, hi) if peak > target else (lo, mid)
    return replace(comp, attention_share=round((lo + hi) / 2, 4))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fast", action="store_true", help="64 output tokens, no decode rows")
    ap.add_argument("--fit", action="store_true", help="refit the compute model first")
    args = ap.parse_args(argv)
    comp = None
    if args.fit:
        comp = fit()
        print("fitted:", comp, file=sys.stderr)
    rows, notes = measure_with_notes(fast=args.fast, compute=comp)
    print(f"emulator vs study ({'fast subset' if args.fast else 'whole table'}); rates compared "
          f"at the formula's {FORMULA_MB_PER_TOKEN:.3f} MB/token (target = study x "
          f"{RATE_SCALE:.4f})")
    print(format_table(rows, notes))
    misses = [r for r in rows if r.verdict == "MISS"]
    print(f"\n{len(rows)} rows: {sum(r.ok for r in rows)} within tolerance, "
          f"{len(rows) - len(misses) - sum(r.ok for r in rows)} explained, {len(misses)} missed")
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
