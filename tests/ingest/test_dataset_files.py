"""Prompt datasets of ``kvtrace collect dsa`` given to ``kvtrace ingest``: one sentence
naming the dataset and the command that reads it.

The records follow the collectors' loaders (kvtrace/collectors/datasets/*.py): ShareGPT
``[{id, conversations: [{from, value}]}]``, LongBench v2 ``[{_id, ..., question,
choice_A..D, answer, context}]``, RULER JSONL ``{index, input, outputs, length}``.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.conftest import run_kvtrace, warehouse_at

SHAREGPT = Path(__file__).parent.parent / "data" / "sharegpt_format_dummy_conversation.json"
LONGBENCH_RECORD = {
    "_id": "66f36490821e116aacb2cc22",
    "domain": "Single-Document QA",
    "sub_domain": "Financial",
    "difficulty": "easy",
    "length": "short",
    "question": "Which year?",
    "choice_A": "2019",
    "choice_B": "2020",
    "choice_C": "2021",
    "choice_D": "2022",
    "answer": "B",
    "context": "The report covers 2020. " * 20,
}
RULER_RECORD = {
    "index": 0,
    "input": "Some special magic numbers ...",
    "outputs": ["7"],
    "length": 4096,
}


def _minified_sharegpt(path: Path) -> Path:
    """ShareGPT on one line: read as CSV before, its header was 600 characters of chat."""
    path.write_text(json.dumps(json.loads(SHAREGPT.read_text())))
    return path


def _longbench(path: Path) -> Path:
    path.write_text(json.dumps([LONGBENCH_RECORD], indent=2))
    return path


def _longbench_longer_than_the_head(path: Path) -> Path:
    """A first record of 100 kB: cut by the 64 kB head, its keys are found by name."""
    path.write_text(json.dumps([{**LONGBENCH_RECORD, "context": "x" * 100_000}]))
    return path


def _ruler_jsonl(path: Path) -> Path:
    path.write_text(json.dumps(RULER_RECORD) + "\n")
    return path


def _ruler_tgz(path: Path) -> Path:
    content = (json.dumps(RULER_RECORD) + "\n").encode()
    with tarfile.open(path, "w:gz") as archive:
        member = tarfile.TarInfo("niah_single_1/validation.jsonl")
        member.size = len(content)
        archive.addfile(member, io.BytesIO(content))
    return path


@pytest.mark.parametrize(
    "make, name, dataset, what",
    [
        (lambda p: SHAREGPT, None, "sharegpt", "is a ShareGPT file"),
        (_minified_sharegpt, "chat.json", "sharegpt", "is a ShareGPT file"),
        (_longbench, "data.json", "longbench-v2", "is LongBench v2 data"),
        (_longbench_longer_than_the_head, "data.json", "longbench-v2", "is LongBench v2 data"),
        (_ruler_jsonl, "validation.jsonl", "ruler", "is RULER data"),
        (_ruler_tgz, "ruler.tgz", "ruler", "is a tar archive of JSONL files"),
    ],
)
def test_a_prompt_dataset_names_the_collect_command_that_reads_it(
    tmp_path, make, name, dataset, what
):
    path = make(tmp_path / (name or "unused"))
    root = warehouse_at(tmp_path / "wh")
    result = run_kvtrace("-w", root, "ingest", str(path))
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"Error: {path} {what}")
    assert "a prompt dataset rather than a trace" in result.stderr
    assert f"'kvtrace collect dsa --dataset {dataset} --data-file {path}'" in result.stderr
    assert "CSV" not in result.stderr and 'conversations": [' not in result.stderr


def test_a_ruler_prediction_file_is_still_ingested(tmp_path):
    """``pred`` beside ``outputs`` makes it a RULER prediction file, which ingest reads."""
    path = tmp_path / "niah_single_1.jsonl"
    path.write_text(json.dumps({**RULER_RECORD, "pred": "7"}) + "\n")
    result = run_kvtrace("-w", warehouse_at(tmp_path / "wh"), "-q", "ingest", str(path))
    assert result.returncode == 0, result.stderr
    assert "1 rows ingested" in result.stdout


def test_a_json_list_of_no_known_kind_is_not_called_a_csv_file(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"a": 1, "b": 2}]))
    result = run_kvtrace("-w", warehouse_at(tmp_path / "wh"), "ingest", str(path))
    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: {path} is not a trace kvtrace knows")
