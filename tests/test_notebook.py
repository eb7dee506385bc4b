"""Execute notebooks/walkthrough.ipynb with nbclient (kernel python3 of this venv) so it cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "walkthrough.ipynb"


@pytest.mark.slow
def test_walkthrough_notebook_runs_and_draws_every_figure():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the committed notebook carries no outputs (they would go stale)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pngs = [o for o in outputs if o.output_type in ("display_data", "execute_result")
            and "image/png" in o.get("data", {})]
    # figures 1, 3, device stack, 2, 4, 5, 6
    assert len(pngs) == 7
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "emulated 100 Gb/s: single interface? True" in text
    assert "200 Gb/s: single interface? False" in text
    m = re.search(r"(\S+report\.html) [0-9.]+ MB", text)
    assert m and Path(m.group(1)).stat().st_size > 100_000
