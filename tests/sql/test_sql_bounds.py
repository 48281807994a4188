"""kvtrace sql within bounds: a memory limit of its own, and a running query that stops
on Ctrl-C and SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from tests.conftest import local_only, seed_record, write_jsonl

# 10^24 rows: it ends only when stopped
ENDLESS = "SELECT count(*) FROM range(100000000) a, range(100000000) b, range(100000000) c"


@pytest.fixture
def root(warehouse, tmp_path):
    records = [seed_record(r, layer, 99, [1, 5, 40]) for r in range(2) for layer in range(8)]
    ingest(warehouse, [str(write_jsonl(tmp_path / "trace.jsonl", records))])
    return warehouse.location


def test_a_query_past_the_memory_limit_is_one_sentence(root, cli):
    status, _, err = cli(
        "-w", root, "sql", "--memory-limit", "40MB", "SELECT list(range) FROM range(30000000)"
    )
    assert status == 1
    assert err.startswith("Error: out of memory: ") and "raise --memory-limit" in err
    assert len(err.strip().splitlines()) == 1


def test_a_memory_limit_that_is_no_size_is_refused(root, cli):
    status, _, err = cli("-w", root, "sql", "--memory-limit", "plenty", "SELECT 1")
    assert status == 1 and "expected a size such as 8GB" in err


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@local_only
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    ("signal_number", "status", "said"),
    [(signal.SIGTERM, 143, "Terminated; nothing was half-written."), (signal.SIGINT, 130, "")],
)  # (Ctrl-C: the terminal shows ^C, and the command line's library ends with 130 silently)
def test_a_running_query_stops_on_a_signal(root, signal_number, status, said):
    process = subprocess.Popen(
        [sys.executable, "-m", "kvtrace", "-w", root, "sql", ENDLESS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the query is running once the process has worked a few CPU-seconds (starting
        # takes about one); a signal sent earlier must stop it just the same
        while _cpu_seconds(process.pid) < 3 and process.poll() is None:
            time.sleep(0.1)
        process.send_signal(signal_number)
        _, err = process.communicate(timeout=120)  # a hang guard: it stops at once
    finally:
        process.kill()
    assert process.returncode == status, err
    assert err.strip() == said
