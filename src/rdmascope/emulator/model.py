"""Tensor-parallel traffic model of one DGX Spark node's ConnectX-7 twins (the emulator's physics).

What one node of a TP-N inference server sends and receives, as an exact function of time:

- **Prefill** (bandwidth-bound): each forward pass runs ``2 x layers + 1`` ring all-reduces of a block
  of ``tokens_in_pass x hidden x bytes_per_value``; each node sends ``2(N-1)/N`` times the block
  (method.md, "What tensor parallelism sends"). Each all-reduce is ``2(N-1)`` ring steps sent at the
  available link rate plus a fixed per-step latency, so it appears as a burst of a few ms at close to
  line rate; the pass's compute time is spread as equal gaps between the all-reduces.
- **Overlap**: a fraction ``ComputeModel.hidden_fraction(tokens)`` of each prefill all-reduce's
  transfer time is hidden behind the compute before it (the burst starts that much before the gap
  ends, still at the link rate): ~4.6 % for a full 4,096-token chunk, ~88 % for a 1,024-token pass.
  A fit, not derived: it puts the emulated-100 TTFT increase at 95.4 % of the estimate's bound for
  P2-P6 (P2 +0.88 s of 0.92 s, as the study measured) and 12 % for P1 (+0.014 s; the study: +0.01 s).
  Without it every byte would be on the critical path and the increase would equal the bound by
  construction (method.md, "The estimate (upper bound)").
- **Decode** (latency-bound): a pass carries ``1 + spec_tokens`` tokens per running request; its
  all-reduces (plus the output-layer gather) are small and are modelled as a steady rate over the
  pass, independent of the link speed (method.md, "Prefill and decode load the network in opposite
  ways").
- **Scheduling**: a chunked-prefill engine (vLLM-like): every pass has a budget of
  ``max_num_batched_tokens``; running decodes take ``1 + spec_tokens`` each first, the rest is shared
  evenly by at most ``max_num_partial_prefills`` prompts in arrival order (so 4 x 16K arriving
  together are prefilled in pairs, the first pair decoding while the second prefills, as the study saw).
- **Link**: two twins of one 200 Gb/s port, each limited to ~109 Gb/s by its PCIe x4 link; NCCL spreads
  traffic evenly over the active twins; "emulated 100 Gb/s" = only the first twin (method.md,
  "Hardware"). The rate of a transfer is ``min(cable_gbps, active_twins x twin_gbps)``, so a twin never
  carries more than ``twin_gbps``. tx and rx move the same amounts (every ring node sends what it
  receives).
- **Compute**: prefill pass time ``= pass_overhead_s + per_token_s x tokens + attention_s x sum_i
  t_i (ctx_i + t_i / 2)`` and decode pass time ``= decode_base_s + decode_per_token_s x tokens``, each
  times a seeded log-normal jitter. The defaults are calibrated (with the overlap above) on the
  study's TTFTs at 200 Gb/s (P1 0.96 s, P2 6.36 s exactly; P3 27.02 s and P5 55.47 s within 2 %)
  and its decode rates (~3 Gb/s for one request, ~6 Gb/s for four).

The output (:class:`Traffic`) holds the cumulative bytes one node sends on its collective as
piecewise-linear breakpoints (``t_ns``, ``cum_bytes``), the per-series split (per twin and direction,
plus the netdevs), and the ground-truth request timeline. Everything is deterministic for a seed.
Times are int64 ns from the start of the scenario (model time); bytes are decimal.
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
    """The served model's shape as tensor parallelism sees it (defaults: the study's example model)."""

    layers: int = 78
    hidden: int = 6144
    bytes_per_value: int = 2
    tp: int = 8

    @property
    def allreduces_per_pass(self) -> int:
        """All-reduces per forward pass: ``2 x layers + 1`` (method.md)."""
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
    def bytes_per_token(self) -> float:
        """Bytes per prompt token per node: ``(2 x layers + 1) x hidden x bytes x 2(N-1)/N``.

        method.md: 157 x 6,144 x 2 x 1.75 = 3,376,128 bytes (3.38 MB) at the defaults.
        """
        return self.allreduces_per_pass * self.allreduce_bytes(1)


@dataclass(frozen=True)
class EngineConfig:
    """The inference engine's scheduling (chunked prefill, speculative decoding)."""

    max_num_batched_tokens: int = 4096
    max_num_partial_prefills: int = 2
    spec_tokens: int = 4
    #: probability that each successive draft token is accepted (tokens per step = 1 + accepted)
    spec_acceptance: float = 0.6
    #: output-layer (logits) gather bytes per token in a decode pass, so a one-request decode pass
    #: moves ~18 MB per node as in method.md
    gather_bytes_per_token: float = 224_000.0
    #: time from t_send until the engine schedules the request (HTTP, tokenisation)
    request_overhead_s: float = 0.02

    @property
    def tokens_per_decode(self) -> int:
        """Tokens one running request contributes to every pass: ``1 + spec_tokens``."""
        return 1 + self.spec_tokens


@dataclass(frozen=True)
class ComputeModel:
    """Forward-pass compute times (seconds), calibrated on the study's TTFTs and decode rates."""

    pass_overhead_s: float = 0.3731
    per_token_s: float = 0.0005274
    attention_s: float = 2.766e-9
    decode_base_s: float = 0.032
    decode_per_token_s: float = 0.0032
    #: relative standard deviation of the per-pass log-normal jitter
    jitter: float = 0.02
    #: communication/compute overlap (see ``hidden_fraction``): the share of a big pass's
    #: all-reduce hidden behind compute, the pass size (tokens) at which half of the rest is
    #: hidden, and how sharply the hidden share falls with the pass size
    overlap_min: float = 0.04
    overlap_half_tokens: float = 1500.0
    overlap_steepness: float = 5.0

    def __post_init__(self):
        if not 0.0 <= self.overlap_min <= 1.0:
            raise ValueError(f"overlap_min must be in [0, 1], got {self.overlap_min}")
        if self.overlap_half_tokens <= 0 or self.overlap_steepness <= 0:
            raise ValueError("overlap_half_tokens and overlap_steepness must be positive")

    def hidden_fraction(self, tokens: int) -> float:
        """Return the fraction of a prefill pass's all-reduce transfer time hidden behind compute.

        ``h(t) = m + (1 - m) / (1 + (t / t_half) ** k)`` with ``m = overlap_min``, ``t_half =
        overlap_half_tokens``, ``k = overlap_steepness`` and ``t`` the pass's tokens: ~4.6 % for a
        full 4,096-token chunk, ~88 % for a 1,024-token pass. A phenomenological fit, not derived
        from the engine: the study measured TTFT increases of 93-96 % of the estimate's bound for
        P2-P5 (P2 +0.88 s against 0.92 s) and almost none for P1 (+0.01 s against 0.115 s)
        (method.md, "Reference observations"); without any overlap the emulator would meet the
        bound exactly, by construction.
        """
        m = self.overlap_min
        return m + (1.0 - m) / (1.0 + (tokens / self.overlap_half_tokens) ** self.overlap_steepness)


@dataclass(frozen=True)
class LinkConfig:
    """The node's link: two twins of one port, which of them NCCL uses, or a TCP fallback.

    ``active_twins`` = 2 is the 200 Gb/s setup, 1 the emulated 100 Gb/s one (first twin only).
    ``tcp_fallback``: the collective runs over the first twin's netdev (kernel TCP) at
    ``tcp_gbps`` instead of RDMA, so the RDMA counters stay flat and the netdev bytes move.
    """

    name: str = "200"
    active_twins: int = 2
    twin_gbps: float = 109.0
    cable_gbps: float = 200.0
    ring_step_latency_s: float = 30e-6
    tcp_fallback: bool = False
    tcp_gbps: float = 40.0
    #: background (management, ssh, monitoring) traffic on each netdev, bytes/s
    netdev_idle_tx_bps: float = 12_000.0
    netdev_idle_rx_bps: float = 20_000.0

    def __post_init__(self):
        if self.active_twins not in (1, 2):
            raise ValueError(f"active_twins must be 1 or 2, got {self.active_twins}")
        if self.twin_gbps <= 0 or self.cable_gbps <= 0 or self.tcp_gbps <= 0:
            raise ValueError("link rates must be positive")

    @property
    def rate_gbps(self) -> float:
        """Rate of a bandwidth-bound transfer (Gb/s): ``min(cable, active x twin)`` or the TCP rate."""
        if self.tcp_fallback:
            return self.tcp_gbps
        return min(self.cable_gbps, self.active_twins * self.twin_gbps)


LINKS = {
    "200": LinkConfig(name="200", active_twins=2),
    "emulated100": LinkConfig(name="emulated100", active_twins=1),
}


def link_config(name: str, *, tcp_fallback: bool = False) -> LinkConfig:
    """Return the named link setup ("200" or "emulated100"), optionally as a TCP fallback.

    Raises ``ValueError`` for an unknown name.
    """
    if name not in LINKS:
        raise ValueError(f"unknown link {name!r}; expected one of {', '.join(LINKS)}")
    return replace(LINKS[name], tcp_fallback=tcp_fallback)


@dataclass(frozen=True)
class TrafficConfig:
    """Everything the model needs besides the scenario."""

    arch: ModelArch = field(default_factory=ModelArch)
    engine: EngineConfig = field(default_factory=EngineConfig)
    compute: ComputeModel = field(default_factory=ComputeModel)
    link: LinkConfig = field(default_factory=LinkConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------------------------
# Scenarios
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestGroup:
    """Requests sent together (one round of one test); sent ``gap_before_s`` after the previous
    group's last token (or after the scenario start for the first group)."""

    test: str
    round: int
    prompt_tokens: tuple[int, ...]
    output_tokens: int
    gap_before_s: float


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
    ``single4k`` (one 4,096-token prompt = one full prefill chunk, 16 output tokens: ~4 s).

    Raises ``ValueError`` for an unknown name.
    """
    if name in TEST_PLAN:
        return plan_scenario(name)
    if name == "demo":
        return plan_scenario(["P1", "P2"], rounds=1, warmup=False, output_tokens=64,
                                  idle_gap_s=1.0, lead_in_s=0.5, tail_s=0.5, name="demo")
    if name == "single4k":
        return Scenario("single4k", (RequestGroup("single4k", 1, (4096,), 16, 0.5),), 0.3,
                        "one 4,096-token prompt (one full prefill chunk), 16 output tokens")
    raise ValueError(f"unknown scenario {name!r}; expected one of {', '.join(SCENARIO_NAMES)}")


SCENARIO_NAMES = (*TEST_PLAN, "demo", "single4k")


def make_scenario(name: str, *, output_tokens: int | None = None, rounds: int | None = None,
                  idle_gap_s: float | None = None) -> Scenario:
    """Return the named scenario (see ``named_scenario``) with optional overrides.

    ``output_tokens`` replaces every group's output size, ``rounds`` the number of measured rounds
    of a P1..P6 scenario (the warm-up is then dropped), ``idle_gap_s`` the gap between groups.
    Raises ``ValueError`` for an unknown name or a non-positive override.
    """
    sc = named_scenario(name)
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
            out[i] = s.collective_share * c + s.idle_bps * np.clip(t, 0, None) * 1e-9
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


def _split_evenly(budget: int, remaining: list[int]) -> list[int]:
    """Water-fill ``budget`` tokens over prompts with ``remaining`` tokens (each gets <= its rest)."""
    alloc = [0] * len(remaining)
    left = budget
    while left > 0:
        open_ = [i for i, r in enumerate(remaining) if alloc[i] < r]
        if not open_:
            break
        share, extra = divmod(left, len(open_))
        if share == 0:
            for i in open_[:extra]:
                alloc[i] += 1
            break
        for i in open_:
            give = min(share, remaining[i] - alloc[i])
            alloc[i] += give
            left -= give
    return alloc


class _Builder:
    """Accumulates collective breakpoints in integer ns."""

    def __init__(self):
        self.t = [0]
        self.b = [0.0]

    def idle_until(self, t_ns: int) -> None:
        if t_ns > self.t[-1]:
            self.t.append(t_ns)
            self.b.append(self.b[-1])

    def ramp(self, dt_ns: int, nbytes: float) -> None:
        self.t.append(self.t[-1] + max(int(dt_ns), 1))
        self.b.append(self.b[-1] + nbytes)

    @property
    def now(self) -> int:
        return self.t[-1]


def _jitter(rng: np.random.Generator, rel: float) -> float:
    return float(math.exp(rng.normal(0.0, rel))) if rel > 0 else 1.0


def simulate(scenario: Scenario, config: TrafficConfig | None = None, *, seed: int = 0) -> Traffic:
    """Run the scenario through the engine and link model; return the node's traffic and timeline.

    Deterministic for (scenario, config, seed). Raises ``ValueError`` on an empty scenario or a
    non-positive prompt/output size.
    """
    cfg = config or TrafficConfig()
    arch, eng, comp, link = cfg.arch, cfg.engine, cfg.compute, cfg.link
    if not scenario.groups:
        raise ValueError(f"scenario {scenario.name!r} has no requests")
    rng = np.random.default_rng(seed)
    rate_bits_per_ns = link.rate_gbps  # Gb/s == bits per ns
    n_ar = arch.allreduces_per_pass
    step_lat_ns = link.ring_step_latency_s * 1e9 * arch.ring_steps
    per_decode = eng.tokens_per_decode
    build = _Builder()
    requests: list[RequestTiming] = []
    passes: list[Pass] = []
    n_req = 0

    for group in scenario.groups:
        if any(p < 1 for p in group.prompt_tokens) or group.output_tokens < 1:
            raise ValueError(f"group {group.test} round {group.round}: prompt and output tokens "
                             "must be >= 1")
        t_send = build.now + int(round(group.gap_before_s * 1e9))
        build.idle_until(t_send)
        build.idle_until(t_send + int(round(eng.request_overhead_s * 1e9)))
        k = len(group.prompt_tokens)
        prompt_left = list(group.prompt_tokens)
        done_prompt = [0] * k
        generated = [0] * k
        t_first = [None] * k
        t_last = [None] * k
        while any(t is None for t in t_last):
            decoding = [i for i in range(k) if t_first[i] is not None and t_last[i] is None]
            waiting = [i for i in range(k) if prompt_left[i] > 0][: eng.max_num_partial_prefills]
            budget = max(eng.max_num_batched_tokens - per_decode * len(decoding), 0)
            alloc = _split_evenly(budget, [prompt_left[i] for i in waiting])
            prefill = sum(alloc)
            dec_tokens = per_decode * len(decoding)
            tokens = prefill + dec_tokens
            t0 = build.now
            if prefill > 0:
                attn = sum(a * (done_prompt[i] + a / 2) for a, i in zip(alloc, waiting, strict=True))
                attn += sum(per_decode * (group.prompt_tokens[i] + generated[i]) for i in decoding)
                compute_s = (comp.pass_overhead_s + comp.per_token_s * tokens
                             + comp.attention_s * attn) * _jitter(rng, comp.jitter)
                gap_ns = compute_s * 1e9 / n_ar
                ar_bytes = arch.allreduce_bytes(tokens)
                xfer_ns = math.ceil(ar_bytes * 8 / rate_bits_per_ns + step_lat_ns)
                # The hidden part of each transfer starts before the compute gap ends (still at
                # the link rate), so only xfer - hidden adds to the pass.
                hidden_ns = int(comp.hidden_fraction(tokens) * xfer_ns)
                # Place each gap at a whole ns; spread the rounding so the pass length is exact.
                acc = 0.0
                for _ in range(n_ar):
                    acc += gap_ns
                    g = int(acc)
                    acc -= g
                    build.idle_until(build.now + g - min(hidden_ns, g))
                    build.ramp(xfer_ns, ar_bytes)
                pass_bytes = n_ar * ar_bytes
            else:
                dur_s = (comp.decode_base_s + comp.decode_per_token_s * tokens) \
                    * _jitter(rng, comp.jitter)
                pass_bytes = n_ar * arch.allreduce_bytes(tokens) + eng.gather_bytes_per_token * tokens
                build.ramp(int(round(dur_s * 1e9)), pass_bytes)
            t1 = build.now
            passes.append(Pass(t0, t1, prefill, dec_tokens, pass_bytes))
            for a, i in zip(alloc, waiting, strict=True):
                prompt_left[i] -= a
                done_prompt[i] += a
                if prompt_left[i] == 0 and a > 0:
                    t_first[i] = t1
                    generated[i] = 1
                    if group.output_tokens == 1:
                        t_last[i] = t1
            for i in decoding:
                accepted = 1
                while accepted < per_decode and rng.random() < eng.spec_acceptance:
                    accepted += 1
                generated[i] = min(generated[i] + accepted, group.output_tokens)
                if generated[i] >= group.output_tokens:
                    t_last[i] = t1
        for i in range(k):
            n_req += 1
            requests.append(RequestTiming(
                request_id=f"{group.test}-r{group.round}-{i}", test=group.test, round=group.round,
                t_send_ns=t_send, t_first_ns=t_first[i], t_last_ns=t_last[i],
                prompt_tokens=group.prompt_tokens[i], output_tokens=group.output_tokens,
                prompt_bytes=group.prompt_tokens[i] * arch.bytes_per_token))
    duration = build.now + int(round(scenario.tail_s * 1e9))
    build.idle_until(duration)
    return Traffic(scenario=scenario, config=cfg, seed=seed,
                   t_ns=np.asarray(build.t, dtype=np.int64),
                   cum_bytes=np.asarray(build.b, dtype=np.float64),
                   requests=requests, passes=passes, duration_ns=duration,
                   series=_series(link))


def _series(link: LinkConfig) -> list[Series]:
    out = []
    for i, dev in enumerate(TWINS):
        share = 0.0 if link.tcp_fallback or i >= link.active_twins else 1.0 / link.active_twins
        for d in ("tx", "rx"):
            out.append(Series(f"{dev}/{d}", "infiniband", dev, d, share, 0.0))
    for i, nd in enumerate(NETDEVS):
        share = 1.0 if link.tcp_fallback and i == 0 else 0.0
        out.append(Series(f"{nd}/tx", "netdev", nd, "tx", share, link.netdev_idle_tx_bps))
        out.append(Series(f"{nd}/rx", "netdev", nd, "rx", share, link.netdev_idle_rx_bps))
    return out


# The name other modules started with; kept as an alias. ``__test__`` stops pytest from collecting
# it as a test when a test module imports it.
test_plan_scenario = plan_scenario
plan_scenario.__test__ = False
