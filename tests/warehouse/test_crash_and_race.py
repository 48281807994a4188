"""Ingests, optimize and vacuum (no retention, forced) run at once and are SIGKILLed at
random moments, round after round: after every round the warehouse checks clean and
every committed source's rows are readable exactly once; nothing else is seen.  In half
the rounds the ingests compact after their commits (every table with two small files),
so their compactions are killed and raced too.

The suite runs 20 rounds of the random kills and 6 of the profiler races;
``KVTRACE_CRASH_ROUNDS=200`` runs that many of each (a soak before a release)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from kvtrace.synthetic.timeline import TimelineShape, write_timeline_trace
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse._compaction import AUTO_COMPACT_ENV
from kvtrace.warehouse.ops.integrity import check
from tests.conftest import ON_S3, warehouse_at

ROUNDS = int(os.environ.get("KVTRACE_CRASH_ROUNDS", 20))
PROFILER_ROUNDS = int(os.environ.get("KVTRACE_CRASH_ROUNDS", 6))
SEED = 20261124
SOURCES = 12
REQUESTS, STEPS, LAYERS = 2, 2, 2
ROWS_PER_SOURCE = REQUESTS * STEPS * LAYERS


def _command(location: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "kvtrace", "-q", "-w", location, *args]


def _state(location: str) -> tuple[dict[str, int], dict[str, int]]:
    """Per source path: the journal's committed sources, and rows per run name."""
    con = connect(Warehouse(location))
    try:
        committed = dict(
            con.execute(
                "SELECT DISTINCT source_path, run_id FROM warehouse_commits "
                "WHERE operation = 'ingest'"
            ).fetchall()
        )
        rows = dict(
            con.execute(
                "SELECT r.run_name, count(*) FROM dsa_steps s JOIN runs r USING (run_id) GROUP BY 1"
            ).fetchall()
        )
        doubled = con.execute(
            "SELECT count(*) FROM (SELECT run_id, request_id, step_idx, layer_id, block_size "
            "FROM dsa_steps GROUP BY ALL HAVING count(*) > 1)"
        ).fetchone()[0]
        assert doubled == 0
        return committed, rows
    finally:
        con.close()


def _run_with_kills(
    rng: random.Random,
    location: str,
    ingests: list[list[str]],
    maintenance: float,
    kill: float,
    wait_s: tuple[float, float],
) -> None:
    """Run the ingest commands beside optimize and vacuum (each with chance
    ``maintenance``), all at once, the ingests compacting after their commits with
    chance one half; SIGKILL each with chance ``kill`` after a random wait; every
    command not killed must succeed."""
    env = dict(os.environ)
    if rng.random() < 0.5:
        env[AUTO_COMPACT_ENV] = "2"
    commands = list(ingests)
    if rng.random() < maintenance:
        commands.append(_command(location, "optimize"))
    if rng.random() < maintenance:
        commands.append(_command(location, "vacuum", "--retain-hours", "0", "--force"))
    rng.shuffle(commands)
    processes = [
        subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        for c in commands
    ]
    doomed = [p for p in processes if rng.random() < kill]
    time.sleep(rng.uniform(*wait_s))
    for process in doomed:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
    for process in processes:
        _, err = process.communicate(timeout=300)
        if process not in doomed:
            assert process.returncode == 0, (process.args, err)


@pytest.mark.skipif(
    ON_S3,
    reason="an object store's lock that a killed process held is taken over after 600 s "
    "(object_lock.STALE_AFTER_S), longer than a round may wait",
)
def test_maintenance_survives_random_kills_and_races(tmp_path, synthetic_trace):
    rng = random.Random(SEED)
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    traces = {
        f"src{n}": synthetic_trace(
            run_name=f"src{n}", requests=REQUESTS, steps=STEPS, layers=LAYERS, seed=n
        )
        for n in range(SOURCES)
    }
    started = time.monotonic()
    for round_no in range(ROUNDS):
        names = rng.sample(sorted(traces), rng.randint(1, 3))
        ingests = [_command(location, "ingest", str(traces[name])) for name in names]
        _run_with_kills(rng, location, ingests, maintenance=0.7, kill=0.5, wait_s=(0.2, 2.5))
        found = check(Warehouse(location))
        assert found.healthy, (round_no, [p.line() for p in found.problems])
        committed, rows = _state(location)
        for name, trace in traces.items():
            expected = ROWS_PER_SOURCE if str(trace) in committed else 0
            assert rows.get(name, 0) == expected, (round_no, name, rows, committed)
    assert time.monotonic() - started < 900
    ingest(Warehouse(location), [str(t) for t in traces.values()])
    committed, rows = _state(location)
    assert rows == {name: ROWS_PER_SOURCE for name in traces}
    assert check(Warehouse(location)).healthy


def _profile_keys(path) -> set[tuple]:
    """The record keys (rank, event_idx, ts) of a Kineto trace, from its JSON."""
    trace = json.loads(path.read_text())
    rank = trace["distributedInfo"]["rank"]
    return {
        (rank, index, float(event["ts"]))
        for index, event in enumerate(trace["traceEvents"])
        if event.get("ph") == "X"
    }


def test_profiler_traces_read_at_once_into_one_run_survive_kills_and_races(tmp_path):
    """Profiler traces of one run are read without the run's lock.  Ranks, and a grown
    copy of rank 0 that repeats its records, are ingested into one run beside optimize
    and vacuum and killed at random: every committed source's records are there, none
    twice, and nothing else."""
    rng = random.Random(SEED)
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    folder = tmp_path / "profiles"
    folder.mkdir()
    sources = {}
    for rank in range(4):
        sources[f"rank{rank}"] = folder / f"rank{rank}.pt.trace.json"
        write_timeline_trace(sources[f"rank{rank}"], TimelineShape(), rank=rank, world_size=4)
    first = json.loads(sources["rank0"].read_text())
    late = [{**e, "ts": e["ts"] + 10**7} for e in first["traceEvents"] if "ts" in e]
    sources["rank0-grown"] = folder / "rank0-grown.pt.trace.json"
    sources["rank0-grown"].write_text(
        json.dumps({**first, "traceEvents": first["traceEvents"] + late})
    )
    keys = {name: _profile_keys(path) for name, path in sources.items()}
    counts = (
        "SELECT count(*), count(DISTINCT (rank, event_idx, ts_us)) FROM timeline_events "
        "WHERE run_id IN (SELECT run_id FROM runs WHERE run_name = $name)"
    )
    committed_sources = (
        "SELECT DISTINCT source_path FROM warehouse_commits WHERE operation = 'ingest' "
        "AND run_id IN (SELECT run_id FROM runs WHERE run_name = $name)"
    )
    for round_no in range(PROFILER_ROUNDS):
        run = f"profiles{round_no}"  # a new run: rank 0 and its grown copy race each round
        names = ["rank0", "rank0-grown", *rng.sample([f"rank{r}" for r in range(1, 4)], 2)]
        ingests = [_command(location, "ingest", str(sources[n]), "--run-name", run) for n in names]
        _run_with_kills(rng, location, ingests, maintenance=0.5, kill=0.2, wait_s=(0.3, 1.5))
        assert check(Warehouse(location)).healthy, round_no
        con = connect(Warehouse(location))
        (rows, distinct), committed = (
            con.execute(counts, {"name": run}).fetchall()[0],
            {
                Path(path).name.split(".")[0]
                for (path,) in con.execute(committed_sources, {"name": run}).fetchall()
            },
        )
        con.close()
        expected = set().union(*(keys[name] for name in committed))
        assert rows == distinct == len(expected), (round_no, committed, rows, distinct)
