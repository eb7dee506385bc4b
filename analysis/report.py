"""Write the self-contained HTML report: figures first, then clean tables with units in headers.

Two layers:

- :func:`render_report` turns a :class:`ReportContent` (figures, tables, verdicts, capture
  metadata: plain data, no analysis) into ``DIR/report.html`` with every figure embedded as a
  base64 PNG, plus the figures as files (``DIR/figures/*.png``) and each table as CSV
  (``DIR/tables/*.csv``, listed and linked in the HTML) beside it for reuse. A CSV is named after
  its configuration and its content, ``<section>_<table>.csv`` (e.g. ``200-gb-s_per-request.csv``,
  ``200-gb-s_peaks.csv``, ``comparison.csv``), and holds the table's values unscaled (bytes in
  bytes, not MB), without the pandas index (a named index becomes the first column).
- :func:`build_report` runs the analysis on one or more configurations (captures plus request
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
from collections.abc import Callable, Mapping, Sequence
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
    """

    title: str
    tables: list[ReportTable] = field(default_factory=list)
    note: str = ""
    name: str | None = None


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
    out = _format_table(frame, headers)
    out["rows"] = list(out["rows"])
    return out


def _format_table(frame: pd.DataFrame, headers: Mapping[str, str] | None = None
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
                text, numeric = _cell(values[i], dec)
                row.append({"text": text, "cls": "num" if numeric and is_num else ""})
            yield row

    return {"headers": out_headers, "rows": rows()}


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def csv_name(section: ReportSection, table: ReportTable, index: int) -> str:
    """Return the CSV file name of ``table`` (the ``index``-th of ``section``): "<sect>_<tab>.csv".

    <sect> is ``section.name`` (default: the title made file-safe, e.g. "200 Gb/s" ->
    "200-gb-s"), <tab> is ``table.name`` made file-safe; either may be empty (then no "_"). A
    table without a name in a section of several tables is "table-<index + 1>". Uniqueness
    across the report is the caller's business (``render_report`` appends "-2", "-3").
    """
    sect = _anchor(section.title) if section.name is None else _slug(section.name)
    tab = _slug(table.name) or ("" if len(section.tables) == 1 else f"table-{index + 1}")
    return "_".join(p for p in (sect, tab) if p) or "table"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def _csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as its CSV holds it: a named index becomes the first column, no other index."""
    return frame.reset_index() if frame.index.name is not None else frame


def _figure_png(fig, dpi: int = 110) -> bytes:
    if not hasattr(fig, "savefig"):  # an Axes
        fig = fig.get_figure(root=True) if hasattr(fig, "get_figure") else fig.figure
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
    from markupsafe import Markup

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
    csv_used: set[str] = set()
    csv_files = []
    for s in content.sections:
        anchor = _anchor(s.title)
        while anchor in used:
            anchor += "-x"
        used.add(anchor)
        # an unnamed section takes its (unique) anchor, so that sections of one title differ
        sec = s if s.name is not None else ReportSection(anchor, s.tables, s.note, anchor)
        tables = []
        for i, t in enumerate(s.tables):
            entry = {"title": t.title, "note": t.note, "csv": None,
                     **_format_table(t.frame, t.headers)}
            if len(t.frame):
                (out / "tables").mkdir(exist_ok=True)
                stem = base = csv_name(sec, t, i)
                k = 1
                while stem in csv_used:
                    k += 1
                    stem = f"{base}-{k}"
                csv_used.add(stem)
                href = f"tables/{stem}.csv"
                _atomic_write(out / href, _csv_frame(t.frame).to_csv(index=False).encode())
                entry["csv"] = href
                csv_files.append({"href": href, "section": s.title,
                                  "title": t.title or s.title})
            tables.append(entry)
        sections.append({"title": s.title, "anchor": anchor, "note": s.note, "tables": tables})
    env = Environment(loader=PackageLoader("rdmascope.analysis", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    for f in figures:
        f["caption"] = _linked(f["caption"])
    for sec in sections:
        for t in sec["tables"]:
            t["note"] = _linked(t["note"])
    page = env.get_template("report.html.j2").generate(
        title=content.title, subtitle=content.subtitle, version=__version__,
        generated=_dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        card_groups=_card_groups(content), one_ms_note=ONE_MS_UNCERTAINTY,
        verdicts=content.verdicts, figures=figures, sections=sections, csv_files=csv_files,
        captures=[{"label": lbl, "fields": items} for lbl, items in content.captures],
        timelines=[{"name": n, "title": t, "html": Markup(h), "caption": _linked(c)}
                   for n, t, h, c in content.timelines],
    )
    html_path = out / "report.html"
    _atomic_write_chunks(html_path, page)  # written as rendered (the page is never one string)
    say(f"wrote {html_path}")
    return html_path


def _linked(text):
    """Escape ``text`` and turn each ``ONE_MS_REF`` into a link to the one note on 1 ms values."""
    from markupsafe import Markup, escape

    if not text:
        return text
    return Markup(str(escape(text)).replace(str(escape(ONE_MS_REF)), ONE_MS_LINK))


def _card_groups(content: ReportContent) -> list[dict]:
    """The headline cards grouped per configuration (a card "<label>: what" goes under its
    configuration's heading as "what"); cards of no configuration (the comparison) last."""
    labels = sorted((lbl for lbl, _ in content.captures), key=len, reverse=True)
    other = "Comparison" if len(labels) >= 2 else ""
    groups: dict[str, list[dict]] = {}
    for card in content.cards:
        label, value, detail = card[:3]
        grp = next((g for g in labels if label.startswith(g + ": ")), None)
        short = label[len(grp) + 2:] if grp else label
        groups.setdefault(grp if grp else other, []).append(
            {"label": short, "value": value, "detail": _linked(detail)})
    order = [lbl for lbl, _ in content.captures if lbl in groups]
    order += [g for g in groups if g not in order]
    return [{"title": g, "cards": groups[g]} for g in order]


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _atomic_write_chunks(path: Path, chunks) -> None:
    """``_atomic_write`` of text produced piece by piece (UTF-8)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        for chunk in chunks:
            f.write(chunk)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# From captures and request logs to figure data (the glue; the analysis does the computing)
# ----------------------------------------------------------------------------------------------

MS_NS = 1_000_000
#: The study's windows for figure 3 and the peak table.
DEFAULT_WINDOWS_NS = (1 * MS_NS, 5 * MS_NS, 100 * MS_NS)


def _info_of(capture):
    """A ``stream.CaptureInfo`` of a capture (loaded or not), for the streaming functions."""
    from .stream import CaptureInfo, open_capture

    return capture if isinstance(capture, CaptureInfo) else open_capture(capture.path)


class _FlagCounter:
    """The RDMA intervals' flags with their counts, fed file by file (``_flag_counts``)."""

    def __init__(self, ids=None):
        from .series import FLAGS

        self.flags = FLAGS
        self.ids = None if ids is None else set(ids)
        self.counts: dict[int, np.ndarray] = {}
        self.first: dict[tuple[int, int], int] = {}
        self.seen: dict[int, int] = {}

    def feed(self, parts) -> None:
        for c, iv in parts.items():
            if self.ids is not None and c not in self.ids:
                continue
            f = iv["flag"]
            if not len(f):
                continue
            self.counts.setdefault(c, np.zeros(len(self.flags), np.int64))
            n = np.bincount(f, minlength=len(self.flags))
            for code in np.flatnonzero(n):
                if (c, int(code)) not in self.first:
                    self.first[(c, int(code))] = self.seen.get(c, 0) + int(np.argmax(f == code))
            self.counts[c] += n
            self.seen[c] = self.seen.get(c, 0) + len(f)

    def result(self) -> pd.Series:
        total = np.zeros(len(self.flags), np.int64)
        for n in self.counts.values():
            total += n
        first = self.first
        order = sorted({code for (_, code) in first},
                       key=lambda code: min(k for k in first if k[1] == code))
        out = pd.Series({self.flags[k]: int(total[k]) for k in order}, dtype="int64")
        return out.sort_values(ascending=False, kind="stable")


def _flag_counts(cfg) -> pd.Series:
    """The RDMA intervals' flags with their counts, as ``intervals["flag"].value_counts()``
    (most frequent first; ties in the order they first occur, counter by counter)."""
    if not cfg.streamed:
        return cfg.intervals["flag"].astype(str).value_counts()
    got = cfg.__dict__.get("_pass")
    if got is not None:
        return got.flags
    from .stream import iter_intervals

    fc = _FlagCounter()
    for parts, _ in iter_intervals(_info_of(cfg.capture)):
        fc.feed(parts)
    return fc.result()


@dataclass
class CapturePass:
    """What the report reads from the whole capture, made in one streamed pass (``capture_pass``).

    ``checks``: (single, both) as ``Configuration.emulation_checks``; ``bursts``: the
    ``bursts.BurstResult`` of ``burst_analysis_capture(by="direction")``, its summary only (the
    report shows no per-burst table; a serving day has millions of bursts); ``timeline``: the
    node's tx over its data span, 1 ms Gb/s (a Series), or its min/max envelope (a DataFrame,
    ``node_envelope``) when longer than ``figures.MAX_TIMELINE_POINTS``; ``devices``: tx Gb/s per
    RDMA series at the devices width (``node_gbps(by="series")``); ``flags``: ``_flag_counts``.
    """

    checks: tuple
    bursts: Any
    timeline: Any
    devices: pd.DataFrame
    flags: pd.Series


def capture_pass(cfg: Configuration, *, capacity_gbps: float,
                 devices_width_ns: int = 100 * MS_NS, ranges=None) -> CapturePass | None:
    """Read a streamed configuration's capture once for the report's whole-capture parts.

    One ``stream.iter_windows`` pass over the RDMA counters, per series, on two grids of the
    report's origin (``window_origin``): 1 ms from the first interval (the emulation check's
    ``verify.MeasureStream``; summed per direction for the bursts, ``bursts.BurstStreamAcc``,
    and the timeline) and ``devices_width_ns`` over the tx span (the per-device figure); the
    netdev counters are read in the same pass for the kernel bytes (``cluster.KernelAcc``),
    and the intervals' flags are counted as they pass. ``ranges``: a ``ranges.RangeQueries``
    (``attribute``'s dry run) answered by the same pass (its ``consumer``) when its grid is the
    1 ms grid of the report's origin, else by a pass of its own. A direction's windows are the sum of its
    series' in counter order, NaN when one is, quality bits OR-ed: exactly what ``rebin`` with
    ``by="direction"`` computes (``series.combine_windows``), so every number equals that of the
    separate passes it replaces (tested). Returns None for a capture in memory, or when a
    series has several counters (its sum order would differ): the caller then makes each part
    on its own. Raises what ``iter_windows`` and ``verify_emulation`` raise.
    """
    if not cfg.streamed:
        return None
    from .bursts import BurstStreamAcc
    from .envelope import MinMaxEnvelope, bucket_windows
    from .figures import MAX_TIMELINE_POINTS
    from .overline_pass import pass_hooks
    from .stream import WindowGrid, iter_windows
    from .verify import MeasureStream, judge_emulation

    info = _info_of(cfg.capture)
    cdf = info.counters
    ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")]]
    series = [str(cdf.at[c, "series"]) for c in ids]
    if not ids or len(set(series)) != len(series):
        return None
    dir_of = {s: str(cdf.at[c, "direction"]) for c, s in zip(ids, series, strict=True)}
    directions = list(dict.fromkeys(dir_of[s] for s in series))
    cols_of = {d: [j for j, s in enumerate(series) if dir_of[s] == d] for d in directions}
    tx_series = [s for s in series if dir_of[s] == "tx"]
    origin = window_origin(cfg)
    tx_lo, tx_hi = cfg.data_span("tx")
    n_tx = -(-(tx_hi - tx_lo) // MS_NS) + 1
    env = None
    if n_tx > MAX_TIMELINE_POINTS:
        env = MinMaxEnvelope(start_ns=tx_lo, end_ns=tx_hi, width_ns=MS_NS, origin_ns=origin,
                             k=bucket_windows(n_tx, MAX_TIMELINE_POINTS // 2))
    k_tl0 = origin + ((tx_lo - origin) // MS_NS) * MS_NS  # the first timeline window
    tl_t: list[np.ndarray] = []
    tl_v: list[np.ndarray] = []
    dev_blocks: list[pd.DataFrame] = []
    ms = MeasureStream(info, origin_ns=cfg.origin_ns)
    bursts = BurstStreamAcc(info, capacity_gbps=capacity_gbps, by="direction")
    flags = _FlagCounter(ids)
    kern = None
    if origin == int(info.t_start_ns):  # KernelAcc's windows lie on the capture-start grid
        from .cluster import KernelAcc

        kern = KernelAcc(info)
        if not kern.ids:
            kern = None

    rr = None
    if ranges is not None:
        if int(ranges.width_ns) == MS_NS and int(ranges.origin) == origin \
                and ranges.source == "infiniband":
            rr = ranges.consumer()
        else:
            ranges.run()
    ib = set(ids)

    def on_parts(parts):
        flags.feed(parts)
        ms.on_parts(parts)
        if kern is not None:
            kern.feed(parts)
        if rr is not None:
            rr.on_parts({c: iv for c, iv in parts.items() if c in ib})

    state: dict = {}
    grids = [WindowGrid(MS_NS, origin), WindowGrid(int(devices_width_ns), origin, tx_lo, tx_hi)]
    hooks = pass_hooks([ms.flagger, bursts.flag, rr.flag if rr is not None else None],
                       on_parts=on_parts)
    for gi, b, q in iter_windows(info, grids, by="series", source="infiniband", state=state,
                                 extra_counters=kern.ids if kern is not None else (), **hooks):
        if gi == 1:
            dev_blocks.append(b[tx_series])
            continue
        ms.add(b, q)
        B = b.to_numpy(np.float64)
        Q = q.to_numpy()
        bd, qd = {}, {}
        for d, cols in cols_of.items():
            v = B[:, cols[0]].copy()
            for j in cols[1:]:
                v += B[:, j]
            bd[d] = v
            qd[d] = np.bitwise_or.reduce(Q[:, cols], axis=1)
        bdf = pd.DataFrame(bd, index=b.index, columns=directions)
        qdf = pd.DataFrame(qd, index=b.index, columns=directions)
        bdf.columns.name = qdf.columns.name = "direction"
        bursts.add(bdf, qdf)
        if rr is not None:
            rr.add(bdf, qdf)
        if "tx" in bd:
            t = b.index.to_numpy(np.int64)
            rate = bd["tx"] * 8.0 / float(MS_NS)
            if env is not None:
                env.add(t, rate)
            else:
                keep = (t >= k_tl0) & (t < tx_hi)
                tl_t.append(t[keep])
                tl_v.append(rate[keep])
    if rr is not None:
        rr.finish()
    spans = state.get("spans", {})
    m = ms.result(spans)
    if kern is not None:
        kern.answer(m)  # the netdev bytes from this pass where it can
    single = judge_emulation(info, m, expect="single")
    both = None if single.ok else judge_emulation(info, m, expect="both")
    dspans: dict[str, list[int]] = {}
    for s, (a, z) in spans.items():
        d = dir_of.get(s)
        if d is None:
            continue
        sp = dspans.setdefault(d, [a, z])
        sp[0], sp[1] = min(sp[0], a), max(sp[1], z)
    bt = bursts.result({d: dspans[d] for d in directions if d in dspans}, table=False)
    if env is not None:
        timeline = env.frame()
        timeline.attrs["bucket_ns"] = env.bucket_ns
    else:
        t = np.concatenate(tl_t) if tl_t else np.zeros(0, np.int64)
        timeline = pd.Series(np.concatenate(tl_v) if tl_v else np.zeros(0),
                             index=pd.Index(t, name="window_start_ns"), name="tx, all devices")
    dev = pd.concat(dev_blocks) if dev_blocks else pd.DataFrame(columns=tx_series)
    dev = dev[[c for c in dev.columns if c in spans]] * 8.0 / float(devices_width_ns)
    return CapturePass(checks=(single, both), bursts=bt, timeline=timeline, devices=dev,
                       flags=flags.result())


@dataclass
class Configuration:
    """One configuration: a capture, its byte intervals, and its request log on the capture clock.

    ``requests`` holds the successful requests (``RequestLog.ok`` after ``align``) with int64
    time columns; ``log`` is None when no log was given.
    """

    label: str
    capture: Any  # rdmascope.analysis.load.Capture or stream.CaptureInfo
    #: the byte intervals; None: made from the segments only if something asks for them (the
    #: report's own tables and figures stream, so a day-long capture is never held)
    intervals: pd.DataFrame | None = field(repr=False, compare=False)
    log: Any = None  # rdmascope.analysis.requestlogs.RequestLog (aligned)
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the window grid's origin (int64 ns); None: the capture start (see ``window_origin``)
    origin_ns: int | None = None
    _checks: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.intervals is None:
            del self.__dict__["intervals"]  # made on first access (__getattr__)

    def __getattr__(self, name: str):
        if name == "intervals":
            from .series import byte_intervals

            iv = byte_intervals(self.capture)
            self.__dict__["intervals"] = iv
            return iv
        raise AttributeError(name)

    @property
    def streamed(self) -> bool:
        """True when the intervals are not in memory (the capture is read segment by segment)."""
        return "intervals" not in self.__dict__

    def data_span(self, direction: str | None = None) -> tuple[int, int]:
        """[first interval start, last interval end] of the RDMA counters (of ``direction``)."""
        if not self.streamed:
            iv = self.intervals
            if direction is not None:
                iv = iv[iv["direction"] == direction]
            if not len(iv):
                raise ValueError(f"{self.capture.path}: no {direction} data counters")
            return int(iv["t0_ns"].min()), int(iv["t1_ns"].max())
        from .stream import edge_spans

        sp = self.__dict__.get("_spans")
        if sp is None:
            sp = self.__dict__["_spans"] = edge_spans(_info_of(self.capture), "infiniband")
        cdf = self.capture.counters
        got = [v for c, v in sp.items() if direction is None or cdf.at[c, "direction"] == direction]
        if not got:
            raise ValueError(f"{self.capture.path}: no {direction} data counters")
        return min(v[0] for v in got), max(v[1] for v in got)

    def emulation_checks(self):
        """Return (single, both): ``verify.verify_emulation`` with expect "single", then "both"
        (None when "single" held), computed once per configuration."""
        if self._checks is None:
            from .verify import verify_emulation

            single = verify_emulation(self.capture, origin_ns=self.origin_ns)
            both = None if single.ok else verify_emulation(self.capture, expect="both",
                                                           origin_ns=self.origin_ns)
            self._checks = (single, both)
        return self._checks

    @property
    def interfaces(self) -> str | None:
        """"single" or "both" interfaces carried the RDMA traffic, else None (as
        ``compare.interfaces_used``, from the cached checks)."""
        single, both = self.emulation_checks()
        return "single" if single.ok else "both" if both is not None and both.ok else None

    @property
    def port_gbps(self) -> float | None:
        """The port's nominal rate from the manifest's device records (e.g. 200), or None."""
        from .load import port_rates_gbps

        return max(port_rates_gbps(self.capture.meta).values(), default=None)

    @property
    def devices(self) -> list[str]:
        """The RDMA devices with data counters in the capture."""
        c = self.capture.counters
        return list(dict.fromkeys(c.loc[c["data"] & (c["source"] == "infiniband"), "device"]))


#: Labels for the link names the emulator and the demo use (capture directory names).
LINK_LABELS = {"200": "200 Gb/s", "emulated100": "emulated 100 Gb/s"}


def _label_of(capture) -> str:
    """The configuration's label: ``record --label``, else the link of the setup recorded in the
    manifest ("400 Gb/s", "emulated 200 Gb/s"), else the emulator's link name, else the
    directory name."""
    from rdmascope.models import recorded_setup

    extra = capture.meta.get("extra") or {}
    extra = extra if isinstance(extra, dict) else {}
    sim = extra.get("simulated")
    tcp = " (TCP)" if isinstance(sim, dict) and sim.get("tcp_fallback") else ""
    v = extra.get("label")
    if isinstance(v, str) and v:
        return v
    rec = recorded_setup(capture.meta)
    if "link_gbps" in rec:
        return ("emulated " if rec.get("emulated") else "") + f"{rec['link_gbps']:g} Gb/s" + tcp
    if isinstance(sim, dict) and sim.get("link") in LINK_LABELS:
        return LINK_LABELS[sim["link"]] + tcp
    for key in ("config_label", "link"):
        v = extra.get(key)
        if isinstance(v, str) and v:
            return v
        if isinstance(v, dict) and isinstance(v.get("name"), str):
            return v["name"]
    return LINK_LABELS.get(capture.path.name, capture.path.name)


def load_configuration(capture_path: str | os.PathLike, request_logs=(), *,
                       label: str | None = None, offset_s: float | None = None,
                       log_format: str | None = None,
                       origin_s: float | None = None, run: int | None = None) -> Configuration:
    """Load one capture and its request log(s), aligned on the capture's clock.

    ``request_logs``: paths of request logs (any format ``read_request_log`` reads); several
    are concatenated. ``label`` defaults to the capture's manifest ``extra.label`` (the emulator
    writes one) or the directory name. ``origin_s``: the window grid's origin, seconds after the
    capture start (default: the capture start itself). ``run``: keep only run ``run`` (1-based)
    of each log holding several runs (``read_request_log``). Raises what ``load_capture`` /
    ``read_request_log`` / ``align`` raise (errors name the file, row and field).
    """
    from .requestlogs import align, read_request_log
    from .stream import edge_spans, open_capture

    # the manifest only: tables and figures stream the segments (never every reading)
    cap = open_capture(capture_path)
    if not edge_spans(cap, "infiniband"):
        raise ValueError(f"{capture_path}: no RDMA data counter intervals (fewer than two valid "
                         "readings of port_xmit_data/port_rcv_data)")
    logs = [align(read_request_log(p, log_format, run=run), cap, offset_s)
            for p in request_logs]
    reqs = pd.DataFrame()
    if logs:
        reqs = pd.concat([lg.ok for lg in logs], ignore_index=True)
        for c in ("t_send_ns", "t_first_ns", "t_last_ns"):
            reqs[c] = reqs[c].astype("int64")
        reqs = reqs.sort_values("t_send_ns", kind="stable").reset_index(drop=True)
    origin = None if origin_s is None else int(cap.t_start_ns) + int(round(origin_s * 1e9))
    return Configuration(label=label or _label_of(cap), capture=cap, intervals=None,
                         log=logs[0] if len(logs) == 1 else (logs or None), requests=reqs,
                         origin_ns=origin)


#: Said next to every 1 ms peak (method.md, "The sampler").
ONE_MS_UNCERTAINTY = ("A single 1 ms value carries about ±15–25 % timing uncertainty (each "
                      "reading's instant is known only to about ±0.1–0.2 ms, docs/method.md "
                      "'The sampler'), which is why a 1 ms peak can exceed line rate; averages over "
                      "5 ms or longer are accurate to a few percent.")


#: Put where a 1 ms peak is shown instead of repeating ``ONE_MS_UNCERTAINTY``: the report says
#: the note once (id ``one-ms-note``) and renders this as a link to it.
ONE_MS_REF = "(1 ms values: ±15–25 %, see the note on 1 ms values)"
ONE_MS_LINK = '<a class="onems" href="#one-ms-note">1 ms values: ±15–25 %, see the note</a>'


def window_origin(cfg: Configuration) -> int:
    """Return the one window origin the report uses (int64 ns): the capture start, unless the
    configuration was loaded with another (``origin_s``, the CLI's ``--origin``).

    The project's default origin (``series.default_origin``) and the origin of ``attribute``'s
    per-request and per-test 1 ms peaks, so that the same request shows the same 1 ms peak in
    every table, card and figure (figures still label time since the send).
    """
    return int(cfg.capture.t_start_ns) if cfg.origin_ns is None else int(cfg.origin_ns)


def node_gbps(cfg: Configuration, width_ns: int, start_ns: int, end_ns: int, *,
              direction: str = "tx", by: str = "direction", whole: bool = False
              ) -> pd.DataFrame:
    """Re-bin one node's traffic of ``direction`` to Gb/s windows over [start_ns, end_ns).

    ``by="direction"`` sums every device (the twins of one port: the node's total), one column
    named after the direction; ``by="series"`` keeps one column per device. Windows are aligned
    on the capture start (``window_origin``), as everywhere in the report; the windows
    overlapping the range are returned, or with ``whole`` only those lying wholly inside it (as
    ``peaks.peak_table`` and ``attribute`` count them). Uses ``series.rebin`` and
    ``series.to_gbps``.
    """
    from .series import rebin, to_gbps

    origin = window_origin(cfg)
    lo, hi = cfg.data_span(direction)
    start_ns = max(int(start_ns), lo)
    end_ns = min(int(end_ns), hi)
    if cfg.streamed:  # only the segments around the range are read
        from .stream import WindowGrid, iter_windows

        cdf = cfg.capture.counters
        ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")
                                         & (cdf["direction"] == direction)]]
        state: dict = {}
        blocks = [(bb, qq) for _, bb, qq in iter_windows(
            _info_of(cfg.capture), [WindowGrid(int(width_ns), origin, start_ns, end_ns)],
            by=by, counters=ids, state=state)]
        b = pd.concat([x[0] for x in blocks])
        b = b[[c for c in b.columns if c in state.get("spans", {})]]
    else:
        iv = cfg.intervals[cfg.intervals["direction"] == direction]
        b = rebin(iv, int(width_ns), origin_ns=origin, start_ns=start_ns, end_ns=end_ns, by=by)
    if whole:
        t = b.index.to_numpy()
        b = b[(t >= start_ns) & (t + int(width_ns) <= end_ns)]
    out = to_gbps(b, width_ns)
    if by == "direction":
        out.columns = [f"{direction}, all devices"]
    return out


def node_envelope(cfg: Configuration, width_ns: int, start_ns: int, end_ns: int, *, k: int,
                  direction: str = "tx") -> pd.DataFrame:
    """Return the min/max envelope of ``node_gbps(cfg, width_ns, start_ns, end_ns)``.

    Per bucket of ``k`` consecutive windows (``envelope.MinMaxEnvelope``): the highest and the
    lowest known rate in Gb/s, columns ``max`` and ``min``, indexed by the bucket's first window
    start (int64 ns); a bucket without a known window is NaN. The windows are those
    ``node_gbps`` returns (same grid, same values: every 1 ms peak is a bucket's max), streamed
    segment by segment and folded in as they pass, so memory holds the buckets only, whatever
    the range's length. ``attrs["bucket_ns"]`` is the time one bucket spans. Raises ValueError
    as ``node_gbps``.
    """
    from .envelope import MinMaxEnvelope

    origin = window_origin(cfg)
    lo, hi = cfg.data_span(direction)
    start_ns = max(int(start_ns), lo)
    end_ns = min(int(end_ns), hi)
    env = MinMaxEnvelope(start_ns=start_ns, end_ns=end_ns, width_ns=int(width_ns),
                         origin_ns=origin, k=int(k))
    if cfg.streamed:
        from .stream import WindowGrid, iter_windows

        cdf = cfg.capture.counters
        ids = [int(c) for c in cdf.index[cdf["data"] & (cdf["source"] == "infiniband")
                                         & (cdf["direction"] == direction)]]
        for _, bb, _qq in iter_windows(_info_of(cfg.capture),
                                       [WindowGrid(int(width_ns), origin, start_ns, end_ns)],
                                       by="direction", counters=ids):
            if direction in bb.columns:
                env.add(bb.index.to_numpy(), bb[direction].to_numpy(np.float64) * 8.0
                        / float(width_ns))
    else:
        r = node_gbps(cfg, width_ns, start_ns, end_ns, direction=direction)
        env.add(r.index.to_numpy(), r.iloc[:, 0].to_numpy(np.float64))
    out = env.frame()
    out.attrs["bucket_ns"] = env.bucket_ns
    return out


def pick_request(cfg: Configuration, request_id: str | None = None) -> pd.Series:
    """Return the request to show in figure 1: ``request_id``, else the longest lone prefill.

    "Lone": no other request is in flight between its send and its first token, so its traffic
    is its own; among those the one with the longest TTFT (most bursts). Raises ValueError when
    the configuration has no requests or the id is unknown.
    """
    r = cfg.requests
    if not len(r):
        raise ValueError(f"{cfg.label}: no request log given (needed to place the prefill)")
    if request_id is not None:
        hit = r[r["request_id"].astype(str) == str(request_id)]
        if not len(hit):
            raise ValueError(f"{cfg.label}: no successful request {request_id!r}; known: "
                             f"{', '.join(map(str, r['request_id'][:10]))}")
        return hit.iloc[0]
    send, first, last = (r[c].to_numpy() for c in ("t_send_ns", "t_first_ns", "t_last_ns"))
    lone = np.array([not np.any((send < first[i]) & (last > send[i]) & (np.arange(len(r)) != i))
                     for i in range(len(r))])
    cand = r[lone] if lone.any() else r
    return cand.loc[(cand["t_first_ns"] - cand["t_send_ns"]).idxmax()]


def _line_rate_items(cfg: Configuration) -> list[str]:
    """What each device's and link's windows are judged against (the over-line flag and the
    headline peaks) and where that ceiling came from (``series.line_rates``), e.g.
    "rocep1s0f1: 126.0 Gb/s: PCIe link 32 GT/s x4 ..."."""
    from .series import line_rate_lines, line_rates, twin_links

    lines = line_rate_lines(line_rates(cfg.capture, groups=twin_links(cfg.capture) or None))
    return [ln.removeprefix("line rate ") for ln in lines]


def _line_rate_note(cfg: Configuration) -> str:
    items = _line_rate_items(cfg)
    return ("Line rates (windows above them beyond their timing uncertainty are flagged over "
            "line rate and never a headline): " + "; ".join(items) + ".") if items else ""


def capacity_lines(cfg: Configuration) -> dict[str, float]:
    """Reference lines for a configuration: the port rate and, with twin devices, one PCIe path.

    The path value is what the manifest's recorded setup says one twin carries
    (``record --emulated GBPS``), else, on a 200 Gb/s port (a DGX Spark's), the study's measured
    ~109 Gb/s (``estimate.LINK_EMULATED_GBPS``); on other ports without a record, no path line.
    When the manifest records the twins' PCIe link (one bound below the port rate, e.g. 126 Gb/s
    for Gen5 x4: ``plausibility.line_ceilings``), that bound is a line too.
    """
    from rdmascope.models import recorded_setup
    from rdmascope.plausibility import current_link_gbps

    from .estimate import LINK_EMULATED_GBPS

    lines = {}
    port = cfg.port_gbps
    if current_link_gbps() is not None:  # --link-gbps replaces every other ceiling
        return {f"--link-gbps {current_link_gbps():g} Gb/s": current_link_gbps()}
    if port:
        lines[f"port {port:g} Gb/s"] = port
    if len(cfg.devices) >= 2:
        path = recorded_setup(cfg.capture.meta).get("emulated_real_gbps")
        if path is None and port in (None, 200.0):
            path = LINK_EMULATED_GBPS
        if path:
            lines[f"one PCIe x4 path ~{path:g} Gb/s"] = path
    from rdmascope.plausibility import line_ceilings

    bounds = {c.pcie_gbps for c in line_ceilings(cfg.capture.meta).values()
              if c.pcie_gbps is not None and (not port or c.pcie_gbps < port)}
    if len(bounds) == 1:  # the recorded PCIe link of the twins: a bound, not a throughput
        b = bounds.pop()
        lines[f"twin PCIe link bound {b:.0f} Gb/s"] = b
    return lines


def figure_request(cfg: Configuration, request_id: str | None = None, *,
                   zoom_ms: float | None = 200.0, zoom_start_s: float | None = None,
                   pad_s: float = 0.5):
    """Draw figure 1 for one request of a configuration (1 ms windows of the node's tx)."""
    from . import figures

    req = pick_request(cfg, request_id)
    send, first, last = int(req["t_send_ns"]), int(req["t_first_ns"]), int(req["t_last_ns"])
    pad = int(pad_s * 1e9)
    rates = node_gbps(cfg, MS_NS, send - pad, last + pad)
    zoom_start = None if zoom_start_s is None else send + int(zoom_start_s * 1e9)
    title = (f"{cfg.label}: request {req['request_id']}"
             + (f", {int(req['prompt_tokens']):,} prompt tokens"
                if pd.notna(req.get("prompt_tokens")) else ""))
    return figures.plot_request(rates, t_send_ns=send, t_first_ns=first, t_last_ns=last,
                                zoom_ms=zoom_ms, zoom_start_ns=zoom_start,
                                link_gbps=capacity_lines(cfg), title=title)


def figure_windows(cfg: Configuration, request_id: str | None = None, *,
                   windows_ns=DEFAULT_WINDOWS_NS, peaks: Mapping[int, float] | None = None):
    """Draw figure 3: one request's prefill at several windows, each panel's peak labelled.

    Windows are aligned on the capture start (``window_origin``, as the tables); the windows
    lying wholly inside the prefill [send, first token) are drawn (as ``peaks.peak_table``
    counts them). Each panel's label is the table's headline peak (``peaks`` if given, else
    ``peaks.peak_table`` here): the highest window consistent with physics, so a window over
    line rate or gap-spread is drawn but never labelled as the peak. A width with no whole window
    inside the prefill is left out. The time axis is seconds since the send. Raises ValueError
    when the prefill is shorter than every width.
    """
    from . import figures

    req = pick_request(cfg, request_id)
    send, first = int(req["t_send_ns"]), int(req["t_first_ns"])
    by_w = {int(w): node_gbps(cfg, int(w), send, first, whole=True) for w in windows_ns}
    by_w = {w: r for w, r in by_w.items() if len(r)}
    if not by_w:
        raise ValueError(f"{cfg.label}: request {req['request_id']}'s prefill "
                         f"({(first - send) / 1e6:.3f} ms) holds no whole window of any width")
    if peaks is None:
        from .peaks import peak_table

        pk = peak_table(cfg.intervals[cfg.intervals["direction"] == "tx"], start_ns=send,
                        end_ns=first, by="direction", origin_ns=window_origin(cfg),
                        windows_ns=tuple(by_w), percentiles=())
        peaks = {int(r.window_ns): float(r.peak_gbps) for r in pk.itertuples()
                 if r.window != "whole range" and r.series == "tx"}
    peaks = {w: v for w, v in peaks.items() if w in by_w}
    return figures.plot_windows(by_w, peaks_gbps=peaks, origin_ns=send,
                                xlabel="time since request sent (s)",
                                link_gbps=capacity_lines(cfg),
                                title=f"{cfg.label}: request {req['request_id']}'s prefill "
                                      "averaged over different windows")


#: The per-device figure of the whole capture draws at most this many windows (a stacked area of
#: 40,000 steps is already finer than its pixels): 100 ms windows up to about an hour of capture,
#: then the next width of ``DEVICE_WIDTHS_MS`` that fits (1 s at 6 h, 5 s at 24 h), so the
#: figure's memory and time do not grow with the capture.
DEVICE_MAX_WINDOWS = 40_000
DEVICE_WIDTHS_MS = (100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000,
                    120_000, 300_000, 600_000)


def _window_label(width_ns: int) -> str:
    from .figures import window_label

    return window_label(width_ns)


def devices_width_ns(duration_s: float) -> int:
    """The per-device figure's window (ns) for a capture of ``duration_s`` seconds: the
    narrowest of ``DEVICE_WIDTHS_MS`` giving at most ``DEVICE_MAX_WINDOWS`` windows (the widest
    one beyond). Each window is the mean rate over it, said in the figure's title."""
    for w in DEVICE_WIDTHS_MS:
        if float(duration_s) * 1000.0 / w <= DEVICE_MAX_WINDOWS:
            return w * MS_NS
    return DEVICE_WIDTHS_MS[-1] * MS_NS


def figure_devices(cfg: Configuration, *, width_ns: int = 100 * MS_NS, direction: str = "tx",
                   verdict: str | None = None, rates: pd.DataFrame | None = None):
    """Draw the per-device stacked traffic of a configuration over the whole capture.

    100 ms windows by default: wide enough that the periodic bursts do not alias into moire
    patterns over a whole capture, narrow enough to separate the requests. ``rates``: those
    windows already made (Gb/s per series, as ``node_gbps(by="series")``; the report's
    ``capture_pass``), else they are made here.
    """
    from . import figures

    if rates is None:
        lo, hi = cfg.data_span()
        rates = node_gbps(cfg, width_ns, lo, hi, direction=direction, by="series")
    ax = figures.plot_devices(
        rates, link_gbps=capacity_lines(cfg), verdict=verdict,
        title=f"{cfg.label}: {direction} per RDMA device, stacked "
              f"({figures.window_label(width_ns)} windows)")
    return figures.figure_of(ax)


#: Pixel columns of a figure's time axis (a 10 in figure is 1,100 px at the report's 110 dpi,
#: 1,500 at ``plot``'s 150): a series longer than ``FIGURE_MAX_WINDOWS`` is drawn as its
#: min/max envelope per column.
FIGURE_COLUMNS = 2_000
#: Up to this many windows (a minute of 1 ms) figure 2 draws every window, as the study did.
FIGURE_MAX_WINDOWS = 60_000


def _test_ranges(configs: Sequence[Configuration], test: str | None, pad_s: float,
                 start_s: float | None = None, end_s: float | None = None
                 ) -> dict[str, tuple[pd.DataFrame, int, int]]:
    """Per configuration: (the test's requests, range start, range end) of figure 2; with
    ``start_s``/``end_s`` (seconds since the test's first send) only that stretch."""
    out = {}
    for cfg in configs:
        r = cfg.requests
        if not len(r):
            raise ValueError(f"{cfg.label}: no request log given")
        if test is not None:
            r = r[r["test"].astype(str) == str(test)]
            if not len(r):
                raise ValueError(f"{cfg.label}: no request of test {test!r}")
        pad = int(pad_s * 1e9)
        t0 = int(r["t_send_ns"].min())
        a, b = t0 - pad, int(r["t_last_ns"].max()) + pad
        if start_s is not None:
            a = max(a, t0 + int(round(start_s * 1e9)))
        if end_s is not None:
            b = min(b, t0 + int(round(end_s * 1e9)))
        if b <= a:
            raise ValueError(f"{cfg.label}: nothing of test {test!r} lies in the range "
                             f"{start_s} s to {end_s} s after its first send "
                             f"(it spans {(a - t0) / 1e9:g} to {(b - t0) / 1e9:g} s)")
        out[cfg.label] = (r, a, b)
    return out


def comparison_bucket(configs: Sequence[Configuration], test: str | None = None, *,
                      width_ns: int = MS_NS, pad_s: float = 1.0,
                      columns: int = FIGURE_COLUMNS,
                      max_windows: int = FIGURE_MAX_WINDOWS, start_s: float | None = None,
                      end_s: float | None = None) -> int:
    """Return k, the windows of ``width_ns`` per drawn column of figure 2: 1 (every window
    drawn) when the longest configuration's range holds at most ``max_windows`` windows, else the bucket of ``envelope.bucket_windows`` (each column then
    shows the highest and lowest window of k)."""
    from .envelope import bucket_windows

    spans = [b - a for _, a, b in _test_ranges(configs, test, pad_s, start_s, end_s).values()]
    n = -(-max(spans) // int(width_ns))
    return 1 if n <= max_windows else bucket_windows(n, columns)


def figure_comparison(configs: Sequence[Configuration], test: str | None = None, *,
                      width_ns: int = MS_NS, pad_s: float = 1.0,
                      columns: int = FIGURE_COLUMNS, max_windows: int = FIGURE_MAX_WINDOWS,
                      start_s: float | None = None, end_s: float | None = None):
    """Draw figure 2: the configurations of one test stacked on a shared time axis.

    ``test`` selects the requests by their ``test`` column (all requests when None). Rates are the
    node's tx at ``width_ns`` (1 ms by default, as in the study: the bursts' height, ~180 vs
    ~105 Gb/s, is what differs; wider windows average it away and alias with the burst period).
    A test longer than ``max_windows`` windows is drawn as its min/max envelope in ``columns``
    columns (``node_envelope``, k = ``comparison_bucket``): per column the highest window (the
    line: every burst keeps its 1 ms height) and a band down to the lowest; the title says "the
    highest 1 ms window per N ms". That streams the capture: memory holds the columns, not the
    test's windows. ``start_s``/``end_s``: draw only that stretch, in seconds since each test's
    first send (the figure's time axis), e.g. a few seconds of a long test at every 1 ms window.
    Raises ValueError when a configuration has no request of ``test`` or nothing in the range.
    """
    from . import figures

    k = comparison_bucket(configs, test, width_ns=width_ns, pad_s=pad_s, columns=columns,
                          max_windows=max_windows, start_s=start_s, end_s=end_s)
    rates, lows, reqs, caps = {}, {}, {}, {}
    for cfg in configs:
        r, a, b = _test_ranges([cfg], test, pad_s, start_s, end_s)[cfg.label]
        if k == 1:
            rates[cfg.label] = node_gbps(cfg, width_ns, a, b)
        else:
            env = node_envelope(cfg, width_ns, a, b, k=k)
            rates[cfg.label] = env["max"].rename("tx, all devices")
            lows[cfg.label] = env["min"]
        reqs[cfg.label] = r
        caps[cfg.label] = capacity_lines(cfg)
    what = (f"{figures.window_label(width_ns)} windows" if k == 1 else
            f"the highest {figures.window_label(width_ns)} window per "
            f"{figures.window_label(width_ns * k)}, band down to the lowest")
    fig = figures.plot_comparison(
        rates, reqs, link_gbps=caps, lows_gbps=lows or None,
        title=(f"Test {test}: " if test else "") + " vs ".join(rates)
        + f" ({what}, tx of one node)")
    if start_s is not None or end_s is not None:
        lo, hi = fig.axes[0].get_xlim()
        fig.axes[0].set_xlim(lo if start_s is None else start_s, hi if end_s is None else end_s)
    return fig

def tp_projection_frame(*, prompt_tokens: float, ttft_s: float, model=None, tp: int = 8,
                        tp_sizes=(2, 4, 8, 16), links_gbps=((200.0, 100.0),)) -> pd.DataFrame:
    """Return the projected TTFT increase (%) by TP size, one column per link change.

    From ``estimate.tp_projection`` (method.md, "Effect of TP size"): one measured TTFT at TP
    ``tp`` for ``prompt_tokens`` (at the old link speed) projected to ``tp_sizes``. ``model``
    defaults to the study's model (``estimate.STUDY_MODEL``). Index: TP size; columns like
    "8,192 prompt tokens, 200 → 100 Gb/s". Raises ``EstimateError`` as the estimate does.
    """
    from . import estimate as E

    model = model or E.STUDY_MODEL
    cols = {}
    for old, new in links_gbps:
        rows = E.tp_projection(model, tp_sizes, prompt_tokens=prompt_tokens, ttft_ref_s=ttft_s,
                               ref_tp=tp, link_old_gbps=old, link_new_gbps=new)
        cols[f"{int(prompt_tokens):,} prompt tokens, {old:g} → {new:g} Gb/s"] = \
            pd.Series({int(r["tp"]): r["increase_pct"] for r in rows})
    out = pd.DataFrame(cols)
    out.index.name = "tp"
    return out


def figure_tp(**kwargs):
    """Draw figure 6 from ``tp_projection_frame(**kwargs)`` (same arguments); return the Figure.

    Like every ``figure_*`` function here it returns a matplotlib Figure (ready for
    ``figures.save_figure``, or to display in a notebook)."""
    from . import estimate as E
    from . import figures

    frame = tp_projection_frame(**kwargs)
    return figures.figure_of(figures.plot_tp_projection(
        frame, title=f"Projected TTFT increase vs TP size, {(kwargs.get('model') or E.STUDY_MODEL).name}"
                     f"\n(upper bound, from a measured TTFT of "
                     f"{kwargs['ttft_s']:.2f} s at TP{kwargs.get('tp', 8)})"))


# ----------------------------------------------------------------------------------------------
# The whole report
# ----------------------------------------------------------------------------------------------


def default_request_logs(capture_path: str | os.PathLike) -> list[Path]:
    """Return the request log stored beside a capture (``requests.jsonl``, as the emulator and
    ``rdmascope demo`` write it), or an empty list."""
    p = Path(capture_path) / "requests.jsonl"
    return [p] if p.is_file() else []


def emulation_verdict(cfg: Configuration):
    """Run the emulation check on a configuration; return (verify.Verdict, status, headline).

    Tries ``expect="single"`` (one interface carried >= 99 % of the RDMA bytes: an NCCL_IB_HCA
    emulation), then ``expect="both"``. Status "ok" when either holds, except that a label saying
    "emulated" with traffic on both interfaces is a "fail" (the emulation did not take); "fail"
    when TCP is suspected (netdev bytes without RDMA bytes); "warn" otherwise (too little traffic,
    or a twin found at record time but not recorded: the headline names it).
    """
    single, both = cfg.emulation_checks()
    emulated_label = "emul" in cfg.label.lower()
    if single.ok:
        return single, "ok", f"{cfg.label}: one interface carried all RDMA traffic " \
                             f"({single.main_device}) — an emulated link"
    if both.ok:
        if emulated_label:
            return both, "fail", f"{cfg.label}: labelled emulated, but BOTH interfaces " \
                                 "carried traffic — the emulation did not take"
        return both, "ok", f"{cfg.label}: both interfaces carried traffic — the full link"
    if single.tcp_suspected:
        return single, "fail", f"{cfg.label}: the kernel network stack carried the traffic, " \
                               "not RDMA — did NCCL fall back to TCP sockets?"
    if single.unknown_devices:
        return single, "warn", (f"{cfg.label}: CANNOT JUDGE the emulation — the bytes of "
                                f"{', '.join(single.unknown_devices)} are unknown (unreadable "
                                "counters), not zero")
    if single.missing_devices:
        return single, "warn", (f"{cfg.label}: cannot judge the emulation — "
                                f"{', '.join(single.missing_devices)} found at record time but "
                                "not recorded")
    return single, "warn", f"{cfg.label}: emulation check inconclusive"


def _nccl_collectives(cfg: Configuration) -> list[dict]:
    from .nccl.report import collectives_tables

    return collectives_tables(cfg.capture)


def _nccl_witness(cfg: Configuration, v):
    from .nccl.report import witness_line

    return witness_line(cfg.capture, v, cfg.label)


def emulation_verdict_text(cfg: Configuration) -> str:
    """Return the emulation check as one short line for a figure."""
    v, status, headline = emulation_verdict(cfg)
    mark = {"ok": "✓", "fail": "✗", "warn": "?"}.get(status, "")
    return f"{mark} {headline.split(': ', 1)[-1]}"


#: Beside bytes per prompt token for a capture the emulator wrote (``emulated_capture``).
EMULATED_PER_TOKEN_NOTE = (
    "Emulated data: bytes per prompt token equal the formula ((2 x layers + 1) x hidden x bytes "
    "x 2(N-1)/N, 3.38 MB for the study's model) by construction; on hardware the study measured "
    "3.54-3.60 MB, 5-7 % more (packet headers and per-request traffic; method.md).")


def emulated_capture(meta: Mapping[str, Any]) -> bool:
    """Return True when a capture's manifest says the emulator produced its traffic.

    Written by ``rdmascope simulate capture`` (``writer`` "simulate" or ``host``
    "emulated-spark"), or recorded live from an emulated sysfs tree (``sysfs_root`` named
    ``rdmascope-sim*`` by ``simulate serve`` or ``rdmascope-demo-*`` by the demo).
    """
    if meta.get("writer") == "simulate" or meta.get("host") == "emulated-spark":
        return True
    root = os.path.basename(str(meta.get("sysfs_root") or "").rstrip("/"))
    return root.startswith(("rdmascope-sim", "rdmascope-demo-"))


def _per_token_note(*caps) -> str:
    """EMULATED_PER_TOKEN_NOTE (with a leading space) when any capture is emulated, else ""."""
    return " " + EMULATED_PER_TOKEN_NOTE if any(emulated_capture(c.meta) for c in caps) else ""


def _unclean_text(path) -> str:
    """The report's "clean end" value of a capture without a stop record, as ``inspect`` says it:
    being recorded (a recorder holds its lock) or an unclean end; read to the last flushed
    reading either way."""
    from rdmascope.capture import recording_pid

    pid = recording_pid(path)
    if pid is not None:
        who = f"pid {pid}" if pid > 0 else "a running process"
        return (f"NO: being recorded by {who}; this report covers the readings flushed to disk "
                "so far")
    return ("NO: unclean end (no stop record: killed, or the host went down); read to the last "
            "flushed reading")


def _capture_fields(cfg: Configuration) -> list[tuple[str, str]]:
    cap, m = cfg.capture, cfg.capture.meta
    audit = m.get("audit") or {}
    fields = [
        ("directory", str(cap.path)),
        ("host / kernel", f"{m.get('host', '?')} / {m.get('kernel', '?')}"),
        ("written by", f"{m.get('writer', '?')} (rdmascope {m.get('sampler_version', '?')})"),
        ("clock", str(m.get("clock", "CLOCK_MONOTONIC"))),
        ("sampling interval", f"{cap.interval_ns / 1e6:g} ms"),
        ("duration", f"{cap.duration_s():.3f} s"),
        ("RDMA devices", ", ".join(cfg.devices) or "none"),
        ("port rate", f"{cfg.port_gbps:g} Gb/s" if cfg.port_gbps else "unknown"),
        ("line rates (over-line flag)", "; ".join(_line_rate_items(cfg)) or "unknown"),
        ("counters", ", ".join(sorted(set(cap.counters["name"].astype(str))))),
        ("clean end", "yes" if cap.clean_end else _unclean_text(cap.path)),
    ]
    if audit:
        taken, missed = audit.get("sweeps_taken"), audit.get("sweeps_missed")
        if taken is not None:
            fields.append(("sweeps taken / missed",
                           f"{taken:,} / {missed:,} ({audit.get('sweeps_taken_pct', 0):.3f} % "
                           "taken)"))
        iv = audit.get("interval_ns") or {}
        pct = {k: v for k, v in iv.items() if isinstance(v, (int, float)) and k.startswith("p")}
        if pct:
            fields.append(("sweep interval percentiles",
                           ", ".join(f"{k} {v / 1e6:.3f} ms" for k, v in pct.items())))
        if audit.get("cpu_s") is not None:
            fields.append(("sampler CPU", f"{audit['cpu_s']:.2f} s"))
    flags = _flag_counts(cfg)
    fields.append(("intervals by flag", ", ".join(f"{k} {v:,}" for k, v in flags.items())))
    if cfg.log is not None:
        logs = cfg.log if isinstance(cfg.log, list) else [cfg.log]
        for lg in logs:
            al = lg.alignment or {}
            fields.append(("request log", f"{lg.path} ({lg.format}, {len(lg.requests)} requests, "
                                          f"{lg.n_failed} failed; aligned by "
                                          f"{al.get('method', '?')})"))
            # failed requests with their reasons, failed consistency checks, several runs
            if lg.notes:
                fields.append(("request log notes", " | ".join(lg.notes)))
    return fields


REQUEST_COLUMNS = ("request_id", "test", "round", "prompt_tokens", "output_tokens", "ttft_s",
                   "decode_speed_tps", "prefill_tx_bytes", "prefill_per_token_bytes",
                   "prefill_tx_gbps", "prefill_peak_tx_gbps", "prefill_over_line_windows",
                   "prefill_bursts",
                   "decode_tx_gbps")
TEST_COLUMNS = ("test", "rounds", "n_requests", "prompt_tokens", "time_to_last_first_token_s",
                "time_to_last_first_token_min_s", "time_to_last_first_token_max_s",
                "decode_speed_tps", "prefill_tx_bytes", "prefill_per_token_bytes",
                "prefill_peak_tx_gbps")


#: At most this many per-test cards per configuration (the study's plan has 6 tests).
MAX_TEST_CARDS = 6


def ttft_cards(label: str, tests: pd.DataFrame, *, limit: int = MAX_TEST_CARDS
               ) -> list[tuple[str, str, str]]:
    """Return the headline cards of one configuration's TTFT, one per test (never a mean
    across tests: tests differ in prompt length, so such a mean means nothing).

    ``tests``: ``attribute``'s per-test table (measured rounds). A one-request test shows its
    TTFT; a multi-request test its time to the last first token (method.md, "Metrics") with the
    mean TTFT in the detail; both with the min-max over rounds. Beyond ``limit`` tests, one
    card points to the per-test table. Returns (label, value, detail) tuples.
    """
    cards = []
    if not len(tests):
        return cards
    for _, t in tests.head(limit).iterrows():
        tok = t.get("prompt_tokens")
        tok_s = f"{int(tok):,} prompt tokens, " if pd.notna(tok) else ""
        rounds = f"{int(t['rounds'])} round(s)"
        if int(t["n_requests"]) == 1:
            lo, hi = t["mean_ttft_min_s"], t["mean_ttft_max_s"]
            cards.append((f"{label}: test {t['test']} TTFT", f"{t['mean_ttft_s']:.2f} s",
                          f"{tok_s}{rounds}, min–max {lo:.2f}–{hi:.2f} s"))
        else:
            lo = t["time_to_last_first_token_min_s"]
            hi = t["time_to_last_first_token_max_s"]
            cards.append((f"{label}: test {t['test']} time to last first token",
                          f"{t['time_to_last_first_token_s']:.2f} s",
                          f"{int(t['n_requests'])} requests, {tok_s}{rounds}, min–max "
                          f"{lo:.2f}–{hi:.2f} s; mean TTFT {t['mean_ttft_s']:.2f} s"))
    if len(tests) > limit:
        cards.append((f"{label}: {len(tests) - limit} more test(s)", "…",
                      "see the per-test table"))
    return cards


def change_cards(tests: pd.DataFrame, label_a: str, label_b: str, *,
                 limit: int = MAX_TEST_CARDS) -> list[tuple[str, str, str]]:
    """Return the headline cards of a comparison: one per test, in the table's order.

    ``tests``: ``compare.Comparison.tests`` (``ttlft_change_s``, ``ttlft_change_pct``,
    ``estimate_s``, ``bound_used_pct``). Each card gives the change of the time to the last
    first token as ``compare`` computed it (from the unrounded times), in s to the ms and in %,
    and what share of the estimate's upper bound it is (method.md, "The estimate"). Beyond
    ``limit`` tests one card points to the comparison table. Returns (label, value, detail).
    """
    cards = []
    for _, t in tests.head(limit).iterrows():
        est, used = float(t["estimate_s"]), float(t["bound_used_pct"])
        bound = (f"{used:.0f} % of the estimate's {est:.3f} s bound" if np.isfinite(used)
                 else f"estimate ≤ {est:.3f} s")
        cards.append((f"test {t['test']}: time to last first token",
                      f"{float(t['ttlft_change_s']):+.3f} s "
                      f"({float(t['ttlft_change_pct']):+.1f} %)",
                      f"{label_a} → {label_b}; {bound}"))
    if len(tests) > limit:
        cards.append((f"{len(tests) - limit} more test(s)", "…", "see the comparison table"))
    return cards


def _pick(df: pd.DataFrame, cols) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]]


def build_report(configs: Sequence[Configuration], *, progress: Callable[[str], None] | None = None,
                 title: str | None = None, warmup_rounds: int = 0,
                 setup_options: Mapping[str, Any] | None = None) -> ReportContent:
    """Run the analysis on one or more configurations and assemble the report's content.

    Per configuration: capture metadata and sampling quality, the emulation verdict
    (``verify.verify_emulation``), figure 1 and the peak-vs-window table (``peaks.peak_table``)
    for the longest lone request, the burst summary (``bursts.burst_analysis``), the per-request
    and per-test tables (``attribute.attribute``), and the per-device traffic. With two
    configurations also figure 2 per common test and the comparison with the estimate
    (figures 4-6, via ``compare``). ``progress`` receives one line per step. ``warmup_rounds``:
    the first N rounds of each test are warm-up (``attribute``): listed in the per-request table
    with a ``warmup`` column, left out of the per-test means and the comparison.
    Several configurations: each after the first is compared with the first (the baseline), and
    figure 2 stacks all of them; one configuration has no comparison sections.
    ``setup_options``: keyword arguments of ``rdmascope.models.resolve_setup`` (model, TP size,
    nodes, links, emulated B) for every comparison; what they leave open comes from the
    captures' manifests (``setup_for``). Raises ValueError for zero configurations.
    """
    from .attribute import attribute
    from .bursts import burst_analysis
    from .peaks import peak_table

    say = progress or (lambda _m: None)
    if not configs:
        raise ValueError("a report needs at least one configuration")
    labels = [c.label for c in configs]
    content = ReportContent(
        title=title or ("rdmascope report: " + " vs ".join(labels)),
        subtitle=f"{len(configs)} configuration(s): " + "; ".join(
            f"{c.label} ({c.capture.path.name}, {c.capture.duration_s():.1f} s)" for c in configs))
    attributions = {}
    for cfg in configs:
        one_pass = cfg.streamed and "_pass" not in cfg.__dict__

        def read_once(ranges=None, cfg=cfg):
            """The capture's one pass; it also answers the attribution's ranges."""
            say(f"[{cfg.label}] reading the capture once (emulation check, "
                + ("attribution, " if ranges is not None else "")
                + "bursts, timeline, per-device traffic)")
            got = capture_pass(cfg, capacity_gbps=cfg.port_gbps or 200.0, ranges=ranges,
                               devices_width_ns=devices_width_ns(cfg.capture.duration_s()))
            cfg.__dict__["_pass"] = got
            if got is not None:
                cfg._checks = got.checks
            elif ranges is not None:  # no shared pass for this capture: the ranges' own
                ranges.run()

        att = None
        if len(cfg.requests):
            say(f"[{cfg.label}] attributing traffic to {len(cfg.requests)} request(s)")
            att = attribute(cfg.capture, cfg.log if not isinstance(cfg.log, list) else cfg.log[0],
                            intervals=cfg.__dict__.get("intervals"),
                            warmup_rounds=warmup_rounds,
                            origin_ns=window_origin(cfg), _run=read_once if one_pass else None)
        if one_pass and "_pass" not in cfg.__dict__:
            read_once()
        cp = cfg.__dict__.get("_pass")
        say(f"[{cfg.label}] emulation check")
        v, status, headline = emulation_verdict(cfg)
        content.verdicts.append(Verdict(headline, status, v.message))
        content.judged.append(STATUS_VERDICT[status])
        nccl_line = _nccl_witness(cfg, v)  # NCCL's own log beside it, when <capture>/nccl/ has one
        if nccl_line is not None:
            content.verdicts.append(Verdict(*nccl_line))
        tables = []
        if att is not None:
            attributions[cfg.label] = att
            req = pick_request(cfg)
            send, first = int(req["t_send_ns"]), int(req["t_first_ns"])
            say(f"[{cfg.label}] figure 1 and peaks for request {req['request_id']}")
            content.figures.append(ReportFigure(
                _anchor(f"request-{cfg.label}"), f"{cfg.label}: one request at 1 ms",
                figure_request(cfg, str(req["request_id"])),
                "Each spike in the zoom is one all-reduce of the prefill, at close to line rate; "
                "the grey band is the prefill (send to first token), after it the steady decode."))
            if cfg.streamed:  # reads only the segments around the prefill
                from .peaks import peak_table_capture

                pk = peak_table_capture(_info_of(cfg.capture), start_ns=send, end_ns=first,
                                        by="direction", origin_ns=window_origin(cfg))
            else:
                pk = peak_table(cfg.intervals, start_ns=send, end_ns=first, by="direction",
                                origin_ns=window_origin(cfg))
            pk_tx = pk[pk["series"] == "tx"]
            peaks = {int(r.window_ns): float(r.peak_gbps) for r in pk_tx.itertuples()
                     if r.window != "whole range"}
            pk1_row = pk_tx[pk_tx["window_ns"] == MS_NS]
            pk1_row = pk1_row.iloc[0] if len(pk1_row) else None
            content.figures.append(ReportFigure(
                _anchor(f"windows-{cfg.label}"), f"{cfg.label}: the averaging window decides "
                "the peak", figure_windows(cfg, str(req["request_id"]), peaks=peaks),
                "The same prefill averaged over 1, 5 and 100 ms windows (aligned on the "
                "capture start, as every table): the peak falls as the window widens, although "
                "the bytes are the same. The 5 ms panel is a step line whose values beat: the "
                "bursts come every ~20 ms, so a 5 ms window holds a whole burst, part of one or "
                "none, and neighbouring 5 ms values rise and fall in a slow pattern; that is the "
                "averaging, not a drawing error. " + ONE_MS_REF))
            tables.append(ReportTable(
                _pick(pk_tx.assign(over_line_causes=pk_tx["over_line_causes"].replace("", "none")),
                      ("window", "peak_gbps", "p50_gbps", "p90_gbps", "p99_gbps",
                              "mean_gbps", "n_windows", "raw_max_gbps", "n_over_line_windows",
                              "over_line_causes")),
                title=f"Peak vs window: prefill of request {req['request_id']} "
                      f"({(first - send) / 1e9:.2f} s), tx of one node",
                note="'whole range' is the mean over the whole prefill. Windows are aligned "
                     "on the capture start, as in every table and figure. "
                     + ONE_MS_REF, name="peaks"))
            warm = ("warmup_rounds",) if warmup_rounds else ()
            tables.append(ReportTable(
                _pick(att.tests, TEST_COLUMNS[:3] + warm + TEST_COLUMNS[3:]), title="Per test",
                note="Means over rounds; min/max columns give the spread. "
                     "Time to last first token covers all prompts' bytes. "
                     "Prefill peak: the highest 1 ms window. " + ONE_MS_REF
                     + (f" The first {warmup_rounds} round(s) of each test are warm-up, not "
                        "counted." if warmup_rounds else "") + _per_token_note(cfg.capture),
                name="per-test"))
            if len(att.cells):
                from .cellstats import pct_name

                cols = ["scope", "test", "round", "n_requests"] + [
                    f"{m}_{k}_s" for m in ("ttft", "tpot", "itl", "e2e")
                    for k in ("mean", *map(pct_name, att.percentiles), "max")] + [
                    "output_throughput_tps", "total_token_throughput_tps",
                    "request_throughput_rps"]
                tables.append(ReportTable(
                    _pick(att.cells, cols), title="Per cell: latency percentiles and throughput",
                    note="Per test (all its measured rounds) and per round, as vLLM's "
                         "calculate_metrics: TTFT and E2E per request, TPOT per request with "
                         "more than one output token, ITL every chunk gap pooled; throughput "
                         "over first send to last token. Warm-up left out.",
                    name="per-cell"))
            tables.append(ReportTable(_pick(att.requests, REQUEST_COLUMNS
                                            + (("warmup",) if warmup_rounds else ())),
                                      title="Per request",
                                      note="Prefill = [send, first token], decode = [first "
                                           "token, last token]; bytes are tx of one node. "
                                           "Prefill peak: the highest 1 ms window (aligned on "
                                           "the capture start). " + ONE_MS_REF
                                           + _per_token_note(cfg.capture),
                                      name="per-request"))
        say(f"[{cfg.label}] bursts")
        if cp is not None:  # from the one pass
            bt = cp.bursts
        elif cfg.streamed:  # one pass over the segments
            from .bursts import burst_analysis_capture

            bt = burst_analysis_capture(_info_of(cfg.capture),
                                        capacity_gbps=cfg.port_gbps or 200.0, by="direction",
                                        origin_ns=window_origin(cfg))
        else:
            bt = burst_analysis(cfg.intervals, capacity_gbps=cfg.port_gbps or 200.0,
                                by="direction", origin_ns=window_origin(cfg))
        tables.insert(1 if len(tables) else 0, ReportTable(
            _pick(bt.summary, ("series", "n_bursts", "duty_cycle", "burst_bytes", "total_bytes",
                               "burst_share", "mean_gap_s", "median_gap_s", "enter_gbps",
                               "leave_gbps")),
            title="Burst summary (1 ms windows, whole capture)", name="bursts"))
        say(f"[{cfg.label}] zoomable timeline")
        _add_timeline(content, cfg)
        say(f"[{cfg.label}] per-device traffic")
        content.figures.append(ReportFigure(
            _anchor(f"devices-{cfg.label}"), f"{cfg.label}: traffic per RDMA device",
            figure_devices(cfg, verdict=emulation_verdict_text(cfg),
                           width_ns=devices_width_ns(cfg.capture.duration_s()),
                           rates=None if cp is None else cp.devices),
            "The two RDMA devices are the two PCIe paths of one port; on an NCCL_IB_HCA "
            "emulation one of them carries everything. Each step is the mean rate over its "
            f"{_window_label(devices_width_ns(cfg.capture.duration_s()))} window (wider on long "
            "captures); the 1 ms bursts are in the timeline and the tables."))
        dev = v.devices.reset_index()
        tables.append(ReportTable(_pick(dev, ("device", "tx_bytes", "rx_bytes", "share",
                                              "peak_1ms_gbps", "nan_windows",
                                              "over_line_windows")),
                                  title="Bytes per RDMA device", headers={"share": "share"},
                                  note="Peak 1 ms: the highest 1 ms window of the device, tx or "
                                       "rx. " + ONE_MS_REF + " " + _line_rate_note(cfg),
                                  name="devices"))
        tables += [ReportTable(**t) for t in _nccl_collectives(cfg)]  # <capture>/nccl-inspector/
        content.sections.append(ReportSection(cfg.label, tables))
        content.captures.append((cfg.label, _capture_fields(cfg)))
        if cp is not None:  # its parts are in the content now: hold one capture's at a time
            cfg.__dict__.pop("_pass", None)
        if cfg.label in attributions:
            content.cards.extend(ttft_cards(cfg.label, attributions[cfg.label].tests))
            pk1 = peaks.get(MS_NS)
            if pk1 is not None:
                over = ""
                if pk1_row is not None and int(pk1_row["n_over_line_windows"]):
                    over = (f"; {int(pk1_row['n_over_line_windows'])} window(s) over line rate "
                            f"kept out ({pk1_row['over_line_causes']}), raw max "
                            f"{float(pk1_row['raw_max_gbps']):.0f} Gb/s")
                content.cards.append((f"{cfg.label}: 1 ms peak", f"{pk1:.0f} Gb/s",
                                      f"{ONE_MS_REF}; 100 ms: "
                                      f"{peaks.get(100 * MS_NS, float('nan')):.0f} Gb/s"
                                      + over))
    compared = [c for c in configs if c.label in attributions]
    if len(compared) >= 2:
        _add_comparison(content, compared, attributions, say, setup_options or {})
    # figures first: per-request figures, then comparison, then device stacks
    order = {"request": 0, "windows": 1, "compare": 2, "extra": 3, "tokens": 4, "tp": 5,
             "devices": 6}
    content.figures.sort(key=lambda f: order.get(f.name.split("-")[0], 9))
    return content


def _add_timeline(content: ReportContent, cfg: Configuration) -> None:
    """Add the zoomable 1 ms timeline of a configuration's node tx (whole capture, prefills
    shaded) when plotly (the analysis extra) is installed; else a note in its place."""
    from . import figures

    lo, hi = cfg.data_span("tx")
    n = -(-(hi - lo) // MS_NS) + 1
    cp = cfg.__dict__.get("_pass")
    if cp is not None:  # made in the report's one pass
        rates = cp.timeline
    elif n <= figures.MAX_TIMELINE_POINTS:
        rates = node_gbps(cfg, MS_NS, lo, hi).iloc[:, 0]
    else:  # a long capture: its min/max envelope, streamed (never every 1 ms window in memory)
        from .envelope import bucket_windows

        rates = node_envelope(cfg, MS_NS, lo, hi,
                              k=bucket_windows(n, figures.MAX_TIMELINE_POINTS // 2))
    spans = []
    if len(cfg.requests):
        t0 = int(cfg.capture.t_start_ns)
        spans = [((int(a) - t0) / 1e9, (int(b) - t0) / 1e9) for a, b in
                 zip(cfg.requests["t_send_ns"], cfg.requests["t_first_ns"], strict=True)]
    try:
        html, note = figures.timeline_html(
            {f"{cfg.label}: tx, all devices, 1 ms": rates},
            origin_ns=int(cfg.capture.t_start_ns), width_ns=MS_NS,
            title=f"{cfg.label}: the whole run at 1 ms", link_gbps=capacity_lines(cfg),
            spans_s=_merge_spans(spans), include_plotlyjs=not content.timelines,
            div_id=f"timeline-{_anchor(cfg.label)}",
            zoom_hint=("zoom in to see where the bursts are; every 1 ms window of a stretch: "
                       "`rdmascope rates CAPTURE --window 1ms --from S --to S`, or the figures "
                       "of one request: `rdmascope plot request CAPTURE --request-id ID`"))
    except ModuleNotFoundError:
        return
    content.timelines.append((
        f"timeline-{_anchor(cfg.label)}", f"{cfg.label}: the whole run at 1 ms", html,
        "Drag across a range to zoom into it, use the mouse wheel to zoom, double-click to see "
        "the whole run again: from the run down to single all-reduces. Grey: prefills (send "
        "to first token). " + ONE_MS_REF + (f" Here {note}." if note else "")))


def _merge_spans(spans):
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [tuple(x) for x in out]


def _add_comparison(content: ReportContent, configs, attributions, say,
                    setup_options: Mapping[str, Any]) -> None:
    """Figure 2 per test common to all configurations, and (with ``analysis.compare``) figures
    4-6 and tables for each configuration after the first against the first."""
    tests = [t for t in attributions[configs[0].label].tests["test"].astype(str)]
    for cfg in configs[1:]:
        have = set(attributions[cfg.label].tests["test"].astype(str))
        tests = [t for t in tests if t in have]
    for test in tests:
        say(f"figure 2 for test {test}")
        k = comparison_bucket(configs, test)
        drawn = ("" if k == 1 else
                 f" The test is longer than the figure has pixels: each column shows the 1 ms "
                 f"max per {k:,} ms (the line: every burst at its 1 ms height) and a band down "
                 f"to the 1 ms min; every 1 ms window of a stretch: `rdmascope plot compare "
                 f"A B --test {test} --from S --to S -o FILE`.")
        content.figures.append(ReportFigure(
            _anchor(f"compare-{test}"), f"Test {test}: " + " above ".join(c.label for c in configs),
            figure_comparison(configs, test),
            "The configurations on one time axis (seconds since each test's first send), all "
            "rounds; grey = prefill, red line = first token. A slower link caps each burst "
            "lower and stretches the prefill." + drawn))
    sections = []
    for i, b in enumerate(configs[1:]):
        sections.append(_add_estimate_comparison(content, (configs[0], b), attributions, say,
                                                 setup_options, tp_figure=i == 0,
                                                 several=len(configs) > 2))
    content.sections[:0] = sections


def setup_for(a: Configuration, b: Configuration, setup_options: Mapping[str, Any] | None = None):
    """Return the ``rdmascope.models.Setup`` of comparing ``a`` (baseline) with ``b``.

    ``setup_options`` (``resolve_setup`` keywords) first, then each capture's manifest (setup
    recorded by ``record``, port rate, twins) and ``b``'s emulation check. Raises ModelError.
    """
    from rdmascope.models import resolve_setup

    from .compare import run_facts

    return resolve_setup(**dict(setup_options or {}), run_a=run_facts(a.capture, a.interfaces),
                         run_b=run_facts(b.capture, b.interfaces))


def _add_estimate_comparison(content: ReportContent, configs, attributions, say,
                             setup_options: Mapping[str, Any], *, tp_figure: bool = True,
                             several: bool = False) -> ReportSection:
    """Figures 4-6 and the comparison table from ``analysis.compare``; returns its section."""
    a, b = configs
    say(f"comparison with the estimate: {a.label} → {b.label}")
    setup = setup_for(a, b, setup_options)
    cmp = comparison(configs, attributions, setup=setup)
    for w in reversed(cmp.warnings):  # first in the page: the inputs look wrong
        head, _, _ = w.partition("? ")
        content.verdicts.insert(0, Verdict(head + "?" if head != w else w, "fail", w))
    t = cmp.tests
    tag = f"-{_slug(b.label)}" if several else ""
    pair = f"{a.label} → {b.label}"
    content.figures.append(ReportFigure(
        "extra-prefill" + tag, f"Extra prefill time per test, {pair}: measured vs estimate",
        figure_extra_prefill(cmp),
        f"Measured: increase of the time to the last first token from {a.label} to {b.label} "
        "(mean of rounds, min-max). Estimate: the prefill bytes sent again at the speed "
        f"difference ({cmp.link_a_gbps:g} → {cmp.link_b_gbps:g} Gb/s), an upper bound (full "
        "link rate, no overlap with compute)."))
    content.figures.append(ReportFigure(
        "tokens-increase" + tag, f"Prefill-time increase vs prompt tokens, {pair}",
        figure_tokens(cmp),
        "One point per round; the line is the estimate (upper bound) per test."))
    big = t.loc[t["prompt_tokens"].astype(float).idxmax()]
    if tp_figure and setup.tp >= 2 and setup.layout == "tp" \
            and setup.link_b_gbps < cmp.link_a_gbps:
        links = [(cmp.link_a_gbps, setup.link_b_gbps)]
        if setup.b_bound_gbps != setup.link_b_gbps:
            links.append((cmp.link_a_gbps, setup.b_bound_gbps))
        try:
            fig = figure_tp(prompt_tokens=float(big["prompt_tokens"]),
                            ttft_s=float(big["ttlft_a_s"]), model=setup.model, tp=setup.tp,
                            links_gbps=tuple(links))
        except ValueError as exc:  # EstimateError: the TTFT is shorter than its network time
            say(f"no TP projection: {exc}")
        else:
            content.figures.append(ReportFigure(
                "tp-projection", "Projected TTFT increase vs TP size", fig,
                f"An illustration from the estimate for {setup.model.describe()} (model from "
                f"{setup.sources.get('model', 'the options')}), starting from test "
                f"{big['test']}'s measured {float(big['ttlft_a_s']):.2f} s at "
                f"{cmp.link_a_gbps:g} Gb/s, TP{setup.tp} on {setup.nodes} node(s)."))
    cols = ("test", "prompt_tokens", "ttlft_a_s", "ttlft_b_s", "ttlft_change_s",
            "ttlft_change_pct", "estimate_s", "estimate_arch_s", "bound_used_pct",
            "exceeds_bound", "decode_speed_change_pct",
            "per_token_a_bytes", "per_token_b_bytes", "correction_to_real_s", "ttlft_b_real_s")
    layout = "TP all-reduce" if setup.layout == "tp" else "EP all-to-all"
    headers = {"ttlft_a_s": f"time to last first token, {a.label} (s)",
               "ttlft_b_s": f"time to last first token, {b.label} (s)",
               "ttlft_change_s": "change (s)", "ttlft_change_pct": "change (%)",
               "estimate_s": "estimate, upper bound (s)",
               "estimate_arch_s": f"from the architecture, {setup.model.name} {layout} (s)",
               "bound_used_pct": "of the bound (%)",
               "exceeds_bound": "exceeds the bound (> 2 %)",
               "decode_speed_change_pct": "decode speed change (%)",
               "per_token_a_bytes": f"prefill per token, {a.label} (MB)",
               "per_token_b_bytes": f"prefill per token, {b.label} (MB)",
               "correction_to_real_s": f"correction {cmp.link_b_gbps:g} → "
                                       f"{cmp.real_gbps or 0:g} Gb/s (s)",
               "ttlft_b_real_s": f"corrected to a real {cmp.real_gbps or 0:g} Gb/s cable (s)"}
    links = "; ".join(f"{c.label}: {setup.link_label(side)}" for c, side in ((a, "A"), (b, "B"))
                      if c.label != setup.link_label(side))
    setup_note = ((links + ". " if links else "")
                  + f"Setup: {setup.describe()}. Model: {setup.model.describe()}. From: "
                  + "; ".join(f"{k} {v}" for k, v in setup.sources.items()) + ".")
    content.cards[:0] = change_cards(t, a.label, b.label)
    return ReportSection(
        f"Comparison: {a.label} → {b.label}",
        [ReportTable(_pick(t, cols), headers=headers,
                     name="comparison" + tag,
                     note=_per_token_note(a.capture, b.capture).strip())],
        note=setup_note + " " + " ".join(n for n in cmp.notes if not n.startswith("setup: ")),
        name="")


def comparison(configs: Sequence[Configuration], attributions: Mapping[str, Any] | None = None,
               *, warmup_rounds: int = 0, setup=None):
    """Return ``compare.compare`` of two configurations (attributing them first if needed).

    ``setup`` (a ``rdmascope.models.Setup``; default ``setup_for`` the two configurations: the
    captures' manifests, else the study's) gives the model and the links: A's link, B's real
    speed (an emulated link's, e.g. ~109 Gb/s) and the cable it is corrected to. Each
    capture's interfaces (``Configuration.interfaces``) let ``compare`` warn when the first
    looks like the emulated link and the second like the full one (swapped).
    ``warmup_rounds`` is passed to ``attribute`` for configurations not yet attributed.
    Raises ValueError without request logs or without a common test.
    """
    from .attribute import attribute
    from .compare import compare

    if len(configs) != 2:
        raise ValueError(f"a comparison needs two configurations, got {len(configs)}")
    atts = dict(attributions or {})
    for cfg in configs:
        if cfg.label not in atts:
            if not len(cfg.requests):
                raise ValueError(f"{cfg.label}: no request log given (needed to compare)")
            log = cfg.log[0] if isinstance(cfg.log, list) else cfg.log
            atts[cfg.label] = attribute(cfg.capture, log, intervals=cfg.__dict__.get("intervals"),
                                        warmup_rounds=warmup_rounds,
                                        origin_ns=window_origin(cfg))
    a, b = configs
    if setup is None:
        setup = setup_for(a, b)
    return compare(atts[a.label], atts[b.label], label_a=a.label, label_b=b.label,
                   interfaces_a=a.interfaces, interfaces_b=b.interfaces, setup=setup)


def figure_extra_prefill(cmp_or_configs):
    """Draw figure 4 from a ``compare.Comparison`` (or two configurations)."""
    from . import figures

    cmp = cmp_or_configs if hasattr(cmp_or_configs, "tests") else comparison(cmp_or_configs)
    return figures.figure_of(figures.plot_extra_prefill(
        cmp.tests, title=f"Extra prefill time per test, {cmp.label_a} → {cmp.label_b}: "
                         "measured vs estimate"))


def figure_tokens(cmp_or_configs):
    """Draw figure 5 from a ``compare.Comparison`` (or two configurations)."""
    from . import figures

    cmp = cmp_or_configs if hasattr(cmp_or_configs, "tests") else comparison(cmp_or_configs)
    measured = cmp.rounds.rename(columns={"tokens": "prompt_tokens", "increase": "increase_s"})
    return figures.figure_of(figures.plot_increase_vs_tokens(
        measured, {"estimate (upper bound)": cmp.tests[["prompt_tokens", "estimate_s"]]},
        title=f"Prefill-time increase vs prompt tokens, {cmp.label_a} → {cmp.label_b}"))


def write_report(captures: Sequence[str | os.PathLike], request_logs=None,
                 out_dir: str | os.PathLike = "rdmascope-report", *,
                 labels: Sequence[str] | None = None, offset_s: float | None = None,
                 embed: bool = True, title: str | None = None,
                 progress: Callable[[str], None] | None = None, warmup_rounds: int = 0,
                 origin_s: float | None = None,
                 setup_options: Mapping[str, Any] | None = None,
                 runs: Sequence[int] | None = None,
                 verdicts_out: list[str] | None = None) -> Path:
    """Analyse one or more captures with their request logs and write the HTML report.

    ``captures``: one or more capture directories (each after the first is compared with it,
    e.g. 200 Gb/s and
    the emulated 100 Gb/s; the first is the baseline). ``request_logs``: one log path per capture
    (same order), or None to use each capture's own ``requests.jsonl`` when present. ``labels``:
    one per capture (default: the manifest's label, else the directory name). Writes
    ``out_dir/report.html`` (figures inline), ``out_dir/figures/*.png``, ``out_dir/tables/*.csv``
    and returns the HTML path. ``progress`` receives one line per step (the CLI prints them on
    stderr). ``warmup_rounds``: the first N rounds of each test are warm-up (``build_report``).
    ``origin_s``: the window grid's origin in seconds after each capture's start (default the
    capture start; ``load_configuration``). ``runs``: the run to keep of each capture's request
    log when it holds several (vLLM ``--append-result``): one value for every capture, or one
    per capture. ``verdicts_out``: a list that receives the verdict words ("PASS", "FAIL",
    "CANNOT JUDGE") of the report's emulation checks (``ReportContent.judged``). Raises
    ValueError (mismatched arguments, a bad log or capture: the message names the file) and
    OSError.
    """
    captures = list(captures)
    if not captures:
        raise ValueError("give at least one capture")
    if request_logs is not None and len(request_logs) not in (0, len(captures)):
        raise ValueError(f"give one request log per capture ({len(captures)} capture(s), "
                         f"{len(request_logs)} log(s))")
    if labels is not None and len(labels) not in (0, len(captures)):
        raise ValueError(f"give one label per capture ({len(captures)} capture(s), "
                         f"{len(labels)} label(s))")
    runs = list(runs or [])
    if len(runs) not in (0, 1, len(captures)):
        raise ValueError(f"give one --run for every capture or one per capture "
                         f"({len(captures)} capture(s), {len(runs)} run(s))")
    say = progress or (lambda _m: None)
    configs = []
    for i, cap in enumerate(captures):
        logs = [request_logs[i]] if request_logs else default_request_logs(cap)
        say(f"loading {cap}" + (f" with {', '.join(map(str, logs))}" if logs else ""))
        run = runs[i] if len(runs) > 1 else (runs[0] if runs else None)
        configs.append(load_configuration(cap, logs, label=labels[i] if labels else None,
                                          offset_s=offset_s, origin_s=origin_s, run=run))
    seen: dict[str, int] = {}
    for cfg in configs:  # labels name sections, figures and CSV files: keep them distinct
        n = seen.get(cfg.label, 0) + 1
        seen[cfg.label] = n
        if n > 1:
            cfg.label += f" ({n})"
    content = build_report(configs, progress=say, title=title, warmup_rounds=warmup_rounds,
                           setup_options=setup_options)
    if verdicts_out is not None:
        verdicts_out.extend(content.judged)
    return render_report(content, out_dir, embed=embed, progress=say)
