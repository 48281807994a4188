"""Turn the PATH arguments of ``kvtrace ingest`` into source files and their run metadata."""

from __future__ import annotations

import glob
import hashlib
import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kvtrace.errors import InputError

TRACE_SUFFIXES = (".jsonl", ".jsonl.gz", ".pt.trace.json", ".pt.trace.json.gz")
RUN_SUMMARY_SUFFIX = "_summary.json"  # a serving run's summary; a bare summary.json is a
# DSA tracer's sidecar and is read as run metadata instead
SIDECARS = ("run_meta.json", "summary.json")
_HASHERS = ThreadPoolExecutor(2, thread_name_prefix="kvtrace-sha256")


@dataclass
class SourceFile:
    """One trace file and what its directory says about the run that wrote it."""

    path: Path
    sidecar: dict = field(default_factory=dict)
    _digest: Future[str] | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def hash_in_background(self) -> Future[str]:
        """Start `sha256` on a thread of its own (hashing releases the GIL), once."""
        if self._digest is None:
            self._digest = _HASHERS.submit(self._hash)
        return self._digest

    def sha256(self) -> str:
        """The hex SHA-256 of the file's bytes (computed once)."""
        return self.hash_in_background().result()

    def __getstate__(self) -> dict:
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
        return folder.name or self.path.name.split(".")[0]


def _is_trace(path: Path) -> bool:
    return path.is_file() and path.name.endswith((*TRACE_SUFFIXES, RUN_SUMMARY_SUFFIX))


def expand(paths: list[str]) -> list[SourceFile]:
    """Files named by ``paths``: files, folders (searched recursively) or glob patterns."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            matches = sorted(p for p in path.rglob("*") if _is_trace(p))
            if not matches:
                raise InputError(f"no .jsonl, .jsonl.gz, .pt.trace.json(.gz) or *_summary.json "
                                 f"files under {text}")
        elif path.is_file():
            matches = [path]
        elif glob.has_magic(text):
            matches = sorted(Path(p) for p in glob.glob(text, recursive=True) if _is_trace(Path(p)))
            if not matches:
                raise InputError(f"the pattern {text!r} matches no .jsonl or .jsonl.gz file")
        else:
            raise InputError(f"{text} does not exist")
        found.extend(matches)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return [SourceFile(p, read_sidecar(p.parent)) for p in unique]


def read_sidecar(folder: Path) -> dict:
    """Merge ``run_meta.json`` and ``summary.json`` of the folder and of its parent.

    Nearer files win; unreadable sidecars are ignored (they only add labels).
    """
    merged: dict = {}
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
