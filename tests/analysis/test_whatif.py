"""The tier what-if: hand-worked bytes and times, the live LruTiers, the command line."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.analysis.kv_access.curves import capacity_for, run_curves
from kvtrace.analysis.kv_access.plan import StreamSpec
from kvtrace.analysis.kv_access.whatif import Tier, WhatIfSpec, whatif
from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.collectors.kv_tiers import LruTiers
from kvtrace.errors import InputError
from kvtrace.ingest import ingest
from tests.conftest import write_jsonl
from tests.sql.test_dsa_access import EXAMPLE


@pytest.fixture
def example(warehouse, tmp_path):
    ingest(warehouse, [str(write_jsonl(tmp_path / "example.jsonl", EXAMPLE))])
    return warehouse


def test_bytes_and_fetch_time_per_step_of_the_worked_example(example):
    # LRU stream 0, 1, 2 | 0, 2 with distances -, -, -, 2, 1: an HBM of 2 blocks serves
    # the second access of block 2 only.  A block item carries 16 tokens x 2 layers x
    # 1000 bytes = 32,000 bytes.  Step 100 reads 3 items remotely, step 101 one from
    # each tier.
    result = whatif(
        connect(example),
        WhatIfSpec(
            block_sizes=(16,),
            bytes_per_token=1000,
            tiers=(Tier.parse("hbm:2:1:0"), Tier.parse("remote:inf:1:10")),
        ),
    )
    tiers = {row["tier"]: row for row in result.tiers.to_pylist()}
    assert tiers["hbm"]["accesses_served"] == 1 and tiers["remote"]["accesses_served"] == 4
    assert tiers["hbm"]["hit_rate"] == 0.2
    assert (tiers["hbm"]["bytes_per_step_p50"], tiers["hbm"]["bytes_per_step_p95"]) == (
        16_000,
        30_400,
    )  # of [0, 32000]
    assert (tiers["remote"]["bytes_per_step_p50"], tiers["remote"]["bytes_per_step_p95"]) == (
        64_000,
        92_800,
    )  # of [96000, 32000]
    # 1 GB/s moves 1,000 bytes a microsecond: remote 10 + 96 and 10 + 32 µs, HBM 0 and 32
    assert tiers["remote"]["fetch_us_p50"] == pytest.approx(74.0)
    run = result.runs.to_pylist()[0]
    assert (run["steps"], run["accesses"], run["first_touches"]) == (2, 5, 3)
    assert run["fetch_us_p50"] == pytest.approx(74.0)  # the slower tier of each step
    assert run["fetch_us_p95"] == pytest.approx(42 + 0.95 * (106 - 42))
    assert run["hbm_blocks_for_90pct"] is None  # 3 of 5 accesses are first touches


def test_the_capacity_for_a_hit_rate_is_exact_under_lru(example):
    curve = next(run_curves(connect(example), StreamSpec(16), "lru"))
    assert capacity_for(curve, 0.2) == 2  # distance 1 needs 2 blocks
    assert capacity_for(curve, 0.4) == 3  # distance 2 needs 3
    assert capacity_for(curve, 0.5) is None


def _traced_with_lru_tiers(warehouse, granularity: str):
    rng = np.random.default_rng(5)
    hbm, local = (6, 8) if granularity == "block" else (20, 20)
    tiers = LruTiers(hbm_blocks=hbm, local_blocks=local, bytes_per_token=1, granularity=granularity)
    tracer = DsaTracer(
        warehouse, run_name="live", dataset="unit", block_sizes=(16,), tier_model=tiers
    )
    for request in (4, 1, 9):
        tracer.begin_request(request, list(range(200)))
    for step in range(12):
        batch = {4: 200 + step, 1: 200 + step, 9: 200 + step} if step < 8 else {1: 200 + step}
        with tracer.step(batch):
            for layer in range(3):
                picks = np.stack(
                    [
                        np.sort(rng.choice(np.arange(100, 200), size=10, replace=False))
                        for _ in batch
                    ]
                )
                tracer.record_topk(layer, picks)
    for request in (4, 1, 9):
        tracer.end_request(request)
    tracer.close()
    return whatif(
        connect(warehouse),
        WhatIfSpec(
            block_sizes=(16,),
            granularity=granularity,
            scope="run",
            tiers=(
                Tier.parse(f"hbm:{hbm}:100:0"),
                Tier.parse(f"local:{local}:10:1"),
                Tier.parse("remote:inf:1:10"),
            ),
        ),
    )


def test_live_lru_tiers_serve_exactly_what_the_whatif_serves_per_layer(warehouse):
    result = _traced_with_lru_tiers(warehouse, "layer_block")
    live = (
        connect(warehouse)
        .execute(
            "SELECT sum(hbm_blocks), sum(local_pool_blocks), sum(remote_pool_blocks) FROM dsa_steps"
        )
        .fetchone()
    )
    served = tuple(row["accesses_served"] for row in result.tiers.to_pylist())
    assert served == live
    assert min(served) > 0


def test_live_lru_tiers_serve_exactly_what_the_whatif_serves_per_block(warehouse):
    result = _traced_with_lru_tiers(warehouse, "block")
    # each (step, request, block) was served from one tier; rows repeat it per layer
    live = (
        connect(warehouse)
        .execute("""
        WITH blocks AS (
            SELECT batch_step, request_id, unnest(selected_pos) // 16 AS block,
                   local_pool_hit_blocks AS local, remote_pool_hit_blocks AS remote
            FROM dsa_steps)
        SELECT count(DISTINCT (batch_step, request_id, block)) FILTER (
                   WHERE NOT coalesce(list_contains(local, block), false)
                     AND NOT coalesce(list_contains(remote, block), false)),
               count(DISTINCT (batch_step, request_id, block)) FILTER (
                   WHERE list_contains(local, block)),
               count(DISTINCT (batch_step, request_id, block)) FILTER (
                   WHERE list_contains(remote, block))
        FROM blocks""")
        .fetchone()
    )
    served = tuple(row["accesses_served"] for row in result.tiers.to_pylist())
    assert served == live and min(served) > 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hbm:4096:3000", "is not NAME:CAPACITY:GBPS:LATENCY_US"),
        ("hbm:lots:3000:0", "capacity must be a whole number or inf"),
        ("hbm:0:3000:0", "capacity must be at least 1 block"),
        ("hbm:8:0:0", "bandwidth must be positive"),
    ],
)
def test_tier_strings_that_do_not_parse_are_one_sentence(text, message):
    with pytest.raises(InputError, match=message):
        Tier.parse(text)


def test_the_command_prints_both_tables_and_writes_csv(example, cli, tmp_path):
    status, out, err = cli(
        "-w",
        example.location,
        "whatif",
        "--block-size",
        "16",
        "--tier",
        "hbm:2:1:0",
        "--tier",
        "remote:inf:1:10",
    )
    assert status == 0, err
    assert "accesses_served" in out and "hbm_blocks_for_90pct" in out
    target = tmp_path / "whatif.csv"
    status, _, err = cli(
        "-w",
        example.location,
        "whatif",
        "--block-size",
        "16",
        "--bytes-per-token",
        "1000",
        "--tier",
        "hbm:2:1:0",
        "--tier",
        "remote:inf:1:10",
        "--format",
        "csv",
        "-o",
        str(target),
    )
    assert status == 0, err
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert [(r["tier"], r["accesses_served"], r["steps"]) for r in rows] == [
        ("hbm", "1", "2"),
        ("remote", "4", "2"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "mru"], "'mru' is not one of"),
        (["--tier", "hbm:0:1:0", "--tier", "remote:inf:1:1"], "capacity must be at least 1 block"),
        (["--tier", "hbm:x"], "is not NAME:CAPACITY:GBPS:LATENCY_US"),
        (["--tier", "hbm:8:1:0"], "the last tier (hbm) must be unbounded"),
        (["--run", "no-such-run"], "no DSA rows for run 'no-such-run'"),
        (["--block-size", "0"], "block size must be a positive number"),
    ],
)
def test_bad_arguments_get_one_sentence_and_a_non_zero_exit(example, cli, args, message):
    status, out, err = cli("-w", example.location, "whatif", *args)
    assert status != 0
    assert message in err
    assert "Traceback" not in err + out


def test_a_warehouse_without_dsa_rows_says_so(warehouse, cli):
    status, _, err = cli("-w", warehouse.location, "whatif")
    assert status == 1 and err.strip() == "Error: no DSA rows to simulate"
