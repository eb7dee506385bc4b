"""An implausible counter jump (10 TB in 1 ms) is unknown bytes everywhere downstream, like a reset.

One hand-built capture, twins A and B of a 200 Gb/s port (cap 800 Gb/s), 100 ms of 1 ms
intervals: A sends 1 MB per ms, 22.5 MB per ms (180 Gb/s) in ms 20-24, and a glitch of 10 TB in
ms 40; B sends 0.5 MB per ms. Every expected value below is summed by hand from that plan. With
the glitch accepted, each of them would instead hold the 10 TB (80,000 Gb/s).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from rdmascope.analysis import (
    QUALITY_INVALID,
    burst_analysis,
    byte_intervals,
    load_capture,
    peak_table,
    rebin,
    rebin_capture,
    rebin_with_quality,
    verify_emulation,
)
from rdmascope.analysis.attribute import attribute
from rdmascope.analysis.report import capture_fields, load_configuration
from rdmascope.analysis.requestlogs import align, read_request_log
from requestlog_helpers import MS, build_capture

T0 = 1000 * 1_000_000_000
A, B = "rocep1s0f1", "roceP2p1s0f1"
GLITCH_MS = 40


def a_tx() -> np.ndarray:
    x = np.full(100, 1_000_000, np.int64)
    x[20:25] = 22_500_000
    x[GLITCH_MS] = 10 * 10**12
    return x


@pytest.fixture
def glitch_path(tmp_path):
    return build_capture(tmp_path / "cap", T0, {
        f"{A}/tx": a_tx(), f"{B}/tx": np.full(100, 500_000),
        f"{A}/rx": np.full(100, 400), f"{B}/rx": np.full(100, 400)})


def test_flag_and_windows(glitch_path):
    cap = load_capture(glitch_path)
    iv = byte_intervals(cap)
    a = iv[iv.series == f"{A}/tx"]
    assert a.flag.astype(str).tolist().count("implausible") == 1
    assert a.flag.iloc[GLITCH_MS] == "implausible" and np.isnan(a.bytes.iloc[GLITCH_MS])
    assert (iv[iv.series != f"{A}/tx"].flag == "ok").all()
    b, q = rebin_with_quality(iv, MS)
    col = b[f"{A}/tx"]
    assert np.isnan(col.iloc[GLITCH_MS]) and q[f"{A}/tx"].iloc[GLITCH_MS] & QUALITY_INVALID
    assert col.drop(col.index[GLITCH_MS]).notna().all()  # only that window
    assert np.nansum(col) == 94 * 1e6 + 5 * 22.5e6
    ten = rebin(iv, 10 * MS)[f"{A}/tx"]
    assert np.isnan(ten.iloc[4]) and ten.iloc[3] == 10e6
    # the chunked path flags the same interval
    cb, cq = rebin_capture(glitch_path, MS)
    np.testing.assert_array_equal(cq.to_numpy(), q.to_numpy())
    np.testing.assert_allclose(cb.to_numpy(), b.to_numpy(), rtol=1e-12)


def test_peaks_bursts_verify(glitch_path):
    cap = load_capture(glitch_path)
    iv = byte_intervals(cap)
    pk = peak_table(iv, windows_ns=(MS,))
    row = pk[(pk.series == f"{A}/tx") & (pk.window == "1 ms")].iloc[0]
    assert row.peak_gbps == pytest.approx(180.0)  # 22.5 MB in 1 ms
    assert row.n_nan_windows == 1 and row.n_windows == 99
    whole = pk[(pk.series == f"{A}/tx") & (pk.window == "whole range")].iloc[0]
    assert np.isnan(whole.peak_gbps) and whole.n_nan_windows == 1

    bt = burst_analysis(iv, capacity_gbps=200.0)
    s = bt.summary.set_index("series").loc[f"{A}/tx"]
    assert s.n_bursts == 1 and s.nan_windows == 1
    assert s.burst_bytes == pytest.approx(5 * 22.5e6)
    # one unknown window: the total is unknown, the known windows' bytes beside it
    assert np.isnan(s.total_bytes) and s.known_bytes == pytest.approx(94e6 + 112.5e6)

    v = verify_emulation(cap, expect="both")
    assert np.isnan(v.devices.at[A, "tx_bytes"])  # unknown, never its readable part
    assert v.devices.at[A, "known_bytes"] == pytest.approx(94e6 + 112.5e6
                                                          + v.devices.at[A, "rx_bytes"])
    assert v.devices.at[A, "nan_windows"] == 1 and v.devices.at[B, "nan_windows"] == 0
    assert v.devices.at[A, "peak_1ms_gbps"] == pytest.approx(180.0)


def test_attribute_and_report(glitch_path, tmp_path):
    log_path = tmp_path / "log.jsonl"
    with open(log_path, "w") as f:
        for rid, (s, a, b) in (("r0", (10, 30, 35)), ("r1", (36, 45, 60))):
            f.write(json.dumps({"request_id": rid, "t_send": (T0 + s * MS) / 1e9,
                                "t_first_token": (T0 + a * MS) / 1e9,
                                "t_last_token": (T0 + b * MS) / 1e9, "prompt_tokens": 8192,
                                "output_tokens": 101, "test": "P", "round": 1}) + "\n")
    cap = load_capture(glitch_path)
    att = attribute(cap, align(read_request_log(log_path), cap))
    r = att.requests.set_index("request_id")
    # r0 prefill [10, 30) ms: A 15 x 1 MB + 5 x 22.5 MB, B 20 x 0.5 MB
    assert r.loc["r0", "prefill_tx_bytes"] == pytest.approx(127.5e6 + 10e6)
    assert r.loc["r0", "prefill_peak_tx_gbps"] == pytest.approx(23e6 * 8 / 1e6)
    # r1's prefill [36, 45) holds the glitch: unknown, never 10 TB; its decode is clean
    assert np.isnan(r.loc["r1", "prefill_tx_bytes"])
    assert r.loc["r1", "prefill_peak_tx_gbps"] == pytest.approx(1.5e6 * 8 / 1e6)
    assert r.loc["r1", "prefill_bursts"] == 0
    assert r.loc["r1", "decode_tx_bytes"] == pytest.approx(15 * 1.5e6)
    assert any("prefill window(s) overlap" in n for n in att.notes)
    # the report's capture facts count the flag
    cfg = load_configuration(glitch_path, [log_path])
    fields = dict(capture_fields(cfg))
    assert "implausible 1" in fields["intervals by flag"]


def test_implausible_rule_equals_its_formula_with_and_without_the_shortcut():
    """``plausibility.implausible`` answers without the per-step durations when even the
    largest step fits in one sampling interval at the cap; either way it is exactly
    bytes x 8 > cap x max(dt + unc0 + unc1, interval), step by step (steps at the bound, over
    it only through a short duration, NaN bytes, a float interval)."""
    from rdmascope.plausibility import implausible

    rng = np.random.default_rng(3)
    for _ in range(3000):
        n = int(rng.integers(0, 40))
        interval = int(rng.integers(1, 2_000_000)) if rng.random() < 0.9 else 1e6
        cap = float(rng.choice([0.5, 8.0, 800.0, 1600.0, 123.456]))
        dt = rng.integers(0, 3 * int(interval), n)
        u0, u1 = rng.integers(0, 50_000, n), rng.integers(0, 50_000, n)
        b = rng.random(n) * cap * interval / 8 * float(rng.choice([0.5, 0.999999, 1.0, 2.0]))
        if n and rng.random() < 0.3:
            b[int(rng.integers(0, n))] = cap * interval / 8  # exactly at the bound
        if n and rng.random() < 0.1:
            b[int(rng.integers(0, n))] = np.nan
        want = b * 8.0 > cap * np.maximum(dt + u0 + u1, interval).astype(np.float64)
        assert np.array_equal(implausible(b, dt, u0, u1, interval, cap), want)
