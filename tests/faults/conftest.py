"""Helpers of the fault suite: build a sysfs-like tree in tmp_path, run ``rdmascope record``.

The recorder always runs as a real subprocess (``python -m rdmascope record``), as in production,
so a ``kill -9`` or a full disk hits the real process. ``fast_roll`` runs it through a two-line
wrapper that shortens ``ROLL_INTERVAL_S`` (60 s) so that short runs also exercise the roll of the
live segment into Parquet (the same code path, just more often).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rdmascope.sampler.faketree import MLX5_COUNTERS, build_device, write_in_place

#: (device, PCI address, netdev) of the two-device Spark-like tree the faults run against.
DEVICES = (("mlx5_0", "0000:01:00.0", "enp1s0f0np0"),
           ("mlx5_1", "0000:01:00.1", "enp1s0f1np1"))
#: Counters of a port without the extended set (no unicast/multicast files): width unknown,
#: so the analysis treats the data counters as possibly 32-bit (saturating at 2^32 - 1).
NARROW_COUNTERS = tuple(c for c in MLX5_COUNTERS if not c.startswith(("unicast", "multicast")))

# the writer thread (sampler.writer_thread) is the one that rolls: its module's name is patched
_ROLL_WRAPPER = ("import sys; import rdmascope.sampler.writer_thread as w; "
                 "w.ROLL_INTERVAL_S = float(sys.argv.pop(1)); "
                 "from rdmascope.cli import main; main(prog_name='rdmascope')")


@dataclass
class Tree:
    """A sysfs-like tree: ``root`` is what ``--sysfs-root`` gets."""

    root: Path
    devices: tuple = DEVICES
    narrow: set = field(default_factory=set)

    def counter(self, device: str, name: str = "port_xmit_data", port: int = 1) -> Path:
        return self.root / "class" / "infiniband" / device / "ports" / str(port) / "counters" / name

    def device_dir(self, device: str) -> Path:
        return self.root / "class" / "infiniband" / device

    def set(self, device: str, name: str, value: int | str, port: int = 1) -> None:
        """Write a counter value in place (an int is right-aligned like a live u64 file)."""
        write_in_place(self.counter(device, name, port), value)

    def add_device(self, device: str, *, start_value: int = 1000) -> None:
        """(Re)create one of ``devices`` (e.g. after it vanished)."""
        for name, pci, nd in self.devices:
            if name == device:
                build_device(self.root, name, pci=pci, netdev=nd, start_value=start_value,
                             counters=NARROW_COUNTERS if name in self.narrow else MLX5_COUNTERS)


def make_tree(root: Path, *, devices=DEVICES, narrow=(), start_value: int = 1000) -> Tree:
    """Build the tree under ``root``; devices named in ``narrow`` lack the extended counter set."""
    t = Tree(Path(root), tuple(devices), set(narrow))
    for name, _pci, _nd in devices:
        t.add_device(name, start_value=start_value)
    return t


class Ticker(threading.Thread):
    """Advance data counters in place every ``period_s`` (like traffic), until stopped.

    ``step[(device, name)]`` units are added per tick; a device whose files are gone is skipped
    silently (the test removes it on purpose). ``hold`` pauses one counter (the test writes it).
    """

    def __init__(self, tree: Tree, step: dict[tuple[str, str], int], period_s: float = 0.002):
        super().__init__(daemon=True)
        self.tree, self.step, self.period_s = tree, dict(step), period_s
        self.value = {k: 1000 + 1 for k in step}
        self.hold: set[tuple[str, str]] = set()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.period_s):
            for k, s in self.step.items():
                if k in self.hold:
                    continue
                self.value[k] += s
                try:
                    self.tree.set(k[0], k[1], self.value[k])
                except OSError:
                    pass

    def stop(self) -> None:
        self._halt.set()
        self.join()


class Recorder:
    """One ``rdmascope record`` subprocess writing ``out``; stdout/stderr go to files."""

    def __init__(self, out: Path, sysfs_root: Path, *args: str, fast_roll: float | None = None,
                 prefix: list[str] | None = None, cwd: Path | None = None, env=None,
                 logdir: Path | None = None):
        self.out = Path(out)
        logdir = Path(logdir) if logdir is not None else self.out.parent
        self.stdout_path = logdir / f"{self.out.name}.stdout"
        self.stderr_path = logdir / f"{self.out.name}.stderr"
        head = [sys.executable, "-m", "rdmascope"] if fast_roll is None else \
            [sys.executable, "-c", _ROLL_WRAPPER, str(fast_roll)]
        # --no-status unless the test asks for the status line: both on one command line are
        # refused (exit 2), no longer the last one silently winning
        quiet = [] if "--status" in args else ["--no-status"]
        cmd = [*(prefix or []), *head, "record", "-o", str(out), "--sysfs-root", str(sysfs_root),
               *quiet, *args]
        self.cmd = cmd
        with open(self.stdout_path, "wb") as so, open(self.stderr_path, "wb") as se:
            self.proc = subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                         cwd=cwd, env=env)
        self.t_spawn = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"recorder did not stop within {timeout} s; stderr:\n"
                                 f"{self.stderr}") from None

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition") -> None:
        """Poll ``predicate()`` every 10 ms; fail (with the recorder's stderr) on timeout/exit."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"recorder exited ({self.proc.returncode}) before {what}; "
                                     f"stderr:\n{self.stderr}")
            time.sleep(0.01)
        self.kill()
        raise AssertionError(f"timed out waiting for {what}; stderr:\n{self.stderr}")

    def wait_manifest(self, timeout: float = 30.0) -> None:
        """Wait until the capture exists (its manifest is written)."""
        self.wait_for(lambda: (self.out / "manifest.json").is_file(), timeout, "the manifest")

    def wait_sampling(self, timeout: float = 30.0) -> None:
        """Wait until readings reach the disk (the manifest's real start record is written first)."""
        def has_rows():
            return any(p.stat().st_size > 0 for p in self.out.glob("live-*.arrow")) or \
                any((self.out / "segments").glob("seg-*.parquet"))
        self.wait_for(has_rows, timeout, "the first readings on disk")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def manifest(out: Path) -> dict:
    return json.loads((Path(out) / "manifest.json").read_text())


def inspect_json(out: Path) -> dict:
    """Run ``rdmascope inspect --json`` in-process (click runner); fail on a non-zero exit."""
    from click.testing import CliRunner

    from rdmascope.cli import main
    res = CliRunner().invoke(main, ["inspect", "--json", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def run_cli(*args: str):
    """Run an ``rdmascope`` command in-process; return the click result (exit code, output)."""
    from click.testing import CliRunner

    from rdmascope.cli import main
    return CliRunner().invoke(main, [str(a) for a in args])


def busy_loops(n: int) -> list[subprocess.Popen]:
    """Start ``n`` pure busy-loop processes (CPU load)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.fixture
def tree(tmp_path) -> Tree:
    return make_tree(tmp_path / "sys")


def can_mount_tmpfs(where: Path) -> str | None:
    """Return None if a tmpfs can be mounted at ``where`` (as root), else the reason it cannot."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if shutil.which("mount") is None:
        return "no mount command"
    return None


@pytest.fixture
def world_dir():
    """A directory under /tmp that an unprivileged user can traverse (pytest's tmp_path is 0700)."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="rdmascope-faults-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for dirpath, _dirnames, _files in os.walk(d):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(d, ignore_errors=True)


def drop_privileges_prefix() -> tuple[list[str], int]:
    """Return (command prefix running as ``nobody``, its uid); as a non-root user: ([], own uid).

    Skips the test when root cannot drop privileges here (no setpriv).
    """
    if os.geteuid() != 0:
        return [], os.getuid()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not available to run the recorder as an unprivileged user")
    import pwd
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no 'nobody' user")
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    reason = _unprivileged_cannot_run(prefix)
    if reason:
        pytest.skip(reason)
    return prefix, uid


_UNPRIV_PROBE: dict[tuple[str, ...], str | None] = {}


def _unprivileged_cannot_run(prefix: list[str]) -> str | None:
    """Return why ``prefix + python -m rdmascope`` cannot run here, or None if it can.

    The recorder runs as ``nobody`` from this checkout's interpreter and sources: a clone under a
    directory that only its owner may enter (``mktemp -d``, ``/root``: mode 0700) is out of that
    user's reach, which is a property of where the tests run, not a fault of the recorder.
    Probed once per session by really starting the interpreter as that user.
    """
    key = tuple(prefix)
    if key not in _UNPRIV_PROBE:
        cmd = [*prefix, sys.executable, "-c", "import rdmascope.sampler.daemon"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            err = (r.stderr.strip().splitlines() or [""])[-1]
            _UNPRIV_PROBE[key] = None if r.returncode == 0 else (
                f"the unprivileged user cannot run this checkout's rdmascope "
                f"({sys.executable}; a parent directory is probably mode 0700): {err}")
        except (OSError, subprocess.TimeoutExpired) as e:
            _UNPRIV_PROBE[key] = f"cannot start the recorder as an unprivileged user: {e}"
    return _UNPRIV_PROBE[key]


def make_world_readable(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                os.chmod(p, 0o644)


#: A DGX Spark pair: one cable's traffic over two PCI functions (the "twins", sysfs.md).
SPARK_TWINS = (("rocep1s0f1", "0000:01:00.1", "enp1s0f1np1"),
               ("roceP2p1s0f1", "0002:01:00.1", "enP2p1s0f1np1"))

_SHIM_SRC = Path(__file__).with_name("failread.c")


def failread_shim(tmp_path: Path) -> Path:
    """Compile ``failread.c`` (LD_PRELOAD: pread of chosen files fails with a chosen errno).

    Skips the test, saying why, when there is no C compiler or the build fails.
    """
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the LD_PRELOAD read-error shim")
    out = tmp_path / "failread.so"
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(_SHIM_SRC), "-ldl"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot build the LD_PRELOAD read-error shim with {cc}: "
                    f"{res.stderr.strip()[:300]}")
    return out


def shim_env(shim: Path, match: str, err: int, **extra: str) -> dict[str, str]:
    """Environment for a recorder whose reads of files matching ``match`` fail with ``err``."""
    env = dict(os.environ)
    env.update({"LD_PRELOAD": str(shim), "RDMASCOPE_FAIL_MATCH": match,
                "RDMASCOPE_FAIL_ERRNO": str(err), **extra})
    return env


def write_request_log(path: Path, requests: list[tuple[str, int, int, int]]) -> None:
    """Write a native request log on CLOCK_MONOTONIC: (id, send, first token, last token) ns."""
    with open(path, "w") as f:
        for rid, s, a, b in requests:
            f.write(json.dumps({"request_id": rid, "t_send": s / 1e9, "t_first_token": a / 1e9,
                                "t_last_token": b / 1e9, "prompt_tokens": 1000,
                                "output_tokens": 16, "test": "T", "round": 1,
                                "clock": "CLOCK_MONOTONIC"}) + "\n")


class PathTicker(threading.Thread):
    """Advance counter files (any path) in place every ``period_s``: ``step[path]`` per tick.

    ``value[path]`` holds the last value written (the files start at ``start``).
    """

    def __init__(self, step: dict[Path, int], start: int = 1000, period_s: float = 0.002):
        super().__init__(daemon=True)
        self.step, self.period_s = dict(step), period_s
        self.value = {p: start for p in step}
        self._halt = threading.Event()
        for p in step:
            write_in_place(p, start)

    def run(self) -> None:
        while not self._halt.wait(self.period_s):
            for p, s in self.step.items():
                self.value[p] += s
                try:
                    write_in_place(p, self.value[p])
                except OSError:
                    pass

    def stop(self) -> None:
        self._halt.set()
        self.join()
