"""Damage with commits on top, round after round: each round ingests sources (now and
then compacted, and the compacted files' inputs vacuumed), damages one log entry or data
file at random, commits more on top where the warehouse lets it, and repairs.  Every
committed source is then in the warehouse exactly once or named to ingest again, nothing
else is there, and once the named ones are ingested again every committed source is
there exactly once."""

from __future__ import annotations

import os
import random

from kvtrace import connect
from kvtrace.errors import KvtraceError
from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.ops.maintenance import optimize, vacuum
from kvtrace.warehouse.ops.repair import repair
from tests.conftest import warehouse_at

# nine rounds of this seed damage entries (cut, empty, garbled) and files (missing, cut),
# with compaction and vacuum between; more with KVTRACE_REPAIR_ROUNDS, for a longer soak
ROUNDS = int(os.environ.get("KVTRACE_REPAIR_ROUNDS", 9))
SEED = 20261127
SOURCES = 10
ROWS_PER_SOURCE = 2 * 2 * 2  # requests x steps x layers
LOGS = ["_commits", "_commits", "dsa_steps", "runs", "requests"]
ENTRY_DAMAGE = {
    "empty": lambda raw: b"",
    "cut": lambda raw: raw[: len(raw) // 2],
    "garbled": lambda raw: raw[:30] + b"\x00garbage\xff" + raw[45:],
}


def _rows_per_source(location: str) -> dict[str, int]:
    """dsa_steps rows per run name (a source's run is named after it); no record twice."""
    con = connect(Warehouse(location))
    try:
        doubled = con.execute(
            "SELECT count(*) FROM (SELECT run_id, request_id, step_idx, layer_id, block_size "
            "FROM dsa_steps GROUP BY ALL HAVING count(*) > 1)"
        ).fetchone()[0]
        assert doubled == 0
        return dict(
            con.execute(
                "SELECT r.run_name, count(*) FROM dsa_steps JOIN runs r USING (run_id) GROUP BY 1"
            ).fetchall()
        )
    finally:
        con.close()


def _ingest(location: str, trace: str) -> bool:
    """Ingest ``trace``; whether the warehouse holds it now (a damaged one may refuse)."""
    try:
        report = ingest(Warehouse(location), [trace])
    except KvtraceError:
        return False
    return report.files[0].status in ("ingested", "already ingested")


def _damage_an_entry(rng: random.Random, location: str) -> str:
    storage = Warehouse(location).storage
    log = rng.choice(LOGS)
    entries = sorted(n for n in storage.listdir(f"{log}/_delta_log") if n.endswith(".json"))
    entry = f"{log}/_delta_log/{rng.choice(entries)}"
    how = rng.choice(sorted(ENTRY_DAMAGE))
    storage.write_atomic(entry, ENTRY_DAMAGE[how](storage.read_bytes(entry) or b""))
    return f"{how} {entry}"


def _damage_a_file(rng: random.Random, location: str) -> str:
    warehouse = Warehouse(location)
    path = rng.choice(warehouse.files(rng.choice(["dsa_steps", "runs", "requests"])))
    data = bytearray(warehouse.storage.read_bytes(path) or b"")
    how = rng.choice(["missing", "cut", "garbled inside"])
    if how == "missing":
        warehouse.storage.remove(path)
    elif how == "cut":
        warehouse.storage.write_atomic(path, bytes(data[: len(data) // 2]))
    else:  # every page: a compacted file has no checksums to catch a few bytes
        end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
        data[4:end] = rng.randbytes(end - 4)
        warehouse.storage.write_atomic(path, bytes(data))
    return f"{how} {path}"


def test_repair_under_later_commits_names_every_source_it_takes_back(tmp_path, synthetic_trace):
    rng = random.Random(SEED)
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    traces = {
        f"src{n}": str(synthetic_trace(run_name=f"src{n}", requests=2, steps=2, layers=2, seed=n))
        for n in range(SOURCES)
    }
    committed: set[str] = set()
    for round_no in range(ROUNDS):
        committed |= {n for n in rng.sample(sorted(traces), 2) if _ingest(location, traces[n])}
        if rng.random() < 0.3:
            optimize(Warehouse(location))
        if rng.random() < 0.3:  # the files compacted ones were made from go
            vacuum(Warehouse(location), retain_hours=0, force=True)
        damage = (_damage_an_entry if rng.random() < 0.6 else _damage_a_file)(rng, location)
        committed |= {n for n in rng.sample(sorted(traces), 2) if _ingest(location, traces[n])}
        report = repair(Warehouse(location), deep=True)
        where = (round_no, damage, report.done)
        assert report.after.healthy, (*where, [p.line() for p in report.after.problems])
        listed = {name for name, trace in traces.items() if trace in report.sources}
        rows = _rows_per_source(location)
        for name in traces:
            expected = ROWS_PER_SOURCE if name in committed - listed else 0
            assert rows.get(name, 0) == expected, (*where, name, rows, committed, listed)
        committed -= listed
        committed |= {name for name in listed if _ingest(location, traces[name])}
        assert committed >= listed, where
        rows = _rows_per_source(location)
        assert rows == dict.fromkeys(sorted(committed), ROWS_PER_SOURCE), (*where, rows)
