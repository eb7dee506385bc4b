"""guidellm ``benchmarks.json`` (v0.1 to v0.4+ layouts)."""

from __future__ import annotations

from pathlib import Path

from .common import (
    CLOCK_REALTIME,
    RequestLogError,
    _arr,
    _get,
    _int,
    _load_json,
    _num,
    _record,
    _s_to_ns,
)

#: The guidellm ``benchmarks.json`` shapes read (checked against guidellm's own models).
GUIDELLM_LAYOUTS = (
    "benchmarks[].requests.{successful,incomplete,errored}[] (v0.2+; times in "
    "info.timings.{request_start,first_token_iteration,last_token_iteration} from v0.4, flat "
    "start_time/first_token_time/last_token_time in v0.2-0.3) or benchmarks[].results[] with "
    "errors[] (v0.1, flat times, prompt_token_count/output_token_count)")


def _guidellm_requests(path: Path, data: dict):
    """Yield (benchmark index, status, position, request dict) over all schema variants."""
    benches = data.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise RequestLogError(path, "has no benchmarks[] list", field="benchmarks")
    flat: list[tuple[int, dict]] = []
    for bi, b in enumerate(benches):
        if isinstance(b, dict) and isinstance(b.get("benchmarks"), list):  # v0.1 report nesting
            flat.extend((bi, bb) for bb in b["benchmarks"])
        else:
            flat.append((bi, b))
    pos = 0
    for bi, b in flat:
        reqs = b.get("requests") if isinstance(b, dict) else None
        if isinstance(reqs, dict):
            groups = [(k, _arr(path, None, f"benchmarks[{bi}].requests.{k}", reqs.get(k),
                               allow_none=True) or [])
                      for k in ("successful", "incomplete", "errored")]
        elif isinstance(b, dict) and ("results" in b or "errors" in b):
            groups = [(st, _arr(path, None, f"benchmarks[{bi}].{k}", b.get(k),
                                allow_none=True) or [])
                      for st, k in (("successful", "results"), ("errored", "errors"))]
        else:
            what = ("is a list: no guidellm version writes a flat requests[] list"
                    if isinstance(reqs, list) else "is missing" if reqs is None
                    else f"is a {type(reqs).__name__}")
            raise RequestLogError(path, f"benchmark {bi}: 'requests' {what}; the accepted "
                                        f"layouts are {GUIDELLM_LAYOUTS}",
                                  field=f"benchmarks[{bi}].requests")
        for status, lst in groups:
            for r in lst:
                pos += 1
                yield bi, status, pos, r


def _read_guidellm(path: Path, data: dict):
    records = []
    windows: dict[int, tuple] = {}
    n_bench = len(data.get("benchmarks") or [])
    for bi, status, pos, r in _guidellm_requests(path, data):
        if not isinstance(r, dict):
            raise RequestLogError(path, "expected a request object", row=pos)
        ok = status == "successful"
        timed = _get(r, "info.timings") is not None
        names = (("info.timings.request_start", "info.timings.first_token_iteration",
                  "info.timings.last_token_iteration") if timed else
                 ("start_time", "first_token_time", "last_token_time"))
        ts = []
        for nm in names:
            v = _get(r, nm)
            if v is None and ok:
                raise RequestLogError(path, "missing (required)", row=pos, field=nm)
            x = _num(path, pos, nm, v, allow_none=True)
            ts.append(None if x is None else _s_to_ns(x))
        prompt = r.get("prompt_tokens", r.get("prompt_token_count"))
        output = r.get("output_tokens", r.get("output_token_count"))
        if ok and prompt is None:
            raise RequestLogError(path, "missing (required)", row=pos, field="prompt_tokens")
        if ok and output is None:
            raise RequestLogError(path, "missing (required)", row=pos, field="output_tokens")
        rid = r.get("request_id") or r.get("id") or f"b{bi}-{pos}"
        err = r.get("error") or r.get("message") or ("" if ok else status)
        records.append(_record(rid, *ts, _int(path, pos, "prompt_tokens", prompt),
                               _int(path, pos, "output_tokens", output),
                               test=f"benchmark{bi}" if n_bench > 1 else None, ok=ok,
                               error=str(err) if not ok else "", row=pos))
        # guidellm keeps warm-up (and cool-down) requests in requests.successful and measures
        # only inside scheduler_metrics.measure_start_time .. measure_end_time (epoch s)
        lo, hi = windows.setdefault(bi, _measure_window(path, data, bi))
        if ts[0] is not None and lo is not None and ts[0] < lo:
            records[-1]["warmup"] = "guidellm: sent before the benchmark's measure_start_time"
        elif ts[0] is not None and hi is not None and ts[0] > hi:
            records[-1]["warmup"] = "guidellm: sent after the benchmark's measure_end_time"
    return records, CLOCK_REALTIME, []


def _measure_window(path, data: dict, bi: int):
    """(measure_start, measure_end) in ns of benchmark ``bi`` (None where not written)."""
    benches = data.get("benchmarks")
    b = benches[bi] if isinstance(benches, list) and bi < len(benches) else None
    sm = b.get("scheduler_metrics") if isinstance(b, dict) else None
    if not isinstance(sm, dict):
        return None, None
    out = []
    for k in ("measure_start_time", "measure_end_time"):
        v = _num(path, None, f"benchmarks[{bi}].scheduler_metrics.{k}", sm.get(k),
                 allow_none=True)
        out.append(None if v is None or v <= 0 else _s_to_ns(v))
    return tuple(out)


def read(path: Path, text: str):
    return _read_guidellm(path, _load_json(path, text, dict))
