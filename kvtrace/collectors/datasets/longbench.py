"""LongBench v2 (a local ``data.json`` or the hub): long contexts with a four-way question.

Records are ``{_id, domain, sub_domain, difficulty, length, question, choice_A..D,
answer, context}``; ``lengths`` keeps only records of those length classes (short,
medium, long).  The prompt puts the context first and the question with its choices
last, asking for the letter.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from kvtrace.collectors.datasets import DatasetRequest, read_json_file
from kvtrace.errors import InputError

FIELDS = ("question", "choice_A", "choice_B", "choice_C", "choice_D", "context")
LENGTHS = ("short", "medium", "long")


def load_longbench(path: Path) -> tuple[list[dict], str]:
    """The records of a local LongBench v2 ``data.json`` and the file's sha256."""
    records, sha = read_json_file(path)
    return check_longbench(records, str(path)), sha


def check_longbench(records: object, source: str) -> list[dict]:
    """``records`` if they are LongBench v2 records, else one clear error."""
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and all(f in r for f in FIELDS) for r in records
    ):
        raise InputError(
            f"{source} is not LongBench v2 data: expected a list of records "
            f"with {', '.join(FIELDS)}"
        )
    return records


def longbench_requests(
    records: list[dict], lengths: Iterable[str] | None = None
) -> Iterator[DatasetRequest]:
    """One multiple-choice request per record of the chosen length classes."""
    wanted = set(lengths or LENGTHS)
    unknown = wanted - set(LENGTHS)
    if unknown:
        raise InputError(
            f"unknown LongBench length class {sorted(unknown)}; expected {', '.join(LENGTHS)}"
        )
    request_id = 0
    for record in records:
        if record.get("length", "short") not in wanted:
            continue
        choices = "\n".join(f"({letter}) {record[f'choice_{letter}']}" for letter in "ABCD")
        prompt = (
            f"Read the document and answer the question after it.\n\n"
            f"Document:\n{record['context']}\n\n"
            f"Question: {record['question']}\n{choices}\n\n"
            f"Reply with the letter of the right choice. Answer: ("
        )
        yield DatasetRequest(
            request_id,
            prompt,
            answer=record.get("answer"),
            meta={
                "id": record.get("_id"),
                "domain": record.get("domain"),
                "difficulty": record.get("difficulty"),
                "length": record.get("length"),
            },
        )
        request_id += 1
