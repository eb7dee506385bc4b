"""compare: per-test changes and the estimate beside the measurement."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from rdmascope.analysis.compare import compare


def fake(tests_rows, rounds_rows):
    return SimpleNamespace(tests=pd.DataFrame(tests_rows), rounds=pd.DataFrame(rounds_rows))


def side(ttlft, ttft, speed, prefill, per_token, rounds):
    t = {"test": "P2", "rounds": len(rounds), "n_requests": 1, "prompt_tokens": 8192,
         "mean_ttft_s": ttft, "time_to_last_first_token_s": ttlft, "decode_speed_tps": speed,
         "prefill_tx_bytes": prefill, "prefill_per_token_bytes": per_token}
    r = [{"test": "P2", "round": i + 1, "prompt_tokens": 8192, "time_to_last_first_token_s": v,
          "prefill_tx_bytes": prefill} for i, v in enumerate(rounds)]
    return fake([t], r)


def test_compare_hand_computed():
    # the study's P2: 6.36 s -> 7.24 s, 3.57 MB per prompt token, decode 20 -> 20.5 tokens/s
    nbytes = 8192 * 3.57e6
    a = side(6.36, 6.36, 20.0, nbytes, 3.57e6, [6.30, 6.36, 6.42])
    b = side(7.24, 7.24, 20.5, nbytes, 3.57e6, [7.20, 7.24, 7.28])
    c = compare(a, b, label_a="200", label_b="emulated")
    row = c.tests.iloc[0]
    assert row.ttlft_change_s == pytest.approx(0.88)
    assert row.ttlft_change_pct == pytest.approx(100 * 0.88 / 6.36)
    assert row.decode_speed_change_pct == pytest.approx(2.5)
    assert row.per_token_diff_pct == pytest.approx(0.0)
    est = nbytes * 8 * (1 / 109 - 1 / 200) / 1e9  # 0.9701 s
    assert row.estimate_s == pytest.approx(est)
    assert row.bound_used_pct == pytest.approx(100 * 0.88 / est)
    assert row.network_share_a == pytest.approx(nbytes * 8 / 200e9 / 6.36)
    # per-round increases 0.90, 0.88, 0.86 -> min-max spread
    assert (row.extra_prefill_min_s, row.extra_prefill_max_s) == pytest.approx((0.86, 0.90))
    corr = nbytes * 8 * (1 / 100 - 1 / 109) / 1e9
    assert row.correction_to_real_s == pytest.approx(corr)
    assert row.ttlft_b_real_s == pytest.approx(7.24 + corr)
    assert list(c.rounds["increase"]) == pytest.approx([0.90, 0.88, 0.86])


def test_compare_arch_estimate_and_no_common_test():
    from rdmascope.analysis.estimate import STUDY_MODEL

    a = side(6.36, 6.36, 20.0, 1e9, 1e6, [6.36])
    b = side(7.24, 7.24, 20.0, 1e9, 1e6, [7.24])
    c = compare(a, b, model=STUDY_MODEL, link_b_gbps=100, real_gbps=None)
    # 8,192 tokens x 3,376,128 B x 8 x (1/100 - 1/200) = 1.1065 s
    assert c.tests.iloc[0].estimate_arch_s == pytest.approx(8192 * 3_376_128 * 8 * 0.005 / 1e9)
    assert "correction_to_real_s" not in c.tests.columns
    other = side(1, 1, 1, 1, 1, [1])
    other.tests["test"] = "P9"
    with pytest.raises(ValueError, match="share no test"):
        compare(a, other)


def test_compare_emulator_runs(tmp_path):
    """On emulated 200 vs emulated-100 runs the TTFT grows, bounded by the estimate."""
    from rdmascope.analysis.attribute import attribute
    from rdmascope.analysis.load import load_capture
    from rdmascope.analysis.requestlogs import align, read_request_log
    from requestlog_helpers import simulated_run

    atts = {}
    for link in ("200", "emulated100"):
        run = simulated_run(tmp_path, link)
        cap = load_capture(run)
        atts[link] = attribute(cap, align(read_request_log(run / "requests.jsonl"), cap))
    c = compare(atts["200"], atts["emulated100"], label_a="200", label_b="emulated100")
    t = c.tests.set_index("test")
    assert list(t.index) == ["P1", "P4"]
    for test in ("P1", "P4"):
        assert t.loc[test, "ttlft_change_s"] > 0
        # the measured increase sits at (the emulator overlaps nothing) or below the bound
        assert t.loc[test, "ttlft_change_s"] <= t.loc[test, "estimate_s"] * 1.01
        assert t.loc[test, "ttlft_change_s"] >= t.loc[test, "estimate_s"] * 0.9
        # the bytes per prompt token do not depend on the link
        assert abs(t.loc[test, "per_token_diff_pct"]) < 0.5
        assert abs(t.loc[test, "decode_speed_change_pct"]) < 5


def test_cli_compare_shows_increase_and_estimate():
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from rdmascope.cli import main

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    a, b = fixtures / "sim-p2-200", fixtures / "sim-p2-emulated100"
    r = CliRunner().invoke(main, ["compare", str(a), str(b), "--json"])
    assert r.exit_code == 0, r.output
    t = json.loads(r.output)["tests"][0]
    truth_a = json.loads((a / "truth.json").read_text())["requests"][0]["ttft_s"]
    truth_b = json.loads((b / "truth.json").read_text())["requests"][0]["ttft_s"]
    assert t["ttft_change_s"] == pytest.approx(truth_b - truth_a, abs=1e-6)
    assert 0 < t["ttft_change_s"] <= t["estimate_s"] * 1.01
    r = CliRunner().invoke(main, ["compare", str(a), str(b), "--preset", "study"])
    assert r.exit_code == 0, r.output
    assert "TTFT change (s)" in r.output and "estimate (s)" in r.output
    assert "correction to real (s)" in r.output


def test_cli_compare_missing_log(tmp_path):
    from click.testing import CliRunner
    from requestlog_helpers import simulated_run

    from rdmascope.cli import main

    a = simulated_run(tmp_path, "200", tests=("P1",), rounds=1)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(main, ["compare", str(a), str(empty)])
    assert r.exit_code == 1 and "--requests-b" in r.output
