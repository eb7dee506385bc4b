"""Which counter steps are physically possible: the port rate a capture can stand behind.

numpy only (no pandas), so the lean ``inspect`` and the analysis share one rule:

- A byte counter's step is *implausible* when the rate it implies, taken over the longest
  duration its two readings allow (their distance plus both half read brackets) and at least one
  sampling interval, exceeds ``PLAUSIBLE_FACTOR`` (4) x the port's link rate (``cap_gbps``):
  a torn read or a firmware glitch, never traffic (analysis.series flags it "implausible").
- The link rate of a device (``port_rates_gbps``): the highest of its ports' ``rate`` strings
  and their netdevs' ``speed`` (sysfs.md: ``rate`` is not reliable; mlx5 reports a fallback
  "40 Gb/sec (4X QDR)" for Ethernet modes it does not know, so a 400G port would have every
  window blanked by a 4 x 40 Gb/s cap). ``--link-gbps`` (``link_gbps_override``) replaces both
  for every device: the user states the capacity.
- The line-rate ceiling of a device (``line_ceilings``): what the over-line flag and the
  headline peaks judge windows against, with where it came from: ``--link-gbps``; else the
  port rate, lowered to the recorded real rate of an emulated link (``record --emulated``)
  and to the bound of the device's own PCIe link (``rdmascope.pcie``: a DGX Spark twin reaches
  the chip over PCIe Gen5 x4, 126 Gb/s, below its 200 Gb/s port).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PLAUSIBLE_FACTOR", "DEFAULT_MAX_GBPS", "port_rates_gbps", "cap_gbps",
           "counter_cap_gbps", "DEFAULT_LIFESPAN_MS",
           "implausible", "link_gbps_override", "set_link_gbps", "current_link_gbps",
           "LineCeiling", "line_ceilings", "port_line_ceilings", "pcie_link_key"]

#: Plausibility cap = this many times the highest link rate of a counter's device.
PLAUSIBLE_FACTOR = 4.0
#: Cap (Gb/s) when nothing records a link rate: 4 x 400 Gb/s, the fastest ConnectX-7 port.
DEFAULT_MAX_GBPS = 1600.0

#: The kernel's default ``hw_counters/lifespan`` (ms): hw_counters values are cached that long.
DEFAULT_LIFESPAN_MS = 10

_LINK_GBPS: ContextVar[float | None] = ContextVar("rdmascope_link_gbps", default=None)


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
        return float(v)
    return None


def current_link_gbps() -> float | None:
    """The ``--link-gbps`` override in effect (Gb/s), or None."""
    return _LINK_GBPS.get()


def set_link_gbps(gbps: float | None):
    """Set the link-rate override (Gb/s, > 0, or None); return a token for ``reset_link_gbps``.

    Raises ``ValueError`` for a value that is not a positive finite number.
    """
    if gbps is not None and _num(gbps) is None:
        raise ValueError(f"link rate must be a positive number of Gb/s, got {gbps!r}")
    return _LINK_GBPS.set(None if gbps is None else float(gbps))


def reset_link_gbps(token) -> None:
    """Undo ``set_link_gbps``."""
    _LINK_GBPS.reset(token)


@contextlib.contextmanager
def link_gbps_override(gbps: float | None) -> Iterator[None]:
    """Within the block, every device's link rate is ``gbps`` (None: no override)."""
    token = set_link_gbps(gbps)
    try:
        yield
    finally:
        reset_link_gbps(token)


def port_rates_gbps(meta: dict[str, Any], *, override: bool = True) -> dict[str, float]:
    """Return {device: link rate in Gb/s} from a manifest's ``devices`` records.

    Per device the highest, over its ports, of ``rate_gbps`` (the ``rate`` string) and
    ``speed_gbps`` (the netdev's ``speed``, recorded since the cross-check existed); with the
    ``--link-gbps`` override in effect (and ``override`` true), that value for every device.
    Devices without a positive finite rate are left out; malformed records are skipped.
    """
    override = _LINK_GBPS.get() if override else None
    rates: dict[str, float] = {}
    for d in meta.get("devices") or []:
        if not isinstance(d, dict):
            continue
        name = str(d.get("name"))
        if override is not None:
            rates[name] = override
            continue
        for p in d.get("ports") or []:
            if not isinstance(p, dict):
                continue
            for key in ("rate_gbps", "speed_gbps"):
                r = _num(p.get(key))
                if r is not None:
                    rates[name] = max(rates.get(name, 0.0), r)
    return rates


@dataclass(frozen=True)
class LineCeiling:
    """The line-rate ceiling of one RDMA device (Gb/s) and where it came from.

    ``gbps``: the ceiling (None: unknown, never judged); ``source``: "--link-gbps",
    "record --emulated", "PCIe link" or "port rate"; ``port_gbps``: the port rate after
    ``--link-gbps`` / ``record --emulated`` (None when unknown); ``pcie_gbps``: the PCIe bound
    (None when unknown or overridden by ``--link-gbps``); ``pcie_key``: the PCIe link the device
    sits on (functions of one link share its bound); ``text``: a short explanation, e.g.
    "126.0 Gb/s: PCIe link 32 GT/s x4 (PCIe 5.0, 128b/130b), below the 200 Gb/s port rate".
    """

    gbps: float | None
    source: str | None
    port_gbps: float | None
    pcie_gbps: float | None
    pcie_key: str | None
    text: str


def pcie_link_key(device: dict[str, Any]) -> str:
    """The PCIe link a device record sits on: its PCI address without the function number
    ("0000:01:00.1" -> "0000:01:00": functions of one device share one link), else its name."""
    pci = device.get("pci")
    if isinstance(pci, str) and "." in pci:
        return pci.rsplit(".", 1)[0]
    return f"device:{device.get('name')}"


def line_ceilings(meta: dict[str, Any]) -> dict[str, LineCeiling]:
    """Return {device: LineCeiling} for every device record of a manifest.

    Rule (README "Windows physics rules out"): with ``--link-gbps`` in effect, that value
    (source "--link-gbps"); else the port rate (``port_rates_gbps``), at most the real rate of
    an emulated link recorded with ``record --emulated GBPS`` (source "record --emulated"),
    and at most the bound of the device's PCIe link (``devices[i].pcie``, capture.py MANIFEST
    KEYS; ``rdmascope.pcie.record_bound``; source "PCIe link"). A missing or unreadable PCIe
    record is no bound (never 0); a device with neither a port rate nor a PCIe bound has
    ``gbps`` None.
    """
    ports = port_rates_gbps(meta)
    out: dict[str, LineCeiling] = {}
    for d in meta.get("devices") or []:
        if not isinstance(d, dict):
            continue
        name = str(d.get("name"))
        out[name] = _ceiling(meta, d, ports.get(name))
    return out


def port_line_ceilings(meta: dict[str, Any]) -> dict[tuple[str, int], LineCeiling]:
    """Return {(device, port): LineCeiling}: the rule of ``line_ceilings`` with each port's own
    rate (its ``rate_gbps`` and its netdev's ``speed_gbps``, the higher), so each port of a
    multi-port device is judged against its own link (a ConnectX-3 VPI's RoCE 40 port is not
    judged at its IB FDR port's 56 Gb/s). Ports without a rate of their own are left out (the
    device's ceiling applies)."""
    out: dict[tuple[str, int], LineCeiling] = {}
    for d in meta.get("devices") or []:
        if not isinstance(d, dict):
            continue
        for p in d.get("ports") or []:
            if not isinstance(p, dict) or not isinstance(p.get("port"), int):
                continue
            rates = [r for r in (_num(p.get("rate_gbps")), _num(p.get("speed_gbps")))
                     if r is not None]
            if not rates and _LINK_GBPS.get() is None:
                continue
            out[(str(d.get("name")), p["port"])] = _ceiling(meta, d, max(rates) if rates
                                                            else None)
    return out


def _ceiling(meta: dict[str, Any], d: dict[str, Any], port: float | None) -> LineCeiling:
    """One ceiling (``line_ceilings``' rule) for device record ``d`` with port rate ``port``."""
    from rdmascope.models import recorded_setup
    from rdmascope.pcie import record_bound

    override = _LINK_GBPS.get()
    real = recorded_setup(meta).get("emulated_real_gbps")
    key = pcie_link_key(d)
    if override is not None:
        return LineCeiling(override, "--link-gbps", override, None, key,
                           f"{override:g} Gb/s: --link-gbps")
    port_rate = port
    src, text = ("port rate", f"{port:g} Gb/s: port rate") if port is not None else (None, "")
    if port is not None and real is not None and real < port:
        port, src = float(real), "record --emulated"
        text = f"{port:g} Gb/s: record --emulated (what the emulated link really carries)"
    pb = record_bound(d.get("pcie"))
    pcie = pb[0] if pb else None
    gbps = port
    if pcie is not None and (port is None or pcie < port):
        gbps, src = pcie, "PCIe link"
        text = f"{pcie:.1f} Gb/s: {pb[1]}" + (
            f", below the {port:g} Gb/s " + ("port rate" if port_rate == port
                                             else "emulated link") if port else "")
    if gbps is None:
        text = "unknown (no port rate, no PCIe link recorded): never judged"
    return LineCeiling(gbps, src, port, pcie, key, text)


def cap_gbps(meta: dict[str, Any], device: str | None = None, *,
             factor: float = PLAUSIBLE_FACTOR) -> float:
    """The plausibility cap (Gb/s) of a byte counter of ``device``.

    ``factor`` x the device's link rate (``port_rates_gbps``); for a device without one,
    ``factor`` x the highest of any device; with none at all ``DEFAULT_MAX_GBPS``; with the
    override in effect, ``factor`` x the override.
    """
    override = _LINK_GBPS.get()
    if override is not None:
        return factor * override
    rates = port_rates_gbps(meta)
    if device is not None and device in rates:
        return factor * rates[device]
    if rates:
        return factor * max(rates.values())
    return DEFAULT_MAX_GBPS


def counter_cap_gbps(meta: dict[str, Any], counter_id: int, *,
                     factor: float = PLAUSIBLE_FACTOR) -> float:
    """The plausibility cap (Gb/s) of counter ``counter_id`` of a manifest, per sampling interval.

    ``cap_gbps`` of its device, times ``lifespan / interval`` when its bytes come from
    ``hw_counters/`` (``byte_source``): the kernel caches those values for ``lifespan`` ms
    (the port's ``hw_counters_lifespan_ms``, default 10; sysfs.md), so one 1 ms interval can
    hold 10 ms of bytes and show 10x the real rate without any glitch.
    """
    c = (meta.get("counters") or [])[counter_id]
    cap = cap_gbps(meta, c.get("device"), factor=factor)
    src = c.get("byte_source")
    if isinstance(src, str) and src.startswith("hw_counters/"):
        life = None
        for d in meta.get("devices") or []:
            if isinstance(d, dict) and d.get("name") == c.get("device"):
                for p in d.get("ports") or []:
                    if isinstance(p, dict) and p.get("port") == c.get("port"):
                        life = _num(p.get("hw_counters_lifespan_ms"))
        life_ns = (life if life is not None else DEFAULT_LIFESPAN_MS) * 1e6
        interval = _num(meta.get("interval_ns")) or 1e6
        cap *= max(1.0, life_ns / interval)
    return cap


def implausible(nbytes: np.ndarray, dt_ns: np.ndarray, unc0_ns: np.ndarray,
                unc1_ns: np.ndarray, interval_ns: int, max_gbps: float) -> np.ndarray:
    """Return a bool array: which steps of ``nbytes`` bytes imply more than ``max_gbps``.

    Shapes: all arrays length n (float bytes; int ns). The rate is taken over the longest
    duration the readings allow: ``dt + unc0 + unc1``, at least ``interval_ns``; bits / ns = Gb/s.
    """
    if not math.isfinite(max_gbps):
        return np.zeros(len(nbytes), bool)
    nbytes = np.asarray(nbytes, np.float64)
    if len(nbytes) and max_gbps > 0 and nbytes.max() * 8.0 <= max_gbps * float(interval_ns):
        # none: every duration is at least interval_ns (and rounding is monotone), so no step
        # beats the largest one's bound; the usual case, in one pass instead of six
        return np.zeros(len(nbytes), bool)
    longest = np.maximum(dt_ns + unc0_ns + unc1_ns, interval_ns).astype(np.float64)
    return nbytes * 8.0 > max_gbps * longest
