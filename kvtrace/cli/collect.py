"""``kvtrace collect``: collectors that write straight into the warehouse."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from kvtrace.cli._app import _open, app, err, out
from kvtrace.cli._output import _shows_progress
from kvtrace.collectors.collect_options import (
    DatasetName,
    DsaCollectOptions,
    HubDataset,
    RulerVariant,
    Scores,
    Selection,
    TurnMode,
)
from kvtrace.collectors.kv_event_bounds import MAX_MESSAGE_BLOCKS, MAX_MESSAGE_MB, MessageBounds
from kvtrace.errors import KvtraceError

Collected = TypeVar("Collected")  # what a collector reports

StopAfterOption = Annotated[
    float | None,
    typer.Option(
        min=0.001, help="Stop after this many seconds (default: until Ctrl-C or SIGTERM)."
    ),
]
ExperimentOption = Annotated[str | None, typer.Option(help="Experiment label.")]

collect_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Collect traces straight into the warehouse.\n\n"
    "Example: kvtrace collect pool --endpoint decode-0=http://10.0.0.5:30000/server_info",
)
app.add_typer(collect_app, name="collect")


def _status_line(text: str) -> None:
    """A collector's running count, written over itself on a terminal (not with --quiet)."""
    if _shows_progress():
        err.print(text, end="\r")


@collect_app.command("pool")
def collect_pool(
    endpoint: Annotated[
        list[str],
        typer.Option(
            help="Worker to poll: NAME=URL or URL; /server_info (instrumented JSON) or "
            "/metrics (Prometheus: vLLM, SGLang, LMCache). Repeat for each worker."
        ),
    ],
    interval: Annotated[float, typer.Option(help="Seconds between polls of a worker.")] = 1.0,
    duration: StopAfterOption = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Per-poll timeout in seconds (default: half the interval, at most 5)."),
    ] = None,
    run_name: Annotated[str | None, typer.Option(help="Run name (default: pool-<time>).")] = None,
    experiment: ExperimentOption = None,
) -> None:
    """Poll every worker's KV pool and write pool_snapshots in small batches.

    A slow, failing or garbled worker gives rows with poll_error and polling goes on;
    Ctrl-C or SIGTERM stops after writing what was polled and closing the run.

    Example: kvtrace collect pool --endpoint decode-0=http://127.0.0.1:30000/server_info
    """
    from kvtrace.collectors.pool_poller import Endpoint, PollSpec, poll_pool

    targets = [Endpoint.parse(text) for text in endpoint]
    warehouse = _open(create=True)

    def show(report) -> None:
        _status_line(
            f"{report.polls:,} polls, {report.errors:,} errors, {report.rows:,} rows written"
        )

    report = _until_stopped(
        lambda stop: poll_pool(
            warehouse,
            targets,
            PollSpec(
                interval_s=interval,
                duration_s=duration,
                timeout_s=timeout,
                run_name=run_name,
                experiment=experiment,
            ),
            on_batch=show,
            stop=stop,
        )
    )
    out.say(
        f"polled {len(targets)} worker(s): {report.polls:,} polls, {report.errors:,} "
        f"with errors, {report.rows:,} rows into run {report.run_id}"
    )


@collect_app.command("metrics")
def collect_metrics(
    endpoint: Annotated[
        list[str],
        typer.Option(
            metavar="[NAME=]URL",
            help="A Prometheus text endpoint to scrape (vLLM, SGLang, LMCache: "
            "http://HOST:PORT/metrics); NAME becomes worker_id. Repeat for each worker.",
        ),
    ],
    interval: Annotated[
        float, typer.Option(min=0.001, help="Seconds between scrapes of every endpoint.")
    ] = 1.0,
    duration: StopAfterOption = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Per-scrape timeout in seconds (default: half the interval, at most 5)."),
    ] = None,
    run_name: Annotated[
        str | None, typer.Option("--run-name", "--run", help="Run name (default: metrics-<time>).")
    ] = None,
    experiment: ExperimentOption = None,
    commit_every: Annotated[
        float, typer.Option(min=0.001, help="Seconds between commits of the scraped rows.")
    ] = 10.0,
    batch_rows: Annotated[
        int, typer.Option(min=1, help="Commit sooner when this many rows wait.")
    ] = 100_000,
    save: Annotated[
        Path | None,
        typer.Option(
            help='Also write every scrape to this new JSONL file ({"t", "worker", '
            '"body"} a line), which kvtrace ingest reads back.'
        ),
    ] = None,
) -> None:
    """Scrape Prometheus endpoints into engine_metrics: every sample of every scrape,
    committed in batches.

    A slow, failing or garbled endpoint gives up = 0 and a kvtrace_scrape_error row, and
    scraping goes on; Ctrl-C or SIGTERM stops after writing what was scraped.

    Example: kvtrace collect metrics --endpoint gpu0=http://127.0.0.1:8000/metrics
    --run bench-1 --duration 600
    """
    from kvtrace.collectors.metrics_scraper import Endpoint, ScrapeSpec, scrape_metrics

    targets = [Endpoint.parse(text) for text in endpoint]
    warehouse = _open(create=True)

    def show(report) -> None:
        _status_line(
            f"{report.scrapes:,} scrapes, {report.failed:,} failed, {report.rows:,} rows "
            f"written in {report.commits:,} commits"
        )

    report = _until_stopped(
        lambda stop: scrape_metrics(
            warehouse,
            targets,
            ScrapeSpec(
                interval_s=interval,
                duration_s=duration,
                timeout_s=timeout,
                run_name=run_name,
                experiment=experiment,
                commit_every_s=commit_every,
                batch_rows=batch_rows,
                save=save,
            ),
            on_batch=show,
            stop=stop,
        )
    )
    out.say(
        f"scraped {len(targets)} endpoint(s): {report.scrapes:,} scrapes, {report.failed:,} "
        f"failed, {report.rows:,} rows in {report.commits:,} commits into run {report.run_id}"
    )


@collect_app.command("kv-events")
def collect_kv_events_command(
    endpoint: Annotated[
        list[str],
        typer.Option(
            metavar="[NAME=]tcp://HOST:PORT",
            help="An engine's KV-event publisher (vLLM: the 'endpoint' of "
            "--kv-events-config, port 5557 by default). Repeat for each engine.",
        ),
    ],
    replay: Annotated[
        list[str] | None,
        typer.Option(
            metavar="tcp://HOST:PORT",
            help="The replay endpoint of each --endpoint, in the same order (vLLM: "
            "'replay_endpoint', 5558): missed batches are fetched from it.",
        ),
    ] = None,
    topic: Annotated[str, typer.Option(help="The topic to subscribe to (vLLM: 'topic').")] = "",
    duration: StopAfterOption = None,
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for a first event before giving up.")
    ] = 10.0,
    run_name: Annotated[
        str | None, typer.Option(help="Run name (default: kv-events-<time>).")
    ] = None,
    max_message_mb: Annotated[
        float,
        typer.Option(
            min=0.001, help="The largest message read, in MiB; a larger one is an error row."
        ),
    ] = MAX_MESSAGE_MB,
    max_message_blocks: Annotated[
        int,
        typer.Option(min=1, help="The most block events a message may hold; more is an error row."),
    ] = MAX_MESSAGE_BLOCKS,
) -> None:
    """Record the KV-cache events engines publish (block stored, removed, cleared) into
    kv_events and kv_event_blocks, committed in small batches.

    Start vLLM with --kv-events-config '{"enable_kv_cache_events": true, "publisher":
    "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic":
    "kv-events"}'.  Missed sequence numbers are replayed or recorded as gaps; an
    unreadable message is an error row; an engine restarted (its sequence numbers going
    back) starts a new epoch; Ctrl-C or SIGTERM writes what came and closes the run.

    Example: kvtrace collect kv-events --endpoint gpu0=tcp://127.0.0.1:5557 --replay
    tcp://127.0.0.1:5558 --topic kv-events --duration 600
    """
    from kvtrace.collectors.kv_event_subscriber import (
        EventSource,
        KvEventSpec,
        collect_kv_events,
    )

    replays = replay or []
    if len(replays) > len(endpoint):
        raise KvtraceError("give at most one --replay per --endpoint, in the same order")
    sources = [
        EventSource.parse(text, replays[i] if i < len(replays) else None)
        for i, text in enumerate(endpoint)
    ]
    warehouse = _open(create=True)

    def show(report) -> None:
        _status_line(
            f"{report.messages:,} batches, {report.events:,} block events, "
            f"{report.gaps:,} gaps, {report.errors:,} errors"
        )

    report = _until_stopped(
        lambda stop: collect_kv_events(
            warehouse,
            sources,
            KvEventSpec(
                topic=topic,
                duration_s=duration,
                connect_timeout_s=connect_timeout,
                run_name=run_name,
                bounds=MessageBounds(int(max_message_mb * 2**20), max_message_blocks),
            ),
            on_batch=show,
            stop=stop,
        )
    )
    out.say(
        f"recorded {len(sources)} engine(s): {report.messages:,} batches, "
        f"{report.events:,} block events ({report.replayed:,} batches replayed, "
        f"{report.gaps:,} gaps, {report.errors:,} unreadable, {report.restarts:,} restarts) "
        f"into run {report.run_id}"
    )


@collect_app.command("dsa")
def collect_dsa_command(
    model: Annotated[
        str,
        typer.Option(
            help="dsa-ref, or the folder of a local Hugging Face causal LM (traced with the "
            "top-k of its attention)."
        ),
    ] = "dsa-ref",
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            help="A tokenizer.json to encode prompts with [default: bytes for dsa-ref, the "
            "model's own for a Hugging Face folder]."
        ),
    ] = None,
    dataset: Annotated[DatasetName, typer.Option(help="Dataset runner.")] = "ruler",
    data_file: Annotated[
        Path | None,
        typer.Option(
            help="Local dataset file (ruler: RULER .jsonl or .tgz; sharegpt: the ShareGPT "
            "JSON; longbench-v2: data.json; burstgpt: the CSV)."
        ),
    ] = None,
    hf_dataset: Annotated[
        str | None,
        typer.Option(
            help="ruler, sharegpt, longbench-v2: a Hugging Face dataset id (online) or a "
            "local folder, read with the datasets library."
        ),
    ] = None,
    hf_split: Annotated[str, typer.Option(help="Split of --hf-dataset.")] = "train",
    hf_revision: Annotated[
        str | None, typer.Option(help="Revision (branch, tag or commit) of --hf-dataset.")
    ] = None,
    length: Annotated[
        str | None,
        typer.Option(help="longbench-v2 length classes, comma-separated: short,medium,long."),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option(
            help="Requests decoded together (burstgpt: at most this many that have arrived)."
        ),
    ] = 1,
    time_scale: Annotated[
        float, typer.Option(help="burstgpt, workload: divide recorded arrival times by this.")
    ] = 1.0,
    workload: Annotated[
        str | None,
        typer.Option(
            help="--dataset workload: an ingested arrival trace (run name or id) to replay; "
            "block hashes become shared prompt prefixes."
        ),
    ] = None,
    turn_mode: Annotated[TurnMode, typer.Option(help="sharegpt: full or per_user_turn.")] = "full",
    limit: Annotated[int, typer.Option(help="Requests to run.")] = 8,
    max_new_tokens: Annotated[
        int, typer.Option(help="Tokens to generate per request (0: until EOS or max_seq_len).")
    ] = 16,
    max_prompt_tokens: Annotated[
        int, typer.Option(help="Longer prompts are skipped and recorded with a skip reason.")
    ] = 16384,
    ruler_length: Annotated[int, typer.Option(help="RULER prompt length in tokens.")] = 4096,
    ruler_variant: Annotated[
        RulerVariant, typer.Option(help="RULER NIAH: single or multikey.")
    ] = "single",
    block_size: Annotated[
        list[int] | None, typer.Option(help="Block size to store (repeatable) [default: 64].")
    ] = None,
    sample_rate: Annotated[float, typer.Option(help="Share of records kept.")] = 1.0,
    temperature: Annotated[float, typer.Option(help="0 decodes greedily.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of weights, data and sampling.")] = 0,
    layers: Annotated[int, typer.Option(help="dsa-ref layers.")] = 4,
    topk: Annotated[int, typer.Option(help="dsa-ref index top-k.")] = 2048,
    selection: Annotated[
        Selection,
        typer.Option(
            help="A Hugging Face model's top-k: all-heads (attention summed over heads), or "
            "per-group: that and one top-k per KV group (its query heads summed), stored "
            "with the group in dsa_steps.kv_group."
        ),
    ] = "all-heads",
    weights: Annotated[Path | None, typer.Option(help="dsa-ref weights (safetensors).")] = None,
    device: Annotated[
        str, typer.Option(help="Torch device the model decodes on: cpu, cuda, cuda:1, mps.")
    ] = "cpu",
    scores: Annotated[Scores, typer.Option(help="stats or full index scores.")] = "stats",
    run_name: Annotated[
        str | None, typer.Option(help="Run name [default: <dataset>-<model>-<seed>].")
    ] = None,
) -> None:
    """Run a dataset through a DSA model and trace its top-k selections into the warehouse.

    Example: kvtrace collect dsa --model dsa-ref --dataset ruler --limit 4 --ruler-length 2048
    """
    if data_file is not None and hf_dataset is not None:
        raise KvtraceError("give --data-file or --hf-dataset, not both")
    result = _run_collect(
        DsaCollectOptions(
            model=model,
            tokenizer_file=tokenizer,
            layers=layers,
            topk=topk,
            selection=selection,
            weights=weights,
            device=device,
            dataset=dataset,
            data_file=data_file,
            hub=HubDataset(hf_dataset, hf_split, hf_revision) if hf_dataset else None,
            turn_mode=turn_mode,
            length_filter=length,
            ruler_length=ruler_length,
            ruler_variant=ruler_variant,
            limit=limit,
            batch_size=batch_size,
            time_scale=time_scale,
            workload=workload,
            max_new_tokens=max_new_tokens,
            max_prompt_tokens=max_prompt_tokens,
            block_sizes=tuple(block_size or (64,)),
            sample_rate=sample_rate,
            temperature=temperature,
            seed=seed,
            scores=scores,
            run_name=run_name,
        )
    )
    out.say(
        f"{result.requests} request(s) traced, {result.skipped} skipped, "
        f"{result.new_tokens:,} tokens in {result.seconds:.1f} s "
        f"({result.new_tokens / max(result.seconds, 1e-9):.1f} tokens/s) into run "
        f"{result.run_id}"
    )


def _until_stopped(collect: Callable[[threading.Event], Collected]) -> Collected:
    """Run ``collect`` with the event that stops it: Ctrl-C's way, or SIGTERM's."""
    stop = threading.Event()
    with _stopped_by_sigterm(stop):
        return collect(stop)


@contextmanager
def _stopped_by_sigterm(stop: threading.Event):
    """For the block, SIGTERM sets ``stop`` (a collector's own way to end: it writes
    what it has and closes its run) instead of raising `Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_collect(options: DsaCollectOptions):
    from kvtrace.collectors.dsa_run import run_dsa_collection

    with _request_progress(options.limit) as advance:
        return run_dsa_collection(_open(create=True), options, progress=advance)


@contextmanager
def _request_progress(total: int):
    if not _shows_progress():
        yield None
        return
    from rich.progress import BarColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        "{task.completed}/{task.total} requests",
        "{task.fields[rate]}",
        TimeRemainingColumn(),
        console=err.console,
        transient=True,
    ) as bar:
        task = bar.add_task("collecting", total=total, rate="")

        def advance(report) -> None:
            rate = report.new_tokens / max(report.seconds, 1e-9)
            bar.update(
                task, completed=report.requests + report.skipped, rate=f"{rate:.1f} tokens/s"
            )

        yield advance
