"""Tell a file's exact repeats: records whose every value equals an earlier record's.

A record is summed up by a digest, two 64-bit hashes of its values computed column by
column over a batch: each value becomes a 64-bit word (a number's bits, a string's
BLAKE2b hash; a NULL a constant of each hash's own), and each hash folds the words in
with splitmix64's finalizer, from a seed of its own.  The digests of the records a file
gave so far are kept as sorted runs, 16 bytes a record, merged as they grow, so that a
batch is checked by one binary search per run.  A record is taken for a repeat only
when both hashes agree with an earlier record's (distinct records do so about once in
2^128 pairs); where the first hash alone agrees with another record's, a repeat may
be kept (about once in 2^64 pairs): never the other way round.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Run = tuple[np.ndarray, np.ndarray]  # first hashes, sorted; second hashes beside them
_SEEDS = (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03)
_STRIDES = (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53))  # odd
_NULLS = (np.uint64(0x2545F4914F6CDD1D), np.uint64(0x9FB21C651E98DF25))  # a NULL's words
STRINGS_KEPT = 1 << 16  # strings whose words are kept for the next batches, at most


class Repeats:
    """The digests of the records a file gave so far: runs sorted by the first hash, a
    run merged into the one before once that is no larger."""

    def __init__(self) -> None:
        self._runs: list[Run] = []
        self._strings: dict[str, tuple[int, int]] = {}  # the words of each string met

    def first_seen(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
        """Which rows of ``columns`` (a batch's records, column by column) no earlier
        record had, nor an earlier row of the batch; those are remembered."""
        first, second = self._digests(columns)
        order = np.argsort(first, kind="stable")  # the first of equal digests first
        keys, checks = first[order], second[order]
        new = np.ones(len(keys), dtype=bool)
        new[1:] = (keys[1:] != keys[:-1]) | (checks[1:] != checks[:-1])
        for run_keys, run_checks in self._runs:
            at = np.minimum(np.searchsorted(run_keys, keys), len(run_keys) - 1)
            new &= (run_keys[at] != keys) | (run_checks[at] != checks)
        self._remember((keys[new], checks[new]))
        fresh = np.empty(len(keys), dtype=bool)
        fresh[order] = new
        return fresh

    def _remember(self, run: Run) -> None:
        if len(run[0]) == 0:
            return
        self._runs.append(run)
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= len(self._runs[-1][0]):
            later = self._runs.pop()
            self._runs[-1] = _merged(self._runs[-1], later)

    def _digests(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> Run:
        """Two 64-bit hashes of each row, the same for equal rows in any batch."""
        rows = len(columns[0]) if columns else 0
        lanes = [np.full(rows, seed, dtype=np.uint64) for seed in _SEEDS]
        for column in columns:
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            nulls = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
            for lane, words in enumerate(self._words(column)):
                if nulls is not None:
                    words = np.where(nulls, _NULLS[lane], words)
                _fold(lanes[lane], _STRIDES[lane], words)
        return lanes[0], lanes[1]

    def _words(self, column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """A 64-bit word per value, for each hash (a NULL's is replaced by the caller)."""
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            encoded = pc.dictionary_encode(column)
            texts = encoded.dictionary.to_pylist()
            words = np.array([self._string_words(text) for text in texts] or [(0, 0)], np.uint64)
            chosen = words[pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)]
            return chosen[:, 0], chosen[:, 1]
        if pa.types.is_null(kind):
            values = np.zeros(len(column), dtype=np.uint64)
        elif pa.types.is_floating(kind):
            values = pc.fill_null(column.cast(pa.float64()), 0.0).to_numpy().view(np.uint64)
        elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            values = pc.fill_null(column.cast(pa.int64()), 0).to_numpy().view(np.uint64)
        else:
            raise TypeError(f"no digest of {kind} values")
        return values, values

    def _string_words(self, text: str) -> tuple[int, int]:
        words = self._strings.get(text)
        if words is None:
            digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
            words = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")
            if len(self._strings) >= STRINGS_KEPT:
                self._strings.clear()  # (a file of ever new names: memory stays bounded)
            self._strings[text] = words
        return words


def _fold(lane: np.ndarray, stride: np.uint64, words: np.ndarray) -> None:
    """Fold ``words`` into the hashes ``lane`` (in place): multiply, add, and spread every
    bit with splitmix64's finalizer (a one-to-one map of 64-bit words)."""
    lane *= stride
    lane += words
    lane ^= lane >> np.uint64(30)
    lane *= np.uint64(0xBF58476D1CE4E5B9)
    lane ^= lane >> np.uint64(27)
    lane *= np.uint64(0x94D049BB133111EB)
    lane ^= lane >> np.uint64(31)


def _merged(run: Run, other: Run) -> Run:
    """Two runs as one, still sorted by the first hash (in linear time)."""
    (keys, checks), (other_keys, other_checks) = run, other
    at = np.searchsorted(keys, other_keys) + np.arange(len(other_keys))
    theirs = np.zeros(len(keys) + len(other_keys), dtype=bool)
    theirs[at] = True
    merged_keys = np.empty(len(theirs), dtype=np.uint64)
    merged_checks = np.empty(len(theirs), dtype=np.uint64)
    merged_keys[at], merged_checks[at] = other_keys, other_checks
    merged_keys[~theirs], merged_checks[~theirs] = keys, checks
    return merged_keys, merged_checks
