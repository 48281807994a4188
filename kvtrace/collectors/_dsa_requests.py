"""A traced request's prompt: its prefix hashes and prefix-cache standing."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvtrace.defaults import DEFAULT_PREFIX_KEY_TOKENS

__all__ = ["PREFIX_CANDIDATES", "OpenRequest", "prefix_hashes"]

PREFIX_CANDIDATES = (32, 64, 128, 256, 512, 1024)


def prefix_hashes(
    token_ids: Sequence[int], max_tokens: int = DEFAULT_PREFIX_KEY_TOKENS
) -> dict[int, str]:
    """SHA-1 of the first L prompt tokens (int32 little-endian) for each candidate L.

    The candidates are 32, 64, 128, ... up to ``min(len(prompt), max_tokens)``, and that
    length itself (seed ``000_*`` section 3.4), so a short prompt has a key too.
    """
    tokens = np.asarray(token_ids, dtype="<i4")
    region = min(len(tokens), max_tokens)
    lengths = sorted({n for n in (*PREFIX_CANDIDATES, region) if 0 < n <= region})
    return {n: hashlib.sha1(tokens[:n].tobytes()).hexdigest() for n in lengths}


@dataclass
class OpenRequest:
    """A request between begin_request and end_request."""

    request_id: int
    prompt_tokens: int
    prefix_key: str | None
    prefix_hit: bool
    cached_tokens: int
    key_tokens: int  # the request's own key region: min(prompt length, prefix_tokens)
    prompt_ids: np.ndarray  # the prompt's token ids (int32)
