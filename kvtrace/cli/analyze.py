"""The cache simulations: ``whatif``, ``prefix-curve``, ``hit-curve``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar, cast, get_args

import typer

from kvtrace.analysis import open_analysis_connection
from kvtrace.analysis.kv_access import (
    DEEPSEEK_V32_BYTES_PER_TOKEN,
    DEFAULT_TIERS,
    DEFAULT_TPOT_MS,
    DEFAULT_WINDOW_TOKENS,
    Policy,
)
from kvtrace.analysis.policies import prefix_policies
from kvtrace.cli._app import _executor, _open, app, err
from kvtrace.cli._options import (
    AddressOption,
    BlockSizesOption,
    DsaRunOption,
    EngineOption,
    FormatOption,
    GranularityOption,
    OutputOption,
    ScopeOption,
    SharingOption,
    one_of,
)
from kvtrace.cli._output import _busy, _emit, _emit_table, _output_format, _width
from kvtrace.defaults import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from kvtrace.analysis.kv_access.whatif import WhatIf


def each_of(names: Callable[[], Sequence[str]]) -> Callable[[list[str] | None], list[str] | None]:
    """A typer callback that takes every value of a repeatable option if each is a name
    ``names`` gives (see `one_of`)."""
    check = one_of(names)

    def check_each(values: list[str] | None) -> list[str] | None:
        return (
            [name for value in values if (name := check(value)) is not None] if values else values
        )

    return check_each


def _policy_names() -> tuple[str, ...]:
    """The policies of ``whatif`` and ``hit-curve``."""
    return get_args(Policy)


def _policies(values: list[str] | None) -> list[Policy]:
    """The policies of a repeatable ``--policy`` (checked by its callback), each once."""
    return [cast(Policy, name) for name in _distinct(values, "lru")]


T = TypeVar("T")


def _distinct(values: Sequence[T] | None, default: T) -> list[T]:
    """The values of a repeatable option, each once and in the order given, else the
    default."""
    return list(dict.fromkeys(values)) if values else [default]


def _stacked(parts: list[WhatIf]) -> WhatIf:
    """The what-ifs of several policies as one: each table's rows one after another
    (every table is keyed by the policy)."""
    import pyarrow as pa

    from kvtrace.analysis.kv_access.whatif import WhatIf

    if len(parts) == 1:
        return parts[0]
    return WhatIf(*(pa.concat_tables(getattr(p, f.name) for p in parts) for f in fields(WhatIf)))


WhatIfTable = Literal["combined", "tiers", "runs", "seconds", "requests", "replicas", "packing"]
WindowTokensOption = Annotated[
    int,
    typer.Option(
        help="Tokens of the sliding window: policy sliding_window keeps the blocks holding "
        "each decoding request's last N tokens [default: 2048, DeepSeek-V3.2's top-k]."
    ),
]


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
        list[str] | None,
        typer.Option(
            callback=each_of(_policy_names),
            help="lru (exact tiers from stack distances), fifo (simulated tier by tier), "
            "opt (Belady: the ceiling), pin_prefix, sliding_window (see --window-tokens), "
            "lfu (fewest accesses) or score (lowest DSA score at the latest access); "
            "repeatable: each policy's rows [default: lru].",
        ),
    ] = None,
    window_tokens: WindowTokensOption = DEFAULT_WINDOW_TOKENS,
    subblock: Annotated[
        list[int] | None,
        typer.Option(
            help="Also report the bytes each tier would move if every layer fetched only "
            "the sub-blocks of this many tokens it touched (repeatable, e.g. 1, 4, 8): "
            "the packing table."
        ),
    ] = None,
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
            "stream's time), requests (TTFT saved), replicas or packing (--subblock)."
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
        window_tokens=window_tokens,
        subblocks=tuple(subblock or []),
    )
    with _busy("Simulating the tiers"):
        result = _stacked(
            [
                run_analysis(WhatIfAnalysis(spec), _open(), _executor(engine, address))
                for spec in (replace(spec, policy=name) for name in _policies(policy))
            ]
        )
    if chosen == "table" and output is None and table == "combined":
        orders = sorted(set(result.runs["stream_order"].to_pylist()))
        err.say(f"stream order: {'; '.join(orders)}; prefill: {result.runs['prefill_source'][0]}")
        shown = [result.tiers, result.runs] + ([result.replicas] if spec.replicas else [])
        shown += [result.packing] if spec.subblocks else []
        _emit(b"\n".join(render(part, "table", _width(None)) for part in shown), None)
    else:
        _emit_table(result.table(table), chosen, output)


@app.command("prefix-curve")
def prefix_curve(
    run: Annotated[
        list[str] | None,
        typer.Option(help="Run id or run name (repeatable) [default: every run with hash_ids]."),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            callback=each_of(prefix_policies),
            help="lru or fifo (a hash-chained block pool, as vLLM's), radix_lru (SGLang's "
            "radix tree) or opt (Belady over the tree's leaves); repeatable: one curve "
            "each [default: lru].",
        ),
    ] = None,
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
        list[int] | None,
        typer.Option(
            help="Cache capacity in blocks (repeatable) [default, with no --capacity-gib "
            "either: 1, 2, 4, ... up to every distinct block]."
        ),
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
    import pyarrow as pa

    from kvtrace.analysis.prefix_cache import PrefixCurveSpec, prefix_hit_curve_table
    from kvtrace.sql.runs import run_ids

    chosen = _output_format(fmt, output)
    # bound for what the simulation reads (and --run's lookup): a third of the time to open
    con = open_analysis_connection(_open(), for_sql="FROM workload_requests, runs_named([])")
    spec = PrefixCurveSpec(
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
        table = pa.concat_tables(
            prefix_hit_curve_table(con, replace(spec, policy=name), runs)
            for name in _distinct(policy, "lru")
        )
    _emit_table(table, chosen, output)


@app.command("hit-curve")
def hit_curve(
    run: DsaRunOption = None,
    block_size: BlockSizesOption = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            callback=each_of(_policy_names),
            help="lru, fifo, opt (Belady: the ceiling), pin_prefix, sliding_window, lfu or "
            "score; repeatable: one curve each [default: lru].",
        ),
    ] = None,
    window_tokens: WindowTokensOption = DEFAULT_WINDOW_TOKENS,
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
    import pyarrow as pa

    from kvtrace.analysis.kv_access.curves import hit_curve_table
    from kvtrace.analysis.kv_access.plan import StreamSpec
    from kvtrace.analysis.kv_access.whatif import check_shareable
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
        table = pa.concat_tables(
            hit_curve_table(con, specs, name, capacity or [], runs, window_tokens)
            for name in _policies(policy)
        )
    _emit_table(table, chosen, output)
