"""``rdmascope devices``: list RDMA devices, ports and counters under a sysfs root."""

from __future__ import annotations

import click

from rdmascope.cli.common import echo_json


def _u(v) -> str:
    return "unavailable" if v is None else str(v)


def _pcie_text(rec) -> str:
    """One line on the device's PCIe link: what bounds the device's line rate."""
    from rdmascope.pcie import describe_link

    if rec is None:
        return "PCIe link: none (no PCIe link files; no bound on the line rate)"
    cur = describe_link(rec.get("gts"), rec.get("width"))
    if cur is None:
        return (f"PCIe link: unknown (current_link_speed {rec.get('current_link_speed')!r}, "
                f"current_link_width {rec.get('current_link_width')!r}; no bound)")
    mx = describe_link(rec.get("max_gts"), rec.get("max_width"))
    tail = ""
    if rec.get("max_bound_gbps") and rec["max_bound_gbps"] > rec["bound_gbps"] + 1e-9:
        tail = f"; capable of {mx} = {rec['max_bound_gbps']:.1f} Gb/s (link trained down)"
    return (f"PCIe link: {cur} = {rec['bound_gbps']:.1f} Gb/s at most (the line-rate ceiling "
            f"of this device when below its port rate){tail}")


@click.command(name="devices")
@click.option("--sysfs-root", default="/sys", show_default=True, type=click.Path(),
              help="Root of the sysfs tree (a copied or emulated tree for tests).")
@click.option("--json", "as_json", is_flag=True, help="Print the discovery records as JSON.")
def command(sysfs_root: str, as_json: bool) -> None:
    """List every RDMA device with its ports, rates, netdevs, PCI address and counters."""
    from rdmascope.sampler.discovery import discover, infiniband_dir, sysfs_root_hint

    ib = infiniband_dir(sysfs_root)
    if not ib.is_dir():
        hint = sysfs_root_hint(sysfs_root)
        if hint is not None:
            raise click.ClickException(f"{ib}: no such directory; {hint}")
        raise click.ClickException(f"{ib}: no such directory; no RDMA devices (wrong "
                                   "--sysfs-root, RDMA modules not loaded, or a container "
                                   "without /sys/class/infiniband)")
    from rdmascope.sampler.csweep import describe

    devices = discover(sysfs_root)
    sweep = describe()
    if as_json:
        echo_json({"sysfs_root": str(sysfs_root), "devices": [d.to_dict() for d in devices],
                   "sweep": sweep})
        return
    if not devices:
        click.echo(f"no RDMA devices under {ib}")
        return
    for d in devices:
        click.echo(f"{d.name}  pci {_u(d.pci)}  netdevs {', '.join(d.netdevs) or 'none'}  "
                   f"node_guid {_u(d.node_guid)}  fw {_u(d.fw_ver)}"
                   + (f"  hca {d.hca_type}" if d.hca_type else ""))
        click.echo(f"  {_pcie_text(d.pcie)}")
        for p in d.ports:
            ext = {True: "64-bit (extended)", None: "width unknown"}.get(p.extended_counters,
                                                                          "32-bit")
            rate = (f"{p.rate_gbps:g} Gb/s ({p.rate})" if p.rate_gbps is not None
                    else _u(p.rate))
            click.echo(f"  port {p.port}: {_u(p.state)} / {_u(p.phys_state)}  "
                       f"{_u(p.link_layer)}  rate {rate}")
            if p.byte_source is not None:
                width = (f", {p.byte_width_bits}-bit" if p.byte_width_bits
                         else ", width unknown")
                click.echo(f"    bytes: {' / '.join(p.byte_files)} (tx / rx; unit "
                           f"{p.byte_unit}{width}): {p.byte_note}")
            else:
                click.echo(f"    bytes: none; {p.byte_note}")
            counters = p.counters or [c for c in p.counters_ext]
            click.echo(f"    counters ({p.counters_dir or 'none'}, {len(counters)}, data "
                       f"counters {ext}): {' '.join(counters) or 'none'}")
            if p.hw_counters:
                life = (f", lifespan {p.hw_counters_lifespan_ms} ms"
                        if p.hw_counters_lifespan_ms is not None else "")
                click.echo(f"    hw_counters ({len(p.hw_counters)}{life}): "
                           f"{' '.join(p.hw_counters)}")
        for w in d.warnings:
            click.echo(f"  warning: {w}")
    click.echo(f"sweep (rdmascope record): {sweep}")
