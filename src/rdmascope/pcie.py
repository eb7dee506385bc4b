"""The PCIe link of an RDMA device: what its sysfs files say and the most it can carry.

stdlib only: the sampler (``devices``, ``record``) and the analysis share it.

Linux prints a PCI function's link in ``/sys/bus/pci/devices/<bdf>/`` (reached from an RDMA
device as ``/sys/class/infiniband/<dev>/device/``), ``drivers/pci/pci-sysfs.c``:

- ``current_link_speed`` / ``max_link_speed``: ``pci_speed_string()``, e.g. "32.0 GT/s PCIe",
  "2.5 GT/s PCIe", or "Unknown" (a speed the kernel cannot decode; a VF, whose link status
  register is reserved, also reads as unknown). Kernels before 5.7 printed "32 GT/s",
  "8 GT/s", "2.5 GT/s" or "Unknown speed". A read can fail with EINVAL (config space not
  readable).
- ``current_link_width`` / ``max_link_width``: the lane count, e.g. "4" (0 when the link is
  down or unknown).

The bound (docs/sysfs.md, "The PCIe link of a twin"): lanes x GT/s per lane x the line
encoding of that generation (PCI Express Base Specification: 2.5 GT/s (1.x) and 5 GT/s (2.x)
use 8b/10b; 8 GT/s (3.x), 16 GT/s (4.0) and 32 GT/s (5.0) use 128b/130b; 64 GT/s (6.0) is
PAM4 in FLIT mode, where 242 of every 256 bytes of a flit carry TLP and DLLP bytes, the rest
being CRC and FEC). It is the kernel's own ``PCIE_SPEED2MBS_ENC`` x width for 2.5-32 GT/s
(``drivers/pci/pci.h``, the "available PCIe bandwidth" of the boot log, e.g. 126.024 Gb/s for
"32.0 GT/s PCIe x4"); for 64 GT/s the kernel counts 1b/1b (64,000 Mb/s per lane) and this
module the flit's 242/256. Packet headers (TLP/DLLP) take more, so a link carries less data
than this (a DGX Spark twin on Gen5 x4: ~109-111 Gb/s measured against 126 Gb/s): the bound is
a ceiling physics cannot exceed, not a throughput estimate.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["ENCODINGS", "PCIE_FILES", "parse_link_speed", "parse_link_width", "encoding_of",
           "link_bound_gbps", "describe_link", "pcie_record", "record_bound"]

#: The sysfs files of a PCI function read for its link (relative to the function's folder).
PCIE_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")

#: GT/s per lane -> (generation, encoding name, payload fraction), PCI Express Base Spec.
ENCODINGS: dict[float, tuple[str, str, float]] = {
    2.5: ("1.x", "8b/10b", 8 / 10),
    5.0: ("2.x", "8b/10b", 8 / 10),
    8.0: ("3.x", "128b/130b", 128 / 130),
    16.0: ("4.0", "128b/130b", 128 / 130),
    32.0: ("5.0", "128b/130b", 128 / 130),
    64.0: ("6.0", "FLIT 242/256 (PAM4)", 242 / 256),
}

_SPEED_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s\b")


def parse_link_speed(text: str | None) -> float | None:
    """GT/s per lane of a ``current_link_speed``/``max_link_speed`` text, or None (unknown).

    "32.0 GT/s PCIe" -> 32.0; the older "32 GT/s" -> 32.0; "Unknown", "Unknown speed", an empty
    or missing file, or a rate with no known encoding (``ENCODINGS``) -> None, never 0.
    """
    if text is None:
        return None
    m = _SPEED_RE.match(text)
    if not m:
        return None
    gt = float(m.group(1))
    return gt if gt in ENCODINGS else None


def parse_link_width(text: str | None) -> int | None:
    """Lane count of a ``current_link_width``/``max_link_width`` text, or None (unknown).

    "4" -> 4; "0" (link down, or a VF) or anything that is not a positive integer -> None.
    """
    if text is None:
        return None
    t = text.strip()
    if not t.isdigit() or int(t) <= 0:
        return None
    return int(t)


def encoding_of(gts: float) -> tuple[str, str, float]:
    """(generation, encoding, payload fraction) of a per-lane rate in ``ENCODINGS``.

    Raises ``KeyError`` for another rate.
    """
    return ENCODINGS[float(gts)]


def link_bound_gbps(gts: float | None, width: int | None) -> float | None:
    """The most a link of ``width`` lanes at ``gts`` GT/s carries, in Gb/s (10^9 bit/s).

    lanes x GT/s x encoding (``ENCODINGS``): 4 x 32 x 128/130 = 126.03 Gb/s for Gen5 x4,
    8 x 2.5 x 8/10 = 16 Gb/s for Gen1 x8. None when either is unknown (never 0).
    """
    if gts is None or width is None or width <= 0 or float(gts) not in ENCODINGS:
        return None
    return float(width) * float(gts) * ENCODINGS[float(gts)][2]


def describe_link(gts: float | None, width: int | None) -> str | None:
    """"32 GT/s x4 (PCIe 5.0, 128b/130b)" or None when unknown."""
    if gts is None or width is None:
        return None
    gen, enc, _ = ENCODINGS[float(gts)]
    return f"{gts:g} GT/s x{width} (PCIe {gen}, {enc})"


def pcie_record(texts: dict[str, str | None]) -> dict[str, Any]:
    """The manifest record of a PCI function's link from its sysfs texts (``PCIE_FILES``).

    ``texts``: {file name: stripped text, or None when missing/unreadable}. Returns
    {``current_link_speed``, ``current_link_width``, ``max_link_speed``, ``max_link_width``
    (the texts as read, None when unavailable), ``gts``, ``width``, ``bound_gbps`` (the current
    link, ``link_bound_gbps``; None when unknown), ``max_gts``, ``max_width``,
    ``max_bound_gbps``}.
    """
    rec: dict[str, Any] = {k: texts.get(k) for k in PCIE_FILES}
    gts = parse_link_speed(rec["current_link_speed"])
    width = parse_link_width(rec["current_link_width"])
    mgts = parse_link_speed(rec["max_link_speed"])
    mwidth = parse_link_width(rec["max_link_width"])
    rec.update(gts=gts, width=width, bound_gbps=link_bound_gbps(gts, width),
               max_gts=mgts, max_width=mwidth, max_bound_gbps=link_bound_gbps(mgts, mwidth))
    return rec


def record_bound(rec: Any) -> tuple[float, str] | None:
    """(Gb/s, description) of a manifest ``pcie`` record's current link, or None (unknown).

    Recomputed from the recorded texts (``current_link_speed``, ``current_link_width``), so a
    record written by another version, or edited, is judged by this module's rule; anything
    malformed is unknown, never zero.
    """
    if not isinstance(rec, dict):
        return None
    sp, wd = rec.get("current_link_speed"), rec.get("current_link_width")
    gts = parse_link_speed(sp if isinstance(sp, str) else None)
    width = parse_link_width(str(wd) if isinstance(wd, (str, int)) and
                             not isinstance(wd, bool) else None)
    bound = link_bound_gbps(gts, width)
    if bound is None or not math.isfinite(bound):
        return None
    return bound, f"PCIe link {describe_link(gts, width)}"
