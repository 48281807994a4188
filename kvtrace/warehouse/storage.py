"""The one seam for warehouse I/O: paths inside the root, atomic publish, listing.

Everything that touches the warehouse's files goes through `LocalStorage`, so that an
object-store backend can later replace it without touching the rest of kvtrace.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvtrace.errors import WarehouseError

TMP_DIR = "_tmp"
LOCK_DIR = "_locks"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def partition_value(value: object) -> str:
    """Return a directory-safe form of a partition value.

    Only letters, digits, ``.``, ``_`` and ``-`` survive; anything else becomes ``_`` and a
    short hash of the original keeps distinct values apart.  The result never starts with a
    dot, so ``..`` or ``.hidden`` cannot escape or hide.

    >>> partition_value("ruler")
    'ruler'
    >>> partition_value("../../etc")
    '_._.._etc~7baf5cb6'
    """
    text = "" if value is None else str(value)
    safe = _UNSAFE.sub("_", text)[:80]
    if safe.startswith("."):
        safe = "_" + safe[1:]
    if safe == text and safe:
        return safe
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe or '_'}~{digest}"


class LocalStorage:
    """A warehouse on the local file system."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def path(self, relative: str) -> Path:
        """Absolute path of ``relative``, refusing anything that would leave the root."""
        target = (self.root / relative).resolve()
        if target != self.root and self.root not in target.parents:
            raise WarehouseError(f"path {relative!r} would leave the warehouse {self.root}")
        return target

    def new_temp(self, suffix: str) -> Path:
        """A fresh path in the warehouse's scratch folder (same file system: rename is atomic)."""
        tmp = self.root / TMP_DIR
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp / f"{os.getpid()}-{uuid.uuid4().hex}{suffix}"

    def publish(self, temp: Path, relative: str) -> Path:
        """Move a finished temporary file to ``relative`` in one atomic rename."""
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, target)
        return target

    def write_atomic(self, relative: str, data: bytes) -> Path:
        """Write ``data`` to ``relative`` so that readers see the old file or the whole new one."""
        temp = self.new_temp(Path(relative).suffix)
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return self.publish(temp, relative)

    def list_files(self, relative_dir: str, suffix: str) -> Iterator[Path]:
        """Files directly under ``relative_dir`` whose names end with ``suffix``, sorted."""
        folder = self.path(relative_dir)
        if not folder.is_dir():
            return iter(())
        return iter(sorted(p for p in folder.iterdir() if p.name.endswith(suffix)))

    def remove(self, relative: str) -> None:
        self.path(relative).unlink(missing_ok=True)

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the exclusive lock ``name`` (an advisory file lock) for the block; other
        processes asking for the same lock wait."""
        folder = self.root / LOCK_DIR
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{partition_value(name)}.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def stale_temps(self, older_than_s: float) -> list[Path]:
        """Scratch files left by writers that died more than ``older_than_s`` ago."""
        folder = self.root / TMP_DIR
        if not folder.is_dir():
            return []
        cutoff = time.time() - older_than_s
        return [p for p in folder.iterdir() if p.stat().st_mtime < cutoff]
