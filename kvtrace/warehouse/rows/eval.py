"""Scored evaluation samples: RULER's metrics and kvtrace's error classes.

Scoring follows RULER (``scripts/eval``): the prediction is stripped and its control
characters become newlines; a reference counts when it occurs in the prediction,
ignoring case.  ``string_match_all`` (needle, variable-tracking and word-extraction
tasks) scores the share of references found; ``string_match_part`` (QA tasks) scores 1
when any reference is found.  RULER reports the mean score x 100 per task; kvtrace stores
each sample's score in [0, 1].

Error classes of samples with a score below 1, first rule that applies:

- ``empty``: no prediction, or nothing but punctuation, spaces and end-of-text markers;
- ``format``: every reference appears once spaces and punctuation are removed from
  both sides (the value is there, written differently: ``5 0 4 9 1 0 1``);
- ``repetition_loop``: the prediction, once end-of-text markers, spaces and punctuation
  are removed and letters lowered, repeats a pattern of 1 to 8 characters at least
  ``LOOP_REPEATS`` (3) times in a row, the repeats covering at least ``LOOP_CHARS`` (8)
  characters: ``:361361361...``, ``: 500b 500b 500b ...``, ``:0:0:0:0:0:0:0:0``, but
  neither ``: 29351113.`` (``1`` three times covers 3 characters) nor ``c63c63`` (twice);
- ``partial``: some references of several found (score between 0 and 1), or a piece
  of a reference at least half its length (and 3 characters) found: a cut or damaged
  value such as ``:151:52`` for ``9874152``;
- ``wrong_value``: anything else: another value, unrelated text.
"""

from __future__ import annotations

import re
from typing import Any, Literal

__all__ = [
    "LOOP_CHARS",
    "LOOP_PATTERN_CHARS",
    "LOOP_REPEATS",
    "ErrorClass",
    "Metric",
    "error_class",
    "eval_row",
    "is_repetition_loop",
    "postprocess",
    "ruler_metric",
    "score",
]

Metric = Literal["string_match_all", "string_match_part"]
ErrorClass = Literal["empty", "format", "repetition_loop", "partial", "wrong_value"]

LOOP_PATTERN_CHARS = 8  # the longest pattern a repetition loop repeats
LOOP_REPEATS = 3  # the fewest copies of the pattern in a row
LOOP_CHARS = 8  # the fewest characters the copies cover

_CONTROL = re.compile(r"[\x00-\x1f]")
_END_OF_TEXT = re.compile(r"<\|[a-z_]+\|>|</s>|<eos>|<\|endoftext\|>")
_NOT_ALNUM = re.compile(r"[\W_]+")
# One alternative per pattern length p: p characters, then enough copies of them.
_LOOP = re.compile(
    "|".join(
        f"(.{{{p}}})\\{p}{{{max(LOOP_REPEATS, -(-LOOP_CHARS // p)) - 1},}}"
        for p in range(1, LOOP_PATTERN_CHARS + 1)
    ),
    re.DOTALL,
)


def ruler_metric(task: str) -> Metric:
    """RULER's metric for a task name (``qa_*`` tasks match any reference)."""
    return "string_match_part" if task.startswith("qa") else "string_match_all"


def postprocess(prediction: str) -> str:
    """RULER's cleaning of a prediction before matching."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def score(prediction: str | None, references: list[str], metric: Metric) -> float:
    """One sample's score in [0, 1] (a missing prediction scores 0)."""
    if prediction is None or not references:
        return 0.0
    text = postprocess(prediction).lower()
    found = [ref.lower() in text for ref in references]
    if metric == "string_match_part":
        return 1.0 if any(found) else 0.0
    return sum(found) / len(found)


def error_class(
    prediction: str | None, references: list[str], sample_score: float
) -> ErrorClass | None:
    """The class of a wrong sample (None when the score is 1); see the module's rules."""
    if sample_score >= 1.0:
        return None
    squeezed = "" if prediction is None else _letters_and_digits(prediction)
    if not squeezed:
        return "empty"
    refs = [_NOT_ALNUM.sub("", ref.lower()) for ref in references]
    if _all_found(refs, squeezed):
        return "format"
    if is_repetition_loop(squeezed):
        return "repetition_loop"
    return "partial" if sample_score > 0 or _holds_a_piece(refs, squeezed) else "wrong_value"


def _letters_and_digits(prediction: str) -> str:
    """The prediction's letters and digits, lowered, end-of-text markers left out."""
    return _NOT_ALNUM.sub("", _END_OF_TEXT.sub("", postprocess(prediction)).lower())


def _all_found(references: list[str], text: str) -> bool:
    """Whether there are references and ``text`` holds every one."""
    return bool(references) and all(ref in text for ref in references)


def _holds_a_piece(references: list[str], text: str) -> bool:
    """Whether ``text`` holds a piece of any reference (`_shares_a_piece`)."""
    return any(_shares_a_piece(ref, text) for ref in references)


def is_repetition_loop(text: str) -> bool:
    """Whether ``text`` repeats a pattern of 1 to ``LOOP_PATTERN_CHARS`` characters at
    least ``LOOP_REPEATS`` times in a row, the copies covering ``LOOP_CHARS`` or more
    (``error_class`` asks it of the prediction's letters and digits, lowered)."""
    return _LOOP.search(text) is not None


def _shares_a_piece(reference: str, text: str) -> bool:
    """A substring of ``reference`` of half its length (at least 3) occurs in ``text``."""
    size = max(3, (len(reference) + 1) // 2)
    return any(reference[i : i + size] in text for i in range(len(reference) - size + 1))


def eval_row(
    *,
    run_id: str,
    task: str,
    sample_index: int,
    prediction: str | None,
    references: list[str],
    context_length: int | None = None,
    request_id: int | None = None,
) -> dict[str, Any]:
    """An ``eval_samples`` row, scored the RULER way for ``task``."""
    metric = ruler_metric(task)
    value = score(prediction, references, metric)
    return {
        "run_id": run_id,
        "task": task,
        "sample_index": sample_index,
        "request_id": request_id,
        "context_length": context_length,
        "prediction": prediction,
        "answers": references,
        "metric": metric,
        "score": value,
        "null_prediction": prediction is None,
        "error_class": error_class(prediction, references, value),
    }
