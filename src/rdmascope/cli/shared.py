"""Helpers shared by the commands that take captures with their request logs (``attribute``,
``compare``, ``cluster``, ``report``, ``plot``): where a command finds its inputs, and the aligned
text tables of the attribution.

- ``default_log(capture, given, option)``: the request log given, else CAPTURE/requests.jsonl.
- ``require_capture(path)``: refuse a path that is no capture (exit 4) before asking for more.
- ``find_request_log(paths, reference)``: the log of a run set (beside a capture or their parent).
- ``run_set_dir(path)``: the node directories of a run set directory (every subdirectory).
- ``run_set_paths(paths)``: a command's CAPTURE... with a run set directory expanded and the
  set's own files (``runs/p2/*``) skipped.
- ``echo_table(df, columns, title)``: selected columns as an aligned table (MB for ``*_bytes``).
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from rdmascope.capture import CaptureError, read_manifest
from rdmascope.cli.common import say_later
from rdmascope.exitcodes import DataError

__all__ = ["default_log", "require_capture", "find_request_log", "run_set_dir", "run_set_paths",
           "CaptureDirs", "echo_table"]

#: The request-log formats ``--format`` takes (``analysis.requestlogs.FORMATS``, stated here so
#: that a command's --help and option check import no pandas; tests/test_usage_values.py
#: checks that the two lists hold the same formats).
REQUEST_FORMATS = ["native", "vllm", "guidellm", "genai-perf", "aiperf", "inference-perf",
                   "sglang", "llmperf", "vllm-multiturn", "trtllm-bench", "fmperf"]

#: columns printed as whole numbers (with thousands separators) by ``echo_table``
COUNT_SUFFIXES = ("tokens", "round", "rounds", "requests", "bursts", "n_chunks")


def default_log(capture: str, given: str | None, option: str) -> str:
    """Return the request log to use: ``given``, else CAPTURE/requests.jsonl if it exists (a
    directory of that name too: the reader then says it is one)."""
    if given:
        return given
    p = Path(capture) / "requests.jsonl"
    if p.exists():
        return str(p)
    require_capture(capture)  # a path that is no capture is that error, not a missing log
    raise click.UsageError(f"no request log: give {option} LOG (and no {p} exists)")


def require_capture(path) -> None:
    """Raise ``DataError`` (exit 4, as every command says it once it reads the capture) when
    ``path`` is not a readable capture: called before a usage error about what else the
    command needs (a request log), which would otherwise hide that the path is wrong."""
    try:
        read_manifest(path)
    except CaptureError as exc:
        raise DataError(str(exc)) from exc


def echo_table(df, columns: list[str], title: str | None = None,
               headers: dict[str, str] | None = None) -> None:
    """Print selected columns of a DataFrame as an aligned text table (MB for *_bytes).
    ``headers``: {column: header text} replacing the derived header (units kept as given)."""
    import pandas as pd

    from rdmascope.analysis.report import column_header  # pandas: only when a table is printed

    cols = [c for c in columns if c in df.columns]
    heads, cells = [], []
    for c in cols:
        text, factor = column_header(c)
        heads.append((headers or {}).get(c, text))
        col = []
        for v in df[c].tolist():
            if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float)
                                                           and math.isnan(v)):
                col.append("-")  # unknown, or not applicable (a test's cell has no round)
            elif isinstance(v, bool):
                col.append("yes" if v else "no")
            elif isinstance(v, int) or (isinstance(v, float) and v.is_integer()
                                         and c.endswith(COUNT_SUFFIXES)):
                col.append(f"{int(v):,}")
            elif isinstance(v, float):
                x = v * factor
                col.append(f"{x:,.3f}" if abs(x) < 10 else f"{x:,.2f}" if abs(x) < 1000
                           else f"{x:,.0f}")
            else:
                col.append(str(v))
        cells.append(col)
    widths = [max([len(h)] + [len(x) for x in col]) for h, col in zip(heads, cells, strict=True)]
    if title:
        click.echo(f"\n{title}")
    click.echo("  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True)))
    for i in range(len(df)):
        click.echo("  ".join(col[i].rjust(w) for col, w in zip(cells, widths, strict=True)))


def find_request_log(paths: list[str], reference: str | None) -> tuple[str | None, int | None]:
    """Return (log path, index of the capture whose host wrote it) for the first capture
    directory holding ``requests.jsonl`` (the reference's first), else the parent directory
    shared by the captures (a ``simulate capture --nodes`` or ``record -o runs/p2/{host}`` layout;
    index None), else (None, None). Raises ``click.BadParameter`` (exit 2) when ``reference``
    is the host of none of the (readable) captures."""
    order = list(range(len(paths)))
    if reference is not None:
        hosts = []
        for p in paths:
            try:
                hosts.append(read_manifest(p).get("host"))
            except Exception:  # noqa: BLE001 (open_run_set names the bad capture later)
                hosts.append(None)
        if reference not in hosts and None not in hosts:  # named before any log is blamed
            raise click.BadParameter(f"{reference!r}: no capture of that host (hosts: "
                                     f"{', '.join(dict.fromkeys(hosts))})",
                                     param_hint="'--reference'")
        order.sort(key=lambda i: hosts[i] != reference)
    for i in order:
        f = Path(paths[i]) / "requests.jsonl"
        if f.exists():  # a directory of that name too: the reader says it is one
            return str(f), i
    parents = {Path(p).resolve().parent for p in paths}
    if len(parents) == 1:
        f = parents.pop() / "requests.jsonl"
        if f.exists():
            return str(f), None
    return None, None


class CaptureDirs(click.Path):
    """The type of a ``CAPTURE...`` argument that may name a run set: a directory (so named in
    click's errors: "Directory 'x' does not exist"), but a file is let through for
    ``run_set_paths`` to skip (the set's own files, from ``runs/p2/*``) or refuse, naming it."""

    def __init__(self, exists: bool = True):
        super().__init__(exists=exists, file_okay=True, dir_okay=True)
        self.name = "directory"


#: the emulator's index of a run set (``simulate capture --nodes``): lists every node's capture
SET_INDEX = "truth.json"


def _looks_like_capture(p: Path) -> bool:
    """A directory that is (or was) one capture: its manifest, or segments without one."""
    return (p / "manifest.json").exists() or (p / "segments").is_dir()


def _indexed_nodes(p: Path) -> list[str]:
    """The node directories the run set's index lists (``truth.json`` of ``simulate capture
    --nodes``: ``nodes[].capture``), [] without a readable index."""
    import json

    try:
        idx = json.loads((p / SET_INDEX).read_text())
        nodes = idx.get("nodes") if isinstance(idx, dict) else None
        return [str(n["capture"]) for n in nodes or []
                if isinstance(n, dict) and isinstance(n.get("capture"), str)
                and n["capture"] and "/" not in n["capture"] and n["capture"] not in (".", "..")]
    except (OSError, ValueError, AttributeError):
        return []


def run_set_dir(path) -> list[str] | None:
    """The node directories of ``path`` when it is a run set directory, else None.

    A run set directory (as ``simulate capture --nodes`` and ``record -o runs/x/{host}``
    write) is no capture itself (no ``manifest.json``, no ``segments/``) and holds at least
    one capture directory or an index (``truth.json`` listing the nodes). **Every**
    subdirectory (but hidden ones) is a node, whether or not it holds a capture: one without
    a manifest, empty or unreadable is returned too, so that the command names it as a node
    that could not be read instead of judging the set without it. A node the index lists whose
    directory is absent is returned as that (missing) path, for the same reason. Files in the
    directory (the client's ``requests.jsonl``, ``truth.json``) are not nodes. Sorted by name.
    """
    p = Path(path)
    if not p.is_dir() or _looks_like_capture(p):
        return None
    try:
        subdirs = [d for d in p.iterdir() if d.is_dir() and not d.name.startswith(".")]
    except OSError:
        return None
    listed = _indexed_nodes(p)
    if not listed and not any((d / "manifest.json").is_file() for d in subdirs):
        return None
    names = {d.name for d in subdirs} | set(listed)
    return [str(p / n) for n in sorted(names)]


def run_set_paths(paths) -> list[str]:
    """The captures a command taking ``CAPTURE...`` runs on: one run set directory becomes its
    nodes (``run_set_dir``); of several paths, files beside the given directories (what
    ``runs/p2/*`` expands to: the set's ``requests.jsonl``, ``truth.json``) are skipped with a
    note on stderr naming each. Any other file is refused (``click.BadParameter``, exit 2,
    naming it): a capture is a directory."""
    paths = [str(x) for x in paths]
    if len(paths) == 1:
        paths = run_set_dir(paths[0]) or paths
    dirs = [Path(x) for x in paths if Path(x).is_dir()]
    parents = {d.resolve().parent for d in dirs}
    keep = []
    for x in paths:
        f = Path(x)
        if f.is_file() and len(dirs) >= 2 and f.resolve().parent in parents:
            say_later(f"note: {x}: a file, not a node's capture directory; skipped")
            continue
        if f.is_file():
            raise click.BadParameter(f"{x!r} is a file, not a capture directory.",
                                     param_hint="'CAPTURE...'")
        keep.append(x)
    return keep
