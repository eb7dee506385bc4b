"""Attribution: hand-computed bytes per request window, rounds, time classes, bursts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rdmascope.analysis.attribute import assign_rounds, attribute, classify_time
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import align, read_request_log
from requestlog_helpers import MS, build_capture

T0 = 1000 * 1_000_000_000
A, B = "rocep1s0f1", "roceP2p1s0f1"
LINK_TX = f"link:{A}+{B}/tx"


def a_tx(k):
    """Bytes device A sends in millisecond k of the capture: 4000 x (k + 1)."""
    return 4000 * (k + 1)


@pytest.fixture
def overlap_capture(tmp_path):
    n = 100
    k = np.arange(n)
    path = build_capture(tmp_path / "cap", T0, {
        f"{A}/tx": a_tx(k), f"{B}/tx": np.full(n, 8000),
        f"{A}/rx": np.full(n, 400), f"{B}/rx": np.full(n, 800)})
    return load_capture(path)


def write_log(path, rows, labels=True):
    with open(path, "w") as f:
        for i, (s, a, b) in enumerate(rows):
            d = {"request_id": f"r{i}", "t_send": (T0 + s * MS) / 1e9,
                 "t_first_token": (T0 + a * MS) / 1e9, "t_last_token": (T0 + b * MS) / 1e9,
                 "prompt_tokens": 8192, "output_tokens": 101}
            if labels:
                d.update(test="P4", round=1)
            f.write(json.dumps(d) + "\n")
    return read_request_log(path)


# four concurrent requests (ms after the capture start): send, first token, last token
FOUR = [(10, 30, 60), (10.5, 40, 70), (11, 50, 80), (12.25, 55.5, 90)]


def test_four_concurrent_requests_hand_computed(tmp_path, overlap_capture):
    log = align(write_log(tmp_path / "log.jsonl", FOUR), overlap_capture)
    att = attribute(overlap_capture, log)
    r = att.requests.set_index("request_id")
    # r0 prefill [10, 30] ms: A sends sum_{k=10}^{29} 4000(k+1) = 4000 x (465 - 55) = 1,640,000;
    # B sends 20 ms x 8,000 = 160,000
    assert r.loc["r0", "prefill_tx_bytes"] == pytest.approx(1_800_000, abs=1e-3)
    # r1 prefill [10.5, 40]: half of ms 10 (22,000) + 4000 x sum_{12}^{40} (3,016,000) + B 236,000
    assert r.loc["r1", "prefill_tx_bytes"] == pytest.approx(22_000 + 3_016_000 + 236_000, abs=1e-3)
    # r3 decode [55.5, 90]: half of ms 55 (112,000) + 4000 x sum_{57}^{90} (9,996,000) + B 276,000
    assert r.loc["r3", "decode_tx_bytes"] == pytest.approx(112_000 + 9_996_000 + 276_000, abs=1e-3)
    # rx: (400 + 800) per ms
    assert r.loc["r0", "prefill_rx_bytes"] == pytest.approx(20 * 1200, abs=1e-3)
    assert r.loc["r2", "decode_rx_bytes"] == pytest.approx(30 * 1200, abs=1e-3)
    # an independent per-millisecond sum for every window of every request
    for rid, (s, f, e) in zip(["r0", "r1", "r2", "r3"], FOUR, strict=True):
        for w, (x, y) in (("prefill", (s, f)), ("decode", (f, e))):
            want = sum((a_tx(k) + 8000) * max(0.0, min(k + 1, y) - max(k, x)) for k in range(100))
            assert r.loc[rid, f"{w}_tx_bytes"] == pytest.approx(want, abs=1e-3), (rid, w)
    # mean rate = bytes x 8 / window
    assert r.loc["r0", "prefill_tx_gbps"] == pytest.approx(1_800_000 * 8 / 20e6)
    # per device and per link
    bs = att.by_series.set_index(["request_id", "window", "series"])["bytes"]
    assert bs[("r0", "prefill", f"{A}/tx")] == pytest.approx(1_640_000, abs=1e-3)
    assert bs[("r0", "prefill", f"{B}/tx")] == pytest.approx(160_000, abs=1e-3)
    assert bs[("r0", "prefill", LINK_TX)] == pytest.approx(1_800_000, abs=1e-3)
    # timing metrics
    assert r.loc["r0", "ttft_s"] == pytest.approx(0.020)
    assert r.loc["r3", "ttft_s"] == pytest.approx(0.04325)
    assert r.loc["r0", "decode_speed_tps"] == pytest.approx(100 / 0.030)
    assert r.loc["r0", "tpot_s"] == pytest.approx(0.030 / 100)
    assert r.loc["r0", "e2e_s"] == pytest.approx(0.050)
    assert r.loc["r0", "prefill_per_token_bytes"] == pytest.approx(1_800_000 / 8192)
    # 1 ms peak inside r0's prefill: ms 29, A 120,000 + B 8,000 bytes = 1.024 Gb/s
    assert r.loc["r0", "prefill_peak_tx_gbps"] == pytest.approx(128_000 * 8 / 1e6)
    assert r.loc["r0", "prefill_bursts"] == 0

    # the round: prefill = [first send 10, last first token 55.5], decode = [55.5, last token 90]
    (rnd,) = att.rounds.itertuples(index=False)
    assert (rnd.test, rnd.round, rnd.n_requests) == ("P4", 1, 4)
    assert rnd.time_to_last_first_token_s == pytest.approx(0.0455)
    assert rnd.mean_ttft_s == pytest.approx((20 + 29.5 + 39 + 43.25) / 4 / 1e3)
    # A: 4000 x sum_{11}^{55} + half of ms 55 = 5,940,000 + 112,000; B: 45.5 x 8,000
    assert rnd.prefill_tx_bytes == pytest.approx(6_052_000 + 364_000, abs=1e-3)
    assert rnd.decode_tx_bytes == pytest.approx(10_108_000 + 276_000, abs=1e-3)
    assert rnd.prompt_tokens == 4 * 8192
    assert rnd.prefill_per_token_bytes == pytest.approx(6_416_000 / 32768)

    # time classes over the 100 ms capture
    tc = att.time_classes.set_index("state")
    assert tc.loc["prefill", "seconds_s"] == pytest.approx(0.0455)
    assert tc.loc["decode-only", "seconds_s"] == pytest.approx(0.0345)
    assert tc.loc["idle", "seconds_s"] == pytest.approx(0.020)
    assert tc["tx_bytes"].sum() == pytest.approx(sum(a_tx(k) + 8000 for k in range(100)),
                                                 abs=1e-2)
    assert att.summary["n_ok"] == 4 and att.summary["n_failed"] == 0


def test_unlabelled_requests_group_by_arrival(tmp_path, overlap_capture):
    log = align(write_log(tmp_path / "log.jsonl", FOUR, labels=False), overlap_capture)
    att = attribute(overlap_capture, log, arrival_window_s=0.005)
    assert list(att.rounds["test"]) == ["4x8192"]
    att = attribute(overlap_capture, log, arrival_window_s=0.0015)  # 12.25 ms is 2.25 ms late
    assert list(att.rounds["n_requests"]) == [3, 1]
    assert list(att.rounds["test"]) == ["3x8192", "1x8192"]


def test_assign_rounds_numbers_rounds_per_test():
    import pandas as pd
    df = pd.DataFrame({"t_send_ns": [0, 10, 5_000_000_000, 9_000_000_000],
                       "prompt_tokens": [8, 8, 8, 16], "test": [None] * 4,
                       "round": pd.array([None] * 4, dtype="Int64")})
    out = assign_rounds(df, 1.0)
    assert list(out["test"]) == ["2x8", "2x8", "1x8", "1x16"]
    assert list(out["round"]) == [1, 1, 1, 1]


def test_classify_time_pairs_like_p6():
    import pandas as pd
    # two pairs: the first decodes while the second is still in prefill
    req = pd.DataFrame({"t_send_ns": [0, 0, 0, 0], "t_first_ns": [22, 22, 45, 45],
                        "t_last_ns": [80, 81, 100, 101]})
    tl = classify_time(req, 0, 110)
    assert tl.values.tolist() == [[0, 45, "prefill"], [45, 101, "decode-only"],
                                  [101, 110, "idle"]]


def test_bursts_and_peak(tmp_path):
    n = 50
    tx = np.full(n, 4000)
    tx[[10, 11, 12, 20, 30, 31]] = 20_000_000  # 160 Gb/s windows: three bursts
    path = build_capture(tmp_path / "cap", T0, {f"{A}/tx": tx, f"{A}/rx": np.full(n, 4)})
    cap = load_capture(path)
    log = align(write_log(tmp_path / "l.jsonl", [(5, 35, 45)]), cap)
    r = attribute(cap, log).requests.iloc[0]
    assert r.prefill_bursts == 3
    assert r.prefill_peak_tx_gbps == pytest.approx(160.0)
    assert r.decode_bursts == 0
    assert r.prefill_tx_bytes == pytest.approx(6 * 20_000_000 + 24 * 4000)


def test_failed_requests_kept_out(tmp_path, overlap_capture):
    p = tmp_path / "log.jsonl"
    write_log(p, FOUR)
    with open(p, "a") as f:
        f.write(json.dumps({"request_id": "bad", "t_send": (T0 + 20 * MS) / 1e9,
                            "t_first_token": None, "t_last_token": None, "prompt_tokens": 8192,
                            "output_tokens": 0, "test": "P4", "round": 1,
                            "error": "HTTP 503"}) + "\n")
    att = attribute(overlap_capture, align(read_request_log(p), overlap_capture))
    assert att.summary["n_failed"] == 1 and att.summary["n_ok"] == 4
    assert "bad" not in set(att.requests["request_id"])
    assert att.rounds.iloc[0]["n_requests"] == 4


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("name", ["sim-p2-200", "sim-p2-emulated100", "sim-p4-200",
                                  "sim-p4-emulated100"])
def test_prefill_bytes_match_emulator_truth(name):
    """Per-request prefill bytes (each device, tx and rx) within 0.5 % of the emulator's truth."""
    run = FIXTURES / name
    if not (run / "truth.json").is_file():
        pytest.fail(f"emulator fixture missing: {run}")
    cap = load_capture(run)
    att = attribute(cap, align(read_request_log(run / "requests.jsonl"), cap))
    truth = json.loads((run / "truth.json").read_text())
    rdma = [s["key"] for s in truth["series"] if s["source"] == "infiniband"]
    bs = att.by_series.set_index(["request_id", "window", "series"])["bytes"]
    r = att.requests.set_index("request_id")
    assert len(r) == len(truth["requests"])
    for q in truth["requests"]:
        rid = q["request_id"]
        want_tx = sum(q["prefill_bytes"][k] for k in rdma if k.endswith("/tx"))
        assert r.loc[rid, "prefill_tx_bytes"] == pytest.approx(want_tx, rel=0.005), rid
        assert r.loc[rid, "ttft_s"] == pytest.approx(q["ttft_s"], abs=1e-6)
        for w, key in (("prefill", "prefill_bytes"), ("decode", "decode_bytes")):
            for s in rdma:
                want = q[key][s]
                got = bs[(rid, w, s)]
                if w == "prefill" and want > 1e6:
                    assert got == pytest.approx(want, rel=0.005), (rid, w, s)
                elif want > 1e6:
                    # the decode window starts where a prefill burst ends at line rate: a reading
                    # instant known to +-0.15 ms moves up to ~0.15 ms x 200 Gb/s = 3.75 MB across
                    # the boundary, which is ~1-3 % of a short decode's ~100 MB (method.md)
                    assert got == pytest.approx(want, rel=0.005, abs=3.75e6), (rid, w, s)
                else:  # the unused twin of the emulated link: (almost) nothing
                    assert got < 1e6, (rid, w, s)


def test_cli_attribute_outputs_and_errors(tmp_path, overlap_capture):
    from click.testing import CliRunner

    from rdmascope.cli import main

    write_log(tmp_path / "log.jsonl", FOUR)
    cap = str(overlap_capture.path)
    r = CliRunner().invoke(main, ["attribute", cap, "--requests", str(tmp_path / "log.jsonl"),
                                  "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    r0 = next(x for x in d["requests"] if x["request_id"] == "r0")
    assert r0["prefill_tx_bytes"] == pytest.approx(1_800_000, abs=1e-3)
    assert "decode_speed_tps" in d["meta"]["definitions"]
    assert d["rounds"][0]["prefill_tx_bytes"] == pytest.approx(6_416_000, abs=1e-3)
    r = CliRunner().invoke(main, ["attribute", cap, "--requests", str(tmp_path / "log.jsonl"),
                                  "--csv"])
    assert r.exit_code == 0 and "# rounds\ntest,round," in r.output
    r = CliRunner().invoke(main, ["attribute", cap, "--requests", str(tmp_path / "log.jsonl")])
    assert r.exit_code == 0 and "Per round" in r.output and "decode-only" in r.output
    # a request running past the capture's end is attributed over what was captured, flagged
    write_log(tmp_path / "late.jsonl", [(10, 30, 150)])
    r = CliRunner().invoke(main, ["attribute", cap, "--requests", str(tmp_path / "late.jsonl"),
                                  "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["requests"][0]["flag"].startswith("runs past the capture end")
    late = d["requests"][0]
    assert late["decode_tx_bytes"] > 0
    # the conserving split: the decode's bytes after the capture are unknown, never 0 (its
    # part inside is its known part: the request is alone, so it takes every byte there)
    assert late["decode_tx_split_bytes"] is None
    assert late["decode_tx_split_known_bytes"] == pytest.approx(late["decode_tx_bytes"])
    assert late["prefill_tx_split_bytes"] == pytest.approx(late["prefill_tx_bytes"])
    assert any("run past the capture" in n for n in d["meta"]["notes"])
    # said once (the log's alignment and the attribution both noticed it), naming the request
    past = [n for n in d["meta"]["notes"] if "run past the capture" in n]
    assert len(past) == 1 and d["requests"][0]["request_id"] in past[0], past
    r = CliRunner().invoke(main, ["attribute", cap, "--requests", str(tmp_path / "late.jsonl")])
    assert r.exit_code == 0 and r.output.count("run past the capture") == 1, r.output
    # the human per-request table carries the flag in the request's row, and the decode's
    # known split part beside its unknown split
    table = r.output[r.output.index("Per request"):r.output.index("Per round")]
    assert "flag" in table and "runs past the capture end" in table, table
    assert "decode tx (MB, split, known part)" in table, table
    # nothing inside the capture: refused, the error names the file, row and field
    write_log(tmp_path / "later.jsonl", [(5000, 5030, 5150)])
    r = CliRunner().invoke(main, ["attribute", cap, "--requests", str(tmp_path / "later.jsonl")])
    assert r.exit_code == 4
    assert "later.jsonl: row 1: field 't_send'" in r.output
    r = CliRunner().invoke(main, ["attribute", cap])
    assert r.exit_code == 2 and "--requests" in r.output


# one warm-up round (round 0) and three measured rounds of test "P", two requests per round sent
# together: (send, first token, last token) in ms; the warm-up's TTFTs are outliers
WARM = {0: [(10, 160, 170), (10, 180, 190)],
        1: [(200, 220, 230), (200, 222, 232)],
        2: [(250, 274, 284), (250, 276, 286)],
        3: [(300, 330, 340), (300, 332, 342)]}


def _warm_capture_and_log(tmp_path):
    n = 400
    path = build_capture(tmp_path / "cap", T0, {f"{A}/tx": np.full(n, 4000),
                                                f"{B}/tx": np.full(n, 8000)})
    p = tmp_path / "warm.jsonl"
    with open(p, "w") as f:
        # written in reverse so that order in the file does not decide what is warm-up
        for rnd in sorted(WARM, reverse=True):
            for i, (s, a, b) in enumerate(WARM[rnd]):
                f.write(json.dumps({"request_id": f"w{rnd}{i}", "t_send": (T0 + s * MS) / 1e9,
                                    "t_first_token": (T0 + a * MS) / 1e9,
                                    "t_last_token": (T0 + b * MS) / 1e9, "prompt_tokens": 1000,
                                    "output_tokens": 11, "test": "P", "round": rnd}) + "\n")
    cap = load_capture(path)
    return cap, align(read_request_log(p), cap), p


def test_warmup_round_left_out_of_test_means(tmp_path):
    cap, log, _ = _warm_capture_and_log(tmp_path)
    att = attribute(cap, log, warmup_rounds=1)
    t = att.tests.set_index("test").loc["P"]
    # per-round mean TTFT of the measured rounds: 21, 25 and 31 ms -> mean 25.667 ms
    assert t["mean_ttft_s"] == pytest.approx((0.021 + 0.025 + 0.031) / 3)
    assert (t["mean_ttft_min_s"], t["mean_ttft_max_s"]) == pytest.approx((0.021, 0.031))
    # time to the last first token: 22, 26, 32 ms
    assert t["time_to_last_first_token_s"] == pytest.approx((0.022 + 0.026 + 0.032) / 3)
    assert t["time_to_last_first_token_min_s"] == pytest.approx(0.022)
    # prefill bytes of a round: 12,000 bytes per ms (A 4,000 + B 8,000) x 22 / 26 / 32 ms
    assert t["prefill_tx_bytes"] == pytest.approx(12_000 * (22 + 26 + 32) / 3, abs=1e-3)
    assert t["rounds"] == 3 and t["warmup_rounds"] == 1
    # the warm-up is still listed, marked
    rounds = att.rounds.set_index("round")
    assert sorted(rounds.index) == [0, 1, 2, 3]
    assert rounds["warmup"].to_dict() == {0: True, 1: False, 2: False, 3: False}
    assert rounds.loc[0, "mean_ttft_s"] == pytest.approx(0.160)
    req = att.requests.set_index("request_id")
    assert req["warmup"].to_dict() == {"w30": False, "w31": False, "w20": False, "w21": False,
                                       "w10": False, "w11": False, "w00": True, "w01": True}
    # the summary's TTFT covers the 6 measured requests only
    assert att.summary["mean_ttft_s"] == pytest.approx((20 + 22 + 24 + 26 + 30 + 32) / 6e3)
    assert att.summary["n_warmup_rounds"] == 1
    assert any("warm-up" in n for n in att.notes)
    # without the option every round counts: the outlier pulls the mean up
    t0 = attribute(cap, log).tests.set_index("test").loc["P"]
    assert t0["mean_ttft_s"] == pytest.approx((0.160 + 0.021 + 0.025 + 0.031) / 4)
    assert t0["rounds"] == 4 and t0["warmup_rounds"] == 0
    # all rounds warm-up: the test drops out of the per-test table, with a note
    all_warm = attribute(cap, log, warmup_rounds=4)
    assert len(all_warm.tests) == 0 and all_warm.summary["mean_ttft_s"] is None
    assert any("no round after the warm-up" in n for n in all_warm.notes)
    with pytest.raises(ValueError, match="warmup_rounds"):
        attribute(cap, log, warmup_rounds=-1)


def test_warmup_rounds_in_compare_and_cli(tmp_path):
    from click.testing import CliRunner
    from rdmascope.analysis.compare import compare

    from rdmascope.cli import main

    cap, log, p = _warm_capture_and_log(tmp_path)
    att = attribute(cap, log, warmup_rounds=1)
    # B: the same traffic recorded again (compare refuses one capture with one log twice)
    (tmp_path / "b").mkdir()
    cap2, log2, _ = _warm_capture_and_log(tmp_path / "b")
    with pytest.raises(ValueError, match="same capture"):
        compare(att, att)
    c = compare(att, attribute(cap2, log2, warmup_rounds=1))
    row = c.tests.iloc[0]
    assert row.rounds_a == 3 and row.ttft_a_s == pytest.approx((0.021 + 0.025 + 0.031) / 3)
    assert sorted(c.rounds["round"]) == [1, 2, 3]  # the warm-up is not paired
    r = CliRunner().invoke(main, ["attribute", str(cap.path), "--requests", str(p), "--json",
                                  "--warmup-rounds", "1"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["tests"][0]["mean_ttft_s"] == pytest.approx((0.021 + 0.025 + 0.031) / 3)
    assert [x["warmup"] for x in sorted(d["rounds"], key=lambda x: x["round"])] == \
        [True, False, False, False]
    r = CliRunner().invoke(main, ["attribute", str(cap.path), "--requests", str(p),
                                  "--warmup-rounds", "1"])
    assert r.exit_code == 0 and "warm-up left out" in r.output
    r = CliRunner().invoke(main, ["compare", str(cap.path), str(cap2.path), "--requests-a", str(p),
                                  "--requests-b", str(p), "--json", "--warmup-rounds", "1"])
    assert r.exit_code == 0, r.output
    # both captures have 200 Gb/s ports, so compare warns on stderr that B is not slower; the JSON
    # is stdout alone
    assert "not slower" in r.stderr
    d = json.loads(r.stdout)
    assert d["tests"][0]["ttft_a_s"] == pytest.approx((0.021 + 0.025 + 0.031) / 3)
    assert d["tests"][0]["rounds_a"] == 3 and d["meta"]["warmup_rounds"] == 1
    r = CliRunner().invoke(main, ["attribute", str(cap.path), "--requests", str(p),
                                  "--warmup-rounds", "-1"])
    assert r.exit_code == 2


def test_implausible_token_counts_and_times_are_noted(tmp_path, overlap_capture):
    """Parseable but impossible values are accepted without an error, but each is noted by
    request (0 prompt tokens with prefill traffic, 0 output tokens with a first token and a
    decode, several output tokens with no decode time); `attribute` prints the notes."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    rows = [(10, 20, 30), (40, 50, 60), (70, 80, 80), (82, 84, 90)]
    tokens = [(0, 64), (8192, 0), (8192, 64), (8192, 64)]
    log_path = tmp_path / "log.jsonl"
    with open(log_path, "w") as f:
        for i, ((s, a, b), (p, o)) in enumerate(zip(rows, tokens, strict=True)):
            f.write(json.dumps({"request_id": f"r{i}", "t_send": (T0 + s * MS) / 1e9,
                                "t_first_token": (T0 + a * MS) / 1e9,
                                "t_last_token": (T0 + b * MS) / 1e9, "prompt_tokens": p,
                                "output_tokens": o, "test": "P", "round": i + 1}) + "\n")
    att = attribute(overlap_capture, align(read_request_log(log_path), overlap_capture))
    # r0 prefill [10, 20) ms: A 4000 x (11 + ... + 20) = 620,000 + B 10 x 8,000 = 700,000 B
    # r1 decode [50, 60) ms: A 4000 x (51 + ... + 60) = 2,220,000 + B 80,000 = 2,300,000 B
    want = ["request r0: 0 prompt tokens but 0.700 MB of prefill traffic (a prompt has at "
            "least 1 token; bytes per prompt token left empty)",
            "request r1: 0 output tokens but a first token (so at least 1) and a 0.010 s decode "
            "with 2.300 MB of decode traffic (TPOT and decode speed left empty)",
            "request r2: 64 output tokens but the last token at the first token's instant (no "
            "decode time; TPOT and decode speed left empty)"]
    assert [n for n in att.notes if n.startswith("request ")] == want
    r = att.requests.set_index("request_id")
    assert np.isnan(r.loc["r0", "prefill_per_token_bytes"])
    assert np.isnan(r.loc["r2", "decode_speed_tps"]) and np.isnan(r.loc["r1", "tpot_s"])
    res = CliRunner().invoke(main, ["attribute", str(overlap_capture.path), "--requests",
                                    str(log_path)])
    assert res.exit_code == 0, res.output
    for n in want:
        assert f"note: {n}" in res.output


def test_implausible_notes_name_a_few_and_count_the_rest():
    import pandas as pd
    from rdmascope.analysis.attribute import implausible_request_notes

    n = 8
    df = pd.DataFrame({"request_id": [f"q{i}" for i in range(n)], "prompt_tokens": [0] * n,
                       "output_tokens": [5] * n, "t_first_ns": [0] * n, "t_last_ns": [10] * n,
                       "prefill_tx_bytes": [27_653e6] * n, "decode_tx_bytes": [0.0] * n})
    notes = implausible_request_notes(df, max_named=3)
    assert notes[0] == ("request q0: 0 prompt tokens but 27,653 MB of prefill traffic (a "
                        "prompt has at least 1 token; bytes per prompt token left empty)")
    assert len(notes) == 4 and notes[-1] == "... and 5 more request(s) with 0 prompt tokens"
    # plausible values: nothing to say
    df["prompt_tokens"] = 8192
    assert implausible_request_notes(df) == []


def _genai_perf_no_usage(path, rows):
    """A genai-perf profile export without usage records (no token counts): (send, first, last)
    in ms after the capture start, on CLOCK_REALTIME (build_capture's clock pairs: +1.7e18 ns)."""
    rt = 1_700_000_000_000_000_000
    reqs = []
    for s, a, b in rows:
        chunk = ('data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":'
                 '{"content":"x"}}]}\n\n')
        reqs.append({"timestamp": int(rt + T0 + s * MS),
                     "response_timestamps": [int(rt + T0 + a * MS), int(rt + T0 + b * MS)],
                     "response_outputs": [{"response": chunk}, {"response": chunk}]})
    path.write_text(json.dumps({"experiments": [{"experiment": {"mode": "concurrency",
                                                                "value": 1},
                                                 "requests": reqs}]}))
    return path


def test_unknown_prompt_tokens_never_merge_rounds_into_one_test(tmp_path, overlap_capture):
    """Without token counts the demo's P1 and P2 were one test "1 requests" with their TTFTs
    averaged (0.96 and 6.43 -> 3.69 s); each arrival group is now its own test, with a note."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    log_path = _genai_perf_no_usage(tmp_path / "profile_export.json",
                                    [(10, 20, 30), (50, 80, 90)])
    log = align(read_request_log(log_path), overlap_capture)
    assert log.format == "genai-perf" and log.ok["prompt_tokens"].isna().all()
    att = attribute(overlap_capture, log, arrival_window_s=0.01)
    assert list(att.rounds["test"]) == ["round 1", "round 2"]
    t = att.tests.set_index("test")
    # TTFT = first token - send, each test its own: 10 ms and 30 ms (not their mean, 20 ms);
    # +-1 us: epoch ns near 1.7e18 are float64-rounded (256 ns steps) by the clock conversion
    assert t.loc["round 1", "mean_ttft_s"] == pytest.approx(0.010, abs=1e-6)
    assert t.loc["round 2", "mean_ttft_s"] == pytest.approx(0.030, abs=1e-6)
    assert list(t["rounds"]) == [1, 1]
    assert any(n.startswith("prompt tokens unknown (no token counts in the log): each group of "
                            "requests sent within 0.01 s is its own test (round 1, round 2)")
               for n in att.notes), att.notes
    assert (att.summary["n_tests"], att.summary["n_rounds"]) == (2, 2)
    res = CliRunner().invoke(main, ["attribute", str(overlap_capture.path), "--requests",
                                    str(log_path), "--arrival-window", "0.01"])
    assert res.exit_code == 0, res.output
    assert "2 test(s), 2 round(s) in all (one per test and round)" in res.output
    assert "note: prompt tokens unknown" in res.output


def test_known_prompt_tokens_still_group_rounds_of_one_test():
    """With token counts, two arrival groups of the same plan stay one test of two rounds."""
    import pandas as pd

    df = pd.DataFrame({"t_send_ns": [0, 5_000_000_000], "prompt_tokens": [8, 8],
                       "test": [None] * 2, "round": pd.array([None] * 2, dtype="Int64")})
    out = assign_rounds(df, 1.0)
    assert list(out["test"]) == ["1x8", "1x8"] and list(out["round"]) == [1, 2]
    assert "notes" not in out.attrs
    df["prompt_tokens"] = pd.array([8, None], dtype="Int64")
    out = assign_rounds(df, 1.0)
    assert list(out["test"]) == ["1x8", "round 2"] and list(out["round"]) == [1, 1]
    assert len(out.attrs["notes"]) == 1


@pytest.fixture
def twin_gap_attribution(tmp_path):
    """Two twins at 4000 and 8000 B/ms tx (400, 800 rx) for 100 ms, B's tx readings 15..19
    unreadable (its intervals [14, 20) ms unknown: inside r0's prefill [10, 30)), attributed
    to r0 (10, 30, 40) and r1 (50, 70, 90) ms."""
    n = 100
    path = build_capture(tmp_path / "cap", T0, {
        f"{A}/tx": np.full(n, 4000), f"{B}/tx": np.full(n, 8000),
        f"{A}/rx": np.full(n, 400), f"{B}/rx": np.full(n, 800)},
        unreadable={f"{B}/tx": (15, 20)})
    cap = load_capture(path)
    return attribute(cap, align(write_log(tmp_path / "log.jsonl", [(10, 30, 40), (50, 70, 90)]),
                                cap))


def test_time_classes_with_an_unknown_span_are_unknown_with_the_known_part_beside(
        twin_gap_attribution):
    """Unknown is never zero: a state whose span holds unknown bytes has unknown totals (NaN),
    never the known rows' sum passed off as the total; the known part and the unknown span
    are stated beside them."""
    att = twin_gap_attribution
    tc = att.time_classes.set_index("state")
    assert np.isnan(tc.loc["prefill", "tx_bytes"]) and np.isnan(tc.loc["prefill", "mean_tx_gbps"])
    # by hand: r1's prefill [50, 70) ms is known, 20 ms x (4000 + 8000); r0's [10, 30) is not,
    # its known part is what was read: A's 20 ms x 4000 and B's 14 ms x 8000 (readings 15..19
    # unreadable make B's six intervals [14, 20) ms unknown)
    assert tc.loc["prefill", "tx_known_bytes"] == pytest.approx(20 * 12_000 + 20 * 4000
                                                                + 14 * 8000)
    assert tc.loc["prefill", "unknown_s"] == pytest.approx(0.020)
    # rx was read throughout: known, 2 x 20 ms x (400 + 800)
    assert tc.loc["prefill", "rx_bytes"] == pytest.approx(2 * 20 * 1200)
    # decode-only [30, 40) and [70, 90) ms: known, no unknown span
    assert tc.loc["decode-only", "tx_bytes"] == pytest.approx(30 * 12_000)
    assert tc.loc["decode-only", "unknown_s"] == 0.0


def test_a_twin_unreadable_inside_a_prefill_leaves_the_other_twins_bytes_known(
        twin_gap_attribution):
    """Unknown is never zero, and neither is known: a prefill over which one twin could not
    be read for 6 ms has unknown split bytes (NaN), and its known part is what the counters
    did read there (the other twin's every byte, the first twin's readable part), not 0; the
    known parts still add up to what the counters read over the span (check_conservation)."""
    from conftest import check_conservation

    att = twin_gap_attribution
    r = att.requests.set_index("request_id")
    assert np.isnan(r.loc["r0", "prefill_tx_split_bytes"])
    # by hand: [10, 30) ms holds A's 20 x 4000 and B's (20 - 6) x 8000 readable bytes; r0 is
    # alone then, so it takes them all
    assert r.loc["r0", "prefill_tx_split_known_bytes"] == pytest.approx(20 * 4000 + 14 * 8000)
    assert r.loc["r1", "prefill_tx_split_bytes"] == pytest.approx(20 * 12_000)
    assert r.loc["r0", "prefill_rx_split_bytes"] == pytest.approx(20 * 1200)  # rx: read
    # the known total: every readable byte of the span, by hand from the per-ms rates
    s = att.summary
    lo, hi = int(att.timeline["t0_ns"].min()), int(att.timeline["t1_ns"].max())
    span_ms = (hi - lo) / MS
    assert np.isnan(s["split_total_tx_bytes"])
    assert s["split_total_tx_known_bytes"] == pytest.approx(span_ms * 12_000 - 6 * 8000)
    # the window view's known sum counts r0's prefill window's readable bytes too (it counted
    # none of them): r0's windows [10, 30) and [30, 40), r1's [50, 70) and [70, 90) ms
    assert np.isnan(s["window_sum_tx_bytes"])
    assert s["window_sum_tx_known_bytes"] == pytest.approx(
        20 * 4000 + 14 * 8000 + (10 + 20 + 20) * 12_000)
    check_conservation(att)


def test_a_request_reaching_outside_the_readings_has_unknown_split_bytes(tmp_path, overlap_capture):
    """A decode running past the capture's last reading, or a prefill sent before its first,
    has unknown split bytes (NaN: the part outside was never read), its part inside kept as
    its known part; never 0, and never the inside part passed off as the whole."""
    from conftest import check_conservation

    # r0 sent 5 ms before the capture's first reading; r1's decode runs 50 ms past its end
    log = align(write_log(tmp_path / "log.jsonl", [(-5, 20, 30), (60, 70, 150)]),
                overlap_capture)
    att = attribute(overlap_capture, log)
    r = att.requests.set_index("request_id")
    assert np.isnan(r.loc["r0", "prefill_tx_split_bytes"])
    assert np.isnan(r.loc["r1", "decode_tx_split_bytes"])
    assert np.isnan(r.loc["r0", "prefill_per_token_split_bytes"])
    # the parts inside, by hand: alone in them, each request takes every byte
    lo, hi = int(att.timeline["t0_ns"].min()), int(att.timeline["t1_ns"].max())
    k0 = (lo - T0) // MS
    inside = sum(a_tx(k) + 8000 for k in range(k0, 20))
    assert r.loc["r0", "prefill_tx_split_known_bytes"] == pytest.approx(inside)
    k1 = (hi - T0) // MS
    assert r.loc["r1", "decode_tx_split_known_bytes"] == pytest.approx(
        sum(a_tx(k) + 8000 for k in range(70, k1)))
    assert r.loc["r1", "prefill_tx_split_bytes"] == pytest.approx(
        sum(a_tx(k) + 8000 for k in range(60, 70)))
    check_conservation(att)
