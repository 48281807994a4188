"""Ingest of the tracer's earlier nested layout."""

from __future__ import annotations

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import warehouse_at, write_jsonl


def nested(
    request: str, layer: int, decode_step: int, position: int, positions: list[int], **extra
) -> dict:
    return {
        "request_id": request,
        "ts_us": 1000 * decode_step,
        "seq_idx": 0,
        "query_pos": position,
        "is_decode": True,
        "topk": 4,
        "layer_id": layer,
        "step_idx": decode_step,
        "seq_len_current": position,
        "stats": {
            "unique_token_pos_count": len(positions),
            "offset": {"min": 0, "max": position, "p50": 1, "p95": 2},
            "score": {"min": -1.0, "mean": 0.0, "max": 1.0},
        },
        "selected_token_pos": positions,
        "block": {
            "block_size": 16,
            "unique_blocks": 1,
            "tokens_per_touched_block": {"mean": 2.0, "p50": 2, "p95": 2},
        },
        **extra,
    }


def test_string_ids_become_dense_integers_and_positions_mean_start_pos(warehouse, tmp_path):
    path = write_jsonl(
        tmp_path / "old" / "trace.jsonl",
        [
            nested("req-b", 0, 1, 50, [50, 3]),
            nested("req-a", 0, 1, 60, [60, 59, 0]),
            nested("req-b", 0, 2, 51, [51, 50]),
            {**nested("req-a", 0, 0, 59, [1, 2]), "is_decode": False},
        ],
    )
    report = ingest(warehouse, [str(path)], dataset="longbench")
    assert report.rows == 3
    assert report.files[0].skipped == {"prefill record (is_decode=false)": 1}
    con = connect(warehouse)
    steps = con.execute(
        "SELECT request_id, step_idx, seq_len, topk, selected_pos, dataset "
        "FROM dsa_steps ORDER BY request_id, step_idx"
    ).fetchall()
    assert steps == [
        (0, 50, 51, 4, [3, 50], "longbench"),
        (0, 51, 52, 4, [50, 51], "longbench"),
        (1, 60, 61, 4, [0, 59, 60], "longbench"),
    ]
    keys = con.execute("SELECT request_id, request_key FROM requests ORDER BY 1").fetchall()
    assert keys == [(0, "req-b"), (1, "req-a")]


def test_a_later_file_of_the_same_run_keeps_earlier_request_ids(warehouse, tmp_path):
    first = write_jsonl(tmp_path / "run" / "a.jsonl", [nested("x", 0, 1, 9, [1])])
    second = write_jsonl(
        tmp_path / "run" / "b.jsonl", [nested("y", 0, 1, 9, [2]), nested("x", 0, 2, 10, [3])]
    )
    ingest(warehouse, [str(first)], run_name="r")
    ingest(warehouse, [str(second)], run_name="r")
    rows = (
        connect(warehouse)
        .execute(
            "SELECT request_key, list(DISTINCT request_id) FROM requests GROUP BY 1 ORDER BY 1"
        )
        .fetchall()
    )
    assert rows == [("x", [0]), ("y", [1])]


def test_files_of_one_run_ingested_at_once_never_share_a_request_id(tmp_path):
    import subprocess
    import sys
    import time

    from kvtrace.warehouse import Warehouse

    root = warehouse_at(tmp_path / "wh")
    Warehouse(root, create=True)
    paths = []
    for side in "ab":
        records = [nested(f"{side}{i}", 0, 1, 50 + i, [1, 2]) for i in range(30)]
        paths.append(write_jsonl(tmp_path / f"{side}.jsonl", records))
    script = (
        "import sys, time\n"
        "from kvtrace.ingest import ingest\n"
        "from kvtrace.warehouse import Warehouse\n"
        "time.sleep(max(0.0, float(sys.argv[3]) - time.time()))\n"
        "ingest(Warehouse(sys.argv[1]), [sys.argv[2]], run_name='shared')\n"
    )
    start = time.time() + 1.0
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(root), str(p), str(start)])
        for p in paths
    ]
    assert [p.wait() for p in procs] == [0, 0]
    rows = (
        connect(Warehouse(root)).execute("SELECT request_key, request_id FROM requests").fetchall()
    )
    assert len(rows) == 60 and len({rid for _, rid in rows}) == 60
