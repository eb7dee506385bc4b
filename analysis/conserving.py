"""The conserving split of a node's traffic over overlapping requests (docs/method.md).

A request's prefill window [send, first token) and decode window [first token, last token)
hold every byte sent in them: with requests in flight together, the windows overlap and the
same bytes are counted once per request (the *inclusive* view, ``prefill_tx_bytes`` ...). This
module gives each byte to exactly one of: a request's prefill, a request's decode, or
idle/other, so the per-request bytes add up to what the counters saw.

The split follows how vLLM V1 batches (``Scheduler.schedule``): each engine step's all-reduce
bytes are proportional to the tokens scheduled in it, a prefill chunk's tokens plus one token
per decoding request. The trace does not show steps, so the tokens are placed from the log:

1. The capture span is cut at every send, first token and last token into segments (each
   holding one set of active requests); each segment's bytes come from ``series.integrate``.
2. A request decodes its ``output_tokens - 1`` tokens evenly over [first, last). It computes
   its ``prompt_tokens`` over [c, first), where c is its send or, first come first served, the
   latest first token of a request queued before it (sent earlier, or at the same instant with
   an earlier first token) if that came later than its send: before c it waits in the queue.
3. Those first guesses are made consistent by iterative proportional fitting: each request's
   prefill keeps its prompt tokens, and each segment's tokens are its bytes over one
   bytes-per-token for the capture (measured where requests prefill and none decodes, else
   over all tokens); each decoding request's tokens are its output tokens times one factor, what the
   bytes leave after the prompts (1 token per step, more with speculative decoding: no setting
   needed); the fitted tokens split each segment's bytes.
4. A segment with no request computing in it (or no token left to place) is idle/other.

Consequences: the bytes of every known segment are given out exactly (the per-request sum plus
idle/other equals the counters' total over the span, up to float rounding); a segment with one
active request phase gives all its bytes to it, so a request alone on the node (concurrency 1) gets
exactly its window bytes; a request touching a segment whose bytes are unknown (a counter reset, a
gap of readings) gets NaN (never a guess). Unknown is never zero: with any unknown segment the
total (and idle/other, when an idle segment is unknown) is NaN too, never the known part passed
off as the total; the known parts are kept beside them (``*_known``: per request its share of
what the counters read in its segments, the readable part of a segment whose bytes are unknown
included; idle/other's and the total's), and those add up the same way: the per-request
known parts plus idle/other's equal the known total. A prefill or decode reaching outside the
span split (the readings') is unknown too, its part inside its known part. Assumptions: one
model (one bytes-per-token), FCFS admission, the same tokens per step for every decoding
request, traffic not from requests (keep-alives, other jobs) shows up in whatever phase is
active when it is sent.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

#: Fitting rounds (each one row and one column scaling); the split converges in far fewer.
IPF_ROUNDS = 60

#: The first-guess weight of a prompt's tokens while it waits behind earlier ones (relative to
#: its computing time): small, but not 0, so the fit can move tokens there when the bytes say so.
QUEUED_WEIGHT = 1e-3


@dataclass
class Split:
    """The conserving split: per request (shape (n,)) ``prefill_tx``, ``prefill_rx``,
    ``decode_tx``, ``decode_rx`` (bytes, NaN where a touched segment's bytes are unknown or
    the prefill/decode reaches outside the span);
    ``idle_tx``/``idle_rx`` (bytes in the segments no request computes in; NaN when one of them
    is unknown, 0 when there is none), ``total_tx``/``total_rx`` (the counters over the span;
    NaN when any segment of that direction is unknown), ``unknown_segments`` (count of
    segments whose tx or rx bytes are unknown), ``unknown_ns`` (their time, ns) and
    ``segments`` (count).

    The known parts, which add up exactly (``*_known``, bytes): per request its share of what
    the counters read in its segments (``prefill_tx_known`` ..., equal to the headline where
    that is known), ``idle_tx_known``/``idle_rx_known`` and ``total_tx_known``/
    ``total_rx_known`` (what the counters read: a lower bound; NaN when nothing was read):
    sum(prefill_known + decode_known) + idle_known = total_known."""

    prefill_tx: np.ndarray
    prefill_rx: np.ndarray
    decode_tx: np.ndarray
    decode_rx: np.ndarray
    idle_tx: float
    idle_rx: float
    total_tx: float
    total_rx: float
    unknown_segments: int
    segments: int
    #: request-segment pairs beyond ``MAX_PAIRS``: the per-request split was not computed (its
    #: arrays NaN: unknown, never 0); the totals are still the counters'
    pairs_over_budget: int = 0
    unknown_ns: int = 0
    idle_tx_known: float = float("nan")
    idle_rx_known: float = float("nan")
    total_tx_known: float = float("nan")
    total_rx_known: float = float("nan")
    prefill_tx_known: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_rx_known: np.ndarray = field(default_factory=lambda: np.zeros(0))
    decode_tx_known: np.ndarray = field(default_factory=lambda: np.zeros(0))
    decode_rx_known: np.ndarray = field(default_factory=lambda: np.zeros(0))


def totals(tx: np.ndarray, rx: np.ndarray, idle: np.ndarray | None, dur: np.ndarray,
           ktx: np.ndarray | None = None, krx: np.ndarray | None = None) -> dict:
    """The ``Split`` fields of the span's totals from the segments' bytes ``tx``, ``rx`` (S,
    NaN where unknown), which of them are idle/other (``idle``, bool (S,); None: not known,
    idle NaN) and their durations ``dur`` (ns, (S,)). Unknown is never zero: a total over a
    segment whose bytes are unknown is NaN, its known part beside it (``*_known``): ``ktx``,
    ``krx`` (S,) each segment's known part (``known_parts``; default: its bytes where known)."""
    out: dict = {}
    kt, kr = np.isfinite(tx), np.isfinite(rx)
    ktx = tx if ktx is None else ktx
    krx = rx if krx is None else krx
    for d, v, k, kv in (("tx", tx, kt, ktx), ("rx", rx, kr, krx)):
        # the segments' known parts (NaN as 0 in the sum: the known part, never the total)
        known = float(np.nansum(kv)) if np.isfinite(kv).any() else float("nan")
        out[f"total_{d}"] = float(np.nansum(v)) if k.all() else float("nan")
        out[f"total_{d}_known"] = known
        if idle is None:
            out[f"idle_{d}"] = out[f"idle_{d}_known"] = float("nan")
        else:
            ki = k[idle]
            # nothing of the direction read: its idle part is as unknown as its total
            out[f"idle_{d}_known"] = float(np.nansum(kv[idle])) if known == known \
                else float("nan")
            out[f"idle_{d}"] = float(np.nansum(v[idle])) if ki.all() else float("nan")
    unk = ~(kt & kr)
    out["unknown_segments"] = int(unk.sum())
    out["unknown_ns"] = int(np.asarray(dur, np.int64)[unk].sum())
    return out


#: The most (request row, segment) pairs the split holds at once (each costs ~40 bytes across
#: its arrays): 2 M is ~80 MB. A capture with more is split in time blocks of at most this many
#: pairs (``_split_blocked``: 20,000 closed-loop requests at concurrency 64 in an hour make
#: ~2.6-3.8 M). Only a single segment with more requests in flight than this (no block can
#: hold it) leaves the per-request split unknown, said in a note.
MAX_PAIRS = 2_000_000

#: Pairs per time block when the capture holds more than ``MAX_PAIRS``: smaller blocks stay in
#: the processor's cache (the 60 fitting rounds run ~2x faster than on one 2 M block) and
#: each block's fit is independent; rows crossing a block edge are few (the requests in flight
#: there).
BLOCK_PAIRS = 250_000


def compute_starts(send: np.ndarray, first: np.ndarray) -> np.ndarray:
    """When each request starts computing its prefill (int64 ns, shape (n,)): its send, or the
    latest first token of a request queued before it when that is later (FCFS; see the module
    docstring). Queue order: by send, then by first token."""
    n = len(send)
    if not n:
        return send.copy()
    order = np.lexsort((first, send))
    f = first[order]
    s = send[order]
    c = s.copy()
    top = np.iinfo(np.int64).min  # the latest first token of the requests queued before
    below = top  # ... and the latest one strictly before the current tie of first tokens
    for j in range(n):
        fj = int(f[j])
        if j and fj == int(f[j - 1]) and top == fj:
            ref = below  # served in the same step as the one before: started with it
        else:
            ref = top
            below = top
        if ref < fj:
            c[j] = max(int(s[j]), ref)
        top = max(top, fj)
    out = np.empty(n, np.int64)
    out[order] = c
    return out


def bytes_per_token(tx, seg, row, w, n, known, S) -> float | None:
    """The capture's bytes per scheduled token (tx, per node): from the segments where requests
    prefill and none decodes (bytes / prompt tokens placed there; ``w`` without the queued
    first guesses), else from everything (known
    active bytes / all prompt and decode tokens, one decode token per output token); None
    without any."""
    dec = np.bincount(seg[row >= n], minlength=S) > 0
    pre_w = np.bincount(seg[row < n], w[row < n], S)
    pure = known & ~dec & (pre_w > 0)
    if pure.any() and np.sum(tx[pure]) > 0:
        return float(np.sum(tx[pure]) / np.sum(pre_w[pure]))
    col = np.bincount(seg, w, S)
    active = known & (col > 0)
    tot = float(np.sum(col[active]))
    return float(np.sum(tx[active])) / tot if tot > 0 and np.sum(tx[active]) > 0 else None


def known_parts(v: np.ndarray, read: np.ndarray | None) -> np.ndarray:
    """Each segment's known part (S,): its bytes where known, else what its counters read in
    it (``read``: ``windows.range_frame``'s known part, NaN where nothing was read; None: NaN,
    nothing known of it). NaN stays NaN, so "nothing known" is never a known 0."""
    if read is None:
        return np.asarray(v, dtype=float)
    return np.where(np.isfinite(v), v, np.asarray(read, dtype=float))


def split(send, first, last, prompt_tokens, output_tokens, integrate, t_lo: int, t_hi: int,
          *, rounds: int = IPF_ROUNDS, dry: bool = False) -> Split:
    """Split the traffic of [t_lo, t_hi) over requests (module docstring).

    ``send``, ``first``, ``last``: int64 ns arrays (n,) on the capture's clock;
    ``prompt_tokens``, ``output_tokens``: float arrays (n,), NaN where unknown (the median of the
    known ones is used); ``integrate(a, b)``: bytes in ranges [a[i], b[i]) as a (tx, rx) pair of
    float arrays (NaN where unknown; the attribution passes ``series.integrate`` with
    ``allow_partial``), or (tx, rx, tx read, rx read) with what the counters read in each
    range where its bytes are unknown (``windows.range_frame``'s known part): the known parts
    then keep a segment's readable bytes (one twin unreadable for a second leaves the other's
    and its own readable part known). A request's prefill or decode reaching outside
    [t_lo, t_hi) (the readings' span) is unknown (NaN), its part inside kept as its known part.
    Returns a ``Split``. ``dry``: only ask ``integrate`` the ranges (an
    engine's recording run, ``ranges.RangeQueries``) and return a Split of NaN, unfitted.
    """
    send = np.asarray(send, np.int64)
    first = np.asarray(first, np.int64)
    last = np.asarray(last, np.int64)
    n = len(send)
    edges = np.unique(np.clip(np.concatenate([[t_lo, t_hi], send, first, last]), t_lo, t_hi))
    a, b = edges[:-1], edges[1:]
    got = integrate(a, b)
    tx = np.asarray(got[0], dtype=float)
    rx = np.asarray(got[1], dtype=float)
    ktx = known_parts(tx, got[2] if len(got) > 2 else None)
    krx = known_parts(rx, got[3] if len(got) > 2 else None)
    # a prefill [send, first) or decode [first, last) reaching outside the readings: unknown
    outside = np.concatenate([(send < t_lo) | (first > t_hi), (first < t_lo) | (last > t_hi)])
    S = len(a)
    if dry:
        nan = np.full(n, np.nan)
        return Split(prefill_tx=nan, prefill_rx=nan, decode_tx=nan, decode_rx=nan,
                     idle_tx=float("nan"), idle_rx=float("nan"), total_tx=float("nan"),
                     total_rx=float("nan"), unknown_segments=S, segments=S,
                     unknown_ns=int(np.sum(b - a)), prefill_tx_known=nan, prefill_rx_known=nan, decode_tx_known=nan,
                     decode_rx_known=nan)

    def tokens(v, minus=0.0):
        v = np.asarray(v, dtype=float) - minus
        known = np.isfinite(v)
        fill = float(np.median(v[known])) if known.any() else 1.0
        return np.clip(np.where(known, v, fill), 0.0, None)

    c = np.clip(compute_starts(send, first), t_lo, t_hi)
    rows_a = np.concatenate([np.clip(send, t_lo, t_hi), np.clip(first, t_lo, t_hi)])
    rows_b = np.concatenate([np.clip(first, t_lo, t_hi), np.clip(last, t_lo, t_hi)])
    # where each row's tokens are first placed: prefill over [c, first), decode over [first, last)
    dens_a = np.concatenate([c, rows_a[n:]])
    gen = tokens(output_tokens, 1.0)
    target = np.concatenate([tokens(prompt_tokens), gen])
    k0 = np.searchsorted(edges, rows_a)
    k1 = np.searchsorted(edges, rows_b)
    length = np.maximum(k1 - k0, 0)
    pairs = int(length.sum())
    if pairs > MAX_PAIRS:
        cover = _cover(k0, k1, length, S)
        if S and int(cover.max()) <= MAX_PAIRS:
            return _split_blocked(n, a, b, tx, rx, k0, k1, length, cover, dens_a, rows_b,
                                  target, gen, rounds, ktx, krx, outside)
        nan = np.full(n, np.nan)
        return Split(prefill_tx=nan, prefill_rx=nan.copy(), decode_tx=nan.copy(),
                     decode_rx=nan.copy(), segments=S, pairs_over_budget=pairs,
                     prefill_tx_known=nan.copy(), prefill_rx_known=nan.copy(),
                     decode_tx_known=nan.copy(), decode_rx_known=nan.copy(),
                     **totals(tx, rx, None, b - a, ktx, krx))
    row = np.repeat(np.arange(2 * n), length)
    starts = np.repeat(k0, length)
    pos = np.arange(len(row)) - np.repeat(np.cumsum(length) - length, length)
    seg = starts + pos
    dur = (b - a).astype(float)
    dens_len = (rows_b - dens_a).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        dens = np.where(dens_len > 0, target / dens_len, 0.0)
    # a queued prefill (before c) gets a small share only: FCFS, but a step's token budget can
    # start the next prompt's chunk before the previous one's first token
    early = a[seg] < dens_a[row]
    w = dens[row] * dur[seg] * np.where(early, QUEUED_WEIGHT, 1.0)
    known = np.isfinite(tx)
    bpt = bytes_per_token(tx, seg, row, np.where(early, 0.0, w), n, known, S)
    if bpt and gen.sum() > 0:
        # scheduled tokens per generated one (1, or more with speculative decoding): what the
        # bytes leave after the prompts, so the rows' and the segments' tokens agree
        col0 = np.bincount(seg, w, S)
        t_all = float(np.sum(tx[known & (col0 > 0)])) / bpt
        k = max((t_all - float(target[:n].sum())) / float(gen.sum()), 1e-6)
        target = np.concatenate([target[:n], k * gen])
        w = np.where(row >= n, w * k, w)
    seg_tok = np.where(known, tx, np.nan) / bpt if bpt else None
    for _ in range(rounds if seg_tok is not None and len(w) else 0):
        col = np.bincount(seg, w, S)
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.where((col > 0) & np.isfinite(seg_tok), seg_tok / col, 1.0)
        w = w * sc[seg]
        rs = np.bincount(row, w, 2 * n)
        with np.errstate(divide="ignore", invalid="ignore"):
            sr = np.where(rs > 0, target / rs, 1.0)
        w = w * sr[row]
    col = np.bincount(seg, w, S)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(col[seg] > 0, w / col[seg], 0.0)
    out, kn = {}, {}
    for name, v, kv in (("tx", tx, ktx), ("rx", rx, krx)):
        # a request touching an unknown segment is unknown (a NaN in the sum says so); its
        # segments' known parts are kept apart (the known parts add up)
        vs = v[seg]
        out[name] = np.bincount(row, share * vs, 2 * n) if len(row) else np.zeros(2 * n)
        out[name][outside] = np.nan
        ks = kv[seg]
        kn[name] = np.bincount(row, share * np.where(np.isfinite(ks), ks, 0.0), 2 * n) \
            if len(row) else np.zeros(2 * n)
    return Split(prefill_tx=out["tx"][:n], prefill_rx=out["rx"][:n],
                 decode_tx=out["tx"][n:], decode_rx=out["rx"][n:], segments=S,
                 prefill_tx_known=kn["tx"][:n], prefill_rx_known=kn["rx"][:n],
                 decode_tx_known=kn["tx"][n:], decode_rx_known=kn["rx"][n:],
                 **totals(tx, rx, col <= 0, b - a, ktx, krx))


def _cover(k0, k1, length, S) -> np.ndarray:
    """Per segment (S,): how many rows (prefills and decodes) hold it."""
    on = length > 0
    d = np.bincount(k0[on], minlength=S + 1)[:S + 1] - np.bincount(k1[on], minlength=S + 1)[:S + 1]
    return np.cumsum(d)[:S]


def _blocks(cover, size: int) -> list[tuple[int, int]]:
    """Consecutive segment ranges [s0, s1) each holding at most ``size`` pairs (a segment alone
    may hold up to ``MAX_PAIRS``)."""
    cum = np.cumsum(cover)
    out, s0, S = [], 0, len(cover)
    while s0 < S:
        base = int(cum[s0 - 1]) if s0 else 0
        s1 = max(int(np.searchsorted(cum, base + size, side="right")), s0 + 1)
        out.append((s0, min(s1, S)))
        s0 = s1
    return out


def _block_pairs(k0, k1, length, s0: int, s1: int):
    """The (global row, segment) pairs of the segments [s0, s1): row ids of the block's rows
    (ascending), local row index per pair and segment per pair."""
    ids = np.flatnonzero((length > 0) & (k0 < s1) & (k1 > s0))
    lo = np.maximum(k0[ids], s0)
    ln = np.minimum(k1[ids], s1) - lo
    loc = np.repeat(np.arange(len(ids)), ln)
    seg = np.repeat(lo, ln) + np.arange(len(loc)) - np.repeat(np.cumsum(ln) - ln, ln)
    return ids, loc, seg, ln


def _split_blocked(n, a, b, tx, rx, k0, k1, length, cover, dens_a, rows_b, target, gen,
                   rounds: int, ktx: np.ndarray, krx: np.ndarray, outside: np.ndarray
                   ) -> Split:
    """``split`` for a capture with more than ``MAX_PAIRS`` request-segment pairs, in time blocks
    of at most ``BLOCK_PAIRS`` (so memory stays bounded whatever the capture's length).

    The capture-wide quantities are computed first, block by block: the bytes per token and the
    scheduled tokens per generated token (as ``split``), and each row's first-guess tokens.
    Each block is then fitted on its own (``_fit``: the same proportional fitting, the same
    rounds) over a halo: the whole extent of every row holding one of its segments, so a row
    crossing the block's edge is fitted whole, and only the block's own segments are given out
    (rows reaching past the halo keep the share of their tokens their first guess puts in it; a
    halo that would pass ``MAX_PAIRS`` is dropped). Every known segment's bytes are still given out exactly (to
    the rows computing in it, else idle/other), and unknown stays unknown, as in ``split``."""
    S = len(a)
    dur = (b - a).astype(float)
    dens_len = (rows_b - dens_a).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        dens = np.where(dens_len > 0, target / dens_len, 0.0)
    blocks = _blocks(cover, min(BLOCK_PAIRS, MAX_PAIRS))
    known = np.isfinite(tx)

    def first_guess(ids, loc, seg):
        early = np.take(a, seg) < np.take(dens_a, ids)[loc]
        w = np.take(dens, ids)[loc] * np.take(dur, seg) * np.where(early, QUEUED_WEIGHT, 1.0)
        return w, early

    # pass 1: per segment what bytes_per_token needs, per row its first-guess tokens
    dec = np.zeros(S, bool)
    pre_w = np.zeros(S)
    col0 = np.zeros(S)
    rs0 = np.zeros(2 * n)
    for s0, s1 in blocks:
        ids, loc, seg, _ = _block_pairs(k0, k1, length, s0, s1)
        w, early = first_guess(ids, loc, seg)
        is_dec = ids[loc] >= n
        dec[s0:s1] = np.bincount(seg[is_dec] - s0, minlength=s1 - s0) > 0
        pre = ~is_dec
        pre_w[s0:s1] = np.bincount(seg[pre] - s0, np.where(early, 0.0, w)[pre], s1 - s0)
        col0[s0:s1] = np.bincount(seg - s0, w, s1 - s0)
        rs0 += np.bincount(ids[loc], w, 2 * n)
    bpt = _bpt(tx, dec, pre_w, col0, known)
    kscale = 1.0
    if bpt and gen.sum() > 0:
        t_all = float(np.sum(tx[known & (col0 > 0)])) / bpt
        kscale = max((t_all - float(target[:n].sum())) / float(gen.sum()), 1e-6)
        target = np.concatenate([target[:n], kscale * gen])
        rs0[n:] *= kscale
    seg_tok = np.where(known, tx, np.nan) / bpt if bpt else None
    # pass 2: each block fitted with a halo: the whole extent of every row holding one of its
    # segments (so a row crossing the block's edge is fitted whole), its own segments kept
    out_tx, out_rx = np.zeros(2 * n), np.zeros(2 * n)
    kn_tx, kn_rx = np.zeros(2 * n), np.zeros(2 * n)
    ktx0, krx0 = np.where(np.isfinite(ktx), ktx, 0.0), np.where(np.isfinite(krx), krx, 0.0)
    idle = np.zeros(S, bool)
    on = length > 0
    for s0, s1 in blocks:
        inside = on & (k0 < s1) & (k1 > s0)
        e0 = min(int(k0[inside].min()), s0) if inside.any() else s0
        e1 = max(int(k1[inside].max()), s1) if inside.any() else s1
        if int(cover[e0:e1].sum()) > MAX_PAIRS:
            e0, e1 = s0, s1  # no room for the halo: the edge rows by their first guess
        ids, loc, seg, ln = _block_pairs(k0, k1, length, e0, e1)
        w, _ = first_guess(ids, loc, seg)
        w = np.where(ids[loc] >= n, w * kscale, w)
        m, L = len(ids), e1 - e0
        ls = seg - e0
        with np.errstate(divide="ignore", invalid="ignore"):
            tgt = np.where(rs0[ids] > 0, target[ids] * np.bincount(loc, w, m) / rs0[ids], 0.0)
        stok = seg_tok[e0:e1] if seg_tok is not None else None
        if stok is not None and m:
            w = _fit(loc, ls, ln, np.maximum(k0[ids], e0) - e0, w, stok, tgt, L, rounds)
        col = np.bincount(ls, w, L)
        core = (seg >= s0) & (seg < s1)
        loc, seg, w, ls = loc[core], seg[core], w[core], ls[core]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(np.take(col, ls) > 0, w / np.take(col, ls), 0.0)
        out_tx[ids] += np.bincount(loc, share * np.take(tx, seg), m)
        out_rx[ids] += np.bincount(loc, share * np.take(rx, seg), m)
        kn_tx[ids] += np.bincount(loc, share * np.take(ktx0, seg), m)
        kn_rx[ids] += np.bincount(loc, share * np.take(krx0, seg), m)
        idle[s0:s1] = col[s0 - e0:s1 - e0] <= 0
    idle |= cover == 0
    out_tx[outside] = np.nan  # reaching outside the readings: unknown (``split``)
    out_rx[outside] = np.nan
    return Split(prefill_tx=out_tx[:n], prefill_rx=out_rx[:n], decode_tx=out_tx[n:],
                 decode_rx=out_rx[n:], segments=S,
                 prefill_tx_known=kn_tx[:n], prefill_rx_known=kn_rx[:n],
                 decode_tx_known=kn_tx[n:], decode_rx_known=kn_rx[n:],
                 **totals(tx, rx, idle, b - a, ktx, krx))


def _fit(loc, ls, ln, lo, w, stok, tgt, L: int, rounds: int) -> np.ndarray:
    """The proportional fitting of one block (``_split_blocked``): ``rounds`` times, the
    segments' tokens scaled to ``stok`` and then the rows' to ``tgt`` (where the sums are > 0).
    ``loc``, ``ls``: row and segment (0..L-1) of each pair, row by row, each row's pairs its
    consecutive segments from ``lo`` (``ln`` of them); ``w``: the first guesses. Returns the
    fitted tokens per pair. On lanes (``_fit_lanes``) when they hold the block in at most twice
    the pairs, else pair by pair (``_fit_pairs``)."""
    hi = lo + ln
    lane, k = _lanes(lo, hi)
    if k * L <= 2 * len(w):
        return _fit_lanes(loc, ls, lo, hi, lane, k, w, stok, tgt, L, rounds)
    return _fit_pairs(loc, ls, ln, w, stok, tgt, L, rounds)


def _fit_pairs(loc, ls, ln, w, stok, tgt, L: int, rounds: int) -> np.ndarray:
    """``_fit`` pair by pair: segment sums by bincount, row sums by reduceat."""
    st = np.cumsum(ln) - ln  # the pairs run row by row, each row >= 1 pair
    for _ in range(rounds):
        col = np.bincount(ls, w, L)
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.where((col > 0) & np.isfinite(stok), stok / col, 1.0)
        w = w * np.take(sc, ls)
        rs = np.add.reduceat(w, st)
        with np.errstate(divide="ignore", invalid="ignore"):
            sr = np.where(rs > 0, tgt / rs, 1.0)
        w = w * np.repeat(sr, ln)
    return w


def _lanes(lo, hi) -> tuple[np.ndarray, int]:
    """Rows [lo, hi) put on lanes none of which holds two rows at once (rows taken by start,
    each on the lane freed earliest if free by then, else a new one: as many lanes as rows
    hold one segment at most). Returns (lane per row, lanes)."""
    lane = np.empty(len(lo), np.int64)
    free: list[tuple[int, int]] = []  # (end, lane), a heap
    k = 0
    order = np.lexsort((hi, lo))
    for r, a, b in zip(order.tolist(), lo[order].tolist(), hi[order].tolist(), strict=True):
        if free and free[0][0] <= a:
            j = free[0][1]
            heapq.heapreplace(free, (b, j))
        else:
            j, k = k, k + 1
            heapq.heappush(free, (b, j))
        lane[r] = j
    return lane, k


def _fit_lanes(loc, ls, lo, hi, lane, k: int, w, stok, tgt, L: int, rounds: int) -> np.ndarray:
    """``_fit`` on a dense (lanes, segments) array, each row a run of its lane (0 between
    rows): a segment's sum is a column's (no scatter), a row's a run's (reduceat, the same
    values in the same order as pair by pair), the scalings multiply in place. The segment
    sums add the rows in lane order instead of row order: the fit differs from
    ``_fit_pairs`` by rounding only (~1e-14 relative per pair, 1e-15 per row), at less than
    half the cost."""
    slot = lane[loc] * L + ls
    dense = np.zeros(k * L)
    dense[slot] = w
    rows = dense.reshape(k, L)
    start = lane * L + lo
    cuts = np.unique(np.concatenate([np.arange(k) * L, start, lane * L + hi]))
    cuts = cuts[cuts < k * L]  # runs: every row, and the gaps between them
    at = np.searchsorted(cuts, start)
    run = np.diff(np.append(cuts, k * L))
    fac = np.ones(len(cuts))
    fin = np.isfinite(stok)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(rounds):
            col = rows.sum(axis=0)
            rows *= np.where((col > 0) & fin, stok / col, 1.0)
            rs = np.add.reduceat(dense, cuts)[at]
            fac[at] = np.where(rs > 0, tgt / rs, 1.0)
            dense *= np.repeat(fac, run)
    return dense[slot]

def _bpt(tx, dec, pre_w, col, known) -> float | None:
    """``bytes_per_token`` from its per-segment sums: ``dec`` (a decode row holds the segment),
    ``pre_w`` (prefill first-guess tokens, queued ones left out), ``col`` (all first-guess
    tokens)."""
    pure = known & ~dec & (pre_w > 0)
    if pure.any() and np.sum(tx[pure]) > 0:
        return float(np.sum(tx[pure]) / np.sum(pre_w[pure]))
    active = known & (col > 0)
    tot = float(np.sum(col[active]))
    return float(np.sum(tx[active])) / tot if tot > 0 and np.sum(tx[active]) > 0 else None


def window_sum(out, read=None) -> dict[str, float]:
    """The window view's tx bytes summed over requests (``window_sum_tx_bytes``): NaN when a
    request's window bytes are unknown, never the known ones passed off as the sum; the known
    part is ``window_sum_tx_known_bytes`` (a lower bound): ``read``, the windows' known parts
    (arrays of (n,) bytes per window kind, ``known_parts``: a window whose bytes are unknown
    counts what its counters read), else the known windows' bytes."""
    v = [out[c].to_numpy(dtype=float, na_value=np.nan)
         for c in ("prefill_tx_bytes", "decode_tx_bytes")]
    whole = float(sum(x[np.isfinite(x)].sum() for x in v))
    known = whole if read is None else float(sum(np.nansum(x) for x in read))
    return {"window_sum_tx_bytes": whole if all(np.isfinite(x).all() for x in v)
            else float("nan"), "window_sum_tx_known_bytes": known}


#: Window bytes summing above the counters' total by more than this share: requests overlap.
OVERLAP_NOTE_RATIO = 1.01


def split_notes(summary: dict) -> list[str]:
    """The note that tells the two views apart when requests overlap (window bytes counted once
    per request add up to more than the counters saw)."""
    over = summary.get("split_pairs_over_budget") or 0
    if over:
        return [f"requests overlap too densely for the conserving split ({over:,} request-"
                f"segment pairs, more than {MAX_PAIRS:,} requests in flight at one instant: no "
                "time block holds them): the *_split_bytes columns are unknown (NaN); fewer "
                "requests at once gives them"]
    # with unknown bytes the readable ones are compared (the headline totals are NaN)
    tot = summary.get("split_total_tx_known_bytes", summary.get("split_total_tx_bytes"))
    win = summary.get("window_sum_tx_known_bytes", summary.get("window_sum_tx_bytes"))
    idle = summary.get("split_idle_tx_known_bytes", summary.get("split_idle_tx_bytes"))
    if not tot or not np.isfinite(tot) or win is None or win <= OVERLAP_NOTE_RATIO * tot:
        return []
    part = "" if np.isfinite(summary.get("split_total_tx_bytes", np.nan)) else " readable"
    return [f"requests overlap: the window columns (prefill_tx_bytes, decode_tx_bytes) count "
            f"shared traffic once per request and add up to {win / 1e6:,.0f} MB against "
            f"{tot / 1e6:,.0f} MB{part} the counters saw ({win / tot:.1f}x); the split columns "
            "(*_split_bytes) give each byte to one request's prefill or decode or to idle/other "
            f"({idle / 1e6:,.0f} MB), adding up to the counters"]
