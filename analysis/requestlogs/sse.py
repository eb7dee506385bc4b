"""Server-sent events of an OpenAI-style stream: which ones carry tokens (``classify_event``) and
how HTTP reads split into events (``sse_events``)."""

from __future__ import annotations

import json
from typing import Any

#: Kinds of SSE event ``sse_events`` tells apart; only "answer" and "reasoning" carry tokens.
EVENT_KINDS = ("answer", "reasoning", "role", "empty", "usage", "finish", "keep-alive", "done",
               "error", "other")


def classify_event(data: str | None) -> tuple[str, Any]:
    """Classify the data of one server-sent event of an OpenAI-style stream.

    Returns ``(kind, payload)``; kind is one of ``EVENT_KINDS``:

    - "answer": a choice with non-empty ``delta.content`` (chat), ``text`` (completions),
      ``delta.tool_calls`` or Triton's ``text_output``;
    - "reasoning": only ``delta.reasoning_content`` / ``delta.reasoning`` non-empty
      (reasoning models; vLLM and SGLang reasoning parsers);
    - "role": a delta with a role and no content (the first chunk of a chat stream);
    - "usage": ``choices`` empty with a ``usage`` record; "finish": only a ``finish_reason``;
      "empty": a choice whose content is "" or null; "keep-alive": an event without data (an
      SSE comment); "done": ``[DONE]``; "error": an object with ``error`` (an in-band error
      event, payload = its message); "other": data that is not JSON (payload = the text).

    Only "answer" and "reasoning" events carry tokens: every other kind is never a first token
    and never an ITL.
    """
    if data is None:
        return "keep-alive", None
    s = data.strip()
    if s == "[DONE]":
        return "done", None
    try:
        d = json.loads(s)
    except json.JSONDecodeError:
        return "other", s
    if not isinstance(d, dict):
        return "other", d
    if d.get("error") not in (None, "", {}):
        err = d["error"]
        msg = (err.get("message") or err.get("type") or str(err)) if isinstance(err, dict) \
            else str(err)
        return "error", msg
    if "text_output" in d:
        return ("answer" if d.get("text_output") else "empty"), d
    choices = d.get("choices")
    if not isinstance(choices, list) or not choices:
        return ("usage" if isinstance(d.get("usage"), dict) else "empty"), d
    kind = "empty"
    for c in choices:
        if not isinstance(c, dict):
            continue
        delta = c.get("delta") if isinstance(c.get("delta"), dict) else {}
        if delta.get("content") or c.get("text") or delta.get("tool_calls"):
            return "answer", d
        if delta.get("reasoning_content") or delta.get("reasoning"):
            kind = "reasoning"
        elif kind == "empty" and delta.get("role") and not delta.get("content"):
            kind = "role"
        elif kind == "empty" and c.get("finish_reason"):
            kind = "finish"
    return kind, d


def _event_data(block: str) -> str | None:
    """The data of one SSE event block (``data:`` lines joined by newlines), None without."""
    lines = [ln for ln in block.replace("\r\n", "\n").split("\n")]
    data = [ln[5:][1:] if ln[5:].startswith(" ") else ln[5:] for ln in lines
            if ln.startswith("data:")]
    if not data:
        # an unframed JSON object (some tools store the payload without "data:")
        st = block.strip()
        return st if st.startswith("{") or st == "[DONE]" else None
    return "\n".join(data)


def _complete(block: str) -> bool:
    """Whether an unterminated block already holds a whole event (its data parses)."""
    d = _event_data(block)
    if d is None:
        return block.strip().startswith(":")
    if d.strip() == "[DONE]":
        return True
    try:
        json.loads(d)
    except json.JSONDecodeError:
        return False
    return True


def sse_events(reads: list[tuple[int, str]]) -> list[tuple[int, str, Any]]:
    """Split the HTTP reads of one stream into SSE events: ``[(t_ns, kind, payload), ...]``.

    ``reads``: (arrival time ns, text of that read). Events end at a blank line (SSE framing).
    One event split over two reads is one event, at the time of the read that completes it;
    several events merged into one read are several events, all at that read's time. A read
    without the closing blank line still closes an event whose data already parses (tools
    store one event per response without the separator). ``kind`` as in ``classify_event``.
    """
    out: list[tuple[int, str, Any]] = []
    buf = ""
    for t, text in reads:
        buf += text.replace("\r\n", "\n")
        parts = buf.split("\n\n")
        buf = parts.pop()
        for block in parts:
            if block.strip():
                out.append((t, *classify_event(_event_data(block))))
        if buf.strip() and _complete(buf):
            out.append((t, *classify_event(_event_data(buf))))
            buf = ""
    if buf.strip():
        out.append((reads[-1][0], "other", buf.strip()))
    return out
