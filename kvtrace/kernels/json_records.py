"""Read JSONL records made only of integers and integer arrays in one compiled pass.

An arrival trace in Mooncake's JSONL is a million short records such as
``{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}``,
and a general JSON reader spends most of its time building each record's object.
`read_int_records` reads such lines straight into integer columns.

It takes a chunk only when every line is plainly of that shape: an object holding each
named key exactly once and no other key, written without escapes, every scalar a JSON
integer and every array a JSON array of integers, each of at most 18 digits.  Anything
else on any line (a float, a ``null``, a string, a missing or extra key, a line cut
short) makes it give up on the whole chunk, which the caller then parses with a general
reader: records outside the plain shape are checked exactly as they always were.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvtrace.kernels.json_lists import _matching_key, _read_ints, _skip_space

_QUOTE, _BACKSLASH, _COLON, _COMMA = 34, 92, 58, 44
_OPEN_OBJECT, _CLOSE_OBJECT, _OPEN_ARRAY = 123, 125, 91
_MINUS, _ZERO, _NEWLINE = 45, 48, 10


@njit(cache=True, nogil=True)
def _read_int(data: np.ndarray, j: int, size: int) -> tuple[int, int]:
    """The integer starting at ``j`` and the position after it; the position is -1 when
    there is none there, it is too long for int64, has a leading zero or is ``-0``.

    (`json_lists._read_ints` reads its integers inline: calling this instead made the
    DSA pass 1.5x slower.)"""
    negative = j < size and data[j] == _MINUS
    j += negative
    first = j
    number = 0
    while j < size:
        digit = int(data[j]) - _ZERO
        if digit < 0 or digit > 9:
            break
        number = number * 10 + digit
        j += 1
    digits = j - first
    if digits == 0 or digits > 18 or (digits > 1 and data[first] == _ZERO):
        return -1, 0
    if negative and number == 0:
        return -1, 0  # "-0": a JSON reader's double would be -0.0
    return j, -number if negative else number


@njit(cache=True, nogil=True)
def read_int_records(
    data: np.ndarray,
    lines: int,
    keys: np.ndarray,
    key_lengths: np.ndarray,
    scalar_keys: int,
    commas: int,
) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray]:
    """Read the ``lines`` lines of ``data``, each an object of the keys named by ``keys``.

    The first ``scalar_keys`` keys hold integers, the others arrays of integers;
    ``commas`` is the number of commas in ``data``, which bounds the integers.  Returns
    (handled, scalars, values, offsets): line ``i``'s scalar ``k`` in ``scalars[k, i]``,
    and its array ``a`` in ``values[a, offsets[a, i]:offsets[a, i + 1]]``.  ``handled``
    is False when some line is not of the plain shape (see the module's docstring); the
    other results are then meaningless.
    """
    n_keys = len(key_lengths)
    n_lists = n_keys - scalar_keys
    scalars = np.empty((max(scalar_keys, 1), lines), dtype=np.int64)
    # every integer but an array's last is followed by a comma
    values = np.empty((max(n_lists, 1), commas + lines + 1), dtype=np.int64)
    counts = np.zeros(max(n_lists, 1), dtype=np.int64)
    offsets = np.zeros((max(n_lists, 1), lines + 1), dtype=np.int64)
    seen = np.zeros(n_keys, dtype=np.bool_)
    nothing = (False, scalars, values, offsets)
    size = len(data)
    i = 0
    for line in range(lines):
        seen[:] = False
        i = _skip_space(data, i, size)
        if i >= size or data[i] != _OPEN_OBJECT:
            return nothing
        i += 1
        for pair in range(n_keys):
            i = _skip_space(data, i, size)
            if i >= size or data[i] != _QUOTE:
                return nothing
            stop = i + 1
            while stop < size and data[stop] != _QUOTE:
                if data[stop] == _BACKSLASH or data[stop] == _NEWLINE:
                    return nothing
                stop += 1
            if stop >= size:
                return nothing
            key = _matching_key(data, i + 1, stop, keys, key_lengths)
            if key < 0 or seen[key]:
                return nothing  # another key, or the same key twice
            seen[key] = True
            i = _skip_space(data, stop + 1, size)
            if i >= size or data[i] != _COLON:
                return nothing
            i = _skip_space(data, i + 1, size)
            if key < scalar_keys:
                i, number = _read_int(data, i, size)
                if i < 0:
                    return nothing
                scalars[key, line] = number
            else:
                if i >= size or data[i] != _OPEN_ARRAY:
                    return nothing
                row = key - scalar_keys
                i, counts[row] = _read_ints(data, i + 1, size, values[row], counts[row], 1)
                if i < 0:
                    return nothing
            i = _skip_space(data, i, size)
            # a comma after every pair but the last, whose object ends there
            if i >= size or data[i] != (_COMMA if pair < n_keys - 1 else _CLOSE_OBJECT):
                return nothing
            i += 1
        i = _skip_space(data, i, size)
        if i < size:
            if data[i] != _NEWLINE:
                return nothing
            i += 1
        for row in range(n_lists):
            offsets[row, line + 1] = counts[row]
    if i < size:
        return nothing  # more lines than counted
    return True, scalars, values, offsets
