"""``kvtrace demo`` and ``kvtrace samples``: the tour and the shipped sample traces."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from kvtrace.analysis import open_analysis_connection
from kvtrace.cli._app import _open, app, out
from kvtrace.cli.collect import _run_collect
from kvtrace.cli.report import ReportSpec, _write_report
from kvtrace.collectors.collect_options import DsaCollectOptions
from kvtrace.errors import KvtraceError


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
    _write_report(warehouse, ReportSpec("dsa", report, runs=(result.run_id,)))
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
