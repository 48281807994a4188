"""The documentation's notebook runs, top to bottom, in a Jupyter kernel of this
interpreter, in the tour's folder: its queries come back as polars frames and its charts
as Vega-Lite."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent.parent.parent / "docs" / "notebooks" / "tour.ipynb"
KERNEL = "kvtrace-tests"


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
    """A kernel spec that starts this interpreter, found before any of the machine's."""
    write_kernel_spec(tmp_path / "jupyter" / "kernels" / KERNEL)
    spec = tmp_path / "jupyter" / "kernels" / KERNEL / "kernel.json"
    assert json.loads(spec.read_text())["argv"][0] == sys.executable
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    return KERNEL


def _outputs(notebook) -> list[dict]:
    return [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]


def test_the_notebook_runs_with_polars_frames_and_vega_lite_charts(tour, kernel):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells)  # kept without outputs
    NotebookClient(
        notebook, kernel_name=kernel, timeout=600, resources={"metadata": {"path": str(tour)}}
    ).execute()
    outputs = _outputs(notebook)
    assert not [output for output in outputs if output.output_type == "error"]
    texts = [output.get("data", {}).get("text/plain", "") for output in outputs]
    # the demo traces 4 layers; its layer profile at block size 64 is 4 rows of 4 columns
    assert any(text.startswith("shape: (4, 4)\n") and "layer_id" in text for text in texts)
    charts = [
        output["data"]
        for output in outputs
        for mimetype in output.get("data", {})
        if mimetype.startswith("application/vnd.vegalite.")
    ]
    assert len(charts) == 4  # hit curves, latency against throughput, offsets, bandwidth
    nbformat.validate(notebook)  # the executed notebook is one Jupyter saves
