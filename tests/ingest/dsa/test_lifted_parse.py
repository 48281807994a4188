"""The position lists read by the compiled pass: the same table and quarantine as Arrow's."""

from __future__ import annotations

import json

import pytest

from kvtrace.ingest._lines import Chunk, _parse_lifted, parse_chunk
from kvtrace.ingest.readers.dsa import _INT_LISTS
from kvtrace.ingest.readers.dsa_formats import SCHEMAS
from kvtrace.synthetic import write_seed_trace
from tests.conftest import chunk_of

UNUSUAL = [
    b'{"event":"dsa_topk","request_id":1,"selected_token_pos":[1,2.0]}',
    b'{"event":"dsa_topk","request_id":1,"selected_token_pos":[1,null,3]}',
    b'{"event":"dsa_topk","request_id":1,"selected_token_pos":null}',
    b'{"event":"dsa_topk","request_id":1,"selected_token_pos":[1,2',
    b'{"event":"dsa_topk","request_id":1,"selected_token_pos":[99999999999999999999]}',
    b'{"event":"dsa_topk","request_id":"one","selected_token_pos":[1]}',
    b'{"event":"dsa_topk","request_id":1,"selected_token_pos":[1],"selected_token_pos":[2]}',
]


def _both(chunk: Chunk, fmt: str):
    plain = parse_chunk(chunk, SCHEMAS[fmt])
    lifted = parse_chunk(chunk, SCHEMAS[fmt], _INT_LISTS[fmt])
    return plain, lifted


@pytest.fixture(scope="module")
def seed_lines(tmp_path_factory) -> list[bytes]:
    path = tmp_path_factory.mktemp("seed") / "trace.jsonl"
    write_seed_trace(path, requests=2, steps=3, layers=4, topk=64, prompt_tokens=300)
    return path.read_bytes().splitlines()


def test_plain_records_give_arrows_table(seed_lines):
    chunk = chunk_of(seed_lines)
    assert _parse_lifted(chunk, SCHEMAS["seed"], _INT_LISTS["seed"]) is not None
    plain, lifted = _both(chunk, "seed")
    assert lifted.table.equals(plain.table)
    assert lifted.table.column("selected_token_pos").to_pylist() == [
        json.loads(line)["selected_token_pos"] for line in seed_lines
    ]
    assert lifted.bad == plain.bad == []


@pytest.mark.parametrize("unusual", UNUSUAL)
def test_a_chunk_with_an_unusual_line_gives_the_same_rows_and_quarantine(seed_lines, unusual):
    lines = [*seed_lines[:5], unusual, *seed_lines[5:9]]
    plain, lifted = _both(chunk_of(lines), "seed")
    assert lifted.table.equals(plain.table)
    assert list(lifted.line_numbers) == list(plain.line_numbers)
    assert lifted.bad == plain.bad


def test_the_nested_layout_lifts_both_of_its_lists():
    lines = [
        b'{"request_id":"a","seq_len_current":9,"selected_token_pos":[3,1],"topk_indices":[2]}',
        b'{"request_id":"b","seq_len_current":9,"topk_indices":[5,4]}',
        b'{"request_id":"c","seq_len_current":9,"selected_token_pos":[]}',
    ]
    plain, lifted = _both(chunk_of(lines), "nested")
    assert lifted.table.equals(plain.table)
    assert lifted.table.column("topk_indices").to_pylist() == [[2], [5, 4], None]
