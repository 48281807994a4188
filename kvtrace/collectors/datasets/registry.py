"""The dataset runners by name: each turns `DsaCollectOptions` into requests to decode.

A runner returns the requests (at most ``options.limit``) and the exact dataset variant
recorded in ``runs`` (file name and sha256, hub revision, generator seed, filters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path

from kvtrace.collectors._dsa_collect import Tokenizer
from kvtrace.collectors.collect_options import DatasetName, DsaCollectOptions
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse

Runner = Callable[[DsaCollectOptions, Tokenizer, Warehouse], tuple[Iterable, str]]
Loader = Callable[[Path], tuple[list[dict], str]]
Checker = Callable[[object, str], list[dict]]


def _records(
    options: DsaCollectOptions, load: Loader, check: Checker, what: str
) -> tuple[list[dict], str]:
    """The records of ``--hf-dataset`` (passed through ``check``) or ``--data-file``."""
    if options.hub is not None:
        from kvtrace.collectors.datasets._hub import load_hub_records

        hub = options.hub
        rows, variant = load_hub_records(hub.name, split=hub.split, revision=hub.revision)
        return check(rows, hub.name), variant
    if options.data_file is None:
        raise InputError(f"--dataset {options.dataset} needs --data-file ({what}) or --hf-dataset")
    rows, sha = load(options.data_file)
    return rows, f"{options.data_file.name} (sha256 {sha})"


def _ruler(
    options: DsaCollectOptions, tokenizer: Tokenizer, warehouse: Warehouse
) -> tuple[Iterable, str]:
    from kvtrace.collectors.datasets.ruler import (
        check_ruler,
        load_ruler_file,
        niah_requests,
        ruler_requests,
    )

    if options.data_file is not None or options.hub is not None:
        rows, variant = _records(options, load_ruler_file, check_ruler, "a RULER .jsonl or .tgz")
        return islice(ruler_requests(rows), options.limit), variant
    requests = niah_requests(
        options.limit,
        options.ruler_length,
        lambda text: len(tokenizer.encode(text)),
        variant=options.ruler_variant,
        seed=options.seed,
    )
    return requests, (
        f"ruler-niah-{options.ruler_variant} (kvtrace offline generator, "
        f"seed {options.seed}, {options.ruler_length} tokens)"
    )


def _sharegpt(
    options: DsaCollectOptions, tokenizer: Tokenizer, warehouse: Warehouse
) -> tuple[Iterable, str]:
    from kvtrace.collectors.datasets.sharegpt import (
        check_conversations,
        load_conversations,
        sharegpt_requests,
    )

    rows, variant = _records(
        options, load_conversations, check_conversations, "a ShareGPT JSON file"
    )
    return (
        islice(sharegpt_requests(rows, options.turn_mode), options.limit),
        f"{variant}, turns {options.turn_mode}",
    )


def _longbench(
    options: DsaCollectOptions, tokenizer: Tokenizer, warehouse: Warehouse
) -> tuple[Iterable, str]:
    from kvtrace.collectors.datasets.longbench import (
        check_longbench,
        load_longbench,
        longbench_requests,
    )

    rows, variant = _records(options, load_longbench, check_longbench, "its data.json")
    classes = None if options.length_filter is None else options.length_filter.split(",")
    return (
        islice(longbench_requests(rows, classes), options.limit),
        f"{variant}, lengths {options.length_filter or 'all'}",
    )


def _burstgpt(
    options: DsaCollectOptions, tokenizer: Tokenizer, warehouse: Warehouse
) -> tuple[Iterable, str]:
    from kvtrace.collectors.datasets.burstgpt import load_arrivals

    if options.hub is not None:
        raise InputError(
            "--hf-dataset serves ruler, sharegpt and longbench-v2; "
            "burstgpt reads its CSV with --data-file"
        )
    if options.data_file is None:
        raise InputError("--dataset burstgpt needs --data-file (an arrival trace CSV)")
    arrivals, sha = load_arrivals(options.data_file)
    return (
        arrivals[: options.limit],
        f"{options.data_file.name} (sha256 {sha}, first {options.limit} arrivals)",
    )


def _workload(
    options: DsaCollectOptions, tokenizer: Tokenizer, warehouse: Warehouse
) -> tuple[Iterable, str]:
    from kvtrace.collectors.datasets.workload import workload_arrivals

    if options.workload is None:
        raise InputError("--dataset workload needs --workload RUN (an ingested arrival trace)")
    return workload_arrivals(warehouse, options.workload, options.limit)


DATASETS: dict[DatasetName, Runner] = {
    "ruler": _ruler,
    "sharegpt": _sharegpt,
    "longbench-v2": _longbench,
    "burstgpt": _burstgpt,
    "workload": _workload,
}

# Runners whose requests arrive over time and are replayed at their arrival times.
REPLAYED: frozenset[DatasetName] = frozenset({"burstgpt", "workload"})


def dataset_requests(
    options: DsaCollectOptions, tokenizer: Tokenizer, warehouse: Warehouse
) -> tuple[Iterable, str]:
    """The requests of ``options.dataset`` and the variant to record in ``runs``."""
    runner = DATASETS.get(options.dataset)
    if runner is None:
        raise InputError(
            f"expected one of {', '.join(DATASETS)} for --dataset, got {options.dataset!r}"
        )
    return runner(options, tokenizer, warehouse)
