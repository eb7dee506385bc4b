"""Which counters share a cable (twins), links from evidence, never from a guess (docs/sysfs.md, "Twins
and links").

The rule (``cable_key``): two RDMA device ports are one cable ("twins") when

- their devices are PCI functions of **one adapter**: the same non-zero ``sys_image_guid``
  (one per HCA, the same on all of its functions: ``drivers/infiniband/core/sysfs.c``
  ``sys_image_guid_show`` prints ``ib_device.attrs.sys_image_guid``; mlx5 sets it from the
  NIC vport context's system_image_guid, ``drivers/infiniband/hw/mlx5/main.c``), and
- they are the **same function on the adapter's PCIe links**: the same bus:device.function in
  different PCI domains (an adapter reached over several PCIe links, as the DGX Spark's
  ConnectX-7 over two x4 links, presents one physical function per cable on each link:
  0000:01:00.1 and 0002:01:00.1 are cable 1 twice), and
- they are the **same port number**.

So the functions of a dual-port card in one domain (0000:01:00.0 / .1: two cables) stay apart,
eight VFs that each sit at 00:00.0 of their own domain with their own ``sys_image_guid`` (Azure
ND VMs) are eight links, and the two ports of one device (a ConnectX-3 VPI with port 1 on IB FDR
and port 2 on RoCE 40) are two links, each with its own rate. A device whose ``sys_image_guid``
is unknown or 0 is its own adapter. Captures written before the recorder stored
``sys_image_guid`` fall back to the PCI address without its domain (what those captures can
tell), then to one link for all when they recorded no address either.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["link_key", "link_keys", "group_links", "twin_links", "cable_key", "adapter_guid",
           "bdf"]


def link_key(info: dict, row) -> tuple:
    """The cable a counter's port sits on (``cable_key``: one adapter by sys_image_guid, the
    same function on its PCIe links, the same port; see ``twin_links``)."""
    port = row.get("port") if row["source"] == "infiniband" else None
    if isinstance(port, float) and port != port:
        port = None
    info = info if info.get("name") else {**info, "name": row["device"]}
    return (row["source"], cable_key(info, port), row["direction"])


def link_keys(meta: dict, cdf: pd.DataFrame) -> dict:
    dev_info = {d.get("name"): d for d in meta.get("devices") or [] if isinstance(d, dict)}
    return {c: link_key(dev_info.get(row["device"], {}), row) for c, row in cdf.iterrows()
            if row.get("data")}


def group_links(df: pd.DataFrame, groups: dict[str, list[str]], *, keep: bool = True
                ) -> pd.DataFrame:
    """Sum twin series into per-link series (one cable seen as two PCI functions, sysfs.md).

    ``groups`` maps a link name to the series it sums, e.g. {"link/tx": ["rocep1s0f1/tx",
    "roceP2p1s0f1/tx"]}. A link is NaN where any member is NaN. With ``keep`` (default) the
    twins stay beside the links ("reported separately as well"); else only the links remain.
    Raises ``ValueError`` naming a member that is not a column, or a link that mixes netdev
    (kernel stack, "netdev:..." series) with RDMA port counter series: their bytes overlap in
    different ways and their sum would make the RDMA link look busy with kernel traffic.
    """
    out = df.copy() if keep else pd.DataFrame(index=df.index)
    for link, members in groups.items():
        missing = [m for m in members if m not in df.columns]
        if missing:
            raise ValueError(f"link {link!r}: no series {', '.join(map(repr, missing))} "
                             f"(columns: {', '.join(map(str, df.columns))})")
        kinds = {str(m).startswith("netdev:") for m in members}
        if len(kinds) > 1:
            raise ValueError(f"link {link!r} mixes netdev (kernel stack) and RDMA series "
                             f"({', '.join(map(str, members))}); group each source apart")
        out[link] = df[list(members)].sum(axis=1, skipna=False)
    return out


def twin_links(capture, *, source: str | None = "infiniband") -> dict[str, list[str]]:
    """Return the twin groups of a capture's series: {"link:<dev>+<dev>/<dir>": [series, ...]}.

    Ports are twins when they are the same port of the same function on the PCIe links of one
    adapter (``cable_key``: the same non-zero ``sys_image_guid`` and bus:device.function, in
    different PCI domains: DGX Spark 0000:01:00.1 and 0002:01:00.1); each port of a
    multi-port device and each separate adapter is its own link. Captures from before the
    recorder stored ``sys_image_guid`` fall back to the PCI address without its domain; with
    no address either, all devices form one link. Only groups of two or more series are
    returned.

    ``source``: "infiniband" (RDMA port counters, labels "link:<rdma dev>+<rdma dev>/<dir>"),
    "netdev" (kernel-stack byte counters, labels "link:<netdev>+<netdev> (netdev)/<dir>", named
    after the netdevs so they never read as the RDMA link) or None (both, each source grouped
    apart). Raises ``ValueError`` for another source.
    """
    if source not in ("infiniband", "netdev", None):
        raise ValueError(f"source must be 'infiniband', 'netdev' or None, got {source!r}")
    dev_info = {d.get("name"): d for d in capture.meta.get("devices") or [] if isinstance(d, dict)}
    c = capture.counters
    c = c[c["data"] if source is None else c["data"] & (c["source"] == source)]
    keys: dict[tuple, list[tuple[str, str]]] = {}
    for _, row in c.iterrows():
        is_netdev = row["source"] == "netdev"
        name = str(row["netdev"]) if is_netdev and isinstance(row.get("netdev"), str) \
            else str(row["device"])
        keys.setdefault(link_key(dev_info.get(row["device"], {}), row), []).append(
            (name, row["series"]))
    out = {}
    for (src, _, direction), members in keys.items():
        if len(members) < 2:
            continue
        devs = "+".join(dict.fromkeys(m[0] for m in members))
        tag = " (netdev)" if src == "netdev" else ""
        out[f"link:{devs}{tag}/{direction}"] = [m[1] for m in members]
    return out


def bdf(pci: str) -> str:
    """PCI address without its domain: "0002:01:00.1" -> "01:00.1"."""
    return pci.split(":", 1)[1] if pci.count(":") == 2 else pci


def adapter_guid(info: dict[str, Any]) -> str | None:
    """The device's ``sys_image_guid`` when it names an adapter (present, not all zeros)."""
    g = info.get("sys_image_guid")
    if not isinstance(g, str) or not g.strip():
        return None
    if not g.replace(":", "").strip("0"):
        return None  # 0: no adapter identity (soft devices, some VFs)
    return g.strip().lower()


def cable_key(info: dict[str, Any], port: Any = None) -> tuple:
    """The cable a device's ``port`` sits on (see the module docstring): equal keys = twins.

    ``info``: the device's manifest record (``devices[i]`` or ``discovered_devices[i]``: name,
    pci, sys_image_guid); ``port``: the port number (None for a netdev: its function's cable).
    """
    pci = info.get("pci") if isinstance(info.get("pci"), str) else None
    port = None if port is None else int(port)
    g = adapter_guid(info)
    if g is not None:
        return ("adapter", g, bdf(pci) if pci else None, port)
    if "sys_image_guid" in info:  # recorded, and 0 or unreadable: its own adapter
        return ("device", info.get("name"), port)
    # captures from before sys_image_guid was recorded: what they can tell
    if pci and ":" in pci:
        return ("pci", bdf(pci), port)
    if info.get("node_guid"):
        return ("guid", info.get("node_guid"), port)
    return ("all", port)  # nothing to tell devices apart: one link (kinship unknown)
