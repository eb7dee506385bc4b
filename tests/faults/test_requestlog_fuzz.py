"""Fuzzing every request-log reader with mutants of real-shaped files (hypothesis, bounded).

Each seed is a request log in a tool's own layout (``tests/data/requestlogs``). A mutant swaps
one to three values anywhere in its JSON tree for a value of another type (null, a number, a
huge or negative number, a string, a list, an object, a boolean) or drops a key. Whatever the
mutant, a reader either refuses it with ``RequestLogError`` (naming the file) or returns a log
whose successful rows are plausible by the one rule every reader shares
(``checks.PLAUSIBILITY``): a first token after the send, times in order and within a day of
the send, no more token chunks than output tokens, token counts within any model's context.
Never a traceback. The number of examples is fixed (no time budget that a busy machine trips).
"""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rdmascope.analysis.requestlogs import RequestLogError, read_request_log
from rdmascope.analysis.requestlogs.checks import MAX_CONTEXT_TOKENS, MAX_REQUEST_NS
from rdmascope.analysis.requestlogs.common import UnexpectedShape

DATA = Path(__file__).resolve().parents[1] / "data" / "requestlogs"

#: One seed per reader (and per layout a reader tells apart): (file, format).
SEEDS = [
    ("native.jsonl", "native"),
    ("vllm_serve_result.json", "vllm"),
    ("vllm_serve_result_nostart.json", "vllm"),
    ("guidellm_benchmarks_v04.json", "guidellm"),
    ("genai_perf_profile_export.json", "genai-perf"),
    ("kinds/genai_perf_reasoning_sse.json", "genai-perf"),
    ("aiperf_profile_export.jsonl", "aiperf"),
    ("inference_perf_per_request_lifecycle_metrics.json", "inference-perf"),
    ("kinds/sglang_bench_serving_two_runs.jsonl", "sglang"),
    ("kinds/llmperf_individual_responses.json", "llmperf"),
    ("cases/M4.json", "genai-perf"),
    ("cases/M6.json", "inference-perf"),
    ("kinds/vllm_multiturn_raw_data.csv", "vllm-multiturn"),
    ("kinds/trtllm_bench_request_info.json", "trtllm-bench"),
    ("kinds/fmperf_results_vllm.json", "fmperf"),
]

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])

REPLACEMENTS = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10), st.sampled_from([0, -1, 2**63, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False, width=32), st.sampled_from([1.77e9, 1e18]),
    st.text(max_size=3), st.just([]), st.lists(st.integers(0, 5), max_size=3), st.just({}),
    st.just({"value": None}), st.just([None]), st.just("drop"))


def _load(name: str):
    text = (DATA / name).read_text()
    if name.endswith(".jsonl"):
        return [json.loads(x) for x in text.splitlines() if x.strip()], True
    if name.endswith(".csv"):
        # a CSV is mutated as a list of rows (dicts of cells) and written back as CSV
        return [dict(r) for r in csv.DictReader(io.StringIO(text))], "csv"
    return json.loads(text), False


def _cell(v) -> str:
    return "" if v is None else v if isinstance(v, str) else json.dumps(v)


def _dump(value, lines) -> str:
    if lines == "csv":
        rows = value if isinstance(value, list) else []
        cols = list(dict.fromkeys(k for r in rows if isinstance(r, dict) for k in r))
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            r = r if isinstance(r, dict) else {}
            w.writerow([_cell(r.get(c)) for c in cols])
        return buf.getvalue()
    if lines:
        return "".join(json.dumps(v) + "\n" for v in value)
    return json.dumps(value)


def _paths(node, prefix=()):
    """Every path (tuple of keys/indices) to a value in a JSON tree, the root excluded."""
    out = []
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return out
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k)))
    return out


def _set(tree, path, value):
    node = tree
    for k in path[:-1]:
        node = node[k]
    if value == "drop":
        if isinstance(node, dict):
            node.pop(path[-1])
        else:
            node[path[-1]] = None
    else:
        node[path[-1]] = value


def _known(v) -> bool:
    return v is not None and not pd.isna(v)


def _plausible(log) -> None:
    """The successful rows of an accepted log obey the one plausibility rule."""
    for r in log.ok.itertuples():
        send, first, last = int(r.t_send_ns), int(r.t_first_ns), int(r.t_last_ns)
        assert send < first <= last, r
        assert last - send <= MAX_REQUEST_NS, r
        ch = r.chunk_times
        if ch is not None and len(ch):
            assert all(b >= a for a, b in zip(ch, ch[1:], strict=False)), r
            assert ch[0] >= send and ch[-1] - send <= MAX_REQUEST_NS, r
            if not r.check and _known(r.output_tokens):  # a named check flags it instead
                assert len(ch) <= max(int(r.output_tokens), 1), r
        for n in (r.prompt_tokens, r.output_tokens):
            if _known(n):
                assert 0 <= int(n) <= MAX_CONTEXT_TOKENS, r


@pytest.mark.parametrize("name,fmt", SEEDS, ids=[s[0] for s in SEEDS])
@SETTINGS
@given(data=st.data())
def test_mutants_are_refused_by_name_or_read_plausibly(tmp_path_factory, name, fmt, data):
    tree, lines = _load(name)
    paths = _paths(tree)
    n = data.draw(st.integers(1, 3), label="mutations")
    for _ in range(n):
        paths = _paths(tree)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        _set(tree, path, copy.deepcopy(data.draw(REPLACEMENTS, label="value")))
    p = tmp_path_factory.mktemp("fuzz") / Path(name).name
    p.write_text(_dump(tree, lines))
    for f in (None, fmt):
        try:
            log = read_request_log(p, format=f)
        except RequestLogError as exc:
            assert str(p) in str(exc)
            # refused at the edge, naming what was wrong: never by the last-resort net
            assert not isinstance(exc, UnexpectedShape), exc.__cause__
            continue
        _plausible(log)
