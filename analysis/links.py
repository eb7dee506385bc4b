"""Twin devices of one cable: which series form a link, and the link series summed from them.

DGX Spark twins (two PCI functions of one ConnectX-7 port, sysfs.md) are found by PCI address
without the domain, else a shared guid, else all devices form one link (``twin_links``);
``group_links`` sums their series (NaN if any twin is NaN). Imports nothing of the analysis.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["link_key", "link_keys", "group_links", "twin_links"]


def link_key(info: dict, row) -> tuple:
    """The cable a counter's device sits on: PCI address without the domain (DGX Spark twins),
    else the guid, else one cable for all (see ``twin_links``)."""
    pci = info.get("pci")
    if pci and ":" in pci:
        k = ("pci", pci.split(":", 1)[1] if pci.count(":") == 2 else pci)
    elif info.get("sys_image_guid") or info.get("node_guid"):
        k = ("guid", info.get("sys_image_guid") or info.get("node_guid"))
    else:
        k = ("all",)
    return (row["source"], k, row["direction"])


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

    Devices are twins when their PCI addresses match without the PCI domain (DGX Spark:
    0000:01:00.1 and 0002:01:00.1, sysfs.md) or, when the manifest has no PCI address, when
    they share a ``sys_image_guid``/``node_guid``; with neither, all devices form one link (the
    study's one cable per node). Only groups of two or more series are returned.

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

