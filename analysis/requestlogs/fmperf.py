"""fmperf (fmperf-project/fmperf) load-generator results: one record per streamed response.

Derived from the writer, ``fmperf/loadgen/run.py`` and ``fmperf/loadgen/sweep.py`` at
8d85bc3d145c42577c980358b198eb10e3c7f6be (metrics as ``fmperf/utils/Parsing.py``
``parse_results`` at the same commit computes them). Two layouts:

- ``run()``'s ``RESULTS_FILENAME`` (and ``result_sweep_u<N>.json``): ``{"results": [...],
  "energy": {...}}``;
- ``sweep.py``'s ``RESULTS_ALL_FILENAME`` (and a worker's ``results_wid<N>``): the bare list of
  records, several ``exp_num_users`` values in one sweep file.

Each record is one response event of one request: ``worker_idx``, ``request_idx`` (per worker),
``response_idx`` (0, 1, ... within the request), ``timestamp`` (``time.time_ns()``:
CLOCK_REALTIME ns, taken when the event arrived), ``duration_ms`` (since the previous event of
the request; for ``response_idx`` 0 since the request was sent: the writer sets ``t0 = t`` after
every event), ``n_tokens`` (tokens the event carried; the vLLM target writes one record per
token, a chunk's tokens sharing its timestamp with ``duration_ms`` 0; the TGIS target one per
message with the ``generatedTokenCount`` delta), ``ok`` / ``error`` (an event that failed:
``ok`` false, ``error`` the exception text; the stream's normal end is not written),
``exclude`` (the event came after the experiment's duration + grace period; ``parse_results``
drops such events and counts their requests as ``n_exclude``), ``exp_num_users`` (the
concurrency), ``exp_duration``, ``sample_idx``, ``response``, ``consistent``.

One request = the records of one (``exp_num_users``, ``worker_idx``, ``request_idx``): send =
first event's ``timestamp`` - its ``duration_ms``; first token = the first event carrying
tokens; chunks = the distinct times of token-bearing events; last token = the last of them;
output tokens = the sum of ``n_tokens``. fmperf writes no prompt token count (unknown). A
request with a failed event is failed with its error; one with an ``exclude`` event ran past
the experiment and is kept out as fmperf keeps it out (key ``outside``, named). Several
``exp_num_users`` in one file become tests ("concurrency <N>").
"""

from __future__ import annotations

from pathlib import Path

from .common import (
    CLOCK_REALTIME,
    RequestLogError,
    _int,
    _load_json,
    _num,
    _record,
    _type_name,
)

#: Keys that tell an fmperf response record apart.
KEYS = ("worker_idx", "request_idx", "response_idx", "duration_ms", "timestamp", "n_tokens")

SOURCE = "tool field n_tokens (fmperf: summed over the request's response records)"


def looks_like(d) -> bool:
    """True for one fmperf response record."""
    return isinstance(d, dict) and all(k in d for k in KEYS)


def looks_like_file(whole) -> bool:
    """True for either fmperf layout (``{"results": [...]}`` or the bare list)."""
    if isinstance(whole, dict):
        whole = whole.get("results")
    if not isinstance(whole, list):
        return False
    first = next((x for x in whole if isinstance(x, dict)), None)
    return looks_like(first)


def _bool(path, row, fld, v, default=None) -> bool:
    if v is None and default is not None:
        return default
    if not isinstance(v, bool):
        raise RequestLogError(path, f"expected true or false, got {_type_name(v)}", row=row,
                              field=fld)
    return v


def read(path: Path, text: str):
    whole = _load_json(path, text, object)
    if isinstance(whole, dict):
        rows = whole.get("results")
        if not isinstance(rows, list):
            raise RequestLogError(path, f"expected a JSON list, got {_type_name(rows)}",
                                  field="results")
    elif isinstance(whole, list):
        rows = whole
    else:
        raise RequestLogError(path, f"expected a JSON object or list, got {_type_name(whole)}")
    groups: dict[tuple[int, int, int], list[tuple[int, dict]]] = {}
    for pos, r in enumerate(rows, start=1):
        if not isinstance(r, dict):
            raise RequestLogError(path, f"expected a response record (JSON object), got "
                                        f"{_type_name(r)}", row=pos)
        for k in KEYS:
            if k not in r:
                raise RequestLogError(path, "missing (required)", row=pos, field=k)
        users = _int(path, pos, "exp_num_users", r.get("exp_num_users"))
        key = (users if users is not None else -1,
               _int(path, pos, "worker_idx", r["worker_idx"], allow_none=False),
               _int(path, pos, "request_idx", r["request_idx"], allow_none=False))
        groups.setdefault(key, []).append((pos, r))
    n_users = len({k[0] for k in groups})
    records = []
    for (users, wid, ridx), evs in groups.items():
        records.append(_request(path, users, wid, ridx, evs, n_users > 1))
    return records, CLOCK_REALTIME, []


def _request(path, users, wid, ridx, evs, label: bool) -> dict:
    rid = f"w{wid}-r{ridx}" if not label else f"u{users}-w{wid}-r{ridx}"
    test = f"concurrency {users}" if label else None
    parsed = []
    for pos, r in evs:
        parsed.append((_int(path, pos, "response_idx", r["response_idx"], allow_none=False),
                       pos,
                       _int(path, pos, "timestamp", r["timestamp"], allow_none=False),
                       _num(path, pos, "duration_ms", r["duration_ms"]),
                       _int(path, pos, "n_tokens", r["n_tokens"], allow_none=False),
                       _bool(path, pos, "ok", r.get("ok")),
                       _bool(path, pos, "exclude", r.get("exclude"), default=False),
                       r.get("error")))
    parsed.sort()
    idx = [p[0] for p in parsed]
    first_pos = min(p[1] for p in parsed)

    def failed(why: str, output=None) -> dict:
        return _record(rid, t_send, None, None, None, output, test=test, ok=False, error=why,
                       row=first_pos, token_source=SOURCE)

    ts0, dur0 = parsed[0][2:4]
    t_send = ts0 - int(round(dur0 * 1e6))
    if idx != list(range(len(idx))):
        dup = next((i for i in idx if idx.count(i) > 1), None)
        return failed("invalid: response_idx: " + (
            f"{dup} appears more than once" if dup is not None else
            f"records {idx[:6]}{'...' if len(idx) > 6 else ''} are not 0, 1, 2, ... (a record "
            "is missing)"))
    bad = next((p for p in parsed if not p[5]), None)
    out = sum(p[4] for p in parsed if p[5])
    if bad is not None:
        err = bad[7] if isinstance(bad[7], str) and bad[7] else "failed response (ok false)"
        return failed(f"{err} (row {bad[1]})", out)
    tok = [p for p in parsed if p[4] > 0]
    if not tok:
        return failed("no response record carried a token (n_tokens 0)", out)
    chunks: list[int] = []
    for p in tok:
        if not chunks or p[2] != chunks[-1]:
            chunks.append(p[2])
    rec = _record(rid, t_send, chunks[0], chunks[-1], None, out, test=test, chunks=chunks,
                  row=first_pos, token_source=SOURCE)
    if any(p[6] for p in parsed):
        rec["outside"] = ("fmperf: ran past the experiment's duration + grace period "
                          "(exclude), as fmperf keeps it out")
    return rec
