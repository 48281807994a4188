"""The typer app every command registers on, the global options, the consoles and
the warehouse a command opens.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvtrace._version import __version__
from kvtrace.defaults import default_path

if TYPE_CHECKING:  # the heavy modules load inside the commands that need them
    from concurrent.futures import Executor

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


def _executor(engine: str, address: str | None) -> Executor | None:
    """Where the work of a command runs: here (None), or on a Ray cluster."""
    if engine != "ray":
        return None
    from kvtrace.distributed import ray_engine

    ray_engine.start(address)
    return ray_engine.RayExecutor()
