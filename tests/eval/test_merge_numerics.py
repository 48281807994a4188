"""Merge-numerics records into merge_numerics; error against the number of chunks and
merge steps, and accuracy against merge error joined by run, each checked against plain
Python over the records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import write_jsonl

EXAMPLE = Path(__file__).parent.parent / "data" / "numerics" / "merge_numerics_example.jsonl"
DIFFS = ("lse_max_diff", "lse_mean_diff", "out_max_diff", "out_mean_diff")

# The guide's query (docs/guides/needle-recall.md, "Merge numerics").
ACCURACY_VS_ERROR = """
SELECT a.task, count(*) AS runs, corr(a.accuracy, m.out_max_diff) AS accuracy_vs_error,
       list(a.run_name ORDER BY m.out_max_diff) AS runs_by_rising_error,
       list(a.accuracy ORDER BY m.out_max_diff) AS accuracy_by_rising_error
FROM eval_accuracy AS a JOIN merge_error_runs AS m USING (run_id)
GROUP BY a.task ORDER BY a.task
"""


def _records() -> list[dict]:
    return [json.loads(line) for line in EXAMPLE.read_text().splitlines()]


def _final(record: dict) -> bool:
    return record.get("merge_step") in (None, record["chunks"] - 1)


def _summary(records: list[dict]) -> tuple:
    return (
        len(records),
        max(r["lse_max_diff"] for r in records),
        sum(r["lse_mean_diff"] for r in records) / len(records),
        max(r["out_max_diff"] for r in records),
        sum(r["out_mean_diff"] for r in records) / len(records),
    )


def test_error_against_the_number_of_chunks(warehouse, tmp_path):
    report = ingest(warehouse, [str(EXAMPLE)], run_name="fp16-pairwise")
    assert (report.rows, report.rejected) == (12, 0)
    records = _records()
    expected = []
    for chunks in sorted({r["chunks"] for r in records}):
        final = [r for r in records if r["chunks"] == chunks and _final(r)]
        expected.append((chunks, *_summary(final)))
    first_max = expected[0][4]
    con = connect(warehouse)
    got = con.execute(
        "SELECT chunks, layers, lse_max_diff, lse_mean_diff, out_max_diff, out_mean_diff, "
        "out_max_growth, run_name, method, dtype FROM merge_error_by_chunks"
    ).fetchall()
    assert [row[:6] for row in got] == [tuple(pytest.approx(v) for v in e) for e in expected]
    assert [row[6] for row in got] == pytest.approx([e[4] / first_max for e in expected])
    assert {row[7:] for row in got} == {("fp16-pairwise", "pairwise", "float16")}


def test_error_as_merges_accumulate(warehouse):
    ingest(warehouse, [str(EXAMPLE)], run_name="fp16-pairwise")
    records = _records()
    groups: dict[tuple[int, int], list[dict]] = {}
    for r in records:
        merges = r["chunks"] - 1 if r.get("merge_step") is None else r["merge_step"]
        groups.setdefault((r["chunks"], merges), []).append(r)
    expected = [(*key, *_summary(groups[key])) for key in sorted(groups)]
    got = (
        connect(warehouse)
        .execute(
            "SELECT chunks, merges, layers, lse_max_diff, lse_mean_diff, out_max_diff, "
            "out_mean_diff FROM merge_error_by_step"
        )
        .fetchall()
    )
    assert got == [tuple(pytest.approx(v) for v in e) for e in expected]
    assert (16, 1, 1) in [row[:3] for row in got] and (16, 15, 2) in [row[:3] for row in got]


def test_records_are_stored_once_and_bad_ones_quarantined(warehouse, tmp_path):
    good = {"chunks": 4, "layer": 3, "out_max_diff": 0.5}
    path = write_jsonl(
        tmp_path / "run" / "numerics.jsonl",
        [
            good,
            {"chunks": 4, "layer": 3, "merge_step": 2, "lse_max_diff": 0.1, "method": "nway"},
            {"chunks": 0, "out_max_diff": 0.1},
            {"chunks": 4, "merge_step": 4, "out_max_diff": 0.1},
            {"chunks": 4, "out_max_diff": -0.1},
            {"chunks": 4, "out_max_diff": None},
            {"chunks": 4, "layer": "3", "out_max_diff": 0.1},
            {"chunks": 4, "layer": 40000, "out_max_diff": 0.1},
            {"chunks": 4, "method": 7, "out_max_diff": 0.1},
            '{"chunks": 4, "out_max_diff": NaN}',
            "[1, 2]",
        ],
    )
    first = ingest(warehouse, [str(path)])
    assert (first.rows, first.rejected) == (2, 9)
    again = ingest(warehouse, [str(path)])
    assert again.rows == 0
    con = connect(warehouse)
    assert con.execute(
        "SELECT layer_id, chunks, merge_step, method, lse_max_diff, out_max_diff "
        "FROM merge_numerics ORDER BY merge_step NULLS FIRST"
    ).fetchall() == [(3, 4, None, None, None, 0.5), (3, 4, 2, "nway", 0.1, None)]
    reasons = [
        r for (r,) in con.execute("SELECT reason FROM quarantine ORDER BY line_no").fetchall()
    ]
    assert reasons[:3] == [
        "bad value: chunks must be at least 1, got 0",
        "bad value: merge_step must lie in 1..chunks - 1 (3), got 4",
        "bad value: out_max_diff must be at least 0, got -0.1",
    ]
    assert reasons[3] == (
        "bad value: a record needs at least one of lse_max_diff, lse_mean_diff, "
        "out_max_diff, out_mean_diff"
    )


def _ruler_run(root: Path, right: int, out_max_diff: float) -> Path:
    """A RULER prediction folder of 4 niah_single_1 samples, ``right`` of them right, and
    the run's merge numerics beside it (two layers, the worse one ``out_max_diff``)."""
    samples = [
        {
            "index": i,
            "outputs": [str(1000 + i)],
            "length": 30000,
            "pred": f"{1000 + i}" if i < right else ":361361361361",
        }
        for i in range(4)
    ]
    write_jsonl(root / "niah_single_1.jsonl", samples)
    write_jsonl(
        root / "numerics.jsonl",
        [
            {"layer": 0, "chunks": 32, "out_max_diff": out_max_diff / 2, "lse_max_diff": 0.01},
            {"layer": 1, "chunks": 32, "out_max_diff": out_max_diff, "lse_max_diff": 0.02},
        ],
    )
    return root


def _pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return cov / (sx * sy)


def test_accuracy_falls_as_merge_error_grows_in_one_query(warehouse, tmp_path):
    runs = {"nway": (4, 0.001), "slots8": (3, 0.01), "slots4": (2, 0.05), "slots2": (1, 0.2)}
    for name, (right, error) in runs.items():
        ingest(warehouse, [str(_ruler_run(tmp_path / name, right, error))])
    con = connect(warehouse)
    assert con.execute(
        "SELECT count(*) FILTER (WHERE error_class = 'repetition_loop') FROM eval_samples"
    ).fetchone() == (6,)
    ((task, count, correlation, names, accuracies),) = con.execute(ACCURACY_VS_ERROR).fetchall()
    by_error = sorted(runs, key=lambda n: runs[n][1])
    assert (task, count, names) == ("niah_single_1", 4, by_error)
    assert accuracies == pytest.approx([runs[n][0] / 4 for n in by_error])
    assert correlation == pytest.approx(
        _pearson([runs[n][0] / 4 for n in runs], [runs[n][1] for n in runs])
    )
    assert correlation < 0
