"""The capture format package: its modules' dependencies run one way (schema <- writer, reader)."""

import ast
from pathlib import Path

import rdmascope.capture as C

PKG = Path(C.__file__).parent


def _imports(module: str) -> set[str]:
    tree = ast.parse((PKG / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("rdmascope")}


def test_writer_and_reader_depend_on_the_schema_never_on_each_other():
    assert _imports("schema") == set()
    assert _imports("lock") == {"rdmascope.capture.schema"}
    assert "rdmascope.capture.reader" not in _imports("writer")
    assert "rdmascope.capture.writer" not in _imports("reader")
    assert _imports("reader") == {"rdmascope.capture.schema"}


def test_public_names_are_importable_from_the_package():
    from rdmascope.capture import (  # noqa: F401
        FORMAT_VERSION,
        CaptureWriter,
        read_capture,
        read_manifest,
        recording_pid,
        write_segment,
    )
    assert C.CaptureWriter.__module__ == "rdmascope.capture.writer"
    assert C.read_capture.__module__ == "rdmascope.capture.reader"
