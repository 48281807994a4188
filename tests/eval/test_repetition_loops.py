"""The repetition-loop error class on seed 002's RULER 32K error samples, and its
definition checked against a brute-force reading of it on generated strings.

Definition (kvtrace/warehouse/rows/eval.py): the prediction's letters and digits,
lowered, hold a pattern of 1 to 8 characters repeated at least 3 times in a row, the
copies covering at least 8 characters.
"""

from __future__ import annotations

import random

import pytest

from kvtrace.warehouse.rows.eval import error_class, is_repetition_loop, score

# (expected, prediction) of the seed's error tables, labelled by hand.
SEED_LOOPS = [
    ("6406444", ":361361361361361361361361361361361361361361361361361361...<|eot_id|>"),
    ("b7b56ea7-35eb-432d-9ad6-20ab48212ddb", ":0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0<|eot_id|>"),
    ("9134051", ": 381:055: 381:055: 381:055: 381:055: 381:055: 381:055: 38..."),
    ("7071187", " 055055055.<|eot_id|>"),
    ("8740362", ": 8740364 8740364 8740364 8740364 is: is: is: is: 874036..."),
    ("8003271", ": 60870870870870870870870870870870870870870870870870870..."),
    ("8632309", " 303640 is640 640 640 640 640 640 640 640 640 640 640 640..."),
    ("5364945", ": 536494, which is: 536494, which is: 536494494494494494..."),
    ("7319214", ":7607607607607607607607607607607607607607607607607607607..."),
    ("5727554", ": 572755755755755755755755755755755755755755 is: 572..."),
    ("2171218", ": 2171212181212181212181218<|eot_id|>"),
    (
        "6d94011c-f28a-4b0b-a2e2-fe34bb8b19a1",
        ": 6d6d6d6d4b0e-52ce-44d9-a0f6-1ae405825615<|eot_id|>",
    ),
    ("86a867a7-6a98-4a02-b065-70a33bafafde", ":6139a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a..."),
    (
        "500b8a75-8f05-43f5-b9ad-46d47d4e33fc",
        ": 500b8a5e0e0e0a500b is: 500b is: 500b-4 is: is: is: is: is: i...",
    ),
    (
        "b0e1f3f5-6570-437e-b8a1-f1b3f654e257",
        ": 500b 500b 500b 500b 500b 500b 500b 500b 500b 500b ...",
    ),
    (
        "ff686e85-3a9f-4635-95dd-f19e8ca68eb1",
        " ff686e686e686e686e686e686f686e6f686e6fb686f686f686f686f686f- is: f...",
    ),
]

SEED_OTHER_ERRORS = [
    ("2935113", ": 29351113.<|eot_id|>", "partial"),  # '1' three times: 3 characters
    ("2344047", ": 23440447.<|eot_id|>", "partial"),
    (
        "54c63cd8-8945-4f27-97fa-2d8dfb2ca025",
        ": 54c63c63cd8-8945-4f27-97fa-2d8dfb2ca025.",
        "partial",
    ),
    (
        "d92c9227-eadf-4085-bfcb-75468eb22579",
        ": d92c922c9227-eadf-4085-bfcb-75468eb22579.",
        "partial",
    ),
    ("1514340", ": 1514343403361.<|eot_id|>", "partial"),
    (
        "5960271",
        ": 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,...",
        "wrong_value",
    ),
    ("8963715", ": 0 8 9 7 1 5<|eot_id|>", "wrong_value"),
    ("9874152", ":151:52<|eot_id|>", "wrong_value"),
    ("9196204", ":<|eot_id|>", "empty"),
    ("6049101", ": 6 0 4 9 1 0 1<|eot_id|>", "format"),
    (
        "c73ed342-6523-4d4b-aa33-beb1c9007315",
        ": 1d28b88b-b6a8-46ba-8e8f-56cbafbfd897.",
        "wrong_value",
    ),
]


def _class(expected: str, prediction: str) -> str | None:
    return error_class(prediction, [expected], score(prediction, [expected], "string_match_all"))


@pytest.mark.parametrize("expected, prediction", SEED_LOOPS)
def test_the_seeds_loops_are_repetition_loops(expected, prediction):
    assert _class(expected, prediction) == "repetition_loop"


@pytest.mark.parametrize("expected, prediction, cls", SEED_OTHER_ERRORS)
def test_the_seeds_other_errors_are_not_loops(expected, prediction, cls):
    assert _class(expected, prediction) == cls


def test_a_right_answer_that_loops_after_it_is_right():
    assert _class("7607", ":7607607607607607607") is None


def test_a_value_written_differently_stays_a_format_error_even_when_it_repeats():
    assert _class("6049101", "6 0 4 9 1 0 1 6 0 4 9 1 0 1 6 0 4 9 1 0 1") == "format"


def _loops_brute_force(text: str) -> bool:
    """Some start and pattern length p <= 8 with >= 3 copies in a row covering >= 8."""
    for start in range(len(text)):
        for p in range(1, 9):
            pattern = text[start : start + p]
            if len(pattern) < p:
                break
            copies = 1
            while text[start + copies * p : start + (copies + 1) * p] == pattern:
                copies += 1
            if copies >= 3 and copies * p >= 8:
                return True
    return False


@pytest.mark.parametrize(
    "text, loops",
    [
        ("", False),
        ("1111111", False),  # 7 copies of one character: 7 characters
        ("11111111", True),
        ("abababa", False),
        ("abababab", True),
        ("abcabc", False),
        ("abcabcab", False),  # two whole copies
        ("abcabcabc", True),
        ("12345678123456781234567", False),
        ("123456781234567812345678", True),
        ("1234567891234567891234567891", False),  # a 9-character pattern
    ],
)
def test_the_definitions_edges(text, loops):
    assert is_repetition_loop(text) is loops is _loops_brute_force(text)


def test_the_definition_against_brute_force_on_generated_strings():
    rng = random.Random(47)
    for _ in range(3000):
        alphabet = "ab" if rng.random() < 0.5 else "abc1"
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        if rng.random() < 0.3:  # plant a repeat of random size
            unit = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 10)))
            at = rng.randrange(len(text) + 1)
            text = text[:at] + unit * rng.randrange(1, 5) + text[at:]
        assert is_repetition_loop(text) == _loops_brute_force(text), text
