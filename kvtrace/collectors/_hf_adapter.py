"""Trace a local Hugging Face causal LM as if it selected its attention the DSA way.

The model attends densely as usual; at every decode step the adapter takes each layer's
attention probabilities of the last query, sums them over heads, and records the top
``index_topk`` positions (with those summed probabilities as scores).  The trace is thus
the oracle selection: what a sparse indexer would pick if it agreed with full attention.
Attention weights come from the eager implementation, so the model is loaded with it.

With ``selection="per-group"`` it also records, beside that all-heads row, one top-k per
KV group (GQA: query head h reads KV head h // (heads / groups), as ``repeat_kv`` does):
the probabilities of the group's query heads summed, stored with the group in
``dsa_steps.kv_group``.  A step then stores groups + 1 selections of at most
``index_topk`` positions per layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import torch

from kvtrace.collectors.collect_options import Selection
from kvtrace.collectors.dsa_ref import decode_budget, sample_token
from kvtrace.errors import InputError

SELECTIONS: tuple[str, ...] = get_args(Selection)


class HfCausalLM:
    """A local ``transformers`` causal LM behind the collectors' model interface."""

    def __init__(
        self,
        path: Path,
        *,
        index_topk: int = 2048,
        max_seq_len: int | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        selection: Selection = "all-heads",
    ) -> None:
        if selection not in SELECTIONS:
            raise InputError(f"--selection takes all-heads or per-group, got {selection!r}")
        try:
            from transformers import AutoModelForCausalLM
        except ImportError:
            raise InputError(
                "--model PATH needs the transformers package (pip install 'kvtrace[hf]')"
            ) from None
        if not Path(path, "config.json").is_file():
            raise InputError(f"{path} is not a model folder (it has no config.json)")
        torch.manual_seed(seed)
        try:
            self.model = AutoModelForCausalLM.from_pretrained(
                str(path), attn_implementation="eager", local_files_only=True, dtype=torch.float32
            )
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot load the model in {path}: {exc}") from None
        self.model.eval().to(device)
        self.device = torch.device(device)
        self.path = Path(path)
        self.name = f"hf:{self.path.name}"
        self.index_topk = index_topk
        self.selection = selection
        config = self.model.config
        self.kv_groups = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        if config.num_attention_heads % self.kv_groups:
            raise InputError(
                f"{path}: {config.num_attention_heads} attention heads do not split into "
                f"{self.kv_groups} KV groups"
            )
        positions = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_seq_len = min(positions, max_seq_len or positions)

    def config_dict(self) -> dict[str, Any]:
        config = self.model.config
        architectures = list(config.architectures or [])
        return {
            "path": str(self.path),
            "architecture": architectures[0] if architectures else None,
            "num_hidden_layers": config.num_hidden_layers,
            "num_attention_heads": config.num_attention_heads,
            "num_key_value_heads": self.kv_groups,
            "hidden_size": config.hidden_size,
            "index_topk": self.index_topk,
            "max_seq_len": self.max_seq_len,
            "selection": self.selection,
            "selection_rule": (
                "attention of the last query summed over heads"
                + ("; and over each KV group's heads" if self.selection == "per-group" else "")
            ),
            "device": str(self.device),
        }

    @torch.inference_mode()
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
        budget = decode_budget(len(prompt), max_new_tokens, self.max_seq_len)
        generator = torch.Generator().manual_seed(seed)
        output = self.model(  # not traced
            input_ids=torch.tensor([prompt], device=self.device), use_cache=True
        )
        out: list[int] = []
        position = len(prompt)
        while True:
            token = sample_token(output.logits[0, -1], temperature, generator)
            out.append(token)
            if len(out) >= budget or token == eos_id:
                return out
            step = torch.tensor([[token]], device=self.device)
            if tracer is None:
                output = self.model(
                    input_ids=step, past_key_values=output.past_key_values, use_cache=True
                )
            else:
                with tracer.step({request_id: position}):
                    output = self.model(
                        input_ids=step,
                        past_key_values=output.past_key_values,
                        use_cache=True,
                        output_attentions=True,
                    )
                    for layer_id, weights in enumerate(output.attentions):
                        self._record(tracer, layer_id, weights[0, :, -1, :])
            position += 1

    def _record(self, tracer: Any, layer_id: int, probs: torch.Tensor) -> None:
        """One layer's selections from the last query's probabilities ``[heads, kv_len]``:
        the all-heads top-k, and in per-group mode one per KV group."""
        k = min(self.index_topk, probs.shape[1])
        top = probs.sum(dim=0).topk(k)
        tracer.record_topk(layer_id, top.indices, top.values)
        if self.selection == "per-group":
            grouped = probs.reshape(self.kv_groups, -1, probs.shape[1]).sum(dim=1)
            tops = grouped.topk(k, dim=1)  # [groups, k]
            for group in range(self.kv_groups):
                tracer.record_topk(
                    layer_id, tops.indices[group], tops.values[group], kv_group=group
                )
