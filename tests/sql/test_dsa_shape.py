"""Selection shape at any block size: the views against their definitions, worked out
here in plain Python over the generated selections."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.errors import QueryError
from kvtrace.ingest import ingest
from kvtrace.sql.query import run_query
from kvtrace.warehouse import Warehouse
from tests import cache_models
from tests.conftest import (
    linear_quantile,
    local_only,
    seed_record,
    warehouse_at,
    write_jsonl,
)

# Stored at 16 (seed_record's block size): re-binned at 1 and 5, read as stored, merged at
# 32 (a multiple: from the stored blocks), and one block larger than every sequence.
BLOCK_SIZES = [1, 5, 16, 32, 1000]
RECENT = (4, 16, 64)
MEANS = ("block_span", "density", "entropy", "gini", "recent_4", "recent_16", "recent_64")


def _positions(rng, step: int) -> list[int]:
    """A few positions of the sequence 0 .. step, crowded near its start and its end so
    that blocks hold ties and come back from step to step."""
    near_end = rng.integers(max(0, step - 24), step + 1, size=int(rng.integers(0, 6)))
    near_start = rng.integers(0, min(step + 1, 40), size=int(rng.integers(1, 6)))
    return sorted({int(p) for p in (*near_end, *near_start)})


def _trace(rng) -> list[dict]:
    """Three requests of 3 layers; each skips one decode step (steps 0, 1, 3, ... after its
    prompt), and request 0's first row selects one position, the current token."""
    records = []
    for request in range(3):
        prompt = int(rng.integers(20, 90))
        steps = [prompt + s for s in (0, 1, 3, 4, 5, 6)[: int(rng.integers(4, 7))]]
        for step in steps:
            for layer in range(3):
                one = request == 0 and layer == 0 and step == steps[0]
                positions = [step] if one else _positions(rng, step)
                records.append(seed_record(request, layer, step, positions))
    return records


@pytest.fixture(scope="module", params=[3, 11])
def trace(request, tmp_path_factory):
    """A generated trace in a warehouse of its own, shared by the module's tests."""
    folder = tmp_path_factory.mktemp(f"shape-{request.param}")
    warehouse = Warehouse(warehouse_at(folder / "wh"), create=True)
    records = _trace(np.random.default_rng(request.param))
    ingest(warehouse, [str(write_jsonl(folder / "shape.jsonl", records))])
    return connect(warehouse), records


def _rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


# -- the definitions, one row or one stream at a time --------------------------------------


def _shape(positions: list[int], seq_len: int, bs: int) -> dict:
    counts = Counter(p // bs for p in positions)
    blocks, n, k = sorted(counts), len(positions), len(counts)
    current = (seq_len - 1) // bs
    p = [c / n for c in counts.values()]
    entropy = 0.0 if k == 1 else -sum(x * math.log(x) for x in p) / math.log(k)
    gini = sum(abs(a - b) for a in counts.values() for b in counts.values()) / (2 * k * n)
    return {
        "current_block": current,
        "unique_blocks": k,
        "block_span": blocks[-1] - blocks[0] + 1,
        "density": k / (blocks[-1] - blocks[0] + 1),
        "entropy": entropy,
        "gini": gini,
        **{f"recent_{r}": sum(b > current - r for b in blocks) / k for r in RECENT},
        "block_distance_mean": sum(current - b for b in blocks) / k,
    }


def _touches(records, bs: int) -> dict[tuple, list[tuple[int, int | None]]]:
    """Per (request, layer, block): its (step, steps since the previous selection)."""
    last: dict[tuple, int] = {}
    touches: dict[tuple, list] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r["request_id"], r["layer_id"], r["step_idx"])):
        for block in sorted({p // bs for p in r["selected_token_pos"]}):
            key = (r["request_id"], r["layer_id"], block)
            before = last.get(key)
            touches[key].append((r["step_idx"], None if before is None else r["step_idx"] - before))
            last[key] = r["step_idx"]
    return touches


def _stream(records, bs: int, granularity: str = "block") -> dict[int, list]:
    """Each request's accesses: per step, the union of its layers' blocks ascending
    (block) or each layer's blocks (layer_block)."""
    steps: dict[tuple, dict] = defaultdict(dict)
    for r in records:
        blocks = {p // bs for p in r["selected_token_pos"]}
        steps[(r["request_id"], r["step_idx"])][r["layer_id"]] = blocks
    streams: dict[int, list] = defaultdict(list)
    for (request, _), layers in sorted(steps.items()):
        if granularity == "block":
            streams[request] += [(request, b) for b in sorted(set().union(*layers.values()))]
        else:
            streams[request] += [(request, n, b) for n in sorted(layers) for b in sorted(layers[n])]
    return streams


def _knee(streams: list[list], share: float) -> tuple[int, int, int | None, int | None]:
    """accesses, ceiling hits, and the smallest LRU capacity reaching share x ceiling with
    its hits, by simulating every capacity."""
    accesses = sum(len(s) for s in streams)
    ceiling = accesses - sum(len(set(s)) for s in streams)
    for capacity in range(1, max(len(set(s)) for s in streams) + 1):
        hits = sum(sum(cache_models.lru_hits(s, capacity)) for s in streams)
        if ceiling and hits >= share * ceiling:
            return accesses, ceiling, capacity, hits
    return accesses, ceiling, None, None


def _close(got: dict, expected: dict) -> None:
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


# -- worked examples of the headers ---------------------------------------------------------


def test_the_shape_of_the_headers_example_row(warehouse, tmp_path):
    records = [seed_record(0, 0, 69, [1, 2, 3, 17, 18, 60])]
    ingest(warehouse, [str(write_jsonl(tmp_path / "row.jsonl", records))])
    con = connect(warehouse)
    (row,) = _rows(
        con,
        "SELECT selected, current_block, unique_blocks, block_span, density, round(entropy, 4), "
        "round(gini, 4), round(recent_4, 4), recent_16, recent_64, "
        "round(block_distance_mean, 4) FROM dsa_shape(16)",
    )
    assert row == (6, 4, 3, 4, 0.75, 0.9206, 0.2222, 0.6667, 1.0, 1.0, 2.6667)


def test_reuse_and_one_shot_of_the_headers_example(warehouse, tmp_path):
    records = [
        seed_record(0, 0, 100, [3, 20]),
        seed_record(0, 0, 101, [5]),
        seed_record(0, 0, 103, [7, 40]),
    ]
    ingest(warehouse, [str(write_jsonl(tmp_path / "reuse.jsonl", records))])
    con = connect(warehouse)
    assert _rows(
        con,
        "SELECT block_id, step_idx, reuse_steps, touches FROM dsa_reuse_steps(16) "
        "ORDER BY block_id, step_idx",
    ) == [(0, 100, None, 3), (0, 101, 1, 3), (0, 103, 2, 3), (1, 100, None, 1), (2, 103, None, 1)]
    (summary,) = _rows(
        con,
        "SELECT touches, first_touches, first_touch_share, reuse_steps_mean, reuse_steps_p50, "
        "round(reuse_steps_p90, 9) FROM dsa_reuse_steps_by_layer(16)",
    )
    assert summary == (5, 3, 0.6, 1.5, 1.5, 1.9)
    assert _rows(con, "SELECT blocks, one_shot_blocks, one_shot_share FROM dsa_one_shot(16)") == [
        (3, 2, 2 / 3)
    ]


def test_the_knee_of_the_headers_example(warehouse, tmp_path):
    # dsa_access's example: block accesses 0, 1, 2, 0, 2; stack distances 2 and 1
    records = [
        seed_record(0, 0, 100, [3, 20]),
        seed_record(0, 1, 100, [21, 40]),
        seed_record(0, 0, 101, [5]),
        seed_record(0, 1, 101, [41]),
    ]
    ingest(warehouse, [str(write_jsonl(tmp_path / "knee.jsonl", records))])
    con = connect(warehouse)
    sql = (
        "SELECT accesses, ceiling_hits, ceiling_hit_rate, knee_capacity_blocks, knee_hit_rate "
        "FROM dsa_lru_knee(16{})"
    )
    assert _rows(con, sql.format("")) == [(5, 2, 0.4, 3, 0.4)]
    assert _rows(con, sql.format(", share := 0.5")) == [(5, 2, 0.4, 2, 0.2)]


# -- generated traces against brute force ---------------------------------------------------


@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_every_rows_shape_follows_the_definitions(trace, bs):
    con, records = trace
    got = {
        (r[0], r[1], r[2]): dict(zip(r[3], r[4:], strict=True))
        for r in _rows(
            con,
            "SELECT request_id, layer_id, step_idx, ['selected', 'current_block', "
            "'unique_blocks', 'block_span', 'density', 'entropy', 'gini', 'recent_4', "
            "'recent_16', 'recent_64', 'block_distance_mean'], selected, current_block, "
            "unique_blocks, block_span, density, entropy, gini, recent_4, recent_16, recent_64, "
            f"block_distance_mean FROM dsa_shape({bs})",
        )
    }
    assert len(got) == len(records)
    for r in records:
        row = got[(r["request_id"], r["layer_id"], r["step_idx"])]
        positions = r["selected_token_pos"]
        assert row["selected"] == len(positions)
        _close(row, _shape(positions, r["seq_len_current"], bs))


def test_one_block_has_zero_entropy_and_gini_and_ties_have_the_most_entropy(trace):
    con, _ = trace
    assert _rows(
        con,
        "SELECT DISTINCT unique_blocks, block_span, entropy, gini, recent_4, block_distance_mean "
        "FROM dsa_shape(1000)",
    ) == [(1, 1, 0.0, 0.0, 1.0, 0.0)]
    for entropy, gini in _rows(  # equal counts in every touched block
        con, "SELECT entropy, gini FROM dsa_shape(1) WHERE unique_blocks > 1"
    ):
        assert (entropy, gini) == (pytest.approx(1.0), 0.0)


@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_reuse_distances_count_decode_steps_since_the_last_selection(trace, bs):
    con, records = trace
    touches = _touches(records, bs)
    expected = sorted(
        (request, layer, block, step, distance, len(steps))
        for (request, layer, block), steps in touches.items()
        for step, distance in steps
    )
    got = _rows(
        con,
        "SELECT request_id, layer_id, block_id, step_idx, reuse_steps, touches "
        f"FROM dsa_reuse_steps({bs}) ORDER BY ALL",
    )
    assert got == expected
    assert any(d is not None and d > 1 for *_, d, _ in got)  # across the skipped step


@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_reuse_summary_and_one_shot_share_per_layer(trace, bs):
    con, records = trace
    touches = _touches(records, bs)
    for layer, first, share, mean, p50, p90 in _rows(
        con,
        "SELECT layer_id, first_touches, first_touch_share, reuse_steps_mean, reuse_steps_p50, "
        f"reuse_steps_p90 FROM dsa_reuse_steps_by_layer({bs})",
    ):
        mine = [d for key, steps in touches.items() if key[1] == layer for _, d in steps]
        distances = [d for d in mine if d is not None]
        assert first == len(mine) - len(distances)
        assert share == pytest.approx(first / len(mine))
        if distances:
            assert mean == pytest.approx(sum(distances) / len(distances))
            assert p50 == pytest.approx(linear_quantile(distances, 0.5))
            assert p90 == pytest.approx(linear_quantile(distances, 0.9))
        else:
            assert (mean, p50, p90) == (None, None, None)
    one_shot = _rows(
        con,
        "SELECT request_id, layer_id, blocks, one_shot_blocks, one_shot_share "
        f"FROM dsa_one_shot({bs}) ORDER BY ALL",
    )
    expected = []
    for request, layer in sorted({(k[0], k[1]) for k in touches}):
        counts = [len(s) for k, s in touches.items() if k[:2] == (request, layer)]
        once = sum(c == 1 for c in counts)
        expected.append((request, layer, len(counts), once, once / len(counts)))
    assert one_shot == expected


@pytest.mark.parametrize("share", [0.9, 0.5, 1.0])
@pytest.mark.parametrize(
    ("granularity", "scope"), [("block", "request"), ("layer_block", "request"), ("block", "run")]
)
def test_the_knee_is_the_smallest_lru_cache_reaching_the_share_of_its_ceiling(
    trace, share, granularity, scope
):
    con, records = trace
    bs = 5
    streams = _stream(records, bs, granularity)
    if scope == "run":  # ingested: requests one after another, one cache
        streams = {0: [item for r in sorted(streams) for item in streams[r]]}
    accesses, ceiling, knee, hits = _knee(list(streams.values()), share)
    (row,) = _rows(
        con,
        "SELECT accesses, ceiling_hits, ceiling_hit_rate, knee_capacity_blocks, knee_hit_rate "
        f"FROM dsa_lru_knee({bs}, share := {share}, granularity := '{granularity}', "
        f"scope := '{scope}')",
    )
    assert row == (accesses, ceiling, ceiling / accesses, knee, hits / accesses)
    (curve,) = _rows(  # the same hits as the hit curve at that capacity
        con,
        f"SELECT hits FROM dsa_hit_curve({bs}, granularity := '{granularity}', "
        f"scope := '{scope}', capacities := [{knee}]) WHERE capacity_blocks = {knee}",
    )
    assert curve == (hits,)


def test_a_run_that_never_selects_a_block_twice_has_no_knee(warehouse, tmp_path):
    records = [seed_record(0, 0, 40, [1]), seed_record(0, 0, 41, [20])]
    ingest(warehouse, [str(write_jsonl(tmp_path / "once.jsonl", records))])
    assert _rows(
        connect(warehouse),
        "SELECT accesses, ceiling_hits, ceiling_hit_rate, knee_capacity_blocks, knee_hit_rate "
        "FROM dsa_lru_knee(16)",
    ) == [(2, 0, 0.0, None, None)]


@pytest.mark.parametrize("bs", [1, 16, 32])
def test_the_layer_summary_gathers_the_rows_reuse_one_shot_and_knee(trace, bs):
    con, records = trace
    touches = _touches(records, bs)
    _, _, knee, _ = _knee(list(_stream(records, bs).values()), 0.9)
    columns = [
        "rows",
        *(f"{name}_mean" for name in MEANS),
        "block_distance_mean",
        "reuse_steps_p50",
        "one_shot_share",
        "lru_knee_blocks",
    ]
    got = _rows(con, f"SELECT layer_id, {', '.join(columns)} FROM dsa_shape_layers({bs})")
    assert sorted(r[0] for r in got) == [0, 1, 2]
    for layer, *values in got:
        mine = [r for r in records if r["layer_id"] == layer]
        shapes = [_shape(r["selected_token_pos"], r["seq_len_current"], bs) for r in mine]
        counts = [len(s) for k, s in touches.items() if k[1] == layer]
        distances = [d for k, s in touches.items() if k[1] == layer for _, d in s if d is not None]
        expected = {
            "rows": len(mine),
            **{f"{name}_mean": sum(s[name] for s in shapes) / len(shapes) for name in MEANS},
            "block_distance_mean": sum(s["block_distance_mean"] for s in shapes) / len(shapes),
            "reuse_steps_p50": linear_quantile(distances, 0.5) if distances else None,
            "one_shot_share": sum(c == 1 for c in counts) / len(counts),
            "lru_knee_blocks": knee,
        }
        _close(dict(zip(columns, values, strict=True)), expected)


@local_only  # a plain duckdb shell reads an object store only through httpfs
def test_a_plain_duckdb_shell_gives_the_same_shape_and_reuse(warehouse, tmp_path):
    import duckdb

    from kvtrace.sql.catalog import shell_init_sql

    records = _trace(np.random.default_rng(5))
    ingest(warehouse, [str(write_jsonl(tmp_path / "shell.jsonl", records))])
    shell = duckdb.connect()
    shell.execute(shell_init_sql(warehouse))
    for query in (
        "SELECT * FROM dsa_shape(5) ORDER BY ALL",
        "SELECT * FROM dsa_reuse_steps(5) ORDER BY ALL",
        "SELECT * FROM dsa_one_shot(32) ORDER BY ALL",
    ):
        assert shell.execute(query).fetchall() == _rows(connect(warehouse), query)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("FROM dsa_lru_knee(16, share := 0)", "the knee share must be in (0, 1], got 0"),
        ("FROM dsa_lru_knee(16, share := 1.5)", "the knee share must be in (0, 1], got 1.5"),
        ("FROM dsa_shape(0)", "the block size must be a positive number of tokens, got 0"),
        ("FROM dsa_reuse_steps(-4)", "the block size must be a positive number of tokens"),
    ],
)
def test_bad_arguments_are_one_clear_error(trace, sql, message):
    con, _ = trace
    with pytest.raises(QueryError, match=re.escape(message)):
        run_query(con, sql)
