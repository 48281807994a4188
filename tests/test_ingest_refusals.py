"""``kvtrace ingest`` refuses paths that give nothing to ingest before it creates or
writes the warehouse: a path that does not exist (every one named), an empty folder, a
pattern that matches nothing, a file named on the command line that no family reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_kvtrace

DATA = Path(__file__).parent / "data"
AZURE = DATA / "azure_llm_inference_code.csv"
SHAREGPT = DATA / "sharegpt_format_dummy_conversation.json"


@pytest.mark.parametrize(
    "args, message",
    [
        (["no/such/file"], "Error: no/such/file does not exist"),
        (
            [str(AZURE), "no/such/file", "gone.jsonl"],
            "Error: no/such/file, gone.jsonl do not exist",
        ),
        (["empty"], "Error: no files under empty"),
        (["nothing*.csv"], "Error: the pattern 'nothing*.csv' matches no file"),
        ([str(AZURE), str(SHAREGPT)], f"Error: {SHAREGPT} is a ShareGPT file"),
    ],
)
def test_nothing_is_created_when_a_path_gives_nothing(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    warehouse = tmp_path / "wh"
    result = run_kvtrace("-w", str(warehouse), "ingest", *args, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(message)
    assert len(result.stderr.splitlines()) == 1
    assert not warehouse.exists()


def test_an_existing_warehouse_is_left_as_it_was(tmp_path):
    warehouse = tmp_path / "wh"
    assert run_kvtrace("-w", str(warehouse), "-q", "ingest", str(AZURE)).returncode == 0
    before = sorted(p.relative_to(warehouse) for p in warehouse.rglob("*"))
    result = run_kvtrace("-w", str(warehouse), "ingest", str(AZURE), "missing.csv", cwd=tmp_path)
    assert result.stderr == "Error: missing.csv does not exist\n"
    assert sorted(p.relative_to(warehouse) for p in warehouse.rglob("*")) == before
