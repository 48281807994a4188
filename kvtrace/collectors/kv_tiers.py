"""Where each selected KV block is read from: HBM, a local pool or a remote pool.

A tier model sees, for every traced row, the distinct blocks the selection touched and
says, per tier, which blocks it served, the bytes and read operations that took, and
their latency.  `HbmOnly` (the default) serves everything from HBM.  `LruTiers` keeps
an LRU set of blocks in HBM and another in a local pool; a block found in neither comes
from the remote pool and is then cached.  Write your own by implementing ``fetch``.

`LruTiers` is the what-if's model (`kvtrace.analysis.kv_access`) run live: the same access stream
(scope ``run``, batched step order) and the same stack-distance kernel, so a traced run
and ``kvtrace whatif --policy lru --scope run`` on it agree block for block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from kvtrace.kernels.cache_sim import ItemIds, LruStack
from kvtrace.warehouse.schema.dsa import TIERS

Granularity = Literal["block", "layer_block"]


@dataclass
class TierFetch:
    """One tier's share of a batch of rows."""

    hit_blocks: list[np.ndarray]
    bytes_read: np.ndarray
    read_ops: np.ndarray
    latency_us: np.ndarray  # NaN where unknown


class TierModel(Protocol):
    def fetch(
        self,
        batch_steps: np.ndarray,
        request_ids: np.ndarray,
        layer_ids: np.ndarray,
        blocks: list[np.ndarray],
        block_size: int,
    ) -> dict[str, TierFetch]:
        """Split each row's touched ``blocks`` over the tiers (keys of `TIERS`).

        Rows come with their batched step number, request and layer, in any order.
        """
        ...


@dataclass
class TierCost:
    """Cost of reading from one tier: a fixed latency per read plus one per block."""

    op_latency_us: float = 0.0
    block_latency_us: float = 0.0


def _fetch(
    hits: list[np.ndarray], block_size: int, bytes_per_token: int, cost: TierCost | None
) -> TierFetch:
    counts = np.array([len(h) for h in hits], dtype=np.int64)
    ops = (counts > 0).astype(np.int64)
    latency = (
        np.full(len(hits), np.nan)
        if cost is None
        else ops * cost.op_latency_us + counts * cost.block_latency_us
    )
    return TierFetch(hits, counts * block_size * bytes_per_token, ops, latency)


@dataclass
class HbmOnly:
    """Every block is an HBM hit (one read per row); latency unknown."""

    bytes_per_token: int = 0

    def fetch(
        self,
        batch_steps: np.ndarray,
        request_ids: np.ndarray,
        layer_ids: np.ndarray,
        blocks: list[np.ndarray],
        block_size: int,
    ) -> dict[str, TierFetch]:
        empty = [np.zeros(0, dtype=np.int64)] * len(blocks)
        return {
            "hbm": _fetch(blocks, block_size, self.bytes_per_token, None),
            "local_pool": _fetch(empty, block_size, self.bytes_per_token, None),
            "remote_pool": _fetch(empty, block_size, self.bytes_per_token, None),
        }


class LruTiers:
    """HBM and a local pool as one LRU stack of items; misses are read remotely.

    The ``hbm_blocks`` most recently used items are in HBM, the next ``local_blocks`` in
    the local pool (a block HBM evicts falls to the local pool, one read from it moves
    back to HBM); everything else, first touches included, comes from the remote pool.

    Items follow the what-if's access stream: with ``granularity="block"`` an item is
    (request, block) and a step reads the union of its layers' blocks once; with
    ``"layer_block"`` it is (request, layer, block).  Accesses run in batched step
    order, then request id, then layer, then block id.  Each row reports its own blocks
    under the tier that served them at that step.
    """

    def __init__(
        self,
        hbm_blocks: int,
        local_blocks: int,
        *,
        bytes_per_token: int = 0,
        costs: dict[str, TierCost] | None = None,
        granularity: Granularity = "block",
    ) -> None:
        self.limits = np.array([hbm_blocks, hbm_blocks + local_blocks], dtype=np.int64)
        self.bytes_per_token = bytes_per_token
        self.costs = costs or {}
        self.granularity = granularity
        self._stack = LruStack()
        self._items = ItemIds()
        self._request_rank: dict[int, int] = {}

    def fetch(
        self,
        batch_steps: np.ndarray,
        request_ids: np.ndarray,
        layer_ids: np.ndarray,
        blocks: list[np.ndarray],
        block_size: int,
    ) -> dict[str, TierFetch]:
        for request in request_ids.tolist():
            self._request_rank.setdefault(request, len(self._request_rank))
        rank = np.array([self._request_rank[r] for r in request_ids.tolist()], dtype=np.int64)
        lengths = np.array([len(b) for b in blocks], dtype=np.int64)
        values = (np.concatenate(blocks) if len(blocks) else np.zeros(0)).astype(np.int64)
        row_of = np.repeat(np.arange(len(blocks)), lengths)
        layer = (
            layer_ids.astype(np.int64)
            if self.granularity == "layer_block"
            else np.zeros(len(blocks), dtype=np.int64)
        )
        # one sort key per (row, block) that orders the stream and names its item
        item = (rank[row_of] << 47) | (layer[row_of] << 32) | values
        order_key = np.stack([values, layer[row_of], request_ids[row_of], batch_steps[row_of]])
        order = np.lexsort(order_key)
        stream_keys = np.stack([batch_steps[row_of][order], item[order]])
        first = np.ones(len(order), dtype=bool)  # an item once per step
        first[1:] = (stream_keys[:, 1:] != stream_keys[:, :-1]).any(axis=0)
        distances = self._stack.distances(self._items.ids(item[order][first]))
        tier_of_access = np.where(
            distances < 0, 2, np.searchsorted(self.limits, distances, side="right")
        )
        tier_sorted = tier_of_access[np.cumsum(first) - 1]
        tier = np.empty(len(order), dtype=np.int64)
        tier[order] = tier_sorted
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        served: dict[str, list[np.ndarray]] = {name: [] for name in TIERS}
        for row in range(len(blocks)):
            row_blocks = values[offsets[row] : offsets[row + 1]]
            row_tier = tier[offsets[row] : offsets[row + 1]]
            for index, name in enumerate(TIERS):
                served[name].append(row_blocks[row_tier == index])
        return {
            name: _fetch(served[name], block_size, self.bytes_per_token, self.costs.get(name))
            for name in TIERS
        }
