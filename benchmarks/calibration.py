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

#: rows the model is known not to meet, with the one-line reason printed under the table
EXPLAINED = {
    "P6 increase (emulated - 200)": (
        "the study's P6 rose 1.05 s above the byte bound; the model's increase comes from bytes "
        "(plus the first pair's decode tokens), so it stays below the bound as P4's does (93 %)"),
    "P6 increase, % of bound": (
        "same as the row above"),
    "P4 mean TTFT increase (per request)": (
        "no link model reaches it: the 4 prompts are prefilled in pairs (the time to the last "
        "first token and P6's first tokens at ~22/~45 s say so), so the bytes in the requests' "
        "prefill windows allow at most 16.7 % (17.6 % at the study's measured 3.57 MB per "
        "token) of the mean TTFT; with its first pair at ~11.5 s (half of 23.0 s, as P6's 22 of "
        "45.8 s), the study's +22.5 % needs ~4.3 s more for that pair, 2.2 x its 1.95 s byte "
        "bound, while its last first token rose only 93 % of its bound"),
    "P6 mean TTFT increase (per request)": (
        "the byte bound of the prefill windows is 16.3 % (17.2 % at 3.57 MB per token); the "
        "study's 17.9 % is its second pair's 1.05 s above the bound (the P6 rows above): its "
        "first pair's implied increase, 2 x 17.9 % x 33.9 s - 8.44 s = 3.7 s, is 95 % of its "
        "3.9 s byte bound, as the model's first pair (3.50 s, 94.7 % of 3.69 s at the "
        "formula's bytes); the model cannot add the second pair's excess without breaking P4, "
        "whose second pair (the same schedule) stayed at 93 %"),
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


def measure(*, fast: bool = False, compute: ComputeModel | None = None) -> list[Row]:
    """Run the study's tests through the emulator and return the calibration rows."""
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
    return rows


def format_table(rows: list[Row]) -> str:
    """The side-by-side table, then the one-line reasons of the explained rows."""
    head = (f"{'quantity':<42} {'study':>8} {'target':>8} {'emulator':>9} {'dev':>8} "
            f"{'tol':>6}  verdict")
    lines = [head, "-" * len(head)]
    for r in rows:
        dev = f"{r.dev:+.2f}" if r.abs_tol else f"{100 * r.dev:+.1f}%"
        tol = f"{r.tol:g}" if r.abs_tol else f"{100 * r.tol:g}%"
        lines.append(f"{r.name:<42} {r.study:>8.3g} {r.target:>8.4g} {r.value:>9.4g} {dev:>8} "
                     f"{tol:>6}  {r.verdict} ({r.unit})")
    notes = [r for r in rows if r.verdict == "explained"]
    if notes:
        lines.append("")
        for r in notes:
            lines.append(f"{r.name}: {EXPLAINED[r.name]}")
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
    rows = measure(fast=args.fast, compute=comp)
    print(f"emulator vs study ({'fast subset' if args.fast else 'whole table'}); rates compared "
          f"at the formula's {FORMULA_MB_PER_TOKEN:.3f} MB/token (target = study x "
          f"{RATE_SCALE:.4f})")
    print(format_table(rows))
    misses = [r for r in rows if r.verdict == "MISS"]
    print(f"\n{len(rows)} rows: {sum(r.ok for r in rows)} within tolerance, "
          f"{len(rows) - len(misses) - sum(r.ok for r in rows)} explained, {len(misses)} missed")
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
