"""Dataset runners: turn a benchmark into prompts for the DSA collector."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from kvtrace.errors import InputError


@dataclass
class DatasetRequest:
    """One prompt to run, with what the dataset says about it."""

    request_id: int
    prompt: str
    answer: str | None = None
    meta: dict = field(default_factory=dict)
    references: list[str] = field(default_factory=list)  # scored answers (RULER tasks)
    task: str | None = None  # the evaluation task the references belong to


def read_local_file(path: Path) -> tuple[bytes, str]:
    """A local dataset file's bytes and their sha256 (recorded as the dataset variant)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    return data, hashlib.sha256(data).hexdigest()


def read_json_file(path: Path) -> tuple[object, str]:
    """A local JSON dataset file, parsed, and its sha256."""
    data, sha = read_local_file(path)
    try:
        return json.loads(data), sha
    except ValueError as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from None
