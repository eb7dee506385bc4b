"""Property-based tests (hypothesis): sysfs value parsing, byte conservation of the re-binning
under any sampling pattern, and the request-log readers.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from capture_builders import ib, write_capture
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rdmascope.analysis.load import load_capture
from rdmascope.analysis.requestlogs import RequestLogError, read_request_log
from rdmascope.analysis.series import byte_intervals, integrate, rebin
from rdmascope.sampler.reader import CounterReader, SweepBuffers

from rdmascope.capture import STATUS_OK, STATUS_PARSE_ERROR

U64_MAX = (1 << 64) - 1
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------------
# sysfs value parsing (the reader's hot path)
# ----------------------------------------------------------------------------------------------


def _read_one(content: bytes) -> tuple[int, int]:
    with tempfile.NamedTemporaryFile() as f:
        f.write(content)
        f.flush()
        rd = CounterReader([f.name])
        buf = SweepBuffers()
        rd.read_sweep(0, buf)
        rd.close()
    return buf.status[0], buf.value[0]


_SPACE = st.sampled_from([b"", b"\n", b" ", b"  \n", b"\t"])


@SETTINGS
@given(n=st.integers(0, U64_MAX), lead=st.sampled_from([b"", b" ", b"   "]), tail=_SPACE)
def test_sysfs_value_round_trip(n, lead, tail):
    """Any u64 the kernel prints (optionally padded, as the emulated trees do) reads back exactly."""
    assert _read_one(lead + str(n).encode() + tail) == (STATUS_OK, n)


@SETTINGS
@given(n=st.integers(U64_MAX + 1, 10 ** 30) | st.integers(-10 ** 20, -1))
def test_sysfs_out_of_range_is_a_parse_error(n):
    assert _read_one(f"{n}\n".encode()) == (STATUS_PARSE_ERROR, 0)


@SETTINGS
@given(content=st.binary(max_size=40))
def test_sysfs_garbage_never_becomes_a_wrong_value(content):
    """Arbitrary bytes: either a parse error (value 0, never kept as data) or, if the bytes do
    spell an unsigned integer (optionally with a sign/underscores Python accepts), that integer."""
    status, value = _read_one(content)
    if status == STATUS_OK:
        assert value == int(content) and 0 <= value <= U64_MAX
    else:
        assert status == STATUS_PARSE_ERROR and value == 0


@settings(max_examples=200, deadline=None)
@given(content=st.from_regex(rb"\A[ +\-_0-9\n]{1,8}\Z") | st.binary(max_size=12))
def test_sysfs_only_plain_digits_are_values(content):
    status, value = _read_one(content)
    plain = re.fullmatch(rb"[ \t\n]*[0-9]+[ \t\n]*", content) is not None
    assert (status == STATUS_OK) == (plain and int(content) <= U64_MAX)


# ----------------------------------------------------------------------------------------------
# Re-binning conserves bytes whatever the sampling pattern
# ----------------------------------------------------------------------------------------------

MS = 1_000_000


@st.composite
def sampling(draw):
    """One counter's readings: irregular spacing (jitter, missed sweeps, long gaps), brackets of
    any length, any non-decreasing values."""
    n = draw(st.integers(2, 60))
    steps = draw(st.lists(st.one_of(st.integers(300_000, 1_700_000),   # jittered 1 ms
                                    st.integers(1_700_000, 40 * MS)),  # missed sweeps / gaps
                          min_size=n - 1, max_size=n - 1))
    durs = draw(st.lists(st.integers(0, 200_000), min_size=n, max_size=n))
    incs = draw(st.lists(st.integers(0, 6_250_000), min_size=n - 1, max_size=n - 1))
    t = 1_000_000_000 + np.concatenate([[0], np.cumsum(steps)])
    v = 5000 + np.concatenate([[0], np.cumsum(incs)])
    return [(int(t[i]), int(durs[i]), int(v[i]), STATUS_OK) for i in range(n)]


@SETTINGS
@given(rs=sampling(), width=st.integers(100_000, 50 * MS), shift=st.integers(0, 50 * MS))
def test_rebin_conserves_bytes(tmp_path_factory, rs, width, shift):
    # keep readings at least their brackets apart (the sampler's reads never overlap)
    assume(all(b[0] > a[0] + a[1] for a, b in zip(rs, rs[1:], strict=False)))
    p = tmp_path_factory.mktemp("rb") / "cap"
    write_capture(p, [ib("mlx5_0", "tx")], {0: rs})
    cap = load_capture(p)
    iv = byte_intervals(cap)
    total = 4 * (rs[-1][2] - rs[0][2])  # port_xmit_data counts 4-byte units
    assert iv["bytes"].sum() == total
    assert set(iv["flag"].astype(str)) <= {"ok", "gap"}
    first, last = int(iv["t0_ns"].min()), int(iv["t1_ns"].max())
    origin = first - shift
    b = rebin(iv, width, origin_ns=origin, start_ns=origin, end_ns=last + width)
    col = b["mlx5_0/tx"].to_numpy()
    assert np.nansum(col) == pytest.approx(total, rel=1e-9, abs=1e-6)
    assert np.nanmin(col) >= -1e-6 if np.isfinite(col).any() else True
    # and any split of the span into ranges sums to the same
    cuts = np.unique(np.linspace(first, last, 7).astype(np.int64))
    got = integrate(iv, cuts[:-1], cuts[1:])["mlx5_0/tx"].to_numpy()
    assert got.sum() == pytest.approx(total, rel=1e-9, abs=1e-6)


# ----------------------------------------------------------------------------------------------
# Request-log readers
# ----------------------------------------------------------------------------------------------


@st.composite
def request_rows(draw):
    n = draw(st.integers(1, 25))
    rows = []
    for i in range(n):
        send = draw(st.integers(10 ** 9, 10 ** 13))
        first = send + draw(st.integers(1, 10 ** 10))  # a TTFT of 0 is refused (impossible)
        last = first + draw(st.integers(0, 10 ** 11))
        rows.append({"request_id": f"q{i}", "t_send_ns": send, "t_first_token_ns": first,
                     "t_last_token_ns": last, "prompt_tokens": draw(st.integers(0, 10 ** 6)),
                     "output_tokens": draw(st.integers(0, 10 ** 5))})
    order = draw(st.permutations(range(n)))
    return rows, [rows[j] for j in order]


def _write(path: Path, rows, kind: str) -> Path:
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        s = io.StringIO()
        w = csv.DictWriter(s, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        path.write_text(s.getvalue())
    return path


@SETTINGS
@given(data=request_rows(), kind=st.sampled_from(["jsonl", "csv"]))
def test_native_reader_exact_and_order_free(tmp_path_factory, data, kind):
    rows, shuffled = data
    p = _write(tmp_path_factory.mktemp("rl") / f"log.{kind}", shuffled, kind)
    df = read_request_log(p).requests
    want = pd.DataFrame(rows).sort_values(["t_send_ns"], kind="stable")
    got = df.set_index("request_id").loc[want["request_id"]]
    assert got["t_send_ns"].tolist() == want["t_send_ns"].tolist()
    assert got["t_first_ns"].tolist() == want["t_first_token_ns"].tolist()
    assert got["t_last_ns"].tolist() == want["t_last_token_ns"].tolist()
    assert got["output_tokens"].tolist() == want["output_tokens"].tolist()
    assert df["t_send_ns"].is_monotonic_increasing


@SETTINGS
@given(data=request_rows(), kind=st.sampled_from(["jsonl", "csv"]), pick=st.integers(0, 10 ** 6),
       back=st.integers(1, 10 ** 9))
def test_native_reader_names_the_bad_row(tmp_path_factory, data, kind, pick, back):
    _, rows = data
    i = pick % len(rows)
    rows = [dict(r) for r in rows]
    rows[i]["t_first_token_ns"] = rows[i]["t_send_ns"] - back  # first token before the send
    p = _write(tmp_path_factory.mktemp("rl") / f"log.{kind}", rows, kind)
    line = i + 1 if kind == "jsonl" else i + 2  # CSV: the header is line 1
    if len(rows) == 1:  # nothing else usable: refused, naming the row and field
        with pytest.raises(RequestLogError) as ei:
            read_request_log(p)
        assert ei.value.row == line and ei.value.field == "t_first_token"
        assert str(p) in str(ei.value)
        return
    # a bad row is that row's problem: it fails with the reason, the others are read
    log = read_request_log(p)
    bad = log.requests[~log.requests["ok"]]
    assert bad["row"].tolist() == [line]
    assert bad["error"].iloc[0].startswith("invalid: t_first_token: first token at")
    assert len(log.ok) == len(rows) - 1
