"""The registry of trace families: every list of families derives from it, and every
warehouse table belongs to one family (or to the collectors or the commit's bookkeeping),
so a family cannot be half added."""

from __future__ import annotations

import pytest

from kvtrace.errors import InputError
from kvtrace.ingest._sources import SourceFile
from kvtrace.ingest.families import BUILT_IN, family_named, kind_help, kind_names, unknown
from kvtrace.ingest.family import Family
from kvtrace.ingest.probe import Probe
from kvtrace.warehouse.schema import TABLE_NAMES

BOOKKEEPING_TABLES = {"runs", "quarantine", "ingest_checks"}  # written by every commit
COLLECTOR_TABLES = {"needle_spans", "dsa_prefill"}  # written only by the live DSA tracer
# tables two families fill: a profiler's own counter events, and the named counters a
# program writes beside its trace; a profiler's events, from Kineto and from Nsight Systems
SHARED_TABLES = {
    "timeline_events": ["timeline", "nsys"],
    "timeline_counters": ["timeline", "counters"],
}


def test_every_table_is_claimed_by_exactly_one_family_or_is_bookkeeping():
    claims: dict[str, list[str]] = {}
    for family in BUILT_IN:
        for table in family.tables:
            claims.setdefault(table, []).append(family.name)
    assert set(claims) <= set(TABLE_NAMES), "a family names a table the schema lacks"
    assert {table: names for table, names in claims.items() if len(names) > 1} == SHARED_TABLES
    unclaimed = set(TABLE_NAMES) - set(claims) - BOOKKEEPING_TABLES - COLLECTOR_TABLES
    assert unclaimed == set(), "a table no family fills: name it in its family's tables"
    assert not set(claims) & (BOOKKEEPING_TABLES | COLLECTOR_TABLES)


def test_each_family_is_a_family_with_a_unique_name_and_a_phrase():
    assert all(isinstance(family, Family) for family in BUILT_IN)
    assert len(set(kind_names())) == len(BUILT_IN)
    assert all(family.reads and family.reads[0] != " " for family in BUILT_IN)


def test_the_kind_help_lists_every_family():
    assert kind_help() == (
        "Read every file as timeline, nsys, benchmark, kv-events, metrics, pool, requests, eval, "
        "numerics, counters, vidur-profile, workload, dsa or summary (default: told by each "
        "file's content)."
    )


def test_a_kind_kvtrace_does_not_have_is_one_sentence():
    assert family_named("dsa").name == "dsa"
    with pytest.raises(InputError, match=r"^--kind takes timeline, .* or summary, got 'nope'$"):
        family_named("nope")


def test_the_sentence_for_an_unknown_file_lists_what_each_family_reads(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"something": 1}')
    message = str(unknown(Probe.of(SourceFile(path))))
    assert message == (
        f"{path} is not a trace kvtrace knows: kvtrace reads Kineto profiler traces "
        "(traceEvents), Nsight Systems SQLite exports (nsys export --type sqlite), "
        "benchmark results (vLLM, SGLang bench_serving, AIPerf, GenAI-Perf, "
        "Vidur), KV-cache event batches (BlockStored, BlockRemoved), Prometheus scrapes "
        "(# HELP / # TYPE text, or JSONL of t, worker, body), pool snapshots "
        "(worker_id, held_tokens), request metrics (execution_mode, latency_s), RULER "
        "predictions (pred, outputs), merge numerics (chunks, lse_max_diff, out_max_diff), "
        "named counters (ts_us, name, value), "
        "Vidur operator profiles (time_stats.<operator>.<stat> CSV), "
        "arrival traces (Mooncake, Bailian, Dynamo agentic JSONL; Azure, BurstGPT, "
        "Splitwise CSV), DSA records (selected_token_pos) and serving run summaries "
        "(*_summary.json); --kind forces one"
    )
