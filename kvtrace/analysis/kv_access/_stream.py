"""Read a run's access stream in order, as item ids, a window of rows at a time.

The stream is ``dsa_access(B, granularity, sharing)`` (``queries/dsa_access.sql``) in the
order of the scope, read straight from the stored rows rather than through the macro:
each window is one query for some requests' rows (scope ``request``) or some slots' rows
(scope ``run``), without ORDER BY; the rows are put in stream order here and turned into
accesses by a compiled kernel (`kvtrace.kernels.access_items`).  A row's blocks come from
the stored ``touched_blocks`` when the block size asked for is a multiple of the stored
one (re-binned by division), else from ``selected_pos``.  Only a window is held at once,
and it reaches the caller as `Chunk` objects of at most about ``CHUNK_ACCESSES`` accesses,
never split across units.

A reader asked for ``scores`` or ``subblocks`` reads the stored positions (and scores)
whatever the block size, and gives each access its block's score (the largest of the
positions its group selected there) or the tokens each sub-block size would fetch
(`kvtrace.kernels.access_values`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from kvtrace.analysis.kv_access.plan import RunPlan
from kvtrace.errors import InputError
from kvtrace.kernels.access_items import stream_items
from kvtrace.kernels.access_values import access_scores, access_subblock_tokens

WINDOW_ROWS = 512  # stored rows a window reads at most (unless one step has more): with
# DSA's top-k of 2048 positions a row, a window holds about 1 M values (4-8 MB) per thread
CHUNK_ACCESSES = 1 << 18


@dataclass
class Chunk:
    """Consecutive accesses of one unit: request index ``unit`` (scope request) or the
    whole run (None)."""

    unit: int | None
    items: np.ndarray  # item id of each access
    slots: np.ndarray  # slot of each access, non-decreasing
    own_first: np.ndarray  # the request's first touch of the item
    steps: np.ndarray  # the plan's step of each access
    scores: np.ndarray | None = None  # each access's block score (a reader asked for them)
    tokens: np.ndarray | None = None  # per access and sub-block size: tokens fetched


@dataclass(frozen=True)
class Window:
    """A part of the run read by one query: the plan's steps [first, last] (scope
    request; steps are in stream order there) or slots [first, last] (scope run)."""

    first: int
    last: int


def windows(plan: RunPlan, requests: tuple[int, int] | None = None) -> list[Window]:
    """The windows of the run (or of its requests with indices in ``requests``), in
    stream order, each about `WINDOW_ROWS` stored rows.  Scope request cuts between
    steps, inside a request too, so that no window holds more than one step beyond the
    bound however long a request decodes."""
    if plan.spec.scope == "request":
        low, high = requests if requests is not None else (0, len(plan.requests) - 1)
        first, stop = np.searchsorted(plan.step_request, [low, high + 1])
        return _cut(plan.step_rows[first:stop], int(first))
    rows = np.bincount(plan.step_slot, plan.step_rows, plan.slot_count)
    return _cut(rows, 0)


def thread_shares(plan: RunPlan, parts: list[Window], threads: int) -> list[list[Window]]:
    """``parts`` (scope request) in at most ``threads`` consecutive shares of about equal
    rows, each cut only where a request begins: a request is simulated by one thread."""
    starts = np.array([part.first for part in parts], dtype=np.int64)
    opens_request = np.ones(len(parts), dtype=np.bool_)
    opens_request[1:] = plan.step_request[starts[1:]] != plan.step_request[starts[1:] - 1]
    rows = np.cumsum([plan.step_rows[p.first : p.last + 1].sum() for p in parts])
    cuts = np.flatnonzero(opens_request)
    wanted = np.searchsorted(rows, rows[-1] * np.arange(1, threads) / threads, side="right")
    bounds = np.unique(cuts[np.minimum(np.searchsorted(cuts, wanted), len(cuts) - 1)])
    edges = [0, *[int(b) for b in bounds if 0 < b < len(parts)], len(parts)]
    return [parts[a:b] for a, b in itertools.pairwise(edges) if b > a]


def _cut(rows: np.ndarray, offset: int) -> list[Window]:
    """Consecutive ranges of ``rows``'s entries of about WINDOW_ROWS rows each."""
    cuts: list[Window] = []
    start, total = 0, 0
    for index, count in enumerate(rows.tolist()):
        if total and total + count > WINDOW_ROWS:
            cuts.append(Window(offset + start, offset + index - 1))
            start, total = index, 0
        total += count
    if len(rows):
        cuts.append(Window(offset + start, offset + len(rows) - 1))
    return cuts


class StreamReader:
    """Reads windows of one run's stream; one per thread (it owns a cursor)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        plan: RunPlan,
        scores: bool = False,
        subblocks: tuple[int, ...] = (),
    ) -> None:
        self.con = con
        self.plan = plan
        spec = plan.spec
        self._scores = scores
        self._subblocks = np.asarray(subblocks, dtype=np.int64)
        positions = scores or bool(subblocks)
        self._from_touched = spec.block_size % plan.stored_block_size == 0 and not positions
        self._step_keys = (plan.step_request << 32) | plan.step_idx
        if spec.scope == "run":
            self._offsets, self._items = plan.block_offsets, plan.block_items
        else:  # every request numbers its blocks from 0, one request at a time
            self._offsets = np.zeros(len(plan.block_offsets), dtype=np.int64)
            self._items = np.arange(int(np.diff(plan.block_offsets).max(initial=0)))
        self._seen = np.zeros(len(self._items) * plan.layers_per_item, np.bool_)
        self._widest = int(np.diff(plan.block_offsets).max(initial=0))
        self._unit: int | None = None

    def chunks(self, window: Window) -> Iterator[Chunk]:
        """The window's accesses in stream order."""
        table, divisor = self._rows(window)
        if table.num_rows == 0:
            return
        plan = self.plan
        request = np.searchsorted(plan.requests, _ints(table, "request_id"))
        step_idx = _ints(table, "step_idx")
        step = np.searchsorted(self._step_keys, (request << 32) | step_idx)
        slot = plan.step_slot[step]
        score_values = self._aligned_scores(table) if self._scores else None
        layer = np.searchsorted(plan.layers, _ints(table, "layer_id"))
        if plan.spec.scope == "run":
            order = np.lexsort((layer, request, slot))
        else:
            order = np.lexsort((layer, step_idx, request))
        ordered_step = step[order]
        group_start = np.ones(len(order), dtype=np.bool_)
        group_start[1:] = ordered_step[1:] != ordered_step[:-1]
        lists = table.column("blocks").combine_chunks()
        offsets = lists.offsets.to_numpy().astype(np.int64)
        values = lists.values.to_numpy(zero_copy_only=False)
        lengths = np.diff(offsets)[order]
        unit_of = request[order] if plan.spec.scope == "request" else None
        for start, end in _chunk_bounds(lengths, group_start, unit_of):
            unit = int(unit_of[start]) if unit_of is not None else None
            if unit != self._unit:
                self._seen[:] = False
                self._unit = unit
            size = int(lengths[start:end].sum())
            items = np.empty(size, dtype=np.int64)
            steps = np.empty(size, dtype=np.int64)
            first = np.empty(size, dtype=np.bool_)
            n = stream_items(
                values,
                offsets,
                order[start:end],
                group_start[start:end],
                request,
                layer,
                step,
                divisor,
                self._widest,
                not plan.spec.layered,
                plan.layers_per_item,
                self._offsets,
                self._items,
                self._seen,
                items,
                steps,
                first,
            )
            chunk = Chunk(unit, items[:n], plan.step_slot[steps[:n]], first[:n], steps[:n])
            merge = not plan.spec.layered
            if score_values is not None:
                chunk.scores = np.empty(n, dtype=np.float64)
                access_scores(
                    values,
                    score_values,
                    offsets,
                    order[start:end],
                    group_start[start:end],
                    divisor,
                    self._widest,
                    merge,
                    chunk.scores,
                )
            if len(self._subblocks):
                chunk.tokens = np.empty((n, len(self._subblocks)), dtype=np.int64)
                access_subblock_tokens(
                    values,
                    offsets,
                    order[start:end],
                    group_start[start:end],
                    divisor,
                    self._widest,
                    merge,
                    self._subblocks,
                    chunk.tokens,
                )
            yield chunk

    def _aligned_scores(self, table: pa.Table) -> np.ndarray:
        """Each stored position's score, laid out like the positions' values."""
        positions = table.column("blocks").combine_chunks()
        scores = table.column("scores").combine_chunks()
        lengths = np.diff(positions.offsets.to_numpy())
        score_offsets = scores.offsets.to_numpy().astype(np.int64)
        if scores.null_count or not np.array_equal(np.diff(score_offsets), lengths):
            raise InputError(_NO_SCORES.format(run=self.plan.run_id))
        values = np.asarray(scores.values.to_numpy(zero_copy_only=False), dtype=np.float64)
        offsets = positions.offsets.to_numpy().astype(np.int64)
        aligned = np.zeros(len(positions.values), dtype=np.float64)
        shift = np.repeat(score_offsets[:-1] - offsets[:-1], lengths)
        at = np.arange(int(offsets[0]), int(offsets[-1]), dtype=np.int64)
        aligned[at] = values[at + shift]
        if np.isnan(aligned[at]).any():
            raise InputError(_NO_SCORES.format(run=self.plan.run_id))
        return aligned

    def _rows(self, window: Window) -> tuple[pa.Table, int]:
        """The window's stored rows (request_id, step_idx, layer_id, blocks), and what
        divides a stored value into a block id."""
        plan = self.plan
        spec = plan.spec
        if self._from_touched:
            table = self._query(window, "touched_blocks")
            if table.column("blocks").null_count == 0:
                return table, spec.block_size // plan.stored_block_size
            self._from_touched = False  # written before kvtrace stored them
        return self._query(window, "selected_pos"), spec.block_size

    def _query(self, window: Window, column: str) -> pa.Table:
        plan = self.plan
        params = {"run": plan.run_id, "stored": plan.stored_block_size}
        scores = ", s.scores" if self._scores else ""
        base = (
            f"SELECT s.request_id, s.step_idx, s.layer_id, s.{column} AS blocks{scores} "
            "FROM dsa_steps AS s WHERE s.run_id = $run AND s.block_size = $stored"
        )
        if plan.spec.scope == "request":
            first, last = window.first, window.last
            params["low"] = int(plan.requests[plan.step_request[first]])
            params["high"] = int(plan.requests[plan.step_request[last]])
            params["low_step"] = int(plan.step_idx[first])
            params["high_step"] = int(plan.step_idx[last])
            steps = plan.step_idx[first : last + 1]  # a range row groups can be skipped by
            params["min_step"], params["max_step"] = int(steps.min()), int(steps.max())
            return self.con.sql(
                base + " AND s.request_id BETWEEN $low AND $high "
                "AND s.step_idx BETWEEN $min_step AND $max_step "
                "AND (s.request_id > $low OR s.step_idx >= $low_step) "
                "AND (s.request_id < $high OR s.step_idx <= $high_step)",
                params=params,
            ).to_arrow_table()
        chosen = (plan.step_slot >= window.first) & (plan.step_slot <= window.last)
        request_ids = plan.requests[plan.step_request[chosen]]
        steps = plan.step_idx[chosen]
        ids, first_step, last_step = _step_ranges(request_ids, steps)
        params["low"], params["high"] = int(ids[0]), int(ids[-1])
        params["min_step"], params["max_step"] = int(steps.min()), int(steps.max())
        each = " OR ".join(
            f"(s.request_id = {r} AND s.step_idx BETWEEN {lo} AND {hi})"
            for r, lo, hi in zip(ids.tolist(), first_step.tolist(), last_step.tolist(), strict=True)
        )
        return self.con.sql(
            base + " AND s.request_id BETWEEN $low AND $high "
            f"AND s.step_idx BETWEEN $min_step AND $max_step AND ({each})",
            params=params,
        ).to_arrow_table()


_NO_SCORES = (
    "run {run} has DSA rows without scores (or with scores not aligned with the selected "
    "positions), so policy score cannot rank its blocks: trace every score with each top-k "
    "(the tracer's scores='full'), or choose another policy"
)


def check_scores(con: duckdb.DuckDBPyConnection, plan: RunPlan) -> None:
    """One sentence when a row of the run's stream has no scores aligned with its
    positions."""
    ((lacking,),) = con.sql(
        "SELECT count(*) FROM dsa_steps WHERE run_id = $run AND block_size = $stored "
        "AND (scores IS NULL OR len(scores) <> len(selected_pos))",
        params={"run": plan.run_id, "stored": plan.stored_block_size},
    ).fetchall()
    if lacking:
        raise InputError(_NO_SCORES.format(run=plan.run_id))


def _step_ranges(
    request_ids: np.ndarray, steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's first and last step among the window's (request id, step) pairs."""
    ids, inverse = np.unique(request_ids, return_inverse=True)
    first = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(ids), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, inverse, steps)
    np.maximum.at(last, inverse, steps)
    return ids, first, last


def _ints(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _chunk_bounds(
    lengths: np.ndarray, group_start: np.ndarray, unit_of: np.ndarray | None
) -> Iterator[tuple[int, int]]:
    """Ranges of ordered rows of about CHUNK_ACCESSES accesses, cut where a group begins
    and always where a unit (``unit_of``, when given) begins."""
    rows = len(lengths)
    if unit_of is None:
        bounds = [0, rows]
    else:
        new_unit = np.ones(rows, dtype=bool)
        new_unit[1:] = unit_of[1:] != unit_of[:-1]
        bounds = [*np.flatnonzero(new_unit).tolist(), rows]
    total = np.concatenate(([0], np.cumsum(lengths)))
    for first, stop in itertools.pairwise(bounds):
        start = first
        while start < stop:
            end = int(np.searchsorted(total, total[start] + CHUNK_ACCESSES, side="right")) - 1
            end = min(max(end, start + 1), stop)
            while end < stop and not group_start[end]:
                end += 1
            yield start, end
            start = end
