"""The report's content model and its tables: figures, tables, sections and verdicts as plain
data, column headers with units, cell formatting and CSV names (no analysis here)."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

# ----------------------------------------------------------------------------------------------
# Content model
# ----------------------------------------------------------------------------------------------


@dataclass
class ReportFigure:
    """One figure of the report: a file-safe ``name``, a heading, the matplotlib Figure, a caption."""

    name: str
    title: str
    figure: Any
    caption: str = ""


@dataclass
class ReportTable:
    """One table: a DataFrame shown as is (its index is dropped unless named), optional title/note.

    ``headers`` overrides the derived header of a column ({column: header text}). ``name``: what
    the table holds, file-safe (e.g. "per-request", "peaks"), the second part of its CSV name
    (see ``csv_name``).
    """

    frame: pd.DataFrame
    title: str = ""
    note: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    name: str = ""


@dataclass
class ReportSection:
    """A titled group of tables, with an optional explanatory note.

    ``name``: the first part of its tables' CSV names (the configuration, e.g. "200-gb-s");
    None (default) derives it from the title; "" leaves it out (e.g. ``comparison.csv``).
    ``items``: short points shown as a list under the note (e.g. the comparison's setup: a
    1,400-character paragraph is not read), each (label, text); label may be "".
    """

    title: str
    tables: list[ReportTable] = field(default_factory=list)
    note: str = ""
    name: str | None = None
    items: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Verdict:
    """A one-line conclusion shown near the top: ``status`` is "ok", "fail", "warn" or "info"."""

    headline: str
    status: str = "info"
    text: str = ""


#: Verdict.status of an emulation check -> its verdict word
STATUS_VERDICT = {"ok": "PASS", "fail": "FAIL", "warn": "CANNOT JUDGE", "info": "PASS"}


@dataclass
class ReportContent:
    """Everything a report shows, already computed."""

    title: str
    subtitle: str = ""
    cards: list[tuple[str, str, str]] = field(default_factory=list)  # (label, value, detail)
    verdicts: list[Verdict] = field(default_factory=list)
    #: the verdict words ("PASS", "FAIL", "CANNOT JUDGE") of the checks the report judges (the
    #: emulation check per configuration): ``rdmascope report`` exits with the worst
    judged: list[str] = field(default_factory=list)
    figures: list[ReportFigure] = field(default_factory=list)
    sections: list[ReportSection] = field(default_factory=list)
    captures: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    #: zoomable timelines (plotly): (name, title, html div, caption)
    timelines: list[tuple[str, str, str, str]] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# Formatting
# ----------------------------------------------------------------------------------------------

#: Words written in capitals or with their field spelling in headers.
_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "tp": "TP", "id": "ID", "rx": "rx",
          "tx": "tx", "e2e": "E2E", "gbps": "Gb/s", "cv": "CV", "p50": "p50", "p99": "p99"}
#: (suffix, unit shown, factor applied to the values)
_UNIT_SUFFIXES = (
    ("_bytes", "MB", 1e-6),
    ("_gbps", "Gb/s", 1.0),
    ("_mb", "MB", 1.0),
    ("_ms", "ms", 1.0),
    ("_us", "us", 1.0),
    ("_s", "s", 1.0),
    ("_pct", "%", 1.0),
    ("_tps", "tokens/s", 1.0),
)
#: Exact headers for common fields whose name alone reads badly.
_HEADERS = {
    "request_id": "request",
    "prompt_tokens": "prompt tokens",
    "output_tokens": "output tokens",
    "decode_speed_tps": "decode speed (tokens/s)",
    "bytes": "bytes (MB)",
    "width": "window",
    "n": "count",
    # NaN windows are windows whose bytes are unknown (unreadable, reset, saturated, implausible)
    "nan_windows": "unknown windows",
    "n_nan_windows": "unknown windows",
    "peak_1ms_gbps": "1 ms peak (Gb/s)",
    # the conserving split (each byte to one request's prefill or decode, or to idle/other) and
    # the window view (all traffic in the request's or round's window, shared with overlapping
    # requests: at concurrency c about c times the wire), named apart
    "prefill_tx_split_bytes": "prefill tx (MB, split)",
    "decode_tx_split_bytes": "decode tx (MB, split)",
    "prefill_rx_split_bytes": "prefill rx (MB, split)",
    "decode_rx_split_bytes": "decode rx (MB, split)",
    "prefill_per_token_split_bytes": "prefill per token (MB, split)",
    "prefill_tx_split_known_bytes": "prefill tx (MB, split, known part)",
    "decode_tx_split_known_bytes": "decode tx (MB, split, known part)",
    "prefill_tx_bytes": "prefill tx (MB, in window, shared)",
    "decode_tx_bytes": "decode tx (MB, in window, shared)",
    "prefill_rx_bytes": "prefill rx (MB, in window, shared)",
    "decode_rx_bytes": "decode rx (MB, in window, shared)",
    "prefill_per_token_bytes": "prefill per token (MB, in window, shared)",
}
#: Byte columns among ``_HEADERS`` (shown in MB).
_HEADER_BYTES = {k for k in _HEADERS if k.endswith("_bytes")} | {"bytes"}


def column_header(name: str) -> tuple[str, float]:
    """Return (header text, value factor) for a field name, from its unit suffix.

    ``ttft_s`` -> ("TTFT (s)", 1), ``prefill_bytes`` -> ("prefill (MB)", 1e-6),
    ``peak_gbps`` -> ("peak (Gb/s)", 1). Unknown names get spaces for underscores.
    """
    name = str(name)
    if name in _HEADERS:
        return _HEADERS[name], (1e-6 if name in _HEADER_BYTES else 1.0)
    unit, factor, stem = None, 1.0, name
    for suffix, u, f in _UNIT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            unit, factor, stem = u, f, name[: -len(suffix)]
            break
    words = [_WORDS.get(w.lower(), w) for w in re.split(r"_+", stem) if w]
    text = " ".join(words)
    return (f"{text} ({unit})" if unit else text), factor


def _decimals(values: np.ndarray) -> int:
    finite = np.abs(values[np.isfinite(values)])
    if finite.size == 0:
        return 2
    if np.all(finite == np.round(finite)) and finite.max() >= 10:
        return 0
    top = float(np.median(finite[finite > 0])) if np.any(finite > 0) else 0.0
    if top >= 100:
        return 0
    if top >= 10:
        return 1
    if top >= 1:
        return 2
    return 3


def format_cell(v: Any, decimals: int) -> tuple[str, bool]:
    """Format one value; return (text, numeric?)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT:
        return "–", True
    if isinstance(v, (bool, np.bool_)):
        return ("yes" if v else "no"), False
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}", True
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(float(v)):
            return str(v), True
        text = f"{float(v):,.{decimals}f}"
        if text.startswith("-") and not text.strip("-0.,"):
            text = text[1:]  # a tiny negative rounds to zero: never "-0.000"
        return text, True
    if isinstance(v, (list, tuple, np.ndarray)):
        return ", ".join(str(x) for x in v), False
    return str(v), False


def format_table(frame: pd.DataFrame, headers: Mapping[str, str] | None = None
                 ) -> dict[str, list]:
    """Format a DataFrame for the HTML table: headers with units, values as display strings.

    A named index becomes the first column. Byte columns are shown in MB; numbers of a column
    share one number of decimals chosen from its typical magnitude; integers get thousands
    separators; NaN shows as "–". Returns {"headers": [{"text", "cls"}], "rows": [[{"text",
    "cls"}]]} with cls "num" on numeric cells (right-aligned).
    """
    out = format_table_lazy(frame, headers)
    out["rows"] = list(out["rows"])
    return out


def format_table_lazy(frame: pd.DataFrame, headers: Mapping[str, str] | None = None
                  ) -> dict[str, Any]:
    """``format_table`` with "rows" a generator: each row's cells made as the page is written
    (``render_report``), so a table of many thousand rows is never held as cells."""
    headers = dict(headers or {})
    df = frame.reset_index() if frame.index.name is not None else frame
    out_headers, columns = [], []
    for col in df.columns:
        text, factor = column_header(col)
        text = headers.get(col, text)
        s = df[col]
        numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
        if numeric and factor != 1.0:
            s = s.astype(float) * factor
        dec = _decimals(s.to_numpy(dtype=float)) if pd.api.types.is_float_dtype(s) else 0
        columns.append((s.tolist(), dec))
        out_headers.append({"text": text, "cls": "num" if numeric else ""})

    def rows():  # one row's cells at a time: a table of 18,000 requests is never held as cells
        num = [h["cls"] == "num" for h in out_headers]
        for i in range(len(df)):
            row = []
            for (values, dec), is_num in zip(columns, num, strict=True):
                text, numeric = format_cell(values[i], dec)
                row.append({"text": text, "cls": "num" if numeric and is_num else ""})
            yield row

    return {"headers": out_headers, "rows": rows()}


def html_anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def csv_name(section: ReportSection, table: ReportTable, index: int) -> str:
    """Return the CSV file name of ``table`` (the ``index``-th of ``section``): "<sect>_<tab>.csv".

    <sect> is ``section.name`` (default: the title made file-safe, e.g. "200 Gb/s" ->
    "200-gb-s"), <tab> is ``table.name`` made file-safe; either may be empty (then no "_"). A
    table without a name in a section of several tables is "table-<index + 1>". Uniqueness
    across the report is the caller's business (``render_report`` appends "-2", "-3").
    """
    sect = html_anchor(section.title) if section.name is None else slug(section.name)
    tab = slug(table.name) or ("" if len(section.tables) == 1 else f"table-{index + 1}")
    return "_".join(p for p in (sect, tab) if p) or "table"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as its CSV holds it: a named index becomes the first column, no other index."""
    return frame.reset_index() if frame.index.name is not None else frame


def figure_png(fig, dpi: int = 110) -> bytes:
    if not hasattr(fig, "savefig"):  # an Axes
        fig = fig.get_figure(root=True) if hasattr(fig, "get_figure") else fig.figure
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------
