"""Where each selected KV block is read from: HBM, a local pool or a remote pool.

A tier model sees, for every traced row, the distinct blocks the selection touched and
says, per tier, which blocks it served, the bytes and read operations that took, and
their latency.  `HbmOnly` (the default) serves everything from HBM.  `LruTiers` keeps
an LRU set of blocks in HBM and another in a local pool; a block found in neither comes
from the remote pool and is then cached.  Write your own by implementing ``fetch``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np

TIERS = ("hbm", "local_pool", "remote_pool")


@dataclass
class TierFetch:
    """One tier's share of a batch of rows."""

    hit_blocks: list[np.ndarray]
    bytes_read: np.ndarray
    read_ops: np.ndarray
    latency_us: np.ndarray  # NaN where unknown


class TierModel(Protocol):
    def fetch(self, request_ids: np.ndarray, blocks: list[np.ndarray],
              block_size: int) -> dict[str, TierFetch]:
        """Split each row's touched ``blocks`` over the tiers (keys of `TIERS`)."""
        ...


@dataclass
class TierCost:
    """Cost of reading from one tier: a fixed latency per read plus one per block."""

    op_latency_us: float = 0.0
    block_latency_us: float = 0.0


def _fetch(hits: list[np.ndarray], block_size: int, bytes_per_token: int,
           cost: TierCost | None) -> TierFetch:
    counts = np.array([len(h) for h in hits], dtype=np.int64)
    ops = (counts > 0).astype(np.int64)
    latency = (np.full(len(hits), np.nan) if cost is None
               else ops * cost.op_latency_us + counts * cost.block_latency_us)
    return TierFetch(hits, counts * block_size * bytes_per_token, ops, latency)


@dataclass
class HbmOnly:
    """Every block is an HBM hit (one read per row); latency unknown."""

    bytes_per_token: int = 0

    def fetch(self, request_ids: np.ndarray, blocks: list[np.ndarray],
              block_size: int) -> dict[str, TierFetch]:
        empty = [np.zeros(0, dtype=np.int64)] * len(blocks)
        return {
            "hbm": _fetch(blocks, block_size, self.bytes_per_token, None),
            "local_pool": _fetch(empty, block_size, self.bytes_per_token, None),
            "remote_pool": _fetch(empty, block_size, self.bytes_per_token, None),
        }


class LruTiers:
    """HBM and a local pool as LRU caches of (request, block); misses read remotely.

    A block read from the local pool moves to HBM; one read remotely lands in HBM too.
    Blocks HBM evicts fall to the local pool; what the local pool evicts is gone.
    Rows are served in the order given.
    """

    def __init__(self, hbm_blocks: int, local_blocks: int, *, bytes_per_token: int = 0,
                 costs: dict[str, TierCost] | None = None) -> None:
        self.hbm: OrderedDict = OrderedDict()
        self.local: OrderedDict = OrderedDict()
        self.hbm_blocks, self.local_blocks = hbm_blocks, local_blocks
        self.bytes_per_token = bytes_per_token
        self.costs = costs or {}

    def _admit_to_hbm(self, key: tuple[int, int]) -> None:
        self.hbm[key] = True
        self.hbm.move_to_end(key)
        while len(self.hbm) > self.hbm_blocks:
            evicted, _ = self.hbm.popitem(last=False)
            self.local[evicted] = True
            while len(self.local) > self.local_blocks:
                self.local.popitem(last=False)

    def fetch(self, request_ids: np.ndarray, blocks: list[np.ndarray],
              block_size: int) -> dict[str, TierFetch]:
        served: dict[str, list[list[int]]] = {tier: [] for tier in TIERS}
        for request, row in zip(request_ids.tolist(), blocks, strict=True):
            split: dict[str, list[int]] = {tier: [] for tier in TIERS}
            for block in row.tolist():
                key = (request, block)
                if key in self.hbm:
                    self.hbm.move_to_end(key)
                    split["hbm"].append(block)
                    continue
                if key in self.local:
                    del self.local[key]
                    split["local_pool"].append(block)
                else:
                    split["remote_pool"].append(block)
                self._admit_to_hbm(key)
            for tier in TIERS:
                served[tier].append(split[tier])
        return {tier: _fetch([np.asarray(h, dtype=np.int64) for h in served[tier]],
                             block_size, self.bytes_per_token, self.costs.get(tier))
                for tier in TIERS}
