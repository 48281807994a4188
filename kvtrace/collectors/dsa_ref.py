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
from collections.abc import Callable
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
    freqs = theta ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=x.device) / dim)
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
        self.wq_b = nn.Linear(config.q_lora_rank, config.index_heads * config.index_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.index_dim, bias=False)
        self.k_norm = nn.LayerNorm(config.index_dim)
        self.w_proj = nn.Linear(config.dim, config.index_heads, bias=False)

    def _rotate_front(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        r = self.config.rope_dim
        return torch.cat((rope(x[..., :r], positions, self.config.rope_theta), x[..., r:]), dim=-1)

    def keys(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The shared index key of each token: [T, D]."""
        return self._rotate_front(self.k_norm(self.wk(x)), positions)

    def scores(
        self, x: torch.Tensor, positions: torch.Tensor, cached_keys: torch.Tensor
    ) -> torch.Tensor:
        """I[t, s] for the queries ``x`` [T, dim] against ``cached_keys``: [S, D] shared
        by every query, or [T, S, D] with keys of its own per query (a batch of requests)."""
        c = self.config
        q = self.wq_b(self.q_norm(self.wq_a(x))).view(-1, c.index_heads, c.index_dim)
        q = self._rotate_front(q, positions)
        weights = self.w_proj(x) / math.sqrt(c.index_heads * c.index_dim)  # [T, H]
        pattern = "thd,sd->ths" if cached_keys.dim() == 2 else "thd,tsd->ths"
        logits = F.relu(torch.einsum(pattern, q, cached_keys))  # [T, H, S]
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
        self.mlp = nn.Sequential(
            nn.Linear(config.dim, 4 * config.dim), nn.GELU(), nn.Linear(4 * config.dim, config.dim)
        )

    def prefill(self, x: torch.Tensor, cache: dict) -> torch.Tensor:
        """Dense causal attention over one prompt ``x`` [T, dim], filling ``cache``."""
        c = self.config
        t = x.shape[0]
        positions = torch.arange(t, device=x.device)
        h = self.attn_norm(x)
        q, k, v = self.wqkv(h).view(t, 3, c.n_heads, self.head_dim).unbind(dim=1)
        q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        cache["k"][:t], cache["v"][:t] = k, v
        cache["ik"][:t] = self.indexer.keys(h, positions)
        attn = torch.einsum("thd,shd->hts", q, k) / math.sqrt(self.head_dim)
        mask = positions[:, None] >= positions[None, :]
        attn = attn.masked_fill(~mask[None], float("-inf"))
        out = torch.einsum("hts,shd->thd", attn.softmax(dim=-1), v).reshape(t, c.dim)
        x = x + self.wo(out)
        return x + self.mlp(self.mlp_norm(x))

    def decode(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        positions: torch.Tensor,
        end: int,
        cache: dict,
        layer_id: int,
        tracer: Any,
    ) -> torch.Tensor:
        """One sparse decode step for a batch: ``x`` [B, dim] is the new token of cache
        row ``rows[b]`` at position ``positions[b]`` (all below ``end``); each row attends
        to the indexer's top k of its own positions (rows shorter than k pad with -1)."""
        c = self.config
        b = x.shape[0]
        h = self.attn_norm(x)
        q, k, v = self.wqkv(h).view(b, 3, c.n_heads, self.head_dim).unbind(dim=1)
        q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        cache["k"][rows, positions], cache["v"][rows, positions] = k, v
        cache["ik"][rows, positions] = self.indexer.keys(h, positions)
        index = self.indexer.scores(h, positions, cache["ik"][rows, :end])  # [B, end]
        beyond = torch.arange(end, device=x.device)[None, :] > positions[:, None]
        index = index.masked_fill(beyond, float("-inf"))
        top = index.topk(min(c.index_topk, end), dim=-1)
        padding = top.values == float("-inf")
        selected = top.indices.masked_fill(padding, -1)
        if tracer is not None:
            tracer.record_topk(
                layer_id, selected if b > 1 else selected[0], top.values if b > 1 else top.values[0]
            )
        gather = top.indices.masked_fill(padding, 0)
        keys, values = cache["k"][rows[:, None], gather], cache["v"][rows[:, None], gather]
        attn = torch.einsum("bhd,bkhd->bhk", q, keys) / math.sqrt(self.head_dim)
        attn = attn.masked_fill(padding[:, None, :], float("-inf"))
        out = torch.einsum("bhk,bkhd->bhd", attn.softmax(dim=-1), values).reshape(b, c.dim)
        x = x + self.wo(out)
        return x + self.mlp(self.mlp_norm(x))


class DsaRef(nn.Module):
    """The reference model; `generate` decodes one request, tracing if given a tracer."""

    def __init__(self, config: DsaRefConfig, *, seed: int = 0) -> None:
        super().__init__()
        if (
            config.dim % config.n_heads
            or config.rope_dim % 2
            or (config.rope_dim > config.index_dim)
        ):
            raise InputError(
                "dsa-ref needs dim divisible by n_heads and an even rope_dim "
                "no larger than index_dim"
            )
        self.config = config
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.embed: nn.Embedding = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.dim)
        torch.random.set_rng_state(generator_state)

    name = "dsa-ref"

    @property
    def device(self) -> torch.device:
        """Where the weights are (``model.to(device)`` moves them; caches follow)."""
        return self.embed.weight.device

    @property
    def index_topk(self) -> int:
        return self.config.index_topk

    @property
    def max_seq_len(self) -> int:
        return self.config.max_seq_len

    def config_dict(self) -> dict[str, Any]:
        return {**self.config.to_dict(), "device": str(self.device)}

    @classmethod
    def from_safetensors(cls, path: Path, config: DsaRefConfig) -> DsaRef:
        """A model with the weights of a safetensors file (names as in `state_dict`)."""
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise InputError(
                "loading weights needs the safetensors package (pip install 'kvtrace[collect]')"
            ) from None
        model = cls(config)
        try:
            model.load_state_dict(load_file(str(path)))
        except (OSError, RuntimeError) as exc:
            raise InputError(f"cannot load {path} into dsa-ref: {exc}") from None
        return model

    def new_cache(self, rows: int, length: int) -> list[dict]:
        """Empty KV and index-key caches for ``rows`` requests of up to ``length`` tokens."""
        c = self.config
        head_dim = c.dim // c.n_heads
        device = self.device
        return [
            {
                "k": torch.zeros(rows, length, c.n_heads, head_dim, device=device),
                "v": torch.zeros(rows, length, c.n_heads, head_dim, device=device),
                "ik": torch.zeros(rows, length, c.index_dim, device=device),
            }
            for _ in self.blocks
        ]

    def _layers(self) -> list[Block]:
        """The blocks, typed (a ModuleList yields plain Modules to a type checker)."""
        return list(self.blocks)  # type: ignore[arg-type]

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) @ self.embed.weight.T

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        *,
        request_id: int = 0,
        tracer: Any = None,
        temperature: float = 0.0,
        eos_id: int | None = None,
        seed: int = 0,
    ) -> list[int]:
        """Decode up to ``max_new_tokens`` after ``prompt`` (0: until EOS or max_seq_len)."""
        return self.generate_batch(
            [prompt],
            [max_new_tokens],
            request_ids=[request_id],
            tracer=tracer,
            temperature=temperature,
            eos_id=eos_id,
            seeds=[seed],
        )[0]

    @torch.inference_mode()
    def generate_batch(
        self,
        prompts: list[list[int]],
        max_new_tokens: list[int],
        *,
        request_ids: list[int],
        tracer: Any = None,
        temperature: float = 0.0,
        eos_id: int | None = None,
        seeds: list[int],
        on_finish: Callable[[int], None] | None = None,
    ) -> list[list[int]]:
        """Decode several requests together: each prompt is prefilled on its own, then
        every decode step runs the unfinished requests as one batch (one tracer step
        with a row per request).  Budgets of 0 mean until EOS or max_seq_len.
        ``on_finish(i)`` is called as soon as request ``i`` is done."""
        budgets = [
            decode_budget(len(prompt), wanted, self.config.max_seq_len)
            for prompt, wanted in zip(prompts, max_new_tokens, strict=True)
        ]
        length = max(len(p) + n for p, n in zip(prompts, budgets, strict=True))
        cache = self.new_cache(len(prompts), length)
        generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        outs: list[list[int]] = [[] for _ in prompts]
        last_logits = [self.prefill(prompt, cache, row) for row, prompt in enumerate(prompts)]
        active = list(range(len(prompts)))
        while True:
            tokens = []
            for row, logits in zip(list(active), last_logits, strict=True):
                token = sample_token(logits, temperature, generators[row])
                outs[row].append(token)
                if len(outs[row]) >= budgets[row] or token == eos_id:
                    active.remove(row)
                    if on_finish is not None:
                        on_finish(row)
                else:
                    tokens.append(token)
            if not active:
                return outs
            rows = torch.tensor(active)
            positions = torch.tensor([len(prompts[r]) + len(outs[r]) - 1 for r in active])
            if tracer is None:
                last_logits = list(self.decode_step(tokens, rows, positions, cache))
            else:
                step = {request_ids[r]: int(p) for r, p in zip(active, positions, strict=True)}
                with tracer.step(step):
                    last_logits = list(self.decode_step(tokens, rows, positions, cache, tracer))

    def prefill(self, prompt: list[int], cache: list[dict], row: int = 0) -> torch.Tensor:
        """Dense causal prefill of one prompt into cache row ``row``; the last logits."""
        x = self.embed(torch.tensor(prompt, device=self.device))
        for block, layer_cache in zip(self._layers(), cache, strict=True):
            x = block.prefill(x, {name: part[row] for name, part in layer_cache.items()})
        return self._logits(x[-1])

    def decode_step(
        self,
        tokens: list[int],
        rows: torch.Tensor,
        positions: torch.Tensor,
        cache: list[dict],
        tracer: Any = None,
    ) -> torch.Tensor:
        """One sparse decode step of a batch (token b goes to cache row ``rows[b]`` at
        ``positions[b]``), reporting each layer's top-k to ``tracer``; logits [B, vocab].

        ``rows`` and ``positions`` may live on the host: the step's length is read there,
        so a step on a GPU synchronises only where its caller reads the logits."""
        end = int(positions.max()) + 1
        rows, positions = rows.to(self.device), positions.to(self.device)
        x = self.embed(torch.tensor(tokens, device=self.device))
        for layer_id, block in enumerate(self._layers()):
            x = block.decode(x, rows, positions, end, cache[layer_id], layer_id, tracer)
        return self._logits(x)


def decode_budget(prompt_tokens: int, max_new_tokens: int, max_seq_len: int) -> int:
    """Tokens a request may generate: ``max_new_tokens`` (0: all the room left) within
    ``max_seq_len``; a prompt that is empty or leaves no room is refused."""
    if not 0 < prompt_tokens < max_seq_len:
        raise InputError(f"the prompt must have 1 to {max_seq_len - 1} tokens, got {prompt_tokens}")
    room = max_seq_len - prompt_tokens
    return room if max_new_tokens <= 0 else min(max_new_tokens, room)


def sample_token(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> int:
    """Greedy at temperature 0, else a draw from softmax(logits / temperature)."""
    if temperature <= 0:
        return int(logits.argmax())
    probabilities = (logits.cpu() / temperature).softmax(dim=-1)  # the generator is the host's
    return int(torch.multinomial(probabilities, 1, generator=generator))


class ByteTokenizer:
    """Bytes of UTF-8 text as tokens 0..255, with BOS 256 and EOS 257."""

    bos_id, eos_id, vocab_size = 256, 257, 258

    def encode(self, text: str) -> list[int]:
        return [self.bos_id, *text.encode("utf-8")]

    def decode(self, tokens: list[int]) -> str:
        return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")
