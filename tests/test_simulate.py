"""Simulated captures (`rdmascope simulate capture`): format, ground truth, jitter, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rdmascope.capture import CaptureExistsError, read_capture
from rdmascope.cli import main
from rdmascope.emulator.fixtures import FIXTURES, generate
from rdmascope.emulator.model import TWINS, TrafficConfig, link_config, plan_scenario, simulate
from rdmascope.emulator.simcapture import sampler_view, simulate_capture
from rdmascope.emulator.tree import DEFAULT_ROOT, build_tree

BYTES_PER_TOKEN = 157 * 6144 * 2 * 7 // 4  # method.md: 3,376,128 bytes per prompt token


def _traffic(test="P2", link="200", out=16, seed=0, **kw):
    sc = plan_scenario(test, rounds=1, warmup=False, output_tokens=out, lead_in_s=0.5,
                       tail_s=0.5)
    return simulate(sc, TrafficConfig(link=link_config(link, **kw)), seed=seed)


def _series(raw):
    """Per counter: (key, times of the readings (bracket midpoints, ns), bytes)."""
    t = raw.table
    cid = t["counter_id"].to_numpy()
    tb = t["t_before_ns"].to_numpy()
    du = t["read_duration_ns"].to_numpy().astype(np.int64)
    val = t["value"].to_numpy().astype(np.int64)
    out = {}
    for i, c in enumerate(raw.counters):
        m = cid == i
        key = f"{c.get('netdev') or c['device']}/{c['direction']}"
        out[key] = (tb[m] + du[m] // 2, val[m] * c["bytes_per_unit"])
    return out


def test_capture_has_the_samplers_manifest_and_exact_bytes(tmp_path):
    tr = _traffic("P2", "200")
    cap = simulate_capture(tmp_path / "cap", tr)
    raw = read_capture(cap)
    m = raw.manifest
    assert m["writer"] == "simulate" and raw.clean_end
    assert m["interval_ns"] == 1_000_000 and m["clock"] == "CLOCK_MONOTONIC"
    # devices and counters: the sampler's own discovery of an emulated tree, at the default root
    tree = build_tree(tmp_path / "sys", seed=tr.seed)
    from rdmascope.sampler.discovery import counter_descriptors, discover

    devs = discover(tree.root)
    expected = counter_descriptors(devs, netdev_stats=True, sysfs_root=tree.root)
    for c in expected:
        c["path"] = c["path"].replace(str(tree.root), DEFAULT_ROOT)
    assert m["counters"] == expected
    assert [d["name"] for d in m["devices"]] == [d.name for d in devs]
    assert m["extra"]["simulated"]["request_log"] == "requests.jsonl"
    # byte totals equal the model's (the values are floor(bytes / 4): within 4 bytes)
    truth = json.loads((cap / "truth.json").read_text())
    s = _series(raw)
    idle = {x["key"]: x["idle_bytes_per_s"] for x in truth["series"]}
    for key, total in truth["totals_bytes"].items():
        t, b = s[key]
        # + the netdevs' idle background before the first / after the last reading (<= 2 ms)
        assert abs((b[-1] - b[0]) - total) <= 4 + idle[key] * 2e-3, key
        assert (np.diff(b) >= 0).all() and (np.diff(t) > 0).all()
    # sweeps: 1 ms deadlines, a few missed at most, brackets of a few us
    audit = m["audit"]
    assert audit["sweeps_taken_pct"] > 99.5
    assert all(1_000 < r["p50"] < 10_000 for r in audit["read_duration_ns"])


def test_truth_and_request_log(tmp_path):
    tr = _traffic("P2", "emulated100")
    cap = simulate_capture(tmp_path / "cap", tr, start_monotonic_ns=5_000_000_000_000)
    truth = json.loads((cap / "truth.json").read_text())
    (rec,) = [json.loads(ln) for ln in (cap / "requests.jsonl").read_text().splitlines()]
    assert set(rec) == {"request_id", "t_send", "t_first_token", "t_last_token", "prompt_tokens",
                        "output_tokens", "test", "round", "clock"}
    assert rec["clock"] == "CLOCK_MONOTONIC" and rec["prompt_tokens"] == 8192
    assert rec["t_send"] == pytest.approx(5000.5, abs=1e-9)  # lead-in 0.5 s after the start
    (r,) = truth["requests"]
    assert r["t_first_ns"] == pytest.approx(rec["t_first_token"] * 1e9, abs=1e3)
    # emulated link: the whole prompt on the first twin, nothing on the second, tx == rx
    assert r["prefill_bytes"][f"{TWINS[0]}/tx"] == 8192 * BYTES_PER_TOKEN
    assert r["prefill_bytes"][f"{TWINS[0]}/rx"] == 8192 * BYTES_PER_TOKEN
    assert r["prefill_bytes"][f"{TWINS[1]}/tx"] == 0.0
    assert r["prompt_bytes"] == 8192 * BYTES_PER_TOKEN
    assert r["decode_bytes"][f"{TWINS[0]}/tx"] > 0


@pytest.mark.parametrize("link", ["200", "emulated100"])
def test_capture_windows_agree_with_truth(tmp_path, link):
    """Interpolating the jittered readings at a request's window edges recovers the truth."""
    tr = _traffic("P4", link, out=16, seed=2)
    cap = simulate_capture(tmp_path / link, tr)
    truth = json.loads((cap / "truth.json").read_text())
    s = _series(read_capture(cap))
    for r in truth["requests"]:
        for key in (f"{TWINS[0]}/tx", f"{TWINS[1]}/rx"):
            t, b = s[key]
            got = np.diff(np.interp([r["t_send_ns"], r["t_first_ns"]], t, b))[0]
            want = r["prefill_bytes"][key]
            assert got == pytest.approx(want, rel=0.005, abs=1e6), (r["request_id"], key)


def test_one_ms_peaks_carry_realistic_jitter(tmp_path):
    tr = _traffic("P2", "emulated100", out=4)
    s = _series(read_capture(simulate_capture(tmp_path / "c", tr)))
    t, b = s[f"{TWINS[0]}/tx"]
    rate = np.diff(b) * 8 / np.diff(t)  # Gb/s between consecutive readings
    true_peak = tr.max_rate_gbps()  # the model's burst rate on the single twin
    assert 100 < true_peak <= 109
    # readings' instants are uncertain by ~0.1 ms: single 1 ms values scatter around the burst
    # rate, a few above the line rate (method.md), but averages stay exact
    assert true_peak * 1.03 < rate.max() < true_peak * 1.3
    assert np.percentile(rate[rate > 50], 50) == pytest.approx(true_peak, rel=0.05)


def test_tcp_fallback_capture_moves_netdev_counters(tmp_path):
    tr = _traffic("P1", "200", out=4, tcp_fallback=True)
    s = _series(read_capture(simulate_capture(tmp_path / "c", tr)))
    for twin in TWINS:
        _, b = s[f"{twin}/tx"]
        assert b[-1] == b[0]
    _, nb = s["enp1s0f1np1/tx"]
    assert nb[-1] - nb[0] > 1024 * BYTES_PER_TOKEN


def test_deterministic_for_a_seed(tmp_path):
    tr = _traffic("P1", "200", out=8, seed=4)
    a = read_capture(simulate_capture(tmp_path / "a", tr))
    b = read_capture(simulate_capture(tmp_path / "b", tr))
    c = read_capture(simulate_capture(tmp_path / "c", tr, seed=5))
    assert a.table.equals(b.table) and a.manifest == b.manifest
    assert not a.table.equals(c.table)


def test_cli_capture_refuses_overwrite_and_bad_names(tmp_path):
    runner = CliRunner()
    out = tmp_path / "cap"
    res = runner.invoke(main, ["simulate", "capture", "-o", str(out), "--scenario", "P1",
                               "--rounds", "1", "--output-tokens", "4", "--link", "emulated100"])
    assert res.exit_code == 0, res.output
    assert "capture:" in res.output and (out / "truth.json").is_file()
    res = runner.invoke(main, ["simulate", "capture", "-o", str(out), "--scenario", "P1"])
    assert res.exit_code == 4 and "use --force" in res.output
    res = runner.invoke(main, ["simulate", "capture", "-o", str(tmp_path / "x"), "--scenario",
                               "P7"])
    assert res.exit_code == 2 and "unknown scenario 'P7'" in res.output


def test_sampler_view_is_deterministic():
    assert sampler_view(seed=1) == sampler_view(seed=1)


def _files(d: Path) -> list[str]:
    return sorted(str(f.relative_to(d)) for f in d.rglob("*") if f.is_file())


_LAYOUT_KEYS = ("path_in_schema", "physical_type", "compression", "encodings",
                "has_dictionary_page", "num_values", "statistics")


def _parquet_layout(path: Path) -> list:
    """A segment's row groups and, per column, its type, codec, encodings and statistics.

    Leaves out what another library version may change without changing the readings: its
    version string (``created_by``) and the compressed sizes and offsets.
    """
    md = pq.ParquetFile(path).metadata.to_dict()
    return [(rg["num_rows"], [{k: c[k] for k in _LAYOUT_KEYS} for c in rg["columns"]])
            for rg in md["row_groups"]]


def test_committed_fixtures_equal_a_fresh_regeneration(tmp_path, fixtures_dir):
    """fixtures/README.md: a regeneration is byte-for-byte the same (with the same pyarrow).

    Every file is compared byte for byte. A Parquet segment embeds the writing library's version
    (``created_by``, e.g. "parquet-cpp-arrow version 26.0.1") and its compressor's output, so a
    different installed pyarrow may legitimately write other bytes: only then are the segments
    compared by decoded readings and footer layout instead (and the test says so in its output).
    """
    fresh = generate(tmp_path)
    assert [p.name for p in fresh] == [f.name for f in FIXTURES]
    for p in fresh:
        committed = Path(fixtures_dir) / p.name
        assert committed.is_dir(), f"{committed} missing: python -m rdmascope.emulator.fixtures " \
                                   "fixtures/"
        assert _files(committed) == _files(p), p.name
        for rel in _files(p):
            a, b = committed / rel, p / rel
            if rel.endswith(".parquet"):
                wa = pq.ParquetFile(a).metadata.created_by
                wb = pq.ParquetFile(b).metadata.created_by
                if wa != wb:
                    print(f"{a}: written by {wa!r}, this pyarrow writes {wb!r}: comparing "
                          "decoded readings and layout instead of bytes")
                    assert _parquet_layout(a) == _parquet_layout(b), rel
                    assert pq.read_table(a).equals(pq.read_table(b), check_metadata=True), rel
                    continue
            assert a.read_bytes() == b.read_bytes(), (
                f"{a} differs from a fresh regeneration: python -m rdmascope.emulator.fixtures "
                "fixtures/")
        ra, rb = read_capture(committed), read_capture(p)
        assert ra.manifest == rb.manifest and ra.table.equals(rb.table), p.name


def test_committed_fixture_segments_carry_page_checksums(tmp_path, fixtures_dir):
    """A flipped bit in a committed segment's data pages is an error, never different readings.

    Flips one bit at twelve evenly spaced places inside every column chunk of every simulated fixture's segment;
    each flipped copy must fail to load or load the same readings, and in every column at least
    one flip must be caught by the CRC page checksum itself (not merely by the decompressor).
    """
    segs = sorted(Path(fixtures_dir).glob("sim-*/segments/*.parquet"))
    assert len(segs) >= len(FIXTURES)
    for seg in segs:
        original = pq.read_table(seg)
        data = seg.read_bytes()
        rg = pq.ParquetFile(seg).metadata.row_group(0)
        for i in range(rg.num_columns):
            col = rg.column(i)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            crc_caught = 0
            for k in range(1, 13):
                off = start + col.total_compressed_size * k // 13
                flipped = bytearray(data)
                flipped[off] ^= 0x10
                bad = tmp_path / "flipped.parquet"
                bad.write_bytes(bytes(flipped))
                try:
                    got = pq.ParquetFile(bad, page_checksum_verification=True).read()
                except (OSError, pa.ArrowException) as exc:  # a page header's flip: other errors
                    crc_caught += "CRC checksum verification failed" in str(exc)
                    continue
                assert got.equals(original), f"{seg}: bit flip at byte {off} ({col.path_in_schema})" \
                                             " loaded as different readings"
            assert crc_caught >= 1, f"{seg}: column {col.path_in_schema} has no page checksums"


def test_fixtures_regenerate_in_place_and_never_remove_foreign_files(tmp_path):
    """fixtures/README.md's command run on fixtures/ itself: each fixture directory holds the
    generator's own requests.jsonl and truth.json beside the capture, so a regeneration replaces
    them (same bytes); any other file makes it refuse, touching nothing."""
    name = "sim-p1-tcp-fallback"
    (first,) = generate(tmp_path, [name])
    before = {rel: (first / rel).read_bytes() for rel in _files(first)}
    assert {"requests.jsonl", "truth.json", "manifest.json"} <= set(before)
    (again,) = generate(tmp_path, [name])  # in place: was refused ("not the capture's own")
    assert again == first
    assert {rel: (again / rel).read_bytes() for rel in _files(again)} == before
    # a file the generator did not write: refused, naming it; nothing is removed
    (first / "notes.txt").write_text("mine")
    with pytest.raises(CaptureExistsError, match="notes.txt"):
        generate(tmp_path, [name])
    assert {rel: (first / rel).read_bytes() for rel in _files(first) if rel != "notes.txt"} \
        == before
    # another writer's capture with files of the same names: not the simulator's to remove
    (first / "notes.txt").unlink()
    m = json.loads((first / "manifest.json").read_text())
    (first / "manifest.json").write_text(json.dumps({**m, "writer": "sampler"}))
    with pytest.raises(CaptureExistsError, match="not the capture's own"):
        generate(tmp_path, [name])
    assert (first / "requests.jsonl").read_bytes() == before["requests.jsonl"]
    assert (first / "truth.json").read_bytes() == before["truth.json"]


def test_regeneration_command_on_the_fixtures_directory(tmp_path):
    """`python -m rdmascope.emulator.fixtures DIR` twice on one directory (the README's command)."""
    import subprocess
    import sys

    for _ in range(2):
        r = subprocess.run([sys.executable, "-m", "rdmascope.emulator.fixtures", str(tmp_path)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f in FIXTURES)
