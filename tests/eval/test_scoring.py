"""RULER's scoring and kvtrace's error classes on hand-made samples.

RULER (scripts/eval/synthetic/constants.py) scores a task as
``string_match_all``: mean over samples of (references found in the prediction, ignoring
case) / (references), x 100; ``string_match_part``: mean of 1 if any reference is found,
x 100.  Predictions are stripped and control characters turned into newlines first.
"""

from __future__ import annotations

import pytest

from kvtrace.warehouse.rows.eval import error_class, eval_row, postprocess, ruler_metric, score


def test_match_all_counts_the_share_of_references_found_ignoring_case():
    assert score("The numbers are 123 and ABC.", ["123", "abc"], "string_match_all") == 1.0
    assert score("only 123 here", ["123", "abc", "xyz"], "string_match_all") == pytest.approx(1 / 3)
    assert score("nothing", ["123"], "string_match_all") == 0.0


def test_match_part_scores_one_when_any_reference_is_found():
    assert score("Paris, I think", ["London", "paris"], "string_match_part") == 1.0
    assert score("Rome", ["London", "Paris"], "string_match_part") == 0.0


def test_a_missing_prediction_scores_zero_and_control_characters_split_words():
    assert score(None, ["1"], "string_match_all") == 0.0
    assert postprocess("  12\x0034\t ") == "12\n34"
    assert score("12\x0034", ["1234"], "string_match_all") == 0.0  # RULER's cleaning splits it


def test_tasks_take_rulers_metrics():
    for task in ("niah_single_1", "niah_multikey_3", "vt", "cwe", "fwe"):
        assert ruler_metric(task) == "string_match_all"
    for task in ("qa_1", "qa_2"):
        assert ruler_metric(task) == "string_match_part"


@pytest.mark.parametrize(
    "prediction, references, expected",
    [
        (":<|eot_id|>", ["9196204"], "empty"),  # the seed's empty outputs
        (None, ["9196204"], "empty"),
        (" . ", ["9196204"], "empty"),
        (": 6 0 4 9 1 0 1<|eot_id|>", ["6049101"], "format"),
        ("answer: 2935-113", ["2935113"], "format"),
        (": 29351113.<|eot_id|>", ["2935113"], "partial"),  # a digit inserted: 2935 remains
        (" 0271<|eot_id|>", ["5960271"], "partial"),  # cut: the last half of the value
        ("7 and nothing else", ["7", "42"], "partial"),  # one key of two
        (":361361361361<|eot_id|>", ["6406444"], "repetition_loop"),
        (": 8651665.", ["1535573"], "wrong_value"),
        ("The answer is 42", ["42"], None),  # right
    ],
)
def test_error_classes_follow_their_documented_rules(prediction, references, expected):
    assert (
        error_class(prediction, references, score(prediction, references, "string_match_all"))
        == expected
    )


def test_an_eval_row_carries_score_metric_and_class():
    row = eval_row(
        run_id="r",
        task="qa_1",
        sample_index=3,
        prediction="no idea",
        references=["Paris"],
        context_length=4000,
    )
    assert (row["metric"], row["score"], row["error_class"], row["null_prediction"]) == (
        "string_match_part",
        0.0,
        "wrong_value",
        False,
    )
