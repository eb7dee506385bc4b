"""Checks of what the readers built: per-row plausibility (``_validate``, the one rule every
reader shares: ``PLAUSIBILITY``), vLLM-style arrays checked against themselves (``check_itls``)
and the corrections they offer (``apply_fixes``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from .common import RequestLog, RequestLogError, _join_flag

#: The longest a request can take, send to last token (ns): one day. A longer one is a time of
#: 0, a wrong unit or another clock, never a request (a 56-year TTFT from ``start_time: 0``).
MAX_REQUEST_NS = 86_400 * 1_000_000_000

#: More tokens than any model's context holds (the longest windows are ~10M tokens): a prompt
#: or output count above this is a corrupt field, not a request.
MAX_CONTEXT_TOKENS = 10_000_000

#: The one plausibility rule, applied to the rows of every reader (``_validate``), in words.
PLAUSIBILITY = (
    "all three times present; the first token strictly after the send; the last token not "
    "before the first; chunk times in order, none before the send; the last token and every "
    "chunk within a day of the send, and the send within a day of the log's median send; no "
    "more token-bearing chunks than output tokens (unless the tool's stored values failed a "
    "named consistency check, column 'check'); prompt and output tokens each at most "
    f"{MAX_CONTEXT_TOKENS:,} (beyond any model's context)")


def _validate(path, df: pd.DataFrame) -> pd.DataFrame:
    """Check the successful rows; a row that fails a check becomes a failed row with the reason.

    A request_id used twice refuses the file (``RequestLogError``: the rows cannot be told
    apart). Per row (a bad row is that row's problem, never the file's) the rule
    ``PLAUSIBILITY``, the same whatever the reader: all three times present, the first token
    strictly after the send (a TTFT of 0 is as impossible as a negative one: a first token
    needs a forward pass), the last token not before the first, chunk times in order and none
    before the send, nothing later than ``MAX_REQUEST_NS`` after the send, no send more than
    that from the log's median send (a time of 0 among real ones), no more token chunks than
    output tokens unless a named check explains them, token counts at most
    ``MAX_CONTEXT_TOKENS``. Such a row gets ``ok = False`` and ``error = "invalid: <field>:
    <what>"``; failed rows are not checked. Returns the checked frame.
    """
    ids = df["request_id"]
    dup = ids[ids.duplicated(keep=False)]
    if len(dup):
        first = dup.iloc[0]
        rows = df.loc[ids == first, "row"].tolist()
        raise RequestLogError(path, f"request_id {first!r} appears more than once (rows {rows})",
                              row=rows[1], field="request_id")
    df = df.copy()
    for r in df[df["ok"]].itertuples():
        why = _row_problem(r)
        if why:
            df.at[r.Index, "ok"] = False
            df.at[r.Index, "error"] = f"invalid: {why}"
    sends = df.loc[df["ok"], "t_send_ns"]
    if len(sends) > 2:
        mid = int(np.median(sends.to_numpy(dtype=np.int64)))
        far = sends[(sends - mid).abs() > MAX_REQUEST_NS]
        for idx, v in far.items():
            df.at[idx, "ok"] = False
            df.at[idx, "error"] = (
                f"invalid: t_send: the send at {int(v) / 1e9:.6f} s lies "
                f"{abs(int(v) - mid) / 86_400e9:,.1f} days from the log's median send "
                f"({mid / 1e9:.6f} s); one log spans less than a day (a time of 0, a wrong unit "
                "or another clock?)")
    return df


def _row_problem(r) -> str:
    """Return what makes a successful row unusable ("<field>: <what>"), or "" when it is fine."""
    for fld, v in (("t_send", r.t_send_ns), ("t_first_token", r.t_first_ns),
                   ("t_last_token", r.t_last_ns)):
        if pd.isna(v):
            return f"{fld}: missing value"
    send, first, last = int(r.t_send_ns), int(r.t_first_ns), int(r.t_last_ns)
    if first < send:
        return (f"t_first_token: first token at {first} ns is before the send at {send} ns "
                f"({(first - send) / 1e9:+.6f} s)")
    if first == send:
        return (f"t_first_token: first token at the send instant ({send} ns): a TTFT of 0 s is "
                "impossible (the first token needs at least one forward pass)")
    if last < first:
        return f"t_last_token: last token at {last} ns is before the first token at {first} ns"
    if last - send > MAX_REQUEST_NS:
        return (f"t_last_token: last token {(last - send) / 1e9:,.0f} s after the send: beyond a "
                "day, no request takes that long (a send time of 0, a wrong unit or another "
                "clock?)")
    for fld, v in (("prompt_tokens", r.prompt_tokens), ("output_tokens", r.output_tokens)):
        if not pd.isna(v) and int(v) > MAX_CONTEXT_TOKENS:
            return (f"{fld}: {int(v):,} tokens is beyond any model's context (at most "
                    f"{MAX_CONTEXT_TOKENS:,})")
    ch = r.chunk_times
    if ch is not None and len(ch):
        c = np.asarray(ch, dtype=np.int64)
        if len(c) > 1:
            d = np.diff(c)
            if (d < 0).any():
                k = int(np.argmax(d < 0)) + 1
                return (f"chunk_times: chunk {k} arrives before chunk {k - 1} (chunk times out "
                        "of order)")
        if int(c[0]) < send:
            return (f"chunk_times: the first chunk arrives {(send - int(c[0])) / 1e9:.6f} s "
                    "before the send")
        if int(c[-1]) - send > MAX_REQUEST_NS:
            return (f"chunk_times: the last chunk {(int(c[-1]) - send) / 1e9:,.0f} s after the "
                    "send: beyond a day")
        out = r.output_tokens
        if not pd.isna(out) and len(c) > max(int(out), 1) and not getattr(r, "check", ""):
            return (f"chunk_times: {len(c)} token-bearing chunks for {int(out)} output tokens "
                    "(a chunk carries at least one token)")
    return ""


#: A first ITL this many times the median of the others, with as many ITLs as output tokens,
#: marks a TTFT taken at a chunk without a token (vLLM issue 15106).
FIRST_ITL_RATIO = 10.0


def check_itls(ttft_s: float, itls_s: list[float], output_tokens: int | None,
               latency_s: float | None = None):
    """Check a vLLM-style (TTFT, ITL list, output tokens) triple against itself.

    A stream of n output tokens has its first token at TTFT and at most n - 1 later chunks, so
    at most n - 1 ITLs (fewer when a chunk carries several tokens). With n or more ITLs one entry
    is not a gap between two token chunks. Two known causes, told apart by the first ITL:

    - equal to the TTFT (within 1 us): the TTFT was appended to the ITLs too (vLLM issue 7242,
      ``benchmark_serving.py`` 2024; llmperf does it on purpose, "ITL includes TTFT"). Corrected:
      the ITLs without that first entry (the TTFT is right).
    - more than ``FIRST_ITL_RATIO`` x the median of the other ITLs: the TTFT was taken at a chunk
      that carried no token (a role-only delta, vLLM issue 15106), and the first ITL is the real
      wait for the first token. Corrected: TTFT + first ITL, the ITLs without that entry.

    A second check, by sums: with the E2E latency stored (``latency_s``, send to end of stream),
    TTFT + sum(ITLs) is the last chunk's arrival and cannot exceed it (1 ms allowed for float
    sums). A repeated TTFT breaks it by the TTFT; a TTFT at a non-token chunk keeps it.

    Returns ``(note, kind, corrected_ttft_s, corrected_itls_s)``, or ``None`` when the values
    agree (or cannot be checked: fewer than 2 ITLs or the output tokens unknown, and no
    latency). ``kind`` is "ttft-repeated", "ttft-at-non-token-chunk" (both corrected),
    "itl-count" or "itl-sum" (named, not corrected: no known cause matches).
    """
    over = ""
    if latency_s is not None and itls_s:
        total = float(ttft_s) + float(np.sum(itls_s))
        if total > latency_s + 1e-3:
            over = (f"; TTFT + sum of ITLs ({total:.6f} s) exceeds the stored E2E latency "
                    f"({latency_s:.6f} s) by {total - latency_s:.6f} s")
    if output_tokens is None or len(itls_s) < 2 or len(itls_s) < output_tokens:
        if over:
            return (over[2:] + ": the ITLs hold time that is not between two chunks; values "
                    "kept as stored", "itl-sum", None, None)
        return None
    first, rest = float(itls_s[0]), [float(x) for x in itls_s[1:]]
    med = float(np.median(rest))
    head = (f"{len(itls_s)} ITLs for {output_tokens} output tokens (at most "
            f"{max(output_tokens - 1, 0)} expected)")
    if abs(first - ttft_s) <= 1e-6:
        return (f"{head}{over}: the first ITL ({first:.6f} s) repeats the TTFT (the TTFT "
                "stored as an ITL too, vLLM issue 7242 / llmperf); corrected: that entry "
                "dropped", "ttft-repeated", ttft_s, rest)
    if med > 0 and first > FIRST_ITL_RATIO * med:
        return (f"{head}{over}, and the first ITL ({first:.6f} s) is {first / med:.0f}x the "
                f"median of the others ({med:.6f} s): the TTFT ({ttft_s:.6f} s) looks taken at "
                "a chunk without a token (vLLM issue 15106); corrected TTFT = TTFT + first ITL "
                f"= {ttft_s + first:.6f} s", "ttft-at-non-token-chunk", ttft_s + first, rest)
    return (f"{head}{over}: one ITL is not a gap between two token chunks; no known cause "
            "matches, values kept as stored", "itl-count", None, None)


#: Requests whose stored values fail a consistency check named one by one in the notes.
MAX_CHECK_NOTES = 5


def apply_fixes(log: RequestLog) -> RequestLog:
    """Return ``log`` with the corrected values of the requests whose stored values failed a
    consistency check (``check_itls``) used in place of the stored ones.

    Only requests with a derivable correction (column ``fix``) change: their ``t_first_ns``,
    ``t_last_ns`` and ``chunk_times`` become the corrected ones and ``flag`` says so
    ("corrected: <kind>"). A note counts them. Works before or after ``align``.
    """
    df = log.requests.copy()
    n = 0
    for idx, fx in df["fix"].items():
        if not fx or not df.at[idx, "ok"]:
            continue
        df.at[idx, "t_first_ns"] = fx["t_first_ns"]
        df.at[idx, "t_last_ns"] = fx["t_last_ns"]
        df.at[idx, "chunk_times"] = fx["chunk_times"]
        df.at[idx, "flag"] = _join_flag(df.at[idx, "flag"], f"corrected: {fx['kind']}")
        n += 1
    notes = list(log.notes)
    if n:
        notes.append(f"{n} request(s) use CORRECTED values (stored values failed a consistency "
                     "check; see column 'check'), not the values the tool stored")
    return replace(log, requests=df, notes=notes)
