"""Split a node's RDMA traffic per request into prefill and decode, per round and per test.

Requests and counter readings share CLOCK_MONOTONIC (``requestlogs.align``), so each request's
prefill window [send, first token] and decode window [first token, last token] select their bytes
exactly (method.md, "Metrics, as the study defines them"). Bytes inside a window come from
``series.integrate``: each counter interval contributes in proportion to its overlap with the
window. Metric definitions: ``rdmascope.analysis.metrics.DEFINITIONS``.

Rounds: requests labelled ``test``/``round`` are grouped by those labels; otherwise requests sent
within ``arrival_window_s`` of a round's first send form one round ("arriving together"), and
the test label becomes "<n>x<prompt tokens>" (e.g. "4x8192") so two runs of the same plan match;
without prompt tokens each such group is a test of its own, "round 1", "round 2", ... (rounds of
different prompt lengths must not be averaged together).

Warm-up (method.md, "The test plan": one warm-up round per test, not counted): with
``warmup_rounds=N`` the first N rounds of each test, by round number (the emulator numbers the
warm-up 0; unlabelled rounds are numbered in time order), are marked ``warmup`` in the
per-request and per-round tables, which still list them, and are left out of the per-test means
and min-max spreads (``tests``), of ``compare``, and of the summary's TTFT, decode-speed and ITL
figures. A test with no round left after its warm-up is not in ``tests`` (a note says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import metrics as M
from . import series
from .conserving import known_parts, split, split_notes, window_sum  # split_notes's home was here
from .ranges import (  # noqa: F401 (RangeIndex, RangeWindowStats: their home was here)
    DEFAULT_CAPACITY_GBPS,
    RangeIndex,
    RangeQueries,
    RangeWindowStats,
    capacity_gbps,
)
from .requestlogs import align, apply_fixes
from .stream import memory_capture

PEAK_WIDTH_NS = 1_000_000
STATES = ("prefill", "decode-only", "idle")


@dataclass
class Attribution:
    """The result of ``attribute``: DataFrames per request, per window and series, per round.

    - ``requests``: one row per successful request (see ``attribute`` for columns).
    - ``by_series``: long form, one row per (request, window, series): ``request_id, window``
      ("prefill" | "decode"), ``series`` ("<device>/<tx|rx>" or "link:<dev>+<dev>/<dir>"),
      ``bytes``, ``mean_gbps``.
    - ``rounds``: one row per (test, round), ``warmup`` (bool) marking warm-up rounds;
      ``tests``: per test, means with min/max over the measured (non-warm-up) rounds.
    - ``timeline``: the capture cut into segments ``t0_ns, t1_ns, state, tx_bytes, rx_bytes``;
      ``time_classes``: per state ``seconds_s, share, tx_bytes, rx_bytes`` (bytes),
      ``mean_tx_gbps`` (Gb/s), ``tx_known_bytes, rx_known_bytes`` (bytes) and ``unknown_s``
      (seconds): tx/rx_bytes and the mean are NaN (unknown, never a smaller number) when any
      span of the state has unknown bytes; the known bytes (a lower bound) and the unknown span
      (tx or rx unknown) are stated beside them.
    - ``capture_id``: the manifest's ``capture_id`` (``compare`` refuses the same capture twice).
    - ``summary``: counts, pooled ITL, output throughput, per test the mean TTFT
      (``ttft_by_test_s``) and time to the last first token (``..._by_test_s``); ``mean_ttft_s``
      only when the measured requests are of one test (None otherwise: a mean across tests of
      different prompt lengths means nothing); ``notes``: alignment and caveats.
    """

    capture_path: str
    log_path: str
    log_format: str
    alignment: dict[str, Any]
    requests: pd.DataFrame
    by_series: pd.DataFrame
    rounds: pd.DataFrame
    tests: pd.DataFrame
    timeline: pd.DataFrame
    time_classes: pd.DataFrame
    summary: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    warmup_rounds: int = 0
    capture_id: str | None = None
    failed: pd.DataFrame = field(default_factory=pd.DataFrame)
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: per-cell statistics (``cellstats.cell_stats``: per test and per round, warm-up left out)
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    percentiles: tuple[float, ...] = ()


# ------------------------------------------------------------------------------------------------
# Grouping into rounds
# ------------------------------------------------------------------------------------------------


def assign_rounds(requests: pd.DataFrame, arrival_window_s: float = 1.0) -> pd.DataFrame:
    """Return ``requests`` with ``test`` and ``round`` filled for every row.

    Rows that carry both labels keep them. Others are clustered by arrival: sorted by send, a new
    round starts when a send is more than ``arrival_window_s`` after the current round's first
    send (within the same test label, if any). Unlabelled rounds get the test label
    "<n>x<prompt tokens>" (or "<n> requests" with mixed prompts) and rounds are numbered 1.. per
    test in time order. A group with any prompt tokens unknown (e.g. genai-perf without usage
    records) cannot be matched to its test by prompt length: it becomes a test of its own,
    "round <k>" (k = the group's place in time among the unlabelled groups), and
    ``attrs["notes"]`` says why. Shapes: same rows, same index order.
    """
    df = requests.copy()
    labelled = df["test"].notna() & df["round"].notna()
    if labelled.all():
        df["round"] = df["round"].astype("int64")
        return df
    win = int(round(arrival_window_s * 1e9))
    # positions of the unlabelled rows in send order; one pass groups them (a group's first
    # send opens a window of ``win``; a change of test label closes it)
    pos = np.flatnonzero(~labelled.to_numpy())
    pos = pos[np.argsort(df["t_send_ns"].to_numpy(np.int64)[pos], kind="stable")]
    sends = df["t_send_ns"].to_numpy(np.int64)[pos].tolist()
    labels_in = df["test"].to_numpy(object)[pos].tolist()
    starts: list[int] = []  # index into pos of each group's first row
    cur_start = cur_test = None
    for k, (t, te) in enumerate(zip(sends, labels_in, strict=True)):
        if not starts or t - cur_start > win or te != cur_test:
            starts.append(k)
            cur_start, cur_test = t, te
    bounds = np.append(starts, len(pos))
    prompt = df["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)[pos]
    any_na = np.add.reduceat(np.isnan(prompt), starts) > 0
    p_min = np.fmin.reduceat(prompt, starts)
    p_max = np.fmax.reduceat(prompt, starts)
    tests = df["test"].astype(object).copy()
    rounds = df["round"].to_numpy(dtype=float, na_value=np.nan)
    test_out = tests.to_numpy(object).copy()
    counters: dict[str, int] = {}
    unknown: list[str] = []
    for gi in range(len(starts)):
        g0, g1 = int(bounds[gi]), int(bounds[gi + 1])
        label = labels_in[g0]
        if label is None or (isinstance(label, float) and np.isnan(label)):
            if any_na[gi]:
                # without prompt tokens rounds of different prompt lengths (the demo's P1 and
                # P2) cannot be told apart: never merge them into one test
                label = f"round {gi + 1}"
                unknown.append(label)
            else:
                n = g1 - g0
                label = (f"{n}x{int(p_min[gi])}" if p_min[gi] == p_max[gi]
                         else f"{n} requests")
        counters[label] = counters.get(label, 0) + 1
        rows = pos[g0:g1]
        test_out[rows] = label
        rounds[rows] = counters[label]
    df["test"] = pd.Series(test_out, index=df.index, dtype=object)
    df["round"] = rounds.astype("int64")
    if unknown:
        df.attrs["notes"] = [
            f"prompt tokens unknown (no token counts in the log): each group of requests sent "
            f"within {arrival_window_s:g} s is its own test ({', '.join(unknown[:3])}"
            f"{', ...' if len(unknown) > 3 else ''}), since rounds of different prompt lengths "
            "cannot be told apart; per-test means are over one round each. Label the log's "
            "requests with test/round (or give token counts) to group the rounds of one test"]
    return df


# ------------------------------------------------------------------------------------------------
# Helpers on the 1 ms series
# ------------------------------------------------------------------------------------------------


def _rate_gbps(nbytes, t0, t1) -> np.ndarray:
    dur = (np.asarray(t1, dtype=np.int64) - np.asarray(t0, dtype=np.int64)).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dur > 0, np.asarray(nbytes, dtype=float) * 8.0 / dur, np.nan)


def _dir_cols(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    z = np.full(len(df), np.nan)
    tx = df["tx"].to_numpy(dtype=float) if "tx" in df.columns else z
    rx = df["rx"].to_numpy(dtype=float) if "rx" in df.columns else z
    return tx, rx


# ------------------------------------------------------------------------------------------------
# Time classification
# ------------------------------------------------------------------------------------------------


def classify_time(requests: pd.DataFrame, t_start_ns: int, t_end_ns: int) -> pd.DataFrame:
    """Cut [t_start_ns, t_end_ns) into segments classified prefill / decode-only / idle.

    An instant is "prefill" if any request's [send, first token) covers it, else "decode-only"
    if any [first token, last token) covers it, else "idle". Adjacent segments of one state are
    merged. Returns ``t0_ns, t1_ns, state`` sorted by time.
    """
    send = requests["t_send_ns"].to_numpy(dtype=np.int64)
    first = requests["t_first_ns"].to_numpy(dtype=np.int64)
    last = requests["t_last_ns"].to_numpy(dtype=np.int64)
    edges = np.unique(np.clip(np.concatenate([[t_start_ns, t_end_ns], send, first, last]),
                              t_start_ns, t_end_ns))
    if len(edges) < 2:
        return pd.DataFrame({"t0_ns": [], "t1_ns": [], "state": []})
    a, b = edges[:-1], edges[1:]
    mid = a + (b - a) // 2
    # counts of open windows at each segment's midpoint, via sorted starts/ends
    def open_count(starts, ends):
        return (np.searchsorted(np.sort(starts), mid, "right")
                - np.searchsorted(np.sort(ends), mid, "right"))
    pre = open_count(send, first) > 0
    dec = open_count(first, last) > 0
    state = np.where(pre, "prefill", np.where(dec, "decode-only", "idle"))
    # runs of one state merged (the segments are contiguous: each starts where the last ends)
    first = np.flatnonzero(np.concatenate([[True], state[1:] != state[:-1]]))
    end = np.append(first[1:] - 1, len(a) - 1)
    return pd.DataFrame({"t0_ns": a[first].astype(np.int64), "t1_ns": b[end].astype(np.int64),
                         "state": state[first].tolist()})


# ------------------------------------------------------------------------------------------------
# The attribution
# ------------------------------------------------------------------------------------------------


def warmup_mask(rounds: pd.DataFrame, warmup_rounds: int,
                marked: set | None = None) -> np.ndarray:
    """Return a bool array over ``rounds`` rows: True for the first ``warmup_rounds`` of each test.

    "First" by round number within the test (ties cannot occur: one row per (test, round)).
    ``rounds`` needs ``test`` and ``round`` columns. ``marked``: (test, round) pairs the log
    itself marks as warm-up (column ``warmup``, e.g. native ``"phase": "warmup"``): always
    warm-up, and counted toward ``warmup_rounds`` (the first N rounds in all). Raises
    ``ValueError`` on a negative count.
    """
    n = int(warmup_rounds)
    if n < 0:
        raise ValueError(f"warmup_rounds must be 0 or more, got {warmup_rounds!r}")
    pre = np.array([(t, r) in marked for t, r in zip(rounds["test"], rounds["round"],
                                                        strict=True)], bool) \
        if marked and len(rounds) else np.zeros(len(rounds), bool)
    if not len(rounds) or n == 0:
        return pre
    rest = rounds[~pre]
    rank = rest.groupby("test", sort=False)["round"].rank(method="first").to_numpy()
    had = pd.Series(rounds["test"].to_numpy()[pre]).value_counts()
    left = np.array([n - int(had.get(t, 0)) for t in rest["test"]])
    out = pre.copy()
    out[~pre] = rank <= left
    return out


def _attribute_in_one_pass(capture, log, intervals, run, kw: dict) -> Attribution:
    """``attribute`` through the engine: a dry run records every range the attribution asks
    about (``ranges.RangeQueries``), one pass answers them all, and the real run reads the
    answers. The pass is over the capture's segments (a ``stream.CaptureInfo``: bounded
    memory, no reading and no interval held; ``run``: the caller's own pass answers them, the
    report's ``capture_pass``) or over the intervals in memory as one segment
    (``stream.memory_capture``: a loaded ``Capture`` or ``intervals`` given)."""
    if intervals is None and not hasattr(capture, "readings"):
        src, source = capture, "infiniband"
    else:
        iv = intervals if intervals is not None else series.byte_intervals(capture)
        if not len(iv):
            raise ValueError(f"{capture.path}: no RDMA data counter intervals to attribute")
        src, source = memory_capture(iv, "direction"), None
        run = None
    origin0 = int(capture.t_start_ns) if kw["origin_ns"] is None else int(kw["origin_ns"])
    rq = RangeQueries(src, origin_ns=origin0, width_ns=kw["peak_width_ns"],
                      capacity_gbps=kw["link_capacity_gbps"] or capacity_gbps(capture),
                      source=source)
    _attribute_from(capture, log, rq, **kw)  # the dry run: the ranges asked are recorded
    if run is None:
        rq.run()
    else:
        run(rq)
    return _attribute_from(capture, log, rq, **kw)


def attribute(capture, log, *, intervals: pd.DataFrame | None = None,
              arrival_window_s: float = 1.0, link_capacity_gbps: float | None = None,
              peak_width_ns: int = PEAK_WIDTH_NS, warmup_rounds: int = 0,
              origin_ns: int | None = None, use_corrected: bool = False,
              percentiles=None, _run=None) -> Attribution:
    """Attribute a capture's traffic to the requests of an aligned request log.

    ``capture``: a ``load.Capture``, or a ``stream.CaptureInfo`` (``stream.open_capture``),
    which is then read in one pass over its segments with the same result in bounded memory
    (``ranges.RangeQueries``: the bytes of every window and the 1 ms peaks and bursts inside
    them; memory grows with the requests, not the readings); ``log``: a ``RequestLog`` already placed on the capture's
    clock by ``requestlogs.align`` (a log still on its own clock is aligned here with defaults).
    ``intervals``: ``series.byte_intervals(capture)`` if already computed.
    ``link_capacity_gbps``: the capacity bursts are detected against (``bursts.detect_bursts``:
    enter at 25 %, leave at 10 %); default the port rate in the manifest (``capacity_gbps``).
    ``warmup_rounds``: the first N rounds of each test are warm-up (see the module docstring):
    listed with ``warmup`` True in ``requests`` and ``rounds``, left out of ``tests``.
    ``origin_ns``: the 1 ms grid's origin (int64 ns), default the capture start.
    ``percentiles``: those of the per-cell statistics (``cells``; default
    ``cellstats.DEFAULT_PERCENTILES`` = 50, 90, 95, 99).

    ``requests`` columns: ``request_id, test, round, prompt_tokens, output_tokens, t_send_ns,
    t_first_ns, t_last_ns``, the timing metrics of ``metrics.request_timing``, and for each window
    w in (prefill, decode): ``w_tx_bytes, w_rx_bytes`` (node total over RDMA devices),
    ``w_tx_gbps`` (mean rate), ``w_peak_tx_gbps`` (highest 1 ms window consistent with physics
    lying wholly inside the window: never gap-spread, partial or over line rate, counted in
    ``w_over_line_windows`` (``series.flag_over_line``); on the grid aligned to the capture start, ``series.default_origin``: the grid of
    every 1 ms peak in the report; a single 1 ms value carries about +-15-25 % timing
    uncertainty, method.md "The sampler"), ``w_bursts``; plus
    ``prefill_per_token_bytes`` (tx bytes per prompt token), ``warmup`` (bool). Bytes are NaN
    where the window
    overlaps a counter reset/saturation/implausible jump or lies outside the readings (never
    guessed).

    Raises ``ValueError`` when the capture has no RDMA data counters or ``warmup_rounds`` is
    negative, and whatever ``align`` raises for a log outside the capture.
    """
    if log.alignment is None:
        log = align(log, capture)
    if use_corrected:
        log = apply_fixes(log)
    if int(warmup_rounds) < 0:
        raise ValueError(f"warmup_rounds must be 0 or more, got {warmup_rounds!r}")
    return _attribute_in_one_pass(
        capture, log, intervals, _run,
        dict(arrival_window_s=arrival_window_s, link_capacity_gbps=link_capacity_gbps,
             peak_width_ns=peak_width_ns, warmup_rounds=warmup_rounds,
             origin_ns=origin_ns, use_corrected=use_corrected, percentiles=percentiles))


def _attribute_from(capture, log, be, *, arrival_window_s: float,
                    link_capacity_gbps: float | None, peak_width_ns: int, warmup_rounds: int,
                    origin_ns: int | None, use_corrected: bool, percentiles) -> Attribution:
    """One run of ``attribute`` answered by ``be`` (a ``ranges.RangeQueries``: recording the
    ranges asked in its dry run, then reading the pass's answers)."""
    if log.alignment is None:
        log = align(log, capture)
    if use_corrected:
        log = apply_fixes(log)
    if not be.has_intervals():
        raise ValueError(f"{capture.path}: no RDMA data counter intervals to attribute")
    req = log.ok.copy()
    for c in ("t_send_ns", "t_first_ns", "t_last_ns"):
        req[c] = req[c].astype("int64")
    req = assign_rounds(req, arrival_window_s)
    round_notes = list(req.attrs.pop("notes", []))
    timing = M.request_timing(req)

    send = req["t_send_ns"].to_numpy(np.int64)
    first = req["t_first_ns"].to_numpy(np.int64)
    last = req["t_last_ns"].to_numpy(np.int64)
    # a request running past the capture's span is attributed over what was captured: its
    # windows are clipped to the readings (a window wholly outside them has no bytes: NaN)
    # (the span every counter covers: counters are read at slightly different instants)
    lo_ns, hi_ns = be.common_span()
    windows = {"prefill": (np.clip(send, lo_ns, hi_ns), np.clip(first, lo_ns, hi_ns)),
               "decode": (np.clip(first, lo_ns, hi_ns), np.clip(last, lo_ns, hi_ns))}
    orig = {"prefill": (send, first), "decode": (first, last)}
    outside = {w: (a0 > hi_ns) | (b0 < lo_ns) | ((b0 > a0) & (windows[w][1] <= windows[w][0]))
               for w, (a0, b0) in orig.items()}

    # node totals per direction, and the 1 ms series for peaks and bursts
    cap_gbps = link_capacity_gbps or capacity_gbps(capture)
    # one window grid for every 1 ms peak (here, in the report's tables, cards and figures):
    # the capture start, the project's default origin (series.default_origin)
    origin = int(capture.t_start_ns) if origin_ns is None else int(origin_ns)
    be.set_grid(origin, cap_gbps)

    out = req[["request_id", "test", "round", "prompt_tokens", "output_tokens", "t_send_ns",
               "t_first_ns", "t_last_ns"]].copy()
    out = pd.concat([out, timing, _log_columns(req)], axis=1)
    links = series.twin_links(capture)
    long_parts = []
    window_read = {}  # per window kind: each request's known tx part (what was read in it)
    for w, (a, b) in windows.items():
        by_dir, read = be.integrate(a, b, by="direction", known=True)
        tx, rx = _dir_cols(by_dir)
        tx, rx = np.where(outside[w], np.nan, tx), np.where(outside[w], np.nan, rx)
        window_read[w] = known_parts(tx, _dir_cols(read)[0])
        out[f"{w}_tx_bytes"] = tx
        out[f"{w}_rx_bytes"] = rx
        out[f"{w}_tx_gbps"] = _rate_gbps(tx, a, b)
        peak, nb, n_over = be.window_stats(a, b)
        out[f"{w}_peak_tx_gbps"] = peak
        out[f"{w}_over_line_windows"] = n_over
        out[f"{w}_bursts"] = nb
        by_series = be.integrate(a, b, by="series")
        if links:
            by_series = series.group_links(by_series, links)
        by_series.index = req["request_id"].to_numpy()
        long = by_series.stack(future_stack=True).rename("bytes").reset_index()
        long.columns = ["request_id", "series", "bytes"]
        dur = np.repeat(b - a, by_series.shape[1])
        long["mean_gbps"] = _rate_gbps(long["bytes"], np.zeros_like(dur), dur)
        long.insert(1, "window", w)
        long_parts.append(long)
    with np.errstate(divide="ignore", invalid="ignore"):
        pt = out["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
        out["prefill_per_token_bytes"] = np.where(pt > 0, out["prefill_tx_bytes"] / pt, np.nan)
    by_series_df = pd.concat(long_parts, ignore_index=True)
    sp = _conserving_split(req, be, out)

    rounds = _rounds(out, be)
    marked = _log_warmup_rounds(req, out)
    rounds["warmup"] = warmup_mask(rounds, warmup_rounds, marked) if len(rounds) else []
    warm = set(zip(rounds.loc[rounds["warmup"], "test"], rounds.loc[rounds["warmup"], "round"],
                   strict=True)) if len(rounds) else set()
    out["warmup"] = [(t, r) in warm for t, r in zip(out["test"], out["round"], strict=True)]
    measured = ~out["warmup"].to_numpy(dtype=bool)
    from .cellstats import DEFAULT_PERCENTILES, cell_stats

    pcts = tuple(DEFAULT_PERCENTILES if percentiles is None else percentiles)
    # the engine's dry run only records the ranges asked: the cells ask none, and are dropped
    dry = bool(getattr(be, "recording", False))
    cells = cell_stats(out.iloc[:0] if dry else out, req["chunk_times"].iloc[:0] if dry
                       else req["chunk_times"], pcts)
    if "source" in out.columns and out["source"].nunique() > 1 and len(cells):
        # several logs: the merged cells, then each log's own per-test cells
        parts = [cells.assign(source="all")]
        for src, sub in out.groupby("source", sort=False):
            c = cell_stats(sub, req.loc[sub.index, "chunk_times"], pcts)
            if len(c):
                parts.append(c[c["scope"] == "test"].assign(scope="log", source=src))
        cells = pd.concat(parts, ignore_index=True)
        cells.insert(1, "source", cells.pop("source"))
    tests = _tests(rounds[~rounds["warmup"]] if len(rounds) else rounds)
    if len(tests):
        n_warm = rounds.groupby("test", sort=False)["warmup"].sum()
        tests.insert(2, "warmup_rounds", tests["test"].map(n_warm).astype("int64"))
    t_lo, t_hi = be.span()
    timeline = classify_time(req, t_lo, t_hi)
    if len(timeline):
        seg, seg_read = be.integrate(timeline["t0_ns"].to_numpy(np.int64),
                                     timeline["t1_ns"].to_numpy(np.int64), by="direction",
                                     allow_partial=True, known=True)
        timeline["tx_bytes"], timeline["rx_bytes"] = _dir_cols(seg)
        # each stretch's known part: its bytes, or what the counters read in it when they
        # are unknown (one twin unreadable for a second leaves the other twin's bytes known)
        read_tx, read_rx = _dir_cols(seg_read)
        timeline["tx_known_bytes"] = known_parts(timeline["tx_bytes"].to_numpy(float), read_tx)
        timeline["rx_known_bytes"] = known_parts(timeline["rx_bytes"].to_numpy(float), read_rx)
    classes = []
    total_s = (t_hi - t_lo) / 1e9
    for st in STATES:
        seg = timeline[timeline["state"] == st] if len(timeline) else timeline
        dur_ns = np.asarray(seg["t1_ns"] - seg["t0_ns"], np.int64) if len(seg) else np.zeros(0, int)
        secs = float(dur_ns.sum() / 1e9)
        # unknown is never zero: a state with an unknown span has unknown bytes (NaN), its
        # known part stated apart (tx/rx_known_bytes, a lower bound) with that span (unknown_s)
        tx = seg["tx_bytes"].to_numpy(np.float64) if len(seg) else np.zeros(0)
        rx = seg["rx_bytes"].to_numpy(np.float64) if len(seg) else np.zeros(0)
        ktx = seg["tx_known_bytes"].to_numpy(np.float64) if len(seg) else np.zeros(0)
        krx = seg["rx_known_bytes"].to_numpy(np.float64) if len(seg) else np.zeros(0)
        kt, kr = np.isfinite(tx), np.isfinite(rx)
        txb = float(tx.sum()) if kt.all() else np.nan
        rxb = float(rx.sum()) if kr.all() else np.nan
        classes.append({"state": st, "seconds_s": secs,
                        "share": secs / total_s if total_s > 0 else np.nan,
                        "tx_bytes": txb, "rx_bytes": rxb,
                        "mean_tx_gbps": txb * 8 / (secs * 1e9) if secs > 0 else np.nan,
                        "tx_known_bytes": float(np.nansum(ktx)),
                        "rx_known_bytes": float(np.nansum(krx)),
                        "unknown_s": float(dur_ns[~(kt & kr)].sum() / 1e9)})
    itl = M.pooled_itl(req[measured])
    out_tok = req["output_tokens"].to_numpy(dtype=float, na_value=np.nan)
    run_s = (last.max() - send.min()) / 1e9
    mtiming = timing[measured]
    summary = {
        "n_requests": int(len(log.requests)), "n_ok": int(len(req)), "n_failed": log.n_failed,
        # n_rounds counts (test, round) pairs: two tests of one round each are 2 rounds
        "n_tests": int(rounds["test"].nunique()) if len(rounds) else 0,
        "n_rounds": int(len(rounds)),
        "n_warmup_rounds": int(rounds["warmup"].sum()) if len(rounds) else 0,
        # a mean TTFT across tests of different prompt lengths means nothing: one test only
        "mean_ttft_s": float(mtiming["ttft_s"].mean())
        if measured.any() and req.loc[measured, "test"].nunique() == 1 else None,
        "ttft_by_test_s": {str(t): float(v) for t, v in
                           mtiming["ttft_s"].groupby(req.loc[measured, "test"].to_numpy(),
                                                     sort=False).mean().items()},
        "time_to_last_first_token_by_test_s": {
            str(r["test"]): float(r["time_to_last_first_token_s"]) for _, r in tests.iterrows()}
        if len(tests) else {},
        "mean_decode_speed_tps": float(np.nanmean(mtiming["decode_speed_tps"]))
        if np.isfinite(mtiming["decode_speed_tps"]).any() else None,
        "itl_pooled_mean_s": float(itl.mean()) if len(itl) else None,
        "itl_pooled_p50_s": float(np.median(itl)) if len(itl) else None,
        "itl_pooled_p99_s": float(np.percentile(itl, 99)) if len(itl) else None,
        # unknown is never zero: a request without its output tokens makes the total unknown
        "output_throughput_tps": float(out_tok.sum() / run_s)
        if run_s > 0 and len(out_tok) and np.isfinite(out_tok).all() else None,
        "burst_capacity_gbps": cap_gbps,
        # the conserving split (conserving.py): per-request bytes + idle/other = the counters;
        # unknown is never zero: NaN totals with any unknown segment, the known parts beside
        **{f"split_{k}_{d}{x}_bytes": getattr(sp, f"{k}_{d}{x}") for d in ("tx", "rx")
           for k in ("total", "idle") for x in ("", "_known")},
        "split_unknown_segments": sp.unknown_segments,
        "split_unknown_s": sp.unknown_ns / 1e9,
        "split_pairs_over_budget": sp.pairs_over_budget,
        **window_sum(out, window_read.values()),
    }
    notes = list(log.notes) + round_notes
    if warmup_rounds:
        nw = int(rounds["warmup"].sum()) if len(rounds) else 0
        notes.append(f"warm-up: the first {int(warmup_rounds)} round(s) of each test ({nw} "
                     f"round(s), {int((~measured).sum())} request(s)) are listed but left out "
                     "of the per-test means and spreads, the comparison and the summary's "
                     "TTFT, decode speed and ITL"
                     + (f"; the {len(marked)} warm-up round(s) the log marks count toward "
                        "them" if marked else ""))
        gone = [str(t) for t in dict.fromkeys(rounds["test"]) if len(rounds)
                and t not in set(tests.get("test", []))]
        if gone:
            notes.append(f"test(s) with no round after the warm-up, left out of the per-test "
                         f"table: {', '.join(gone)}")
    if log.alignment:
        notes.append(log.alignment_note())
    notes.extend(split_notes(summary))  # conserving.split_notes
    notes.extend(implausible_request_notes(out))
    if out["prefill_tx_bytes"].isna().any():
        notes.append(f"{int(out['prefill_tx_bytes'].isna().sum())} prefill window(s) overlap a "
                     "counter reset/saturation/unreadable/implausible-jump interval or lie "
                     "outside the readings: "
                     "bytes left empty")
    srcs = out["token_source"].astype(str).replace("", "unknown").value_counts()
    notes.append("output token counts from: " + "; ".join(f"{k} ({v} request(s))"
                                                          for k, v in srcs.items()))
    if out["flag"].astype(bool).any():
        part = out[out["flag"].str.contains("capture", regex=False)]
        if len(part):
            # the log's alignment said it already, without the ids: one note, this one
            notes = [x for x in notes if "run past the capture's span" not in x]
            notes.append(f"{len(part)} request(s) run past the capture's span "
                         f"({', '.join(part['request_id'].astype(str).head(5))}): bytes over "
                         "the captured part only (column 'flag')")
    return Attribution(capture_path=str(capture.path), log_path=str(log.path),
                       log_format=log.format, alignment=dict(log.alignment or {}),
                       failed=failed_requests(log), runs=list(log.runs),
                       requests=out, by_series=by_series_df, rounds=rounds, tests=tests,
                       timeline=timeline, time_classes=pd.DataFrame(classes), summary=summary,
                       notes=notes, warmup_rounds=int(warmup_rounds),
                       capture_id=capture.meta.get("capture_id"), cells=cells,
                       percentiles=pcts)


def _log_warmup_rounds(req: pd.DataFrame, out: pd.DataFrame) -> set:
    """The (test, round) pairs whose every request the log marks as a warm-up (column
    ``warmup`` non-empty: a whole warm-up round the tool wrote, ``reader._drop_warmup``)."""
    if "warmup" not in req.columns or not len(req):
        return set()
    w = req["warmup"].fillna("").astype(str).ne("").to_numpy()
    if not w.any():
        return set()
    allw: dict = {}
    for t, r, x in zip(out["test"], out["round"], w, strict=True):
        allw[(t, r)] = allw.get((t, r), True) and bool(x)
    return {k for k, v in allw.items() if v}


def _conserving_split(req: pd.DataFrame, be, out: pd.DataFrame):
    """Add the conserving split columns to ``out`` (``conserving.split``): ``prefill_tx_split_bytes``,
    ``prefill_rx_split_bytes``, ``decode_tx_split_bytes``, ``decode_rx_split_bytes`` and
    ``prefill_per_token_split_bytes``; return the ``conserving.Split``."""
    t_lo, t_hi = be.span()

    def integ(a, b):
        got, read = be.integrate(a, b, by="direction", allow_partial=True, known=True)
        return (*_dir_cols(got), *_dir_cols(read))

    sp = split(req["t_send_ns"].to_numpy(np.int64), req["t_first_ns"].to_numpy(np.int64),
               req["t_last_ns"].to_numpy(np.int64),
               req["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan),
               req["output_tokens"].to_numpy(dtype=float, na_value=np.nan), integ, t_lo, t_hi,
               dry=bool(getattr(be, "recording", False)))
    out["prefill_tx_split_bytes"] = sp.prefill_tx
    out["prefill_rx_split_bytes"] = sp.prefill_rx
    out["decode_tx_split_bytes"] = sp.decode_tx
    out["decode_rx_split_bytes"] = sp.decode_rx
    for w in ("prefill", "decode"):  # the known segments' part (they add up to the known total)
        for d in ("tx", "rx"):
            out[f"{w}_{d}_split_known_bytes"] = getattr(sp, f"{w}_{d}_known")
    pt = out["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["prefill_per_token_split_bytes"] = np.where(pt > 0, sp.prefill_tx / pt, np.nan)
    return sp


def _log_columns(req: pd.DataFrame) -> pd.DataFrame:
    """Per-request columns carried over from the log, and the corrected-value columns.

    ``run``, ``token_source`` (where the output token count comes from), ``check`` (a
    consistency check the tool's stored values failed, "" if none), ``flag`` (e.g. "runs past
    the capture end", "corrected: <kind>"), ``ttft_reasoning_s`` / ``ttft_answer_s`` (time to
    the first reasoning token and to the first answer token, only for requests that streamed
    reasoning tokens), and ``ttft_corrected_s``, ``tpot_corrected_s``, ``itl_mean_corrected_s``:
    the metrics from the CORRECTED values where a check found a derivable correction (NaN
    elsewhere; the windows use them only with ``use_corrected``).
    """
    send = req["t_send_ns"].to_numpy(np.int64)

    def since_send(col):
        if col not in req.columns:
            return np.full(len(req), np.nan)
        v = req[col].to_numpy(dtype=float, na_value=np.nan)
        return (v - send) / 1e9

    out = pd.DataFrame(index=req.index)
    for c, default in (("run", 1), ("token_source", ""), ("check", ""), ("flag", "")):
        out[c] = req[c] if c in req.columns else default
    if "source" in req.columns:  # several logs merged (requestlogs.merge_logs)
        out["source"] = req["source"]
    out["ttft_reasoning_s"] = since_send("t_first_reasoning_ns")
    out["ttft_answer_s"] = since_send("t_first_answer_ns")
    fixes = req["fix"] if "fix" in req.columns else pd.Series([None] * len(req), index=req.index)
    has = np.array([bool(f) for f in fixes])
    fixed = req.loc[has].copy()
    cols = {"ttft_corrected_s": np.full(len(req), np.nan),
            "tpot_corrected_s": np.full(len(req), np.nan),
            "itl_mean_corrected_s": np.full(len(req), np.nan)}
    if has.any():
        fixed["t_first_ns"] = [int(f["t_first_ns"]) for f in fixes[has]]
        fixed["t_last_ns"] = [int(f["t_last_ns"]) for f in fixes[has]]
        fixed["chunk_times"] = [f["chunk_times"] for f in fixes[has]]
        t = M.request_timing(fixed)
        cols["ttft_corrected_s"][has] = t["ttft_s"].to_numpy()
        cols["tpot_corrected_s"][has] = t["tpot_s"].to_numpy()
        cols["itl_mean_corrected_s"][has] = t["itl_mean_s"].to_numpy()
    for c, v in cols.items():
        out[c] = v
    out["corrected"] = ["corrected:" in str(f) for f in out["flag"]]
    return out


def failed_requests(log) -> pd.DataFrame:
    """The failed requests of a log: ``request_id, run, row, error`` (the reason), one row each."""
    bad = log.requests[~log.requests["ok"]]
    cols = [c for c in ("request_id", "run", "row", "error") if c in bad.columns]
    return bad[cols].reset_index(drop=True)


#: Requests named per kind of implausible value before the rest are only counted.
MAX_NAMED_REQUESTS = 5


def implausible_request_notes(requests: pd.DataFrame,
                              max_named: int = MAX_NAMED_REQUESTS) -> list[str]:
    """Return notes on parseable but impossible-looking values of successful requests.

    ``requests``: the per-request table of ``attribute`` (``request_id, prompt_tokens,
    output_tokens, t_first_ns, t_last_ns, prefill_tx_bytes, decode_tx_bytes``). Three kinds,
    each a note, not an error (the times and bytes are still measured):

    - 0 prompt tokens (a prompt has at least one; bytes per prompt token is left empty), with
      the prefill traffic seen;
    - 0 output tokens although the request has a first token (so at least 1), with its decode
      time and traffic;
    - more than one output token but the last token at the first token's instant (no decode
      time; TPOT and decode speed are left empty).

    Up to ``max_named`` requests are named per kind, the rest counted. MB = 1e6 bytes.
    """
    def mb(v) -> str:
        if v is None or not np.isfinite(v):
            return "unknown MB"
        return f"{v / 1e6:,.0f} MB" if v >= 100e6 else f"{v / 1e6:,.3f} MB"

    pt = requests["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
    ot = requests["output_tokens"].to_numpy(dtype=float, na_value=np.nan)
    dec_ns = (requests["t_last_ns"].to_numpy(np.int64)
              - requests["t_first_ns"].to_numpy(np.int64))
    pre_b = requests["prefill_tx_bytes"].to_numpy(dtype=float)
    dec_b = requests["decode_tx_bytes"].to_numpy(dtype=float)
    ids = requests["request_id"].astype(str).to_numpy()
    kinds = [
        (pt == 0, lambda i: f"request {ids[i]}: 0 prompt tokens but {mb(pre_b[i])} of prefill "
                            "traffic (a prompt has at least 1 token; bytes per prompt token "
                            "left empty)",
         "with 0 prompt tokens"),
        (ot == 0, lambda i: f"request {ids[i]}: 0 output tokens but a first token (so at least "
                            f"1) and a {dec_ns[i] / 1e9:.3f} s decode with {mb(dec_b[i])} of "
                            "decode traffic (TPOT and decode speed left empty)",
         "with 0 output tokens"),
        ((ot > 1) & (dec_ns == 0),
         lambda i: f"request {ids[i]}: {int(ot[i]):,} output tokens but the last token at the "
                   "first token's instant (no decode time; TPOT and decode speed left empty)",
         "with several output tokens and no decode time"),
    ]
    notes = []
    for mask, say, what in kinds:
        idx = np.flatnonzero(mask)
        notes.extend(say(i) for i in idx[:max_named])
        if len(idx) > max_named:
            notes.append(f"... and {len(idx) - max_named} more request(s) {what}")
    return notes


def _rounds(req: pd.DataFrame, be) -> pd.DataFrame:
    """One row per (test, round): the round's timing and its prefill/decode bytes."""

    if not len(req):
        return pd.DataFrame()
    # one grouped pass (a dict per round was built in a Python loop: slow for 10^4 rounds)
    g = req.groupby(["test", "round"], sort=False)
    n = g.size()
    pt = req["prompt_tokens"].astype("Float64")
    pt_sum = pt.groupby([req["test"], req["round"]], sort=False).sum(min_count=1)
    pt_na = pt.isna().groupby([req["test"], req["round"]], sort=False).any()
    t_start = g["t_send_ns"].min()
    t_first = g["t_first_ns"].max()
    r = pd.DataFrame({
        "test": n.index.get_level_values(0).to_numpy(object),
        "round": n.index.get_level_values(1).to_numpy(np.int64),
        "n_requests": n.to_numpy(np.int64),
        "t_start_ns": t_start.to_numpy(np.int64),
        "t_last_first_ns": t_first.to_numpy(np.int64),
        "t_end_ns": g["t_last_ns"].max().to_numpy(np.int64),
        # the sum over the round's requests, unknown (NA) when any is unknown
        "prompt_tokens": [pd.NA if na else int(v) for na, v in
                          zip(pt_na.to_numpy(), pt_sum.to_numpy(dtype=float, na_value=np.nan),
                              strict=True)],
        "time_to_last_first_token_s": (t_first.to_numpy(np.int64)
                                       - t_start.to_numpy(np.int64)) / 1e9,
        "mean_ttft_s": _group_means(g, req["ttft_s"]),
        "decode_speed_tps": _group_means(g, req["decode_speed_tps"]),
    })
    a, m, b = (r[c].to_numpy(np.int64) for c in ("t_start_ns", "t_last_first_ns", "t_end_ns"))
    pre = be.integrate(a, m, by="direction")
    dec = be.integrate(m, b, by="direction")
    r["prefill_tx_bytes"], r["prefill_rx_bytes"] = _dir_cols(pre)
    r["decode_tx_bytes"], r["decode_rx_bytes"] = _dir_cols(dec)
    r["prefill_tx_gbps"] = _rate_gbps(r["prefill_tx_bytes"], a, m)
    r["decode_tx_gbps"] = _rate_gbps(r["decode_tx_bytes"], m, b)
    (r["prefill_peak_tx_gbps"], r["prefill_bursts"],
     r["prefill_over_line_windows"]) = be.window_stats(a, m)
    pt = r["prompt_tokens"].to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        r["prefill_per_token_bytes"] = np.where(pt > 0, r["prefill_tx_bytes"] / pt, np.nan)
    # the conserving split summed over the round's requests: unknown (NaN) when any is unknown
    keys = [req["test"], req["round"]]
    for c in ("prefill_tx_split_bytes", "decode_tx_split_bytes"):
        if c in req:
            v = req[c].astype(float)
            tot = np.array(v.groupby(keys, sort=False).sum(), dtype=float)
            tot[v.isna().groupby(keys, sort=False).any().to_numpy(bool)] = np.nan
            r[c] = tot
    if "prefill_tx_split_bytes" in r:
        with np.errstate(divide="ignore", invalid="ignore"):
            r["prefill_per_token_split_bytes"] = np.where(pt > 0, r["prefill_tx_split_bytes"]
                                                          / pt, np.nan)
    return r.sort_values(["t_start_ns"], kind="stable").reset_index(drop=True)


def _group_means(g, values: pd.Series) -> np.ndarray:
    """Per group of ``g`` (in its order): the mean of the non-NaN values as ``Series.mean``
    sums them (NaN as 0, numpy's pairwise sum, / count), to the last bit; NaN when none."""
    codes = g.ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")  # rows of a group in their order
    v = values.to_numpy(dtype=float)[order]
    ok = ~np.isnan(v)
    z = np.where(ok, v, 0.0)
    bounds = np.searchsorted(codes[order], np.arange(g.ngroups + 1))
    out = np.full(g.ngroups, np.nan)
    for i in range(g.ngroups):
        s0, s1 = bounds[i], bounds[i + 1]
        n = int(ok[s0:s1].sum())
        if n:
            out[i] = z[s0:s1].sum() / n
    return out


#: The round metrics summarised across rounds (mean with min-max spread, method.md).
TEST_METRICS = ("time_to_last_first_token_s", "mean_ttft_s", "decode_speed_tps",
                "prefill_tx_bytes", "prefill_per_token_bytes", "decode_tx_bytes",
                "prefill_tx_gbps", "prefill_peak_tx_gbps", "prefill_tx_split_bytes",
                "prefill_per_token_split_bytes", "decode_tx_split_bytes")


def _tests(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per test: number of rounds, prompt tokens per round, and mean/min/max of TEST_METRICS."""
    rows = []
    if not len(rounds):
        return pd.DataFrame()
    for test, g in rounds.groupby("test", sort=False):
        row: dict[str, Any] = {"test": test, "rounds": len(g),
                               "n_requests": int(g["n_requests"].max()),
                               "prompt_tokens": g["prompt_tokens"].max()}
        for mcol in TEST_METRICS:
            mean, lo, hi = M.spread(g[mcol])
            row[mcol] = mean
            row[M.spread_name(mcol, "min")] = lo
            row[M.spread_name(mcol, "max")] = hi
        rows.append(row)
    return pd.DataFrame(rows)
