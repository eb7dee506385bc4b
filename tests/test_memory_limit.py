"""Each analysis command (inspect, rates, peaks, bursts, verify-emulation, attribute, report,
plot, compare, export dataset) runs on a capture under an address-space limit the old code
exceeds.

The limit (``resource.setrlimit(RLIMIT_AS)``) is set inside a child process, with one BLAS/OpenMP
thread, the system allocator for Arrow and two malloc arenas, so that the process's virtual size
is mostly the data it holds (a plain interpreter with numpy, pandas and pyarrow loaded needs
~0.4 GB of it). The capture (8 counters at 1 kHz for 8 minutes, 3.8 M readings) is small enough
to build in seconds and big enough that loading it whole fails under the limit: the control test
shows the old path (``load_capture`` + ``byte_intervals`` + ``peak_table``, what ``peaks`` did
before it streamed) raising ``MemoryError`` under the same limit. Memory per command stays flat
with the capture's length (``benchmarks/bench_scale.py`` measures 1 h against 6 h).

``attribute`` also runs with a serving day's request log (72,000 requests) under the same limit;
its control shows the old ``--json`` (every record in one list, one text) raising
``MemoryError`` there (``benchmarks/bench_attribute.py`` measures 2k against 20k requests).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

LIMIT = 620 * 2**20  # bytes of address space per child process
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2"}

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS semantics: Linux")


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from scale_capture import build

    return build(tmp_path_factory.mktemp("mem") / "cap", 8 * 60)


@pytest.fixture(scope="module")
def capture_b(capture) -> Path:
    """A second run (another seed) for ``compare``."""
    from scale_capture import build

    return build(capture.parent / "cap-b", 8 * 60, seed=2)


def _run_limited(code: str, limit: int = LIMIT) -> subprocess.CompletedProcess:
    prog = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    """) + textwrap.dedent(code)
    env = {**os.environ, **ENV}
    return subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                          env=env, timeout=600)


def _cli(args: list[str], limit: int = LIMIT) -> subprocess.CompletedProcess:
    return _run_limited(f"""
        import os
        from rdmascope.cli import main
        sys.stdout = open(os.devnull, "w")
        main({args!r}, prog_name="rdmascope")
    """, limit)


def _old_path_fails(setup: str, work: str) -> None:
    """The control: ``setup`` then ``work`` (code run in a child under the limit) must raise
    MemoryError inside ``work``, showing the limit is one the old path exceeds."""
    r = _run_limited(textwrap.dedent(setup) + "try:\n" + textwrap.indent(
        textwrap.dedent(work), "    ") + textwrap.dedent("""
        except MemoryError:
            print("MemoryError")
            sys.exit(0)
        print("fitted")
    """))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "MemoryError"


def test_old_path_exceeds_the_limit(capture):
    _old_path_fails("from rdmascope.analysis import byte_intervals, load_capture, peak_table\n",
                    f"peak_table(byte_intervals(load_capture({str(capture)!r})))\n")


@pytest.mark.parametrize("args", [
    ["inspect", "{cap}", "--json"],
    ["rates", "{cap}", "--window", "100ms"],
    ["rates", "{cap}", "--window", "1ms", "--csv"],
    ["peaks", "{cap}", "--json"],
    ["peaks", "{cap}", "--group", "twins", "--uncertainty"],
    ["bursts", "{cap}", "--json", "--group", "twins"],
    ["verify-emulation", "{cap}", "--json"],
    ["attribute", "{cap}", "--json"],
    ["report", "{cap}", "-o", "{out}"],
    ["export", "dataset", "{cap}", "-o", "{out}-dataset"],
    ["plot", "devices", "{cap}", "-o", "{out}.png"],
    ["compare", "{cap}", "{cap_b}", "--json"],
], ids=lambda a: " ".join(x for x in a if "{" not in x))
def test_command_runs_under_the_limit(capture, capture_b, args):
    r = _cli([a.format(cap=capture, cap_b=capture_b, out=capture.parent / "report")
              for a in args])
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def day_log(tmp_path_factory) -> tuple[Path, Path]:
    """A serving day's request log (72,000 requests, native JSONL) on a 3-minute capture: the
    requests overlap heavily, so every per-request table is a day's worth."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from requestlog_gen import write
    from scale_capture import build

    d = tmp_path_factory.mktemp("daylog")
    cap = build(d / "cap", 180)
    return cap, write(d / "requests.jsonl", "native", 72_000, 5000.5, 5179.5)


def test_old_json_output_of_a_day_log_exceeds_the_limit(day_log):
    # the control: attribution tables of 72k requests turned into one list of records and one
    # json.dumps text, as --json did before it was written block by block
    cap, log = day_log
    _old_path_fails(f"""
        import json
        from rdmascope.analysis.attribute import attribute
        from rdmascope.analysis.requestlogs import align, read_request_log
        from rdmascope.analysis.stream import open_capture
        from rdmascope.cli.attribute import attribution_tables
        from rdmascope.cli.output import _json_default, _nan_to_none, to_records
        cap = open_capture({str(cap)!r})
        tables, meta = attribution_tables(attribute(cap, align(read_request_log({str(log)!r}),
                                                               cap)))
    """, """
        obj = {"meta": meta, **{n: to_records(d) for n, d in tables.items()}}
        text = json.dumps(_nan_to_none(obj), indent=1, default=_json_default)
    """)


def test_attribute_with_a_day_log_runs_under_the_limit(day_log):
    cap, log = day_log
    r = _cli(["attribute", str(cap), "--requests", str(log), "--json"])
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def long_capture(capture) -> Path:
    """40 minutes (2.4 M sweeps, 2,000 requests): five times the 8-minute capture."""
    from scale_capture import build

    return build(capture.parent / "cap-long", 40 * 60, seed=3)


def test_report_of_a_long_capture_runs_under_the_same_limit(long_capture):
    """Memory does not grow with the capture: the timeline is a streamed min/max envelope
    (at most 200,000 points), the rest one pass with per-segment state; the 40-minute report
    fits the limit the 8-minute one does (measured VmPeak ~615 MB for both)."""
    r = _cli(["report", str(long_capture), "-o", str(long_capture.parent / "report-long")])
    assert r.returncode == 0, r.stderr[-3000:]


def test_report_of_two_runs_runs_under_a_limit(capture, capture_b):
    """Two configurations: figure 2 over the test's whole span (one test spans each capture)
    and both timelines as streamed envelopes. The second configuration, the comparison and its
    figures add ~80 MB of address space (measured VmPeak ~690 MB), hence the higher limit."""
    r = _cli(["report", str(capture), str(capture_b), "-o", str(capture.parent / "report-two")],
             limit=LIMIT + 100 * 2**20)
    assert r.returncode == 0, r.stderr[-3000:]
