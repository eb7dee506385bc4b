"""A partly covered window (``QUALITY_PARTIAL``): its rate is over its covered part, its bytes
are unknown (the uncovered part's bytes are unknown), its covered part's bytes and length are
shown apart. Expected values are computed by hand from the readings below (each reading's
instant is its t_before: read duration 0).

- ``stops``: one counter read every 1 ms from the capture start T0 to T0 + 16 ms: 1,000 units
  (4,000 B) per ms for the first 10 ms, then 3,000 units (12,000 B) per ms. 10 ms windows:
  [0, 10) whole: 40,000 B, 0.032 Gb/s; [10, 16) covered of [10, 20): 6 ms, 72,000 B, at
  72,000 x 8 / 6e6 ns = 0.096 Gb/s (diluted over 10 ms it would read 0.0576).
- ``starts``: a/tx read every 1 ms from T0 + 3.5 ms to T0 + 19.5 ms, 2,000 units (8,000 B)
  per ms (0.064 Gb/s); b/tx read every 1 ms from T0 + 5.5 ms to T0 + 19.5 ms, 1,000 units
  (4,000 B) per ms (0.032 Gb/s). By direction ("tx" sums both), 10 ms windows:
  [0, 10): a covers 6.5 ms (52,000 B), b 4.5 ms (18,000 B): 70,000 B covered, covered time
  the least, 4.5 ms, rate 0.064 + 0.032 = 0.096 Gb/s (each counter's rate over its own
  covered part, summed); [10, 20): a and b cover 9.5 ms (76,000 + 38,000 = 114,000 B), rate
  0.096 Gb/s. Both windows partial (0.5 ms uncovered is above the 0.1 ms tolerance).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from capture_builders import MS, STATUS_OK, T0, ib, write_capture
from click.testing import CliRunner
from rdmascope.analysis import QUALITY_PARTIAL, byte_intervals, iter_rebin_capture, load_capture
from rdmascope.analysis.series import rebin_with_quality

from rdmascope.cli import main

W = 10 * MS


@pytest.fixture()
def stops(tmp_path):
    v = [1000 * k if k <= 10 else 10_000 + 3000 * (k - 10) for k in range(17)]
    return write_capture(tmp_path / "stops", [ib("d", "tx")],
                         {0: [(T0 + k * MS, 0, v[k], STATUS_OK) for k in range(17)]},
                         roll_every=7)


@pytest.fixture()
def starts(tmp_path):
    return write_capture(tmp_path / "starts", [ib("a", "tx"), ib("b", "tx")], {
        0: [(T0 + 3_500_000 + k * MS, 0, 2000 * k, STATUS_OK) for k in range(17)],
        1: [(T0 + 5_500_000 + k * MS, 0, 1000 * k, STATUS_OK) for k in range(15)]},
        roll_every=6)


# expected (window start, rate Gb/s, covered bytes, covered ns, partial)
STOPS = [(T0, 0.032, 40_000.0, W, False), (T0 + W, 0.096, 72_000.0, 6 * MS, True)]
STARTS = [(T0, 0.096, 70_000.0, 4_500_000, True), (T0 + W, 0.096, 114_000.0, 9_500_000, True)]


def _both_paths(path, by):
    """The in-memory (``rebin_with_quality``) and streamed (``iter_rebin_capture``) results."""
    mem = rebin_with_quality(byte_intervals(load_capture(path)), W, origin_ns=T0, by=by,
                             coverage=True)
    blocks = list(iter_rebin_capture(path, W, by=by, coverage=True))
    assert len(blocks) >= 1
    import pandas as pd
    got = [pd.concat([x[0] for x in blocks]), pd.concat([x[1] for x in blocks]),
           pd.concat([x[2].covered_ns for x in blocks]), pd.concat([x[2].gbps for x in blocks])]
    return mem, got


@pytest.mark.parametrize("case", ["stops", "starts"])
def test_partial_window_rate_is_over_its_covered_part_in_memory_and_streamed(case, request):
    path = request.getfixturevalue(case)
    want = STOPS if case == "stops" else STARTS
    by = "series" if case == "stops" else "direction"
    col = "d/tx" if case == "stops" else "tx"
    (b, q, cov), (sb, sq, scov_ns, sgbps) = _both_paths(path, by)
    assert b.index.tolist() == [w[0] for w in want]
    np.testing.assert_allclose(cov.gbps[col], [w[1] for w in want], rtol=1e-9)
    np.testing.assert_allclose(b[col], [w[2] for w in want], rtol=1e-9)
    assert cov.covered_ns[col].tolist() == [w[3] for w in want]
    assert [bool(x & QUALITY_PARTIAL) for x in q[col]] == [w[4] for w in want]
    # the streamed pass over segments gives the same numbers
    assert sb.index.tolist() == b.index.tolist()
    np.testing.assert_allclose(sgbps[col], cov.gbps[col], rtol=1e-12)
    np.testing.assert_allclose(sb[col], b[col], rtol=1e-12)
    assert scov_ns[col].tolist() == cov.covered_ns[col].tolist()
    assert sq[col].tolist() == q[col].tolist()


@pytest.mark.parametrize("case", ["stops", "starts"])
def test_rates_cli_shows_partial_bytes_unknown_and_the_covered_part(case, request, tmp_path):
    path = request.getfixturevalue(case)
    want = STOPS if case == "stops" else STARTS
    by = "series" if case == "stops" else "direction"
    col = "d/tx" if case == "stops" else "tx"
    args = ["rates", str(path), "--window", "10ms", "--by", by, "--bytes"]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["rates"]
    assert [x["window_start_ns"] for x in rows] == [w[0] for w in want]
    for x, (_, gbps, cb, cns, part) in zip(rows, want, strict=True):
        assert x[f"{col}_gbps"] == pytest.approx(gbps, rel=1e-9)
        assert x[f"{col}_covered_bytes"] == pytest.approx(cb, rel=1e-9)
        assert x[f"{col}_covered_s"] == pytest.approx(cns / 1e9, rel=1e-9)
        if part:
            assert x[f"{col}_bytes"] is None  # unknown: never the covered part's bytes
            assert x[f"{col}_quality"] & QUALITY_PARTIAL
        else:
            assert x[f"{col}_bytes"] == pytest.approx(cb, rel=1e-9)
    # CSV (written block by block): the same numbers, an empty field for the unknown bytes
    r = CliRunner().invoke(main, [*args, "--csv"])
    assert r.exit_code == 0, r.output
    lines = [ln.split(",") for ln in r.output.strip().splitlines()]
    head = lines[0]
    for ln, (_, gbps, cb, cns, part) in zip(lines[1:], want, strict=True):
        rec = dict(zip(head, ln, strict=True))
        assert float(rec[f"{col}_gbps"]) == pytest.approx(gbps, rel=1e-9)
        assert float(rec[f"{col}_covered_bytes"]) == pytest.approx(cb, rel=1e-9)
        assert float(rec[f"{col}_covered_s"]) == pytest.approx(cns / 1e9, rel=1e-9)
        assert (rec[f"{col}_bytes"] == "") == part
    # the table: '-' for the unknown bytes, the rate over the covered part
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    out = r.output.splitlines()
    last = out[[i for i, ln in enumerate(out) if ln.startswith("---")][0] + 2]
    assert last.split()[0] == "0.010000"
    assert f"{want[1][1]:.3f}" in last and " - " in f"{last} " and last.rstrip().endswith("P")
    assert "P partly covered (its rate over the covered part" in r.output


def test_peaks_keep_a_partial_window_out_of_the_headline(stops):
    """The partial [10, 20) ms window's 0.096 Gb/s is over 6 ms: never the 10 ms headline peak
    (the whole [0, 10) window's 0.032 Gb/s is), nor the raw maximum (peaks take the windows
    wholly covered by readings)."""
    r = CliRunner().invoke(main, ["peaks", str(stops), "--windows", "10ms", "--json"])
    assert r.exit_code == 0, r.output
    rows = [x for x in json.loads(r.output)["peaks"] if x["window_ns"] == W]
    assert rows and rows[0]["peak_gbps"] == pytest.approx(0.032, rel=1e-9)
    assert rows[0]["raw_max_gbps"] == pytest.approx(0.032, rel=1e-9)


def test_timeline_draws_a_partial_window_at_its_covered_rate(stops):
    """``export perfetto``'s counter track (``timeline.build_timeline``): the last window at
    the rate of its covered 6 ms (0.096 Gb/s), never 0.0576 (its bytes over 10 ms)."""
    from rdmascope.analysis.timeline import build_timeline

    tl = build_timeline([load_capture(stops)], width_ns=W)
    tr = [t for t in tl.processes[0].tracks if t.name == "d/tx Gb/s"][0]
    assert list(tr.t_ns) == [T0, T0 + W]
    np.testing.assert_allclose(tr.values, [0.032, 0.096], rtol=1e-9)


def test_report_figures_draw_a_partial_window_at_its_covered_rate(stops):
    """The report's windows (``node_gbps``: figures 1-3; ``capture_pass``: the per-device
    figure's windows and the 1 ms timeline) on ``stops``: 10 ms windows over its data span
    [T0, T0 + 16 ms), the last cut at 16 ms: 0.032 and 0.096 Gb/s (its 6 ms over 6 ms, never
    over 10). The per-device figure (100 ms windows over the same span): one window cut to the
    16 ms, 112,000 B x 8 / 16e6 ns = 0.056 Gb/s (never 112,000 B over 100 ms: 0.00896)."""
    from rdmascope.analysis import report as R

    cfg = R.load_configuration(stops)
    assert cfg.streamed
    got = R.node_gbps(cfg, W, T0, T0 + 20 * MS)
    assert got.index.tolist() == [T0, T0 + W]
    np.testing.assert_allclose(got.iloc[:, 0], [0.032, 0.096], rtol=1e-9)
    cp = R.capture_pass(cfg, capacity_gbps=200.0)
    np.testing.assert_allclose(cp.devices["d/tx"], [0.056], rtol=1e-9)
    # every 1 ms window is whole (readings every 1 ms from T0): 0.032 then 0.096 Gb/s
    np.testing.assert_allclose(cp.timeline.to_numpy(), [0.032] * 10 + [0.096] * 6, rtol=1e-9)


def test_a_partial_window_over_line_in_its_covered_part_is_flagged_over_line(tmp_path):
    """A 200 Gb/s port read every 1 ms (read bracket 2 us) from T0 to T0 + 16 ms: 1.25 MB per
    ms (10 Gb/s) for 10 ms, then 37.5 MB per ms (300 Gb/s) for 6 ms. The 10 ms window [10, 20)
    covers 6 ms at 300 Gb/s: its fewest bytes (each edge moved 1 us + 0.1 ms inward: 225 MB
    less under 0.202 ms at 300 Gb/s, 7.6 MB) exceed what 200 Gb/s carries in the 6 ms (150 MB):
    over line (O), as its 1 ms windows are. Judged over 10 ms (225 MB x 8 / 10 ms = 180 Gb/s)
    it was never even a candidate."""
    units = np.concatenate([[0], np.cumsum([1.25e6 / 4] * 10 + [37.5e6 / 4] * 6)])
    path = write_capture(
        tmp_path / "over", [ib("rocep1s0f1", "tx")],
        {0: [(T0 + k * MS - 1000, 2000, int(u), STATUS_OK) for k, u in enumerate(units)]},
        devices=[{"name": "rocep1s0f1", "ports": [{"port": 1, "rate_gbps": 200.0}]}],
        roll_every=5)
    from rdmascope.analysis import QUALITY_OVER_LINE

    mem_b, mem_q, cov = rebin_with_quality(byte_intervals(load_capture(path)), W, origin_ns=T0,
                                           coverage=True)
    np.testing.assert_allclose(cov.gbps["rocep1s0f1/tx"], [10.0, 300.0], rtol=1e-9)
    assert [bool(x & QUALITY_OVER_LINE) for x in mem_q["rocep1s0f1/tx"]] == [False, True]
    r = CliRunner().invoke(main, ["rates", str(path), "--window", "10ms", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["rates"]
    assert [x["rocep1s0f1/tx_quality"] for x in rows] == \
        [int(x) for x in mem_q["rocep1s0f1/tx"]] == [0, QUALITY_PARTIAL | QUALITY_OVER_LINE]
    assert rows[1]["rocep1s0f1/tx_gbps"] == pytest.approx(300.0, rel=1e-9)
