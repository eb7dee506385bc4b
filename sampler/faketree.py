"""Build small sysfs-like trees (``class/infiniband`` + ``class/net``) for tests and benchmarks.

The layout follows sysfs.md ("Layout"): ``class/infiniband/<dev>/{node_guid,fw_ver,hca_type}``,
``device -> ../../../devices/pci/<bdf>`` (a symlink, so the PCI address is its basename),
``device/net/<netdev>/``, ``ports/<n>/{state,phys_state,rate,link_layer,counters/...}`` and
``class/net/<netdev>/statistics/{tx_bytes,rx_bytes}``. Values are written in place (same inode),
as a live kernel file would change, so a reader holding the file open sees each update.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Data/packet counters of a ConnectX (mlx5) port, extended set (unicast files present).
MLX5_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                 "unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
                 "multicast_rcv_packets", "port_xmit_wait", "link_downed", "symbol_error")


def build_device(root: str | os.PathLike, name: str, *, pci: str, netdev: str | None = None,
                 ports: int = 1, rate: str = "200 Gb/sec (4X HDR)", link_layer: str = "Ethernet",
                 counters: tuple[str, ...] = MLX5_COUNTERS, start_value: int = 1000,
                 node_guid: str = "0a7f:bc12:45ef:d23b", fw_ver: str = "28.45.1020",
                 sys_image_guid: str | None = "0a7f:bc12:45ef:d200") -> Path:
    """Create one RDMA device under ``<root>/class/infiniband/<name>``; return its path.

    Counter files hold ``start_value`` (+ port number) followed by a newline.
    ``sys_image_guid`` (the adapter; the same default for every device built, as the functions
    of one card): None writes no file.
    """
    root = Path(root)
    pci_dir = root / "devices" / "pci0000:00" / pci
    (pci_dir / "net").mkdir(parents=True, exist_ok=True)
    dev = root / "class" / "infiniband" / name
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "node_guid").write_text(node_guid)
    if sys_image_guid is not None:
        (dev / "sys_image_guid").write_text(sys_image_guid + "\n")
    (dev / "fw_ver").write_text(fw_ver + "\n")
    (dev / "hca_type").write_text("MT4129\n")
    link = dev / "device"
    if not link.is_symlink():
        os.symlink(os.path.relpath(pci_dir, dev), link)
    if netdev:
        (pci_dir / "net" / netdev).mkdir(exist_ok=True)
        stats = root / "class" / "net" / netdev / "statistics"
        stats.mkdir(parents=True, exist_ok=True)
        for s in ("tx_bytes", "rx_bytes"):
            (stats / s).write_text(f"{start_value}\n")
    for p in range(1, ports + 1):
        pd = dev / "ports" / str(p)
        (pd / "counters").mkdir(parents=True, exist_ok=True)
        (pd / "state").write_text("4: ACTIVE\n")
        (pd / "phys_state").write_text("5: LinkUp\n")
        (pd / "rate").write_text(rate + "\n")
        (pd / "link_layer").write_text(link_layer + "\n")
        for c in counters:
            (pd / "counters" / c).write_text(f"{start_value + p}\n")
    return dev


def write_in_place(path: str | os.PathLike, value: int | str) -> None:
    """Overwrite a counter file's content in place (same inode), like a live sysfs value.

    The value is right-aligned in 20 characters (u64 width) so a shorter value never leaves
    stale digits behind and a concurrent reader never sees a shorter file.
    """
    data = (f"{value:>20}\n" if isinstance(value, int) else str(value)).encode()
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
