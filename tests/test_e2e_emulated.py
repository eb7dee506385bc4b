"""End to end: live emulated tree -> the real `rdmascope record` (a subprocess) -> capture.

The capture's bytes per twin must match the model's within 0.1 %, and every reading must lie
between the model's values at the edges of the window the player and the recorder guarantee (the
recorder's read bracket, widened by twice the player's own longest tick gap): a band this run derives
from what it achieved, so a busy machine widens it instead of failing it. Everything is computed
here from the raw readings with numpy, independently of the analysis package. The live runs
(two ~4 s scenarios) are the session's ``live_single4k`` (tests/conftest.py), shared with
tests/test_demo.py.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from rdmascope.capture import read_capture
from rdmascope.emulator.demo import _check_outdir
from rdmascope.emulator.model import TWINS, TrafficConfig, link_config, make_scenario, simulate
from rdmascope.emulator.simcapture import simulate_capture


def _cumulative(raw, device):
    """(reading instants in ns, cumulative bytes) of a device's port_xmit_data."""
    tb, du, v = _readings(raw, device)
    return tb + du // 2, v * 4


PLAYER_PERIOD_NS = 250_000  # the player's tick (emulator.tree.play, tick_hz=4000)


def _readings(raw, device):
    """(t_before ns, read duration ns, raw value) of a device's valid port_xmit_data readings."""
    t = raw.table
    (cid,) = [i for i, c in enumerate(raw.counters)
              if c["device"] == device and c["name"] == "port_xmit_data"]
    m = t["counter_id"].to_numpy() == cid
    ok = t["status"].to_numpy()[m] == 0
    return (t["t_before_ns"].to_numpy()[m][ok],
            t["read_duration_ns"].to_numpy()[m][ok].astype(np.int64),
            t["value"].to_numpy(zero_copy_only=False)[m][ok].astype(np.int64))


def _player_gap_ns(player_line: str) -> int:
    """The player's longest gap between ticks, from its 'player: ... longest gap X ms' line
    (printed to 2 decimals: rounded up by 0.01 ms)."""
    m = re.search(r"longest gap ([0-9.]+) ms", player_line)
    assert m, player_line
    return int((float(m.group(1)) + 0.01) * 1e6)


@pytest.mark.slow
def test_real_recorder_on_the_live_tree(tmp_path, live_single4k):
    runs = live_single4k  # the session's live recording (conftest), read only
    for link, run in runs.items():
        raw = read_capture(run.capture)
        assert raw.manifest["writer"] == "sampler" and raw.clean_end
        truth = json.loads(run.truth.read_text())
        traffic = simulate(make_scenario("single4k"), TrafficConfig(link=link_config(link)))
        for d in TWINS:
            t, v = _cumulative(raw, d)
            assert (np.diff(v) >= 0).all()
            want = truth["totals_bytes"][f"{d}/tx"]
            assert want == traffic.cumulative_bytes([traffic.duration_ns], [f"{d}/tx"])[0, 0]
            got = v[-1] - v[0]
            if want == 0:
                assert got == 0, f"{link}: {d} carried bytes on the emulated link"
            else:
                assert got == pytest.approx(want, rel=1e-3), (link, d)
        # Every reading lies where the recorder and the player guarantee it: the player wrote
        # base + floor(C(now - t0 + period/2) / 4) at each tick (C: the model's cumulative bytes),
        # at most G apart (its own longest tick gap), and the recorder read the file somewhere
        # inside its stamped bracket [t_before, t_before + read_duration]. So each value is
        # between the writes due at t_before - 2 G and at t_before + read_duration. The band is
        # derived from what this run achieved, however loaded the machine was: no rate band.
        gap_ns = _player_gap_ns(run.player)
        t0 = truth["t0_monotonic_ns"]
        for d in TWINS:
            tb, du, v = _readings(raw, d)
            key = f"{d}/tx"
            assert tb[0] + du[0] - t0 + PLAYER_PERIOD_NS // 2 <= 0  # recorded before play
            base = v[0]

            def due(t_ns, key=key, t0=t0, traffic=traffic):
                tm = np.clip(t_ns - t0 + PLAYER_PERIOD_NS // 2, 0, traffic.duration_ns)
                return np.floor(traffic.cumulative_bytes(tm, [key])[0] / 4).astype(np.int64)

            # the file may still hold the tick before the last one: a tick writes its files one
            # after another, and a player descheduled between two writes starts its next tick
            # only after the last write, so that delay is itself under G: at most 2 G stale.
            # +-1 counter unit: the player adds its collective and idle shares before flooring
            lo = base + due(tb - 2 * gap_ns) - 1
            top = base + due(tb + du)
            hi = top + 1
            low, high = int((v < lo).sum()), int((v > hi).sum())
            assert low == high == 0, (link, d, low, high, gap_ns)
            # and the band is not empty of content: the bursts moved the counters inside it
            assert (top[-1] - base) * 4 == pytest.approx(truth["totals_bytes"][key], rel=1e-3)
    # the emulated link's bursts are capped at its 109 Gb/s; the real one's are not
    burst = {link: simulate(make_scenario("single4k"), TrafficConfig(link=link_config(link))
                            ).max_rate_gbps() for link in runs}
    assert burst["emulated100"] <= 109.0 < burst["200"]

    # the simulator describes the same tree exactly as the real daemon did
    real = read_capture(runs["200"].capture).manifest
    sim = read_capture(simulate_capture(tmp_path / "sim", simulate(
        make_scenario("single4k"), TrafficConfig(link=link_config("200"))))).manifest
    assert set(real) == set(sim)
    root_real, root_sim = real["sysfs_root"], sim["sysfs_root"]
    for a, b in zip(real["counters"], sim["counters"], strict=True):
        assert a == {**b, "path": b["path"].replace(root_sim, root_real)}
    assert json.dumps(real["devices"]).replace(root_real, "ROOT") == \
        json.dumps(sim["devices"]).replace(root_sim, "ROOT")

    # `rdmascope demo --force` recognises what the real recorder and the emulator wrote as the
    # demo's own run directories (and nothing else: tests/test_demo.py); on copies, as it
    # removes them and the session's recording is shared
    for link, run in runs.items():
        shutil.copytree(run.capture, tmp_path / link, symlinks=True)
    _check_outdir(tmp_path, force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["sim"]  # not a demo output name: left alone
