"""JSON text walked without building it whole: a sequence of top-level values (appended runs), and
a large object's keys and requests one at a time (genai-perf)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .common import RequestLogError, cut_last_line


def _json_sequence(path: Path, text: str, notes: list[str] | None = None
                   ) -> list[tuple[int, Any]]:
    """Return (line, value) of every top-level JSON value in ``text``, one after the other.

    vLLM ``bench serve --append-result`` writes a newline and the next result object after the
    previous one, SGLang ``bench_serving`` appends one line per run: both are a sequence of JSON
    objects. Raises ``RequestLogError`` naming the line of malformed JSON; with ``notes``, a
    last value the file ends inside (the failure on its last line, no newline after it, values
    read before it: a benchmark killed while appending its run) is skipped and said there.
    """
    dec = json.JSONDecoder()
    out, pos = [], 0
    line, counted = 1, 0  # lines counted up to ``counted`` (linear: never from the start again)
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            return out
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            v, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            at = line + text.count("\n", pos, exc.pos)
            if notes is not None and out and "\n" not in text[exc.pos:] \
                    and not text.endswith(("\n", "\r")):
                notes.append(cut_last_line(path, at, "run", len(out)))
                return out
            raise RequestLogError(path, f"malformed JSON ({exc.msg}, line {at}) in the value "
                                        f"starting on line {line}", row=line) from exc
        out.append((line, v))
        pos = end


#: A JSON text above this many characters is walked request by request where its layout
#: allows (genai-perf): one request's objects at a time instead of the whole file's.
LAZY_JSON_CHARS = 4_000_000


_WS_RE = re.compile(r"[ \t\n\r]*")


_DECODER = json.JSONDecoder()


class _NotLazy(Exception):
    """The text is not of the shape the request-by-request walk expects: read it whole."""


def _ws(text: str, pos: int) -> int:
    return _WS_RE.match(text, pos).end()


def _walk(text: str, pos: int, open_: str, on_item) -> int:
    """Walk the JSON object ('{') or array ('[') at ``text[pos]``: ``on_item(key, value_pos)``
    (key None in an array) returns the end of each value. Returns the end of the container.
    Raises ``_NotLazy`` on anything unexpected (the caller then reads the text whole)."""
    close = "}" if open_ == "{" else "]"
    pos = _ws(text, pos)
    if text[pos:pos + 1] != open_:
        raise _NotLazy
    pos = _ws(text, pos + 1)
    if text[pos:pos + 1] == close:
        return pos + 1
    while True:
        key = None
        if open_ == "{":
            if text[pos:pos + 1] != '"':
                raise _NotLazy
            try:
                key, pos = json.decoder.scanstring(text, pos + 1)
            except json.JSONDecodeError as exc:
                raise _NotLazy from exc
            pos = _ws(text, pos)
            if text[pos:pos + 1] != ":":
                raise _NotLazy
            pos = _ws(text, pos + 1)
        pos = _ws(text, on_item(key, pos))
        c = text[pos:pos + 1]
        if c == ",":
            pos = _ws(text, pos + 1)
        elif c == close:
            return pos + 1
        else:
            raise _NotLazy


def _skip(text: str, pos: int, depth: int = 0) -> int:
    """The end of the JSON value at ``text[pos]``; containers down to ``depth`` levels are
    walked, so only values below them are ever built (one at a time)."""
    c = text[pos:pos + 1]
    if depth > 0 and c in "{[" and c:
        return _walk(text, pos, c, lambda _k, p: _skip(text, p, depth - 1))
    try:
        return _DECODER.raw_decode(text, pos)[1]
    except json.JSONDecodeError as exc:
        raise _NotLazy from exc


#: Top-level keys of the result files read whole (vLLM / SGLang, guidellm): the walk stops there.
_WHOLE_KEYS = frozenset({"ttfts", "details", "mean_ttft_ms", "benchmarks"})


def _top_keys(s: str) -> list[str] | None:
    """The keys of the JSON object ``s`` (``experiments`` walked down to one request at a time,
    other values decoded one by one), or None when ``s`` is not one well-formed object or has
    a key of a format read whole (``_WHOLE_KEYS``: the walk stops at once)."""
    keys: list[str] = []

    def member(k, p):
        if k in _WHOLE_KEYS:
            raise _NotLazy
        keys.append(k)
        return _skip(s, p, 3 if k == "experiments" else 0)

    try:
        end = _walk(s, 0, "{", member)
    except (_NotLazy, RecursionError):
        return None
    return keys if _ws(s, end) == len(s) else None
