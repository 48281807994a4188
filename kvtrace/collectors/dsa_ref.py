"""``dsa-ref``: a small decoder that picks its decode attention the DeepSeek-V3.2 way.

Every layer has a Lightning Indexer: H index heads of dimension D, queries from a
low-rank projection ``q = W_qb(norm(W_qa x))`` whose first ``rope_dim`` dimensions are
rotated (RoPE), one key shared by all heads ``k = LayerNorm(W_k x)`` (RoPE on its first
``rope_dim`` dimensions), and head weights ``w = W_proj(x) / sqrt(H * D)``.  The index
score of query t and key s is

    I[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s])

and a decode step attends only to the top ``k = min(index_topk, seq_len)`` positions
of I.  Prefill is dense causal attention, which fills the KV and index-key caches.
The weights are seeded (same seed, same model, same traces) or loaded from a
safetensors file; decoding at temperature 0 is greedy and deterministic on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from kvtrace.errors import InputError


@dataclass(frozen=True)
class DsaRefConfig:
    """Shape of a ``dsa-ref`` model."""

    vocab_size: int = 258  # 256 bytes, BOS, EOS
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4
    index_heads: int = 4
    index_dim: int = 32
    rope_dim: int = 16
    q_lora_rank: int = 64
    index_topk: int = 2048
    max_seq_len: int = 16384
    rope_theta: float = 10000.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of the last dimension by position * theta^(-2i/d)."""
    dim = x.shape[-1]
    freqs = theta ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = positions.float()[:, None] * freqs[None, :]  # [T, dim/2]
    shape = [1] * (x.dim() - 2)
    cos = angles.cos().view(angles.shape[0], *shape, -1)
    sin = angles.sin().view(angles.shape[0], *shape, -1)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class LightningIndexer(nn.Module):
    """Scores every cached position for a query and keeps the top k."""

    def __init__(self, config: DsaRefConfig) -> None:
        super().__init__()
        self.config = config
        self.wq_a = nn.Linear(config.dim, config.q_lora_rank, bias=False)
        self.q_norm = nn.LayerNorm(config.q_lora_rank)
        self.wq_b = nn.Linear(config.q_lora_rank, config.index_heads * config.index_dim,
                              bias=False)
        self.wk = nn.Linear(config.dim, config.index_dim, bias=False)
        self.k_norm = nn.LayerNorm(config.index_dim)
        self.w_proj = nn.Linear(config.dim, config.index_heads, bias=False)

    def _rotate_front(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        r = self.config.rope_dim
        return torch.cat((rope(x[..., :r], positions, self.config.rope_theta), x[..., r:]),
                         dim=-1)

    def keys(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The shared index key of each token: [T, D]."""
        return self._rotate_front(self.k_norm(self.wk(x)), positions)

    def scores(self, x: torch.Tensor, positions: torch.Tensor,
               cached_keys: torch.Tensor) -> torch.Tensor:
        """I[t, s] for the queries ``x`` [T, dim] against ``cached_keys`` [S, D]."""
        c = self.config
        q = self.wq_b(self.q_norm(self.wq_a(x))).view(-1, c.index_heads, c.index_dim)
        q = self._rotate_front(q, positions)
        weights = self.w_proj(x) / math.sqrt(c.index_heads * c.index_dim)  # [T, H]
        logits = F.relu(torch.einsum("thd,sd->ths", q, cached_keys))  # [T, H, S]
        return torch.einsum("th,ths->ts", weights, logits)


class Block(nn.Module):
    def __init__(self, config: DsaRefConfig) -> None:
        super().__init__()
        self.config = config
        self.head_dim = config.dim // config.n_heads
        self.attn_norm = nn.LayerNorm(config.dim)
        self.wqkv = nn.Linear(config.dim, 3 * config.dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)
        self.indexer = LightningIndexer(config)
        self.mlp_norm = nn.LayerNorm(config.dim)
        self.mlp = nn.Sequential(nn.Linear(config.dim, 4 * config.dim), nn.GELU(),
                                 nn.Linear(4 * config.dim, config.dim))

    def forward(self, x: torch.Tensor, start: int, cache: dict, layer_id: int,
                tracer: Any) -> torch.Tensor:
        c = self.config
        t = x.shape[0]
        positions = torch.arange(start, start + t)
        h = self.attn_norm(x)
        q, k, v = self.wqkv(h).view(t, 3, c.n_heads, self.head_dim).unbind(dim=1)
        q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        cache["k"][start:start + t], cache["v"][start:start + t] = k, v
        cache["ik"][start:start + t] = self.indexer.keys(h, positions)
        end = start + t
        keys, values = cache["k"][:end], cache["v"][:end]
        if t == 1:  # sparse decode: attend to the indexer's top k only
            index = self.indexer.scores(h, positions, cache["ik"][:end])[0]
            top = index.topk(min(c.index_topk, end)).indices
            if tracer is not None:
                tracer.record_topk(layer_id, top, index[top])
            keys, values = keys[top], values[top]
            mask = None
        else:  # dense causal prefill
            mask = positions[:, None] >= torch.arange(end)[None, :]
        attn = torch.einsum("thd,shd->hts", q, keys) / math.sqrt(self.head_dim)
        if mask is not None:
            attn = attn.masked_fill(~mask[None], float("-inf"))
        out = torch.einsum("hts,shd->thd", attn.softmax(dim=-1), values).reshape(t, c.dim)
        x = x + self.wo(out)
        return x + self.mlp(self.mlp_norm(x))


class DsaRef(nn.Module):
    """The reference model; `generate` decodes one request, tracing if given a tracer."""

    def __init__(self, config: DsaRefConfig, *, seed: int = 0) -> None:
        super().__init__()
        if config.dim % config.n_heads or config.rope_dim % 2 or (
                config.rope_dim > config.index_dim):
            raise InputError("dsa-ref needs dim divisible by n_heads and an even rope_dim "
                             "no larger than index_dim")
        self.config = config
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.dim)
        torch.random.set_rng_state(generator_state)

    @classmethod
    def from_safetensors(cls, path: Path, config: DsaRefConfig) -> DsaRef:
        """A model with the weights of a safetensors file (names as in `state_dict`)."""
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise InputError("loading weights needs the safetensors package "
                             "(pip install 'kvtrace[collect]')") from None
        model = cls(config)
        try:
            model.load_state_dict(load_file(str(path)))
        except (OSError, RuntimeError) as exc:
            raise InputError(f"cannot load {path} into dsa-ref: {exc}") from None
        return model

    def _new_cache(self, length: int) -> list[dict]:
        c = self.config
        head_dim = c.dim // c.n_heads
        return [{"k": torch.zeros(length, c.n_heads, head_dim),
                 "v": torch.zeros(length, c.n_heads, head_dim),
                 "ik": torch.zeros(length, c.index_dim)} for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, start: int, cache: list[dict],
                tracer: Any = None) -> torch.Tensor:
        x = self.embed(tokens)
        for layer_id, block in enumerate(self.blocks):
            x = block(x, start, cache[layer_id], layer_id, tracer)
        return self.norm(x) @ self.embed.weight.T

    @torch.inference_mode()
    def generate(self, prompt: list[int], max_new_tokens: int, *, request_id: int = 0,
                 tracer: Any = None, temperature: float = 0.0, eos_id: int | None = None,
                 seed: int = 0) -> list[int]:
        """Decode up to ``max_new_tokens`` after ``prompt`` (0: until EOS or max_seq_len)."""
        limit = self.config.max_seq_len
        if not prompt or len(prompt) >= limit:
            raise InputError(f"the prompt must have 1 to {limit - 1} tokens, "
                             f"got {len(prompt)}")
        budget = limit - len(prompt) if max_new_tokens <= 0 else min(
            max_new_tokens, limit - len(prompt))
        cache = self._new_cache(len(prompt) + budget)
        generator = torch.Generator().manual_seed(seed)
        logits = self.forward(torch.tensor(prompt), 0, cache)  # prefill: not traced
        out: list[int] = []
        position = len(prompt)
        while True:
            token = _sample(logits[-1], temperature, generator)
            out.append(token)
            if len(out) >= budget or token == eos_id:
                return out
            if tracer is not None:
                with tracer.step({request_id: position}):
                    logits = self.forward(torch.tensor([token]), position, cache, tracer)
            else:
                logits = self.forward(torch.tensor([token]), position, cache)
            position += 1


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> int:
    if temperature <= 0:
        return int(logits.argmax())
    probabilities = (logits / temperature).softmax(dim=-1)
    return int(torch.multinomial(probabilities, 1, generator=generator))


class ByteTokenizer:
    """Bytes of UTF-8 text as tokens 0..255, with BOS 256 and EOS 257."""

    bos_id, eos_id = 256, 257

    def encode(self, text: str) -> list[int]:
        return [self.bos_id, *text.encode("utf-8")]

    def decode(self, tokens: list[int]) -> str:
        return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")
