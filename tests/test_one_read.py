"""Each command reads each segment it needs once: the engine's pass, and nothing else besides
the capture's two ends.

The reads are counted at the one place the analysis reads readings from disk
(``stream.iter_capture_tables``, the capture format's segment iterator). The capture has six
segments and a line rate (``--link-gbps 100``) below its bursts' rate, so the over-line rule
judges hundreds of windows: it used to read the segments around every block of windows again
(243 reads for 60 segments on an hour's capture); now it judges them from the intervals the
pass has already made. ``attribute``, ``verify-emulation`` and ``report`` first find where the
counters' readings begin and end (``stream.edge_spans``: the first and last segments and their
neighbours), then make one pass.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from rdmascope.analysis import stream

from rdmascope.cli import main

REPO = Path(__file__).resolve().parents[1]
N_SEG = 6


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale_capture import build

    return build(tmp_path_factory.mktemp("reads") / "cap", 12, segment_s=2)


@pytest.fixture(scope="module")
def capture_b(tmp_path_factory) -> Path:
    """A second run (another seed) for the commands comparing two."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale_capture import build

    return build(tmp_path_factory.mktemp("reads_b") / "cap", 12, segment_s=2, seed=2)


class _Reads(list):
    """File names read, in order; ``paths``: the same files' paths."""

    paths: list[Path]


@pytest.fixture
def reads(monkeypatch):
    """The segment files read, in order (one entry per file opened by the iterator)."""
    got = _Reads()
    got.paths = []
    real = stream.iter_capture_tables

    def counting(*a, **k):
        for f, t in real(*a, **k):
            got.append(f.name)
            got.paths.append(Path(f))
            yield f, t

    monkeypatch.setattr(stream, "iter_capture_tables", counting)
    return got


def _run(argv):
    r = CliRunner().invoke(main, argv, catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output
    return r.output


def test_the_capture_has_the_segments_and_the_overline_windows(capture):
    assert len(list((capture / "segments").glob("*.parquet"))) == N_SEG
    out = _run(["peaks", str(capture), "--link-gbps", "100"])
    # windows over line rate were judged and their cause named ("... x241")
    assert re.search(r"[a-z] x\d+", out), out


@pytest.mark.parametrize("argv", [
    ["peaks", "--link-gbps", "100"],
    ["peaks", "--link-gbps", "100", "--group", "twins"],
    ["bursts", "--link-gbps", "100"],
    ["rates", "--window", "1ms", "--link-gbps", "100", "--json"],
    ["rates", "--window", "2ms", "--link-gbps", "100", "--group", "twins", "--csv"],
])
def test_a_view_reads_each_segment_once(capture, reads, argv):
    _run([argv[0], str(capture), *argv[1:]])
    n = Counter(reads)
    assert sorted(n) == sorted(f.name for f in (capture / "segments").glob("*.parquet"))
    assert set(n.values()) == {1}, n


@pytest.mark.parametrize("argv", [
    ["attribute", "--link-gbps", "100"],
    ["verify-emulation", "--link-gbps", "100"],
])
def test_attribute_and_verify_read_each_segment_once_besides_the_ends(capture, reads, argv):
    _run([argv[0], str(capture), *argv[1:]])
    n = Counter(reads)
    segs = sorted(f.name for f in (capture / "segments").glob("*.parquet"))
    assert sorted(n) == segs
    ends = set(segs[:2] + segs[-2:])  # the edges of the counters' readings (edge_spans)
    assert all(v == 1 for s, v in n.items() if s not in ends), n
    assert all(v <= 2 for v in n.values()), n


def test_report_reads_the_ends_once(capture, reads, tmp_path):
    """The report finds the counters' edges once (``edge_spans`` is kept on the capture's
    ``CaptureInfo``) and its one pass (``report.capture_pass``) reads every segment once."""
    _run(["report", str(capture), "-o", str(tmp_path / "r"), "--link-gbps", "100"])
    n = Counter(reads)
    segs = sorted(f.name for f in (capture / "segments").glob("*.parquet"))
    assert sorted(n) == segs
    assert n[segs[0]] >= 2 and n[segs[-1]] >= 2  # the ends, then the pass


def test_report_reads_each_segment_once_besides_the_ends(capture, reads, tmp_path):
    """The request's figures (the zoom, figure 3's windows, the prefill's peak table) are made
    in the report's one pass (``report_figures.RequestFigures``)."""
    _run(["report", str(capture), "-o", str(tmp_path / "r"), "--link-gbps", "100"])
    n = Counter(reads)
    segs = sorted(f.name for f in (capture / "segments").glob("*.parquet"))
    ends = set(segs[:2] + segs[-2:])
    assert all(v == 1 for s, v in n.items() if s not in ends), n
    assert all(v <= 2 for v in n.values()), n


def test_the_flagger_reads_nothing_again_on_the_pass(capture):
    """The over-line flagger registered on the pass judges every block from the kept intervals
    (``rereads`` counts the neighbourhoods it had to read again)."""
    from rdmascope.analysis.overline_pass import OverLineFlagger, pass_hooks
    from rdmascope.analysis.stream import WindowGrid, iter_windows, open_capture

    info = open_capture(capture)
    flag = OverLineFlagger(info, line_gbps=100.0)
    flagged = alone = 0
    for _, b, q in iter_windows(info, [WindowGrid(1_000_000, info.t_start_ns)],
                                **pass_hooks([flag])):
        flagged += int(((flag(b, q, 1_000_000) & 16) != 0).to_numpy().sum())
    assert flag.rereads == 0 and flagged > 100
    # the same windows judged by a flagger not on the pass (it reads their neighbourhood)
    lone = OverLineFlagger(info, line_gbps=100.0)
    for _, b, q in iter_windows(info, [WindowGrid(1_000_000, info.t_start_ns)]):
        alone += int(((lone(b, q, 1_000_000) & 16) != 0).to_numpy().sum())
    assert alone == flagged and lone.rereads > 0


def _once_besides_the_ends(reads, captures) -> None:
    """Every segment of each capture read, once, but the first and last two (the counters'
    edges, ``stream.edge_spans``), at most twice."""
    n = Counter(reads.paths)
    for cap in captures:
        segs = sorted((cap / "segments").glob("*.parquet"))
        got = {f: n[f] for f in segs}
        assert all(got.values()), got
        ends = set(segs[:2] + segs[-2:])
        assert all(v == 1 for f, v in got.items() if f not in ends), got
        assert all(v <= 2 for v in got.values()), got
    assert set(n) <= {f for cap in captures for f in (cap / "segments").glob("*.parquet")}


def test_compare_reads_each_segment_once_besides_the_ends(capture, capture_b, reads):
    """``compare``: each run's attribution and emulation check come from one pass
    (``compare.attribute_with_checks``; the check was two passes of its own before)."""
    _run(["compare", str(capture), str(capture_b), "--link-gbps", "100"])
    _once_besides_the_ends(reads, [capture, capture_b])


def test_report_of_two_runs_reads_each_segment_once_besides_the_ends(capture, capture_b,
                                                                     reads, tmp_path):
    """Figure 2 of each shared test is made in each capture's pass too."""
    _run(["report", str(capture), str(capture_b), "-o", str(tmp_path / "r"),
          "--link-gbps", "100"])
    _once_besides_the_ends(reads, [capture, capture_b])


@pytest.mark.parametrize("kind", ["request", "windows", "devices", "compare", "extra-prefill",
                                  "tokens"])
def test_plot_reads_each_segment_once_besides_the_ends(capture, capture_b, reads, tmp_path,
                                                       kind):
    """``plot windows``: its widths and peak labels in one pass (its labels loaded every
    interval); ``devices``: the figure and its verdict in one pass; ``extra-prefill`` and
    ``tokens``: each run's attribution and emulation check in one pass."""
    caps = [capture] if kind in ("request", "windows", "devices") else [capture, capture_b]
    _run(["plot", kind, *map(str, caps), "-o", str(tmp_path / "f.png"), "--link-gbps", "100"])
    if kind == "request":  # the segments around the request only
        n = Counter(reads.paths)
        assert max(n.values()) <= 2 and len(n) < N_SEG, n
        return
    if kind == "windows":  # the segments around its prefill only, once, besides the ends
        n = Counter(reads.paths)
        segs = sorted((capture / "segments").glob("*.parquet"))
        assert all(v == 1 for f, v in n.items() if f not in set(segs[:2] + segs[-2:])), n
        assert max(n.values()) <= 2, n
        return
    _once_besides_the_ends(reads, caps)
