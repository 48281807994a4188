"""RULER prediction folders into eval_samples; accuracy, error classes and run diffs."""

from __future__ import annotations

from math import comb
from pathlib import Path

import pytest

from kvtrace import connect
from kvtrace.ingest import ingest
from tests.conftest import warehouse_at, write_jsonl


def _sample(index: int, pred: str | None, outputs: list[str], length: int = 3900) -> dict:
    record = {
        "index": index,
        "input": "...",
        "outputs": outputs,
        "others": {},
        "truncation": -1,
        "length": length,
    }
    if pred is not None:
        record["pred"] = pred
    return record


def _pred_folder(root: Path, niah_right: list[bool]) -> Path:
    """niah_single_1 with one sample per flag (right or empty), qa_1 with three samples."""
    niah = [
        _sample(i, f"The number is {1000 + i}." if ok else ":<|eot_id|>", [str(1000 + i)])
        for i, ok in enumerate(niah_right)
    ]
    write_jsonl(root / "niah_single_1.jsonl", niah)
    write_jsonl(
        root / "qa_1.jsonl",
        [
            _sample(0, "It is Paris", ["Paris", "City of Light"], length=31000),
            _sample(1, None, ["Rome"], length=31000),
            _sample(2, "Lyon", ["Paris"], length=31000),
            '{"index": 3, "outputs": "oops", "pred": 7}',
        ],
    )
    return root


def test_a_prediction_folder_becomes_scored_samples(warehouse, tmp_path):
    report = ingest(warehouse, [str(_pred_folder(tmp_path / "ruler_4k", [True, False, True]))])
    assert report.rows == 6 and report.rejected == 1
    con = connect(warehouse)
    accuracy = con.execute(
        "SELECT task, context_tokens, samples, right_answers, accuracy, ruler_score, "
        "null_predictions "
        "FROM eval_accuracy ORDER BY task"
    ).fetchall()
    assert accuracy == [
        ("niah_single_1", 4096, 3, 2, pytest.approx(2 / 3), 66.67, 0),
        ("qa_1", 32768, 3, 1, pytest.approx(1 / 3), 33.33, 1),
    ]
    classes = con.execute(
        "SELECT task, error_class, samples, share FROM eval_error_classes"
    ).fetchall()
    assert classes == [
        ("niah_single_1", "empty", 1, 1.0),
        ("qa_1", "empty", 1, 0.5),
        ("qa_1", "wrong_value", 1, 0.5),
    ]
    errors = con.execute("SELECT task, sample_index, expected FROM eval_errors").fetchall()
    assert errors == [("niah_single_1", 1, "1001"), ("qa_1", 1, "Rome"), ("qa_1", 2, "Paris")]
    reason = con.execute("SELECT reason FROM quarantine").fetchone()[0]
    assert reason == "bad value: pred must be a string, got 7"
    runs = con.execute("SELECT run_name, kind FROM runs").fetchall()
    assert runs == [("ruler_4k", "eval")]


def test_eval_diff_says_what_a_fix_fixed_and_tests_it(warehouse, tmp_path):
    before = [True] * 10 + [False] * 8 + [True, False]  # 11 right of 20
    after = [True] * 10 + [True] * 7 + [False] + [False, False]  # 7 fixed, 1 broken
    ingest(warehouse, [str(_pred_folder(tmp_path / "before", before))])
    ingest(warehouse, [str(_pred_folder(tmp_path / "after", after))], run_name="after")
    con = connect(warehouse)
    outcomes = dict(
        con.execute(
            "SELECT outcome, count(*) FROM eval_diff('before', 'after') "
            "WHERE task = 'niah_single_1' GROUP BY outcome"
        ).fetchall()
    )
    assert outcomes == {"still_right": 10, "fixed": 7, "still_wrong": 2, "broken": 1}
    summary = con.execute(
        "SELECT samples, fixed, broken, still_wrong, still_right, accuracy_a, accuracy_b, "
        "mcnemar_p FROM eval_diff_summary('before', 'after')"
    ).fetchone()
    # 23 samples (20 niah + 3 qa, the qa ones unchanged: 1 right, 2 wrong)
    # exact McNemar: 2 * P(X <= 1), X ~ Binomial(8, 1/2) = 2 * (1 + 8) / 256
    assert summary[:5] == (23, 7, 1, 4, 11)
    assert summary[5] == pytest.approx(12 / 23) and summary[6] == pytest.approx(18 / 23)
    assert summary[7] == pytest.approx(2 * (comb(8, 0) + comb(8, 1)) / 2**8)
    same = con.execute(
        "SELECT fixed, broken, mcnemar_p FROM eval_diff_summary('after', 'after')"
    ).fetchone()
    assert same == (0, 0, 1.0)


def test_mcnemar_caps_at_one_and_is_symmetric(warehouse):
    con = connect(warehouse)
    p = dict(
        con.execute(
            "SELECT b || '-' || c, _mcnemar_exact_p(b, c) FROM "
            "(VALUES (3, 3), (10, 0), (0, 10), (2, 5)) t(b, c)"
        ).fetchall()
    )
    assert p["3-3"] == 1.0
    assert p["10-0"] == pytest.approx(2 / 1024) == p["0-10"]
    assert p["2-5"] == pytest.approx(2 * (1 + 7 + 21) / 128)


def test_rulers_summary_csv_is_checked_against_the_recomputed_scores(cli, tmp_path):
    folder = _pred_folder(tmp_path / "ruler_4k", [True, False, True])
    (folder / "summary.csv").write_text(
        "Tasks,niah_single_1,qa_1\nScore,66.67,50.0\nNulls,0/3,1/3\n"
    )
    status, out, _ = cli("-w", warehouse_at(tmp_path / "wh"), "ingest", str(folder))
    assert status == 0
    assert "ruler_score:qa_1: the source says 50, kvtrace recomputes 33.33" in out
    assert "ruler_score:niah_single_1" not in out  # 66.67 agrees
    status, out, _ = cli(
        "-w",
        warehouse_at(tmp_path / "wh"),
        "sql",
        "SELECT statistic, source_value, recomputed_value FROM ingest_checks",
        "-f",
        "csv",
    )
    assert out.splitlines()[1:] == ["ruler_score:qa_1,50.0,33.33"]
