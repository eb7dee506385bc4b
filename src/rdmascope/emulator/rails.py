"""An emulated rail-optimised InfiniBand node: N ConnectX-7 HCAs, one per rail (no twins).

An H100/H200 node of an InfiniBand cluster has one single-port ConnectX-7 per GPU, each on its
own PCIe Gen5 x16 link and its own rail (``link_layer`` "InfiniBand", ``rate`` "400 Gb/sec (4X
NDR)", a LID from the subnet manager), so there are no PCIe twins: every RDMA device is its own
cable. ``build_rail_tree`` writes that sysfs layout (the same files ``rdmascope.emulator.tree``
writes for a Spark, see its module docstring; no netdevs: the IPoIB interfaces carry nothing of
the collective) and returns an ``EmulatedTree`` the live player and ``simulate_capture`` use as
they use a Spark tree. ``RAIL_DEVICES`` names the rails as mlx5 names them (``mlx5_0`` ...).

A rail that joins later (a resize: ranks or NICs brought up under load) is built with
``absent=[...]`` and added at its time with ``add_rail``; its counters start at the join.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rdmascope.emulator.model import rail_device
from rdmascope.emulator.tree import (
    MARKER,
    MLX5_COUNTERS,
    MLX5_HW_COUNTERS,
    RDMA_PACKET_BYTES,
    EmulatedTree,
    MovingFile,
    TwinSpec,
    guid_of,
    write_file,
)

#: the most rails one emulated node may have
MAX_RAILS = 16
#: the sysfs rate text of an NDR port
NDR_RATE = "400 Gb/sec (4X NDR)"


def rail_spec(i: int) -> TwinSpec:
    """Rail ``i``'s PCI function: its own bus (``0000:<bus>:00.0``), so no two rails are twins."""
    bus = 0x18 + 0x11 * i
    return TwinSpec(rail_device(i), "", "0000", f"0000:{bus:02x}:00.0")


def build_rail_tree(root: str | os.PathLike, rails: int, *, seed: int = 0,
                    rate: str = NDR_RATE, absent: tuple[int, ...] = (),
                    force: bool = True) -> EmulatedTree:
    """Create the sysfs tree of a node with ``rails`` InfiniBand HCAs under ``root``.

    ``absent``: rails (0-based) left out for now (``add_rail`` adds them later). Counters start at
    seed-dependent values. ``root`` must be absent, empty or an emulated tree (rebuilt when
    ``force``). Raises ``ValueError`` for a rail count outside 1..``MAX_RAILS``,
    ``FileExistsError`` for a non-empty directory that is not an emulated tree.
    """
    import shutil

    if not 1 <= rails <= MAX_RAILS:
        raise ValueError(f"rails must be 1..{MAX_RAILS}, got {rails}")
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        if not (root / MARKER).is_file():
            raise FileExistsError(f"{root}: exists, is not empty and is not an emulated tree "
                                  f"(no {MARKER}); refusing to touch it")
        if not force:
            raise FileExistsError(f"{root}: already holds an emulated tree")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    write_file(root / MARKER, "built by rdmascope.emulator.rails.build_rail_tree\n")
    (root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
    tree = EmulatedTree(root=root, seed=seed, twins=())
    for i in range(rails):
        if i not in absent:
            add_rail(tree, i, rate=rate)
    return tree


def rail_bases(seed: int, i: int) -> tuple[int, int]:
    """The initial ``port_xmit_data`` / ``port_rcv_data`` values (4-byte units) of rail ``i``."""
    rng = np.random.default_rng([seed, 7919, i])
    data_base = int(rng.integers(10**9, 5 * 10**9))
    return data_base, data_base + int(rng.integers(0, 10**6))


def add_rail(tree: EmulatedTree, i: int, *, rate: str = NDR_RATE) -> None:
    """Write rail ``i``'s device into ``tree`` (class link last, so a scan sees it whole)."""
    spec = rail_spec(i)
    root = tree.root
    fn = root / spec.pci_rel
    for name, text in (("vendor", "0x15b3"), ("device", "0x1021"), ("class", "0x020700"),
                       ("current_link_speed", "32.0 GT/s PCIe"), ("current_link_width", "16"),
                       ("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", "16"),
                       ("numa_node", str(i * 2 // max(i + 1, 1) % 2))):
        write_file(fn / name, text + "\n")
    dev = fn / "infiniband" / spec.device
    write_file(dev / "node_guid", guid_of(tree.seed, 100 + i) + "\n")
    write_file(dev / "sys_image_guid", guid_of(tree.seed, 100 + i) + "\n")
    write_file(dev / "fw_ver", "28.45.1020\n")
    write_file(dev / "hca_type", "MT4129\n")
    write_file(dev / "board_id", "MT_0000000838\n")
    write_file(dev / "node_type", "1: CA\n")
    os.symlink(f"../../../{spec.pci}", dev / "device")
    port = dev / "ports" / "1"
    write_file(port / "state", "4: ACTIVE\n")
    write_file(port / "phys_state", "5: LinkUp\n")
    write_file(port / "rate", f"{rate}\n")
    write_file(port / "link_layer", "InfiniBand\n")
    write_file(port / "lid", f"0x{i + 1:x}\n")
    write_file(port / "sm_lid", "0x1\n")
    write_file(port / "cap_mask", "0xa651e848\n")
    tx_base, rx_base = rail_bases(tree.seed, i)
    for c in MLX5_COUNTERS:
        base = 0
        if c in ("port_xmit_data", "port_rcv_data"):
            base = tx_base if "xmit" in c else rx_base
            tree.moving.append(MovingFile(port / "counters" / c,
                                          f"{spec.device}/{'tx' if 'xmit' in c else 'rx'}", 4,
                                          base, True))
        elif c in ("port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
                   "unicast_rcv_packets"):
            base = (tx_base if "xmit" in c else rx_base) * 4 // RDMA_PACKET_BYTES
            tree.moving.append(MovingFile(port / "counters" / c,
                                          f"{spec.device}/{'tx' if 'xmit' in c else 'rx'}",
                                          RDMA_PACKET_BYTES, base, False))
        write_file(port / "counters" / c, f"{base}\n")
    write_file(port / "hw_counters" / "lifespan", "10\n")
    for c in MLX5_HW_COUNTERS:
        write_file(port / "hw_counters" / c, "0\n")
    tree.twins = (*tree.twins, spec)
    os.symlink(f"../../{spec.pci_rel}/infiniband/{spec.device}",
               root / "class" / "infiniband" / spec.device)
