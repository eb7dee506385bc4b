"""``rdmascope demo``: the whole pipeline on the embedded emulated default, with nothing to configure.

For each link setting (200 Gb/s = both twins, then the emulated 100 Gb/s = first twin only):

1. ``rdmascope simulate serve`` (a separate process) builds an emulated Spark sysfs tree
   on tmpfs and waits;
2. the **real** recorder, ``rdmascope record --netdev-stats``, samples that tree every
   1 ms into ``<outdir>/<link>/`` (a separate process, exactly as on a node);
3. once the recorder writes, the player plays the ``demo`` scenario (P1 then P2, 64 output tokens)
   and writes the request log (``requests.jsonl``) and the model's ground truth (``truth.json``)
   into the capture directory; then the recorder is stopped with SIGINT and the tree removed.

Then ``run_analysis(outdir, runs)`` inspects each capture, writes the HTML report with figures and
prints its headline numbers and where the outputs are.

Output directory: without ``-o`` every run writes a fresh timestamped directory
``./rdmascope-demo/<YYYYmmdd-HHMMSS>/``, so re-running the README's one-line command always works
and never overwrites an earlier result. With ``-o DIR`` the outputs go exactly into DIR and, like
``rdmascope record``, a non-empty DIR is refused unless ``force``, which replaces only an earlier
demo's own outputs there (run directories that are rdmascope captures holding only the demo's files,
a ``report/`` with a ``report.html``, ``summary.txt``) and refuses, naming it, anything else in the
way of the demo's output names (``_check_outdir``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rdmascope import child
from rdmascope.emulator.tree import remove_tree

DEFAULT_OUTDIR = "rdmascope-demo"
LINKS = ("200", "emulated100")
SUMMARY_NAME = "summary.txt"
REPORT_DIR = "report"


class DemoError(Exception):
    """An expected failure of the demo; the message says what happened and what to do."""


@dataclass
class DemoRun:
    """One link setting's outputs."""

    name: str  # link name: "200" | "emulated100"
    capture: Path
    request_log: Path
    truth: Path
    player: str = ""
    recorder_log: str = ""
    extra: dict = field(default_factory=dict)


def _tmpfs_dir() -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    import tempfile
    return Path(tempfile.gettempdir())


# Besides the capture's own files, a demo run directory holds the emulator's ground truth.
_TRUTH_FILES = ("requests.jsonl", "truth.json")


def _demo_run_dir_problem(run: Path) -> str | None:
    """Return why ``run`` is not an earlier demo's run directory (None when it is one)."""
    from rdmascope.capture import FORMAT_NAME, MANIFEST_NAME, foreign_entries

    if run.is_symlink() or not run.is_dir():
        return f"{run}: is not a directory of an earlier demo run"
    manifest = run / MANIFEST_NAME
    try:
        fmt = json.loads(manifest.read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        fmt = None
    if fmt != FORMAT_NAME or manifest.is_symlink():
        return (f"{run}: is not an rdmascope capture (no {MANIFEST_NAME} with format "
                f"{FORMAT_NAME!r}), so not an earlier demo run")
    from .nccl_log import is_witness_dir

    # the NCCL log and Inspector records simulate serve writes beside the truth are its own too
    foreign = [f for f in foreign_entries(run, allowed=_TRUTH_FILES) if not is_witness_dir(f)]
    if foreign:
        return f"{foreign[0]}: is not one of the demo's files"
    return None


def _check_outdir(outdir: Path, force: bool) -> None:
    """Refuse a non-empty ``outdir`` unless ``force``; with it, remove only an earlier demo's outputs.

    The demo's outputs are: each run directory (``200``, ``emulated100``) when it is an rdmascope
    capture (``manifest.json`` with format ``rdmascope-capture``) holding only the capture's and
    the emulator's files, the ``report`` directory when it holds a ``report.html``, and the
    ``summary.txt`` file. Anything else under those names is checked first and refused: nothing is
    removed then. Other entries of ``outdir`` are left alone. Raises ``DemoError`` naming the path.
    """
    if outdir.exists() and not outdir.is_dir():
        raise DemoError(f"{outdir}: exists and is not a directory")
    if not (outdir.is_dir() and any(outdir.iterdir())):
        return
    if not force:
        raise DemoError(f"{outdir}: already exists and is not empty; use --force to replace "
                        "the demo's outputs there, or -o to choose another directory")
    remove: list[Path] = []
    problems: list[str] = []
    for link in LINKS:
        run = outdir / link
        if run.exists() or run.is_symlink():
            problem = _demo_run_dir_problem(run)
            if problem:
                problems.append(problem)
            else:
                remove.append(run)
    report = outdir / REPORT_DIR
    if report.exists() or report.is_symlink():
        if report.is_symlink() or not report.is_dir() or not (report / "report.html").is_file():
            problems.append(f"{report}: is not an earlier demo's report directory (no report.html)")
        else:
            remove.append(report)
    summary = outdir / SUMMARY_NAME
    if summary.exists() or summary.is_symlink():
        if summary.is_symlink() or not summary.is_file():
            problems.append(f"{summary}: is not an earlier demo's summary file")
        else:
            remove.append(summary)
    if problems:
        raise DemoError("--force replaces only an earlier demo's outputs, and these are in the way "
                        "(move them or choose another directory with -o); nothing was removed:\n  "
                        + "\n  ".join(problems))
    for p in remove:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def play_and_record(run_dir: Path, link: str, *, scenario: str = "demo", seed: int = 0,
                    output_tokens: int | None = None, log: Callable[[str], None] = print,
                    timeout_s: float = 600.0) -> DemoRun:
    """Serve ``scenario`` at ``link`` live and record it with the real ``rdmascope record``.

    Both run as separate processes (``rdmascope.child.command()``: this interpreter and package). The capture, the request
    log and the truth end up in ``run_dir``. Raises ``DemoError`` if either process fails (its
    stderr is included).
    """
    py = child.command()  # the parent's interpreter and package, never the cwd's ``rdmascope``
    root = _tmpfs_dir() / f"rdmascope-demo-{os.getpid()}-{link}"
    serve_cmd = [*py, "simulate", "serve", "--root", str(root), "--scenario", scenario,
                 "--link", link, "--seed", str(seed), "--out", str(run_dir),
                 "--wait-for", str(run_dir), "--start-delay", "0.5"]
    if output_tokens is not None:
        serve_cmd += ["--output-tokens", str(output_tokens)]
    server = subprocess.Popen(serve_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    recorder = None
    try:
        line = server.stdout.readline()
        if not line.startswith("root: "):
            server.wait(timeout=10)
            raise DemoError(f"the emulator did not start: {line}{server.stderr.read()}")
        rec_cmd = [*py, "record", *record_args(link, run_dir, root)]
        recorder = subprocess.Popen(rec_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        log(f"  {link}: emulated tree {root}; recording with: rdmascope record -o {run_dir} "
            f"--sysfs-root {root} --netdev-stats" + (" --emulated 109" if link == "emulated100" else ""))
        try:
            out, err = server.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise DemoError(f"the emulator did not finish within {timeout_s:g} s") from exc
        if server.returncode != 0:
            raise DemoError(f"the emulator failed (exit {server.returncode}): {err.strip()}")
        time.sleep(0.3)  # a little idle tail after the last token
        if recorder.poll() is not None:
            raise DemoError(f"rdmascope record stopped early (exit {recorder.returncode}): "
                            f"{recorder.stderr.read().strip()}")
        recorder.send_signal(signal.SIGINT)
        rout, rerr = recorder.communicate(timeout=60)
        if recorder.returncode != 0:
            raise DemoError(f"rdmascope record failed (exit {recorder.returncode}): "
                            f"{rerr.strip()}")
        player = next((ln for ln in err.splitlines() if ln.startswith("player:")), "")
        return DemoRun(name=link, capture=run_dir, request_log=run_dir / "requests.jsonl",
                       truth=run_dir / "truth.json", player=player, recorder_log=rerr)
    finally:
        for p in (server, recorder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        try:
            remove_tree(root)
        except (ValueError, OSError):
            pass


def run_analysis(outdir: Path, runs: list[DemoRun], *, log: Callable[[str], None] = print
                 ) -> Path:
    """Analyse the demo's runs: ``rdmascope inspect`` of each capture, then the HTML report.

    Writes ``<outdir>/summary.txt`` (each capture's inspect output: span, sampling quality, gaps)
    and ``<outdir>/report/report.html`` (figures, peak-vs-window, bursts, per-request and per-test
    tables, emulation verdicts and the comparison with the estimate; the first run is the
    baseline), prints the report's headline numbers and verdicts, and returns the report's path.
    Raises ``DemoError`` when a step fails.
    """
    from rdmascope.analysis.report import build_report, load_configuration, render_report

    lines: list[str] = []
    for run in runs:
        res = subprocess.run([*child.command(), "inspect", str(run.capture)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise DemoError(f"rdmascope inspect {run.capture} failed: {res.stderr.strip()}")
        lines.append(f"== {run.name}: {run.capture}")
        lines.extend(res.stdout.rstrip().splitlines())
        if run.player:
            lines.append(run.player)
        lines.append("")
    summary = outdir / SUMMARY_NAME
    summary.write_text("\n".join(lines) + "\n")

    log("analysing: " + ", ".join(r.name for r in runs))
    configs = [load_configuration(r.capture, [r.request_log], label=_LABELS.get(r.name, r.name))
               for r in runs]
    content = build_report(configs, progress=lambda m: log(f"  {m}"))
    html = render_report(content, outdir / REPORT_DIR, progress=lambda m: log(f"  {m}"))
    log("")
    for v in content.verdicts:
        log(f"[{v.status}] {v.headline}")
    for label, value, detail in content.cards:
        log(card_line(label, value, detail))
    log(_emulator_note())
    log("")
    log(f"sampling quality per capture: {summary}")
    return html


def card_line(label: str, value: str, detail: str) -> str:
    """One report card as a terminal line: ``  label: value  (detail)``.

    The cards' reference to the report's note on 1 ms values (``ONE_MS_REF``, itself in
    parentheses and pointing at a note the terminal does not show) is said in place, so the line
    reads ``1 ms peak: 202 Gb/s  (1 ms values carry ±15–25 % ...; 100 ms: 35 Gb/s)``, never
    ``((...))``.
    """
    from rdmascope.analysis.report import ONE_MS_REF

    if not detail:
        return f"  {label}: {value}"
    detail = detail.replace(ONE_MS_REF, "1 ms values carry ±15–25 % timing uncertainty")
    return f"  {label}: {value}  ({detail})"


def _emulator_note() -> str:
    from rdmascope.emulator.model import ComputeModel, ModelArch

    comp, arch = ComputeModel(), ModelArch()
    hidden = comp.overlap_fraction
    floor_ms = arch.ring_steps * comp.ring_step_floor_s * 1e3
    return (f"  note: the emulator hides {100 * hidden:.1f} % of each prefill all-reduce behind "
            "compute (a fit to the study, which measured P2 +0.88 s against a 0.92 s bound), so "
            f"long prompts' TTFT increases sit ~{100 * hidden:.0f} % below the estimate's bound; "
            f"no all-reduce is shorter than {floor_ms:.2f} ms, so a 1,024-token pass barely "
            "slows on the emulated link (the study's P1: +0.01 s); real engines may differ "
            "(benchmarks/calibration.txt)")


# demo link names -> the labels used in the report
_LABELS = {"200": "200 Gb/s", "emulated100": "emulated 100 Gb/s"}


def record_args(link: str, run_dir: Path, root: Path) -> list[str]:
    """Return the ``rdmascope record`` arguments the demo uses for one link setting.

    The emulated link is recorded as a user of the study records theirs (``NCCL_IB_HCA`` naming
    one twin): ``--emulated 109``, because that one PCIe Gen5 x4 twin really carries ~109 Gb/s
    (method.md), so 1 ms windows above it (beyond their timing uncertainty) are flagged over line
    rate instead of headlined.
    """
    args = ["-o", str(run_dir), "--sysfs-root", str(root), "--netdev-stats", "--interval", "1ms"]
    if link == "emulated100":
        args += ["--emulated", "109"]
    return args


def fresh_outdir(parent: str | os.PathLike = DEFAULT_OUTDIR) -> Path:
    """Return a new, not yet existing ``<parent>/<YYYYmmdd-HHMMSS>[-n]`` directory path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    p = Path(parent) / stamp
    n = 1
    while p.exists():
        n += 1
        p = Path(parent) / f"{stamp}-{n}"
    return p


def run_demo(outdir: str | os.PathLike | None = None, *, force: bool = False,
             scenario: str = "demo", log: Callable[[str], None] = print) -> list[DemoRun]:
    """Run the demo into ``outdir`` (default: a fresh ``fresh_outdir()``); return the runs.

    See the module docstring. Raises ``DemoError`` for a non-empty ``outdir`` without ``force``
    or a failed step.
    """
    out = Path(outdir) if outdir is not None else fresh_outdir()
    _check_outdir(out, force)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    t0 = time.monotonic()
    for link in LINKS:
        log(f"playing scenario {scenario!r} at link {link} ...")
        runs.append(play_and_record(out / link, link, scenario=scenario, log=log))
    log(f"recorded {len(runs)} captures in {time.monotonic() - t0:.0f} s; analysing ...")
    report = run_analysis(out, runs, log=log)
    log("outputs:")
    for r in runs:
        log(f"  {r.name}: capture {r.capture}  request log {r.request_log}  truth {r.truth}")
    log(f"  figures: {report.parent / 'figures'}")
    log(f"  report:  {report}")
    return runs
