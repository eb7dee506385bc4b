"""The real recorder in subprocesses: duration, SIGTERM, kill -9, refusals, write errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from rdmascope.sampler.faketree import build_device, write_in_place

from rdmascope.capture import STATUS_MISSING, STATUS_OK, read_capture

MS = 1_000_000


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    build_device(root, "roceP2p1s0f1", pci="0002:01:00.1", netdev="enP2p1s0f1np1")
    return root


def rdmascope(*args, **kw):
    return subprocess.run([sys.executable, "-m", "rdmascope", *map(str, args)],
                          capture_output=True, text=True, timeout=120, **kw)


def start_record(out, tree, *extra):
    return subprocess.Popen([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                             "--sysfs-root", str(tree), *map(str, extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rows(out, min_rows, timeout=30.0):
    """Wait until the capture has at least min_rows readings on disk."""
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if (out / "manifest.json").exists():
            try:
                if read_capture(out).table.num_rows >= min_rows:
                    return
            except Exception:  # manifest being replaced, live file mid-write
                pass
        time.sleep(0.1)
    raise AssertionError(f"no {min_rows} rows in {out} after {timeout} s")


def test_duration_record_with_changing_counters(tree, tmp_path, sweep_impl):
    """Counters change while recording: every value read is one that was written, in order."""
    f = tree / "class/infiniband/rocep1s0f1/ports/1/counters/port_xmit_data"
    written = []
    stop = threading.Event()

    def writer():
        v = 1000
        while not stop.is_set():
            v += 12345
            write_in_place(f, v)
            written.append(v)
            time.sleep(0.002)

    th = threading.Thread(target=writer)
    th.start()
    out = tmp_path / "cap"
    try:
        r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "1.5s",
                      "--netdev-stats", "--counters", "port_xmit_packets")
    finally:
        stop.set()
        th.join()
    assert r.returncode == 0, r.stderr
    assert "sweeps:" in r.stderr and "stopped (duration)" in r.stderr
    cap = read_capture(out)
    m = cap.manifest
    # the sweep that ran is said in the manifest, the audit and the stop summary
    assert m["extra"]["sweep"].startswith(f"{sweep_impl} (") and m["audit"]["sweep"] == \
        m["extra"]["sweep"]
    assert f"sweep: {m['extra']['sweep']}" in r.stderr
    assert cap.clean_end and m["interval_ns"] == MS
    names = [(c["device"], c["name"]) for c in m["counters"]]
    assert names[:3] == [("roceP2p1s0f1", "port_xmit_data"), ("roceP2p1s0f1", "port_rcv_data"),
                         ("roceP2p1s0f1", "port_xmit_packets")]
    assert ("roceP2p1s0f1", "tx_bytes") in names and len(names) == 10
    audit = m["audit"]
    # 1.5 s at 1 ms: 1501 deadlines (0 to 1.5 s inclusive), each taken or missed
    assert audit["sweeps_taken"] + audit["sweeps_missed"] == 1501
    t = cap.table
    assert t.num_rows == audit["sweeps_taken"] * len(names)
    cid = names.index(("rocep1s0f1", "port_xmit_data"))
    sel = t.filter(np.asarray(t["counter_id"]) == cid)
    vals = sel["value"].to_numpy()
    assert set(vals.tolist()) <= set(written) | {1001}
    assert np.all(np.diff(vals.astype(np.int64)) >= 0)
    assert len(set(vals.tolist())) > 50  # the changes were seen
    # each reading's bracket is non-negative and the timestamps follow the sweep order
    assert np.all(np.diff(sel["t_before_ns"].to_numpy()) > 0)
    start = m["start"]["monotonic_ns"]
    sw = sel["sweep"].to_numpy()
    lag = sel["t_before_ns"].to_numpy() - (start + sw * MS)
    assert lag.min() >= 0  # never before the deadline
    assert len(m["clock_pairs"]) >= 2 and m["stop"] is not None
    # devices are recorded with rate strings and netdevs
    d0 = m["devices"][0]
    assert d0["ports"][0]["rate"] == "200 Gb/sec (4X HDR)" and d0["netdevs"] == ["enP2p1s0f1np1"]


@pytest.mark.usefixtures("sweep_impl")
def test_sigterm_stops_cleanly(tree, tmp_path):
    out = tmp_path / "cap"
    p = start_record(out, tree)
    try:
        wait_for_rows(out, 4 * 500)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert "stopped (SIGTERM)" in err and "sweeps:" in err
    cap = read_capture(out)
    a = cap.manifest["audit"]
    assert cap.clean_end and a["stopped_by"] == "SIGTERM"
    assert cap.table.num_rows == 4 * a["sweeps_taken"]
    assert cap.live_rows == 0  # the last live segment was rolled into Parquet
    # every deadline up to the last sweep is counted once, as taken or missed
    last_sweep = int(np.max(cap.table["sweep"].to_numpy()))
    assert a["sweeps_taken"] + a["sweeps_missed"] == last_sweep + 1
    assert a["sweeps_taken"] == np.unique(cap.table["sweep"].to_numpy()).size
    stop = cap.manifest["stop"]["monotonic_ns"]
    assert 0 < stop - int(np.max(cap.table["t_before_ns"].to_numpy())) < 1_000_000_000


# the long and the short form (format_status picks one by the width); the tiny one rounds
STATUS_LINE = re.compile(r"^\d+:\d\d:\d\d (?:sweeps (\d+) taken, (\d+) missed|sw (\d+) miss (\d+) )",
                         re.M)


def _status_lines(path):
    """(taken, missed) of each plain status line the recorder wrote to stderr (``--status``)."""
    return [(int(a or c), int(b or d))
            for a, b, c, d in STATUS_LINE.findall(path.read_text(errors="replace"))]


@pytest.mark.usefixtures("sweep_impl")
def test_kill_9_loses_at_most_the_last_second(tree, tmp_path):
    """kill -9: what is on disk is whole sweeps, at most the last second is lost, and every sweep
    the recorder took before that is there (its own status lines count them).

    No threshold on the share of deadlines taken: a loaded machine makes the recorder miss
    deadlines legitimately. Lost rows are told from missed deadlines by the recorder's own count:
    status line (taken T, missed M) covers deadlines 0 .. T + M - 1, so once the last of them is on
    disk exactly T stored sweeps must lie at or before it.
    """
    out = tmp_path / "cap"
    err_path = tmp_path / "record.stderr"
    with open(err_path, "wb") as err:
        p = subprocess.Popen([sys.executable, "-m", "rdmascope", "record", "-o", str(out),
                              "--sysfs-root", str(tree), "--status"],
                             stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for_rows(out, 4 * 1500)
        t_end = time.monotonic() + 60
        while len(_status_lines(err_path)) < 2 and time.monotonic() < t_end:
            time.sleep(0.05)
        lines = _status_lines(err_path)
        assert len(lines) >= 2, err_path.read_text()
        # the first status line's last deadline on disk (sweeps are written in order)
        wait_for_rows(out, 4 * (lines[0][0] + 1))
        time.sleep(0.3)
        t_kill = time.perf_counter_ns()  # same clock as the capture
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        p.kill()
    cap = read_capture(out)  # everything on disk loads
    m = cap.manifest
    assert not cap.clean_end and m["audit"] is None
    start = m["start"]["monotonic_ns"]
    sweeps_elapsed = (t_kill - start) // MS
    t = cap.table
    per_counter = np.bincount(np.asarray(t["counter_id"]), minlength=4)
    assert len(set(per_counter.tolist())) == 1  # whole sweeps only
    last_t = int(np.max(t["t_before_ns"].to_numpy()))
    assert t_kill - last_t <= 1_000_000_000  # at most the last second is lost
    sweeps = np.unique(t["sweep"].to_numpy())
    assert sweeps[-1] >= sweeps_elapsed - 1000
    # a hole in the sweep numbers is deadlines that passed, not sweeps taken early: no reading
    # of sweep k is before its deadline start + k * interval (loop.py), so a hole between stored
    # sweeps a and b spans at least (b - a) intervals of the clock
    lag = t["t_before_ns"].to_numpy() - (start + t["sweep"].to_numpy() * MS)
    assert lag.min() >= 0
    # every sweep the recorder took is stored: the status lines (printed as buffers go to the
    # writer) count taken and missed deadlines; holes on disk = the recorder's own misses
    lines = _status_lines(err_path)
    checked = 0
    for taken, missed in lines:
        last = taken + missed - 1  # the last deadline this line accounts for
        if last <= sweeps[-1]:
            assert last in sweeps  # the line's last sweep was taken, so it is stored
            assert int(np.count_nonzero(sweeps <= last)) == taken, (taken, missed)
            checked += 1
    assert checked >= 1, (lines, int(sweeps[-1]))
    r = rdmascope("inspect", out)
    assert r.returncode == 0, r.stderr
    assert "UNCLEAN END" in r.stdout and "computed from readings" in r.stdout
    s = json.loads(rdmascope("inspect", out, "--json").stdout)
    assert s["quality"]["sweeps_taken"] == sweeps.size
    assert s["quality"]["sweeps_missed"] == int(sweeps[-1] - sweeps[0] + 1 - sweeps.size)
    assert s["rows"] == t.num_rows


def test_second_record_into_existing_capture_is_refused(tree, tmp_path):
    out = tmp_path / "cap"
    assert rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.2s").returncode == 0
    before = (out / "manifest.json").read_bytes()
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.2s")
    assert r.returncode != 0
    assert "already exists" in r.stderr and "--force" in r.stderr
    assert (out / "manifest.json").read_bytes() == before  # untouched
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.2s", "--force")
    assert r.returncode == 0, r.stderr
    assert (out / "manifest.json").read_bytes() != before


def test_second_writer_on_a_capture_being_recorded_is_refused_even_with_force(tree, tmp_path):
    """Two recorders on one directory: the second is refused (naming the first's pid), even with
    --force, and the first one's capture is whole; after a kill -9 the lock is gone."""
    out = tmp_path / "conc"
    # no --duration: the first recorder runs until the refusals are checked, however long the
    # second one takes to start on a busy machine (a first one that had already ended left no
    # lock, and the second got "already exists" instead)
    first = start_record(out, tree)
    try:
        wait_for_rows(out, 4 * 100)
        assert (out / ".lock").read_text().strip() == str(first.pid)
        for extra in ([], ["--force"]):
            r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.3s", *extra)
            assert r.returncode != 0
            assert (f"capture is being recorded by another process (pid {first.pid})"
                    in r.stderr), r.stderr
            assert str(out) in r.stderr and "Traceback" not in r.stderr
            assert first.poll() is None  # refused while the first one was still recording
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, err
    cap = read_capture(out)  # the first recorder's data, untouched by the refused second
    a = cap.manifest["audit"]
    assert cap.clean_end and a["stopped_by"] == "SIGTERM"
    assert cap.table.num_rows == 4 * a["sweeps_taken"]
    assert np.unique(cap.table["sweep"].to_numpy()).size == a["sweeps_taken"]
    assert not (out / ".lock").exists()  # removed on a clean stop
    # kill -9 leaves the lock file but no lock: --force may then overwrite the capture
    old_id = cap.manifest["capture_id"]
    killed = start_record(out, tree, "--force")
    try:
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end and (
                not (out / ".lock").exists() or not (out / "manifest.json").exists()
                or json.loads((out / "manifest.json").read_text())["capture_id"] == old_id):
            time.sleep(0.05)
        wait_for_rows(out, 4 * 100)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        killed.kill()
    assert (out / ".lock").exists()
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.2s", "--force")
    assert r.returncode == 0, r.stderr
    assert read_capture(out).clean_end


def test_unwritable_output_is_a_clear_error(tree, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = rdmascope("record", "-o", blocker / "cap", "--sysfs-root", tree, "--duration", "0.2s")
    assert r.returncode != 0
    assert "cannot create capture directory" in r.stderr and str(blocker) in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.usefixtures("sweep_impl")
def test_disk_full_stops_cleanly_and_keeps_what_was_written(tree, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root / CAP_SYS_ADMIN)")
    try:
        out = mnt / "cap"
        # 8 counters at 0.2 ms: ~1.5 MB/s in the live segment, fills 2 MiB in about 1.5 s
        r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--interval", "200us",
                      "--netdev-stats", "--duration", "60s")
        assert r.returncode != 0
        assert "write error" in r.stderr and "No space left on device" in r.stderr
        assert "sweeps:" in r.stderr  # the audit is still printed
        assert "Traceback" not in r.stderr
        cap = read_capture(out)  # what was written loads
        assert cap.table.num_rows > 0
        assert "stopped (write_error)" in r.stderr
        # with the disk full even the final manifest cannot be rewritten: the previous one stays
        # valid (atomic rename) and says "no stop record"
        if cap.manifest["stop"] is None:
            assert cap.manifest["audit"] is None
        else:
            assert cap.manifest["audit"]["stopped_by"] == "write_error"
        # whole sweeps only, in order
        per_counter = np.bincount(np.asarray(cap.table["counter_id"]), minlength=8)
        assert len(set(per_counter.tolist())) == 1
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.usefixtures("sweep_impl")
def test_missing_counter_marked_unavailable_others_go_on(tree, tmp_path):
    (tree / "class/infiniband/rocep1s0f1/ports/1/counters/port_xmit_wait").unlink()
    out = tmp_path / "cap"
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.3s",
                  "--counters", "port_xmit_wait")
    assert r.returncode == 0, r.stderr
    cap = read_capture(out)
    names = [(c["device"], c["name"]) for c in cap.counters]
    bad = names.index(("rocep1s0f1", "port_xmit_wait"))
    ev = [e for e in cap.manifest["events"] if e["counter_id"] == bad]
    assert len(ev) == 1 and ev[0]["kind"] == "unavailable" and "missing" in ev[0]["message"]
    t = cap.table
    cid = np.asarray(t["counter_id"])
    st = np.asarray(t["status"])
    assert set(st[cid == bad].tolist()) == {STATUS_MISSING}
    assert t.filter(cid == bad)["value"].null_count == int((cid == bad).sum())
    assert set(st[cid != bad].tolist()) == {STATUS_OK}
    s = rdmascope("inspect", out).stdout
    assert "port_xmit_wait" in s and "missing" in s


@pytest.mark.parametrize("args,msg", [
    (["--interval", "50us"], "outside the allowed range"),
    (["--interval", "2s"], "outside the allowed range"),
    (["--interval", "fast"], "is not a duration"),
    (["--interval", "1"], "'1' has no unit; expected e.g. 1ms, 500us, 2s"),
    (["--device", "mlx5_7"], "unknown device(s) mlx5_7"),
])
def test_bad_arguments(tree, tmp_path, args, msg):
    r = rdmascope("record", "-o", tmp_path / "cap", "--sysfs-root", tree, "--duration", "0.1s",
                  *args)
    assert r.returncode == 2 and msg in r.stderr  # a usage error (rdmascope.exitcodes)
    assert not (tmp_path / "cap").exists()


def test_a_sysfs_root_that_does_not_exist_is_a_usage_error(tmp_path):
    r = rdmascope("record", "-o", tmp_path / "cap", "--sysfs-root", tmp_path / "nowhere",
                  "--duration", "0.1s")
    assert r.returncode == 2 and "Invalid value for '--sysfs-root': " \
        f"{tmp_path / 'nowhere'}: no such directory" in r.stderr, r.stderr
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize("text,ns", [
    ("1ms", 1_000_000), ("0.5ms", 500_000), ("500us", 500_000), ("500µs", 500_000),
    ("250ns", 250), ("2s", 2_000_000_000), ("1.5 s", 1_500_000_000), ("1m", 60_000_000_000),
    ("2min", 120_000_000_000), ("1h", 3_600_000_000_000), ("0", 0), ("0ms", 0),
])
def test_parse_duration_with_unit(text, ns):
    from rdmascope.cli.common import parse_duration_ns

    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("text", ["1", "5", "0.5", " 2 ", "1e3"])
def test_parse_duration_refuses_a_bare_number(text):
    from rdmascope.cli.common import parse_duration_ns

    with pytest.raises(ValueError, match=r"has no unit; expected e\.g\. 1ms, 500us, 2s"):
        parse_duration_ns(text)


@pytest.mark.parametrize("argv", [
    ["record", "-o", "{tmp}/cap", "--interval", "1"],
    ["record", "-o", "{tmp}/cap", "--duration", "5"],
    ["rates", "{tmp}", "--window", "5"],
    ["bursts", "{tmp}", "--window", "5"],
    ["peaks", "{tmp}", "--windows", "1ms,5"],
])
def test_cli_durations_need_a_unit(tmp_path, argv):
    """Every command taking a duration refuses a bare number (it used to mean seconds)."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    r = CliRunner().invoke(main, [a.format(tmp=tmp_path) for a in argv])
    assert r.exit_code == 2, r.output
    assert "has no unit; expected e.g. 1ms, 500us, 2s" in r.output
    assert not (tmp_path / "cap").exists()


def test_counter_on_no_selected_port_is_refused_listing_what_exists(tree, tmp_path):
    out = tmp_path / "cap"
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.2s",
                  "--counters", "nosuch_counter")
    assert r.returncode == 2  # a usage error: the value names nothing there
    assert ("Invalid value for '--counters': nosuch_counter exist(s) on none of the selected "
            "ports (roceP2p1s0f1/1, rocep1s0f1/1)") in r.stderr, r.stderr
    # the list is the tree's counter files (faketree.MLX5_COUNTERS), sorted
    from rdmascope.sampler.faketree import MLX5_COUNTERS
    assert f"counters there: {', '.join(sorted(MLX5_COUNTERS))}" in r.stderr
    assert not out.exists()
    # on the other device only: refused when --device selects the one without it ...
    (tree / "class/infiniband/rocep1s0f1/ports/1/counters/port_xmit_wait").unlink()
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.2s",
                  "--counters", "port_xmit_wait,port_xmit_packets", "--device", "rocep1s0f1")
    assert r.returncode == 2
    assert "port_xmit_wait exist(s) on none of the selected ports (rocep1s0f1/1)" in r.stderr
    assert "port_xmit_packets exist" not in r.stderr and not out.exists()
    # ... and recorded (with the per-port warning) when both are selected
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "0.2s",
                  "--counters", "port_xmit_wait")
    assert r.returncode == 0, r.stderr
    assert "rocep1s0f1" in r.stderr and "missing" in r.stderr


def test_no_infiniband_dir(tmp_path):
    r = rdmascope("record", "-o", tmp_path / "cap", "--sysfs-root", tmp_path, "--duration", "1s")
    assert r.returncode != 0 and "class/infiniband: no such directory" in r.stderr


@pytest.mark.parametrize("sub", ["class/infiniband", "class", "class/infiniband/rocep1s0f1"])
@pytest.mark.parametrize("cmd", ["record", "devices"])
def test_sysfs_root_pointing_inside_the_tree_says_where_to_point(tree, tmp_path, sub, cmd):
    """--sysfs-root .../class/infiniband named .../class/infiniband/class/infiniband."""
    wrong = tree / sub
    args = ["-o", tmp_path / "cap", "--duration", "0.2s"] if cmd == "record" else []
    r = rdmascope(cmd, "--sysfs-root", wrong, *args)
    assert r.returncode != 0
    assert f"{wrong}/class/infiniband: no such directory" in r.stderr
    assert "point --sysfs-root at the folder that contains class/ (e.g. .../sys)" in r.stderr
    assert f"here: --sysfs-root {tree}" in r.stderr
    assert not (tmp_path / "cap").exists()


def test_device_selection_and_status_line(tree, tmp_path):
    out = tmp_path / "cap"
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "1.6s",
                  "--device", "rocep1s0f1", "--status", env={**os.environ, "COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    cap = read_capture(out)
    assert {c["device"] for c in cap.counters} == {"rocep1s0f1"}
    assert [d["name"] for d in cap.manifest["devices"]] == ["rocep1s0f1"]
    # the twin was not selected but existed: the manifest says so (the tree fixture's values)
    assert cap.manifest["discovered_devices"] == [
        {"name": "roceP2p1s0f1", "pci": "0002:01:00.1", "netdevs": ["enP2p1s0f1np1"],
         "sys_image_guid": "0a7f:bc12:45ef:d200"},
        {"name": "rocep1s0f1", "pci": "0000:01:00.1", "netdevs": ["enp1s0f1np1"],
         "sys_image_guid": "0a7f:bc12:45ef:d200"},
    ]
    s = rdmascope("inspect", out)
    assert ("devices present at record time: 2; not recorded: roceP2p1s0f1 (pci 0002:01:00.1, "
            "netdevs enP2p1s0f1np1)") in s.stdout
    assert json.loads(rdmascope("inspect", out, "--json").stdout)["discovered_devices"] == \
        cap.manifest["discovered_devices"]
    # constant counters; the status line's own tests are in test_status.py
    assert "| rocep1s0f1 tx   0.00 rx   0.00 Gb/s" in r.stderr


def test_devices_command(tree):
    r = rdmascope("devices", "--sysfs-root", tree, "--json")
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert [x["name"] for x in d["devices"]] == ["roceP2p1s0f1", "rocep1s0f1"]
    r = rdmascope("devices", "--sysfs-root", tree)
    assert "rocep1s0f1  pci 0000:01:00.1  netdevs enp1s0f1np1" in r.stdout
    assert "rate 200 Gb/s" in r.stdout
    r = rdmascope("devices", "--sysfs-root", Path(tree) / "nowhere")
    assert r.returncode != 0 and "no such directory" in r.stderr


def test_inspect_start_clocks_pci_unavailable_and_netdev_names(tmp_path, fixtures_dir):
    """inspect prints the start on both clocks, 'pci unavailable', netdev counters by netdev."""
    from datetime import datetime, timezone

    from click.testing import CliRunner

    from rdmascope.cli import main

    # the committed v1 capture: its audit predates the "netdev" key (filled from the manifest)
    cap = fixtures_dir / "v1-capture"
    m = json.loads((cap / "manifest.json").read_text())
    mono, rt = m["start"]["monotonic_ns"], m["start"]["realtime_ns"]
    r = CliRunner().invoke(main, ["inspect", str(cap)])
    assert r.exit_code == 0, r.output
    iso = datetime.fromtimestamp(rt / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    assert (f"start: CLOCK_MONOTONIC {mono / 1e9:.6f} s = CLOCK_REALTIME {iso}."
            f"{rt % 10**9:09d}Z") in r.output
    assert f"--offset = {mono / 1e9:.6f} - the log's time of this instant" in r.output
    nd = {c["netdev"]: c["device"] for c in m["counters"] if c["source"] == "netdev"}
    assert nd == {"enP2p1s0f1np1": "roceP2p1s0f1", "enp1s0f1np1": "rocep1s0f1"}
    for netdev, dev in nd.items():
        assert f"read bracket {netdev} tx_bytes:" in r.output
        assert f"] {netdev} tx_bytes (bytes)" in r.output
        assert f"{dev} tx_bytes" not in r.output
    s = json.loads(CliRunner().invoke(main, ["inspect", "--json", str(cap)]).output)
    assert s["start_monotonic_s"] == mono / 1e9
    assert s["start_realtime_iso"] == f"{iso}.{rt % 10**9:09d}Z"
    assert {q["netdev"] for q in s["quality"]["read_duration_ns"]} == {None, *nd}

    # a fresh recording: the audit names the netdev itself; a device without its PCI link
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    build_device(root, "mlx5_9", pci="0000:09:00.0")
    (root / "class/infiniband/mlx5_9/device").unlink()
    out = tmp_path / "cap"
    rec = rdmascope("record", "-o", out, "--sysfs-root", root, "--duration", "0.2s",
                    "--netdev-stats")
    assert rec.returncode == 0, rec.stderr
    assert "read bracket enp1s0f1np1 rx_bytes:" in rec.stderr
    a = read_capture(out).manifest["audit"]["read_duration_ns"]
    assert [x["netdev"] for x in a] == [None, None, None, None, "enp1s0f1np1", "enp1s0f1np1"]
    r = CliRunner().invoke(main, ["inspect", str(out)])
    assert "device mlx5_9  pci unavailable  netdevs -" in r.output
    assert "device rocep1s0f1  pci 0000:01:00.1" in r.output and "pci None" not in r.output


def test_disk_full_audit_says_taken_and_written_and_the_loss(tree, tmp_path, monkeypatch):
    """The live file hits a byte quota (ENOSPC) mid-run: the audit and the printed summary say
    how many sweeps were taken, how many are in the capture, and how many were lost."""
    import errno

    from click.testing import CliRunner

    import rdmascope.capture as C
    from rdmascope.cli import main

    real_write = C.os.write
    budget = {"left": 150_000}  # about one handoff of 4 counters, then the disk is full

    def quota_write(fd, data):
        if budget["left"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        data = memoryview(data)[:budget["left"]]
        budget["left"] -= len(data)
        return real_write(fd, data)

    # only the live segment's writes go through capture.os.write (_LiveFile)
    monkeypatch.setattr(C.os, "write", quota_write)
    out = tmp_path / "cap"
    r = CliRunner().invoke(main, ["record", "-o", str(out), "--sysfs-root", str(tree),
                                  "--duration", "1.5s", "--no-status"])
    monkeypatch.undo()
    assert r.exit_code == 4, r.output
    cap = read_capture(out)
    a = cap.manifest["audit"]  # the manifest and the final roll were not limited
    assert a["stopped_by"] == "write_error"
    on_disk = np.unique(cap.table["sweep"].to_numpy()).size
    assert cap.table.num_rows == 4 * on_disk == a["rows_written"]
    assert a["sweeps_written"] == on_disk > 0
    lost = a["sweeps_taken"] - on_disk
    assert a["sweeps_not_written"] == lost > 0
    assert (f"written: {on_disk} sweeps ({4 * on_disk} readings) in the capture; {lost} sweeps "
            "taken after the write error were not written") in r.output
    assert (f"everything written before it is kept and loads: {on_disk} sweeps); {lost} sweeps "
            "taken after the disk filled were not written") in r.output
    s = CliRunner().invoke(main, ["inspect", str(out)]).output
    assert f"sweeps: {a['sweeps_taken']} taken" in s and f"written: {on_disk} sweeps" in s


@pytest.mark.parametrize("value", ["1e300s", "1e999ms", "40y"])
def test_absurd_duration_is_a_usage_error_not_a_traceback(value, tmp_path):
    """'1e300s' overflowed the int conversion (a traceback); now every duration option says why."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    r = CliRunner().invoke(main, ["record", "-o", str(tmp_path / "c"), "--duration", value])
    assert r.exit_code == 2, r.output
    assert "Invalid value for '--duration'" in r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception,
                                                                             SystemExit)
    assert not (tmp_path / "c").exists()


def test_existing_capture_is_reported_before_missing_rdma(tmp_path):
    """On a machine without RDMA, `record -o EXISTING` said '/sys/class/infiniband: no such
    directory' and hid the real problem (fresh-user trial): the output is checked first."""
    from click.testing import CliRunner

    from rdmascope.cli import main

    out = tmp_path / "cap"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    r = CliRunner().invoke(main, ["record", "-o", str(out), "--sysfs-root", str(tmp_path / "no")])
    assert r.exit_code == 4
    assert "already exists and is not empty; use --force" in r.output
    assert (out / "manifest.json").read_text() == "{}"


def test_output_host_placeholder_is_this_hosts_name(tree, tmp_path):
    import socket

    from click.testing import CliRunner

    from rdmascope.cli import main

    (tmp_path / "runs").mkdir()  # record never creates a missing parent
    r = CliRunner().invoke(main, ["record", "-o", str(tmp_path / "runs" / "{host}"),
                                  "--sysfs-root", str(tree), "--duration", "50ms",
                                  "--no-status"])
    assert r.exit_code == 0, r.output
    host = socket.gethostname()
    man = json.loads((tmp_path / "runs" / host / "manifest.json").read_text())
    assert man["host"] == host
    assert not (tmp_path / "runs" / "{host}").exists()


def test_record_refuses_a_missing_parent(tmp_path):
    """Issue 10: `record -o /typo/dir/cap` used to create the whole missing path silently."""
    from click.testing import CliRunner

    from rdmascope.cli import main
    build_device(tmp_path / "sys", "mlx5_0", pci="0000:01:00.0")
    out = tmp_path / "typo" / "dir" / "cap"
    r = CliRunner().invoke(main, ["record", "-o", str(out), "--sysfs-root", str(tmp_path / "sys"),
                                  "--duration", "0.1s", "--no-status"])
    assert r.exit_code == 2
    assert f"the directory {tmp_path / 'typo' / 'dir'} does not exist" in r.output
    assert "'-o' / '--output'" in r.output
    assert not (tmp_path / "typo").exists()


@pytest.mark.usefixtures("sweep_impl")
def test_duration_is_the_span_recorded(tree, tmp_path):
    """`--interval 200ms --duration 600ms` records 0.6 s: readings at 0, 0.2, 0.4 and 0.6 s (4
    deadlines; the span is the duration at any interval, so a short one proves it as well)."""
    out = tmp_path / "cap"
    step = 200_000_000
    r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--interval", "200ms",
                  "--duration", "600ms")
    assert r.returncode == 0, r.stderr
    cap = read_capture(out)
    a = cap.manifest["audit"]
    assert a["sweeps_taken"] + a["sweeps_missed"] == 4
    t = cap.table
    sweeps = np.unique(t["sweep"].to_numpy())
    tb = t["t_before_ns"].to_numpy()
    start = cap.manifest["start"]["monotonic_ns"]
    # every sweep taken is stored, none beyond the last deadline (0.6 s), and no reading of
    # sweep k before its deadline start + k x 200 ms (loop.py): so with sweep 3 taken the span
    # is the duration; a busy machine may miss a deadline (counted in the audit), never shift one
    assert sweeps.size == a["sweeps_taken"] and set(sweeps.tolist()) <= {0, 1, 2, 3}
    deadline = start + t["sweep"].to_numpy().astype(np.int64) * step
    assert (tb >= deadline).all(), (tb - deadline).min()
    if a["sweeps_missed"] == 0:
        assert sweeps.tolist() == [0, 1, 2, 3]
        assert tb.max() - start >= 3 * step


def test_the_first_reading_is_at_the_start_so_the_first_window_is_whole(tree, tmp_path):
    """The capture's start is its first sweep's deadline and the windows' grid origin: the
    recorder sets it a little ahead (``START_LEAD_NS``), so the sampling thread waits for it
    and reads at it. The first reading is never before the start, and (a loaded machine may
    delay one run's thread past the lead, so the best of three runs) within the windows' cover
    tolerance of it: the first 100 ms window is whole, its bytes known, as the ones after it.
    With the deadline at the moment the clocks were taken, the first reading came ~1 ms late
    and every width's first window was partly covered (its bytes unknown)."""
    from rdmascope.analysis.curve import COVER_TOLERANCE_NS

    late = []
    for k in range(3):
        out = tmp_path / f"cap{k}"
        r = rdmascope("record", "-o", out, "--sysfs-root", tree, "--duration", "300ms")
        assert r.returncode == 0, r.stderr
        cap = read_capture(out)
        start = cap.manifest["start"]["monotonic_ns"]
        first = int(cap.table["t_before_ns"].to_numpy().min())
        assert first >= start
        late.append(first - start)
        if late[-1] <= COVER_TOLERANCE_NS:
            break
    assert min(late) <= COVER_TOLERANCE_NS, [x / 1e6 for x in late]
    res = rdmascope("rates", out, "--window", "100ms", "--bytes", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rates"]
    quality = [c for c in rows[0] if c.endswith("_quality")]
    assert quality and all(rows[0][c] & 4 == 0 for c in quality), rows[0]  # 4: partly covered
    byt = [c for c in rows[0] if c.endswith("x_bytes")]
    assert byt and all(rows[0][c] is not None for c in byt), rows[0]
