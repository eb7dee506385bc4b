"""Name the windows a command left empty because a counter step was physically impossible.

``implausible_summary`` goes over a capture's intervals (``stream.iter_intervals``: the rows of
``series.byte_intervals``, segment by segment in bounded memory) and counts, per series, the
intervals flagged "implausible" (a step above ``plausibility.PLAUSIBLE_FACTOR`` x the link
rate: ``series`` module docstring) and the windows of a grid they touch. Commands print it so a
wrong ``rate`` string (a fallback "40 Gb/sec (4X QDR)" on a 400G port) cannot silently blank
the windows: the line names the cap and the ``--link-gbps`` way out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rdmascope.plausibility import PLAUSIBLE_FACTOR, counter_cap_gbps, current_link_gbps

from .series import FLAGS
from .stream import capture_info, iter_intervals

__all__ = ["implausible_summary", "implausible_lines"]

_IMPL = FLAGS.index("implausible")


def implausible_summary(capture, *, width_ns: int | None = None, origin_ns: int | None = None,
                        start_ns: int | None = None, end_ns: int | None = None,
                        source: str | None = "infiniband") -> pd.DataFrame:
    """Count implausible steps per series, and the ``width_ns`` windows they touch.

    ``capture``: a path, ``CaptureInfo`` or loaded ``Capture``. Windows are
    [origin + k x width, origin + (k+1) x width) (``origin_ns`` default the capture start);
    only steps overlapping [start_ns, end_ns) count. Returns a DataFrame indexed by series:
    device, steps (int), span_s (time they cover), windows (int, 0 without ``width_ns``),
    cap_gbps (the cap they broke). Empty when there is none.
    """
    if hasattr(capture, "readings"):  # a loaded Capture: read its directory segment by segment
        capture = capture.path
    info = capture_info(capture)
    cdf = info.counters
    origin = int(info.meta["start"]["monotonic_ns"]) if origin_ns is None else int(origin_ns)
    lo = -(1 << 62) if start_ns is None else int(start_ns)
    hi = 1 << 62 if end_ns is None else int(end_ns)
    acc: dict[int, list] = {}
    for parts, _bound in iter_intervals(info, source=source, start_ns=start_ns, end_ns=end_ns):
        for c, iv in parts.items():
            m = (iv["flag"] == _IMPL) & (iv["t1_ns"] > lo) & (iv["t0_ns"] < hi)
            if not m.any():
                continue
            t0, t1 = iv["t0_ns"][m], iv["t1_ns"][m]
            a = acc.setdefault(c, [0, 0, set()])
            a[0] += int(m.sum())
            a[1] += int((np.minimum(t1, hi) - np.maximum(t0, lo)).sum())
            if width_ns:
                k0 = (t0 - origin) // width_ns
                k1 = (t1 - 1 - origin) // width_ns
                for x, y in zip(k0.tolist(), k1.tolist(), strict=True):
                    a[2].update(range(x, y + 1))
    rows = {}
    for c, (n, span, wins) in acc.items():
        s = cdf.at[c, "series"]
        r = rows.setdefault(s, {"device": cdf.at[c, "device"], "steps": 0, "span_s": 0.0,
                                "windows": set(),
                                "cap_gbps": counter_cap_gbps(info.meta, int(c))})
        r["steps"] += n
        r["span_s"] += span / 1e9
        r["windows"] |= wins
    out = pd.DataFrame.from_dict(
        {s: {**r, "windows": len(r["windows"])} for s, r in rows.items()}, orient="index",
        columns=["device", "steps", "span_s", "windows", "cap_gbps"])
    out.index.name = "series"
    return out


def implausible_lines(summary: pd.DataFrame, width_label: str | None = None) -> list[str]:
    """One line per series of ``implausible_summary``, for a command's human output."""
    lines = []
    for s, r in summary.iterrows():
        link = r["cap_gbps"] / PLAUSIBLE_FACTOR
        src = "the --link-gbps given" if current_link_gbps() is not None else \
            "the port's rate string / netdev speed"
        win = (f" in {int(r['windows'])} window(s) of {width_label}" if width_label
               and r["windows"] else "")
        lines.append(f"implausible: {s} {int(r['steps'])} step(s){win} left empty "
                     f"({r['span_s']:.3f} s), each above {r['cap_gbps']:g} Gb/s = "
                     f"{PLAUSIBLE_FACTOR:g} x {link:g} Gb/s ({src}); if that link rate is "
                     "wrong, give the real one with --link-gbps")
    return lines
