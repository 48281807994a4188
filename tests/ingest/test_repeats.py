"""Exact repeats among a file's records, told batch by batch (`kvtrace.ingest._repeats`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kvtrace.ingest._repeats import Repeats


def _records(count: int, seed: int) -> list[tuple]:
    """Records of few distinct values (so that many repeat), NULLs among them."""
    rng = np.random.default_rng(seed)
    names = ["gemm", "copy", "", "gemm ", None]
    return [
        (
            names[rng.integers(len(names))],
            None if rng.random() < 0.1 else float(rng.integers(3)) / 2,
            None if rng.random() < 0.1 else int(rng.integers(-1, 2)),
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize("batch", [1, 7, 50, 1000])
def test_the_first_of_equal_records_is_kept_whatever_the_batches(batch):
    records = _records(600, seed=batch)
    seen: set[tuple] = set()
    expected = []
    for record in records:
        expected.append(record not in seen)
        seen.add(record)
    repeats, got = Repeats(), []
    for start in range(0, len(records), batch):
        part = records[start : start + batch]
        names, times, ids = zip(*part, strict=True)
        columns = [pa.array(names, pa.string()), pa.array(times, pa.float64())]
        got.extend(repeats.first_seen([*columns, pa.array(ids, pa.int64())]))
    assert got == expected
    assert 10 < sum(expected) < 200  # many repeats, and more than a handful of records


def test_a_null_is_not_the_value_zero_nor_an_empty_string():
    repeats = Repeats()
    first = repeats.first_seen(
        [pa.array([None, "", None, ""], pa.string()), pa.array([0, None, None, 0], pa.int64())]
    )
    assert first.tolist() == [True, True, True, True]
    again = repeats.first_seen(
        [pa.array([None, "", "x"], pa.string()), pa.array([0, None, None], pa.int64())]
    )
    assert again.tolist() == [False, False, True]
