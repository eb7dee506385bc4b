"""Helpers shared by the commands that take captures with their request logs (``attribute``,
``compare``, ``cluster``, ``report``, ``plot``): where a command finds its inputs, and the aligned
text tables of the attribution.

- ``default_log(capture, given, option)``: the request log given, else CAPTURE/requests.jsonl.
- ``require_capture(path)``: refuse a path that is no capture (exit 4) before asking for more.
- ``find_request_log(paths, reference)``: the log of a run set (beside a capture or their parent).
- ``run_set_dir(path)``: the capture directories of a run set directory.
- ``echo_table(df, columns, title)``: selected columns as an aligned table (MB for ``*_bytes``).
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from rdmascope.capture import CaptureError, read_manifest
from rdmascope.exitcodes import DataError

__all__ = ["default_log", "require_capture", "find_request_log", "run_set_dir", "echo_table"]

#: columns printed as whole numbers (with thousands separators) by ``echo_table``
COUNT_SUFFIXES = ("tokens", "round", "rounds", "requests", "bursts", "n_chunks")


def default_log(capture: str, given: str | None, option: str) -> str:
    """Return the request log to use: ``given``, else CAPTURE/requests.jsonl if it exists."""
    if given:
        return given
    p = Path(capture) / "requests.jsonl"
    if p.is_file():
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


def echo_table(df, columns: list[str], title: str | None = None) -> None:
    """Print selected columns of a DataFrame as an aligned text table (MB for *_bytes)."""
    import pandas as pd

    from rdmascope.analysis.report import column_header  # pandas: only when a table is printed

    cols = [c for c in columns if c in df.columns]
    heads, cells = [], []
    for c in cols:
        text, factor = column_header(c)
        heads.append(text)
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
    index None), else (None, None)."""
    order = list(range(len(paths)))
    if reference is not None:
        hosts = []
        for p in paths:
            try:
                hosts.append(read_manifest(p).get("host"))
            except Exception:  # noqa: BLE001 (open_run_set names the bad capture later)
                hosts.append(None)
        order.sort(key=lambda i: hosts[i] != reference)
    for i in order:
        f = Path(paths[i]) / "requests.jsonl"
        if f.is_file():
            return str(f), i
    parents = {Path(p).resolve().parent for p in paths}
    if len(parents) == 1:
        f = parents.pop() / "requests.jsonl"
        if f.is_file():
            return str(f), None
    return None, None


def run_set_dir(path) -> list[str] | None:
    """The captures in ``path`` when it is a run set directory (no capture itself, holding
    capture directories: one per host, as ``simulate capture --nodes`` and ``record -o
    runs/x/{host}`` write), else None."""
    p = Path(path)
    if (p / "manifest.json").is_file():
        return None
    caps = sorted(str(d) for d in p.iterdir() if d.is_dir() and (d / "manifest.json").is_file())
    return caps or None
