"""Arrival traces (BurstGPT, or the Azure LLM inference trace) replayed in arrival order.

Reads a CSV with an arrival time and the recorded prompt and response lengths, under
BurstGPT's names (``Timestamp`` in seconds, ``Request tokens``, ``Response tokens``) or
the Azure trace's (``TIMESTAMP`` as wall-clock time, ``ContextTokens``,
``GeneratedTokens``).  Arrivals are made relative to the first one and sorted (FIFO).
Each prompt is filler text of the recorded length in tokens.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kvtrace.collectors.datasets import read_local_file
from kvtrace.errors import InputError

COLUMNS = {
    "arrival": ("Timestamp", "TIMESTAMP", "timestamp"),
    "prompt_tokens": ("Request tokens", "ContextTokens", "input_length"),
    "response_tokens": ("Response tokens", "GeneratedTokens", "output_length"),
}
FILLER = "The quick brown fox jumps over the lazy dog while the river runs to the sea. "


@dataclass
class Arrival:
    request_id: int
    arrival_s: float
    prompt_tokens: int
    response_tokens: int
    prompt: str | None = None  # the text to send; filler of prompt_tokens when None


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    head, dot, fraction = text.strip().partition(".")
    stamp = datetime.fromisoformat(head + (dot + fraction[:6] if dot else ""))
    return stamp.timestamp()


def load_arrivals(path: Path) -> tuple[list[Arrival], str]:
    """The arrivals of a trace CSV, FIFO, and the file's sha256."""
    data, sha = read_local_file(path)
    reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig")))
    names = {}
    for column, aliases in COLUMNS.items():
        found = next((a for a in aliases if a in (reader.fieldnames or [])), None)
        if found is None:
            raise InputError(
                f"{path} has no {' / '.join(aliases)} column; an arrival trace "
                "needs arrival time, prompt and response lengths"
            )
        names[column] = found
    rows = []
    for line, record in enumerate(reader, start=2):
        try:
            rows.append(
                (
                    _seconds(record[names["arrival"]]),
                    int(float(record[names["prompt_tokens"]])),
                    int(float(record[names["response_tokens"]])),
                )
            )
        except (TypeError, ValueError):
            raise InputError(f"{path}:{line}: cannot read {record!r} as an arrival") from None
    if not rows:
        raise InputError(f"{path} holds no arrivals")
    start = min(r[0] for r in rows)
    ordered = sorted(rows, key=lambda r: r[0])
    arrivals = [
        Arrival(i, t - start, prompt, response) for i, (t, prompt, response) in enumerate(ordered)
    ]
    return arrivals, sha


def filler_prompt(tokens: int) -> str:
    """Text of ``tokens - 1`` bytes: ``tokens`` tokens for the byte tokenizer (with BOS)."""
    size = max(tokens - 1, 1)
    return (FILLER * (size // len(FILLER) + 1))[:size]
