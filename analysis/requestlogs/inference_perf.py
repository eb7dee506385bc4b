"""kubernetes-sigs/inference-perf ``per_request_lifecycle_metrics.json`` (perf_counter seconds).

Stages: the per-request file carries no stage. Its writer (``inference_perf/reportgen/base.py``
at kubernetes-sigs/inference-perf 7de5ef2ed6f7934e0ecbc8297e593f79e68430c0, the
``per_request_lifecycle_metrics`` report) writes only ``start_time, end_time, request,
response, info, error`` of each ``RequestLifecycleMetric`` (its ``stage_id`` stays in memory),
after dropping the sweep's preprocessing stage -1. Each stage k has its own summary,
``stage_<k>_lifecycle_metrics.json`` (``load_summary.count``: that stage's requests, failed
included), and stages run one after another: ``LoadGenerator.run_stage``
(``inference_perf/loadgen/load_generator.py``) waits until every request of the stage has
finished before the next stage starts. So when those summaries lie beside the file and their
counts add up to its requests, the requests in send order are cut by the counts into stages,
each its own test "stage k"; a cut where a stage's last request ends after the next stage's
first send (a timed-out stage) is refused, with a note, and no stage is assigned.
"""

from __future__ import annotations

import json
from pathlib import Path

from .common import (
    CLOCK_MONOTONIC,
    RequestLogError,
    _arr,
    _get,
    _int,
    _load_json,
    _num,
    _obj,
    _record,
    _s_to_ns,
)


def _read_inference_perf(path: Path, data: list):
    records = []
    for pos, r in enumerate(data, start=1):
        if not isinstance(r, dict):
            raise RequestLogError(path, "expected a request object", row=pos)
        err = r.get("error")
        ok = not err
        t0 = _num(path, pos, "start_time", r.get("start_time"))
        info = _obj(path, pos, "info", r.get("info"), allow_none=True) or {}
        rm = _obj(path, pos, "info.response_metrics", info.get("response_metrics"),
                  allow_none=True) or {}
        chunk_key = next((k for k in ("chunk_times", "output_token_times") if rm.get(k)),
                         "chunk_times")
        chunk_s = rm.get("chunk_times") or rm.get("output_token_times") or \
            info.get("output_token_times")
        chunk_s = _arr(path, pos, f"info.response_metrics.{chunk_key}", chunk_s, allow_none=True)
        # inference-perf since its issue 559: content chunks in chunk_times, reasoning-only
        # chunks in reasoning_chunk_times (TTFT from the first of either)
        reason_s = _arr(path, pos, "info.response_metrics.reasoning_chunk_times",
                        rm.get("reasoning_chunk_times"), allow_none=True) or []
        usage = rm.get("server_usage") or info.get("server_usage") or {}
        srv = usage.get("completion_tokens") if isinstance(usage, dict) else None
        prompt = info.get("input_tokens", _get(info, "request_metrics.text.input_tokens"))
        output = rm.get("output_tokens", info.get("output_tokens"))
        if not ok:
            msg = (err.get("error_msg") or err.get("error_type")) if isinstance(err, dict) \
                else str(err)
            records.append(_record(pos, _s_to_ns(t0), None, None,
                                   _int(path, pos, "info.input_tokens", prompt), None, ok=False,
                                   error=msg or "error", row=pos))
            continue
        if not chunk_s and not reason_s:
            if "chunk_times" in rm or "response_chunks" in rm or srv:
                why = ("streamed, but no chunk carried a token inference-perf counted "
                       "(chunk_times empty, output_tokens "
                       f"{output if output is not None else 'missing'}"
                       + (f"; the server's usage says {srv} completion tokens, e.g. reasoning-"
                          "only output" if srv else "") + "): no first token to place")
            else:
                why = ("no chunk_times: per-chunk times exist only for streamed requests "
                       "(enable streaming in inference-perf)")
            records.append(_record(pos, _s_to_ns(t0), None, None,
                                   _int(path, pos, "info.input_tokens", prompt),
                                   _int(path, pos, "info.response_metrics.output_tokens",
                                        output), ok=False, error=why, row=pos,
                                   token_source="tool field output_tokens"))
            continue
        content = [_s_to_ns(_num(path, pos, "info.response_metrics.chunk_times", c))
                   for c in (chunk_s or [])]
        reasoning = [_s_to_ns(_num(path, pos, "info.response_metrics.reasoning_chunk_times", c))
                     for c in reason_s]
        # each list in arrival order (the tool appends as chunks arrive); only the two lists'
        # interleaving is sorted: a list going back in time is that row's fault, never hidden
        bad = next(((fld, k) for fld, lst in (("chunk_times", content),
                                               ("reasoning_chunk_times", reasoning))
                    for k in range(1, len(lst)) if lst[k] < lst[k - 1]), None)
        if bad is not None:
            fld, k = bad
            records.append(_record(pos, _s_to_ns(t0), None, None,
                                   _int(path, pos, "info.input_tokens", prompt), None, ok=False,
                                   error=f"invalid: info.response_metrics.{fld}: chunk {k} "
                                         f"arrives before chunk {k - 1} (chunk times out of "
                                         "order)", row=pos))
            continue
        chunks = sorted(content + reasoning)
        src = "tool field output_tokens"
        if reasoning and srv is not None:
            # inference-perf counts content tokens only; the server's count includes reasoning
            output, src = srv, "server usage completion_tokens (reasoning included)"
        if output is None:
            raise RequestLogError(path, "missing (required)", row=pos,
                                  field="info.response_metrics.output_tokens")
        records.append(_record(pos, _s_to_ns(t0), chunks[0], chunks[-1],
                               _int(path, pos, "info.input_tokens", prompt),
                               _int(path, pos, "info.response_metrics.output_tokens", output),
                               chunks=chunks, row=pos, token_source=src,
                               t_reasoning=reasoning[0] if reasoning else None,
                               t_answer=content[0] if reasoning and content else None))
    return records, CLOCK_MONOTONIC, _stages(path, data, records)


def _stages(path: Path, data: list, records: list[dict]) -> list[str]:
    """Label ``records`` with their stage ("stage k") from the per-stage summaries beside
    ``path`` (module docstring); return the notes."""
    counts = {}
    for f in path.parent.glob("stage_*_lifecycle_metrics.json"):
        k = f.name[len("stage_"):-len("_lifecycle_metrics.json")]
        if not k.isdigit():
            continue
        try:
            n = json.loads(f.read_text())["load_summary"]["count"]
        except (OSError, ValueError, KeyError, TypeError):
            return [f"inference-perf stages not assigned: {f.name} has no load_summary.count"]
        counts[int(k)] = int(n)
    if len(counts) < 2:
        return []
    if sorted(counts) != list(range(len(counts))) or sum(counts.values()) != len(records):
        return [f"inference-perf stages not assigned: the stage summaries beside the file "
                f"({', '.join(f'stage {k}: {n}' for k, n in sorted(counts.items()))}) do not "
                f"add up to its {len(records)} requests"]
    # send order: the file's start_time (every record has one, failed ones too)
    order = sorted(range(len(records)), key=lambda i: (float(data[i]["start_time"]), i))
    cuts, lo = [], 0
    for k in range(len(counts)):
        cuts.append(order[lo:lo + counts[k]])
        lo += counts[k]
    for k in range(len(cuts) - 1):
        ends = [float(data[i]["end_time"]) for i in cuts[k] if data[i].get("end_time") is not None]
        nxt = float(data[cuts[k + 1][0]]["start_time"]) if cuts[k + 1] else None
        if ends and nxt is not None and max(ends) > nxt:
            return [f"inference-perf stages not assigned: stage {k}'s last request ends after "
                    f"stage {k + 1}'s first send (a stage that timed out?); the requests are "
                    "one test"]
    for k, idx in enumerate(cuts):
        for i in idx:
            records[i]["test"] = f"stage {k}"
    shown = ", ".join(f"stage {k}: {n}" for k, n in sorted(counts.items()))
    return [f"inference-perf stages from the stage_<k>_lifecycle_metrics.json beside the file: "
            f"each stage its own test ({shown} request(s), cut in send order)"]


def read(path: Path, text: str):
    return _read_inference_perf(path, _load_json(path, text, list))
