"""docs/notebooks/quickstart.ipynb runs end to end; any cell that raises fails the test."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from conftest import ROOT

NOTEBOOK = ROOT / "docs" / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell on the first error
    elapsed = time.perf_counter() - start
    errors = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 3, "the notebook's figures were not displayed"
    nbformat.write(notebook, tmp_path / "quickstart.executed.ipynb")
    print(f"quickstart.ipynb ran in {elapsed:.1f} s")
