"""The compiled sweep: ``_csweep`` (C, optional) driven by the Python reader's policy.

``rdmascope record`` runs its sweeps in one of two implementations that write identical rows:

- **compiled** (``rdmascope.sampler._csweep``, built from ``sampler/_csweep.c`` at install when a C
  compiler is there): one call waits for each absolute deadline and sweeps, for as many sweeps as
  go by without anything to decide, with the GIL released and no Python object per reading;
- **python** (``CounterReader.read_sweep`` under ``loop.run_schedule``): the fallback, used when
  the extension is not built or ``RDMASCOPE_NO_CEXT=1`` is set.

The decisions stay in Python either way (``CounterReader``): the compiled call returns before a
sweep that has a liveness check or the end of a back-off due (the reader runs them, then the
compiled code takes that sweep), and right after a sweep in which a read failed or a counter
changed state;
``CompiledSweeper.run`` then applies the same reports, back-offs and closes as ``read_sweep``
(the shared ``CounterReader._unparsable`` / ``_read_failed`` / ``_recovered``), before the next
sweep. Values, statuses, sweep numbers and events are those of the Python path; only the
timestamps differ (they are times).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from array import array
from types import ModuleType

from rdmascope.sampler.reader import READ_SIZE, CounterReader, SweepBuffers

from rdmascope.capture import STATUS_OK

#: Set to anything but "" or "0" to run the pure-Python sweep even when the extension is built.
ENV_DISABLE = "RDMASCOPE_NO_CEXT"
#: The compiled loop comes back to Python at least this often (ns) so ``should_stop`` runs (a stop
#: request waits at most this long plus one interval; the sampling runs in its own thread, so a
#: signal no longer interrupts the compiled wait itself).
POLL_NS = 50_000_000
#: Rows held by one compiled call at most (capacity in sweeps = this // counters).
MAX_ROWS = 1 << 18


def load() -> tuple[ModuleType | None, str]:
    """Return ``(module, description)``: the ``_csweep`` module (None for the Python sweep) and
    one line saying which sweep runs and why (stored in the manifest's ``extra.sweep`` and the
    audit, printed by ``rdmascope devices``)."""
    flag = os.environ.get(ENV_DISABLE, "")
    if flag not in ("", "0"):
        return None, f"python (compiled sweep disabled: {ENV_DISABLE}={flag})"
    try:
        _csweep = importlib.import_module("rdmascope.sampler._csweep")
    except ImportError as exc:
        return None, f"python (compiled sweep not built: {exc})"
    from rdmascope import capture

    for name in ("STATUS_OK", "STATUS_READ_ERROR", "STATUS_PARSE_ERROR", "STATUS_MISSING"):
        if getattr(_csweep, name, None) != getattr(capture, name):  # a stale build
            return None, (f"python (compiled sweep out of date: its {name} is not the capture "
                          "format's; reinstall rdmascope)")
    if getattr(_csweep, "READ_SIZE", None) != READ_SIZE:
        return None, "python (compiled sweep out of date: READ_SIZE differs; reinstall rdmascope)"
    return _csweep, "compiled (rdmascope.sampler._csweep)"


def buf_columns(buf: SweepBuffers) -> tuple[array, ...]:
    """The row columns of ``buf`` in the order the compiled sweep fills them."""
    return (buf.counter_id, buf.sweep, buf.t_before_ns, buf.read_duration_ns, buf.value,
            buf.status)


def describe() -> str:
    """The one-line description of the sweep ``rdmascope record`` would run now."""
    return load()[1]


class CompiledSweeper:
    """Run ``_csweep.run`` for a ``CounterReader`` and apply its outcome.

    ``capacity_sweeps``: sweeps one call may store at most (it returns ``R_FULL`` when full;
    bounded by ``MAX_ROWS``). Buffers are allocated once and reused; rows are appended to the
    caller's ``SweepBuffers``, so the writer thread sees the same batches as with the Python
    sweep.
    """

    def __init__(self, reader: CounterReader, module: ModuleType, capacity_sweeps: int):
        self.reader = reader
        self.m = module
        n = self.n = len(reader.paths)
        cap = self.cap = max(1, min(int(capacity_sweeps), MAX_ROWS // max(n, 1)))
        rows = n * cap
        self.cid = array("H", bytes(2 * rows))
        self.sweep = array("q", bytes(8 * rows))
        self.t_before = array("q", bytes(8 * rows))
        self.dur = array("I", bytes(4 * rows))
        self.value = array("Q", bytes(8 * rows))
        self.status = array("B", bytes(rows))
        self.starts = array("q", bytes(8 * cap))
        self.skipped = array("q", bytes(8 * n))
        self.errnos = array("i", bytes(4 * n))
        self.t1s = array("q", bytes(8 * n))
        self.raw = bytearray(READ_SIZE * n)
        self.rawlen = array("i", bytes(4 * n))
        self._zero_n = bytes(8 * n)
        # byte views of the row columns, in the order of buf_columns(), with item sizes
        self._views = [(memoryview(a).cast("B"), a.itemsize) for a in
                       (self.cid, self.sweep, self.t_before, self.dur, self.value, self.status)]
        self._starts_b = memoryview(self.starts).cast("B")
        self._never = array("q", [(1 << 63) - 1])  # "no check due" for the sweep after checks
        #: rows stored so far by the running call (builds with ``HAS_PROGRESS``): what
        #: ``salvage`` takes when a read hangs and the recorder stops without it
        self.progress = array("q", [0])
        self._has_progress = bool(getattr(module, "HAS_PROGRESS", 0))
        #: taken by the sampling thread around each call's hand-over of rows, and by the
        #: recorder when it stops without a call whose read hangs (``abandon``)
        self.lock = threading.Lock()
        self.in_call = False
        self.abandoned = False

    def run(self, k: int, buf: SweepBuffers, *, start_ns: int, interval_ns: int,
            n_deadlines: int | None, until_ns: int, spin_ns: int, stats) -> int:
        """Sweep from deadline ``k`` until ``until_ns`` (after at least one sweep), the last
        deadline, a sweep needing a decision, or a signal; append the rows to ``buf``.

        Updates ``stats`` (``loop.ScheduleStats``: taken, missed, next_k) and the reader (reads,
        skipped reads, events, back-offs). When liveness checks or the end of a back-off are due
        at a sweep, the call stops before it, the reader runs them (``run_checks``, as
        ``read_sweep`` would at that sweep) and that sweep is then taken by the compiled code, the
        missed-deadline rule applied again first: waiting for the GIL never makes a sweep late.
        Returns the module's reason code (never ``R_CHECK``).
        """
        kw = {"start_ns": start_ns, "interval_ns": interval_ns, "n_deadlines": n_deadlines,
              "spin_ns": spin_ns, "stats": stats}
        reason = self._call(k, buf, until_ns=until_ns, check_at=None, **kw)
        if reason != self.m.R_CHECK:
            return reason
        self.reader.run_checks(time.perf_counter_ns())
        return self._call(stats.next_k, buf, until_ns=0, check_at=self._never, **kw)

    def _call(self, k: int, buf: SweepBuffers, *, start_ns: int, interval_ns: int,
              n_deadlines: int | None, until_ns: int, spin_ns: int, stats,
              check_at: array | None) -> int:
        """One call of ``_csweep.run`` (``check_at`` None: the reader's next check)."""
        r = self.reader
        fds = array("i", r.fds)
        state = array("B", r.state)
        paused = -2 in r.fds
        if check_at is None:
            check_at = r.check_at
            with r._check_lock:
                check_at[0] = min(r.next_check_ns)
        with self.lock:
            if self.abandoned:
                return self.m.R_END
            self.in_call = True
        reason, k2, taken, missed, stored, n_bad = self.m.run(
            fds, state, self.skipped, self.cid, self.sweep, self.t_before, self.dur,
            self.value, self.status, self.starts, self.errnos, self.t1s, self.raw, self.rawlen,
            start_ns, interval_ns, k, -1 if n_deadlines is None else n_deadlines, until_ns,
            check_at, spin_ns, *((self.progress,) if self._has_progress else ()))
        n = self.n
        with self.lock:
            self.in_call = False
            if self.abandoned:  # the recorder stopped without this call and took its rows
                return self.m.R_END
            if stored:
                rows = stored * n
                for dst, (src, size) in zip(buf_columns(buf), self._views, strict=True):
                    dst.frombytes(src[:rows * size])
                buf.sweep_start_ns.frombytes(self._starts_b[:8 * stored])
                buf.n_bad += n_bad
                r.n_reads += taken * n
        if stored:
            self._slow_reads(stored * n)
        if paused:
            sk = r.skipped
            for i, c in enumerate(self.skipped):
                if c:
                    sk[i] += c
            self.skipped[:] = array("q", self._zero_n)
        stats.taken += taken
        stats.missed += missed
        stats.next_k = k2
        if reason == self.m.R_ATTENTION:
            self._decide(fds, (stored - 1) * n)
        return reason

    def _slow_reads(self, rows: int) -> None:
        """Report the reads of this call slower than the reader's ``slow_ns`` (one vector max
        per call; the rows are looked at only when there is one)."""
        import numpy as np

        dur = np.frombuffer(self.dur, dtype=np.uint32, count=rows)
        if int(dur.max()) <= self.reader.slow_ns:
            return
        for j in np.flatnonzero(dur > self.reader.slow_ns):
            j = int(j)
            self.reader.slow_read(int(self.cid[j]), int(self.t_before[j]) + int(dur[j]),
                                  int(dur[j]))

    def abandon(self) -> tuple[array, ...] | None:
        """Stop taking this sweeper's rows (the recorder stops while a read of the running call
        hangs) and return the rows that call has stored so far (columns as ``buf_columns``,
        plus the sweep starts; a sweep cut short included); None when no call is running or
        the build cannot tell (no ``HAS_PROGRESS``). Call with ``lock`` held."""
        self.abandoned = True
        if not self.in_call or not self._has_progress:
            return None
        rows = int(self.progress[0])
        n_sweeps = -(-rows // self.n)
        cols = tuple(array(a.typecode, a[:rows]) for a in
                     (self.cid, self.sweep, self.t_before, self.dur, self.value, self.status))
        return (*cols, array("q", self.starts[:n_sweeps]))

    def _decide(self, fds: array, base: int) -> None:
        """Apply the reader's policy to the last sweep's readings, counter by counter, as
        ``read_sweep`` does (same calls, same order, same messages)."""
        r = self.reader
        status = self.status
        for i in range(self.n):
            if fds[i] < 0:
                continue  # not read: missing or backing off (nothing new to decide)
            st = status[base + i]
            t1 = self.t1s[i]
            if st != STATUS_OK:
                e = self.errnos[i]
                if e:
                    r._read_failed(i, t1, e, os.strerror(e))
                else:
                    off = i * READ_SIZE
                    r._unparsable(i, t1, bytes(self.raw[off:off + self.rawlen[i]]))
            elif r.state[i] != STATUS_OK:
                r._recovered(i, t1)
