"""The DSA views against plain numpy over the same JSONL, at two block sizes."""

from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction

import numpy as np
import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import linear_quantile, local_only, read_records


@pytest.fixture
def loaded(warehouse, synthetic_trace):
    trace = synthetic_trace("views", requests=4, steps=3, layers=5, topk=256, prompt_tokens=900)
    ingest(warehouse, [str(trace)])
    return connect(warehouse), read_records(trace)


def _key(record):
    return record["request_id"], record["step_idx"], record["layer_id"]


@pytest.mark.parametrize("block_size", [16, 128])
def test_dsa_blocks_matches_numpy(loaded, block_size):
    con, records = loaded
    rows = con.execute(
        "SELECT request_id, step_idx, layer_id, unique_blocks, total_blocks_in_use, "
        "touched_block_ratio, tokens_per_block_mean, tokens_per_block_p50, "
        "tokens_per_block_p95 FROM dsa_blocks(?)",
        [block_size],
    ).fetchall()
    got = {row[:3]: row[3:] for row in rows}
    assert len(got) == len(records)
    for record in records:
        pos = np.array(record["selected_token_pos"])
        _, per_block = np.unique(pos // block_size, return_counts=True)
        total = int(np.ceil(record["seq_len_current"] / block_size))
        expected = (
            len(per_block),
            total,
            len(per_block) / total,
            per_block.mean(),
            linear_quantile(per_block, 0.5),
            linear_quantile(per_block, 0.95),
        )
        assert got[_key(record)] == pytest.approx(expected)


def test_dsa_offsets_matches_numpy(loaded):
    con, records = loaded
    rows = con.execute(
        "SELECT request_id, step_idx, layer_id, offset_min, offset_p50, "
        "offset_p95, offset_max, offset_mean, within_256, within_1024 "
        "FROM dsa_offsets"
    ).fetchall()
    got = {row[:3]: row[3:] for row in rows}
    for record in records:
        off = record["seq_len_current"] - 1 - np.array(record["selected_token_pos"])
        expected = (
            off.min(),
            linear_quantile(off, 0.5),
            linear_quantile(off, 0.95),
            off.max(),
            off.mean(),
            (off < 256).mean(),
            (off < 1024).mean(),
        )
        assert got[_key(record)] == pytest.approx(expected)


@pytest.mark.parametrize("block_size", [16, 128])
def test_dsa_prefix_matches_numpy(loaded, block_size):
    con, records = loaded
    rows = con.execute(
        "SELECT request_id, step_idx, layer_id, intersection_blocks, "
        "intersection_ratio FROM dsa_prefix(?)",
        [block_size],
    ).fetchall()
    got = {row[:3]: row[3:] for row in rows}
    hot = defaultdict(Counter)
    for record in records:
        prefix = record["prefix"]
        blocks = np.unique(np.array(record["selected_token_pos"]) // block_size)
        # the region (cached length on a hit, own key region on a miss) covers
        # ceil(tokens / block size) blocks, for every row
        region_tokens = prefix["prefix_cached_blocks"] * record["block_size_tokens"]
        inside = blocks[blocks < -(-region_tokens // block_size)]
        hot[record["request_id"]].update(inside.tolist())
        assert got[_key(record)][0] == inside.tolist()
        assert got[_key(record)][1] == pytest.approx(len(inside) / len(blocks))
    hot_rows = con.execute(
        "SELECT request_id, block_id, touch_count FROM dsa_prefix_hot_blocks(?) WHERE hot_rank = 1",
        [block_size],
    ).fetchall()
    for request_id, block_id, touches in hot_rows:
        top = max(hot[request_id].values())
        assert touches == top
        assert block_id == min(b for b, n in hot[request_id].items() if n == top)


SUMMARY_STATS = (
    "unique_blocks",
    "touched_block_ratio",
    "tokens_per_touched_block",
    "offsets",
    "prefix_intersection_ratio",
)


def _numpy_summary(records) -> dict[str, list[Fraction]]:
    """The observations behind each summary statistic, as exact fractions."""
    observed: dict[str, list[Fraction]] = {name: [] for name in SUMMARY_STATS}
    for record in records:
        pos = np.array(record["selected_token_pos"])
        size = record["block_size_tokens"]
        blocks, per_block = np.unique(pos // size, return_counts=True)
        observed["unique_blocks"].append(Fraction(len(blocks)))
        observed["touched_block_ratio"].append(
            Fraction(len(blocks), -(-record["seq_len_current"] // size))
        )
        observed["tokens_per_touched_block"].extend(Fraction(int(n)) for n in per_block)
        observed["offsets"].extend(Fraction(int(o)) for o in record["seq_len_current"] - 1 - pos)
        inside = int((blocks < record["prefix"]["prefix_cached_blocks"]).sum())
        observed["prefix_intersection_ratio"].append(Fraction(inside, len(blocks)))
    return observed


def _stats(values: list[Fraction]) -> dict[str, float]:
    floats = np.asarray([float(v) for v in values], dtype=np.float64)
    return {
        "count": len(values),
        "min": floats.min(),
        "p50": np.quantile(floats, 0.5),
        "p95": np.quantile(floats, 0.95),
        "max": floats.max(),
        "mean": float(sum(values) / len(values)),
    }


def test_dsa_summary_matches_numpy_over_all_positions_and_blocks(loaded):
    con, records = loaded
    row = con.execute(f"SELECT {', '.join(SUMMARY_STATS)} FROM dsa_summary").fetchone()
    observed = _numpy_summary(records)
    for name, got in zip(SUMMARY_STATS, row, strict=True):
        assert got == pytest.approx(_stats(observed[name])), name


def test_summary_json_matches_numpy_with_exact_means(loaded):
    """summary.json's statistics come from merged counts: the quantiles are numpy's and
    each mean is the exact mean of the observations, rounded once."""
    from kvtrace.analysis.summary import run_summary

    con, records = loaded
    summary = run_summary(con, "views")
    observed = _numpy_summary(records)
    assert summary["rows"] == len(records)
    for name in SUMMARY_STATS:
        expected = _stats(observed[name])
        assert summary[name]["mean"] == expected.pop("mean"), name  # bit for bit
        others = {k: v for k, v in summary[name].items() if k not in ("mean", "mean_per_row")}
        assert others == pytest.approx(expected, rel=1e-15), name
    # the pooled mean beside the mean of each row's own (selected / touched blocks)
    per_row = [
        Fraction(
            len(r["selected_token_pos"]),
            len(np.unique(np.array(r["selected_token_pos"]) // r["block_size_tokens"])),
        )
        for r in records
    ]
    assert summary["tokens_per_touched_block"]["mean_per_row"] == float(sum(per_row) / len(per_row))
    assert "pooled" in summary["counted_over"]["tokens_per_touched_block"]
    assert set(summary["counted_over"]) == set(SUMMARY_STATS)


def test_dsa_layer_profile_counts_every_layer(loaded):
    con, records = loaded
    rows = dict(con.execute("SELECT layer_id, rows FROM dsa_layer_profile").fetchall())
    assert rows == dict(Counter(r["layer_id"] for r in records))


@local_only  # a plain duckdb shell reads an object store only through httpfs
def test_shell_fallback_macros_agree_with_the_vectorised_functions(loaded, warehouse):
    from kvtrace.sql.catalog import shell_init_sql

    con, _ = loaded
    import duckdb

    shell = duckdb.connect()
    shell.execute(shell_init_sql(warehouse))
    queries = [
        "SELECT * FROM dsa_blocks(16) ORDER BY request_id, step_idx, layer_id",
        "SELECT * FROM dsa_offsets ORDER BY request_id, step_idx, layer_id",
        "SELECT * FROM dsa_prefix(32) ORDER BY request_id, step_idx, layer_id",
    ]
    for query in queries:
        fast, slow = con.execute(query).fetchall(), shell.execute(query).fetchall()
        assert len(fast) == len(slow)
        for fast_row, slow_row in zip(fast, slow, strict=True):
            for a, b in zip(fast_row, slow_row, strict=True):
                assert a == (b if isinstance(b, (list, str)) or b is None else pytest.approx(b))
