"""Dataset runners: turn a benchmark into prompts for the DSA collector."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DatasetRequest:
    """One prompt to run, with what the dataset says about it."""

    request_id: int
    prompt: str
    answer: str | None = None
    meta: dict = field(default_factory=dict)
