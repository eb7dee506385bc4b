"""``rdmascope rates``: re-bin a capture's counters to rates at any window width.

Reads the capture segment by segment (``rdmascope.analysis.iter_rebin_capture``), so memory stays
bounded on day-long captures; a progress bar on stderr shows the readings processed.
"""

from __future__ import annotations

import click

from rdmascope.cli.common import DURATION
from rdmascope.cli.output import emit, format_table, output_options, progress, time_range_options


def _capture_rows(path) -> int:
    import pyarrow.parquet as pq

    from rdmascope.capture import list_capture_files

    segs, lives = list_capture_files(path)
    n = 0
    for s in segs:
        try:
            n += pq.ParquetFile(s).metadata.num_rows
        except (OSError, ValueError):  # ArrowInvalid is a ValueError; the reader names the file
            pass
    return n + sum(f.stat().st_size // 40 for f in lives)  # live rows: ~40 bytes each in IPC


@click.command(help="Re-bin a capture to rates (Gb/s) at any window width, exactly (each "
                    "interval's bytes spread over the windows it overlaps).")
@click.argument("capture", type=click.Path(exists=True, file_okay=False))
@click.option("--window", "width_ns", type=DURATION, default="1ms", show_default=True,
              help="Window width (e.g. 1ms, 5ms, 100ms, 1s).")
@time_range_options
@click.option("--origin", "origin_s", type=float, default=None, metavar="S",
              help="Align windows to this instant (s after capture start; default: --from, "
                   "else the capture start).")
@click.option("--group", type=click.Choice(["none", "twins"]), default="none",
              show_default=True, help="twins: add per-link series summing the twin devices "
                                      "of one cable (the twins stay as well).")
@click.option("--by", type=click.Choice(["series", "device", "direction"]), default="series",
              show_default=True, help="Sum counters by this key.")
@click.option("--source", type=click.Choice(["infiniband", "netdev", "all"]),
              default="infiniband", show_default=True,
              help="RDMA port counters, netdev (kernel stack) statistics, or both.")
@click.option("--bytes", "with_bytes", is_flag=True, help="Add bytes per window columns.")
@click.option("--gap-factor", type=float, default=1.5, show_default=True,
              help="Readings further apart than this many intervals form a gap.")
@click.option("--limit", type=int, default=40, show_default=True,
              help="Rows shown in the human table.")
@output_options
def command(capture, width_ns, t_from, t_to, origin_s, group, by, source, with_bytes,
            gap_factor, limit, out):
    import types

    import numpy as np
    import pandas as pd

    from rdmascope.analysis import (
        QUALITY_EMPTY,
        QUALITY_GAP,
        QUALITY_INVALID,
        QUALITY_PARTIAL,
        iter_rebin_capture,
        to_gbps,
        twin_links,
    )
    from rdmascope.analysis.load import counters_frame
    from rdmascope.capture import CaptureError, read_manifest

    try:
        m = read_manifest(capture)
        cdf = counters_frame(m, capture)
        t0 = int(m["start"]["monotonic_ns"])
        start = None if t_from is None else t0 + int(round(t_from * 1e9))
        end = None if t_to is None else t0 + int(round(t_to * 1e9))
        if start is not None and end is not None and end <= start:
            raise click.BadParameter("--to must be after --from")
        origin = (t0 + int(round(origin_s * 1e9)) if origin_s is not None
                  else start if start is not None else t0)
        src = None if source == "all" else source
        blocks_b, blocks_q = [], []
        total = _capture_rows(capture)
        with progress(length=max(total, 1), label="re-binning") as bar:
            for b, q in iter_rebin_capture(capture, width_ns, origin_ns=origin, by=by,
                                           source=src, gap_factor=gap_factor,
                                           progress=lambda n: bar.update(n)):
                idx = b.index.to_numpy()
                keep = np.ones(len(idx), bool)
                if start is not None:
                    keep &= idx + width_ns > start
                if end is not None:
                    keep &= idx < end
                blocks_b.append(b[keep])
                blocks_q.append(q[keep])
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    except ValueError as exc:
        raise click.ClickException(f"{capture}: {exc}") from exc
    if not blocks_b or sum(len(x) for x in blocks_b) == 0:
        raise click.ClickException(f"{capture}: no windows in the requested range")
    b = pd.concat(blocks_b)
    q = pd.concat(blocks_q)
    # drop leading/trailing windows with no readings at all (before the first reading)
    has = ((q & QUALITY_EMPTY) == 0).any(axis=1).to_numpy()
    lo, hi = int(np.argmax(has)), len(has) - int(np.argmax(has[::-1]))
    b, q = b.iloc[lo:hi], q.iloc[lo:hi]
    if group == "twins":
        links = twin_links(types.SimpleNamespace(meta=m, counters=cdf),
                           source=src or "infiniband")
        if by != "series":
            raise click.UsageError("--group twins needs --by series")
        if not links:
            raise click.ClickException(f"{capture}: no twin devices found to group")
        for link, members in links.items():
            b[link] = b[members].sum(axis=1, skipna=False)
            q[link] = np.bitwise_or.reduce(q[members].to_numpy(), axis=1)
    gbps = to_gbps(b, width_ns)
    table = pd.DataFrame(index=b.index)
    table["t_s"] = (b.index.to_numpy() - t0) / 1e9
    for c in b.columns:
        table[f"{c}_gbps"] = gbps[c]
        if with_bytes:
            table[f"{c}_bytes"] = b[c]
    for c in b.columns:
        table[f"{c}_quality"] = q[c].astype("int8")
    flags = np.bitwise_or.reduce(q.to_numpy(), axis=1) if len(q) else np.zeros(0, int)

    def human():
        h = table[[c for c in table.columns if not c.endswith("_quality")]].copy()
        h["flags"] = ["".join(ch for bit, ch in ((QUALITY_GAP, "G"), (QUALITY_INVALID, "N"),
                                                 (QUALITY_PARTIAL, "P"), (QUALITY_EMPTY, "E"))
                              if f & bit) for f in flags]
        h = h.reset_index(drop=True)
        click.echo(f"{capture}: {len(table)} windows of {width_ns / 1e6:g} ms, rates in Gb/s "
                   f"(t_s from capture start; flags: G gap-spread, N unknown (reset/saturated/"
                   f"unavailable/implausible), P partly covered, E no readings)")
        click.echo(format_table(h, max_rows=limit, formats={"t_s": "{:.6f}"}))

    emit({"rates": table}, out, human=human,
         meta={"capture": str(capture), "window_ns": width_ns, "origin_ns": origin,
               "t_start_ns": t0, "by": by, "group": group, "source": source,
               "quality_bits": {"gap": QUALITY_GAP, "invalid": QUALITY_INVALID,
                                "partial": QUALITY_PARTIAL, "empty": QUALITY_EMPTY}})
