"""Shared test fixtures: paths to the real sysfs trees and the committed captures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
#: Real sysfs content from prometheus/procfs's test fixtures (Apache-2.0, see its NOTICE).
PROCFS_SYS = FIXTURES / "sysfs-procfs" / "sys"


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", default=False,
                     help="run the long soak tests (minutes; off by default)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def procfs_sys() -> Path:
    """The real sysfs tree (hfi1_0, mlx4_0, mlx5_0) from prometheus/procfs's test fixtures."""
    if not PROCFS_SYS.is_dir():
        pytest.fail(f"fixture tree missing from the repository: {PROCFS_SYS}")
    return PROCFS_SYS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def shadowing_folder(parent: Path) -> Path:
    """A folder holding a directory named ``rdmascope`` (a clone's parent, say) that breaks
    any import of ``rdmascope`` looked up from it."""
    here = parent / "here"
    (here / "rdmascope").mkdir(parents=True)
    (here / "rdmascope" / "__init__.py").write_text(
        "raise ImportError('the folder rdmascope in the working directory was imported')\n")
    return here


@pytest.fixture(scope="session")
def live_single4k(tmp_path_factory) -> dict:
    """The demo's live step, once per session: ``single4k`` served on the live emulated tree and
    recorded by the real ``rdmascope record`` (``emulator.demo.play_and_record``: server and
    recorder both children), at the 200 and emulated100 links, started from a folder holding a
    directory named ``rdmascope``. {link: DemoRun}; the tests that use it only read it
    (tests/test_e2e_emulated.py, tests/test_demo.py). ~4 s of real time per link."""
    import os

    from rdmascope.emulator.demo import play_and_record

    base = tmp_path_factory.mktemp("live-single4k")
    here = shadowing_folder(base)
    old = os.getcwd()
    os.chdir(here)
    try:
        return {link: play_and_record(base / link, link, scenario="single4k")
                for link in ("200", "emulated100")}
    finally:
        os.chdir(old)


@pytest.fixture(scope="session")
def two_node_run_set(tmp_path_factory) -> Path:
    """A run set of two emulated hosts (single4k at 200 Gb/s, 5 ms of clock error) with the
    client's requests.jsonl beside them: the directory ``cluster`` and the commands take."""
    from rdmascope.emulator.cluster import ClusterSpec, simulate_cluster
    from rdmascope.emulator.model import TrafficConfig, link_config, make_scenario, simulate

    d = tmp_path_factory.mktemp("set") / "p"
    traffic = simulate(make_scenario("single4k"), TrafficConfig(link=link_config("200")), seed=3)
    simulate_cluster(d, traffic, ClusterSpec(nodes=2, clock_error_ns=5_000_000, seed=1))
    return d


@pytest.fixture(params=["compiled", "python"])
def sweep_impl(request, monkeypatch) -> str:
    """Run a test under each sweep of ``rdmascope record`` (sampler/csweep.py): the compiled
    extension, then the pure-Python fallback (``RDMASCOPE_NO_CEXT=1``, inherited by recorder
    subprocesses). The compiled case skips, saying why, when the extension is not built here
    (``test_csweep.py::test_extension_is_built_where_a_compiler_is`` fails instead where it
    should have been)."""
    from rdmascope.sampler.csweep import ENV_DISABLE, load

    if request.param == "compiled":
        monkeypatch.delenv(ENV_DISABLE, raising=False)
        module, why = load()
        if module is None:
            pytest.skip(f"compiled sweep unavailable: {why}")
    else:
        monkeypatch.setenv(ENV_DISABLE, "1")
    return request.param


#: Relative tolerance of the conservation check (float rounding of sums over many segments).
CONSERVATION_RTOL = 1e-6


def check_conservation(at) -> None:
    """Assert the conserving split of one ``Attribution`` (analysis/conserving.py).

    Per direction: the per-request ``prefill_*_split_known_bytes`` + ``decode_*_split_known_bytes``
    + ``split_idle_*_known_bytes`` equal ``split_total_*_known_bytes`` (the known parts add up,
    whatever is unknown), and with nothing unknown the headline columns do too and that total
    equals the bytes of the attribution's ``timeline`` (the same span cut at other points and
    integrated separately, a second sum of what the counters saw). Unknown is never zero: a
    request whose inclusive window bytes are NaN has a NaN split (never 0); a NaN split, total
    or idle/other only with an unknown segment, and then never the known part passed off as it
    (the total NaN, the known total beside it)."""
    import numpy as np

    s, r = at.summary, at.requests
    if "split_total_tx_bytes" not in s:
        return
    if s.get("split_pairs_over_budget"):  # too dense to split: unknown everywhere, never 0
        for c in ("prefill_tx_split_bytes", "decode_tx_split_bytes"):
            assert r[c].isna().all(), c
        return
    unknown = s.get("split_unknown_segments", 0)
    assert (unknown > 0) == (s.get("split_unknown_s", 0.0) > 0), "unknown segments and time"
    # a prefill or decode reaching outside the readings' span (the timeline's) is unknown too,
    # its part inside being its known part
    tl = at.timeline
    lo = int(tl["t0_ns"].min()) if len(tl) else None
    hi = int(tl["t1_ns"].max()) if len(tl) else None
    out_of = {}
    for w, (a, b) in (("prefill", ("t_send_ns", "t_first_ns")),
                      ("decode", ("t_first_ns", "t_last_ns"))):
        if lo is None or not len(r) or a not in r or b not in r:
            out_of[w] = np.zeros(len(r), bool)
            continue
        ta = r[a].to_numpy(dtype=float, na_value=np.nan)
        tb = r[b].to_numpy(dtype=float, na_value=np.nan)
        out_of[w] = ((ta < lo) | (tb > hi)) & (tb > ta)
    for d in ("tx", "rx"):
        total, idle = float(s[f"split_total_{d}_bytes"]), float(s[f"split_idle_{d}_bytes"])
        ktotal = float(s[f"split_total_{d}_known_bytes"])
        kidle = float(s[f"split_idle_{d}_known_bytes"])
        tol = CONSERVATION_RTOL * max(abs(ktotal) if np.isfinite(ktotal) else 0.0, 1.0)
        cols = [f"prefill_{d}_split_bytes", f"decode_{d}_split_bytes"]
        vals = np.concatenate([r[c].to_numpy(dtype=float, na_value=np.nan) for c in cols]) \
            if len(r) else np.zeros(0)
        kvals = np.concatenate([r[c.replace("_bytes", "_known_bytes")].to_numpy(
            dtype=float, na_value=np.nan) for c in cols]) if len(r) else np.zeros(0)
        for w in ("prefill", "decode"):
            inc = r[f"{w}_{d}_bytes"].to_numpy(dtype=float, na_value=np.nan) if len(r) else []
            spl = r[f"{w}_{d}_split_bytes"].to_numpy(dtype=float, na_value=np.nan) \
                if len(r) else []
            # an empty window (last token at the first token's instant) holds 0 bytes in the
            # split; only a window with time in it can be unknown
            a, b = (("t_send_ns", "t_first_ns") if w == "prefill"
                    else ("t_first_ns", "t_last_ns"))
            span = ((r[b] - r[a]).to_numpy(dtype=float, na_value=np.nan) > 0
                    if len(r) and a in r and b in r else np.ones(len(r), bool))
            bad = np.isnan(inc) & ~np.isnan(spl) & span
            assert not bad.any(), (
                f"{w} {d}: {int(bad.sum())} request(s) with unknown window bytes got a known "
                f"split (unknown must stay NaN): {list(r.loc[bad, 'request_id'])[:5]}")
            bad = out_of[w] & ~np.isnan(spl)
            assert not bad.any(), (
                f"{w} {d}: {int(bad.sum())} request(s) reaching outside the readings got a "
                f"known split (the part outside is unknown): {list(r.loc[bad, 'request_id'])[:5]}")
        # the known parts: equal to the headline where it is known, and they add up
        fin = np.isfinite(vals)
        assert np.allclose(kvals[fin], vals[fin], rtol=1e-12, atol=1e-6), f"{d}: known part"
        if np.isfinite(ktotal):
            given = float(kvals.sum()) + kidle
            assert abs(given - ktotal) <= tol, (
                f"{d}: per-request known split {kvals.sum():,.0f} + idle/other {kidle:,.0f} = "
                f"{given:,.0f} B, known counters over the span {ktotal:,.0f} B")
        else:
            # no known segment: nothing was split (NaN: not computed, an engine's dry run)
            assert (kvals[np.isfinite(kvals)] == 0).all() and (np.isnan(kidle) or kidle == 0), (
                f"{d}: counters unknown, yet split")
        outside = np.concatenate([out_of["prefill"], out_of["decode"]]) if len(r) \
            else np.zeros(0, bool)
        if np.isfinite(total):
            assert total == ktotal, f"{d}: a known total differs from its known part"
            assert not (np.isnan(vals) & ~outside).any(), f"{d}: NaN split under a known total"
            assert np.isfinite(idle) and idle == kidle, f"{d}: idle/other"
            # the requests' parts inside the readings (their split where it is known)
            given = float(kvals.sum()) + idle
            assert abs(given - total) <= tol, (
                f"{d}: per-request split {kvals.sum():,.0f} + idle/other {idle:,.0f} = "
                f"{given:,.0f} B, counters over the span {total:,.0f} B")
            if len(tl) and f"{d}_bytes" in tl and not tl[f"{d}_bytes"].isna().any():
                seen = float(tl[f"{d}_bytes"].sum())
                assert abs(seen - total) <= tol, (
                    f"{d}: split total {total:,.0f} B, timeline of the same span {seen:,.0f} B")
        else:
            # unknown, never the known part passed off as the total
            assert unknown > 0, f"{d}: NaN total with no unknown segment"
        if (np.isnan(vals) & ~outside).any():
            assert unknown > 0, f"{d}: NaN split with no unknown segment"
            assert np.isnan(total), f"{d}: a NaN split under a known total"


@pytest.fixture(autouse=True)
def _conservation_checked(monkeypatch):
    """Every attribution any test makes (``attribute``, the CLI, the report, several logs: all
    build an ``Attribution``) is checked by ``check_conservation`` as it is made."""
    try:
        from rdmascope.analysis.attribute import Attribution
    except Exception:  # the sampler-only install: no analysis to check
        yield
        return
    orig = Attribution.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        check_conservation(self)

    monkeypatch.setattr(Attribution, "__init__", init)
    yield
