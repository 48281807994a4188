"""Content keys of KV blocks: what makes two requests' blocks the same item of a shared pool.

- `chained_block_keys`: a block's key at block size B is a hash of its parent block's key
  and its own B token ids, the way vLLM's prefix caching names blocks: two requests whose
  first n x B tokens agree hold the same first n blocks, and a block's key says
  everything before it too.  Only full blocks get one.
- `prefix_block_keys`: the seed's notion, for traces without token ids: block j lying
  wholly inside a request's prefix region is the item (prefix key, j).
- `layer_item_keys`: the item of one layer of a block (granularity ``layer_block``).

Keys are 64-bit hashes (SplitMix64's finaliser, chained over the tokens) folded into
[2**62, 2**63): the packed keys of private items stay below 2**62, so a content key never
names a private item.  Two different contents share a key with probability about
n**2 / 2**63 for n distinct blocks (1e-5 for ten million), the risk vLLM's own hash
carries.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numba import njit

CONTENT_BIT = np.int64(1) << np.int64(62)
_LOW_BITS = (1 << 62) - 1
_BLOCK_SEED = 0x9E3779B97F4A7C15
_PREFIX_SEED = 0xC2B2AE3D27D4EB4F
_LAYER_SEED = 0x165667B19E3779F9


@njit(inline="always", cache=True)
def mix64(x: np.uint64) -> np.uint64:
    """SplitMix64's finaliser: a well-mixed 64-bit hash of a 64-bit integer."""
    x = np.uint64(x)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@njit(inline="always", cache=True)
def _fold(x: np.uint64) -> np.int64:
    """A hash as a content key: bit 62 set, bit 63 clear."""
    return np.int64(x & np.uint64(_LOW_BITS)) | np.int64(1 << 62)


@njit(cache=True)
def _chained(  # pragma: no cover
    tokens: np.ndarray, offsets: np.ndarray, block_size: int, out_offsets: np.ndarray
) -> np.ndarray:
    out = np.empty(out_offsets[-1], dtype=np.int64)
    for r in range(len(offsets) - 1):
        start, end = offsets[r], offsets[r + 1]
        h = mix64(np.uint64(_BLOCK_SEED) ^ np.uint64(block_size))
        k = out_offsets[r]
        for j in range((end - start) // block_size):
            first = start + j * block_size
            for i in range(first, first + block_size):
                h = mix64(h ^ np.uint64(np.uint32(tokens[i])))
            out[k + j] = _fold(h)
    return out


def chained_block_keys(
    tokens: np.ndarray, offsets: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """The key of every full block of each request's token ids.

    ``tokens`` holds the requests' token ids one after another, request r's at
    ``offsets[r]:offsets[r + 1]``.  Returns the keys, request r's at
    ``key_offsets[r]:key_offsets[r + 1]`` (block j at position j), and ``key_offsets``.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    counts = np.diff(offsets) // block_size
    key_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    keys = _chained(
        np.ascontiguousarray(tokens, dtype=np.int64), offsets, int(block_size), key_offsets
    )
    return keys, key_offsets


@njit(cache=True)
def _prefix_keys(  # pragma: no cover
    bases: np.ndarray, counts: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    out = np.empty(offsets[-1], dtype=np.int64)
    for r in range(len(bases)):
        for j in range(counts[r]):
            out[offsets[r] + j] = _fold(mix64(np.uint64(bases[r]) ^ mix64(np.uint64(j + 1))))
    return out


def prefix_block_keys(prefix_keys: list[str | None], blocks: np.ndarray) -> np.ndarray:
    """The keys (prefix key, j) of blocks 0 .. blocks[r] - 1 of each request, one list
    after another (a request without a prefix key has none)."""
    counts = np.where([k is None for k in prefix_keys], 0, np.asarray(blocks, dtype=np.int64))
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    bases = np.array([_text_hash(k) for k in prefix_keys], dtype=np.uint64)
    return _prefix_keys(bases, counts.astype(np.int64), offsets)


def _text_hash(text: str | None) -> int:
    if text is None:
        return 0
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") ^ _PREFIX_SEED


@njit(cache=True)
def _layered(keys: np.ndarray, layers: np.ndarray) -> np.ndarray:  # pragma: no cover
    out = np.empty(len(keys), dtype=np.int64)
    for i in range(len(keys)):
        out[i] = _fold(
            mix64(np.uint64(keys[i]) ^ mix64(np.uint64(_LAYER_SEED) + np.uint64(layers[i])))
        )
    return out


def layer_item_keys(keys: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """The item (layer, content key) of each access, as a content key."""
    return _layered(
        np.ascontiguousarray(keys, dtype=np.int64), np.ascontiguousarray(layers, dtype=np.int64)
    )
