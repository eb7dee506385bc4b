"""The live status line of ``rdmascope record --status``: one line, fitted to the terminal width.

Shown once a second: elapsed time, sweeps taken and missed, and per link (RDMA device port, or a
netdev's kernel statistics with ``--netdev-stats``) tx/rx Gb/s (1e9 bit/s) over the last second.
``format_status`` is a pure function of those numbers and a width: it tries renderings from the
most to the least verbose (full names -> the common prefix of the device names dropped -> short
labels and numbers -> the busiest links only, "+N more") and takes the first that fits in
``width - 1`` columns (the last column is left free, so a terminal never wraps the line), cutting
the line as a last resort. ``StatusMeter`` turns the sweep buffers the writer thread handles into
those numbers; it runs in the writer thread, never on the 1 ms sampling thread.

On a terminal the line is redrawn in place (``"\\r" + line + "\\x1b[K"``, the erase clearing the
rest of a longer previous line); elsewhere (a log under systemd) it is printed as one plain line
per second (``status_write``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
from rdmascope.sampler.reader import SweepBuffers

#: Width used when neither COLUMNS nor the stream gives one (a pipe, a log).
DEFAULT_WIDTH = 80
#: ANSI "erase to end of line".
ERASE_EOL = "\x1b[K"


@dataclass(frozen=True)
class LinkRate:
    """Rates of one link over the last status period.

    ``name``: the RDMA device (``"dev/port"`` when the device has several ports) or, for
    ``netdev`` True, the netdev whose kernel statistics tx_bytes/rx_bytes were read.
    ``tx_gbps``/``rx_gbps``: Gb/s (1e9 bit/s), None when unknown (counter unavailable, reset or
    not sampled).
    """

    name: str
    tx_gbps: float | None
    rx_gbps: float | None
    netdev: bool = False


def format_elapsed(seconds: float) -> str:
    """Format ``seconds`` (>= 0) as ``H:MM:SS`` (hours grow past 99: ``123:04:05``)."""
    s = max(0, int(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _common_prefix_strip(names: list[str]) -> list[str]:
    """Drop the letters all of ``names`` (>= 2 distinct) share before their PCI location.

    Predictable names (rdma-core's ``roce``/``ib`` + ``[P<domain>]p<bus>s<slot>f<fn>``,
    systemd's ``en``...): ``rocep1s0f1``, ``roceP2p1s0f1`` -> ``p1s0f1``, ``P2p1s0f1``. Names
    not of that form keep their prefix (``mlx5_0``, ``mlx5_1`` stay: ``0``/``1`` would read as
    numbers).
    """
    uniq = list(dict.fromkeys(names))
    if len(uniq) < 2:
        return names
    common = os.path.commonprefix(uniq)
    n = 0
    while n < len(common) and common[n].isalpha():
        n += 1
    while n > 0 and not all(len(u) > n + 1 and u[n] in "pP" and u[n + 1].isdigit()
                            for u in uniq):
        n -= 1
    return [x[n:] for x in names]


def _cut(label: str, n: int, how: str) -> str:
    """Cut ``label`` to ``n`` characters, ``~`` marking the cut: in the middle, or keep the tail
    or the head."""
    if len(label) <= n:
        return label
    if how == "mid":
        a = n // 2
        return label[:a] + "~" + label[len(label) - (n - 1 - a):]
    if how == "tail":
        return "~" + label[len(label) - n + 1:]
    return label[:n - 1] + "~"


def _labels(links: Sequence[LinkRate], mode: str | int) -> list[str] | None:
    """Labels of ``links`` for a label ``mode``; None when the mode would make two labels equal.

    ``"full"``: the names as given, netdevs marked ``(netdev)``; ``"strip"``: the prefix common
    to the RDMA device names (and, apart, to the netdev names) dropped, netdevs marked ``nd:``;
    an int N: the stripped names cut to N characters (``~`` marks the cut), in the middle, else
    keeping the tail, else the head, whichever first leaves the labels distinct.
    """
    def split(name):
        dev, sep, port = name.partition("/")
        return dev, sep + port

    if mode == "full":
        out = [f"{ln.name}(netdev)" if ln.netdev else ln.name for ln in links]
        return out if len(set(out)) == len(out) else None
    stripped: list[str] = [""] * len(links)
    for is_nd in (False, True):
        idx = [i for i, ln in enumerate(links) if ln.netdev == is_nd]
        parts = [split(links[i].name) for i in idx]
        names = _common_prefix_strip([d for d, _ in parts])
        for i, s, (_, port) in zip(idx, names, parts, strict=True):
            stripped[i] = s + port
    prefix = ["nd:" if ln.netdev else "" for ln in links]
    for how in ("mid", "tail", "head") if isinstance(mode, int) else ("none",):
        out = [p + (_cut(s, mode, how) if isinstance(mode, int) else s)
               for p, s in zip(prefix, stripped, strict=True)]
        if len(set(out)) == len(out):
            return out
    return None


def _num(v: float | None, width: int, decimals: int) -> str:
    return f"{v:{width}.{decimals}f}" if v is not None else "--".rjust(width)


def _entries(links: Sequence[LinkRate], labels: list[str], style: str) -> list[str]:
    """One text per link: ``lab tx  12.34 rx   0.00`` ("long"), ``lab  12.3/0.0  `` ("short":
    tx right- and rx left-aligned in 5 columns, so the numbers stay put from line to line) or
    ``lab 12.3/0.0`` ("tight")."""
    pairs = zip(labels, links, strict=True)
    if style == "long":
        return [f"{lab} tx {_num(ln.tx_gbps, 6, 2)} rx {_num(ln.rx_gbps, 6, 2)}"
                for lab, ln in pairs]
    if style == "short":
        return [f"{lab} {_num(ln.tx_gbps, 5, 1)}/{_num(ln.rx_gbps, 5, 1).strip():<5}"
                for lab, ln in pairs]
    return [f"{lab} {_num(ln.tx_gbps, 0, 1)}/{_num(ln.rx_gbps, 0, 1)}" for lab, ln in pairs]


def _join(head: str, entries: list[str], style: str, hidden: int) -> str:
    if not entries:
        line = head
    elif style == "long":
        line = f"{head} | {' | '.join(entries)} Gb/s"
    else:
        line = f"{head} | tx/rx Gb/s {' '.join(entries)}"
    if hidden:
        line = line.rstrip() + f" +{hidden} more"
    return line.rstrip()


def format_status(elapsed_s: float, sweeps_taken: int, sweeps_missed: int,
                  links: Sequence[LinkRate], width: int = DEFAULT_WIDTH) -> str:
    """Return the status line for ``links``, at most ``width - 1`` characters long (ASCII).

    ``elapsed_s``: seconds since the capture start; ``sweeps_taken``/``sweeps_missed``: the
    schedule's counts so far (every deadline is one or the other, loop.py); rates in Gb/s
    (1e9 bit/s). Renderings, most verbose first; the first that fits wins:

    1. ``0:01:23 sweeps 83012 taken, 3 missed | rocep1s0f1 tx  12.34 rx   0.00 | ... Gb/s``
    2. the same with the letters the device names share before their PCI location dropped
       (``p1s0f1``, ``P2p1s0f1``; netdevs ``nd:p1s0f1np1``), then with the short head
       ``0:01:23 sw 83012 miss 3``
    3. short entries ``| tx/rx Gb/s p1s0f1  12.3/0.0   P2p1s0f1   0.0/198.2`` after the long,
       the short and the tiny head (counts to 3 significant digits, ``sw 3.72M``), then
       unpadded (``p1s0f1 12.3/0.0``); then all that with labels cut to 8, then 5 characters
       (``~`` marks a cut)
    4. only the busiest links (max of tx, rx) that fit, in their given order and with the
       labels they have among all links, then ``+N more``; labels whole or cut to 8 characters
       compete on the number of links shown, labels cut to 5 come last
    5. the busiest link alone with the tiny head, its label cut to 8 then 5 characters:
       ``0:01:23 sw 83M miss 31.2k | P2p1s0f1 0.0/198.2 Gb/s +3`` (fits 60 columns whatever
       the counts: the busiest link's rate stays visible down to 60 columns)
    6. no rates: ``0:01:23 sw 83012 miss 3 | +2 links``, then with the tiny head, then that
       cut to ``width - 1`` characters.

    Elapsed time and both sweep counts are in every rendering down to about 25 columns.
    ``width`` < 2 is treated as 2.
    """
    limit = max(1, int(width) - 1)
    elapsed = format_elapsed(elapsed_s)
    head_long = f"{elapsed} sweeps {sweeps_taken} taken, {sweeps_missed} missed"
    head_short = f"{elapsed} sw {sweeps_taken} miss {sweeps_missed}"
    head_tiny = f"{elapsed} sw {_si(sweeps_taken)} miss {_si(sweeps_missed)}"
    links = list(links)
    compact = [(head_short, "short"), (head_tiny, "short"), (head_short, "tight"),
               (head_tiny, "tight")]
    if links:
        label_sets = {mode: _labels(links, mode) for mode in ("full", "strip", 8, 5)}
        modes = [m for m in ("strip", 8, 5) if label_sets[m] is not None]
        texts: dict[tuple, list[str]] = {}

        def entries(mode, style):
            if (mode, style) not in texts:
                texts[mode, style] = _entries(links, label_sets[mode], style)
            return texts[mode, style]

        plans = [(head_long, "long", "full"), (head_long, "long", "strip"),
                 (head_short, "long", "strip")]
        plans += [(h, style, m) for m in modes
                  for h, style in [(head_long, "short"), *compact]]
        for head, style, mode in plans:
            if label_sets[mode] is not None:
                line = _join(head, entries(mode, style), style, 0)
                if len(line) <= limit:
                    return line
        # Not all fit: the busiest links that do, in their given order, then "+N more"; each
        # with its label among all the links, so a label does not change when others hide.
        # Labels whole or cut to 8 compete on the number of links shown; cut to 5 comes last.
        order = sorted(range(len(links)),
                       key=lambda i: -max(links[i].tx_gbps or 0.0, links[i].rx_gbps or 0.0))
        for group in ([m for m in modes if m != 5], [m for m in modes if m == 5]):
            for k in range(len(links) - 1, 0, -1):
                keep = sorted(order[:k])
                more = len(f" +{len(links) - k} more")
                for mode in group:
                    for head, style in compact:
                        e = entries(mode, style)
                        # the length of _join(...) without building it: entries joined by
                        # one space, the last one's padding dropped
                        n = (len(head) + len(" | tx/rx Gb/s ") + sum(len(e[i]) for i in keep)
                             + k - 1 - (len(e[keep[-1]]) - len(e[keep[-1]].rstrip())) + more)
                        if n <= limit:
                            return _join(head, [e[i] for i in keep], style, len(links) - k)
        # the last rendering with a rate: the busiest link alone, its label cut to 8 then 5,
        # the tiny head, no "tx/rx" heading: fits 60 columns whatever the counts (issue 10)
        top = order[0]
        ln = links[top]
        more = f" +{len(links) - 1}" if len(links) > 1 else ""
        for mode in (8, 5):
            if label_sets[mode] is None:
                continue
            line = (f"{head_tiny} | {label_sets[mode][top]} {_num(ln.tx_gbps, 0, 1)}/"
                    f"{_num(ln.rx_gbps, 0, 1)} Gb/s{more}")
            if len(line) <= limit:
                return line
    tail = f" | +{len(links)} link{'s' if len(links) > 1 else ''}" if links else ""
    for line in (head_long + tail, head_short + tail, head_tiny + tail, head_short, head_tiny):
        if len(line) <= limit:
            return line
    return head_tiny[:limit]


def _si(n: int) -> str:
    """``n`` exact below 10,000, else to 3 significant digits with k/M/G (83012 -> 83k)."""
    if n < 10_000:
        return str(n)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return str(n)


def status_width(stream: TextIO | None = None) -> int:
    """Return the columns available to the status line on ``stream`` (default stderr).

    ``COLUMNS`` when set to a positive integer, else the terminal size of ``stream`` when it is
    a terminal, else ``shutil.get_terminal_size`` (which asks stdout) falling back to
    ``DEFAULT_WIDTH`` (80).
    """
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if stream is not None:
        try:
            if stream.isatty():
                return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
        except (AttributeError, ValueError, OSError):
            pass
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns or DEFAULT_WIDTH


def status_write(out: TextIO, line: str, tty: bool) -> None:
    """Write ``line`` to ``out``: redrawn in place on a terminal, else as one plain line."""
    if tty:  # the line itself is escaped; the redraw sequence is rdmascope's own
        from rdmascope.textsafe import escape_controls, unfiltered

        raw = unfiltered(out)
        raw.write("\r" + escape_controls(line) + ERASE_EOL)
        raw.flush()
        return
    out.write(line + "\n")
    out.flush()


class StatusMeter:
    """Derive the status numbers from the sweep buffers handed to the writer thread.

    ``counters``: the capture's counter descriptors (manifest["counters"]); only those with a
    ``bytes_per_unit`` and a ``direction`` give rates (port_xmit_data/port_rcv_data, netdev
    tx_bytes/rx_bytes). ``start_ns``: the capture start (CLOCK_MONOTONIC ns, the sweep clock).
    ``period_s``: at most one line per period.

    Rates: (bytes now - bytes at the previous line) * 8 / (t_before now - t_before then) over
    each counter's last valid reading, in Gb/s (bits per ns); None for a counter without a valid
    reading in either, or one that went backwards (reset). Sweeps: ``taken`` counts the sweeps
    in the buffers, ``missed`` = last sweep index + 1 - taken (every deadline up to the last
    sweep is taken or missed once, loop.py).
    """

    def __init__(self, counters: list[dict[str, Any]], start_ns: int, *,
                 period_s: float = 1.0,
                 clock: Callable[[], int] = time.perf_counter_ns):
        self.n = len(counters)
        self.start_ns = int(start_ns)
        self.period_ns = int(period_s * 1e9)
        self.clock = clock
        self.taken = 0
        self.last_sweep = -1
        self.lines = 0  # status lines returned so far
        self._prev: dict[int, tuple[int, int]] = {}
        self._last_line_ns: int | None = None
        # link key -> (name, netdev); counter index -> (link key, "tx"/"rx", bytes per unit)
        self.links: dict[tuple, tuple[str, bool]] = {}
        self.rate_counters: dict[int, tuple[tuple, str, int]] = {}
        ports: dict[str, set] = {}
        for c in counters:
            if c.get("source") != "netdev":
                ports.setdefault(c["device"], set()).add(c.get("port"))
        for i, c in enumerate(counters):
            bpu, direction = c.get("bytes_per_unit"), c.get("direction")
            if bpu is None or direction not in ("tx", "rx"):
                continue
            if c.get("source") == "netdev":
                key = ("netdev", c.get("netdev"))
                name, nd = str(c.get("netdev")), True
            else:
                key = ("ib", c["device"], c.get("port"))
                multi = len(ports.get(c["device"], ())) > 1
                name = f"{c['device']}/{c.get('port')}" if multi else c["device"]
                nd = False
            self.links.setdefault(key, (name, nd))
            self.rate_counters[i] = (key, direction, int(bpu))

    def _latest(self, buf: SweepBuffers) -> dict[int, tuple[int, int]]:
        """Last valid (t_before_ns, bytes) of each rate counter in ``buf`` (a buffer with
        counters added after the start: the first ``self.n`` of each sweep)."""
        w = buf.width(self.n)
        vals = np.frombuffer(buf.value, dtype=np.uint64).reshape(-1, w)[:, :self.n]
        st = np.frombuffer(buf.status, dtype=np.uint8).reshape(-1, w)[:, :self.n]
        tb = np.frombuffer(buf.t_before_ns, dtype=np.int64).reshape(-1, w)[:, :self.n]
        latest = {}
        for i, (_key, _d, bpu) in self.rate_counters.items():
            ok = np.flatnonzero(st[:, i] == 0)
            if ok.size:
                j = ok[-1]
                latest[i] = (int(tb[j, i]), int(vals[j, i]) * bpu)
        return latest

    def update(self, buf: SweepBuffers, now_ns: int | None = None
               ) -> tuple[float, int, int, list[LinkRate]] | None:
        """Account for ``buf``; once per period return ``(elapsed_s, taken, missed, links)``.

        The first buffer only sets the reference readings (no rates yet) and returns None; so
        does every buffer until ``period_s`` has passed since the last returned line.
        """
        nsw = len(buf.sweep_start_ns)
        if nsw:
            self.taken += nsw
            self.last_sweep = int(buf.sweep[-1])
        now = self.clock() if now_ns is None else int(now_ns)
        if self._last_line_ns is not None and now - self._last_line_ns < self.period_ns:
            return None
        if not len(buf):
            return None
        latest = self._latest(buf)
        first = self._last_line_ns is None
        prev, self._prev = self._prev, {**self._prev, **latest}
        self._last_line_ns = now
        if first:
            return None
        rates: dict[tuple, dict[str, float | None]] = {k: {"tx": None, "rx": None}
                                                       for k in self.links}
        unknown: set[tuple] = set()
        for i, (key, direction, _bpu) in self.rate_counters.items():
            a, b = prev.get(i), latest.get(i)
            if a is not None and b is not None and b[0] > a[0] and b[1] >= a[1]:
                # several counters of one link and direction (irdma: IPv4 + IPv6) add up
                r = (b[1] - a[1]) * 8 / (b[0] - a[0])
                rates[key][direction] = (rates[key][direction] or 0.0) + r
            else:
                unknown.add((key, direction))
        for key, direction in unknown:  # one part unknown: the sum is unknown, never partial
            rates[key][direction] = None
        links = [LinkRate(name, rates[k]["tx"], rates[k]["rx"], nd)
                 for k, (name, nd) in self.links.items()]
        missed = self.last_sweep + 1 - self.taken
        self.lines += 1
        return (now - self.start_ns) / 1e9, self.taken, missed, links
