"""The compiled sweep (sampler/_csweep.c via sampler/csweep.py) against the pure-Python reader.

Both implementations read the same files in the same sweeps; every row (counter, sweep, value,
status), every event and every back-off must be the same (only timestamps differ). Trees: the
real sysfs content of fixtures/sysfs-procfs, the emulator's Spark tree, and hand-made files with
the edge cases of the parse rule. The compiled schedule (deadlines, missed deadlines, the end of
``--duration``, the early returns) is checked on the real clock with wide margins.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from rdmascope.sampler.csweep import ENV_DISABLE, CompiledSweeper, describe, load
from rdmascope.sampler.loop import ScheduleStats
from rdmascope.sampler.reader import CounterReader, SweepBuffers

from rdmascope.capture import (
    STATUS_MISSING,
    STATUS_OK,
    STATUS_PARSE_ERROR,
    STATUS_READ_ERROR,
)
from rdmascope.emulator.tree import build_tree

REPO = Path(__file__).resolve().parents[1]
S = 1_000_000_000
#: no liveness check or back-off end falls inside a test: every sweep is the compiled one
QUIET = {"reopen_interval_ns": 1000 * S, "backoff_min_ns": 1000 * S, "backoff_max_ns": 1000 * S}


@pytest.fixture
def cs(monkeypatch):
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    module, why = load()
    if module is None:
        pytest.skip(f"compiled sweep unavailable: {why}")
    return module


def compiled_sweep(sw: CompiledSweeper, k: int, buf: SweepBuffers) -> int:
    """Take exactly sweep ``k`` now with the compiled sweep (deadline k = now)."""
    st = ScheduleStats(next_k=k)
    reason = sw.run(k, buf, start_ns=time.perf_counter_ns() - k * S, interval_ns=S,
                    n_deadlines=k + 1, until_ns=0, spin_ns=0, stats=st)
    assert (st.taken, st.missed, st.next_k) == (1, 0, k + 1), reason
    return reason


def rows(buf: SweepBuffers) -> list[tuple]:
    return list(zip(buf.counter_id, buf.sweep, buf.value, buf.status, strict=True))


def events(r: CounterReader) -> list[tuple]:
    return [(cid, kind, msg) for _t, cid, kind, msg in r.drain_events()]


def same_state(a: CounterReader, b: CounterReader) -> None:
    assert a.state == b.state and a.reason == b.reason
    assert a.skipped == b.skipped and a.backoff_ns == b.backoff_ns and a.n_reads == b.n_reads
    assert [fd == -2 for fd in a.fds] == [fd == -2 for fd in b.fds]
    assert [fd == -1 for fd in a.fds] == [fd == -1 for fd in b.fds]


def sweep_both(paths, n_sweeps, module, mutate=None, **reader_kw):
    """Sweep ``paths`` with both implementations, ``mutate(k)`` before sweep k (both read the
    same content: the Python reader right after the compiled one). Returns both buffers."""
    kw = {**QUIET, **reader_kw}
    py, cx = CounterReader(paths, **kw), CounterReader(paths, **kw)
    assert events(py) == events(cx)
    sw = CompiledSweeper(cx, module, 4)
    bp, bc = SweepBuffers(), SweepBuffers()
    try:
        for k in range(n_sweeps):
            if mutate is not None:
                mutate(k)
            compiled_sweep(sw, k, bc)
            py.read_sweep(k, bp)
            assert rows(bc) == rows(bp), f"sweep {k}"
            assert events(cx) == events(py), f"sweep {k}"
            same_state(py, cx)
        assert bc.n_bad == bp.n_bad and len(bc.sweep_start_ns) == len(bp.sweep_start_ns)
        # the compiled rows carry real brackets: t_before increases, durations are sane
        tb = list(bc.t_before_ns)
        assert all(b >= a for a, b in zip(tb, tb[1:], strict=False))
        assert list(bc.sweep_start_ns) == tb[::len(paths)]
    finally:
        py.close()
        cx.close()
    return bp, bc


# ---- the same rows and events as the Python reader -------------------------------------------

def test_every_counter_file_of_the_real_sysfs_fixture(procfs_sys, cs):
    """All counters/ and hw_counters/ files of three real devices (hfi1, mlx4, mlx5): values
    and statuses as the Python reader's, and at least one value is non-zero per device."""
    paths = sorted(str(p) for p in procfs_sys.glob("class/infiniband/*/ports/*/*counters/*")
                   if p.is_file() or p.is_symlink())
    assert len(paths) > 50
    bp, _ = sweep_both(paths, 3, cs)
    assert sum(1 for v in bp.value if v) > 10
    assert all(s == STATUS_OK for s in bp.status if s != STATUS_PARSE_ERROR)


def test_the_emulators_spark_tree_while_it_moves(tmp_path, cs):
    tree = build_tree(tmp_path / "sys", seed=5)
    names = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets")
    paths = [str(tree.file_of(tw.device, n)) for tw in tree.twins for n in names]
    paths += [str(tree.file_of(tw.netdev, n)) for tw in tree.twins
              for n in ("tx_bytes", "rx_bytes")]
    from rdmascope.emulator.tree import _write_in_place

    def mutate(k):
        for i, p in enumerate(paths):
            _write_in_place(Path(p), 10**12 + 7919 * k * (i + 1))

    bp, _ = sweep_both(paths, 6, cs, mutate)
    assert bp.value[-1] == 10**12 + 7919 * 5 * len(paths)  # independent: what was written
    assert set(bp.status) == {STATUS_OK}


CONTENTS = [
    (b"123\n", STATUS_OK, 123), (b"  42 \t\n", STATUS_OK, 42), (b"000017\n", STATUS_OK, 17),
    (b"18446744073709551615\n", STATUS_OK, (1 << 64) - 1),
    (b"18446744073709551616\n", STATUS_PARSE_ERROR, 0), (b"99999999999999999999999", STATUS_PARSE_ERROR, 0),
    (b"", STATUS_PARSE_ERROR, 0), (b"\n", STATUS_PARSE_ERROR, 0), (b"garbage\n", STATUS_PARSE_ERROR, 0),
    (b"+5\n", STATUS_PARSE_ERROR, 0), (b"-0\n", STATUS_PARSE_ERROR, 0), (b"1_000\n", STATUS_PARSE_ERROR, 0),
    (b"12 34\n", STATUS_PARSE_ERROR, 0), (b"12abc\n", STATUS_PARSE_ERROR, 0), (b"7\x00\n", STATUS_PARSE_ERROR, 0),
    (b"\xd9\xa3\n", STATUS_PARSE_ERROR, 0), (b"5\r\n", STATUS_PARSE_ERROR, 0), (b"1" * 63 + b"\n", STATUS_PARSE_ERROR, 0),
    (b"0" * 62 + b"9\n", STATUS_OK, 9),  # 64 bytes: the whole read
    # 72 bytes: the 64 read are all zeros, a valid 0 (as the Python reader: one 64-byte read)
    (b"0" * 70 + b"9\n", STATUS_OK, 0),
]


def test_parse_rule_edge_cases_and_their_events(tmp_path, cs):
    """Each content gives the status and value written here by hand, in both implementations,
    with the same "not an unsigned integer" event (one per counter) and back-off."""
    paths = []
    for i, (content, _, _) in enumerate(CONTENTS):
        p = tmp_path / f"c{i}"
        p.write_bytes(content)
        paths.append(str(p))
    bp, _ = sweep_both(paths, 3, cs)
    first = list(zip(bp.status, bp.value, strict=True))[:len(paths)]
    assert first == [(st, v) for _, st, v in CONTENTS]


def test_read_errors_missing_files_and_recovery_match(tmp_path, cs):
    """A counter whose read fails (a directory: EISDIR), one missing at open, one turning to
    garbage and back: same rows, events, back-offs, skips; then both re-check and recover."""
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text("5\n")
    (tmp_path / "dir").mkdir()
    paths = [str(tmp_path / n) for n in ("a", "dir", "gone", "b", "c")]

    def mutate(k):
        (tmp_path / "b").write_text("oops\n" if k in (2, 3) else f"{k}\n")
        (tmp_path / "a").write_text(f"{100 + k}\n")

    bp, _ = sweep_both(paths, 5, cs, mutate)
    st = [bp.status[k * 5:(k + 1) * 5] for k in range(5)]
    assert [s[1] for s in st] == [STATUS_READ_ERROR] * 5  # failed once, then backing off
    assert [s[2] for s in st] == [STATUS_MISSING] * 5
    assert [s[3] for s in st] == [STATUS_OK, STATUS_OK, STATUS_PARSE_ERROR, STATUS_PARSE_ERROR,
                                  STATUS_PARSE_ERROR]  # backing off after sweep 2
    assert [bp.value[k * 5] for k in range(5)] == [100, 101, 102, 103, 104]

    # the end of every back-off (a check due): the reader checks, then the compiled code reads,
    # reporting the recoveries from its own readings (CompiledSweeper._decide)
    py, cx = CounterReader(paths, **QUIET), CounterReader(paths, **QUIET)
    sw = CompiledSweeper(cx, cs, 4)
    b1, b2 = SweepBuffers(), SweepBuffers()
    py.read_sweep(0, b1)
    compiled_sweep(sw, 0, b2)
    (tmp_path / "b").write_text("oops\n")
    py.read_sweep(1, b1)
    compiled_sweep(sw, 1, b2)
    (tmp_path / "b").write_text("9\n")
    (tmp_path / "gone").write_text("3\n")
    for r in (py, cx):
        for i in range(len(paths)):
            r.request_check(i)
    py.read_sweep(2, b1)
    compiled_sweep(sw, 2, b2)  # stops before the sweep, the reader checks, C takes the sweep
    # every back-off ended at the checks; the directory failed again and backs off again
    assert [x == -2 for x in cx.fds] == [False, True, False, False, False]
    py.read_sweep(3, b1)
    compiled_sweep(sw, 3, b2)
    assert rows(b1) == rows(b2)
    ev = events(py)
    assert ev == events(cx)
    assert [e[:2] for e in ev if e[1] == "recovered"] == [(2, "recovered"), (3, "recovered")]
    assert b1.status[-5:].tolist() == [STATUS_OK, STATUS_READ_ERROR, STATUS_OK, STATUS_OK,
                                       STATUS_OK]
    py.close()
    cx.close()


# ---- the compiled schedule ---------------------------------------------------------------------

@pytest.fixture
def one_file(tmp_path):
    p = tmp_path / "c"
    p.write_text("11\n")
    r = CounterReader([str(p)], **QUIET)
    yield r
    r.close()


def test_passed_deadlines_are_missed_not_made_up(one_file, cs):
    """Started 5.5 intervals late: deadlines 0-4 are missed, 5 is taken at once (loop.py's rule;
    the 0.5-interval margin absorbs a loaded machine)."""
    sw = CompiledSweeper(one_file, cs, 8)
    buf, st = SweepBuffers(), ScheduleStats()
    reason = sw.run(0, buf, start_ns=time.perf_counter_ns() - 11 * S // 2, interval_ns=S,
                    n_deadlines=None, until_ns=0, spin_ns=0, stats=st)
    assert reason == cs.R_UNTIL and (st.taken, st.missed, st.next_k) == (1, 5, 6)
    assert list(buf.sweep) == [5] and list(buf.value) == [11]


def test_waking_after_the_last_deadline_takes_no_sweep_beyond_it(one_file, cs):
    sw = CompiledSweeper(one_file, cs, 8)
    buf, st = SweepBuffers(), ScheduleStats()
    reason = sw.run(0, buf, start_ns=time.perf_counter_ns() - 11 * S // 2, interval_ns=S,
                    n_deadlines=3, until_ns=0, spin_ns=0, stats=st)
    assert reason == cs.R_END and (st.taken, st.missed, st.next_k) == (0, 3, 3)
    assert len(buf) == 0


def test_sweeps_wait_for_their_deadlines(one_file, cs):
    """10 deadlines 20 ms apart: each one taken or missed exactly once, no sweep before its
    deadline, and the run lasts the 9 intervals (never less)."""
    iv = 20_000_000
    sw = CompiledSweeper(one_file, cs, 64)
    buf, st = SweepBuffers(), ScheduleStats()
    t0 = time.perf_counter_ns()
    reason = sw.run(0, buf, start_ns=t0, interval_ns=iv, n_deadlines=10,
                    until_ns=t0 + 60 * S, spin_ns=0, stats=st)
    assert reason == cs.R_END and st.taken + st.missed == 10 and st.next_k == 10
    for k, tb in zip(buf.sweep, buf.t_before_ns, strict=True):
        assert tb >= t0 + k * iv
    assert time.perf_counter_ns() - t0 >= 9 * iv


def test_spin_reaches_the_deadline_too(one_file, cs):
    iv = 5_000_000
    sw = CompiledSweeper(one_file, cs, 64)
    buf, st = SweepBuffers(), ScheduleStats()
    t0 = time.perf_counter_ns()
    sw.run(0, buf, start_ns=t0, interval_ns=iv, n_deadlines=4, until_ns=t0 + 60 * S,
           spin_ns=2_000_000, stats=st)
    assert st.taken + st.missed == 4
    assert all(tb >= t0 + k * iv for k, tb in zip(buf.sweep, buf.t_before_ns, strict=True))


def test_a_due_check_stops_the_call_before_the_sweep(one_file, cs):
    """The raw call: a check due returns R_CHECK without taking the sweep; through
    CompiledSweeper the reader runs the checks and the same deadline is then swept."""
    from array import array

    sw = CompiledSweeper(one_file, cs, 8)
    args = (array("i", one_file.fds), array("B", one_file.state), sw.skipped, sw.cid, sw.sweep,
            sw.t_before, sw.dur, sw.value, sw.status, sw.starts, sw.errnos, sw.t1s, sw.raw,
            sw.rawlen)
    t0 = time.perf_counter_ns()
    got = cs.run(*args, t0 - 2 * S, S, 2, -1, 0, array("q", [0]), 0)
    assert got == (cs.R_CHECK, 2, 0, 0, 0, 0)
    one_file.request_check(0)
    buf, st = SweepBuffers(), ScheduleStats()
    reason = sw.run(2, buf, start_ns=t0 - 2 * S, interval_ns=S, n_deadlines=None, until_ns=0,
                    spin_ns=0, stats=st)
    assert reason == cs.R_UNTIL and (st.taken, st.missed, st.next_k) == (1, 0, 3)
    assert list(buf.sweep) == [2] and one_file.next_check_ns[0] > t0


def test_returns_when_the_buffers_are_full(one_file, cs):
    sw = CompiledSweeper(one_file, cs, 3)
    buf, st = SweepBuffers(), ScheduleStats()
    t0 = time.perf_counter_ns()
    reason = sw.run(0, buf, start_ns=t0 - 10 * S, interval_ns=1_000_000, n_deadlines=None,
                    until_ns=t0 + 60 * S, spin_ns=0, stats=st)
    assert reason == cs.R_FULL and st.taken == 3 and len(buf) == 3


def test_a_signal_interrupts_the_wait(one_file, cs):
    """A signal handled in Python (SIGINT/SIGTERM stop the recorder) ends the call early, without
    taking the sweep it was waiting for, so the handler runs at once."""
    got = []
    old = signal.signal(signal.SIGALRM, lambda *a: got.append(1))
    try:
        sw = CompiledSweeper(one_file, cs, 8)
        buf, st = SweepBuffers(), ScheduleStats()
        t0 = time.perf_counter_ns()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        reason = sw.run(0, buf, start_ns=t0 + 30 * S, interval_ns=S, n_deadlines=None,
                        until_ns=t0 + 60 * S, spin_ns=0, stats=st)
        assert reason == cs.R_SIGNAL and st.taken == 0 and st.next_k == 0
        assert time.perf_counter_ns() - t0 < 20 * S
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert got == [1]


def test_bad_buffers_are_a_value_error(one_file, cs):
    from array import array
    with pytest.raises(ValueError, match="fds"):
        cs.run(array("q", [0]), *([array("B")] * 13), 0, S, 0, 1, 0, array("q", [0]), 0)
    sw = CompiledSweeper(one_file, cs, 2)
    with pytest.raises(ValueError, match="interval_ns"):
        sw.run(0, SweepBuffers(), start_ns=0, interval_ns=0, n_deadlines=1, until_ns=0,
               spin_ns=0, stats=ScheduleStats())


# ---- which sweep runs, and the fallback -------------------------------------------------------

def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv(ENV_DISABLE, "1")
    assert load() == (None, f"python (compiled sweep disabled: {ENV_DISABLE}=1)")
    monkeypatch.setenv(ENV_DISABLE, "0")  # "0" means not disabled
    assert not load()[1].startswith("python (compiled sweep disabled")


def test_absent_extension_falls_back_and_records(tmp_path, monkeypatch):
    """Without the extension (an install without a compiler) the recorder runs the Python sweep
    and says so in the manifest, the audit and ``rdmascope devices``."""
    from rdmascope.sampler.daemon import RecordOptions, record
    from rdmascope.sampler.faketree import build_device

    from rdmascope.capture import read_capture

    monkeypatch.delenv(ENV_DISABLE, raising=False)
    monkeypatch.setitem(sys.modules, "rdmascope.sampler._csweep", None)  # import fails
    module, why = load()
    assert module is None and why.startswith("python (compiled sweep not built: ")
    build_device(tmp_path / "sys", "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    res = record(RecordOptions(output=tmp_path / "cap", sysfs_root=tmp_path / "sys",
                               duration_s=0.3, status=False), log=open(os.devnull, "w"))
    assert res.error is None
    cap = read_capture(tmp_path / "cap")
    assert cap.manifest["extra"]["sweep"] == why == res.audit["sweep"]
    assert res.audit["sweeps_taken"] + res.audit["sweeps_missed"] == 301
    assert cap.table.num_rows == res.audit["sweeps_taken"] * 2
    from click.testing import CliRunner

    from rdmascope.cli import main
    out = CliRunner().invoke(main, ["devices", "--sysfs-root", str(tmp_path / "sys")]).output
    assert f"sweep (rdmascope record): {why}" in out


def test_devices_says_which_sweep_record_would_run(tmp_path, monkeypatch):
    from rdmascope.sampler.faketree import build_device

    build_device(tmp_path / "sys", "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    env = {**os.environ, ENV_DISABLE: "1"}
    r = subprocess.run([sys.executable, "-m", "rdmascope", "devices", "--sysfs-root",
                        tmp_path / "sys"], capture_output=True, text=True, env=env, timeout=120)
    assert f"sweep (rdmascope record): python (compiled sweep disabled: {ENV_DISABLE}=1)" \
        in r.stdout
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    env.pop(ENV_DISABLE)
    r = subprocess.run([sys.executable, "-m", "rdmascope", "devices", "--sysfs-root",
                        tmp_path / "sys", "--json"], capture_output=True, text=True, env=env,
                       timeout=120)
    import json
    assert json.loads(r.stdout)["sweep"] == describe()


def _have_compiler() -> str | None:
    """Why the extension cannot be built here (None: it can)."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        return "no C compiler (cc) on PATH"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (Python.h)"
    return None


def test_extension_is_built_where_a_compiler_is(monkeypatch):
    """CI installs with a compiler: there the compiled sweep must be what runs (a build that
    silently failed would leave only the fallback tested)."""
    why = _have_compiler()
    if why is not None:
        pytest.skip(why)
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    assert load()[0] is not None, (
        f"{load()[1]}; a compiler is here, so `pip install -e .` should have built "
        "sampler/_csweep.c: an install made before setup.py existed needs running it again, "
        "otherwise its build output says why it failed")


def test_build_without_a_compiler_succeeds_without_the_extension(tmp_path):
    """setup.py's extension is optional: with a compiler that fails, the build still succeeds
    (``pip install`` goes on) and builds no extension; with a working one, it builds it."""
    if _have_compiler() is not None:
        pytest.skip(_have_compiler())
    for cc, built in (("/bin/false", False), (None, True)):
        env = dict(os.environ)
        if cc:
            env["CC"] = cc
        out = tmp_path / ("nocc" if cc else "cc")
        r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib",
                            str(out / "lib"), "--build-temp", str(out / "tmp")], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert bool(list(out.glob("lib/rdmascope/sampler/_csweep*.so"))) is built, r.stderr
        if not built:
            assert "building extension \"rdmascope.sampler._csweep\" failed" in r.stderr
