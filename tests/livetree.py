"""A live sysfs-like tree whose truth is exact: counters computed from known rates at each update.

``RateWriter`` is a thread that, every ``period_s``, writes each of its counter files in place
(``faketree.write_in_place``: same inode, as a live kernel file changes) with
``value(t) = v0 + integral of rate`` at the instant of the write, ``t`` on CLOCK_MONOTONIC (the
recorder's clock). Rates are piecewise constant (``set_rate``), so the bytes between any two
instants are known exactly (``units_between``), whatever the recorder read and when.

Every write is logged with the instants its call began and returned (``writes``), so a reading
taken in the bracket [t_before, t_after] can be checked against exactly the values that were in
the file then (``possible``, ``check_readings``): no band a busy machine could push a late write
out of, only what the file held while the recorder read it.

Faults the tests inject around it (see tests/faults/): a read that hangs (the LD_PRELOAD shim
``failread.c``, ``RDMASCOPE_HANG_*``), a device that appears after the start or vanishes (build or
remove its folder while the writer runs: a file that is gone is skipped), a renamed netdev.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from pathlib import Path

from rdmascope.sampler.faketree import write_in_place


class RateWriter(threading.Thread):
    """Write counters from known rates until ``stop()``.

    ``rates``: {path: (v0, units_per_s)}; a counter's value is ``v0`` at ``start()`` and grows at
    its rate (units per second; bytes for netdev statistics, 4-byte units for port_xmit_data).
    """

    def __init__(self, rates: dict[str | os.PathLike, tuple[int, float]], period_s: float = 0.001):
        super().__init__(daemon=True)
        self.period_s = period_s
        self._lock = threading.Lock()
        # per path: list of (t_ns, value at t_ns, rate from t_ns on)
        self._pieces: dict[str, list[tuple[int, float, float]]] = {}
        self._init = {str(p): (int(v0), float(r)) for p, (v0, r) in rates.items()}
        self._halt = threading.Event()
        self.t0_ns: int | None = None
        self.writes = 0
        # per path: the writes as (call began ns, call returned ns, value), in order
        self.log: dict[str, list[tuple[int, int, int]]] = {}

    def start(self) -> None:
        self.t0_ns = time.monotonic_ns()
        for p, (v0, r) in self._init.items():
            self._pieces[p] = [(self.t0_ns, float(v0), r)]
            self._write(p, v0)
        super().start()

    def add(self, path: str | os.PathLike, v0: int, units_per_s: float) -> None:
        """Start writing one more counter (a device that appeared) from now."""
        p = str(path)
        try:  # what the file held before the writer took it over (built before the add)
            self.log.setdefault(p, []).append((0, 0, int(Path(p).read_text())))
        except (OSError, ValueError):
            pass
        with self._lock:
            self._pieces[p] = [(time.monotonic_ns(), float(v0), float(units_per_s))]

    def set_rate(self, path: str | os.PathLike, units_per_s: float) -> None:
        """From now on, ``path`` grows at ``units_per_s`` (its value stays continuous)."""
        p = str(path)
        with self._lock:
            now = time.monotonic_ns()
            self._pieces[p].append((now, self._value(p, now), float(units_per_s)))

    def _value(self, p: str, t_ns: int) -> float:
        pieces = self._pieces[p]
        t, v, r = pieces[0]
        for piece in pieces:
            if piece[0] <= t_ns:
                t, v, r = piece
        return v + r * max(0, t_ns - t) / 1e9

    def value_at(self, path: str | os.PathLike, t_ns: int) -> int:
        """The counter's value at ``t_ns`` (CLOCK_MONOTONIC), as written (whole units)."""
        with self._lock:
            return int(self._value(str(path), t_ns))

    def units_between(self, path: str | os.PathLike, a_ns: int, b_ns: int) -> float:
        """Exact units counted in [a_ns, b_ns) (the integral of the rate)."""
        with self._lock:
            return self._value(str(path), b_ns) - self._value(str(path), a_ns)

    def possible(self, path: str | os.PathLike, t_before_ns: int, t_after_ns: int
                 ) -> tuple[int, int]:
        """(lowest, highest) value a read of ``path`` in [t_before_ns, t_after_ns] can return.

        Lowest: the value of the last write that had returned before the read began (any earlier
        one was overwritten by it). Highest: the value of the last write that had begun by the
        time the read returned. From the writer's own logged write times, not from its period.
        """
        log = self.log[str(path)]
        ends = [e for _, e, _ in log]
        begins = [b for b, _, _ in log]
        i = bisect.bisect_right(ends, t_before_ns) - 1
        j = bisect.bisect_right(begins, t_after_ns) - 1
        return log[max(i, 0)][2], log[max(j, 0)][2]

    def check_readings(self, path: str | os.PathLike, readings) -> list[str]:
        """Readings (a frame: value, t_before_ns, read_duration_ns) whose value was not in the
        file during its read bracket, described; [] when every one was."""
        bad = []
        for v, tb, d in zip(readings["value"].astype("int64"), readings["t_before_ns"],
                            readings["read_duration_ns"].astype("int64"), strict=True):
            lo, hi = self.possible(path, int(tb), int(tb) + int(d))
            if not lo <= int(v) <= hi:
                bad.append(f"read {int(v)} in [{int(tb)}, {int(tb) + int(d)}] ns; the file held "
                           f"{lo} .. {hi} then")
        return bad

    def _write(self, p: str, v: int) -> None:
        try:
            t0 = time.monotonic_ns()
            write_in_place(p, v)
            self.log.setdefault(p, []).append((t0, time.monotonic_ns(), int(v)))
            self.writes += 1
        except OSError:
            pass  # the device vanished on purpose

    def rename(self, old_dir: str | os.PathLike, new_dir: str | os.PathLike) -> None:
        """Rename a directory of the tree (``ip link set eth0 name ens1`` renames
        ``class/net/eth0``): its files keep their inodes and go on growing under the new path
        (the truth of each is then looked up by its new path)."""
        a, b = str(old_dir).rstrip("/") + "/", str(new_dir).rstrip("/") + "/"
        with self._lock:
            os.rename(old_dir, new_dir)
            for d in (self._pieces, self.log):
                for p in [p for p in d if p.startswith(a)]:
                    d[b + p[len(a):]] = d.pop(p)

    def run(self) -> None:
        while not self._halt.wait(self.period_s):
            now = time.monotonic_ns()
            with self._lock:
                vals = [(p, int(self._value(p, now))) for p in self._pieces]
            for p, v in vals:
                self._write(p, v)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def port_counter(root: Path, device: str, name: str = "port_xmit_data", port: int = 1) -> Path:
    """The path of a port counter in a ``faketree`` tree."""
    return Path(root) / "class" / "infiniband" / device / "ports" / str(port) / "counters" / name


def netdev_stat(root: Path, netdev: str, stat: str = "tx_bytes") -> Path:
    """The path of a netdev statistic in a ``faketree`` tree."""
    return Path(root) / "class" / "net" / netdev / "statistics" / stat
