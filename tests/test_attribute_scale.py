"""attribute at scale: the vectorized per-range window stats equal the per-range rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis.attribute import RangeWindowStats
from rdmascope.analysis.bursts import detect_bursts
from rdmascope.analysis.peaks import HEADLINE_EXCLUDE
from rdmascope.analysis.series import QUALITY_OVER_LINE

MS = 1_000_000


def _per_range(t, v, qq, a, b, cap):
    """The rule range by range (the code RangeWindowStats replaced): nanmax of the headline
    windows, detect_bursts on the range's windows, over-line windows counted."""
    rate = v * 8.0 / MS
    good = np.where((qq & HEADLINE_EXCLUDE) == 0, rate, np.nan)
    over = (qq & QUALITY_OVER_LINE) != 0
    fine = pd.Series(v, index=t)
    peak, nb, n_over = np.full(len(a), np.nan), np.zeros(len(a), int), np.zeros(len(a), int)
    lo = np.searchsorted(t, a, "left")
    hi = np.searchsorted(t + MS, b, "right")
    for i in range(len(a)):
        if hi[i] > lo[i]:
            seg = good[lo[i]:hi[i]]
            if np.isfinite(seg).any():
                peak[i] = np.nanmax(seg)
            n_over[i] = over[lo[i]:hi[i]].sum()
            nb[i] = len(detect_bursts(fine.iloc[lo[i]:hi[i]], MS, capacity_gbps=cap))
    return peak, nb, n_over


@pytest.mark.parametrize("seed", range(12))
def test_range_window_stats_equal_the_per_range_rule_across_blocks(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(50, 400))
    t = (10_000 + np.arange(m)) * MS
    cap = 100.0
    # rates around the leave (10 Gb/s) and enter (25 Gb/s) thresholds, NaN windows, exact
    # threshold values, quality bits
    levels = np.array([0.0, 5.0, 10.0, 12.0, 25.0, 30.0, 150.0])
    rate = levels[rng.integers(0, len(levels), m)]
    rate = np.where(rng.random(m) < 0.7, np.repeat(rate[::3], 3)[:m], rate)  # runs
    v = rate * MS / 8.0
    v[rng.random(m) < 0.05] = np.nan
    bits = np.array([0, 0, 0, QUALITY_OVER_LINE, HEADLINE_EXCLUDE & ~QUALITY_OVER_LINE])
    qq = bits[rng.integers(0, len(bits), m)].astype(np.int64)
    n = 300
    a = t[0] - 3 * MS + rng.integers(0, (m + 6) * MS, n)
    length = np.where(rng.random(n) < 0.1, rng.integers(0, (m + 6) * MS, n),
                      rng.integers(0, 40 * MS, n))
    b = a + length
    a[:5] = t[0]  # the whole series, and exact window edges
    b[:5] = t[-1] + MS
    want = _per_range(t, v, qq, a, b, cap)
    assert (want[1] > 0).sum() > 20 and (want[1] > 1).sum() > 5  # bursts to count
    for n_blocks in (1, 2, 5, 17):
        cuts = np.sort(rng.choice(np.arange(1, m), size=min(n_blocks - 1, m - 1),
                                  replace=False)) if n_blocks > 1 else np.array([], int)
        st = RangeWindowStats(a, b, MS, cap)
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [m]]),
                          strict=True):
            st.add(t[lo:hi], v[lo:hi], qq[lo:hi])
        got = st.result()
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1], err_msg=f"{n_blocks} blocks")
        np.testing.assert_array_equal(got[2], want[2])
    # several stats of other ranges and thresholds fed the same blocks (ranges.WindowBlock: its
    # rates, runs and sparse table made once, as the attribution's pass shares them) equal
    # each fed alone
    from rdmascope.analysis.ranges import WindowBlock

    others = [(a[::2], b[::2], cap), (a[1::3], b[1::3], 40.0), (a, b, cap)]
    shared = [RangeWindowStats(x, y, MS, c) for x, y, c in others]
    alone = [RangeWindowStats(x, y, MS, c) for x, y, c in others]
    for lo, hi in ((0, m // 3), (m // 3, m)):
        blk = WindowBlock(t[lo:hi], v[lo:hi], qq[lo:hi], MS)
        for s1, s2 in zip(shared, alone, strict=True):
            s1.add_block(blk)
            s2.add(t[lo:hi], v[lo:hi], qq[lo:hi])
    for s1, s2 in zip(shared, alone, strict=True):
        for x, y in zip(s1.result(), s2.result(), strict=True):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(shared[2].result()[1], want[1])


def test_range_window_stats_hand_computed():
    # windows (Gb/s at 100 Gb/s capacity: enter 25, leave 10):
    #   0: 30  1: 12  2: 5  3: 12  4: 12  5: 40  6: 11  7: 0
    # whole range: runs [0,2) with enter -> burst; [3,7) with enter at 5 -> burst: 2
    # range over windows 1..4: runs [1,2) (no enter), [3,5) (no enter): 0 bursts, peak 12
    # range over windows 4..6, cut by a block edge after window 4: run [4,7) enter at 5: 1
    rate = np.array([30, 12, 5, 12, 12, 40, 11, 0], float)
    t = np.arange(8) * MS
    v = rate * MS / 8
    a = np.array([0, 1 * MS, 4 * MS])
    b = np.array([8 * MS, 5 * MS, 7 * MS])
    st = RangeWindowStats(a, b, MS, 100.0)
    st.add(t[:5], v[:5])
    st.add(t[5:], v[5:])
    peak, nb, n_over = st.result()
    assert nb.tolist() == [2, 0, 1]
    assert peak.tolist() == [40.0, 12.0, 40.0]
    assert n_over.tolist() == [0, 0, 0]


# -- the grouping into rounds and the per-round table, against the code they replaced ------------

def _old_assign_rounds(requests: pd.DataFrame, arrival_window_s: float = 1.0) -> pd.DataFrame:
    """The code before the vectorized rewrite (a loop over rows and groups)."""
    df = requests.copy()
    labelled = df["test"].notna() & df["round"].notna()
    if labelled.all():
        df["round"] = df["round"].astype("int64")
        return df
    win = int(round(arrival_window_s * 1e9))
    todo = df[~labelled].sort_values("t_send_ns", kind="stable")
    groups: list[list[Any]] = []
    cur: list[Any] = []
    cur_start = cur_test = None
    for idx, r in todo.iterrows():
        t = int(r["t_send_ns"])
        if cur and (t - cur_start > win or r["test"] != cur_test):
            groups.append(cur)
            cur = []
        if not cur:
            cur_start, cur_test = t, r["test"]
        cur.append(idx)
    if cur:
        groups.append(cur)
    tests = df["test"].astype(object).copy()
    rounds = pd.array(df["round"], dtype="Int64")
    counters: dict[str, int] = {}
    unknown: list[str] = []
    for gi, g in enumerate(groups, start=1):
        rows = df.loc[g]
        label = rows["test"].iloc[0]
        if label is None or (isinstance(label, float) and np.isnan(label)):
            if rows["prompt_tokens"].isna().any():
                # without prompt tokens rounds of different prompt lengths (the demo's P1 and
                # P2) cannot be told apart: never merge them into one test
                label = f"round {gi}"
                unknown.append(label)
            else:
                p = rows["prompt_tokens"].unique()
                label = f"{len(g)}x{int(p[0])}" if len(p) == 1 else f"{len(g)} requests"
        counters[label] = counters.get(label, 0) + 1
        for idx in g:
            tests[idx] = label
            rounds[df.index.get_loc(idx)] = counters[label]
    df["test"] = tests
    df["round"] = np.asarray(rounds, dtype="int64")
    if unknown:
        df.attrs["notes"] = [
            f"prompt tokens unknown (no token counts in the log): each group of requests sent "
            f"within {arrival_window_s:g} s is its own test ({', '.join(unknown[:3])}"
            f"{', ...' if len(unknown) > 3 else ''}), since rounds of different prompt lengths "
            "cannot be told apart; per-test means are over one round each. Label the log's "
            "requests with test/round (or give token counts) to group the rounds of one test"]
    return df


def _old_rounds_head(req: pd.DataFrame, be) -> pd.DataFrame:
    """The per-round table before the rewrite (a dict per round), without the bytes."""

    rows = []
    for (test, rnd), g in req.groupby(["test", "round"], sort=False):
        rows.append({
            "test": test, "round": int(rnd), "n_requests": len(g),
            "t_start_ns": int(g["t_send_ns"].min()),
            "t_last_first_ns": int(g["t_first_ns"].max()),
            "t_end_ns": int(g["t_last_ns"].max()),
            "prompt_tokens": g["prompt_tokens"].sum(min_count=len(g)),
            "time_to_last_first_token_s": (g["t_first_ns"].max() - g["t_send_ns"].min()) / 1e9,
            "mean_ttft_s": float(g["ttft_s"].mean()),
            "decode_speed_tps": float(g["decode_speed_tps"].mean()),
        })
    r = pd.DataFrame(rows)
    if not len(r):
        return r
    return r


class _NoBytes:
    """A backend answering every range with NaN bytes and no peak (only the timing columns
    are compared)."""

    def integrate(self, a, b, *, by, allow_partial=False):
        return pd.DataFrame({"tx": np.full(len(a), np.nan), "rx": np.full(len(a), np.nan)})

    def window_stats(self, a, b):
        return np.full(len(a), np.nan), np.zeros(len(a), np.int64), np.zeros(len(a), np.int64)


def _requests(rng, n, *, labelled=0.0, tests=(None,), na_prompt=0.0, prompts=(512, 1024)):
    send = np.sort(rng.integers(0, 40, n)) * 300_000_000 + rng.integers(0, 5, n)
    prompt = pd.array([None if rng.random() < na_prompt else int(rng.choice(prompts))
                       for _ in range(n)], dtype="Int64")
    test = [rng.choice(np.array(tests, dtype=object)) for _ in range(n)]
    rnd = pd.array([int(rng.integers(1, 4)) if rng.random() < labelled else None
                    for _ in range(n)], dtype="Int64")
    ttft = rng.integers(1, 10**8, n)
    df = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "test": test, "round": rnd,
                       "prompt_tokens": prompt, "t_send_ns": send, "t_first_ns": send + ttft,
                       "t_last_ns": send + ttft + rng.integers(0, 10**9, n)})
    df = df.sample(frac=1.0, random_state=int(rng.integers(0, 1000))).reset_index(drop=True)
    return df


@pytest.mark.parametrize("case", range(10))
def test_assign_rounds_and_round_table_equal_the_old_code(case):
    from rdmascope.analysis import metrics as M
    from rdmascope.analysis.attribute import _rounds, assign_rounds

    rng = np.random.default_rng(case)
    kw = [dict(), dict(na_prompt=0.2), dict(prompts=(512,)), dict(tests=(None, "P1")),
          dict(labelled=1.0, tests=("P1", "P4")), dict(labelled=0.5, tests=("P1", None)),
          dict(na_prompt=1.0), dict(prompts=(512, 512, 2048), tests=("A", "B")),
          dict(labelled=0.3, na_prompt=0.3, tests=(None, "X")), dict()][case]
    req = _requests(rng, int(rng.integers(1, 120)), **kw)
    for win in (0.0, 1.0, 2.5):
        old = _old_assign_rounds(req, win)
        new = assign_rounds(req, win)
        pd.testing.assert_frame_equal(new, old, check_exact=True)
        assert new.attrs.get("notes") == old.attrs.get("notes")
        if not (new["test"].notna().all()):
            continue
        timed = pd.concat([new, M.request_timing(new.assign(
            chunk_times=None, output_tokens=pd.array([8] * len(new), dtype="Int64")))], axis=1)
        want = _old_rounds_head(timed, None)
        got = _rounds(timed, _NoBytes())
        want = want.sort_values(["t_start_ns"], kind="stable").reset_index(drop=True)
        pd.testing.assert_frame_equal(got[list(want.columns)], want, check_exact=True)


def test_streamed_json_and_csv_equal_the_whole_dump(monkeypatch, capsys):
    """emit writes --json/--csv block by block; the text equals one json.dumps / to_csv of the
    whole tables (the code before), across block edges, with NaN/NA, nested values, an empty
    table and a named index."""
    import json

    from rdmascope.cli import output as O

    monkeypatch.setattr(O, "ROWS_PER_BLOCK", 3)
    a = pd.DataFrame({"id": [f"r{i}" for i in range(8)], "x": np.arange(8) / 3,
                      "n": pd.array([1, None, 3, 4, 5, 6, None, 8], dtype="Int64"),
                      "s": ["a", None, "c\n\"q\"", "d", "e", "f", "g", "h"],
                      "b": [True, False] * 4, "l": [[1, 2], None, [], [3.5], None, [np.nan],
                                                   {"k": 1}, [0]]})
    a.loc[3, "x"] = np.nan
    a["o"] = pd.Series([np.int64(3), np.float64("nan"), pd.Timestamp("2026-01-01"), "é\t",
                        -np.inf, None, True, np.bool_(False)], dtype=object)
    a["f"] = pd.array([1.5, None, 2.0, 3.0, None, 4.0, 5.0, 6.0], dtype="Float64")
    a["c"] = pd.Categorical(["u", "v"] * 4)
    idx = pd.DataFrame({"v": [1.5, np.inf]}, index=pd.Index(["p", "q"], name="key"))
    tables = {"main": a, "empty": pd.DataFrame(), "named": idx, "one": a.head(1)}
    meta = {"k": [1, {"z": np.nan}], "n": np.int64(4), "e": {}}
    O.emit(tables, O.OutputSpec(json=True, csv=False, parquet=None), meta=meta)
    got = capsys.readouterr().out
    whole = {"schema_version": O.JSON_SCHEMA_VERSION, "meta": meta}
    for name, df in tables.items():
        whole[name] = O.to_records(df.reset_index() if df.index.name is not None else df)
    want = json.dumps(O._nan_to_none(whole), indent=1, default=O._json_default) + "\n"
    assert got == want
    assert json.loads(got)["main"][3]["x"] is None
    O.emit(tables, O.OutputSpec(json=False, csv=True, parquet=None))
    got = capsys.readouterr().out
    want = "".join(f"# {name}\n" + df.to_csv(index=df.index.name is not None)
                   for name, df in tables.items())
    assert got == want


def test_range_index_finds_the_same_ranges_as_a_scan():
    from rdmascope.analysis.attribute import RangeIndex

    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 500):
        a = rng.integers(0, 10**6, n)
        b = a + np.where(rng.random(n) < 0.03, rng.integers(0, 10**6, n),
                         rng.integers(0, 2000, n))
        b[: n // 10] = a[: n // 10]  # zero-length ranges
        ix = RangeIndex(a, b)
        for lo in list(rng.integers(-10, 10**6 + 10, 60)) + [0, 10**6]:
            hi = lo + int(rng.integers(0, 30000))
            want = np.flatnonzero((a < hi) & (b > lo))
            np.testing.assert_array_equal(ix.touching(int(lo), int(hi)), want)


def _old_classify_time(requests: pd.DataFrame, t_start_ns: int, t_end_ns: int) -> pd.DataFrame:
    """classify_time before its runs were merged at once: segment by segment in a loop."""
    send = requests["t_send_ns"].to_numpy(dtype=np.int64)
    first = requests["t_first_ns"].to_numpy(dtype=np.int64)
    last = requests["t_last_ns"].to_numpy(dtype=np.int64)
    edges = np.unique(np.clip(np.concatenate([[t_start_ns, t_end_ns], send, first, last]),
                              t_start_ns, t_end_ns))
    if len(edges) < 2:
        return pd.DataFrame({"t0_ns": [], "t1_ns": [], "state": []})
    a, b = edges[:-1], edges[1:]
    mid = a + (b - a) // 2

    def open_count(starts, ends):
        return (np.searchsorted(np.sort(starts), mid, "right")
                - np.searchsorted(np.sort(ends), mid, "right"))
    pre = open_count(send, first) > 0
    dec = open_count(first, last) > 0
    state = np.where(pre, "prefill", np.where(dec, "decode-only", "idle"))
    rows: list[list[Any]] = []
    for s0, s1, st in zip(a, b, state, strict=True):
        if rows and rows[-1][2] == st and rows[-1][1] == s0:
            rows[-1][1] = s1
        else:
            rows.append([int(s0), int(s1), str(st)])
    return pd.DataFrame(rows, columns=["t0_ns", "t1_ns", "state"])


@pytest.mark.parametrize("seed", range(6))
def test_classify_time_equals_the_segment_loop(seed):
    from rdmascope.analysis.attribute import classify_time

    rng = np.random.default_rng(seed)
    for trial in range(40):
        n = int(rng.integers(0, 40))
        send = rng.integers(0, 10**6, n)
        first = send + (0 if trial % 7 == 0 else rng.integers(0, 10**5, n))
        last = first + rng.integers(0, 10**5, n)
        req = pd.DataFrame({"t_send_ns": send, "t_first_ns": first, "t_last_ns": last})
        lo = int(rng.integers(-10**5, 10**5))
        hi = lo if trial % 11 == 0 else int(rng.integers(5 * 10**5, 2 * 10**6))
        got, want = classify_time(req, lo, hi), _old_classify_time(req, lo, hi)
        pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_range_bytes_added_together_equal_each_added_alone():
    """``windows.RangeBytes.add_all`` (the attribution's pass: one evaluation over the ranges
    of every query) gives each ``RangeBytes`` the sums ``add`` gives it alone, file after file
    (ranges touching none, some or all of a file's intervals; NaN intervals, gaps)."""
    from rdmascope.analysis.curve import CounterCurve
    from rdmascope.analysis.windows import RangeBytes

    rng = np.random.default_rng(9)
    t = np.cumsum(rng.integers(800_000, 1_200_000, 3001)).astype(np.int64)
    flag = np.where(rng.random(3000) < 0.02, 1, np.where(rng.random(3000) < 0.02, 3, 0))
    b = rng.random(3000) * 1e6
    b[flag == 1] = np.nan
    files = [(0, 900), (900, 901), (901, 2500), (2500, 3000)]
    queries = []
    for n in (0, 1, 40, 300):
        a = rng.integers(int(t[0]) - 10**7, int(t[-1]), n)
        queries.append((a, a + rng.integers(0, 10**9, n)))
    together = [RangeBytes(a, z) for a, z in queries]
    alone = [RangeBytes(a, z) for a, z in queries]
    for lo, hi in files:
        cnt = CounterCurve(t[lo:hi + 1][:-1], t[lo + 1:hi + 1], b[lo:hi],
                           flag[lo:hi].astype(np.int8))
        RangeBytes.add_all(together, 3, cnt)
        for rb in alone:
            rb.add(3, cnt)
    for x, y in zip(together, alone, strict=True):
        got = list(x.items({3: "s"}))
        want = list(y.items({3: "s"}))
        assert [k for k, _ in got] == [k for k, _ in want]
        for (_, p), (_, q) in zip(got, want, strict=True):
            for u, v in zip(p, q, strict=True):
                np.testing.assert_array_equal(u, v)
