"""The report's figures of a range, made in the capture's one pass, equal what their own passes
made: figure 1's 1 ms windows around a request, figure 3's windows of its prefill, the prefill's
peak table and figure 2's windows or min/max envelope of a test (``report_figures.RangeRates``,
``RequestFigures``, ``comparison_consumers``, fed by ``report_pass.capture_pass`` or by
``run_consumers``) against ``node_gbps``, ``node_envelope`` and ``peak_table_capture``, each of
which reads the segments around its range in a pass of its own. Value for value, on a capture
with a gap, glitch readings at segment edges, a reset and unreadable runs across rolls, and on
the benchmark's capture with a line rate below its bursts (windows over line rate, their causes
named), ranges crossing segment edges.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from capture_builders import MS, STATUS_OK, STATUS_READ_ERROR, T0, ib, netdev, write_capture
from rdmascope.analysis import report as R
from rdmascope.analysis.peaks import peak_table_capture
from rdmascope.analysis.report_figures import (
    RangeRates,
    RequestFigures,
    comparison_consumers,
    run_consumers,
)

from rdmascope.plausibility import link_gbps_override

REPO = Path(__file__).resolve().parents[1]


def _faulty(path: Path, n: int = 400, roll_every: int = 23, rate_gbps: float | None = None
            ) -> Path:
    """Two tx and two rx counters (one never readable), a netdev; a gap (missed sweeps), glitch
    readings as the last/first reading of a segment, a reset, unreadable runs across rolls and
    at both ends; a request log whose ranges cross segment edges and the faults. With
    ``rate_gbps`` the devices' ports have that rate (bursts run at ~1.9 Gb/s)."""
    rng = np.random.default_rng(11)
    t = T0 + 300_000 + np.arange(n) * MS + rng.integers(-150_000, 150_000, size=n)
    t[90:] += 7 * MS  # missed sweeps: a gap between sweep 89 and 90
    burst = np.where((np.arange(n) // 7) % 3 == 0, 60_000, 2_000)
    v0 = np.cumsum(rng.integers(0, 1, size=n) + burst).astype(np.int64)
    v1 = np.cumsum(rng.integers(0, 3_000, size=n)).astype(np.int64)
    v0[22] = v0[21] - 5  # a glitch: the last reading of segment 0
    v0[46] = v0[47] + 10**6  # a glitch: the first reading of segment 2
    v0[200:] -= v0[199] + 1  # a reset
    v0[200:] = np.maximum(v0[200:], 0)
    rd = {0: [(int(t[k]), 1500, int(v0[k]), STATUS_OK) for k in range(n)],
          1: [(int(t[k]) + 3000, 1500, None if 57 <= k <= 70 else int(v1[k]),
               STATUS_READ_ERROR if 57 <= k <= 70 else STATUS_OK) for k in range(n)],
          2: [(int(t[k]) + 5000, 900, int(v1[k]) * 3, STATUS_OK) for k in range(n)],
          3: [(int(t[k]) + 7000, 900, None if k < 30 or k > n - 12 else int(v1[k]) * 2,
               STATUS_READ_ERROR if k < 30 or k > n - 12 else STATUS_OK) for k in range(n)],
          4: [(int(t[k]) + 9000, 900, None, STATUS_READ_ERROR) for k in range(n)]}
    devices = None if rate_gbps is None else [
        {"name": d, "netdevs": [], "ports": [{"port": 1, "rate": f"{rate_gbps:g} Gb/sec",
                                               "rate_gbps": rate_gbps, "state": "4: ACTIVE",
                                               "link_layer": "Ethernet", "netdevs": []}]}
        for d in "abcd"]
    write_capture(path, [ib("a", "tx"), ib("b", "rx"), netdev("a", "eth0", "tx"),
                         ib("c", "tx"), ib("d", "rx")], rd, roll_every=roll_every,
                  devices=devices)
    with open(path / "requests.jsonl", "w") as f:
        for i, (s, fst, lst, test) in enumerate([
                (3, 40, 60, "P1"), (18, 27, 95, "P1"), (44, 52, 150, "P2"), (85, 99, 130, "P2"),
                (190, 207, 260, "P3"), (300, 390, 405, "P3"), (60, 75, 80, "P1")]):
            f.write(json.dumps({"request_id": f"r{i}", "t_send": (T0 + s * MS) / 1e9,
                                "t_first_token": (T0 + fst * MS) / 1e9,
                                "t_last_token": (T0 + lst * MS) / 1e9, "prompt_tokens": 100,
                                "output_tokens": 10, "test": test, "round": 1 + i // 3,
                                "clock": "CLOCK_MONOTONIC"}) + "\n")
    return path


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> list[tuple[Path, float | None]]:
    """(capture, line rate override): the faulty capture, with 1 Gb/s ports (its bursts run at
    ~1.9), and 20 s of the benchmark's capture in 2 s segments judged against 100 Gb/s (its
    bursts run at ~180)."""
    d = tmp_path_factory.mktemp("figpass")
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale_capture import build

    return [(_faulty(d / "faulty"), None), (_faulty(d / "faulty1g", rate_gbps=1.0), None),
            (build(d / "bench", 20, segment_s=2), 100.0)]


def _needs(cfg):
    """Figures of every request (padded as the report does, and by 3 ms) and figure 2 of every
    test, each windows and envelope."""
    reqs = [(RequestFigures(cfg, r, pad_s=pad), r, pad) for pad in (0.5, 0.003)
            for _, r in cfg.requests.iterrows()]
    tests = list(dict.fromkeys(cfg.requests["test"].astype(str)))
    cmp = {t: comparison_consumers([cfg], t) for t in tests}
    env = {t: comparison_consumers([cfg], t, max_windows=5, columns=7) for t in tests}
    return reqs, cmp, env


def _check(cfg, reqs, cmp, env):
    origin = R.window_origin(cfg)
    info = R.info_of(cfg.capture)
    n_over = 0
    for figs, r, pad_s in reqs:
        assert figs.done
        send, first, last = int(r["t_send_ns"]), int(r["t_first_ns"]), int(r["t_last_ns"])
        pad = int(pad_s * 1e9)
        want = R.node_gbps(cfg, MS, send - pad, last + pad)
        pd.testing.assert_frame_equal(figs.zoom.result(), want, check_exact=True)
        got = figs.window_rates()
        for w in R.DEFAULT_WINDOWS_NS:
            pd.testing.assert_frame_equal(got[w], R.node_gbps(cfg, w, send, first, whole=True),
                                          check_exact=True)
        want = peak_table_capture(info, start_ns=send, end_ns=first, by="direction",
                                  origin_ns=origin)
        pd.testing.assert_frame_equal(figs.peak_table(), want, check_exact=True)
        n_over += int(want["n_over_line_windows"].sum())
    for t, fed in cmp.items():
        r = cfg.requests[cfg.requests["test"].astype(str) == t]  # figure 2's range, padded 1 s
        a, b = int(r["t_send_ns"].min()) - 10**9, int(r["t_last_ns"].max()) + 10**9
        pd.testing.assert_frame_equal(fed[cfg.label].result(), R.node_gbps(cfg, MS, a, b),
                                      check_exact=True)
        got = env[t][cfg.label].result()
        k = R.comparison_bucket([cfg], t, max_windows=5, columns=7)
        assert k > 1
        want = R.node_envelope(cfg, MS, a, b, k=k)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert got.attrs["bucket_ns"] == want.attrs["bucket_ns"]
    return n_over


@pytest.mark.parametrize("shared", [True, False], ids=["report-pass", "own-pass"])
def test_figures_fed_by_a_pass_equal_their_own_passes(captures, shared):
    overs = []
    for path, line in captures:
        with link_gbps_override(line):
            cfg = R.load_configuration(path, [path / "requests.jsonl"])
            reqs, cmp, env = _needs(cfg)
            consumers = [*(x[0] for x in reqs), *(f[cfg.label] for f in cmp.values()),
                         *(f[cfg.label] for f in env.values())]
            if shared:
                cp = R.capture_pass(cfg, capacity_gbps=200.0, consumers=consumers)
                assert cp is not None
            else:
                run_consumers(cfg, consumers)
            overs.append(_check(cfg, reqs, cmp, env))
    # the line rates put windows over line rate in the peak tables (their causes compared too)
    assert overs[1] > 0 and overs[2] > 0, overs


def test_range_rates_refuses_an_empty_range_as_node_gbps(captures):
    path, _ = captures[0]
    cfg = R.load_configuration(path, [path / "requests.jsonl"])
    lo, _hi = cfg.data_span("tx")
    with pytest.raises(ValueError, match="empty time range") as want:
        R.node_gbps(cfg, MS, lo - 10 * MS, lo - 5 * MS)
    with pytest.raises(ValueError, match="empty time range") as got:
        RangeRates(cfg, MS, lo - 10 * MS, lo - 5 * MS)
    assert str(got.value) == str(want.value)


def test_a_figure_range_holds_nothing_back_once_its_windows_are_out(captures):
    """A grid whose range has ended no longer holds the pass's horizon: the flaggers on a
    capture's pass keep the last files' intervals, not every interval after the first request
    (``stream.iter_windows`` drops a finished grid from the horizon)."""
    path, line = captures[2]
    with link_gbps_override(line):
        cfg = R.load_configuration(path, [path / "requests.jsonl"])
        figs = RequestFigures(cfg, cfg.requests.iloc[0])
        assert R.capture_pass(cfg, capacity_gbps=200.0, consumers=[figs]) is not None
    kept = [iv["t0_ns"][0] for parts in figs.peaks.flag.kept for iv in parts.values()]
    assert int(cfg.requests["t_last_ns"].iloc[0]) < int(cfg.capture.t_start_ns) + 3 * 10**9
    assert min(kept) >= int(cfg.capture.t_end_ns) - 3 * 2 * 10**9, (min(kept), cfg.capture.t_end_ns)


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
        pd.testing.assert_frame_equal(a.kernel, b.kernel, check_exact=True)


def test_device_rates_and_checks_from_one_pass_equal_their_own(captures):
    """``plot devices``: the per-device windows and the emulation check from one pass equal
    ``node_gbps(by="series")`` and ``verify_emulation`` (single, then both)."""
    from rdmascope.analysis.verify import verify_emulation

    for path, line in captures:
        with link_gbps_override(line):
            for w in (20 * MS, 100 * MS):
                cfg = R.load_configuration(path, [path / "requests.jsonl"])
                got = R.device_rates(cfg, w)
                lo, hi = cfg.data_span()
                pd.testing.assert_frame_equal(got, R.node_gbps(cfg, w, lo, hi, by="series"),
                                              check_exact=True)
                single = verify_emulation(cfg.capture, origin_ns=cfg.origin_ns)
                both = None if single.ok else verify_emulation(cfg.capture, expect="both",
                                                               origin_ns=cfg.origin_ns)
                _same_verdict(cfg.emulation_checks()[0], single)
                _same_verdict(cfg.emulation_checks()[1], both)


def test_attribution_and_checks_from_one_pass_equal_their_own(captures):
    """``compare``, ``plot extra-prefill/tokens``: the attribution and the emulation check from
    one pass (``compare.attribute_with_checks``) equal ``attribute`` and ``verify_emulation``
    each on its own."""
    from rdmascope.analysis.attribute import attribute
    from rdmascope.analysis.compare import attribute_with_checks, interfaces_of, interfaces_used
    from rdmascope.analysis.requestlogs import align, read_request_log
    from rdmascope.analysis.stream import open_capture
    from rdmascope.analysis.verify import verify_emulation

    for path, line in captures:
        with link_gbps_override(line):
            info = open_capture(path)
            log = align(read_request_log(path / "requests.jsonl"), info)
            for kw in ({}, {"warmup_rounds": 1, "arrival_window_s": 0.5}):
                att, (single, both) = attribute_with_checks(info, log, **kw)
                want = attribute(info, log, **kw)
                for name in ("requests", "tests", "rounds", "by_series", "timeline"):
                    pd.testing.assert_frame_equal(getattr(att, name), getattr(want, name),
                                                  check_exact=True, obj=name)
                _same_verdict(single, verify_emulation(info))
                _same_verdict(both, None if single.ok else verify_emulation(info, expect="both"))
                assert interfaces_of((single, both)) == interfaces_used(info)
