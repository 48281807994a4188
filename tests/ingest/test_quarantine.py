"""Bad lines go to the quarantine with file, line and reason; the rest is ingested."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kvtrace import connect
from kvtrace.ingest import _lines as lines_module
from kvtrace.ingest import ingest
from kvtrace.ingest._lines import LineTexts
from tests.conftest import seed_record, write_jsonl


def test_each_kind_of_bad_line_is_quarantined_and_good_lines_survive(warehouse, tmp_path):
    good = seed_record(0, 0, 9, [1, 2])
    lines = [
        good,  # 1
        json.dumps(seed_record(0, 1, 9, [1, 2]))[:40],  # 2 truncated by a crash
        {**seed_record(0, 2, 9, [1]), "request_id": "seven"},  # 3 wrong type
        seed_record(0, 3, 9, [1, 10]),  # 4 10 >= seq_len 10
        seed_record(0, 4, 9, [-1, 2]),  # 5 negative
        seed_record(0, 5, 9, [4, 2, 4]),  # 6 duplicate
        seed_record(0, 6, 9, [1, None]),  # 7 null inside
        {k: v for k, v in seed_record(0, 7, 9, [1]).items() if k != "layer_id"},  # 8
        "",  # 9 blank: ignored
        "[1, 2]",  # 10 not an object
        seed_record(0, 8, 9, [3, 9]),  # 11 fine
    ]
    path = write_jsonl(tmp_path / "crash.jsonl", lines)
    report = ingest(warehouse, [str(path)])
    assert report.rows == 2 and report.rejected == 8
    con = connect(warehouse)
    rejected = dict(con.execute("SELECT line_no, reason FROM quarantine").fetchall())
    assert sorted(rejected) == [2, 3, 4, 5, 6, 7, 8, 10]
    assert rejected[2].startswith("invalid JSON")
    assert rejected[3].startswith("wrong type")
    assert rejected[4] == rejected[5] == "position outside [0, seq_len)"
    assert rejected[6] == "duplicate positions in selected_token_pos"
    assert rejected[7] == "null inside selected_token_pos"
    assert rejected[8] == "missing field layer_id"
    assert rejected[10].startswith("expected a JSON object")
    raw = con.execute("SELECT raw FROM quarantine WHERE line_no = 6").fetchone()[0]
    assert json.loads(raw)["selected_token_pos"] == [4, 2, 4]
    layers = con.execute("SELECT list(layer_id ORDER BY layer_id) FROM dsa_steps").fetchone()
    assert layers[0] == [0, 8]


def test_precomputed_stats_that_disagree_are_reported_not_kept(warehouse, tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            seed_record(
                0, 0, 99, [0, 50, 99], unique_blocks=3, offset_min=0, offset_max=99, offset_p50=49
            ),
            seed_record(
                0, 1, 99, [0, 50, 99], unique_blocks=7, offset_min=0, offset_max=99, offset_p50=49.4
            ),
        ],
    )
    report = ingest(warehouse, [str(path)])
    disagreements = report.files[0].disagreements
    assert set(disagreements) == {"src_unique_blocks"}
    tally = disagreements["src_unique_blocks"]
    assert (tally.checked, tally.disagreeing, tally.first_line) == (2, 1, 2)
    assert (tally.source_value, tally.recomputed) == (7, 3)
    con = connect(warehouse)
    assert con.execute("SELECT DISTINCT unique_blocks FROM dsa_steps").fetchall() == [(3,)]
    check = con.execute("SELECT check_name, violations FROM dsa_quality").fetchall()
    assert check == [("source_stat_disagreement", 1)]


def test_line_texts_read_forward_a_chunk_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(lines_module, "CHUNK_BYTES", 64)  # several lines a chunk
    text = [f"line {n:03d} " + "x" * (n % 17) for n in range(1, 201)]
    for name, write in (("plain.txt", Path.write_bytes), ("packed.gz", _gzipped)):
        path = tmp_path / name
        write(path, ("\n".join(text) + "\n").encode())
        texts = LineTexts(path)
        assert [texts(n) for n in (3, 40, 41, 199, 200)] == [
            text[n - 1] for n in (3, 40, 41, 199, 200)
        ]
        assert texts(7) == text[6]  # an earlier line: read again from the start
        assert texts(201) == ""  # past the end


def test_csv_rows_rejected_in_different_chunks_keep_their_text(warehouse, tmp_path, monkeypatch):
    monkeypatch.setattr(lines_module, "CHUNK_BYTES", 128)
    rows = [f"2023-11-16 18:{m // 60:02d}:{m % 60:02d}.0000000,{100 + m},5" for m in range(60)]
    rows[10] = "2023-11-16 18:00:10.0000000,-4,5"  # negative
    rows[45] = "2023-11-16 18:00:45.0000000,12x,5"  # not a number
    path = tmp_path / "azure_mini.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    ingest(warehouse, [str(path)])
    found = connect(warehouse).execute("SELECT line_no, raw FROM quarantine ORDER BY 1")
    assert found.fetchall() == [(12, rows[10]), (47, rows[45])]


def _gzipped(path: Path, data: bytes) -> None:
    path.write_bytes(gzip.compress(data))
