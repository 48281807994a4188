"""`RecordKeys` against the plain rule, row by row with Python sets: a row is dropped as
stored when the run holds its key, as repeated when the file gave it before, and a row
with a NULL key column is keyed by all of its columns, unless the column is nullable
(there NULL is a value of its own)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.ingest._record_keys import RecordKeys
from kvtrace.warehouse.schema.tables import TableSpec

SCHEMA = pa.schema([("run_id", pa.string()), ("rank", pa.int32()), ("event_idx", pa.int64()),
                    ("name", pa.string())])  # fmt: skip
STRICT = TableSpec("t", SCHEMA, record_key=("rank", "event_idx"))
NULLABLE_RANK = TableSpec(
    "t", SCHEMA, record_key=("rank", "event_idx"), record_key_nullable=("rank",)
)

row = st.tuples(
    st.one_of(st.none(), st.integers(0, 2)),
    st.one_of(st.none(), st.integers(-3, 40)),
    st.sampled_from(["a", "b"]),
)


def table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "run_id": ["r"] * len(rows),
            "rank": [r[0] for r in rows],
            "event_idx": [r[1] for r in rows],
            "name": [r[2] for r in rows],
        },
        schema=SCHEMA,
    )


def plain_rule(
    stored: list[tuple], batches: list[list[tuple]], spec: TableSpec = STRICT
) -> tuple[list[bool], int, int]:
    def key(r: tuple) -> tuple:
        if r[1] is None or (r[0] is None and not spec.record_key_nullable):
            return ("*", *r)
        return (r[0] is None, r[0], r[1])

    held, taken, keep, stored_hits, repeats = {key(r) for r in stored}, set(), [], 0, 0
    for batch in batches:
        for r in batch:
            k = key(r)
            if k in held:
                stored_hits += 1
                keep.append(False)
            elif k in taken:
                repeats += 1
                keep.append(False)
            else:
                taken.add(k)
                keep.append(True)
    return keep, stored_hits, repeats


def sifted(
    stored: list[tuple], batches: list[list[tuple]], spec: TableSpec = STRICT
) -> tuple[list[bool], int, int]:
    keys = RecordKeys(spec, table(stored))
    keep: list[bool] = []
    stored_hits = repeats = 0
    for batch in batches:
        mask, s, r = keys.sift(table(batch))
        keep += mask.tolist()
        stored_hits, repeats = stored_hits + s, repeats + r
    return keep, stored_hits, repeats


@settings(max_examples=300, deadline=None)
@given(
    st.lists(row, max_size=30),
    st.lists(st.lists(row, max_size=12), max_size=6),
    st.sampled_from([STRICT, NULLABLE_RANK]),
)
def test_any_rows_are_sifted_as_the_plain_rule_sifts_them(stored, batches, spec):
    assert sifted(stored, batches, spec) == plain_rule(stored, batches, spec)


@settings(max_examples=100, deadline=None)
@given(st.lists(row, max_size=30), st.one_of(st.none(), st.integers(0, 2)), st.integers(0, 60))
def test_a_file_in_key_order_is_sifted_as_the_plain_rule_sifts_it(stored, rank, length):
    """Increasing keys (a Kineto trace): the path that keeps no sets."""
    rows = [(rank, i, "a") for i in range(length)]
    batches = [rows[i : i + 7] for i in range(0, length, 7)]
    for spec in (STRICT, NULLABLE_RANK):
        assert sifted(stored, batches, spec) == plain_rule(stored, batches, spec)


def test_a_grown_file_keeps_only_its_new_rows():
    stored = [(0, i, "a") for i in range(100)]
    grown = [(0, i, "a") for i in range(150)]
    keep, stored_hits, repeats = sifted(stored, [grown[:64], grown[64:]])
    assert keep == [False] * 100 + [True] * 50
    assert (stored_hits, repeats) == (100, 0)


def test_keys_that_go_back_are_found_in_every_earlier_batch():
    batches = [[(0, 5, "a"), (0, 6, "a")], [(0, 9, "a")], [(0, 6, "b"), (0, 1, "a")]]
    assert sifted([], batches) == ([True, True, True, False, True], 0, 1)
