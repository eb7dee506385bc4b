"""``--json`` is written table by table, a block of rows at a time (``output.write_json``): the
text must be exactly the whole-document ``json.dumps(obj, indent=1)`` the commands printed
before, whatever the block size (edge cases: NaN, unicode, newlines in strings, nested meta,
empty tables, a named int64 index above 2^53, nullable ints, text with NA, mixed objects, a
``%`` in a column name)."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from rdmascope.cli import main
from rdmascope.cli.output import _json_default, _nan_to_none, to_records, write_json


def _whole(tables, meta):
    """The previous implementation: every table as records in one object, dumped at once."""
    obj = {"schema_version": 1, "meta": meta or {}}
    for name, df in tables.items():
        d = df.reset_index() if df.index.name is not None else df
        obj[name] = to_records(d)
    return json.dumps(_nan_to_none(obj), indent=1, default=_json_default) + "\n"


def _tables():
    idx = pd.Index(np.arange(7, dtype=np.int64) * 1_000_000 + 2**53 + 1, name="window_start_ns")
    a = pd.DataFrame({"tx": [1.5, np.nan, 3.0, 1e300, -0.0, 7.25, np.nan],
                      "n": np.arange(7, dtype=np.int64),
                      "ok": [True, False] * 3 + [True],
                      "name": ["a", "é", "x\ny", 'q"t', "", None, "ü\t"],
                      "when": pd.to_datetime(["2026-01-01"] * 7),
                      "k%s": pd.array([1, None, -3, 2**62, 0, None, 5], dtype="Int64"),
                      "s%%d": pd.array(["a", None, "é\x7f", "a", 'q"', "", "a"],
                                       dtype="string"),
                      "o": [1, 2.5, None, "x", True, np.int64(4), [1]]}, index=idx)
    b = pd.DataFrame({"series": ["tx", "rx"], "share": [0.5, np.nan]})
    empty = pd.DataFrame({"x": pd.Series([], dtype=float)})
    return {"rates": a, "summary": b, "none": empty}


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 10_000])
@pytest.mark.parametrize("meta", [None, {}, {"capture": "c", "nan": float("nan"),
                                            "nested": {"l": [1, float("nan"), {"k": []}]},
                                            "np": np.int64(3)}])
def test_streamed_json_equals_the_whole_document(chunk, meta, monkeypatch):
    import rdmascope.cli.output as O

    monkeypatch.setattr(O, "ROWS_PER_BLOCK", chunk)
    tables = _tables()
    buf = io.StringIO()
    pieces = []

    def write(text):
        pieces.append(text)
        buf.write(text)

    write_json(tables, meta or {}, write)
    assert buf.getvalue() == _whole(tables, meta)
    json.loads(buf.getvalue())  # a valid document
    if chunk == 1:  # written as it goes, not as one string
        assert len(pieces) > len(tables["rates"])


def test_no_tables():
    buf = io.StringIO()
    write_json({}, {"a": 1}, buf.write)
    assert buf.getvalue() == _whole({}, {"a": 1})


@pytest.mark.parametrize("args", [["bursts", "{cap}", "--json"],
                                  ["rates", "{cap}", "--window", "100ms", "--json"],
                                  ["attribute", "{cap}", "--json"]])
def test_commands_print_the_same_json_in_small_chunks(fixtures_dir, monkeypatch, args):
    """The commands' --json written in 3-row chunks equals the whole document, byte for byte."""
    cap = fixtures_dir / "sim-p2-200"
    if not (cap / "manifest.json").exists():
        pytest.skip("fixture sim-p2-200 not committed")
    import rdmascope.cli.output as O

    argv = [a.format(cap=cap) for a in args]
    with monkeypatch.context() as m:  # the previous way: one object, one json.dumps
        m.setattr(O, "write_json",
                  lambda tables, meta, write=None: O.click.echo(_whole(tables, meta), nl=False))
        whole = CliRunner().invoke(main, argv)
    assert whole.exit_code == 0, whole.output
    monkeypatch.setattr(O, "ROWS_PER_BLOCK", 3)
    small = CliRunner().invoke(main, argv)
    assert small.exit_code == 0, small.output
    assert small.stdout == whole.stdout
    doc = json.loads(small.stdout)
    assert any(isinstance(v, list) and len(v) > 3 for v in doc.values())
