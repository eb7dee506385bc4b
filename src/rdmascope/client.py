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
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

CLOCK = "CLOCK_MONOTONIC"


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
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def request(self, request_id: str | None = None, *, prompt_tokens: int | None = None,
                test: str | None = None, round: int | None = None) -> _RequestContext:
        """Return a context manager timing one request (send stamped on entry, row written on exit).

        ``request_id`` defaults to "<test>-r<round>-<n>" (unique within this writer).
        """
        with self._lock:
            n = self._n
            self._n += 1
        t = test if test is not None else self.test
        r = round if round is not None else self.round
        rid = request_id if request_id is not None else f"{t or 'req'}-r{r if r is not None else 0}-{n}"
        return _RequestContext(self, Request(str(rid), prompt_tokens, t, r, self._timer,
                                             self._keep_chunks))

    def write(self, row: dict[str, Any]) -> None:
        """Append one row (a dict in the native format) as a JSON line and flush it."""
        line = json.dumps(row, allow_nan=False) + "\n"
        with self._lock:
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
    last token precedes the first (the reader would refuse the file later).
    """
    if not error:
        if t_first_token < t_send:
            raise ValueError(f"t_first_token {t_first_token} is before t_send {t_send}")
        if t_last_token < t_first_token:
            raise ValueError(f"t_last_token {t_last_token} is before t_first_token "
                             f"{t_first_token}")
    row: dict[str, Any] = {"request_id": request_id, "t_send": t_send,
                           "t_first_token": t_first_token, "t_last_token": t_last_token,
                           "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
                           "test": test, "round": round, "clock": CLOCK}
    if chunk_times:
        row["chunk_times"] = list(chunk_times)
    if error:
        row["error"] = error
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, allow_nan=False) + "\n")
    return row
