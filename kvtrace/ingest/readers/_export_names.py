"""The fixed names AIPerf and GenAI-Perf give their summary exports, and what to say about
a file of such a name that kvtrace cannot read.

Families recognise files by their content; a damaged export has none to recognise, so
its name is what says which tool wrote it.  A JSON export named so that is not an
intact export is damaged (cut short, garbled, emptied), and says so; the CSV exports
hold the same numbers as the JSON ones, which are what kvtrace reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvtrace.errors import InputError
from kvtrace.ingest._lines import read_content
from kvtrace.ingest.readers._bench_summaries import is_summary_export

# the export's file name (before .json or .csv) -> the tool that writes it
TOOLS = {"profile_export_aiperf": "AIPerf", "profile_export_genai_perf": "GenAI-Perf"}


def unreadable_export(path: Path, named: bool) -> InputError | None:
    """The error for a damaged JSON export, or (when the file was ``named`` on the
    command line; in a folder it is passed over) for a CSV export; None otherwise."""
    return damaged_export(path) or (csv_export(path) if named else None)


def _named_export(path: Path, suffix: str) -> str | None:
    """The tool whose ``suffix`` export ``path`` is named as (gzipped or not), or None."""
    stem = path.name.removesuffix(".gz").removesuffix(suffix)
    return TOOLS.get(stem) if path.name.removesuffix(".gz").endswith(suffix) else None


def _with_article(tool: str) -> str:
    return f"an {tool}" if tool[0] in "AEIOU" else f"a {tool}"


def damaged_export(path: Path) -> InputError | None:
    """The error for a file named like a tool's JSON export that is no intact export;
    None for an intact one, or a file of another name."""
    tool = _named_export(path, ".json")
    if tool is None:
        return None
    reason = _damage(path)
    if reason is None:
        return None
    return InputError(f"{path} looks like {_with_article(tool)} export but is damaged: {reason}")


def _damage(path: Path) -> str | None:
    """What is wrong with an export's content, None when it is an intact export."""
    try:
        document = json.loads(read_content(path))
    except InputError as exc:  # corrupt gzip data
        return str(exc).removeprefix(f"{path}: ")
    except RecursionError:
        return "nested too deeply to read"
    except json.JSONDecodeError as exc:
        return f"not valid JSON (cut short?): {exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError as exc:  # not UTF-8 text
        return f"not valid JSON: {exc}"
    if not isinstance(document, dict):
        return "holds no JSON object"
    if is_summary_export(document) is None:
        return (
            "holds none of the export's metrics (request_throughput with its avg, and "
            "time_to_first_token or request_latency)"
        )
    return None


def csv_export(path: Path) -> InputError | None:
    """The error for a file named like a tool's CSV export (kvtrace reads the JSON one),
    None for a file of another name."""
    tool = _named_export(path, ".csv")
    if tool is None:
        return None
    json_name = path.name.removesuffix(".gz").removesuffix(".csv") + ".json"
    return InputError(
        f"{path} is {tool}'s CSV export, which kvtrace does not read: ingest {json_name}, "
        "written beside it"
    )
