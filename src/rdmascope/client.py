"""Write rdmascope's native request log from a benchmark script (standard library only).

The counters and the requests must be timestamped on the same clock: the sampler stamps its
readings with ``time.perf_counter_ns()``, which on Linux is CLOCK_MONOTONIC, shared by every
process of the host. This helper stamps send, first token and last token with
``time.perf_counter()`` on the same node, so ``rdmascope attribute`` aligns the two exactly.

Usage (one JSON line per request, appended as each request finishes)::

    from rdmascope.client import RequestLogWriter

    with RequestLogWriter("requests.jsonl", test="P2", round=1) as log:
        with log.request(prompt_tokens=8192) as r:      # t_send taken here
            for chunk in stream:                         # each streamed chunk
                r.chunk()                                # first call = first token
            r.output_tokens = usage.completion_tokens    # from the server's usage, not chunks

A request that raises inside its ``with`` block is written with ``error`` set (and the exception
re-raised), so failed requests are counted, never silently lost. Rows carry ``request_id,
t_send, t_first_token, t_last_token`` (float seconds), ``prompt_tokens, output_tokens, test,
round, clock`` and, when chunks were marked, ``chunk_times`` (seconds).

Every row is checked before it is written (``check_row``): a value rdmascope's reader would
refuse the whole file for (a missing or negative ``prompt_tokens``, a ``request_id`` written
twice, a time that is not a finite number of seconds ...) raises ``ValueError`` naming the
request and the field, and that row is not written, so the file stays readable.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

CLOCK = "CLOCK_MONOTONIC"

#: a time in seconds must fit the reader's int64 nanoseconds (~292 years)
_MAX_ABS_S = (2**63 - 1) / 1e9

_TIMES = ("t_send", "t_first_token", "t_last_token")


def _is_count(v: Any) -> bool:
    """A non-negative whole number, as the reader takes one (8192 or 8192.0, not True)."""
    return ((_is_int(v) or (isinstance(v, float) and math.isfinite(v) and v.is_integer()))
            and v >= 0)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_row(row: dict[str, Any]) -> None:
    """Raise ``ValueError`` ("request 'ID': FIELD: expected ..., got ...") when ``row`` holds a
    value for which rdmascope's reader would refuse the whole log.

    A successful row (no ``error``) needs a non-empty ``request_id``; ``t_send``,
    ``t_first_token``, ``t_last_token`` as finite numbers of seconds (within int64 ns);
    ``prompt_tokens`` and ``output_tokens`` as non-negative integers. A failed row may leave
    times and token counts None, but a value given must be one of those. ``round``: None or a
    non-negative integer; ``chunk_times``: None or a list of finite numbers of seconds. Which
    values make only that row invalid (a first token before the send) is the reader's call.
    """
    rid = row.get("request_id")
    who = f"request {rid!r}"
    if rid is None or str(rid).strip() == "":
        raise ValueError(f"{who}: request_id: expected a non-empty id, got {rid!r}")
    ok = not row.get("error")

    def need(name: str, what: str, good) -> None:
        v = row.get(name)
        if v is None and not ok:
            return
        if v is None or not good(v):
            hint = (" (pass prompt_tokens= to log.request() or set r.prompt_tokens)"
                    if name == "prompt_tokens" and v is None else "")
            raise ValueError(f"{who}: {name}: expected {what}, got {v!r}{hint}")

    for name in _TIMES:
        need(name, "a finite number of seconds", _is_seconds)
    for name in ("prompt_tokens", "output_tokens"):
        need(name, "a non-negative integer (tokens)", _is_count)
    rnd = row.get("round")
    if rnd is not None and not _is_count(rnd):
        raise ValueError(f"{who}: round: expected None or a non-negative integer, got {rnd!r}")
    chunks = row.get("chunk_times")
    if chunks is not None and not (isinstance(chunks, list | tuple)
                                   and all(_is_seconds(c) for c in chunks)):
        raise ValueError(f"{who}: chunk_times: expected a list of finite numbers of seconds, "
                         f"got {chunks!r:.80}")


def _is_seconds(v: Any) -> bool:
    """A finite number (not a bool) of seconds the reader can hold in int64 nanoseconds."""
    return (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            and abs(v) <= _MAX_ABS_S)


class Request:
    """One request being timed. Call ``chunk()`` when each streamed chunk arrives.

    Attributes (seconds on ``time.perf_counter``): ``t_send``, ``t_first_token`` (the first
    chunk), ``t_last_token`` (the latest chunk), ``chunk_times``; ``output_tokens`` (set it from the
    server's usage; under speculative decoding a chunk carries several tokens, so the default, the
    sum of the ``tokens`` given to ``chunk``, is only right when each chunk's count is known);
    ``error`` (str, "" when ok).
    """

    def __init__(self, request_id: str, prompt_tokens: int | None, test: str | None,
                 round: int | None, timer: Callable[[], float], keep_chunks: bool):
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.test = test
        self.round = round
        self._timer = timer
        self._keep_chunks = keep_chunks
        self.t_send: float | None = None
        self.t_first_token: float | None = None
        self.t_last_token: float | None = None
        self.chunk_times: list[float] = []
        self._counted_tokens = 0
        self.output_tokens: int | None = None
        self.error = ""

    def send(self) -> float:
        """Stamp the send time now (done automatically on entering the ``with`` block)."""
        self.t_send = self._timer()
        return self.t_send

    def chunk(self, tokens: int = 1) -> float:
        """Stamp the arrival of a streamed chunk carrying ``tokens`` tokens; return its time."""
        t = self._timer()
        if self.t_first_token is None:
            self.t_first_token = t
        self.t_last_token = t
        self._counted_tokens += tokens
        if self._keep_chunks:
            self.chunk_times.append(t)
        return t

    def record(self) -> dict[str, Any]:
        """Return the native-format row for this request."""
        out_tokens = self.output_tokens if self.output_tokens is not None else \
            self._counted_tokens
        row: dict[str, Any] = {
            "request_id": self.request_id,
            "t_send": self.t_send,
            "t_first_token": self.t_first_token,
            "t_last_token": self.t_last_token,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": out_tokens,
            "test": self.test,
            "round": self.round,
            "clock": CLOCK,
        }
        if self.error:
            row["error"] = self.error
        elif self.t_first_token is None:
            row["error"] = "no token received"
        if self._keep_chunks and self.chunk_times:
            row["chunk_times"] = self.chunk_times
        return row


class _RequestContext:
    def __init__(self, writer: RequestLogWriter, req: Request):
        self._writer = writer
        self._req = req

    def __enter__(self) -> Request:
        self._req.send()
        return self._req

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            self._req.error = f"{exc_type.__name__}: {exc}"
        self._writer.write(self._req.record())
        return False


class RequestLogWriter:
    """Append native request-log rows (JSON lines) to ``path``; thread-safe.

    ``test``/``round`` label every request (overridable per request). ``timer`` is injectable for
    tests (default ``time.perf_counter``, CLOCK_MONOTONIC on Linux); ``keep_chunks`` stores each
    chunk's arrival (ITL). Each row is written with one ``write`` and flushed, so a crash loses
    at most the request in flight. Raises ``OSError`` when the file cannot be opened.
    """

    def __init__(self, path: str | os.PathLike, *, test: str | None = None,
                 round: int | None = None, timer: Callable[[], float] = time.perf_counter,
                 keep_chunks: bool = True):
        self.path = os.fspath(path)
        self.test = test
        self.round = round
        self._timer = timer
        self._keep_chunks = keep_chunks
        self._lock = threading.Lock()
        self._n = 0
        self._ids: set[str] = set()  # request_ids written (the reader refuses one twice)
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def request(self, request_id: str | None = None, *, prompt_tokens: int | None = None,
                test: str | None = None, round: int | None = None) -> _RequestContext:
        """Return a context manager timing one request (send stamped on entry, row written on exit).

        ``request_id`` defaults to "<test>-r<round>-<n>" (unique within this writer).
        Raises ``ValueError`` at once for a ``prompt_tokens`` or ``round`` given that is not a
        non-negative integer, or a ``request_id`` this writer already wrote; the whole row is
        checked again when the block ends (``write``).
        """
        for name, v in (("prompt_tokens", prompt_tokens), ("round", round)):
            if v is not None and not _is_count(v):
                raise ValueError(f"{name}: expected a non-negative integer, got {v!r}")
        if request_id is not None and str(request_id) in self._ids:
            raise ValueError(f"request_id {str(request_id)!r}: already written to {self.path} "
                             "(the reader refuses a log with an id twice)")
        with self._lock:
            n = self._n
            self._n += 1
        t = test if test is not None else self.test
        r = round if round is not None else self.round
        rid = request_id if request_id is not None else f"{t or 'req'}-r{r if r is not None else 0}-{n}"
        return _RequestContext(self, Request(str(rid), prompt_tokens, t, r, self._timer,
                                             self._keep_chunks))

    def write(self, row: dict[str, Any]) -> None:
        """Append one row (a dict in the native format) as a JSON line and flush it.

        Raises ``ValueError`` naming the request and field, and writes nothing, when the row
        holds a value the reader would refuse the log for (``check_row``) or a ``request_id``
        this writer already wrote."""
        check_row(row)
        line = json.dumps(row, allow_nan=False) + "\n"
        rid = str(row["request_id"])
        with self._lock:
            if rid in self._ids:
                raise ValueError(f"request {rid!r}: request_id: already written to {self.path} "
                                 "(the reader refuses a log with an id twice)")
            self._ids.add(rid)
            self._f.write(line)
            self._f.flush()

    def close(self) -> None:
        """Close the file (rows are already flushed)."""
        with self._lock:
            if not self._f.closed:
                self._f.close()

    def __enter__(self) -> RequestLogWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def record_request(path: str | os.PathLike, *, request_id: str, t_send: float,
                   t_first_token: float, t_last_token: float, prompt_tokens: int,
                   output_tokens: int, test: str | None = None, round: int | None = None,
                   chunk_times: list[float] | None = None, error: str = "") -> dict[str, Any]:
    """Append one request with times you took yourself (``time.perf_counter()`` seconds).

    Returns the row written. Raises ``ValueError`` when the first token precedes the send or the
    last token precedes the first, or a field holds a value the reader would refuse the log for
    (``check_row``); nothing is written then.
    """
    row: dict[str, Any] = {"request_id": request_id, "t_send": t_send,
                           "t_first_token": t_first_token, "t_last_token": t_last_token,
                           "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
                           "test": test, "round": round, "clock": CLOCK}
    if chunk_times:
        row["chunk_times"] = list(chunk_times)
    if error:
        row["error"] = error
    check_row(row)
    if not error:
        if t_first_token < t_send:
            raise ValueError(f"t_first_token {t_first_token} is before t_send {t_send}")
        if t_last_token < t_first_token:
            raise ValueError(f"t_last_token {t_last_token} is before t_first_token "
                             f"{t_first_token}")
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, allow_nan=False) + "\n")
    return row
