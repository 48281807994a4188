"""What ``kvtrace collect dsa`` (and ``kvtrace demo``) asks of a DSA collection, in one object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DatasetName = Literal["ruler", "sharegpt", "longbench-v2", "burstgpt", "workload"]
Scores = Literal["stats", "full"]
TurnMode = Literal["full", "per_user_turn"]
RulerVariant = Literal["single", "multikey"]
Selection = Literal["all-heads", "per-group"]


@dataclass(frozen=True)
class HubDataset:
    """A Hugging Face dataset (id or local folder) read with the ``datasets`` library."""

    name: str
    split: str = "train"
    revision: str | None = None


@dataclass(frozen=True)
class DsaCollectOptions:
    """A DSA collection: which model, which requests, what to trace.

    The defaults are those of ``kvtrace collect dsa``; see its ``--help`` for each field.
    """

    model: str = "dsa-ref"  # dsa-ref, or the folder of a local Hugging Face causal LM
    tokenizer_file: Path | None = None
    layers: int = 4  # dsa-ref only
    topk: int = 2048
    selection: Selection = "all-heads"  # a Hugging Face model: also one top-k per KV group
    weights: Path | None = None  # dsa-ref safetensors
    device: str = "cpu"  # the torch device the model decodes on: cpu, cuda, cuda:1, mps
    dataset: DatasetName = "ruler"
    data_file: Path | None = None
    hub: HubDataset | None = None
    turn_mode: TurnMode = "full"  # sharegpt
    length_filter: str | None = None  # longbench-v2, e.g. "short,medium"
    ruler_length: int = 4096  # the offline RULER generator
    ruler_variant: RulerVariant = "single"
    limit: int = 8
    batch_size: int = 1
    time_scale: float = 1.0  # burstgpt, workload
    workload: str | None = None  # an ingested workload run, by name or id
    max_new_tokens: int = 16
    max_prompt_tokens: int = 16384
    block_sizes: tuple[int, ...] = (64,)
    sample_rate: float = 1.0
    temperature: float = 0.0
    seed: int = 0
    scores: Scores = "stats"
    run_name: str | None = None
    commit_every_s: float = 30.0  # how often the traced rows are committed (and at the end)
