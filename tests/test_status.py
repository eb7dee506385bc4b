"""The live status line of ``record --status``: fitted to the width, rates and sweep counts right.

Expected lines are written out by hand from the renderings listed in ``format_status``; rates in
``StatusMeter`` are computed by hand from the byte differences and reading times.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import struct
import subprocess
import sys
import termios

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rdmascope.sampler.faketree import build_device
from rdmascope.sampler.reader import SweepBuffers
from rdmascope.sampler.status import (
    ERASE_EOL,
    LinkRate,
    StatusMeter,
    format_elapsed,
    format_status,
    status_width,
    status_write,
)

DGX = [LinkRate("rocep1s0f1", 12.34, 0.0), LinkRate("roceP2p1s0f1", 0.0, 198.2)]
LONG_RE = re.compile(r"(\S+) tx +(\d+\.\d\d|--) rx +(\d+\.\d\d|--)")
SHORT_RE = re.compile(r"(\S+) +(\d+\.\d|--)/(\d+\.\d|--)")


def shown(line: str) -> list[tuple[str, str, str]]:
    """(label, tx, rx) of every link shown in a status line, either style."""
    if " | tx/rx Gb/s " in line:
        return SHORT_RE.findall(line.split(" | tx/rx Gb/s ", 1)[1])
    return LONG_RE.findall(line)


def hidden(line: str) -> int:
    m = re.search(r" \+(\d+) more$", line)
    return int(m.group(1)) if m else 0


# ---- format_status: hand-written lines at 200, 80 and 40 columns ---------------------------------

def test_two_links_at_200_columns_full_names_and_two_decimals():
    assert format_status(83.9, 83012, 3, DGX, 200) == (
        "0:01:23 sweeps 83012 taken, 3 missed | rocep1s0f1 tx  12.34 rx   0.00 | "
        "roceP2p1s0f1 tx   0.00 rx 198.20 Gb/s")


def test_two_links_at_80_columns_short_head_short_labels():
    # long head + any entries is > 79 (89 with short entries); short head + short entries: 76
    line = format_status(83.9, 83012, 3, DGX, 80)
    assert line == ("0:01:23 sw 83012 miss 3 | tx/rx Gb/s p1s0f1  12.3/0.0   "
                    "P2p1s0f1   0.0/198.2")
    assert len(line) == 23 + 14 + 18 + 1 + 20 == 76


def test_two_links_at_40_columns_keep_time_and_sweeps():
    # no link fits beside the 23-character head and the 14-character legend
    assert format_status(83.9, 83012, 3, DGX, 40) == "0:01:23 sw 83012 miss 3 | +2 links"


def test_elapsed_format():
    assert [format_elapsed(s) for s in (0, 59.99, 61, 3600, 3723.4, 123 * 3600 + 245, -3)] == \
        ["0:00:00", "0:00:59", "0:01:01", "1:00:00", "1:02:03", "123:04:05", "0:00:00"]


def test_netdev_links_are_marked():
    links = DGX + [LinkRate("enp1s0f1np1", 0.01, 0.0, True),
                   LinkRate("enP2p1s0f1np1", None, 0.0, True)]
    line = format_status(5, 5000, 0, links, 250)
    assert "| enp1s0f1np1(netdev) tx   0.01 rx   0.00 |" in line
    assert "enP2p1s0f1np1(netdev) tx     -- rx   0.00 Gb/s" in line
    # narrower: the stripped netdev names carry "nd:"
    mid = format_status(5, 5000, 0, links, 140)
    assert [s[0] for s in shown(mid)] == ["p1s0f1", "P2p1s0f1", "nd:p1s0f1np1", "nd:P2p1s0f1np1"]
    assert len(mid) <= 139


def test_multi_port_labels_keep_the_port():
    links = [LinkRate("mlx5_0/1", 1.0, 2.0), LinkRate("mlx5_0/2", 3.0, 4.0)]
    line = format_status(1, 1000, 0, links, 200)
    assert [s[0] for s in shown(line)] == ["mlx5_0/1", "mlx5_0/2"]


@pytest.mark.parametrize("width, k", [(40, 0), (80, 2), (200, 9)])
def test_many_devices_show_the_busiest_in_order(width, k):
    # 16 devices, device i sends i Gb/s: the busiest that fit are shown, in the given order.
    # k by hand, head "0:00:10 sw 10000 miss 2" (23) + " | tx/rx Gb/s " (14):
    # 80: two unpadded entries "mlx5_14 14.0/0.5 mlx5_15 15.0/0.5" (33) + " +14 more" (9) = 79
    # 200: mlx5_7..9 (3 x 14) + mlx5_10..15 (6 x 16) + 8 spaces + " +7 more" (8) = 191; one
    # more entry (" mlx5_6 6.0/0.5", 15) would make 206, 203 with the head's "sw 10k"
    links = [LinkRate(f"mlx5_{i}", float(i), 0.5) for i in range(16)]
    line = format_status(10, 10_000, 2, links, width)
    assert len(line) <= width - 1
    assert line.startswith("0:00:10 sw 10000 miss 2 | ")
    got = shown(line)
    if k == 0:
        assert got == [] and line == "0:00:10 sw 10000 miss 2 | +16 links"
        return
    assert len(got) == k and hidden(line) == 16 - k
    assert [g[0] for g in got] == [f"mlx5_{i}" for i in range(16 - k, 16)]
    assert [g[1:] for g in got] == [(f"{i}.0", "0.5") for i in range(16 - k, 16)]
    assert len(line) == {80: 79, 200: 191}[width]


@pytest.mark.parametrize("width", [40, 80, 200])
def test_long_names_are_cut_and_stay_distinct(width):
    links = [LinkRate(f"{p}_connectx7_port_with_a_very_long_name_{p}", 1.5 * i, 2.0)
             for i, p in enumerate(["alpha", "bravo", "charlie"])]
    line = format_status(3599.9, 3_599_900, 100, links, width)
    assert len(line) <= width - 1
    assert line.startswith("0:59:59 sw")
    got = shown(line)
    labels = [g[0] for g in got]
    assert len(set(labels)) == len(labels)
    for lab, (_tx, rx) in zip(labels, [g[1:] for g in got], strict=True):
        name = next(ln.name for ln in links if ln.name[:2] == lab[:2])
        assert lab == name or "~" in lab  # a cut label is marked
        assert rx == "2.0"
    if width == 200:  # all three, labels cut to 8 characters: 4 + "~" + 3
        assert labels == ["alph~pha", "brav~avo", "char~lie"]
    if width == 80:
        assert len(got) + hidden(line) == 3 and len(got) >= 1


def test_tiny_widths_still_bounded():
    for width in range(0, 30):
        line = format_status(3723, 3_723_000, 17, DGX, width)
        assert len(line) <= max(1, width - 1)
    # 25 columns: the counts are abbreviated to keep all three numbers
    assert format_status(3723, 3_723_000, 17, DGX, 26) == "1:02:03 sw 3.72M miss 17"


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzP0123456789_-", min_size=1, max_size=40)
rates = st.one_of(st.none(), st.floats(min_value=0, max_value=999, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(names, st.booleans(), rates, rates), max_size=20,
                unique_by=lambda t: (t[0], t[1])),
       st.integers(min_value=1, max_value=260), st.floats(min_value=0, max_value=400_000),
       st.integers(min_value=0, max_value=10**10), st.integers(min_value=0, max_value=10**7))
def test_any_input_fits_and_shows_true_numbers(raw, width, elapsed, taken, missed):
    links = [LinkRate(n, tx, rx, nd) for n, nd, tx, rx in raw]
    line = format_status(elapsed, taken, missed, links, width)
    assert len(line) <= max(1, width - 1)
    assert line.isascii() and line.isprintable()
    if width >= 40:
        assert line.startswith(format_elapsed(elapsed) + " sw")
    got = shown(line)
    if got:
        # the numbers shown are those of a subsequence of the links, in order, none dropped
        # without being counted in "+N more"
        assert len(got) + hidden(line) == len(links)
        long = " | tx/rx Gb/s " not in line
        want = [(f"{ln.tx_gbps:.{2 if long else 1}f}" if ln.tx_gbps is not None else "--",
                 f"{ln.rx_gbps:.{2 if long else 1}f}" if ln.rx_gbps is not None else "--")
                for ln in links]
        it = iter(want)
        assert all(any(w == g[1:] for w in it) for g in got)
        labels = [g[0] for g in got]
        assert len(set(labels)) == len(labels)


# ---- status_width / status_write ---------------------------------------------------------------

def test_width_from_columns_env(monkeypatch):
    monkeypatch.setenv("COLUMNS", "57")
    assert status_width(io.StringIO()) == 57


def test_width_from_the_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 63, 0, 0))
        with os.fdopen(slave, "w", closefd=False) as tty:
            assert status_width(tty) == 63
    finally:
        os.close(master)
        os.close(slave)


def test_width_falls_back_to_80(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "__stdout__", None)  # shutil then uses its fallback
    assert status_width(io.StringIO()) == 80


def test_write_redraws_on_a_terminal_and_prints_lines_elsewhere():
    out = io.StringIO()
    status_write(out, "abc", tty=True)
    status_write(out, "d", tty=True)
    assert out.getvalue() == "\rabc" + ERASE_EOL + "\rd" + ERASE_EOL
    out = io.StringIO()
    status_write(out, "abc", tty=False)
    status_write(out, "d", tty=False)
    assert out.getvalue() == "abc\nd\n"


# ---- StatusMeter: rates and sweep counts from the handed-off buffers -----------------------------

def ib(dev, port, name, bpu, direction):
    return {"source": "infiniband", "device": dev, "port": port, "name": name,
            "bytes_per_unit": bpu, "direction": direction}


def nd(dev, netdev, name, direction):
    return {"source": "netdev", "device": dev, "netdev": netdev, "port": None, "name": name,
            "bytes_per_unit": 1, "direction": direction}


COUNTERS = [ib("d", 1, "port_xmit_data", 4, "tx"), ib("d", 1, "port_rcv_data", 4, "rx"),
            ib("d", 1, "port_xmit_packets", None, "tx"),
            nd("d", "eth0", "tx_bytes", "tx"), nd("d", "eth0", "rx_bytes", "rx")]
START = 5_000_000_000


def buf_of(sweeps):
    """``sweeps``: [(k, t_ns, [(value, status) per counter])]."""
    b = SweepBuffers()
    for k, t, row in sweeps:
        b.sweep_start_ns.append(t)
        for i, (v, s) in enumerate(row):
            for col, x in ((b.counter_id, i), (b.sweep, k), (b.t_before_ns, t + i),
                           (b.read_duration_ns, 500), (b.value, v), (b.status, s)):
                col.append(x)
            b.n_bad += s != 0
    return b


def test_meter_rates_and_sweeps():
    m = StatusMeter(COUNTERS, START)
    ok = 0
    t2 = START + 2_000_000
    b1 = buf_of([(k, START + k * 1_000_000,
                  [(1000, ok), (2000, ok), (5, ok), (10**9, ok), (500, ok)]) for k in range(3)])
    assert m.update(b1, now_ns=START + 300_000_000) is None  # the reference readings
    # sweeps 3 and 4 missed; sweep 6 is 800 ms after sweep 2; port_rcv_data unreadable at 6
    t5, t6 = t2 + 799_000_000, t2 + 800_000_000
    b2 = buf_of([(5, t5, [(1000, ok), (2000 + 12_484_375, ok), (9, ok), (10**9, ok), (500, ok)]),
                 (6, t6, [(1000 + 25_000_000, ok), (0, 2), (10, ok), (10, ok),
                          (500 + 250_000_000, ok)])])
    elapsed, taken, missed, links = m.update(b2, now_ns=START + 1_500_000_000)
    assert (elapsed, taken, missed) == (1.5, 5, 2)
    # tx: 25e6 units * 4 B * 8 / 800e6 ns = 1.0 Gb/s; rx: 12.484375e6 * 4 * 8 / 799e6 ns = 0.5 Gb/s
    # (its reading at sweep 5); netdev tx went backwards (reset): unknown; rx 250e6 B * 8 / 800e6
    assert links == [LinkRate("d", pytest.approx(1.0), pytest.approx(0.5), False),
                     LinkRate("eth0", None, pytest.approx(2.5), True)]
    assert links[0].tx_gbps == pytest.approx(25_000_000 * 4 * 8 / 800_000_000, rel=1e-12)
    assert m.lines == 1
    # within the second: no line, but the sweeps are counted
    b3 = buf_of([(7, t6 + 1_000_000, [(1, ok)] * 5)])
    assert m.update(b3, now_ns=START + 1_600_000_000) is None
    # a second later: rates against the readings of the last line (the reset value included)
    t9 = t6 + 1_000_000_000
    b4 = buf_of([(9, t9, [(1000 + 50_000_000, ok), (2000 + 12_484_375, ok), (11, ok),
                          (10 + 125_000_000, ok), (500 + 250_000_000, ok)])])
    elapsed, taken, missed, links = m.update(b4, now_ns=START + 2_600_000_000)
    assert (taken, missed) == (7, 3)  # sweeps 0,1,2,5,6,7,9 taken; 3,4,8 missed
    # tx: 25e6 units over 1 s -> 0.8 Gb/s; rx unchanged since sweep 5 (1.001 s) -> 0.0
    assert links[0].tx_gbps == pytest.approx(0.8) and links[0].rx_gbps == 0.0
    assert links[1].tx_gbps == pytest.approx(1.0) and links[1].rx_gbps == 0.0
    assert elapsed == pytest.approx(2.6)


def test_meter_names_ports_of_a_multi_port_device():
    counters = [ib("mlx5_0", p, n, 4, d) for p in (1, 2)
                for n, d in (("port_xmit_data", "tx"), ("port_rcv_data", "rx"))]
    counters.append(ib("mlx5_1", 1, "port_xmit_data", 4, "tx"))
    m = StatusMeter(counters, START)
    assert [v[0] for v in m.links.values()] == ["mlx5_0/1", "mlx5_0/2", "mlx5_1"]


# ---- a real recorder: every status line fits COLUMNS ---------------------------------------------

def test_record_status_lines_fit_columns(tmp_path):
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    build_device(root, "roceP2p1s0f1", pci="0002:01:00.1", netdev="enP2p1s0f1np1")
    env = dict(os.environ, COLUMNS="64")
    r = subprocess.run([sys.executable, "-m", "rdmascope", "record", "-o", tmp_path / "cap",
                        "--sysfs-root", root, "--duration", "2.3s", "--netdev-stats",
                        "--status"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.split("\n")
    end = next(i for i, s in enumerate(lines) if s.startswith("rdmascope record: stopped"))
    assert lines[0].startswith("rdmascope record: sweep: "), r.stderr  # said once, first
    status = lines[1:end]
    assert 1 <= len(status) <= 3, r.stderr  # one a second (stderr is a pipe: plain lines)
    audit = re.search(r"sweeps: (\d+) taken, (\d+) missed", r.stderr)
    prev = 0
    for s in status:
        assert len(s) <= 63 and "\r" not in s and "\x1b" not in s, repr(s)
        m = re.match(r"0:00:0(\d) sw (\d+) miss (\d+) \| tx/rx Gb/s ", s)
        assert m, s
        assert 1 <= int(m.group(1)) <= 3
        taken = int(m.group(2))
        assert prev < taken <= int(audit.group(1)) and int(m.group(3)) <= int(audit.group(2))
        prev = taken
        # the fake tree's counters never change: every rate shown is 0.0, and the 4 links
        # (2 RDMA ports, 2 netdevs) are all accounted for
        got = shown(s)
        assert got and all(g[1:] == ("0.0", "0.0") for g in got)
        assert len(got) + hidden(s) == 4


def test_busiest_link_rate_stays_visible_down_to_60_columns():
    """Issue 10: on a narrow terminal the line used to drop every rate; from 60 columns up the
    busiest link's rate is always shown, whatever the elapsed time and sweep counts."""
    from rdmascope.sampler.status import LinkRate, format_status
    links = [LinkRate("rocep1s0f1", 12.3, 0.0), LinkRate("roceP2p1s0f1", 0.0, 198.2),
             LinkRate("enp1s0f1np1", 0.01, 0.0, True), LinkRate("enP2p1s0f1np1", 0.0, 0.02, True)]
    for elapsed, taken, missed in ((5.0, 4999, 1), (83.0, 83012, 3),
                                   (360000.0, 999_012_123, 999_234)):
        for width in range(60, 121):
            line = format_status(elapsed, taken, missed, links, width)
            assert len(line) <= width - 1
            assert "198.2" in line, (width, line)
