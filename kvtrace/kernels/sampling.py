"""Spatial sampling of an access stream (SHARDS, Waldspurger et al., FAST'15).

An item is in the sample when a hash of its id falls below ``rate x 2**64``: every
access to a sampled item is kept, every access to another one dropped, so an item's
reuse pattern survives whole.  Stack distances measured on the sample, divided by the
rate, estimate the distances of the full stream; `kvtrace.analysis.kv_access.simulate`
scales them back and corrects the sample's size (SHARDS-adj).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvtrace.kernels.block_keys import mix64

_SAMPLE_SEED = 0x2545F4914F6CDD1D


@njit(cache=True, nogil=True)
def _below(
    items: np.ndarray, threshold: np.uint64, seed: np.uint64
) -> np.ndarray:  # pragma: no cover
    kept = np.empty(len(items), dtype=np.bool_)
    for i in range(len(items)):
        kept[i] = mix64(np.uint64(items[i]) ^ seed) < threshold
    return kept


def sampled(items: np.ndarray, rate: float, salt: int = 0) -> np.ndarray:
    """Which accesses of ``items`` (integer item ids) touch an item of the sample at
    ``rate`` in (0, 1]; the same item is always in or always out.  Caches whose item ids
    repeat (one per request) take a ``salt`` each, so that their samples are
    independent."""
    if rate >= 1.0:
        return np.ones(len(items), dtype=np.bool_)
    threshold = np.uint64(min(int(rate * 2.0**64), 2**64 - 1))
    seed = np.uint64(mix64(np.uint64(_SAMPLE_SEED) ^ np.uint64(salt)))
    return _below(np.ascontiguousarray(items, dtype=np.int64), threshold, seed)
