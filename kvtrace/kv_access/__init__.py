"""KV access analytics: what a tiered KV cache would serve, from a DSA trace.

`stream` reads the access stream that ``dsa_access(B, granularity)`` defines (in
``queries/dsa_access.sql``) in order and packs each access into an integer item key;
`simulate` runs the cache policies over it (`kvtrace.kernels.cache_sim`) into hit curves
and reuse histograms; `whatif` splits each decode step's accesses over tiers of given
capacity, bandwidth and latency.
"""

from typing import Literal

Granularity = Literal["block", "layer_block"]
Scope = Literal["request", "run"]
Policy = Literal["lru", "opt", "fifo", "pin_prefix"]

GRANULARITIES: tuple[Granularity, ...] = ("block", "layer_block")
SCOPES: tuple[Scope, ...] = ("request", "run")
POLICIES: tuple[Policy, ...] = ("lru", "opt", "fifo", "pin_prefix")
