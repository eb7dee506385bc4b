"""Benchmark: ``attribute`` with many requests, and the request-log readers, in one run.

One command (from the repository root, in the venv)::

    python benchmarks/bench_attribute.py            # 1 h capture; 20, 2k and 20k requests
    python benchmarks/bench_attribute.py --quick    # 10 min capture (~2 min in all)
    python benchmarks/bench_attribute.py --capture /path/to/capture   # an existing capture
    python benchmarks/bench_attribute.py --quick --baseline b9896c9   # and an older revision
    python benchmarks/bench_attribute.py --heavy --rev HEAD --baseline f0e521a  # two commits
    python benchmarks/bench_attribute.py --heavy --alternate 4     # and 4 alternating rounds

``--baseline REV`` unpacks that git revision's ``src``, ``analysis`` and ``sampler``
(``git archive``) into a temporary package and runs every row with it too, side by side in the
same run (the rows marked "before"): b9896c9 is main before issue 13 item 4 was worked on.

Part 1: ``rdmascope attribute CAPTURE --requests LOG --json`` (output to /dev/null) on one
capture (``scale_capture.build``: 8 counters at 1 kHz) with native logs of 20, 2,000 and
20,000 requests spread over it (``requestlog_gen``: the requests overlap as on a busy server).
Each run is its own process under ``RLIMIT_AS`` (``--limit-gb``); wall time, CPU time (user +
sys) and peak RSS come from ``os.wait4``. The 20-request run is the capture pass alone; the
rows give the CPU time above it, and the ratio 20k / 2k of that time (linear in the requests:
about 10; requests x readings would also grow with the capture).

Part 2: ``read_request_log`` (format detection + parse + per-row checks, as ``attribute``
reads a log) on 20,000 requests in each tool layout
(native JSONL and CSV, vLLM, SGLang, genai-perf with SSE responses, inference-perf), each in
its own process: CPU seconds per 10,000 rows and peak RSS, file size beside.

Issue 13 item 4: attribute with 20,000 requests scales with requests x their windows, not
requests x readings; memory flat from 1 h to 6 h; a day's log (~72k requests) under 1 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import compile_bytecode, run_child  # noqa: E402
from requestlog_gen import FORMATS, write  # noqa: E402
from scale_capture import build  # noqa: E402

EXT = {"native": "jsonl", "native-csv": "csv", "sglang": "jsonl"}


def baseline_package(rev: str, root: Path) -> Path:
    """Unpack git revision ``rev`` as an importable ``rdmascope`` package under ``root``;
    return the directory to put first on PYTHONPATH."""
    repo = Path(__file__).resolve().parents[1]
    tree = root / "rev"
    tree.mkdir()
    arch = subprocess.run(["git", "-C", str(repo), "archive", rev, "src", "analysis", "sampler"],
                          check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=arch, check=True)
    pkg = root / "pkg"
    shutil.copytree(tree / "src" / "rdmascope", pkg / "rdmascope")
    for sub in ("analysis", "sampler"):
        shutil.rmtree(pkg / "rdmascope" / sub, ignore_errors=True)
        shutil.copytree(tree / sub, pkg / "rdmascope" / sub)
    compile_bytecode([pkg])  # as installed: bytecode cached (bench_scale.compile_bytecode)
    return pkg


def run(argv: list[str], limit_bytes: int, timeout_s: float, stdout=subprocess.DEVNULL,
        pythonpath: Path | None = None):
    """``bench_scale.run_child`` with ``pythonpath`` (a baseline revision's package) put before
    the installed one: (wall s, cpu s, peak RSS MB, status, stdout text)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return run_child(argv, limit_bytes, timeout_s, stdout=stdout, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 10 min capture instead of 1 h")
    ap.add_argument("--capture", help="use this capture (read-only) instead of building one")
    ap.add_argument("--requests", type=int, nargs="*", default=[20, 2000, 20000],
                    help="request counts (the first is the baseline: the capture pass)")
    ap.add_argument("--parse-rows", type=int, default=20000, help="rows per format in part 2")
    ap.add_argument("--limit-gb", type=float, default=4.0, help="memory limit per process")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    ap.add_argument("--baseline", metavar="REV", help="also run a git revision (rows 'before')")
    ap.add_argument("--alternate", type=int, default=0, metavar="N",
                    help="then N rounds of peaks and attribute (the largest log) one after the "
                         "other for every tree: each round's ratios and those of the fastest "
                         "runs (less at the mercy of a loaded machine than one run)")
    ap.add_argument("--rev", metavar="REV",
                    help="run this git revision instead of the working tree (in a shared "
                         "checkout: others' uncommitted edits left out)")
    ap.add_argument("--skip-readers", action="store_true", help="part 1 only")
    ap.add_argument("--concurrency", type=int, metavar="C",
                    help="closed-loop logs: C clients, each sending when its last request "
                         "ends (requestlog_gen.closed_loop), instead of sends spread evenly")
    ap.add_argument("--heavy", action="store_true",
                    help="heavy overlap: --concurrency 64 --requests 20 20000 --skip-readers "
                         "(issue 23: 20,000 closed-loop requests at concurrency 64)")
    args = ap.parse_args()
    if args.heavy:
        args.concurrency = args.concurrency or 64
        args.requests = [20, 20000]
        args.skip_readers = True
    root = Path(tempfile.mkdtemp(prefix="bench-attribute-"))
    limit = int(args.limit_gb * 2**30)
    try:
        trees = [("", None)]
        if args.rev:
            (root / "rev-after").mkdir()
            trees = [("", baseline_package(args.rev, root / "rev-after"))]
        if args.baseline:
            (root / "rev-before").mkdir()
            trees.append((" before", baseline_package(args.baseline, root / "rev-before")))
        if args.capture:
            cap = Path(args.capture)
        else:
            cap = root / "cap"
            t = time.perf_counter()
            build(cap, 600 if args.quick else 3600)
            print(f"built {cap} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        man = json.loads((cap / "manifest.json").read_text())
        t0 = man["start"]["monotonic_ns"] / 1e9
        t1 = man.get("stop", {}).get("monotonic_ns", 0) / 1e9 or t0 + 600
        span = (t0 + 1.0, t1 - 2.0)
        minutes = (t1 - t0) / 60
        rd = [sys.executable, "-m", "rdmascope"]
        # the target: attribute (with the conserving split) within 2x ``peaks`` on the same
        # capture, measured side by side in this run
        pk: dict[str, float] = {}
        pk_cpu: dict[str, float] = {}
        for tag, pp in trees:
            dt, c, mb, st, _ = run(rd + ["peaks", str(cap), "--json"], limit, args.timeout,
                                   pythonpath=pp)
            pk[tag], pk_cpu[tag] = dt, c
            print(f"peaks{tag}: {dt:.1f} s wall, {c:.1f} s CPU, {mb:,.0f} MB {st}",
                  file=sys.stderr)
        how = f", closed loop at concurrency {args.concurrency}" if args.concurrency else ""
        print(f"\nPart 1: attribute --json on a {minutes:.0f} min capture ({cap}){how}")
        print("| requests | wall | CPU | peak RSS | CPU above the capture pass | wall / peaks "
              "(target <= 2) | CPU / peaks CPU |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        cpu: dict[tuple[int, str], float] = {}
        for n in args.requests:
            log = write(root / f"req-{n}.jsonl", "native", n, *span,
                        concurrency=args.concurrency if n >= (args.concurrency or 0) else None)
            for tag, pp in trees:
                dt, c, mb, st, _ = run(rd + ["attribute", str(cap), "--requests", str(log),
                                             "--json"], limit, args.timeout, pythonpath=pp)
                cpu[(n, tag)] = c
                above = c - cpu[(args.requests[0], tag)]
                print(f"| {n:,}{tag} | {dt:.1f} s | {c:.1f} s | {mb:,.0f} MB | "
                      f"{above:.1f} s | {dt / max(pk[tag], 1e-9):.2f}x | "
                      f"{c / max(pk_cpu[tag], 1e-9):.2f}x | "
                      f"{'' if st == 'ok' else st}", flush=True)
        if args.alternate:
            print(f"\nAlternating peaks and attribute ({args.requests[-1]:,} requests), "
                  f"{args.alternate} rounds: attribute / peaks, wall and CPU")
            best: dict[str, list[float]] = {}
            for i in range(args.alternate):
                for tag, pp in trees:
                    p = run(rd + ["peaks", str(cap), "--json"], limit, args.timeout,
                            pythonpath=pp)
                    a = run(rd + ["attribute", str(cap), "--requests", str(log), "--json"],
                            limit, args.timeout, pythonpath=pp)
                    b = best.setdefault(tag, [float("inf")] * 4)
                    best[tag] = [min(x, y) for x, y in zip(b, (p[0], p[1], a[0], a[1]),
                                                           strict=True)]
                    print(f"round {i + 1}{tag}: peaks {p[0]:.1f} s / {p[1]:.1f} s CPU, "
                          f"attribute {a[0]:.1f} s / {a[1]:.1f} s CPU: "
                          f"{a[0] / p[0]:.2f}x wall, {a[1] / p[1]:.2f}x CPU "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
            for tag, (pw, pc, aw, ac) in best.items():
                print(f"fastest runs{tag}: {aw / pw:.2f}x wall, {ac / pc:.2f}x CPU")
        if len(args.requests) >= 3:
            base, a, b = args.requests[0], args.requests[-2], args.requests[-1]
            for tag, _ in trees:
                ra = ((cpu[(b, tag)] - cpu[(base, tag)])
                      / max(cpu[(a, tag)] - cpu[(base, tag)], 1e-9))
                print(f"\nCPU above the capture pass, {b:,} / {a:,} requests{tag}: {ra:.1f}x "
                      f"(requests ratio {b / a:.0f}x)")
        if args.skip_readers:
            return
        print(f"\nPart 2: read_request_log, {args.parse_rows:,} rows per format")
        print("| format | file | CPU per 10k rows | peak RSS |")
        print("|---|---:|---:|---:|")
        for fmt in FORMATS:
            p = write(root / f"log-{fmt}.{EXT.get(fmt, 'json')}", fmt, args.parse_rows, *span,
                      realtime_minus_mono_ns=1_700_000_000 * 10**9)
            code = textwrap.dedent(f"""
                import time
                from rdmascope.analysis.requestlogs import read_request_log
                t = time.process_time()
                log = read_request_log({str(p)!r})  # format detected, as the CLI does
                print(time.process_time() - t, len(log.requests), log.n_failed)
            """)
            for tag, pp in trees:
                dt, c, mb, st, out = run([sys.executable, "-c", code], limit, args.timeout,
                                         stdout=subprocess.PIPE, pythonpath=pp)
                if st != "ok":
                    print(f"| {fmt}{tag} | {p.stat().st_size / 1e6:.1f} MB | {st} | |")
                    continue
                secs, rows, failed = out.split()
                print(f"| {fmt}{tag} | {p.stat().st_size / 1e6:.1f} MB | "
                      f"{float(secs) * 10000 / int(rows):.2f} s | {mb:,.0f} MB |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    import platform

    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"os.getloadavg() {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
