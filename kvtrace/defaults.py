"""Defaults and choices shared by the library and the command line.

This module imports nothing heavy, so the CLI can name its options and defaults without
loading DuckDB, Arrow or NumPy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

DEFAULT_PATH = "kvtrace-warehouse"
DEFAULT_BLOCK_SIZE = 64  # tokens, for DSA records that do not state theirs
DEFAULT_PREFIX_KEY_TOKENS = 256  # prompt tokens a prefix key covers (the seed tracer's default)

Kind = str  # a trace family's name: `kvtrace.ingest.families` holds them (and checks one)

OutputFormat = Literal["table", "csv", "json", "parquet"]
OUTPUT_FORMATS: tuple[str, ...] = ("table", "csv", "json", "parquet")


def default_path() -> str:
    """``$KVTRACE_WAREHOUSE`` when set (a folder or an object-store URI such as
    ``s3://bucket/prefix``), else ``./kvtrace-warehouse``."""
    return os.environ.get("KVTRACE_WAREHOUSE") or DEFAULT_PATH


def cache_folder() -> Path:
    """Where kvtrace keeps what it computes once per machine (built SQL libraries,
    warehouse snapshots): ``$KVTRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kvtrace``, else
    ``~/.cache/kvtrace``."""
    if folder := os.environ.get("KVTRACE_CACHE_DIR"):
        return Path(folder)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kvtrace"
