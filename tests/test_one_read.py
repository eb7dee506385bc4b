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


@pytest.fixture
def reads(monkeypatch):
    """The segment files read, in order (one entry per file opened by the iterator)."""
    got: list[str] = []
    real = stream.iter_capture_tables

    def counting(*a, **k):
        for f, t in real(*a, **k):
            got.append(f.name)
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
