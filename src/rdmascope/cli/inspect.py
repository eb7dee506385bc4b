"""``rdmascope inspect``: print a capture's metadata, time span, sampling quality and gaps.

Uses only ``rdmascope.capture`` + pyarrow/numpy (no pandas), so it runs on a lean sampler install.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rdmascope.cli.common import echo_json
from rdmascope.cli.output import link_gbps_option

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

    from rdmascope.capture import (
        STATUS_NAMES,
        CaptureSchemaError,
        iter_capture_tables,
        read_manifest,
        recording_pid,
    )
    from rdmascope.quantiles import IntegerPercentiles

    p = Path(path)
    m = read_manifest(p)
    interval = int(m["interval_ns"])
    counters = m["counters"]
    nc = len(counters)
    audit = m.get("audit")
    need_q = not audit  # read brackets and sweep intervals are computed only without an audit
    rows = np.zeros(nc, np.int64)
    by_status: list[dict[int, int]] = [{} for _ in range(nc)]
    # integers (ns): exact percentiles from distinct values and their counts
    rd = [IntegerPercentiles() for _ in range(nc)] if need_q else []
    rd_max = [None] * nc
    iv_pct = IntegerPercentiles() if need_q else None
    iv_max = None
    t_lo = t_hi = None
    n_sweeps, first_sweep = 0, None
    carry: tuple[int, int] | None = None  # the last sweep so far and its earliest t_before
    last_sweep_of = np.full(nc, -1, np.int64)  # per counter: a repeat means mixed captures
    gaps: list[dict[str, Any]] = []
    n_gaps, missed, longest = 0, 0, 0.0
    rep: dict[str, Any] = {}
    from rdmascope.plausibility import counter_cap_gbps, implausible

    # byte counters: count the steps between consecutive readable readings (no unreadable one
    # between) that imply more than 4 x the link rate (rdmascope.plausibility, the analysis's
    # rule; the analysis drops a single torn reading first, so it may flag fewer)
    data_ids = {i for i, c in enumerate(counters)
                if c.get("bytes_per_unit") and c.get("direction") in ("tx", "rx")}
    caps = {i: counter_cap_gbps(m, i) for i in data_ids}
    impl_steps = dict.fromkeys(data_ids, 0)
    impl_carry: dict[int, tuple[int, int, int, bool]] = {}  # t_mid, unc, value, invalid after
    cols = ["t_before_ns", "status"] + (["read_duration_ns"] if need_q or data_ids else []) \
        + (["value"] if data_ids else [])
    # segment by segment: a day-long capture is summarized in bounded memory
    for f, t in iter_capture_tables(p, columns=cols, manifest=m, report=rep):
        if not t.num_rows:
            continue
        cid = t["counter_id"].to_numpy()
        status = t["status"].to_numpy()
        sweep = t["sweep"].to_numpy()
        tb = t["t_before_ns"].to_numpy()
        u = np.unique(cid)
        los = np.searchsorted(cid, u, "left")
        his = np.searchsorted(cid, u, "right")
        dur = t["read_duration_ns"].to_numpy() if (need_q or data_ids) else None
        # the raw uint64 data buffer (null rows hold whatever was stored: never used), read
        # without a pyarrow conversion, which would probe for pandas on a lean install
        val = (np.concatenate([np.frombuffer(ch.buffers()[1], np.uint64,
                                             len(ch) + ch.offset)[ch.offset:]
                               for ch in t["value"].chunks] or [np.zeros(0, np.uint64)])
               if data_ids else None)
        for c, lo, hi in zip(u.tolist(), los.tolist(), his.tolist(), strict=True):
            rows[c] += hi - lo
            for sv, n in zip(*np.unique(status[lo:hi], return_counts=True), strict=True):
                by_status[c][int(sv)] = by_status[c].get(int(sv), 0) + int(n)
            sw = sweep[lo:hi]
            if sw[0] <= last_sweep_of[c] or (len(sw) > 1 and (np.diff(sw) <= 0).any()):
                k = int(sw[0])
                raise CaptureSchemaError(
                    p, f"reading(s) are stored twice or out of order (counter_id {c}, near sweep "
                       f"{k}, in {f.name}); the directory mixes files of different captures "
                       "(e.g. from two hosts); keep one capture per directory")
            last_sweep_of[c] = sw[-1]
            if c in data_ids:
                _count_implausible(c, tb[lo:hi], dur[lo:hi], val[lo:hi], status[lo:hi],
                                   impl_carry, impl_steps, caps[c], interval, implausible,
                                   counters[c]["bytes_per_unit"])
            if need_q:
                ok = dur[lo:hi][status[lo:hi] == 0]
                rd[c].add(ok)
                if ok.size:
                    rd_max[c] = max(int(ok.max()), rd_max[c] or 0)
        t_lo = int(tb.min()) if t_lo is None else min(t_lo, int(tb.min()))
        t_hi = int(tb.max()) if t_hi is None else max(t_hi, int(tb.max()))
        n_u = len(u)
        m0 = int(his[0] - los[0])
        if n_u * m0 == len(sweep) and (his - los == m0).all() and \
                (sweep.reshape(n_u, m0) == sweep[:m0]).all():
            # every counter read in every sweep (the usual case): no hashing or sorting
            sweeps = sweep[:m0]
            starts = tb.reshape(n_u, m0).min(axis=0)
        else:
            sweeps = np.unique(sweep)
            # earliest t_before of each sweep (rows are sorted by counter, then sweep)
            starts = np.full(sweeps.size, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(starts, np.searchsorted(sweeps, sweep), tb)
        if carry is not None:  # the previous file's last sweep, merged if it continues here
            if sweeps[0] == carry[0]:
                starts[0] = min(starts[0], carry[1])
            else:
                sweeps = np.concatenate([[carry[0]], sweeps])
                starts = np.concatenate([[carry[1]], starts])
        else:
            first_sweep = int(sweeps[0])
        n_sweeps += sweeps.size - (1 if carry is not None else 0)
        d = np.diff(sweeps)
        gi = np.nonzero(d > 1)[0]
        n_gaps += len(gi)
        missed += int((d - 1)[gi].sum())
        for j in gi:
            gap_ms = (int(starts[j + 1]) - int(starts[j])) / 1e6
            longest = max(longest, gap_ms)
            if len(gaps) < MAX_GAPS_LISTED:
                gaps.append({"first_missed_sweep": int(sweeps[j] + 1),
                             "last_missed_sweep": int(sweeps[j + 1] - 1),
                             "missed": int(d[j] - 1),
                             "from_s": (int(sweeps[j] + 1) * interval) / 1e9,
                             "gap_ms": gap_ms})
        if need_q:
            ivs = np.diff(starts)
            iv_pct.add(ivs)
            if ivs.size:
                iv_max = max(int(ivs.max()), iv_max if iv_max is not None else int(ivs.max()))
        carry = (int(sweeps[-1]), int(starts[-1]))
    n_rows = int(rows.sum())
    out: dict[str, Any] = {
        "path": str(p),
        "format_version": m["format_version"],
        "capture_id": m.get("capture_id"),
        "writer": m.get("writer"),
        "sampler_version": m.get("sampler_version"),
        "host": m.get("host"),
        "kernel": m.get("kernel"),
        "command_line": m.get("command_line"),
        "sysfs_root": m.get("sysfs_root"),
        "interval_ns": interval,
        "clean_end": m.get("stop") is not None,
        # a running recorder holds the capture's lock: "still being recorded", not "unclean"
        "recording_pid": recording_pid(p) if m.get("stop") is None else None,
        "start": m.get("start"),
        **_start_times(m.get("start")),
        "stop": m.get("stop"),
        "clock_pairs": len(m.get("clock_pairs") or []),
        "devices": [
            {"name": d.get("name"), "pci": d.get("pci"), "netdevs": d.get("netdevs"),
             "ports": [{"port": q.get("port"), "rate": q.get("rate"),
                        "rate_gbps": q.get("rate_gbps"), "link_layer": q.get("link_layer"),
                        "state": q.get("state")} for q in d.get("ports", [])]}
            for d in m.get("devices") or []
        ],
        # every RDMA device present at record time (None: the capture predates the key)
        "discovered_devices": m.get("discovered_devices"),
        # RDMA devices that appeared / vanished while recording (an appeared one is sampled
        # from then on unless --device chose the devices: see _device_change_line)
        "device_changes": m.get("device_changes") or [],
        "files": [str(f.relative_to(p)) for f in rep.get("files", [])],
        "live_rows": rep.get("live_rows", 0),
        "truncated_live": [str(f) for f in rep.get("truncated_live", [])],
        "rows": n_rows,
    }
    out["counters"] = [
        {"counter_id": i, "device": c["device"], "port": c["port"], "netdev": c.get("netdev"),
         "name": c["name"], "unit": c["unit"], "byte_source": c.get("byte_source"),
         "rows": int(rows[i]),
         "by_status": {STATUS_NAMES.get(k, str(k)): v for k, v in sorted(by_status[i].items())},
         "implausible": ({"steps": impl_steps[i], "cap_gbps": caps[i]} if i in data_ids
                         else None)}
        for i, c in enumerate(counters)]
    out["unavailable"] = [
        {"counter_id": e.get("counter_id"), "kind": e.get("kind"), "message": e.get("message"),
         "t_ns": e.get("t_ns")}
        for e in m.get("events") or []
    ]
    if n_rows:
        out["span"] = {"first_t_ns": t_lo, "last_t_ns": t_hi, "duration_s": (t_hi - t_lo) / 1e9}
        start_ns = int((m.get("start") or {}).get("monotonic_ns") or 0)
        out["gaps"] = {"count": n_gaps, "missed_sweeps": missed, "longest_ms": longest,
                       "list": gaps, "start_monotonic_ns": start_ns}
    else:
        out["span"] = None
        out["gaps"] = {"count": 0, "missed_sweeps": 0, "longest_ms": 0.0, "list": []}
    if audit:
        out["quality"] = {"source": "audit", **audit}
        # the audit says what the recorder wrote; the files say what is here: never trust the
        # first over the second (a lost live file, a directory replaced while recording)
        said = audit.get("rows_written")
        if isinstance(said, int) and not isinstance(said, bool) and said != n_rows:
            out["audit_mismatch"] = {"rows_written": said, "rows_present": n_rows,
                                     "missing": said - n_rows}
        # name netdev counters by their netdev (audits written before the key existed lack it)
        for r in out["quality"].get("read_duration_ns") or []:
            cid = r.get("counter_id")
            if "netdev" not in r and isinstance(cid, int) and 0 <= cid < len(counters):
                r["netdev"] = counters[cid].get("netdev")
    elif n_rows:
        n_dead = int(carry[0] - first_sweep + 1)
        p50, p99 = iv_pct.percentiles([50, 99])
        out["quality"] = {
            "source": ("computed from readings (no audit yet: still being recorded)"
                       if out.get("recording_pid") is not None
                       else "computed from readings (no audit: unclean end)"),
            "sweeps_taken": n_sweeps,
            "sweeps_missed": n_dead - n_sweeps,
            "sweeps_taken_pct": 100.0 * n_sweeps / n_dead if n_dead else None,
            "interval_ns": {"p50": p50 if iv_pct.n else None,
                            "p99": p99 if iv_pct.n else None,
                            "max": iv_max},
            "read_duration_ns": [
                {"counter_id": i, "device": c["device"], "port": c["port"],
                 "netdev": c.get("netdev"), "name": c["name"], **_pcts(rd[i], rd_max[i])}
                for i, c in enumerate(counters)],
        }
        for x in [iv_pct, *rd]:
            x.close()
    else:
        out["quality"] = None
    return out


def _count_implausible(c, tb, dur, val, status, carry, steps, cap, interval, implausible,
                       bpu):
    """Add counter ``c``'s implausible steps among these rows (time-ordered) to ``steps[c]``;
    ``carry[c]`` holds its last readable reading across segments."""
    import numpy as np

    d = dur.astype(np.int64)
    t = tb.astype(np.int64) + d // 2
    u = (d + 1) // 2
    v = val.astype(np.uint64)
    ok = status == 0
    j = np.flatnonzero(ok)
    prev = carry.get(c)
    if prev is not None:
        t = np.concatenate([[prev[0]], t])
        u = np.concatenate([[prev[1]], u])
        v = np.concatenate([np.array([prev[2]], np.uint64), v])
        ok = np.concatenate([[True], ok])
        j = np.flatnonzero(ok)
    if j.size >= 2:
        a, b = j[:-1], j[1:]
        adjacent = (b - a) == 1
        if prev is not None and prev[3]:  # unreadable readings ended the previous segment
            adjacent[0] = False
        up = v[b] >= v[a]
        nbytes = np.where(up, v[b] - v[a], 0).astype(np.float64) * float(bpu)
        steps[c] += int((adjacent & up & implausible(
            nbytes, t[b] - t[a], u[a], u[b], interval, cap)).sum())
    if j.size:
        last = int(j[-1])
        carry[c] = (int(t[last]), int(u[last]), int(v[last]), last < len(t) - 1)
    elif prev is not None:
        carry[c] = (*prev[:3], True)


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


def _pcts(values, top) -> dict[str, float | None]:
    """p50/p99 of an ``ExactPercentiles`` collector and the maximum ``top``."""
    if values.n == 0:
        return {"p50": None, "p99": None, "max": None}
    p50, p99 = values.percentiles([50, 99])
    return {"p50": float(p50), "p99": float(p99), "max": int(top)}


def _print(s: dict[str, Any]) -> None:
    from rdmascope.capture import device_change_texts
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
    if not s["clean_end"] and s.get("recording_pid") is not None:
        who = f"pid {s['recording_pid']}" if s["recording_pid"] > 0 else "a running process"
        e(f"BEING RECORDED by {who}: no stop record yet; this summary covers what is on disk "
          "so far")
    elif not s["clean_end"]:
        e("UNCLEAN END: the manifest has no stop record and no recorder holds it (the recorder "
          "was killed, or a full disk or write error kept it from writing the stop record)")
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
    for text in device_change_texts(
            {"device_changes": s.get("device_changes"), "start": s.get("start"),
             "counters": [{"device": c["device"], "source": "netdev" if c.get("netdev")
                           else "infiniband"} for c in s["counters"]]}):
        e(f"device {text}")
    e("counters:")
    for c in s["counters"]:
        where = _where(c)
        st = ", ".join(f"{k} {v}" for k, v in c["by_status"].items())
        src = f", bytes from {c['byte_source']}" if c.get("byte_source") else ""
        e(f"  [{c['counter_id']}] {where} {c['name']} ({c['unit']}{src}): {c['rows']} rows "
          f"({st})")
        imp = c.get("implausible") or {}
        if imp.get("steps"):
            e(f"    implausible: {imp['steps']} step(s) above {imp['cap_gbps']:g} Gb/s (4 x the "
              "link rate); the analysis leaves their windows empty; if the port's rate string "
              "is wrong, give the real rate with --link-gbps")
    q = s["quality"]
    if q:
        e(f"sampling quality ({q['source']}):")
        if q["source"] == "audit":
            e("  " + format_audit(q).replace("\n", "\n  "))
            bad = s.get("audit_mismatch")
            if bad:
                e(f"  WARNING: the audit says {bad['rows_written']} readings were written but "
                  f"the capture holds {bad['rows_present']}: {bad['missing']} readings are "
                  "missing (a live file or segment lost or removed, or the directory replaced "
                  "while recording); the analysis sees only the readings present")
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
@click.argument("capture", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@link_gbps_option
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
