"""How much memory and disk a kvtrace DuckDB connection may take.

DuckDB's own defaults let one query use 80 % of the machine's memory and spill to a
``.tmp`` folder in the current directory until 90 % of that disk is full.  kvtrace's
connections take half the memory (of the machine, or of its control group when that is
smaller), spill into a folder of their own under the system's temporary folder (DuckDB
removes it when the connection closes), and spill at most twice their memory limit.
``kvtrace sql --memory-limit`` and ``kvtrace.connect(memory_limit=...)`` change the
limit; the spill bound follows it.
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb

from kvtrace.errors import InputError

DEFAULT_SHARE = 0.5  # of the memory the process may use
SPILL_PER_MEMORY = 2  # spill space, in memory limits
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_CONNECTIONS = itertools.count()


@dataclass(frozen=True)
class MemoryBound:
    """A connection's memory limit and where and how much it may spill, in bytes."""

    memory_limit: int
    spill_limit: int
    spill_folder: Path

    def apply(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(f"SET memory_limit = '{self.memory_limit}B'")
        con.execute("SET temp_directory = $folder", {"folder": str(self.spill_folder)})
        con.execute(f"SET max_temp_directory_size = '{self.spill_limit}B'")


def memory_bound(memory_limit: str | None = None) -> MemoryBound:
    """The bound for a new connection: ``memory_limit`` as DuckDB writes sizes ("8GB",
    "512MiB") or a share of the memory ("25%"); None is half of the memory."""
    available = usable_memory()
    if memory_limit is None:
        limit = int(available * DEFAULT_SHARE)
    elif percent := _PERCENT.match(memory_limit):
        limit = int(available * float(percent[1]) / 100)
    else:
        limit = parse_size(memory_limit)
    if limit <= 0:
        raise InputError(f"the memory limit must be above 0 bytes, got {memory_limit!r}")
    folder = Path(tempfile.gettempdir()) / f"kvtrace-spill-{os.getpid()}-{next(_CONNECTIONS)}"
    return MemoryBound(limit, SPILL_PER_MEMORY * limit, folder)


def parse_size(text: str) -> int:
    """Bytes in a size such as "8GB", "1.5 GiB" or "4000000"."""
    size = _SIZE.match(text)
    if size is None or size[2].upper() not in _UNITS:
        raise InputError(
            f"expected a size such as 8GB, 512MiB or 25% for the memory limit, got {text!r}"
        )
    return int(float(size[1]) * _UNITS[size[2].upper()])


def usable_memory() -> int:
    """The memory this process may use: the machine's, or its control group's limit
    (cgroup v2 or v1) where that is smaller."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in (
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def format_bytes(size: float) -> str:
    """A size as people read it: 5.5 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} TiB"
