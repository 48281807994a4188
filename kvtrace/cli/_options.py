"""Typer option aliases that several commands share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Literal

import typer

from kvtrace.analysis.kv_access import Granularity, Scope, Sharing

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


def one_of(
    names: Callable[[], Sequence[str]], lookup: Callable[[str], object] | None = None
) -> Callable[[str | None], str | None]:
    """A typer callback that takes a name ``names`` gives (asked only once a value comes,
    so building a command imports no registry), or one ``lookup`` accepts (an installed
    family); anything else is a usage error listing the names."""

    def check(value: str | None) -> str | None:
        if value is None or value in names():
            return value
        if lookup is not None:
            from kvtrace.errors import KvtraceError

            try:
                lookup(value)
            except KvtraceError as error:
                raise typer.BadParameter(str(error)) from None
            return value
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(names())}.")

    return check
