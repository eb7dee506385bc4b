"""The report reads each capture once (``report.capture_pass``): the emulation check, bursts,
timeline, per-device traffic and flag counts of that one pass equal those of the separate
streamed functions it replaces (each reading the capture on its own), value for value."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rdmascope.analysis import figures as F
from rdmascope.analysis import report as R
from rdmascope.analysis.bursts import burst_analysis_capture
from rdmascope.analysis.verify import verify_emulation

MS = 1_000_000


@pytest.fixture(scope="module")
def scale_capture(tmp_path_factory) -> Path:
    """3 minutes of the benchmark's capture: twins, netdev counters, bursts, 3 segments."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from scale_capture import build

    return build(tmp_path_factory.mktemp("pass") / "cap", 180)


def _runs(fixtures_dir, scale_capture):
    runs = [fixtures_dir / n for n in ("sim-p2-200", "sim-p2-emulated100", "sim-p1-tcp-fallback")]
    return [r for r in runs if (r / "manifest.json").exists()] + [scale_capture]


def _same_verdict(a, b):
    if b is None:
        assert a is None
        return
    assert (a.status, a.ok, a.expect, a.message, a.main_device, a.tcp_suspected) == \
        (b.status, b.ok, b.expect, b.message, b.main_device, b.tcp_suspected)
    # NaN (unknown) on both sides is the same total
    assert a.total_bytes == b.total_bytes or (a.total_bytes != a.total_bytes
                                              and b.total_bytes != b.total_bytes)
    assert a.known_bytes == b.known_bytes
    pd.testing.assert_frame_equal(a.devices, b.devices, check_exact=True)
    if b.kernel is None:
        assert a.kernel is None
    else:
        # kernel bytes are summed from the pass's own 1 s windows (cluster.KernelAcc), not per
        # block of a second pass: the same bytes in another addition order (last bits only)
        pd.testing.assert_frame_equal(a.kernel, b.kernel, check_exact=False, rtol=1e-12)


@pytest.mark.parametrize("envelope", [False, True])
def test_one_pass_equals_the_separate_passes(fixtures_dir, scale_capture, monkeypatch,
                                             envelope):
    if envelope:  # every run's timeline becomes an envelope
        monkeypatch.setattr(F, "MAX_TIMELINE_POINTS", 2000)
    for run in _runs(fixtures_dir, scale_capture):
        cfg = R.load_configuration(run, R.default_request_logs(run))
        cap = cfg.port_gbps or 200.0
        cp = R.capture_pass(cfg, capacity_gbps=cap)
        assert cp is not None, run
        # the emulation check: both expectations judged from the one measurement
        single = verify_emulation(cfg.capture, origin_ns=cfg.origin_ns)
        both = None if single.ok else verify_emulation(cfg.capture, expect="both",
                                                       origin_ns=cfg.origin_ns)
        _same_verdict(cp.checks[0], single)
        _same_verdict(cp.checks[1], both)
        # bursts: the per-direction sum of the series windows is rebin's by="direction"
        bt = burst_analysis_capture(cfg.capture, capacity_gbps=cap, by="direction",
                                    origin_ns=R.window_origin(cfg))
        # the report shows the summary only and holds no row per burst (a day has millions)
        assert cp.bursts.table.empty
        pd.testing.assert_frame_equal(cp.bursts.summary, bt.summary, check_exact=True)
        assert cp.bursts.params == bt.params
        # the timeline: every 1 ms window of the tx span, or the envelope of them
        lo, hi = cfg.data_span("tx")
        n = -(-(hi - lo) // MS) + 1
        if n > F.MAX_TIMELINE_POINTS:
            from rdmascope.analysis.envelope import bucket_windows

            want = R.node_envelope(cfg, MS, lo, hi, k=bucket_windows(n, F.MAX_TIMELINE_POINTS // 2))
            assert isinstance(cp.timeline, pd.DataFrame)
            pd.testing.assert_frame_equal(cp.timeline, want, check_exact=True)
            assert cp.timeline.attrs["bucket_ns"] == want.attrs["bucket_ns"]
        else:
            want = R.node_gbps(cfg, MS, lo, hi).iloc[:, 0]
            np.testing.assert_array_equal(cp.timeline.index.to_numpy(), want.index.to_numpy())
            np.testing.assert_array_equal(cp.timeline.to_numpy(), want.to_numpy())
        # the per-device figure's 100 ms windows
        a, z = cfg.data_span()
        dev = R.node_gbps(cfg, 100 * MS, a, z, by="series")
        pd.testing.assert_frame_equal(cp.devices, dev, check_exact=True, check_names=False)
        # flag counts, counted by a pass of their own
        fresh = R.load_configuration(run, R.default_request_logs(run))
        pd.testing.assert_series_equal(cp.flags, R.flag_counts(fresh), check_exact=True)
        # the attribution's ranges answered by the same pass
        if len(cfg.requests) and not envelope:
            from rdmascope.analysis.attribute import attribute

            log = cfg.log[0] if isinstance(cfg.log, list) else cfg.log
            alone = attribute(cfg.capture, log, origin_ns=R.window_origin(cfg))
            got = {}

            def in_pass(rq, cfg=cfg, cap=cap, got=got):
                got["pass"] = R.capture_pass(cfg, capacity_gbps=cap, ranges=rq)

            shared = attribute(cfg.capture, log, origin_ns=R.window_origin(cfg), _run=in_pass)
            assert got["pass"] is not None
            for name in ("requests", "tests", "rounds"):
                pd.testing.assert_frame_equal(getattr(shared, name), getattr(alone, name),
                                              check_exact=True)


def test_the_report_uses_the_one_pass(fixtures_dir, tmp_path, monkeypatch):
    """build_report makes no emulation, attribution or burst pass of its own."""
    run = fixtures_dir / "sim-p2-200"
    if not (run / "manifest.json").exists():
        pytest.skip("fixture sim-p2-200 not committed")
    import rdmascope.analysis.bursts as B
    import rdmascope.analysis.verify as V

    def boom(*a, **k):
        raise AssertionError("a separate pass")

    import rdmascope.analysis.ranges as S

    monkeypatch.setattr(V, "verify_emulation", boom)
    monkeypatch.setattr(B, "burst_analysis_capture", boom)
    monkeypatch.setattr(S.RangeQueries, "run", boom)
    html = R.write_report([run], None, tmp_path / "r")
    assert html.exists()


def test_devices_figure_window_grows_with_the_capture_only_past_its_limit():
    # 100 ms up to 4,000 s (40,000 windows); then the narrowest listed width that fits
    MS_NS = 1_000_000
    assert R.devices_width_ns(600) == 100 * MS_NS
    assert R.devices_width_ns(3600) == 100 * MS_NS  # 36,000 windows
    assert R.devices_width_ns(4001) == 200 * MS_NS  # 40,010 at 100 ms
    assert R.devices_width_ns(6 * 3600) == 1000 * MS_NS  # 43,200 at 500 ms; 21,600 at 1 s
    assert R.devices_width_ns(24 * 3600) == 5000 * MS_NS  # 43,200 at 2 s; 17,280 at 5 s
    assert R.devices_width_ns(1e9) == 600_000 * MS_NS  # the widest beyond


def test_report_cells_never_show_minus_zero():
    # a value that rounds to zero at the column's decimals shows without a sign
    assert R.format_cell(-0.0001, 3) == ("0.000", True)
    assert R.format_cell(-0.0, 2) == ("0.00", True)
    assert R.format_cell(-0.0006, 3) == ("-0.001", True)
    assert R.format_cell(-1000.0, 0) == ("-1,000", True)
