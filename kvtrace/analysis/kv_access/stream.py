"""Read the access stream of ``dsa_access(B, granularity)`` in order, as item keys.

A *unit* is what one cache sees: a request (scope ``request``) or a whole run (scope
``run``).  Units arrive as consecutive `Piece` objects, so a run's stream is never held
whole; a consumer that needs a unit at once concatenates its pieces.

Order (the contract of ``queries/dsa_access.sql``): runs by id; within a run, for scope
``request`` each request's steps ascending, then layers, then block ids; for scope
``run`` the batched step order (``batch_step``) where the trace has it, then request id,
else requests one after another.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from kvtrace.analysis.kv_access import Granularity, Scope
from kvtrace.errors import QueryError

_ORDER = {
    "request": "run_id, request_id, step_idx, layer_id",
    "run": "run_id, batch_step NULLS FIRST, request_id, step_idx, layer_id",
}
_BATCH_ROWS = 4096
_KEY_BITS = 62


@dataclass
class Piece:
    """Consecutive accesses of one unit (``request_id`` is None for scope ``run``)."""

    run_id: str
    request_id: int | None
    keys: np.ndarray  # item key of every access
    steps: np.ndarray  # decode step of every access (non-decreasing within a unit)
    pinned_rank: np.ndarray  # rank among the unit's pinned prefix items, -1 if not pinned


@dataclass
class RunLayout:
    """How a run's (request, layer, block) items become integer keys."""

    run_id: str
    layers: np.ndarray  # traced layer ids, ascending
    block_bits: int
    layer_bits: int
    prefix_blocks: dict[int, int]  # request -> blocks of its cached prefix region
    pinned_before: dict[int, int]  # request -> pinned items of requests with smaller ids

    @property
    def layers_per_item(self) -> int:
        return len(self.layers)

    def pinned_items(self, request_id: int | None, granularity: Granularity) -> int:
        """Pinned prefix items of a request, or of the whole run when None."""
        per_block = len(self.layers) if granularity == "layer_block" else 1
        blocks = (
            sum(self.prefix_blocks.values())
            if request_id is None
            else self.prefix_blocks.get(request_id, 0)
        )
        return blocks * per_block


def run_layouts(
    con: duckdb.DuckDBPyConnection,
    block_size: int,
    granularity: Granularity,
    runs: Sequence[str] | None = None,
) -> dict[str, RunLayout]:
    """Key layouts of every run with DSA rows (or of ``runs``), with their requests'
    prefix regions."""
    shape = con.execute(
        "SELECT run_id, max(seq_len), list(DISTINCT layer_id ORDER BY layer_id), "
        "count(DISTINCT request_id) FROM _dsa_access_rows GROUP BY run_id ORDER BY run_id"
    ).fetchall()
    if runs is not None:
        shape = [row for row in shape if row[0] in set(runs)]
    prefix = con.execute(
        "SELECT run_id, request_id, prefix_blocks FROM _dsa_access_prefix($bs) "
        "ORDER BY run_id, request_id",
        {"bs": block_size},
    ).fetchall()
    regions: dict[str, dict[int, int]] = {}
    for run_id, request_id, blocks in prefix:
        regions.setdefault(run_id, {})[request_id] = int(blocks or 0)
    layouts = {}
    for run_id, max_seq, layers, requests in shape:
        block_bits = max(int(-(-max_seq // block_size)).bit_length(), 1)
        layer_bits = max(len(layers).bit_length(), 1) if granularity == "layer_block" else 0
        if block_bits + layer_bits + max(int(requests).bit_length(), 1) > _KEY_BITS:
            raise QueryError(
                f"run {run_id} has too many (request, layer, block) items to "
                "number; ask for a larger block size"
            )
        region = regions.get(run_id, {})
        before, total = {}, 0
        for request_id in sorted(region):
            before[request_id] = total
            total += region[request_id] * (len(layers) if granularity == "layer_block" else 1)
        layouts[run_id] = RunLayout(
            run_id, np.asarray(layers, dtype=np.int64), block_bits, layer_bits, region, before
        )
    return layouts


def read_pieces(
    con: duckdb.DuckDBPyConnection,
    block_size: int,
    granularity: Granularity,
    scope: Scope,
    layouts: dict[str, RunLayout],
    requests: tuple[int, int] | None = None,
) -> Iterator[Piece]:
    """The stream of every run, unit by unit, in pieces (of the requests with ids in
    the closed range ``requests`` only, when given: a share of scope ``request``)."""
    low, high = requests if requests is not None else (None, None)
    reader = con.sql(
        f"SELECT run_id, request_id, step_idx, layer_id, batch_step, blocks "
        f"FROM dsa_access($bs, $granularity) WHERE run_id IN (SELECT unnest($runs)) "
        f"AND ($low IS NULL OR request_id BETWEEN $low AND $high) "
        f"ORDER BY {_ORDER[scope]}",
        params={
            "bs": block_size,
            "granularity": granularity,
            "runs": list(layouts),
            "low": low,
            "high": high,
        },
    ).to_arrow_reader(_BATCH_ROWS)
    ranks: dict[int, int] = {}
    current_run = None
    for batch in reader:
        for run_id, rows in _split_by_run(batch):
            if run_id != current_run:
                current_run, ranks = run_id, {}
            yield from _pieces_of(rows, layouts[run_id], granularity, scope, ranks)


def _split_by_run(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    runs = batch.column("run_id").to_pylist()
    start = 0
    for i in range(1, len(runs) + 1):
        if i == len(runs) or runs[i] != runs[start]:
            yield runs[start], batch.slice(start, i - start)
            start = i


def _pieces_of(
    rows: pa.RecordBatch,
    layout: RunLayout,
    granularity: Granularity,
    scope: Scope,
    ranks: dict[int, int],
) -> Iterator[Piece]:
    blocks = rows.column("blocks")
    lengths = np.diff(blocks.offsets.to_numpy().astype(np.int64))
    values = blocks.flatten().to_numpy(zero_copy_only=False).astype(np.int64)  # this slice
    requests = rows.column("request_id").to_numpy(zero_copy_only=False).astype(np.int64)
    steps = rows.column("step_idx").to_numpy(zero_copy_only=False).astype(np.int64)
    request_of = np.repeat(requests, lengths)
    if granularity == "layer_block":
        layer_ids = rows.column("layer_id").to_numpy(zero_copy_only=False).astype(np.int64)
        layer_of = np.repeat(np.searchsorted(layout.layers, layer_ids), lengths)
    else:
        layer_of = np.zeros(len(values), dtype=np.int64)
    for request in requests.tolist():
        ranks.setdefault(request, len(ranks))
    if scope == "run":
        rank_of = np.repeat(
            np.array([ranks[r] for r in requests.tolist()], dtype=np.int64), lengths
        )
    else:
        rank_of = np.zeros(len(values), dtype=np.int64)
    keys = (((rank_of << layout.layer_bits) | layer_of) << layout.block_bits) | values
    step_of = np.repeat(steps, lengths)
    if scope == "run":
        batch_step = rows.column("batch_step")
        if batch_step.null_count == 0:
            step_of = np.repeat(batch_step.to_numpy().astype(np.int64), lengths)
        else:  # requests one after another: a step is (request, step)
            step_of = (rank_of << 32) | step_of
    pinned = _pinned_ranks(layout, granularity, scope, requests, lengths, layer_of, values)
    if scope == "run":
        yield Piece(layout.run_id, None, keys, step_of, pinned)
        return
    cuts = np.flatnonzero(np.diff(request_of)) + 1
    for part in np.split(np.arange(len(values)), cuts):
        if len(part):
            yield Piece(
                layout.run_id, int(request_of[part[0]]), keys[part], step_of[part], pinned[part]
            )


def _pinned_ranks(
    layout: RunLayout,
    granularity: Granularity,
    scope: Scope,
    requests: np.ndarray,
    lengths: np.ndarray,
    layer_of: np.ndarray,
    blocks: np.ndarray,
) -> np.ndarray:
    """Each access's rank among its unit's pinned prefix items (block-major), else -1."""
    ids = requests.tolist()
    region = np.repeat(
        np.array([layout.prefix_blocks.get(r, 0) for r in ids], dtype=np.int64), lengths
    )
    per_block = layout.layers_per_item if granularity == "layer_block" else 1
    rank = blocks * per_block + layer_of
    if scope == "run":
        rank += np.repeat(
            np.array([layout.pinned_before.get(r, 0) for r in ids], dtype=np.int64), lengths
        )
    return np.where(blocks < region, rank, -1)
