"""The emulator plays expert-parallel runs over InfiniBand rails, closed-loop cells and resizes.

Bytes are checked against the estimate's formulas (computed here by hand and by
``rdmascope estimate``), readings against the simulated sampler's timing uncertainty.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from rdmascope.capture import read_capture
from rdmascope.cli import main
from rdmascope.emulator.model import (
    EngineConfig,
    LinkConfig,
    ModelArch,
    Resize,
    TrafficConfig,
    make_scenario,
    simulate,
)
from rdmascope.emulator.simcapture import READ_OFFSET_CLIP_NS
from rdmascope.models import PRESETS

V2L = PRESETS["deepseek-v2-lite"]
H2 = 2048 * 2  # one DeepSeek-V2-Lite hidden state in bf16


def _series(raw):
    """Per counter key: (reading instants ns, bytes), as tests/test_simulate.py reads them."""
    t = raw.table
    cid = t["counter_id"].to_numpy()
    tb = t["t_before_ns"].to_numpy()
    du = t["read_duration_ns"].to_numpy().astype(np.int64)
    val = t["value"].to_numpy().astype(np.int64)
    out = {}
    for i, c in enumerate(raw.counters):
        m = cid == i
        out[f"{c['device']}/{c['direction']}"] = (tb[m] + du[m] // 2,
                                                  val[m] * c["bytes_per_unit"])
    return out


def test_arch_bytes_follow_the_estimate_for_every_backend():
    # DP4 x TP2, sequence-parallel MoE over the EP group of 8: (4 x 2 - 1)/2 = 3.5 slices per
    # token; allgather_reducescatter moves hidden + top-k weights/ids (6 x 8 B) then hidden,
    # naive hidden + router logits (64 x 2 B) then an all-reduce (2 x hidden)
    for backend, want in (("allgather_reducescatter", 26 * 3.5 * (2 * H2 + 48)),
                          ("naive", 26 * 3.5 * (3 * H2 + 128)),
                          ("deepep_low_latency", 26 * 2 * H2 * 6 * 3 / 4)):
        arch = ModelArch.from_model(V2L, tp=2, dp=4, layout="ep", all2all_backend=backend)
        assert arch.nodes == 4 and arch.collective_steps == 3
        assert arch.bytes_per_token == want, backend
        assert arch.collectives_per_pass == 52


def test_ep_run_over_8_rails_matches_the_estimate_per_rail(tmp_path):
    """DP4 x TP8 (EP32) of DeepSeek-V2-Lite on 8-GPU nodes with 8 NDR rails each."""
    est = CliRunner().invoke(main, ["estimate", "--preset", "deepseek-v2-lite", "--layout", "ep",
                                    "--tp", "8", "--dp", "4", "--rails", "8", "--link-a", "400",
                                    "--link-b", "200", "--b-real", "--json"])
    assert est.exit_code == 0, est.output
    per_rail = json.loads(est.stdout)["meta"]["layouts"]["ep"]["bytes_per_token_per_rail"]
    # by hand: sequence-parallel MoE over the EP group of 32 ranks on 4 nodes, (4 x 8 - 1)/8 =
    # 3.875 slices per token per node; all-gather of hidden + top-k (6 x 8 B) and reduce-scatter
    # of hidden: 26 x 3.875 x 8,240 = 830,180 B per node, over 8 rails: 103,772.5 B
    assert per_rail == 26 * 31 / 8 * (2 * H2 + 48) / 8 == 103_772.5
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, [
        "simulate", "capture", "-o", str(out), "--preset", "deepseek-v2-lite", "--layout", "ep",
        "--tp", "8", "--dp", "4", "--rails", "8",
        "--scenario", "prompt=4096,output=8,rounds=1,warmup=0"])
    assert r.exit_code == 0, r.output
    assert "8 InfiniBand rails at 400 Gb/s each" in r.output
    raw = read_capture(out)
    devs = raw.manifest["devices"]
    assert [d["name"] for d in devs] == [f"mlx5_{i}" for i in range(8)]
    for d in devs:
        (port,) = d["ports"]
        assert port["link_layer"] == "InfiniBand" and port["rate_gbps"] == 400
    assert len({d["pci"].split(":", 1)[1] for d in devs}) == 8  # no two devices are twins
    (req,) = json.loads((out / "truth.json").read_text())["requests"]
    # the same run through the model: every pass moves its tokens x the per-node formula
    tr = simulate(make_scenario("prompt=4096,output=8,rounds=1,warmup=0"), TrafficConfig(
        arch=ModelArch.from_model(V2L, tp=8, dp=4, layout="ep"), link=LinkConfig(rails=8)))
    tokens = sum(p.prefill_tokens + p.decode_tokens for p in tr.passes)
    assert tr.total_bytes == pytest.approx(tokens * 8 * per_rail, rel=1e-12)
    s = _series(raw)
    # a reading's instant is known to +-READ_OFFSET_CLIP_NS and readings are 1 ms apart, so a
    # window edge inside a burst is uncertain by up to (1 ms + 2 x 0.1 ms) at the rail's 400 Gb/s
    tol = 400e9 / 8 * (raw.manifest["interval_ns"] + 2 * READ_OFFSET_CLIP_NS) * 1e-9
    for i in range(8):
        for d in ("tx", "rx"):
            t, b = s[f"mlx5_{i}/{d}"]
            got = np.diff(np.interp([req["t_send_ns"], req["t_first_ns"]], t, b))[0]
            assert got == pytest.approx(4096 * per_rail, abs=tol), (i, d)
            assert req["prefill_bytes"][f"mlx5_{i}/{d}"] == 4096 * per_rail  # the model: exact
            # the whole run (idle at both ends): exact to the counter's 4-byte unit
            assert b[-1] - b[0] == pytest.approx(tokens * per_rail, abs=4), (i, d)


def test_closed_loop_cells_never_exceed_their_concurrency():
    sc = make_scenario("prompt=512,concurrency=1+64,requests=256,warmup=4,output=4,gap=1")
    assert [(g.test, g.concurrency, len(g.prompt_tokens)) for g in sc.groups] == [
        ("512xc1", 1, 256), ("512xc64", 64, 256)]
    eng = EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192)
    tr = simulate(sc, TrafficConfig(engine=eng))
    for test, conc in (("512xc1", 1), ("512xc64", 64)):
        rs = [r for r in tr.requests if r.test == test]
        assert len(rs) == 256
        assert sum(r.round == 0 for r in rs) == 4 and all(r.round == 1 for r in rs[4:])
        # in flight = sent and not finished: [t_send, t_last); a slot frees at the last token
        events = sorted([(r.t_send_ns, 1) for r in rs] + [(r.t_last_ns, -1) for r in rs],
                        key=lambda e: (e[0], e[1]))
        level = np.cumsum([e[1] for e in events])
        assert level.max() == conc and level.min() >= 0
        # a closed loop: after the first `conc`, every request is sent the moment one finishes
        lasts = {r.t_last_ns for r in rs}
        assert all(r.t_send_ns in lasts for r in rs[conc:])
        assert len({r.t_send_ns for r in rs[:conc]}) == 1
    with pytest.raises(ValueError, match="rounds does not apply"):
        make_scenario("prompt=512,concurrency=64,requests=256,rounds=3")
    with pytest.raises(ValueError, match="fewer than requests"):
        make_scenario("prompt=512,concurrency=4,requests=4,warmup=4")


def test_a_dp_resize_changes_the_bytes_per_token_at_its_time():
    """EP world 4 -> 8 under load: passes after the resize run the collective over DP8."""
    arch = ModelArch.from_model(V2L, tp=1, dp=8, layout="ep")
    sc = make_scenario("prompt=2048,concurrency=2,requests=12,output=4,gap=0")
    tr = simulate(sc, TrafficConfig(arch=arch, resize=Resize(3.0, dp_before=4)))
    before = 26 * 3 * (2 * H2 + 48)   # DP4: D - 1 = 3 slices, hidden x 2 + top-k 6 x 8 B
    after = 26 * 7 * (2 * H2 + 48)    # DP8: D - 1 = 7
    assert {r.prompt_bytes for r in tr.requests} <= {2048 * before, 2048 * after,
                                                     1024 * (before + after)}
    assert any(r.prompt_bytes == 2048 * before for r in tr.requests)
    assert any(r.prompt_bytes == 2048 * after for r in tr.requests)
    # every pass's bytes follow the layout in force when it started
    for p in tr.passes:
        per_token = before if p.t_start_ns < 3_000_000_000 else after
        assert p.bytes == pytest.approx((p.prefill_tokens + p.decode_tokens) * per_token)


def test_a_resize_capture_records_new_rails_from_the_moment_they_appear(tmp_path):
    """8 NDR rails of which 4 come up at 3 s under load: the new rails' counters start then,
    the manifest says so per counter, and the rails together carry every byte of the node."""
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, [
        "simulate", "capture", "-o", str(out), "--preset", "deepseek-v2-lite", "--layout", "ep",
        "--tp", "8", "--dp", "4", "--rails", "8", "--rails-before", "4", "--resize-at", "3",
        "--scenario", "prompt=2048,concurrency=2,requests=12,output=8,gap=0"])
    assert r.exit_code == 0, r.output
    raw = read_capture(out)
    S = raw.manifest["start"]["monotonic_ns"]
    at = S + 3_000_000_000
    # said as the recorder says a device that appears: one event and one device_changes entry
    # per device, at the moment it appeared
    new = [f"mlx5_{k}" for k in range(4, 8)]
    events = [e for e in raw.manifest["events"] if e["kind"] == "device_appeared"]
    assert len(events) == 4 and all(e["t_ns"] == at and e["counter_id"] is None for e in events)
    assert all(any(n in e["message"] for e in events) for n in new)
    changes = raw.manifest["device_changes"]
    assert [(c["name"], c["kind"], c["t_ns"]) for c in changes] == [(n, "appeared", at)
                                                                    for n in new]
    pci = {d["name"]: d["pci"] for d in raw.manifest["devices"]}
    assert all(c["pci"] == pci[c["name"]] for c in changes)
    s = _series(raw)
    interval = raw.manifest["interval_ns"]
    for k in range(8):
        t, b = s[f"mlx5_{k}/tx"]
        if k < 4:
            assert t[0] < S + interval
        else:  # no reading before the rail exists; the first within one sweep of it
            assert at <= t[0] < at + interval + 500_000
    # the 4 old rails carried the node's bytes alone before the resize, all 8 after: the sum
    # over the rails is the node's total either way (the model's exact figure)
    tr = simulate(make_scenario("prompt=2048,concurrency=2,requests=12,output=8,gap=0"),
                  TrafficConfig(arch=ModelArch.from_model(V2L, tp=8, dp=4, layout="ep"),
                                link=LinkConfig(rails=8), resize=Resize(3.0, rails_before=4)))
    for k in range(8):
        t, b = s[f"mlx5_{k}/tx"]
        want = tr.cumulative_bytes([t[-1] - S], [f"mlx5_{k}/tx"])[0][0] - \
            tr.cumulative_bytes([t[0] - S], [f"mlx5_{k}/tx"])[0][0]
        assert b[-1] - b[0] == pytest.approx(want, abs=4 + 400e9 / 8 * 2e-4)
    c_at = tr.collective_bytes([3_000_000_000])[0]
    per_rail_before = tr.cumulative_bytes([3_000_000_000], ["mlx5_0/tx"])[0][0]
    assert per_rail_before == pytest.approx(c_at / 4)
    assert tr.cumulative_bytes([3_000_000_000], ["mlx5_5/tx"])[0][0] == 0.0
    total = sum(tr.cumulative_bytes([tr.duration_ns], [f"mlx5_{k}/tx"])[0][0] for k in range(8))
    assert total == pytest.approx(tr.total_bytes, rel=1e-12)


def test_compare_of_two_ep_rail_runs_reads_the_layout_from_the_manifests(tmp_path):
    """DP4 x TP2 over 2 rails per node, 400 against 200 Gb/s rails: compare --layout ep takes
    DP, TP and the backend from the captures and bounds the TTFT increase by their formula."""
    caps = []
    for name, gbps in (("a", "400"), ("b", "200")):
        out = tmp_path / name
        r = CliRunner().invoke(main, [
            "simulate", "capture", "-o", str(out), "--preset", "deepseek-v2-lite", "--layout",
            "ep", "--tp", "2", "--dp", "4", "--rails", "2", "--rail-gbps", gbps,
            "--scenario", "prompt=8192,output=8,rounds=1,warmup=0"])
        assert r.exit_code == 0, r.output
        caps.append(str(out))
    r = CliRunner().invoke(main, ["compare", *caps, "--layout", "ep", "--json"])
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    setup = j["meta"]["setup"]
    assert (setup["dp"], setup["tp"], setup["all2all_backend"]) == (4, 2,
                                                                   "allgather_reducescatter")
    assert (setup["link_a_gbps"], setup["link_b_gbps"]) == (800, 400)   # 2 rails per node
    (row,) = j["tests"]
    per_token = 26 * 3.5 * (2 * H2 + 48)  # 749,840 B per token per node, by hand
    assert row["estimate_arch_s"] == pytest.approx(8192 * per_token * 8 / 1e9 * (1 / 400 - 1 / 800))
    assert row["per_token_a_bytes"] == pytest.approx(per_token, rel=0.005)
    assert 0 < row["extra_prefill_s"] <= row["estimate_arch_s"] * 1.02


def test_the_resize_capture_is_judged_by_expect_rails(tmp_path):
    """After the 4 new rails came up, verify-emulation --expect-rails 8 passes (every rail 1/8);
    over the whole capture the new rails were absent before they appeared (no traffic possible,
    not unknown: read from the moment they appeared), so it is judged: they carried less
    (10.65 % against 14.35 %), within the default balance, outside a 0.1 one."""
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, [
        "simulate", "capture", "-o", str(out), "--preset", "deepseek-v2-lite", "--layout", "ep",
        "--tp", "8", "--dp", "4", "--rails", "8", "--rails-before", "4", "--resize-at", "3",
        "--scenario", "prompt=2048,concurrency=2,requests=12,output=8,gap=0"])
    assert r.exit_code == 0, r.output
    after = CliRunner().invoke(main, ["verify-emulation", str(out), "--expect-rails", "8",
                                      "--from", "4s"])
    assert after.exit_code == 0, after.output
    assert "PASS: traffic on all 8 rails, balanced" in after.output
    assert after.output.count("12.5 %") >= 8
    whole = CliRunner().invoke(main, ["verify-emulation", str(out), "--expect-rails", "8"])
    assert whole.exit_code == 0 and "bytes unknown" not in whole.output, whole.output
    tight = CliRunner().invoke(main, ["verify-emulation", str(out), "--expect-rails", "8",
                                      "--rail-balance", "0.1"])
    assert tight.exit_code == 1 and "rails NOT balanced" in tight.output, tight.output
    for k in range(4, 8):
        assert f"mlx5_{k} 10.65 %" in tight.output
    four = CliRunner().invoke(main, ["verify-emulation", str(out), "--expect-rails", "4",
                                     "--from", "4s"])
    assert four.exit_code != 0 and "NOT 4 rails: the capture has 8" in four.output
