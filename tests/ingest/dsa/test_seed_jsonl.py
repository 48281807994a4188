"""Ingest of the tracer's flat (seed) layout."""

from __future__ import annotations

import gzip
import shutil

import numpy as np

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import read_records, seed_record, write_jsonl


def test_rows_land_sorted_with_scores_permuted_alongside(warehouse, tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            seed_record(0, 0, 40, [7, 3, 40, 0], scores_topk=[0.7, 0.3, 4.0, 0.01]),
            seed_record(0, 1, 40, [39, 1]),
        ],
    )
    report = ingest(warehouse, [str(path)])
    assert report.rows == 2 and report.rejected == 0
    rows = (
        connect(warehouse)
        .execute(
            "SELECT layer_id, selected_pos, scores, seq_len, score_max FROM dsa_steps "
            "ORDER BY layer_id"
        )
        .fetchall()
    )
    assert rows[0][1] == [0, 3, 7, 40]
    assert np.allclose(rows[0][2], [0.01, 0.3, 0.7, 4.0])
    assert rows[0][3] == 41 and abs(rows[0][4] - 4.0) < 1e-6
    assert rows[1][1] == [1, 39] and rows[1][2] is None


def test_a_run_folder_with_shards_and_sidecars_becomes_one_run(warehouse, synthetic_trace):
    first = synthetic_trace("ruler_177", requests=2, steps=2, layers=3)
    second = first.with_name("trace_steps_2_4.jsonl")
    records = read_records(first)
    for record in records:
        record["request_id"] += 2
    write_jsonl(second, records)
    (first.parent / "summary.json").write_text('{"config": {"kv_block_size_tokens": 64}}')
    report = ingest(warehouse, [str(first.parent.parent)])
    assert [f.status for f in report.files] == ["ingested", "ingested"]
    con = connect(warehouse)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 4
    assert con.execute("SELECT DISTINCT run_name FROM runs").fetchone()[0] == "ruler_177"


def test_gzip_and_glob_sources_are_read(warehouse, synthetic_trace, tmp_path):
    plain = synthetic_trace("gz", requests=1, steps=2, layers=2)
    packed = tmp_path / "packed" / "trace.jsonl.gz"
    packed.parent.mkdir()
    with open(plain, "rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    report = ingest(warehouse, [str(tmp_path / "packed" / "*.jsonl.gz")])
    assert report.rows == len(read_records(plain))


def test_requests_take_prompt_length_and_prefix_from_records(warehouse, tmp_path):
    prefix = {"prefix_cache_hit": True, "prefix_cached_blocks": 4, "prefix_key": "abc"}
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            seed_record(5, 0, 101, [0, 1], prefix=prefix),
            seed_record(5, 0, 100, [0, 1], prefix=prefix),
        ],
    )
    ingest(warehouse, [str(path)])
    row = (
        connect(warehouse)
        .execute(
            "SELECT request_id, prompt_tokens, prefix_key, prefix_cache_hit, prefix_cached_tokens "
            "FROM requests"
        )
        .fetchone()
    )
    assert row == (5, 100, "abc", True, 64)


def test_hbm_hit_list_equal_to_selected_blocks_is_not_stored(warehouse, tmp_path):
    def fetch(hits):
        tier = {"hit_blocks": hits, "bytes_read": 10, "read_ops": 1, "latency_us": 5.0}
        empty = {"hit_blocks": [], "bytes_read": 0, "read_ops": 0, "latency_us": None}
        return {"hbm": tier, "local_pool": empty, "remote_pool": empty}

    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            seed_record(0, 0, 40, [1, 20, 33], kv_fetch=fetch([2, 0, 1])),
            seed_record(0, 1, 40, [1, 20, 33], kv_fetch=fetch([0, 1])),
        ],
    )
    ingest(warehouse, [str(path)])
    rows = (
        connect(warehouse)
        .execute(
            "SELECT hbm_blocks, hbm_hit_blocks, step_latency_us, local_pool_hit_blocks "
            "FROM dsa_steps ORDER BY layer_id"
        )
        .fetchall()
    )
    assert rows == [(3, None, 5.0, None), (2, [0, 1], 5.0, None)]
