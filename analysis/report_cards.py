"""The report's headline cards and capture fields: the emulation verdict, the capture's facts,
TTFT cards per test and the change cards of a comparison."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from rdmascope.capture import device_change_texts

from .report_figures import ONE_MS_REF, line_rate_items
from .report_pass import Configuration, flag_counts


def emulation_verdict(cfg: Configuration):
    """Run the emulation check on a configuration; return (verify.Verdict, status, headline).

    Tries ``expect="single"`` (one interface carried >= 99 % of the RDMA bytes: an NCCL_IB_HCA
    emulation), then ``expect="both"``. Status "ok" when either holds, except that a label saying
    "emulated" with traffic on both interfaces is a "fail" (the emulation did not take); "fail"
    when TCP is suspected (netdev bytes without RDMA bytes); "warn" otherwise (too little traffic,
    or a twin found at record time but not recorded: the headline names it).
    """
    single, both = cfg.emulation_checks()
    emulated_label = "emul" in cfg.label.lower()
    if single.ok:
        return single, "ok", f"{cfg.label}: one interface carried all RDMA traffic " \
                             f"({single.main_device}) — an emulated link"
    if both.ok:
        if emulated_label:
            return both, "fail", f"{cfg.label}: labelled emulated, but BOTH interfaces " \
                                 "carried traffic — the emulation did not take"
        return both, "ok", f"{cfg.label}: both interfaces carried traffic — the full link"
    if single.tcp_suspected:
        return single, "fail", f"{cfg.label}: the kernel network stack carried the traffic, " \
                               "not RDMA — did NCCL fall back to TCP sockets?"
    if single.unknown_devices:
        return single, "warn", (f"{cfg.label}: CANNOT JUDGE the emulation — the bytes of "
                                f"{', '.join(single.unknown_devices)} are unknown (unreadable "
                                "counters), not zero")
    if single.missing_devices:
        return single, "warn", (f"{cfg.label}: cannot judge the emulation — "
                                f"{', '.join(single.missing_devices)} found at record time but "
                                "not recorded")
    return single, "warn", f"{cfg.label}: emulation check inconclusive"


def nccl_collectives(cfg: Configuration) -> list[dict]:
    from .nccl.report import collectives_tables

    return collectives_tables(cfg.capture)


def nccl_witness(cfg: Configuration, v):
    from .nccl.report import witness_line

    return witness_line(cfg.capture, v, cfg.label)


def emulation_verdict_text(cfg: Configuration) -> str:
    """Return the emulation check as one short line for a figure."""
    v, status, headline = emulation_verdict(cfg)
    mark = {"ok": "✓", "fail": "✗", "warn": "?"}.get(status, "")
    return f"{mark} {headline.split(': ', 1)[-1]}"


#: Beside bytes per prompt token for a capture the emulator wrote (``emulated_capture``).
EMULATED_PER_TOKEN_NOTE = (
    "Emulated data: bytes per prompt token equal the formula ((2 x layers + 1) x hidden x bytes "
    "x 2(N-1)/N, 3.38 MB for the study's model) by construction; on hardware the study measured "
    "3.54-3.60 MB, 5-7 % more (packet headers and per-request traffic; method.md).")


def emulated_capture(meta: Mapping[str, Any]) -> bool:
    """Return True when a capture's manifest says the emulator produced its traffic.

    Written by ``rdmascope simulate capture`` (``writer`` "simulate" or ``host``
    "emulated-spark"), or recorded live from an emulated sysfs tree (``sysfs_root`` named
    ``rdmascope-sim*`` by ``simulate serve`` or ``rdmascope-demo-*`` by the demo).
    """
    if meta.get("writer") == "simulate" or meta.get("host") == "emulated-spark":
        return True
    root = os.path.basename(str(meta.get("sysfs_root") or "").rstrip("/"))
    return root.startswith(("rdmascope-sim", "rdmascope-demo-"))


def per_token_note(*caps) -> str:
    """EMULATED_PER_TOKEN_NOTE (with a leading space) when any capture is emulated, else ""."""
    return " " + EMULATED_PER_TOKEN_NOTE if any(emulated_capture(c.meta) for c in caps) else ""


def _unclean_text(path) -> str:
    """The report's "clean end" value of a capture without a stop record, as ``inspect`` says it:
    being recorded (a recorder holds its lock) or an unclean end; read to the last flushed
    reading either way."""
    from rdmascope.capture import recording_pid

    pid = recording_pid(path)
    if pid is not None:
        who = f"pid {pid}" if pid > 0 else "a running process"
        return (f"NO: being recorded by {who}; this report covers the readings flushed to disk "
                "so far")
    return ("NO: unclean end (no stop record: killed, or the host went down); read to the last "
            "flushed reading")


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _count(v) -> str:
    """A count from the audit with thousands separators, "unknown" when it is not one."""
    return f"{v:,}" if _is_number(v) else "unknown"


def capture_fields(cfg: Configuration) -> list[tuple[str, str]]:
    cap, m = cfg.capture, cfg.capture.meta
    audit = m.get("audit") or {}
    fields = [
        ("directory", str(cap.path)),
        ("host / kernel", f"{m.get('host', '?')} / {m.get('kernel', '?')}"),
        ("written by", f"{m.get('writer', '?')} (rdmascope {m.get('sampler_version', '?')})"),
        ("clock", str(m.get("clock", "CLOCK_MONOTONIC"))),
        ("sampling interval", f"{cap.interval_ns / 1e6:g} ms"),
        ("duration", f"{cap.duration_s():.3f} s"),
        ("RDMA devices", ", ".join(cfg.devices) or "none"),
        ("port rate", f"{cfg.port_gbps:g} Gb/s" if cfg.port_gbps else "unknown"),
        ("line rates (over-line flag)", "; ".join(line_rate_items(cfg)) or "unknown"),
        ("counters", ", ".join(sorted(set(cap.counters["name"].astype(str))))),
        ("clean end", "yes" if cap.clean_end else _unclean_text(cap.path)),
    ]
    changes = device_change_texts(m)  # devices that appeared / vanished while recording
    if changes:
        fields.append(("devices that came and went", "; ".join(changes)))
    if audit:
        taken, missed = audit.get("sweeps_taken"), audit.get("sweeps_missed")
        if taken is not None:  # an audit without the rest: unknown, never 0 or a traceback
            pct = audit.get("sweeps_taken_pct")
            fields.append(("sweeps taken / missed",
                           f"{_count(taken)} / {_count(missed)} ("
                           + (f"{pct:.3f} % taken)" if _is_number(pct) else "share unknown)")))
        iv = audit.get("interval_ns") or {}
        pct = {k: v for k, v in iv.items() if isinstance(v, (int, float)) and k.startswith("p")}
        if pct:
            fields.append(("sweep interval percentiles",
                           ", ".join(f"{k} {v / 1e6:.3f} ms" for k, v in pct.items())))
        if audit.get("cpu_s") is not None:
            fields.append(("sampler CPU", f"{audit['cpu_s']:.2f} s"))
    flags = flag_counts(cfg)
    fields.append(("intervals by flag", ", ".join(f"{k} {v:,}" for k, v in flags.items())))
    if cfg.log is not None:
        logs = cfg.log if isinstance(cfg.log, list) else [cfg.log]
        for lg in logs:
            al = lg.alignment or {}
            fields.append(("request log", f"{lg.path} ({lg.format}, {len(lg.requests)} requests, "
                                          f"{lg.n_failed} failed; aligned by "
                                          f"{al.get('method', '?')})"))
            # failed requests with their reasons, failed consistency checks, several runs
            if lg.notes:
                fields.append(("request log notes", " | ".join(lg.notes)))
    return fields


#: Per request and per test: the conserving split first (each byte to one request's prefill or
#: decode, or to idle/other), then the window view, headed "in window, shared".
REQUEST_COLUMNS = ("request_id", "test", "round", "prompt_tokens", "output_tokens", "ttft_s",
                   "decode_speed_tps", "prefill_tx_split_bytes", "prefill_per_token_split_bytes",
                   "decode_tx_split_bytes", "prefill_tx_bytes", "prefill_tx_gbps",
                   "prefill_peak_tx_gbps", "prefill_over_line_windows", "prefill_bursts",
                   "decode_tx_gbps")
TEST_COLUMNS = ("test", "rounds", "n_requests", "prompt_tokens", "time_to_last_first_token_s",
                "time_to_last_first_token_min_s", "time_to_last_first_token_max_s",
                "decode_speed_tps", "prefill_tx_split_bytes", "prefill_per_token_split_bytes",
                "prefill_tx_bytes", "prefill_peak_tx_gbps")


#: At most this many per-test cards per configuration (the study's plan has 6 tests).
MAX_TEST_CARDS = 6


def ttft_cards(label: str, tests: pd.DataFrame, *, limit: int = MAX_TEST_CARDS
               ) -> list[tuple[str, str, str]]:
    """Return the headline cards of one configuration's TTFT, one per test (never a mean
    across tests: tests differ in prompt length, so such a mean means nothing).

    ``tests``: ``attribute``'s per-test table (measured rounds). A one-request test shows its
    TTFT; a multi-request test its time to the last first token (method.md, "Metrics") with the
    mean TTFT in the detail; both with the min-max over rounds. Beyond ``limit`` tests, one
    card points to the per-test table. Returns (label, value, detail) tuples.
    """
    cards = []
    if not len(tests):
        return cards
    for _, t in tests.head(limit).iterrows():
        tok = t.get("prompt_tokens")
        tok_s = f"{int(tok):,} prompt tokens, " if pd.notna(tok) else ""
        rounds = f"{int(t['rounds'])} round(s)"
        if int(t["n_requests"]) == 1:
            lo, hi = t["mean_ttft_min_s"], t["mean_ttft_max_s"]
            cards.append((f"{label}: test {t['test']} TTFT", f"{t['mean_ttft_s']:.2f} s",
                          f"{tok_s}{rounds}, min–max {lo:.2f}–{hi:.2f} s"))
        else:
            lo = t["time_to_last_first_token_min_s"]
            hi = t["time_to_last_first_token_max_s"]
            cards.append((f"{label}: test {t['test']} time to last first token",
                          f"{t['time_to_last_first_token_s']:.2f} s",
                          f"{int(t['n_requests'])} requests, {tok_s}{rounds}, min–max "
                          f"{lo:.2f}–{hi:.2f} s; mean TTFT {t['mean_ttft_s']:.2f} s"))
    if len(tests) > limit:
        cards.append((f"{label}: {len(tests) - limit} more test(s)", "…",
                      "see the per-test table"))
    return cards


def change_cards(tests: pd.DataFrame, label_a: str, label_b: str, *,
                 limit: int = MAX_TEST_CARDS) -> list[tuple[str, str, str]]:
    """Return the headline cards of a comparison: one per test, in the table's order.

    ``tests``: ``compare.Comparison.tests`` (``ttlft_change_s``, ``ttlft_change_pct``,
    ``estimate_s``, ``bound_used_pct``). Each card gives the change of the time to the last
    first token as ``compare`` computed it (from the unrounded times), in s to the ms and in %,
    and what share of the estimate's upper bound it is (method.md, "The estimate"). Beyond
    ``limit`` tests one card points to the comparison table. Returns (label, value, detail).
    """
    cards = []
    for _, t in tests.head(limit).iterrows():
        est, used = float(t["estimate_s"]), float(t["bound_used_pct"])
        bound = (f"{used:.0f} % of the estimate's {est:.3f} s bound" if np.isfinite(used)
                 else f"estimate ≤ {est:.3f} s")
        cards.append((f"test {t['test']}: time to last first token",
                      f"{float(t['ttlft_change_s']):+.3f} s "
                      f"({float(t['ttlft_change_pct']):+.1f} %)",
                      f"{label_a} → {label_b}; {bound}"))
    if len(tests) > limit:
        cards.append((f"{len(tests) - limit} more test(s)", "…", "see the comparison table"))
    return cards


def pick_columns(df: pd.DataFrame, cols) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]]


def peak_card(label: str, peaks: Mapping[int, float], row) -> tuple[str, str, str] | None:
    """The "<label>: 1 ms peak" card: the headline 1 ms peak (Gb/s; "(at line rate)" when it
    is the line rate, the raw maximum beside it) and the 100 ms one, with the windows over line
    rate kept out. ``peaks``: {window ns: headline peak Gb/s}; ``row``: the 1 ms row of the
    peak table (``n_over_line_windows``, ``over_line_causes``, ``raw_max_gbps``,
    ``at_line_rate``) or None. None without a 1 ms peak."""
    ms = 1_000_000
    pk1 = peaks.get(ms)
    if pk1 is None:
        return None
    over = ""
    if row is not None and int(row["n_over_line_windows"]):
        over = (f"; {int(row['n_over_line_windows'])} window(s) over line rate kept out "
                f"({row['over_line_causes']}), raw max {float(row['raw_max_gbps']):.0f} Gb/s")
    at_line = row is not None and bool(row.get("at_line_rate", False))
    if at_line and not over:  # the headline sits at the line rate: say so
        over = (f"; at line rate (raw max {float(row['raw_max_gbps']):.0f} Gb/s, above it "
                "within its timing uncertainty)")
    return (f"{label}: 1 ms peak", f"{pk1:.0f} Gb/s" + (" (at line rate)" if at_line else ""),
            f"{ONE_MS_REF}; 100 ms: {peaks.get(100 * ms, float('nan')):.0f} Gb/s" + over)
