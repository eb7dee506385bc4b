"""The client helper writes native rows the reader accepts, on the sampler's clock."""

from __future__ import annotations

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
