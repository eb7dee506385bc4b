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

This module assembles the page; its sections live beside it and every public name is importable
from here: ``report_tables`` (the content model, headers, cells, CSV names), ``report_pass``
(the one capture pass, :class:`Configuration`, :func:`load_configuration`), ``report_figures``
(the figure glue) and ``report_cards`` (headline cards and the capture's facts).
"""

from __future__ import annotations

import base64
import datetime as _dt
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .report_cards import (
    EMULATED_PER_TOKEN_NOTE,
    MAX_TEST_CARDS,
    REQUEST_COLUMNS,
    TEST_COLUMNS,
    capture_fields,
    change_cards,
    emulated_capture,
    emulation_verdict,
    emulation_verdict_text,
    nccl_collectives,
    nccl_witness,
    peak_card,
    per_token_note,
    pick_columns,
    ttft_cards,
)
from .report_figures import (
    DEVICE_MAX_WINDOWS,
    DEVICE_WIDTHS_MS,
    FIGURE_COLUMNS,
    FIGURE_MAX_WINDOWS,
    ONE_MS_LINK,
    ONE_MS_REF,
    ONE_MS_UNCERTAINTY,
    PEAKS_TABLE_NOTE,
    at_line_of,
    capacity_lines,
    comparison_bucket,
    comparison_needs,
    default_request_logs,
    device_rates,
    devices_width_ns,
    fed_request_figures,
    figure_comparison,
    figure_devices,
    figure_request,
    figure_tp,
    figure_windows,
    line_rate_items,
    line_rate_note,
    node_envelope,
    node_gbps,
    pick_request,
    report_window_label,
    request_figures,
    tp_projection_frame,
)
from .report_pass import (
    DEFAULT_WINDOWS_NS,
    LINK_LABELS,
    MS_NS,
    CapturePass,
    Configuration,
    capture_pass,
    flag_counts,
    info_of,
    load_configuration,
    window_origin,
)
from .report_tables import (
    STATUS_VERDICT,
    ReportContent,
    ReportFigure,
    ReportSection,
    ReportTable,
    Verdict,
    column_header,
    csv_frame,
    csv_name,
    figure_png,
    format_cell,
    format_table,
    format_table_lazy,
    html_anchor,
    slug,
)

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


def cell_tables(cells, percentiles) -> list[ReportTable]:
    """The per-cell statistics as two tables a page can hold: latencies in long form (one row
    per cell and metric: mean, the percentiles, max, in s) and throughput per cell. ``cells``:
    ``Attribution.cells`` (one row per scope/test/round, columns ``<metric>_<stat>_s``)."""
    from .cellstats import pct_name

    key = ["scope", "test", "round", "n_requests"]
    stats = ("mean", *map(pct_name, percentiles), "max")
    base = cells[[k for k in key if k in cells.columns]].reset_index(drop=True)
    parts = []
    for j, m in enumerate(("ttft", "tpot", "itl", "e2e")):
        part = base.copy()
        part["metric"] = m.upper()
        for k in stats:
            part[f"{k}_s"] = cells[f"{m}_{k}_s"].to_numpy() if f"{m}_{k}_s" in cells else np.nan
        part["_order"] = np.arange(len(part)) * 4 + j  # each cell's four metrics together
        parts.append(part)
    lat = (pd.concat(parts, ignore_index=True).sort_values("_order", kind="stable")
           .drop(columns="_order").reset_index(drop=True))
    thr = pick_columns(cells, key + ["output_throughput_tps", "total_token_throughput_tps",
                                     "request_throughput_rps"])
    return [ReportTable(lat, title="Per cell: latency percentiles",
                        note="Per test (all its measured rounds) and per round, as vLLM's "
                             "calculate_metrics: TTFT and E2E per request, TPOT per request with "
                             "more than one output token, ITL every chunk gap pooled. Warm-up "
                             "left out.", name="per-cell"),
            ReportTable(thr, title="Per cell: throughput",
                        note="Output tokens, all tokens and requests per second, over first send "
                             "to last token.", name="per-cell-throughput")]


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
        png = figure_png(f.figure, dpi=dpi)
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
        anchor = html_anchor(s.title)
        while anchor in used:
            anchor += "-x"
        used.add(anchor)
        # an unnamed section takes its (unique) anchor, so that sections of one title differ
        sec = s if s.name is not None else ReportSection(anchor, s.tables, s.note, anchor)
        tables = []
        for i, t in enumerate(s.tables):
            entry = {"title": t.title, "note": t.note, "csv": None,
                     **format_table_lazy(t.frame, t.headers)}
            if len(t.frame):
                (out / "tables").mkdir(exist_ok=True)
                stem = base = csv_name(sec, t, i)
                k = 1
                while stem in csv_used:
                    k += 1
                    stem = f"{base}-{k}"
                csv_used.add(stem)
                href = f"tables/{stem}.csv"
                _atomic_write(out / href, csv_frame(t.frame).to_csv(index=False).encode())
                entry["csv"] = href
                csv_files.append({"href": href, "section": s.title,
                                  "title": t.title or s.title})
            tables.append(entry)
        sections.append({"title": s.title, "anchor": anchor, "note": s.note, "tables": tables,
                         "points": [(k, _linked(v)) for k, v in s.items]})
    env = Environment(loader=PackageLoader("rdmascope.analysis", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    for f in figures:
        f["caption"] = _linked(f["caption"])
    for sec in sections:
        sec["note"] = _linked(sec["note"])
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


#: A number with its sign, range and unit: "+0.875 s", "(+14.2 %)", "±15–25 %", "6.14–6.14 s",
#: "1 ms", "8,192": kept on one line (``_nowrap``), so a card never wraps mid-number.
_NUMBER_GROUP = re.compile(
    r"(?<![\w&#./-])[+\-−±~≤≥]?\d(?:[\d,.]*\d)?(?:\s?[–\-]\s?[+\-−]?\d(?:[\d,.]*\d)?)*"
    r"(?:\s(?:%|s|ms|µs|us|ns|Gb/s|GB/s|MB/s|Gb|GB|MB|kB|KB|B|x|requests?|round\(s\)|"
    r"rounds?|prompt tokens|tokens|nodes?|windows?)(?![\w/]))?")

#: The link to the note on 1 ms values, its number kept on one line (the link may wrap between
#: words: kept whole it ran 9 px past its card at 1,400 px)
ONE_MS_LINK_HTML = ONE_MS_LINK.replace(
    "1 ms values: ±15–25 %", '<span class="nw">1 ms</span> values: '
                             '<span class="nw">±15–25 %</span>')


def _nowrap(escaped: str) -> str:
    """Wrap each number group of already-escaped text in ``<span class="nw">`` (no line break
    inside: CSS ``white-space: nowrap``)."""
    return _NUMBER_GROUP.sub(lambda m: f'<span class="nw">{m.group(0)}</span>', escaped)


def _linked(text):
    """Escape ``text``, keep each number with its unit on one line (``_nowrap``) and turn each
    ``ONE_MS_REF`` into a link to the one note on 1 ms values."""
    from markupsafe import Markup, escape

    if not text:
        return text
    parts = str(text).split(ONE_MS_REF)
    return Markup(ONE_MS_LINK_HTML.join(_nowrap(str(escape(p))) for p in parts))


def _card_value(value: str):
    """A card's value: kept on one line (CSS) when it is one number ("6.14 s"); with several
    ("+0.875 s (+14.2 %)") it may wrap between them, never inside one (``_nowrap``)."""
    from markupsafe import Markup, escape

    if len(_NUMBER_GROUP.findall(str(value))) < 2:
        return value
    return Markup(f'<span class="wrap">{_nowrap(str(escape(value)))}</span>')


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
            {"label": short, "value": _card_value(value), "detail": _linked(detail)})
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
    compare_fed = comparison_needs(configs)  # figure 2's windows, made in the passes
    for cfg in configs:
        one_pass = cfg.streamed and "_pass" not in cfg.__dict__
        req = pick_request(cfg) if len(cfg.requests) else None
        figs = request_figures(cfg, req) if one_pass else None  # figures 1, 3 and peaks
        consumers = [figs, *(fed[cfg.label] for fed in compare_fed.values())]

        def read_once(ranges=None, cfg=cfg, consumers=consumers):
            """The capture's one pass; it also answers the attribution's ranges and figures'."""
            say(f"[{cfg.label}] reading the capture once (emulation check, "
                + ("attribution, " if ranges is not None else "")
                + "bursts, timeline, per-device traffic)")
            got = capture_pass(cfg, capacity_gbps=cfg.port_gbps or 200.0, ranges=ranges,
                               devices_width_ns=devices_width_ns(cfg.capture.duration_s()),
                               consumers=consumers)
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
        nccl_line = nccl_witness(cfg, v)  # NCCL's own log beside it, when <capture>/nccl/ has one
        if nccl_line is not None:
            content.verdicts.append(Verdict(*nccl_line))
        tables = []
        if att is not None:
            attributions[cfg.label] = att
            send, first = int(req["t_send_ns"]), int(req["t_first_ns"])
            figs = fed_request_figures(cfg, req, figs)  # None: intervals in memory
            fed = figs is not None
            say(f"[{cfg.label}] figure 1 and peaks for request {req['request_id']}")
            content.figures.append(ReportFigure(
                html_anchor(f"request-{cfg.label}"), f"{cfg.label}: one request at 1 ms",
                figure_request(cfg, str(req["request_id"]),
                               rates=figs.zoom.result() if fed else None),
                "Each spike in the zoom is one all-reduce of the prefill, at close to line rate; "
                "the grey band is the prefill (send to first token), after it the steady decode."))
            pk = figs.peak_table() if fed else peak_table(
                cfg.intervals, start_ns=send, end_ns=first, by="direction",
                origin_ns=window_origin(cfg))
            pk_tx = pk[pk["series"] == "tx"]
            peaks = {int(r.window_ns): float(r.peak_gbps) for r in pk_tx.itertuples()
                     if r.window != "whole range"}
            pk1_row = pk_tx[pk_tx["window_ns"] == MS_NS]
            pk1_row = pk1_row.iloc[0] if len(pk1_row) else None
            content.figures.append(ReportFigure(
                html_anchor(f"windows-{cfg.label}"), f"{cfg.label}: the averaging window decides "
                "the peak", figure_windows(cfg, str(req["request_id"]), peaks=peaks,
                                           rates=figs.window_rates() if fed else None,
                                           at_line_rate=at_line_of(pk_tx)),
                "The same prefill averaged over 1, 5 and 100 ms windows (aligned on the "
                "capture start, as every table): the peak falls as the window widens, although "
                "the bytes are the same. The 5 ms panel is a step line whose values can beat: "
                "when the bursts come every few milliseconds (their spacing is the burst "
                "table's median_gap_s), a 5 ms window holds a whole burst, part of one or "
                "none, and neighbouring 5 ms values rise and fall in a slow pattern; that is the "
                "averaging, not a drawing error. " + ONE_MS_REF))
            tables.append(ReportTable(
                pick_columns(pk_tx.assign(over_line_causes=pk_tx["over_line_causes"].replace("", "none")),
                      ("window", "peak_gbps", "at_line_rate", "p50_gbps", "p90_gbps",
                              "p99_gbps", "mean_gbps", "n_windows", "raw_max_gbps",
                              "n_over_line_windows", "over_line_causes")),
                title=f"Peak vs window: prefill of request {req['request_id']} "
                      f"({(first - send) / 1e9:.2f} s), tx of one node",
                note=PEAKS_TABLE_NOTE, name="peaks"))
            warm = ("warmup_rounds",) if warmup_rounds else ()
            tables.append(ReportTable(
                pick_columns(att.tests, TEST_COLUMNS[:3] + warm + TEST_COLUMNS[3:]), title="Per test",
                headers={"n_requests": "requests per round"},  # not the test's total
                note="Means over rounds; min/max columns give the spread. 'split': the "
                     "round's requests' conserving split; 'in window, shared': all traffic in "
                     "the round's window. "
                     "Time to last first token covers all prompts' bytes. "
                     "Prefill peak: the highest 1 ms window. " + ONE_MS_REF
                     + (f" The first {warmup_rounds} round(s) of each test are warm-up, not "
                        "counted." if warmup_rounds else "") + per_token_note(cfg.capture),
                name="per-test"))
            if len(att.cells):
                tables.extend(cell_tables(att.cells, att.percentiles))
            tables.append(ReportTable(pick_columns(att.requests, REQUEST_COLUMNS
                                            + (("warmup",) if warmup_rounds else ())),
                                      title="Per request",
                                      note="Prefill = [send, first token], decode = [first "
                                           "token, last token]; bytes are tx of one node. "
                                           "'split' columns give each byte to exactly one "
                                           "request's prefill or decode, or to idle/other (they "
                                           "add up to what the counters saw); 'in window, "
                                           "shared' counts all traffic inside the request's "
                                           "window, shared with the requests overlapping it. "
                                           "Prefill peak: the highest 1 ms window (aligned on "
                                           "the capture start). " + ONE_MS_REF
                                           + per_token_note(cfg.capture),
                                      name="per-request"))
        say(f"[{cfg.label}] bursts")
        if cp is not None:  # from the one pass
            bt = cp.bursts
        elif cfg.streamed:  # one pass over the segments
            from .bursts import burst_analysis_capture

            bt = burst_analysis_capture(info_of(cfg.capture),
                                        capacity_gbps=cfg.port_gbps or 200.0, by="direction",
                                        origin_ns=window_origin(cfg))
        else:
            bt = burst_analysis(cfg.intervals, capacity_gbps=cfg.port_gbps or 200.0,
                                by="direction", origin_ns=window_origin(cfg))
        tables.insert(1 if len(tables) else 0, ReportTable(
            pick_columns(bt.summary, ("series", "n_bursts", "duty_cycle", "burst_bytes", "total_bytes",
                               "known_bytes", "unknown_s", "burst_share", "mean_gap_s",
                               "median_gap_s", "enter_gbps", "leave_gbps")),
            title="Burst summary (1 ms windows, whole capture)", name="bursts"))
        say(f"[{cfg.label}] zoomable timeline")
        _add_timeline(content, cfg)
        say(f"[{cfg.label}] per-device traffic")
        content.figures.append(ReportFigure(
            html_anchor(f"devices-{cfg.label}"), f"{cfg.label}: traffic per RDMA device",
            figure_devices(cfg, verdict=emulation_verdict_text(cfg),
                           width_ns=devices_width_ns(cfg.capture.duration_s()),
                           rates=None if cp is None else cp.devices),
            "The two RDMA devices are the two PCIe paths of one port; on an NCCL_IB_HCA "
            "emulation one of them carries everything. Each step is the mean rate over its "
            f"{report_window_label(devices_width_ns(cfg.capture.duration_s()))} window (wider on long "
            "captures); the 1 ms bursts are in the timeline and the tables."))
        dev = v.devices.reset_index()
        tables.append(ReportTable(pick_columns(dev, ("device", "tx_bytes", "rx_bytes",
                                              "known_bytes", "share", "peak_1ms_gbps",
                                              "nan_windows", "over_line_windows")),
                                  title="Bytes per RDMA device", headers={"share": "share"},
                                  note="Peak 1 ms: the highest 1 ms window of the device, tx or "
                                       "rx. A direction with an unknown 1 ms window has "
                                       "unknown bytes (-); known: the readable tx + rx bytes "
                                       "(a lower bound), the share is of the readable bytes. "
                                       + ONE_MS_REF + " " + line_rate_note(cfg),
                                  name="devices"))
        tables += [ReportTable(**t) for t in nccl_collectives(cfg)]  # <capture>/nccl-inspector/
        content.sections.append(ReportSection(cfg.label, tables))
        content.captures.append((cfg.label, capture_fields(cfg)))
        if cp is not None:  # its parts are in the content now: hold one capture's at a time
            cfg.__dict__.pop("_pass", None)
        if cfg.label in attributions:
            content.cards.extend(ttft_cards(cfg.label, attributions[cfg.label].tests))
            card = peak_card(cfg.label, peaks, pk1_row)
            if card is not None:
                content.cards.append(card)
    compared = [c for c in configs if c.label in attributions]
    if len(compared) >= 2:
        _add_comparison(content, compared, attributions, say, setup_options or {}, compare_fed)
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
            div_id=f"timeline-{html_anchor(cfg.label)}",
            zoom_hint=("zoom in to see where the bursts are; every 1 ms window of a stretch: "
                       "`rdmascope rates CAPTURE --window 1ms --from S --to S`, or the figures "
                       "of one request: `rdmascope plot request CAPTURE --request-id ID`"))
    except ModuleNotFoundError:
        return
    content.timelines.append((
        f"timeline-{html_anchor(cfg.label)}", f"{cfg.label}: the whole run at 1 ms", html,
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
                    setup_options: Mapping[str, Any], fed=None) -> None:
    """Figure 2 per test common to all configurations, and (with ``analysis.compare``) figures
    4-6 and tables for each configuration after the first against the first. ``fed``:
    ``comparison_needs``, made in the capture passes."""
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
            html_anchor(f"compare-{test}"), f"Test {test}: " + " above ".join(c.label for c in configs),
            figure_comparison(configs, test, fed=(fed or {}).get(test)),
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
    tag = f"-{slug(b.label)}" if several else ""
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
    # the setup as short points (one paragraph of ~1,400 characters was not read)
    items = [("Links", links)] if links else []
    items += [("Setup", setup.describe()), ("Model", setup.model.describe())]
    items += [(f"{k} from", str(v)) for k, v in setup.sources.items()]
    items += [("", n) for n in cmp.notes if not n.startswith("setup: ")]
    content.cards[:0] = change_cards(t, a.label, b.label)
    return ReportSection(
        f"Comparison: {a.label} → {b.label}",
        [ReportTable(pick_columns(t, cols), headers=headers,
                     name="comparison" + tag,
                     note=per_token_note(a.capture, b.capture).strip())],
        name="", items=items)


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
    from .compare import compare

    if len(configs) != 2:
        raise ValueError(f"a comparison needs two configurations, got {len(configs)}")
    given = dict(attributions or {})
    # each configuration's own (two runs may share a label), with its emulation check
    att_a, att_b = (given[c.label] if c.label in given else c.attribution(warmup_rounds)
                    for c in configs)
    a, b = configs
    if setup is None:
        setup = setup_for(a, b)
    return compare(att_a, att_b, label_a=a.label, label_b=b.label,
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
