"""A rejected input row: what the quarantine stores about it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BadLine"]


@dataclass
class BadLine:
    """A line (or live record) that could not be trusted, and why."""

    line_no: int
    reason: str
    raw: str
