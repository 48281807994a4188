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

# DeepSeek-V3.2's KV cache for its sparse attention (FlashMLA's FP8 sparse layout), per
# token and layer: 512 FP8 bytes of the compressed latent, 4 FP32 scales (16 bytes) and
# the 64-dimensional RoPE key in BF16 (128 bytes).
DEEPSEEK_V32_BYTES_PER_TOKEN = 656
DEFAULT_TIERS = ("hbm:4096:3000:0", "host:65536:50:5", "remote:inf:20:30")
