"""The tour's folder (``kvtrace demo``, ``kvtrace samples``, ``kvtrace ingest
kvtrace-samples``), made once for the charts' and the notebook's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_kvtrace


@pytest.fixture(scope="package")
def tour(tmp_path_factory) -> Path:
    """A folder holding the tour's ``kvtrace-warehouse``, as a reader has it."""
    folder = tmp_path_factory.mktemp("tour")
    for command in (["demo"], ["samples"], ["ingest", "kvtrace-samples"]):
        done = run_kvtrace("-w", str(folder / "kvtrace-warehouse"), *command, cwd=folder)
        assert done.returncode == 0, done.stderr
    return folder
