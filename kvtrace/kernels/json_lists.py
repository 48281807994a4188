"""Lift the long integer arrays out of JSONL records in one compiled pass.

A DSA record is mostly its position list (2,048 integers, about 90 % of a 14 KB line),
and a general JSON reader spends most of its time on it.  `lift_int_lists` reads the
named top-level arrays of every line straight into integer buffers and writes the line
again with ``null`` in their place, so that Arrow's reader parses only the small rest.

It handles only what is plainly valid: each named key at most once per line, written
without escapes, holding an array of JSON integers of at most 18 digits.  Anything else
on any line (a float, a ``null`` inside or instead of the array, a line cut inside the
array, a key escaped or repeated) makes it give up on the whole chunk, which the caller
then parses as before: records outside that plain shape are checked exactly as they
always were.  Keys are matched as object keys at the top level only (never inside a
string or a nested object).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_QUOTE, _BACKSLASH, _COLON, _COMMA = 34, 92, 58, 44
_OPEN_OBJECT, _CLOSE_OBJECT, _OPEN_ARRAY, _CLOSE_ARRAY = 123, 125, 91, 93
_MINUS, _ZERO, _NEWLINE = 45, 48, 10
_NULL = np.frombuffer(b"null", dtype=np.uint8)


def key_table(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The keys as a zero-padded byte matrix and their lengths, for `lift_int_lists`."""
    width = max(len(key) for key in keys)
    table = np.zeros((len(keys), width), dtype=np.uint8)
    for row, key in enumerate(keys):
        table[row, : len(key)] = np.frombuffer(key, dtype=np.uint8)
    return table, np.array([len(key) for key in keys], dtype=np.int64)


@njit(cache=True, nogil=True)
def _skip_space(data: np.ndarray, i: int, end: int) -> int:
    """The position of the first byte from ``i`` on that is not a space, tab or carriage
    return (a newline ends the line, so it is never skipped)."""
    while i < end and (data[i] == 32 or data[i] == 9 or data[i] == 13):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _copy(source: np.ndarray, start: int, stop: int, target: np.ndarray, at: int) -> int:
    """Copy ``source[start:stop]`` to ``target`` at ``at``; the position after it."""
    for i in range(start, stop):
        target[at] = source[i]
        at += 1
    return at


@njit(cache=True, nogil=True)
def _matching_key(
    data: np.ndarray, start: int, stop: int, keys: np.ndarray, key_lengths: np.ndarray
) -> int:
    """The row of ``keys`` equal to ``data[start:stop]``, else -1."""
    length = stop - start
    for k in range(len(key_lengths)):
        if key_lengths[k] != length:
            continue
        same = True
        for j in range(length):
            if data[start + j] != keys[k, j]:
                same = False
                break
        if same:
            return k
    return -1


@njit(cache=True, nogil=True)
def _read_ints(
    data: np.ndarray, j: int, size: int, out: np.ndarray, count: int, keep: int
) -> tuple[int, int]:
    """Read the integers of the array whose ``[`` was just passed into ``out`` from
    ``count`` on; ``keep`` 0 checks them and keeps nothing (``out[count]`` is written
    over and over, so ``out`` must hold one more than it is given).

    Returns the position after the ``]`` and the new count; the position is -1 when the
    array is not plain integers.
    """
    j = _skip_space(data, j, size)
    if j < size and data[j] == _CLOSE_ARRAY:
        return j + 1, count
    while j < size:
        negative = data[j] == _MINUS
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
            return -1, count  # not an integer, too long for int64, a leading zero
        out[count] = -number if negative else number
        count += keep
        if j < size and data[j] == _COMMA:  # compact JSON: no space before the comma
            j = _skip_space(data, j + 1, size)
            continue
        j = _skip_space(data, j, size)
        if j >= size:
            break
        if data[j] == _COMMA:
            j = _skip_space(data, j + 1, size)
            continue
        if data[j] == _CLOSE_ARRAY:
            return j + 1, count
        break
    return -1, count


@njit(cache=True, nogil=True)
def lift_int_lists(
    data: np.ndarray,
    lines: int,
    keys: np.ndarray,
    key_lengths: np.ndarray,
    lifted: int,
    commas: int,
) -> tuple[bool, np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """Lift the arrays named by ``keys`` out of the ``lines`` lines of ``data``.

    ``commas`` is the number of commas in ``data``, which bounds the integers.  The
    first ``lifted`` keys are read; the others (fields the reader ignores) are
    checked and discarded.  Returns (handled, rest, rest_length, values, offsets,
    present): the lines with ``null`` for each named array in ``rest[:rest_length]``;
    for a read key ``k``, line ``i``'s integers in
    ``values[k, offsets[k, i]:offsets[k, i + 1]]`` and ``present[k, i]`` whether the line
    has the key.  ``handled`` is False when some line is not of the plain shape (see the
    module's docstring); the other results are then meaningless.
    """
    n_keys = len(key_lengths)
    rest = np.empty(len(data) + 2 * n_keys * lines, dtype=np.uint8)  # "null" for "[]"
    # every integer but an array's last is followed by a comma, and a line holds each
    # key once; one slot more for a dropped key's values, written over
    values = np.empty((max(lifted, 1), commas + lines * n_keys + 1), dtype=np.int64)
    counts = np.zeros(n_keys, dtype=np.int64)
    offsets = np.zeros((n_keys, lines + 1), dtype=np.int64)
    present = np.zeros((n_keys, lines), dtype=np.bool_)
    nothing = (False, rest, 0, values, offsets, present)
    size = len(data)
    out = 0
    i = 0
    line = 0
    while i < size and line < lines:
        depth = 0
        in_string = False
        expect_key = False
        copied_from = i
        while i < size and data[i] != _NEWLINE:
            byte = data[i]
            if in_string:
                if byte == _BACKSLASH:
                    if i + 1 < size and data[i + 1] == _NEWLINE:
                        return nothing
                    i += 1
                elif byte == _QUOTE:
                    in_string = False
                i += 1
                continue
            if byte == _QUOTE:
                if depth == 1 and expect_key:
                    expect_key = False
                    start = i + 1
                    stop = start
                    while stop < size and data[stop] != _QUOTE:
                        if data[stop] == _BACKSLASH or data[stop] == _NEWLINE:
                            return nothing  # an escaped key, or a line cut inside one
                        stop += 1
                    if stop >= size:
                        return nothing
                    key = _matching_key(data, start, stop, keys, key_lengths)
                    i = stop + 1
                    if key < 0:
                        continue
                    if present[key, line]:
                        return nothing  # the key twice on one line
                    j = _skip_space(data, i, size)
                    if j >= size or data[j] != _COLON:
                        return nothing
                    j = _skip_space(data, j + 1, size)
                    if j >= size or data[j] != _OPEN_ARRAY:
                        return nothing
                    # copy up to the array, then null in its place
                    out = _copy(data, copied_from, j, rest, out)
                    out = _copy(_NULL, 0, 4, rest, out)
                    row = key if key < lifted else 0  # a dropped key: row 0's next
                    # free slot, written over
                    j, count = _read_ints(
                        data, j + 1, size, values[row], counts[row], 1 if key < lifted else 0
                    )
                    if j < 0:
                        return nothing
                    if key < lifted:
                        counts[key] = count
                    present[key, line] = True
                    i = j
                    copied_from = j
                    continue
                in_string = True
            elif byte in (_OPEN_OBJECT, _OPEN_ARRAY):
                depth += 1
                expect_key = byte == _OPEN_OBJECT and depth == 1
            elif byte in (_CLOSE_OBJECT, _CLOSE_ARRAY):
                depth -= 1
                expect_key = False
            elif byte == _COMMA and depth == 1:
                expect_key = True
            i += 1
        if i < size:
            i += 1  # the newline
        out = _copy(data, copied_from, i, rest, out)
        line += 1
        for k in range(n_keys):
            offsets[k, line] = counts[k]
    if line < lines or i < size:
        return nothing
    return True, rest, out, values, offsets, present
