"""The notebooks of notebooks/: executed headless (nbclient) at the small size, each must make at
least one figure, and every notebook is stored without outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
REQUIRED = ("01_quickstart", "02_schedules", "03_architecture_dse", "04_sync")


def test_the_notebooks_exist():
    assert set(REQUIRED) <= {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_without_outputs(path):
    import nbformat
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {i} has outputs: python -m m100.tools.nbstrip"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_executes_headless_and_makes_a_figure(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    monkeypatch.setenv("M100_NB_SIZE", os.environ.get("M100_NB_SIZE", "small"))
    monkeypatch.setenv("M100_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    figures = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if "image/png" in o.get("data", {})]
    assert figures, f"{path.name} made no figure"
