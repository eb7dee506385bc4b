"""A live sysfs-like tree whose truth is exact: counters computed from known rates at each update.

``RateWriter`` is a thread that, every ``period_s``, writes each of its counter files in place
(``faketree.write_in_place``: same inode, as a live kernel file changes) with
``value(t) = v0 + integral of rate`` at the instant of the write, ``t`` on CLOCK_MONOTONIC (the
recorder's clock). Rates are piecewise constant (``set_rate``), so the bytes between any two
instants are known exactly (``units_between``), whatever the recorder read and when.

Faults the tests inject around it (see tests/faults/): a read that hangs (the LD_PRELOAD shim
``failread.c``, ``RDMASCOPE_HANG_*``), a device that appears after the start or vanishes (build or
remove its folder while the writer runs: a file that is gone is skipped), a renamed netdev.
"""

from __future__ import annotations

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

    def start(self) -> None:
        self.t0_ns = time.monotonic_ns()
        for p, (v0, r) in self._init.items():
            self._pieces[p] = [(self.t0_ns, float(v0), r)]
            self._write(p, v0)
        super().start()

    def add(self, path: str | os.PathLike, v0: int, units_per_s: float) -> None:
        """Start writing one more counter (a device that appeared) from now."""
        with self._lock:
            self._pieces[str(path)] = [(time.monotonic_ns(), float(v0), float(units_per_s))]

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

    def _write(self, p: str, v: int) -> None:
        try:
            write_in_place(p, v)
            self.writes += 1
        except OSError:
            pass  # the device vanished on purpose

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
