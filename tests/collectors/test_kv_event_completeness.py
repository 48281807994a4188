"""The completeness check of KV-event streams (kv_event_completeness.sql) on event streams
written by hand: residency past the pool's capacity (from pool_snapshots, from vLLM's
vllm:cache_config_info in engine_metrics, or given), a medium that publishes no removals,
and batches lost (sequence numbers missed, within each epoch, and unreadable messages).
The events are vLLM's wire format as the JSONL reader takes it (BlockStored /
BlockRemoved maps); every expected row is worked out in the comments."""

from __future__ import annotations

import json
import shutil

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import DATA

COMPLETENESS = (
    "SELECT worker, medium, epochs, span_s, stored, removed, clears, max_resident_blocks, "
    "capacity_blocks, capacity_source, over_capacity_t_s, missed_batches, "
    "unreadable_batches, complete FROM kv_event_completeness({})"
)
CAPACITY_CAVEAT = (
    "over capacity: 4 blocks resident at once, the pool holds 3 (pool_snapshots): "
    "removals went unpublished"
)
REMOVAL_CAVEAT = (
    "no removals: 6 blocks stored and none removed in 700.0 s, so its residency only grows"
)
LOSS_AFTER_200 = "batches lost after t = 200.0 s: 1 missed, 0 unreadable"


def stored(hashes: list[str], medium: str | None, size: int = 16) -> dict:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": None,
        "token_ids": list(range(size * len(hashes))),
        "block_size": size,
        "lora_id": None,
        "medium": medium,
    }


def removed(hashes: list[str], medium: str | None) -> dict:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def _write(path, lines: list[dict]):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


# The header's worked example: worker gpu0, GPU blocks and an offloaded CPU tier that
# publishes stores only (as LMCache's host tier does); batch 3 never arrived.
WORKED = [
    {"seq": 0, "ts": 1000.0, "events": [stored(["a", "b"], "GPU"), stored(["a", "b"], "CPU")]},
    {
        "seq": 1,
        "ts": 1100.0,
        "events": [stored(["c"], "GPU"), removed(["a"], "GPU"), stored(["c"], "CPU")],
    },
    {"seq": 2, "ts": 1200.0, "events": [stored(["d"], "GPU")]},
    {"seq": 4, "ts": 1400.0, "events": [stored(["e"], "GPU"), stored(["d", "e"], "CPU")]},
    {"seq": 5, "ts": 1700.0, "events": [removed(["b"], "GPU"), stored(["f"], "CPU")]},
]


def _pool_file(tmp_path, worker: str, capacity_tokens: int) -> str:
    """Three pool ticks of ``worker`` as the serving family reads them."""
    rows = [
        {
            "worker_id": worker,
            "worker_role": "decode",
            "t": float(t),
            "capacity_tokens": capacity_tokens,
            "held_tokens": 0,
            "available_tokens": capacity_tokens // 2,
            "session_count": 0,
        }
        for t in range(3)
    ]
    return _write(tmp_path / "exp_pool_timeseries.jsonl", rows)


@pytest.fixture
def worked(warehouse, tmp_path):
    # pool_snapshots: 48 tokens in blocks of 16 -> a GPU capacity of 3 blocks
    ingest(warehouse, [_write(tmp_path / "gpu0.jsonl", WORKED), _pool_file(tmp_path, "gpu0", 48)])
    return warehouse


def test_the_worked_example_finds_all_three_faults(worked):
    rows = connect(worked).sql(COMPLETENESS.format("")).fetchall()
    # GPU resident after each event: +a +b = 2, +c = 3, -a = 2, +d = 3, +e = 4 (t 400,
    # over 3), -b = 3.  CPU: a, b, c, d, e, f stored, never removed: 6.  The worker's
    # span is 700 s; seq 3 is missing from 0..5.
    assert rows == [
        ("gpu0", "CPU", 1, 700.0, 6, 0, 0, 6, None, None, None, 1, 0, False),
        ("gpu0", "GPU", 1, 700.0, 5, 2, 0, 4, 3, "pool_snapshots", 400.0, 1, 0, False),
    ]
    caveats = connect(worked).sql("SELECT caveat FROM kv_event_completeness()").fetchall()
    assert caveats == [
        (f"{REMOVAL_CAVEAT}; lost batches: 1 missed, 0 unreadable",),
        (f"{CAPACITY_CAVEAT}; lost batches: 1 missed, 0 unreadable",),
    ]


def test_residency_rows_carry_the_caveats_that_affect_them(worked):
    con = connect(worked)
    checked = con.sql(
        "SELECT medium, t_s, resident_blocks, caveat FROM kv_pool_residency_checked(100.0)"
    ).fetchall()
    # the medium's caveats on each of its rows; the lost batch (after the batch of t 200)
    # on the buckets that end after 200 s: t_s 200, 400 and 700
    assert checked == [
        ("CPU", 0.0, 2, REMOVAL_CAVEAT),
        ("CPU", 100.0, 3, REMOVAL_CAVEAT),
        ("CPU", 400.0, 5, f"{REMOVAL_CAVEAT}; {LOSS_AFTER_200}"),
        ("CPU", 700.0, 6, f"{REMOVAL_CAVEAT}; {LOSS_AFTER_200}"),
        ("GPU", 0.0, 2, CAPACITY_CAVEAT),
        ("GPU", 100.0, 2, CAPACITY_CAVEAT),
        ("GPU", 200.0, 3, f"{CAPACITY_CAVEAT}; {LOSS_AFTER_200}"),
        ("GPU", 400.0, 4, f"{CAPACITY_CAVEAT}; {LOSS_AFTER_200}"),
        ("GPU", 700.0, 3, f"{CAPACITY_CAVEAT}; {LOSS_AFTER_200}"),
    ]
    # kv_pool_residency itself is unchanged: the checked rows are its rows plus a caveat
    plain = con.sql("FROM kv_pool_residency(100.0)").fetchall()
    assert con.sql(
        "SELECT * EXCLUDE (caveat) FROM kv_pool_residency_checked(100.0)"
    ).fetchall() == (plain)


def test_a_given_capacity_applies_to_every_medium_and_a_short_run_is_not_judged(
    warehouse, tmp_path
):
    ingest(warehouse, [_write(tmp_path / "gpu0.jsonl", WORKED)])
    rows = (
        connect(warehouse)
        .sql(
            "SELECT medium, capacity_blocks, capacity_source, over_capacity_t_s, caveat "
            "FROM kv_event_completeness(capacity_blocks := 5, long_run_s := 800)"
        )
        .fetchall()
    )
    # capacity 5: the CPU tier's 6th block (f, at t 700) is over it, the GPU's 4 is not;
    # the 700 s recording is shorter than 800 s, so no-removals is not claimed
    assert rows == [
        (
            "CPU",
            5,
            "argument",
            700.0,
            "over capacity: 6 blocks resident at once, the pool holds 5 (argument): "
            "removals went unpublished; lost batches: 1 missed, 0 unreadable",
        ),
        ("GPU", 5, "argument", None, "lost batches: 1 missed, 0 unreadable"),
    ]


def test_the_engines_own_num_gpu_blocks_is_the_gpu_capacity(warehouse, tmp_path):
    # vLLM 0.33.0's exposition (tests/data/engine_metrics) says num_gpu_blocks="2048" in
    # vllm:cache_config_info; a saved scrape named gpu0-<time>.prom is worker gpu0's
    scrape = tmp_path / "scrapes" / "gpu0-20261129T041500Z.prom"
    scrape.parent.mkdir()
    shutil.copy(DATA / "engine_metrics" / "vllm-0.33.0.prom", scrape)
    blocks = [f"h{i}" for i in range(2049)]
    events = [
        {"seq": 0, "ts": 10.0, "events": [stored(blocks[:2048], "GPU")]},
        {"seq": 1, "ts": 11.0, "events": [stored(blocks[2048:], "GPU")]},  # 2,049 > 2,048
    ]
    gpu1 = [{"seq": 0, "ts": 10.5, "events": [stored(["x", "y"], None)]}]
    ingest(
        warehouse,
        [
            str(scrape),
            _write(tmp_path / "gpu0.jsonl", events),
            _write(tmp_path / "gpu1.jsonl", gpu1),
        ],
    )
    rows = (
        connect(warehouse)
        .sql(
            "SELECT worker, medium, max_resident_blocks, capacity_blocks, capacity_source, "
            "over_capacity_t_s, complete FROM kv_event_completeness()"
        )
        .fetchall()
    )
    # gpu0 and gpu1 are separate runs (one file each): t_s counts from each run's first
    # batch, so gpu0 goes over at 11 - 10 = 1 s; gpu1 has no capacity anywhere
    assert rows == [
        ("gpu0", "GPU", 2049, 2048, "engine_metrics", 1.0, False),
        ("gpu1", None, 2, None, None, None, True),
    ]


def test_sglangs_max_total_num_tokens_over_the_block_size_is_the_capacity(warehouse, tmp_path):
    # SGLang 0.5.23's exposition (tests/data/engine_metrics) says
    # sglang:max_total_num_tokens 87; in pages of 1 token that is 87 blocks, and events
    # with no medium are the device pool's: 88 stored blocks are over it at the second
    # batch (t 1 s)
    scrape = tmp_path / "scrapes" / "sg0-20261129T041500Z.prom"
    scrape.parent.mkdir()
    shutil.copy(DATA / "engine_metrics" / "sglang-0.5.23.prom", scrape)
    events = [
        {"seq": 0, "ts": 20.0, "events": [stored([f"p{i}" for i in range(87)], None, size=1)]},
        {"seq": 1, "ts": 21.0, "events": [stored(["p87"], None, size=1)]},
    ]
    ingest(warehouse, [str(scrape), _write(tmp_path / "sg0.jsonl", events)])
    rows = (
        connect(warehouse)
        .sql(
            "SELECT worker, max_resident_blocks, capacity_blocks, capacity_source, "
            "over_capacity_t_s FROM kv_event_completeness()"
        )
        .fetchall()
    )
    assert rows == [("sg0", 88, 87, "engine_metrics", 1.0)]


def test_losses_count_within_each_epoch_and_end_with_it(warehouse, tmp_path):
    # epoch 0: batches 0 (t 0) and 2 (t 1): batch 1 missed, the count unsure from t 0 to
    # the restart at t 5.  The engine restarts (its numbers go back from 2 to 1 with other
    # content): epoch 1 hears batches 1 (t 5) and 2 (t 6), so its batch 0 was missed,
    # the count unsure from the epoch's start to the end.
    lines = [
        {"seq": 0, "ts": 0.0, "events": [stored(["a"], "GPU")]},
        {"seq": 2, "ts": 1.0, "events": [stored(["b"], "GPU")]},
        {"seq": 1, "ts": 5.0, "events": [stored(["c"], "GPU")]},
        {"seq": 2, "ts": 6.0, "events": [removed(["c"], "GPU")]},
    ]
    ingest(warehouse, [_write(tmp_path / "gpu0.jsonl", lines)])
    con = connect(warehouse)
    assert con.sql(
        "SELECT epochs, missed_batches, unreadable_batches, complete FROM kv_event_completeness()"
    ).fetchall() == [(2, 2, 0, False)]
    first = "batches lost after t = 0.0 s: 1 missed, 0 unreadable"
    second = "batches lost after t = 5.0 s: 1 missed, 0 unreadable"
    assert con.sql(
        "SELECT t_s, caveat FROM kv_pool_residency_checked(1.0) ORDER BY t_s"
    ).fetchall() == [(0.0, first), (1.0, first), (5.0, second), (6.0, second)]


def test_a_collectors_gap_and_error_rows_are_lost_batches(warehouse):
    # rows as `collect kv-events` writes them: batch 0 (t 0); a gap row for 1 and 2;
    # batch 3 (t 3); an error row for batch 4 (unreadable, no time); batch 5 (t 5); and
    # an error row without a number.  Missed: 1 and 2; unreadable: 4 and the unnumbered
    # one.  The losses start after t 0 (the hole), after t 3 (batch 4) and at the
    # epoch's start (the unnumbered error).
    run_id = "collect-gpu0"
    base = {"run_id": run_id, "worker": "gpu0", "epoch": 0}
    rows = [
        {**base, "seq": 0, "ts": 100.0, "position": 0, "block_idx": 0, "kind": "stored",
         "medium": "GPU", "block_hash": "a", "block_size": 16},
        {**base, "seq": 1, "kind": "gap", "detail": "sequence numbers 1 to 2 missed"},
        {**base, "seq": 3, "ts": 103.0, "position": 0, "block_idx": 0, "kind": "stored",
         "medium": "GPU", "block_hash": "b", "block_size": 16},
        {**base, "seq": 4, "kind": "error", "detail": "not a KV-event batch: truncated"},
        {**base, "seq": 5, "ts": 105.0, "position": 0, "block_idx": 0, "kind": "removed",
         "medium": "GPU", "block_hash": "a"},
        {**base, "seq": None, "kind": "error", "detail": "a message of 3 frames"},
    ]  # fmt: skip
    with warehouse.transaction(run_id, operation="collect") as commit:
        warehouse.write_rows(commit, "kv_events", rows)
    con = connect(warehouse)
    assert con.sql(
        "SELECT missed_batches, unreadable_batches, caveat FROM kv_event_completeness()"
    ).fetchall() == [(2, 2, "lost batches: 2 missed, 2 unreadable")]
    assert con.sql(
        "SELECT missed, unreadable, from_t_s, until_t_s FROM _kv_event_losses ORDER BY ALL"
    ).fetchall() == [(0, 1, 0.0, None), (0, 1, 3.0, None), (2, 0, 0.0, None)]


def test_a_complete_stream_has_no_caveat(warehouse, tmp_path):
    # stores and removals that balance, consecutive numbers, within a capacity of 2
    lines = [
        {"seq": 0, "ts": 0.0, "events": [stored(["a", "b"], "GPU")]},
        {"seq": 1, "ts": 900.0, "events": [removed(["a"], "GPU"), stored(["c"], "GPU")]},
    ]
    ingest(warehouse, [_write(tmp_path / "gpu0.jsonl", lines)])
    con = connect(warehouse)
    assert con.sql(
        "SELECT max_resident_blocks, complete, caveat FROM kv_event_completeness(2)"
    ).fetchall() == [(2, True, None)]
    assert con.sql("SELECT caveat FROM kv_pool_residency_checked(60.0, 2)").fetchall() == [
        (None,),
        (None,),
    ]
