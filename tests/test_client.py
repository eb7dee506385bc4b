"""The client helper writes native rows the reader accepts, on the sampler's clock."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from rdmascope.client import RequestLogWriter, record_request


class FakeTimer:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def test_writer_rows_round_trip(tmp_path):
    from rdmascope.analysis.requestlogs import read_request_log

    clock = FakeTimer()
    p = tmp_path / "requests.jsonl"
    with RequestLogWriter(p, test="P4", round=2, timer=clock) as log:
        with log.request(prompt_tokens=8192) as r:
            clock.t = 100.75
            r.chunk()
            clock.t = 101.0
            r.chunk(tokens=3)
            clock.t = 101.5
            r.chunk(tokens=5)
            r.output_tokens = 9
        with pytest.raises(RuntimeError):
            with log.request("bad", prompt_tokens=8192):
                raise RuntimeError("connection reset")
        with log.request(prompt_tokens=10, round=3) as r2:
            clock.t = 102.0
            r2.chunk(tokens=4)  # output tokens default to the counted tokens
    rl = read_request_log(p)
    assert rl.format == "native" and rl.clock == "CLOCK_MONOTONIC"
    assert rl.n_failed == 1
    bad = rl.requests.set_index("request_id").loc["bad"]
    assert "RuntimeError: connection reset" in bad.error
    a = rl.requests.set_index("request_id").loc["P4-r2-0"]
    assert (a.t_send_ns, a.t_first_ns, a.t_last_ns) == (100 * 10**9, 100_750_000_000,
                                                       101_500_000_000)
    assert (a.prompt_tokens, a.output_tokens, a.test, a["round"]) == (8192, 9, "P4", 2)
    assert a.chunk_times == [100_750_000_000, 101_000_000_000, 101_500_000_000]
    c = rl.requests.set_index("request_id").loc["P4-r3-2"]
    assert (c.output_tokens, c["round"]) == (4, 3)


def test_request_without_token_is_failed(tmp_path):
    p = tmp_path / "r.jsonl"
    with RequestLogWriter(p, timer=FakeTimer()) as log:
        with log.request(prompt_tokens=1):
            pass
    line = p.read_text()
    assert '"error": "no token received"' in line


def test_default_timer_is_the_sampler_clock(tmp_path):
    """The rows use time.perf_counter: the clock of the capture's t_before_ns (perf_counter_ns)."""
    p = tmp_path / "r.jsonl"
    before = time.perf_counter_ns()
    with RequestLogWriter(p) as log:
        with log.request(prompt_tokens=1) as r:
            r.chunk()
    after = time.perf_counter_ns()
    from rdmascope.analysis.requestlogs import read_request_log
    row = read_request_log(p).ok.iloc[0]
    assert before - 1000 <= row.t_send_ns <= row.t_last_ns <= after + 1000


def test_record_request_checks_order(tmp_path):
    p = tmp_path / "r.jsonl"
    record_request(p, request_id="a", t_send=1.0, t_first_token=2.0, t_last_token=3.0,
                   prompt_tokens=5, output_tokens=2, test="P1", round=1)
    with pytest.raises(ValueError, match="before t_send"):
        record_request(p, request_id="b", t_send=2.0, t_first_token=1.0, t_last_token=3.0,
                       prompt_tokens=5, output_tokens=2)
    assert len(p.read_text().splitlines()) == 1


def test_client_imports_stdlib_only():
    code = ("import sys, rdmascope.client; "
            "bad = [m for m in ('pandas', 'numpy', 'pyarrow', 'matplotlib') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


GOOD = {"request_id": "a", "t_send": 1.0, "t_first_token": 1.5, "t_last_token": 2.0,
        "prompt_tokens": 5, "output_tokens": 2, "test": "P1", "round": 1,
        "clock": "CLOCK_MONOTONIC"}


@pytest.mark.parametrize("field, value", [
    ("prompt_tokens", None), ("prompt_tokens", -1), ("prompt_tokens", 2.5),
    ("prompt_tokens", "many"), ("output_tokens", None), ("output_tokens", -3),
    ("round", -1), ("round", 1.5), ("request_id", ""), ("request_id", None),
    ("t_send", None), ("t_send", "soon"), ("t_first_token", True),
    ("t_last_token", 1e300), ("chunk_times", "1.5"), ("chunk_times", [1.5, "x"]),
])
def test_writer_refuses_what_the_reader_would_refuse_the_log_for(tmp_path, field, value):
    """Each bad value, written raw beside a good row, makes the reader refuse the whole file
    (checked here first, independently of the writer); the writer raises ValueError naming
    the field and writes nothing, so the log it wrote stays readable."""
    from rdmascope.analysis.requestlogs import RequestLogError, read_request_log

    bad = {**GOOD, "request_id": "b", field: value}
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(RequestLogError):
        read_request_log(raw)
    p = tmp_path / "w.jsonl"
    with RequestLogWriter(p) as log:
        log.write(dict(GOOD))
        with pytest.raises(ValueError, match=f"{field}: expected"):
            log.write(bad)
    assert read_request_log(p).requests["request_id"].tolist() == ["a"]
    with pytest.raises(ValueError, match=f"{field}: expected"):
        record_request(p, **{k: v for k, v in bad.items() if k != "clock"})
    assert len(p.read_text().splitlines()) == 1


def test_writer_takes_whole_floats_as_the_reader_does(tmp_path):
    """8192.0 tokens and round 2.0 are whole numbers: the reader takes them, so does the writer."""
    from rdmascope.analysis.requestlogs import read_request_log

    p = tmp_path / "w.jsonl"
    with RequestLogWriter(p) as log:
        log.write({**GOOD, "prompt_tokens": 8192.0, "output_tokens": 3.0, "round": 2.0})
        with log.request("b", prompt_tokens=5.0, round=1.0):
            pass  # no token: a failed row, still written
    r = read_request_log(p).requests.set_index("request_id")
    assert (r.loc["a", "prompt_tokens"], r.loc["a", "output_tokens"], r.loc["a", "round"]) == \
        (8192, 3, 2)
    assert r.loc["b", "prompt_tokens"] == 5


def test_writer_refuses_an_id_twice_as_the_reader_does(tmp_path):
    from rdmascope.analysis.requestlogs import RequestLogError, read_request_log

    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(RequestLogError, match="more than once"):
        read_request_log(raw)
    p = tmp_path / "w.jsonl"
    with RequestLogWriter(p, timer=FakeTimer()) as log:
        log.write(dict(GOOD))
        with pytest.raises(ValueError, match="request_id: already written"):
            log.write(dict(GOOD))
        with pytest.raises(ValueError, match="request_id 'a': already written"):
            log.request("a", prompt_tokens=1)
    assert len(read_request_log(p).requests) == 1


def test_request_without_prompt_tokens_is_refused_saying_how(tmp_path):
    p = tmp_path / "r.jsonl"
    with RequestLogWriter(p, timer=FakeTimer()) as log:
        with pytest.raises(ValueError, match=r"prompt_tokens: expected a non-negative integer "
                           r"\(tokens\), got None \(pass prompt_tokens= to log.request\(\)"):
            with log.request() as r:
                r.chunk()
        with pytest.raises(ValueError, match="prompt_tokens: expected a non-negative integer, "
                           "got -5"):
            log.request(prompt_tokens=-5)  # said at once, before the request is sent
        with log.request() as r:  # set inside the block: fine
            r.chunk()
            r.prompt_tokens = 7
    assert [json.loads(x)["prompt_tokens"] for x in p.read_text().splitlines()] == [7]


def test_a_failed_request_may_lack_times_and_counts(tmp_path):
    """A failed row (error set) is read with its times and token counts None: not refused."""
    from rdmascope.analysis.requestlogs import read_request_log

    p = tmp_path / "r.jsonl"
    with RequestLogWriter(p, timer=FakeTimer()) as log:
        log.write(dict(GOOD))
        with pytest.raises(RuntimeError):
            with log.request("f"):  # no prompt_tokens, no token: a failed row
                raise RuntimeError("refused by the server")
    rl = read_request_log(p)
    assert rl.n_failed == 1 and len(rl.requests) == 2
