"""The ``kvtrace`` command line: parse, call the library, print.

The library raises `KvtraceError`; `main` turns it into one sentence on stderr and exit
status 1 (``--debug`` shows the traceback instead).  Each command lives in the module of
its group (`COMMAND_MODULES`); a command line imports only the module of the command it
names.
"""

from __future__ import annotations

import copy
import importlib
import os
import signal
import sys
from contextlib import suppress
from typing import Any

import typer

from kvtrace.cli import _app
from kvtrace.cli._app import app
from kvtrace.errors import KvtraceError, Terminated

COMMAND_MODULES = {  # command or group -> its module; the order of kvtrace --help
    "ingest": "ingest",
    "sql": "query",
    "whatif": "analyze",
    "prefix-curve": "analyze",
    "hit-curve": "analyze",
    "views": "query",
    "summary": "query",
    "shell-init": "query",
    "optimize": "maintain",
    "vacuum": "maintain",
    "check": "maintain",
    "migrate": "maintain",
    "demo": "demo",
    "samples": "demo",
    "report": "report",
    "export": "export",
    "collect": "collect",
}


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
        if _app.options.debug:
            raise
        return _fail(f"Error: {exc}", 1)
    except Terminated:
        return _fail("Terminated; nothing was half-written.", 143)
    except KeyboardInterrupt:
        return _fail("Interrupted; nothing was half-written.", 130)
    except OSError as exc:
        if _app.options.debug:
            raise
        return _fail(
            f"Error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), 1
        )
    except Exception as exc:
        if _app.options.debug:
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
    """The app with only the command ``args`` name, when they name one: only that
    command's module is imported, and typer reads the signature of every command it
    builds (20 ms for all of them).  Help, a version or a name that is not a command get
    the whole app."""
    name = _command_name(args)
    if name not in COMMAND_MODULES:
        return whole_app()
    importlib.import_module(f"kvtrace.cli.{COMMAND_MODULES[name]}")
    commands = [info for info in app.registered_commands if _name_of(info) == name]
    groups = [info for info in app.registered_groups if info.name == name]
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return one


def whole_app() -> typer.Typer:
    """The app with every command, in the order ``kvtrace --help`` lists them."""
    for module in dict.fromkeys(COMMAND_MODULES.values()):
        importlib.import_module(f"kvtrace.cli.{module}")
    order = list(COMMAND_MODULES)
    whole = copy.copy(app)
    whole.registered_commands = sorted(
        app.registered_commands, key=lambda info: order.index(_name_of(info))
    )
    return whole


def _name_of(info: typer.models.CommandInfo) -> str:
    """The name a registered command is called by."""
    return info.name or typer.main.get_command_name(getattr(info.callback, "__name__", ""))


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
