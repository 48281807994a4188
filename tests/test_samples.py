"""`kvtrace samples`: the shipped sample traces, as their sources have them, ingested whole."""

from __future__ import annotations

import json

from tests.conftest import DATA, warehouse_at
from tests.test_cli import kvtrace


def test_the_samples_are_their_sources_and_every_one_ingests(tmp_path):
    folder = tmp_path / "samples"
    made = kvtrace("samples", str(folder))
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[-1] == f"Next: kvtrace ingest {folder}"
    mooncake = (DATA / "mooncake_conversation_trace.jsonl").read_text().splitlines(keepends=True)
    assert (folder / "mooncake_conversation_1k.jsonl").read_text() == "".join(mooncake[:1000])
    events = (DATA / "kv_events" / "mooncake_lru600_events.jsonl").read_text().splitlines(True)
    assert (folder / "kv_events_mooncake_lru600.jsonl").read_text() == "".join(events[:200])
    kineto = folder / "kineto_sampled_rank0.json.gz"
    assert kineto.read_bytes() == (DATA / "kineto_sampled_rank0.json.gz").read_bytes()
    assert "Apache-2.0" in (folder / "README.md").read_text()

    ingested = kvtrace("-w", warehouse_at(tmp_path / "wh"), "ingest", str(folder))
    assert ingested.returncode == 0, ingested.stderr
    pool = (folder / "exp_sample_pool_timeseries.jsonl").read_text().count("\n")
    metrics = (folder / "exp_sample_metrics.jsonl").read_text().count("\n")
    # one kv_events row per (event, block hash); an AllBlocksCleared event is one row
    blocks = sum(
        len(event[1]) if event[0] != "AllBlocksCleared" else 1
        for line in events[:200]
        for event in json.loads(line)["events"]
    )
    assert "workload 1 file (1,000 rows)" in ingested.stdout
    assert f"pool 1 file ({pool:,} rows)" in ingested.stdout
    assert f"requests 1 file ({metrics:,} rows)" in ingested.stdout
    assert "skipped 1 file(s) that are not traces kvtrace reads: README.md" in ingested.stdout
    assert f"kv-events 1 file ({blocks:,} rows)" in ingested.stdout
