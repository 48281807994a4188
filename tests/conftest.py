"""Shared fixtures: warehouses in temporary folders and small hand-made traces."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from kvtrace.ingest._lines import Chunk
from kvtrace.synthetic import write_seed_trace
from kvtrace.warehouse import Warehouse

DATA = Path(__file__).parent / "data"  # real and hostile inputs (see its README)
ON_S3 = os.environ.get("KVTRACE_TEST_STORAGE") == "s3"
S3_BUCKET = "kvtrace-tests"
local_only = pytest.mark.skipif(ON_S3, reason="needs the warehouse on local disk")

# Generated inputs are the same on every run (a failure is reproduced by running the test
# again), and no example has a deadline: the first one may load a compiled kernel.
settings.register_profile("kvtrace", derandomize=True, deadline=None)
settings.load_profile("kvtrace")


def warehouse_at(folder: Path) -> str:
    """Where a test's warehouse lives: ``folder``, or with ``KVTRACE_TEST_STORAGE=s3`` a
    prefix of the test S3 server named after it (the whole suite runs on either)."""
    if not ON_S3:
        return str(folder)
    digest = hashlib.sha1(str(folder).encode()).hexdigest()[:16]
    return f"s3://{S3_BUCKET}/{digest}/{folder.name}"


@pytest.fixture(scope="session", autouse=True)
def s3_server():
    """With ``KVTRACE_TEST_STORAGE=s3``: an S3-compatible server on loopback (moto), its
    address and credentials in the environment that kvtrace and its subprocesses read."""
    if not ON_S3:
        yield None
        return
    from tests.s3_server import S3Server

    with S3Server() as server:
        server.create_bucket(S3_BUCKET)
        yield server


@pytest.fixture(scope="session", autouse=True)
def library_cache(tmp_path_factory):
    """Built SQL libraries go to a folder of the session's own, not the user's cache
    (commands the tests start inherit it)."""
    folder = tmp_path_factory.mktemp("kvtrace-cache")
    before = os.environ.get("KVTRACE_CACHE_DIR")
    os.environ["KVTRACE_CACHE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("KVTRACE_CACHE_DIR", None)
    else:
        os.environ["KVTRACE_CACHE_DIR"] = before


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(warehouse_at(tmp_path / "wh"), create=True)


@pytest.fixture
def slow_table_appends(monkeypatch) -> threading.Event:
    """Every row group a `TableFile` writes waits half a second first; the event is set
    when the first one starts (so a test can act while a write is in flight)."""
    from kvtrace.warehouse.table_file import TableFile

    writing = threading.Event()
    append = TableFile.append

    def slow_append(self, data):
        writing.set()
        time.sleep(0.5)
        append(self, data)

    monkeypatch.setattr(TableFile, "append", slow_append)
    return writing


def seed_record(
    request_id: int, layer: int, step: int, positions: list[int], *, block_size: int = 16, **extra
) -> dict:
    """A flat tracer record with only the fields ingest needs, plus ``extra``."""
    return {
        "event": "dsa_topk",
        "run_name": "hand",
        "dataset": "unit",
        "request_id": request_id,
        "layer_id": layer,
        "step_idx": step,
        "seq_len_current": step + 1,
        "block_size_tokens": block_size,
        "selected_token_pos": positions,
        **extra,
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


def chunk_of(lines: list[bytes]) -> Chunk:
    """``lines`` as one chunk of a JSONL file, from its first line."""
    return Chunk(b"".join(line + b"\n" for line in lines), 1, len(lines), 0)


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def linear_quantile(values, q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=np.float64), q))


KVTRACE_PROCESS = [sys.executable, "-c", "from kvtrace.cli import main; main()"]
"""The command line as a process of its own: what a signal or a crash reaches."""


def run_kvtrace(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the command line in this process, as ``kvtrace ARGS`` would from ``cwd``.

    Standard output and error are captured as the process would write them; the exit
    status is what the process would return.
    """
    from kvtrace import cli as cli_module
    from kvtrace.cli import _app as cli_state

    out, err = io.BytesIO(), io.BytesIO()
    saved = (sys.stdout, sys.stderr, sys.argv, os.getcwd(), cli_state.options)
    streams = (
        io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", write_through=True),
    )
    sys.stdout, sys.stderr = streams
    sys.argv = ["kvtrace", *args]
    cli_state.options = cli_state.Options()
    if cwd is not None:
        os.chdir(cwd)
    try:
        status = cli_module.run()
    finally:
        for stream in streams:
            stream.flush()
            stream.detach()  # the captured bytes stay readable
        sys.stdout, sys.stderr, sys.argv, cwd_before, cli_state.options = saved
        os.chdir(cwd_before)
    return subprocess.CompletedProcess(
        ["kvtrace", *args], status, out.getvalue().decode(), err.getvalue().decode()
    )


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the command line in this process: ``cli(*args) -> (exit status, stdout, stderr)``."""
    from kvtrace import cli as cli_module
    from kvtrace.cli import _app as cli_state

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr("sys.argv", ["kvtrace", *args])
        monkeypatch.setattr(cli_state, "options", cli_state.Options())
        status = cli_module.run()
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def query_rows(location: str, sql: str) -> list[tuple]:
    """The rows ``sql`` gives on the warehouse at ``location``, on a connection of its own."""
    from kvtrace import connect

    con = connect(Warehouse(location))
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()
