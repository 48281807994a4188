"""The cache policies kvtrace simulates: one entry each, from which every list of names,
every check and every simulator's choice of pass is derived.

A policy runs in up to three simulators:

- the block what-if (`kvtrace.analysis.kv_access`: ``dsa_hit_curve``, ``dsa_reuse``,
  ``kvtrace whatif``), over a DSA run's access stream, by one of four unit passes
  (`BlockPass`), with its tiers counted the pass's way;
- the prefix cache (`kvtrace.analysis.prefix_cache`: ``workload_prefix_hit_curve``,
  ``kvtrace prefix-curve``) under the semantics it serves (``block``: a block pool
  naming blocks by id; ``prefix``: vLLM's hash-chained pool or SGLang's radix tree), by
  one of three passes (`PrefixPass`);
- the replay of an engine's own KV cache (``kv_cache_fidelity``), which runs the prefix
  cache under semantics ``prefix``.

The kernels (`kvtrace.kernels.capacity_sim`, `kvtrace.kernels.prefix_sim`,
`kvtrace.kernels.priority_sim`) know no policy names: an entry names the kernel function
it runs, loaded on first use (numba is not imported until a simulation runs).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "POLICIES",
    "BlockPass",
    "CachePolicy",
    "Kernel",
    "PrefixPass",
    "Priority",
    "block_policies",
    "engine_replay_policies",
    "policy_named",
    "prefix_policies",
]

BlockPass = Literal["stack_distance", "pinned_stack", "per_capacity", "priority"]
"""How the block what-if simulates a unit: ``stack_distance``, one LRU stack-distance pass
for every capacity (tiers: the exclusive LRU hierarchy read off the distances);
``pinned_stack``, the pinned prefix items apart and LRU over the rest; ``per_capacity``,
the unit's stream gathered and the policy's kernel run once per capacity (tiers: live in
`kvtrace.kernels.cache_sim.TierCache`, or at the end for a policy that knows the
future); ``priority``, every capacity simulated at once by
`kvtrace.kernels.priority_sim` (the policy's `Priority` ranks the items, ties least
recently used; tiers: the caches at the cumulative capacities, which nest)."""

Priority = Literal["frequency", "score", "window"]
"""What a ``priority`` pass evicts first: the fewest accesses since the unit's stream
began (``frequency``), the lowest score at the latest access (``score``), an item outside
every decoding request's window of recent tokens (``window``)."""

PrefixPass = Literal["stack_distance", "hash_chain", "radix_tree"]
"""How the prefix cache simulates under semantics ``prefix``: ``stack_distance``, one pass
of leading LRU distances for every capacity; ``hash_chain``, vLLM's pool per capacity;
``radix_tree``, SGLang's radix tree per capacity.  Under semantics ``block`` a policy
other than ``stack_distance`` runs its `CachePolicy.capacity_kernel`."""


@dataclass(frozen=True)
class Kernel:
    """A kernel function named by module and name, imported on its first call."""

    module: str
    name: str

    def __call__(self, *arguments: Any) -> np.ndarray:
        found: np.ndarray = getattr(importlib.import_module(self.module), self.name)(*arguments)
        return found


_CAPACITY_SIM = "kvtrace.kernels.capacity_sim"


@dataclass(frozen=True)
class CachePolicy:
    """One cache policy and the simulator passes it has (None: not in that simulator)."""

    name: str
    description: str
    block_pass: BlockPass | None = None
    prefix_semantics: tuple[str, ...] = ()  # the prefix-cache semantics it serves
    prefix_pass: PrefixPass | None = None
    capacity_kernel: Kernel | None = None  # (ids, n_items, capacity) -> hit per access
    knows_future: bool = False  # offline: no arrival probes, tiers from its final masks
    engine_replay: bool = False  # kv_cache_fidelity replays an engine's pool with it
    priority: Priority | None = None  # what a priority pass ranks items by


POLICIES: tuple[CachePolicy, ...] = (
    CachePolicy(
        "lru",
        "least recently used; every capacity from one stack-distance pass",
        block_pass="stack_distance",
        prefix_semantics=("block", "prefix"),
        prefix_pass="stack_distance",
        engine_replay=True,
    ),
    CachePolicy(
        "opt",
        "Belady's MIN: evicts what is needed again last (a ceiling no online policy beats)",
        block_pass="per_capacity",
        prefix_semantics=("block", "prefix"),
        prefix_pass="radix_tree",
        capacity_kernel=Kernel(_CAPACITY_SIM, "opt_hits"),
        knows_future=True,
    ),
    CachePolicy(
        "fifo",
        "first in, first out: evicts the oldest inserted item, a hit is not refreshed",
        block_pass="per_capacity",
        prefix_semantics=("block", "prefix"),
        prefix_pass="hash_chain",
        capacity_kernel=Kernel(_CAPACITY_SIM, "fifo_hits"),
        engine_replay=True,
    ),
    CachePolicy(
        "pin_prefix",
        "each unit's prefix-cache hits pinned from the start, LRU over the rest",
        block_pass="pinned_stack",
    ),
    CachePolicy(
        "sliding_window",
        "the blocks holding each decoding request's last W tokens stay; LRU over the rest "
        "(and over the windows' blocks when they alone fill the cache)",
        block_pass="priority",
        priority="window",
    ),
    CachePolicy(
        "lfu",
        "least frequently used: evicts the item with the fewest accesses since the stream "
        "began, the least recently used of those",
        block_pass="priority",
        priority="frequency",
    ),
    CachePolicy(
        "score",
        "evicts the item whose latest access had the lowest DSA score (the largest score "
        "of the positions selected in it), the least recently used of those",
        block_pass="priority",
        priority="score",
    ),
    CachePolicy(
        "radix_lru",
        "SGLang's radix tree: LRU over leaves, a child never cached without its parent",
        prefix_semantics=("prefix",),
        prefix_pass="radix_tree",
        engine_replay=True,
    ),
)

_BY_NAME = {entry.name: entry for entry in POLICIES}


def policy_named(name: str) -> CachePolicy:
    """The policy called ``name`` (`KeyError` for another name: check it first against
    one of the lists below)."""
    return _BY_NAME[name]


def block_policies() -> tuple[str, ...]:
    """The policies of the block what-if, in registry order."""
    return tuple(p.name for p in POLICIES if p.block_pass is not None)


def prefix_policies() -> tuple[str, ...]:
    """The policies of the prefix cache, in registry order."""
    return tuple(p.name for p in POLICIES if p.prefix_semantics)


def engine_replay_policies() -> tuple[str, ...]:
    """The policies ``kv_cache_fidelity`` replays an engine's pool with."""
    return tuple(p.name for p in POLICIES if p.engine_replay)
