"""The DSA writer's checks of a batch of canonical columns, row by row and vectorised.

Which rows are of another event or a prefill (skipped, counted), which lack a field or
hold an impossible value (rejected with a reason), and the position lists of the rest:
in range, as long as their score lists, sorted, without repeats.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvtrace.kernels import block_stats
from kvtrace.kernels.block_stats import PositionLists
from kvtrace.warehouse.rows._dsa_arrays import (
    INT32_MAX,
    combined,
    rows_with_null_values,
    take_lists,
)

PREFILL = "prefill record (is_decode=false)"


def dsa_topk_rows(cols: dict[str, Any], skipped: Counter[str]) -> np.ndarray:
    """Which rows are decode records of the ``dsa_topk`` event; the others are counted
    in ``skipped``."""
    event = cols["event"]
    keep = pc.fill_null(pc.equal(event, "dsa_topk"), True)
    keep = np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)
    decode = cols["is_decode"]
    if decode.null_count < len(decode):
        prefill = ~np.asarray(pc.fill_null(decode, True).to_numpy(zero_copy_only=False))
        skipped[PREFILL] += int((prefill & keep).sum())
        keep &= ~prefill
    others = int((~keep).sum()) - skipped[PREFILL]
    if others > 0:
        skipped["record of another event"] += others
    return keep


def structural_problems(cols: dict[str, Any], *, string_ids: bool, block_size: int) -> np.ndarray:
    """Each row's first problem with a field (missing, out of range), "" when none."""
    n = len(cols["layer_id"])
    reasons = np.full(n, "", dtype=object)
    id_column = "request_key" if string_ids else "request_id"
    required = {
        "request_id": cols[id_column],
        "layer_id": cols["layer_id"],
        "seq_len_current": cols["seq_len"],
        "selected_token_pos": cols["positions"],
    }
    if not string_ids:  # the nested layout derives step_idx from seq_len_current
        required["step_idx"] = cols["step_idx"]
    for name, column in required.items():
        missing = np.asarray(pc.is_null(column).to_numpy(zero_copy_only=False))
        reasons[missing & (reasons == "")] = f"missing field {name}"
    null_rows = rows_with_null_values(combined(cols["positions"]))
    reasons[null_rows[reasons[null_rows] == ""]] = "null inside selected_token_pos"
    lengths = np.asarray(
        pc.fill_null(pc.list_value_length(cols["positions"]), 1).to_numpy(zero_copy_only=False)
    )
    reasons[(lengths == 0) & (reasons == "")] = "empty selected_token_pos"
    seq_len = np.asarray(pc.fill_null(cols["seq_len"], 1).to_numpy(zero_copy_only=False))
    reasons[(seq_len <= 0) & (reasons == "")] = "seq_len_current must be positive"
    reasons[(seq_len > INT32_MAX) & (reasons == "")] = "seq_len_current is too large"
    step = np.asarray(pc.fill_null(cols["step_idx"], 0).to_numpy(zero_copy_only=False))
    reasons[(step < 0) & (reasons == "")] = "step_idx is negative"
    reasons[(step > INT32_MAX) & (reasons == "")] = "step_idx is too large"
    if not string_ids:
        request = np.asarray(pc.fill_null(cols["request_id"], 0).to_numpy(zero_copy_only=False))
        reasons[(request < 0) & (reasons == "")] = "request_id is negative"
    layer = np.asarray(pc.fill_null(cols["layer_id"], 0).to_numpy(zero_copy_only=False))
    reasons[((layer < 0) | (layer > 32767)) & (reasons == "")] = "layer_id out of range"
    size = pc.fill_null(cols["block_size"], block_size)
    size = np.asarray(size.to_numpy(zero_copy_only=False))
    reasons[(size <= 0) & (reasons == "")] = "block size must be positive"
    reasons[(size > INT32_MAX) & (reasons == "")] = "block size is too large"
    return reasons


@dataclass
class CheckedLists:
    """The position lists of a batch, checked: ``lists`` and ``score_values`` hold the
    rows without a problem, sorted; ``problems`` names each row's problem ("" when none)."""

    lists: PositionLists
    score_values: np.ndarray | None
    has_scores: np.ndarray | None  # per row of the batch, None when no row has scores
    problems: np.ndarray


def checked_lists(cols: dict[str, Any], seq_len: np.ndarray) -> CheckedLists:
    """Check, sort and pair with their scores the position lists of structurally sound rows."""
    lists = PositionLists.from_arrow(combined(cols["positions"]))
    scored = _scores(cols["scores"], lists)
    scores, has_scores = scored if scored is not None else (None, None)
    bad = np.full(len(seq_len), "", dtype=object)
    bad[block_stats.out_of_range_rows(lists, seq_len)] = "position outside [0, seq_len)"
    if scored is not None:
        given = np.asarray(
            pc.fill_null(pc.list_value_length(combined(cols["scores"])), 0).to_numpy(
                zero_copy_only=False
            )
        )
        mismatch = has_scores & (given != lists.lengths)
        bad[mismatch & (bad == "")] = "scores list and position list differ in length"
    ok = bad == ""
    if not ok.all():
        lists = take_lists(lists, ok)
        scores = take_lists(scores, ok) if scores is not None else None
    lists_sorted, score_values, repeated = block_stats.sort_lists(
        PositionLists(lists.values.astype(np.int32, copy=False), lists.offsets),
        scores.values if scores is not None else None,
    )
    dup_rows = np.flatnonzero(ok)[repeated]
    bad[dup_rows] = "duplicate positions in selected_token_pos"
    if repeated.any():
        lists_sorted = take_lists(lists_sorted, ~repeated)
        if score_values is not None and scores is not None:
            score_values = take_lists(PositionLists(score_values, scores.offsets), ~repeated).values
    return CheckedLists(lists_sorted, score_values, has_scores, bad)


def _scores(
    column: pa.ChunkedArray | pa.Array, positions: PositionLists
) -> tuple[PositionLists, np.ndarray] | None:
    """Score lists aligned with ``positions`` (NaN where a row has none) and rows with scores.

    Returns None when no row has scores.  A row whose score count differs from its
    position count is marked in the second array as well (the caller rejects it).
    """
    array = combined(column)
    if array.null_count == len(array):
        return None
    given = PositionLists.from_arrow(array)
    present = np.asarray(array.is_valid().to_numpy(zero_copy_only=False))
    usable = present & (given.lengths == positions.lengths)
    values = np.full(len(positions.values), np.nan, dtype=np.float32)
    target = usable[positions.row_ids()]
    values[target] = np.asarray(given.values, dtype=np.float32)[usable[given.row_ids()]]
    return PositionLists(values, positions.offsets), present
