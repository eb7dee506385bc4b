"""Discover RDMA devices, ports and counters under a sysfs root, and describe counters for a capture.

Everything is read from files under ``<sysfs_root>/class/infiniband`` (layout: sysfs.md, "Layout").
Nothing here raises on a missing or odd file: that item becomes ``None`` ("unavailable") and one
message naming the file and what was expected goes into the device's ``warnings`` list (the
robustness rule of sysfs.md; the faults that broke other tools: node_exporter#966, #1511, #2769,
#3265, procfs#341, #361, #589).

Public API::

    discover(sysfs_root="/sys", devices=None) -> list[DeviceInfo]
    counter_descriptors(devices, counters=DEFAULT_COUNTERS, netdev_stats=False, sysfs_root=None)
        -> list[dict]           # the capture's ``manifest["counters"]`` (keys per capture.py)
    sysfs_root_hint(root) -> str | None         # root has no class/infiniband: what it is instead
    available_counters(devices) -> list[str]    # counter names found on the devices' ports
    counter_exists(device, port, name) -> bool  # is there a file ``name`` would be read from?
    discovered_devices(devices) -> list[dict]   # [{name, pci, netdevs}] (manifest key)
    parse_rate(text) -> float | None            # "200 Gb/sec (4X HDR)" -> 200.0 (Gb/s)
    parse_state(text) -> tuple[int, str] | None # "4: ACTIVE" -> (4, "ACTIVE")
    default_route_netdevs(sysfs_root) -> list[str]   # the default route's interfaces
    extra_netdev_descriptors(sysfs_root, {netdev: role}) -> list[dict]  # TCP elsewhere
    COUNTER_WIDTHS / NARROW_SOURCES             # the width table, with its kernel sources

Size: one module (just over 800 lines) because it is the sampler's one reader of the sysfs layout
(devices, ports, byte-counter sources, netdevs, counter descriptors) under one robustness rule
(never raise; one warning naming the file).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Counters sampled by default: the two data counters (each extra counter is one more firmware
#: command per sweep on real hardware, sysfs.md "What mlx5 counts in RoCE mode").
DEFAULT_COUNTERS: tuple[str, ...] = ("port_xmit_data", "port_rcv_data")
#: Netdev statistics sampled with ``netdev_stats=True`` (plain bytes, kernel stack traffic).
NETDEV_STATS: tuple[str, ...] = ("tx_bytes", "rx_bytes")

# Counter widths of the 32-bit PortCounters attribute as the kernel serves them
# (drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR(name, counter, width, offset)). The narrow ones
# saturate at 2^width - 1 instead of wrapping (sysfs.md, "Units and width").
_PMA_WIDTHS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
}
# Served by PortCountersExtended (64-bit) when the port uses the extended set, else 32-bit.
_DATA_PACKET_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets",
                         "port_rcv_packets")
# Exist only in the extended set (IETF variant): always 64-bit, and their presence is the sign of
# the extended set (sysfs.md).
_EXT_ONLY_COUNTERS = ("unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
                      "multicast_rcv_packets")
_U32_MAX = (1 << 32) - 1

#: THE counter-width table: the width in bits of each source whose width the kernel or driver
#: fixes, with the evidence (docs/sysfs.md, "Counter widths"). A source not listed here has an
#: unknown width until a value above 2^32-1 proves 64 bits (``_detect_extended``; the analysis
#: applies the same rule to the readings).
#: Keys: ("netdev", <stat>) for ``class/net/<if>/statistics/*``; ("driver", <driver>) for the
#: data/packet counters in ``counters/`` of a device bound to that PCI driver.
COUNTER_WIDTHS: dict[tuple[str, str], tuple[int, str]] = {
    ("netdev", "*"): (64, "net/core/net-sysfs.c: NETSTAT_ENTRY prints the rtnl_link_stats64 "
                          "fields (u64) with fmt_u64 \"%llu\""),
    ("driver", "mlx5_core"): (64, "drivers/infiniband/hw/mlx5/mad.c: the PMA ClassPortInfo "
                                  "reply sets IB_PMA_CLASS_CAP_EXT_WIDTH, so "
                                  "drivers/infiniband/core/sysfs.c serves counters/ from "
                                  "PortCountersExtended (64-bit)"),
}
#: Sources known to be 32 bits wide (they saturate at 2^32-1): named with their evidence.
NARROW_SOURCES: tuple[tuple[str, str], ...] = (
    ("counters/ data/packet counters of a port served from the PortCounters attribute "
     "(pma_group: the device's ClassPortInfo has neither IB_PMA_CLASS_CAP_EXT_WIDTH nor "
     "..._NOIETF)", "drivers/infiniband/core/sysfs.c get_counter_table(); PORT_PMA_ATTR("
     "port_xmit_data, 12, 32, 192)"),
    ("counters/ beside counters_ext/ on legacy mlx4 (MLNX_OFED, kernels < 4.5): the 32-bit copy",
     "MLNX_OFED mlx4 sysfs; node_exporter's sys.ttar fixture"),
    ("counters/port_xmit_wait (32) and the error counters (16, 8, 4 bits)",
     "drivers/infiniband/core/sysfs.c PORT_PMA_ATTR widths"),
)


def netdev_width_bits() -> int:
    """The width of netdev ``statistics/*`` (64: ``COUNTER_WIDTHS``)."""
    return COUNTER_WIDTHS[("netdev", "*")][0]

#: Where a port's byte counters are, per driver family: THE table of byte-counter sources (the
#: README's table says the same). Checked in this order per port; the first with its tx or rx
#: file present is used. Each entry: (label, folder, tx file(s), rx file(s), unit,
#: bytes per unit, width in bits or None when the files do not tell, drivers, source cited).
#: A source is chosen when one of its tx or rx files exists (a missing one is sampled
#: unavailable). Several files for one direction (irdma: IPv4 + IPv6) are sampled as several
#: counters of the same series, whose bytes the analysis adds (unknown if either is unknown).
BYTE_SOURCES: tuple[tuple[str, str, str | tuple[str, ...], str | tuple[str, ...], str, int,
                          int | None, str, str], ...] = (
    ("counters_ext", "counters_ext", "port_xmit_data_64", "port_rcv_data_64", "4 bytes", 4, 64,
     "legacy mlx4 (MLNX_OFED, kernels < 4.5): 64-bit copies beside a 32-bit counters/ set",
     "MLNX_OFED mlx4 sysfs; node_exporter's committed sys.ttar fixture"),
    ("counters", "counters", "port_xmit_data", "port_rcv_data", "4 bytes", 4, None,
     "every driver with a PMA (mlx5, mlx4, hfi1, qib, ...): data octets divided by 4",
     "drivers/infiniband/core/sysfs.c (PORT_PMA_ATTR / PORT_PMA_ATTR_EXT); "
     "Documentation/ABI/stable/sysfs-class-infiniband"),
    ("hw_counters", "hw_counters", "tx_bytes", "rx_bytes", "bytes", 1, 64,
     "bnxt_re, mana, efa: plain bytes, cached for hw_counters/lifespan ms",
     "drivers/infiniband/hw/bnxt_re/hw_counters.c (bnxt_re_stat_descs), "
     "drivers/infiniband/hw/mana/counters.c (mana_ib_port_stats_desc), "
     "drivers/infiniband/hw/efa/efa_verbs.c (EFA_DEFINE_PORT_STATS)"),
    ("irdma", "hw_counters", ("ip4OutOctets", "ip6OutOctets"), ("ip4InOctets", "ip6InOctets"),
     "bytes", 1, 64,
     "irdma (Intel E810 / X722): IP-level octets (IP headers included, Ethernet framing not) of "
     "the RDMA engine's traffic, IPv4 + IPv6 summed; cached for hw_counters/lifespan ms",
     "drivers/infiniband/hw/irdma/verbs.c (irdma_hw_stat_names), "
     "drivers/infiniband/hw/irdma/ctrl.c (48-bit hardware counters accumulated into 64 bits)"),
)
#: Drivers known to have no byte counter at all (said per port by ``describe_no_bytes``).
NO_BYTE_SOURCES: tuple[tuple[str, str], ...] = (
    ("rxe (soft RoCE)", "hw_counters/ has packets only (sent_pkts, rcvd_pkts): "
     "drivers/infiniband/sw/rxe/rxe_hw_counters.c"),
    ("siw (soft iWARP)", "no counters/ and no hw_counters/: drivers/infiniband/sw/siw"),
)

_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec\b")
_STATE_RE = re.compile(r"^\s*([0-9]+)\s*:\s*(\S.*?)\s*$")


@dataclass
class PortInfo:
    """One port of an RDMA device. ``None`` means unavailable (see the device's ``warnings``)."""

    port: int
    path: str
    state: str | None = None            # "ACTIVE"
    state_id: int | None = None         # 4
    phys_state: str | None = None       # "LinkUp"
    phys_state_id: int | None = None    # 5
    link_layer: str | None = None       # "InfiniBand" | "Ethernet"
    rate: str | None = None             # the raw string, e.g. "200 Gb/sec (4X HDR)"
    rate_gbps: float | None = None      # parsed, Gb/s (1e9 bit/s); NOT a reliable capacity
    counters_dir: str | None = None     # "counters" | "counters_ext" | None (no counters at all)
    counters: list[str] = field(default_factory=list)     # file names in counters/
    counters_ext: list[str] = field(default_factory=list)  # file names in counters_ext/ (old)
    extended_counters: bool | None = None  # data/packet counters are 64-bit; None = unknown
    extended_evidence: str | None = None   # why we believe extended_counters
    hw_counters: list[str] = field(default_factory=list)
    hw_counters_lifespan_ms: int | None = None
    # where the bytes are (BYTE_SOURCES): "counters" | "counters_ext" | "hw_counters" | None
    byte_source: str | None = None
    # [tx path(s)..., rx path(s)...] relative to the port (one each, two each for irdma)
    byte_files: list[str] = field(default_factory=list)
    byte_unit: str | None = None        # "4 bytes" | "bytes"
    byte_width_bits: int | None = None  # 64, 32, or None when unknown
    byte_note: str | None = None        # why this source / why there is none
    netdev: str | None = None           # the port's netdev (gid_attrs/ndevs/0, else the only one)
    speed_gbps: float | None = None     # that netdev's ``speed`` (Mb/s in sysfs) in Gb/s
    rate_check: str | None = None       # set when ``rate`` and the netdev speed disagree

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict of every field."""
        return asdict(self)


@dataclass
class DeviceInfo:
    """One RDMA device under ``class/infiniband``. ``None`` fields are unavailable."""

    name: str
    path: str                           # <root>/class/infiniband/<name>
    pci: str | None = None              # "0000:01:00.1", basename of the `device` link target
    netdevs: list[str] = field(default_factory=list)  # from device/net/
    node_guid: str | None = None
    fw_ver: str | None = None
    hca_type: str | None = None
    board_id: str | None = None
    node_type: str | None = None
    sys_image_guid: str | None = None   # one per adapter (all its PCI functions); may be 0 / absent
    driver: str | None = None           # the PCI driver: basename of ``device/driver`` (mlx5_core)
    ports: list[PortInfo] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # the PCI function's link (``rdmascope.pcie.pcie_record``): None when the device has none of
    # the files (not a PCIe function, or no ``device`` link); unknown fields are None, never 0
    pcie: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict (ports as dicts)."""
        d = asdict(self)
        d["ports"] = [p.to_dict() for p in self.ports]
        return d

    def port(self, n: int) -> PortInfo | None:
        """Return port ``n`` or None."""
        for p in self.ports:
            if p.port == n:
                return p
        return None


# ----------------------------------------------------------------------------------------------
# Small parsers (pure functions)
# ----------------------------------------------------------------------------------------------


def parse_rate(text: str | None) -> float | None:
    """Parse a port ``rate`` string to Gb/s (1e9 bit/s); None when it is not "<number> Gb/sec ...".

    Accepts "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)", the old "10 Gb/sec (4X)" (sysfs.md,
    "Layout"). The value is the link speed the driver reports, not a reliable capacity.
    """
    if text is None:
        return None
    m = _RATE_RE.match(text)
    return float(m.group(1)) if m else None


def parse_state(text: str | None) -> tuple[int, str] | None:
    """Parse a "<id>: <name>" ``state``/``phys_state`` string; None when it has another shape."""
    if text is None:
        return None
    m = _STATE_RE.match(text)
    return (int(m.group(1)), m.group(2)) if m else None


def _read_text(path: Path, what: str, warnings: list[str], *, required: bool = True) -> str | None:
    """Return a sysfs file's stripped text, or None (+ one warning when ``required``)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(4096)
    except FileNotFoundError:
        if required:
            warnings.append(f"{path}: missing; {what} unavailable")
        return None
    except OSError as exc:
        warnings.append(f"{path}: cannot read ({exc.strerror or exc}); {what} unavailable")
        return None
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        warnings.append(f"{path}: not UTF-8 text; {what} unavailable")
        return None
    if not text:
        warnings.append(f"{path}: empty; {what} unavailable")
        return None
    return text


def _listdir(path: Path, what: str, warnings: list[str], *, required: bool = True) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        if required:
            warnings.append(f"{path}: missing; {what} unavailable")
    except OSError as exc:
        warnings.append(f"{path}: cannot list ({exc.strerror or exc}); {what} unavailable")
    return []


# ----------------------------------------------------------------------------------------------
# Discovery
# ----------------------------------------------------------------------------------------------


def infiniband_dir(sysfs_root: str | os.PathLike = "/sys") -> Path:
    """Return ``<sysfs_root>/class/infiniband``."""
    return Path(sysfs_root) / "class" / "infiniband"


def sysfs_root_hint(sysfs_root: str | os.PathLike) -> str | None:
    """Say what a ``--sysfs-root`` without ``class/infiniband`` points at instead, or None.

    Recognizes the usual slips: the ``class/infiniband`` folder itself (it holds device folders
    with ``ports/``), the ``class`` folder (it holds ``infiniband/``) and one device's folder (it
    holds ``ports/``). The text ends with the root to use when it can be derived from the path.
    """
    root = Path(sysfs_root)
    if not root.is_dir() or infiniband_dir(root).is_dir():
        return None

    def has_device_dirs(d: Path) -> bool:
        try:
            return any((d / n / "ports").is_dir() for n in os.listdir(d))
        except OSError:
            return False

    what = up = None
    if has_device_dirs(root):
        what, up = "a class/infiniband folder (it holds RDMA device folders with ports/)", 2
    elif (root / "infiniband").is_dir():
        what, up = "a class folder (it holds infiniband/)", 1
    elif (root / "ports").is_dir() and root.parent.name == "infiniband":
        what, up = "one RDMA device's folder (it holds ports/)", 3
    if what is None:
        return None
    resolved = root.resolve()
    use = resolved.parents[up - 1] if len(resolved.parents) >= up else None
    return (f"{root} looks like {what}: point --sysfs-root at the folder that contains class/ "
            f"(e.g. .../sys)" + (f"; here: --sysfs-root {use}" if use is not None else ""))


def discover(sysfs_root: str | os.PathLike = "/sys",
             devices: list[str] | None = None) -> list[DeviceInfo]:
    """Describe every RDMA device under ``<sysfs_root>/class/infiniband`` (or only ``devices``).

    Returns devices sorted by name, each with its ports (sorted by number). A missing
    ``class/infiniband`` gives an empty list (the caller says so). Never raises for file
    problems: each missing or odd item is None plus one message in ``DeviceInfo.warnings``.
    A name in ``devices`` that does not exist gives a DeviceInfo with no ports and a warning.
    """
    ib = infiniband_dir(sysfs_root)
    try:
        names = sorted(os.listdir(ib))
    except OSError:
        names = []
    if devices is not None:
        wanted = list(dict.fromkeys(devices))
        out = []
        for n in wanted:
            if n in names:
                out.append(_discover_device(ib / n, n))
            else:
                out.append(DeviceInfo(name=n, path=str(ib / n),
                                      warnings=[f"{ib / n}: no such RDMA device"]))
        return out
    return [_discover_device(ib / n, n) for n in names]


def _discover_device(dpath: Path, name: str) -> DeviceInfo:
    w: list[str] = []
    dev = DeviceInfo(name=name, path=str(dpath), warnings=w)
    dev.node_guid = _read_text(dpath / "node_guid", "node_guid", w)
    dev.fw_ver = _read_text(dpath / "fw_ver", "fw_ver", w)
    # hca_type, board_id and node_type are driver-specific (hfi1 has no hca_type): no warning.
    dev.hca_type = _read_text(dpath / "hca_type", "hca_type", w, required=False)
    dev.board_id = _read_text(dpath / "board_id", "board_id", w, required=False)
    dev.node_type = _read_text(dpath / "node_type", "node_type", w, required=False)
    dev.sys_image_guid = _read_text(dpath / "sys_image_guid", "sys_image_guid", w,
                                    required=False)
    # PCI address: basename of the `device` link target (e.g. ../../../0000:01:00.1).
    dlink = dpath / "device"
    try:
        target = os.readlink(dlink)
        dev.pci = os.path.basename(target.rstrip("/")) or None
    except FileNotFoundError:
        w.append(f"{dlink}: missing; PCI address unavailable")
    except OSError as exc:
        if dlink.is_dir():  # a copied tree may hold a real directory: no address to read
            w.append(f"{dlink}: not a symbolic link; PCI address unavailable")
        else:
            w.append(f"{dlink}: cannot read link ({exc.strerror or exc}); PCI address unavailable")
    dev.pcie = read_pcie(dlink)
    try:
        dev.driver = os.path.basename(os.readlink(dlink / "driver").rstrip("/")) or None
    except OSError:
        dev.driver = None  # not bound, not a PCI function, or a copied tree: width from values
    if (dlink / "net").is_dir():
        dev.netdevs = _listdir(dlink / "net", "netdev names", w)
    else:
        w.append(f"{dlink / 'net'}: missing; netdev names unavailable")
    ports_dir = dpath / "ports"
    for pn in _listdir(ports_dir, "ports", w):
        if not pn.isdigit():
            w.append(f"{ports_dir / pn}: port name is not a number; ignored")
            continue
        dev.ports.append(_discover_port(ports_dir / pn, int(pn), w))
    dev.ports.sort(key=lambda p: p.port)
    for p in dev.ports:
        _check_rate(dev, p, dlink)
        _driver_width(dev, p)
    return dev


def _driver_width(dev: DeviceInfo, p: PortInfo) -> None:
    """Apply ``COUNTER_WIDTHS`` by driver to a port whose data counters are in ``counters/``
    and whose width the files did not tell (no unicast/multicast files, no value > 2^32-1)."""
    known = COUNTER_WIDTHS.get(("driver", dev.driver or ""))
    if known is None or p.extended_counters is not None:
        return
    p.extended_counters = True
    p.extended_evidence = f"driver {dev.driver}: {known[1]}"
    if p.byte_source == "counters":
        p.byte_width_bits = known[0]


def read_pcie(function_dir: str | os.PathLike) -> dict[str, Any] | None:
    """Read the PCIe link files of a PCI function folder (``rdmascope.pcie.PCIE_FILES``).

    Returns ``rdmascope.pcie.pcie_record`` of what was read (a missing, unreadable, empty or
    "Unknown" file is unknown, never 0), or None when none of the files exists. Never raises.
    """
    from rdmascope.pcie import PCIE_FILES, pcie_record

    d = Path(function_dir)
    texts: dict[str, str | None] = {}
    for name in PCIE_FILES:
        texts[name] = _read_text(d / name, name, [], required=False)
    if all(t is None for t in texts.values()) and not any(
            (d / n).exists() for n in PCIE_FILES):
        return None
    return pcie_record(texts)


def _check_rate(dev: DeviceInfo, p: PortInfo, dlink: Path) -> None:
    """Cross-check the port's ``rate`` string with its netdev's ``speed`` (Mb/s).

    sysfs.md: ``rate`` is not reliable (mlx5 falls back to "40 Gb/sec (4X QDR)" for Ethernet
    modes it does not know). The netdev is named by ``gid_attrs/ndevs/0``, else the device's only
    netdev. ``speed`` is -1 (or unreadable) while the link is down: then nothing is said. When
    the two differ by more than 10 %, ``rate_check`` and one warning say so.
    """
    nd = _read_text(Path(p.path) / "gid_attrs" / "ndevs" / "0", "ndevs", [], required=False)
    if nd is None and len(dev.netdevs) == 1:
        nd = dev.netdevs[0]
    if nd is None:
        return
    p.netdev = nd
    text = _read_text(dlink / "net" / nd / "speed", "speed", [], required=False)
    try:
        mbps = int(text) if text is not None else -1
    except ValueError:
        mbps = -1
    if mbps <= 0:
        return
    p.speed_gbps = mbps / 1000.0
    if p.rate_gbps is not None and abs(p.rate_gbps - p.speed_gbps) > 0.1 * p.speed_gbps:
        hi = max(p.rate_gbps, p.speed_gbps)
        p.rate_check = (f"port {p.port} rate {p.rate!r} says {p.rate_gbps:g} Gb/s but netdev "
                        f"{nd} speed says {p.speed_gbps:g} Gb/s; the analysis takes the higher "
                        f"({hi:g} Gb/s) for its plausibility cap and capacity (state the "
                        "capacity with --link-gbps)")
        dev.warnings.append(f"{p.path}/rate: {p.rate_check}")


def _discover_port(ppath: Path, n: int, w: list[str]) -> PortInfo:
    p = PortInfo(port=n, path=str(ppath))
    for attr in ("state", "phys_state"):
        text = _read_text(ppath / attr, attr, w)
        parsed = parse_state(text)
        if text is not None and parsed is None:
            w.append(f"{ppath / attr}: {text!r} is not '<id>: <name>'; {attr} unavailable")
        if parsed is not None:
            setattr(p, f"{attr}_id", parsed[0])
            setattr(p, attr, parsed[1])
    p.link_layer = _read_text(ppath / "link_layer", "link_layer", w)  # strip() eats blank lines
    p.rate = _read_text(ppath / "rate", "rate", w)
    p.rate_gbps = parse_rate(p.rate)
    if p.rate is not None and p.rate_gbps is None:
        w.append(f"{ppath / 'rate'}: {p.rate!r} is not '<number> Gb/sec ...'; "
                 "rate_gbps unavailable")
    has_counters = (ppath / "counters").is_dir()
    has_ext = (ppath / "counters_ext").is_dir()
    if has_counters:
        p.counters = _listdir(ppath / "counters", "counters", w)
    if has_ext:
        p.counters_ext = _listdir(ppath / "counters_ext", "counters_ext", w)
    if not has_counters and not has_ext:
        w.append(f"{ppath / 'counters'}: missing (driver without counters, or another network "
                 "namespace); port counters unavailable")
    p.extended_counters, p.extended_evidence = _detect_extended(ppath, p)
    if has_ext and "port_xmit_data_64" in p.counters_ext and (
            "port_xmit_data" not in p.counters):
        p.counters_dir = "counters_ext"
    elif has_counters:
        p.counters_dir = "counters"
    elif has_ext:
        p.counters_dir = "counters_ext"
    hw = ppath / "hw_counters"
    hw_names = _listdir(hw, "hw_counters", w) if hw.is_dir() else []
    if hw.is_dir():
        p.hw_counters = [c for c in hw_names if c != "lifespan"]
        life = _read_text(hw / "lifespan", "hw_counters/lifespan", w, required=False)
        if life is not None:
            try:
                p.hw_counters_lifespan_ms = int(life)
            except ValueError:
                w.append(f"{hw / 'lifespan'}: {life!r} is not an integer (ms); lifespan "
                         "unavailable")
    _pick_byte_source(p)
    return p


def _pick_byte_source(p: PortInfo) -> None:
    """Choose the port's byte counters from ``BYTE_SOURCES``: the first with a tx or rx file.

    When only one of the two files exists, the other is still described, and sampled as
    unavailable (its bytes unknown, never zero).
    """
    have = {"counters": set(p.counters), "counters_ext": set(p.counters_ext),
            "hw_counters": set(p.hw_counters)}
    for label, folder, tx, rx, unit, _bpu, width, drivers, _cite in BYTE_SOURCES:
        files = [*_files(tx), *_files(rx)]
        if any(f in have[folder] for f in files):  # a missing twin file: unavailable
            p.byte_source = label
            p.byte_files = [f"{folder}/{f}" for f in files]
            p.byte_unit = unit
            if label == "counters":
                width = 64 if p.extended_counters else None
            p.byte_width_bits = width
            p.byte_note = drivers
            if label == "counters_ext" and "port_xmit_data" in p.counters:
                p.byte_note += "; counters/port_xmit_data is the 32-bit copy (sticks at 2^32-1)"
                p.extended_counters = False
                p.extended_evidence = ("counters_ext/port_xmit_data_64 beside counters/: the "
                                       "counters/ data counters are the 32-bit set")
            return
    p.byte_note = describe_no_bytes(p)


def _files(spec: str | tuple[str, ...]) -> tuple[str, ...]:
    """The file names of one direction of a ``BYTE_SOURCES`` entry (one, or several summed)."""
    return (spec,) if isinstance(spec, str) else tuple(spec)


def byte_files_of(port: PortInfo, direction: str) -> list[str]:
    """The port's byte-counter files of ``direction`` ("tx" | "rx"), relative to the port: one
    (``counters/port_xmit_data``) or several whose bytes add up (irdma's IPv4 + IPv6 octets)."""
    src = next((b for b in BYTE_SOURCES if b[0] == port.byte_source), None)
    if src is None:
        return []
    n_tx = len(_files(src[2]))
    return port.byte_files[:n_tx] if direction == "tx" else port.byte_files[n_tx:]


def describe_no_bytes(p: PortInfo) -> str:
    """Say why a port has no byte counter, naming what it does have (see NO_BYTE_SOURCES)."""
    if not p.counters and not p.counters_ext and not p.hw_counters:
        return ("no byte counter: no counters/ and no hw_counters/ (a software iWARP device such "
                "as siw, or another network namespace)")
    pk = [c for c in p.hw_counters if c in ("sent_pkts", "rcvd_pkts")]
    if pk:
        return (f"no byte counter: hw_counters/ has packets only ({', '.join(pk)}; soft RoCE "
                "rxe)")
    return "no byte counter: neither counters/port_xmit_data, counters_ext/port_xmit_data_64 " \
        "nor hw_counters/tx_bytes exists"


def _detect_extended(ppath: Path, p: PortInfo) -> tuple[bool | None, str | None]:
    """Decide whether the data/packet counters are the 64-bit PortCountersExtended set.

    sysfs.md: the file names do not tell; ``unicast_xmit_packets``/``multicast_xmit_packets`` exist
    only in the extended set. Old kernels (< 4.5) serve 64-bit values in ``counters_ext/``. The
    kernel also has an extended set without the unicast/multicast files (the "noietf" group), so
    their absence proves nothing; a data/packet value above 2^32-1 proves 64 bits. Otherwise
    the width is unknown (None).
    """
    if any(c in p.counters for c in _EXT_ONLY_COUNTERS):
        return True, "unicast/multicast packet counters present"
    if any(c.endswith("_64") for c in p.counters_ext) and not p.counters:
        return True, "counters_ext/ (pre-4.5 kernel)"
    for c in _DATA_PACKET_COUNTERS:
        if c in p.counters:
            text = _read_text(ppath / "counters" / c, c, [], required=False)
            if text is not None and text.isdigit() and int(text) > _U32_MAX:
                return True, f"{c} value exceeds 2^32-1"
    return None, None


# ----------------------------------------------------------------------------------------------
# Counter descriptors (manifest["counters"])
# ----------------------------------------------------------------------------------------------


def _ib_descriptors(dev: DeviceInfo, port: PortInfo | None, port_no: int, name: str
                    ) -> list[dict[str, Any]]:
    """The descriptors of counter ``name``: for the byte counters ("port_xmit_data" /
    "port_rcv_data") of a port with a byte source, one per file of that direction (irdma: two,
    whose bytes add up); else ``_ib_descriptor``'s one."""
    if name in ("port_xmit_data", "port_rcv_data") and port is not None and \
            port.byte_source is not None:
        ports_dir = Path(dev.path) / "ports" / str(port_no)
        direction = "tx" if name == "port_xmit_data" else "rx"
        src = next(b for b in BYTE_SOURCES if b[0] == port.byte_source)
        # the port's byte counters, wherever its driver keeps them (BYTE_SOURCES)
        return [{
            "source": "infiniband",
            "device": dev.name,
            "port": port_no,
            "name": rel.split("/", 1)[1].removesuffix("_64"),  # counters_ext: same counter
            "path": str(ports_dir / rel),
            "unit": src[4],
            "bytes_per_unit": src[5],
            "width_bits": port.byte_width_bits,
            "direction": direction,
            "byte_source": rel,
        } for rel in byte_files_of(port, direction)]
    return [_ib_descriptor(dev, port, port_no, name)]


def _ib_descriptor(dev: DeviceInfo, port: PortInfo | None, port_no: int, name: str
                   ) -> dict[str, Any]:
    """Build one infiniband counter descriptor (file may be missing: sampled as unavailable)."""
    ports_dir = Path(dev.path) / "ports" / str(port_no)
    if name in ("port_xmit_data", "port_rcv_data") and port is not None and \
            port.byte_source is not None:
        return _ib_descriptors(dev, port, port_no, name)[0]
    hw = False
    if name.startswith("hw_counters/"):
        name, hw = name.split("/", 1)[1], True
    elif port is not None and name not in port.counters and name in port.hw_counters:
        hw = True
    if hw:
        path = ports_dir / "hw_counters" / name
    elif (port is not None and port.counters_dir == "counters_ext"
          and f"{name}_64" in port.counters_ext):
        path = ports_dir / "counters_ext" / f"{name}_64"
    else:
        path = ports_dir / "counters" / name
    ext = port.extended_counters if port is not None else None
    if hw:
        unit, bpu, width = "count", None, None
    elif name in ("port_xmit_data", "port_rcv_data"):
        # Data octets divided by 4, always; never multiplied by the lane count (sysfs.md).
        unit, bpu = "4 bytes", 4
        width = 64 if (ext or path.parent.name == "counters_ext") else None
    elif name in ("port_xmit_packets", "port_rcv_packets"):
        unit, bpu = "packets", None
        width = 64 if (ext or path.parent.name == "counters_ext") else None
    elif name in _EXT_ONLY_COUNTERS:
        unit, bpu, width = "packets", None, 64
    else:
        unit, bpu, width = "count", None, _PMA_WIDTHS.get(name)
    return {
        "source": "infiniband",
        "device": dev.name,
        "port": port_no,
        "name": name,
        "path": str(path),
        "unit": unit,
        "bytes_per_unit": bpu,
        "width_bits": width,
        "direction": _direction(name),
    }


def _direction(name: str) -> str | None:
    if "xmit" in name or name.startswith("tx_"):
        return "tx"
    if "rcv" in name or name.startswith("rx_"):
        return "rx"
    return None


def netdev_stats_path(sysfs_root: str | os.PathLike, dev: DeviceInfo, netdev: str, stat: str
                      ) -> Path:
    """Return the statistics file of ``netdev``: ``<root>/class/net/<if>/statistics/<stat>``.

    Falls back to ``<device>/device/net/<if>/statistics/<stat>`` (the same directory on a real
    system) when ``class/net/<if>`` does not exist in the tree.
    """
    p = Path(sysfs_root) / "class" / "net" / netdev / "statistics" / stat
    if p.parent.parent.exists():
        return p
    return Path(dev.path) / "device" / "net" / netdev / "statistics" / stat


def default_route_netdevs(sysfs_root: str | os.PathLike = "/sys") -> list[str]:
    """The interfaces of the default route(s) (IPv4 ``proc/net/route``, IPv6
    ``proc/net/ipv6_route``) of the proc tree beside ``sysfs_root`` (``/sys`` -> ``/proc``): where
    a collective falls back to sockets when it does not use the RDMA devices' own netdevs.
    Empty when there is no such file or no default route. Never raises."""
    proc = Path(sysfs_root).resolve().parent / "proc" / "net"
    out: list[str] = []
    try:
        with open(proc / "route") as f:
            next(f, None)
            for line in f:
                cols = line.split()
                # Iface Destination Gateway Flags ...: destination 0 and RTF_UP (0x1)
                if len(cols) > 3 and cols[1] == "00000000" and int(cols[3], 16) & 1:
                    out.append(cols[0])
    except (OSError, ValueError):
        pass
    try:
        with open(proc / "ipv6_route") as f:
            for line in f:
                cols = line.split()
                # dest, dest prefix len ... iface last: ::/0 with RTF_UP
                if len(cols) >= 10 and cols[0] == "0" * 32 and cols[1] == "00" and \
                        int(cols[8], 16) & 1 and cols[9] != "lo":
                    out.append(cols[9])
    except (OSError, ValueError):
        pass
    return list(dict.fromkeys(out))


def netdev_exists(sysfs_root: str | os.PathLike, netdev: str) -> bool:
    """True when ``<root>/class/net/<netdev>/statistics`` exists."""
    return (Path(sysfs_root) / "class" / "net" / netdev / "statistics").is_dir()


def extra_netdev_descriptors(sysfs_root: str | os.PathLike, netdevs: dict[str, str]
                             ) -> list[dict[str, Any]]:
    """tx/rx_bytes descriptors of netdevs that belong to no sampled RDMA device (the
    default-route interface, ``record --netdev NAME``): ``netdevs`` maps name -> why it is
    sampled ("default route", "--netdev"). ``device`` is the netdev's own name, ``role`` says
    why; 64-bit (``COUNTER_WIDTHS``)."""
    out = []
    for nd, role in netdevs.items():
        for stat in NETDEV_STATS:
            out.append({
                "source": "netdev", "device": nd, "netdev": nd, "port": None, "name": stat,
                "path": str(Path(sysfs_root) / "class" / "net" / nd / "statistics" / stat),
                "unit": "bytes", "bytes_per_unit": 1, "width_bits": netdev_width_bits(),
                "direction": _direction(stat), "role": role,
            })
    return out


def counter_descriptors(devices: list[DeviceInfo], counters: tuple[str, ...] | list[str] =
                        DEFAULT_COUNTERS, *, netdev_stats: bool = False,
                        sysfs_root: str | os.PathLike | None = None,
                        ports: dict[str, list[int]] | None = None) -> list[dict[str, Any]]:
    """Build the capture's counter descriptors (``manifest["counters"]``; keys per capture.py).

    One descriptor per (device, port, counter) for every port of every device in ``devices``
    (or only ``ports[device]``), in the order devices -> ports -> ``counters``; then, with
    ``netdev_stats``, tx_bytes and rx_bytes of each device's netdevs (``source`` "netdev",
    ``port`` None, ``device`` the RDMA device, plus ``netdev``). A counter name may be given as
    ``hw_counters/<name>``; a name found only in ``hw_counters/`` is taken from there (cached by
    the kernel for ``lifespan`` ms, sysfs.md).

    Units (sysfs.md, "Units and width"): port_xmit_data/port_rcv_data have ``unit`` "4 bytes"
    and ``bytes_per_unit`` 4 (never the lane count); netdev tx_bytes/rx_bytes "bytes" and 1;
    packet and other counters null. ``width_bits``: 64 for the extended set's data/packet
    counters (and always for unicast/multicast packets), the PortCounters width for the narrow
    ones (port_xmit_wait 32, symbol_error 16, link_downed 8 ...), null when unknown (a data
    counter whose port shows no sign of the extended set, hw_counters, netdev). ``direction``:
    "tx" (xmit/tx_), "rx" (rcv/rx_) or null.

    The byte counters ("port_xmit_data"/"port_rcv_data" in ``counters``) are read from where the
    port's driver keeps them (``BYTE_SOURCES``: ``counters/`` in units of 4 bytes,
    ``counters_ext/*_64`` for legacy mlx4, ``hw_counters/tx_bytes``/``rx_bytes`` in bytes); the
    descriptor then names the real file, unit and width, plus ``byte_source`` (e.g.
    "hw_counters/tx_bytes"). A port with no byte counter (``PortInfo.byte_note`` says why) gets
    no byte descriptor. Other counters whose file does not exist are still described (the
    sampler marks them unavailable with one event and retries opening them). ``sysfs_root`` (for the netdev statistics path)
    defaults to the root the devices were discovered under.
    """
    out: list[dict[str, Any]] = []
    for dev in devices:
        port_list = [p.port for p in dev.ports]
        if ports is not None and dev.name in ports:
            port_list = list(ports[dev.name])
        for pn in port_list:
            port = dev.port(pn)
            for name in counters:
                if name in DEFAULT_COUNTERS and port is not None and port.byte_source is None:
                    continue  # no byte counter on this port (port.byte_note says why)
                out.extend(_ib_descriptors(dev, port, pn, name))
    if netdev_stats:
        for dev in devices:
            root = sysfs_root if sysfs_root is not None else Path(dev.path).parents[2]
            for nd in dev.netdevs:
                for stat in NETDEV_STATS:
                    out.append({
                        "source": "netdev",
                        "device": dev.name,
                        "netdev": nd,
                        "port": None,
                        "name": stat,
                        "path": str(netdev_stats_path(root, dev, nd, stat)),
                        "unit": "bytes" if stat.endswith("_bytes") else "packets",
                        "bytes_per_unit": 1 if stat.endswith("_bytes") else None,
                        "width_bits": netdev_width_bits(),  # COUNTER_WIDTHS
                        "direction": _direction(stat),
                    })
    return out


def available_counters(devices: list[DeviceInfo]) -> list[str]:
    """Return the sorted counter names found on the ports of ``devices``, as ``--counters`` takes them.

    Names in ``counters/`` as is, in a pre-4.5 ``counters_ext/`` without the ``_64`` suffix, and
    ``hw_counters/`` ones as ``hw_counters/<name>``.
    """
    names: set[str] = set()
    for d in devices:
        for p in d.ports:
            names.update(p.counters)
            names.update(c[:-3] if c.endswith("_64") else c for c in p.counters_ext)
            names.update(f"hw_counters/{c}" for c in p.hw_counters)
    return sorted(names)


def counter_exists(dev: DeviceInfo, port: PortInfo, name: str) -> bool:
    """True when the file the sampler would read for counter ``name`` of ``port`` exists.

    ``name`` as ``counter_descriptors`` takes it (e.g. "port_xmit_wait",
    "hw_counters/out_of_sequence"); the path is the descriptor's.
    """
    return os.path.exists(_ib_descriptor(dev, port, port.port, name)["path"])


def discovered_devices(devices: list[DeviceInfo]) -> list[dict[str, Any]]:
    """Return ``[{name, pci, netdevs, sys_image_guid}]`` of ``devices``: the manifest's
    ``discovered_devices`` (the guid tells which adapter a device belongs to, docs/sysfs.md).

    Pass every device found under ``class/infiniband`` (``discover(root)`` without ``devices=``),
    not only the sampled ones: the key says which devices existed (capture.py, MANIFEST KEYS).
    """
    return [{"name": d.name, "pci": d.pci, "netdevs": list(d.netdevs),
             "sys_image_guid": d.sys_image_guid} for d in devices]
