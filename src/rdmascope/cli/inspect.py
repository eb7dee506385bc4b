"""``rdmascope inspect``: print a capture's metadata, time span, sampling quality and gaps.

Uses only ``rdmascope.capture`` + pyarrow/numpy (no pandas), so it runs on a lean sampler install.
"""

from __future__ import annotations

from typing import Any

import click

from rdmascope.cli.common import echo_json

#: At most this many gaps are listed one by one (all are counted).
MAX_GAPS_LISTED = 20


def summarize_capture(path: str) -> dict[str, Any]:
    """Summarize a capture as a JSON-able dict (metadata, span, rows, quality, gaps).

    Sampling quality comes from the manifest's ``audit``; when it is missing (the recorder was
    killed) it is computed from the readings: sweeps taken = distinct sweep numbers, missed =
    the sweep numbers absent between the first and the last, intervals = differences of each
    sweep's earliest ``t_before_ns``. Gaps are ranges of absent sweep numbers (sweep k's
    deadline is ``start.monotonic_ns + k * interval_ns``, capture.py). Raises
    ``rdmascope.capture.CaptureError`` subclasses for an unreadable capture.
    """
    import numpy as np
    import pyarrow.compute as pc

    from rdmascope.capture import STATUS_NAMES, read_capture

    raw = read_capture(path)
    m = raw.manifest
    t = raw.table
    interval = int(m["interval_ns"])
    counters = m["counters"]
    out: dict[str, Any] = {
        "path": str(raw.path),
        "format_version": m["format_version"],
        "capture_id": m.get("capture_id"),
        "writer": m.get("writer"),
        "sampler_version": m.get("sampler_version"),
        "host": m.get("host"),
        "kernel": m.get("kernel"),
        "command_line": m.get("command_line"),
        "sysfs_root": m.get("sysfs_root"),
        "interval_ns": interval,
        "clean_end": raw.clean_end,
        "start": m.get("start"),
        **_start_times(m.get("start")),
        "stop": m.get("stop"),
        "clock_pairs": len(m.get("clock_pairs") or []),
        "devices": [
            {"name": d.get("name"), "pci": d.get("pci"), "netdevs": d.get("netdevs"),
             "ports": [{"port": p.get("port"), "rate": p.get("rate"),
                        "rate_gbps": p.get("rate_gbps"), "link_layer": p.get("link_layer"),
                        "state": p.get("state")} for p in d.get("ports", [])]}
            for d in m.get("devices") or []
        ],
        # every RDMA device present at record time (None: the capture predates the key)
        "discovered_devices": m.get("discovered_devices"),
        "files": [str(f.relative_to(raw.path)) for f in raw.files],
        "live_rows": raw.live_rows,
        "truncated_live": [str(f) for f in raw.truncated_live],
        "rows": t.num_rows,
    }
    cid = t["counter_id"].to_numpy()
    status = t["status"].to_numpy()
    sweep = t["sweep"].to_numpy()
    tb = t["t_before_ns"].to_numpy()
    per_counter = []
    for i, c in enumerate(counters):
        sel = cid == i
        st = status[sel]
        by_status = {STATUS_NAMES.get(int(s), str(int(s))): int(n)
                     for s, n in zip(*np.unique(st, return_counts=True), strict=True)}
        per_counter.append({"counter_id": i, "device": c["device"], "port": c["port"],
                            "netdev": c.get("netdev"), "name": c["name"], "unit": c["unit"],
                            "byte_source": c.get("byte_source"),
                            "rows": int(sel.sum()), "by_status": by_status})
    out["counters"] = per_counter
    out["unavailable"] = [
        {"counter_id": e.get("counter_id"), "kind": e.get("kind"), "message": e.get("message"),
         "t_ns": e.get("t_ns")}
        for e in m.get("events") or []
    ]
    if t.num_rows:
        t0, t1 = int(pc.min(t["t_before_ns"]).as_py()), int(pc.max(t["t_before_ns"]).as_py())
        out["span"] = {"first_t_ns": t0, "last_t_ns": t1, "duration_s": (t1 - t0) / 1e9}
        sweeps = np.unique(sweep)
        # earliest t_before of each sweep (rows are sorted by counter, then sweep)
        starts = np.full(sweeps.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(starts, np.searchsorted(sweeps, sweep), tb)
        d = np.diff(sweeps)
        gi = np.nonzero(d > 1)[0]
        start_ns = int((m.get("start") or {}).get("monotonic_ns") or 0)
        gaps = [{"first_missed_sweep": int(sweeps[j] + 1), "last_missed_sweep": int(sweeps[j + 1] - 1),
                 "missed": int(d[j] - 1),
                 "from_s": (int(sweeps[j] + 1) * interval) / 1e9,
                 "gap_ms": (int(starts[j + 1]) - int(starts[j])) / 1e6}
                for j in gi]
        out["gaps"] = {"count": len(gaps), "missed_sweeps": int((d - 1)[gi].sum()),
                       "longest_ms": max((g["gap_ms"] for g in gaps), default=0.0),
                       "list": gaps[:MAX_GAPS_LISTED], "start_monotonic_ns": start_ns}
    else:
        out["span"] = None
        out["gaps"] = {"count": 0, "missed_sweeps": 0, "longest_ms": 0.0, "list": []}
    audit = m.get("audit")
    if audit:
        out["quality"] = {"source": "audit", **audit}
        # name netdev counters by their netdev (audits written before the key existed lack it)
        for r in out["quality"].get("read_duration_ns") or []:
            cid = r.get("counter_id")
            if "netdev" not in r and isinstance(cid, int) and 0 <= cid < len(counters):
                r["netdev"] = counters[cid].get("netdev")
    elif t.num_rows:
        iv = np.diff(starts)
        n_dead = int(sweeps[-1] - sweeps[0] + 1) if sweeps.size else 0
        out["quality"] = {
            "source": "computed from readings (no audit: unclean end)",
            "sweeps_taken": int(sweeps.size),
            "sweeps_missed": n_dead - int(sweeps.size),
            "sweeps_taken_pct": 100.0 * sweeps.size / n_dead if n_dead else None,
            "interval_ns": {"p50": float(np.percentile(iv, 50)) if iv.size else None,
                            "p99": float(np.percentile(iv, 99)) if iv.size else None,
                            "max": int(iv.max()) if iv.size else None},
            "read_duration_ns": [
                {"counter_id": i, "device": c["device"], "port": c["port"],
                 "netdev": c.get("netdev"), "name": c["name"],
                 **_pcts(t["read_duration_ns"].to_numpy()[(cid == i) & (status == 0)])}
                for i, c in enumerate(counters)],
        }
    else:
        out["quality"] = None
    return out


def _start_times(start: dict[str, Any] | None) -> dict[str, Any]:
    """Return the capture start as CLOCK_MONOTONIC seconds and CLOCK_REALTIME ISO 8601 (UTC).

    The same instant on both clocks (capture.py: ``start``), so a request log on either clock,
    or on another host's clock, can be given the right ``--offset``.
    """
    from datetime import datetime, timezone

    mono = (start or {}).get("monotonic_ns")
    rt = (start or {}).get("realtime_ns")
    iso = None
    if isinstance(rt, int):
        iso = (datetime.fromtimestamp(rt // 1_000_000_000, tz=timezone.utc)
               .strftime("%Y-%m-%dT%H:%M:%S") + f".{rt % 1_000_000_000:09d}Z")
    return {"start_monotonic_s": mono / 1e9 if isinstance(mono, int) else None,
            "start_realtime_iso": iso}


def _where(c: dict[str, Any]) -> str:
    """Name a counter's source: the netdev for netdev statistics, else device/port."""
    if c.get("netdev"):
        return c["netdev"]
    return c["device"] + (f"/{c['port']}" if c.get("port") is not None else "")


def _pcts(a) -> dict[str, float | None]:
    import numpy as np

    if a.size == 0:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "max": int(a.max())}


def _print(s: dict[str, Any]) -> None:
    from rdmascope.sampler.daemon import format_audit

    e = click.echo
    e(f"capture {s['path']}  (format v{s['format_version']}, writer {s['writer']} "
      f"{s.get('sampler_version') or ''}, id {s['capture_id']})")
    e(f"host {s['host']}  kernel {s['kernel']}  sysfs {s['sysfs_root']}")
    e(f"interval {s['interval_ns'] / 1e6:g} ms   clock pairs {s['clock_pairs']}")
    if s.get("start_monotonic_s") is not None or s.get("start_realtime_iso") is not None:
        mono = s.get("start_monotonic_s")
        e("start: CLOCK_MONOTONIC " + (f"{mono:.6f} s" if mono is not None else "unavailable")
          + f" = CLOCK_REALTIME {s.get('start_realtime_iso') or 'unavailable'}")
        if mono is not None:
            e(f"  (a request log on another clock: --offset = {mono:.6f} - the log's time of "
              "this instant, in s)")
    if s["span"]:
        e(f"span {s['span']['duration_s']:.3f} s  ({s['rows']} readings in "
          f"{len(s['files'])} file(s), {s['live_rows']} from live segments)")
    else:
        e("span: no readings")
    if not s["clean_end"]:
        e("UNCLEAN END: the manifest has no stop record (recorder killed or still running)")
    for f in s["truncated_live"]:
        e(f"truncated live segment (tail cut, earlier rows kept): {f}")
    for d in s["devices"]:
        ports = ", ".join(f"port {p['port']} {p['link_layer']} {p['rate']}" for p in d["ports"])
        e(f"device {d['name']}  pci {d['pci'] or 'unavailable'}  netdevs {', '.join(d['netdevs'] or []) or '-'}  "
          f"{ports}")
    found = s.get("discovered_devices")
    if found is not None:
        recorded = {d["name"] for d in s["devices"]}
        skipped = [f"{d.get('name')} (pci {d.get('pci') or 'unavailable'}, netdevs "
                   f"{', '.join(d.get('netdevs') or []) or '-'})"
                   for d in found if d.get("name") not in recorded]
        e(f"devices present at record time: {len(found)}; not recorded: "
          f"{'; '.join(skipped) or 'none'}")
    e("counters:")
    for c in s["counters"]:
        where = _where(c)
        st = ", ".join(f"{k} {v}" for k, v in c["by_status"].items())
        src = f", bytes from {c['byte_source']}" if c.get("byte_source") else ""
        e(f"  [{c['counter_id']}] {where} {c['name']} ({c['unit']}{src}): {c['rows']} rows "
          f"({st})")
    q = s["quality"]
    if q:
        e(f"sampling quality ({q['source']}):")
        if q["source"] == "audit":
            e("  " + format_audit(q).replace("\n", "\n  "))
        else:
            iv = q["interval_ns"]
            e(f"  sweeps: {q['sweeps_taken']} taken, {q['sweeps_missed']} missed")
            if iv["p50"] is not None:
                e(f"  interval: p50 {iv['p50'] / 1e3:.1f} us, p99 {iv['p99'] / 1e3:.1f} us, "
                  f"max {iv['max'] / 1e3:.1f} us")
    if s["unavailable"]:
        e("events:")
        for ev in s["unavailable"]:
            e(f"  {ev['kind']}: counter {ev['counter_id']}: {ev['message']}")
    g = s["gaps"]
    e(f"gaps: {g['count']} ({g['missed_sweeps']} missed sweeps, longest "
      f"{g['longest_ms']:.2f} ms between sweeps)")
    for x in g["list"]:
        e(f"  sweeps {x['first_missed_sweep']}..{x['last_missed_sweep']} ({x['missed']} missed) "
          f"at {x['from_s']:.3f} s: {x['gap_ms']:.2f} ms between sweeps")
    if g["count"] > len(g["list"]):
        e(f"  ... and {g['count'] - len(g['list'])} more")


@click.command(name="inspect")
@click.argument("capture", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def command(capture: str, as_json: bool) -> None:
    """Print a capture's metadata, time span, row counts, sampling quality and gaps."""
    from rdmascope.capture import CaptureError

    try:
        s = summarize_capture(capture)
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        echo_json(s)
    else:
        _print(s)
