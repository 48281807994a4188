"""A pure-torch stand-in of DeepSeek-V3.2-Exp's inference/model.py (its call structure).

Tiny and on the CPU: a Transformer whose every layer's MLA asks an Indexer for the top-k
positions (``topk_indices``, ``[batch, seqlen, k]``) and attends only to them, with the
causal mask added during prefill as upstream does.  The lines the instrumentation guide
names stand here as they stand upstream; the test adds the guide's lines to a copy.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

world_size = 1
rank = 0


@dataclass
class ModelArgs:
    """The few sizes the stand-in needs."""

    vocab_size: int = 97
    dim: int = 32
    n_layers: int = 3
    index_head_dim: int = 16
    index_topk: int = 6
    max_batch_size: int = 4
    max_seq_len: int = 64


class Indexer(nn.Module):
    """Scores every cached key for each query and keeps the ``index_topk`` best."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.index_topk = args.index_topk
        self.wq = nn.Linear(args.dim, args.index_head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.index_head_dim, bias=False)
        cache = torch.zeros(args.max_batch_size, args.max_seq_len, args.index_head_dim)
        self.register_buffer("k_cache", cache, persistent=False)

    def forward(self, x, qr, start_pos, freqs_cis, mask):
        bsz, seqlen, _ = x.size()
        end_pos = start_pos + seqlen
        self.k_cache[:bsz, start_pos:end_pos] = self.wk(x)
        q = self.wq(qr)
        index_score = torch.einsum("bsd,btd->bst", q, self.k_cache[:bsz, :end_pos])
        if mask is not None:
            index_score += mask
        topk_indices = index_score.topk(min(self.index_topk, end_pos), dim=-1)[1]
        return topk_indices


class MLA(nn.Module):
    """Attention over the positions the indexer selected."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wkv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)
        self.indexer = Indexer(args)
        cache = torch.zeros(args.max_batch_size, args.max_seq_len, args.dim)
        self.register_buffer("kv_cache", cache, persistent=False)
        self.scale = args.dim**-0.5

    def forward(self, x, start_pos, freqs_cis, mask):
        bsz, seqlen, _ = x.size()
        end_pos = start_pos + seqlen
        self.kv_cache[:bsz, start_pos:end_pos] = self.wkv(x)
        kv = self.kv_cache[:bsz, :end_pos]
        scores = torch.einsum("bsd,btd->bst", self.wq(x), kv) * self.scale
        topk_indices = self.indexer(x, x, start_pos, freqs_cis, mask)
        index_mask = torch.full((bsz, seqlen, end_pos), float("-inf")).scatter_(-1, topk_indices, 0)
        if mask is not None:
            index_mask += mask
        weights = (scores + index_mask).softmax(dim=-1)
        return self.wo(torch.einsum("bst,btd->bsd", weights, kv))


class Block(nn.Module):
    """One layer: attention and a feed-forward, each with a residual."""

    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attn = MLA(args)
        self.ffn = nn.Sequential(
            nn.Linear(args.dim, 2 * args.dim), nn.GELU(), nn.Linear(2 * args.dim, args.dim)
        )
        self.attn_norm = nn.LayerNorm(args.dim)
        self.ffn_norm = nn.LayerNorm(args.dim)

    def forward(self, x, start_pos, freqs_cis, mask):
        x = x + self.attn(self.attn_norm(x), start_pos, freqs_cis, mask)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    """Embedding, the layers, and the logits of each row's last position."""

    def __init__(self, args: ModelArgs):
        global world_size, rank
        world_size = dist.get_world_size() if dist.is_initialized() else 1
        rank = dist.get_rank() if dist.is_initialized() else 0
        super().__init__()
        self.max_seq_len = args.max_seq_len
        self.embed = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(Block(layer_id, args) for layer_id in range(args.n_layers))
        self.norm = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, args.vocab_size, bias=False)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start_pos: int = 0):
        seqlen = tokens.size(1)
        mask = torch.full((seqlen, seqlen), float("-inf")).triu_(1) if seqlen > 1 else None
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h, start_pos, None, mask)
        return self.head(self.norm(h)[:, -1])
