"""One DSA collection from its options: load the model and the dataset, decode, trace."""

from __future__ import annotations

from typing import Any

from kvtrace.collectors._dsa_collect import (
    CollectReport,
    Progress,
    collect_dsa,
    replay_arrivals,
)
from kvtrace.collectors.collect_options import DsaCollectOptions
from kvtrace.collectors.datasets.registry import REPLAYED, dataset_requests
from kvtrace.collectors.models import load_model
from kvtrace.warehouse import Warehouse


def run_dsa_collection(
    warehouse: Warehouse, options: DsaCollectOptions, *, progress: Progress | None = None
) -> CollectReport:
    """Trace ``options.dataset`` through ``options.model`` into ``warehouse``.

    The run is named ``options.run_name``, else ``<dataset>-<model>-<seed>``.
    """
    net, tokenizer = load_model(options)
    requests, variant = dataset_requests(options, tokenizer, warehouse)
    model_name = net.name.removeprefix("hf:")
    name = options.run_name or f"{options.dataset}-{model_name}-{options.seed}"
    common: dict[str, Any] = dict(
        model=net,
        tokenizer=tokenizer,
        run_name=name,
        dataset=options.dataset,
        dataset_variant=variant,
        block_sizes=options.block_sizes,
        batch_size=options.batch_size,
        max_new_tokens=options.max_new_tokens,
        max_prompt_tokens=options.max_prompt_tokens,
        seed=options.seed,
        progress=progress,
        commit_every_s=options.commit_every_s,
    )
    if options.dataset in REPLAYED:
        return replay_arrivals(warehouse, requests, time_scale=options.time_scale, **common)
    return collect_dsa(
        warehouse,
        requests,
        sample_rate=options.sample_rate,
        temperature=options.temperature,
        scores=options.scores,
        **common,
    )
