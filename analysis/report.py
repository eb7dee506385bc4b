"""Write the self-contained HTML report: figures first, then clean tables with units in headers.

Two layers:

- :func:`render_report` turns a :class:`ReportContent` (figures, tables, verdicts, capture
  metadata: plain data, no analysis) into ``DIR/report.html`` with every figure embedded as a
  base64 PNG, plus the figures as files (``DIR/figures/*.png``) and each table as CSV
  (``DIR/tables/*.csv``) beside it for reuse.
- :func:`build_report` runs the analysis on one or two configurations (captures plus request
  logs) through the analysis modules and assembles the content; :func:`write_report` does both.
  This is the function ``rdmascope report`` and ``rdmascope demo`` call.

Column headers are derived from the field names and their unit suffixes (``ttft_s`` ->
"TTFT (s)", ``prefill_bytes`` -> "prefill (MB)", ``peak_gbps`` -> "peak (Gb/s)"); byte columns are
shown in MB (1e6 bytes), the only conversion done here.
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "ReportFigure",
    "ReportTable",
    "ReportSection",
    "Verdict",
    "ReportContent",
    "column_header",
    "format_table",
    "render_report",
]

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

    ``headers`` overrides the derived header of a column ({column: header text}).
    """

    frame: pd.DataFrame
    title: str = ""
    note: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ReportSection:
    """A titled group of tables, with an optional explanatory note."""

    title: str
    tables: list[ReportTable] = field(default_factory=list)
    note: str = ""


@dataclass
class Verdict:
    """A one-line conclusion shown near the top: ``status`` is "ok", "fail", "warn" or "info"."""

    headline: str
    status: str = "info"
    text: str = ""


@dataclass
class ReportContent:
    """Everything a report shows, already computed."""

    title: str
    subtitle: str = ""
    cards: list[tuple[str, str, str]] = field(default_factory=list)  # (label, value, detail)
    verdicts: list[Verdict] = field(default_factory=list)
    figures: list[ReportFigure] = field(default_factory=list)
    sections: list[ReportSection] = field(default_factory=list)
    captures: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)


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
}


def column_header(name: str) -> tuple[str, float]:
    """Return (header text, value factor) for a field name, from its unit suffix.

    ``ttft_s`` -> ("TTFT (s)", 1), ``prefill_bytes`` -> ("prefill (MB)", 1e-6),
    ``peak_gbps`` -> ("peak (Gb/s)", 1). Unknown names get spaces for underscores.
    """
    name = str(name)
    if name in _HEADERS:
        return _HEADERS[name], (1e-6 if name == "bytes" else 1.0)
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
    if np.all(finite == np.round(finite)) and finite.max() >= 1:
        return 0
    top = float(np.median(finite[finite > 0])) if np.any(finite > 0) else 0.0
    if top >= 100:
        return 0
    if top >= 10:
        return 1
    if top >= 1:
        return 2
    return 3


def _cell(v: Any, decimals: int) -> tuple[str, bool]:
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
        return f"{float(v):,.{decimals}f}", True
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
        columns.append([_cell(v, dec) for v in s.tolist()])
        out_headers.append({"text": text, "cls": "num" if numeric else ""})
    rows = []
    for i in range(len(df)):
        rows.append([{"text": c[i][0], "cls": "num" if c[i][1] and h["cls"] == "num" else ""}
                     for c, h in zip(columns, out_headers, strict=True)])
    return {"headers": out_headers, "rows": rows}


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _figure_png(fig, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------


def render_report(content: ReportContent, out_dir: str | os.PathLike, *, embed: bool = True,
                  dpi: int = 110, progress: Callable[[str], None] | None = None) -> Path:
    """Write ``out_dir/report.html`` (+ ``figures/*.png``, ``tables/*.csv``); return the HTML path.

    With ``embed`` (default) each figure is inlined as a base64 PNG, so the HTML file alone is
    the whole report; otherwise it links ``figures/<name>.png``. ``out_dir`` is created if
    missing; existing files of the same names are replaced (written to a temporary name and
    renamed). ``progress`` receives one line per step. Raises OSError if the directory cannot be
    written.
    """
    from jinja2 import Environment, PackageLoader, select_autoescape

    from rdmascope import __version__

    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    figures = []
    for f in content.figures:
        say(f"drawing figure: {f.title}")
        png = _figure_png(f.figure, dpi=dpi)
        path = out / "figures" / f"{f.name}.png"
        _atomic_write(path, png)
        src = ("data:image/png;base64," + base64.b64encode(png).decode("ascii")) if embed \
            else f"figures/{f.name}.png"
        figures.append({"name": f.name, "title": f.title, "caption": f.caption, "src": src})
    sections = []
    used = set()
    for s in content.sections:
        anchor = _anchor(s.title)
        while anchor in used:
            anchor += "-x"
        used.add(anchor)
        tables = []
        for i, t in enumerate(s.tables):
            tables.append({"title": t.title, "note": t.note, **format_table(t.frame, t.headers)})
            if len(t.frame):
                (out / "tables").mkdir(exist_ok=True)
                name = anchor + (f"-{i + 1}" if len(s.tables) > 1 else "") + ".csv"
                _atomic_write(out / "tables" / name, t.frame.to_csv().encode())
        sections.append({"title": s.title, "anchor": anchor, "note": s.note, "tables": tables})
    env = Environment(loader=PackageLoader("rdmascope.analysis", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    page = env.get_template("report.html.j2").render(
        title=content.title, subtitle=content.subtitle, version=__version__,
        generated=_dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        cards=[{"label": a, "value": b, "detail": c} for a, b, c in content.cards],
        verdicts=content.verdicts, figures=figures, sections=sections,
        captures=[{"label": lbl, "fields": items} for lbl, items in content.captures],
    )
    html_path = out / "report.html"
    _atomic_write(html_path, page.encode("utf-8"))
    say(f"wrote {html_path}")
    return html_path


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
