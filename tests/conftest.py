"""Shared fixtures: warehouses in temporary folders and small hand-made traces."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kvtrace.synthetic import write_seed_trace
from kvtrace.warehouse import Warehouse


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "wh", create=True)


def seed_record(request_id: int, layer: int, step: int, positions: list[int], *,
                block_size: int = 16, **extra) -> dict:
    """A flat tracer record with only the fields ingest needs, plus ``extra``."""
    return {
        "event": "dsa_topk", "run_name": "hand", "dataset": "unit", "request_id": request_id,
        "layer_id": layer, "step_idx": step, "seq_len_current": step + 1,
        "block_size_tokens": block_size, "selected_token_pos": positions, **extra,
    }


def write_jsonl(path: Path, records: list[dict | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for record in records:
            out.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
    return path


@pytest.fixture
def synthetic_trace(tmp_path: Path) -> Callable[..., Path]:
    """Write a synthetic seed-format trace under ``<tmp>/<run>/block<B>/``."""

    def make(run_name: str = "synth", block_size: int = 64, **kwargs) -> Path:
        path = tmp_path / run_name / f"block{block_size}" / "trace_steps_0_4.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_seed_trace(path, run_name=run_name, block_size=block_size, **kwargs)
        return path

    return make


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def linear_quantile(values, q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=np.float64), q))


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the command line in this process: ``cli(*args) -> (exit status, stdout, stderr)``."""
    from kvtrace import cli as cli_module

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr("sys.argv", ["kvtrace", *args])
        monkeypatch.setattr(cli_module, "options", cli_module.Options())
        status = 0
        try:
            cli_module.main()
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run
