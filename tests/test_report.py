"""The HTML report: formatting of tables, the rendered file, and (below) the report built from
real captures of the emulator fixtures."""

from __future__ import annotations

import base64
import re

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis import figures as F
from rdmascope.analysis import report as R

# ------------------------------------------------------------------------------------------------
# Headers and cells
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,header,factor", [
    ("ttft_s", "TTFT (s)", 1.0),
    ("prefill_bytes", "prefill (MB)", 1e-6),
    ("peak_gbps", "peak (Gb/s)", 1.0),
    ("decode_speed_tps", "decode speed (tokens/s)", 1.0),
    ("increase_pct", "increase (%)", 1.0),
    ("time_to_last_first_token_s", "time to last first token (s)", 1.0),
    ("request_id", "request", 1.0),
    ("test", "test", 1.0),
    ("bytes", "bytes (MB)", 1e-6),
])
def test_column_header_from_unit_suffix(name, header, factor):
    assert R.column_header(name) == (header, factor)


def test_format_table_units_decimals_and_missing_values():
    df = pd.DataFrame({"request_id": ["a", "b"], "prompt_tokens": [8192, 1024],
                       "ttft_s": [6.3612, np.nan], "prefill_bytes": [29_300_000_000.0, 3.6e9],
                       "ok": [True, False]})
    t = R.format_table(df)
    assert [h["text"] for h in t["headers"]] == ["request", "prompt tokens", "TTFT (s)",
                                                 "prefill (MB)", "ok"]
    assert [h["cls"] for h in t["headers"]] == ["", "num", "num", "num", ""]
    texts = [[c["text"] for c in row] for row in t["rows"]]
    # 29.3e9 bytes = 29,300 MB; TTFT to 2 decimals (typical magnitude 1-10 s); NaN as a dash
    assert texts == [["a", "8,192", "6.36", "29,300", "yes"], ["b", "1,024", "–", "3,600", "no"]]


def test_format_table_keeps_a_named_index_and_header_overrides():
    df = pd.DataFrame({"peak_gbps": [181.2, 96.04]}, index=pd.Index(["1 ms", "5 ms"], name="window"))
    t = R.format_table(df, headers={"peak_gbps": "peak rate (Gb/s)"})
    assert [h["text"] for h in t["headers"]] == ["window", "peak rate (Gb/s)"]
    assert [[c["text"] for c in r] for r in t["rows"]] == [["1 ms", "181"], ["5 ms", "96"]]


# ------------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------------


def _content():
    idx = pd.Index(np.arange(300, dtype=np.int64) * 1_000_000)
    r = pd.DataFrame({"node0/tx": np.where(np.arange(300) % 20 < 4, 180.0, 1.0)}, index=idx)
    fig = F.plot_request(r, t_send_ns=0, t_first_ns=200_000_000, link_gbps=200, zoom_ms=50)
    table = pd.DataFrame({"request_id": ["<script>x</script>"], "ttft_s": [0.2]})
    return R.ReportContent(
        title="Test report", subtitle="one request",
        cards=[("TTFT", "0.20 s", "request r1")],
        verdicts=[R.Verdict("Emulation confirmed", "ok", "all traffic on rocep1s0f1")],
        figures=[R.ReportFigure("request", "One request", fig, "prefill shaded grey")],
        sections=[R.ReportSection("Per request", [R.ReportTable(table, note="TTFT = first - send")]),
                  R.ReportSection("Per request", [R.ReportTable(table)])],
        captures=[("200 Gb/s", [("host", "spark-01"), ("interval", "1 ms")])],
    )


def test_render_writes_a_self_contained_html_with_the_figure_inline(tmp_path):
    path = R.render_report(_content(), tmp_path / "out")
    assert path == tmp_path / "out" / "report.html"
    page = path.read_text()
    (src,) = re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)
    png = base64.b64decode(src)
    assert png.startswith(b"\x89PNG")
    assert (tmp_path / "out" / "figures" / "request.png").read_bytes() == png
    assert "Emulation confirmed" in page and "all traffic on rocep1s0f1" in page
    assert "<th class=\"num\">TTFT (s)</th>" in page
    assert "<dt>host</dt><dd>spark-01</dd>" in page
    # table text is escaped, never injected
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page
    # two sections with the same title get distinct anchors, and their tables are saved as CSV
    assert 'id="per-request"' in page and 'id="per-request-x"' in page
    csv = sorted(p.name for p in (tmp_path / "out" / "tables").iterdir())
    assert csv == ["per-request-x.csv", "per-request.csv"]
    assert pd.read_csv(tmp_path / "out" / "tables" / "per-request.csv")["ttft_s"].tolist() == [0.2]


def test_render_can_link_figures_instead_of_embedding(tmp_path):
    steps = []
    page = R.render_report(_content(), tmp_path, embed=False, progress=steps.append).read_text()
    assert '<img src="figures/request.png"' in page and "base64" not in page
    assert steps[0] == "drawing figure: One request" and steps[-1].startswith("wrote ")
