"""Turn the PATH arguments of ``kvtrace ingest`` into source files and their run metadata.

A file name need not be UTF-8 text (Python keeps bytes that are not as lone
surrogates): kvtrace shows and records such a name with those bytes escaped
(`printable`: ``caf\\xe9.jsonl``), so that every name it stores is valid UTF-8.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtrace.errors import InputError

WAREHOUSE_MARKER = "kvtrace.json"  # a folder holding it is a warehouse, not traces
SIDECARS = ("run_meta.json", "summary.json")  # a DSA tracer's run metadata
SIDE_FILES = (*SIDECARS, "summary.csv")  # ... and RULER's scores beside its predictions
_HASHERS = ThreadPoolExecutor(2, thread_name_prefix="kvtrace-sha256")
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` as valid UTF-8: a byte that was not UTF-8 (a surrogate Python decoded it
    to) as ``\\xe9``, any other lone surrogate as ``\\ud800``."""
    return _SURROGATE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


@dataclass
class SourceFile:
    """One trace file and what its directory says about the run that wrote it."""

    path: Path
    sidecar: dict[str, Any] = field(default_factory=dict)
    named: bool = False  # given by its own name, not found in a folder or by a pattern
    _digest: Future[str] | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def shown(self) -> str:
        """The path as kvtrace shows and records it (`printable`)."""
        return printable(str(self.path))

    def hash_in_background(self) -> Future[str]:
        """Start `sha256` on a thread of its own (hashing releases the GIL), once."""
        if self._digest is None:
            self._digest = _HASHERS.submit(self._hash)
        return self._digest

    def sha256(self) -> str:
        """The hex SHA-256 of the file's bytes (computed once)."""
        return self.hash_in_background().result()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_digest": None}  # a future does not cross processes

    def _hash(self) -> str:
        digest = hashlib.sha256()
        with open(self.path, "rb") as handle:
            while block := handle.read(8 << 20):
                digest.update(block)
        return digest.hexdigest()

    def default_run_name(self) -> str:
        """The run's output folder: the parent, or the grandparent of a ``block<B>`` folder."""
        folder = self.path.parent
        if folder.name.startswith("block") and folder.name[5:].isdigit():
            folder = folder.parent
        return printable(folder.name or self.path.name.split(".")[0])


def _is_candidate(path: Path, top: Path | None = None) -> bool:
    """A path of a folder (``top``) or pattern that may hold a trace: not hidden (nor in a
    hidden folder below ``top``), not a sidecar."""
    parts = path.relative_to(top).parts if top is not None else (path.name,)
    hidden = any(part.startswith(".") for part in parts)
    return not hidden and path.name not in SIDE_FILES


@dataclass(frozen=True)
class Unreadable:
    """A file or folder that could not be read, and why (the system's words)."""

    path: str  # as shown (`printable`)
    reason: str


@dataclass
class Found:
    """What the PATH arguments name: the files to ingest, and what could not be read."""

    files: list[SourceFile]
    unreadable: list[Unreadable]


def _readable_file(path: Path, unreadable: list[Unreadable]) -> bool:
    """Whether ``path`` is a file that opens for reading; one that does not is added to
    ``unreadable``.  A folder, a pipe, a device or a file that is gone is no trace, and is
    left out silently."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with open(path, "rb"):
            return True
    except FileNotFoundError:
        return False
    except OSError as error:
        unreadable.append(Unreadable(printable(str(path)), _reason(error)))
        return False


def _reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _files_under(folder: Path, unreadable: list[Unreadable]) -> Iterator[Path]:
    """Every file below ``folder``, leaving out kvtrace warehouses inside it; a folder
    that cannot be listed is added to ``unreadable``."""

    def cannot_list(error: OSError) -> None:
        shown = printable(os.fsdecode(error.filename) if error.filename else str(folder))
        unreadable.append(Unreadable(shown, _reason(error)))

    for top, dirs, files in os.walk(folder, onerror=cannot_list):
        if WAREHOUSE_MARKER in files and Path(top) != folder:
            dirs.clear()
            continue
        dirs.sort()
        yield from (Path(top) / name for name in files)


def expand(paths: list[str]) -> Found:
    """Files named by ``paths``: files, folders (searched recursively) or glob patterns.

    A folder or a pattern gives every file in it but hidden ones and sidecars; which of
    them are traces is for the families to tell.  A file or folder that cannot be read is
    set aside in `Found.unreadable`, and the others are ingested.  A path that names
    nothing is an `InputError` naming every such path.
    """
    found: list[tuple[Path, bool]] = []
    unreadable: list[Unreadable] = []
    missing: list[str] = []
    for text in paths:
        path = Path(text)
        before = len(unreadable)
        if path.is_dir():
            matches = sorted(
                p
                for p in _files_under(path, unreadable)
                if _is_candidate(p, path) and _readable_file(p, unreadable)
            )
            if not matches and len(unreadable) == before:
                raise InputError(f"no files under {printable(text)}")
        elif path.is_file():
            if _readable_file(path, unreadable):
                found.append((path, True))
            continue
        elif glob.has_magic(text):
            matches = sorted(
                p
                for p in map(Path, glob.glob(text, recursive=True))
                if _is_candidate(p) and _readable_file(p, unreadable)
            )
            if not matches and len(unreadable) == before:
                raise InputError(f"the pattern {printable(text)!r} matches no file")
        else:
            missing.append(printable(text))
            continue
        found.extend((p, False) for p in matches)
    if missing:  # every one named, and nothing read
        verb = "does not exist" if len(missing) == 1 else "do not exist"
        raise InputError(f"{', '.join(missing)} {verb}")
    named: dict[Path, bool] = {}
    for path, given in found:
        named[path.resolve()] = named.get(path.resolve(), False) or given
    files = [SourceFile(path, read_sidecar(path.parent), given) for path, given in named.items()]
    return Found(files, unreadable)


def read_sidecar(folder: Path) -> dict[str, Any]:
    """Merge ``run_meta.json`` and ``summary.json`` of the folder and of its parent.

    Nearer files win; unreadable sidecars are ignored (they only add labels).
    """
    merged: dict[str, Any] = {}
    for directory in (folder.parent, folder):
        for name in reversed(SIDECARS):
            candidate = directory / name
            if not candidate.is_file():
                continue
            try:
                content = json.loads(candidate.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(content, dict):
                merged.update(content)
    return merged
