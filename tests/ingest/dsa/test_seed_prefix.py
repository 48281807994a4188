"""Ingest follows the seed's prefix definitions and checks what the source says of them."""

from __future__ import annotations

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import seed_record, write_jsonl


def _checks(warehouse) -> dict:
    rows = (
        connect(warehouse)
        .execute("SELECT statistic, rows_checked, rows_disagreeing FROM ingest_checks")
        .fetchall()
    )
    return {name: (checked, wrong) for name, checked, wrong in rows}


def _prefix(hit: bool, blocks: int, ratio: float) -> dict:
    return {
        "prefix": {
            "prefix_cache_hit": hit,
            "prefix_cached_blocks": blocks,
            "prefix_key": "k",
            "intersection_ratio": ratio,
        }
    }


def test_a_miss_is_intersected_with_its_own_key_region_and_checked(warehouse, tmp_path):
    # block size 16; positions in blocks 0, 1, 20 and 30; a 2-block region holds 2 of 4
    positions = [3, 20, 330, 490]
    good = seed_record(0, 0, 500, positions, **_prefix(False, 2, 0.5))
    wrong = seed_record(1, 0, 500, positions, **_prefix(False, 2, 0.0))  # the old rule
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", [good, wrong]))])
    con = connect(warehouse)
    rows = con.execute(
        "SELECT request_id, prefix_cache_hit, intersection_blocks, "
        "intersection_ratio, cached_prefix_ratio FROM dsa_prefix(16) "
        "ORDER BY request_id"
    ).fetchall()
    assert rows == [(0, False, [0, 1], 0.5, None), (1, False, [0, 1], 0.5, None)]
    assert con.execute(
        "SELECT prefix_region_tokens, prefix_cached_tokens FROM requests ORDER BY request_id"
    ).fetchall() == [(32, 0), (32, 0)]
    # every source value was checked; the one computed by another rule is flagged
    assert _checks(warehouse)["src_intersection_ratio"] == (2, 1)


def test_the_region_counts_a_partly_covered_block_but_the_cached_variant_does_not(
    warehouse, tmp_path
):
    # a hit of 2 blocks of 16 = 32 cached tokens; at block size 24 the region covers
    # ceil(32 / 24) = 2 blocks, of which 1 is fully cached
    record = seed_record(0, 0, 500, [3, 30, 60, 400], **_prefix(True, 2, 0.5))
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", [record]))])
    row = (
        connect(warehouse)
        .execute(
            "SELECT prefix_blocks, intersection_blocks, intersection_ratio, "
            "cached_prefix_blocks, cached_prefix_ratio FROM dsa_prefix(24)"
        )
        .fetchone()
    )
    assert row == (2, [0, 1], 0.5, 1, 0.25)


def test_offsets_off_by_one_are_flagged_for_every_offset_statistic(warehouse, tmp_path):
    # offsets of [0, 40, 60, 99] at seq_len 100: 99, 59, 39, 0; median 49 (linear)
    positions = [0, 40, 60, 99]
    records = [
        seed_record(r, 0, 99, positions, offset_min=1, offset_p50=50.0, offset_max=100)
        for r in range(3)
    ]
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))])
    checks = _checks(warehouse)
    for name in ("src_offset_min", "src_offset_p50", "src_offset_max"):
        assert checks[name] == (3, 3), name


def test_a_median_by_another_method_is_not_flagged(warehouse, tmp_path):
    positions = [0, 40, 60, 99]  # middle offsets 39 and 59: lower 39, higher 59, linear 49
    records = [
        seed_record(r, 0, 99, positions, offset_p50=p50) for r, p50 in enumerate((39, 59, 49.0, 49))
    ]
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))])
    assert "src_offset_p50" not in _checks(warehouse)


def test_prefix_hot_blocks_keep_the_top_20_blocks_of_a_request(warehouse, tmp_path):
    positions = list(range(0, 30 * 16, 16))  # one position in each of blocks 0..29
    record = seed_record(0, 0, 600, positions, **_prefix(False, 30, 1.0))
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", [record]))])
    hot = connect(warehouse).execute("SELECT prefix_hot_blocks FROM dsa_summary").fetchone()[0]
    assert [b["block_id"] for b in hot[0]] == list(range(20))


def _region_rows(warehouse, block_size: int) -> list[tuple]:
    return (
        connect(warehouse)
        .execute(
            "SELECT step_idx, prefix_region_tokens, prefix_blocks, intersection_blocks "
            f"FROM dsa_prefix({block_size}) ORDER BY step_idx"
        )
        .fetchall()
    )


def test_a_short_prompt_s_region_stops_at_the_prompt_at_any_block_size(warehouse, tmp_path):
    # The seed states 16 blocks of 16 (its key covers 256 tokens) whatever the prompt.  A
    # miss with a 200-token prompt (first decode position 200) has a region of
    # min(200, 256) = 200 tokens: at block size 4 that is blocks 0..49, and the decode
    # token at position 201 (block 50) is not prefix.
    records = [
        seed_record(0, 0, 200, [0, 5, 199, 200], **_prefix(False, 16, 0.0)),
        seed_record(0, 0, 201, [0, 5, 199, 201], **_prefix(False, 16, 0.0)),
    ]
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))])
    assert _region_rows(warehouse, 4) == [
        (200, 200, 50, [0, 1, 49]),
        (201, 200, 50, [0, 1, 49]),
    ]
    # at the stored 16 a partly covered block counts: ceil(200 / 16) = 13 blocks, 0..12
    assert _region_rows(warehouse, 16)[1] == (201, 200, 13, [0, 12])
    config = connect(warehouse).execute("SELECT collector_config FROM runs").fetchone()[0]
    assert '"prefix_key_tokens": 256' in config


def test_a_given_prefix_key_length_bounds_the_region(warehouse, tmp_path):
    records = [seed_record(0, 0, 200, [0, 5, 130, 199], **_prefix(False, 16, 0.0))]
    path = write_jsonl(tmp_path / "t.jsonl", records)
    ingest(warehouse, [str(path)], prefix_key_tokens=128)
    assert _region_rows(warehouse, 4) == [(200, 128, 32, [0, 1])]


def test_a_miss_stating_no_blocks_has_the_key_region_of_the_run_s_hits(warehouse, tmp_path):
    # The seed writes prefix_cached_blocks = 0 on a miss and ceil(N / B) on a hit.  The
    # miss (request 0, first in the file) hashed the same first min(prompt, N) tokens the
    # hit (request 1) found: its region is N = 2 x 16 = 32 tokens too, not 0.
    records = [
        seed_record(0, 0, 500, [3, 20, 330], **_prefix(False, 0, 0.0)),
        seed_record(1, 0, 500, [3, 20, 330], **_prefix(True, 2, 2 / 3)),
        seed_record(2, 0, 20, [3, 19], **_prefix(False, 0, 0.0)),  # a 20-token prompt
    ]
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))])
    con = connect(warehouse)
    assert con.execute(
        "SELECT request_id, prefix_region_tokens, prefix_cached_tokens FROM requests "
        "ORDER BY request_id"
    ).fetchall() == [(0, 32, 0), (1, 32, 32), (2, 20, 0)]
    assert con.execute(
        "SELECT request_id, intersection_blocks FROM dsa_prefix(16) ORDER BY request_id"
    ).fetchall() == [(0, [0, 1]), (1, [0, 1]), (2, [0, 1])]
    config = con.execute("SELECT collector_config FROM runs").fetchone()[0]
    assert '"prefix_key_tokens": 32' in config


def test_a_dump_with_no_stated_region_takes_the_seed_s_default_key(warehouse, tmp_path):
    records = [seed_record(0, 0, 500, [3, 300], **_prefix(False, 0, 0.0))]
    ingest(warehouse, [str(write_jsonl(tmp_path / "t.jsonl", records))])
    con = connect(warehouse)
    assert con.execute("SELECT prefix_region_tokens FROM requests").fetchall() == [(256,)]
    assert con.execute("SELECT intersection_blocks FROM dsa_prefix(16)").fetchall() == [([0],)]


def test_the_first_stated_region_is_found_in_plain_and_gzip_files(tmp_path):
    import gzip

    from kvtrace.ingest.readers._dsa_key_region import stated_key_tokens

    lines = [
        '{"prefix": {"prefix_cached_blocks": 0}}',
        'not a record "prefix_cached_blocks": 7',  # left to the reader's quarantine
        '{"block_size_tokens": 32, "prefix": {"prefix_cached_blocks" :  3}}',
        '{"prefix": {"prefix_cached_blocks": 9}}',
    ]
    plain = tmp_path / "t.jsonl"
    plain.write_text("\n".join(lines))
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert stated_key_tokens(plain, 16) == stated_key_tokens(packed, 16) == 96
    nested = tmp_path / "n.jsonl"
    nested.write_text('{"block": {"block_size": 8}, "prefix": {"prefix_cached_blocks": 5}}')
    assert stated_key_tokens(nested, 16) == 40
    plain.write_text("\n".join(lines[:2]))
    assert stated_key_tokens(plain, 16) is None
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert stated_key_tokens(tmp_path / "empty.jsonl", 16) is None
