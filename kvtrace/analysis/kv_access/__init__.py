"""KV access analytics: what a tiered KV cache would serve, from a DSA trace.

`plan` reads what a run's stream needs besides its accesses (requests, the item each
block is, when each step runs); `stream` reads the access stream that
``dsa_access(B, granularity, sharing)`` defines (in ``queries/dsa_access.sql``) in order,
as item ids; `simulate` runs the cache policies (`kvtrace.analysis.policies`) over it
into hit curves, reuse histograms and tier levels; `curves` and `whatif` turn those into
the rows of ``dsa_hit_curve``, ``dsa_reuse`` and ``kvtrace whatif``; `recompute` weighs
fetching a prefix against computing it again.
"""

from typing import Literal

__all__ = [
    "DEEPSEEK_V32_BYTES_PER_TOKEN",
    "DEFAULT_TIERS",
    "DEFAULT_TPOT_MS",
    "DEFAULT_WINDOW_TOKENS",
    "GRANULARITIES",
    "SCOPES",
    "SHARINGS",
    "Granularity",
    "Policy",
    "Scope",
    "Sharing",
]

Granularity = Literal["block", "layer_block"]
Scope = Literal["request", "run"]
# The block what-if's policies as a type for option parsers: the names
# `kvtrace.analysis.policies.block_policies` lists, in its order (a test holds them equal).
Policy = Literal["lru", "opt", "fifo", "pin_prefix", "sliding_window", "lfu", "score"]
Sharing = Literal["private", "content"]

GRANULARITIES: tuple[Granularity, ...] = ("block", "layer_block")
SCOPES: tuple[Scope, ...] = ("request", "run")
SHARINGS: tuple[Sharing, ...] = ("private", "content")

# DeepSeek-V3.2's KV cache for its sparse attention (FlashMLA's FP8 sparse layout), per
# token and layer: 512 FP8 bytes of the compressed latent, 4 FP32 scales (16 bytes) and
# the 64-dimensional RoPE key in BF16 (128 bytes).
DEEPSEEK_V32_BYTES_PER_TOKEN = 656
DEFAULT_TIERS = ("hbm:4096:3000:0", "host:65536:50:5", "remote:inf:20:30")
DEFAULT_WINDOW_TOKENS = 2048  # sliding_window: DeepSeek-V3.2's top-k, the tokens a step reads
DEFAULT_TPOT_MS = 30.0  # decode time per step when a workload's arrivals are replayed
