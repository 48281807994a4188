"""KV cache bytes per token of common models: what turns a byte budget into blocks.

Each entry is the bytes one token's KV cache takes across all layers, from the model's
``config.json`` on Hugging Face (layers, KV heads, head size) and the cache's number
format.  Grouped-query attention in BF16: layers x KV heads x head size x 2 (K and V) x
2 bytes.  DeepSeek's MLA caches one latent per token and layer instead of K and V.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtrace.errors import QueryError


@dataclass(frozen=True)
class KvLayout:
    name: str
    bytes_per_token: int
    how: str  # the arithmetic, for the docs
    source: str


LAYOUTS = (
    KvLayout(
        "deepseek-v3.2",
        61 * (656 + 132),
        "61 layers x (656 B FlashMLA FP8 sparse-MLA entry: 512 B FP8 latent, 16 B scales, "
        "128 B BF16 RoPE key; + 132 B Lightning Indexer key: 128 B FP8, 4 B FP32 scale)",
        "huggingface.co/deepseek-ai/DeepSeek-V3.2 config.json; FlashMLA's FP8 KV layout",
    ),
    KvLayout(
        "deepseek-v3",
        61 * (512 + 64) * 2,
        "61 layers x (512 latent + 64 RoPE) x 2 B (BF16 MLA)",
        "huggingface.co/deepseek-ai/DeepSeek-V3 config.json",
    ),
    KvLayout(
        "llama-3-8b",
        32 * 8 * 128 * 2 * 2,
        "32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B (BF16)",
        "huggingface.co/meta-llama/Llama-3.1-8B config.json",
    ),
    KvLayout(
        "llama-3-70b",
        80 * 8 * 128 * 2 * 2,
        "80 layers x 8 KV heads x 128 x 2 (K, V) x 2 B (BF16)",
        "huggingface.co/meta-llama/Llama-3.1-70B config.json",
    ),
    KvLayout(
        "qwen3-8b",
        36 * 8 * 128 * 2 * 2,
        "36 layers x 8 KV heads x 128 x 2 (K, V) x 2 B (BF16)",
        "huggingface.co/Qwen/Qwen3-8B config.json",
    ),
    KvLayout(
        "qwen3-32b",
        64 * 8 * 128 * 2 * 2,
        "64 layers x 8 KV heads x 128 x 2 (K, V) x 2 B (BF16)",
        "huggingface.co/Qwen/Qwen3-32B config.json",
    ),
    KvLayout(
        "qwen3-235b-a22b",
        94 * 4 * 128 * 2 * 2,
        "94 layers x 4 KV heads x 128 x 2 (K, V) x 2 B (BF16)",
        "huggingface.co/Qwen/Qwen3-235B-A22B config.json",
    ),
)
BY_NAME = {layout.name: layout for layout in LAYOUTS}


def bytes_per_token(model: str) -> int:
    """The KV bytes per token of ``model`` (a name of `LAYOUTS`), or one sentence."""
    layout = BY_NAME.get(model.lower())
    if layout is None:
        raise QueryError(
            f"no KV layout is known for {model!r}; known: {', '.join(BY_NAME)} "
            "(or give bytes_per_token)"
        )
    return layout.bytes_per_token
