"""The ``kvtrace`` command line: parse, call the library, print.

The library raises `KvtraceError`; `main` turns it into one sentence on stderr and exit
status 1 (``--debug`` shows the traceback instead).
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import signal
import sys
import threading
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from kvtrace._version import __version__
from kvtrace.analysis import open_analysis_connection
from kvtrace.analysis.kv_access import (
    DEEPSEEK_V32_BYTES_PER_TOKEN,
    DEFAULT_TIERS,
    DEFAULT_TPOT_MS,
    Granularity,
    Policy,
    Scope,
    Sharing,
)
from kvtrace.collectors.collect_options import (
    DatasetName,
    DsaCollectOptions,
    HubDataset,
    RulerVariant,
    Scores,
    TurnMode,
)
from kvtrace.collectors.kv_event_bounds import MAX_MESSAGE_BLOCKS, MAX_MESSAGE_MB, MessageBounds
from kvtrace.defaults import DEFAULT_BLOCK_SIZE, OUTPUT_FORMATS, Kind, OutputFormat, default_path
from kvtrace.errors import (
    IngestRejected,
    KvtraceError,
    QueryError,
    Terminated,
    WarehouseDamaged,
)

ReportName = Literal["dsa", "pool", "serving", "compare", "whatif", "eval", "workload", "timeline"]

if TYPE_CHECKING:  # the heavy modules load inside the commands that need them
    from concurrent.futures import Executor

    import duckdb

    from kvtrace.ingest import IngestReport
    from kvtrace.warehouse import Warehouse

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="kvtrace: a columnar trace warehouse and query toolkit for LLM-inference research.",
)


class _Console:
    """A rich console, made at its first use (importing rich costs a command 20 ms that
    a query printing its own table does not need); `say` prints plain lines without it."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    @property
    def console(self) -> Any:  # rich.console.Console
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)

    def say(self, text: str) -> None:
        """Print a line of plain text as it is: no markup, no emoji codes, no rich
        loaded."""
        stream = sys.stderr if self._options.get("stderr") else sys.stdout
        stream.write(text + "\n")


err = _Console(stderr=True, highlight=False, soft_wrap=True)
out = _Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 120)


@dataclass
class Options:
    warehouse: str | None = None
    quiet: bool = False
    debug: bool = False

    @property
    def path(self) -> str:
        return self.warehouse or default_path()


options = Options()

AsOfOption = Annotated[
    int | None,
    typer.Option(
        "--as-of",
        min=0,
        help="Read the warehouse as it was at this version: the warehouse_version column "
        "of the warehouse_commits view, or the version a report names (default: the newest).",
    ),
]
EngineOption = Annotated[
    Literal["local", "ray"],
    typer.Option("--engine", help="local, or ray: spread the work over a Ray cluster's workers."),
]
AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="The Ray cluster to join (e.g. 10.0.0.1:6379, or auto) [default: "
        "start one on this machine].",
    ),
]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
]
FormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-f",
        help="table, csv, json or parquet [default: the --output file's suffix, else table].",
        show_default=False,
    ),
]
DsaRunOption = Annotated[
    list[str] | None,
    typer.Option("--run", help="Run id or run name (repeatable) [default: every DSA run]."),
]
BlockSizesOption = Annotated[
    list[int] | None,
    typer.Option(
        "--block-size", help="Block size in tokens to re-bin at (repeatable) [default: 64]."
    ),
]
GranularityOption = Annotated[
    Granularity,
    typer.Option(
        "--granularity",
        help="block: (request, block), all layers move together; layer_block: (request, "
        "layer, block).",
    ),
]
SharingOption = Annotated[
    Sharing,
    typer.Option(
        "--sharing",
        help="private: every request's KV is its own; content: blocks are named by their "
        "tokens (or prefix key), so requests holding the same ones share them.",
    ),
]
ScopeOption = Annotated[
    Scope | None,
    typer.Option(
        "--scope",
        help="request: a cache per request; run: one pool for a run's requests "
        "[default: run with --sharing content or --arrivals, else request].",
    ),
]


@app.callback()
def _global(
    warehouse: Annotated[
        str | None,
        typer.Option(
            "--warehouse",
            "-w",
            envvar="KVTRACE_WAREHOUSE",
            help="Warehouse folder, or object-store URI such as s3://bucket/prefix "
            "[default: ./kvtrace-warehouse].",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and stop.",
            callback=lambda given: _print_version() if given else None,
            is_eager=True,  # before the command is looked for: `kvtrace --version` alone
        ),
    ] = False,
) -> None:
    options.warehouse, options.quiet, options.debug = warehouse, quiet, debug


def _print_version() -> None:
    out.say(f"kvtrace {__version__}")
    raise typer.Exit()


def _open(create: bool = False, as_of: int | None = None) -> Warehouse:
    from kvtrace.warehouse import Warehouse
    from kvtrace.warehouse.no_pandas import pyarrow_without_pandas

    pyarrow_without_pandas()
    return Warehouse(options.path, create=create, as_of=as_of)


@app.command()
def ingest(
    paths: Annotated[
        list[str], typer.Argument(help="Trace files, folders of them, or glob patterns (quoted).")
    ],
    dataset: Annotated[str | None, typer.Option(help="Dataset label for every record.")] = None,
    run_name: Annotated[
        str | None, typer.Option(help="Run name (default: the records', else the trace folder's).")
    ] = None,
    block_size: Annotated[
        int, typer.Option(help="Block size for records that do not state theirs.")
    ] = DEFAULT_BLOCK_SIZE,
    prefix_key_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Prompt tokens a DSA dump's prefix key covers (the seed tracer's "
            "--trace-prefix-key-tokens) [default: the run's summary.json, else what each "
            "record states].",
        ),
    ] = None,
    kind: Annotated[
        Kind | None,
        typer.Option(
            help="Read every file as dsa, pool, requests, eval, workload, benchmark, timeline, "
            "kv-events or summary (default: told by each file's content)."
        ),
    ] = None,
    experiment: Annotated[
        str | None,
        typer.Option(
            help="Label for serving and benchmark runs, e.g. exp2_2p6d (default: the run "
            "name); the serving report covers an experiment's runs together."
        ),
    ] = None,
    strict: Annotated[bool, typer.Option(help="Exit non-zero when any line was rejected.")] = False,
    columns: Annotated[
        str | None,
        typer.Option(
            help="A CSV arrival trace of another layout: arrival=COL,input_tokens=COL,"
            "output_tokens=COL[,model=COL,log_type=COL,arrival_unit=s|ms|us|datetime]."
        ),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Files read at once, each in its own process (one per 64 MB of input at "
            "most: a process takes half a second to start).",
        ),
    ] = 1,
    engine: EngineOption = "local",
    address: AddressOption = None,
    then_sql: Annotated[
        str | None,
        typer.Option(
            "--sql",
            metavar="SQL",
            help="Then run this read-only SQL on the warehouse as the ingest left it and "
            "print its rows, as kvtrace sql does (the ingest's report goes to stderr).",
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="--sql's rows as table, csv, json or parquet [default: the --output "
            "file's suffix, else table].",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write --sql's rows to this file.")
    ] = None,
) -> None:
    """Load existing trace dumps into the warehouse.

    Reads DSA top-k traces, KV pool time series and request metrics (JSONL, optionally
    gzipped), RULER prediction files, arrival traces (Azure, BurstGPT, Splitwise/Vidur
    CSVs, Mooncake JSONL), benchmark or simulator results (vLLM result JSON, AIPerf
    records, Vidur request and batch metrics), PyTorch profiler (Kineto) traces and
    serving run summaries, each told by its content.  A folder gives every such file
    in it.  Bad lines go to the quarantine (see the quarantine view) and the rest is
    ingested; the same file ingested twice adds nothing.  With --sql, one process ingests
    and answers: the SQL is checked first and runs once the files are in.

    Example: kvtrace ingest outputs/ruler_1771772829/
    """
    answer_format = _answer_options(then_sql, fmt, output)
    warehouse = _open(create=True)
    _check_output(output, warehouse)
    from kvtrace.ingest import ingest as ingest_paths
    from kvtrace.ingest.fanout import unreadable_error
    from kvtrace.ingest.readers.workload import parse_column_mapping

    mapping = parse_column_mapping(columns) if columns is not None else None
    report = _with_progress(
        "ingesting",
        lambda hook: ingest_paths(
            warehouse,
            paths,
            dataset=dataset,
            run_name=run_name,
            block_size=block_size,
            prefix_key_tokens=prefix_key_tokens,
            kind=kind,
            experiment=experiment,
            columns=mapping,
            progress=hook,
            jobs=jobs,
            executor=_executor(engine, address),
        ),
    )
    _print_ingest(report, out if then_sql is None else err)
    if (unread := unreadable_error(report)) is not None:
        raise unread
    if strict and report.rejected:
        raise IngestRejected(f"{report.rejected} line(s) were rejected (--strict)")
    if then_sql is not None and answer_format is not None:
        _answer(warehouse, then_sql, answer_format, output)


def _answer_options(
    then_sql: str | None, fmt: str | None, output: Path | None
) -> OutputFormat | None:
    """The format of ``--sql``'s rows, once its SQL is known to parse and only read
    (before any file is read); None without ``--sql``."""
    if then_sql is None:
        if fmt is not None or output is not None:
            raise KvtraceError("--format and --output shape the rows of --sql; give it the SQL")
        return None
    import duckdb

    from kvtrace.sql.query import read_only_statements

    with duckdb.connect(":memory:") as con:
        read_only_statements(con, then_sql)
    return _output_format(fmt, output)


def _with_progress(label: str, work):
    if options.quiet or not err.is_terminal:
        return work(None)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err.console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        return work(lambda done, total: bar.update(task, completed=done, total=total))


def _print_ingest(report: IngestReport, to: _Console) -> None:
    """The ingest's report, a line a file and a total, printed on ``to``."""
    from kvtrace.ingest.fanout import NOT_READ, skipped_files

    for item in report.files:
        name = Path(item.path).name
        if item.status == NOT_READ:
            continue
        if item.status != "ingested":
            to.say(f"{name}: {item.status}" + (f" (run {item.run_id})" if item.run_id else ""))
            continue
        line = f"{name}: {item.rows:,} rows into run {item.run_id}"
        if item.rejected:
            line += f", {item.rejected:,} line(s) rejected (see the quarantine view)"
        to.say(line)
        for reason, count in item.skipped.items():
            to.say(f"  skipped {count:,} {reason}")
        for note in item.notes:
            to.say(f"  {note}")
        for stat, tally in item.disagreements.items():
            if tally.first_line is None:  # a file-wide figure, e.g. RULER's summary.csv
                to.say(
                    f"  {stat}: the source says {tally.source_value:g}, kvtrace "
                    f"recomputes {tally.recomputed:g}; the samples are stored"
                )
                continue
            to.say(
                f"  source {stat.removeprefix('src_')} disagreed with the recomputed value "
                f"on {tally.disagreeing:,} of {tally.checked:,} rows (line {tally.first_line}: "
                f"{tally.source_value:g} vs {tally.recomputed:g}); the recomputed values are "
                "stored"
            )
    if skipped := skipped_files(report):
        shown = ", ".join(skipped[:5]) + (
            f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        )
        to.say(f"skipped {len(skipped):,} file(s) that are not traces kvtrace reads: {shown}")
    if len(families := report.by_family()) > 1:  # a folder of several kinds
        to.say(
            "by family: "
            + ", ".join(
                f"{family} {files:,} file{'s' * (files != 1)} ({rows:,} rows)"
                for family, (files, rows) in families.items()
            )
        )
    to.say(
        f"{report.rows:,} rows ingested, {report.rejected:,} line(s) rejected into {options.path}"
    )


collect_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Collect traces straight into the warehouse.\n\n"
    "Example: kvtrace collect pool --endpoint decode-0=http://10.0.0.5:30000/server_info",
)
app.add_typer(collect_app, name="collect")


def _status_line(text: str) -> None:
    """A collector's running count, written over itself on a terminal (not with --quiet)."""
    if not options.quiet and err.is_terminal:
        err.print(text, end="\r")


@collect_app.command("pool")
def collect_pool(
    endpoint: Annotated[
        list[str],
        typer.Option(
            help="Worker to poll: NAME=URL or URL; /server_info (instrumented JSON) or "
            "/metrics (Prometheus). Repeat for each worker."
        ),
    ],
    interval: Annotated[float, typer.Option(help="Seconds between polls of a worker.")] = 1.0,
    duration: Annotated[
        float | None,
        typer.Option(help="Stop after this many seconds (default: until Ctrl-C or SIGTERM)."),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Per-poll timeout in seconds (default: half the interval, at most 5)."),
    ] = None,
    run_name: Annotated[str | None, typer.Option(help="Run name (default: pool-<time>).")] = None,
    experiment: Annotated[str | None, typer.Option(help="Experiment label.")] = None,
) -> None:
    """Poll every worker's KV pool and write pool_snapshots in small batches.

    A slow, failing or garbled worker gives rows with poll_error and polling goes on;
    Ctrl-C or SIGTERM stops after writing what was polled and closing the run.

    Example: kvtrace collect pool --endpoint decode-0=http://127.0.0.1:30000/server_info
    """
    from kvtrace.collectors.pool_poller import Endpoint, poll_pool

    targets = [Endpoint.parse(text) for text in endpoint]
    warehouse = _open(create=True)

    def show(report) -> None:
        _status_line(
            f"{report.polls:,} polls, {report.errors:,} errors, {report.rows:,} rows written"
        )

    stop = threading.Event()
    with _stopped_by_sigterm(stop):
        report = poll_pool(
            warehouse,
            targets,
            interval_s=interval,
            duration_s=duration,
            timeout_s=timeout,
            run_name=run_name,
            experiment=experiment,
            on_batch=show,
            stop=stop,
        )
    out.say(
        f"polled {len(targets)} worker(s): {report.polls:,} polls, {report.errors:,} "
        f"with errors, {report.rows:,} rows into run {report.run_id}"
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
    duration: Annotated[
        float | None,
        typer.Option(help="Stop after this many seconds (default: until Ctrl-C or SIGTERM)."),
    ] = None,
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
    from kvtrace.collectors.kv_event_subscriber import EventSource, collect_kv_events

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

    stop = threading.Event()
    with _stopped_by_sigterm(stop):
        report = collect_kv_events(
            warehouse,
            sources,
            topic=topic,
            duration_s=duration,
            connect_timeout_s=connect_timeout,
            run_name=run_name,
            on_batch=show,
            stop=stop,
            bounds=MessageBounds(int(max_message_mb * 2**20), max_message_blocks),
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
    if options.quiet or not err.is_terminal:
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


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="SQL to run (SELECT only).")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the SQL from a file.")] = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
    no_external_access: Annotated[
        bool,
        typer.Option(
            "--no-external-access",
            help="Read no file outside the warehouse and change no setting: for SQL that "
            "someone else wrote.",
        ),
    ] = False,
    as_of: AsOfOption = None,
    memory_limit: Annotated[
        str | None,
        typer.Option(
            help="Memory the query may use, as 8GB, 512MiB or 25% [default: half the "
            "memory]; it may spill twice that to a temporary folder.",
        ),
    ] = None,
) -> None:
    """Run read-only SQL against the warehouse's views.

    Statements separated by ';' run in turn; the last one's rows are printed. The table
    format shows the first 1,000 rows; csv, json and parquet stream every row. Ctrl-C
    and SIGTERM stop a running query.

    Example: kvtrace sql "SELECT layer_id, unique_blocks_mean FROM dsa_layer_profile"
    """
    if query is None and file is None:
        raise KvtraceError('no SQL given: kvtrace sql "SELECT ..." or kvtrace sql --file QUERY.sql')
    if query is not None and file is not None:
        raise KvtraceError("give the SQL either as an argument or with --file, not both")
    text = query if query is not None else _read_text(file)  # type: ignore[arg-type]
    fmt = _output_format(fmt, output)
    warehouse = _open(as_of=as_of)
    _check_output(output, warehouse)
    _answer(warehouse, text, fmt, output, no_external_access, memory_limit)


def _check_output(output: Path | None, warehouse: Warehouse) -> None:
    """Refuse an ``--output`` file that would land inside a local warehouse, before any
    work is done."""
    if output is not None and warehouse.root is not None:
        from kvtrace.sql.query import check_output_path

        check_output_path(output, warehouse.root)


def _answer(
    warehouse: Warehouse,
    text: str,
    fmt: OutputFormat,
    output: Path | None,
    no_external_access: bool = False,
    memory_limit: str | None = None,
) -> None:
    """Run the read-only SQL ``text`` against ``warehouse`` and write its rows in ``fmt``
    to ``output`` (standard output when None), within ``memory_limit``."""
    from kvtrace.sql.interrupt import interruptible
    from kvtrace.sql.query import atomic_output, restrict_to, run_query, write_stream

    def opened(for_sql: str | None) -> duckdb.DuckDBPyConnection:
        con = open_analysis_connection(warehouse, for_sql=for_sql, memory_limit=memory_limit)
        if no_external_access:
            restrict_to(con, warehouse.location)
        return con

    con = opened(text)  # only what the SQL names: a quick start
    try:
        try:
            with interruptible(con):
                result = run_query(con, text, fmt)
        except QueryError:  # a name bound only at run time, or a real error: say it in full
            con.close()
            con = opened(None)
            with interruptible(con):
                result = run_query(con, text, fmt)
        with interruptible(con):
            if output is None:
                write_stream(result, fmt, sys.stdout.buffer, _width(None))
                sys.stdout.flush()
            else:
                with atomic_output(output) as sink:
                    write_stream(result, fmt, sink)
                err.say(f"wrote {output}")
    except _duckdb_error() as exc:  # raised while streaming rows
        from kvtrace.sql.query import query_error

        raise query_error(exc) from None
    finally:
        con.close()


def _duckdb_error() -> type[duckdb.Error]:
    import duckdb

    return duckdb.Error


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise KvtraceError(f"cannot read {path}: {exc.strerror}") from None


_SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _output_format(fmt: str | None, output: Path | None) -> OutputFormat:
    """``--format``, else what the output file's suffix names, else a table."""
    if fmt is None:
        fmt = _SUFFIX_FORMATS.get(output.suffix.lower(), "table") if output else "table"
    if fmt not in OUTPUT_FORMATS:
        raise KvtraceError(f"expected one of {', '.join(OUTPUT_FORMATS)} for --format, got {fmt!r}")
    if fmt == "parquet" and output is None:
        raise KvtraceError("--format parquet needs --output FILE")
    return fmt  # type: ignore[return-value]


def _width(output: Path | None) -> int | None:
    """How wide a table may print: the terminal's width when it goes to one."""
    if output is not None or not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _emit(data: bytes, output: Path | None) -> None:
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        from kvtrace.sql.query import write_output

        write_output(data, output)
        err.say(f"wrote {output}")


WhatIfTable = Literal["combined", "tiers", "runs", "seconds", "requests", "replicas"]


@app.command()
def whatif(
    run: DsaRunOption = None,
    block_size: BlockSizesOption = None,
    tier: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME:CAPACITY:GBPS:LATENCY_US, fastest first (repeatable); CAPACITY in "
            "blocks (items of the granularity), the last tier inf; GB/s = 10^9 bytes/s; "
            "microseconds per read [default: hbm:4096:3000:0 host:65536:50:5 "
            "remote:inf:20:30]."
        ),
    ] = None,
    policy: Annotated[
        Policy,
        typer.Option(
            help="lru (exact tiers from stack distances), fifo (simulated tier by tier), "
            "opt (Belady: the ceiling) or pin_prefix."
        ),
    ] = "lru",
    granularity: GranularityOption = "block",
    sharing: SharingOption = "private",
    scope: ScopeOption = None,
    arrivals: Annotated[
        str | None,
        typer.Option(
            help="Replay this workload run's arrival times: the i-th request arrives with "
            "its i-th arrival and decodes a step every --tpot-ms (scope run)."
        ),
    ] = None,
    tpot_ms: Annotated[
        float, typer.Option(help="Milliseconds per decode step when replaying arrivals.")
    ] = DEFAULT_TPOT_MS,
    bytes_per_token: Annotated[
        int,
        typer.Option(
            help="KV bytes per token and layer [default: 656, DeepSeek-V3.2's FP8 sparse-MLA "
            "cache (FlashMLA): 512 B FP8 latent + 16 B scales + 128 B BF16 RoPE; the "
            "seed tracer's BF16 estimate is 1152]."
        ),
    ] = DEEPSEEK_V32_BYTES_PER_TOKEN,
    prefill_tok_s: Annotated[
        float | None,
        typer.Option(
            help="Prompt tokens per second a prefill computes, to weigh fetching a prefix "
            "against recomputing it [default: the warehouse's fitted batch timings, else "
            "DeepSeek's published 73,700 per H800 node]."
        ),
    ] = None,
    cost_run: Annotated[
        str | None,
        typer.Option(help="The run whose batch timings give the prefill cost (when several)."),
    ] = None,
    replicas: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=K: keep K copies, one tier closer, of the blocks tier NAME reads at "
            "least K times (repeatable); reports the bytes that saves and costs."
        ),
    ] = None,
    table: Annotated[
        WhatIfTable,
        typer.Option(
            help="What --format csv/json/parquet writes: the tier rows with their run's "
            "figures (combined), or one table: tiers, runs, seconds (per second of the "
            "stream's time), requests (TTFT saved) or replicas."
        ),
    ] = "combined",
    fmt: FormatOption = None,
    output: OutputOption = None,
    engine: EngineOption = "local",
    address: AddressOption = None,
) -> None:
    """What would a tiered KV pool serve? Replay each run's top-k accesses through tiers.

    Prints per run and block size: each tier's share of the accesses (and of the hits
    on blocks other requests brought in, with --sharing content), bytes and fetch time per
    decode step (p50/p95/p99), the prefix length from which fetching from a tier beats
    recomputing, the HBM capacity that reaches 90/95/99 % hits, and the time to first
    token a shared pool saves.

    Example: kvtrace whatif --sharing content --tier hbm:2048:3000:0 --tier remote:inf:20:30
    """
    from kvtrace.analysis.kv_access.whatif import (
        Tier,
        WhatIfAnalysis,
        WhatIfSpec,
        parse_replicas,
    )
    from kvtrace.analysis.shares import run_analysis
    from kvtrace.sql.query import render

    chosen = _output_format(fmt, output)
    pooled = sharing == "content" or arrivals is not None
    spec = WhatIfSpec(
        block_sizes=tuple(block_size or [DEFAULT_BLOCK_SIZE]),
        tiers=tuple(Tier.parse(text) for text in (tier or DEFAULT_TIERS)),
        policy=policy,
        granularity=granularity,
        scope=scope or ("run" if pooled else "request"),
        sharing=sharing,
        bytes_per_token=bytes_per_token,
        runs=tuple(run) if run else None,
        arrivals=arrivals,
        tpot_ms=tpot_ms,
        prefill_tok_s=prefill_tok_s,
        cost_run=cost_run,
        replicas=tuple(parse_replicas(replicas or []).items()),
    )
    with _busy("Simulating the tiers"):
        result = run_analysis(WhatIfAnalysis(spec), _open(), _executor(engine, address))
    if chosen == "table" and output is None and table == "combined":
        orders = sorted(set(result.runs["stream_order"].to_pylist()))
        err.say(f"stream order: {'; '.join(orders)}; prefill: {result.runs['prefill_source'][0]}")
        shown = [result.tiers, result.runs] + ([result.replicas] if spec.replicas else [])
        _emit(b"\n".join(render(part, "table", _width(None)) for part in shown), None)
    else:
        _emit(render(result.table(table), chosen, _width(output)), output)


@app.command("prefix-curve")
def prefix_curve(
    run: Annotated[
        list[str] | None,
        typer.Option(help="Run id or run name (repeatable) [default: every run with hash_ids]."),
    ] = None,
    policy: Annotated[
        Literal["lru", "fifo", "radix_lru", "opt"],
        typer.Option(
            help="lru or fifo (a hash-chained block pool, as vLLM's), radix_lru (SGLang's "
            "radix tree) or opt (Belady over the tree's leaves)."
        ),
    ] = "lru",
    semantics: Annotated[
        Literal["prefix", "block"],
        typer.Option(help="prefix: the leading run of cached blocks; block: a block cache."),
    ] = "prefix",
    weight: Annotated[
        Literal["tokens", "blocks", "requests"],
        typer.Option(help="tokens, blocks or requests (the mean per request)."),
    ] = "tokens",
    warmup: Annotated[
        float, typer.Option(help="Share of the earliest requests left out of the counts.")
    ] = 0.0,
    capacity: Annotated[
        list[int] | None, typer.Option(help="Cache capacity in blocks (repeatable).")
    ] = None,
    capacity_gib: Annotated[
        list[float] | None,
        typer.Option(
            help="Cache capacity in GiB (repeatable; needs --model or --bytes-per-token)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="The model whose KV bytes per token turn GiB into blocks."),
    ] = None,
    bytes_per_token: Annotated[
        float | None, typer.Option(help="KV bytes per token, all layers.")
    ] = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Hit rate of a prefix cache shared by a workload trace's requests, by capacity: the
    rows of workload_prefix_hit_curve.

    Example: kvtrace prefix-curve --policy radix_lru --warmup 0.5 --capacity-gib 512
    --model llama-3-8b
    """
    from kvtrace.analysis.prefix_cache import PrefixCurveSpec, prefix_hit_curve_table
    from kvtrace.sql.query import render
    from kvtrace.sql.runs import run_ids

    chosen = _output_format(fmt, output)
    con = open_analysis_connection(_open())
    spec = PrefixCurveSpec(
        policy=policy,
        capacities=tuple(capacity or []),
        semantics=semantics,
        weight=weight,
        warmup=warmup,
        capacity_bytes=tuple(round(g * 2**30) for g in capacity_gib or []),
        bytes_per_token=bytes_per_token,
        model=model,
    )
    runs = run_ids(con, run, having="workload_requests", what="workload rows") if run else None
    with _busy("Simulating the prefix cache"):
        table = prefix_hit_curve_table(con, spec, runs)
    _emit(render(table, chosen, _width(output)), output)


@app.command("hit-curve")
def hit_curve(
    run: DsaRunOption = None,
    block_size: BlockSizesOption = None,
    policy: Annotated[
        Policy,
        typer.Option(help="lru, fifo, opt (Belady: the ceiling) or pin_prefix."),
    ] = "lru",
    granularity: GranularityOption = "block",
    sharing: SharingOption = "private",
    scope: ScopeOption = None,
    capacity: Annotated[
        list[int] | None,
        typer.Option(help="A capacity in items to report besides the powers of two (repeatable)."),
    ] = None,
    sample: Annotated[
        float,
        typer.Option(
            help="Estimate an LRU curve from this share of the items, sampled by a hash of "
            "their keys (SHARDS): for streams too long to simulate whole [default: 1, exact]."
        ),
    ] = 1.0,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Hit rate against cache capacity, per run: the rows of dsa_hit_curve.

    Example: kvtrace hit-curve --sharing content --sample 0.01
    """
    from kvtrace.analysis.kv_access.curves import hit_curve_table
    from kvtrace.analysis.kv_access.plan import StreamSpec
    from kvtrace.analysis.kv_access.whatif import check_shareable
    from kvtrace.sql.query import render
    from kvtrace.sql.runs import run_ids

    chosen = _output_format(fmt, output)
    con = open_analysis_connection(_open())
    runs = run_ids(con, run, having="dsa_steps", what="DSA rows") if run else None
    specs = [
        StreamSpec(
            size,
            granularity,
            scope or ("run" if sharing == "content" else "request"),
            sharing,
            sample=sample,
        )
        for size in block_size or [DEFAULT_BLOCK_SIZE]
    ]
    for spec in specs:
        spec.check()
    if sharing == "content":
        check_shareable(con, runs)
    with _busy("Simulating the cache"):
        table = hit_curve_table(con, specs, policy, capacity or [], runs)
    _emit(render(table, chosen, _width(output)), output)


def _executor(engine: str, address: str | None) -> Executor | None:
    """Where the work of a command runs: here (None), or on a Ray cluster."""
    if engine != "ray":
        return None
    from kvtrace.distributed import ray_engine

    ray_engine.start(address)
    return ray_engine.RayExecutor()


@contextmanager
def _busy(what: str):
    """A spinner on a terminal (not with --quiet)."""
    if options.quiet or not err.is_terminal:
        yield
        return
    with err.status(what + " ..."):
        yield


@app.command()
def views(
    pattern: Annotated[
        str | None,
        typer.Argument(
            metavar="[PATTERN]",
            help="Only objects whose name or family (the SQL file: dsa, timeline, ...) "
            "holds this text; * and ? match as in file names.",
        ),
    ] = None,
    columns: Annotated[
        bool, typer.Option("--columns", help="Each object's columns, described.")
    ] = False,
) -> None:
    """List the views and macros, one a line with what it answers.

    Example: kvtrace views timeline --columns
    """
    from kvtrace.sql import catalog

    chosen = [
        obj
        for obj in catalog.documented_objects()
        if obj.public and (pattern is None or _names_match(pattern, obj.name, obj.file))
    ]
    if not chosen:
        raise KvtraceError(f"no view or macro matches {pattern!r}; kvtrace views lists them all")
    width = min(max(len(obj.signature) for obj in chosen), 36)  # longer ones push on
    for obj in chosen:
        if not columns:
            line = f"{obj.signature:<{width}}  {obj.kind:<5}  {_first_sentence(obj.description)}"
            out.print(line, markup=False, highlight=False, no_wrap=True, crop=out.is_terminal)
            continue
        out.print(f"[bold]{obj.signature}[/bold]  ({obj.kind}, {obj.file})")
        out.print(f"  {obj.description}", markup=False)
        if obj.aliases:
            out.print(f"  (former name {', '.join(obj.aliases)}: kept for one release)")
        for column, text in obj.columns.items():
            out.print(f"    {column:<28} {text}", markup=False)
        out.print()


def _names_match(pattern: str, name: str, file: str) -> bool:
    """Whether an object of ``file`` called ``name`` is one ``pattern`` asks for."""
    import fnmatch

    family = file.removesuffix(".sql")
    pattern = pattern.lower()
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(family, pattern)
    return pattern in name or pattern in family


def _first_sentence(text: str) -> str:
    """A description's first sentence."""
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


@app.command()
def summary(
    run: Annotated[str, typer.Option(help="Run id or run name.")],
    block_size: Annotated[
        int | None,
        typer.Option(
            help="Stored block size, when the run has several [default: the tracer's own, else 64]."
        ),
    ] = None,
    output: OutputOption = None,
    as_of: AsOfOption = None,
    engine: EngineOption = "local",
    address: AddressOption = None,
) -> None:
    """Write the summary.json of a DSA run (the tracer's format).

    Example: kvtrace summary --run ruler_1771772829 --output summary.json
    """
    from kvtrace.analysis.shares import run_analysis
    from kvtrace.analysis.summary import SummaryAnalysis, SummarySpec

    with _busy("Counting"):
        result = run_analysis(
            SummaryAnalysis(SummarySpec(run, block_size)),
            _open(as_of=as_of),
            _executor(engine, address),
        )
    _emit((json.dumps(result, indent=2) + "\n").encode(), output)


@app.command("shell-init")
def shell_init(output: OutputOption = None) -> None:
    """Write a script that opens the same views in a plain duckdb shell.

    Example: kvtrace shell-init -o kvtrace.sql && duckdb -init kvtrace.sql
    """
    from kvtrace.sql import catalog

    _emit(catalog.shell_init_sql(_open()).encode(), output)


@app.command()
def optimize(
    target_mb: Annotated[int, typer.Option(min=1, help="Size of the compacted files.")] = 256,
) -> None:
    """Compact each table's small files into large ones (Delta Lake's compaction).

    Readers see the same rows before and after; the old files stay until 'kvtrace vacuum'.

    Example: kvtrace optimize
    """
    from kvtrace.warehouse.ops.maintenance import optimize as compact

    with _busy("Compacting"):
        report = compact(_open(), target_mb=target_mb)
    for note in report.notes:
        err.say(note)
    for table, what in report.tables.items():
        out.say(f"{table}: {what}")
    out.say(
        f"warehouse version {report.version}" + ("" if report.tables else " (nothing to compact)")
    )


@app.command()
def vacuum(
    retain_hours: Annotated[
        float,
        typer.Option(
            min=0,
            help="Keep every file a version of the last N hours needs (under 1 needs --force).",
        ),
    ] = 168.0,
    force: Annotated[
        bool,
        typer.Option(
            help="Vacuum with a retention under 1 hour: a query running now may lose files "
            "it reads, and --as-of those versions stops working."
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="List what would go; delete nothing.")] = False,
) -> None:
    """Delete files that no recent version needs (Delta Lake's vacuum), and drop the files
    of writers that died before their commit was recorded.

    Never deletes a file of the newest version or of a commit being written.  Versions
    older than --retain-hours may no longer be readable with --as-of.

    Example: kvtrace vacuum --retain-hours 24
    """
    from kvtrace.warehouse.ops.maintenance import vacuum as sweep

    report = sweep(_open(), retain_hours=retain_hours, force=force, dry_run=dry_run)
    for note in report.notes:
        err.say(note)
    for table, what in report.tables.items():
        out.say(f"{table}: {what}")
    out.say("nothing to delete" if not report.tables else f"warehouse version {report.version}")


@app.command("check")
def check_command(
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Return a damaged warehouse to its newest consistent version and "
            "list the sources to ingest again.",
        ),
    ] = False,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Read every page of every data file (and verify its checksum), not only "
            "each file's footer: finds bytes garbled inside a file, at the cost of reading "
            "the whole warehouse.",
        ),
    ] = False,
) -> None:
    """Verify every table's log, the journal and every file the warehouse shows.

    Prints one line per problem (table, log version, the rows and sources it affects)
    and exits 1 when anything is wrong.  With --repair, rolls back what cannot be read
    (moving damaged log entries aside, never deleting a data file) and says which sources
    to ingest again.

    Example: kvtrace check --deep --repair
    """
    from kvtrace.warehouse.ops.integrity import check
    from kvtrace.warehouse.ops.repair import repair as mend

    warehouse = _open()
    if repair:
        with _busy("Repairing"):
            done = mend(warehouse, deep)
        for line in done.done:
            out.say(f"repaired: {line}")
        if done.sources:
            out.say("ingest these sources again to restore their rows: " + ", ".join(done.sources))
        found = done.after
    else:
        with _busy("Checking"):
            found = check(warehouse, deep)
    for problem in found.problems:
        out.say(f"problem: {problem.line()}")
    for note in found.notes:
        out.say(f"note: {note}")
    if found.problems:
        raise WarehouseDamaged(
            f"{len(found.problems)} problem(s) in {warehouse.location}"
            + (
                ""
                if repair
                else f"; 'kvtrace check --repair{' --deep' * deep}' returns it to its newest "
                "consistent version"
            )
        )
    out.say(
        f"{warehouse.location} is healthy: {len(found.logs)} logs and "
        f"{found.files_checked:,} data files checked"
    )


@app.command()
def migrate() -> None:
    """Convert a warehouse of an earlier kvtrace (its own manifest) to Delta Lake tables,
    in place: the data files stay, the tables' logs list them.

    Example: kvtrace -w old-warehouse migrate
    """
    from kvtrace.warehouse.ops.migrate import migrate as convert

    with _busy("Converting"):
        report = convert(options.path)
    for table, files in report.tables.items():
        out.say(f"{table}: {files} file(s)")
    out.say(f"{options.path} is now made of Delta tables (version {report.version})")


@app.command()
def demo() -> None:
    """Trace a small RULER run of the dsa-ref model and print its summary: the tour in one go.

    Runs on the CPU with no network: six needle-in-a-haystack prompts of 3,000 tokens,
    16 decode steps each, with an index top-k of 256 (about 8.5 % of the context), traced
    at block sizes 16 and 64.

    Example: kvtrace demo
    """
    result = _run_collect(
        DsaCollectOptions(
            dataset="ruler",
            limit=6,
            max_new_tokens=16,
            ruler_length=3000,
            block_sizes=(64, 16),
            topk=256,
            run_name="demo-ruler-dsa-ref",
            commit_every_s=math.inf,  # one commit, however long the machine takes
        )
    )
    out.say(
        f"traced {result.requests} requests ({result.new_tokens} tokens, "
        f"{result.seconds:.1f} s) into run {result.run_id}"
    )
    warehouse = _open()
    con = open_analysis_connection(warehouse)
    try:
        from kvtrace.analysis.summary import run_summary

        summary = run_summary(con, result.run_id, 64)
    finally:
        con.close()
    _print_summary_table(summary)
    report = Path("kvtrace-demo-report.html").resolve()
    if warehouse.root is not None:
        report = warehouse.root.parent / report.name
    _write_report(warehouse, "dsa", runs=[result.run_id], experiments=[], output=report)
    out.say(
        f"\nWarehouse: {warehouse.location}\nReport:    {report}\nNext: kvtrace -w "
        f'{warehouse.location} sql "SELECT * FROM dsa_layer_profile"   (kvtrace views '
        "lists the views)"
    )


@app.command()
def samples(
    folder: Annotated[
        Path, typer.Argument(help="Where to write them (created).", metavar="FOLDER")
    ] = Path("kvtrace-samples"),
) -> None:
    """Write the sample traces that ship with kvtrace: one of each family beyond the
    demo's (workload, KV-cache events, profiler timeline, serving), with their sources.

    Example: kvtrace samples && kvtrace ingest kvtrace-samples
    """
    from kvtrace.samples import README, SAMPLES, sample
    from kvtrace.sql.query import write_output

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvtraceError(f"cannot write the samples into {folder}: {exc.strerror}") from None
    for name in [*SAMPLES, README]:
        write_output(sample(name), folder / name)  # each whole or not at all
        out.say(f"{folder / name}  {SAMPLES.get(name, 'where each sample comes from')}")
    out.say(f"Next: kvtrace ingest {folder}")


@app.command("report")
def report_command(
    name: Annotated[ReportName, typer.Argument(help="The report.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")],
    run: Annotated[
        list[str] | None,
        typer.Option(
            help="Run id or run name to cover (repeatable) [default: every run of the kind]; "
            "compare: the two sides; eval: the first two are diffed."
        ),
    ] = None,
    experiment: Annotated[
        list[str] | None,
        typer.Option(help="Experiment label to cover (repeatable); compare: the two sides."),
    ] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            metavar="METRIC=MS",
            help="serving: a service-level objective, ttft, tpot or e2el in milliseconds "
            "(repeatable), drawn as a line and counted in the goodput.",
        ),
    ] = None,
    as_of: AsOfOption = None,
) -> None:
    """Render a self-contained HTML report (charts and tables, with their SQL).

    The report names the warehouse version it was made from: '--as-of' that version
    makes the same report again.

    Example: kvtrace report dsa --run demo-ruler-dsa-ref --output dsa.html
    """
    _write_report(
        _open(as_of=as_of),
        name,
        runs=run or [],
        experiments=experiment or [],
        output=output,
        slos=_slos(name, slo or []),
    )
    out.say(f"wrote {output}")


SLO_METRICS = ("ttft", "tpot", "e2el")


def _slos(report: str, given: list[str]) -> dict[str, float]:
    """``--slo METRIC=MS`` values by metric; one sentence for a malformed one."""
    if given and report != "serving":
        raise KvtraceError("--slo applies to the serving report only")
    slos: dict[str, float] = {}
    for text in given:
        metric, _, value = text.partition("=")
        try:
            milliseconds = float(value)
        except ValueError:
            milliseconds = -1.0
        if metric not in SLO_METRICS or not milliseconds > 0:
            raise KvtraceError(
                f"expected --slo METRIC=MS with METRIC one of {', '.join(SLO_METRICS)} and MS "
                f"a positive number of milliseconds, got {text!r}"
            )
        slos[metric] = milliseconds
    return slos


def _write_report(
    warehouse: Warehouse,
    name: str,
    *,
    runs: list[str],
    experiments: list[str],
    output: Path,
    slos: dict[str, float] | None = None,
) -> None:
    """Render report ``name`` to ``output``; its command line is the one that makes it
    again (the warehouse version pinned)."""
    import shlex

    from kvtrace.reports import reports
    from kvtrace.reports.render import render_report

    known = reports()
    if name not in known:
        raise KvtraceError(f"expected {', '.join(known)} for the report, got {name!r}")
    selection = [arg for run in runs for arg in ("--run", run)]
    selection += [arg for label in experiments for arg in ("--experiment", label)]
    for metric, milliseconds in (slos or {}).items():
        selection += ["--slo", f"{metric}={milliseconds:g}"]
    command_line = shlex.join(
        [
            "kvtrace",
            "-w",
            warehouse.location,
            "report",
            name,
            *selection,
            "--as-of",
            str(warehouse.version),
            "--output",
            output.name,
        ]
    )
    html = render_report(
        warehouse,
        known[name],
        runs=runs,
        experiments=experiments,
        command_line=command_line,
        settings={f"slo_{metric}_ms": ms for metric, ms in (slos or {}).items()},
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    from kvtrace.sql.query import write_output

    write_output(html.encode(), output)


def _print_summary_table(result: dict) -> None:
    from rich.table import Table

    from kvtrace.sql.text_table import format_column

    table = Table(
        title=f"DSA summary of {result['run_name']} ({result['dataset']}, "
        f"block size {result['config']['kv_block_size_tokens']})"
    )
    table.add_column("statistic", no_wrap=True)
    for name in ("count", "min", "p50", "p95", "max", "mean"):
        table.add_column(name, justify="right")
    for name in (
        "unique_blocks",
        "touched_block_ratio",
        "tokens_per_touched_block",
        "offsets",
        "prefix_intersection_ratio",
    ):
        stats = result[name]
        # one number format per statistic: its values share a unit and a magnitude
        values, _ = format_column([stats[k] for k in ("min", "p50", "p95", "max", "mean")], "-")
        table.add_row(name, f"{stats['count']:,}", *values)
    out.print(table)
    hot = result["prefix_hot_blocks"]
    for request, blocks in list(hot.items())[:3]:
        top = ", ".join(f"block {b['block_id']} x{b['touch_count']}" for b in blocks[:4])
        out.say(f"hottest prefix blocks of request {request}: {top}")


def main() -> None:
    """The ``kvtrace`` command: run, then leave the process at once.

    SIGTERM stops a command the way Ctrl-C does (a collector writes what it has and
    closes its run).  On Linux, Arrow allocates from its jemalloc pool unless
    ``ARROW_DEFAULT_MEMORY_POOL`` says otherwise.  The process ends with ``os._exit`` once
    its output is flushed: the Delta Lake library's runtime threads can abort an
    interpreter's ordinary exit ("terminate called without an active exception"), and
    nothing of kvtrace's is left to do by then.
    """
    signal.signal(signal.SIGTERM, _terminate)
    if sys.platform == "linux":  # Arrow's jemalloc pool: as fast as its default (mimalloc)
        # and 70 MB less resident for a 137 MB ingest, 15 MB less for a small one
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    status = run()
    _release()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    os._exit(status)


def run() -> int:
    """Run the app on ``sys.argv`` and turn kvtrace errors into one sentence; returns the
    exit status."""
    try:
        command = typer.main.get_command(_app_for(sys.argv[1:]))
        _readable_metavars(command)
        command(prog_name="kvtrace")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KvtraceError as exc:
        if options.debug:
            raise
        return _fail(f"Error: {exc}", 1)
    except Terminated:
        return _fail("Terminated; nothing was half-written.", 143)
    except KeyboardInterrupt:
        return _fail("Interrupted; nothing was half-written.", 130)
    except OSError as exc:
        if options.debug:
            raise
        return _fail(
            f"Error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), 1
        )
    except Exception as exc:
        if options.debug:
            raise
        if "duckdb" in sys.modules and isinstance(exc, sys.modules["duckdb"].Error):
            from kvtrace.sql.query import query_error

            return _fail(f"Error: {query_error(exc)}", 1)  # a view read what it could not
        return _fail(
            f"Error: kvtrace failed unexpectedly ({type(exc).__name__}: {exc}); "
            "rerun with --debug and report it",
            1,
        )  # a bug: one line
    return 0


def _app_for(args: list[str]) -> typer.Typer:
    """The app with only the command ``args`` name, when they name one: typer reads the
    signature of every command it builds (20 ms for all of them).  Help, a version or a
    name that is not a command get the whole app."""
    name = _command_name(args)
    commands = [
        info
        for info in app.registered_commands
        if (info.name or typer.main.get_command_name(getattr(info.callback, "__name__", "")))
        == name
    ]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return one


def _command_name(args: list[str]) -> str | None:
    """The first argument that is not a global option or its value."""
    values = iter(args)
    for arg in values:
        if arg in ("-w", "--warehouse"):
            next(values, None)
        elif not arg.startswith("-"):
            return arg
    return None


_METAVARS = {
    "IntParamType": "N",
    "IntRange": "N",
    "FloatParamType": "NUMBER",
    "FloatRange": "NUMBER",
    "TyperPath": "PATH",
}
_METAVARS_BY_NAME = {
    "as_of": "VERSION",
    "fmt": "FORMAT",
    "interval": "SECONDS",
    "timeout": "SECONDS",
    "connect_timeout": "SECONDS",
    "duration": "SECONDS",
}


def _readable_metavars(command: Any) -> None:  # typer's own click Command
    """Help that names what to give (``PATH...``, ``RUN_NAME``, ``N``), not a Python
    type (``<str>``, ``{paths}...``); a choice keeps its list, a metavar given stays."""
    for param in command.params:
        kind = type(param.type).__name__
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        if "Choice" in kind:  # an option lists its choices; an argument, in its usage
            if param.param_type_name == "argument":
                param.metavar = "|".join(param.type.choices)
            continue
        name = (param.name or "value").upper()
        if param.nargs == -1:
            name = name.removesuffix("S")
        readable = _METAVARS_BY_NAME.get(param.name or "") or _METAVARS.get(kind, name)
        param.metavar = readable + ("..." if param.nargs == -1 else "")
    for sub in getattr(command, "commands", {}).values():
        _readable_metavars(sub)


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _release() -> None:
    """Give back what outlives a command: a Ray cluster this process started."""
    if "ray" in sys.modules:
        ray = sys.modules["ray"]
        with suppress(Exception):
            if ray.is_initialized():
                ray.shutdown()


def _fail(message: str, status: int) -> int:
    sys.stderr.write(message + "\n")
    return status
