"""KV cache bytes per token of common models: what turns a byte budget into blocks.

Each entry is the bytes one token's KV cache takes across all layers, from the model's
``config.json`` on Hugging Face (``num_hidden_layers``, ``num_key_value_heads``, the head
size: ``head_dim``, else ``hidden_size / num_attention_heads``) and the cache's number
format.  Grouped-query (and multi-head) attention in BF16/FP16: layers x KV heads x head
size x 2 (K and V) x 2 bytes.  DeepSeek's MLA caches one latent per token and layer
instead of K and V.  A model is named as its Hugging Face repository is, in lower case,
with or without the organisation, ``-Instruct`` or ``-hf`` (``meta-llama/Llama-3.1-8B-
Instruct`` is ``llama-3.1-8b``); `KNOWN_AS` gives the id kvcache-simulator's calculator
uses for the same model, which the tests check the bytes against.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtrace.errors import QueryError

HF = "https://huggingface.co"
BF16_BYTES = 2


@dataclass(frozen=True)
class KvLayout:
    name: str
    bytes_per_token: int
    how: str  # the arithmetic, for the docs
    source: str


def _gqa(name: str, layers: int, kv_heads: int, head_dim: int, repo: str) -> KvLayout:
    """A model whose every layer caches K and V of ``kv_heads`` heads, in BF16."""
    return KvLayout(
        name,
        layers * kv_heads * head_dim * 2 * BF16_BYTES,
        f"{layers} layers x {kv_heads} KV heads x {head_dim} x 2 (K, V) x 2 B (BF16)",
        f"{HF}/{repo}/blob/main/config.json",
    )


def _mla(name: str, layers: int, repo: str) -> KvLayout:
    """DeepSeek-V3's multi-head latent attention: a 512-wide latent and a 64-wide RoPE
    key per token and layer, in BF16."""
    return KvLayout(
        name,
        layers * (512 + 64) * BF16_BYTES,
        f"{layers} layers x (512 latent + 64 RoPE) x 2 B (BF16 MLA)",
        f"{HF}/{repo}/blob/main/config.json",
    )


LAYOUTS = (
    KvLayout(
        "deepseek-v3.2",
        61 * (656 + 132),
        "61 layers x (656 B FlashMLA FP8 sparse-MLA entry: 512 B FP8 latent, 16 B scales, "
        "128 B BF16 RoPE key; + 132 B Lightning Indexer key: 128 B FP8, 4 B FP32 scale)",
        "huggingface.co/deepseek-ai/DeepSeek-V3.2 config.json; FlashMLA's FP8 KV layout",
    ),
    _mla("deepseek-v3", 61, "deepseek-ai/DeepSeek-V3"),
    _mla("deepseek-r1", 61, "deepseek-ai/DeepSeek-R1"),
    _gqa("llama-2-7b", 32, 32, 128, "meta-llama/Llama-2-7b-hf"),
    _gqa("llama-2-70b", 80, 8, 128, "meta-llama/Llama-2-70b-hf"),
    _gqa("codellama-34b", 48, 8, 128, "codellama/CodeLlama-34b-Instruct-hf"),
    _gqa("llama-3-8b", 32, 8, 128, "meta-llama/Meta-Llama-3-8B"),
    _gqa("llama-3-70b", 80, 8, 128, "meta-llama/Meta-Llama-3-70B"),
    _gqa("llama-3.1-8b", 32, 8, 128, "meta-llama/Llama-3.1-8B"),
    _gqa("llama-3.1-70b", 80, 8, 128, "meta-llama/Llama-3.1-70B"),
    _gqa("llama-3.1-405b", 126, 8, 128, "meta-llama/Llama-3.1-405B"),
    _gqa("llama-3.2-1b", 16, 8, 64, "meta-llama/Llama-3.2-1B"),
    _gqa("llama-3.2-3b", 28, 8, 128, "meta-llama/Llama-3.2-3B"),
    _gqa("llama-3.3-70b", 80, 8, 128, "meta-llama/Llama-3.3-70B-Instruct"),
    _gqa("qwen-72b", 80, 64, 128, "Qwen/Qwen-72B"),
    _gqa("qwen2.5-7b", 28, 4, 128, "Qwen/Qwen2.5-7B-Instruct"),
    _gqa("qwen2.5-14b", 48, 8, 128, "Qwen/Qwen2.5-14B-Instruct"),
    _gqa("qwen2.5-32b", 64, 8, 128, "Qwen/Qwen2.5-32B-Instruct"),
    _gqa("qwen2.5-72b", 80, 8, 128, "Qwen/Qwen2.5-72B-Instruct"),
    _gqa("qwen2.5-coder-32b", 64, 8, 128, "Qwen/Qwen2.5-Coder-32B-Instruct"),
    _gqa("qwen3-0.6b", 28, 8, 128, "Qwen/Qwen3-0.6B"),
    _gqa("qwen3-1.7b", 28, 8, 128, "Qwen/Qwen3-1.7B"),
    _gqa("qwen3-4b", 36, 8, 128, "Qwen/Qwen3-4B"),
    _gqa("qwen3-8b", 36, 8, 128, "Qwen/Qwen3-8B"),
    _gqa("qwen3-14b", 40, 8, 128, "Qwen/Qwen3-14B"),
    _gqa("qwen3-32b", 64, 8, 128, "Qwen/Qwen3-32B"),
    _gqa("qwen3-30b-a3b", 48, 4, 128, "Qwen/Qwen3-30B-A3B"),
    _gqa("qwen3-235b-a22b", 94, 4, 128, "Qwen/Qwen3-235B-A22B"),
    _gqa("internlm-20b", 60, 40, 128, "internlm/internlm-20b"),
    _gqa("phi-2", 32, 32, 80, "microsoft/phi-2"),
    _gqa("cohere-command-r-v01", 40, 64, 128, "CohereLabs/c4ai-command-r-v01"),
    _gqa("cohere-command-r-plus", 64, 8, 128, "CohereLabs/c4ai-command-r-plus"),
    _gqa("minimax-m2", 62, 8, 128, "MiniMaxAI/MiniMax-M2"),
)
BY_NAME = {layout.name: layout for layout in LAYOUTS}
KNOWN_AS = {  # kvcache-simulator's id where it differs from kvtrace's name
    "llama-3-8b": "llama-3.1-8b",
    "llama-3-70b": "llama-3.1-70b",
}
_SUFFIXES = ("-instruct-hf", "-instruct", "-hf")


def layout_named(model: str) -> KvLayout:
    """The layout of ``model`` (a name of `LAYOUTS`, or its Hugging Face repository), or
    one sentence listing the names known."""
    key = model.strip().lower().rsplit("/", 1)[-1]
    for suffix in _SUFFIXES:
        key = key.removesuffix(suffix)
    layout = BY_NAME.get(key) or BY_NAME.get(key.removeprefix("meta-"))
    if layout is None:
        raise QueryError(
            f"no KV layout is known for {model!r}; known: {', '.join(BY_NAME)} "
            "(or give bytes_per_token)"
        )
    return layout


def bytes_per_token(model: str) -> int:
    """The KV bytes per token of ``model`` (see `layout_named`), or one sentence."""
    return layout_named(model).bytes_per_token
