"""Where a prompt hides its needle, in token positions of the tokenised prompt.

For kvtrace's offline RULER generator the needle sentence is known, and its key and its
value are located inside it.  For RULER's own files only the answers are known: every
occurrence of a reference string in the prompt is a value span.  Character offsets
become token positions by encoding the prompt's prefix up to them, which is exact for a
byte tokenizer and may move a span's edge by a token where a BPE merge crosses it.
"""

from __future__ import annotations

from collections.abc import Callable

from kvtrace.collectors.datasets import DatasetRequest

Span = tuple[str, str, int, int]  # part (key / value), text, token start, token end


def needle_spans(request: DatasetRequest, encode: Callable[[str], list[int]]) -> list[Span]:
    """The needle's key and value spans in ``request.prompt`` (empty when not found)."""
    prompt = request.prompt
    chars: list[tuple[str, str, int]] = []  # part, text, character offset
    needle = request.meta.get("needle")
    if needle:
        at = prompt.find(needle)
        if at >= 0:
            key = request.meta.get("key")
            for part, text in (("key", key), ("value", request.answer)):
                if text and (inside := needle.find(text)) >= 0:
                    chars.append((part, text, at + inside))
    else:
        for reference in request.references:
            chars += [("value", reference, at) for at in _occurrences(prompt, reference)]
    return [
        (part, text, len(encode(prompt[:at])), len(encode(prompt[: at + len(text)])))
        for part, text, at in sorted(chars, key=lambda c: c[2])
    ]


def _occurrences(text: str, piece: str) -> list[int]:
    found, at = [], text.find(piece) if piece else -1
    while at >= 0:
        found.append(at)
        at = text.find(piece, at + 1)
    return found
