"""``rdmascope record``: sample RDMA port counters every 1 ms into a capture directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from rdmascope.cli.common import DURATION
from rdmascope.cli.output import POSITIVE, require_parent_dir
from rdmascope.models import PRESETS

#: in an emulated sysfs tree of one node of a cluster (``simulate serve --nodes``): the node's
#: name and clocks, as JSON {"host", "monotonic_offset_ns", "realtime_offset_ns"}
EMULATED_HOST_FILE = ".rdmascope-host"


def emulated_node(sysfs_root) -> dict | None:
    """The emulated cluster node whose tree ``sysfs_root`` is (``rdmascope simulate serve
    --nodes``): {host, monotonic_offset_ns, realtime_offset_ns}, or None (a real /sys has no
    such file). Raises ``click.ClickException`` naming the file when it is not that JSON."""
    import json

    f = Path(sysfs_root) / EMULATED_HOST_FILE
    try:
        text = f.read_text()
    except OSError:
        return None
    try:
        d = json.loads(text)
        node = {"host": str(d["host"]),
                "monotonic_offset_ns": int(d.get("monotonic_offset_ns", 0)),
                "realtime_offset_ns": int(d.get("realtime_offset_ns", 0))}
    except (ValueError, KeyError, TypeError) as exc:
        raise click.ClickException(f"{f}: expected the emulated node's JSON {{host, "
                                   f"monotonic_offset_ns, realtime_offset_ns}} ({exc})") from exc
    if not node["host"]:
        raise click.ClickException(f"{f}: empty host name")
    return node


def safe_host_name(host: str) -> str:
    """``host`` as one safe path component for ``-o .../{host}``: every character other than
    letters, digits, ``.``, ``_`` and ``-`` (a ``/``, a control character, a space) becomes
    ``_``, and a name that is empty or starts with ``.`` (``..``, a hidden name) gets a ``_``
    in front. Returns ``host`` unchanged when it is already safe (any normal host name)."""
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host)
    if not safe or safe.startswith("."):
        safe = "_" + safe
    return safe


@click.command(name="record")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Capture directory to create (refused if it exists, unless --force; its parent "
                   "must exist). '{host}' "
                   "is replaced by this host's name (the manifest's host), so one command "
                   "line serves every node: -o runs/p2/{host} (on an emulated node of "
                   "`simulate serve --nodes`, that node's name).")
@click.option("--interval", "interval_ns", type=DURATION, default="1ms", show_default=True,
              help="Sampling interval, 0.1 ms .. 1 s (e.g. 1ms, 500us).")
@click.option("--device", "devices", multiple=True,
              help="RDMA device to sample (repeatable); default: every device.")
@click.option("--duration", "duration_ns", type=DURATION, default=None,
              help="Stop after this long (e.g. 30s, 10m); default: until SIGINT/SIGTERM.")
@click.option("--counters", "counters", default=None,
              help="Comma-separated counter file names to sample in addition to port_xmit_data "
                   "and port_rcv_data (e.g. port_xmit_packets,port_xmit_wait, "
                   "hw_counters/out_of_sequence).")
@click.option("--netdev-stats", is_flag=True,
              help="Also sample tx_bytes/rx_bytes (kernel-stack traffic) of each device's "
                   "netdevs and of the default-route interface (where sockets fall back to).")
@click.option("--netdev", "netdevs", multiple=True, metavar="NAME",
              help="Also sample this interface's tx_bytes/rx_bytes (repeatable), e.g. the "
                   "interface a cross-node collective could fall back to.")
@click.option("--sysfs-root", default="/sys", show_default=True, type=click.Path(),
              help="Root of the sysfs tree (an emulated tree for tests).")
@click.option("--cpu", type=int, default=None, help="Pin the sampler to this CPU.")
@click.option("--rt-priority", type=int, default=None,
              help="Run under SCHED_FIFO at this priority (needs root or CAP_SYS_NICE).")
@click.option("--force", is_flag=True, help="Overwrite an existing capture directory.")
@click.option("--private", is_flag=True,
              help="Owner-only permissions: directories 0700 and files 0600 (default 0755 and "
                   "0644, whatever the umask).")
@click.option("--status/--no-status", default=None,
              help="Live status on stderr once a second: elapsed time, sweeps taken and "
                   "missed, per-link tx/rx Gb/s over the last second, fitted to the terminal "
                   "width (COLUMNS, else the terminal, else 80). On a terminal the line is "
                   "redrawn in place; otherwise (--status under systemd, a pipe) one plain "
                   "line per second. Default: only when stderr is a terminal.")
@click.option("--metrics", "metrics", default=None, metavar="[HOST:]PORT",
              help="Serve Prometheus metrics over HTTP (needs the metrics extra): bytes "
                   "counters, 1 ms and 5 ms peak rates over the last 60 s, a histogram of 1 ms "
                   "rates, sweeps taken/missed and lateness; updated every 0.25 s. A bare PORT "
                   "listens on 127.0.0.1 only. Off by default (the recorder then opens no "
                   "socket).")
@click.option("--label", default=None,
              help="Name of this run, kept in the manifest (e.g. 'emulated 100 Gb/s'); the "
                   "analysis uses it as the configuration's label.")
@click.option("--note", default=None,
              help="Free text kept in the manifest (e.g. 'NCCL_IB_HCA=rocep1s0f1').")
@click.option("--link", "link_gbps", type=POSITIVE, default=None, metavar="GBPS",
              help="The link this run has, or stands for when emulated (e.g. 100), Gb/s; "
                   "compare and report read it.")
@click.option("--emulated", "emulated_gbps", type=POSITIVE, default=None, metavar="GBPS",
              help="This run's link is an emulation (e.g. NCCL_IB_HCA naming one of the port's "
                   "two PCIe twins) that really carries GBPS (~109 on a DGX Spark).")
@click.option("--preset", type=click.Choice(list(PRESETS)), default=None,
              help="The served model (a known one), kept in the manifest.")
@click.option("--config", type=click.Path(exists=True, dir_okay=True), default=None,
              help="The served model's Hugging Face config.json, kept in the manifest.")
@click.option("--tp", type=click.IntRange(min=1), default=None, help="Tensor-parallel size.")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Nodes the run spans.")
def command(output, interval_ns, devices, duration_ns, counters, netdev_stats, netdevs,
            sysfs_root, cpu, rt_priority, force, private, status, label, note, link_gbps,
            emulated_gbps, preset, config, tp, nodes, metrics) -> None:
    """Sample RDMA port counters into a capture, in the foreground, until stopped.

    Stops cleanly on SIGINT/SIGTERM/SIGHUP or after --duration, then prints the self-audit (sweeps
    taken/missed, interval and read-bracket percentiles, CPU). --label, --note and the setup
    options (--link, --emulated, --preset/--config, --tp, --nodes) are kept in the manifest's
    ``extra`` so that compare and report find them.
    """
    from rdmascope.sampler.daemon import MAX_INTERVAL_NS, MIN_INTERVAL_NS

    if not MIN_INTERVAL_NS <= interval_ns <= MAX_INTERVAL_NS:  # a usage error: exit 2
        raise click.BadParameter(f"{interval_ns / 1e6:g} ms is outside the allowed range "
                                 f"{MIN_INTERVAL_NS / 1e6:g} ms .. {MAX_INTERVAL_NS / 1e9:g} s",
                                 param_hint="'--interval'")
    if duration_ns is not None and duration_ns <= 0:  # a bad option value: usage error (exit 2)
        raise click.BadParameter(f"must be longer than 0, got {duration_ns / 1e9:g} s (e.g. 30s)",
                                 param_hint="'--duration'")
    if rt_priority is not None and hasattr(os, "SCHED_FIFO"):
        lo, hi = os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)
        if not lo <= rt_priority <= hi:
            raise click.BadParameter(f"{rt_priority}: SCHED_FIFO priority must be in {lo}..{hi}",
                                     param_hint="'--rt-priority'")
    if cpu is not None:  # a CPU this process may not run on is a usage error, before discovery
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if allowed is not None and cpu not in allowed:
            raise click.BadParameter(f"CPU {cpu} is not available to this process "
                                     f"(available: {', '.join(map(str, allowed))})",
                                     param_hint="'--cpu'")
    import socket

    from rdmascope import models
    from rdmascope.sampler.daemon import (
        RecordError,
        RecordOptions,
        RecordUsageError,
        format_audit,
        record,
    )
    from rdmascope.sampler.discovery import DEFAULT_COUNTERS

    node = emulated_node(sysfs_root)
    host = node["host"] if node else socket.gethostname()
    if "{host}" in output:
        safe = safe_host_name(host)
        if safe != host:
            click.echo(f"rdmascope record: note: the host name {host!r} is not a safe directory "
                       f"name; '{{host}}' in -o became {safe!r}", err=True)
        output = output.replace("{host}", safe)
    # a mistyped -o (/typo/dir/cap) is an error, never a new directory tree (as plot/report);
    # a parent that exists but cannot hold it is the recorder's own clear error
    parent = Path(output).expanduser().absolute().parent
    if not os.path.lexists(parent):
        require_parent_dir(output)
    extra = {}
    if label:
        extra["label"] = label
    if note:
        extra["note"] = note
    try:
        if preset and config:
            raise models.ModelError("give one model: --preset or --config")
        model = (models.model_from_hf_config(config) if config
                 else models.preset(preset) if preset else None)
        rec = models.setup_record(link_gbps=link_gbps,
                                  emulated=True if emulated_gbps is not None else None,
                                  emulated_real_gbps=emulated_gbps, model=model, tp=tp,
                                  nodes=nodes)
    except models.ModelError as exc:
        raise click.ClickException(str(exc)) from exc
    if rec:
        extra[models.MANIFEST_SETUP_KEY] = rec
    names = list(DEFAULT_COUNTERS)
    if counters:
        for c in counters.split(","):
            c = c.strip()
            if c and c not in names:
                names.append(c)
    opts = RecordOptions(
        output=output, interval_ns=interval_ns, devices=list(devices) or None,
        counters=names, netdev_stats=netdev_stats or bool(netdevs), netdevs=list(netdevs),
        sysfs_root=sysfs_root,
        duration_s=None if duration_ns is None else duration_ns / 1e9, cpu=cpu,
        rt_priority=rt_priority, force=force, private=private, status=status, extra=extra,
        metrics=metrics, host=node["host"] if node else None,
        monotonic_offset_ns=node["monotonic_offset_ns"] if node else 0,
        realtime_offset_ns=node["realtime_offset_ns"] if node else 0,
        command_line=["rdmascope", "record", *sys.argv[2:]] if len(sys.argv) > 1 else sys.argv,
    )
    try:
        result = record(opts)
    except RecordUsageError as exc:  # an option value that names nothing: exit 2
        import re

        # "--counters: bogus exist(s) ..." -> "Invalid value for '--counters': bogus ..."
        m = re.match(r"(--[a-z-]+):? (.*)", str(exc), re.S)
        if m is None:
            raise click.UsageError(str(exc)) from exc
        raise click.BadParameter(m.group(2), param_hint=f"'{m.group(1)}'") from exc
    except RecordError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        click.echo(f"rdmascope record: stopped ({result.stopped_by}); capture {result.path}",
                   err=True)
        click.echo(format_audit(result.audit), err=True)
    except OSError:  # stderr is gone (a closed pipe, a dropped ssh session): the capture
        pass         # holds the same audit (rdmascope inspect prints it)
    if result.error is not None:
        lost = result.audit.get("sweeps_not_written") or 0
        when = "after the disk filled" if result.disk_full else "after the write error"
        if result.location is None:
            kept = ("the capture directory was deleted: what was written is lost; "
                    f"{result.audit.get('sweeps_taken')} sweeps were taken)")
        else:
            where = "" if result.location == result.path else f" in {result.location}"
            kept = (f"everything written before it is kept and loads{where}: "
                    f"{result.audit.get('sweeps_written')} sweeps); {lost} sweeps taken {when} "
                    "were not written")
        raise click.ClickException(f"recording stopped by a write error: {result.error} ({kept}")
