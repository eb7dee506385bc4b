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

from rdmascope.emulator.simcapture import READ_OFFSET_CLIP_NS

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
    # a reader sees unknown time, never the word 'nan'; the window width reads as elsewhere
    ("nan_windows", "unknown windows", 1.0),
    ("n_nan_windows", "unknown windows", 1.0),
    ("peak_1ms_gbps", "1 ms peak (Gb/s)", 1.0),
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


# ------------------------------------------------------------------------------------------------
# The report built from simulated captures (emulator ground truth as the independent reference)
# ------------------------------------------------------------------------------------------------

import json  # noqa: E402

from click.testing import CliRunner  # noqa: E402

from rdmascope.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory):
    """Two simulated captures of the demo scenario (P1 then P2, 16 output tokens): 200 Gb/s and
    the emulated 100 Gb/s, each with its requests.jsonl and truth.json."""
    root = tmp_path_factory.mktemp("sim")
    runner = CliRunner()
    for link in ("200", "emulated100"):
        res = runner.invoke(main, ["simulate", "capture", "-o", str(root / link), "--scenario",
                                   "demo", "--output-tokens", "16", "--link", link])
        assert res.exit_code == 0, res.output
    return root


def _truth(run):
    return json.loads((run / "truth.json").read_text())


def test_report_from_two_simulated_configurations(sim_runs, tmp_path):
    steps = []
    html = R.write_report([sim_runs / "200", sim_runs / "emulated100"], None, tmp_path / "rep",
                          progress=steps.append)
    page = html.read_text()
    # the emulation verdicts, from the per-device bytes
    assert "200 Gb/s: both interfaces carried traffic" in page
    assert "emulated 100 Gb/s: one interface carried all RDMA traffic (rocep1s0f1)" in page
    figs = sorted(p.stem for p in (tmp_path / "rep" / "figures").glob("*.png"))
    assert figs == sorted(["request-200-gb-s", "request-emulated-100-gb-s", "windows-200-gb-s",
                           "windows-emulated-100-gb-s", "compare-p1", "compare-p2",
                           "devices-200-gb-s", "devices-emulated-100-gb-s", "extra-prefill",
                           "tokens-increase", "tp-projection"])
    assert all((tmp_path / "rep" / "figures" / f"{f}.png").stat().st_size > 10_000 for f in figs)
    assert page.count('<img src="data:image/png;base64,') == len(figs)
    # figures first, then the comparison section, the per-configuration sections, the captures
    order = [page.index(s) for s in ('id="figures"', 'id="comparison-200-gb-s-emulated-100-gb-s"',
                                     'id="200-gb-s"', 'id="emulated-100-gb-s"', 'id="captures"')]
    assert order == sorted(order)
    assert any(s.startswith("[emulated 100 Gb/s] attributing") for s in steps)
    # per-request table: TTFT as the ground truth has it (independent of the analysis)
    per_req = pd.read_csv(tmp_path / "rep" / "tables" / "200-gb-s_per-request.csv")
    assert {"request_id", "ttft_s", "prefill_tx_bytes"} <= set(per_req.columns)
    truth = {r["request_id"]: r for r in _truth(sim_runs / "200")["requests"]}
    for row in per_req.itertuples():
        assert row.ttft_s == pytest.approx(truth[row.request_id]["ttft_s"], abs=1e-6)
        tx_truth = sum(v for k, v in truth[row.request_id]["prefill_bytes"].items()
                       if k.endswith("/tx") and not k.startswith("en"))
        assert row.prefill_tx_bytes == pytest.approx(tx_truth, rel=0.005)


def test_report_of_one_configuration_has_no_comparison(sim_runs, tmp_path):
    page = R.write_report([sim_runs / "emulated100"], None, tmp_path).read_text()
    assert "Comparison" not in page and 'id="compare-' not in page
    assert "request-emulated-100-gb-s" in page


def test_request_figure_from_a_capture_shows_the_burst_heights(sim_runs):
    """1 ms peaks: near 180 Gb/s on both twins, held under one PCIe path (~109) when emulated."""
    peaks = {}
    for link in ("200", "emulated100"):
        cfg = R.load_configuration(sim_runs / link, R.default_request_logs(sim_runs / link))
        fig = R.figure_request(cfg)
        ax, zoom = fig.axes
        req = _truth(sim_runs / link)["requests"][1]  # P2, the longest lone prefill
        assert ax.get_title(loc="left").startswith(f"{cfg.label}: request {req['request_id']}")
        (span,) = [p for p in ax.patches if p.get_gid() == "prefill"]
        xs = span.get_path().transformed(span.get_patch_transform()).vertices[:, 0]
        assert (xs.min(), xs.max()) == pytest.approx((0.0, req["ttft_s"]), abs=1e-9)
        (line,) = [ln for ln in zoom.get_lines() if ln.get_gid() is None]
        y = line.get_ydata()
        peaks[link] = y.max()
        # bursts and gaps: the zoom has near-idle windows between the all-reduces
        assert (y < 5).sum() > 50 and (y > 0.5 * y.max()).sum() > 10
    assert 150 < peaks["200"] < 200
    assert 90 < peaks["emulated100"] < 125


@pytest.mark.parametrize("kind,args,ext", [
    ("request", ["{a}"], "png"),
    ("windows", ["{a}", "--windows", "1ms,10ms"], "svg"),
    ("devices", ["{b}"], "pdf"),
    ("compare", ["{a}", "{b}", "--test", "P2"], "png"),
    ("extra-prefill", ["{a}", "{b}"], "png"),
    ("tokens", ["{a}", "{b}"], "png"),
    ("tp", ["--prompt-tokens", "8192", "--ttft", "6.36"], "png"),
])
def test_plot_command_writes_each_kind(sim_runs, tmp_path, kind, args, ext):
    out = tmp_path / f"fig.{ext}"
    argv = [a.format(a=sim_runs / "200", b=sim_runs / "emulated100") for a in args]
    res = CliRunner().invoke(main, ["plot", kind, *argv, "-o", str(out)])
    assert res.exit_code == 0, res.output
    magic = {"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[ext]
    assert out.read_bytes().startswith(magic) and out.stat().st_size > 2000


@pytest.mark.parametrize("args,message", [
    (["request", "{a}", "-o", "x.jpg"], "must end in .png, .svg or .pdf"),
    (["compare", "{a}", "-o", "x.png"], "needs 2 capture(s), got 1"),
    (["tp", "-o", "x.png"], "needs --prompt-tokens and --ttft"),
    (["request", "{a}", "--request-id", "nope", "-o", "x.png"], "no successful request 'nope'"),
])
def test_plot_command_errors(sim_runs, tmp_path, args, message):
    argv = [a.format(a=sim_runs / "200") for a in args]
    res = CliRunner().invoke(main, ["plot", *argv])
    assert res.exit_code != 0 and message in res.output


def test_report_command_prints_progress_and_the_path(sim_runs, tmp_path):
    res = CliRunner().invoke(main, ["report", str(sim_runs / "200"), "-o", str(tmp_path / "r"),
                                    "--label", "fast link"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().endswith("report.html")
    assert "fast link: both interfaces carried traffic" in (tmp_path / "r" / "report.html").read_text()
    assert "attributing" in res.stderr
    bad = CliRunner().invoke(main, ["report", str(sim_runs / "200"), "--label", "a", "--label",
                                    "b", "-o", str(tmp_path / "r2")])
    assert bad.exit_code == 2 and "one label per capture" in bad.output


def test_report_flags_a_tcp_fallback(fixtures_dir, tmp_path):
    """The committed P1 run whose collective fell back to TCP: RDMA idle, netdev busy."""
    run = fixtures_dir / "sim-p1-tcp-fallback"
    if not run.is_dir():
        pytest.skip("fixture sim-p1-tcp-fallback not committed")
    page = R.write_report([run], None, tmp_path).read_text()
    assert 'class="verdict fail"' in page
    assert "did NCCL fall back to TCP sockets?" in page


def test_report_command_leaves_warmup_rounds_out_of_the_test_means(tmp_path):
    """--warmup-rounds 1: the per-test mean is the hand-computed mean of the 3 measured rounds;
    the per-request table still lists the warm-up, marked."""
    from test_attribute import _warm_capture_and_log

    cap, _, log = _warm_capture_and_log(tmp_path)
    res = CliRunner().invoke(main, ["report", str(cap.path), "--requests", str(log), "-o",
                                    str(tmp_path / "r"), "--label", "L", "--warmup-rounds", "1"])
    assert res.exit_code == 0, res.output
    per_test = pd.read_csv(tmp_path / "r" / "tables" / "l_per-test.csv")
    # time to the last first token of the measured rounds: 22, 26 and 32 ms
    assert per_test["time_to_last_first_token_s"].tolist() == \
        pytest.approx([(0.022 + 0.026 + 0.032) / 3])
    assert per_test["rounds"].tolist() == [3] and per_test["warmup_rounds"].tolist() == [1]
    per_req = pd.read_csv(tmp_path / "r" / "tables" / "l_per-request.csv")
    assert sorted(per_req.loc[per_req["warmup"], "request_id"]) == ["w00", "w01"]
    assert len(per_req) == 8
    page = (tmp_path / "r" / "report.html").read_text()
    assert "warm-up, not counted" in page


def test_report_tables_as_csv_named_by_content_and_round_trip(sim_runs, tmp_path):
    """Each table's CSV: named <configuration>_<content>.csv (comparison.csv for the
    comparison), no pandas index column, the table's values exactly; listed in the HTML."""
    cfgs = [R.load_configuration(sim_runs / link, R.default_request_logs(sim_runs / link))
            for link in ("200", "emulated100")]
    content = R.build_report(cfgs)
    html = R.render_report(content, tmp_path / "rep", embed=False)
    tables = tmp_path / "rep" / "tables"
    names = sorted(p.name for p in tables.glob("*.csv"))
    per_config = ("per-request", "per-test", "per-cell", "per-cell-throughput", "peaks", "bursts",
                  "devices")
    # simulate capture also writes NCCL Inspector records: their per size class table and the
    # bursts with their collectives
    nccl = [f"{c}_nccl-{t}.csv" for c, link in (("200-gb-s", "200"),
                                               ("emulated-100-gb-s", "emulated100"))
            if (sim_runs / link / "nccl-inspector").is_dir() for t in ("collectives", "bursts")]
    assert names == sorted(["comparison.csv"] + nccl + [f"{c}_{t}.csv" for c in
                                                        ("200-gb-s", "emulated-100-gb-s")
                                                        for t in per_config])
    # the same names from the content model, and every table's values read back unchanged
    shown = {}
    for sec in content.sections:
        for i, t in enumerate(sec.tables):
            shown[R.csv_name(sec, t, i) + ".csv"] = t.frame
    assert sorted(shown) == names
    for name, frame in shown.items():
        back = pd.read_csv(tables / name)
        assert list(back.columns) == [str(c) for c in frame.columns], name
        assert not any(str(c).startswith("Unnamed") for c in back.columns), name
        want = frame.reset_index(drop=True)
        for col in want.columns:
            w, g = want[col], back[col]
            if pd.api.types.is_numeric_dtype(w) and not pd.api.types.is_bool_dtype(w):
                np.testing.assert_array_equal(g.to_numpy(dtype=float), w.to_numpy(dtype=float),
                                              err_msg=f"{name}: {col}")
            else:
                assert g.astype(str).tolist() == w.astype(str).tolist(), (name, col)
    # the peaks CSV holds the figure's numbers: 1 ms peak of the 200 Gb/s prefill, in Gb/s. Each
    # reading's instant is off by up to READ_OFFSET_CLIP_NS (0.1 ms) from its timestamp, as on
    # real hardware, so a 1 ms rate can exceed the 200 Gb/s line rate (method.md: some 1 ms
    # values do), but by at most 1 ms / (1 ms - 2 x 0.1 ms)
    pk = pd.read_csv(tables / "200-gb-s_peaks.csv").set_index("window")
    assert 150 < pk.loc["1 ms", "peak_gbps"] <= 200 * 1e6 / (1e6 - 2 * READ_OFFSET_CLIP_NS)
    # listed, with links, in the HTML
    page = html.read_text()
    assert 'id="tables-csv"' in page and 'href="#tables-csv"' in page
    for n in names:
        assert f'<a href="tables/{n}">tables/{n}</a>' in page


def test_csv_name_rules_and_a_named_index_becomes_a_column(tmp_path):
    df = pd.DataFrame({"peak_gbps": [181.2, 96.04]},
                      index=pd.Index(["1 ms", "5 ms"], name="window"))
    one = R.ReportSection("200 Gb/s", [R.ReportTable(df, name="Peaks")])
    two = R.ReportSection("200 Gb/s", [R.ReportTable(df), R.ReportTable(df, name="x")], name="")
    assert R.csv_name(one, one.tables[0], 0) == "200-gb-s_peaks"
    assert [R.csv_name(two, t, i) for i, t in enumerate(two.tables)] == ["table-1", "x"]
    # two sections of one title: the second takes its section's unique anchor; the same given
    # name twice: the second file gets "-2"
    named = R.ReportSection("200 Gb/s", [R.ReportTable(df, name="peaks")], name="cfg")
    page = R.render_report(R.ReportContent("t", sections=[one, one, named, named]),
                           tmp_path).read_text()
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == \
        ["200-gb-s-x_peaks.csv", "200-gb-s_peaks.csv", "cfg_peaks-2.csv", "cfg_peaks.csv"]
    assert (tmp_path / "tables" / "200-gb-s_peaks.csv").read_text() == \
        "window,peak_gbps\n1 ms,181.2\n5 ms,96.04\n"
    assert 'href="tables/cfg_peaks-2.csv"' in page


def test_emulation_verdict_names_an_unrecorded_twin(tmp_path):
    """`record --device rocep1s0f1` with both twins discovered: the report does not say
    "one interface carried all RDMA traffic" but that it cannot judge, naming the twin."""
    from capture_builders import MS, STATUS_OK, T0, ib, write_capture
    from rdmascope.analysis import byte_intervals, load_capture

    rd = {0: [(T0 + k * MS, 0, 250_000 * k, STATUS_OK) for k in range(11)]}
    path = write_capture(tmp_path / "c", [ib("rocep1s0f1", "tx")], rd,
                         devices=[{"name": "rocep1s0f1", "pci": "0000:01:00.1"}])
    m = json.loads((path / "manifest.json").read_text())
    m["discovered_devices"] = [{"name": "rocep1s0f1", "pci": "0000:01:00.1", "netdevs": []},
                               {"name": "roceP2p1s0f1", "pci": "0002:01:00.1", "netdevs": []}]
    (path / "manifest.json").write_text(json.dumps(m))
    cap = load_capture(path)
    cfg = R.Configuration(label="emulated 100 Gb/s", capture=cap, intervals=byte_intervals(cap))
    v, status, headline = R.emulation_verdict(cfg)
    assert status == "warn" and v.status == "cannot judge"
    assert headline == ("emulated 100 Gb/s: cannot judge the emulation — roceP2p1s0f1 found at "
                        "record time but not recorded")


def test_one_request_shows_one_1ms_peak_in_every_table_card_and_figure(sim_runs, tmp_path):
    """P2's prefill: the per-request table, the peak-vs-window table, the headline card and the
    figures align 1 ms windows on the capture start, so they give the same 1 ms peak (the
    demo's report once said 211 Gb/s in one table and 197 in another for the same request)."""
    from rdmascope.analysis.attribute import attribute

    R.write_report([sim_runs / "200", sim_runs / "emulated100"], None, tmp_path / "rep")
    page = (tmp_path / "rep" / "report.html").read_text()
    for run, slug in (("200", "200-gb-s"), ("emulated100", "emulated-100-gb-s")):
        cfg = R.load_configuration(sim_runs / run, R.default_request_logs(sim_runs / run))
        req = R.pick_request(cfg)
        send, first = int(req["t_send_ns"]), int(req["t_first_ns"])
        per_req = pd.read_csv(tmp_path / "rep" / "tables" / f"{slug}_per-request.csv")
        table_peak = float(per_req.set_index("request_id").at[req["request_id"],
                                                                "prefill_peak_tx_gbps"])
        peaks = pd.read_csv(tmp_path / "rep" / "tables" / f"{slug}_peaks.csv")
        assert float(peaks.set_index("window").at["1 ms", "peak_gbps"]) == \
            pytest.approx(table_peak, rel=1e-12)
        # an independent value: the 1 ms windows of the capture-start grid inside the prefill,
        # from the bytes of the node's tx counters integrated window by window
        from rdmascope.analysis.series import integrate
        t0 = int(cfg.capture.t_start_ns)
        k0 = -(-(send - t0) // 1_000_000)
        starts = t0 + np.arange(k0, (first - t0) // 1_000_000) * 1_000_000
        iv = cfg.intervals
        b = integrate(iv[iv["direction"] == "tx"], starts, starts + 1_000_000, by="direction")
        # (a window above the path's physical bound by less than its timing uncertainty is
        # headlined at the bound, "at line rate", in every table: peaks' bound_gbps)
        from rdmascope.analysis.overline import line_gbps_of
        bound = line_gbps_of(cfg.intervals, "direction")["tx"]
        assert bound == 200.0  # the node's cable, both twins together
        assert table_peak == pytest.approx(min(float(b["tx"].max()) * 8 / 1e6, bound), rel=1e-9)
        # the peaks CSV says when its peak is the line rate (the CLI's "at line rate"), and the
        # note under the table says what that and the raw percentiles mean
        at_line = bool(peaks.set_index("window").at["1 ms", "at_line_rate"])
        assert at_line == (float(b["tx"].max()) * 8 / 1e6 > bound)
        # the headline card says it too (it showed "200 Gb/s" alone, the raw max 201)
        assert (f"{table_peak:.0f} Gb/s (at line rate)" in page) == at_line
        assert "at line rate: windows above it by less than their timing uncertainty" in page
        assert "p99 can exceed the peak" in page
        # figure 3: the 1 ms panel's data maximum (its marker) and its label
        fig = R.figure_windows(cfg, peaks={1_000_000: table_peak})
        top = fig.axes[0]
        (marker,) = [ln for ln in top.lines if ln.get_gid() == "peak_marker"]
        # at the headline's window; a window headlined "at line rate" keeps its raw value,
        # above the bound by less than the timing uncertainty
        y_marker = float(marker.get_ydata()[0])
        if table_peak == bound:
            assert bound <= y_marker <= bound * 1.25
        else:
            assert y_marker == pytest.approx(table_peak, rel=1e-12)
        # figure 1: the 1 ms windows wholly inside the prefill have the same maximum
        fig1 = R.figure_request(cfg, zoom_ms=None)
        line = fig1.axes[0].lines[0]
        x_ns = np.round(np.asarray(line.get_xdata()) * 1e9).astype(np.int64) + send
        y = np.asarray(line.get_ydata())
        inside = (x_ns >= send) & (x_ns + 1_000_000 <= first)
        assert (x_ns[:-1] - t0) % 1_000_000 == pytest.approx(0, abs=2)  # capture-start grid
        top1 = float(np.nanmax(y[inside]))
        if table_peak == bound:  # at line rate: the drawn window is its raw value
            assert bound <= top1 <= bound * 1.25
        else:
            assert top1 == pytest.approx(table_peak, rel=1e-9)
        # the headline card, and attribute's per-round peak of the one-request round
        label = cfg.label
        # the headline card, under its configuration's heading
        group = page[page.index(f"<h3>{label}</h3>"):]
        assert re.search(rf"1 ms peak</div><div class=\"value\">{table_peak:.0f} Gb/s",
                         group[:group.index("</section>")])
        att = attribute(cfg.capture, cfg.log, intervals=cfg.intervals)
        rnd = att.rounds[(att.rounds["test"] == req["test"])
                         & (att.rounds["round"] == req["round"])]
        assert float(rnd["prefill_peak_tx_gbps"].iloc[0]) == pytest.approx(table_peak, rel=1e-12)
    # the timing uncertainty that lets a 1 ms peak exceed line rate: said once, linked from
    # every 1 ms peak (cards, figure 3, the peak, per-test, per-request and device tables)
    assert page.count("±15–25 % timing uncertainty") == 1
    assert "which is why a 1 ms peak can exceed line rate" in page
    assert page.count('href="#one-ms-note"') >= 6


def test_headline_gives_ttft_per_test_never_a_mean_across_tests(sim_runs, tmp_path):
    """The demo runs P1 (1,024 prompt tokens) and P2 (8,192): the cards give each test's TTFT
    (as the emulator's ground truth has it), not one "mean TTFT" of both."""
    from rdmascope.analysis.attribute import attribute

    page = R.write_report([sim_runs / "200"], None, tmp_path).read_text()
    assert "mean TTFT</div>" not in page
    truth = _truth(sim_runs / "200")["requests"]
    by_test = {}
    for r in truth:
        by_test.setdefault(r["request_id"].split("-")[0], []).append(r["ttft_s"])
    assert sorted(by_test) == ["P1", "P2"]
    for test, ttfts in by_test.items():
        want = sum(ttfts) / len(ttfts)
        group = page[page.index("<h3>200 Gb/s</h3>"):]  # the configuration's cards
        assert re.search(rf"test {test} TTFT</div><div class=\"value\">"
                         rf"{want:.2f} s</div>", group[:group.index("</section>")]), test
    cfg = R.load_configuration(sim_runs / "200", R.default_request_logs(sim_runs / "200"))
    s = attribute(cfg.capture, cfg.log, intervals=cfg.intervals).summary
    assert s["mean_ttft_s"] is None
    assert s["ttft_by_test_s"] == pytest.approx({t: sum(v) / len(v) for t, v in by_test.items()})
    assert s["time_to_last_first_token_by_test_s"] == pytest.approx(s["ttft_by_test_s"])


def test_ttft_cards_of_a_multi_request_test_and_the_limit():
    tests = pd.DataFrame({
        "test": ["P4", "P1"], "rounds": [3, 3], "n_requests": [4, 1],
        "prompt_tokens": [32768, 1024], "mean_ttft_s": [5.0, 0.96],
        "mean_ttft_min_s": [4.9, 0.95], "mean_ttft_max_s": [5.2, 0.97],
        "time_to_last_first_token_s": [7.25, 0.96],
        "time_to_last_first_token_min_s": [7.0, 0.95],
        "time_to_last_first_token_max_s": [7.5, 0.97]})
    cards = R.ttft_cards("L", tests)
    assert cards == [
        ("L: test P4 time to last first token", "7.25 s",
         "4 requests, 32,768 prompt tokens, 3 round(s), min–max 7.00–7.50 s; mean TTFT 5.00 s"),
        ("L: test P1 TTFT", "0.96 s", "1,024 prompt tokens, 3 round(s), min–max 0.95–0.97 s")]
    assert R.ttft_cards("L", tests, limit=1)[-1] == ("L: 1 more test(s)", "…",
                                                     "see the per-test table")


def test_report_of_swapped_configurations_warns_first(sim_runs, tmp_path):
    """The emulated run given first and the 200 Gb/s run second: the first verdict says so."""
    page = R.write_report([sim_runs / "emulated100", sim_runs / "200"], None,
                          tmp_path).read_text()
    first = page.index('class="verdict')
    assert page.index("A looks like the emulated link; arguments swapped?") < \
        page.index("one interface carried all RDMA traffic")
    assert page[first:first + 40].startswith('class="verdict fail"')
    cmp = pd.read_csv(tmp_path / "tables" / "comparison.csv")
    assert "exceeds_bound" in cmp.columns and not cmp["exceeds_bound"].any()


def test_change_cards_one_per_test_from_compare():
    """The comparison's headline cards: one per test (P1 too, not only the longest prompt), the
    change to the ms as compare computed it and its share of the bound."""
    tests = pd.DataFrame({"test": ["P1", "P2", "P3"], "ttlft_change_s": [0.01449, 0.8812, 1.2],
                          "ttlft_change_pct": [1.51, 13.71, 10.0],
                          "estimate_s": [0.11548, 0.92381, 1.5],
                          "bound_used_pct": [12.55, 95.39, float("nan")]})
    cards = R.change_cards(tests, "200 Gb/s", "emulated 100 Gb/s", limit=2)
    assert cards == [
        ("test P1: time to last first token", "+0.014 s (+1.5 %)",
         "200 Gb/s → emulated 100 Gb/s; 13 % of the estimate's 0.115 s bound"),
        ("test P2: time to last first token", "+0.881 s (+13.7 %)",
         "200 Gb/s → emulated 100 Gb/s; 95 % of the estimate's 0.924 s bound"),
        ("1 more test(s)", "…", "see the comparison table")]
    assert R.change_cards(tests.tail(1), "A", "B")[0][2] == "A → B; estimate ≤ 1.500 s"


def test_emulated_captures_say_bytes_per_token_equal_the_formula(sim_runs, tmp_path):
    """Beside bytes per prompt token: on a capture the emulator wrote it equals the formula by
    construction (the study measured 5-7 % more on hardware); not on a recorded capture."""
    import shutil

    assert R.emulated_capture({"writer": "simulate"}) and R.emulated_capture(
        {"writer": "record", "host": "emulated-spark"})
    assert R.emulated_capture({"writer": "record", "sysfs_root": "/dev/shm/rdmascope-demo-7-200"})
    assert not R.emulated_capture({"writer": "record", "host": "spark-1", "sysfs_root": "/sys"})

    def notes(content):
        return {t.name: t.note for s in content.sections for t in s.tables}

    cfgs = [R.load_configuration(sim_runs / link, R.default_request_logs(sim_runs / link),
                                 label=link) for link in ("200", "emulated100")]
    got = notes(R.build_report(cfgs))
    for name in ("per-test", "per-request", "comparison"):
        assert R.EMULATED_PER_TOKEN_NOTE in got[name], name
    assert "3.54-3.60 MB, 5-7 % more" in R.EMULATED_PER_TOKEN_NOTE
    # the same capture as if recorded on hardware: no such note
    hw = tmp_path / "hw"
    shutil.copytree(sim_runs / "200", hw)
    m = json.loads((hw / "manifest.json").read_text())
    m.update(writer="record", host="spark-1", sysfs_root="/sys")
    (hw / "manifest.json").write_text(json.dumps(m))
    cfg = R.load_configuration(hw, R.default_request_logs(hw), label="hw")
    got = notes(R.build_report([cfg]))
    assert got["per-test"] and R.EMULATED_PER_TOKEN_NOTE not in got["per-test"]
    assert R.EMULATED_PER_TOKEN_NOTE not in got["per-request"]


def test_the_page_is_written_as_rendered_with_the_same_text(tmp_path, monkeypatch):
    """render_report streams the template (rows made as they are written) into the same page
    the whole-string render with format_table's lists gives."""
    from jinja2 import Environment

    content = _content()
    big = pd.DataFrame({"request_id": [f"r{i}" for i in range(2500)],
                        "ttft_s": np.linspace(0.1, 9.9, 2500),
                        "prefill_bytes": np.arange(2500) * 1.5e6})
    content.sections.append(R.ReportSection("Many", [R.ReportTable(big, name="many")]))
    calls = {}
    real = Environment.get_template

    def spy(self, name, *a, **k):
        tpl = real(self, name, *a, **k)
        gen = tpl.generate

        def generate(**ctx):
            # the same context, rows as lists: the previous whole-string render
            listed = dict(ctx)
            listed["sections"] = [dict(sec, tables=[dict(t, rows=list(R.format_table(
                tab.frame, tab.headers)["rows"])) for t, tab in zip(sec["tables"], src.tables,
                                                                     strict=True)])
                for sec, src in zip(ctx["sections"], content.sections, strict=True)]
            calls["whole"] = tpl.render(**listed)
            return gen(**ctx)

        tpl.generate = generate
        return tpl

    monkeypatch.setattr(Environment, "get_template", spy)
    html = R.render_report(content, tmp_path / "r")
    monkeypatch.undo()
    assert html.read_text(encoding="utf-8") == calls["whole"]
    assert "r2499" in calls["whole"]


def test_per_cell_tables_hold_every_statistic_of_the_cells(sim_runs):
    """The page shows the per-cell statistics in long form (a row per cell and metric) and the
    throughput apart, so the table fits the page (31 columns ran 500 px past it at 1,400 px):
    every value of ``Attribution.cells`` is in one of them, unchanged."""
    from rdmascope.analysis.attribute import attribute

    cfg = R.load_configuration(sim_runs / "200", R.default_request_logs(sim_runs / "200"))
    att = attribute(cfg.capture, cfg.log, intervals=cfg.intervals)
    lat, thr = R.cell_tables(att.cells, att.percentiles)
    assert len(lat.frame) == 4 * len(att.cells) and len(thr.frame) == len(att.cells)
    stats = ["mean", *[f"p{p:g}" for p in att.percentiles], "max"]
    for i, (_, c) in enumerate(att.cells.iterrows()):
        for j, m in enumerate(("ttft", "tpot", "itl", "e2e")):
            row = lat.frame.iloc[4 * i + j]
            assert (row["test"], row["round"], row["metric"]) == (c["test"], c["round"], m.upper())
            for k in stats:
                np.testing.assert_equal(row[f"{k}_s"], c[f"{m}_{k}_s"])
        assert thr.frame.iloc[i]["request_throughput_rps"] == c["request_throughput_rps"]
    assert len(lat.frame.columns) <= 12


def test_capacity_lines_name_each_rate_for_what_it_is(sim_runs, tmp_path):
    """Figures drew "one PCIe x4 path ~109 Gb/s" while every table judged a twin against its
    PCIe link, 126.0 Gb/s ("PCIe link 32 GT/s x4"): two rates for one path. Now the lines say
    what each is: on the emulated capture 109 is the line rate the tables use (record
    --emulated, equal to line_rates'); on the 200 Gb/s capture 109 is the study's measurement,
    not a bound, and the bound the tables use (126.0) is its own line."""
    import json
    import shutil

    from rdmascope.analysis.overline import line_rates

    from rdmascope.models import recorded_setup

    # as the demo's emulated capture: recorded with record --emulated 109
    rec = tmp_path / "recorded"
    shutil.copytree(sim_runs / "emulated100", rec)
    man = json.loads((rec / "manifest.json").read_text())
    man.setdefault("extra", {}).setdefault("setup", {}).update(emulated=True,
                                                               emulated_real_gbps=109.0)
    (rec / "manifest.json").write_text(json.dumps(man))
    for run in (sim_runs / "200", sim_runs / "emulated100", rec):
        cfg = R.load_configuration(run, R.default_request_logs(run))
        lines = R.capacity_lines(cfg)
        rates = {round(r["gbps"], 1) for r in line_rates(cfg.capture).values()}
        assert not any("PCIe x4 path" in k for k in lines), lines
        judged = {k: v for k, v in lines.items() if k.startswith("line rate")}
        if recorded_setup(cfg.capture.meta).get("emulated_real_gbps"):
            assert {round(v, 1) for v in judged.values()} == rates, (lines, rates)
            assert any("record --emulated" in k for k in judged) and rates == {109.0}
        else:
            assert not judged
            assert any("measured" in k and "not a bound" in k for k in lines), lines
            bound = [v for k, v in lines.items() if "PCIe link bound" in k]
            assert {round(v, 1) for v in bound} == rates, (lines, rates)
