"""A tracer's settings: checked when it is made, and as its ``runs`` row records them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from kvtrace.errors import InputError

__all__ = ["checked", "settings"]


def checked(
    block_sizes: Sequence[int], sample_rate: float, rank: int | None, world_size: int | None
) -> tuple[int, int]:
    """The rank and world size (default: ``$RANK`` / ``$WORLD_SIZE``, else 0 and 1),
    after checking them and the other settings a tracer needs."""
    if not block_sizes or any(b <= 0 for b in block_sizes):
        raise InputError("block sizes must be positive")
    if not 0 < sample_rate <= 1:
        raise InputError("the sample rate must be in (0, 1]")
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise InputError(f"rank {rank} is outside a world of size {world_size}")
    return rank, world_size


def settings(*, more: Mapping[str, Any] | None, **named: Any) -> dict[str, Any]:
    """The collector_config of a tracer's run: its named settings, then ``more``."""
    return {**named, **(more or {})}
