"""AIPerf ``profile_export.jsonl`` (one record per request, epoch ns).

Phases: every record's ``metadata.benchmark_phase`` is AIPerf's ``CreditPhase``, a
case-insensitive string enum whose values are ``"warmup"`` and ``"profiling"`` (the
``MetricRecordMetadata.benchmark_phase`` field, "either warmup or profiling", in
ai-dynamo/aiperf ``src/aiperf/common/models/record_models.py`` at commit
f86c6c0d6aad543c59fc00fb6b06d6192ca16646; the enum in ``aiperf/common/enums/timing_enums.py`` at
db4f6397d11ee2d4cfbb41f70b2327315163dcf0). AIPerf writes no other phase and no ``phase_name``
field. "warmup" records are kept out and named (``reader._drop_warmup``); "profiling" is the
measured run. Any other value (an early prototype's ``CreditPhase`` had ``ramp_up``,
``stabilizing`` and ``steady_state``; a later AIPerf may add more) is never pooled with
another: each phase becomes its own test, "phase <value>" (profiling too, then), with a note.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import CLOCK_REALTIME, RequestLogError, _int, _jsonl_objects, _num, _obj, _record

_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "sec": 1_000_000_000}


def _metric_ns(path, row, metrics: dict, name: str, *, scalar: bool = True):
    m = metrics.get(name)
    if m is None:
        return None
    if not isinstance(m, dict) or "value" not in m:
        raise RequestLogError(path, "expected {value, unit}", row=row, field=f"metrics.{name}")
    unit = str(m.get("unit", "ms"))
    if unit not in _UNIT_NS:
        raise RequestLogError(path, f"unknown time unit {unit!r}", row=row,
                              field=f"metrics.{name}.unit")
    v = m["value"]
    if scalar and isinstance(v, list):
        raise RequestLogError(path, "expected a number, got a JSON list", row=row,
                              field=f"metrics.{name}.value")
    if isinstance(v, list):
        return [_num(path, row, f"metrics.{name}", x) * _UNIT_NS[unit] for x in v]
    return _num(path, row, f"metrics.{name}", v) * _UNIT_NS[unit]


def _read_aiperf(path: Path, text: str):
    records, warm, phases, notes = [], set(), {}, []
    for line, d in _jsonl_objects(path, text, notes):
        md = d.get("metadata")
        if not isinstance(md, dict):
            raise RequestLogError(path, "missing (required)", row=line, field="metadata")
        # AIPerf 0.13+ writes its warm-up records too (metadata.benchmark_phase "warmup",
        # CreditPhase.WARMUP; "profiling" is measured): kept out, named
        phase = str(md.get("benchmark_phase") or "").strip().lower()
        if phase == "warmup":
            warm.add(line)
        elif phase:
            phases[line] = phase
        metrics = _obj(path, line, "metrics", d.get("metrics"), allow_none=True) or {}
        err = d.get("error")
        ok = not err and not md.get("was_cancelled")
        t0 = _int(path, line, "metadata.request_start_ns", md.get("request_start_ns"),
                  allow_none=False)
        rid = md.get("x_request_id") or md.get("session_num") or line

        def tok(*names, line=line, metrics=metrics):
            for nm in names:
                m = metrics.get(nm)
                if isinstance(m, dict) and m.get("value") is not None:
                    return _int(path, line, f"metrics.{nm}", m["value"])
            return None

        prompt = tok("input_sequence_length", "error_isl")
        if not ok:
            msg = err.get("message") or err.get("type") if isinstance(err, dict) else str(err)
            records.append(_record(rid, t0, None, None, prompt, None, ok=False,
                                   error=msg or "cancelled", row=line))
            continue
        ttft = _metric_ns(path, line, metrics, "time_to_first_token")
        if ttft is None:
            raise RequestLogError(path, "missing (required; run AIPerf with --streaming)",
                                  row=line, field="metrics.time_to_first_token")
        t_first = t0 + int(round(ttft))
        icl = _metric_ns(path, line, metrics, "inter_chunk_latency", scalar=False)
        chunks = None
        if isinstance(icl, list):
            chunks = [t_first] + [t_first + int(round(c)) for c in np.cumsum(icl)]
        if chunks is not None and len(chunks) > 1:
            t_last = chunks[-1]
        else:
            t_last = _int(path, line, "metadata.request_end_ns", md.get("request_end_ns"),
                          allow_none=False)
        output = tok("output_sequence_length", "output_token_count")
        if output is None:
            raise RequestLogError(path, "missing (required)", row=line,
                                  field="metrics.output_sequence_length")
        # AIPerf's TTFO = start -> first non-reasoning output token (TimeToFirstOutputTokenMetric)
        ttfo = _metric_ns(path, line, metrics, "time_to_first_output_token")
        n_reason = tok("reasoning_token_count")
        t_r = t_a = None
        if ttfo is not None and (n_reason or int(round(ttfo)) > t_first - t0):
            t_r, t_a = t_first, t0 + int(round(ttfo))
        elif n_reason:
            t_r = t_first
        records.append(_record(rid, t0, t_first, t_last, prompt, output, chunks=chunks, row=line,
                               t_reasoning=t_r, t_answer=t_a))
    named = dict.fromkeys(phases.values())
    if set(named) - {"profiling"}:
        # a phase AIPerf's writer does not write: each phase its own test, never pooled
        for rec in records:
            if rec["row"] in phases:
                rec["test"] = f"phase {phases[rec['row']]}"
        counts = {p: sum(1 for v in phases.values() if v == p) for p in named}
        notes.append("AIPerf benchmark_phase values other than warmup/profiling: each phase "
                     "is its own test (" + ", ".join(f"'phase {p}': {n} request(s)"
                                                     for p, n in counts.items()) + ")")
    for rec in records:
        if rec["row"] in warm:
            rec["warmup"] = "AIPerf benchmark_phase 'warmup'"
    return records, CLOCK_REALTIME, notes


read = _read_aiperf
